"""The in-process budget store drops keys whose every id has left the window (an amortised sweep
run by admissions), so a long-lived process holds about the keys of one window, not every key it
ever admitted; and dropping them changes no decision: a randomized run against the same store
without the sweep, clocks that jump ahead or step back, and threads."""
from __future__ import annotations

import random

from qdrant_guard.budget import MemoryBudgetStore

from sweepkit import W, Clock, random_call, threads_admit_and_sweep
from sweepkit import source as _source


class NoSweepStore(MemoryBudgetStore):
    """The same store, keeping every key until its own next admission or listing (the old way)."""

    def _sweep(self, now, mono, budget):
        return None


def test_idle_keys_are_dropped_after_the_window():
    clock = Clock()
    store = MemoryBudgetStore(monotonic=clock)
    for i in range(1000):
        store.admit(_source("old", i), ["a", "b"], cap=5, window_s=W, now=clock())
    assert store.key_count() == 1000
    clock.t = 2 * W  # every one of them idle for more than a window, on both clocks
    for i in range(200):
        store.admit(_source("new", i), ["a"], cap=5, window_s=W, now=clock())
    assert store.key_count() == 200
    assert store.entries_by_prefix("src|old|", window_s=W, now=clock()) == {}
    assert len(store.entries_by_prefix("src|new|", window_s=W, now=clock())) == 200


def test_a_long_run_holds_about_the_keys_of_one_window():
    # Every tick admits 50 keys never seen before (a stream of principals x sources): without the
    # sweep the store held every one of them, 50 per tick for as long as the process ran.
    clock = Clock()
    store = MemoryBudgetStore(monotonic=clock)
    most = 0
    for tick in range(400):
        clock.t = float(tick)
        for j in range(50):
            store.admit(_source(f"p{tick}", j), ["x"], cap=1, window_s=W, now=clock())
        most = max(most, store.key_count())
    # The keys admitted within the window (ticks t-10 .. t) and those a tick past it.
    assert most <= 50 * (int(W) + 2)
    assert store.key_count() <= 50 * (int(W) + 2)


def _random_run(seed, stores, clock):
    """Drive every store through one random sequence and return what each answered."""
    rng = random.Random(seed)
    principals = [f"p{i}" for i in range(4)]
    ids = [f"i:{i}" for i in range(8)]
    answers = [[] for _ in stores]
    for store in stores:  # the longest window first, as a store serving both collections sees it
        store.seen("src|p0|c|s0", window_s=W, now=0.0)
    min_keys = [None for _ in stores]
    for _ in range(3000):
        clock.t += rng.choice([0.0, 0.0, 0.5, 1.0, 3.0, 7.0, 12.0, 30.0])
        window = rng.choice([W, W / 2])
        principal = rng.choice(principals)
        kind = rng.randrange(5)
        for index, store in enumerate(stores):
            got = random_call(store, seed, clock.t, kind, principal, window, ids)
            answers[index].append(got)
            count = store.key_count()
            min_keys[index] = count if min_keys[index] is None else min(min_keys[index], count)
    return answers, min_keys


def test_the_sweep_changes_no_decision():
    # The monotonic clock runs with the callers' clock, three times as fast (the callers' clock
    # alone then decides) or half as fast.
    for seed, rate in [(0, 1.0), (1, 1.0), (2, 3.0), (3, 0.5)]:
        clock = Clock()
        mono = lambda: clock.t * rate  # noqa: E731 - reads the run's clock
        swept, kept = MemoryBudgetStore(monotonic=mono), NoSweepStore(monotonic=mono)
        (with_sweep, without), _ = _random_run(seed, [swept, kept], clock)
        assert with_sweep == without, seed
        # The run dropped keys the store without the sweep still held.
        assert swept.key_count() < kept.key_count(), seed
        for principal in ("p0", "p1", "p2", "p3"):
            assert swept.entries_by_prefix(f"src|{principal}|", window_s=W, now=clock.t) == \
                kept.entries_by_prefix(f"src|{principal}|", window_s=W, now=clock.t)


