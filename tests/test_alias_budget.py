"""Budgets follow the collection, not the name used to reach it: an alias (which the guard lets
exist only with its collection's policy) draws on the same extraction and vector budgets.
Real local-mode Qdrant throughout."""
from __future__ import annotations

import asyncio
import json
from collections import Counter

import numpy as np
import pytest
import qdrant_client

from guardkit import create, hr_shared, make_kit, models, unit
from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient

# The budget lets a support reader see floor(20 * 0.25) = 5 of the memo's 20 points.
MEMO = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
        "diversity": {"max_source_coverage": 0.25, "restricted_sources": ["memo"]}}
CAP = 5
# PROPRIETARY, raw vectors in the owner boundary: an hr reader may receive 3 stored vectors.
MODEL = {"class": "PROPRIETARY", "owner": "hr", "raw_in_boundary": True, "intent": {"enabled": False},
         "diversity": {"max_vectors": 3}}
UNBUDGETED = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False}}


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _alias(client, collection, alias):
    client.update_collection_aliases(change_aliases_operations=[
        models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection, alias_name=alias))])


def _fill(client, name, n=20, source="memo"):
    rng = np.random.default_rng(7)
    create(client, name)
    client.upsert(name, [models.PointStruct(id=i, vector=unit(rng), payload={"source": source, "text": f"{name} {i}"})
                         for i in range(n)])


def _policies(**extra_memo):
    memo = {**MEMO, **extra_memo}
    return {"memo": memo, "memo_v2": memo, "copy": MEMO,
            "model": MODEL, "model_v2": MODEL, "open": UNBUDGETED, "open_v2": UNBUDGETED,
            "pub": {"class": "PUBLIC"}}


def _setup(kit, **extra_memo):
    """(owner alice in hr, reader dave in support) with ``memo`` aliased as ``memo_v2``, ``model``
    as ``model_v2`` and ``open`` as ``open_v2``, every alias created through the guard."""
    alice = QdrantClient(":memory:", guard=kit.config(_policies(**extra_memo)), principal=kit.principal("alice", "hr"))
    for name in ("memo", "copy", "model", "open", "pub"):
        _fill(alice, name)
    for name in ("memo", "model", "open"):
        _alias(alice, name, f"{name}_v2")
    return alice, alice.with_principal(kit.principal("dave", "support"))


@pytest.fixture()
def clients(kit):
    return _setup(kit)


@pytest.fixture()
def calls(monkeypatch):
    """How often each unguarded qdrant-client method ran, and the collection each read went to."""
    seen: Counter = Counter()
    for method in ("get_aliases", "query_points", "retrieve", "scroll", "query_batch_points", "query_points_groups"):
        original = getattr(qdrant_client.QdrantClient, method)

        def counting(self, *a, _method=method, _original=original, **kw):
            seen[_method] += 1
            if "collection_name" in kw:
                seen[(_method, kw["collection_name"])] += 1
            return _original(self, *a, **kw)

        monkeypatch.setattr(qdrant_client.QdrantClient, method, counting)
    return seen


def _audit(kit):
    return [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text().splitlines()]


def _ids(points):
    return {p.id for p in points}


# -- the extraction budget ---------------------------------------------------------------------

def test_budget_spent_through_the_collection_is_spent_through_its_alias(clients):
    _, dave = clients
    first = _ids(dave.retrieve("memo", list(range(10))))
    assert len(first) == CAP
    assert dave.retrieve("memo_v2", list(range(10, 20))) == []  # no fresh budget under the alias
    # Points already seen are still admitted, under either name; nothing new is.
    assert _ids(dave.retrieve("memo_v2", list(range(20)))) == first


def test_budget_spent_through_the_alias_is_spent_through_the_collection(clients):
    _, dave = clients
    first = _ids(dave.retrieve("memo_v2", list(range(10))))
    assert len(first) == CAP
    assert dave.retrieve("memo", list(range(10, 20))) == []
    assert _ids(dave.retrieve("memo", list(range(20)))) == first


def test_every_read_form_shares_one_budget_across_names(clients):
    _, dave = clients
    rng = np.random.default_rng(11)
    got: set = set()
    for name in ("memo", "memo_v2"):
        got |= _ids(dave.query_points(name, query=unit(rng), limit=10).points)
        got |= _ids(dave.scroll(name, limit=100)[0])
        for res in dave.query_batch_points(name, requests=[models.QueryRequest(query=unit(rng), limit=10, with_payload=True)
                                                           for _ in range(3)]):
            got |= _ids(res.points)
        for group in dave.query_points_groups(name, query=unit(rng), group_by="text", limit=20, group_size=1).groups:
            got |= _ids(group.hits)
    assert len(got) == CAP


