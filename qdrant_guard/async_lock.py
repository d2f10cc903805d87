"""The async client's local-mode lock: one holder at a time across every event loop and thread.

qdrant-client's local mode is not thread-safe, and a guarded operation reads then writes: the
sync client serialises its threads with one RLock. An async client used from two event loops at
once (two threads, each running its own loop) needs the same, but a loop must never block on it:
a task that finds the lock held queues a future on its own loop, and the releaser hands the lock
over and resolves that future on the waiter's loop (``call_soon_threadsafe``). Only ``_mu``, held
for a few statements and never across an await, is ever waited on by blocking.

When a holder can no longer release, the lock is passed on: by the next acquire, and by each
waiter every ``_RECHECK_S`` (no event marks a loop's stop or close). The rule:

- a holder whose task is done, or whose loop is closed, never runs again: passed on;
- a holder whose loop is stopped, not closed, with its task pending keeps the lock until that loop
  has not run for ``_STOPPED_S`` since a waiter first saw it stopped (a callback queued on it then
  tells whether it ran since): the loop may run again (``run_until_complete`` once more) and the
  task go on from the middle of its guarded call;
- past that, the lock is revoked and passed on, as a loop left stopped for good would otherwise
  keep it for as long as anything references that loop. The revoked call's driver asks
  :meth:`TaskLock.holds` before each request it makes: if the loop runs again, the call's next
  request is not made, and the call is given :class:`LockRevoked` there instead (it audits and
  unwinds as after a failed request), so nothing it read under the lock is written after another
  call's write;
- once nothing references that loop and task any more (the loop dropped unclosed, e.g. by a
  thread that ended), the task can never run again: the lock holds its task weakly, a waiter's
  recheck runs the garbage collector (at most every ``_COLLECT_S`` per lock, only while a holder's
  loop is stopped) and a collected holder is passed on. The collected task's guarded call then runs
  its ``finally`` in the collector, in whatever thread and context: its release (given its hold,
  :meth:`TaskLock.release`) does nothing there, as the lock is passed on by the next acquire or
  recheck instead, outside the collector (nor does a revoked waiter's, closed there: it has
  nothing to give back);
- a task handed the lock while its loop is not running (stopped with the task waiting) has not
  resumed, so has done nothing under it: the hand-over is revoked and the lock passed on, and the
  task, if its loop runs again, queues anew (at the back) instead of going on.
"""
from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable

from .errors import QdrantGuardError


# How often a waiter checks whether the holder can no longer release (its task done, its loop
# closed) or the task handed the lock sits on a loop that is not running: only then is it passed on.
_RECHECK_S = 0.5

# The (lock, hold) pairs the task whose context this is holds: a thread started from it (as
# asyncio.to_thread copies the context) that waits for one of them waits for its own holder. A hold
# (one outermost acquire), not the task: a task the holder created copied the context too, and a
# later hold of the same task is none of its business.
_HELD: contextvars.ContextVar[tuple[tuple["TaskLock", object], ...]] = contextvars.ContextVar(
    "qdrant_guard_task_locks", default=())


# The owner while a reclaimed lock is being passed on: no second reclaim passes it on too.
_PASSING = object()

# A task holder is held by a weak reference (anything else as itself): a task on a loop dropped
# unclosed can then be collected, and is passed on (the module's rule).
_Ref = weakref.ref

# The least time between two garbage collections one lock runs to find a collectable holder (a
# full collection can take a tenth of a second on a large heap).
_COLLECT_S = 5.0

# How long a holder's loop (not closed, its task pending) must go without running, from a
# waiter's first sight of it stopped, before the lock is revoked and passed on. As long as
# SQLite's busy wait: a loop paused longer than that between two run_until_complete calls, while
# another loop needs the client, loses its call rather than stalling every other one.
_STOPPED_S = 30.0


class LockRevoked(QdrantGuardError):
    """The local-mode client was passed on while this call's event loop was stopped."""


def _holder(who: object) -> object:
    """What ``_owner`` and a waiter store for ``who``: a task weakly, anything else as itself."""
    return _Ref(who) if isinstance(who, asyncio.Task) else who


class _Waiter:
    __slots__ = ("owner", "loop", "fut", "event", "granted", "timer")

    def __init__(self, owner: object, loop: asyncio.AbstractEventLoop | None) -> None:
        self.owner = owner
        self.loop = loop
        self.fut: asyncio.Future[None] | None = loop.create_future() if loop is not None else None
        self.event = threading.Event() if loop is None else None
        self.granted = False
        self.timer: asyncio.TimerHandle | None = None