def test_a_wall_clock_that_jumps_ahead_drops_nothing_early():
    # One caller's clock jumps a year ahead (then is corrected): its now says every other key is
    # idle, but the store's monotonic clock has not run a window, so none is dropped. Had it been,
    # the principal below would get its used-up source back once the clock was corrected.
    mono = Clock()
    stores = [MemoryBudgetStore(monotonic=mono), NoSweepStore(monotonic=mono)]
    victim = _source("victim", 0)
    for store in stores:
        assert store.admit(victim, ["a", "b"], cap=2, window_s=W, now=1000.0) == (["a", "b"], [])
    mono.t = 1.0
    for store in stores:
        for i in range(100):
            store.admit(_source("ahead", i), ["x"], cap=1, window_s=W, now=1000.0 + 365 * 86400)
    mono.t = 2.0
    assert [store.admit(victim, ["c"], cap=2, window_s=W, now=1002.0) for store in stores] == [([], ["c"])] * 2
    assert victim in stores[0].entries_by_prefix("src|victim|", window_s=W, now=1002.0)


def test_a_key_whose_newest_timestamp_is_ahead_of_now_is_kept():
    # The key was admitted while the clock ran ahead; after the clock stepped back its ids count
    # until newest + window on the key's clock (as in the SQLite and Redis stores), however long
    # the store's monotonic clock has run.
    mono = Clock()
    stores = [MemoryBudgetStore(monotonic=mono), NoSweepStore(monotonic=mono)]
    key = _source("p", 0)
    for store in stores:
        store.admit(key, ["a"], cap=1, window_s=W, now=5000.0)
    mono.t = 100.0  # many windows on the monotonic clock
    for store in stores:
        for i in range(100):  # admissions whose sweep reaches the key, on the stepped-back clock
            store.admit(_source("other", i), ["x"], cap=1, window_s=W, now=150.0)
    assert [store.admit(key, ["b"], cap=1, window_s=W, now=151.0) for store in stores] == [([], ["b"])] * 2
    # Re-admitted at a stepped-back now, its newest timestamp stands for a monotonic time that
    # far ahead: it is kept while the monotonic clock runs, until the callers' clock passes it.
    mono.t = 200.0
    for store in stores:
        store.admit(key, ["a"], cap=1, window_s=W, now=160.0)
    mono.t = 200.0 + 2 * W
    for store in stores:
        for i in range(100):
            store.admit(_source("other", i), ["x"], cap=1, window_s=W, now=180.0)
    assert key in stores[0].entries_by_prefix("src|p|", window_s=W, now=180.0)
    assert [store.admit(key, ["b"], cap=1, window_s=W, now=181.0) for store in stores] == [([], ["b"])] * 2


def test_threads_admit_and_sweep_together():
    clock = Clock()
    store = MemoryBudgetStore(monotonic=clock)
    threads_admit_and_sweep(store, clock, threads=8, per_thread=150)
    # The sweep's queue and the listing groups hold exactly the store's keys.
    assert set(store._idle) == set(store._keys)


def test_a_key_admitted_after_a_step_back_outlives_a_later_jump_ahead():
    # Admitted while the clock was behind its newest timestamp by 4900 s: on the monotonic clock
    # its ids count for 4900 s more than a window. A caller whose clock then jumps past that
    # newest timestamp must not get it dropped before then, or once the clock is corrected the
    # principal would have its used-up source back.
    mono = Clock()
    stores = [MemoryBudgetStore(monotonic=mono), NoSweepStore(monotonic=mono)]
    key = _source("p", 0)
    for store in stores:
        store.admit(key, ["a"], cap=1, window_s=W, now=5000.0)
        store.admit(key, ["a"], cap=1, window_s=W, now=100.0)  # the clock stepped back
    mono.t = 3 * W
    for store in stores:
        for i in range(100):
            store.admit(_source("jumped", i), ["x"], cap=1, window_s=W, now=6000.0)
    assert [store.admit(key, ["b"], cap=1, window_s=W, now=100.0 + 3 * W) for store in stores] == [([], ["b"])] * 2
