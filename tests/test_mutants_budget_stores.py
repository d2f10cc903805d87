"""The SQLite and Redis budget stores where the third mutation pass (scripts/mutate.py) found no
test: each test here fails with one surviving mutant applied. Real SQLite files and a real
redis-server (the ``redis_url`` fixture)."""
from __future__ import annotations

import os
import sqlite3
import uuid

import pytest
from test_budget_redis_index import _recording_client
from tests.redis_server import free_port

from qdrant_guard import budget_redis as _budget_redis
from qdrant_guard.budget import BudgetStoreError, MemoryBudgetStore, RedisBudgetStore, SqliteBudgetStore

# ------------------------------------------------------------------ SQLite


def test_a_bytes_path_is_refused_by_name(tmp_path):
    # Without the check a bytes path failed later, in a str/bytes comparison that names neither
    # the argument nor the fix.
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        SqliteBudgetStore(os.fsencode(tmp_path / "b.db"))


@pytest.mark.parametrize("timeout_s", [0, 0.0, -1.0])
def test_a_timeout_that_is_not_positive_is_refused(tmp_path, timeout_s):
    # A zero timeout makes every admission that meets another writer fail at once.
    with pytest.raises(ValueError, match="timeout_s"):
        SqliteBudgetStore(tmp_path / "b.db", timeout_s=timeout_s)


def test_a_database_whose_budget_table_cannot_be_made_is_a_store_error(tmp_path):
    # qg_budget taken by a view: CREATE TABLE IF NOT EXISTS passes, CREATE INDEX on it fails. The
    # store must not come up (every admission would fail later, or worse, read the view).
    path = tmp_path / "taken.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE VIEW qg_budget AS SELECT 'k' AS key, 'p' AS pid, 0.0 AS ts")
    with pytest.raises(BudgetStoreError, match="cannot create the budget table"):
        SqliteBudgetStore(path)


def test_the_database_runs_in_wal_mode(tmp_path):
    # Documented: readers (entries_by_prefix) read a snapshot without the write lock.
    path = tmp_path / "wal.db"
    store = SqliteBudgetStore(path)
    store.admit("k", ["a"], cap=1, window_s=10, now=0.0)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_close_closes_every_connection_the_store_opened(tmp_path):
    # SQLite removes the WAL file when the last connection to the database closes: a connection
    # close() did not know of keeps it.
    path = tmp_path / "closed.db"
    store = SqliteBudgetStore(path)
    store.admit("k", ["a"], cap=1, window_s=10, now=0.0)
    assert os.path.exists(f"{path}-wal")
    store.close()
    assert not os.path.exists(f"{path}-wal")


def test_a_listing_that_sqlite_fails_is_a_store_error_not_an_empty_listing(tmp_path):
    # An empty listing reads as "nothing admitted yet": the failure must reach the caller.
    path = tmp_path / "gone.db"
    store = SqliteBudgetStore(path)
    store.admit("src|p|c|memo", ["a"], cap=1, window_s=10, now=0.0)
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE qg_budget RENAME TO elsewhere")
    with pytest.raises(BudgetStoreError, match="no such table"):
        store.entries_by_prefix("src|p|c|", window_s=10, now=0.0)
    store.close()


def test_an_admission_sqlite_aborts_midway_leaves_nothing_behind(tmp_path):
    # A statement SQLite aborts does not end the transaction: the store must roll it back, or the
    # ids admitted before the failure would be committed by the next statement of the connection,
    # and the open transaction would hold the write lock (every later admission fails).
    path = tmp_path / "abort.db"
    store = SqliteBudgetStore(path)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TRIGGER no_boom BEFORE INSERT ON qg_budget WHEN NEW.pid = 'boom' "
                   "BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END")
    with pytest.raises(BudgetStoreError, match="refused by trigger"):
        store.admit("k", ["a", "boom"], cap=5, window_s=10, now=0.0)
    assert store.seen("k", window_s=10, now=0.0) == 0
    assert store.admit("k", ["b"], cap=5, window_s=10, now=0.0) == (["b"], [])
    store.close()


