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
