"""Review 57 (2026-12-07): the extraction budget and the diversity cap under concurrency, restarts,
clocks, failures and every read path, attacked.

Real qdrant-client local mode, real SQLite files, a real redis-server (tests marked ``redis``),
real threads, event loops and processes. What broke: the budget keyed a principal by its audit
label ``agent@boundary``, which agent ``m@x`` of boundary ``support`` and agent ``m`` of boundary
``x@support`` share, so one of them spent the other's budget (``*their_own_budget*`` fails on
the code before the fix); and an async call whose event loop stopped with it holding the
local-mode client, the loop kept referenced, blocked every other call of the client for good
(``*loop_stopped*`` fails before the fix). The rest are attacks that hold, each a test that would
fail if they did not.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import qdrant_client
from guardkit import DIM, PAYROLL_DIVERSITY, async_pii_client, audit_records, create, hr_policy, make_kit, models, payroll, unit

from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal, QdrantClient, keys
from qdrant_guard.budget import ExtractionBudget, MemoryBudgetStore, RedisBudgetStore, SqliteBudgetStore

# PAYROLL_DIVERSITY over 10 points of one source: a reader may see floor(10 * 0.2) = 2 of them.
CAP = 2
KEY = "src|bob@support|hr|payroll"


def _points() -> list[models.PointStruct]:
    rng = np.random.default_rng(0)
    return [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"}) for i in range(10)]


def _bob(kit, budget_store: str | None = None, *, asynchronous: bool = False, ttl_s: float = 600.0):
    """bob@support's view of a new ``:memory:`` store holding :func:`_points` in ``hr``, its budget in
    ``budget_store`` (the memory store of this client when None)."""
    extra = {} if budget_store is None else {"budget_store": budget_store}
    cfg = kit.config({"hr": hr_policy(PAYROLL_DIVERSITY)}, **extra)
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    owner.upsert("hr", _points())
    if not asynchronous:
        return owner.with_principal(kit.principal("bob", "support", ttl_s=ttl_s))
    # The async client on a store of its own, the same points written raw (its guard reads them).
    aclient = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("bob", "support"))
    asyncio.run(qdrant_client.AsyncQdrantClient.create_collection(
        aclient, "hr", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE)))
    asyncio.run(qdrant_client.AsyncQdrantClient.upsert(aclient, "hr", _points()))
    return aclient


def _queries(n: int) -> list[list[float]]:
    rng = np.random.default_rng(11)
    return [unit(rng) for _ in range(n)]


def _ids(result) -> list:
    points = result[0] if isinstance(result, tuple) else getattr(result, "points", result)
    return [p.id for p in points]


# --- one principal, one budget -------------------------------------------------------------------


def _kit_with_at_boundary(tmp_path):
    kit = make_kit(tmp_path)
    sk, pk = keys.generate_keypair()
    kit.authority["x@support"], kit.authority_pub["x@support"] = sk, keys.public_key_to_str(pk)
    return kit


def test_two_agents_whose_labels_read_alike_each_have_their_own_budget(tmp_path):
    # Agent "m@x" of boundary "support" and agent "m" of boundary "x@support" are two principals,
    # both labelled "m@x@support": keyed by that label, the first spent the second's budget (and
    # re-read the points the second had been given for free).
    kit = _kit_with_at_boundary(tmp_path)
    pol = {**hr_policy(PAYROLL_DIVERSITY), "readers": ["support", "x@support"]}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    owner.upsert("hr", _points())
    first = owner.with_principal(kit.principal("m@x", "support"))
    second = owner.with_principal(kit.principal("m", "x@support"))
    assert first.guard.principal_label == second.guard.principal_label == "m@x@support"
    assert len(_ids(first.scroll("hr", limit=10))) == CAP
    got = _ids(second.scroll("hr", limit=10, offset=5))
    assert len(got) == CAP and set(got) <= {5, 6, 7, 8, 9}
    store = owner.guard.shared["budget_store"]
    listed = store.entries_by_prefix("src|", window_s=86400.0, now=time.time())
    assert sorted(listed) == ["src|m%2540x@support|hr|payroll", "src|m@x@support|hr|payroll"]


def test_a_plain_agent_id_keeps_the_budget_key_it_always_had(tmp_path):
    # The escape touches agent ids holding "@" or "%" only: budgets already in a store still count.
    kit = make_kit(tmp_path)
    _, bob = payroll(kit)
    bob.scroll("hr", limit=1)
    store = bob.guard.shared["budget_store"]
    assert list(store.entries_by_prefix("src|", window_s=86400.0, now=time.time())) == [KEY]


def test_one_credential_is_one_budget_however_it_is_presented_or_reissued(tmp_path):
    # A bare token, Principal(agent, boundary, token) and a credential issued again to the same
    # agent id all draw on one budget: the key comes from the verified claims, never the claim text.
    kit = make_kit(tmp_path)
    owner, bob = payroll(kit)
    assert len(_ids(bob.scroll("hr", limit=1))) == 1
    token = kit.principal("bob", "support").credential
    for view in (owner.with_principal(token), owner.with_principal(kit.principal("bob", "support"))):
        got = _ids(view.scroll("hr", limit=10))
        assert len(got) <= CAP
    assert len(set(_ids(owner.with_principal(token).scroll("hr", limit=10)))) == CAP
    listed = owner.guard.shared["budget_store"].entries_by_prefix("src|", window_s=86400.0, now=time.time())
    assert list(listed) == [KEY] and len(listed[KEY]) == CAP


def test_an_empty_agent_id_is_refused_and_a_padded_one_is_another_agent(tmp_path):
    # No credential names an empty agent; one padded with spaces names another agent, which only
    # the boundary's authority can issue (docs/diversity-budget.md, "The bound applies per principal").
    kit = make_kit(tmp_path)
    with pytest.raises(ConfigError, match="agent_id must not be empty"):
        kit.principal("", "support")
    owner, bob = payroll(kit)
    bob.scroll("hr", limit=10)
    padded = owner.with_principal(kit.principal("bob ", "support"))
    assert padded.guard.principal_label == "bob @support"
    assert len(_ids(padded.scroll("hr", limit=10))) == CAP


# --- every read path draws on the one budget ------------------------------------------------------


def _read_paths(bob):
    """Every way bob can get points of ``hr`` back: name -> a call returning the ids it released."""
    q = _queries(1)[0]
    return {
        "scroll": lambda: _ids(bob.scroll("hr", limit=10)),
        "retrieve": lambda: _ids(bob.retrieve("hr", ids=list(range(10)))),
        "query_points": lambda: _ids(bob.query_points("hr", query=q, limit=10)),
        "recommend": lambda: _ids(bob.query_points("hr", query=models.RecommendQuery(
            recommend=models.RecommendInput(positive=[q])), limit=10)),
        "discover": lambda: _ids(bob.query_points("hr", query=models.DiscoverQuery(discover=models.DiscoverInput(
            target=q, context=[models.ContextPair(positive=_queries(2)[0], negative=_queries(2)[1])])), limit=10)),
        "context": lambda: _ids(bob.query_points("hr", query=models.ContextQuery(
            context=[models.ContextPair(positive=q, negative=_queries(2)[1])]), limit=10)),
        "prefetch": lambda: _ids(bob.query_points("hr", prefetch=[models.Prefetch(query=q, limit=10)],
                                                  query=models.FusionQuery(fusion=models.Fusion.RRF), limit=10)),
        "batch": lambda: [i for r in bob.query_batch_points("hr", requests=[
            models.QueryRequest(query=q, limit=10), models.QueryRequest(query=_queries(2)[1], limit=10)])
            for i in _ids(r)],
        "groups": lambda: [h.id for g in bob.query_points_groups("hr", query=q, group_by="source", limit=5,
                                                                  group_size=10).groups for h in g.hits],
    }


@pytest.mark.parametrize("first", ["scroll", "retrieve", "recommend", "batch", "groups"])
def test_no_read_path_returns_a_point_past_what_another_path_spent(tmp_path, first):
    kit = make_kit(tmp_path)
    _, bob = payroll(kit)
    paths = _read_paths(bob)
    spent = set(paths[first]())
    assert len(spent) == CAP
    for name, read in paths.items():
        got = set(read())
        assert got <= spent, (first, name, got)
    listed = bob.guard.shared["budget_store"].entries_by_prefix("src|", window_s=86400.0, now=time.time())
    assert len(listed[KEY]) == CAP


# --- a read that fails after the charge ------------------------------------------------------------


def test_a_read_that_fails_after_its_charge_keeps_the_charge_and_audits_it(tmp_path):
    # The first run is charged (2 admitted, 3 withheld); its re-run, sent without the withheld
    # points, fails in Qdrant (the collection is gone). Nothing is returned and the 2 stay charged:
    # the guard cannot tell what a failed read revealed (its timing did), so it never refunds.
    kit = make_kit(tmp_path)
    owner, bob = payroll(kit)

    class CollectionGoneAfterFirstAdmission(MemoryBudgetStore):
        calls = 0

        def admit_points(self, *args, **kwargs):
            out = super().admit_points(*args, **kwargs)
            type(self).calls += 1
            if type(self).calls == 1:
                qdrant_client.QdrantClient.delete_collection(owner, "hr")
            return out

    store = owner.guard.shared["budget_store"] = CollectionGoneAfterFirstAdmission()
    with pytest.raises(ValueError, match="Collection hr not found"):
        bob.query_points("hr", query=_queries(1)[0], limit=5)
    listed = store.entries_by_prefix("src|", window_s=86400.0, now=time.time())
    assert len(listed[KEY]) == CAP
    entry = audit_records(kit)[-1]
    assert entry["verdict"] == "QDRANT_ERROR" and entry["details"]["method"] == "query_points"
    assert entry["details"]["budget"] == {"payroll": {"withheld": 3, "seen": CAP, "cap": CAP}}


# --- time -------------------------------------------------------------------------------------------


def _stores(tmp_path, request):
    out = [MemoryBudgetStore(), SqliteBudgetStore(str(tmp_path / "b.db"))]
    if request.node.get_closest_marker("redis") is not None:
        out.append(RedisBudgetStore(request.getfixturevalue("redis_url"), prefix=f"qg:r57:{time.monotonic_ns()}:"))
    return out


@pytest.mark.parametrize("with_redis", [False, pytest.param(True, marks=pytest.mark.redis)])
def test_a_window_is_closed_at_both_ends_in_every_store(tmp_path, request, with_redis):
    # An id admitted at t still counts at t + window exactly (so no interval of length window holds
    # more than cap distinct ids), and is forgotten just after; the three stores agree.
    for store in _stores(tmp_path, request)[2 if with_redis else 0:]:
        budget_at = [1000.0]
        budget = ExtractionBudget(store, window_s=60.0, clock=lambda: budget_at[0])
        charge = lambda pid: budget.admit(principal="p", collection="c", source="s", point_ids=[pid],  # noqa: E731
                                          source_size=1, max_source_coverage=1.0).admitted
        assert charge(1) == [1]
        budget_at[0] = 1060.0
        assert charge(2) == [], type(store).__name__
        budget_at[0] = 1060.001
        assert charge(2) == [2], type(store).__name__


def test_a_restarted_guard_on_the_same_sqlite_file_goes_on_counting(tmp_path):
    # A new guard (new keys, a new audit log, a new Qdrant store holding the same points) after the
    # first was closed: the file still holds what bob was given.
    spec = f"sqlite:///{tmp_path / 'budget.db'}"
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = _bob(make_kit(tmp_path / "first"), spec)
    spent = set(_ids(first.scroll("hr", limit=10)))
    first.close()
    second = _bob(make_kit(tmp_path / "second"), spec)
    assert len(spent) == CAP
    assert set(_ids(second.query_points("hr", query=_queries(1)[0], limit=10))) <= spent
    assert set(_ids(second.scroll("hr", limit=10, offset=3))) <= spent


def test_guards_with_skewed_clocks_sharing_a_store_never_pass_the_cap(tmp_path):
    # One guard's clock an hour behind, another's a window ahead: each admission reads the key's
    # newest time, so neither clock forgets what the other charged.
    kit = make_kit(tmp_path)
    spec = f"sqlite:///{tmp_path / 'shared.db'}"
    behind, ahead = _bob(kit, spec), _bob(kit, spec, ttl_s=3 * 86400)
    behind.guard.clock = lambda: time.time() - 3600
    ahead.guard.clock = lambda: time.time() + 86400
    got = set(_ids(ahead.scroll("hr", limit=1)))
    for client in (behind, ahead, behind):
        got |= set(_ids(client.query_points("hr", query=_queries(3)[2], limit=10)))
        got |= set(_ids(client.scroll("hr", limit=10, offset=4)))
    assert len(got) == CAP


# --- a store that is corrupt, swapped or of the wrong type ------------------------------------------


def _refused_fail_closed(bob) -> None:
    with pytest.raises(GuardRefusal) as ei:
        bob.scroll("hr", limit=10)
    assert ei.value.verdict == "FAIL_CLOSED" and "budget_store" in ei.value.directive


def test_a_corrupt_sqlite_store_fails_closed_before_and_after_it_was_opened(tmp_path):
    kit = make_kit(tmp_path)
    db = tmp_path / "budget.db"
    db.write_bytes(b"not a database, " * 512)
    db.chmod(0o600)
    _refused_fail_closed(_bob(kit, f"sqlite:///{db}"))
    db.unlink()
    bob = _bob(kit, f"sqlite:///{db}")
    assert len(_ids(bob.scroll("hr", limit=10))) == CAP
    # Overwritten in place (a disk fault, a stray `cp`) and opened again by the next thread (one
    # connection per thread): nothing comes back. The old connection closes first, which moves
    # the -wal's pages into the file, so what is overwritten is the whole store.
    store = bob.guard.shared["budget_store"]
    for conn in store._all:
        conn.close()
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    db.write_bytes(b"\xff" * db.stat().st_size)
    refused: list[BaseException] = []
    reader = threading.Thread(target=lambda: refused.append(pytest.raises(GuardRefusal, bob.scroll, "hr", limit=10).value))
    reader.start()
    reader.join()
    assert [e.verdict for e in refused] == ["FAIL_CLOSED"] and "budget_store" in refused[0].directive


def test_a_store_path_that_is_a_symlink_into_a_shared_directory_is_refused(tmp_path):
    # SQLite opens where the link points and puts its -wal there: the checks follow it.
    kit = make_kit(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (tmp_path / "safe").mkdir()
    (tmp_path / "safe" / "budget.db").symlink_to(shared / "budget.db")
    with pytest.raises(ConfigError, match=r"budget_store: .*shared.*every user may (create files in|write)"):
        _bob(kit, f"sqlite:///{tmp_path / 'safe' / 'budget.db'}")


@pytest.mark.redis
def test_a_redis_budget_key_of_another_type_fails_closed(tmp_path, redis_url):
    import redis

    kit = make_kit(tmp_path)
    bob = _bob(kit, redis_url)
    assert len(_ids(bob.scroll("hr", limit=1))) == 1
    r = redis.Redis.from_url(redis_url)
    prefix = bob.guard.shared["budget_store"].prefix
    r.delete(prefix + KEY)
    r.set(prefix + KEY, "reset by someone")
    _refused_fail_closed(bob)
    r.delete(prefix + KEY)


# --- racing a nearly spent budget ---------------------------------------------------------------------


def _spec(kind: str, tmp_path: Path, request) -> str | None:
    if kind == "memory":
        return None
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    url = request.getfixturevalue("redis_url")
    RedisBudgetStore(url).reset()  # keys an earlier test of this session left under the default prefix
    return url


@pytest.mark.parametrize("kind", ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def test_racing_readers_of_sync_and_async_clients_never_pass_a_nearly_spent_budget(tmp_path, request, kind):
    # One of bob's two points is spent; then 6 threads (over two guarded clients, each on its own
    # Qdrant store holding the same points) and 3 tasks of an async client race reads that each
    # rank other points first. The store admits one more point in all, whoever wins. (The memory
    # store is one process's: there the racers share one client.)
    kit = make_kit(tmp_path)
    spec = _spec(kind, tmp_path, request)
    one = _bob(kit, spec)
    clients = [one, _bob(kit, spec)] if spec else [one, one]
    aclient = _bob(kit, spec, asynchronous=True) if spec else None
    got = set(_ids(one.scroll("hr", limit=1)))
    queries = _queries(9)
    barrier = threading.Barrier(7 if aclient else 6)
    returned: list[list] = []

    def sync_reader(i: int) -> None:
        barrier.wait()
        read = (lambda: clients[i % 2].query_points("hr", query=queries[i], limit=10)) if i % 3 else \
            (lambda: clients[i % 2].scroll("hr", limit=10, offset=i))
        returned.append(_ids(read()))

    async def async_readers() -> None:
        barrier.wait()
        results = await asyncio.gather(*(aclient.query_points("hr", query=q, limit=10) for q in queries[6:8]),
                                       aclient.scroll("hr", limit=10, offset=7))
        returned.extend(_ids(r) for r in results)

    threads = [threading.Thread(target=sync_reader, args=(i,)) for i in range(6)]
    if aclient is not None:
        threads.append(threading.Thread(target=asyncio.run, args=(async_readers(),)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(returned) == len(threads) + (2 if aclient else 0)
    for ids in returned:
        got |= set(ids)
    assert len(got) == CAP, returned
    store = one.guard.shared["budget_store"]
    assert len(store.entries_by_prefix("src|", window_s=86400.0, now=time.time())[KEY]) == CAP


_CHILD = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from guardkit import make_kit
from test_review57 import _bob, _ids, _queries
kit = make_kit(Path(sys.argv[1]))
bob = _bob(kit, sys.argv[2])
go = Path(sys.argv[3])
while not go.exists():
    time.sleep(0.01)
queries = _queries(12)
got = []
for i in range(int(sys.argv[4]), 12, 2):
    got += _ids(bob.query_points("hr", query=queries[i], limit=10))
    got += _ids(bob.scroll("hr", limit=10, offset=i % 9))
print(json.dumps(got))
"""


