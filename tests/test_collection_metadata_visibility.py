"""What get_collection and get_optimizations tell a principal about a collection (h-meta, 2026-12-05).

Before: get_collection answered every principal the point count, indexed-vector count, segment
count and, on a server, the payload index schema (field names, types, parameters, per-field point
counts), also principals refused count() on the collection; get_optimizations (segments' point
counts) passed through for anyone. Now a principal who may not read the collection gets the
configuration only, a reader outside the owner boundary of a budgeted collection gets the index
schema without per-field counts, and get_optimizations is a read.

Real local Qdrant, real keys. Local mode keeps no payload index schema, so the server's answer is
exercised by driving the guard's own operation (the one the url= client runs too) with the local
store's answer plus a payload schema built of qdrant-client models, as a server returns it.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import DIM, PAYROLL_DIVERSITY, audit_records, hr_policy, make_kit, unit
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient
from qdrant_guard.pipeline import DESCRIBE_COUNTED, DESCRIBE_KEPT, describe_collection, drive_sync

_VP = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
_PRIVATE = {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "diversity": {"enabled": False}}
_SHARED = {**_PRIVATE, "readers": ["support"]}
_HIDDEN = sorted([*DESCRIBE_COUNTED, "config.metadata", "optimizer_status.error"])


def _schema() -> dict[str, models.PayloadIndexInfo]:
    """A server's payload index schema: a keyword, an integer and a text index with custom stopwords."""
    return {
        "department": models.PayloadIndexInfo(data_type=models.PayloadSchemaType.KEYWORD, points=7),
        "salary": models.PayloadIndexInfo(
            data_type=models.PayloadSchemaType.INTEGER, points=4,
            params=models.IntegerIndexParams(type=models.IntegerIndexType.INTEGER, lookup=True, range=True)),
        "notes": models.PayloadIndexInfo(
            data_type=models.PayloadSchemaType.TEXT, points=2,
            params=models.TextIndexParams(type=models.TextIndexType.TEXT,
                                          stopwords=models.StopwordsSet(custom=["initech", "layoff"]))),
    }


def _clients(tmp_path, **policies):
    kit = make_kit(tmp_path)
    cols = {"emp": _PRIVATE, "emp_v": _PRIVATE, "shared": _SHARED, **policies}
    alice = QdrantClient(":memory:", guard=kit.config(cols), principal=kit.principal("alice", "hr"))
    rng = np.random.default_rng(0)
    for name in ("emp", "shared"):
        alice.create_collection(name, vectors_config=_VP, metadata={"lead": "alice"})
        alice.upsert(name, [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"})
                            for i in range(3)])
    return kit, alice, alice.with_principal(kit.principal("bob", "support"))


def _assert_configuration_only(info) -> None:
    assert info.points_count is None and info.indexed_vectors_count is None
    assert info.segments_count == 0 and info.payload_schema == {} and info.update_queue is None
    assert info.config.metadata is None
    assert info.config.params.vectors.size == DIM  # what a client needs to build a query stays


def test_collection_info_fields_are_all_classified():
    # An upgrade of qdrant-client that adds a field to CollectionInfo must be looked at (as surface.py's methods).
    assert set(models.CollectionInfo.model_fields) == DESCRIBE_KEPT | set(DESCRIBE_COUNTED)
    assert not DESCRIBE_KEPT & set(DESCRIBE_COUNTED)


def test_a_non_reader_gets_the_configuration_without_counts(tmp_path):
    kit, alice, bob = _clients(tmp_path)
    with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
        bob.count("emp")
    _assert_configuration_only(bob.get_collection("emp"))  # before: points_count 3, segments_count 1
    entry = audit_records(kit)[-1]
    assert (entry["op"], entry["collection"], entry["verdict"]) == ("get_collection", "emp", "ALLOW")
    assert entry["details"] == {"hidden": _HIDDEN} and "bob" in entry["principal"]
    # The owner and a reader still get everything; the store is unchanged.
    assert alice.get_collection("emp").points_count == 3
    shared = bob.get_collection("shared")
    assert shared.points_count == 3 and shared.segments_count >= 1 and shared.config.metadata == {"lead": "alice"}
    assert audit_records(kit)[-1]["details"] == {}
    assert RawClient.get_collection(alice, "emp").points_count == 3


