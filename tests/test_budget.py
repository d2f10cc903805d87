"""Extraction budget: exact sliding-window counts in memory, SQLite and a real redis-server."""
from __future__ import annotations

import multiprocessing
import threading
import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from qdrant_guard.budget import (
    BudgetDecision,
    BudgetStore,
    BudgetStoreError,
    ExtractionBudget,
    MemoryBudgetStore,
    RedisBudgetStore,
    SqliteBudgetStore,
    denormalize_point_id,
    make_store,
    normalize_point_id,
)
from qdrant_guard.errors import QdrantGuardError
from tests.protocol_store import ProtocolOnlyStore
from tests.redis_server import free_port

STORE_KINDS = ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)]


def _new_store(kind, request, tmp_path):
    if kind == "memory":
        return MemoryBudgetStore()
    if kind == "sqlite":
        return SqliteBudgetStore(tmp_path / f"budget-{uuid.uuid4().hex}.db")
    url = request.getfixturevalue("redis_url")
    return RedisBudgetStore(url, prefix=f"qg:test:{uuid.uuid4().hex}:")


@pytest.fixture(params=STORE_KINDS)
def store(request, tmp_path):
    made = _new_store(request.param, request, tmp_path)
    yield made
    if isinstance(made, SqliteBudgetStore):
        made.close()


# --- the store contract, identical for every store -------------------------------------------


def test_store_contract_basics(store):
    assert isinstance(store, BudgetStore)
    assert store.admit("k", ["a", "b", "c", "a", "d"], cap=2, window_s=10, now=100.0) == (["a", "b", "a"], ["c", "d"])
    assert store.seen("k", window_s=10, now=100.0) == 2
    # Already-seen ids are always admitted, new ones withheld at the cap.
    assert store.admit("k", ["c", "b"], cap=2, window_s=10, now=101.0) == (["b"], ["c"])
    # A duplicate of a withheld new id is withheld too.
    assert store.admit("k", ["c", "c"], cap=2, window_s=10, now=101.0) == ([], ["c", "c"])
    # Other keys are independent; cap 0 admits nothing new.
    assert store.admit("other", ["c"], cap=0, window_s=10, now=101.0) == ([], ["c"])
    assert store.admit("other", [], cap=5, window_s=10, now=101.0) == ([], [])
    store.reset("k")
    assert store.seen("k", window_s=10, now=101.0) == 0
    assert store.admit("k", ["x"], cap=1, window_s=10, now=101.0) == (["x"], [])
    store.reset()
    assert store.seen("k", window_s=10, now=101.0) == 0


def test_window_boundary_and_refresh(store):
    store.admit("k", ["a"], cap=2, window_s=10, now=0.0)
    store.admit("k", ["b"], cap=2, window_s=10, now=5.0)
    # At now=10 "a" (ts 0) sits exactly on the cutoff: not older than the window, still counted.
    assert store.seen("k", window_s=10, now=10.0) == 2
    assert store.admit("k", ["c"], cap=2, window_s=10, now=10.0) == ([], ["c"])
    # Re-reading "a" refreshes it to ts 10.000001; "b" (ts 5) expires after 15.
    assert store.admit("k", ["a"], cap=2, window_s=10, now=10.000001) == (["a"], [])
    assert store.seen("k", window_s=10, now=15.0) == 2
    assert store.admit("k", ["c"], cap=2, window_s=10, now=15.5) == (["c"], [])
    assert store.seen("k", window_s=10, now=15.5) == 2
    assert store.seen("k", window_s=10, now=1e6) == 0


def test_clock_stepping_back_never_shortens_the_window(store):
    store.admit("k", ["a"], cap=1, window_s=10, now=1000.0)
    # The clock jumps back by an hour: "a" must still count, and "b" must still be withheld.
    assert store.admit("k", ["b"], cap=1, window_s=10, now=-2600.0) == ([], ["b"])
    assert store.seen("k", window_s=10, now=-2600.0) == 1
    assert store.admit("k", ["b"], cap=1, window_s=10, now=1010.5) == (["b"], [])


def test_store_counts_from_the_same_atomic_step(store):
    assert store.admit_counted("k", ["a", "b", "c"], cap=2, window_s=5, now=1.0) == (["a", "b"], ["c"], 0, 2)
    assert store.admit_counted("k", ["b", "z"], cap=3, window_s=5, now=2.0) == (["b", "z"], [], 2, 3)


