"""The SQLite budget store's kept listings (h-sqlcache): a listing is read from the file again only
when something could have changed it. Another connection's commit (a second store object on the
file, another thread's connection, a raw connection, another process) changes ``PRAGMA
data_version``; the connection's own admissions and resets drop what they change; and a kept
listing is given only while every id in it is still in the window. Checked against the same
store with nothing kept, over random runs of two store objects sharing one file."""
from __future__ import annotations

import multiprocessing
import os
import random
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from qdrant_guard.budget import ExtractionBudget, SqliteBudgetStore

from sweepkit import Clock

ROOT = str(Path(__file__).resolve().parents[1])
W = 100.0
P = "src|p|c|"


class Uncached(SqliteBudgetStore):
    """The store as it was: every listing read from the file."""

    def _entries_by_prefix(self, prefix, window_s, now):
        self._connection()
        self._local.kept.by_prefix.clear()
        return super()._entries_by_prefix(prefix, window_s, now)


def _listings_read(store):
    """Count the listing queries this thread's connection of ``store`` runs from now on."""
    count = [0]

    def trace(sql):
        if sql.startswith("SELECT key, pid, ts FROM qg_budget"):
            count[0] += 1

    store._connection().set_trace_callback(trace)
    return count


def _listed(store, now, window=W, prefix=P):
    return {k[len(prefix):]: set(v) for k, v in store.entries_by_prefix(prefix, window_s=window, now=now).items()}


# --- (1) the kept listing is used --------------------------------------------------------------


def test_a_read_that_only_rereads_held_points_lists_again_without_a_query(tmp_path):
    # A budgeted read: list the principal's sources, then admit the points returned. Points it holds
    # already are refreshed, which changes no listing: the next read's listing is the kept one.
    store = SqliteBudgetStore(tmp_path / "b.db")
    clock = Clock(1000.0)
    budget = ExtractionBudget(store, window_s=W, clock=clock)
    queries = _listings_read(store)
    requests = {"s1": ([1, 2], 10), "s2": ([3], 10)}
    assert budget.admitted_by_source(principal="p", collection="c") == {}
    budget.admit_many(principal="p", collection="c", requests=requests, max_source_coverage=1.0)
    assert queries[0] == 1
    want = {"s1": frozenset({"i:1", "i:2"}), "s2": frozenset({"i:3"})}
    for step in range(5):
        clock.t += 1.0
        assert budget.admitted_by_source(principal="p", collection="c") == want
        budget.admit_many(principal="p", collection="c", requests=requests, max_source_coverage=1.0)
    assert queries[0] == 2  # the listing after the first admission (which added ids), and no other
    store.close()


def test_a_kept_listing_is_given_as_a_copy(tmp_path):
    store = SqliteBudgetStore(tmp_path / "b.db")
    store.admit(P + "s", ["a"], cap=5, window_s=W, now=1.0)
    first = store.entries_by_prefix(P, window_s=W, now=2.0)
    first[P + "forged"] = frozenset({"x"})
    del first[P + "s"]
    assert store.entries_by_prefix(P, window_s=W, now=3.0) == {P + "s": frozenset({"a"})}
    store.close()


