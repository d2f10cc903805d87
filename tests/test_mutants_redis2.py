"""The Redis budget store's index rebuild, migration, SCAN listing, construction and Lua scripts,
where the fourth mutation pass (scripts/mutate.py, its ``--lua`` option for the scripts) found no
test: each test here fails with one surviving mutant applied. A real redis-server (the
``redis_url`` fixture) and, for what only a Redis Cluster refuses (a script over keys of two
slots), a real one-node Redis Cluster started here."""
from __future__ import annotations

import os
import shutil
import sys
import time
import uuid

import pytest
from test_budget_redis_index import _recording_client
from tests.redis_server import INSTALL_HINT, free_port, start_server, stop_server

from qdrant_guard.budget import BudgetStoreError, RedisBudgetStore

pytestmark = pytest.mark.redis

INDEX = "\x00qg-index\x00"
READY = "\x00qg-index-ready"


def _cluster_port():
    """A free port whose cluster bus port (port + 10000, so the port is at most 55535, which
    redis-server checks) is free too."""
    import random
    import socket

    while True:
        port = random.randint(20000, 55535)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory):
    """A one-node Redis Cluster holding all 16384 slots: it refuses, as any cluster does, a script
    whose keys hash to two slots (CROSSSLOT), which a plain server marked as a cluster's runs."""
    exe = shutil.which("redis-server")
    pytest.importorskip("redis")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail(INSTALL_HINT)
        pytest.skip(INSTALL_HINT)
    workdir = tmp_path_factory.mktemp("redis-cluster")
    password = uuid.uuid4().hex
    for attempt in range(3):  # a port taken between probe and bind: try another
        port = _cluster_port()
        started = start_server(exe, workdir, port, "--cluster-enabled", "yes", "--cluster-config-file",
                               str(workdir / f"nodes-{port}.conf"), "--requirepass", password,
                               password=password, timeout_s=20)
        if started is None:
            continue
        proc, log, plain = started
        break
    else:
        pytest.fail(f"redis-server --cluster-enabled did not start on 3 ports; see the logs in {workdir}")
    try:
        plain.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + 20
        while b"cluster_state:ok" not in plain.execute_command("CLUSTER", "INFO"):
            assert time.monotonic() < deadline, "the one-node cluster never reached cluster_state:ok"
            time.sleep(0.05)
        yield f"redis://:{password}@127.0.0.1:{port}/0"
    finally:
        plain.close()
        stop_server(proc, log)


def _cluster_client(url):
    from redis.cluster import RedisCluster

    return RedisCluster.from_url(url)


def _evalsha_calls(client):
    stats = client.info("commandstats")
    return sum(node.get("cmdstat_evalsha", {}).get("calls", 0) for node in (
        stats.values() if "cmdstat_evalsha" not in stats else [stats]))


def _two_slots(prefix):
    """Two budget keys whose names hash to different slots under prefix."""
    from redis.crc import key_slot

    keys = [f"src|p|c|s{i}" for i in range(50)]
    first = key_slot((prefix + keys[0]).encode())
    return keys[0], next(k for k in keys if key_slot((prefix + k).encode()) != first)


# ------------------------------------------------------------------ construction


def test_a_real_cluster_client_is_known_as_one_and_keeps_no_index_without_a_hash_tag(cluster_url):
    # Taken for a plain server's client, the store would send an untagged budget key and its
    # index keys in one script, which a cluster refuses (CROSSSLOT): every admission failed.
    client = _cluster_client(cluster_url)
    store = RedisBudgetStore(client, prefix=f"qg:rc:{uuid.uuid4().hex}:")
    try:
        assert store._cluster and not store._indexed
        a, b = _two_slots(store.prefix)
        assert store.admit(a, ["1"], cap=5, window_s=10, now=100.0) == (["1"], [])
        assert store.admit(b, ["2"], cap=5, window_s=10, now=100.0) == (["2"], [])
        assert not list(client.scan_iter(match=store.prefix + "\x00*"))
        # The listing without index reads each key with its own script (keys of two slots).
        assert store.entries_by_prefix("src|p|", window_s=10, now=100.0) == {
            a: frozenset({"1"}), b: frozenset({"2"})}
        assert store.entries_by_prefix("src|p|c|s", window_s=10, now=100.0) == {
            a: frozenset({"1"}), b: frozenset({"2"})}
        # One read-only script per key found, and none for a prefix with no key: no extra round
        # trip (counted by the server, which only this module's tests use).
        for prefix, scripts in (("src|p|", 2), ("src|q|", 0)):
            calls = _evalsha_calls(client)
            store.entries_by_prefix(prefix, window_s=10, now=100.0)
            assert _evalsha_calls(client) - calls == scripts
    finally:
        store.reset()
        client.close()