def test_a_non_reader_gets_no_counts_in_async_either(tmp_path):
    kit = make_kit(tmp_path)

    async def run():
        alice = AsyncQdrantClient(":memory:", guard=kit.config({"emp": _PRIVATE}), principal=kit.principal("alice", "hr"))
        await alice.create_collection("emp", vectors_config=_VP)
        await alice.upsert("emp", [models.PointStruct(id=i, vector=unit(np.random.default_rng(i))) for i in range(3)])
        bob = alice.with_principal(kit.principal("bob", "support"))
        return await bob.get_collection("emp"), await alice.get_collection("emp")

    theirs, mine = asyncio.run(run())
    _assert_configuration_only(theirs)
    assert mine.points_count == 3


def test_a_non_reader_gets_no_counts_through_an_alias(tmp_path):
    kit, alice, bob = _clients(tmp_path)
    alice.update_collection_aliases([models.CreateAliasOperation(
        create_alias=models.CreateAlias(collection_name="emp", alias_name="emp_v"))])
    _assert_configuration_only(bob.get_collection("emp_v"))
    assert alice.get_collection("emp_v").points_count == 3


def test_an_unlisted_collection_under_refuse_answers_its_configuration_only(tmp_path):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"emp": _PRIVATE}, unlisted="refuse"),
                         principal=kit.principal("alice", "hr"))
    RawClient.create_collection(alice, "stray", vectors_config=_VP)
    RawClient.upsert(alice, "stray", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)))])
    _assert_configuration_only(alice.get_collection("stray"))
    entry = audit_records(kit)[-1]
    assert (entry["collection"], entry["verdict"], entry["details"]) == ("stray", "ALLOW", {"hidden": _HIDDEN})


def test_a_budgeted_reader_keeps_the_point_count_it_may_count(tmp_path):
    # An unfiltered count() answers outside the owner boundary of a budgeted collection, so the
    # point count stays; only the index schema's per-field counts (a filter count() refuses) go.
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"hr": hr_policy(PAYROLL_DIVERSITY)}),
                         principal=kit.principal("alice", "hr"))
    alice.create_collection("hr", vectors_config=_VP)
    rng = np.random.default_rng(0)
    alice.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"}) for i in range(10)])
    bob = alice.with_principal(kit.principal("bob", "support"))
    assert bob.get_collection("hr").points_count == bob.count("hr").count == 10
    bob.get_collection("hr")
    assert audit_records(kit)[-1]["details"] == {"hidden": ["payload_schema.points"]}
    alice.get_collection("hr")
    assert audit_records(kit)[-1]["details"] == {}


def _served(client, name):
    """get_collection through ``client``'s guard, answered by the local store plus a server's index schema."""
    def invoke(call):
        info = RawClient.get_collection(client, **call.kwargs)
        return info.model_copy(update={"payload_schema": _schema()})
    return drive_sync(client._guard.run("get_collection", {"collection_name": name}), invoke)


# What a server's optimizer error looks like (qdrant's OptimizersStatus::Error carries the error's
# text as the optimizer raised it): file paths and what was being written.
_OPT_ERROR = "Service internal error: No space left on device: /qdrant/storage/collections/emp/0/segments/3f2a"


def _served_optimizer_error(client, name):
    """get_collection through ``client``'s guard, answered by the local store with a server's optimizer error."""
    def invoke(call):
        info = RawClient.get_collection(client, **call.kwargs)
        return info.model_copy(update={"optimizer_status": models.OptimizersStatusOneOf1(error=_OPT_ERROR)})
    return drive_sync(client._guard.run("get_collection", {"collection_name": name}), invoke)