def test_own_admissions_and_resets_drop_the_listings_they_change(tmp_path):
    store = SqliteBudgetStore(tmp_path / "b.db")
    queries = _listings_read(store)
    store.admit_points([(P + "s", 5)], [("a", [0])], window_s=W, now=1.0)
    assert _listed(store, 2.0) == {"s": {"a"}}
    store.admit_points([(P + "s", 5)], [("a", [0])], window_s=W, now=3.0)  # a refresh: kept
    assert _listed(store, 4.0) == {"s": {"a"}} and queries[0] == 1
    store.admit_points([(P + "t", 5)], [("b", [0])], window_s=W, now=5.0)  # a new key of the prefix
    assert _listed(store, 6.0) == {"s": {"a"}, "t": {"b"}}
    store.admit(P + "s", ["c"], cap=5, window_s=W, now=7.0)  # an id added through admit
    assert _listed(store, 8.0) == {"s": {"a", "c"}, "t": {"b"}}
    store.admit(P + "x|y", ["d"], cap=5, window_s=W, now=9.0)  # a key with a longer group
    assert _listed(store, 10.0) == {"s": {"a", "c"}, "t": {"b"}, "x|y": {"d"}}
    assert _listed(store, 10.0, prefix="src|p|") == {"c|s": {"a", "c"}, "c|t": {"b"}, "c|x|y": {"d"}}
    store.admit_many_counted([(P + "x|y", ["e"], 5)], window_s=W, now=11.0)
    assert _listed(store, 12.0, prefix="src|p|")["c|x|y"] == {"d", "e"}  # a prefix two "|" up
    assert _listed(store, 12.0)["x|y"] == {"d", "e"}
    store.reset(P + "t")
    assert _listed(store, 12.0) == {"s": {"a", "c"}, "x|y": {"d", "e"}}
    # An admission under a shorter window expires a's row (3 s old at 54 s under 50 s): the
    # listing under W, which still counted it, is read again.
    assert _listed(store, 53.0) == {"s": {"a", "c"}, "x|y": {"d", "e"}}
    store.admit(P + "s", ["c"], cap=5, window_s=50.0, now=54.0)
    assert _listed(store, 54.0) == {"s": {"c"}, "x|y": {"d", "e"}}
    store.seen(P + "x|y", window_s=1.0, now=54.0)  # a count that expires rows drops them too
    assert _listed(store, 54.0) == {"s": {"c"}}
    store.reset()
    assert _listed(store, 54.0) == {}
    store.close()


# --- (2) other connections' writes are seen on the next read ---------------------------------


def test_a_second_store_object_on_the_file_is_seen_on_the_next_read(tmp_path):
    path = tmp_path / "b.db"
    reader, writer = SqliteBudgetStore(path), SqliteBudgetStore(path)
    reader.admit(P + "s", ["a"], cap=5, window_s=W, now=1.0)
    assert _listed(reader, 2.0) == {"s": {"a"}}
    assert _listed(reader, 2.0) == {"s": {"a"}}  # kept
    writer.admit(P + "s", ["b"], cap=5, window_s=W, now=3.0)
    assert _listed(reader, 3.0) == {"s": {"a", "b"}}
    writer.admit(P + "t", ["c"], cap=5, window_s=W, now=3.0)
    assert _listed(reader, 3.0) == {"s": {"a", "b"}, "t": {"c"}}
    writer.reset(P + "s")
    assert _listed(reader, 3.0) == {"t": {"c"}}
    writer.admit(P + "t", ["c"], cap=5, window_s=W, now=3.0)  # a refresh by another: no id changes
    assert _listed(reader, 3.0) == {"t": {"c"}}
    # A row written without the store (a raw connection) is seen as well.
    with sqlite3.connect(path) as raw:
        raw.execute("INSERT INTO qg_budget (key, pid, ts) VALUES (?, 'z', 3.0)", (P + "t",))
    assert _listed(reader, 3.0) == {"t": {"c", "z"}}
    reader.close()
    writer.close()


def test_another_thread_of_the_same_store_object_is_seen(tmp_path):
    # Each thread has its own connection, so another thread's commit changes this one's data_version.
    store = SqliteBudgetStore(tmp_path / "b.db")
    store.admit(P + "s", ["a"], cap=5, window_s=W, now=1.0)
    assert _listed(store, 2.0) == {"s": {"a"}}
    worker = threading.Thread(target=store.admit, args=(P + "s", ["b"]), kwargs=dict(cap=5, window_s=W, now=3.0))
    worker.start()
    worker.join()
    assert _listed(store, 3.0) == {"s": {"a", "b"}}
    store.close()


_CHILD = """
import sys
from qdrant_guard.budget import SqliteBudgetStore
store = SqliteBudgetStore(sys.argv[1])
store.admit(sys.argv[2], [sys.argv[3]], cap=5, window_s=100.0, now=3.0)
store.close()
"""


