"""The SQLite budget store deletes rows that have left every window (an amortised sweep run by
admissions, in their own transaction), so a long-running deployment's file holds about one window
of rows instead of every row ever written; and deleting them changes no decision: a randomized run
against the same store without the sweep, a second process with a longer window, clocks that jump
ahead or step back, and a file written by the store before the sweep existed."""
from __future__ import annotations

import multiprocessing
import random
import sqlite3
import time

import pytest

from qdrant_guard.budget import SqliteBudgetStore

from sweepkit import W, Clock, random_call, threads_admit_and_sweep
from sweepkit import source as _source


# The schema SqliteBudgetStore created before the sweep (no timestamp index, no meta table).
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS qg_budget (
    key TEXT NOT NULL,
    pid TEXT NOT NULL,
    ts  REAL NOT NULL,
    PRIMARY KEY (key, pid)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS qg_budget_key_ts ON qg_budget (key, ts);
"""


class NoSweepStore(SqliteBudgetStore):
    """The same store, keeping every row until its key's next admission or count (the old way)."""

    def _sweep(self, db, now, limit):
        return None


def _rows(path):
    with sqlite3.connect(path) as db:
        return db.execute("SELECT key, pid, ts FROM qg_budget ORDER BY key, pid").fetchall()


def _row_count(path):
    return len(_rows(path))


def test_rows_of_idle_keys_are_deleted_after_the_window(tmp_path):
    path = str(tmp_path / "b.db")
    clock = Clock()
    store = SqliteBudgetStore(path, monotonic=clock)
    for i in range(300):
        store.admit(_source("old", i), ["i:1", "i:2"], cap=5, window_s=W, now=clock())
    assert store.key_count() == 300 and _row_count(path) == 600
    clock.t = 2 * W  # every one of them idle for more than a window, on both clocks
    for i in range(100):
        store.admit(_source("new", i), ["i:1"], cap=5, window_s=W, now=clock())
    assert store.key_count() == 100
    assert {key for key, _, _ in _rows(path)} == {_source("new", i) for i in range(100)}
    assert store.entries_by_prefix("src|old|", window_s=W, now=clock()) == {}
    assert len(store.entries_by_prefix("src|new|", window_s=W, now=clock())) == 100
    store.close()


def test_a_long_run_holds_about_the_rows_of_one_window(tmp_path):
    # Every tick admits 20 keys never seen before, 3 ids each (a stream of principals x sources):
    # without the sweep the file held every one of them, 60 rows per tick for as long as it ran.
    path = str(tmp_path / "b.db")
    clock = Clock()
    store = SqliteBudgetStore(path, monotonic=clock)
    most = 0
    for tick in range(120):
        clock.t = float(tick)
        for j in range(20):
            store.admit(_source(f"p{tick}", j), ["i:1", "i:2", "i:3"], cap=3, window_s=W, now=clock())
        most = max(most, _row_count(path))
    # The rows admitted within the window (ticks t-10 .. t) and those of a tick past it.
    assert most <= 60 * (int(W) + 2)
    assert store.key_count() <= 20 * (int(W) + 2)
    store.close()


def _random_run(seed, stores, clock):
    """Drive every store through one random sequence; return what each answered and its rows
    every 20 steps."""
    rng = random.Random(seed)
    sizes = [[] for _ in stores]
    principals = [f"p{i}" for i in range(4)]
    ids = [f"i:{i}" for i in range(8)]
    answers = [[] for _ in stores]
    for store in stores:  # the longest window first, as a store serving both collections sees it
        store.seen("src|p0|c|s0", window_s=W, now=0.0)
    for step in range(1500):
        if step % 20 == 0:
            for index, store in enumerate(stores):
                sizes[index].append(_row_count(store.path))
        clock.t += rng.choice([0.0, 0.0, 0.5, 1.0, 3.0, 7.0, 12.0, 30.0])
        window = rng.choice([W, W / 2])
        principal = rng.choice(principals)
        kind = rng.randrange(5)
        for index, store in enumerate(stores):
            got = random_call(store, seed, clock.t, kind, principal, window, ids)
            answers[index].append(got)
    return answers, sizes


def test_the_sweep_changes_no_decision(tmp_path):
    # The monotonic clock runs with the callers' clock, three times as fast (the callers' clock
    # alone then decides) or half as fast.
    for seed, rate in [(0, 1.0), (1, 3.0), (2, 0.5)]:
        clock = Clock()
        mono = lambda: clock.t * rate  # noqa: E731 - reads the run's clock
        swept = SqliteBudgetStore(tmp_path / f"swept{seed}.db", monotonic=mono)
        kept = NoSweepStore(tmp_path / f"kept{seed}.db", monotonic=mono)
        (with_sweep, without), (swept_rows, kept_rows) = _random_run(seed, [swept, kept], clock)
        assert with_sweep == without, seed
        # The run deleted rows the store without the sweep still held.
        assert all(a <= b for a, b in zip(swept_rows, kept_rows)), seed
        assert sum(swept_rows) < sum(kept_rows), seed
        for principal in ("p0", "p1", "p2", "p3"):
            assert swept.entries_by_prefix(f"src|{principal}|", window_s=W, now=clock.t) == \
                kept.entries_by_prefix(f"src|{principal}|", window_s=W, now=clock.t)
        swept.close()
        kept.close()


def _long_window_worker(path, now, ids, queue):
    # Another process, on a collection with a ten times longer window.
    store = SqliteBudgetStore(path, monotonic=Clock(now))
    queue.put((store.admit("src|p|long|s", ids, cap=2, window_s=10 * W, now=now),
               store.seen("src|p|long|s", window_s=10 * W, now=now)))
    store.close()


def _in_child(ctx, path, now, ids):
    queue = ctx.Queue()
    proc = ctx.Process(target=_long_window_worker, args=(path, now, ids, queue))
    proc.start()
    got = queue.get(timeout=60)
    proc.join(timeout=60)
    assert proc.exitcode == 0
    return got


def test_a_process_with_a_longer_window_keeps_its_ids(tmp_path):
    # This process uses a window of W and sweeps; another process admits under 10 W. Had the sweep
    # used only the windows of this process, the other's ids would go after W, and that process's
    # principal would get its used-up source back within its own window.
    path = str(tmp_path / "shared.db")
    ctx = multiprocessing.get_context("fork")
    clock = Clock()
    store = SqliteBudgetStore(path, monotonic=clock)
    for i in range(200):
        store.admit(_source("short", i), ["i:1"], cap=1, window_s=W, now=0.0)
    assert _in_child(ctx, path, 10 * W, ["a", "b"]) == ((["a", "b"], []), 2)
    clock.t = 15 * W  # past the long window for the first keys, within it for the other process's
    for i in range(200):
        store.admit(_source("later", i), ["i:1"], cap=1, window_s=W, now=clock())
    keys = {key for key, _, _ in _rows(path)}
    assert not any(key.startswith("src|short|") for key in keys)  # the sweep ran
    assert "src|p|long|s" in keys
    assert _in_child(ctx, path, 15 * W, ["c"]) == (([], ["c"]), 2)
    store.close()


def test_two_store_objects_with_different_windows_on_one_file(tmp_path):
    # The same as above within one process: the short store never saw the long window, the file did.
    path = str(tmp_path / "shared.db")
    clock = Clock()
    short = SqliteBudgetStore(path, monotonic=clock)
    long_ = SqliteBudgetStore(path, monotonic=clock)
    for i in range(200):
        short.admit(_source("short", i), ["i:1"], cap=1, window_s=W, now=0.0)
    clock.t = 5 * W
    assert long_.admit("src|p|long|s", ["a", "b"], cap=2, window_s=10 * W, now=clock()) == (["a", "b"], [])
    clock.t = 12 * W
    # A store opened after the long window was recorded records its shorter one: the file keeps
    # the longest.
    third = SqliteBudgetStore(path, monotonic=clock)
    for i in range(200):
        short.admit(_source("later", i), ["i:1"], cap=1, window_s=W, now=clock())
        third.admit(_source("third", i), ["i:1"], cap=1, window_s=W, now=clock())
    third.close()
    assert not any(key.startswith("src|short|") for key, _, _ in _rows(path))
    assert long_.admit("src|p|long|s", ["c"], cap=2, window_s=10 * W, now=clock()) == ([], ["c"])
    assert short.entries_by_prefix("src|p|", window_s=10 * W, now=clock()) == {"src|p|long|s": frozenset({"a", "b"})}
    short.close()
    long_.close()


def test_a_wall_clock_that_jumps_ahead_deletes_nothing_early(tmp_path):
    # One caller's clock jumps a year ahead (then is corrected): its now says every other row has
    # left the window, but no monotonic clock has run a window, so none is deleted. Had they been,
    # the principal below would get its used-up source back once the clock was corrected. A store
    # opened in a new process while the clock is ahead starts from the file's clock, not its now.
    path = str(tmp_path / "b.db")
    mono = Clock()
    store = SqliteBudgetStore(path, monotonic=mono)
    victim = _source("victim", 0)
    assert store.admit(victim, ["a", "b"], cap=2, window_s=W, now=1000.0) == (["a", "b"], [])
    mono.t = 1.0
    jumped = 1000.0 + 365 * 86400
    for i in range(100):
        store.admit(_source("ahead", i), ["x"], cap=1, window_s=W, now=jumped)
    fresh = SqliteBudgetStore(path, monotonic=Clock(5000.0))
    for i in range(100):
        fresh.admit(_source("ahead2", i), ["x"], cap=1, window_s=W, now=jumped)
    assert victim in {key for key, _, _ in _rows(path)}
    mono.t = 2.0
    assert store.admit(victim, ["c"], cap=2, window_s=W, now=1002.0) == ([], ["c"])
    # Once the monotonic clock has run past the window, the victim's idle rows do go.
    mono.t = 1002.0 + 2 * W
    for i in range(100):
        store.admit(_source("late", i), ["x"], cap=1, window_s=W, now=1002.0 + 2 * W)
    assert victim not in {key for key, _, _ in _rows(path)}
    store.close()
    fresh.close()


def test_a_row_ahead_of_now_is_kept_after_a_clock_step_back(tmp_path):
    # The key was admitted while the clock ran ahead; after the clock stepped back its ids count
    # until newest + window on the key's clock, however long the monotonic clock has run.
    path = str(tmp_path / "b.db")
    mono = Clock()
    store = SqliteBudgetStore(path, monotonic=mono)
    key = _source("p", 0)
    store.admit(_source("gone", 0), ["x"], cap=1, window_s=W, now=100.0)
    store.admit(key, ["a"], cap=1, window_s=W, now=5000.0)
    mono.t = 100.0  # many windows on the monotonic clock
    for i in range(100):
        store.admit(_source("other", i), ["x"], cap=1, window_s=W, now=150.0)
    assert store.admit(key, ["b"], cap=1, window_s=W, now=151.0) == ([], ["b"])
    keys = {k for k, _, _ in _rows(path)}
    assert key in keys
    assert _source("gone", 0) not in keys  # the sweep ran
    store.close()


def test_a_file_of_the_old_schema_opens_and_is_swept(tmp_path):
    path = str(tmp_path / "old.db")
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
        db.executemany("INSERT INTO qg_budget (key, pid, ts) VALUES (?, ?, ?)",
                       [(_source("idle", i), f"i:{j}", 100.0) for i in range(50) for j in range(3)]
                       + [(_source("live", 0), "i:1", 195.0), (_source("live", 0), "i:2", 195.0)])
    db.close()
    clock = Clock()
    store = SqliteBudgetStore(path, monotonic=clock)
    assert store.key_count() == 51
    # Its rows count as before.
    assert store.seen(_source("live", 0), window_s=W, now=200.0) == 2
    assert store.admit(_source("live", 0), ["i:3"], cap=2, window_s=W, now=200.0) == ([], ["i:3"])
    # The sweep starts at the file's newest row: the rows a window older than it go at once.
    for i in range(60):
        store.admit(_source("new", i), ["i:1"], cap=1, window_s=W, now=200.0)
    assert store.key_count() == 61
    assert not any(key.startswith("src|idle|") for key, _, _ in _rows(path))
    with sqlite3.connect(path) as db:
        indexes = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "qg_budget_ts" in indexes
    db.close()
    store.close()
    # And it opens again, its recorded window kept.
    again = SqliteBudgetStore(path, monotonic=clock)
    assert again.admit(_source("live", 0), ["i:1", "i:3"], cap=2, window_s=W, now=201.0) == (["i:1"], ["i:3"])
    again.close()


def _boot():
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


@pytest.mark.skipif(_boot() is None, reason="needs Linux's boot id")
def test_a_process_started_after_a_stop_advances_the_clock_by_the_time_down(tmp_path):
    # Every process stopped for 1000 s (the file's clock was last advanced 1000 s ago on this
    # boot's monotonic clock, which every process shares). The first process after the stop
    # advances the clock by those 1000 s, not from where it stood: otherwise every full stop would
    # hold the sweep back for good, and the file would grow by the rows of each stop. A caller's
    # clock a year ahead still advances it by the 1000 s only, and a file from another boot not
    # at all (a process's own monotonic clock takes over from its second admission).
    def prepared(name, boot):
        path = str(tmp_path / name)
        store = SqliteBudgetStore(path)
        for i in range(50):
            store.admit(_source("idle", i), ["i:1", "i:2"], cap=2, window_s=W, now=1500.0)
        store.admit(_source("victim", 0), ["a", "b"], cap=2, window_s=W, now=1995.0)
        store.close()
        with sqlite3.connect(path) as db:
            db.executemany("INSERT OR REPLACE INTO qg_budget_meta (name, value) VALUES (?, ?)",
                           [("clock", 1000.0), ("mono", time.monotonic() - 1000.0), ("boot", boot)])
        db.close()
        return path

    for now in (2000.0, 2000.0 + 365 * 86400):
        path = prepared(f"same{now}.db", _boot())
        store = SqliteBudgetStore(path)
        for i in range(10):  # up to 18 rows each
            store.admit(_source("new", i), ["i:1"], cap=1, window_s=W, now=now)
        keys = {key for key, _, _ in _rows(path)}
        assert not any(key.startswith("src|idle|") for key in keys), now
        assert _source("victim", 0) in keys, now
        assert store.admit(_source("victim", 0), ["c"], cap=2, window_s=W, now=2000.0) == ([], ["c"])
        store.close()

    path = prepared("other.db", "another boot")
    store = SqliteBudgetStore(path)
    store.admit(_source("new", 0), ["i:1"], cap=1, window_s=W, now=2000.0)  # its first: no advance
    assert len([key for key, _, _ in _rows(path) if key.startswith("src|idle|")]) == 50 * 2
    store.close()


def test_admissions_closer_than_the_clock_step_still_advance_it(tmp_path):
    # The file's clock is written only once it has moved a thousandth of the window: admissions
    # that each come sooner than that must still add up, or it would never move.
    path = str(tmp_path / "b.db")
    clock = Clock()
    store = SqliteBudgetStore(path, monotonic=clock)
    step = 0.9 * W / 1000
    for i in range(1500):
        clock.t = i * step
        store.admit(_source("p", i), ["i:1"], cap=1, window_s=W, now=clock())
    # Rows of about the last window (10 / 0.009 = 1111 admissions) are left, and the oldest are gone.
    assert _row_count(path) <= 1111 + 20
    assert _source("p", 0) not in {key for key, _, _ in _rows(path)}
    store.close()


def test_threads_admit_and_sweep_together(tmp_path):
    path = str(tmp_path / "b.db")
    clock = Clock()
    store = SqliteBudgetStore(path, monotonic=clock)
    threads, per_thread = 4, 60
    threads_admit_and_sweep(store, clock, threads, per_thread)
    assert {key for key, _, _ in _rows(path)} == (
        {_source(f"n{t}", i) for t in range(threads) for i in range(per_thread)}
        | {_source(f"t{t}", i) for t in range(threads) for i in range(0, per_thread, 2)})
    store.close()


def test_a_listing_with_a_longer_window_records_it_before_it_reads(tmp_path):
    # A store whose first call is a listing with a ten times longer window: what it lists must not
    # be swept by the short-window store's next admissions before its own admission counts it.
    path = str(tmp_path / "b.db")
    clock = Clock()
    short = SqliteBudgetStore(path, monotonic=clock)
    long_ = SqliteBudgetStore(path, monotonic=clock)
    short.admit("src|p|c|s", ["a", "b"], cap=2, window_s=W, now=0.0)
    clock.t = 5 * W
    listed = long_.entries_by_prefix("src|p|", window_s=10 * W, now=clock())
    assert listed == {"src|p|c|s": frozenset({"a", "b"})}
    for i in range(50):
        short.admit(_source("other", i), ["x"], cap=1, window_s=W, now=clock())
    assert long_.entries_by_prefix("src|p|", window_s=10 * W, now=clock()) == listed
    assert long_.admit("src|p|c|s", ["c"], cap=2, window_s=10 * W, now=clock()) == ([], ["c"])
    # Past the longer window, the short store's sweep deletes them.
    clock.t = 11 * W
    for i in range(50):
        short.admit(_source("later", i), ["x"], cap=1, window_s=W, now=clock())
    assert "src|p|c|s" not in {key for key, _, _ in _rows(path)}
    short.close()
    long_.close()
