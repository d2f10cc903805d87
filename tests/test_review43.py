"""Review 43: the intent fold's leetspeak pass on long input, and the async lock's record of held
locks copied into tasks the holder created."""
from __future__ import annotations

import asyncio
import time

from qdrant_guard.async_lock import TaskLock
from qdrant_guard.intent_fold import fold


class _Refused(Exception):
    pass


def test_fold_leet_words_stay_linear_on_a_long_text():
    # fold() is public; featurize cuts to 2048 characters, but fold itself must not be quadratic.
    # Each chunk was tested against the list of folded chunks: 300 KB of ``p4ss`` took ~40 s.
    # (``r00t``: one digit inside a word, as ``p4ss`` has, folds only in an otherwise disguised
    # text since h-intent4, and ``r00t`` spells no word of the resolver's vocabulary, so the
    # leetspeak pass does the work.)
    text = "r00t " * 60_000
    t = time.perf_counter()
    out = fold(text, text)
    elapsed = time.perf_counter() - t  # generous: only tells linear from quadratic, not speed
    assert out.leet_words == 60_000 and out.text.startswith("root root")
    assert elapsed < 20.0, elapsed


def test_fold_leet_still_folds_short_edge_words_once_one_is_sandwiched():
    out = fold("p4ssw0rd m3 a11 ok", "p4ssw0rd m3 a11 ok")
    assert out.text == "password me all ok" and out.leet_words == 3


def _plain_upload(lock: TaskLock) -> str:
    lock.acquire_plain(lambda: _Refused("refusal"), lambda: _Refused("reentry"))
    lock.release()
    return "ok"


async def _upload_when(go: asyncio.Event, lock: TaskLock) -> str:
    """After ``go``, a plain (thread) upload under ``lock``: "ok" or the refusal."""
    await go.wait()
    try:
        return await asyncio.to_thread(_plain_upload, lock)
    except _Refused as e:
        return f"refused: {e}"


def test_a_task_created_by_the_holder_is_not_refused_at_a_later_hold():
    lock = TaskLock()

    async def main() -> str:
        go = asyncio.Event()

        await lock.acquire()
        task = asyncio.create_task(_upload_when(go, lock))  # copies the holder's context, _HELD included
        lock.release()
        await lock.acquire()  # a later, unrelated hold by the same task
        go.set()
        await asyncio.sleep(0.2)
        lock.release()
        return await asyncio.wait_for(task, 10)

    assert asyncio.run(main()) == "ok"


def test_a_waited_for_hold_is_recorded_too():
    lock = TaskLock()

    async def main() -> str:
        go = asyncio.Event()

        async def other() -> None:
            await lock.acquire()
            await asyncio.sleep(0.05)
            lock.release()

        blocker = asyncio.create_task(other())
        await asyncio.sleep(0.01)
        await lock.acquire()  # waits for `other`, then is handed the lock
        task = asyncio.create_task(_upload_when(go, lock))
        lock.release()
        await lock.acquire()
        go.set()
        await asyncio.sleep(0.2)
        lock.release()
        await blocker
        return await asyncio.wait_for(task, 10)

    assert asyncio.run(main()) == "ok"


def test_a_thread_inside_the_holders_call_is_still_refused():
    lock = TaskLock()

    async def main() -> str:
        await lock.acquire()
        try:
            return await asyncio.wait_for(asyncio.to_thread(_plain_upload, lock), 10)
        except _Refused as e:
            return f"refused: {e}"
        finally:
            lock.release()

    assert asyncio.run(main()) == "refused: reentry"
