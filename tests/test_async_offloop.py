"""The async client waits for the budget store and the audit log off the event loop.

Each store is made to block for real: a SQLite budget database held by another connection's
``BEGIN IMMEDIATE``, a "Redis" on 127.0.0.1 that accepts connections and never answers, an audit
log file held under another open file's ``flock``. While a guarded query waits on it, a ticker
task on the same loop must keep ticking; the query's result (or refusal) and its audit entries
must equal the sync client's doing the same thing. Real qdrant-client local mode throughout.
"""
from __future__ import annotations

import asyncio
import fcntl
import json
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guardkit import PAYROLL_DIVERSITY, create, hr_policy, make_kit, models, unit
from qdrant_guard import AsyncQdrantClient, QdrantClient
from qdrant_guard.audit import verify_audit_file
from qdrant_guard.budget_stores import SqliteBudgetStore

HOLD_S = 1.0  # how long each store blocks
TICK_S = 0.005
# The longest a tick may be late while a query waits: far below HOLD_S, far above scheduling noise.
MAX_GAP_S = 0.4

# Differs between two runs of the same calls: the digest of a write's receipts, which hold the
# time they were signed.
_RECEIPT_DIGEST = "reconstruction_resistance_receipt"


def _config(kit: Any, tag: str, **extra: Any) -> Any:
    return kit.config({"hr": hr_policy(PAYROLL_DIVERSITY)}, audit_log=str(kit.tmp / f"audit-{tag}.jsonl"), **extra)


def _records(kit: Any, tag: str) -> list[dict[str, Any]]:
    lines = (kit.tmp / f"audit-{tag}.jsonl").read_text().splitlines()
    assert [json.loads(line)["record"]["op"] for line in lines] == ["create_collection", "upsert", "query_points"]
    out = []
    for line in lines:
        rec = json.loads(line)["record"]
        if _RECEIPT_DIGEST in rec.get("manifest", {}):
            rec["manifest"][_RECEIPT_DIGEST] = "..."
        out.append(rec)
    return out


def _points() -> list[models.PointStruct]:
    rng = np.random.default_rng(0)
    return [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"}) for i in range(10)]


QUERY = unit(np.random.default_rng(7))


def _outcome(call: Any) -> Any:
    """What a query gave its caller: the points (id, score, payload), or the error's type and text."""
    try:
        res = call()
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))
    return _shown(res)


def _shown(res: Any) -> list[tuple[Any, float, Any]]:
    # A receipt's signature differs from run to run; the point, its score and its payload do not.
    return [(p.id, round(p.score, 6), {k: v for k, v in p.payload.items() if k != "_qdrant_guard_receipt"})
            for p in res.points]


def sync_run(kit: Any, tag: str, **extra: Any) -> Any:
    owner = QdrantClient(":memory:", guard=_config(kit, tag, **extra), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    owner.upsert("hr", _points())
    bob = owner.with_principal(kit.principal("bob", "support"))
    out = _outcome(lambda: bob.query_points("hr", query=QUERY, limit=5))
    owner.close()
    return out


async def _ticking(waiting: Any) -> tuple[Any, float, float, int]:
    """Await ``waiting`` while a ticker runs on the loop: (its outcome, how long it took, the
    longest gap between ticks, ticks)."""
    stamps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            stamps.append(time.monotonic())
            await asyncio.sleep(TICK_S)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(TICK_S * 4)
    start = time.monotonic()
    try:
        out = await waiting
    finally:
        took = time.monotonic() - start
        stop.set()
        await tick
    during = [t for t in stamps if t >= start - TICK_S * 2] + [time.monotonic()]
    gap = max(b - a for a, b in zip(during, during[1:]))
    return out, took, gap, len(during)


async def _async_query(bob: Any) -> Any:
    try:
        res = await bob.query_points("hr", query=QUERY, limit=5)
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))
    return _shown(res)