def test_a_non_reader_learns_that_the_optimizer_failed_but_not_its_message(tmp_path):
    kit, alice, bob = _clients(tmp_path)
    theirs = _served_optimizer_error(bob, "emp")
    # Before: the error's text as Qdrant wrote it.
    assert theirs.optimizer_status == models.OptimizersStatusOneOf1(error="withheld")
    entry = audit_records(kit)[-1]
    assert entry["details"] == {"hidden": _HIDDEN} and "optimizer error" in entry["directive"]
    # The owner and a reader get the message; "ok" is "ok" for everyone.
    assert _served_optimizer_error(alice, "emp").optimizer_status.error == _OPT_ERROR
    assert _served_optimizer_error(bob, "shared").optimizer_status.error == _OPT_ERROR
    assert bob.get_collection("emp").optimizer_status == models.OptimizersStatusOneOf.OK


def test_describe_collection_withholds_an_optimizer_errors_text_in_a_copy():
    raw = RawClient(":memory:")
    raw.create_collection("c", vectors_config=_VP)
    info = raw.get_collection("c").model_copy(update={"optimizer_status": models.OptimizersStatusOneOf1(error=_OPT_ERROR)})
    hidden = describe_collection(info, reader=False, budgeted=False)
    assert hidden.optimizer_status.error == "withheld" and info.optimizer_status.error == _OPT_ERROR
    assert describe_collection(info, reader=True, budgeted=True).optimizer_status.error == _OPT_ERROR
    models.CollectionInfo.model_validate(hidden.model_dump())


@pytest.mark.parametrize("mode", ["enforce", "monitor"])
def test_a_servers_index_schema_keeps_its_per_field_counts_from_a_budgeted_reader(tmp_path, mode):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"hr": hr_policy({**PAYROLL_DIVERSITY, "mode": mode}),
                                                       "emp": _PRIVATE}),
                         principal=kit.principal("alice", "hr"))
    alice.create_collection("hr", vectors_config=_VP)
    alice.create_collection("emp", vectors_config=_VP)
    bob = alice.with_principal(kit.principal("bob", "support"))
    # The per-field counts follow count(): refused a filter on another field than the source,
    # unless the budget only monitors.
    has_notes = models.Filter(must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key="notes"))])
    if mode == "monitor":
        assert bob.count("hr", count_filter=has_notes).count == 0
    else:
        with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
            bob.count("hr", count_filter=has_notes)
    schema = _served(bob, "hr").payload_schema
    assert set(schema) == set(_schema())
    expected = {"department": 7, "salary": 4, "notes": 2} if mode == "monitor" else dict.fromkeys(_schema(), 0)
    assert {k: v.points for k, v in schema.items()} == expected  # before: 7, 4, 2 in both modes
    # Types and parameters stay (a client builds its filters from them).
    assert schema["notes"].params.stopwords.custom == ["initech", "layoff"]
    assert schema["salary"].data_type == models.PayloadSchemaType.INTEGER
    entry = audit_records(kit)[-1]
    if mode == "monitor":
        assert entry["monitor"] is True and entry["details"] == {"would_hide": ["payload_schema.points"]}
    else:
        assert entry["details"] == {"hidden": ["payload_schema.points"]} and "monitor" not in entry
    # The owner gets the counts; a non-reader gets no schema at all.
    assert {k: v.points for k, v in _served(alice, "hr").payload_schema.items()} == {"department": 7, "salary": 4,
                                                                                      "notes": 2}
    assert _served(bob, "emp").payload_schema == {}


def test_describe_collection_copies_and_leaves_the_answer_alone():
    raw = RawClient(":memory:")
    raw.create_collection("c", vectors_config=_VP, metadata={"lead": "alice"})
    info = raw.get_collection("c").model_copy(update={
        "payload_schema": _schema(), "update_queue": models.UpdateQueueInfo(length=5, deferred_points=2),
        "points_count": 9, "indexed_vectors_count": 8})
    before = info.model_dump()
    hidden = describe_collection(info, reader=False, budgeted=False)
    _assert_configuration_only(hidden)
    assert hidden.status == info.status and hidden.config.hnsw_config == info.config.hnsw_config
    budgeted = describe_collection(info, reader=True, budgeted=True)
    assert budgeted.points_count == 9 and budgeted.update_queue.length == 5
    assert all(v.points == 0 for v in budgeted.payload_schema.values())
    assert describe_collection(info, reader=True, budgeted=False) is info
    assert info.model_dump() == before
    # The projection is still a valid CollectionInfo (a caller may serialise or re-validate it).
    models.CollectionInfo.model_validate(hidden.model_dump())
    models.CollectionInfo.model_validate(budgeted.model_dump())


