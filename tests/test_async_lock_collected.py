"""The async lock's holder on a loop dropped without being closed, and releases the collector runs.

h-left7 left it: a task holding the lock on a loop stopped for good and never closed kept it for
good (the lock referenced the task, so the task could never be collected). Now the lock holds a
task weakly; while a holder's loop is stopped, a waiter's recheck runs the garbage collector and a
collected holder is passed on. A collected holder's guarded call unwinds in the collector (its
``finally`` releases): that release must not touch the lock, which may be inside ``_mu`` in that
thread or passed on to another holder already (found here: a holder whose loop was closed, once
collected, released the next holder's lock).

Real event loops in their own threads, the real driver (``drive_async``), a real local-mode client.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time

import numpy as np
import pytest
from guardkit import async_pii_client, make_kit, models, unit

from qdrant_guard import async_lock
from qdrant_guard.async_driver import drive_async
from qdrant_guard.async_lock import TaskLock
from qdrant_guard.pipeline import Call

# A collected holder's coroutine must unwind, not go on (it swallowed the collector's
# GeneratorExit at its request and awaited a step: "coroutine ignored GeneratorExit").
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")

HANG_S = 20  # only against a hang (the old code never passed these locks on)


@pytest.fixture(autouse=True)
def _collections_when_asked(caplog, monkeypatch):
    # A collected pending task is reported by asyncio ("Task was destroyed but it is pending!").
    caplog.set_level(logging.CRITICAL, logger="asyncio")
    # A collection at every recheck: the dropped task may still be referenced at the first (by a
    # worker thread finishing its step), and the tests should not wait the 5 s to the next.
    monkeypatch.setattr(async_lock, "_COLLECT_S", 0.0, raising=False)
    # No automatic collection: the dropped tasks are collected where a test (or the lock) asks.
    enabled = gc.isenabled()
    gc.disable()
    yield
    if enabled:
        gc.enable()


def _wait(cond, bound: float = HANG_S) -> bool:
    end = time.monotonic() + bound
    while not cond() and time.monotonic() < end:
        time.sleep(0.002)
    return cond()


async def _until(cond) -> None:
    while not cond():
        await asyncio.sleep(0.002)


def _op():
    """An operation that makes one request to Qdrant and returns its answer."""
    return (yield Call("anything", {}))


_REACHED = threading.local()


async def _forever(call) -> None:
    _REACHED.flag = True  # on the loop's thread
    await asyncio.Event().wait()


def _hold_on_a_dropped_loop(lock: TaskLock, close: bool) -> None:
    """In a thread of its own: a guarded operation takes ``lock`` and waits on its request; its loop
    stops with it pending (and is closed if ``close``), and the thread ends, dropping the loop."""
    def run() -> None:
        loop = asyncio.new_event_loop()
        loop.create_task(drive_async(_op(), _forever, lock=lock))
        # Stopped at its request to Qdrant, past its step (whose worker thread may reference it).
        loop.run_until_complete(_until(lambda: getattr(_REACHED, "flag", False)))
        if close:
            loop.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG_S)
    assert lock._owner is not None  # held (its task may be collected already: a weak reference)


def _holder_in_thread(lock: TaskLock):
    """A guarded operation on another thread's loop that takes ``lock`` and holds it until told."""
    inside, go_on, out = threading.Event(), threading.Event(), []

    async def invoke(call):
        inside.set()
        await asyncio.to_thread(go_on.wait, HANG_S)
        return "answer"

    t = threading.Thread(target=lambda: out.append(asyncio.run(drive_async(_op(), invoke, lock=lock))), daemon=True)
    t.start()
    return inside, go_on, t, out


def _collected_inside_mu(lock: TaskLock, collected) -> bool:
    """Whether a thread holding ``lock._mu`` through each garbage collection gets through them
    until ``collected()`` (a hang says the collected code took ``_mu``, which that thread holds)."""
    done = threading.Event()

    def collect_inside() -> None:
        end = time.monotonic() + HANG_S
        while time.monotonic() < end:
            with lock._mu:
                gc.collect()
            if collected():
                done.set()
                return
            time.sleep(0.01)

    threading.Thread(target=collect_inside, daemon=True).start()
    return done.wait(2 * HANG_S)


def test_a_holder_on_a_loop_stopped_and_dropped_unclosed_is_passed_on():
    # Before: the lock referenced the task, so it lived (and held the lock) for good.
    lock = TaskLock()
    _hold_on_a_dropped_loop(lock, close=False)
    inside, go_on, t, out = _holder_in_thread(lock)
    assert inside.wait(HANG_S), "the waiter waited for a task nothing references any more"
    go_on.set()
    t.join(HANG_S)
    assert out == ["answer"] and lock.owner is None and not lock._waiters


def test_a_collected_holder_does_not_release_the_next_holders_lock():
    # Before: the holder whose loop was closed lost the lock to the next, then, once collected,
    # its driver's finally released that next holder's lock (two holders at once).
    lock = TaskLock()
    _hold_on_a_dropped_loop(lock, close=True)
    inside, go_on, t, out = _holder_in_thread(lock)
    assert inside.wait(HANG_S)
    holder = lock.owner
    gc.collect()  # the closed loop's task unwinds here
    assert lock.owner is holder and holder is not None
    go_on.set()
    t.join(HANG_S)
    assert out == ["answer"] and lock.owner is None


