"""The Redis store's listing is one round trip (one script reads the index and the ids), and it
answers exactly what the two-script listing of 0fe40e1 (tests/redis_listing_old.py) answers on the
same data: random admissions, all-or-none admissions, resets, keys deleted behind the store, a
lost index marker, expiry on the server and a clock that moves both ways. A real redis-server."""
from __future__ import annotations

import random
import time
import uuid

import pytest

from qdrant_guard.budget import RedisBudgetStore
from redis_listing_old import TwoScriptRedisStore
from test_budget_redis_index import _recording_client
from test_mutants_redis2 import cluster_url  # noqa: F401  (fixture: a one-node Redis Cluster)

pytestmark = pytest.mark.redis


def _evals(client):
    stats = client.info("commandstats")
    return sum(stats.get(name, {}).get("calls", 0) for name in ("cmdstat_evalsha", "cmdstat_eval"))


@pytest.mark.parametrize("prefix", ["src|p|c|", "src|p|", "src|p|c|s", ""])
def test_a_listing_is_one_round_trip(redis_url, prefix):
    client = _recording_client(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:l1:{uuid.uuid4().hex}:")
    try:
        store.reset()
        for key in ("src|p|c|s1", "src|p|c|s2", "src|p|c|sub|x", "src|p|d|s", "src|q|c|s"):
            store.admit(key, ["a", "b"], cap=5, window_s=60, now=100.0)
        expected = {key: frozenset({"a", "b"}) for key in
                    ("src|p|c|s1", "src|p|c|s2", "src|p|c|sub|x", "src|p|d|s", "src|q|c|s") if key.startswith(prefix)}
        assert store.entries_by_prefix(prefix, window_s=60, now=100.0) == expected  # scripts loaded
        evals = _evals(client)
        client.commands.clear()
        assert store.entries_by_prefix(prefix, window_s=60, now=100.0) == expected
        assert client.commands == ["EVALSHA"]
        assert _evals(client) - evals == 1  # and the server ran one script
    finally:
        store.reset()
        client.close()


class _Clock:
    def __init__(self, rng):
        self.rng, self.now = rng, 1000.0

    def step(self):
        # Mostly forward, sometimes back (a clock that stepped back), by up to a window.
        self.now += self.rng.choice([0.0, 0.01, 0.05, 0.2, 1.0, 5.0, -0.05, -1.0])
        return self.now


def _compare(new, old, prefix, window_s, now, flip):
    # Both read the same keys; a key the server expires between the two reads is the only allowed
    # difference. On a loaded machine several keys may expire between them (a re-read of the
    # first store then differs again: review 35 saw 5 of 48 seeds fail so), so the answers must
    # agree on every key both list, and each key only one lists must be gone from the server.
    first, second = (old, new) if flip else (new, old)
    a = first.entries_by_prefix(prefix, window_s=window_s, now=now)
    b = second.entries_by_prefix(prefix, window_s=window_s, now=now)
    if a != b:
        assert all(a[key] == b[key] for key in set(a) & set(b)), (prefix, window_s, now, a, b)
        live = [key for key in set(a) ^ set(b) if new.client.exists(new.prefix + key)]
        assert not live, (prefix, window_s, now, live, a, b)


@pytest.mark.parametrize("seed, batch", [(1, 500), (2, 500), (3, 2), (4, 1)])
def test_the_one_script_listing_answers_as_the_two_script_one(redis_url, monkeypatch, seed, batch):
    # batch: the keys the listing script reads itself; smaller ones send the rest down the
    # per-batch path, as a group of more than 500 keys does.
    import redis

    monkeypatch.setattr("qdrant_guard.budget_redis._LISTING_BATCH", batch)
    rng = random.Random(seed)
    prefix = f"qg:l1d:{uuid.uuid4().hex}:"
    client = redis.Redis.from_url(redis_url)
    new = RedisBudgetStore(client, prefix=prefix)
    old = TwoScriptRedisStore(client, prefix=prefix)
    clock = _Clock(rng)
    keys = ["src|p|c|s1", "src|p|c|s2", "src|p|c|s3", "src|p|c|sub|x", "src|p|c|sub|y|z",
            "src|p|d|s1", "src|q|c|s1", "other|p|c|s1", "|a|b", "plain"]
    prefixes = ["src|p|c|", "src|p|", "src|p|c|s", "src|p|c|su", "src|p|c|s2", "src|p|c|sub|", "src|", "", "|", "src|q|c|", "nothing|"]
    windows = [0.15, 0.4, 30.0]
    ids = [str(i) for i in range(12)]
    try:
        new.reset()
        for step in range(250):
            now = clock.step()
            op = rng.random()
            if op < 0.35:
                key = rng.choice(keys)
                new.admit(key, rng.sample(ids, rng.randint(1, 5)), cap=rng.randint(1, 8),
                          window_s=rng.choice(windows), now=now)
            elif op < 0.5:
                chosen = rng.sample(keys, rng.randint(1, 3))
                points = [(pid, rng.sample(range(len(chosen)), rng.randint(1, len(chosen))))
                          for pid in rng.sample(ids, rng.randint(1, 4))]
                new.admit_points([(key, rng.randint(1, 6)) for key in chosen], points,
                                 window_s=rng.choice(windows), now=now)
            elif op < 0.56:
                new.reset(rng.choice(keys))
            elif op < 0.58:
                new.reset()
            elif op < 0.61:
                client.delete(prefix + rng.choice(keys))  # gone before its TTL, index not told
            elif op < 0.63:
                client.delete(prefix + "\x00qg-index-ready")  # the next listing migrates
            elif op < 0.66:
                time.sleep(rng.choice([0.1, 0.2, 0.5]))  # short windows' keys expire on the server
            for _ in range(2):
                _compare(new, old, rng.choice(prefixes), rng.choice(windows), now + rng.choice([0.0, 0.1, -0.1]),
                         flip=rng.random() < 0.5)
    finally:
        new.reset()
        client.close()


def test_a_one_slot_cluster_lists_in_one_script_as_before(cluster_url):
    # On a Redis Cluster the script names child indexes and budget keys it was not given in KEYS;
    # a cluster runs that only while every name is in the script's slot, which a hash-tag prefix
    # guarantees (the only case a cluster keeps an index). A one-node cluster refuses a script
    # that touches a second slot (CROSSSLOT), as any cluster does.
    from redis.cluster import RedisCluster

    client = RedisCluster.from_url(cluster_url)
    prefix = f"{{qg-{uuid.uuid4().hex}}}:"
    new, old = RedisBudgetStore(client, prefix=prefix), TwoScriptRedisStore(client, prefix=prefix)
    try:
        assert new._cluster and new._indexed
        for key in ("src|p|c|s1", "src|p|c|s2", "src|p|c|sub|x", "src|q|c|s1"):
            new.admit(key, ["a", key[-1]], cap=5, window_s=60, now=100.0)
        client.delete(prefix + "src|p|c|s2")  # gone behind the store: the listing drops its member
        for listing in ("src|p|c|", "src|p|", "src|p|c|s", ""):
            assert new.entries_by_prefix(listing, window_s=60, now=100.0) == \
                old.entries_by_prefix(listing, window_s=60, now=100.0)
        assert new.entries_by_prefix("src|p|", window_s=60, now=100.0) == {
            "src|p|c|s1": frozenset({"a", "1"}), "src|p|c|sub|x": frozenset({"a", "x"})}
        assert client.zscore(prefix + "\x00qg-index\x00src|p|c|", "=src|p|c|s2") is None
        calls = _evals_cluster(client)
        new.entries_by_prefix("src|p|", window_s=60, now=100.0)
        assert _evals_cluster(client) - calls == 1
    finally:
        new.reset()
        client.close()


def _evals_cluster(client):
    stats = client.info("commandstats")
    nodes = stats.values() if "cmdstat_evalsha" not in stats else [stats]
    return sum(node.get("cmdstat_evalsha", {}).get("calls", 0) for node in nodes)
