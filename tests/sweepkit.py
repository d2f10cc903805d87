"""Shared by the budget stores' idle-sweep tests (test_budget_idle.py, test_budget_sqlite_idle.py)."""
from __future__ import annotations

import random
import threading
from typing import Any

from qdrant_guard.budget import ExtractionBudget

W = 10.0  # window_s


class Clock:
    """One fake time for the callers' ``now`` and the store's monotonic clock."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def source(principal: str, i: int) -> str:
    return ExtractionBudget.budget_key(principal, "c", f"s{i}")


def threads_admit_and_sweep(store: Any, clock: Clock, threads: int, per_thread: int) -> None:
    """Phase 1: ``threads`` threads fill their own keys and one shared key; phase 2, two windows
    later on both clocks: the same threads admit, list and count while their admissions sweep
    phase 1's keys. Checks the shared cap, every phase-2 answer, and that the store then holds the
    phase-2 keys and the even phase-1 keys phase 2 admitted again, and no other."""
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    shared_admitted: list[str] = []
    phase2: dict[int, list[Any]] = {}

    def phase_one(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                store.admit(source(f"t{t}", i), ["a", "b"], cap=2, window_s=W, now=0.0)
                admitted, _ = store.admit("src|shared|c|s", [f"{t}-{i}"], cap=5, window_s=W, now=0.0)
                shared_admitted.extend(admitted)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    def phase_two(t: int) -> None:
        try:
            barrier.wait()
            out: list[Any] = []
            for i in range(per_thread):
                if i % 2 == 0:  # half of its phase-1 keys: a fresh budget, as their ids are a window old
                    out.append(store.admit(source(f"t{t}", i), ["c"], cap=1, window_s=W, now=2 * W))
                out.append(store.admit(source(f"n{t}", i), ["x"], cap=1, window_s=W, now=2 * W))
                out.append(store.seen(source(f"n{t}", i), window_s=W, now=2 * W))
                out.append(source(f"n{t}", i) in store.entries_by_prefix(f"src|n{t}|", window_s=W, now=2 * W))
            phase2[t] = out
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    for phase in (phase_one, phase_two):
        if phase is phase_two:
            clock.t = 2 * W
        workers = [threading.Thread(target=phase, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors, errors
        if phase is phase_one:
            assert len(shared_admitted) == 5  # the cap held across threads
            assert store.key_count() == threads * per_thread + 1
    expected = [out for i in range(per_thread)
                for out in ([(["c"], [])] if i % 2 == 0 else []) + [(["x"], []), 1, True]]
    for t in range(threads):
        assert phase2[t] == expected
    # The odd phase-1 keys and the shared one, which nothing read again, are gone.
    assert store.key_count() == threads * per_thread + threads * (per_thread // 2)


def random_call(store: Any, seed: int, t: float, kind: int, principal: str, window: float, ids: list[str]) -> Any:
    """One seeded budget-store call of ``kind`` (0-4: admit_counted, admit_points,
    admit_many_counted, seen, entries_by_prefix), the same arguments for every store given the
    same ``seed``, ``t`` and ``kind``; returns its answer."""
    r = random.Random(f"{seed}:{t}:{kind}")
    if kind == 0:
        key = source(principal, r.randrange(6))
        return store.admit_counted(key, r.sample(ids, r.randrange(1, 5)), cap=r.randrange(0, 5),
                                   window_s=window, now=t)
    if kind == 1:
        keys = [(source(principal, s), r.randrange(0, 4)) for s in r.sample(range(6), r.randrange(1, 4))]
        points = [(pid, sorted(r.sample(range(len(keys)), r.randrange(1, len(keys) + 1))))
                  for pid in r.sample(ids, r.randrange(1, 6))]
        return store.admit_points(keys, points, window_s=window, now=t)
    if kind == 2:
        requests = [(source(principal, s), r.sample(ids, r.randrange(0, 4)), r.randrange(0, 4))
                    for s in r.sample(range(6), r.randrange(1, 4))]
        return store.admit_many_counted(requests, window_s=window, now=t)
    if kind == 3:
        return store.seen(source(principal, r.randrange(6)), window_s=window, now=t)
    return store.entries_by_prefix(f"src|{principal}|", window_s=window, now=t)