def test_entries_by_prefix_lists_the_window_read_only(store):
    store.admit("src|a|c|x", ["1", "2"], cap=5, window_s=10, now=100.0)
    store.admit("src|a|c|y", ["3"], cap=5, window_s=10, now=105.0)
    store.admit("src|a|cc|z", ["4"], cap=5, window_s=10, now=105.0)
    store.admit("src|b|c|x", ["5"], cap=5, window_s=10, now=105.0)
    assert store.entries_by_prefix("src|a|c|", window_s=10, now=105.0) == {
        "src|a|c|x": frozenset({"1", "2"}), "src|a|c|y": frozenset({"3"})}
    # x's ids are a window old at 110.5: gone from the listing, and the listing forgot nothing.
    assert store.entries_by_prefix("src|a|c|", window_s=10, now=110.5) == {"src|a|c|y": frozenset({"3"})}
    assert store.seen("src|a|c|x", window_s=10, now=105.0) == 2
    # The key's own clock: an earlier now still sees what the newest admission keeps.
    assert store.entries_by_prefix("src|a|c|y", window_s=10, now=0.0) == {"src|a|c|y": frozenset({"3"})}
    assert store.entries_by_prefix("src|z", window_s=10, now=105.0) == {}
    assert set(store.entries_by_prefix("", window_s=10, now=105.0)) == {
        "src|a|c|x", "src|a|c|y", "src|a|cc|z", "src|b|c|x"}
    with pytest.raises(TypeError, match="prefix must be a str, not NoneType"):
        store.entries_by_prefix(None, window_s=10, now=0.0)


def test_admitted_by_source_reads_one_principal_and_collection(store):
    clock = [1000.0]
    budget = ExtractionBudget(store, window_s=60, clock=lambda: clock[0])
    for principal, collection, source, ids in [("p|1", "c", "memo", [1, 2]), ("p|1", "c", "a|b%7C", [3]),
                                               ("p|1", "c|d", "memo", [4]), ("p", "1|c", "memo", [5]),
                                               ("p|1", "c", "q3", ["00000000-0000-0000-0000-00000000000A"])]:
        budget.admit(principal=principal, collection=collection, source=source, point_ids=ids, source_size=10,
                     max_source_coverage=1.0)
    assert budget.admitted_by_source(principal="p|1", collection="c") == {
        "memo": frozenset({"i:1", "i:2"}), "a|b%7C": frozenset({"i:3"}),
        "q3": frozenset({"u:00000000-0000-0000-0000-00000000000a"})}
    clock[0] += 61
    assert budget.admitted_by_source(principal="p|1", collection="c") == {}


def test_admitted_by_source_is_none_for_a_protocol_only_store():
    assert ExtractionBudget(ProtocolOnlyStore(), clock=lambda: 0.0).admitted_by_source(principal="p", collection="c") is None


def test_denormalize_point_id_inverts_normalize():
    for pid in (0, 7, 2**64 - 1, "00000000-0000-0000-0000-00000000000a"):
        assert denormalize_point_id(normalize_point_id(pid)) == pid
    with pytest.raises(ValueError, match="not a normalised point id"):
        denormalize_point_id("x:1")


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (lambda s: s.admit("", ["a"], cap=1, window_s=1, now=0), ValueError, "key must be a non-empty string"),
        (lambda s: s.admit(None, ["a"], cap=1, window_s=1, now=0), TypeError, "key must be a str, not NoneType"),
        (lambda s: s.admit("k", None, cap=1, window_s=1, now=0), TypeError, "point_ids must be a sequence of str, not NoneType"),
        (lambda s: s.admit("k", "abc", cap=1, window_s=1, now=0), TypeError, "point_ids must be a sequence of str, not str"),
        (lambda s: s.admit("k", [5], cap=1, window_s=1, now=0), TypeError, "point_ids[0] must be a str, not int"),
        (lambda s: s.admit("k", ["a"], cap=-1, window_s=1, now=0), ValueError, "cap must be >= 0, got -1"),
        (lambda s: s.admit("k", ["a"], cap=None, window_s=1, now=0), TypeError, "cap must be an int, not NoneType"),
        (lambda s: s.admit("k", ["a"], cap=1, window_s=0, now=0), ValueError, "window_s must be a finite number > 0, got 0.0"),
        (lambda s: s.admit("k", ["a"], cap=1, window_s=1, now=float("nan")), ValueError, "now must be a finite number, got nan"),
        (lambda s: s.seen("k", window_s=None, now=0), TypeError, "window_s must be a float, not NoneType"),
        (lambda s: s.reset(5), TypeError, "key must be a str, not int"),
    ],
)
def test_store_rejects_bad_arguments(store, call, exc, message):
    with pytest.raises(exc) as info:
        call(store)
    assert str(info.value) == message