def test_a_real_cluster_with_a_hash_tag_prefix_keeps_the_index(cluster_url):
    client = _cluster_client(cluster_url)
    store = RedisBudgetStore(client, prefix=f"{{qg-{uuid.uuid4().hex}}}:")
    try:
        assert store._cluster and store._indexed
        store.admit_points([("src|p|c|a", 1), ("src|p|c|b", 5)], [("x", [0, 1]), ("y", [0, 1])],
                           window_s=10, now=100.0)
        assert store.entries_by_prefix("src|p|c|", window_s=10, now=100.0) == {
            "src|p|c|a": frozenset({"x"}), "src|p|c|b": frozenset({"x"})}
        assert client.exists(store.prefix + INDEX + "src|p|c|") == 1
    finally:
        store.reset()
        client.close()


@pytest.mark.parametrize("prefix", [b"qg:", 5, None])
def test_a_prefix_that_is_not_text_is_refused_by_name(prefix):
    pytest.importorskip("redis")
    with pytest.raises(TypeError, match="prefix must be a str"):
        RedisBudgetStore(f"redis://127.0.0.1:{free_port()}/0", prefix=prefix)


def test_an_empty_prefix_is_a_store_of_bare_key_names(redis_url):
    # Documented: the prefix is prepended to every budget key; "" is a valid prefix (keys are
    # then the budget keys themselves).
    import redis

    client = redis.Redis.from_url(redis_url)
    store = RedisBudgetStore(client, prefix="")
    key = f"qg-empty-{uuid.uuid4().hex}|p|c|s"
    try:
        assert store.admit(key, ["1"], cap=5, window_s=10, now=100.0) == (["1"], [])
        assert client.zscore(key, "1") == 100.0
        assert client.exists(INDEX + key[: key.rfind("|") + 1]) == 1
    finally:
        store.reset(key)
        client.close()


def test_without_the_redis_package_the_store_says_what_to_install(monkeypatch):
    # sys.modules[name] = None is how Python itself marks a module as not importable.
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.setitem(sys.modules, "redis.crc", None)
    with pytest.raises(BudgetStoreError, match=r"needs the redis package: pip install 'redis>=5'"):
        RedisBudgetStore("redis://127.0.0.1:1/0")


# ------------------------------------------------------------------ migration and rebuild


def test_a_redis_error_in_the_upgrade_check_is_a_store_error(redis_url):
    # A user the server lets run everything but EXISTS: the check whether another thread already
    # indexed the store fails, and _migrate says so instead of indexing the whole database behind
    # it. (A listing's own script reads the marker first, with EXISTS inside Lua, which the ACL
    # refuses too; so _migrate is called as the listing calls it, once that script found no marker.)
    import redis

    admin = redis.Redis.from_url(redis_url)
    user, password = f"qg-noexists-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    admin.acl_setuser(user, enabled=True, passwords=["+" + password], keys=["*"],
                      categories=["+@all"], commands=["-exists"])
    client = redis.Redis.from_url(redis_url, username=user, password=password)
    store = RedisBudgetStore(client, prefix=f"qg:acl:{uuid.uuid4().hex}:")
    try:
        admin.zadd(store.prefix + "src|p|c|s", {"1": 100.0})  # written without index, no marker
        with pytest.raises(BudgetStoreError, match="index check failed"):
            store._migrate()
        assert not admin.exists(store.prefix + READY)
    finally:
        client.close()
        admin.acl_deluser(user)
        for name in admin.scan_iter(match=store.prefix + "*"):
            admin.delete(name)
        admin.close()


def test_a_rebuild_redis_fails_is_a_store_error():
    pytest.importorskip("redis")
    # Past the access check (opted out), which would fail first on an unreachable server.
    store = RedisBudgetStore(f"redis://127.0.0.1:{free_port()}/0", allow_unauthenticated=True)
    with pytest.raises(BudgetStoreError, match="index rebuild failed"):
        store.rebuild_index()


