"""Review 39: the async client's cross-loop TaskLock (qdrant_guard/async_lock.py).

(1) A plain thread waiting for the lock (an async upload from a thread without a loop) that is
interrupted there (KeyboardInterrupt, or any exception a signal handler raises) stayed queued:
the release then handed the lock to a waiter that had left, and no one could take it again.
(2) A task waiting for the lock on a loop that stops (``run_until_complete`` returned with the
task still pending) and is then closed: the lock handed to it while its loop was stopped went
to a task that never runs again, and no one could take it again.

Real event loops in threads; ordering by events, bounds only against a hang.
"""
from __future__ import annotations

import asyncio
import signal
import threading
import time
from typing import Callable

import pytest

from qdrant_guard import QdrantGuardError
from qdrant_guard.async_lock import TaskLock

HANG_S = 20  # only against a hang


def _wait(cond: Callable[[], bool]) -> bool:
    end = time.monotonic() + HANG_S
    while not cond() and time.monotonic() < end:
        time.sleep(0.002)
    return cond()


def _hold_on_loop(lock: TaskLock) -> tuple[threading.Event, threading.Thread]:
    """A task on another thread's loop takes ``lock`` and holds it until the returned event."""
    held, let_go = threading.Event(), threading.Event()

    async def holder() -> None:
        await lock.acquire()
        held.set()
        await asyncio.to_thread(let_go.wait, HANG_S)
        lock.release()

    t = threading.Thread(target=asyncio.run, args=(holder(),))
    t.start()
    assert held.wait(HANG_S)
    return let_go, t


def _taken_elsewhere(lock: TaskLock) -> bool:
    """Whether a fresh task on a fresh loop can take the lock (bounded: False if it hangs)."""
    got = threading.Event()

    async def taker() -> None:
        await asyncio.wait_for(lock.acquire(), HANG_S)
        got.set()
        lock.release()

    t = threading.Thread(target=asyncio.run, args=(taker(),), daemon=True)
    t.start()
    t.join(HANG_S + 5)
    return got.is_set()


class _Interrupted(Exception):
    pass


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals")
def test_plain_waiter_interrupted_leaves_the_queue() -> None:
    lock = TaskLock()
    let_go, holder = _hold_on_loop(lock)

    def raise_(*_: object) -> None:
        raise _Interrupted()

    old = signal.signal(signal.SIGUSR1, raise_)
    main = threading.main_thread().ident
    try:
        def interrupt() -> None:
            _wait(lambda: len(lock._waiters) == 1)
            signal.pthread_kill(main, signal.SIGUSR1)  # type: ignore[arg-type]

        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(_Interrupted):
            lock.acquire_plain(lambda: QdrantGuardError("unreachable: no loop here"))
    finally:
        signal.signal(signal.SIGUSR1, old)
        let_go.set()
        holder.join(HANG_S)
    assert lock.owner is None, "the lock went to a waiter that had left"
    assert _taken_elsewhere(lock)


def test_waiter_on_a_stopped_then_closed_loop_does_not_keep_the_lock() -> None:
    lock = TaskLock()
    let_go, holder = _hold_on_loop(lock)
    queued = threading.Event()
    closed = threading.Event()
    loop_stopped = threading.Event()

    def stranded() -> None:
        loop = asyncio.new_event_loop()

        async def waiter() -> None:
            await lock.acquire()
            lock.release()

        task = loop.create_task(waiter())
        # Runs until the task has queued itself, then stops with it still waiting.
        loop.run_until_complete(asyncio.to_thread(_wait, lambda: len(lock._waiters) == 1))
        queued.set()
        loop_stopped.wait(HANG_S)
        assert not task.done()
        loop.close()  # the task (and the hand-over queued on this loop) never runs
        closed.set()

    t = threading.Thread(target=stranded)
    t.start()
    assert queued.wait(HANG_S)
    let_go.set()  # the holder's release hands the lock to the stranded task's stopped loop
    holder.join(HANG_S)
    loop_stopped.set()
    assert closed.wait(HANG_S)
    t.join(HANG_S)
    assert _taken_elsewhere(lock), "the lock stayed with a task whose loop was closed"
    assert lock.owner is None
