"""Per-source diversity caps: hard cap (never backfilled), min-unique swaps, group caps."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qdrant_client import QdrantClient, models

from qdrant_guard.diversity import (
    DiversityOutcome,
    enforce_diversity,
    enforce_group_caps,
    floor_share,
    overfetch_limit,
    source_cap,
)


def _src(item):
    return item[1]


def _items(sources):
    """Items are (rank, source) so identity and order are visible in assertions."""
    return [(rank, name) for rank, name in enumerate(sources)]


def _greedy_reference(items, k, cap):
    """Obviously-correct cap-only selection, used as the oracle when no swap is needed."""
    counts, kept = {}, []
    for item in items:
        name = item[1] if item[1] is not None else "__unknown__"
        if len(kept) < k and counts.get(name, 0) < cap:
            kept.append(item)
            counts[name] = counts.get(name, 0) + 1
    return kept


# --- caps and limits -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "k, fraction, expected",
    [(10, 0.4, 4), (2, 0.4, 1), (1, 0.1, 1), (5, 1.0, 5), (100, 0.57, 57), (3, 0.5, 1), (7, 0.3, 2)],
)
def test_source_cap_is_floor_with_minimum_one(k, fraction, expected):
    assert source_cap(k, fraction) == expected


def test_floor_share_reads_the_decimal_the_caller_wrote():
    # 100 * 0.57 == 56.99999999999999 in binary floating point.
    assert math.floor(100 * 0.57) == 56
    assert floor_share(100, 0.57) == 57
    assert floor_share(20, 0.25) == 5
    assert floor_share(3, 0.25) == 0
    assert floor_share(0, 1.0) == 0


@pytest.mark.parametrize(
    "args, exc, message",
    [
        ((0, 0.4), ValueError, "k must be >= 1, got 0"),
        ((True, 0.4), TypeError, "k must be an int, not bool"),
        ((10.0, 0.4), TypeError, "k must be an int, not float"),
        ((10, 0.0), ValueError, "max_source_fraction must be in (0, 1], got 0.0"),
        ((10, 1.5), ValueError, "max_source_fraction must be in (0, 1], got 1.5"),
        ((10, float("nan")), ValueError, "max_source_fraction must be in (0, 1], got nan"),
        ((10, None), TypeError, "max_source_fraction must be a float, not NoneType"),
        ((10, "0.4"), TypeError, "max_source_fraction must be a float, not str"),
    ],
)
def test_source_cap_rejects_bad_arguments(args, exc, message):
    with pytest.raises(exc) as info:
        source_cap(*args)
    assert str(info.value) == message


def test_overfetch_limit():
    assert overfetch_limit(10, factor=3.0) == 30
    assert overfetch_limit(10, factor=1.05) == 11
    assert overfetch_limit(10, factor=1.0) == 10
    assert overfetch_limit(500, factor=4, max_limit=1000) == 1000
    # Never shrinks the request itself.
    assert overfetch_limit(2000, factor=2.0, max_limit=1000) == 2000
    with pytest.raises(ValueError, match=r"factor must be a finite number >= 1, got 0.5"):
        overfetch_limit(10, factor=0.5)
    with pytest.raises(ValueError, match="factor"):
        overfetch_limit(10, factor=float("inf"))
    with pytest.raises(TypeError, match="factor must be a float, not NoneType"):
        overfetch_limit(10, factor=None)
    with pytest.raises(ValueError, match="limit must be >= 1, got 0"):
        overfetch_limit(0, factor=2.0)


# --- enforce_diversity: examples -------------------------------------------------------------


def test_cap_is_never_backfilled_result_is_short_instead():
    items = _items(["A"] * 10 + ["B"] * 2)
    out = enforce_diversity(items, k=5, source_of=_src, max_source_fraction=0.4)
    assert [i[0] for i in out.kept] == [0, 1, 10, 11]
    assert out.per_source == {"A": 2, "B": 2}
    assert out.short_by == 1
    assert len(out.withheld) == 8
    assert out.unique_sources == 2 and out.min_unique_met


def test_single_source_pool_reports_min_unique_not_met():
    out = enforce_diversity(_items(["A"] * 20), k=10, source_of=_src)
    assert len(out.kept) == 4 and out.short_by == 6
    assert out.min_unique_met is False


def test_min_unique_swaps_lowest_ranked_item_of_over_represented_source():
    # k=5, fraction=0.6 -> cap 3. Greedy: A0 A1 A2 B3 B4 (2 sources). Require 3:
    # the lowest-ranked item of a source with >1 kept (B4) makes room for C's best (C7).
    items = _items(["A", "A", "A", "B", "B", "A", "B", "C", "C"])
    out = enforce_diversity(items, k=5, source_of=_src, max_source_fraction=0.6, min_unique_sources=3)
    assert [i[0] for i in out.kept] == [0, 1, 2, 3, 7]
    assert out.per_source == {"A": 3, "B": 1, "C": 1}
    assert out.min_unique_met and out.short_by == 0
    assert (4, "B") in out.withheld


def test_min_unique_larger_than_k_means_every_result_distinct():
    items = _items(["A", "A", "B", "B", "C"])
    out = enforce_diversity(items, k=2, source_of=_src, max_source_fraction=1.0, min_unique_sources=5)
    assert [i[0] for i in out.kept] == [0, 2]
    assert out.min_unique_met


def test_items_without_source_share_one_source():
    # An attacker who strips the source field must not get past the cap.
    items = [(i, None) for i in range(10)] + [(10, "B")]
    out = enforce_diversity(items, k=10, source_of=_src)
    assert out.per_source == {"__unknown__": 4, "B": 1}
    out = enforce_diversity(items, k=10, source_of=_src, missing_source="?")
    assert out.per_source == {"?": 4, "B": 1}


def test_empty_candidates():
    out = enforce_diversity([], k=3, source_of=_src)
    assert out == DiversityOutcome(kept=[], withheld=[], short_by=3, per_source={}, unique_sources=0, min_unique_met=False)
    assert enforce_diversity([], k=3, source_of=_src, min_unique_sources=0).min_unique_met


def test_source_of_must_return_str_or_none():
    with pytest.raises(TypeError, match=r"source_of\(items\[1\]\) must return str, a list or tuple of str, or None, not int"):
        enforce_diversity([(0, "a"), (1, 5)], k=2, source_of=_src)
    with pytest.raises(TypeError, match=r"not a sequence holding int"):
        enforce_diversity([(0, ["a", 3])], k=2, source_of=_src)
    with pytest.raises(TypeError, match=r"not set"):
        enforce_diversity([(0, {"a"})], k=2, source_of=_src)
    with pytest.raises(TypeError, match="missing_source must be a str, not NoneType"):
        enforce_diversity([], k=2, source_of=_src, missing_source=None)
    with pytest.raises(ValueError, match="min_unique_sources must be >= 0, got -1"):
        enforce_diversity([], k=2, source_of=_src, min_unique_sources=-1)


def test_on_real_qdrant_scored_points():
    client = QdrantClient(":memory:")
    client.create_collection("c", vectors_config=models.VectorParams(size=2, distance=models.Distance.COSINE))
    points = [
        models.PointStruct(id=i, vector=[1.0, i / 100], payload={"source": "memo" if i < 8 else f"s{i}"})
        for i in range(12)
    ]
    client.upsert("c", points)
    hits = client.query_points("c", query=[1.0, 0.0], limit=12).points
    out = enforce_diversity(hits, k=5, source_of=lambda p: (p.payload or {}).get("source"))
    assert out.per_source["memo"] == 2
    assert len(out.kept) == 5
    assert [p.score for p in out.kept] == sorted((p.score for p in out.kept), reverse=True)


# --- enforce_diversity: properties -----------------------------------------------------------

sources_strategy = st.lists(st.one_of(st.none(), st.sampled_from("ABCDEFG")), max_size=60)


@settings(max_examples=400, deadline=None)
@given(
    sources=sources_strategy,
    k=st.integers(1, 25),
    fraction=st.floats(0.01, 1.0),
    min_unique=st.integers(0, 8),
)
def test_properties(sources, k, fraction, min_unique):
    items = _items(sources)
    out = enforce_diversity(items, k=k, source_of=_src, max_source_fraction=fraction, min_unique_sources=min_unique)
    cap = source_cap(k, fraction)
    names = ["__unknown__" if s is None else s for s in sources]

    # The cap is a hard guarantee, for every source, always.
    assert all(n <= cap for n in out.per_source.values())
    assert sum(out.per_source.values()) == len(out.kept) <= k
    assert out.short_by == k - len(out.kept)
    assert out.unique_sources == len(out.per_source)
    # kept and withheld partition the input, each in rank order.
    assert sorted(out.kept + out.withheld) == items
    assert [i[0] for i in out.kept] == sorted(i[0] for i in out.kept)
    assert [i[0] for i in out.withheld] == sorted(i[0] for i in out.withheld)
    # Short only when nothing withheld could have been admitted.
    if out.short_by:
        assert all(out.per_source.get(names[i[0]], 0) == cap for i in out.withheld)
    # min_unique: met exactly when the pool allows it.
    required = min(min_unique, k)
    pool = len(set(names))
    assert out.min_unique_met == (pool >= required)
    if pool >= required:
        assert out.unique_sources >= required
    # Without the min-unique rule the result is exactly the greedy cap selection.
    plain = enforce_diversity(items, k=k, source_of=_src, max_source_fraction=fraction, min_unique_sources=0)
    assert plain.kept == _greedy_reference(items, k, cap)
    # Swaps change as few items as needed.
    swapped = len(set(plain.kept) - set(out.kept))
    assert swapped <= max(0, required - plain.unique_sources)


# --- group caps ------------------------------------------------------------------------------


def test_group_caps_hold_inside_groups_and_across_the_response():
    # Grouped by "doc_type"; every group is dominated by the same source "memo".
    groups = [_items(["memo"] * 6 + ["x", "y"]) for _ in range(3)]
    out = enforce_group_caps(groups, group_size=5, source_of=_src, max_source_fraction=0.4)
    assert out.group_cap == 2 and out.response_cap == 6
    assert [g.per_source.get("memo", 0) for g in out.groups] == [2, 2, 2]
    assert out.per_source["memo"] == 6

    # A tighter response-wide share is consumed by the earlier groups first.
    out = enforce_group_caps(groups, group_size=5, source_of=_src, max_source_fraction=0.2)
    assert out.group_cap == 1 and out.response_cap == 3
    assert out.per_source == {"memo": 3, "x": 3, "y": 3}


def test_group_min_unique_is_best_effort_under_response_cap():
    groups = [_items(["a", "a", "b"]), _items(["a", "a", "b"])]
    out = enforce_group_caps(groups, group_size=2, source_of=_src, max_source_fraction=0.5, min_unique_sources=2)
    # response cap = floor(4 * 0.5) = 2 per source: group 0 takes a+b, group 1 too.
    assert [g.min_unique_met for g in out.groups] == [True, True]
    out = enforce_group_caps(
        [_items(["a", "b"]), _items(["a", "b"]), _items(["a", "b"])],
        group_size=2, source_of=_src, max_source_fraction=0.25, min_unique_sources=2,
    )
    # response cap = max(1, floor(6 * 0.25)) = 1: only the first group can hold a and b.
    assert out.response_cap == 1
    assert [g.min_unique_met for g in out.groups] == [True, False, False]
    assert out.per_source == {"a": 1, "b": 1}


@settings(max_examples=200, deadline=None)
@given(
    groups=st.lists(sources_strategy, max_size=6),
    group_size=st.integers(1, 8),
    fraction=st.floats(0.01, 1.0),
    min_unique=st.integers(0, 4),
)
def test_group_cap_properties(groups, group_size, fraction, min_unique):
    item_groups = [_items(g) for g in groups]
    out = enforce_group_caps(
        item_groups, group_size=group_size, source_of=_src, max_source_fraction=fraction, min_unique_sources=min_unique
    )
    totals = {}
    for hits, g in zip(item_groups, out.groups):
        assert all(n <= out.group_cap for n in g.per_source.values())
        assert len(g.kept) <= group_size
        assert sorted(g.kept + g.withheld) == hits
        for name, n in g.per_source.items():
            totals[name] = totals.get(name, 0) + n
    assert totals == out.per_source
    assert all(n <= out.response_cap for n in totals.values())


# --- items with several sources --------------------------------------------------------------


def test_an_item_with_several_sources_counts_under_each():
    # ["memo", "q3"] is matched by a filter on memo: it must use memo's share, not escape it.
    items = _items([["memo", "q3"], "memo", ["memo"], "memo", "x", "y", "z", ("q3", "x"), [], None])
    out = enforce_diversity(items, k=5, source_of=_src, max_source_fraction=0.4, min_unique_sources=0)
    assert out.per_source["memo"] == 2 and out.per_source["q3"] == 1  # cap = 2
    assert [i[0] for i in out.kept] == [0, 1, 4, 5, 6]
    # Duplicates inside one item count once; an empty list is no source.
    out = enforce_diversity(_items([["a", "a"], [], None]), k=3, source_of=_src, max_source_fraction=1.0)
    assert out.per_source == {"a": 1, "__unknown__": 2}


def test_min_unique_swap_skips_a_candidate_whose_other_source_is_full():
    items = _items(["a", "a", ("a", "b"), "c"])
    out = enforce_diversity(items, k=3, source_of=_src, max_source_fraction=0.34, min_unique_sources=3)
    # cap 1: b's only item also names a, which is full, so b cannot be brought in.
    assert [i[0] for i in out.kept] == [0, 3] and not out.min_unique_met
    # With room for a second a, the same item is swapped in for the lower-ranked a.
    out = enforce_diversity(items, k=2, source_of=_src, max_source_fraction=1.0, min_unique_sources=2)
    assert [i[0] for i in out.kept] == [0, 2] and out.per_source == {"a": 2, "b": 1}


multi_sources = st.lists(
    st.one_of(st.none(), st.sampled_from("ABCDEFG"), st.lists(st.sampled_from("ABCDEFG"), max_size=3)),
    max_size=60,
)


def _names(source):
    several = source if isinstance(source, list) else [] if source is None else [source]
    return set(several) or {"__unknown__"}


@settings(max_examples=400, deadline=None)
@given(sources=multi_sources, k=st.integers(1, 25), fraction=st.floats(0.01, 1.0), min_unique=st.integers(0, 8))
def test_multi_source_properties(sources, k, fraction, min_unique):
    items = _items(sources)
    out = enforce_diversity(items, k=k, source_of=_src, max_source_fraction=fraction, min_unique_sources=min_unique)
    cap = source_cap(k, fraction)
    counts = {}
    for item in out.kept:
        for n in _names(item[1]):
            counts[n] = counts.get(n, 0) + 1
    # The cap holds for every source an item names, always.
    assert counts == out.per_source and all(n <= cap for n in counts.values())
    assert len(out.kept) <= k and out.short_by == k - len(out.kept)
    assert sorted(out.kept + out.withheld) == items
    assert out.min_unique_met == (len(counts) >= min(min_unique, k))
    # Short only when no withheld item fits under the cap in all its sources.
    if out.short_by:
        assert all(any(counts.get(n, 0) >= cap for n in _names(i[1])) for i in out.withheld)


@settings(max_examples=200, deadline=None)
@given(groups=st.lists(multi_sources, max_size=5), group_size=st.integers(1, 8), fraction=st.floats(0.01, 1.0))
def test_multi_source_group_caps_hold(groups, group_size, fraction):
    out = enforce_group_caps([_items(g) for g in groups], group_size=group_size, source_of=_src,
                             max_source_fraction=fraction)
    totals = {}
    for g in out.groups:
        assert all(n <= out.group_cap for n in g.per_source.values())
        for name, n in g.per_source.items():
            totals[name] = totals.get(name, 0) + n
    assert totals == out.per_source and all(n <= out.response_cap for n in totals.values())


def test_min_unique_swap_tries_the_next_item_of_a_missing_source():
    # b's best item also names a, which is full: a lower-ranked item of b alone (or another victim)
    # must still bring b in, as it does when the two-source item is absent.
    base = ["a", "a", "c", "c", "b"]
    for sources in (base, ["a", "a", "c", "c", ("a", "b"), "b"]):
        out = enforce_diversity(_items(sources), k=4, source_of=_src, max_source_fraction=0.5, min_unique_sources=3)
        assert out.min_unique_met and set(out.per_source) == {"a", "b", "c"}
        assert all(n <= 2 for n in out.per_source.values())