def test_a_scan_listing_redis_fails_is_a_store_error():
    pytest.importorskip("redis")
    store = RedisBudgetStore(f"redis://127.0.0.1:{free_port()}/0", allow_unauthenticated=True)
    store._cluster = True  # an untagged cluster's store: the listing runs SCAN
    with pytest.raises(BudgetStoreError, match="scan failed for prefix"):
        store.entries_by_prefix("src|", window_s=10, now=0.0)


@pytest.mark.parametrize("n, scripts", [(200, 1), (201, 2), (400, 2)])
def test_a_rebuild_indexes_every_key_with_one_script_per_200(redis_url, n, scripts):
    # Documented cost: one SCAN plus one script per 200 keys found. 201 keys need a second script
    # for the last one, 400 no third.
    import redis

    client = _recording_client(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:rb:{uuid.uuid4().hex}:")
    raw = redis.Redis.from_url(redis_url)
    try:
        raw.zadd(store.prefix + "src|p|c|s0", {"1": 100.0})
        store.rebuild_index()  # loads the script
        with raw.pipeline(transaction=False) as pipe:
            for i in range(1, n):
                pipe.zadd(store.prefix + f"src|p|c|s{i}", {"1": 100.0})
            pipe.execute()
        client.commands.clear()
        store.rebuild_index()
        assert client.commands.count("EVALSHA") == scripts
        assert len(store.entries_by_prefix("src|p|c|", window_s=10, now=100.0)) == n
    finally:
        store.reset()
        raw.close()


@pytest.mark.parametrize("wild", ["?", "*", "[x]"])
def test_glob_characters_in_a_prefix_match_only_themselves(redis_url, wild):
    # reset() and rebuild_index() SCAN the prefix as a glob pattern: unescaped, "qg:a?" matches
    # "qg:ab", and reset() of one store deleted another store's budget.
    base = f"qg:glob:{uuid.uuid4().hex}:"
    mine = RedisBudgetStore(redis_url, prefix=base + "a" + wild + ":")
    other = RedisBudgetStore(redis_url, prefix=base + "ax:")
    try:
        mine.admit("src|p|c|s", ["1"], cap=5, window_s=10, now=100.0)
        other.admit("src|p|c|s", ["2"], cap=5, window_s=10, now=100.0)
        mine.reset()
        assert other.seen("src|p|c|s", window_s=10, now=100.0) == 1
        assert mine.seen("src|p|c|s", window_s=10, now=100.0) == 0
    finally:
        other.reset()
        mine.reset()


# ------------------------------------------------------------------ the Lua scripts


def test_a_clock_stepped_back_stamps_at_the_newest_entry_not_the_one_before(redis_url):
    # A key's clock is its newest timestamp when now is behind it. Read from ZRANGE -2 -1, the
    # "newest" score is the one before (100, not 200): new ids were stamped 100 and left the
    # window a hundred seconds early. The memory store is the reference.
    from qdrant_guard.budget import MemoryBudgetStore

    store = RedisBudgetStore(redis_url, prefix=f"qg:back:{uuid.uuid4().hex}:")
    memory = MemoryBudgetStore()
    try:
        for s in (store, memory):
            s.admit("k", ["a"], cap=5, window_s=150, now=100.0)
            s.admit("k", ["b"], cap=5, window_s=150, now=200.0)
            s.admit("k", ["c"], cap=5, window_s=150, now=50.0)
        assert store.seen("k", window_s=150, now=300.0) == memory.seen("k", window_s=150, now=300.0) == 2
        assert store.entries_by_prefix("", window_s=150, now=300.0) == {"k": frozenset({"b", "c"})}
    finally:
        store.reset()


def test_all_or_none_admissions_also_stamp_at_the_newest_entry(redis_url):
    # The same rule in the several-key script (admit_points): read from ZRANGE -2 -1, from
    # ZRANGE -1 -2 (empty) or from newest[3] (never there), a step back stamped new ids at now.
    # (j, whose only id is c, has a clock of its own: 50.)
    from qdrant_guard.budget import MemoryBudgetStore

    store = RedisBudgetStore(redis_url, prefix=f"qg:back:{uuid.uuid4().hex}:")
    memory = MemoryBudgetStore()
    keys = [("k", 5), ("j", 5)]
    try:
        for s in (store, memory):
            s.admit_points(keys, [("a", [0])], window_s=150, now=100.0)
            s.admit_points(keys, [("b", [0])], window_s=150, now=200.0)
            s.admit_points(keys, [("c", [0, 1])], window_s=150, now=50.0)
        for key, n in (("k", 2), ("j", 0)):
            assert store.seen(key, window_s=150, now=300.0) == memory.seen(key, window_s=150, now=300.0) == n
        assert store.entries_by_prefix("", window_s=150, now=300.0) == {
            "k": frozenset({"b", "c"})}
    finally:
        store.reset()


def test_a_key_lives_for_its_window_past_a_clock_that_stepped_back_ten_days(redis_url):
    # The TTL adds how far the key's newest entry is ahead of now. 0.1 % short of that (* 999 for
    # * 1000 ms per s) is 864 s short after a ten-day step back: the server forgot ids the key's
    # window still counted. A minute of slack keeps the test far from the time it takes.
    import redis

    client = redis.Redis.from_url(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:ttl2:{uuid.uuid4().hex}:")
    ahead = 10 * 86400.0
    try:
        store.admit("one", ["a"], cap=5, window_s=10, now=ahead)
        store.admit("one", ["b"], cap=5, window_s=10, now=0.0)
        store.admit_points([("p1", 5), ("p2", 5)], [("a", [0, 1])], window_s=10, now=ahead)
        store.admit_points([("p1", 5), ("p2", 5)], [("b", [0, 1])], window_s=10, now=0.0)
        for key in ("one", "p1", "p2"):
            assert client.pttl(store.prefix + key) > (ahead + 10) * 1000 - 60_000
    finally:
        store.reset()
        client.close()


def test_seen_also_counts_on_the_key_clock_after_a_step_back(redis_url):
    # seen() at a now behind the key's newest entry counts from that entry. An admission keeps
    # only what its own window counts, so the reading here uses a shorter window than the
    # admissions (another budget sharing the store): on the key's clock (200) a 50 s window holds
    # b alone; with newest[3] (never there) seen counted from now=50 and kept a@100 too.
    from qdrant_guard.budget import MemoryBudgetStore

    store = RedisBudgetStore(redis_url, prefix=f"qg:seen:{uuid.uuid4().hex}:")
    memory = MemoryBudgetStore()
    try:
        for s in (store, memory):
            s.admit("k", ["a"], cap=5, window_s=150, now=100.0)
            s.admit("k", ["b"], cap=5, window_s=150, now=200.0)
        assert store.seen("k", window_s=50, now=50.0) == memory.seen("k", window_s=50, now=50.0) == 1
    finally:
        store.reset()


def test_an_all_or_none_admission_that_leaves_a_key_empty_keeps_it_out_of_the_index(redis_url):
    # As admit() does: a key with no entry left is no key on the server, and gets no index member
    # (with counts > 0 made >= 0 it got one, scored as if the key lived a window more).
    import redis

    client = redis.Redis.from_url(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:empty:{uuid.uuid4().hex}:")
    try:
        store.reset()
        released, _ = store.admit_points([("src|p|c|full", 0), ("src|p|c|open", 5)], [("a", [0, 1])],
                                         window_s=10, now=100.0)
        assert released == [False]
        assert client.exists(store.prefix + "src|p|c|full", store.prefix + "src|p|c|open") == 0
        assert client.zrange(store.prefix + INDEX + "src|p|c|", 0, -1) == []
        store.admit_points([("src|p|c|full", 0), ("src|p|c|open", 5)], [("b", [1])], window_s=10, now=100.0)
        assert client.zrange(store.prefix + INDEX + "src|p|c|", 0, -1) == [b"=src|p|c|open"]
    finally:
        store.reset()
        client.close()


def test_a_listing_drops_every_gone_key_from_its_own_index(redis_url):
    # The listing script reads key j's index position at ARGV[2 + 2j]. Read one slot early, it
    # took the key before's member for a position (a Lua error: the whole listing failed) or, for
    # the first key, the number of groups (the member stayed in its index). Here the gone keys are
    # the second of their group and the first of two groups.
    import redis

    client = redis.Redis.from_url(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:gone:{uuid.uuid4().hex}:")
    try:
        store.reset()
        for key in ("src|p|c|a", "src|p|c|b", "src|p|d|x"):
            store.admit(key, ["1"], cap=5, window_s=10, now=100.0)
        client.delete(store.prefix + "src|p|c|b")
        assert store.entries_by_prefix("src|p|", window_s=10, now=100.0) == {
            "src|p|c|a": frozenset({"1"}), "src|p|d|x": frozenset({"1"})}
        assert client.zrange(store.prefix + INDEX + "src|p|c|", 0, -1) == [b"=src|p|c|a"]
        client.delete(store.prefix + "src|p|c|a")
        assert store.entries_by_prefix("src|p|", window_s=10, now=100.0) == {"src|p|d|x": frozenset({"1"})}
        assert client.zrange(store.prefix + INDEX + "src|p|c|", 0, -1) == []
        assert client.zrange(store.prefix + INDEX + "src|p|d|", 0, -1) == [b"=src|p|d|x"]
    finally:
        store.reset()
        client.close()


def test_a_scan_listing_reads_each_key_on_its_own_clock(cluster_url):
    # The listing without index (an untagged cluster) counts a key's ids from its newest entry
    # when now is behind it, as the indexed listing and admissions do: a@100 is out of a 50 s
    # window on the key's clock (200). With newest[3] (never there) it was listed at now=50.
    client = _cluster_client(cluster_url)
    store = RedisBudgetStore(client, prefix=f"qg:rcc:{uuid.uuid4().hex}:")
    try:
        store.admit("src|p|c|s", ["a"], cap=5, window_s=150, now=100.0)
        store.admit("src|p|c|s", ["b"], cap=5, window_s=150, now=200.0)
        # A shorter window than the admissions' (as in the seen() test): on the key's clock only b.
        assert store.entries_by_prefix("src|p|", window_s=50, now=50.0) == {"src|p|c|s": frozenset({"b"})}
        # Past the newest entry, now decides: at 500 both are out of the window (the key's clock
        # taken always, "and" made "or", or the window read from now, ARGV[1], listed them).
        assert store.entries_by_prefix("src|p|", window_s=150, now=500.0) == {}
    finally:
        store.reset()
        client.close()


def test_an_indexed_listing_reads_each_key_on_its_own_clock(redis_url):
    # The same rule in the indexed listing's script: now = the newest entry's score, not its
    # member (tonumber of an id: nil, a Lua error, or a number that is no time).
    store = RedisBudgetStore(redis_url, prefix=f"qg:ixc:{uuid.uuid4().hex}:")
    try:
        store.admit("src|p|c|s", ["a"], cap=5, window_s=150, now=100.0)
        store.admit("src|p|c|s", ["7"], cap=5, window_s=150, now=200.0)
        assert store.entries_by_prefix("src|p|", window_s=50, now=50.0) == {"src|p|c|s": frozenset({"7"})}
        assert store.entries_by_prefix("src|p|", window_s=150, now=500.0) == {}
    finally:
        store.reset()


def test_an_upgrade_whose_first_admission_comes_before_its_first_listing_still_indexes_old_keys(redis_url):
    # The listing script asks whether the ready marker exists. Asked of the group's index instead
    # (KEYS[2]), a new version that admitted once before its first listing never migrated, and
    # the keys the old version wrote stayed unlisted.
    import redis

    client = redis.Redis.from_url(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:upg:{uuid.uuid4().hex}:")
    try:
        client.zadd(store.prefix + "src|p|c|old", {"1": 100.0})  # an old version's key: no index
        client.pexpire(store.prefix + "src|p|c|old", 60_000)
        store.admit("src|p|c|new", ["2"], cap=5, window_s=60, now=100.0)
        assert store.entries_by_prefix("src|p|c|", window_s=60, now=100.0) == {
            "src|p|c|old": frozenset({"1"}), "src|p|c|new": frozenset({"2"})}
    finally:
        store.reset()
        client.close()


def test_a_listing_drops_index_members_whose_time_has_passed(redis_url):
    # The listing script drops members scored before the server's time in ms. With the time
    # misread (microseconds for seconds, or * 999), a child group's marker whose keys have all
    # expired stayed in its parent and each listing descended into it. The marker is written
    # with a time a minute past, as an index whose group expired leaves it.
    import redis

    client = redis.Redis.from_url(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:stale:{uuid.uuid4().hex}:")
    try:
        store.reset()
        store.admit("src|p|c|live", ["1"], cap=5, window_s=60, now=100.0)
        past = int(client.time()[0]) * 1000 - 60_000
        client.zadd(store.prefix + INDEX + "src|p|", {"/src|p|gone|": past})
        assert store.entries_by_prefix("src|p|", window_s=60, now=100.0) == {"src|p|c|live": frozenset({"1"})}
        assert client.zrange(store.prefix + INDEX + "src|p|", 0, -1) == [b"/src|p|c|"]
    finally:
        store.reset()
        client.close()