# --- stateful model check --------------------------------------------------------------------


class _Model:
    """Plain-Python statement of the contract: the oracle every store must match."""

    def __init__(self):
        self.keys = {}

    def _expire(self, key, window_s, now):
        entries = self.keys.setdefault(key, {})
        now = max([now, *entries.values()])
        for pid in [p for p, ts in entries.items() if ts < now - window_s]:
            del entries[pid]
        return entries, now

    def admit(self, key, ids, cap, window_s, now):
        entries, now = self._expire(key, window_s, now)
        admitted, withheld = [], []
        for pid in ids:
            if pid in entries or len(entries) < cap:
                entries[pid] = now
                admitted.append(pid)
            else:
                withheld.append(pid)
        return admitted, withheld

    def seen(self, key, window_s, now):
        return len(self._expire(key, window_s, now)[0])

    def entries(self, prefix, window_s, now):
        # Read-only: a copy of each key's entries, expired as an admission at ``now`` would.
        out = {}
        for key, entries in self.keys.items():
            if key.startswith(prefix):
                kept = {p: ts for p, ts in entries.items() if ts >= max([now, *entries.values()]) - window_s}
                if kept:
                    out[key] = frozenset(kept)
        return out


# Plain keys and budget-shaped ones, and one a group below them (the memory and Redis stores index
# keys by their part up to the last "|").
KEYS = ["k1", "k2", "src|a|c|x", "src|a|c|y", "src|a|d|x", "src|ab|c|x", "src|a|c|x|y"]


def _run_machine(stores):
    class BudgetMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.model = _Model()
            self.now = 0.0
            for s in stores:
                s.reset()

        @rule(dt=st.sampled_from([0.0, 1.0, 2.5, 5.0, 7.5, -2.5]))
        def tick(self, dt):
            self.now += dt

        @rule(key=st.sampled_from(KEYS), ids=st.lists(st.sampled_from("abcdefgh"), max_size=6),
              cap=st.integers(0, 5))
        def admit(self, key, ids, cap):
            expected = self.model.admit(key, ids, cap, 5.0, self.now)
            for s in stores:
                assert s.admit(key, ids, cap=cap, window_s=5.0, now=self.now) == expected, type(s).__name__

        @rule(key=st.sampled_from(KEYS))
        def reset_one(self, key):
            self.model.keys.pop(key, None)
            for s in stores:
                s.reset(key)

        @rule()
        def reset_all(self):
            self.model.keys.clear()
            for s in stores:
                s.reset()

        @invariant()
        def listings_agree(self):
            # Listing is read-only, so it runs before the counts below and must not change them.
            for prefix in ("", "k", "k1", "x", "src|a", "src|a|", "src|a|c|", "src|a|c|x", "src|a|c|x|", "src|ab|c|",
                           "src|a|d"):
                expected = self.model.entries(prefix, 5.0, self.now)
                for s in stores:
                    assert s.entries_by_prefix(prefix, window_s=5.0, now=self.now) == expected, type(s).__name__

        @invariant()
        def counts_agree(self):
            for key in KEYS:
                expected = self.model.seen(key, 5.0, self.now)
                for s in stores:
                    assert s.seen(key, window_s=5.0, now=self.now) == expected, type(s).__name__

    BudgetMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
    BudgetMachine.TestCase().runTest()


def test_state_machine_memory_and_sqlite(tmp_path):
    sqlite_store = SqliteBudgetStore(tmp_path / "machine.db")
    try:
        _run_machine([MemoryBudgetStore(), sqlite_store])
    finally:
        sqlite_store.close()


@pytest.mark.redis
def test_state_machine_redis(redis_url):
    _run_machine([RedisBudgetStore(redis_url, prefix=f"qg:test:{uuid.uuid4().hex}:")])


# --- exactness under concurrency -------------------------------------------------------------