def test_a_commit_sqlite_refuses_is_a_store_error_and_is_rolled_back(tmp_path):
    # A deferred foreign key is checked at COMMIT: that COMMIT fails and leaves the transaction
    # open. Swallowed, the admission would report ids released that were never counted.
    path = tmp_path / "commit.db"
    store = SqliteBudgetStore(path)
    with sqlite3.connect(path) as db:
        db.executescript("""
            CREATE TABLE parent (id TEXT PRIMARY KEY);
            CREATE TABLE child (pid TEXT REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);
            CREATE TRIGGER audit_pid AFTER INSERT ON qg_budget WHEN NEW.pid = 'orphan'
            BEGIN INSERT INTO child VALUES (NEW.pid); END;
        """)
    store._connection().execute("PRAGMA foreign_keys = ON")  # this thread's connection
    with pytest.raises(BudgetStoreError, match="commit failed"):
        store.admit("k", ["a", "orphan"], cap=5, window_s=10, now=0.0)
    assert store.seen("k", window_s=10, now=0.0) == 0
    assert store.admit("k", ["b"], cap=5, window_s=10, now=0.0) == (["b"], [])
    store.close()


def test_a_write_lock_held_elsewhere_past_the_timeout_is_named_as_such(tmp_path):
    path = tmp_path / "locked.db"
    store = SqliteBudgetStore(path, timeout_s=0.01)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(BudgetStoreError, match="is unavailable: database is locked"):
            store.admit("k", ["a"], cap=5, window_s=10, now=0.0)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.admit("k", ["a"], cap=5, window_s=10, now=0.0) == (["a"], [])
    store.close()


# ------------------------------------------------------------------ Redis


