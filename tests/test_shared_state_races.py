"""Guard state that steps of concurrent calls update (h-async3): the sync client's threads and the
async client's step threads (server mode) run steps in parallel, so every read-modify-write of a
``shared`` structure either holds that structure's lock or is a single atomic dict operation.

Races are made reproducible with ``sys.setswitchinterval(1e-6)`` (a thread switch every few
bytecodes) and many threads on a real local-mode client's guard.
"""
from __future__ import annotations

import sys
import threading

import pytest
from guardkit import make_kit
from qdrant_guard import QdrantClient

THREADS = 8
PER_THREAD = 4000
ROUNDS = 40


@pytest.fixture()
def fast_switch():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


@pytest.fixture()
def guard(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    yield client.guard
    client.close()


def _in_threads(fn):
    start = threading.Barrier(THREADS, timeout=30)
    errors: list[BaseException] = []

    def run(t):
        start.wait()
        try:
            fn(t)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


@pytest.fixture()
def roomy(monkeypatch):
    from qdrant_guard import textguard

    # Room for every pair the threads add, so nothing is emptied (the test after sets it small).
    monkeypatch.setattr(textguard, "_CLEAN_VALUES_MAX", THREADS * PER_THREAD + 1)
    monkeypatch.setattr(textguard, "_CLEAN_KEYS_MAX", THREADS * PER_THREAD + 1)


def test_the_clean_value_counter_loses_no_update(guard, fast_switch, roomy):
    # The counter bounds the memory (all scopes are emptied when it reaches _CLEAN_VALUES_MAX): a
    # lost update let the memory hold more pairs than it counts.
    def add(t):
        for i in range(PER_THREAD):
            guard.remember_clean_value(guard.clean_values("pii"), ("k", f"{t}-{i}"))

    _in_threads(add)
    held = sum(len(s) for s in guard.shared["clean_values"].values())
    assert held == THREADS * PER_THREAD
    assert guard.shared["clean_values_held"] == held


def test_the_clean_key_counter_loses_no_update(guard, fast_switch, roomy):
    def add(t):
        for i in range(PER_THREAD):
            guard.remember_clean_key(guard.clean_keys("pii"), f"key{t}_{i}", 10 ** 12)

    _in_threads(add)
    held = sum(len(d) for d in guard.shared["clean_keys"].values())
    assert held == THREADS * PER_THREAD
    assert guard.shared["clean_keys_held"] == held


def test_emptying_the_memory_while_others_add_keeps_the_count_true(guard, fast_switch, monkeypatch):
    # Small bounds, so the memory is emptied many times while other threads add: after each emptying
    # the count starts again from what is actually held.
    from qdrant_guard import textguard

    monkeypatch.setattr(textguard, "_CLEAN_VALUES_MAX", 50)

    def add(t):
        for i in range(PER_THREAD):
            guard.remember_clean_value(guard.clean_values("pii"), ("k", f"{t}-{i}"))

    _in_threads(add)
    held = sum(len(s) for s in guard.shared["clean_values"].values())
    assert guard.shared["clean_values_held"] == held
    assert held <= 50


def test_racing_first_counts_share_one_no_raw_left_memory(tmp_path, fast_switch):
    # Each thread finds "no raw vector left" in its own (empty, real) collection at once: every
    # answer is kept. Before, the first finders could each make the set and overwrite one another's
    # (one more exact count on a later query each).
    import qdrant_client
    from guardkit import create
    from qdrant_guard.pipeline import drive_sync

    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    guard, pol = client.guard, client.guard.policy("pii")
    names = [f"c{t}" for t in range(THREADS)]
    for name in names:
        create(client._client, name)

    def invoke(call):  # the store itself, as the client's own requests reach it
        return getattr(qdrant_client.QdrantClient, call.method)(client, **call.kwargs)

    rounds = threading.Barrier(THREADS, action=lambda: guard.forget_shape(), timeout=30)
    done = threading.Barrier(THREADS, timeout=30)
    kept = []

    def find(t):
        for _ in range(ROUNDS):
            rounds.wait()  # the last to arrive forgets what the round before found
            assert drive_sync(guard.raw_vectors_left("query_points", names[t], pol), invoke) == (0, 0)
            done.wait()
            if t == 0:
                kept.append(len(guard.shared["noised_only"]))

    _in_threads(find)
    assert kept == [THREADS] * ROUNDS
    client.close()
