"""Twelfth review (docs/security-testing.md): the source-size cache of the extraction budget after
its per-store epochs. Real local mode, or a loopback port where nothing listens for a server."""
from __future__ import annotations

import socket

import pytest

from tests.guardkit import PAYROLL_DIVERSITY, hr_policy, make_kit, models, payroll
from qdrant_guard import QdrantClient

PAYROLL = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value="payroll"))])


@pytest.fixture
def refusing_port():
    """A loopback port where nothing listens (bound, never listening)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.mark.parametrize("operation", [
    models.DropShardingKeyOperation(drop_sharding_key=models.DropShardingKey(shard_key="tenant-a")),
    models.ReplicatePointsOperation(replicate_points=models.ReplicatePoints(
        filter=PAYROLL, from_shard_key="tenant-a", to_shard_key="tenant-b")),
])
def test_a_cluster_update_that_drops_or_copies_points_drops_the_sizes(tmp_path, operation):
    # cluster_collection_update's DropShardingKey deletes the points of the shard key (as
    # delete_shard_key does, which dropped the sizes) and ReplicatePoints copies points into
    # another: either changes a source's size. Before, it kept them, so after the owner dropped a
    # shard of payroll points a reader's cap stayed a share of the size of before for 30 s. Local
    # mode has no cluster and fails the call once it is sent.
    owner, bob = payroll(make_kit(tmp_path))
    bob.scroll("hr", scroll_filter=PAYROLL, limit=1)
    assert owner.guard.cached_source_size("hr", "payroll") == 10
    with pytest.raises(NotImplementedError):
        owner.cluster_collection_update("hr", operation)
    assert owner.guard.cached_source_size("hr", "payroll") is None


def test_a_cluster_update_on_a_server_drops_every_guards_sizes(tmp_path, refusing_port):
    kit = make_kit(tmp_path)
    cfg = kit.config({"hr": hr_policy(PAYROLL_DIVERSITY)})
    url = f"http://127.0.0.1:{refusing_port}"
    owner = QdrantClient(url=url, guard=cfg, principal=kit.principal("alice", "hr"), check_compatibility=False)
    reader = QdrantClient(url=url, guard=cfg, principal=kit.principal("bob", "support"), check_compatibility=False)
    _count_answered(reader.guard, 10)
    assert reader.guard.cached_source_size("hr", "payroll") == 10
    with pytest.raises(Exception, match="Connection refused"):
        owner.cluster_collection_update("hr", models.DropShardingKeyOperation(
            drop_sharding_key=models.DropShardingKey(shard_key="tenant-a")))
    assert reader.guard.cached_source_size("hr", "payroll") is None


def test_a_server_under_a_trailing_slash_or_another_case_is_one_store(tmp_path, refusing_port):
    # qdrant-client keeps url="http://h:p/" and host="H" as written in its REST address, and
    # each spelling was a store of its own: the reader kept the owner's size of before a delete
    # for 30 s, as another process would.
    kit = make_kit(tmp_path)
    cfg = kit.config({"hr": hr_policy(PAYROLL_DIVERSITY)})
    owner = QdrantClient(url=f"http://127.0.0.1:{refusing_port}/", guard=cfg, principal=kit.principal("alice", "hr"),
                         check_compatibility=False)
    bob = kit.principal("bob", "support")
    readers = [QdrantClient(url=f"HTTP://127.0.0.1:{refusing_port}", guard=cfg, principal=bob, check_compatibility=False),
               QdrantClient(host="LocalHost", port=refusing_port, guard=cfg, principal=bob, check_compatibility=False),
               QdrantClient(url=f"http://localhost:{refusing_port}//", guard=cfg, principal=bob, check_compatibility=False)]
    for reader in readers:
        _count_answered(reader.guard, 10)
    with pytest.raises(Exception, match="Connection refused"):
        owner.delete("hr", points_selector=models.PointIdsList(points=[1, 2, 3]))
    assert readers[0].guard.cached_source_size("hr", "payroll") is None
    # localhost is 127.0.0.1 only by name resolution: another store, where the 30 s apply; its
    # spellings are one (checked on the epochs: no request to a name that resolution decides).
    assert [r.guard.cached_source_size("hr", "payroll") for r in readers[1:]] == [10, 10]
    other_owner = QdrantClient(url=f"http://LOCALHOST:{refusing_port}", guard=cfg, principal=kit.principal("alice", "hr"),
                               check_compatibility=False)
    epochs = {id(c.guard.shared["size_epoch"]) for c in (other_owner, *readers[1:])}
    assert len(epochs) == 1 and id(owner.guard.shared["size_epoch"]) not in epochs


def _count_answered(guard, size):
    op = guard.source_size("hr", guard.policy("hr"), "payroll")
    assert next(op).method == "count"
    with pytest.raises(StopIteration):
        op.send(models.CountResult(count=size))


def test_a_write_collected_while_the_epoch_is_locked_does_not_deadlock(tmp_path, refusing_port, monkeypatch):
    # An abandoned operation that sent its write drops the sizes when it is finalised, and an
    # abandoned async write in a reference cycle is finalised by the cyclic collector, which runs
    # in whatever thread allocates: inside SourceSizeEpoch.wrote() or join() too, whose lock was
    # not re-entrant, so that thread, and then every write and client construction on the store,
    # blocked for good. Here the collector runs where wrote() reads the clock under its lock.
    import gc
    import threading
    import time
    from types import SimpleNamespace

    from qdrant_guard import perstore

    kit = make_kit(tmp_path)
    cfg = kit.config({"hr": hr_policy(PAYROLL_DIVERSITY)})
    owner = QdrantClient(url=f"http://127.0.0.1:{refusing_port}", guard=cfg, principal=kit.principal("alice", "hr"),
                         check_compatibility=False)
    reader = QdrantClient(url=f"http://127.0.0.1:{refusing_port}", guard=cfg, principal=kit.principal("bob", "support"),
                          check_compatibility=False)
    _count_answered(reader.guard, 10)
    epoch = owner.guard.shared["size_epoch"]
    collected = []

    def clock():
        if not collected:  # once: the finalised write reads the clock too
            collected.append(None)
            collected[0] = gc.collect()
        return time.monotonic()

    gc.disable()
    try:
        op = owner.guard.run("delete", {"collection_name": "hr", "points_selector": models.PointIdsList(points=[1]),
                                        "wait": True, "ordering": None, "shard_key_selector": None})
        assert next(op).method == "delete"  # handed over: once finalised, it drops the sizes
        cycle = [op]
        cycle.append(cycle)
        del op, cycle
        monkeypatch.setattr(perstore, "time", SimpleNamespace(monotonic=clock, time=time.time))
        done = threading.Event()

        def write_ends():
            epoch.wrote(unwaited=True)
            done.set()

        worker = threading.Thread(target=write_ends, daemon=True)
        worker.start()
        # No timing decides the outcome: the thread ends at once or never; the bound only stops
        # a deadlock from hanging the suite.
        worker.join(60)
    finally:
        gc.enable()
    assert done.is_set(), "the write's thread deadlocked on the epoch's lock"
    assert collected[0] > 0  # the abandoned write was collected under the lock
    assert reader.guard.cached_source_size("hr", "payroll") is None
