"""Which extraction budgets a read draws on: the per-source budget, the PROPRIETARY vector
(distillation) budget, and the id each named vector is charged under in the latter.
"""
from __future__ import annotations

import uuid
from typing import Any

from .budget import normalize_point_id
from .policy import CollectionPolicy
from .readplan import ReadPlan, asks_vectors


def _source_budgeted(pol: CollectionPolicy) -> bool:
    """Whether reads of ``pol``'s collection draw on the per-source extraction budget."""
    return pol.diversity.enabled and pol.diversity.max_source_coverage is not None


def _vector_budgeted(pol: CollectionPolicy, plan: ReadPlan) -> bool:
    """Whether a read under ``plan`` draws on the PROPRIETARY vector (distillation) budget."""
    return _vector_budgeted_policy(pol) and asks_vectors(plan.user_with_vectors)


def _vector_budgeted_policy(pol: CollectionPolicy) -> bool:
    """Whether vectors read from ``pol``'s collection draw on the PROPRIETARY vector budget."""
    div = pol.diversity
    return div.enabled and pol.sensitivity.value == "PROPRIETARY" and div.max_vectors is not None


_NAMED_VECTOR_NS = uuid.UUID("5b0d3c1e-6a52-4f0e-9a57-7d1c2b4e8f10")


def _named_vector_id(point_id: Any, vector_name: str) -> str:
    """The id a point's named vector is charged under in the vector budget: a UUID of the point
    and the name, so each named vector counts apart and the same one counts once."""
    return str(uuid.uuid5(_NAMED_VECTOR_NS, f"{normalize_point_id(point_id)}\x00{vector_name}"))

