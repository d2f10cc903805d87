"""Paired A/B of the async client's TaskLock, uncontended: two versions of
``qdrant_guard/async_lock.py`` in one process, on one event loop.

Usage: ``git show REV:qdrant_guard/async_lock.py > /tmp/lock_old.py`` and
``python bench/lock_ab.py /tmp/lock_old.py qdrant_guard/async_lock.py``. Each of 60 rounds times a
block of 20,000 ``await acquire()`` + ``release()`` of each version back to back (which goes first
alternates), then the same of ``acquire_plain`` + ``release`` from a thread without a loop; printed:
each version's median and minimum per pair, and the median (quartiles) over rounds of old/new
(above 1: the new one is faster). Not run by ``run.py``.
"""
from __future__ import annotations

import asyncio
import importlib.util
import statistics
import sys
import time
from typing import Any

N, ROUNDS = 20000, 60


def load(path: str, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.TaskLock


async def block(lock: Any) -> float:
    t = time.perf_counter_ns()
    for _ in range(N):
        await lock.acquire()
        lock.release()
    return (time.perf_counter_ns() - t) / N


def plain_block(lock: Any) -> float:
    def refuse() -> BaseException:
        return RuntimeError("held")

    t = time.perf_counter_ns()
    for _ in range(N):
        lock.acquire_plain(refuse)
        lock.release()
    return (time.perf_counter_ns() - t) / N


async def main(old_cls: Any, new_cls: Any) -> None:
    old, new = old_cls(), new_cls()
    a: list[float] = []
    b: list[float] = []
    pa: list[float] = []
    pb: list[float] = []
    for r in range(ROUNDS):
        pair = [(old, a, pa), (new, b, pb)]
        for lock, out, pout in (pair if r % 2 == 0 else pair[::-1]):
            out.append(await block(lock))
            pout.append(await asyncio.to_thread(plain_block, lock))
    for what, x, y in (("async acquire+release", a, b), ("acquire_plain+release (thread)", pa, pb)):
        ratios = [o / n for o, n in zip(x, y)]
        q = statistics.quantiles(ratios, n=4)
        print(f"{what}: old median {statistics.median(x):.0f} ns (min {min(x):.0f}), new median "
              f"{statistics.median(y):.0f} ns (min {min(y):.0f}); paired old/new median "
              f"{statistics.median(ratios):.3f} (quartiles {q[0]:.3f}-{q[2]:.3f})")


if __name__ == "__main__":
    asyncio.run(main(load(sys.argv[1], "lock_old"), load(sys.argv[2], "lock_new")))
