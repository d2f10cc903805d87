"""All-or-none admission: a point of several sources is released, and charged to every one of
them, only if each admits it; a point any source withholds is charged to none. Memory, SQLite and
a real redis-server are checked against one plain-Python model, in rank order, with re-reads and
under threads."""
from __future__ import annotations

import threading
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qdrant_guard.budget import (
    BudgetDecision,
    ExtractionBudget,
    MemoryBudgetStore,
    RedisBudgetStore,
    SqliteBudgetStore,
)
from tests.protocol_store import ProtocolOnlyStore

STORE_KINDS = ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)]
W = 10.0  # window_s


def _new_store(kind, request, tmp_path, prefix=None):
    if kind == "memory":
        return MemoryBudgetStore()
    if kind == "sqlite":
        return SqliteBudgetStore(tmp_path / f"budget-{uuid.uuid4().hex}.db")
    return RedisBudgetStore(request.getfixturevalue("redis_url"),
                            prefix=prefix or f"qg:aon:{uuid.uuid4().hex}:")


@pytest.fixture(params=STORE_KINDS)
def store(request, tmp_path):
    made = _new_store(request.param, request, tmp_path)
    yield made
    if isinstance(made, SqliteBudgetStore):
        made.close()


class _Model:
    """The contract in plain Python: the oracle every store must match."""

    def __init__(self):
        self.keys = {}

    def _expire(self, key, now):
        entries = self.keys.setdefault(key, {})
        now = max([now, *entries.values()])
        for pid in [p for p, ts in entries.items() if ts < now - W]:
            del entries[pid]
        return entries, now

    def admit_points(self, keys, points, now):
        live = [self._expire(key, now) for key, _ in keys]
        before = [len(entries) for entries, _ in live]
        released = []
        for pid, members in points:
            ok = all(pid in live[k][0] or len(live[k][0]) < keys[k][1] for k in members)
            if ok:
                for k in members:
                    live[k][0][pid] = live[k][1]
            released.append(ok)
        return released, [(b, len(entries)) for b, (entries, _) in zip(before, live)]

    def seen(self, key, now):
        return len(self._expire(key, now)[0])


# --- the store primitive: admit_points ---------------------------------------------------------


def test_a_point_one_key_refuses_is_charged_to_none(store):
    keys = [("memo", 1), ("q3", 3)]
    assert store.admit_points(keys, [("a", [0])], window_s=W, now=0.0) == ([True], [(0, 1), (0, 0)])
    # memo is full: b is withheld, and q3, which had room, is not charged for it.
    assert store.admit_points(keys, [("b", [0, 1]), ("c", [1])], window_s=W, now=1.0) == (
        [False, True], [(1, 1), (0, 1)])
    assert store.seen("q3", window_s=W, now=1.0) == 1


def test_a_re_read_is_free_under_every_key(store):
    keys = [("memo", 1), ("q3", 1)]
    assert store.admit_points(keys, [("a", [0, 1])], window_s=W, now=0.0) == ([True], [(0, 1), (0, 1)])
    # Both keys are full, yet a is theirs already: released again; b is new to both: withheld.
    assert store.admit_points(keys, [("b", [0, 1]), ("a", [0, 1]), ("a", [0, 1])], window_s=W, now=1.0) == (
        [False, True, True], [(1, 1), (1, 1)])
    # The re-read refreshed a under both keys (ts 1), so it outlives the window from ts 0.
    assert store.seen("memo", window_s=W, now=10.5) == store.seen("q3", window_s=W, now=10.5) == 1


def test_a_point_seen_under_one_key_and_new_to_a_full_one_is_withheld_and_not_refreshed(store):
    store.admit_points([("memo", 5)], [("a", [0])], window_s=W, now=0.0)
    store.admit_points([("q3", 1)], [("c", [0])], window_s=W, now=0.0)  # q3 full
    keys = [("memo", 5), ("q3", 1)]
    assert store.admit_points(keys, [("a", [0, 1])], window_s=W, now=5.0) == ([False], [(1, 1), (1, 1)])
    # Not refreshed under memo: a (ts 0) leaves memo's window at 10, as if never asked for again.
    assert store.seen("memo", window_s=W, now=10.5) == 0
    assert store.admit_points(keys, [("a", [0, 1])], window_s=W, now=10.5) == ([True], [(0, 1), (0, 1)])


