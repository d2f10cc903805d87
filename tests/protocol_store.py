"""A third-party budget store: only the BudgetStore protocol (admit, seen, reset), nothing the
built-in stores add (counted, all-or-none or listing admissions)."""
from __future__ import annotations

from qdrant_guard.budget import MemoryBudgetStore


class ProtocolOnlyStore:
    """Delegates the three protocol methods to a memory store, and offers nothing else."""

    def __init__(self) -> None:
        self.inner = MemoryBudgetStore()

    def admit(self, key, point_ids, *, cap, window_s, now):  # type: ignore[no-untyped-def]
        return self.inner.admit(key, point_ids, cap=cap, window_s=window_s, now=now)

    def seen(self, key, *, window_s, now):  # type: ignore[no-untyped-def]
        return self.inner.seen(key, window_s=window_s, now=now)

    def reset(self, key=None):  # type: ignore[no-untyped-def]
        self.inner.reset(key)