def test_eight_threads_admit_exactly_cap_distinct_ids(store):
    cap, threads = 37, 8
    admitted: list[list[str]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads)

    def hammer(worker):
        barrier.wait()
        for round_ in range(25):
            # Overlapping id sets so that "already seen" and "new" interleave across threads.
            ids = [f"p{(worker * 7 + round_ * 3 + j) % 120}" for j in range(6)]
            got, _ = store.admit("hot", ids, cap=cap, window_s=3600, now=1000.0 + round_)
            admitted[worker].extend(got)

    pool = [threading.Thread(target=hammer, args=(w,)) for w in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    distinct = set().union(*map(set, admitted))
    assert len(distinct) == cap
    assert store.seen("hot", window_s=3600, now=1024.0) == cap


def _sqlite_worker(path, worker, inherited, queue):
    store = inherited if inherited is not None else SqliteBudgetStore(path)
    got = []
    for round_ in range(40):
        ids = [f"p{(worker * 11 + round_ * 5 + j) % 200}" for j in range(5)]
        got.extend(store.admit("hot", ids, cap=53, window_s=3600, now=50.0 + round_)[0])
    queue.put(got)


def test_two_processes_share_one_exact_sqlite_budget(tmp_path):
    path = str(tmp_path / "shared.db")
    parent = SqliteBudgetStore(path)
    parent.admit("warm", ["x"], cap=1, window_s=10, now=0.0)  # open a connection before forking
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    # One child reuses the inherited store object (it must reconnect), one opens its own.
    procs = [ctx.Process(target=_sqlite_worker, args=(path, w, parent if w == 0 else None, queue)) for w in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    distinct = set(results[0]) | set(results[1])
    assert len(distinct) == 53
    assert parent.seen("hot", window_s=3600, now=100.0) == 53
    parent.close()


def test_sqlite_survives_restart(tmp_path):
    path = tmp_path / "persist.db"
    first = SqliteBudgetStore(path)
    first.admit("k", ["a", "b"], cap=2, window_s=60, now=1.0)
    first.close()
    second = SqliteBudgetStore(path)
    assert second.seen("k", window_s=60, now=2.0) == 2
    assert second.admit("k", ["c"], cap=2, window_s=60, now=2.0) == ([], ["c"])
    second.close()


def test_sqlite_refuses_memory_and_reports_unreachable_paths(tmp_path):
    with pytest.raises(ValueError, match="use MemoryBudgetStore"):
        SqliteBudgetStore(":memory:")
    with pytest.raises(BudgetStoreError, match="cannot"):
        SqliteBudgetStore(tmp_path / "no-such-dir" / "b.db")
    assert issubclass(BudgetStoreError, QdrantGuardError)


def test_sqlite_full_database_is_a_budget_store_error(tmp_path):
    # On a full disk SQLite rolls the transaction back itself; the ROLLBACK after it then failed
    # and a raw sqlite3.OperationalError escaped, which the guard does not treat as a store failure.
    store = SqliteBudgetStore(tmp_path / "full.db")
    conn = store._connection()
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0] + 1}")
    ids = [f"{'x' * 300}{i}" for i in range(200)]
    with pytest.raises(BudgetStoreError, match="database or disk is full"):
        store.admit("k", ids, cap=1000, window_s=10, now=0.0)
    conn.execute("PRAGMA max_page_count = 1073741823")
    assert store.admit("k", ids[:2], cap=1, window_s=10, now=1.0) == (ids[:1], ids[1:2])
    store.close()


# --- redis specifics -------------------------------------------------------------------------


@pytest.mark.redis
def test_redis_ttl_window_and_prefix(redis_url):
    import redis

    client = redis.Redis.from_url(redis_url)
    prefix = f"qg:test:{uuid.uuid4().hex}:"
    store = RedisBudgetStore(client, prefix=prefix)
    store.admit("k", ["a", "b"], cap=5, window_s=30, now=100.0)
    assert client.zcard(prefix + "k") == 2
    ttl = client.pttl(prefix + "k")
    assert 0 < ttl <= 30_000
    # Injected clock: the window is enforced from `now`, not from server time.
    assert store.seen("k", window_s=30, now=130.0) == 2
    assert store.seen("k", window_s=30, now=130.5) == 0
    assert store.admit("k", ["c"], cap=1, window_s=30, now=131.0) == (["c"], [])
    # Server-side TTL removes idle keys.
    store.admit("short", ["a"], cap=1, window_s=0.05, now=0.0)
    time.sleep(0.2)
    assert client.exists(prefix + "short") == 0
    # reset() without a key only removes this store's prefix.
    client.set("unrelated", "1")
    other = RedisBudgetStore(client, prefix=prefix + "*x")  # glob characters in a prefix are literal
    other.admit("k", ["a"], cap=1, window_s=30, now=100.0)
    other.reset()
    assert client.exists(prefix + "k") == 1 and client.get("unrelated") == b"1"
    store.reset()
    assert client.exists(prefix + "k") == 0 and client.get("unrelated") == b"1"


