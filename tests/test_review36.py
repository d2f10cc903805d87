"""Review 36 of the async driver (steps in worker threads, the local-mode TaskLock).

1. A local-mode operation releases the client's lock for an Offload (the embedder) and takes it
   back after; a cancellation (a timeout) that arrives while it waits for another task's
   operation to let go of the lock was kept and delivered only at the operation's end, so the
   write was decided, audited and sent for a caller that had given up, and the caller got a
   CancelledError for a write that happened. The on-loop driver delivered it at the Offload.
2. A fork taken while another thread held the step pool's lock left the child's copy held: the
   child's first guarded async call hung for good.
3. The client's per-loop locks sit in a WeakKeyDictionary whose values (an asyncio.Lock that
   once waited) referenced their loop: no loop a client had been contended on was collected.
4. The step pool's threads were joined at interpreter exit: a step stalled on a store held the
   exit of a program whose loop runs in a daemon thread.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest
import qdrant_client

from guardkit import DIM, make_kit, models, offload_then_write, unit
from qdrant_guard import AsyncQdrantClient, async_driver
from qdrant_guard.async_driver import TaskLock, drive_async
from qdrant_guard.audit import verify_audit_file
from qdrant_guard.hashing_embedder import HashingEmbedder
from qdrant_guard.pipeline import Call, Offload


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _records(kit) -> list[dict[str, Any]]:
    return [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text().splitlines()]


async def _until(cond, timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "timed out waiting"
        await asyncio.sleep(0.005)


# -- 1. a cancellation while taking the lock back after an Offload -----------------------------
def test_a_write_cancelled_while_waiting_to_retake_the_lock_after_its_embedder_is_not_sent(kit):
    base = HashingEmbedder(DIM)
    started, go = threading.Event(), threading.Event()

    def embed(texts):
        started.set()
        go.wait(5)
        return base(texts)

    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                              "text_field": "text", "intent": {"enabled": False}}})

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=embed)
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        bob = owner.with_principal(kit.principal("bob", "support"))
        write = asyncio.create_task(bob.upsert("pii", [models.PointStruct(
            id=7, vector=models.Document(text="a note", model="m"), payload={"text": "a note"})]))
        await _until(started.is_set)  # the embedder runs, the client's lock is free
        lock = owner._local_alock()  # taken as another task's operation takes it (views share it)
        await lock.acquire()
        go.set()
        await asyncio.sleep(0.2)  # the write has its vector and waits for the lock
        write.cancel()
        await asyncio.sleep(0.05)
        lock.release()
        with pytest.raises(asyncio.CancelledError):
            await write
        count = (await qdrant_client.AsyncQdrantClient.count(owner, "pii")).count
        await owner.close()
        return count

    assert asyncio.run(main()) == 0  # the cancelled write was not sent
    assert not [r for r in _records(kit) if r["op"] == "upsert" and r["verdict"].startswith("ALLOW")]
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


def test_the_driver_throws_that_cancellation_into_the_operation_at_the_offload():
    seen: list[str] = []
    invoked: list[str] = []

    async def main() -> None:
        lock = TaskLock()
        task = asyncio.create_task(drive_async(*offload_then_write(lambda: time.sleep(0.1), seen, invoked),
                                               lock=lock))
        await asyncio.sleep(0.03)  # the Offload runs, the lock is free
        await lock.acquire()
        await asyncio.sleep(0.2)  # the Offload is done; the operation waits for the lock
        task.cancel()
        await asyncio.sleep(0.02)
        lock.release()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["offload cancelled"] and invoked == []


def test_an_offload_whose_lock_comes_back_uncontested_goes_on():
    """Control: without a cancellation the operation goes on after taking the lock back."""
    invoked: list[str] = []

    def op() -> Any:
        got = yield Offload(lambda: 3)
        yield Call("write", {})
        return got

    async def invoke(call: Call) -> None:
        invoked.append(call.method)

    async def main() -> Any:
        lock = TaskLock()
        task = asyncio.create_task(drive_async(op(), invoke, lock=lock))
        await asyncio.sleep(0)
        await lock.acquire()
        await asyncio.sleep(0.1)
        lock.release()
        return await task

    assert asyncio.run(main()) == 3 and invoked == ["write"]


# -- 2. fork while the step pool's lock is held ------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_the_step_pools_lock_was_held_can_still_run_steps():
    def op() -> Any:
        got = yield Call("a", {})
        return got

    async def invoke(call: Call) -> int:
        return 5

    async_driver._executor()  # the parent has a pool
    holder_has_it, forked = threading.Event(), threading.Event()

    def hold() -> None:  # another thread inside _executor() at the moment of the fork
        with async_driver._pool_lock:
            holder_has_it.set()
            forked.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    holder_has_it.wait(5)
    pid = os.fork()
    if pid == 0:  # the child: no pytest from here, only an exit status
        try:
            signal.alarm(5)
            os._exit(0 if asyncio.run(drive_async(op(), invoke)) == 5 else 3)
        except BaseException:
            os._exit(4)
    forked.set()
    holder.join()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (
        f"child {'killed by signal %d' % os.WTERMSIG(status) if os.WIFSIGNALED(status) else status}")


# -- 3. a client used on one event loop after another does not keep them ----------------------
def test_an_async_client_run_on_many_event_loops_does_not_keep_them_alive(kit):
    """Its local-mode locks were kept per loop in a WeakKeyDictionary; an asyncio.Lock that once had
    to wait holds its loop, so each loop on which two operations met stayed alive for good (one
    closed loop per asyncio.run of an application that reuses the client)."""
    import gc
    import weakref

    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                              "intent": {"enabled": False}}})
    client = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    loops: list[weakref.ref] = []

    async def main(first: bool) -> list[int]:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        if first:
            await client.create_collection(
                "pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
            await client.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)))])
        return [r.count for r in await asyncio.gather(*(client.count("pii") for _ in range(4)))]

    for i in range(6):
        assert asyncio.run(main(i == 0)) == [1, 1, 1, 1]
    gc.collect()
    assert [r for r in loops if r() is not None] == []
    # One lock for every loop now (h-async4): idle, it references none of them.
    assert client._local_alock().owner is None and not client._local_alock()._waiters


# -- 4. a stalled step does not hold the interpreter's exit ------------------------------------
_STALLED_PROGRAM = """
import asyncio, threading, time
from qdrant_guard.async_driver import drive_async
from qdrant_guard.pipeline import Call

