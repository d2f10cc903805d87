"""Budget-store logic that the mutation pass (scripts/mutate.py) found unpinned."""
from __future__ import annotations

from qdrant_guard.budget import MemoryBudgetStore
from qdrant_guard.budget_store_base import _in_window

KEY = "agent|docs|src-a"


def test_in_window_keeps_entries_at_the_cutoff():
    pairs = [("a", 0.0), ("b", 5.0), ("c", 10.0)]
    assert _in_window(pairs, 10.0, 10.0) == frozenset({"a", "b", "c"})
    assert _in_window(pairs, 9.0, 10.0) == frozenset({"b", "c"})
    # The window ends at the newest entry when now lies before it.
    assert _in_window(pairs, 5.0, 0.0) == frozenset({"b", "c"})
    assert _in_window([], 10.0, 10.0) == frozenset()


def test_a_readmitted_id_moves_to_the_back_so_older_ids_still_expire():
    store = MemoryBudgetStore()
    assert store.admit(KEY, ["a"], cap=2, window_s=10.0, now=0.0) == (["a"], [])
    assert store.admit(KEY, ["b"], cap=2, window_s=10.0, now=5.0) == (["b"], [])
    assert store.admit(KEY, ["a"], cap=2, window_s=10.0, now=8.0) == (["a"], [])
    # At 16, b (5) has left the window and a (8) has not: one slot is free.
    assert store.admit(KEY, ["c"], cap=2, window_s=10.0, now=16.0) == (["c"], [])
    assert store.entries_by_prefix("agent|", window_s=10.0, now=16.0) == {KEY: frozenset({"a", "c"})}


def test_a_listing_after_an_expiry_does_not_return_the_expired_ids():
    store = MemoryBudgetStore()
    store.admit(KEY, ["a"], cap=5, window_s=10.0, now=0.0)
    store.admit(KEY, ["b"], cap=5, window_s=10.0, now=5.0)
    assert store.entries_by_prefix("agent|", window_s=10.0, now=5.0) == {KEY: frozenset({"a", "b"})}
    assert store.seen(KEY, window_s=10.0, now=12.0) == 1  # expires a
    # Also when the listing's clock is behind the expiry's.
    assert store.entries_by_prefix("agent|", window_s=10.0, now=5.0) == {KEY: frozenset({"b"})}
    assert store.entries_by_prefix("agent|", window_s=10.0, now=12.0) == {KEY: frozenset({"b"})}


def test_a_listing_after_an_admission_includes_the_new_id():
    store = MemoryBudgetStore()
    store.admit(KEY, ["a"], cap=5, window_s=10.0, now=0.0)
    assert store.entries_by_prefix("agent|", window_s=10.0, now=0.0) == {KEY: frozenset({"a"})}
    store.admit(KEY, ["b"], cap=5, window_s=10.0, now=1.0)
    assert store.entries_by_prefix("agent|", window_s=10.0, now=1.0) == {KEY: frozenset({"a", "b"})}


def test_a_point_of_two_sources_needs_room_under_both():
    k1, k2 = "agent|docs|s1", "agent|docs|s2"
    store = MemoryBudgetStore()
    store.admit(k2, ["x"], cap=1, window_s=10.0, now=0.0)  # s2 is full
    for order in ([0, 1], [1, 0]):
        released, counts = store.admit_points([(k1, 1), (k2, 1)], [("p", order)], window_s=10.0, now=1.0)
        assert released == [False] and counts == [(0, 0), (1, 1)], order
    # A point of one source is judged by that source alone.
    released, _ = store.admit_points([(k1, 1), (k2, 1)], [("q", [0])], window_s=10.0, now=1.0)
    assert released == [True]


def test_a_point_of_two_sources_held_under_both_is_a_free_reread_at_full_caps():
    k1, k2 = "agent|docs|s1", "agent|docs|s2"
    store = MemoryBudgetStore()
    keys = [(k1, 1), (k2, 1)]
    assert store.admit_points(keys, [("p", [0, 1])], window_s=10.0, now=0.0) == ([True], [(0, 1), (0, 1)])
    assert store.admit_points(keys, [("p", [0, 1])], window_s=10.0, now=1.0) == ([True], [(1, 1), (1, 1)])
    assert store.admit_points(keys, [("r", [0, 1])], window_s=10.0, now=1.0)[0] == [False]


def test_admit_points_moves_a_refreshed_id_back_and_drops_the_stale_listing():
    store = MemoryBudgetStore()
    keys = [(KEY, 2)]
    for pid, now in (("a", 0.0), ("b", 5.0), ("a", 8.0)):
        assert store.admit_points(keys, [(pid, [0])], window_s=10.0, now=now)[0] == [True]
    assert store.entries_by_prefix("agent|", window_s=10.0, now=8.0) == {KEY: frozenset({"a", "b"})}
    # At 16, b (5) has left the window and a (8) has not: one slot is free, and the listing
    # shows the new id.
    assert store.admit_points(keys, [("c", [0])], window_s=10.0, now=16.0) == ([True], [(1, 2)])
    assert store.entries_by_prefix("agent|", window_s=10.0, now=16.0) == {KEY: frozenset({"a", "c"})}


def test_admit_points_drops_the_stale_listing_when_it_adds_an_id():
    store = MemoryBudgetStore()
    keys = [(KEY, 3)]
    store.admit_points(keys, [("a", [0])], window_s=10.0, now=0.0)
    assert store.entries_by_prefix("agent|", window_s=10.0, now=0.0) == {KEY: frozenset({"a"})}
    assert store.admit_points(keys, [("b", [0])], window_s=10.0, now=1.0) == ([True], [(1, 2)])
    assert store.entries_by_prefix("agent|", window_s=10.0, now=1.0) == {KEY: frozenset({"a", "b"})}