@pytest.mark.redis
def test_a_cluster_admits_each_key_with_its_own_script(redis_url):
    # Documented: on a Redis Cluster keys of different slots are admitted one script per key (a
    # script spanning slots fails there with CROSSSLOT). A plain server marked as a cluster's
    # client runs them, so the scripts are counted.
    client = _recording_client(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:cl:{uuid.uuid4().hex}:")
    store._cluster = True
    try:
        store.admit("warm", ["x"], cap=1, window_s=10, now=0.0)  # loads the script (NOSCRIPT first)
        client.commands.clear()
        got = store.admit_many_counted([("memo", ["a", "b"], 1), ("q3", ["c"], 5)], window_s=10, now=0.0)
        assert got == [([True, False], 0, 1), ([True], 0, 1)]
        assert client.commands.count("EVALSHA") == 2
    finally:
        store.reset()


@pytest.mark.redis
def test_a_key_lives_on_the_server_for_a_whole_window(redis_url):
    # A TTL short of the window (by 0.1 %: ten days less 864 s) lets the server forget ids the
    # window still counts, and the principal read them again as new. Ten days keeps the margin
    # far above the time the test itself takes.
    import redis

    client = redis.Redis.from_url(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:ttl:{uuid.uuid4().hex}:")
    window = 10 * 86400.0
    try:
        store.admit("one", ["a"], cap=5, window_s=window, now=0.0)
        store.admit_points([("p1", 5), ("p2", 5)], [("a", [0, 1])], window_s=window, now=0.0)
        for key in ("one", "p1", "p2"):
            assert client.pttl(store.prefix + key) > window * 1000 - 400_000
    finally:
        store.reset()


@pytest.mark.redis
def test_several_keys_in_one_redis_script_each_get_their_own_decision(redis_url):
    # One script answers every key's flags then its two counts, key after key: read at the wrong
    # offset, a count (non-zero) reads as "admitted" for the next key's first id.
    store = RedisBudgetStore(redis_url, prefix=f"qg:many:{uuid.uuid4().hex}:")
    requests = [("a", ["x", "y", "z"], 2), ("b", ["x"], 1), ("c", ["p", "q"], 0), ("d", ["r"], 3)]
    try:
        got = store.admit_many_counted(requests, window_s=10, now=0.0)
        assert got == [([True, True, False], 0, 2), ([True], 0, 1), ([False, False], 0, 0), ([True], 0, 1)]
        assert got == MemoryBudgetStore().admit_many_counted(requests, window_s=10, now=0.0)
    finally:
        store.reset()


@pytest.mark.redis
def test_a_listing_descends_only_into_child_groups_under_its_prefix(redis_url):
    # Documented cost: a prefix that is not a whole group reads its enclosing group's index and
    # descends only into the child groups that start with it. Descending into every child group
    # lists the same keys, with more reads in the listing's script (it is one round trip).
    client = _recording_client(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:lvl:{uuid.uuid4().hex}:")
    try:
        for key in ("src|p|c|memo", "src|p|c|other|x|deep", "src|p|c|more|deep"):
            store.admit(key, ["a"], cap=5, window_s=10, now=0.0)
        store.entries_by_prefix("src|p|c|m", window_s=10, now=0.0)  # scripts loaded
        zranges = client.info("commandstats").get("cmdstat_zrange", {}).get("calls", 0)
        client.commands.clear()
        found = store.entries_by_prefix("src|p|c|m", window_s=10, now=0.0)
        assert found == {"src|p|c|memo": frozenset({"a"}), "src|p|c|more|deep": frozenset({"a"})}
        assert client.commands == ["EVALSHA"]
        client.commands.clear()
        # The group's index, "src|p|c|more|"'s, then each of the two keys' newest id: four ZRANGE;
        # "src|p|c|other|" and "src|p|c|other|x|" are not read (six with them).
        assert client.info("commandstats")["cmdstat_zrange"]["calls"] - zranges == 4
    finally:
        store.reset()


@pytest.mark.redis
def test_keys_with_a_bare_bar_or_an_empty_part_are_listed(redis_url):
    # "|" is a group of its own (the part of "|a|b" up to its first "|"): the index must chain
    # "|a|" under "|", not under the root, or a listing of "|" finds nothing.
    store = RedisBudgetStore(redis_url, prefix=f"qg:bar:{uuid.uuid4().hex}:")
    try:
        store.admit("|a|b", ["x"], cap=5, window_s=10, now=0.0)
        store.admit("c", ["y"], cap=5, window_s=10, now=0.0)
        store.admit("d||e", ["z"], cap=5, window_s=10, now=0.0)  # an empty part: "d||" under "d|"
        assert store.entries_by_prefix("|", window_s=10, now=0.0) == {"|a|b": frozenset({"x"})}
        assert store.entries_by_prefix("d|", window_s=10, now=0.0) == {"d||e": frozenset({"z"})}
        assert store.entries_by_prefix("", window_s=10, now=0.0) == {
            "|a|b": frozenset({"x"}), "c": frozenset({"y"}), "d||e": frozenset({"z"})}
    finally:
        store.reset()


@pytest.mark.parametrize("prefix, one_slot", [
    ("{qg}:", True), ("x{a}", True), ("{a}b}", True), ("}{a}", True),
    # Redis hashes the whole key when there is no "{", no "}" after it, or nothing between them.
    ("qg:budget:", False), ("qg}:", False), ("{qg:", False), ("{}:", False), ("{}a}", False),
])
def test_a_prefix_keeps_every_key_in_one_slot_only_with_a_whole_hash_tag(prefix, one_slot):
    # On a cluster this decides whether admit_points runs as one all-or-none script and whether
    # the listing index exists (an index shares no slot with keys of another).
    from redis.crc import key_slot

    assert _budget_redis._one_slot(prefix) is one_slot
    assert (key_slot((prefix + "src|p|c|a").encode()) == key_slot((prefix + "\x00qg-index\x00").encode())) is one_slot


@pytest.mark.redis
def test_reset_removes_every_key_of_the_prefix_past_one_batch(redis_url):
    # reset() deletes what SCAN meets 500 names at a time, then indexes what is left: a batch
    # not deleted would be indexed again and keep its budget.
    import redis

    client = redis.Redis.from_url(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:rst:{uuid.uuid4().hex}:")
    store.admit_many_counted([(f"k{i}", ["a"], 1) for i in range(600)], window_s=60, now=0.0)
    store.reset()
    assert [k for k in client.scan_iter(match=store.prefix + "*") if not k.endswith(b"ready")] == []
    assert store.seen("k0", window_s=60, now=0.0) == 0


@pytest.mark.redis
def test_reset_of_one_key_on_an_untagged_cluster_deletes_it(redis_url):
    store = RedisBudgetStore(redis_url, prefix=f"qg:rst:{uuid.uuid4().hex}:")
    store._cluster = True  # a plain client marked as a cluster's: no index, a plain DEL
    store.admit("k", ["a"], cap=1, window_s=60, now=0.0)
    store.reset("k")
    assert store.admit("k", ["b"], cap=1, window_s=60, now=0.0) == (["b"], [])


@pytest.mark.parametrize("cluster", [False, True])
def test_a_reset_redis_fails_is_a_store_error(cluster):
    pytest.importorskip("redis")
    # Opted out of the access check, which would fail first (test_redis_store_access.py).
    store = RedisBudgetStore(f"redis://127.0.0.1:{free_port()}/0", allow_unauthenticated=True)
    store._cluster = cluster
    with pytest.raises(BudgetStoreError, match="redis budget store (reset )?failed"):
        store.reset("k")
    with pytest.raises(BudgetStoreError, match="redis budget store reset failed"):
        store.reset()