def test_distinct_collections_keep_budgets_of_their_own(clients):
    # Resolving aliases must not merge collections that merely share a policy.
    _, dave = clients
    assert len(dave.retrieve("memo", list(range(20)))) == CAP
    assert len(dave.retrieve("copy", list(range(20)))) == CAP


def test_a_monitor_budget_is_counted_across_names_too(kit):
    _, dave = _setup(kit, diversity={**MEMO["diversity"], "mode": "monitor"})
    assert len(dave.retrieve("memo", list(range(10)))) == 10  # monitor withholds nothing
    assert len(dave.retrieve("memo_v2", list(range(10, 20)))) == 20 - 10
    over = [r for r in _audit(kit) if r["op"] == "retrieve" and r["collection"] == "memo_v2"][-1]
    assert over["details"]["budget"]["memo"]["withheld"] == 10  # what enforce would have withheld
    assert over["details"]["alias_of"] == "memo"


# -- the PROPRIETARY vector budget -------------------------------------------------------------

@pytest.mark.parametrize("first,second", [("model", "model_v2"), ("model_v2", "model")])
def test_vector_budget_is_shared_by_a_collection_and_its_alias(kit, clients, first, second):
    alice, _ = clients
    carol = alice.with_principal(kit.principal("carol", "hr"))  # raw vectors are hers to receive

    def vectors(name, ids):
        return {r.id for r in carol.retrieve(name, ids, with_vectors=True) if r.vector is not None}

    assert len(vectors(first, list(range(5)))) == 3
    assert vectors(second, list(range(5, 10))) == set()
    assert vectors(second, list(range(10))) == vectors(first, list(range(10)))


def test_receipted_vectors_are_released_through_an_alias(kit, clients):
    # Receipts name the collection a vector is stored in; checked against the alias's name they
    # failed, so a reader outside the owner boundary got every vector stripped through an alias.
    alice, dave = clients
    direct = {r.id: r.vector for r in dave.retrieve("open", [0, 1, 2], with_vectors=True)}
    assert len(direct) == 3 and all(v is not None for v in direct.values())
    assert {r.id: r.vector for r in dave.retrieve("open_v2", [0, 1, 2], with_vectors=True)} == direct
    query = unit(np.random.default_rng(9))
    hits = dave.query_points("open_v2", query=query, limit=3, with_vectors=True).points
    direct_hits = dave.query_points("open", query=query, limit=3, with_vectors=True).points
    assert [h.id for h in hits] == [h.id for h in direct_hits]
    assert all(h.vector is not None for h in hits)
    # Local mode can hand the same stored vector back at float32 or float64 precision.
    np.testing.assert_allclose([h.vector for h in hits], [h.vector for h in direct_hits], rtol=1e-6, atol=1e-7)


# -- what the resolution costs, and where the read goes ----------------------------------------

def test_only_budgeted_reads_resolve_aliases(clients, calls):
    alice, dave = clients
    rng = np.random.default_rng(5)
    dave.query_points("pub", query=unit(rng), limit=5)
    dave.query_points("open_v2", query=unit(rng), limit=5)
    alice.retrieve("model_v2", [1, 2])  # no vectors asked for: the vector budget does not apply
    assert calls["get_aliases"] == 0
    dave.query_points_groups("memo_v2", query=unit(rng), group_by="text", limit=10, group_size=1)
    dave.query_batch_points("memo_v2", requests=[models.QueryRequest(query=unit(rng), limit=5) for _ in range(4)])
    alice.retrieve("model_v2", [1, 2], with_vectors=True)
    assert calls["get_aliases"] == 3  # one per budgeted read, however many groups or requests


def test_a_budgeted_read_through_an_alias_goes_to_the_collection_it_names(kit, clients, calls):
    _, dave = clients
    # The query admits points outside ids 0-4 only (the filter keeps it so whatever the noise), so
    # the scroll's first page (ids 0-4) must take new admissions past memo's budget mid-page: it
    # is sent again without the points withheld (budgetops.read_excluding_withheld), to the collection
    # the alias names, both times.
    past_first_page = models.Filter(must=[models.HasIdCondition(has_id=list(range(5, 20)))])
    first = dave.query_points("memo_v2", query=unit(np.random.default_rng(2)), query_filter=past_first_page, limit=5)
    assert first.points and all(p.id >= 5 for p in first.points)
    dave.scroll("memo_v2", limit=5)
    assert calls[("query_points", "memo")] == 1 and calls[("scroll", "memo")] == 2
    assert calls[("query_points", "memo_v2")] == 0 and calls[("scroll", "memo_v2")] == 0
    rec = _audit(kit)[-1]
    assert rec["collection"] == "memo_v2" and rec["details"]["alias_of"] == "memo"


