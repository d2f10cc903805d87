"""The extraction budget's cached source sizes (the eleventh review's open points): a write
through any guard of this process drops the sizes every guard on the same store cached; a count
that a write overlapped is never kept, wherever the thread switch falls; a write refused before it
was sent keeps them, one that failed once sent is taken as unwaited; stale sizes are swept out
without a write. Real local mode, or a loopback port where nothing listens for a server."""
from __future__ import annotations

import os
import socket
import sys
import time
from types import SimpleNamespace

import pytest
from qdrant_client import QdrantClient as RawClient

from tests.guardkit import PAYROLL_DIVERSITY, hr_policy, make_kit, models, payroll
from qdrant_guard import AsyncQdrantClient, QdrantClient, QdrantGuardError
from qdrant_guard.reads import ReadOps

PAYROLL = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value="payroll"))])


@pytest.fixture
def refusing_port():
    """A loopback port where nothing listens (bound, never listening): every request to it is
    refused at once, after qdrant-client was handed the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def _count_answered(guard, size, source="payroll"):
    """``source_size`` of ``source`` in hr, with Qdrant's count answered ``size`` (no server
    here): what a budgeted read counts, and keeps unless a write intervenes."""
    op = guard.source_size("hr", guard.policy("hr"), source)
    assert next(op).method == "count"
    with pytest.raises(StopIteration):
        op.send(SimpleNamespace(count=size))


def _server_clients(kit, port, other_port):
    cfg = kit.config({"hr": hr_policy(PAYROLL_DIVERSITY)})
    bob = kit.principal("bob", "support")
    owner = QdrantClient(url=f"http://127.0.0.1:{port}", guard=cfg, principal=kit.principal("alice", "hr"),
                         check_compatibility=False)
    # The same server under the other spellings qdrant-client accepts, sync and async, REST and gRPC.
    readers = [QdrantClient(host="127.0.0.1", port=port, guard=cfg, principal=bob, check_compatibility=False),
               AsyncQdrantClient(url=f"http://127.0.0.1:{port}", prefer_grpc=True, guard=cfg, principal=bob,
                                 check_compatibility=False)]
    readers.append(readers[0].with_principal(kit.principal("carol", "support")))
    elsewhere = QdrantClient(url=f"http://127.0.0.1:{other_port}", guard=cfg, principal=bob, check_compatibility=False)
    return owner, readers, elsewhere


def test_a_write_through_one_guard_drops_the_sizes_every_guard_on_that_server_cached(tmp_path, refusing_port):
    # Before, each guard dropped only its own (and its views') sizes: a second client built with
    # guard= in the same process kept the owner's size of before a delete for 30 s.
    kit = make_kit(tmp_path)
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        owner, readers, elsewhere = _server_clients(kit, refusing_port, other.getsockname()[1])
        for client in [*readers[:2], elsewhere]:
            _count_answered(client.guard, 10)
        assert [c.guard.cached_source_size("hr", "payroll") for c in [*readers, elsewhere]] == [10] * 4
        # Refused by the socket; a server could have applied it and lost the answer, so the
        # write counts as sent.
        with pytest.raises(Exception, match="Connection refused"):
            owner.delete("hr", points_selector=models.PointIdsList(points=[1, 2, 3]))
        assert [c.guard.cached_source_size("hr", "payroll") for c in readers] == [None] * len(readers)
        assert elsewhere.guard.cached_source_size("hr", "payroll") == 10  # another server
        # An unwaited write's horizon holds for every guard on the server: no count begun within
        # SOURCE_SIZE_TTL_S of it is kept, whoever counts.
        with pytest.raises(Exception, match="Connection refused"):
            owner.delete("hr", points_selector=models.PointIdsList(points=[4]), wait=False)
        for client in readers:
            _count_answered(client.guard, 7)
        assert [c.guard.cached_source_size("hr", "payroll") for c in readers] == [None] * len(readers)


def test_what_makes_two_clients_one_store(tmp_path, refusing_port):
    from qdrant_guard.pipeline import store_identity

    raw = [RawClient(url=f"http://127.0.0.1:{refusing_port}", check_compatibility=False),
           RawClient(host="127.0.0.1", port=refusing_port, prefer_grpc=True, check_compatibility=False)]
    assert store_identity(raw[0]._client) == store_identity(raw[1]._client) == (
        "server", f"http://127.0.0.1:{refusing_port}")
    assert store_identity(RawClient(url=f"http://127.0.0.1:{refusing_port}", prefix="q",
                                    check_compatibility=False)._client) != store_identity(raw[0]._client)
    assert store_identity(RawClient(":memory:")._client) is None  # a store of its own
    # A local directory, under any of its names. qdrant-client opens it for one client at a time,
    # in this process too, so no two guards read it at once.
    (tmp_path / "db").mkdir()
    os.symlink(tmp_path / "db", tmp_path / "link")
    first = RawClient(path=str(tmp_path / "link"))
    with pytest.raises(RuntimeError, match="already accessed by another instance"):
        RawClient(path=str(tmp_path / "db"))
    seen = store_identity(first._client)
    first.close()
    assert store_identity(RawClient(path=str(tmp_path / "db"))._client) == seen == ("local", str((tmp_path / "db").resolve()))


def test_separate_memory_stores_keep_each_others_sizes(tmp_path):
    kit = make_kit(tmp_path)
    (_, bob), (other_owner, _) = payroll(kit), payroll(kit)
    bob.scroll("hr", scroll_filter=PAYROLL, limit=1)
    assert bob.guard.cached_source_size("hr", "payroll") == 10
    other_owner.delete("hr", points_selector=models.PointIdsList(points=[1]))
    assert bob.guard.cached_source_size("hr", "payroll") == 10


def _write_at_opcode(k, write):
    """A trace function that runs ``write()`` once, at the ``k``-th bytecode that
    ReadOps.source_size runs after its count returns: where a thread switch would let another
    thread's write end. Returns (tracer, state)."""
    code = ReadOps.source_size.__code__
    state = {"resumes": {}, "ops": 0, "fired": False}

    def local(frame, event, arg):
        if event == "opcode" and state["resumes"].get(id(frame)) == 2 and not state["fired"]:
            if state["ops"] == k:
                state["fired"] = True
                write()  # tracing is off inside a trace function: the write runs untraced
            state["ops"] += 1
        return local

    def tracer(frame, event, arg):
        if frame.f_code is not code:
            return None
        if event == "call":  # the first call starts the generator; the second resumes it with the count
            state["resumes"][id(frame)] = state["resumes"].get(id(frame), 0) + 1
        frame.f_trace_opcodes = True
        return local

    return tracer, state


