"""A differential check of the SQLite budget store's kept listings under real concurrency, shared
by tests/test_review35.py (a few seeds) and ``python tests/sqlite_listing_check.py SEEDS`` (many).

Threads of this process each use two store objects on one file (a connection per thread and
object), a child process writes to the file too, and each thread's clock is its own (skewed, moving
both ways). Every listing a store answers is checked against the rows at the instant it answered:
the thread reads ``PRAGMA data_version`` on the store's connection before the listing and again in
a read transaction that also reads every row; when the two agree no other connection committed in
between (and this thread made no write), so those rows are the ones the store answered from. A
listing answered from a kept one that differs from them is stale. Admissions that fail half-way
(an id SQLite cannot encode, after other keys were written) roll back, as a failed commit does."""
from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from qdrant_guard.budget_store_base import _in_window  # noqa: E402
from qdrant_guard.budget_stores import SqliteBudgetStore  # noqa: E402

KEYS = ["src|p|c|s0", "src|p|c|s1", "src|p|c|x|y", "src|p|d|s0", "src|q|c|s0", "src|p||e", "src|p|",
        "a|b", "a||", "|lead"]
PREFIXES = ["src|p|c|", "src|p|", "src|p|d|", "src|q|c|", "src|p||", "src|p|c|x|", "a|", "a||", "|", "src|"]
WINDOWS = [5.0, 20.0, 60.0]
PIDS = [f"i:{i}" for i in range(8)]


def _rows_listing(rows: list[tuple[str, str, float]], prefix: str, window: float, now: float) -> dict:
    by_key: dict[str, list[tuple[str, float]]] = {}
    for key, pid, ts in rows:
        if key.startswith(prefix):
            by_key.setdefault(key, []).append((pid, ts))
    found = {key: _in_window(entries, window, now) for key, entries in by_key.items()}
    return {key: ids for key, ids in found.items() if ids}


def _checked_listing(store: SqliteBudgetStore, prefix: str, window: float, now: float, stats: dict) -> None:
    conn = store._connection()
    queries = [0]
    conn.set_trace_callback(lambda sql: queries.__setitem__(0, queries[0] + sql.startswith("SELECT key, pid, ts")))
    try:
        (v0,) = conn.execute("PRAGMA data_version").fetchone()
        got = store.entries_by_prefix(prefix, window_s=window, now=now)
    finally:
        conn.set_trace_callback(None)
    conn.execute("BEGIN")
    try:
        rows = conn.execute("SELECT key, pid, ts FROM qg_budget").fetchall()
        (v1,) = conn.execute("PRAGMA data_version").fetchone()
    finally:
        conn.execute("COMMIT")
    kept = queries[0] == 0
    stats["listings"] += 1
    if v0 != v1:
        stats["unchecked"] += 1  # another connection committed meanwhile: these rows may be later ones
        return
    want = _rows_listing(rows, prefix, window, now)
    stats["checked"] += 1
    stats["kept_checked"] += kept
    if got != want:
        stats["stale" if kept else "wrong"].append((prefix, window, now, got, want))


def _window(rng: random.Random) -> float:
    return WINDOWS[1] if rng.random() < 0.7 else rng.choice(WINDOWS)  # mostly one, as a deployment has


def _step(rng: random.Random, stores: tuple, now: float, stats: dict) -> None:
    store = stores[0] if rng.random() < 0.85 else stores[1]
    window = _window(rng)
    op = rng.random() * 1.6
    ids = rng.sample(PIDS, rng.randint(1, 3))
    if op < 0.25:
        store.admit(rng.choice(KEYS), ids, cap=rng.randint(0, 5), window_s=window, now=now)
    elif op < 0.4:
        chosen = list(dict.fromkeys(rng.choice(KEYS) for _ in range(rng.randint(1, 3))))
        points = [(pid, sorted(rng.sample(range(len(chosen)), rng.randint(0, len(chosen))))) for pid in ids]
        store.admit_points([(k, rng.randint(0, 4)) for k in chosen], points, window_s=window, now=now)
    elif op < 0.45:
        # The first key's ids are written, then the second's cannot be encoded: the transaction
        # rolls back after the store dropped (or kept) listings for the first.
        try:
            store.admit_many_counted([(rng.choice(KEYS), ids, 5), (rng.choice(KEYS), ["\ud800"], 5)],
                                     window_s=window, now=now)
        except UnicodeEncodeError:
            stats["failed"] += 1
        else:
            raise AssertionError("a lone surrogate id was written")
    elif op < 0.48:
        store.reset(rng.choice(KEYS) if rng.random() < 0.85 else None)
    elif op < 0.53:
        store.seen(rng.choice(KEYS), window_s=window, now=now)
    else:
        for _ in range(rng.randint(1, 4)):
            _checked_listing(store, rng.choice(PREFIXES), _window(rng),
                             now + rng.choice([0.0, 0.0, 0.0, 1.0, -1.0, 4.0, -30.0, 15.0]), stats)


