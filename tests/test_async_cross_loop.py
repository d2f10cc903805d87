"""The async client's local-mode lock across event loops, and a waiter's prompt cancellation
(h-async4; items (a) and (c) of review 36's list).

(a) One AsyncQdrantClient used from two threads, each running its own event loop, had one lock
per loop: an operation on the second loop ran between two steps of one on the first, so between
an ``overwrite_payload``'s read of a receipt and its write (a new vector stored with the old one's
receipt), and a plain upload on the second loop was not refused there. The sync client's one
RLock serialises its threads; the async client now has one lock for every loop.
(c) A task cancelled (a timeout) while it waited to take the lock back after its embedder ran
kept waiting for the holder's step to end, which a stalled store can make as long as it likes.

Real qdrant-client local mode; ordering by events, bounds only against a hang.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, Callable

import numpy as np
import pytest
import qdrant_client

from guardkit import DIM, make_kit, models, offload_then_write, stored_receipt_reasons, unit
from qdrant_guard import AsyncQdrantClient, QdrantGuardError
from qdrant_guard.async_driver import TaskLock, drive_async
from qdrant_guard.audit import verify_audit_file
from qdrant_guard.hashing_embedder import HashingEmbedder
from qdrant_guard.pipeline import Call

HANG_S = 20  # only against a hang: every wait below ends on an event long before


def _wait(cond: Callable[[], bool]) -> None:
    end = time.monotonic() + HANG_S
    while not cond() and time.monotonic() < end:
        time.sleep(0.002)


def _waiters(owner: Any) -> int:
    # The lock's queue (h-async4's TaskLock); before it the lock was per loop and had none to see.
    lock = getattr(owner, "_alock", None)
    return len(getattr(lock, "_waiters", ()))


# -- (a) one client, two event loops ------------------------------------------------------------
def _across_loops(kit: Any, monkeypatch: Any, other: Callable[[Any, Any], str]) -> tuple[list[str], list[str]]:
    """An ``overwrite_payload`` on this thread's loop that rewrites whole payloads (a stored key
    holds ``"``), held between its read of point 1's receipt and its write until ``other`` (run in
    another thread) has ended or waits for the client's lock. Returns other's outcome and the
    verdicts of the stored point's receipts against its stored vector."""
    rng = np.random.default_rng(21)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True,
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}})
    outcome: list[str] = []
    read, other_done = threading.Event(), threading.Event()

    async def main() -> list[str]:
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(
            size=DIM, distance=models.Distance.COSINE))
        await owner.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={'a"b': 1, "k": "orig"})])
        store = owner._client
        real = store.retrieve

        async def retrieve(*a: Any, **kw: Any) -> Any:
            out = await real(*a, **kw)
            if read.is_set():  # a later call's read (the other thread's, after the overwrite)
                return out
            read.set()
            _wait(lambda: other_done.is_set() or _waiters(owner) > 0)  # blocks this loop only
            return out

        def run_other() -> None:
            read.wait(HANG_S)
            try:
                outcome.append(other(owner, np.random.default_rng(22)))
            except QdrantGuardError as exc:
                outcome.append(str(exc))
            finally:
                other_done.set()

        thread = threading.Thread(target=run_other, daemon=True)
        thread.start()
        monkeypatch.setattr(store, "retrieve", retrieve)
        try:
            await owner.overwrite_payload("pii", payload={"k": "new"}, points=[1])
        finally:
            monkeypatch.undo()
        await asyncio.to_thread(thread.join, HANG_S)  # it may wait for the lock this call held
        reasons = await stored_receipt_reasons(owner, "pii", 1)
        await owner.close()
        return reasons

    reasons = asyncio.run(main())
    return outcome, reasons


def _upsert_on_another_loop(owner: Any, rng: Any) -> str:
    asyncio.run(owner.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"k": "up"})]))
    return "upserted"


def _upload_on_another_loop(owner: Any, rng: Any) -> str:
    async def main() -> None:
        owner.upload_points("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"k": "up"})], wait=True)

    asyncio.run(main())
    return "uploaded"


def _upload_from_a_plain_thread(owner: Any, rng: Any) -> str:
    owner.upload_collection("pii", vectors=[unit(rng)], payload=[{"k": "up"}], ids=[1], wait=True)
    return "uploaded"


def test_an_upsert_on_a_second_event_loop_waits_for_an_overwrite_on_the_first(tmp_path, monkeypatch):
    outcome, reasons = _across_loops(make_kit(tmp_path), monkeypatch, _upsert_on_another_loop)
    assert outcome == ["upserted"]
    assert reasons == ["ok"]  # the upsert came after the overwrite: its vector has its own receipt


def test_an_upload_on_a_second_event_loop_during_an_overwrite_is_refused(tmp_path, monkeypatch):
    outcome, reasons = _across_loops(make_kit(tmp_path), monkeypatch, _upload_on_another_loop)
    assert len(outcome) == 1 and "another guarded operation" in outcome[0], outcome
    assert reasons == ["ok"]


def test_an_upload_from_a_thread_without_a_loop_waits_for_the_overwrite(tmp_path, monkeypatch):
    outcome, reasons = _across_loops(make_kit(tmp_path), monkeypatch, _upload_from_a_plain_thread)
    assert outcome == ["uploaded"]
    assert reasons == ["ok"]


def test_operations_of_two_event_loops_on_one_lock_never_overlap():
    """The driver with one TaskLock shared by 2 loops x 6 tasks: no two operations are ever
    between their first and last step at once; each task's nested (reentrant) take does not wait
    for itself."""
    lock = TaskLock()
    inside: list[int] = []
    overlaps: list[int] = []
    mu = threading.Lock()

    def op() -> Any:
        with mu:
            inside.append(1)
            if len(inside) > 1:
                overlaps.append(len(inside))
        for _ in range(3):
            yield Call("a", {})
            time.sleep(0.001)
        with mu:
            inside.pop()
        return 1

    async def invoke(call: Call) -> None:
        await lock.acquire()  # the holder's own task takes it again (an integration's nested call)
        lock.release()

    async def loop_main() -> list[int]:
        return await asyncio.gather(*(drive_async(op(), invoke, lock=lock) for _ in range(6)))

    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(asyncio.run(loop_main())), daemon=True)
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    assert results == [[1] * 6, [1] * 6] and overlaps == []
    assert lock.owner is None and not lock._waiters