def test_get_optimizations_is_a_read(tmp_path):
    # Segments' and the queue's point counts: refused to a non-reader before anything is sent.
    # Before, it passed through (local mode then raised NotImplementedError, a server answered).
    kit, alice, bob = _clients(tmp_path)
    with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY") as err:
        bob.get_optimizations("emp")
    assert "may not read" in str(err.value)
    assert audit_records(kit)[-1]["verdict"] == "REFUSED_CROSS_BOUNDARY"
    # A reader's call is sent (local mode has no optimizer, a server answers).
    with pytest.raises(NotImplementedError):
        bob.get_optimizations("shared")
    ops = [(e["op"], e["verdict"]) for e in audit_records(kit)[-2:]]
    assert ops == [("get_optimizations", "ALLOW"), ("get_optimizations", "QDRANT_ERROR")]


def test_get_optimizations_is_a_read_in_async_too(tmp_path):
    kit = make_kit(tmp_path)

    async def run():
        alice = AsyncQdrantClient(":memory:", guard=kit.config({"emp": _PRIVATE}), principal=kit.principal("alice", "hr"))
        await alice.create_collection("emp", vectors_config=_VP)
        with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
            await alice.with_principal(kit.principal("bob", "support")).get_optimizations("emp")
        with pytest.raises(NotImplementedError):
            await alice.get_optimizations("emp")

    asyncio.run(run())


def test_unguarded_and_public_answers_are_unchanged(tmp_path):
    kit = make_kit(tmp_path)
    plain = QdrantClient(":memory:")
    plain.create_collection("c", vectors_config=_VP)
    plain.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)))])
    assert plain.get_collection("c").points_count == 1
    anon = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}))
    anon.create_collection("pub", vectors_config=_VP)
    anon.upsert("pub", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)))])
    assert anon.get_collection("pub").points_count == 1 and anon.get_collection("pub").segments_count >= 1


def _telemetry() -> models.DistributedTelemetryData:
    """A server's cluster telemetry for collections emp, shared and pub (one custom-keyed shard each)."""
    def coll(name, points):
        replica = models.DistributedReplicaTelemetry(peer_id=1, state=models.ReplicaState.ACTIVE, num_points=points,
                                                     num_vectors=points, payloads_size_bytes=100 * points)
        return models.DistributedCollectionTelemetry(
            id=name, shards=[models.DistributedShardTelemetry(id=0, key=f"{name}-tenant", replicas=[replica])],
            shard_transfers=[])
    return models.DistributedTelemetryData(collections={"emp": coll("emp", 3), "shared": coll("shared", 5),
                                                        "pub": coll("pub", 7)})


def test_cluster_telemetry_shows_shard_counts_of_readable_collections_only(tmp_path):
    # Each replica's num_points per shard key was answered for every collection to anyone ("telemetry
    # counters; no data"). Local mode has no telemetry: the guard's operation is driven with a
    # server's answer built of qdrant-client models.
    kit, alice, bob = _clients(tmp_path, pub={"class": "PUBLIC"})
    sent = []

    def invoke(call):
        sent.append(call.method)
        return _telemetry()

    shown = drive_sync(bob._guard.run("cluster_telemetry", {}), invoke).collections
    assert sent == ["cluster_telemetry"] and set(shown) == {"emp", "shared", "pub"}
    assert shown["emp"].shards is None and shown["emp"].shard_transfers is None  # bob may not read emp
    assert shown["shared"].shards[0].replicas[0].num_points == 5 and shown["pub"].shards[0].key == "pub-tenant"
    assert drive_sync(alice._guard.run("cluster_telemetry", {}), invoke).collections["emp"].shards[0].key == "emp-tenant"
    # The real call goes through the guard, audited (local mode then fails: it has no telemetry).
    with pytest.raises(NotImplementedError):
        bob.cluster_telemetry()
    assert [(e["op"], e["verdict"]) for e in audit_records(kit)[-2:]] == [("cluster_telemetry", "ALLOW"),
                                                                         ("cluster_telemetry", "QDRANT_ERROR")]
