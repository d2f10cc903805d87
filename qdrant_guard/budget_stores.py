"""The extraction budget's stores, their public names in one place: the :class:`BudgetStore`
protocol, the in-process and SQLite stores and point-id normalisation. Each store applies one
admission atomically (a lock, or one ``BEGIN IMMEDIATE`` transaction).

The code lives elsewhere: the protocol, the shared argument checks, normalisation and the counting
base in :mod:`qdrant_guard.budget_store_base`, the in-process store in
:mod:`qdrant_guard.budget_memory`, the SQLite store in :mod:`qdrant_guard.budget_sqlite` and the
Redis store in :mod:`qdrant_guard.budget_redis`. :mod:`qdrant_guard.budget` re-exports the public
names.
"""
from __future__ import annotations

from .budget_memory import MemoryBudgetStore as MemoryBudgetStore
from .budget_sqlite import SqliteBudgetStore as SqliteBudgetStore
from .budget_store_base import (
    BudgetStore as BudgetStore,
    BudgetStoreError as BudgetStoreError,
    denormalize_point_id as denormalize_point_id,
    normalize_point_id as normalize_point_id,
)
