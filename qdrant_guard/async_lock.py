"""The async client's local-mode lock: one holder at a time across every event loop and thread.

qdrant-client's local mode is not thread-safe, and a guarded operation reads then writes: the
sync client serialises its threads with one RLock. An async client used from two event loops at
once (two threads, each running its own loop) needs the same, but a loop must never block on it:
a task that finds the lock held queues a future on its own loop, and the releaser hands the lock
over and resolves that future on the waiter's loop (``call_soon_threadsafe``). Only ``_mu``, held
for a few statements and never across an await, is ever waited on by blocking.
"""
from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Any, Callable


class _Waiter:
    __slots__ = ("owner", "loop", "fut", "event", "granted")

    def __init__(self, owner: object, loop: asyncio.AbstractEventLoop | None) -> None:
        self.owner = owner
        self.loop = loop
        self.fut: asyncio.Future[None] | None = loop.create_future() if loop is not None else None
        self.event = threading.Event() if loop is None else None
        self.granted = False


def _resolve(fut: "asyncio.Future[None]") -> None:
    if not fut.done():  # cancelled meanwhile: its task hands the lock on (TaskLock.acquire)
        fut.set_result(None)


class TaskLock:
    """A lock held by one task (or plain thread) at a time, whatever loop it runs on; the holder
    may take it again, as a thread takes an RLock: a guarded call made from inside another's
    Qdrant request (an integration's callback, a wrapped store) runs in the same task and must not
    wait for itself. Waiters are served in arrival order; the lock passes straight to the first."""

    __slots__ = ("_mu", "_owner", "_depth", "_waiters", "_handed")

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._owner: object | None = None
        self._depth = 0
        self._waiters: deque[_Waiter] = deque()
        # The task handed the lock and not yet resumed: its loop may be closed before it runs.
        self._handed: _Waiter | None = None

    @property
    def owner(self) -> object | None:
        """The task (or plain thread) holding the lock, or handed it; None: free (also while its
        holder is at an Offload, which releases it)."""
        return self._owner

    async def acquire(self) -> None:
        """Take the lock, waiting without blocking the loop. A cancellation while waiting takes
        effect at once: the waiter leaves the queue, or passes on a lock handed to it meanwhile."""
        task = asyncio.current_task()
        if task is not None and self._owner is task:  # only this task sets or clears that
            self._depth += 1
            return
        me: object = task if task is not None else object()
        self._reclaim()
        with self._mu:
            if self._owner is None:
                self._owner, self._depth = me, 1
                return
            waiter = _Waiter(me, asyncio.get_running_loop())
            self._waiters.append(waiter)
        try:
            await waiter.fut  # type: ignore[misc]
        except BaseException:
            self._leave(waiter)
            raise
        with self._mu:
            if self._handed is waiter:
                self._handed = None

    def acquire_plain(self, refusal: Callable[[], BaseException]) -> None:
        """Take the lock from plain (non-async) code. A thread running an event loop cannot wait
        for it (the holder, or the waiter it would be handed to, may need this loop): it raises
        ``refusal()`` when another holds it. A thread without a loop waits, as for an RLock."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        me: object = (asyncio.current_task() if loop is not None else None) or threading.current_thread()
        if self._owner is me:
            self._depth += 1
            return
        self._reclaim()
        with self._mu:
            if self._owner is None:
                self._owner, self._depth = me, 1
                return
            if loop is not None:
                raise refusal()
            waiter = _Waiter(me, None)
            self._waiters.append(waiter)
        try:
            waiter.event.wait()  # type: ignore[union-attr]
        except BaseException:  # KeyboardInterrupt, or what a signal handler raises
            self._leave(waiter)
            raise

    def _leave(self, waiter: _Waiter) -> None:
        """A waiter gives up: it leaves the queue, or passes on the lock handed to it meanwhile."""
        with self._mu:
            granted = waiter.granted
            if not granted:
                self._waiters.remove(waiter)
            elif self._handed is waiter:
                self._handed = None
        if granted:
            self._hand_on()

    def _reclaim(self) -> None:
        """Pass on a lock handed to a task whose loop was closed before it could resume (its loop
        was stopped, not closed, at the hand-over): that task never runs to take it or pass it on."""
        handed = self._handed
        if handed is None or not handed.loop.is_closed():  # type: ignore[union-attr]
            return
        with self._mu:
            if self._handed is not handed:
                return
            self._handed = None
        self._hand_on()

    def release(self) -> None:
        if self._depth > 1:
            self._depth -= 1
            return
        self._hand_on()

    def _hand_on(self) -> None:
        """Give the lock to the first waiter whose loop can still run, or free it."""
        while True:
            with self._mu:
                if not self._waiters:
                    self._owner, self._depth, self._handed = None, 0, None
                    return
                waiter = self._waiters.popleft()
                waiter.granted = True
                self._owner, self._depth = waiter.owner, 1
                self._handed = waiter if waiter.event is None else None
            if waiter.event is not None:
                waiter.event.set()
                return
            if _wake(waiter.loop, waiter.fut):  # type: ignore[arg-type]
                return
            # Its loop is closed: the waiting task will never run to take the lock or pass it on.


def _wake(loop: asyncio.AbstractEventLoop, fut: "asyncio.Future[Any]") -> bool:
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        _resolve(fut)
        return True
    try:
        loop.call_soon_threadsafe(_resolve, fut)
    except RuntimeError:  # closed
        return False
    return True
