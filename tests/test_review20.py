"""Eighteenth review (2026-12-05): the qdrant-client 1.20 surface, sync and async, looked at by an
agent holding a guarded client.

Each test fails on the code before its fix (checked, see docs/security-testing.md). Real local
Qdrant, real Ed25519 keys; no mocks."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import DIM, create, make_kit, unit
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient

# ------------------------------------------------------------- noise_queries and stored vectors
# Under noise_queries every query vector a principal without raw access sends is noised. A query
# that names a point (an id where a vector goes) makes Qdrant search with that point's stored
# vector as it is, and search_matrix_* compares the stored vectors with one another: where the
# owner stores raw vectors (raw_in_boundary) both hand a reader exact similarities between raw
# vectors it may never see (the Gram matrix, which gives the vectors up to a rotation).

_EMP = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True, "noise_queries": True,
        "diversity": {"enabled": False}, "intent": {"enabled": False}}


# bob's own collection, where he may store raw vectors: any vector he likes, by point id.
_MINE = {"class": "PII", "owner": "support", "raw_in_boundary": True, "diversity": {"enabled": False},
         "intent": {"enabled": False}}


def _raw_store(tmp_path):
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"emp": _EMP, "mine": _MINE}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "emp")
    rng = np.random.default_rng(3)
    raw = [unit(rng) for _ in range(6)]
    owner.upsert("emp", [models.PointStruct(id=i, vector=v, payload={"source": "a"}) for i, v in enumerate(raw)])
    return kit, owner, owner.with_principal(kit.principal("bob", "support")), np.array(raw)


def _exact_cosines(raw, i):
    return {j: float(raw[i] @ raw[j]) for j in range(len(raw)) if j != i}


@pytest.mark.parametrize("query", [
    0,
    models.NearestQuery(nearest=0),
    models.RecommendQuery(recommend=models.RecommendInput(positive=[0])),
    models.DiscoverQuery(discover=models.DiscoverInput(
        target=0, context=[models.ContextPair(positive=1, negative=2)])),
    models.ContextQuery(context=[models.ContextPair(positive=0, negative=1)]),
], ids=["bare", "nearest", "recommend", "discover", "context"])
def test_a_query_naming_a_point_is_refused_under_noise_queries(tmp_path, query):
    kit, owner, bob, raw = _raw_store(tmp_path)
    # What the owner boundary gets (raw access: its queries are never noised): the exact cosines.
    if isinstance(query, int):
        got = {p.id: p.score for p in owner.query_points("emp", query=query, limit=10).points}
        assert got == pytest.approx(_exact_cosines(raw, 0), abs=1e-5)
    # Before the fix bob got the same exact scores (the id was never noised).
    with pytest.raises(GuardRefusal) as err:
        bob.query_points("emp", query=query, limit=10)
    assert err.value.verdict == "QUERY_REJECTED"
    assert "point id" in str(err.value) and "noise_queries" in str(err.value)
    # A vector of bob's own is still accepted, and noised.
    res = bob.query_points("emp", query=raw[0].tolist(), limit=10).points
    assert {p.id: p.score for p in res} != pytest.approx({j: float(raw[0] @ raw[j]) for j in range(6)}, abs=1e-5)


def test_point_ids_in_prefetch_groups_and_batches_are_refused_under_noise_queries(tmp_path):
    kit, owner, bob, raw = _raw_store(tmp_path)
    calls = [
        lambda: bob.query_points("emp", prefetch=[models.Prefetch(query=raw[1].tolist()),
                                                  models.Prefetch(prefetch=models.Prefetch(query=0))],
                                 query=models.FusionQuery(fusion=models.Fusion.RRF), limit=10),
        lambda: bob.query_points_groups("emp", group_by="source", query=0),
        lambda: bob.query_batch_points("emp", [models.QueryRequest(query=raw[1].tolist()),
                                               models.QueryRequest(query=models.NearestQuery(nearest=0))]),
        lambda: bob.query_points("emp", query=models.RelevanceFeedbackQuery(
            relevance_feedback=models.RelevanceFeedbackInput(
                target=raw[1].tolist(), feedback=[models.FeedbackItem(example=0, score=1.0)],
                strategy=models.NaiveFeedbackStrategy(naive=models.NaiveFeedbackStrategyParams(a=1.0, b=1.0, c=1.0))))),
    ]
    for call in calls:
        with pytest.raises(GuardRefusal, match="QUERY_REJECTED: .*point id"):
            call()


def test_an_exact_probe_vector_through_lookup_from_is_refused_under_noise_queries(tmp_path):
    # bob stores the basis vectors raw in his own collection, then searches emp by their ids: each
    # score is one coordinate of a raw vector of emp, exactly; DIM probes give every raw vector.
    kit, owner, bob, raw = _raw_store(tmp_path)
    create(bob, "mine")
    bob.upsert("mine", [models.PointStruct(id=k, vector=np.eye(DIM)[k].tolist()) for k in range(DIM)])
    probe = dict(query=3, lookup_from=models.LookupLocation(collection="mine"), limit=10)
    # What Qdrant answers to it (asked around the guard): coordinate 3 of every raw vector.
    got = {p.id: p.score for p in RawClient.query_points(bob, "emp", **probe).points}
    assert got == pytest.approx({j: float(raw[j][3]) for j in range(6)}, abs=1e-5)
    with pytest.raises(GuardRefusal, match="QUERY_REJECTED: .*point id") as err:  # before the fix: the same
        bob.query_points("emp", **probe)
    assert "retrieve" in err.value.directive


def test_point_ids_still_pass_where_every_stored_vector_is_noised(tmp_path):
    # Without raw_in_boundary the stored vectors are the noised ones reads release: a query by id
    # tells nothing a read does not, so it is not refused.
    kit = make_kit(tmp_path)
    pol = {**_EMP, "raw_in_boundary": False}
    owner = QdrantClient(":memory:", guard=kit.config({"emp": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "emp")
    rng = np.random.default_rng(3)
    owner.upsert("emp", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "a"}) for i in range(4)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert len(bob.query_points("emp", query=0).points) == 3
    assert bob.search_matrix_pairs("emp", sample=4, limit=2).pairs


@pytest.mark.parametrize("method", ["search_matrix_pairs", "search_matrix_offsets"])
def test_search_matrix_is_refused_under_noise_queries(tmp_path, method):
    kit, owner, bob, raw = _raw_store(tmp_path)
    pairs = owner.search_matrix_pairs("emp", sample=6, limit=5)
    assert {(p.a, p.b): p.score for p in pairs.pairs} == pytest.approx(
        {(p.a, p.b): float(raw[p.a] @ raw[p.b]) for p in pairs.pairs}, abs=1e-5)
    # Before the fix bob got the same exact matrix.
    with pytest.raises(GuardRefusal) as err:
        getattr(bob, method)("emp", sample=6, limit=5)
    assert err.value.verdict == "QUERY_REJECTED"
    assert "noise_queries" in str(err.value)


def test_the_async_client_refuses_the_same(tmp_path):
    kit = make_kit(tmp_path)

    async def run():
        owner = AsyncQdrantClient(":memory:", guard=kit.config({"emp": _EMP}), principal=kit.principal("alice", "hr"))
        await owner.create_collection("emp", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        rng = np.random.default_rng(3)
        await owner.upsert("emp", [models.PointStruct(id=i, vector=unit(rng)) for i in range(4)])
        bob = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(GuardRefusal, match="QUERY_REJECTED: .*point id"):
            await bob.query_points("emp", query=models.RecommendQuery(recommend=models.RecommendInput(positive=[0])))
        with pytest.raises(GuardRefusal, match="QUERY_REJECTED"):
            await bob.search_matrix_offsets("emp", sample=4, limit=2)
        assert len((await owner.query_points("emp", query=0)).points) == 3
        await owner.close()

    asyncio.run(run())


# ------------------------------------------------------- retagging points out of a restricted source
# Under restricted_sources only the budgeted sources are capped, and a boundary may both read and
# write. Before the fix such a reader-writer moved a restricted source's points to another source
# (or none) with a payload change, which kept their text and vectors, and then read them all: the
# threat model called this a denial of service; it was a leak of the whole source.

_KB = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "intent": {"enabled": False},
       "diversity": {"max_source_coverage": 0.2, "max_source_fraction": 1.0, "min_unique_sources": 1,
                     "restricted_sources": ["memo"]}}

_MEMO = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value="memo"))])


def _memo_store(tmp_path):
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"kb": _KB}), principal=kit.principal("alice", "hr"))
    create(owner, "kb")
    rng = np.random.default_rng(0)
    owner.upsert("kb", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "memo", "text": f"memo part {i}"})
                        for i in range(10)])
    owner.upsert("kb", [models.PointStruct(id=10 + i, vector=unit(rng), payload={"source": "faq", "text": f"faq {i}"})
                        for i in range(5)])
    return kit, owner, owner.with_principal(kit.principal("bob", "support"))


def _memo_seen(bob):
    return sorted(p.id for p in bob.scroll("kb", limit=100)[0] if p.id < 10)


_RETAGS = {
    "set by filter": lambda c: c.set_payload("kb", {"source": "x"}, points=_MEMO),
    "set by ids": lambda c: c.set_payload("kb", {"source": "x"}, points=list(range(10))),
    "set below the source key": lambda c: c.set_payload("kb", {"x": 1}, points=list(range(10)), key="source"),
    "set a list": lambda c: c.set_payload("kb", {"source": ["x"]}, points=models.FilterSelector(filter=_MEMO)),
    "delete the key": lambda c: c.delete_payload("kb", ["source"], points=list(range(10))),
    "delete by filter": lambda c: c.delete_payload("kb", ['"source"'], points=_MEMO),
    "overwrite": lambda c: c.overwrite_payload("kb", {"source": "x", "text": "t"}, points=list(range(10))),
    "clear": lambda c: c.clear_payload("kb", points_selector=_MEMO),
    "batch set": lambda c: c.batch_update_points("kb", [models.SetPayloadOperation(
        set_payload=models.SetPayload(payload={"source": "x"}, points=list(range(10))))]),
    "batch delete": lambda c: c.batch_update_points("kb", [models.DeletePayloadOperation(
        delete_payload=models.DeletePayload(keys=["source"], filter=_MEMO))]),
    "batch overwrite": lambda c: c.batch_update_points("kb", [models.OverwritePayloadOperation(
        overwrite_payload=models.SetPayload(payload={"source": "x"}, points=[0, 1, 2]))]),
    "batch clear": lambda c: c.batch_update_points("kb", [models.ClearPayloadOperation(
        clear_payload=models.PointIdsList(points=[0, 1, 2]))]),
}


@pytest.mark.parametrize("retag", sorted(_RETAGS))
def test_a_writer_outside_the_owner_boundary_cannot_retag_a_restricted_source(tmp_path, retag):
    kit, owner, bob = _memo_store(tmp_path)
    assert _memo_seen(bob) == [0, 1]  # 20 % of memo
    with pytest.raises(GuardRefusal) as err:
        _RETAGS[retag](bob)
    assert err.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert "memo" in str(err.value) and "owner boundary" in str(err.value)
    assert not err.value.point_ids  # which withheld points a filter selects is not told
    assert {p.payload["source"] for p in RawClient.scroll(owner, "kb", limit=100)[0] if p.id < 10} == {"memo"}
    assert _memo_seen(bob) == [0, 1]


def test_payload_changes_that_keep_the_restricted_source_still_pass(tmp_path):
    kit, owner, bob = _memo_store(tmp_path)
    bob.set_payload("kb", {"tag": "reviewed"}, points=_MEMO)
    bob.delete_payload("kb", ["tag"], points=list(range(10)))
    bob.set_payload("kb", {"source": "faq2"}, points=[10, 11])  # points of an unrestricted source
    bob.overwrite_payload("kb", {"source": "faq3", "text": "t"}, points=[12])
    bob.clear_payload("kb", points_selector=[13])
    owner.set_payload("kb", {"source": "archive"}, points=[9])  # the owner boundary retags
    stored = {p.id: p.payload for p in RawClient.scroll(owner, "kb", limit=100)[0]}
    assert stored[10]["source"] == "faq2" and stored[12]["source"] == "faq3" and "source" not in stored[13]
    assert stored[9]["source"] == "archive" and stored[0]["source"] == "memo"


def test_a_batch_payload_operation_selecting_nothing_fails_as_for_the_owner(tmp_path):
    # Neither points nor a filter: Qdrant refuses the operation; the new look-up must not crash first.
    kit, owner, bob = _memo_store(tmp_path)
    for op in (models.SetPayloadOperation(set_payload=models.SetPayload(payload={"source": "x"})),
               models.DeletePayloadOperation(delete_payload=models.DeletePayload(keys=["source"]))):
        for client in (owner, bob):
            with pytest.raises(ValueError, match="No filter or points provided"):
                client.batch_update_points("kb", [op])


def test_the_async_client_refuses_a_retag_too(tmp_path):
    kit = make_kit(tmp_path)

    async def run():
        owner = AsyncQdrantClient(":memory:", guard=kit.config({"kb": _KB}), principal=kit.principal("alice", "hr"))
        await owner.create_collection("kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        rng = np.random.default_rng(0)
        await owner.upsert("kb", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "memo"})
                                  for i in range(10)])
        bob = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
            await bob.set_payload("kb", {"source": "x"}, points=_MEMO)
        with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
            await bob.clear_payload("kb", points_selector=[0])
        assert len((await bob.scroll("kb", limit=100))[0]) == 2
        await owner.close()

    asyncio.run(run())


# ------------------------------------------------------------------ an alias renamed in its own batch
# A rename or deletion was judged by the aliases as they were before the call, and one whose old
# alias was not there was passed on ("Qdrant reports it"); but Qdrant applies a call's operations in
# order, so an alias created earlier in the same call is there. Before the fix bob put the name of
# hr's (not yet created) PII collection on a PUBLIC collection, which the direct create refuses:
# the owner's raw in-boundary writes under that name then landed where anyone reads them.

_PAYROLL = {"payroll": {"class": "PII", "owner": "hr", "raw_in_boundary": True, "intent": {"enabled": False}},
            "pub": {"class": "PUBLIC"}}


def _create(collection, alias):
    return models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection, alias_name=alias))


def _rename(old, new):
    return models.RenameAliasOperation(rename_alias=models.RenameAlias(old_alias_name=old, new_alias_name=new))


def _delete(alias):
    return models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))


@pytest.mark.parametrize("ops", [
    [_create("pub", "tmp"), _rename("tmp", "payroll")],
    [_create("pub", "tmp"), _rename("tmp", "tmp2"), _rename("tmp2", "payroll")],
    [_create("pub", "tmp"), _delete("tmp"), _create("pub", "tmp"), _rename("tmp", "payroll")],
], ids=["create-rename", "create-rename-rename", "create-delete-create-rename"])
def test_an_alias_created_and_renamed_in_one_call_is_checked(tmp_path, ops):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config(_PAYROLL), principal=kit.principal("alice", "hr"))
    bob = alice.with_principal(kit.principal("bob", "support"))
    create(bob, "pub")
    with pytest.raises(GuardRefusal) as err:
        bob.update_collection_aliases([_create("pub", "payroll")])
    assert err.value.verdict == "REFUSED_CROSS_BOUNDARY"
    with pytest.raises(GuardRefusal) as err:
        bob.update_collection_aliases(ops)
    assert err.value.verdict == "REFUSED_CROSS_BOUNDARY" and "'payroll'" in str(err.value)
    assert alice.get_aliases().aliases == []  # nothing was sent
    assert not alice.collection_exists("payroll")


def test_aliases_created_and_renamed_in_one_call_still_work(tmp_path):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config(_PAYROLL), principal=kit.principal("alice", "hr"))
    bob = alice.with_principal(kit.principal("bob", "support"))
    create(bob, "pub")
    assert bob.update_collection_aliases([_create("pub", "tmp"), _rename("tmp", "pub_v2"), _create("pub", "x"),
                                          _delete("x")])
    assert [(a.alias_name, a.collection_name) for a in alice.get_aliases().aliases] == [("pub_v2", "pub")]


def test_the_async_client_checks_an_alias_renamed_in_its_own_call(tmp_path):
    kit = make_kit(tmp_path)

    async def run():
        alice = AsyncQdrantClient(":memory:", guard=kit.config(_PAYROLL), principal=kit.principal("alice", "hr"))
        bob = alice.with_principal(kit.principal("bob", "support"))
        await bob.create_collection("pub", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
            await bob.update_collection_aliases([_create("pub", "tmp"), _rename("tmp", "payroll")])
        assert (await alice.get_aliases()).aliases == []
        await alice.close()

    asyncio.run(run())
