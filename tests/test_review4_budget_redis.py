"""Review 4: the Redis listing index meets key names it did not write."""
from __future__ import annotations

import uuid

import pytest

from qdrant_guard.budget import BudgetStoreError, RedisBudgetStore

pytestmark = pytest.mark.redis

READY = "\x00qg-index-ready"


@pytest.fixture
def store(redis_url):
    import redis

    client = redis.Redis.from_url(redis_url)
    store = RedisBudgetStore(client, prefix=f"qg:r4:{uuid.uuid4().hex}:")
    yield store, client
    for name in client.scan_iter(match=store.prefix.encode() + b"*"):
        client.delete(name)


def test_a_foreign_binary_key_name_under_the_prefix_does_not_break_listing(store):
    # A key name that is not UTF-8 cannot be a budget key (budget keys are str). The upgrade SCAN
    # and reset() meet it anyway: they must pass it over, not fail every listing with a bare
    # UnicodeDecodeError (which is not even a BudgetStoreError).
    store, client = store
    store.admit("src|p|c|s", ["1"], cap=10, window_s=60.0, now=1000.0)
    client.set(store.prefix.encode() + b"\xff\xfe", b"x")
    client.delete(store.prefix + READY)  # as written by a version without the index
    try:
        found = store.entries_by_prefix("src|p|", window_s=60.0, now=1000.0)
    except BudgetStoreError:
        pytest.fail("a foreign key name failed the listing")
    assert found == {"src|p|c|s": frozenset({"1"})}
    store.rebuild_index()
    assert store.entries_by_prefix("", window_s=60.0, now=1000.0) == {"src|p|c|s": frozenset({"1"})}