def test_another_process_is_seen_on_the_next_read(tmp_path):
    path = str(tmp_path / "b.db")
    store = SqliteBudgetStore(path)
    store.admit(P + "s", ["a"], cap=5, window_s=W, now=1.0)
    assert _listed(store, 2.0) == {"s": {"a"}}
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for key, pid in ((P + "s", "b"), (P + "t", "c")):
        subprocess.run([sys.executable, "-c", _CHILD, path, key, pid], env=env, check=True, timeout=120)
        assert _listed(store, 3.0) == ({"s": {"a", "b"}} if pid == "b" else {"s": {"a", "b"}, "t": {"c"}})
    store.close()


def _forked_child(store, queue):
    queue.put(_listed(store, 4.0))


def test_a_forked_child_does_not_take_its_parents_kept_listing(tmp_path):
    # The parent keeps a listing, another connection then adds an id and the parent forks before it
    # lists again: the child opens its own connection and must read the file, not the parent's copy.
    path = str(tmp_path / "b.db")
    parent, other = SqliteBudgetStore(path), SqliteBudgetStore(path)
    parent.admit(P + "s", ["a"], cap=5, window_s=W, now=1.0)
    assert _listed(parent, 2.0) == {"s": {"a"}}
    other.admit(P + "s", ["b"], cap=5, window_s=W, now=3.0)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_forked_child, args=(parent, queue))
    child.start()
    got = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0 and got == {"s": {"a", "b"}}
    assert _listed(parent, 4.0) == {"s": {"a", "b"}}
    parent.close()
    other.close()


# --- (3) expiry, with a clock that moves ------------------------------------------------------


def test_a_kept_listing_is_not_given_once_an_id_in_it_has_left_the_window(tmp_path):
    store = SqliteBudgetStore(tmp_path / "b.db")
    store.admit(P + "s", ["a"], cap=5, window_s=W, now=0.0)
    store.admit(P + "s", ["b"], cap=5, window_s=W, now=50.0)
    queries = _listings_read(store)
    assert _listed(store, 60.0) == {"s": {"a", "b"}}
    assert _listed(store, 100.0) == {"s": {"a", "b"}} and queries[0] == 1  # a is 100 s old: still in
    assert _listed(store, 100.5) == {"s": {"b"}}  # nothing written: time alone ends a
    assert _listed(store, 30.0) == {"s": {"a", "b"}}  # the clock back: a counts again, as uncached
    assert _listed(store, 149.0) == {"s": {"b"}}
    assert _listed(store, 151.0) == {}
    assert _listed(store, 60.0, window=10.0) == {"s": {"b"}}  # another window: its own listing
    assert _listed(store, 60.0) == {"s": {"a", "b"}}
    store.close()


def test_a_refresh_under_a_longer_window_ends_a_shorter_windows_listing(tmp_path):
    # Listed under 50 s at 10 s (a: 0 s, b: 10 s); b re-read under 100 s at 90 s (no id added, the
    # listing kept); listed at 40 s under 50 s, a is out: the key's window ends at b's 90 s.
    store = SqliteBudgetStore(tmp_path / "b.db")
    store.admit_points([(P + "s", 5)], [("a", [0])], window_s=50.0, now=0.0)
    store.admit_points([(P + "s", 5)], [("b", [0])], window_s=50.0, now=10.0)
    assert _listed(store, 10.0, window=50.0) == {"s": {"a", "b"}}
    store.admit_points([(P + "s", 5)], [("b", [0])], window_s=100.0, now=90.0)
    assert _listed(store, 40.0, window=50.0) == {"s": {"b"}}
    store.close()


def test_a_listing_with_an_id_out_of_the_window_is_not_kept(tmp_path):
    # a is out at 120 s; with the clock back at 60 s it counts again, which a listing kept at 120 s
    # (which does not hold it) could not say.
    store = SqliteBudgetStore(tmp_path / "b.db")
    store.admit(P + "s", ["a"], cap=5, window_s=W, now=0.0)
    store.admit(P + "t", ["b"], cap=5, window_s=W, now=50.0)
    assert _listed(store, 120.0) == {"t": {"b"}}
    assert _listed(store, 60.0) == {"s": {"a"}, "t": {"b"}}
    store.close()


