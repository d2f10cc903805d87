"""Diversity-cap checks that the mutation pass (scripts/mutate.py) found unpinned."""
from __future__ import annotations

import pytest

from qdrant_guard.diversity import enforce_diversity, floor_share, overfetch_limit


def _src(item):
    return item[1]


def test_floor_share_of_a_zero_fraction_is_zero():
    assert floor_share(10, 0.0) == 0
    assert floor_share(0, 0.5) == 0


@pytest.mark.parametrize("n,exc", [(-1, ValueError), (-10, ValueError), ("3", TypeError), (True, TypeError)])
def test_floor_share_refuses_a_bad_count(n, exc):
    with pytest.raises(exc, match="n must be"):
        floor_share(n, 0.5)


def test_overfetch_is_clamped_to_1000_by_default():
    assert overfetch_limit(500, factor=4.0) == 1000
    assert overfetch_limit(1001, factor=2.0) == 1001  # never below the request itself
    assert overfetch_limit(250, factor=4.0) == 1000
    assert overfetch_limit(251, factor=4.0) == 1000


def test_overfetch_max_limit_is_checked():
    assert overfetch_limit(5, factor=2.0, max_limit=1) == 5
    assert overfetch_limit(1, factor=3.0, max_limit=2) == 2
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_limit must be >= 1"):
            overfetch_limit(5, factor=2.0, max_limit=bad)
    with pytest.raises(TypeError, match="max_limit must be an int"):
        overfetch_limit(5, factor=2.0, max_limit=10.0)


def test_source_of_may_return_a_one_name_tuple():
    items = [(0, ("a",)), (1, ("a",)), (2, ("b",)), (3, ("a",))]
    out = enforce_diversity(items, k=2, source_of=_src, max_source_fraction=0.5)
    assert out.kept == [items[0], items[2]]
    assert out.per_source == {"a": 1, "b": 1}


def test_tuples_of_other_lengths_are_checked_and_deduplicated():
    # A repeated name counts once for its item; an empty tuple is the missing source.
    items = [(0, ("a", "a")), (1, ()), (2, ("a", "b"))]
    out = enforce_diversity(items, k=3, source_of=_src, max_source_fraction=1.0)
    assert out.per_source == {"a": 2, "__unknown__": 1, "b": 1}
    for bad in ((5,), ("a", 5), (None,)):
        with pytest.raises(TypeError, match="source_of"):
            enforce_diversity([(0, bad)], k=1, source_of=_src)


def test_missing_sources_are_swapped_in_best_first():
    # Two missing sources and room for one: the one whose best item ranks higher comes in (not
    # the one whose last item does, nor the first by name).
    items = [(0, "a"), (1, "a"), (2, "b"), (3, "z"), (4, "m"), (5, "z")]
    out = enforce_diversity(items, k=3, source_of=_src, max_source_fraction=0.7, min_unique_sources=3)
    assert [i for i, _ in out.kept] == [0, 2, 3]
    assert out.min_unique_met


def test_successive_swaps_count_each_swapped_in_source():
    # Three swaps; the second and third bring items that also name the first swapped-in source,
    # which then reaches the cap (2): the third swap must replace that source's own item.
    items = [(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c"), (5, "c"),
             (6, "z"), (7, ("m", "z")), (8, ("q", "z"))]
    out = enforce_diversity(items, k=6, source_of=_src, max_source_fraction=0.34, min_unique_sources=6)
    assert [i for i, _ in out.kept] == [0, 1, 2, 4, 7, 8]
    assert max(out.per_source.values()) <= 2, out.per_source


def test_a_swapped_in_item_keeps_its_rank_order():
    # The swapped-in item (rank 2) ranks above kept items: the result is still in rank order.
    items = [(0, "a"), (1, "a"), (2, ("c", "a")), (3, "b"), (4, "b")]
    out = enforce_diversity(items, k=4, source_of=_src, max_source_fraction=0.5, min_unique_sources=3)
    assert [i for i, _ in out.kept] == [0, 2, 3, 4]
    assert [i for i, _ in out.withheld] == [1]


def test_group_caps_want_two_sources_by_default():
    from qdrant_guard.diversity import enforce_group_caps
    hits = [(0, "a"), (1, "a"), (2, "b"), (3, "b")]
    out = enforce_group_caps([hits], group_size=4, source_of=_src, max_source_fraction=0.5)
    assert out.groups[0].min_unique_met
    assert not enforce_group_caps([hits], group_size=4, source_of=_src, max_source_fraction=0.5,
                                  min_unique_sources=3).groups[0].min_unique_met


def test_group_caps_swap_in_a_second_source_by_default():
    from qdrant_guard.diversity import enforce_group_caps
    hits = [(0, "a"), (1, "a"), (2, "b")]
    out = enforce_group_caps([hits], group_size=2, source_of=_src, max_source_fraction=1.0)
    assert [i for i, _ in out.groups[0].kept] == [0, 2]


def test_group_caps_check_their_arguments():
    from qdrant_guard.diversity import enforce_group_caps
    with pytest.raises(ValueError, match="min_unique_sources must be >= 0"):
        enforce_group_caps([[(0, "a")]], group_size=1, source_of=_src, min_unique_sources=-1)
    with pytest.raises(TypeError, match="missing_source must be a str"):
        enforce_group_caps([[(0, None)]], group_size=1, source_of=_src, missing_source=None)


@pytest.mark.parametrize("ngroups", [0, 1])
def test_response_cap_of_one_group_or_none_is_the_group_cap(ngroups):
    from qdrant_guard.diversity import enforce_group_caps
    groups = [[(i, "a") for i in range(5)]] * ngroups
    out = enforce_group_caps(groups, group_size=5, source_of=_src, max_source_fraction=0.4)
    assert (out.group_cap, out.response_cap) == (2, 2)