def test_a_collected_holders_release_inside_the_locks_mutex_does_not_wait_for_it():
    # The collector may run in a thread that holds _mu (any allocation can start it): the unwinding
    # holder's release must not take _mu, nor pass the lock on from there.
    lock = TaskLock()
    _hold_on_a_dropped_loop(lock, close=False)
    assert _collected_inside_mu(lock, lambda: lock.owner is None), "the collected holder's release waited for _mu"
    assert lock._owner is not None  # collected, not passed on: the next acquire does that
    got = []

    async def take() -> None:
        hold = await lock.acquire()
        got.append(lock.owner is asyncio.current_task())
        lock.release(hold)

    asyncio.run(asyncio.wait_for(take(), HANG_S))
    assert got == [True] and lock.owner is None


def test_a_release_naming_a_hold_passed_on_releases_nothing():
    lock = TaskLock()

    async def main() -> None:
        first = await lock.acquire()
        lock.release(first)
        second = await lock.acquire()
        lock.release(first)  # stale: the lock is the second hold's
        assert lock.owner is asyncio.current_task()
        assert await lock.acquire() is second  # re-entered: the same hold
        lock.release(second)
        lock.release(second)
        assert lock.owner is None

    asyncio.run(main())


def test_a_stopped_loop_still_referenced_keeps_its_holders_lock_through_collections():
    # The loop may run again (run_until_complete once more): its holder keeps the lock, however
    # often the waiter collects.
    lock = TaskLock()
    loop = asyncio.new_event_loop()
    go_on = threading.Event()

    async def step_then_wait():
        await lock.acquire()
        await asyncio.to_thread(go_on.wait, HANG_S)
        lock.release()

    def start():
        task = loop.create_task(step_then_wait())
        loop.run_until_complete(_until(lambda: lock.owner is task))
        return task

    out: list = []
    t = threading.Thread(target=lambda: out.append(start()), daemon=True)
    t.start()
    t.join(HANG_S)
    inside, let_go, b, b_out = _holder_in_thread(lock)
    assert not inside.wait(2.0) and lock.owner is out[0]  # four rechecks, four collections
    go_on.set()
    resumed = threading.Thread(target=lambda: loop.run_until_complete(out[0]), daemon=True)
    resumed.start()
    resumed.join(HANG_S)
    assert inside.wait(HANG_S)
    let_go.set()
    b.join(HANG_S)
    assert b_out == ["answer"] and lock.owner is None
    loop.close()


def test_a_guarded_call_on_a_dropped_loop_no_longer_holds_the_client(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    rng = np.random.default_rng(3)
    client = async_pii_client(kit, rng)
    lock = client._alock
    audit = client.guard.audit
    original = audit.append
    in_step, step_go = threading.Event(), threading.Event()

    def slow_append(record):  # the holder's step (its allow entry) waits here, the lock held
        if record.get("op") == "upsert" and not step_go.is_set():
            in_step.set()
            step_go.wait(HANG_S)
        return original(record)

    monkeypatch.setattr(audit, "append", slow_append)

    def run() -> None:
        loop = asyncio.new_event_loop()
        loop.create_task(client.upsert("pii", [models.PointStruct(id=2, vector=unit(rng))]))
        loop.run_until_complete(asyncio.to_thread(in_step.wait, HANG_S))
        # Stopped with the upsert inside its step, holding the client; the thread drops the loop.

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG_S)
    step_go.set()  # the step ends; its result waits on the dropped loop, which never runs again

    async def other():
        await client.upsert("pii", [models.PointStruct(id=3, vector=unit(rng))])
        records, _ = await client.scroll("pii", limit=10)
        return sorted(r.id for r in records)

    ids = asyncio.run(asyncio.wait_for(other(), HANG_S))
    assert ids == [1, 3]  # the dropped call decided, never wrote; the next one went ahead
    assert lock.owner is None


def test_a_revoked_waiter_collected_inside_the_locks_mutex_does_not_wait_for_it():
    # A waiter handed the lock while its loop was stopped is revoked; its loop then dropped, the
    # collector closes its coroutine at the await, in any thread: that must not take _mu.
    import weakref

    lock = TaskLock()
    a_in, a_go, a, _ = _holder_in_thread(lock)
    assert a_in.wait(HANG_S)
    refs = []

    def queue_then_drop() -> None:
        loop = asyncio.new_event_loop()

        async def waits() -> None:
            hold = await lock.acquire()
            lock.release(hold)

        refs.append(weakref.ref(loop.create_task(waits())))
        loop.run_until_complete(_until(lambda: len(lock._waiters) == 1))

    p = threading.Thread(target=queue_then_drop, daemon=True)
    p.start()
    p.join(HANG_S)
    b_in, b_go, b, b_out = _holder_in_thread(lock)
    assert _wait(lambda: len(lock._waiters) == 2)
    a_go.set()  # handed to the stopped loop's waiter, revoked, passed to b
    assert b_in.wait(HANG_S)
    holder = lock.owner
    assert _collected_inside_mu(lock, lambda: refs[0]() is None), "the collected waiter's coroutine waited for _mu"
    assert lock.owner is holder
    b_go.set()
    b.join(HANG_S)
    assert b_out == ["answer"] and lock.owner is None