def test_a_waiter_cancelled_as_the_lock_is_handed_to_it_passes_it_on():
    """Control of the hand-over: the first waiter is cancelled after the release gave it the lock
    but before it ran; the second still gets it, and the lock ends free."""
    lock = TaskLock()
    got: list[str] = []

    async def take(name: str) -> None:
        await lock.acquire()
        got.append(name)
        lock.release()

    async def main() -> None:
        await lock.acquire()
        first = asyncio.create_task(take("first"))
        second = asyncio.create_task(take("second"))
        await asyncio.sleep(0)  # both queue
        lock.release()  # handed to first
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await second

    asyncio.run(main())
    assert got == ["second"] and lock.owner is None and not lock._waiters


# -- (c) a waiter's cancellation does not wait for the holder ------------------------------------
def test_a_write_cancelled_while_waiting_behind_a_stalled_step_ends_before_that_step(tmp_path):
    """bob's write has run its embedder and waits for the client's lock, held by alice's upsert
    whose audit append is stalled (a step in a worker thread: an audit file under another's
    flock, a budget store that does not answer). bob's cancellation must end his call while the
    stall lasts, with nothing of it decided, audited or written; the stall ends when it has."""
    kit = make_kit(tmp_path)
    base = HashingEmbedder(DIM)
    embedding, embedded, go = threading.Event(), threading.Event(), threading.Event()

    def embed(texts: list[str]) -> Any:
        embedding.set()
        go.wait(HANG_S)
        embedded.set()
        return base(texts)

    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                              "text_field": "text", "intent": {"enabled": False}}})
    order: list[str] = []
    armed, stalled, bob_done = threading.Event(), threading.Event(), threading.Event()

    async def main() -> int:
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=embed)
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        audit = owner.guard.audit
        real_append = audit.append

        def append(rec: Any, *a: Any, **kw: Any) -> Any:
            if armed.is_set():
                armed.clear()
                stalled.set()
                bob_done.wait(HANG_S)
                order.append("the holder's step ended")
            return real_append(rec, *a, **kw)

        audit.append = append
        bob = owner.with_principal(kit.principal("bob", "support"))
        write = asyncio.create_task(bob.upsert("pii", [models.PointStruct(
            id=7, vector=models.Document(text="a note", model="m"), payload={"text": "a note"})]))

        def ended(_: Any) -> None:
            order.append("the cancelled call ended")
            bob_done.set()

        write.add_done_callback(ended)
        await asyncio.to_thread(embedding.wait, HANG_S)  # bob is at his embedder; the lock is free
        armed.set()
        holder = asyncio.create_task(owner.upsert("pii", [models.PointStruct(
            id=1, vector=unit(np.random.default_rng(3)), payload={"text": "x"})]))
        await asyncio.to_thread(stalled.wait, HANG_S)  # alice holds the lock, her step stalled
        go.set()
        await asyncio.to_thread(embedded.wait, HANG_S)
        await asyncio.sleep(0.1)  # bob waits for the lock (were he still at his embedder: the same)
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        await holder
        ids = sorted(p.id for p in (await qdrant_client.AsyncQdrantClient.scroll(owner, "pii", limit=10))[0])
        await owner.close()
        return ids

    assert asyncio.run(main()) == [1]  # alice's point; bob's cancelled write was not sent
    assert order == ["the cancelled call ended", "the holder's step ended"]
    records = [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text().splitlines()]
    assert not [r for r in records if r["op"] == "upsert" and "bob" in str(r.get("principal"))]
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


def test_an_operation_cancelled_while_retaking_the_lock_unwinds_at_once_without_it():
    """Driver level: after its Offload the operation waits for the lock, which another task holds
    and keeps until the cancelled call has ended; the cancellation is thrown in at the Offload and
    no request is made."""
    seen: list[str] = []
    invoked: list[str] = []
    in_offload, gate = threading.Event(), threading.Event()

    def offload() -> None:
        in_offload.set()
        gate.wait(HANG_S)

    async def main() -> bool:
        lock = TaskLock()
        task = asyncio.create_task(drive_async(*offload_then_write(offload, seen, invoked), lock=lock))
        await asyncio.to_thread(in_offload.wait, HANG_S)
        await lock.acquire()  # free while the Offload runs
        gate.set()
        await asyncio.sleep(0.1)  # the operation waits for the lock (were it still at its Offload: the same)
        task.cancel()
        await asyncio.wait({task}, timeout=HANG_S)
        ended_first = task.done()
        lock.release()
        with pytest.raises(asyncio.CancelledError):
            await task
        return ended_first

    assert asyncio.run(main())
    assert seen == ["offload cancelled"] and invoked == []