def test_a_count_a_write_overlapped_is_never_kept_wherever_the_thread_switch_falls(tmp_path):
    # The count of 10 payroll points returns, then at each bytecode of source_size in turn the
    # owner retags 5 of them and the write ends (the drop of the sizes included). Before, a write
    # ending between the test of the drop time and the store left the 10 cached for 30 s.
    owner, bob = payroll(make_kit(tmp_path))
    guard = bob.guard
    budget = guard.extraction_budget(guard.policy("hr"))
    fired = 0
    for k in range(1000):
        owner.set_payload("hr", payload={"source": "payroll"}, points=list(range(5)))
        budget.store.reset()  # no exclusion to size first: the read's one count is apply_budget's
        tracer, state = _write_at_opcode(k, lambda: owner.set_payload("hr", payload={"source": "archive"},
                                                                     points=list(range(5))))
        sys.settrace(tracer)
        try:
            bob.scroll("hr", scroll_filter=PAYROLL, limit=1)
        finally:
            sys.settrace(None)
        if not state["fired"]:
            break
        fired += 1
        assert guard.cached_source_size("hr", "payroll") in (None, 5), f"stale size kept (write at bytecode {k})"
    assert fired > 10  # every bytecode from the count's return to its end was tried
    assert guard.cached_source_size("hr", "payroll") == 10  # the last read, with no write meanwhile, kept its count


def test_a_write_refused_before_it_was_sent_keeps_the_sizes(tmp_path):
    # A write the guard refuses never reaches Qdrant and changes no source; it used to drop the
    # sizes all the same, so a principal without write access could make every budgeted read
    # count again (and, now that writes reach every guard on the store, all of theirs).
    owner, bob = payroll(make_kit(tmp_path))
    bob.scroll("hr", scroll_filter=PAYROLL, limit=1)
    assert owner.guard.cached_source_size("hr", "payroll") == 10
    with pytest.raises(QdrantGuardError):  # support reads hr and may not write it
        bob.delete("hr", points_selector=models.PointIdsList(points=[1]))
    with pytest.raises(QdrantGuardError):
        bob.set_payload("hr", payload={"source": "archive"}, points=[1])
    with pytest.raises(ValueError):  # not an id Qdrant accepts: refused before anything is sent
        owner.upsert("hr", [models.PointStruct(id="not-an-id", vector=[0.25] * 16, payload={"source": "payroll"})])
    assert owner.guard.cached_source_size("hr", "payroll") == 10



def test_a_write_that_failed_once_sent_is_taken_as_unwaited(tmp_path):
    # A write that reached qdrant-client and failed there may have changed the store, and a
    # server may still apply it (a request the client timed out, an async write cancelled in
    # flight): the sizes go, and, as after a wait=False write, no count begun within
    # SOURCE_SIZE_TTL_S is kept. Before, the next read's count was kept for 30 s. Local mode has
    # no shards and fails the call.
    owner, bob = payroll(make_kit(tmp_path))
    bob.scroll("hr", scroll_filter=PAYROLL, limit=1)
    with pytest.raises(NotImplementedError):
        owner.delete_shard_key("hr", "tenant-a")
    assert owner.guard.cached_source_size("hr", "payroll") is None
    bob.scroll("hr", scroll_filter=PAYROLL, limit=1)
    assert owner.guard.cached_source_size("hr", "payroll") is None


def test_stale_sizes_are_swept_without_a_write(tmp_path, monkeypatch):
    # In a process that only reads, no write replaces the cache: every source ever counted stayed
    # in it, and each budgeted read's exclusion walked them all (its cap-0 sources). Now the
    # stale ones go, once per doubling, and the fresh ones stay.
    _, bob = payroll(make_kit(tmp_path))
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    for n in range(3000):  # one source counted every 0.1 s: 300 within any 30 s
        _count_answered(bob.guard, 4, f"s{n}")
        clock[0] += 0.1
        assert len(bob.guard.shared["source_sizes"]) <= 1024  # budgetops._SIZES_SWEPT_FROM
    assert all(bob.guard.cached_source_size("hr", f"s{n}") == 4 for n in range(2701, 3000))
