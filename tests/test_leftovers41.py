"""Leftovers closed on h-left5 (2026-12-06).

(a) A ``batch_update_points`` operation whose filter local mode cannot evaluate (a key that is no
JSON path, a ``min_should`` count below 1) failed in local mode after the operations before it had
been applied: the batch was half applied. The guard now refuses it before anything is sent, by
local mode's own rule.
(b) The async client's cross-loop TaskLock: (1) tasks queued behind a task the lock was handed to
on a loop since closed waited for the next acquire; (2) a task holding the lock on a loop since
closed kept it; (3) an upload from a thread without a loop, started by the embedder of a guarded
call nested in another's Qdrant request (its task still holding the lock), waited for good.

Real qdrant-client local mode and real event loops in threads; ordering by events, bounds only
against a hang.
"""
from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
from typing import Any, Callable

import numpy as np
import pytest

from guardkit import DIM, make_kit, models, pii_writer, snapshot, unit
from qdrant_guard import AsyncQdrantClient, QdrantClient, QdrantGuardError, UnsupportedWriteError
from qdrant_guard.async_lock import TaskLock
from qdrant_guard.hashing_embedder import HashingEmbedder

M = models
HANG_S = 20  # only against a hang


def _wait(cond: Callable[[], bool], bound: float = HANG_S) -> bool:
    end = time.monotonic() + bound
    while not cond() and time.monotonic() < end:
        time.sleep(0.002)
    return cond()


# -- (a) a batch operation whose filter local mode cannot evaluate ------------------------------


@pytest.fixture()
def pii(tmp_path):
    kit = make_kit(tmp_path)
    owner, bob = pii_writer(kit)
    rng = np.random.default_rng(41)
    bob.upsert("pii", [M.PointStruct(id=i, vector=unit(rng), payload={"k": i}) for i in (1, 2, 3)])
    return kit, owner, bob


def _match(key: str) -> M.FieldCondition:
    return M.FieldCondition(key=key, match=M.MatchValue(value=1))


_BAD = {
    "field-key": (M.Filter(must=[_match("a..b")]), "a..b"),
    "is-empty-key": (M.Filter(must=[M.IsEmptyCondition(is_empty=M.PayloadField(key="x y"))]), "x y"),
    "is-null-key": (M.Filter(must_not=[M.IsNullCondition(is_null=M.PayloadField(key="t."))]), "t."),
    "should-key": (M.Filter(should=[_match("k"), _match("[0]")]), "[0]"),
    "nested-key": (M.Filter(must=[M.NestedCondition(nested=M.Nested(key="a b", filter=M.Filter(
        must=[_match("k")])))]), "a b"),
    "key-inside-nested": (M.Filter(must=[M.NestedCondition(nested=M.Nested(key="people", filter=M.Filter(
        must=[_match("first name")])))]), "first name"),
    "inside-sub-filter": (M.Filter(must=[M.Filter(min_should=M.MinShould(
        conditions=[_match("k"), _match('"unclosed')], min_count=1))]), '"unclosed'),
    "min-count-0": (M.Filter(min_should=M.MinShould(conditions=[_match("k")], min_count=0)), "min_count"),
}


def _later_ops(flt: M.Filter) -> dict[str, Any]:
    return {
        "delete": M.DeleteOperation(delete=M.FilterSelector(filter=flt)),
        "set_payload": M.SetPayloadOperation(set_payload=M.SetPayload(payload={"z": 1}, filter=flt)),
        "delete_payload": M.DeletePayloadOperation(delete_payload=M.DeletePayload(keys=["k"], filter=flt)),
    }