def async_run(kit: Any, tag: str, block: Any, **extra: Any) -> tuple[Any, float, float, int]:
    """The sync run's calls on the async client, the query made while ``block()`` holds a store
    (``block`` returns what releases it, or None if it releases itself)."""

    async def main() -> tuple[Any, float, float, int]:
        owner = AsyncQdrantClient(":memory:", guard=_config(kit, tag, **extra), principal=kit.principal("alice", "hr"))
        await owner.create_collection("hr", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        await owner.upsert("hr", _points())
        bob = owner.with_principal(kit.principal("bob", "support"))
        release = block()
        try:
            got = await _ticking(_async_query(bob))
        finally:
            if release is not None:
                release()
        await owner.close()
        return got

    return asyncio.run(main())


def _release_later(fn: Any) -> threading.Timer:
    timer = threading.Timer(HOLD_S, fn)
    timer.daemon = True
    timer.start()
    return timer


# -- SQLite: another writer holds BEGIN IMMEDIATE ----------------------------------------------
def test_sqlite_budget_store_locked_by_another_writer_does_not_stall_the_loop(tmp_path):
    kit = make_kit(tmp_path)
    expected = sync_run(kit, "sync", budget_store=f"sqlite:///{tmp_path / 'sync.db'}")
    db = tmp_path / "async.db"
    SqliteBudgetStore(str(db))  # the tables exist before another writer locks the file

    def block() -> None:
        holder = sqlite3.connect(str(db), isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        _release_later(lambda: (holder.execute("COMMIT"), holder.close()))

    got, took, gap, ticks = async_run(kit, "async", block, budget_store=f"sqlite:///{db}")
    assert took >= HOLD_S * 0.8, "the query did not wait for the locked budget store"
    assert gap < MAX_GAP_S, f"the event loop stalled {gap:.2f} s while the budget store was locked"
    assert ticks > 10
    assert isinstance(got, list) and got == expected and len(got) == 2  # floor(10 * 0.2) points of payroll
    assert _records(kit, "async") == _records(kit, "sync")
    assert verify_audit_file(tmp_path / "audit-async.jsonl").ok


# -- Redis: a server that accepts and never answers --------------------------------------------
class SilentServer:
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread, which then ends
        except OSError:
            pass
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture()
def silent():
    server = SilentServer()
    yield server
    server.close()


def test_redis_budget_store_that_never_answers_does_not_stall_the_loop(tmp_path, silent):
    pytest.importorskip("redis")
    kit = make_kit(tmp_path)
    spec = f"redis://127.0.0.1:{silent.port}/0?socket_timeout={HOLD_S}"
    expected = sync_run(kit, "sync", budget_store=spec)
    assert expected[:2] == ("raised", "GuardRefusal") and "budget store" in expected[2]  # fails closed
    got, took, gap, ticks = async_run(kit, "async", lambda: None, budget_store=spec)
    assert took >= HOLD_S * 0.8, "the query did not wait for the silent store"
    assert gap < MAX_GAP_S, f"the event loop stalled {gap:.2f} s while Redis did not answer"
    assert got == expected
    assert _records(kit, "async") == _records(kit, "sync")
    assert silent.held, "nothing connected to the silent server"


# -- the audit log's file held under another open file's flock ---------------------------------
def test_audit_append_waiting_for_the_file_lock_does_not_stall_the_loop(tmp_path):
    kit = make_kit(tmp_path)
    expected = sync_run(kit, "sync")
    path = tmp_path / "audit-async.jsonl"

    def block() -> None:
        fd = open(path, "ab")  # another open file description: its flock excludes the log's
        fcntl.flock(fd.fileno(), fcntl.LOCK_EX)
        _release_later(lambda: (fcntl.flock(fd.fileno(), fcntl.LOCK_UN), fd.close()))

    got, took, gap, ticks = async_run(kit, "async", block)
    assert took >= HOLD_S * 0.8, "the query's audit append did not wait for the file lock"
    assert gap < MAX_GAP_S, f"the event loop stalled {gap:.2f} s while the audit file was locked"
    assert isinstance(got, list) and got == expected
    assert _records(kit, "async") == _records(kit, "sync")
    assert verify_audit_file(path).ok


# -- many clients' steps in worker threads at once, one audit file -----------------------------
def test_concurrent_clients_sharing_an_audit_file_keep_one_whole_chain(tmp_path):
    """Each local-mode client holds its own lock, so steps of different clients (audit appends
    included) run in worker threads at the same time; the log's own lock keeps the chain whole."""
    kit = make_kit(tmp_path)
    cfg = _config(kit, "shared", budget_store=f"sqlite:///{tmp_path / 'b.db'}")
    clients, queries = 4, 15

    async def main() -> list[Any]:
        owners = [AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr")) for _ in range(clients)]
        for o in owners:
            await o.create_collection("hr", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
            await o.upsert("hr", _points())
        bobs = [o.with_principal(kit.principal("bob", "support")) for o in owners]
        got = await asyncio.gather(*(_async_query(bobs[i % clients]) for i in range(clients * queries)))
        for o in owners:
            await o.close()
        return got

    got = asyncio.run(main())
    records = [json.loads(line)["record"] for line in (tmp_path / "audit-shared.jsonl").read_text().splitlines()]
    assert len(records) == clients * 2 + clients * queries  # create + upsert per client, one per query
    assert verify_audit_file(tmp_path / "audit-shared.jsonl").ok
    # One budget (the SQLite file) for bob across the four stores: point ids 0-9 of payroll each time.
    returned = {p[0] for r in got if isinstance(r, list) for p in r}
    assert len(returned) <= 2


# -- a timeout while a step waits on the store --------------------------------------------------
def test_a_timeout_while_the_budget_store_is_locked_waits_for_the_step_and_leaves_its_entry(tmp_path):
    """A step cannot stop midway (it may be writing the audit entry), so the cancellation waits
    for it: the loop runs meanwhile, the read's decision is audited as the sync client audits it,
    and the caller gets the timeout (the result is dropped)."""
    kit = make_kit(tmp_path)
    sync_run(kit, "sync", budget_store=f"sqlite:///{tmp_path / 'sync.db'}")
    db = tmp_path / "async.db"
    SqliteBudgetStore(str(db))

    def block() -> None:
        holder = sqlite3.connect(str(db), isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        _release_later(lambda: (holder.execute("COMMIT"), holder.close()))

    async def main() -> tuple[Any, float, float, int]:
        owner = AsyncQdrantClient(":memory:", guard=_config(kit, "async", budget_store=f"sqlite:///{db}"),
                                  principal=kit.principal("alice", "hr"))
        await owner.create_collection("hr", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        await owner.upsert("hr", _points())
        bob = owner.with_principal(kit.principal("bob", "support"))
        block()

        async def bounded() -> str:
            try:
                await asyncio.wait_for(bob.query_points("hr", query=QUERY, limit=5), timeout=0.1)
            except asyncio.TimeoutError:
                return "timed out"
            return "done"

        got = await _ticking(bounded())
        await owner.close()
        return got

    got, took, gap, _ = asyncio.run(main())
    assert got == "timed out"
    assert took >= HOLD_S * 0.8  # the step was waited for, not abandoned
    assert gap < MAX_GAP_S, f"the event loop stalled {gap:.2f} s"
    assert _records(kit, "async") == _records(kit, "sync")
    assert verify_audit_file(tmp_path / "audit-async.jsonl").ok


# -- local mode: one operation at a time, as in the sync client ---------------------------------
def test_local_mode_operations_do_not_interleave_while_one_waits_on_the_store(tmp_path):
    """A query waiting for the locked budget store keeps the local store's lock, as the sync
    client keeps its local-mode lock: a write made meanwhile by another task on the same client
    goes after it (the loop itself stays free)."""
    kit = make_kit(tmp_path)
    db = tmp_path / "async.db"
    SqliteBudgetStore(str(db))

    def block() -> None:
        holder = sqlite3.connect(str(db), isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        _release_later(lambda: (holder.execute("COMMIT"), holder.close()))

    async def main() -> list[str]:
        owner = AsyncQdrantClient(":memory:", guard=_config(kit, "async", budget_store=f"sqlite:///{db}"),
                                  principal=kit.principal("alice", "hr"))
        await owner.create_collection("hr", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        await owner.upsert("hr", _points())
        bob = owner.with_principal(kit.principal("bob", "support"))
        block()
        finished: list[str] = []

        async def read() -> None:
            await bob.query_points("hr", query=QUERY, limit=5)
            finished.append("query_points")

        async def write() -> None:
            await asyncio.sleep(0.1)  # the read is waiting on the store by now
            await owner.upsert("hr", [models.PointStruct(id=99, vector=QUERY, payload={"source": "other"})])
            finished.append("upsert")

        await asyncio.gather(read(), write())
        await owner.close()
        return finished

    assert asyncio.run(main()) == ["query_points", "upsert"]
    ops = [json.loads(line)["record"]["op"] for line in (tmp_path / "audit-async.jsonl").read_text().splitlines()]
    assert ops == ["create_collection", "upsert", "query_points", "upsert"]