class _Ran:
    """Whether a stopped holder's loop has run since a waiter saw it stopped (see ``_reclaim``)."""

    __slots__ = ("ran",)

    def __init__(self) -> None:
        self.ran = False


def _mark_ran(ran: _Ran) -> None:
    ran.ran = True


def _resolve(fut: "asyncio.Future[None]") -> None:
    if not fut.done():  # cancelled meanwhile: its task hands the lock on (TaskLock.acquire)
        fut.set_result(None)


class TaskLock:
    """A lock held by one task (or plain thread) at a time, whatever loop it runs on; the holder
    may take it again, as a thread takes an RLock: a guarded call made from inside another's
    Qdrant request (an integration's callback, a wrapped store) runs in the same task and must not
    wait for itself. Waiters are served in arrival order; the lock passes straight to the first."""

    __slots__ = ("_mu", "_owner", "_depth", "_waiters", "_handed", "_hold", "_next_collect", "_stopped")

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._owner: object | None = None
        self._depth = 0
        self._waiters: deque[_Waiter] = deque()
        # The task handed the lock and not yet resumed: its loop may be closed before it runs.
        self._handed: _Waiter | None = None
        # The current hold's token (the _HELD entry of its task): a waiter granted it, or a fresh object.
        self._hold: object | None = None
        # When a stopped holder may next be looked for among the garbage (time.monotonic()).
        self._next_collect = 0.0
        # (the holder, when a waiter first saw its loop stopped, the mark queued on that loop then):
        # revoked once _STOPPED_S has passed with the mark not run.
        self._stopped: tuple[object, float, _Ran] | None = None

    def holds(self, hold: object | None) -> bool:
        """Whether ``hold`` (what :meth:`acquire` returned) is still the lock's: False once it was
        released, or revoked from a loop stopped too long (the module's rule)."""
        return hold is not None and self._hold is hold

    @property
    def owner(self) -> object | None:
        """The task (or plain thread) holding the lock, or handed it; None: free (also while its
        holder is at an Offload, which releases it, or when its task was collected)."""
        owner = self._owner
        return owner() if type(owner) is _Ref else owner

    async def acquire(self) -> object | None:
        """Take the lock, waiting without blocking the loop. A cancellation while waiting takes
        effect at once: the waiter leaves the queue, or passes on a lock handed to it meanwhile.

        Returns:
            The hold, to give to :meth:`release` (the outermost acquire's, when the task holds it
            already)."""
        task = asyncio.current_task()
        owner = self._owner
        if owner is not None and type(owner) is _Ref and owner() is task:  # only this task sets or clears that
            self._depth += 1
            return self._hold
        me: object = _Ref(task) if task is not None else object()
        while True:
            self._reclaim()
            with self._mu:
                if self._owner is None:
                    hold = object()
                    self._owner, self._depth, self._hold = me, 1, hold
                    _HELD.set(_HELD.get() + ((self, hold),))
                    return hold
                loop = asyncio.get_running_loop()
                waiter = _Waiter(me, loop)
                self._waiters.append(waiter)
            waiter.timer = loop.call_later(_RECHECK_S, self._recheck, waiter)
            try:
                await waiter.fut  # type: ignore[misc]
            except GeneratorExit:
                # Its coroutine closed, in practice by the garbage collector (its loop dropped):
                # then the waiter was revoked (nothing to give back), and the collector may be
                # running inside _mu in this thread.
                if waiter.granted or waiter in self._waiters:
                    self._leave(waiter)
                raise
            except BaseException:
                self._leave(waiter)
                raise
            finally:
                waiter.timer.cancel()
            with self._mu:
                if self._handed is waiter:
                    self._handed = None
                    break
            # Revoked: handed the lock while this loop was not running, and passed on (_reclaim).
        # The waiter stays as the hold's token: it must not keep the loop (and so the task) alive.
        waiter.loop = waiter.fut = waiter.timer = None
        _HELD.set(_HELD.get() + ((self, waiter),))
        return waiter

    def _recheck(self, waiter: _Waiter) -> None:
        """On a waiter's loop: pass on a lock its holder can no longer release (_reclaim), again later."""
        if waiter.granted:
            return
        self._reclaim()
        if not waiter.granted:
            waiter.timer = waiter.loop.call_later(_RECHECK_S, self._recheck, waiter)  # type: ignore[union-attr]

    def acquire_plain(self, refusal: Callable[[], BaseException],
                      reentry: Callable[[], BaseException] | None = None) -> None:
        """Take the lock from plain (non-async) code. A thread running an event loop cannot wait
        for it (the holder, or the waiter it would be handed to, may need this loop): it raises
        ``refusal()`` when another holds it. A thread without a loop waits, as for an RLock, but
        for one started from the holder's own context (``asyncio.to_thread`` in a guarded call
        nested in the holder's, whose task awaits the thread): it raises ``reentry()`` (default
        ``refusal()``) instead of waiting for good."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        me: object = (asyncio.current_task() if loop is not None else None) or threading.current_thread()
        owner = self._owner
        if owner is not None and (owner is me or (type(owner) is _Ref and owner() is me)):
            self._depth += 1
            return
        self._reclaim()
        with self._mu:
            if self._owner is None:
                self._owner, self._depth, self._hold = _holder(me), 1, None
                return
            if loop is not None:
                raise refusal()
            if any(lock is self and hold is self._hold for lock, hold in _HELD.get()):
                raise (reentry or refusal)()
            waiter = _Waiter(_holder(me), None)
            self._waiters.append(waiter)
        try:
            while not waiter.event.wait(_RECHECK_S):  # type: ignore[union-attr]
                self._reclaim()
        except BaseException:  # KeyboardInterrupt, or what a signal handler raises
            self._leave(waiter)
            raise

    def _leave(self, waiter: _Waiter) -> None:
        """A waiter gives up: it leaves the queue, or passes on the lock handed to it meanwhile."""
        with self._mu:
            granted = waiter.granted
            if not granted:
                if waiter in self._waiters:  # not, if its hand-over was revoked (_reclaim)
                    self._waiters.remove(waiter)
            elif self._handed is waiter:
                self._handed = None
        if granted:
            self._hand_on()

    def _reclaim(self) -> None:
        """Pass on a lock its holder can no longer release (its task done or collected, or its loop
        closed), or one handed to a task whose loop is not running (stopped or closed): that task
        has not resumed, and finds the hand-over revoked if it ever does (the module's rule)."""
        handed, owner = self._handed, self._owner
        stopped_long = False
        if handed is None and type(owner) is _Ref:
            task = owner()
            if task is not None and not task.done():
                loop = task.get_loop()
                del task  # this frame must not keep it alive through the collection
                if not loop.is_running() and not loop.is_closed():
                    now = time.monotonic()
                    seen = self._stopped
                    if seen is None or seen[0] is not owner or seen[2].ran:
                        # A mark queued on the loop: it runs if the loop runs at all, however
                        # briefly between two looks, and the stop then counts afresh.
                        ran = _Ran()
                        try:
                            loop.call_soon_threadsafe(_mark_ran, ran)
                        except RuntimeError:  # closed meanwhile: passed on below
                            pass
                        self._stopped = (owner, now, ran)
                    elif now - seen[1] >= _STOPPED_S:
                        stopped_long = True
                    if now >= self._next_collect:
                        # Stopped: if nothing else references the loop, only a collection frees the task.
                        self._next_collect = now + _COLLECT_S
                        del loop
                        gc.collect()
                else:
                    self._stopped = None
        # A handed waiter's loop is None once its task took the lock (it is then the hold's token).
        if not (stopped_long
                or (handed is not None and (hloop := handed.loop) is not None and not hloop.is_running())
                or (type(owner) is _Ref and handed is None
                    and ((task := owner()) is None or task.done() or task.get_loop().is_closed()))):
            return
        with self._mu:
            if self._owner is not owner or self._handed is not handed:
                return
            if handed is not None:
                handed.granted = False  # its _leave, if cancelled, has nothing to give back
            self._owner, self._handed, self._hold, self._stopped = _PASSING, None, None, None
        self._hand_on()

    def release(self, hold: object | None = None) -> None:
        """Release the lock (once for each acquire). ``hold``: what :meth:`acquire` returned; a
        release naming a hold that is no longer the lock's does nothing (see below).

        A release whose holder task was collected does nothing either: it is that task's guarded
        call unwinding in the garbage collector (in any thread, maybe one inside ``_mu``, and in
        another task's context); the lock is passed on by :meth:`_reclaim`, and a release that comes
        after that names a hold that is gone."""
        owner = self._owner
        if (hold is not None and self._hold is not hold) or (type(owner) is _Ref and owner() is None):
            return
        if self._depth > 1:
            self._depth -= 1
            return
        held = _HELD.get()
        if held:
            _HELD.set(() if len(held) == 1 and held[0][0] is self
                      else tuple(pair for pair in held if pair[0] is not self))
        self._hand_on()

    def _hand_on(self) -> None:
        """Give the lock to the first waiter whose loop can still run, or free it."""
        while True:
            with self._mu:
                if not self._waiters:
                    self._owner, self._depth, self._handed, self._hold = None, 0, None, None
                    return
                waiter = self._waiters.popleft()
                waiter.granted = True
                self._owner, self._depth, self._hold = waiter.owner, 1, waiter
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