@pytest.mark.parametrize("later", ["delete", "set_payload", "delete_payload"])
@pytest.mark.parametrize("bad", sorted(_BAD))
def test_a_later_batch_operation_with_a_filter_local_mode_cannot_evaluate_is_refused_beforehand(pii, bad, later):
    # Before: local mode set point 1's payload, then raised ValueError("Invalid path") (or the
    # min_count one) at the later operation, the batch half applied.
    kit, owner, bob = pii
    flt, named = _BAD[bad]
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError) as ei:
        bob.batch_update_points("pii", [
            M.SetPayloadOperation(set_payload=M.SetPayload(payload={"t": "first"}, points=[1])),
            _later_ops(flt)[later],
        ])
    msg = str(ei.value)
    assert "update_operations[1]" in msg and named in msg, msg
    assert "Nothing was written" in msg
    assert snapshot(owner, "pii") == before
    records = [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text().splitlines()]
    assert records[-1]["verdict"] == "UNSUPPORTED_WRITE" and records[-1]["op"] == "batch_update_points"


def test_the_refusal_says_how_to_write_the_key(pii):
    _, _, bob = pii
    with pytest.raises(UnsupportedWriteError, match=r"'first name'.*quote.*\"first name\""):
        bob.batch_update_points("pii", [
            M.SetPayloadOperation(set_payload=M.SetPayload(payload={"t": "first"}, points=[1])),
            M.DeleteOperation(delete=M.FilterSelector(filter=M.Filter(must=[_match("first name")]))),
        ])


def test_the_same_keys_quoted_and_valid_paths_still_run(pii):
    _, owner, bob = pii
    bob.set_payload("pii", payload={"first name": 1, "people": [{"k": 2}]}, points=[2])
    bob.batch_update_points("pii", [
        M.SetPayloadOperation(set_payload=M.SetPayload(payload={"t": "first"}, points=[1])),
        M.DeleteOperation(delete=M.FilterSelector(filter=M.Filter(must=[_match('"first name"')]))),
        M.SetPayloadOperation(set_payload=M.SetPayload(payload={"n": 1}, filter=M.Filter(must=[
            M.NestedCondition(nested=M.Nested(key="people[]", filter=M.Filter(must=[
                M.FieldCondition(key="k", match=M.MatchValue(value=9))]))),
            M.IsEmptyCondition(is_empty=M.PayloadField(key="people[0].k")),
        ], min_should=M.MinShould(conditions=[_match("k")], min_count=1)))),
    ])
    got = {p.id: p.payload for p in owner.scroll("pii", limit=10)[0]}
    assert sorted(got) == [1, 3] and got[1]["t"] == "first"


def test_a_public_collection_keeps_qdrant_clients_behaviour(tmp_path):
    kit = make_kit(tmp_path)
    client = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}),
                          principal=kit.principal("alice", "hr"))
    client.create_collection("pub", vectors_config=M.VectorParams(size=DIM, distance=M.Distance.COSINE))
    client.upsert("pub", [M.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"k": 1})])
    with pytest.raises(ValueError, match="Invalid path"):
        client.batch_update_points("pub", [
            M.SetPayloadOperation(set_payload=M.SetPayload(payload={"t": "first"}, points=[1])),
            M.DeleteOperation(delete=M.FilterSelector(filter=M.Filter(must=[_match("a..b")]))),
        ])


# -- (b) the async client's cross-loop lock -----------------------------------------------------


def _hold_on_loop(lock: TaskLock) -> tuple[threading.Event, threading.Thread]:
    held, let_go = threading.Event(), threading.Event()

    async def holder() -> None:
        await lock.acquire()
        held.set()
        await asyncio.to_thread(let_go.wait, HANG_S)
        lock.release()

    t = threading.Thread(target=asyncio.run, args=(holder(),), daemon=True)
    t.start()
    assert held.wait(HANG_S)
    return let_go, t


def _queue_on_loop(lock: TaskLock, bound: float = HANG_S) -> tuple[threading.Event, threading.Thread]:
    """A task on a fresh loop in a thread that queues for ``lock``; the event is set once it has it."""
    got = threading.Event()

    async def taker() -> None:
        await asyncio.wait_for(lock.acquire(), bound)
        got.set()
        lock.release()

    t = threading.Thread(target=asyncio.run, args=(taker(),), daemon=True)
    t.start()
    return got, t


