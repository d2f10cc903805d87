"""Twenty-sixth adversarial review (2026-12-05, branch h-rev28): findings on cc33247..3015cc5
(collection metadata visibility, utility record scope, glued_repetition and its prefilter, the
detector's new forms and the '+' fall-through, the argument-type errors), each with the test that
failed on the code before its fix, or that pins what is left open as docs/security-testing.md
and the policy docstring describe it.

Real qdrant-client local mode, real keys; no mocks. Local mode has no cluster information and no
snapshots: those guard operations are driven with a server's answer built of qdrant-client
models (as tests/test_collection_metadata_visibility.py drives cluster_telemetry), and the real
local call is shown going through the guard.
"""
from __future__ import annotations

import asyncio
import random

import pytest

from qdrant_guard import AsyncQdrantClient
from qdrant_guard.pipeline import drive_sync
from qdrant_guard.scan import scan_query
from tests.guardkit import QdrantClient, audit_records, make_kit, models
from tests.oracle import both

NATIVE, PYTHON = both("scan")

_VP = models.VectorParams(size=4, distance=models.Distance.COSINE)
# No owner: the writers administer the collection (pipeline._admin_boundaries), and support is a
# writer that may not read it.
_OWNERLESS = {"class": "PII", "readers": ["hr"], "writers": ["support"], "intent": {"enabled": False}}


# --- 1. Counts and sizes in administration answers --------------------------------------------
# f62ea90 withholds get_collection's point counts from a principal who may not read the
# collection. An administrator need not read it: without an owner, the writers administer
# (create, index, snapshot it). Such a writer got the point count of every local shard from
# collection_cluster_info and the collection's storage from each snapshot's size (list_snapshots,
# create_snapshot, their shard forms), and all collections' storage from create_full_snapshot's
# answer (whose list_full_snapshots form aa55e11 had already hidden).
def _cluster_info() -> models.CollectionClusterInfo:
    return models.CollectionClusterInfo(
        peer_id=1, shard_count=2, remote_shards=[], shard_transfers=[],
        local_shards=[models.LocalShardInfo(shard_id=0, points_count=5, state=models.ReplicaState.ACTIVE),
                      models.LocalShardInfo(shard_id=1, points_count=7, state=models.ReplicaState.ACTIVE)])


def _snapshot() -> models.SnapshotDescription:
    return models.SnapshotDescription(name="c-1.snapshot", creation_time="2026-12-05T20:00:00",
                                      size=987_654, checksum="cd" * 32)


_ADMIN_CALLS = {
    "collection_cluster_info": ({"collection_name": "c"}, _cluster_info),
    "list_snapshots": ({"collection_name": "c"}, lambda: [_snapshot()]),
    "create_snapshot": ({"collection_name": "c"}, _snapshot),
    "list_shard_snapshots": ({"collection_name": "c", "shard_id": 0}, lambda: [_snapshot()]),
    "create_shard_snapshot": ({"collection_name": "c", "shard_id": 0}, _snapshot),
}


def _sizes(answer) -> list[int]:
    if isinstance(answer, models.CollectionClusterInfo):
        return [s.points_count for s in answer.local_shards]
    return [s.size for s in (answer if isinstance(answer, list) else [answer])]


def _ownerless(tmp_path):
    kit = make_kit(tmp_path)
    hr_only = {**_OWNERLESS, "writers": ["support", "hr"]}
    writer = QdrantClient(":memory:", guard=kit.config({"c": _OWNERLESS, "d": hr_only}),
                          principal=kit.principal("ivan", "support"))
    writer.create_collection("c", vectors_config=_VP)
    writer.upsert("c", [models.PointStruct(id=i, vector=[1.0, 0.0, 0.0, i + 1.0]) for i in range(5)])
    return kit, writer


@pytest.mark.parametrize("method", sorted(_ADMIN_CALLS))
def test_an_administrator_who_may_not_read_gets_no_counts_or_sizes(tmp_path, method):
    kit, writer = _ownerless(tmp_path)
    assert writer.get_collection("c").points_count is None  # f62ea90: withheld here
    args, answer = _ADMIN_CALLS[method]
    sent = []

    def invoke(call):
        sent.append(call.method)
        return answer()

    theirs = drive_sync(writer._guard.run(method, dict(args)), invoke)
    assert sent == [method]
    assert set(_sizes(theirs)) == {0}
    if isinstance(theirs, models.CollectionClusterInfo):  # the topology stays
        assert [s.shard_id for s in theirs.local_shards] == [0, 1] and theirs.shard_count == 2
    else:
        assert all(s.name == "c-1.snapshot" and s.checksum == "cd" * 32 for s in _sizes_of(theirs))
    entry = audit_records(kit)[-1]
    assert (entry["op"], entry["verdict"]) == (method, "ALLOW")
    assert entry["details"]["hidden"] == ["local_shards.points_count" if method == "collection_cluster_info"
                                          else "size"]
    # A reader who administers (hr, writer of d) gets the answer as the server gave it.
    hr = writer.with_principal(kit.principal("alice", "hr"))
    mine = drive_sync(hr._guard.run(method, {**args, "collection_name": "d"}), lambda call: answer())
    assert set(_sizes(mine)) - {0}
    assert "hidden" not in audit_records(kit)[-1]["details"]


def _sizes_of(answer):
    return answer if isinstance(answer, list) else [answer]


def test_an_administrator_who_may_not_read_lists_snapshots_through_the_guard(tmp_path):
    # The real local calls (local mode lists no snapshots), sync and async, audited with what went.
    kit, writer = _ownerless(tmp_path)
    assert writer.list_snapshots("c") == []
    assert audit_records(kit)[-1]["details"] == {"hidden": ["size"]}

    async def run():
        client = AsyncQdrantClient(":memory:", guard=writer._guard.config, principal=kit.principal("ivan", "support"))
        await client.create_collection("c", vectors_config=_VP)
        return await client.list_snapshots("c")

    assert asyncio.run(run()) == []
    assert audit_records(kit)[-1]["details"] == {"hidden": ["size"]}


def test_a_full_snapshot_made_by_an_administrator_who_may_not_read_has_no_size(tmp_path):
    kit = make_kit(tmp_path)
    writer = QdrantClient(":memory:", guard=kit.config({"c": _OWNERLESS}), principal=kit.principal("ivan", "support"))
    writer.create_collection("c", vectors_config=_VP)
    sent = []

    def invoke(call):
        sent.append(call.method)
        if call.method == "get_collections":
            return models.CollectionsResponse(collections=[models.CollectionDescription(name="c")])
        return _snapshot()

    snap = drive_sync(writer._guard.run("create_full_snapshot", {}), invoke)
    assert sent == ["get_collections", "create_full_snapshot"]
    assert snap.size == 0 and snap.name == "c-1.snapshot"
    assert audit_records(kit)[-1]["details"] == {"collections": ["c"], "hidden": ["size"]}
    # An administrator who reads every collection gets the size.
    both_read = {**_OWNERLESS, "readers": ["hr", "support"]}
    reader = QdrantClient(":memory:", guard=kit.config({"c": both_read}), principal=kit.principal("ivan", "support"))
    assert drive_sync(reader._guard.run("create_full_snapshot", {}), invoke).size == 987_654
    assert "hidden" not in audit_records(kit)[-1]["details"]
    # hr reads c but does not administer it (support does): refused before anything is sent.
    hr = writer.with_principal(kit.principal("alice", "hr"))
    with pytest.raises(Exception, match="may not administer"):
        drive_sync(hr._guard.run("create_full_snapshot", {}), invoke)
