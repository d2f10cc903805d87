"""The time limit on classifier calls: :func:`classify_with_timeout` runs a non-built-in classifier on
a reused daemon worker thread and abandons the call (as a timeout) when it does not answer in
time.
"""
from __future__ import annotations

import contextvars
import os
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable
from .intent_builtin import BuiltinIntentClassifier
from .intent_llm import LLMIntentClassifier
from .intent_types import IntentClassifierError


__all__ = ["MAX_ABANDONED_CALLS", "classify_with_timeout"]

#: Most calls of one classifier that may hold a worker thread at once, timed-out ones included. A
#: thread cannot be killed, so a hung call keeps its thread; once this many of one classifier have
#: timed out and are still running, its further calls fail at once (``IntentClassifierError``),
#: and other classifiers keep the other workers.
MAX_ABANDONED_CALLS = 16
# Worker threads are reused and never exceed this (process-wide), so hung calls cannot pile up
# threads without limit, and one hung classifier leaves half the workers to the others.
_MAX_WORKERS = 2 * MAX_ABANDONED_CALLS


class _ClassifierPool:
    """Daemon worker threads for classifier calls (``concurrent.futures.ThreadPoolExecutor``
    joins its workers at exit, so one hung classifier call would hang the interpreter's exit)."""

    def __init__(self, max_workers: int, max_abandoned: int) -> None:
        self._max_workers = max_workers
        self._max_abandoned = max_abandoned
        self._reset()

    def _reset(self) -> None:
        # Also run in a forked child, which has none of the parent's threads: counted as idle,
        # they would take its tasks and never run them.
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._tasks: queue.SimpleQueue[tuple[Future[Any], Any, Callable[[], Any]]] = queue.SimpleQueue()
        self._threads = 0
        self._idle = 0
        self._abandoned: dict[Any, int] = {}  # classifier key -> its calls timed out and running
        # classifier key -> its calls queued or running, timed out or not. Bounded per classifier:
        # counting only the timed-out ones let calls in flight together take every worker.
        self._busy: dict[Any, int] = {}

    def abandoned(self) -> int:
        """Calls that timed out and are still running, of every classifier."""
        with self._lock:
            return sum(self._abandoned.values())

    def call(self, key: Any, fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                hung = self._abandoned.get(key, 0)
                if hung >= self._max_abandoned:
                    raise IntentClassifierError(
                        f"{what} was not called: {hung} earlier calls of it timed out and are still running "
                        f"(at most {self._max_abandoned} are kept waiting, since a hung thread cannot be "
                        "stopped). Fix the classifier so that it answers within intent.timeout_s, then "
                        "restart the process")
                if self._busy.get(key, 0) < self._max_abandoned:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise IntentClassifierError(
                        f"{what} did not start within intent.timeout_s = {timeout_s:g} s: "
                        f"{self._max_abandoned} calls of it were already running")
                self._freed.wait(left)
            self._busy[key] = self._busy.get(key, 0) + 1
            spawn = not self._idle and self._threads < self._max_workers
            if spawn:
                self._threads += 1
            elif self._idle:
                self._idle -= 1
        fut: Future[Any] = Future()
        ctx = contextvars.copy_context()  # as asyncio.to_thread does: context variables follow the call
        if spawn:
            # Started before the task is queued: a task left queued by a failed start would be
            # skipped by the next worker, which would then count itself idle once too often.
            try:
                threading.Thread(target=self._work, name="qdrant-guard-intent", daemon=True).start()
            except RuntimeError as exc:  # "can't start new thread": out of threads or memory
                with self._lock:
                    self._threads -= 1
                self._finished(key)
                raise IntentClassifierError(f"{what} was not called: no worker thread could be started "
                                            f"({exc})") from None
        self._tasks.put((fut, key, lambda: ctx.run(fn)))
        try:
            return fut.result(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            if fut.done() and not fut.cancelled():  # an exception of the classifier's own, or just in time
                return fut.result()
            if fut.cancel():  # still queued: no worker came free in time; it will never run
                self._finished(key)
                raise IntentClassifierError(
                    f"{what} did not start within intent.timeout_s = {timeout_s:g} s: all {self._max_workers} "
                    "classifier workers were busy") from None
            with self._lock:
                self._abandoned[key] = self._abandoned.get(key, 0) + 1
            fut.add_done_callback(lambda _: self._release(key))  # at once if the call ended meanwhile
            raise IntentClassifierError(
                f"{what} did not answer within intent.timeout_s = {timeout_s:g} s; the query was not "
                "classified (the call keeps running on its thread until it returns)") from None

    def _release(self, key: Any) -> None:
        with self._lock:
            left = self._abandoned[key] - 1
            if left:
                self._abandoned[key] = left
            else:
                del self._abandoned[key]

    def _finished(self, key: Any) -> None:
        """A call of ``key`` ran to its end, or was cancelled before it started: its slot is free."""
        with self._lock:
            left = self._busy[key] - 1
            if left:
                self._busy[key] = left
            else:
                del self._busy[key]
            self._freed.notify_all()

    def _work(self) -> None:
        while True:
            fut, key, fn = self._tasks.get()
            if fut.set_running_or_notify_cancel():  # else cancelled, and the canceller freed its slot
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # handed to the caller, who decides
                    fut.set_exception(exc)
                finally:
                    self._finished(key)
            fut = fn = key = None  # type: ignore[assignment]  # hold no result while idle
            with self._lock:
                self._idle += 1


_POOL = _ClassifierPool(_MAX_WORKERS, MAX_ABANDONED_CALLS)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL._reset)


def classify_with_timeout(clf: Any, text: str, timeout_s: float) -> Any:
    """``clf.classify(text)``, bounded by ``timeout_s`` unless ``clf`` is the built-in classifier.

    The built-in classifier runs inline: it is bounded by construction (lexical features over a
    bounded prefix) and a thread hop would cost more than it does. Any other classifier (the LLM
    one, a ``module:attr``) runs on a shared worker thread; if it has not answered after
    ``timeout_s`` its result is abandoned and :class:`IntentClassifierError` raised, as for any
    failed classification. The abandoned call keeps its thread until it returns; once
    :data:`MAX_ABANDONED_CALLS` of one classifier are, its further calls fail at once. One
    classifier (its class and name, whichever client loaded it) has at most that many calls
    running at once, timed out or not; at most 32 calls run at once (process-wide). A call waiting
    for a worker counts its wait against ``timeout_s``.

    Raises:
        IntentClassifierError: the call timed out, or too many earlier ones are still running.
        Exception: whatever ``clf.classify`` raised.
    """
    if type(clf) is BuiltinIntentClassifier:
        return clf.classify(text)
    name = getattr(clf, "name", None)
    what = f"intent classifier {name!r}" if isinstance(name, str) else "the intent classifier"
    return _POOL.call(_pool_key(clf), lambda: clf.classify(text), timeout_s, what)


def _pool_key(clf: Any) -> Any:
    """Which classifier a call belongs to, for the bound on its calls: its class and name (and an
    LLM's endpoint), not the instance. A ``module:Class`` spec makes one instance per client, and
    bounded per instance, two clients of one hung classifier held every worker."""
    name = getattr(clf, "name", None)
    return (type(clf), name if isinstance(name, str) else None,
            clf._url if isinstance(clf, LLMIntentClassifier) else None)
