"""The Redis budget store's Lua scripts off their decision lines (argument offsets, loop bounds,
the server clock), where the fifth mutation pass (scripts/mutate.py --lua) found no test: each
test here fails with one surviving mutant applied. A real redis-server (the ``redis_url``
fixture); no mocks."""
from __future__ import annotations

import uuid

import pytest

from qdrant_guard.budget import RedisBudgetStore

pytestmark = pytest.mark.redis

INDEX = "\x00qg-index\x00"


@pytest.fixture
def client_store(redis_url):
    import redis

    client = redis.Redis.from_url(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:r3:{uuid.uuid4().hex}:")
    store.reset()  # a fresh prefix: its index is complete from here on
    yield client, store
    store.reset()
    client.close()


def test_index_times_are_their_keys_expiry_on_the_server_clock(client_store):
    # index_update scores a key's member, and its group's marker in each ancestor, at the
    # server's time in ms (TIME: seconds * 1000 + microseconds / 1000) plus the key's TTL. At or
    # after the key's expiry is tested elsewhere; here also not much after it: the time misread
    # (seconds * 1001) put every member twenty days late, so a group whose keys had all expired
    # kept its marker in its parent, and every listing descended into it, for twenty days. A
    # minute of slack keeps the test far from the time the calls take.
    client, store = client_store
    store.admit("src|p|c|one", ["a"], cap=5, window_s=30, now=100.0)
    store.admit_points([("src|p|d|two", 5)], [("b", [0])], window_s=30, now=100.0)
    for key in ("src|p|c|one", "src|p|d|two"):
        group = key[: key.rfind("|") + 1]
        expiry = client.pexpiretime(store.prefix + key)
        assert expiry > 0
        scores = [client.zscore(store.prefix + INDEX + group, "=" + key),
                  client.zscore(store.prefix + INDEX + "src|p|", "/" + group),
                  client.zscore(store.prefix + INDEX + "src|", "/src|p|"),
                  client.zscore(store.prefix + INDEX, "/src|")]
        for score in scores:
            assert expiry <= score <= expiry + 60_000, (key, scores, expiry)


def _racing_client(url):
    """A real client that, once, runs ``before()`` just before it sends the script whose SHA is
    ``sha``: another client's command landing between two round trips of one listing."""
    import redis

    class Racing(redis.Redis):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.race = None

        def execute_command(self, *args, **options):
            if self.race and str(args[0]).upper() == "EVALSHA" and args[1] == self.race[0]:
                _, before = self.race
                self.race = None
                before()
            return super().execute_command(*args, **options)

    return Racing.from_url(url)


def test_a_listing_whose_only_key_a_concurrent_reset_deleted_answers_empty(redis_url, monkeypatch):
    # A listing reads the group's index and its first keys' ids (one script), then the ids of the
    # keys past the first batch (another script per batch; a batch of one here). Two reset(key) by
    # another client between the two delete the keys and, with their last member, the index.
    # The ids script loops over the budget keys, KEYS[q + 1..]; started at KEYS[q] (the index),
    # it took the gone index for a gone key and read its position from ARGV[2], the window (10:
    # KEYS[10], nil), so the listing failed with a Lua error instead of leaving the key out.
    monkeypatch.setattr("qdrant_guard.budget_redis._LISTING_BATCH", 1)
    client = _racing_client(redis_url)
    prefix = f"qg:r3race:{uuid.uuid4().hex}:"
    store = RedisBudgetStore(client, prefix=prefix)
    other = RedisBudgetStore(redis_url, prefix=prefix)
    try:
        store.reset()
        store.admit("src|p|c|a", ["1"], cap=5, window_s=10, now=100.0)
        store.admit("src|p|c|k", ["1"], cap=5, window_s=10, now=100.0)
        both = {"src|p|c|a": frozenset({"1"}), "src|p|c|k": frozenset({"1"})}
        assert store.entries_by_prefix("src|p|c|", window_s=10, now=100.0) == both
        client.race = (store._indexed_entries_script.sha,
                       lambda: (other.reset("src|p|c|a"), other.reset("src|p|c|k")))
        # "a" (the lower index time, admitted first) was read in the first script, "k" was gone.
        assert store.entries_by_prefix("src|p|c|", window_s=10, now=100.0) == {"src|p|c|a": frozenset({"1"})}
        assert client.race is None  # the resets did run between the two scripts
        assert client.exists(prefix + "src|p|c|k", prefix + INDEX + "src|p|c|") == 0
    finally:
        store.reset()
        other.client.close()
        client.close()