@pytest.mark.redis
def test_redis_ttl_never_cuts_a_window_the_clock_stepped_back_into(redis_url):
    # After a step back, the key's entries count until newest + window on the key's clock, which
    # is further away than one window; a TTL of one window deleted them early on the server.
    import redis

    client = redis.Redis.from_url(redis_url)
    prefix = f"qg:test:{uuid.uuid4().hex}:"
    store = RedisBudgetStore(client, prefix=prefix)
    store.admit("k", ["a"], cap=1, window_s=10, now=3700.0)
    assert store.admit("k", ["b"], cap=1, window_s=10, now=100.0) == ([], ["b"])
    assert client.pttl(prefix + "k") > 3_600_000
    # The same with a window short enough to see the server expire it.
    store.admit("short", ["a"], cap=1, window_s=0.05, now=200.0)
    assert store.admit("short", ["b"], cap=1, window_s=0.05, now=100.0) == ([], ["b"])
    time.sleep(0.2)
    assert store.admit("short", ["b"], cap=1, window_s=0.05, now=100.2) == ([], ["b"])
    store.reset()


def test_redis_unreachable_is_a_budget_store_error():
    pytest.importorskip("redis")
    # Opted out of the access check, which would fail first (test_redis_store_access.py).
    store = RedisBudgetStore(f"redis://127.0.0.1:{free_port()}/0", allow_unauthenticated=True)
    with pytest.raises(BudgetStoreError, match="redis budget store failed for key 'k'"):
        store.admit("k", ["a"], cap=1, window_s=1, now=0)


# --- ExtractionBudget ------------------------------------------------------------------------


def test_normalize_point_id():
    u = uuid.UUID("550e8400-e29b-41d4-a716-446655440000")
    forms = [u, str(u), str(u).upper(), u.hex, "{" + str(u) + "}", "urn:uuid:" + str(u)]
    assert {normalize_point_id(f) for f in forms} == {"u:550e8400-e29b-41d4-a716-446655440000"}
    assert normalize_point_id(5) == "i:5"
    with pytest.raises(TypeError, match="not bool"):
        normalize_point_id(True)
    with pytest.raises(TypeError, match="not NoneType"):
        normalize_point_id(None)
    with pytest.raises(ValueError, match="unsigned int, got -1"):
        normalize_point_id(-1)
    with pytest.raises(ValueError, match="'5' is not a UUID string"):
        normalize_point_id("5")


@given(st.tuples(*[st.text(alphabet="ab|%", min_size=1, max_size=4)] * 3),
       st.tuples(*[st.text(alphabet="ab|%", min_size=1, max_size=4)] * 3))
def test_budget_key_is_injective(one, two):
    assert (ExtractionBudget.budget_key(*one) == ExtractionBudget.budget_key(*two)) == (one == two)


def test_budget_key_and_cap_errors():
    with pytest.raises(ValueError, match="principal must be a non-empty string"):
        ExtractionBudget.budget_key("", "c", "s")
    with pytest.raises(TypeError, match="source must be a str, not NoneType"):
        ExtractionBudget.budget_key("p", "c", None)
    budget = ExtractionBudget(MemoryBudgetStore())
    assert budget.cap_for(20, 0.25) == 5
    assert budget.cap_for(3, 0.25) == 0
    assert budget.cap_for(100, 0.57) == 57
    with pytest.raises(ValueError, match=r"max_source_coverage must be in \[0, 1\], got 1.5"):
        budget.cap_for(10, 1.5)
    with pytest.raises(ValueError, match="source_size must be >= 0, got -1"):
        budget.cap_for(-1, 0.5)
    with pytest.raises(TypeError, match="store must implement BudgetStore"):
        ExtractionBudget(object())


