"""Mutation pass over qdrant_guard/diversity.py: decisions no other test pinned down.

Each test kills mutants that survived tests/test_diversity.py: the argument checks of the share
and over-fetch helpers at their exact boundaries, and source_of returning a tuple (the fast path
for one source, which must decide exactly as the general path does).
"""
from __future__ import annotations

import pytest

from qdrant_guard.diversity import enforce_diversity, enforce_group_caps, floor_share, overfetch_limit


def _src(item):
    return item[1]


def _items(sources):
    return [(rank, name) for rank, name in enumerate(sources)]


# --- floor_share / overfetch_limit -----------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 7, 10**30])
@pytest.mark.parametrize("zero", [0.0, 0, -0.0])
def test_floor_share_of_a_zero_fraction_is_zero_not_an_error(n, zero):
    # [0, 1] is closed at 0 (a coverage of 0 withholds a source entirely), unlike source_cap's (0, 1].
    assert floor_share(n, zero) == 0


@pytest.mark.parametrize("n, exc", [(-1, ValueError), (-10, ValueError), (2.0, TypeError), (True, TypeError),
                                    ("3", TypeError)])
def test_floor_share_refuses_a_negative_or_non_int_count(n, exc):
    with pytest.raises(exc, match="n must be"):
        floor_share(n, 0.5)


@pytest.mark.parametrize("fraction", [-0.1, 1.0000001, float("nan"), float("inf")])
def test_floor_share_refuses_a_fraction_outside_the_closed_unit_interval(fraction):
    with pytest.raises(ValueError, match=r"fraction must be in \[0, 1\]"):
        floor_share(10, fraction)


def test_overfetch_limit_clamps_to_1000_by_default():
    assert overfetch_limit(10, factor=200.0) == 1000
    assert overfetch_limit(999, factor=1.01) == 1000
    assert overfetch_limit(1001, factor=2.0) == 1001  # never below the request itself


def test_overfetch_limit_max_limit_boundaries():
    # max_limit >= 1: 1 is accepted (the request passes through unclamped), 0 and below refused.
    assert overfetch_limit(5, factor=2.0, max_limit=1) == 5
    assert overfetch_limit(1, factor=3.0, max_limit=2) == 2
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_limit must be >= 1"):
            overfetch_limit(5, factor=2.0, max_limit=bad)
    for bad in (10.0, None, True):
        with pytest.raises(TypeError, match="max_limit must be an int"):
            overfetch_limit(5, factor=2.0, max_limit=bad)


# --- source_of returning tuples --------------------------------------------------------------


def test_a_one_name_tuple_is_that_source():
    names = ["a", ("a",), "a", ("b",), ("a",), "c"]
    out = enforce_diversity(_items(names), k=5, source_of=_src, max_source_fraction=0.4, min_unique_sources=0)
    # cap 2: the first two of a (one given as a str, one as a 1-tuple), then b, then c.
    assert [i[0] for i in out.kept] == [0, 1, 3, 5]
    assert out.per_source == {"a": 2, "b": 1, "c": 1}


@pytest.mark.parametrize("bad", [(5,), (None,), (b"a",), ("a", 5)])
def test_a_tuple_holding_a_non_str_is_refused(bad):
    with pytest.raises(TypeError, match="source_of"):
        enforce_diversity(_items(["a", bad]), k=2, source_of=_src)


def test_an_empty_tuple_is_the_missing_source_and_duplicates_count_once():
    out = enforce_diversity(_items([(), ("a", "a"), (), None]), k=4, source_of=_src, max_source_fraction=1.0,
                            missing_source="none")
    assert out.per_source == {"none": 3, "a": 1}


def test_group_caps_read_one_name_tuples_as_their_source():
    groups = [_items([("m",), ("m",), "x"]), _items([("m",), "y", ("m",)])]
    out = enforce_group_caps(groups, group_size=2, source_of=_src, max_source_fraction=0.5, min_unique_sources=0)
    assert out.group_cap == 1 and out.response_cap == 2
    assert out.per_source == {"m": 2, "x": 1, "y": 1}


# --- min_unique_sources swaps ----------------------------------------------------------------


def test_missing_sources_are_swapped_in_best_ranked_first_not_by_name():
    # cap 3 (k=3, fraction 1.0): the three a's are kept; one swap meets min_unique 2. The missing
    # source with the best-ranked item is z (rank 3), not b (rank 4, alphabetically first) and not
    # the source whose last item ranks best (b's 4 before z's 5).
    out = enforce_diversity(_items(["a", "a", "a", "z", "b", "z"]), k=3, source_of=_src,
                            max_source_fraction=1.0, min_unique_sources=2)
    assert [i[0] for i in out.kept] == [0, 1, 3]
    assert out.per_source == {"a": 2, "z": 1} and out.min_unique_met


