"""8 threads and 100 asyncio tasks on one guarded client: nothing lost, duplicated or shared."""
from __future__ import annotations

import asyncio
import json
import threading

import numpy as np
from guardkit import make_kit, models
from qdrant_guard import AsyncQdrantClient, QdrantClient
from qdrant_guard.audit import verify_audit_file

DIM = 32
THREADS = 8
PER_THREAD = 12


def _cfg(kit):
    return kit.config({"pii": {
        "class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "noise_on_write": True,
        "intent": {"enabled": False},
        "diversity": {"max_source_coverage": 0.25, "restricted_sources": ["memo"], "max_source_fraction": 1.0},
    }})


def _clean(i):
    v = np.random.default_rng(1000 + i).normal(size=DIM)
    return (v / np.linalg.norm(v)).astype(np.float32)


def _check_audit(path, expected_entries):
    rep = verify_audit_file(path)
    assert rep.ok, rep
    seqs = [json.loads(line)["seq"] for line in path.read_text().splitlines()]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gap, no duplicate
    assert len(seqs) == expected_entries


def _check_noise(owner_records):
    noises = []
    for r in owner_records:
        noises.append(np.asarray(r.vector, dtype=np.float64) - _clean(r.id).astype(np.float64))
    stack = np.stack(noises)
    d = np.linalg.norm(stack[:, None, :] - stack[None, :, :], axis=-1)
    np.fill_diagonal(d, np.inf)
    assert d.min() > 1e-3  # no two released vectors share their noise


def test_eight_threads_mixed_reads_and_writes(tmp_path):
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=_cfg(kit), principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    memo = [models.PointStruct(id=10_000 + i, vector=_clean(10_000 + i).tolist(), payload={"source": "memo"})
            for i in range(20)]
    owner.upsert("pii", memo)
    views = [owner.with_principal(kit.principal(f"agent-{t}", "support")) for t in range(THREADS)]
    errors: list[BaseException] = []
    received: dict[int, set] = {t: set() for t in range(THREADS)}
    barrier = threading.Barrier(THREADS)

    def work(t):
        try:
            barrier.wait()
            c = views[t]
            for j in range(PER_THREAD):
                pid = t * 100 + j
                c.upsert("pii", [models.PointStruct(id=pid, vector=_clean(pid).tolist(), payload={"source": f"s{t}"})])
                res = c.query_points("pii", query=_clean(10_000 + (j % 20)).tolist(), limit=5,
                                     query_filter=models.Filter(must=[models.FieldCondition(
                                         key="source", match=models.MatchValue(value="memo"))]))
                received[t].update(p.id for p in res.points)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for t in range(THREADS):
        assert len(received[t]) == 5  # budget exact: floor(20 * 0.25) distinct memo points each
    owner.close()
    # 1 create + 1 memo upsert + per thread: PER_THREAD upserts and PER_THREAD queries
    _check_audit(tmp_path / "audit.jsonl", 2 + THREADS * PER_THREAD * 2)


def test_hundred_asyncio_tasks(tmp_path):
    kit = make_kit(tmp_path)

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_cfg(kit), principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        bob = owner.with_principal(kit.principal("bob", "support"))

        async def task(i):
            await bob.upsert("pii", [models.PointStruct(id=i, vector=_clean(i).tolist(), payload={"source": f"s{i % 7}"})])
            res = await bob.query_points("pii", query=_clean(i).tolist(), limit=3)
            return len(res.points)

        counts = await asyncio.gather(*(task(i) for i in range(100)))
        recs = await owner.retrieve("pii", list(range(100)), with_vectors=True)
        await owner.close()
        return counts, recs

    counts, recs = asyncio.run(main())
    assert all(c >= 1 for c in counts)
    assert len(recs) == 100
    _check_noise(recs)
    _check_audit(tmp_path / "audit.jsonl", 1 + 100 * 2 + 1)  # create, 100 x (upsert, query), retrieve


def test_thread_written_points_have_distinct_noise(tmp_path):
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=_cfg(kit), principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    bob = owner.with_principal(kit.principal("bob", "support"))

    def work(t):
        for j in range(10):
            pid = t * 100 + j
            bob.upsert("pii", [models.PointStruct(id=pid, vector=_clean(pid).tolist())])

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    recs = owner.retrieve("pii", [t * 100 + j for t in range(THREADS) for j in range(10)], with_vectors=True)
    assert len(recs) == THREADS * 10
    _check_noise(recs)