def test_points_are_decided_in_rank_order(store):
    keys = [("memo", 0), ("q3", 1)]
    # a comes first but memo (cap 0) refuses it, so q3's one slot goes to b, ranked after it.
    assert store.admit_points(keys, [("a", [0, 1]), ("b", [1]), ("c", [1])], window_s=W, now=0.0) == (
        [False, True, False], [(0, 0), (0, 1)])


def test_points_without_keys_and_empty_calls(store):
    assert store.admit_points([], [("a", [])], window_s=W, now=0.0) == ([True], [])
    assert store.admit_points([("k", 0)], [("a", []), ("b", [0])], window_s=W, now=0.0) == ([True, False], [(0, 0)])
    assert store.admit_points([("k", 1)], [], window_s=W, now=0.0) == ([], [(0, 0)])


@pytest.mark.parametrize("keys, points, exc, message", [
    ([("k", 1), ("k", 2)], [], ValueError, "keys must be distinct"),
    ([("k",)], [], TypeError, "keys[0] must be a (key, cap) tuple"),
    ([("k", -1)], [], ValueError, "cap must be >= 0, got -1"),
    ([("", 1)], [], ValueError, "key must be a non-empty string"),
    ([("k", 1)], [(5, [0])], TypeError, "points[0] must be a (str point_id, key_indices) tuple"),
    ([("k", 1)], [("a", [1])], ValueError, "points[0] key_indices must be distinct indices into keys"),
    ([("k", 1)], [("a", [0, 0])], ValueError, "points[0] key_indices must be distinct indices into keys"),
    ([("k", 1)], [("a", [-1])], ValueError, "points[0] key index must be >= 0, got -1"),
    ([("k", 1)], [("a", "0")], TypeError, "points[0] key_indices must be a sequence of int"),
    ("k", [], TypeError, "keys must be a sequence of (key, cap), not str"),
])
def test_admit_points_rejects_bad_arguments(store, keys, points, exc, message):
    with pytest.raises(exc) as info:
        store.admit_points(keys, points, window_s=W, now=0.0)
    assert str(info.value) == message


def test_a_bad_point_charges_nothing(store):
    with pytest.raises(ValueError, match=r"points\[1\] key_indices"):
        store.admit_points([("k", 1)], [("a", [0]), ("b", [3])], window_s=W, now=0.0)
    assert store.seen("k", window_s=W, now=0.0) == 0


# --- every store matches the model on random multi-source sequences ---------------------------

_KEYS = ["memo", "q3", "wiki", "a|b"]
_step = st.tuples(
    st.sampled_from([0.0, 1.0, 4.0, 7.5, -3.0]),
    st.lists(st.tuples(st.sampled_from(range(len(_KEYS))), st.integers(0, 4)), min_size=1, max_size=4,
             unique_by=lambda kc: kc[0]),
    st.lists(st.tuples(st.sampled_from("abcdefgh"), st.sets(st.integers(0, 3), max_size=4)), max_size=8),
)


def _run_script(stores, script):
    model, now = _Model(), 100.0
    for dt, key_caps, raw_points in script:
        now += dt
        keys = [(_KEYS[k], cap) for k, cap in key_caps]
        points = [(pid, sorted(k for k in members if k < len(keys))) for pid, members in raw_points]
        want = model.admit_points(keys, points, now)
        for s in stores:
            assert s.admit_points(keys, points, window_s=W, now=now) == want, type(s).__name__
        for key in _KEYS:
            for s in stores:
                assert s.seen(key, window_s=W, now=now) == model.seen(key, now), (type(s).__name__, key)


@settings(max_examples=80, deadline=None)
@given(script=st.lists(_step, min_size=1, max_size=8))
def test_memory_and_sqlite_match_the_model(tmp_path_factory, script):
    sqlite_store = SqliteBudgetStore(tmp_path_factory.mktemp("aon") / "m.db")
    try:
        _run_script([MemoryBudgetStore(), sqlite_store], script)
    finally:
        sqlite_store.close()


@pytest.mark.redis
@settings(max_examples=60, deadline=None)
@given(script=st.lists(_step, min_size=1, max_size=8))
def test_redis_matches_the_model(redis_url, script):
    _run_script([RedisBudgetStore(redis_url, prefix=f"qg:aon:{uuid.uuid4().hex}:")], script)