def test_two_processes_racing_a_nearly_spent_budget_release_one_point_between_them(tmp_path):
    # Two guard processes (each its own keys, audit log and Qdrant store; bob's credential names
    # the same agent and boundary, so the same budget) start reading the moment a file appears.
    # (Redis decides each admission in one server-side script, as for the threads above.)
    kit = make_kit(tmp_path)
    spec = f"sqlite:///{tmp_path / 'shared.db'}"
    parent = _bob(kit, spec)
    got = set(_ids(parent.scroll("hr", limit=1)))
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), os.environ.get("PYTHONPATH", "")])}
    procs = []
    for n in range(2):
        home = tmp_path / f"child{n}"
        home.mkdir()
        procs.append(subprocess.Popen(
            [sys.executable, "-c", _CHILD.format(tests=str(Path(__file__).parent)), str(home), spec, str(go), str(n)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    time.sleep(0.5)  # both are importing; whichever is ready first waits for the file
    go.touch()
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        got |= set(json.loads(out))
    assert len(got) == CAP
    store = parent.guard.shared["budget_store"]
    assert len(store.entries_by_prefix("src|", window_s=86400.0, now=time.time())[KEY]) == CAP


# --- the async client's lock and a loop stopped for good --------------------------------------------


def test_a_loop_stopped_with_the_client_and_still_referenced_loses_it_and_sends_nothing_more(tmp_path, monkeypatch):
    # A call's loop stops (run_until_complete returned) while the call holds the local-mode client
    # inside a step, and the loop object lives on. Before: every other call of the client, on any
    # loop, waited for it for good. Now the client is passed on once waiters have seen that loop
    # stopped for _STOPPED_S; if the loop runs again, the call does not send its write.
    from qdrant_guard import async_lock
    from qdrant_guard.async_lock import LockRevoked

    monkeypatch.setattr(async_lock, "_STOPPED_S", 1.0)
    kit = make_kit(tmp_path)
    rng = np.random.default_rng(3)
    client = async_pii_client(kit, rng)
    audit = client.guard.audit
    original = audit.append
    in_step, step_go = threading.Event(), threading.Event()

    def slow_append(record):  # the paused call's step (its allow entry) waits here, the client held
        if record.get("op") == "upsert" and not step_go.is_set():
            in_step.set()
            step_go.wait(30)
        return original(record)

    monkeypatch.setattr(audit, "append", slow_append)
    loop = asyncio.new_event_loop()
    paused = loop.create_task(client.upsert("pii", [models.PointStruct(id=2, vector=unit(rng))]))
    stopper = threading.Thread(target=loop.run_until_complete, args=(asyncio.to_thread(in_step.wait, 30),))
    stopper.start()
    stopper.join(30)
    step_go.set()  # the step ends; its result waits on the stopped loop, which this test keeps

    async def other():
        await client.upsert("pii", [models.PointStruct(id=3, vector=unit(rng))])
        records, _ = await client.scroll("pii", limit=10)
        return sorted(r.id for r in records)

    assert asyncio.run(asyncio.wait_for(other(), 10)) == [1, 3]
    with pytest.raises(LockRevoked, match="upsert was not sent: this call's event loop stopped for more than 1 s"):
        loop.run_until_complete(paused)
    loop.close()
    assert client._alock.owner is None

    async def ids():
        return sorted(r.id for r in (await client.scroll("pii", limit=10))[0])

    assert asyncio.run(ids()) == [1, 3]
    failed = [e for e in audit_records(kit) if e["verdict"] == "QDRANT_ERROR"]
    assert [(e["op"], e["details"]["error"]) for e in failed] == [("upsert", "LockRevoked")]


def test_a_loop_that_runs_now_and_then_keeps_the_client_past_the_stop_limit(monkeypatch):
    # A program that runs its loop in short bursts (run_until_complete of a brief task, now and
    # then) while a call of that loop holds the client through a long wait: each time a waiter
    # looks the loop is stopped, yet it ran in between, so the holder keeps the client.
    from qdrant_guard import async_lock
    from qdrant_guard.async_lock import TaskLock

    monkeypatch.setattr(async_lock, "_STOPPED_S", 3.0)  # 30 bursts' worth: a loaded CI host may starve one
    lock = TaskLock()
    loop = asyncio.new_event_loop()
    go_on = threading.Event()
    holding = threading.Event()

    async def holds_through_a_long_wait():
        hold = await lock.acquire()
        holding.set()
        await asyncio.to_thread(go_on.wait, 30)
        lock.release(hold)

    holder = loop.create_task(holds_through_a_long_wait())
    bursts = threading.Event()

    def run_in_bursts() -> None:
        while not bursts.is_set():
            loop.run_until_complete(asyncio.sleep(0.01))
            time.sleep(0.1)

    burster = threading.Thread(target=run_in_bursts, daemon=True)
    burster.start()
    assert holding.wait(10)  # else the waiter could take the lock before the holder's first burst
    got: list[bool] = []

    async def waits() -> None:
        hold = await lock.acquire()
        got.append(holder.done())
        lock.release(hold)

    waiter = threading.Thread(target=asyncio.run, args=(waits(),), daemon=True)
    waiter.start()
    try:
        waiter.join(7.5)  # two and a half times the limit, fifteen rechecks
        assert got == [] and waiter.is_alive()
    finally:
        go_on.set()
        waiter.join(30)
        bursts.set()
        burster.join(30)
    assert got == [True]
    loop.run_until_complete(holder)
    loop.close()


def test_a_read_refused_when_its_vector_budget_fails_keeps_its_source_charge_and_its_entry_says_so(tmp_path):
    # PROPRIETARY, both budgets: the source budget admits 2 of 10 (8 withheld), then the vector
    # budget's store fails. Refused FAIL_CLOSED, nothing returned, and the 2 stay charged. Before,
    # the FAIL_CLOSED entry held the error only: an auditor could not tell that bob had been charged.
    from qdrant_guard.budget import BudgetStoreError

    kit = make_kit(tmp_path)
    pol = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
           "diversity": {**PAYROLL_DIVERSITY, "max_vectors": 5}}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    owner.upsert("hr", _points())
    bob = owner.with_principal(kit.principal("bob", "support"))

    class VectorKeysDown(MemoryBudgetStore):
        def admit_many_counted(self, *args, **kwargs):  # admit_vectors' way in; sources use admit_points
            raise BudgetStoreError("vector keys unavailable")

    store = owner.guard.shared["budget_store"] = VectorKeysDown()
    with pytest.raises(GuardRefusal) as ei:
        bob.scroll("hr", limit=10, with_vectors=True)
    assert ei.value.verdict == "FAIL_CLOSED" and "the vector budget could not be applied" in ei.value.directive
    assert len(store.entries_by_prefix("src|", window_s=86400.0, now=time.time())[KEY]) == CAP
    entry = audit_records(kit)[-1]
    assert entry["verdict"] == "FAIL_CLOSED"
    assert entry["details"]["budget"] == {"payroll": {"withheld": 8, "seen": CAP, "cap": CAP}}


def test_an_async_read_cancelled_while_it_is_charged_keeps_the_charge(tmp_path):
    # The cancellation arrives while the store admits (in the step's worker thread): the step ends,
    # the read is audited as done, its result is dropped and the caller sees CancelledError. The
    # charge stays, as for any read that fails after it (docs/diversity-budget.md).
    kit = make_kit(tmp_path)
    aclient = _bob(kit, asynchronous=True)
    admitting, go_on = threading.Event(), threading.Event()

    class SlowStore(MemoryBudgetStore):
        def admit_points(self, *args, **kwargs):
            admitting.set()
            go_on.wait(30)
            return super().admit_points(*args, **kwargs)

    store = aclient.guard.shared["budget_store"] = SlowStore()

    async def main():
        task = asyncio.create_task(aclient.scroll("hr", limit=10))
        await asyncio.to_thread(admitting.wait, 30)
        task.cancel()
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert len(store.entries_by_prefix("src|", window_s=86400.0, now=time.time())[KEY]) == CAP
    entry = audit_records(kit)[-1]
    assert entry["op"] == "scroll" and entry["details"]["budget"]["payroll"]["seen"] == CAP