def test_extraction_budget_admits_up_to_coverage_with_sliding_window(store):
    clock = [1000.0]
    budget = ExtractionBudget(store, window_s=60, clock=lambda: clock[0])
    args = dict(principal="mallory", collection="docs", source="board-memo", source_size=20, max_source_coverage=0.25)
    d1 = budget.admit(point_ids=[1, 2, 3], **args)
    assert d1 == BudgetDecision(admitted=[1, 2, 3], withheld=[], seen_before=0, seen_after=3, cap=5,
                                key="src|mallory|docs|board-memo")
    u = "550E8400-E29B-41D4-A716-446655440000"
    d2 = budget.admit(point_ids=[3, u, 4, 5, u.lower()], **args)
    assert d2.admitted == [3, u, 4, u.lower()] and d2.withheld == [5]
    assert (d2.seen_before, d2.seen_after) == (3, 5)
    # Another principal, collection or source has its own budget.
    assert budget.admit(point_ids=[5], **{**args, "principal": "alice"}).admitted == [5]
    # After the window slides past, new chunks become visible again.
    clock[0] += 61
    assert budget.admit(point_ids=[5, 6], **args).admitted == [5, 6]


def test_vector_budget_is_separate(store):
    budget = ExtractionBudget(store, window_s=60, clock=lambda: 5.0)
    d = budget.admit_vectors(principal="p", collection="c", point_ids=[1, 2, 3], max_vectors=2)
    assert (d.admitted, d.withheld, d.cap, d.key) == ([1, 2], [3], 2, "vec|p|c")
    src = budget.admit(principal="p", collection="c", source="s", point_ids=[3], source_size=4, max_source_coverage=0.5)
    assert src.admitted == [3]


def test_extraction_budget_works_with_protocol_only_store():
    budget = ExtractionBudget(ProtocolOnlyStore(), clock=lambda: 0.0)
    d = budget.admit_vectors(principal="p", collection="c", point_ids=[1, 2, 3], max_vectors=2)
    assert (d.admitted, d.withheld, d.seen_before, d.seen_after) == ([1, 2], [3], 0, 2)


def test_make_store(tmp_path):
    assert isinstance(make_store(None), MemoryBudgetStore)
    assert isinstance(make_store("memory"), MemoryBudgetStore)
    sqlite_store = make_store(f"sqlite:///{tmp_path}/spec.db")
    assert isinstance(sqlite_store, SqliteBudgetStore) and sqlite_store.path == f"{tmp_path}/spec.db"
    sqlite_store.close()
    with pytest.raises(ValueError, match="unknown budget store spec 'mongo://x'"):
        make_store("mongo://x")
    with pytest.raises(TypeError, match="spec must be a str or None, not int"):
        make_store(5)


@pytest.mark.redis
def test_make_store_redis(redis_url):
    assert isinstance(make_store(redis_url), RedisBudgetStore)


# --- admit_many: one store transaction, the same decisions as admit per source ---------------
# (for sources that share no point; shared points are tests/test_budget_all_or_none.py's)


def _disjoint(requests):
    # Source j lists ids 100*j.. only, and only the first source lists UUIDs.
    return {source: (ids if j == 0 else [i + 100 * j for i in ids if isinstance(i, int)], size)
            for j, (source, (ids, size)) in enumerate(requests.items())}


_sources = st.sampled_from(["memo", "wiki", "a|b", "50%", "ünï"])
_ids = st.lists(st.integers(0, 12) | st.sampled_from(["550e8400-e29b-41d4-a716-446655440000",
                                                        "550E8400E29B41D4A716446655440000"]), max_size=6)
_request = st.dictionaries(_sources, st.tuples(_ids, st.integers(0, 14)), max_size=4).map(_disjoint)
_script = st.lists(st.tuples(_request, st.sampled_from([0.0, 0.5, 1.0]), st.sampled_from([0.0, 3.0, 7.0, -2.0]),
                             st.sampled_from(["p", "q"])), min_size=1, max_size=6)


def _run_many_vs_sequential(make, script):
    t = [100.0]
    many = ExtractionBudget(make(), window_s=10, clock=lambda: t[0])
    one = ExtractionBudget(make(), window_s=10, clock=lambda: t[0])
    for requests, coverage, dt, principal in script:
        t[0] += dt
        got = many.admit_many(principal=principal, collection="c", requests=requests,
                              max_source_coverage=coverage)
        want = {source: one.admit(principal=principal, collection="c", source=source, point_ids=ids,
                                  source_size=size, max_source_coverage=coverage)
                for source, (ids, size) in requests.items()}
        assert got == want and list(got) == list(requests)
        for source in requests:
            key = ExtractionBudget.budget_key(principal, "c", source)
            assert many.store.seen(key, window_s=10, now=t[0]) == one.store.seen(key, window_s=10, now=t[0])