def test_a_repointed_alias_is_charged_to_its_new_collection(clients):
    # Resolution is not cached: moving an alias takes effect on the very next read.
    alice, dave = clients
    assert len(dave.retrieve("memo_v2", list(range(20)))) == CAP
    alice.update_collection_aliases(change_aliases_operations=[
        models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name="memo_v2"))])
    _alias(alice, "copy", "memo_v2")
    assert len(dave.retrieve("memo_v2", list(range(20)))) == CAP  # copy's budget, copy's points
    assert dave.retrieve("copy", list(range(20))) == dave.retrieve("memo_v2", list(range(20)))


# -- failures ----------------------------------------------------------------------------------

@pytest.fixture()
def aliases_fail(monkeypatch):
    def unreachable(self, *a, **kw):
        raise ConnectionError("qdrant unreachable")

    monkeypatch.setattr(qdrant_client.QdrantClient, "get_aliases", unreachable)


def test_alias_resolution_failure_refuses_a_budgeted_read(kit, clients, calls, aliases_fail):
    _, dave = clients
    for read in (lambda: dave.query_points("memo_v2", query=unit(np.random.default_rng(3)), limit=5),
                 lambda: dave.scroll("memo", limit=5)):
        with pytest.raises(GuardRefusal) as ei:
            read()
        assert ei.value.verdict == "FAIL_CLOSED" and "get_aliases" in ei.value.directive
        assert _audit(kit)[-1]["verdict"] == "FAIL_CLOSED"
    assert calls["query_points"] == calls["scroll"] == 0  # nothing was read
    assert dave.scroll("open_v2", limit=5)[0]  # unbudgeted reads need no resolution


def test_alias_resolution_failure_with_fail_open_charges_the_name_used(kit, aliases_fail):
    _, dave = _setup(kit, fail_closed=False)
    # Not refused, and still budgeted: under the name used, as before aliases were resolved.
    seen = _ids(dave.retrieve("memo_v2", list(range(20))))
    assert len(seen) == CAP
    assert dave.retrieve("memo_v2", [i for i in range(20) if i not in seen]) == []


# -- the async client drives the same pipeline -------------------------------------------------

def test_async_client_shares_the_budget_across_names(kit):
    async def main():
        alice = AsyncQdrantClient(":memory:", guard=kit.config(_policies()), principal=kit.principal("alice", "hr"))
        await alice.create_collection("memo", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        rng = np.random.default_rng(7)
        await alice.upsert("memo", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "memo"})
                                    for i in range(20)])
        await alice.update_collection_aliases(change_aliases_operations=[models.CreateAliasOperation(
            create_alias=models.CreateAlias(collection_name="memo", alias_name="memo_v2"))])
        dave = alice.with_principal(kit.principal("dave", "support"))
        assert len(await dave.retrieve("memo", list(range(10)))) == CAP
        assert await dave.retrieve("memo_v2", list(range(10, 20))) == []

    asyncio.run(main())


def test_points_tagged_with_a_list_of_sources_are_charged_to_each(kit):
    # Qdrant reads a list payload value as many values: {"source": ["memo", "q3"]} is one of memo's
    # points to a filter, so it counts in memo's size. The budget must charge it to memo too, or
    # list-tagged chunks of a restricted source are read past the cap (15 of 20 here, not 5).
    alice = QdrantClient(":memory:", guard=kit.config({"memo": MEMO}), principal=kit.principal("alice", "hr"))
    rng = np.random.default_rng(2)
    create(alice, "memo")
    alice.upsert("memo", [models.PointStruct(id=i, vector=unit(rng), payload={"source": ["memo", "q3"] if i % 2 else "memo"})
                          for i in range(20)])
    dave = alice.with_principal(kit.principal("dave", "support"))
    got = _ids(dave.retrieve("memo", list(range(20))))
    got |= _ids(dave.scroll("memo", limit=100)[0])
    got |= _ids(dave.query_points("memo", query=unit(rng), limit=10).points)
    assert len(got) == CAP
    # A source the budget does not restrict ("q3") does not release memo's points either.
    assert _ids(dave.retrieve("memo", [1, 3, 5, 7, 9, 11, 13])) <= got


