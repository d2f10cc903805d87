"""Drives a guard operation for the async client, its blocking work off the event loop.

The pipeline's operations are sans-IO generators, but what runs between two of their requests is
not free of blocking I/O: the budget store's round trips (SQLite's ``BEGIN IMMEDIATE`` waits up
to 30 s for another writer; Redis waits for its socket) and the audit log's append (a thread
lock, ``flock``, ``write``, ``fsync``). So every step of the generator (from one request to the
next) runs in a worker thread, and the event loop only awaits it: a stalled store stalls the
tasks that need it, not every task on the loop. Qdrant calls (:class:`Call`) are still awaited
on the loop; :class:`Offload` requests (classifier, embedder) still run in ``asyncio.to_thread``;
:class:`Warn` requests are shown on the loop, at the awaiting caller's line.

One step of one operation runs at a time (the loop awaits it before sending the next request),
so an operation's decisions and audit entries keep their order. Appends from concurrent tasks
are serialised by :class:`~qdrant_guard.audit.AuditLog` itself (a thread lock and ``flock``
around building and writing each entry), so the chain stays whole.
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import queue
import threading
from concurrent.futures import Executor, Future
from typing import Any, Callable

from . import async_lock
from .async_lock import LockRevoked, TaskLock
from .pipeline import Call, Offload, Op, Warn, show

__all__ = ["TaskLock", "drive_async"]

# Its own pool: a store that stops answering ties up these threads, not the application's
# default executor (asyncio.to_thread, where the guard's Offloads run too).
STEP_WORKERS = 32


class _StepPool(Executor):
    """Up to ``workers`` daemon threads, started as needed and kept.

    Not a ThreadPoolExecutor: the interpreter joins those threads at exit, so a step stalled on
    a store that never answers (a Redis without ``socket_timeout``) held the exit of a program
    whose event loop runs in a daemon thread for good; when steps ran on the loop's thread it
    exited. A loop in the main thread still waits for its steps (asyncio.run awaits its tasks,
    and the driver awaits the step of a cancelled one).
    """

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._queue: "queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]]" = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one token per worker waiting for work
        self._lock = threading.Lock()
        self._threads = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> "Future[Any]":
        fut: Future[Any] = Future()
        self._queue.put((fut, functools.partial(fn, **kwargs) if kwargs else fn, args))
        if self._idle.acquire(blocking=False):
            return fut  # a waiting worker takes it
        with self._lock:
            if self._threads < self._workers:
                self._threads += 1
                threading.Thread(target=self._work, name=f"qdrant_guard-step_{self._threads - 1}",
                                 daemon=True).start()
        return fut

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            fut = item[0]
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(item[1](*item[2]))
                except BaseException as exc:
                    fut.set_exception(exc)
            del item, fut  # hold no operation while waiting
            self._idle.release()


_pool: _StepPool | None = None
_pool_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # A fork taken while another thread held _pool_lock leaves the child's copy held for good, and
    # the child has none of the pool's threads: start both afresh.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _executor() -> _StepPool:
    global _pool
    with _pool_lock:
        # A forked child starts with None (_after_fork_in_child): it has none of the pool's threads.
        if _pool is None:
            _pool = _StepPool(STEP_WORKERS)
        return _pool


def _advance(op: Op, value: Any, exc: BaseException | None) -> tuple[str, Any]:
    """One step of ``op`` (in a worker thread): what it yields, returns or raises, as a value
    (a StopIteration cannot cross a future, and the caller must tell the operation's own
    CancelledError from one aimed at the awaiting task)."""
    try:
        request = op.send(value) if exc is None else op.throw(exc)
    except StopIteration as stop:
        return "return", stop.value
    except BaseException as raised:  # the operation's own failure, re-raised by the driver
        return "raise", raised
    return "yield", request


class _Pending:
    """A cancellation of the awaiting task that arrived while a step ran."""

    __slots__ = ("cancel",)

    def __init__(self) -> None:
        self.cancel: BaseException | None = None


async def _step(op: Op, value: Any, exc: BaseException | None, pending: _Pending) -> tuple[str, Any]:
    """Run one step in the step pool and wait for it whatever happens to the awaiting task.

    A step cannot be stopped midway (it may be writing an audit entry), and the generator cannot
    be resumed while it runs, so a cancellation arriving meanwhile is kept in ``pending`` and
    delivered where the old on-loop driver would have received it (see :func:`drive_async`).
    """
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()  # as asyncio.to_thread: context variables follow the step
    fut = loop.run_in_executor(_executor(), functools.partial(ctx.run, _advance, op, value, exc))
    while True:
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError as cancel:
            # Aimed at the awaiting task (_advance returns the operation's every outcome as a
            # value), also when the step ended meanwhile: raising it here would abandon an
            # operation that may have just written its allow entry.
            pending.cancel = cancel


async def drive_async(op: Op, invoke: Callable[[Call], Any], *, lock: TaskLock | None = None) -> Any:
    """Run an operation to completion with an ``async`` ``invoke``, its steps in worker threads.

    ``lock`` (local mode, whose calls never suspend): held for the whole operation but for its
    Offloads, as the sync client holds its local-mode lock, so that a read-then-write of one task
    is not interleaved by another task's write (on any event loop: see :mod:`.async_lock`).

    A cancellation of the awaiting task lands where it landed when steps ran on the loop: at an
    Offload, or at a Call on a server connection (thrown into the operation, which audits a
    decided call's failure); while the operation waits to take ``lock`` back after an Offload it
    lands at once, at that Offload, the lock not taken (the operation has decided nothing since);
    during a step it waits for the step to end and then for the next such point, and an operation
    that reaches its end first has its result dropped and the cancellation raised.
    """
    pending = _Pending()
    held = False
    # The hold each release names: a release of a task the garbage collector unwinds after its lock
    # was passed on (its loop dropped or closed) must not release the next holder's (see async_lock).
    hold: object = None
    if lock is not None:
        hold = await lock.acquire()  # a cancellation here comes before the operation's first step
        held = True
    try:
        value: Any = None
        exc: BaseException | None = None
        while True:
            kind, out = await _step(op, value, exc, pending)
            if kind == "return":
                if pending.cancel is not None:
                    raise pending.cancel
                return out
            if kind == "raise":
                raise out
            value, exc = None, None
            if pending.cancel is not None and (isinstance(out, Offload) or lock is None):
                exc, pending.cancel = pending.cancel, None
                continue
            try:
                if isinstance(out, Warn):
                    # Shown on the loop, from this coroutine: its frames lead to the caller's line.
                    show(out)
                elif isinstance(out, Offload):
                    if held:
                        lock.release(hold)  # type: ignore[union-attr]
                        held = False
                    value = await asyncio.to_thread(out.fn)
                    if lock is not None:
                        # Cancelled here, the cancellation is thrown in at this Offload without the
                        # lock: the operation only unwinds (its steps touch no Qdrant store), and a
                        # timeout does not wait for another operation's stalled step.
                        hold = await lock.acquire()
                        held = True
                else:
                    if held and not lock.holds(hold):  # type: ignore[union-attr]
                        # Revoked while this task's loop was stopped (async_lock's rule): the
                        # request is not made, and the operation unwinds as after a failed one.
                        held = False
                        raise LockRevoked(
                            f"{getattr(out, 'method', 'a request')} was not sent: this call's event loop stopped "
                            f"for more than {async_lock._STOPPED_S:g} s while the call held the local-mode client, "
                            "which was passed on to a waiting call. Keep a loop running until its guarded calls "
                            "end, or close it")
                    if lock is not None and not held:
                        # A request of an operation unwinding a cancellation it was thrown without
                        # the lock (none of the guard's makes one): its turn first.
                        hold = await _acquire(lock, pending)
                        held = True
                    value = await invoke(out)
            except GeneratorExit:
                # This coroutine is being closed (by the garbage collector: its loop dropped), so
                # it can await nothing more; the operation is abandoned, as forward() reads it.
                raise
            except BaseException as raised:  # give the operation a chance to audit the failure
                exc = raised
    finally:
        if held:
            lock.release(hold)  # type: ignore[union-attr]


async def _acquire(lock: TaskLock, pending: _Pending) -> object | None:
    """Take ``lock`` (its hold returned); a cancellation meanwhile is kept in ``pending`` (the
    operation must go on holding it to audit what it decided)."""
    while True:
        try:
            return await lock.acquire()
        except asyncio.CancelledError as cancel:
            pending.cancel = cancel
