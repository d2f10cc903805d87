"""Tenth review: the read round's budget shortcuts and the payload screen's remembered clean pairs,
attacked against real stores and real local-mode Qdrant (no mocks)."""
from __future__ import annotations

import uuid

import pytest

from qdrant_guard.budget import ExtractionBudget, MemoryBudgetStore, RedisBudgetStore, SqliteBudgetStore


# -- the budget: admit_many's call of a built-in store's _admit_points ---------------------------

@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_spec(request, tmp_path):
    if request.param == "memory":
        return "memory"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'budget.db'}"
    return request.getfixturevalue("redis_url")


def _store(spec, tmp_path):
    if spec == "memory":
        return MemoryBudgetStore()
    if spec.startswith("sqlite"):
        return SqliteBudgetStore(tmp_path / f"budget-{uuid.uuid4().hex}.db")
    return RedisBudgetStore(spec, prefix=f"qg:r10:{uuid.uuid4().hex}:")  # one key space per test


def test_an_admit_points_set_on_the_store_instance_is_the_one_admit_many_uses(store_spec, tmp_path):
    # admit_many called a built-in store's _admit_points directly whenever its class's admit_points
    # was the built-in one, so an admit_points set on the instance (a wrapper: a freeze, a quota, a
    # metric) was skipped and the store's own admission released the points the wrapper withheld.
    store = _store(store_spec, tmp_path)
    calls = []

    def frozen(keys, points, *, window_s, now):
        calls.append(len(points))
        return type(store).admit_points(store, [(key, 0) for key, _ in keys], points, window_s=window_s, now=now)

    store.admit_points = frozen
    budget = ExtractionBudget(store, window_s=3600.0)
    decisions = budget.admit_many(principal="mallory", collection="docs", max_source_coverage=0.5,
                                  requests={"memo": ([1, 2, 3], 20), "wiki": ([4], 10)})
    assert calls == [4]
    assert all(d.admitted == [] for d in decisions.values())
    assert decisions["memo"].withheld == [1, 2, 3] and decisions["wiki"].withheld == [4]


def test_an_admit_points_of_another_store_charges_that_store(tmp_path):
    # The instance's admit_points bound to another store: the charges go where it says, as the
    # checked path sends them (the shortcut charged the store it was set on).
    store, other = MemoryBudgetStore(), MemoryBudgetStore()
    store.admit_points = other.admit_points
    budget = ExtractionBudget(store, window_s=3600.0)
    budget.admit_many(principal="mallory", collection="docs", max_source_coverage=0.5,
                      requests={"memo": ([1, 2], 20)})
    key = ExtractionBudget.budget_key("mallory", "docs", "memo")
    assert other.seen(key, window_s=3600.0, now=budget.clock()) == 2
    assert store.seen(key, window_s=3600.0, now=budget.clock()) == 0


def test_the_built_in_path_still_admits_as_the_checked_path(store_spec, tmp_path):
    # The shortcut kept for the plain built-in store: same decisions as admit_points called itself.
    store = _store(store_spec, tmp_path)
    budget = ExtractionBudget(store, window_s=3600.0)
    decisions = budget.admit_many(principal="p", collection="docs", max_source_coverage=0.25,
                                  requests={"memo": ([1, 2, 3], 8), "wiki": ([3, 4], 40)})
    # memo's cap is 2: point 3 (also wiki's) is withheld by memo and charged to neither.
    assert decisions["memo"].admitted == [1, 2] and decisions["memo"].withheld == [3]
    assert decisions["wiki"].admitted == [4] and decisions["wiki"].withheld == [3]
    assert decisions["wiki"].seen_after == 1