def test_list_tagged_points_use_each_source_share_of_one_query(kit):
    # The per-query cap counts a point tagged ["memo", "q3"] under memo, as a filter on memo would;
    # counted apart, list-tagged chunks doubled memo's share of one result page.
    alice = hr_shared(kit, "kb", {"max_source_fraction": 0.2, "min_unique_sources": 1})
    rng = np.random.default_rng(3)
    q = np.array(unit(rng))
    memo = [models.PointStruct(id=i, vector=(q + 0.01 * np.array(unit(rng))).tolist(),
                               payload={"source": ["memo", "q3"] if i % 2 else "memo"}) for i in range(10)]
    other = [models.PointStruct(id=100 + i, vector=unit(rng), payload={"source": f"s{i}"}) for i in range(20)]
    alice.upsert("kb", memo + other)
    dave = alice.with_principal(kit.principal("dave", "support"))
    hits = dave.query_points("kb", query=q.tolist(), limit=10).points
    assert sum(1 for h in hits if h.id < 100) == 2  # the cap: floor(10 * 0.2)


@pytest.mark.parametrize("source", [7, True, -3])
def test_a_source_stored_as_a_number_or_boolean_is_sized_by_its_points(kit, source):
    # The budget names a source by str(value) ("7") but sized it with MatchValue("7"), which
    # matches no integer 7: the size came out 0, and a reader asking for one point at a time got
    # none of a 20-point source whose coverage allows 5.
    alice = QdrantClient(":memory:", guard=kit.config({"memo": MEMO | {"diversity": {"max_source_coverage": 0.25}}}),
                         principal=kit.principal("alice", "hr"))
    rng = np.random.default_rng(4)
    create(alice, "memo")
    alice.upsert("memo", [models.PointStruct(id=i, vector=unit(rng), payload={"source": source})
                          for i in range(20)] +
                 [models.PointStruct(id=100 + i, vector=unit(rng), payload={"source": str(source)})
                  for i in range(4)])
    dave = alice.with_principal(kit.principal("dave", "support"))
    got = set()
    for i in range(20):
        got |= _ids(dave.retrieve("memo", [i]))
    # str(value) is one source for the per-query cap and the budget alike: 24 points, cap 6.
    got |= _ids(dave.retrieve("memo", list(range(100, 104))))
    assert len(got) == 6


def test_a_withheld_point_is_not_charged_to_its_other_sources(kit):
    # Point 4 is tagged ["memo", "q3"]. Once memo is used up it is withheld, and q3 was charged for
    # it all the same: q3 then released one point fewer, which both cost the reader a point it never
    # received and told it whether a withheld point matched the probe (a count past the budget).
    # Admission is now all-or-none per point: charged to every source, or to none.
    alice = hr_shared(kit, "kb", {"max_source_coverage": 0.5})
    rng = np.random.default_rng(6)
    sources = {0: "memo", 1: "memo", 2: "memo", 3: "memo", 4: ["memo", "q3"], 5: ["memo", "q3"],
               10: "q3", 11: "q3", 12: "q3", 13: "q3"}  # memo and q3: 6 points each, cap 3
    alice.upsert("kb", [models.PointStruct(id=i, vector=unit(rng), payload={"source": s}) for i, s in sources.items()])
    dave = alice.with_principal(kit.principal("dave", "support"))
    assert len(dave.retrieve("kb", [0, 1, 2])) == 3  # memo used up
    assert dave.retrieve("kb", [4]) == []  # withheld by memo
    assert _ids(dave.retrieve("kb", [10, 11, 12, 13])) == {10, 11, 12}  # was {10, 11}


def test_an_empty_string_source_does_not_break_budgeted_reads(kit):
    # str(value) of "" is no budget key: one point written with source "" made every budgeted read
    # that returned it raise ValueError (unaudited), for every reader of the collection.
    alice = QdrantClient(":memory:", guard=kit.config({"memo": MEMO | {"diversity": {"max_source_coverage": 0.5}}}),
                         principal=kit.principal("alice", "hr"))
    rng = np.random.default_rng(8)
    create(alice, "memo")
    alice.upsert("memo", [models.PointStruct(id=i, vector=unit(rng), payload={"source": s})
                          for i, s in enumerate(["", "", ["", "memo"], "memo", None, None])])
    dave = alice.with_principal(kit.principal("dave", "support"))
    got = _ids(dave.scroll("memo", limit=10)[0]) | _ids(dave.retrieve("memo", list(range(6))))
    got |= _ids(dave.query_points("memo", query=unit(rng), limit=6).points)
    # "" names no source: 0, 1, 4 and 5 share the missing source (4 points returned by the first
    # read, cap 2) and point 2 counts under memo only (2 points, cap 1).
    assert got == {0, 1, 2}
