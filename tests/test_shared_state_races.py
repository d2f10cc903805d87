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


def _receipted_collection(tmp_path, cap: int, n: int):
    """A guarded client over collection ``pii`` of ``n`` points whose receipts state stronger noise
    than the policy's, each point its own parameter set (epsilon 0.5 + id/1000), and the cap."""
    import copy

    import numpy as np
    from test_leftovers37 import _noised_point
    from test_leftovers38 import _lb

    from qdrant_guard.receipts import RECEIPT_KEY

    kit = make_kit(tmp_path)
    owner, _ = _lb(kit, max_receipt_param_sets=cap)
    base = _noised_point(kit, 1, np.random.default_rng(3))
    points = []
    for pid in range(1, n + 1):
        payload = copy.deepcopy(base.payload)
        payload[RECEIPT_KEY]["vectors"][""]["params"]["epsilon"] = 0.5 + pid / 1000
        points.append(base.model_copy(update={"id": pid, "payload": payload}))
    import qdrant_client

    qdrant_client.QdrantClient.upsert(owner, "pii", points)
    return owner, base.payload


def test_a_learner_paused_before_its_update_does_not_take_the_receipt_sets_past_the_cap(tmp_path):
    # Thread A has scrolled and computed the room left under the cap; it is held (a profile hook)
    # just before it adds its sets. Meanwhile a writer re-receipts the points with other sets and
    # thread B learns those. Before, A then added what its stale room allowed: 6 sets under a cap
    # of 3. The window is a few bytecodes wide, which a thread switch every microsecond did not hit
    # in 40 rounds of 7 threads, so it is held open here.
    import copy

    import qdrant_client
    from qdrant_guard.pipeline import drive_sync
    from qdrant_guard.receipts import RECEIPT_KEY

    cap, n = 3, 12
    owner, payload = _receipted_collection(tmp_path, cap, n)
    guard, pol = owner.guard, owner.guard.policy("pii")

    def invoke(call):
        return getattr(qdrant_client.QdrantClient, call.method)(owner, **call.kwargs)

    a_held, b_done = threading.Event(), threading.Event()
    results: dict[str, tuple[int, int]] = {}
    errors: list[BaseException] = []

    def hold(frame, event, arg):
        seen = guard.shared.get("receipt_params", {}).get("pii")
        if event == "c_call" and getattr(arg, "__name__", "") == "update" and getattr(arg, "__self__", None) is seen:
            sys.setprofile(None)
            a_held.set()
            b_done.wait(3)  # the lock, where there is one, keeps B out until this gives up

    def learner(label, profile):
        try:
            if profile:
                sys.setprofile(hold)
            results[label] = drive_sync(guard.raw_vectors_left("query_points", "pii", pol), invoke)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            sys.setprofile(None)
            if label == "B":
                b_done.set()

    a = threading.Thread(target=learner, args=("A", True))
    a.start()
    assert a_held.wait(60)
    for pid in range(1, n + 1):  # sets that sort before every set A found
        p = copy.deepcopy(payload)
        p[RECEIPT_KEY]["vectors"][""]["params"]["epsilon"] = 0.3 + pid / 1000
        qdrant_client.QdrantClient.overwrite_payload(owner, "pii", p, points=[pid])
    b = threading.Thread(target=learner, args=("B", False))
    b.start()
    a.join(60)
    b.join(60)
    assert not errors, errors
    seen = guard.shared["receipt_params"]["pii"]
    assert len(seen) == cap, sorted(seen)
    assert results["A"][0] == results["B"][0] == n
    owner.close()


def test_threads_needing_one_classifier_at_once_load_it_once(guard, tmp_path, monkeypatch):
    # A module:attr factory that loads a model: before, every thread that found the cache empty
    # called it (8 loads, 8 copies in memory for a moment, each thread using its own).
    mod = tmp_path / "slow_intent_clf.py"
    mod.write_text(
        "import threading, time\n"
        "from qdrant_guard.intent import BuiltinIntentClassifier\n"
        "LOADS = []\n"
        "def make():\n"
        "    LOADS.append(threading.get_ident())\n"
        "    time.sleep(0.2)  # reading a model file\n"
        "    return BuiltinIntentClassifier()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import slow_intent_clf

    got = []
    _in_threads(lambda t: got.append(guard.intent_classifier("slow_intent_clf:make", 5.0)))
    assert len(slow_intent_clf.LOADS) == 1
    assert len(got) == THREADS and all(c is got[0] for c in got)


def test_a_failed_classifier_load_is_tried_again(guard, tmp_path, monkeypatch):
    from qdrant_guard import ConfigError

    mod = tmp_path / "flaky_intent_clf.py"
    mod.write_text(
        "from qdrant_guard.intent import BuiltinIntentClassifier\n"
        "CALLS = []\n"
        "def make():\n"
        "    CALLS.append(1)\n"
        "    if len(CALLS) == 1:\n"
        "        raise OSError('model file busy')\n"
        "    return BuiltinIntentClassifier()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="model file busy"):
        guard.intent_classifier("flaky_intent_clf:make", 5.0)
    assert guard.intent_classifier("flaky_intent_clf:make", 5.0).name


def test_a_recreated_collection_does_not_inherit_the_learnt_receipt_sets(tmp_path):
    # The sets learnt from a deleted collection filled the cap of the new one of the same name,
    # whose own sets were then counted unchecked and every query by point id refused until the
    # client was closed.
    import numpy as np
    import qdrant_client
    from guardkit import create, models
    from test_leftovers37 import _noised_point
    from test_leftovers38 import _lb

    kit = make_kit(tmp_path)
    owner, bob = _lb(kit, max_receipt_param_sets=2)

    def fill(first_epsilon):
        rng = np.random.default_rng(5)
        qdrant_client.QdrantClient.upsert(owner, "pii", [_noised_point(kit, 1, rng)] + [
            _noised_point(kit, pid, rng, epsilon=first_epsilon + pid / 1000) for pid in (2, 3)])

    fill(0.5)
    assert len(bob.query_points("pii", query=1, limit=3).points) == 2  # all but point 1
    owner.delete_collection("pii")
    create(owner, "pii", distance=models.Distance.EUCLID)
    fill(0.6)
    assert len(bob.query_points("pii", query=1, limit=3).points) == 2  # all but point 1
    owner.close()