def op():
    yield Call("a", {})
    time.sleep(600)  # a budget store that never answers
    yield Call("b", {})

async def invoke(call):
    return None

threading.Thread(target=lambda: asyncio.run(drive_async(op(), invoke)), daemon=True).start()
time.sleep(0.5)
print("main done", flush=True)
"""


def test_a_step_stalled_on_a_store_does_not_hold_the_exit_of_a_program_whose_loop_is_a_daemon_thread():
    """The loop's thread is a daemon, as an application's background loop often is; when the
    steps ran on it the program exited, with the step pool's threads joined at exit it hung."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", _STALLED_PROGRAM], env=env, capture_output=True,
                              text=True, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("the program did not exit: its stalled step was joined at exit")
    assert done.returncode == 0 and done.stdout == "main done\n", done.stderr
    assert time.monotonic() - start < 20


def test_the_step_pool_reuses_its_threads_and_returns_every_result():
    """Control for the daemon pool: many operations at once all finish, on at most STEP_WORKERS
    threads, which later operations reuse."""
    names: set[str] = set()

    def op(i: int) -> Any:
        names.add(threading.current_thread().name)
        got = yield Call("a", {})
        time.sleep(0.01)
        names.add(threading.current_thread().name)
        return got + i

    async def invoke(call: Call) -> int:
        return 1000

    async def main(n: int) -> list[int]:
        return await asyncio.gather(*(drive_async(op(i), invoke) for i in range(n)))

    assert asyncio.run(main(80)) == [1000 + i for i in range(80)]
    assert asyncio.run(main(5)) == [1000 + i for i in range(5)]
    # Against every pool thread alive, not the first run's: earlier tests of the process may have
    # started threads the first run left idle, and the second may take one of those.
    pool = {t.name for t in threading.enumerate() if t.name.startswith("qdrant_guard-step")}
    assert names <= pool and len(pool) <= async_driver.STEP_WORKERS
