"""The extraction budget's stores: the :class:`BudgetStore` protocol, the argument checks and point-id
normalisation they share, and the in-process and SQLite stores. Each applies one admission
atomically (a lock, or one ``BEGIN IMMEDIATE`` transaction); the Redis store is in
:mod:`qdrant_guard.budget_redis`. :mod:`qdrant_guard.budget` re-exports the public names.

This module names the stores' public names in one place. The protocol, the shared checks,
normalisation and counting base are in :mod:`qdrant_guard.budget_store_base`, the in-process store
in :mod:`qdrant_guard.budget_memory` and the SQLite store in :mod:`qdrant_guard.budget_sqlite`.
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