@settings(max_examples=60, deadline=None)
@given(script=_script)
def test_admit_many_equals_sequential_admit_memory_and_sqlite(tmp_path_factory, script):
    _run_many_vs_sequential(MemoryBudgetStore, script)
    d = tmp_path_factory.mktemp("many")
    made = []

    def sqlite_store():
        made.append(SqliteBudgetStore(d / f"{uuid.uuid4().hex}.db"))
        return made[-1]

    try:
        _run_many_vs_sequential(sqlite_store, script)
    finally:
        for s in made:
            s.close()


@pytest.mark.redis
@settings(max_examples=40, deadline=None)
@given(script=_script)
def test_admit_many_equals_sequential_admit_redis(redis_url, script):
    _run_many_vs_sequential(lambda: RedisBudgetStore(redis_url, prefix=f"qg:many:{uuid.uuid4().hex}:"), script)


def test_admit_many_is_one_store_call(store, monkeypatch):
    calls = []
    original = store._admit_points
    monkeypatch.setattr(store, "_admit_points", lambda keys, pts, w, n: calls.append(len(keys)) or original(keys, pts, w, n))
    budget = ExtractionBudget(store, clock=lambda: 1.0)
    out = budget.admit_many(principal="p", collection="c", max_source_coverage=0.5,
                            requests={"a": ([1, 2, 3], 4), "b": ([7], 1), "c": ([], 10)})
    assert calls == [3]
    assert (out["a"].admitted, out["a"].withheld, out["a"].cap) == ([1, 2], [3], 2)
    assert (out["b"].admitted, out["b"].withheld, out["b"].cap) == ([], [7], 0)
    assert out["c"] == BudgetDecision([], [], 0, 0, 5, "src|p|c|c")
    assert budget.admit_many(principal="p", collection="c", requests={}, max_source_coverage=0.5) == {}


def test_admit_many_with_a_protocol_only_store():
    budget = ExtractionBudget(ProtocolOnlyStore(), clock=lambda: 0.0)
    out = budget.admit_many(principal="p", collection="c", max_source_coverage=1.0,
                            requests={"a": ([1, 2], 1), "b": ([3], 1)})
    assert (out["a"].admitted, out["a"].withheld, out["b"].admitted) == ([1], [2], [3])


def test_admit_many_argument_errors():
    store = MemoryBudgetStore()
    budget = ExtractionBudget(store, clock=lambda: 0.0)
    kw = dict(principal="p", collection="c", max_source_coverage=0.5)
    with pytest.raises(TypeError, match="requests must be a mapping"):
        budget.admit_many(requests=[("a", ([1], 2))], **kw)
    with pytest.raises(TypeError, match=r"requests\['a'\] must be a \(point_ids, source_size\) tuple"):
        budget.admit_many(requests={"a": [[1], 2]}, **kw)
    with pytest.raises(ValueError, match="source_size must be >= 0"):
        budget.admit_many(requests={"a": ([1], -1)}, **kw)
    with pytest.raises(ValueError, match="max_source_coverage must be in"):
        budget.admit_many(requests={"a": ([1], 1)}, principal="p", collection="c", max_source_coverage=2.0)
    # A bad id in a later source charges nothing at all.
    with pytest.raises(TypeError, match="point id must be"):
        budget.admit_many(requests={"a": ([1], 4), "b": ([None], 4)}, **kw)
    assert store.seen(ExtractionBudget.budget_key("p", "c", "a"), window_s=1, now=0) == 0
    with pytest.raises(TypeError, match=r"requests\[0\] must be a \(key, point_ids, cap\) tuple"):
        store.admit_many_counted([("k", ["a"])], window_s=1, now=0)
    with pytest.raises(ValueError, match="window_s must be a finite number > 0"):
        store.admit_many_counted([], window_s=0, now=0)


@given(size=st.integers(0, 10 ** 6), coverage=st.floats(0, 1) | st.sampled_from([0.57, 0.1, 0.3, 1 / 3, 0.29]))
def test_cap_is_floor_share(size, coverage):
    from qdrant_guard.diversity import floor_share
    assert ExtractionBudget(MemoryBudgetStore()).cap_for(size, coverage) == floor_share(size, coverage)