# --- ExtractionBudget.admit_many: per-source lists, decided in rank order ---------------------

_ranked = st.lists(st.tuples(st.integers(0, 9), st.sets(st.sampled_from(["memo", "q3", "wiki"]), min_size=1)),
                   max_size=10)


def _as_requests(ranked, sizes):
    """Per-source lists cut from one ranked result, as the read path builds them; the point's
    sources are those of its first occurrence (a point has one payload)."""
    sources_of = {}
    for pid, sources in ranked:
        sources_of.setdefault(pid, sorted(sources))
    requests = {}
    for pid, _ in ranked:
        for source in sources_of[pid]:
            requests.setdefault(source, ([], sizes[source]))[0].append(pid)
    return requests, sources_of


def _expected(model, requests, sources_of, ranked, coverage, now, principal):
    names = list(requests)
    keys = [(ExtractionBudget.budget_key(principal, "c", s), int(requests[s][1] * coverage)) for s in names]
    order = list(dict.fromkeys(pid for pid, _ in ranked))
    points = [(f"i:{pid}", [names.index(s) for s in sources_of[pid]]) for pid in order]
    flags, counts = model.admit_points(keys, points, now)
    released = {pid for pid, ok in zip(order, flags) if ok}
    return {s: BudgetDecision(admitted=[p for p in requests[s][0] if p in released],
                              withheld=[p for p in requests[s][0] if p not in released],
                              seen_before=before, seen_after=after, cap=cap, key=key)
            for s, (key, cap), (before, after) in zip(names, keys, counts)}


def _run_ranked(make, script):
    t = [100.0]
    budget, model = ExtractionBudget(make(), window_s=W, clock=lambda: t[0]), _Model()
    sizes = {"memo": 6, "q3": 4, "wiki": 10}
    for ranked, dt, principal in script:
        t[0] += dt
        requests, sources_of = _as_requests(ranked, sizes)
        got = budget.admit_many(principal=principal, collection="c", requests=requests, max_source_coverage=0.5)
        assert got == _expected(model, requests, sources_of, ranked, 0.5, t[0], principal)


_ranked_script = st.lists(st.tuples(_ranked, st.sampled_from([0.0, 2.0, 6.0]), st.sampled_from(["p", "q"])),
                          min_size=1, max_size=6)


@settings(max_examples=80, deadline=None)
@given(script=_ranked_script)
def test_admit_many_decides_lists_of_one_ranking_in_rank_order(tmp_path_factory, script):
    _run_ranked(MemoryBudgetStore, script)
    sqlite_store = SqliteBudgetStore(tmp_path_factory.mktemp("ranked") / "r.db")
    try:
        _run_ranked(lambda: sqlite_store, script)
    finally:
        sqlite_store.close()


@pytest.mark.redis
@settings(max_examples=40, deadline=None)
@given(script=_ranked_script)
def test_admit_many_decides_lists_of_one_ranking_in_rank_order_redis(redis_url, script):
    _run_ranked(lambda: RedisBudgetStore(redis_url, prefix=f"qg:ranked:{uuid.uuid4().hex}:"), script)


def test_admit_many_restores_the_ranking_across_sources(store):
    # Ranked 1 (memo), 2 (q3), 3 (memo and q3); q3 has one slot. Read list by list, 3 (memo's
    # second) would come before 2 (q3's first) and take the slot; in rank order 2 takes it.
    budget = ExtractionBudget(store, window_s=W, clock=lambda: 0.0)
    out = budget.admit_many(principal="p", collection="c", max_source_coverage=0.5,
                            requests={"memo": ([1, 3], 4), "q3": ([2, 3], 2)})
    assert (out["memo"].admitted, out["memo"].withheld) == ([1], [3])
    assert (out["q3"].admitted, out["q3"].withheld) == ([2], [3])
    assert (out["memo"].seen_after, out["q3"].seen_after) == (1, 1)