# --- (4) differential: two store objects on one file against the uncached store -----------------


KEYS = [P + f"s{i}" for i in range(3)] + ["src|p|d|s0", "src|q|c|s0", P + "x|y"]
PREFIXES = [P, P, P, "src|p|d|", "src|q|c|", "src|p|", P + "x|", P + "s1", ""]


def _step(pairs, rng, now, who):
    """One random call, made on object ``who`` of each pair: what each returned."""
    window = rng.choice([50.0, 100.0])
    picked = [f"i:{rng.randrange(8)}" for _ in range(rng.randint(1, 3))]
    kind = rng.randrange(7)
    if kind <= 2:  # a read: list, then admit, often ids the keys hold (a refresh)
        prefix = rng.choice(PREFIXES)
        chosen = list(dict.fromkeys(rng.choice(KEYS) for _ in range(rng.randint(1, 3))))
        points = [(pid, sorted({rng.randrange(len(chosen)) for _ in range(rng.randint(1, len(chosen)))}))
                  for pid in dict.fromkeys(picked)]
        caps = [(k, rng.randrange(6)) for k in chosen]
        return [(pair[who].entries_by_prefix(prefix, window_s=window, now=now),
                 pair[who].admit_points(caps, points, window_s=window, now=now)) for pair in pairs]
    if kind == 3:
        key, cap = rng.choice(KEYS), rng.randrange(6)
        return [pair[who].admit_counted(key, picked, cap=cap, window_s=window, now=now) for pair in pairs]
    if kind == 4:
        key = rng.choice(KEYS)
        return [pair[who].seen(key, window_s=window, now=now) for pair in pairs]
    if kind == 5 and rng.random() < 0.15:
        key = rng.choice(KEYS) if rng.random() < 0.8 else None
        return [pair[who].reset(key) for pair in pairs]
    prefix = rng.choice(PREFIXES)
    return [pair[who].entries_by_prefix(prefix, window_s=window, now=now) for pair in pairs]


@pytest.mark.parametrize("seed", range(6))
def test_two_store_objects_on_one_file_decide_as_the_uncached_store(tmp_path, seed):
    rng = random.Random(seed)
    clock = Clock(0.0)
    kept = tuple(SqliteBudgetStore(tmp_path / "kept.db", monotonic=clock) for _ in range(2))
    plain = tuple(Uncached(tmp_path / "plain.db", monotonic=clock) for _ in range(2))
    queries = [_listings_read(s) for s in kept]
    hits = 0
    now, who = 0.0, 0
    for _ in range(900):
        clock.t += rng.choice([0.0, 0.5, 1.0, 7.0, 30.0])
        now = max(0.0, now + rng.choice([0.0, 0.0, 1.0, 7.0, 30.0, 60.0, -20.0, 0.5]))
        if rng.random() < 0.3:  # runs of calls on one object, as a process serves several reads
            who = 1 - who
        got, want = _step((kept, plain), rng, now, who)
        assert got == want
        for _ in range(rng.randrange(6)):  # more listings in between, by either object
            reader, prefix = rng.randrange(2), rng.choice(PREFIXES)
            window, at = rng.choice([50.0, 100.0]), max(0.0, now + rng.choice([0.0, 0.0, 0.0, -10.0, 5.0, 45.0, -60.0]))
            before = queries[reader][0]
            got, want = (pair[reader].entries_by_prefix(prefix, window_s=window, now=at) for pair in (kept, plain))
            assert got == want, (prefix, window, at)
            hits += queries[reader][0] == before and bool(got)
    assert hits > 50  # listings were answered from the kept ones
    for store in (*kept, *plain):
        store.close()
    with sqlite3.connect(tmp_path / "kept.db") as a, sqlite3.connect(tmp_path / "plain.db") as b:
        select = "SELECT key, pid, ts FROM qg_budget ORDER BY key, pid"
        assert a.execute(select).fetchall() == b.execute(select).fetchall()
