"""Mutation pass over the extraction budget's admit/decide code (qdrant_guard/budget.py).

Each test kills mutants that tests/test_budget.py and tests/test_budget_all_or_none.py let
through: the memory store's timestamp order after a re-read, its cached listings after an
expiry or an all-or-none admission, and cap_for's argument check. Times are injected values of
``now``, never the wall clock.
"""
from __future__ import annotations

import pytest

from qdrant_guard.budget import ExtractionBudget, MemoryBudgetStore

W = 100.0  # window_s


def test_a_reread_moves_the_id_to_the_end_so_older_ids_still_expire():
    store = MemoryBudgetStore()
    store.admit("k", ["i:1"], cap=2, window_s=W, now=0.0)
    store.admit("k", ["i:2"], cap=2, window_s=W, now=1.0)
    store.admit("k", ["i:1"], cap=2, window_s=W, now=50.0)  # re-read: refreshed to t=50
    # At t=120 the window starts at 20: i:2 (t=1) has left it, i:1 (t=50) has not.
    assert store.seen("k", window_s=W, now=120.0) == 1
    admitted, withheld = store.admit("k", ["i:3"], cap=2, window_s=W, now=120.0)
    assert admitted == ["i:3"] and withheld == []
    assert store.entries_by_prefix("k", window_s=W, now=120.0) == {"k": frozenset({"i:1", "i:3"})}


def test_a_listing_after_expiry_does_not_return_the_expired_ids():
    # A listing caches the key's span; an expiry must drop it, even if the clock then steps back.
    store = MemoryBudgetStore()
    store.admit("k", ["i:1"], cap=5, window_s=W, now=0.0)
    store.admit("k", ["i:2"], cap=5, window_s=W, now=50.0)
    assert store.entries_by_prefix("k", window_s=W, now=60.0) == {"k": frozenset({"i:1", "i:2"})}
    assert store.seen("k", window_s=W, now=120.0) == 1  # i:1 forgotten
    listed = store.entries_by_prefix("k", window_s=W, now=60.0)
    assert listed == {"k": frozenset({"i:2"})}
    # What the listing says is what an admission charges: i:1 is new again.
    assert store.admit_counted("k", ["i:1"], cap=5, window_s=W, now=60.0)[2:] == (1, 2)


def test_a_listing_after_admit_points_shows_the_points_it_added():
    store = MemoryBudgetStore()
    keys = [("src|p|c|a", 5), ("src|p|c|b", 5)]
    store.admit_points(keys, [("i:1", [0]), ("i:2", [0, 1])], window_s=W, now=0.0)
    first = store.entries_by_prefix("src|p|c|", window_s=W, now=1.0)
    assert first == {"src|p|c|a": frozenset({"i:1", "i:2"}), "src|p|c|b": frozenset({"i:2"})}
    released, counts = store.admit_points(keys, [("i:3", [0]), ("i:2", [1]), ("i:4", [1])], window_s=W, now=2.0)
    assert released == [True, True, True] and counts == [(2, 3), (1, 2)]
    assert store.entries_by_prefix("src|p|c|", window_s=W, now=3.0) == {
        "src|p|c|a": frozenset({"i:1", "i:2", "i:3"}), "src|p|c|b": frozenset({"i:2", "i:4"}),
    }


@pytest.mark.parametrize("size, exc", [(10.0, TypeError), (2.5, TypeError), ("10", TypeError), (True, TypeError),
                                       (-1, ValueError)])
def test_cap_for_refuses_a_source_size_that_is_not_a_count(size, exc):
    budget = ExtractionBudget(MemoryBudgetStore(), window_s=W, clock=lambda: 0.0)
    with pytest.raises(exc, match="source_size"):
        budget.cap_for(size, 0.5)
    assert budget.cap_for(0, 0.5) == 0 and budget.cap_for(10, 0.5) == 5


@pytest.mark.parametrize("coverage, exc", [(2, ValueError), (-1, ValueError), (True, TypeError), ("0.5", TypeError),
                                           (1.5, ValueError), (float("nan"), ValueError)])
def test_cap_for_refuses_a_coverage_outside_the_unit_interval_whatever_its_type(coverage, exc):
    # An int coverage of 2 would otherwise give a cap of twice the source.
    budget = ExtractionBudget(MemoryBudgetStore(), window_s=W, clock=lambda: 0.0)
    with pytest.raises(exc, match="max_source_coverage"):
        budget.cap_for(10, coverage)
    assert budget.cap_for(10, 1) == 10 and budget.cap_for(10, 0) == 0


@pytest.mark.parametrize("size, exc", [(10.0, TypeError), (True, TypeError), (-1, ValueError)])
def test_admit_many_refuses_a_source_size_that_is_not_a_count_and_charges_nothing(size, exc):
    store = MemoryBudgetStore()
    budget = ExtractionBudget(store, window_s=W, clock=lambda: 0.0)
    with pytest.raises(exc, match="source_size"):
        budget.admit_many(principal="p", collection="c", requests={"a": ([1], 4), "b": ([2], size)},
                          max_source_coverage=0.5)
    assert store.entries_by_prefix("", window_s=W, now=0.0) == {}