def _thread(seed: int, path: str, steps: int, stats: dict, errors: list, mono: Any) -> None:
    try:
        rng = random.Random(seed)
        stores = tuple(SqliteBudgetStore(path, monotonic=mono, timeout_s=60.0) for _ in range(2))
        now = 1000.0 + rng.uniform(-10, 10)  # each thread's clock is its own
        for _ in range(steps):
            now += rng.choice([0.0, 0.0, 0.2, 1.0, 3.0, 10.0, -2.0, -15.0])
            _step(rng, stores, now, stats)
        for store in stores:
            store.close()
    except BaseException as exc:  # noqa: BLE001  (reported by the caller)
        errors.append(exc)


_WRITER = """
import random, sys, os, time
sys.path.insert(0, {root!r})
from qdrant_guard.budget_stores import SqliteBudgetStore
from tests.sqlite_listing_check import KEYS, PIDS, WINDOWS
rng = random.Random({seed})
store = SqliteBudgetStore({path!r}, timeout_s=60.0)
now = 1000.0
while not os.path.exists({stop!r}):
    now += rng.choice([0.0, 1.0, 5.0, -3.0])
    if rng.random() < 0.9:
        store.admit(rng.choice(KEYS), rng.sample(PIDS, 2), cap=rng.randint(1, 6), window_s=rng.choice(WINDOWS), now=now)
    else:
        store.reset(rng.choice(KEYS))
    time.sleep(rng.choice([0.0, 0.001, 0.005]))
"""


def shape(seed: int) -> tuple[int, bool]:
    """A seed's threads and whether a child process writes: one thread alone keeps its listings
    longest (its own writes are what drop them), more threads and a child test the version."""
    return [(1, False), (3, True), (2, False), (1, True)][seed % 4]


def run(seed: int, workdir: str, threads: int | None = None, steps: int = 300, child: bool | None = None) -> dict:
    """One run: ``threads`` threads of ``steps`` random calls (and a child process writing while
    they run, with ``child``; both default to :func:`shape`); returns the counts and any stale or
    wrong listing."""
    threads = shape(seed)[0] if threads is None else threads
    child = shape(seed)[1] if child is None else child
    path = os.path.join(workdir, f"r35-{seed}.db")
    stop = path + ".stop"
    SqliteBudgetStore(path).close()  # the schema, before the child opens it
    stats: dict[str, Any] = {"listings": 0, "checked": 0, "kept_checked": 0, "unchecked": 0, "failed": 0,
                             "stale": [], "wrong": []}
    proc = None
    if child:
        proc = subprocess.Popen([sys.executable, "-c", _WRITER.format(root=ROOT, seed=seed, path=path, stop=stop)])
    errors: list[BaseException] = []
    t0 = time.monotonic()
    mono = lambda: time.monotonic() - t0 + seed  # noqa: E731
    workers = [threading.Thread(target=_thread, args=(seed * 100 + i, path, steps, stats, errors, mono))
               for i in range(threads)]
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        Path(stop).touch()
        if proc is not None:
            proc.wait(timeout=60)
    if errors:
        raise errors[0]
    if proc is not None and proc.returncode != 0:
        raise RuntimeError(f"the writer process failed ({proc.returncode})")
    for name in (path, path + "-wal", path + "-shm", stop):
        if os.path.exists(name):
            os.remove(name)
    return stats


def main(argv: list[str]) -> int:
    import tempfile

    first, count = (int(argv[1]), int(argv[2])) if len(argv) > 2 else (0, int(argv[1]) if len(argv) > 1 else 50)
    totals = {"listings": 0, "checked": 0, "kept_checked": 0, "unchecked": 0, "failed": 0}
    bad = 0
    with tempfile.TemporaryDirectory() as workdir:
        for seed in range(first, first + count):
            stats = run(seed, workdir)
            for name in totals:
                totals[name] += stats[name]
            if stats["stale"] or stats["wrong"]:
                bad += 1
                print(f"seed {seed}: stale {stats['stale'][:2]} wrong {stats['wrong'][:2]}", flush=True)
    print(f"seeds {first}..{first + count - 1}: {totals}, seeds with a stale or wrong listing: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
