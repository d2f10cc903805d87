"""The Redis store's listing index, against a real redis-server: listing a prefix reads an index
the admission scripts keep, never a SCAN of the database, and lists exactly what a SCAN would
(expired keys, reset(key), reset(), window edges, keys written before the index existed)."""
from __future__ import annotations

import time
import uuid

import pytest

from qdrant_guard.budget import ExtractionBudget, RedisBudgetStore

pytestmark = pytest.mark.redis

INDEX = "\x00qg-index\x00"


def _recording_client(url):
    import redis

    class Recording(redis.Redis):
        """Records the name of every command it sends."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.commands = []

        def execute_command(self, *args, **options):
            self.commands.append(str(args[0]).upper())
            return super().execute_command(*args, **options)

    return Recording.from_url(url)


def _scan_calls(client):
    stats = client.info("commandstats")
    return sum(stats.get(name, {}).get("calls", 0) for name in ("cmdstat_scan", "cmdstat_keys"))


@pytest.fixture
def redis_store(redis_url):
    client = _recording_client(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:ix:{uuid.uuid4().hex}:")
    yield store, client
    store.reset()


def _list(store, client, prefix, *, window_s, now):
    """entries_by_prefix, asserting that it sent no SCAN (nor KEYS) and the server ran none."""
    scans = _scan_calls(client)
    client.commands.clear()
    found = store.entries_by_prefix(prefix, window_s=window_s, now=now)
    assert not {"SCAN", "KEYS"} & set(client.commands), client.commands
    assert _scan_calls(client) == scans
    return found


def _index(client, store, group):
    return {m.decode(): s for m, s in client.zrange(store.prefix + INDEX + group, 0, -1, withscores=True)}


def test_listing_sends_no_scan_among_ten_thousand_unrelated_keys(redis_store):
    store, client = redis_store
    store.reset()  # a fresh prefix: the index is complete from here on
    junk = f"qg:junk:{uuid.uuid4().hex}:"
    with client.pipeline(transaction=False) as pipe:
        for start in range(0, 10_000, 1000):
            pipe.mset({f"{junk}{i}": "x" for i in range(start, start + 1000)})
        pipe.execute()
    try:
        clock = [1000.0]
        budget = ExtractionBudget(store, window_s=60, clock=lambda: clock[0])
        kw = dict(collection="c", source_size=10, max_source_coverage=1.0)
        budget.admit(principal="p", source="memo", point_ids=[1, 2], **kw)
        budget.admit(principal="p", source="q3", point_ids=[3], **kw)
        budget.admit(principal="other", source="memo", point_ids=[4], **kw)
        budget.admitted_by_source(principal="other", collection="c")  # loads the listing scripts
        scans = _scan_calls(client)
        client.commands.clear()
        assert budget.admitted_by_source(principal="p", collection="c") == {
            "memo": frozenset({"i:1", "i:2"}), "q3": frozenset({"i:3"})}
        # One script reads the group's index and the two keys' ids.
        assert client.commands == ["EVALSHA"]
        assert _scan_calls(client) == scans
        assert _list(store, client, "", window_s=60, now=1000.0) == {
            "src|p|c|memo": frozenset({"i:1", "i:2"}), "src|p|c|q3": frozenset({"i:3"}),
            "src|other|c|memo": frozenset({"i:4"})}
    finally:
        for start in range(0, 10_000, 1000):
            client.delete(*(f"{junk}{i}" for i in range(start, start + 1000)))


def test_listing_equals_the_scan_listing_for_every_prefix_and_window_edge(redis_store):
    store, client = redis_store
    store.reset()
    store.admit("src|a|c|x", ["1", "2"], cap=5, window_s=10, now=100.0)
    store.admit("src|a|c|y", ["3"], cap=5, window_s=10, now=105.0)
    store.admit("src|a|c|x|deep", ["4"], cap=5, window_s=10, now=105.0)  # a group below the budget's
    store.admit("src|a|cc|z", ["5"], cap=5, window_s=10, now=105.0)
    store.admit("src|b|c|x", ["6"], cap=5, window_s=10, now=105.0)
    store.admit("plain", ["7"], cap=5, window_s=10, now=105.0)
    all_keys = {"src|a|c|x": {"1", "2"}, "src|a|c|y": {"3"}, "src|a|c|x|deep": {"4"}, "src|a|cc|z": {"5"},
                "src|b|c|x": {"6"}, "plain": {"7"}}
    for prefix in ("", "p", "plain", "src", "src|", "src|a", "src|a|", "src|a|c", "src|a|c|", "src|a|c|x",
                   "src|a|c|x|", "src|a|c|x|d", "src|a|cc|", "src|z", "src|a|c|y"):
        expected = {k: frozenset(v) for k, v in all_keys.items() if k.startswith(prefix)}
        assert _list(store, client, prefix, window_s=10, now=105.0) == expected, prefix
    # Window edges, each key on its own clock: x's ids are exactly a window old at 110.0 (still
    # counted) and gone at 110.5; an earlier now still sees what the newest admission keeps.
    assert _list(store, client, "src|a|c|x", window_s=10, now=110.0)["src|a|c|x"] == {"1", "2"}
    assert _list(store, client, "src|a|c|", window_s=10, now=110.5) == {
        "src|a|c|y": frozenset({"3"}), "src|a|c|x|deep": frozenset({"4"})}
    assert _list(store, client, "src|a|c|y", window_s=10, now=0.0) == {"src|a|c|y": frozenset({"3"})}
    # Listing is read-only for the budget: x still holds both ids.
    assert store.seen("src|a|c|x", window_s=10, now=105.0) == 2


def test_expired_keys_leave_the_index(redis_store):
    store, client = redis_store
    store.reset()
    # 40 keys with a 500 ms TTL, one with a long one, in one group.
    for i in range(40):
        store.admit(f"src|p|c|s{i}", ["a"], cap=1, window_s=0.5, now=0.0)
    store.admit("src|p|c|keep", ["b"], cap=1, window_s=3600, now=0.0)
    assert len(_index(client, store, "src|p|c|")) == 41
    # The index outlives its longest-lived member, and every score is at or after its key's expiry.
    assert client.pttl(store.prefix + INDEX + "src|p|c|") >= client.pttl(store.prefix + "src|p|c|keep")
    assert _index(client, store, "src|p|c|")["=src|p|c|keep"] >= client.pexpiretime(store.prefix + "src|p|c|keep")
    time.sleep(0.7)
    assert client.exists(*(store.prefix + f"src|p|c|s{i}" for i in range(40))) == 0
    assert _list(store, client, "src|p|c|", window_s=3600, now=0.1) == {"src|p|c|keep": frozenset({"b"})}
    assert set(_index(client, store, "src|p|c|")) == {"=src|p|c|keep"}
    # Admissions drop expired members too, with no listing: the index never grows without bound.
    for i in range(40):
        store.admit(f"src|p|c|t{i}", ["a"], cap=1, window_s=0.5, now=0.0)
    assert len(_index(client, store, "src|p|c|")) == 41
    time.sleep(0.7)
    store.admit("src|p|c|keep", ["b"], cap=1, window_s=3600, now=1.0)
    assert set(_index(client, store, "src|p|c|")) == {"=src|p|c|keep"}
    # A group whose keys have all expired disappears, index and marker in its parent alike (the
    # index outlives its members by a second of slack).
    store.admit("src|q|c|s", ["a"], cap=1, window_s=0.05, now=0.0)
    time.sleep(1.2)
    assert client.exists(store.prefix + INDEX + "src|q|c|") == 0
    assert _list(store, client, "src|q|", window_s=1, now=1.0) == {}
    assert "/src|q|c|" not in _index(client, store, "src|q|")


def test_a_key_gone_before_its_ttl_leaves_the_index_at_the_next_listing(redis_store):
    store, client = redis_store
    store.reset()
    store.admit("src|p|c|a", ["1"], cap=5, window_s=10, now=100.0)
    store.admit("src|p|c|b", ["2"], cap=5, window_s=10, now=100.0)
    # seen() at a later now forgets a's only entry, which deletes the (empty) key on the server.
    assert store.seen("src|p|c|a", window_s=10, now=200.0) == 0
    assert client.exists(store.prefix + "src|p|c|a") == 0
    assert _list(store, client, "src|p|c|", window_s=10, now=100.0) == {"src|p|c|b": frozenset({"2"})}
    assert set(_index(client, store, "src|p|c|")) == {"=src|p|c|b"}
    # An admission that leaves a key empty (cap 0, or every entry forgotten) takes it out at once.
    store.admit("src|p|c|b", ["3"], cap=0, window_s=10, now=200.0)
    assert client.exists(store.prefix + "src|p|c|b") == 0 and _index(client, store, "src|p|c|") == {}


def test_reset_keeps_the_index_consistent(redis_store):
    store, client = redis_store
    store.reset()
    for source in ("memo", "q3"):
        store.admit(f"src|p|c|{source}", ["1"], cap=5, window_s=10, now=100.0)
    store.reset("src|p|c|memo")
    assert set(_index(client, store, "src|p|c|")) == {"=src|p|c|q3"}
    assert _list(store, client, "src|p|c|", window_s=10, now=100.0) == {"src|p|c|q3": frozenset({"1"})}
    store.admit("src|p|c|memo", ["2"], cap=5, window_s=10, now=100.0)
    assert _list(store, client, "src|p|c|", window_s=10, now=100.0) == {
        "src|p|c|memo": frozenset({"2"}), "src|p|c|q3": frozenset({"1"})}
    store.reset()
    assert client.keys(store.prefix + "*") == [store.prefix.encode() + b"\x00qg-index-ready"]
    assert _list(store, client, "", window_s=10, now=100.0) == {}
    store.admit("src|p|c|q3", ["3"], cap=5, window_s=10, now=100.0)
    assert _list(store, client, "src|p|", window_s=10, now=100.0) == {"src|p|c|q3": frozenset({"3"})}


def test_reset_indexes_what_an_admission_wrote_while_it_deleted(redis_url):
    # reset() deletes in SCAN batches: an admission between two batches can keep its key while a
    # later batch deletes its index entries. The second pass indexes such keys again.
    import redis

    other = RedisBudgetStore(redis_url, prefix=f"qg:ix:{uuid.uuid4().hex}:")

    class Racing(redis.Redis):
        def delete(self, *names):
            deleted = super().delete(*names)
            other.admit("src|p|c|late", ["1"], cap=5, window_s=10, now=100.0)
            super().delete(*(other.prefix + INDEX + g for g in ("", "src|", "src|p|", "src|p|c|")))
            return deleted

    client = Racing.from_url(redis_url)
    store = RedisBudgetStore(client, prefix=other.prefix)
    store.admit("src|p|c|early", ["1"], cap=5, window_s=10, now=100.0)
    store.reset()
    assert client.exists(store.prefix + "src|p|c|late") == 1
    recording = _recording_client(redis_url)
    checker = RedisBudgetStore(recording, prefix=store.prefix)
    try:
        assert _list(checker, recording, "src|p|c|", window_s=10, now=100.0) == {"src|p|c|late": frozenset({"1"})}
    finally:
        other.reset()


def test_all_or_none_admissions_update_the_index(redis_store):
    store, client = redis_store
    store.reset()
    budget = ExtractionBudget(store, window_s=10, clock=lambda: 100.0)
    kw = dict(principal="p", collection="c", max_source_coverage=0.5)
    budget.admit_many(requests={"memo": ([0, 1], 4)}, **kw)
    out = budget.admit_many(requests={"memo": ([4], 4), "q3": ([4, 10], 4)}, **kw)
    assert out["q3"].withheld == [4] and out["q3"].admitted == [10]
    assert set(_index(client, store, "src|p|c|")) == {"=src|p|c|memo", "=src|p|c|q3"}
    assert set(_index(client, store, "src|p|")) == {"/src|p|c|"}
    assert _list(store, client, "src|p|c|", window_s=10, now=100.0) == {
        "src|p|c|memo": frozenset({"i:0", "i:1"}), "src|p|c|q3": frozenset({"i:10"})}
    # A Redis Cluster client with a hash-tag prefix keeps the index too (every key in one slot).
    tagged = RedisBudgetStore(client, prefix=f"{{qg-{uuid.uuid4().hex}}}:")
    tagged._cluster = True
    try:
        tagged.reset()
        ExtractionBudget(tagged, window_s=10, clock=lambda: 100.0).admit_many(
            requests={"memo": ([0], 4), "q3": ([0, 1], 4)}, **kw)
        assert _list(tagged, client, "src|p|c|", window_s=10, now=100.0) == {
            "src|p|c|memo": frozenset({"i:0"}), "src|p|c|q3": frozenset({"i:0", "i:1"})}
    finally:
        tagged.reset()


def test_a_store_written_without_index_is_indexed_once_then_listed_without_scan(redis_store):
    store, client = redis_store
    # Keys as a version without the index wrote them: ZSETs and a TTL, no index, no marker.
    client.zadd(store.prefix + "src|p|c|memo", {"i:1": 100.0, "i:2": 100.0})
    client.pexpire(store.prefix + "src|p|c|memo", 60_000)
    client.zadd(store.prefix + "src|p|c|q3", {"i:3": 100.0})  # no TTL at all
    client.zadd(store.prefix + "src|p|d|memo", {"i:4": 100.0})
    client.pexpire(store.prefix + "src|p|d|memo", 60_000)
    expected = {"src|p|c|memo": frozenset({"i:1", "i:2"}), "src|p|c|q3": frozenset({"i:3"})}
    # The first listing finds no index and builds it with one SCAN: an upgrade hides no key.
    assert store.entries_by_prefix("src|p|c|", window_s=60, now=100.0) == expected
    assert "SCAN" in client.commands
    assert _list(store, client, "src|p|c|", window_s=60, now=100.0) == expected
    assert _list(store, client, "src|p|", window_s=60, now=100.0) == {**expected, "src|p|d|memo": frozenset({"i:4"})}
    # Members score at or after their key's expiry; a key without TTL gets a far one.
    assert _index(client, store, "src|p|c|")["=src|p|c|memo"] >= client.pexpiretime(store.prefix + "src|p|c|memo")
    assert _index(client, store, "src|p|c|")["=src|p|c|q3"] > time.time() * 1000 + 300 * 86400 * 1000
    # rebuild_index (after a rolling upgrade) picks up keys an old version wrote meanwhile.
    client.zadd(store.prefix + "src|p|c|late", {"i:5": 100.0})
    client.pexpire(store.prefix + "src|p|c|late", 60_000)
    store.rebuild_index()
    assert _list(store, client, "src|p|c|", window_s=60, now=100.0) == {**expected, "src|p|c|late": frozenset({"i:5"})}


def test_index_names_are_reserved(redis_store):
    store, _ = redis_store
    for call in (lambda: store.admit("\x00qg-index\x00", ["a"], cap=1, window_s=10, now=0.0),
                 lambda: store.seen("\x00qg-index-ready", window_s=10, now=0.0),
                 lambda: store.reset("\x00qg-x")):
        with pytest.raises(ValueError, match="is reserved"):
            call()
    # A NUL elsewhere is an ordinary key.
    assert store.admit("src|p|c|\x00qg-x", ["a"], cap=1, window_s=10, now=0.0) == (["a"], [])


def test_an_untagged_cluster_lists_through_scan(redis_url):
    client = _recording_client(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:ix:{uuid.uuid4().hex}:")
    store._cluster = True  # a plain client marked as a cluster's: no index shares a slot with its keys
    try:
        store.admit("src|p|c|memo", ["1"], cap=5, window_s=10, now=100.0)
        assert not client.keys(store.prefix + "\x00*")
        client.commands.clear()
        assert store.entries_by_prefix("src|p|c|", window_s=10, now=100.0) == {"src|p|c|memo": frozenset({"1"})}
        assert "SCAN" in client.commands
    finally:
        store.reset()