def test_a_second_swap_sees_the_count_the_first_swap_freed():
    # cap 2 (k=4, fraction 0.5), min_unique 4: a,a,b,b are kept; c takes the lowest-ranked b's slot,
    # leaving b with one item, so d must take the second a's slot, not the last b's (which would
    # drop b and leave three sources while claiming four).
    out = enforce_diversity(_items(["a", "a", "b", "b", "c", "d"]), k=4, source_of=_src,
                            max_source_fraction=0.5, min_unique_sources=4)
    assert [i[0] for i in out.kept] == [0, 2, 4, 5]
    assert out.per_source == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert out.unique_sources == 4 and out.min_unique_met


def test_three_swaps_of_items_that_share_a_full_source_keep_its_cap():
    # cap 2 (k=6, fraction 0.34), min_unique 6. Greedy keeps a,a,b,b,c,c. The swap of d's item
    # ("d","a") must free an a (victim rank 1); e's ("e","a") then finds a full again and frees the
    # other a (rank 0), not a c: freeing c would put three a's in the result. f takes a c's slot.
    names = ["a", "a", "b", "b", "c", "c", ("d", "a"), ("e", "a"), "f"]
    out = enforce_diversity(_items(names), k=6, source_of=_src, max_source_fraction=0.34, min_unique_sources=6)
    assert [i[0] for i in out.kept] == [2, 3, 4, 6, 7, 8]
    assert out.per_source == {"a": 2, "b": 2, "c": 1, "d": 1, "e": 1, "f": 1}
    assert out.min_unique_met


def test_a_swapped_in_item_takes_its_rank_place_in_the_result():
    # cap 2 (k=3, fraction 0.67): ("b", "a") at rank 2 is passed over (a is full) for c at rank 3;
    # min_unique 3 then swaps it in for the a at rank 1. Results stay in rank order.
    out = enforce_diversity(_items(["a", "a", ("b", "a"), "c"]), k=3, source_of=_src,
                            max_source_fraction=0.67, min_unique_sources=3)
    assert [i[0] for i in out.kept] == [0, 2, 3]
    assert [i[0] for i in out.withheld] == [1]


# --- enforce_group_caps ----------------------------------------------------------------------


def test_group_caps_ask_for_two_sources_per_group_by_default():
    # cap 3 (group_size 3, fraction 1.0): the three a's fill the group; the default
    # min_unique_sources=2 swaps in b only (3 would also bring in c, 1 would keep a,a,a).
    out = enforce_group_caps([_items(["a", "a", "a", "b", "c"])], group_size=3, source_of=_src,
                             max_source_fraction=1.0)
    assert [i[0] for i in out.groups[0].kept] == [0, 1, 3]
    assert out.groups[0].min_unique_met


@pytest.mark.parametrize("kw, exc", [(dict(min_unique_sources=-1), ValueError), (dict(min_unique_sources=1.0), TypeError),
                                     (dict(missing_source=None), TypeError)])
def test_group_caps_check_min_unique_and_missing_source(kw, exc):
    with pytest.raises(exc, match="min_unique_sources|missing_source"):
        enforce_group_caps([_items(["a"])], group_size=2, source_of=_src, **kw)


@pytest.mark.parametrize("ngroups, response_cap", [(0, 2), (1, 2), (2, 4), (3, 6)])
def test_group_caps_response_cap_counts_the_groups_returned(ngroups, response_cap):
    # source_cap(max(1, len(groups)) * group_size, fraction): 0.4 of 5 hits per group.
    groups = [_items(["a"] * 5) for _ in range(ngroups)]
    out = enforce_group_caps(groups, group_size=5, source_of=_src, max_source_fraction=0.4)
    assert out.group_cap == 2 and out.response_cap == response_cap


def test_a_source_brought_in_by_a_swap_counts_its_item_for_later_swaps():
    # cap 2 (k=6, fraction 0.34), min_unique 6; greedy keeps a,a,b,b,c,c. d comes in for a c,
    # ("e","d") for a b, which puts d at its cap of 2; ("f","d") must then free a d (rank 6), not an
    # a: a result with three d items would break the cap.
    names = ["a", "a", "b", "b", "c", "c", "d", ("e", "d"), ("f", "d")]
    out = enforce_diversity(_items(names), k=6, source_of=_src, max_source_fraction=0.34, min_unique_sources=6)
    assert [i[0] for i in out.kept] == [0, 1, 2, 4, 7, 8]
    assert out.per_source == {"a": 2, "b": 1, "c": 1, "d": 2, "e": 1, "f": 1}
    assert out.min_unique_met