def test_admit_many_decision_fields_are_truthful(store):
    budget = ExtractionBudget(store, window_s=W, clock=lambda: 0.0)
    kw = dict(principal="p", collection="c", max_source_coverage=0.5)
    budget.admit_many(requests={"memo": ([0, 1], 4)}, **kw)  # memo full (cap 2)
    out = budget.admit_many(requests={"memo": ([1, 4], 4), "q3": ([4, 10, 11, 4], 6)}, **kw)
    # 4 is withheld by memo; q3 lists it as withheld too (not released) and does not count it.
    assert out["memo"] == BudgetDecision([1], [4], 2, 2, 2, "src|p|c|memo")
    assert out["q3"] == BudgetDecision([10, 11], [4, 4], 0, 2, 3, "src|p|c|q3")


def test_admit_many_with_contradictory_lists_still_decides_every_point(store):
    budget = ExtractionBudget(store, window_s=W, clock=lambda: 0.0)
    out = budget.admit_many(principal="p", collection="c", max_source_coverage=1.0,
                            requests={"a": ([1, 2], 1), "b": ([2, 1], 2)})
    # No ranking fits both lists; the first read (1) goes first and takes a's only slot.
    assert (out["a"].admitted, out["b"].admitted, out["b"].withheld) == ([1], [1], [2])


# --- stores that cannot admit all-or-none ------------------------------------------------------


def _shared_point_read(budget):
    kw = dict(principal="p", collection="c", max_source_coverage=0.5)
    budget.admit_many(requests={"memo": ([0, 1], 4)}, **kw)
    return budget.admit_many(requests={"memo": ([4], 4), "q3": ([4, 10], 4)}, **kw)


def test_a_protocol_only_store_never_releases_a_point_a_source_withheld():
    out = _shared_point_read(ExtractionBudget(ProtocolOnlyStore(), window_s=W, clock=lambda: 0.0))
    assert out["memo"].withheld == [4] and out["q3"].withheld == [4] and out["q3"].admitted == [10]
    # What remains: such a store was charged 4 under q3 all the same (q3 counts it).
    assert out["q3"].seen_after == 2


@pytest.mark.redis
def test_redis_cluster_keys_of_different_slots_fall_back_without_over_releasing(redis_url):
    from redis.crc import key_slot

    # A plain client marked as a cluster's: the per-key fallback runs against a real server.
    store = RedisBudgetStore(redis_url, prefix=f"qg:cl:{uuid.uuid4().hex}:")
    store._cluster = True
    keys = ExtractionBudget.budget_key("p", "c", "memo"), ExtractionBudget.budget_key("p", "c", "q3")
    assert len({key_slot((store.prefix + k).encode()) for k in keys}) == 2
    out = _shared_point_read(ExtractionBudget(store, window_s=W, clock=lambda: 0.0))
    assert out["memo"].withheld == [4] and out["q3"].withheld == [4] and out["q3"].admitted == [10]
    assert out["q3"].seen_after == 2  # charged for 4 there: the documented cost of the fallback


@pytest.mark.redis
def test_redis_cluster_with_a_hash_tag_prefix_stays_all_or_none(redis_url):
    store = RedisBudgetStore(redis_url, prefix=f"{{qg-{uuid.uuid4().hex}}}:")
    store._cluster = True
    out = _shared_point_read(ExtractionBudget(store, window_s=W, clock=lambda: 0.0))
    assert out["q3"].withheld == [4] and out["q3"].admitted == [10] and out["q3"].seen_after == 1


# --- under threads: nothing is charged that was not released ----------------------------------


def test_threads_charge_exactly_the_released_points(store):
    sources = {f"p{i}": [k for k in range(3) if (i >> k) & 1] or [0] for i in range(40)}
    keys = [("memo", 9), ("q3", 7), ("wiki", 12)]
    released: list[set[str]] = [set() for _ in range(4)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def hammer(worker):
        barrier.wait()
        try:
            for round_ in range(15):
                pids = [f"p{(worker * 13 + round_ * 7 + j) % 40}" for j in range(5)]
                flags, _ = store.admit_points(keys, [(pid, sources[pid]) for pid in pids], window_s=3600,
                                              now=10.0 + round_)
                released[worker].update(pid for pid, ok in zip(pids, flags) if ok)
        except BaseException as exc:  # a thread's exception would otherwise not fail the test
            errors.append(exc)

    pool = [threading.Thread(target=hammer, args=(w,)) for w in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    every = set().union(*released)
    assert every
    for k, (key, cap) in enumerate(keys):
        under = {pid for pid in every if k in sources[pid]}
        assert len(under) == store.seen(key, window_s=3600, now=30.0) <= cap, key
