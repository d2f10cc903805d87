"""The budget exclusion's regrouped filter (h-lperf) keeps out exactly the points the per-source
form kept out (tests/exclusion_old.py), on real local-mode collections: random payload values of
every kind the budget names a source by, random exhausted sources with random admitted ids
(points of several sources admitted under some of them only), random withheld ids, with and
without a user's filter. And it tests a point's source once, however many sources are used up."""
from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard.budget import normalize_point_id
from qdrant_guard.sourcefilters import Exclusion
from tests.exclusion_old import old_conditions

VALUES = [7, "7", True, "True", 1.5, "1.5", 7.0, None, "", [], ["a", "b"], ["", "a"], ["a", 7], "__unknown__",
          "a", "b", "c", {"x": 1}, "missing"]
SOURCES = ["7", "True", "1.5", "7.0", "", "__unknown__", "a", "b", "c", "d"]
IDS = [*range(24), *(str(uuid.UUID(int=k)) for k in range(1, 5))]

_RAW = RawClient(":memory:")
_RAW.create_collection("c", vectors_config=models.VectorParams(size=2, distance=models.Distance.COSINE))


def _load(values: list) -> None:
    _RAW.delete("c", points_selector=models.FilterSelector(filter=models.Filter()))
    _RAW.upsert("c", [models.PointStruct(id=pid, vector=[1.0, 0.5],
                                         payload={"k": i % 3} if v == "missing" else {"src": v, "k": i % 3})
                      for i, (pid, v) in enumerate(zip(IDS, values))])


def _kept(conditions: list, user: models.Filter | None) -> set:
    flt = models.Filter(must=None if user is None else [user], must_not=conditions)
    return {p.id for p in _RAW.scroll("c", scroll_filter=flt, limit=100)[0]}


exclusions = st.fixed_dictionaries({
    "sources": st.dictionaries(st.sampled_from(SOURCES), st.sets(st.sampled_from(IDS), max_size=10), max_size=6),
    "ids": st.sets(st.sampled_from(IDS), max_size=4),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(st.sampled_from(VALUES), min_size=len(IDS), max_size=len(IDS)), spec=exclusions,
       user=st.sampled_from([None, models.Filter(must=[models.FieldCondition(key="k", match=models.MatchValue(value=1))])]))
def test_the_regrouped_exclusion_keeps_out_what_the_per_source_one_did(values, spec, user):
    _load(values)
    ex = Exclusion("src", {s: frozenset(normalize_point_id(i) for i in ids) for s, ids in spec["sources"].items()},
                   {normalize_point_id(i) for i in spec["ids"]})
    assert _kept(ex.conditions(), user) == _kept(old_conditions(ex), user)


def test_points_of_several_sources_admitted_under_one_only():
    # A point of a and b admitted under a but not under b is excluded (b withholds it); one admitted
    # under both is not; one of a alone admitted under a is not.
    _load(["missing"] * len(IDS))
    _RAW.set_payload("c", {"src": ["a", "b"]}, points=[0, 1])
    _RAW.set_payload("c", {"src": "a"}, points=[2, 3])
    ex = Exclusion("src", {"a": frozenset({"i:0", "i:1", "i:2"}), "b": frozenset({"i:1"})})
    assert _kept(ex.conditions(), None) == set(IDS) - {0, 3} == _kept(old_conditions(ex), None)


def _field_conditions(cond) -> int:
    if isinstance(cond, models.FieldCondition):
        return 1
    if isinstance(cond, models.Filter):
        return sum(_field_conditions(c) for part in (cond.must, cond.should, cond.must_not) for c in part or ())
    return 0


def test_a_point_outside_the_admitted_ids_is_tested_once_for_all_sources():
    # Local mode tests every condition point by point in Python: the per-source form tested a
    # point's source once per used-up source (40 here), the regrouped form once for all of them,
    # and again only for the admitted points, which test about sqrt(groups) chunk id lists and
    # then the groups of their chunk (local mode keeps 32 id sets: one list per group evicted them).
    ex = Exclusion("src", {f"s{k}": frozenset({f"i:{k}", f"i:{k + 100}"}) for k in range(40)})
    first, *chunks = ex.conditions()
    assert _field_conditions(first) == 1 and _field_conditions(models.Filter(must_not=old_conditions(ex))) == 40
    assert len(chunks) == 5 and all(len(c.should) == 8 for c in chunks)
    assert sorted(i for c in chunks for i in c.must[0].has_id) == [*range(40), *range(100, 140)]
    assert all({i for g in c.should for i in g.must[0].has_id} == set(c.must[0].has_id) for c in chunks)


MANY = [f"s{k}" for k in range(40)]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(st.one_of(st.sampled_from(MANY), st.lists(st.sampled_from(MANY), min_size=2, max_size=3)),
                       min_size=len(IDS), max_size=len(IDS)),
       sources=st.dictionaries(st.sampled_from(MANY), st.sets(st.sampled_from(IDS), max_size=4), min_size=10,
                               max_size=40))
def test_many_groups_split_in_chunks_keep_out_the_same_points(values, sources):
    _load(values)
    ex = Exclusion("src", {s: frozenset(normalize_point_id(i) for i in ids) for s, ids in sources.items()})
    assert _kept(ex.conditions(), None) == _kept(old_conditions(ex), None)