def _stranded_loop(lock: TaskLock, take: bool) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """A task on a loop that takes (``take``) or queues for ``lock``, then the loop stops with the
    task pending; setting the first event closes the loop, the second is set once it is closed."""
    ready, close, closed = threading.Event(), threading.Event(), threading.Event()

    def run() -> None:
        loop = asyncio.new_event_loop()

        async def task_body() -> None:
            await lock.acquire()
            await asyncio.sleep(3600)  # never resumed: the loop stops, then closes
            lock.release()

        task = loop.create_task(task_body())
        if take:
            loop.run_until_complete(asyncio.to_thread(_wait, lambda: lock.owner is task))
        else:
            loop.run_until_complete(asyncio.to_thread(_wait, lambda: len(lock._waiters) >= 1))
        ready.set()
        close.wait(HANG_S)
        loop.close()
        closed.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(HANG_S)
    return close, closed, t


def test_a_waiter_behind_a_task_stranded_on_a_closed_loop_gets_the_lock_without_another_acquire():
    # Before: the waiter behind waited until some other acquire (none came here) passed the lock on.
    lock = TaskLock()
    let_go, holder = _hold_on_loop(lock)
    close, closed, _ = _stranded_loop(lock, take=False)
    behind, _ = _queue_on_loop(lock)
    assert _wait(lambda: len(lock._waiters) == 2)
    let_go.set()  # handed to the stranded task, whose loop is stopped (not closed): it is queued there
    holder.join(HANG_S)
    close.set()
    assert closed.wait(HANG_S)
    assert behind.wait(HANG_S), "the waiter behind the stranded task never got the lock"
    assert _wait(lambda: lock.owner is None)


def test_a_holder_on_a_stopped_loop_keeps_the_lock_until_that_loop_is_closed():
    # Before: the lock stayed with the holder whose loop was closed, for good.
    lock = TaskLock()
    close, closed, _ = _stranded_loop(lock, take=True)
    waiting, _ = _queue_on_loop(lock)
    assert _wait(lambda: len(lock._waiters) == 1)
    # Stopped, not closed: the loop may run again and its task go on, so it keeps the lock.
    assert not waiting.wait(1.5)
    close.set()
    assert closed.wait(HANG_S)
    assert waiting.wait(HANG_S), "the lock stayed with a task whose loop is closed"
    assert _wait(lambda: lock.owner is None)
    fresh, _ = _queue_on_loop(lock)
    assert fresh.wait(HANG_S)


def test_a_plain_waiter_behind_a_holder_on_a_closed_loop_gets_the_lock():
    lock = TaskLock()
    close, closed, _ = _stranded_loop(lock, take=True)
    got = threading.Event()

    def plain() -> None:
        lock.acquire_plain(lambda: QdrantGuardError("unreachable: no loop here"))
        got.set()
        lock.release()

    threading.Thread(target=plain, daemon=True).start()
    assert _wait(lambda: len(lock._waiters) == 1)
    close.set()
    assert closed.wait(HANG_S)
    assert got.wait(HANG_S)


def test_a_thread_started_by_the_holders_nested_call_is_refused_instead_of_waiting_for_it():
    """Lock level: the task holds the lock twice (a guarded call nested in another's request),
    the nested one's Offload releases once, and a thread started from the task's context (as
    asyncio.to_thread starts it) takes the lock from plain code."""
    lock = TaskLock()
    outcome: list[str] = []

    def plain() -> None:
        try:
            lock.acquire_plain(lambda: QdrantGuardError("on a loop"),
                               reentry=lambda: QdrantGuardError("started by the holder"))
        except QdrantGuardError as exc:
            outcome.append(str(exc))
        else:
            outcome.append("took it")
            lock.release()

    async def main() -> None:
        await lock.acquire()
        await lock.acquire()
        lock.release()  # the nested call's Offload
        t = threading.Thread(target=contextvars.copy_context().run, args=(plain,), daemon=True)
        t.start()
        await asyncio.to_thread(t.join, 10)
        lock.release()

    asyncio.run(main())
    assert outcome == ["started by the holder"]
    assert lock.owner is None


