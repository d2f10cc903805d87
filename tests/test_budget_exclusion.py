"""Withheld points take no place in Qdrant's page or ranking: a budgeted read excludes them in
Qdrant's own filter, and re-runs when the budget withholds points mid-page. Real local-mode
Qdrant and real budget stores (memory, SQLite, a redis-server) throughout."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from tests.guardkit import hr_shared, make_kit, models, unit
from tests.protocol_store import ProtocolOnlyStore

NO_DIVERSITY_CAP = {"max_source_fraction": 1.0, "min_unique_sources": 1}


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store_spec(request, tmp_path):
    if request.param == "memory":
        return "memory"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / f'budget-{uuid.uuid4().hex}.db'}"
    return request.getfixturevalue("redis_url")


def _payroll(kit, store_spec="memory", diversity=None):
    """(owner, bob) on ``hr``: payroll points 0..9 (salary 1000..1009, bob may see 2) and misc
    points 100..104 (bob may see 1), under budget store ``store_spec``."""
    owner = hr_shared(kit, "hr", {"max_source_coverage": 0.2, **(diversity or {})})
    if store_spec != "memory":  # the store is made on first use, from the config
        owner._guard.config = owner._guard.config.model_copy(update={"budget_store": store_spec})
        owner._guard.shared.pop("budget_store", None)
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll", "salary": 1000 + i})
                        for i in range(10)] +
                 [models.PointStruct(id=100 + i, vector=unit(rng), payload={"source": "misc"}) for i in range(5)])
    return owner, owner.with_principal(kit.principal(f"b-{uuid.uuid4().hex[:8]}", "support"))


def _ids(points):
    return [p.id for p in points]


def _probe(lo, carrier=100):
    return models.Filter(should=[models.FieldCondition(key="salary", range=models.Range(gte=lo)),
                                 models.HasIdCondition(has_id=[carrier])])


def test_a_point_withheld_mid_page_leaves_its_place_to_the_next(kit, store_spec):
    # bob's first read uses up payroll inside the page: 2 admitted, the rest withheld. The page is
    # filled as if the withheld points did not exist (old code: [0, 1], the page cut short).
    _, bob = _payroll(kit, store_spec)
    page, offset = bob.scroll("hr", scroll_filter=_probe(0), limit=3)
    assert (_ids(page), offset) == ([0, 1, 100], 101)
    # The admitted points stay readable, and the used-up source is excluded before the next read.
    assert _ids(bob.scroll("hr", limit=20)[0]) == [0, 1, 100]


@pytest.mark.parametrize("method", ["scroll", "query_points", "query_batch_points", "query_points_groups"])
def test_no_read_tells_whether_a_withheld_point_matches(kit, store_spec, method):
    owner, bob = _payroll(kit, store_spec)
    assert _ids(bob.scroll("hr", limit=20)[0]) == [0, 1, 100]
    # A query pointing away from the carrier ranks every payroll point before it.
    away = (-np.asarray(owner.retrieve("hr", [100], with_vectors=True)[0].vector)).tolist()

    def read(flt):
        if method == "scroll":
            return _ids(bob.scroll("hr", scroll_filter=flt, limit=1)[0])
        if method == "query_points":
            return _ids(bob.query_points("hr", query=away, query_filter=flt, limit=1).points)
        if method == "query_batch_points":
            (res,) = bob.query_batch_points("hr", requests=[models.QueryRequest(query=away, filter=flt, limit=1)])
            return _ids(res.points)
        groups = bob.query_points_groups("hr", query=away, query_filter=flt, group_by="source", limit=1,
                                         group_size=1).groups
        return [_ids(g.hits) for g in groups]

    # Salaries 1000 and 1001 are bob's (points 0 and 1); every other payroll salary is withheld.
    answers = {str(read(_probe(lo))) for lo in (1002, 1005, 1009, 1010, 2000)}
    assert answers == {"[[100]]" if method == "query_points_groups" else "[100]"}


def test_points_of_several_sources_are_excluded_if_any_source_is_used_up(kit):
    # memo and q3 have 6 points each (cap 3 at coverage 0.5); 4 and 5 belong to both.
    alice = hr_shared(kit, "kb", {"max_source_coverage": 0.5, **NO_DIVERSITY_CAP})
    rng = np.random.default_rng(6)
    sources = {0: "memo", 1: "memo", 2: "memo", 3: "memo", 4: ["memo", "q3"], 5: ["memo", "q3"],
               10: "q3", 11: "q3", 12: "q3", 13: "q3"}
    alice.upsert("kb", [models.PointStruct(id=i, vector=unit(rng), payload={"source": s}) for i, s in sources.items()])
    dave = alice.with_principal(kit.principal("dave", "support"))
    assert _ids(dave.retrieve("kb", [0, 1, 4])) == [0, 1, 4]  # memo used up, 4 admitted under it
    q3 = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value="q3"))])
    # 5 is memo's too and memo withholds it: it takes no place (old code: [4], 5 filling the 2nd).
    assert _ids(dave.scroll("kb", scroll_filter=q3, limit=2)[0]) == [4, 10]
    assert _ids(dave.query_points("kb", query_filter=q3, limit=2).points) == [4, 10]


def test_the_users_filter_keeps_its_meaning(kit):
    _, bob = _payroll(kit, diversity=NO_DIVERSITY_CAP)
    assert _ids(bob.scroll("hr", limit=20)[0]) == [0, 1, 100]
    not_zero = models.Filter(must_not=[models.HasIdCondition(has_id=[0])])
    assert _ids(bob.scroll("hr", scroll_filter=not_zero, limit=2)[0]) == [1, 100]
    low = models.Filter(must=[models.FieldCondition(key="salary", range=models.Range(lte=1000))])
    assert _ids(bob.scroll("hr", scroll_filter=low, limit=5)[0]) == [0]
    either = models.Filter(should=[models.HasIdCondition(has_id=[1, 5]), models.HasIdCondition(has_id=[104])],
                           min_should=None)
    assert _ids(bob.query_points("hr", query_filter=either, limit=5).points) == [1]


def _record_scroll_filters(monkeypatch) -> list:
    """The scroll_filter of every scroll that reaches qdrant-client from here on."""
    import qdrant_client

    sent: list = []
    original = qdrant_client.QdrantClient.scroll

    def recording(self, *a, **kw):
        sent.append(kw.get("scroll_filter"))
        return original(self, *a, **kw)

    monkeypatch.setattr(qdrant_client.QdrantClient, "scroll", recording)
    return sent


def test_a_used_up_source_the_filter_reads_on_is_sent_excluded(kit, monkeypatch):
    # What reaches Qdrant: the user's filter untouched, inside must, the exclusion in must_not.
    _, bob = _payroll(kit, diversity=NO_DIVERSITY_CAP)
    bob.scroll("hr", limit=20)
    sent = _record_scroll_filters(monkeypatch)
    user = _probe(1005)
    bob.scroll("hr", scroll_filter=user, limit=1)
    (flt,) = sent
    assert flt.must == [user]
    # payroll but for 0 and 1, misc but for 100, regrouped by the admitted ids (sourcefilters):
    # a point of either source outside 0, 1, 100; 100 (admitted by misc) of payroll; 0, 1 of misc.
    outside, inside = flt.must_not
    assert outside.must[0].match.any == ["misc", "payroll"] and outside.must_not[0].has_id == [0, 1, 100]
    assert inside.must[0].has_id == [0, 1, 100]
    assert [(c.must[0].has_id, c.must[1].match.any) for c in inside.should] == [([100], ["payroll"]),
                                                                                 ([0, 1], ["misc"])]
    # The owner boundary's reads go out as they came in (an equal copy: every filter is sent as
    # rebuilt from its dump, qdrant_guard.sentmodels).
    owner = bob.with_principal(kit.principal("alice", "hr"))
    owner.scroll("hr", scroll_filter=user, limit=1)
    assert sent[-1] == user and sent[-1].model_fields_set == user.model_fields_set


def test_a_store_that_cannot_list_still_keeps_withheld_points_out_of_the_page(kit):
    # Fail closed: without the store's admitted ids, a source found used up keeps readable only
    # what the same read admitted, so withheld points still take no place.
    owner, bob = _payroll(kit, diversity=NO_DIVERSITY_CAP)
    owner._guard.shared["budget_store"] = ProtocolOnlyStore()
    page, _ = bob.scroll("hr", scroll_filter=_probe(0), limit=3)
    assert _ids(page) == [0, 1, 100]  # 2 withheld: payroll excluded but for 0 and 1
    answers = {str(_ids(bob.scroll("hr", scroll_filter=_probe(lo), limit=1)[0])) for lo in (1002, 1009, 2000)}
    assert answers == {"[100]"}
    # Points admitted by earlier reads stay readable where the same run re-admits them...
    assert _ids(bob.scroll("hr", limit=20)[0]) == [0, 1, 100]
    # ...the cost: a run that does not reach them, but finds the source used up, hides them.
    near_5 = owner.retrieve("hr", [5], with_vectors=True)[0].vector
    zero_or_5 = models.Filter(should=[models.HasIdCondition(has_id=[0, 5])])
    assert _ids(bob.query_points("hr", query=near_5, query_filter=zero_or_5, limit=1).points) == []


def test_monitor_mode_excludes_nothing(kit):
    _, bob = _payroll(kit, diversity={**NO_DIVERSITY_CAP, "mode": "monitor"})
    assert len(bob.scroll("hr", limit=20)[0]) == 15
    assert _ids(bob.scroll("hr", scroll_filter=_probe(1005), limit=1)[0]) == [5]


def test_a_source_too_small_for_one_point_is_excluded_before_the_read(kit, monkeypatch):
    # "tiny" has 3 points at coverage 0.2: cap 0, so the store never holds a key for it. The first
    # read finds it mid-page and runs again; later reads exclude it up front (one call each).
    owner, bob = _payroll(kit, diversity=NO_DIVERSITY_CAP)
    rng = np.random.default_rng(9)
    owner.upsert("hr", [models.PointStruct(id=50 + i, vector=unit(rng), payload={"source": "tiny", "salary": 5000 + i})
                        for i in range(3)])
    sent = _record_scroll_filters(monkeypatch)
    tiny_or_100 = models.Filter(should=[models.FieldCondition(key="salary", range=models.Range(gte=5000)),
                                        models.HasIdCondition(has_id=[100])])
    assert _ids(bob.scroll("hr", scroll_filter=tiny_or_100, limit=1)[0]) == [100]
    assert len(sent) == 2
    assert _ids(bob.scroll("hr", scroll_filter=tiny_or_100, limit=1)[0]) == [100]
    assert len(sent) == 3


def test_a_source_condition_matches_the_points_the_budget_names_by_it():
    # The exclusion names a source as the budget does (reads._sources): every stored form, the
    # missing source for absent, null, empty and "" values. Over-matches are the documented ones.
    from qdrant_client import QdrantClient as RawClient

    from qdrant_guard.reads import _sources
    from qdrant_guard.sourcefilters import _source_condition

    values = [7, "7", True, "True", 1.5, "1.5", 7.0, None, "", [], ["a", "b"], ["", "a"], "__unknown__", "a|b",
              {"x": 1}, "missing"]
    raw = RawClient(":memory:")
    raw.create_collection("c", vectors_config=models.VectorParams(size=2, distance=models.Distance.COSINE))
    raw.upsert("c", [models.PointStruct(id=i, vector=[1.0, 0.0], payload={} if v == "missing" else {"meta": {"src": v}})
                     for i, v in enumerate(values)])
    points = raw.scroll("c", limit=100, with_payload=True)[0]
    named = {p.id: _sources(p, "meta.src") or ("__unknown__",) for p in points}
    over = {"__unknown__": {values.index(["", "a"])}, "7.0": {values.index(7)}}
    for source in set().union(*named.values()):
        flt = models.Filter(must=[_source_condition("meta.src", source)])
        got = {p.id for p in raw.scroll("c", scroll_filter=flt, limit=100)[0]}
        want = {i for i, names in named.items() if source in names}
        if source == "__unknown__":
            want -= {values.index({"x": 1})}  # an object matches no condition: excluded by id
        assert got == want | over.get(source, set()), source