def test_a_thread_started_by_a_task_not_holding_the_lock_still_waits():
    """The refusal is for the holder's own threads: a thread copied from a task whose guarded call
    ended (or at its top-level Offload, where the lock is released) waits its turn as before."""
    lock = TaskLock()
    outcome: list[str] = []

    def plain() -> None:
        lock.acquire_plain(lambda: QdrantGuardError("on a loop"),
                           reentry=lambda: QdrantGuardError("started by the holder"))
        outcome.append("took it")
        lock.release()

    async def main() -> None:
        await lock.acquire()
        lock.release()  # this task's call ended: its context no longer holds the lock
        let_go, holder = await asyncio.to_thread(_hold_on_loop, lock)  # another loop's task holds it
        t = threading.Thread(target=contextvars.copy_context().run, args=(plain,), daemon=True)
        t.start()
        assert await asyncio.to_thread(_wait, lambda: len(lock._waiters) == 1)
        assert outcome == []  # it waits, for the other holder
        let_go.set()
        await asyncio.to_thread(t.join, HANG_S)
        await asyncio.to_thread(holder.join, HANG_S)

    asyncio.run(main())
    assert outcome == ["took it"] and lock.owner is None


def test_an_upload_from_a_nested_calls_embedder_is_refused_not_left_waiting(tmp_path, monkeypatch):
    """Client level: alice's overwrite_payload reads point 1 through a wrapped store, which makes
    a guarded upsert of a Document (a call nested in her request, as an integration's callback
    would); that upsert's embedder uploads a point from its thread. Before: the upload waited for
    the lock alice's task held while it waited for the embedder, for good (here: until the bound).
    The embedder starts the upload in a thread of its own with its context (as asyncio.to_thread
    does) and bounds the join, so that the old code fails instead of hanging the run."""
    kit = make_kit(tmp_path)
    base = HashingEmbedder(DIM)
    outcome: list[str] = []
    holder: dict[str, Any] = {}

    def upload() -> None:
        try:
            holder["client"].upload_points("pii", [M.PointStruct(id=9, vector=unit(np.random.default_rng(9)),
                                                                 payload={"k": "up"})], wait=True)
            outcome.append("uploaded")
        except QdrantGuardError as exc:
            outcome.append(str(exc))

    def embed(texts: list[str]) -> Any:
        t = threading.Thread(target=contextvars.copy_context().run, args=(upload,), daemon=True)
        t.start()
        t.join(8)
        if t.is_alive():
            outcome.append("still waiting")
        return base(texts)

    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True, "text_field": "text",
                              "intent": {"enabled": False}}})

    async def main() -> list[int]:
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=embed)
        holder["client"] = owner
        await owner.create_collection("pii", vectors_config=M.VectorParams(size=DIM, distance=M.Distance.COSINE))
        await owner.upsert("pii", [M.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"k": "a"})])
        store = owner._client
        real = store.retrieve
        nested: list[int] = []

        async def retrieve(*a: Any, **kw: Any) -> Any:
            if not nested:
                nested.append(1)
                await owner.upsert("pii", [M.PointStruct(id=7, vector=M.Document(text="a note", model="m"),
                                                         payload={"text": "a note"})])
            return await real(*a, **kw)

        monkeypatch.setattr(store, "retrieve", retrieve)
        try:
            await owner.overwrite_payload("pii", payload={"k": "b"}, points=[1])
        finally:
            monkeypatch.undo()
        ids = sorted(p.id for p in (await owner.scroll("pii", limit=10))[0])
        await owner.close()
        return ids

    ids = asyncio.run(main())
    assert len(outcome) == 1 and "started by a guarded call" in outcome[0], outcome
    assert ids == [1, 7]
