"""diversity.charge_scores: the PROPRIETARY distillation budget counts scores as well as vectors.

A score is one linear measurement of a stored vector, so 16 basis-vector queries rebuild every
16-d vector they rank (tests/test_review40.py pins that max_vectors alone does not see it). With
the knob on the budget counts coordinates: a vector 16 units, a score 1, cap max_vectors * 16.
Real local-mode Qdrant, real policies and credentials; a real redis-server for the Redis store.
"""
from __future__ import annotations

import asyncio
import random
import uuid

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import AsyncQdrantClient
from qdrant_guard.budget import MemoryBudgetStore, RedisBudgetStore, SqliteBudgetStore
from qdrant_guard.errors import GuardRefusal
from qdrant_guard.policy import config_from_dict
from tests.guardkit import DIM, QdrantClient, audit_records, create, make_kit, models, snapshot, unit


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _policy(charge: bool | None, max_vectors: int = 2) -> dict:
    div = {"max_vectors": max_vectors, "max_source_fraction": 1.0, "min_unique_sources": 1}
    if charge is not None:
        div["charge_scores"] = charge
    return {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
            "diversity": div}


def _collection(kit, charge, *, name="hr", max_vectors=2, named=(), n=6, raw=False, **extra):
    """alice@hr's client on a PROPRIETARY collection of ``n`` unit vectors, and bob@support's view
    (``raw``: stored around the guard, un-noised, so two collections hold the same vectors)."""
    owner = QdrantClient(":memory:", guard=kit.config({name: _policy(charge, max_vectors)}, **extra),
                         principal=kit.principal("alice", "hr"))
    rng = np.random.default_rng(1)
    if named:
        owner.create_collection(name, vectors_config={v: models.VectorParams(size=size, distance=models.Distance.COSINE)
                                                      for v, size in named})
        pts = [models.PointStruct(id=i, vector={v: unit(rng, size) for v, size in named}, payload={"source": f"s{i}"})
               for i in range(n)]
    else:
        create(owner, name)
        pts = [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i}"}) for i in range(n)]
    (RawClient.upsert if raw else type(owner).upsert)(owner, name, pts)
    return owner, owner.with_principal(kit.principal("bob", "support"))


def _basis_attack(client, name="hr", **kw):
    """The test_review40 attack: one query per basis vector; point id -> {coordinate: score}."""
    got: dict = {}
    for d in range(DIM):
        for p in client.query_points(name, query=np.eye(DIM)[d].tolist(), limit=6, **kw).points:
            got.setdefault(p.id, {})[d] = p.score
    return got


def test_the_basis_attack_stops_at_the_cap(kit):
    # Old code: every point answered all 16 queries (96 scores), so all 6 vectors were rebuilt while
    # max_vectors = 2 released 2.
    owner, bob = _collection(kit, True)
    stored = {pid: np.asarray(v) / np.linalg.norm(v) for pid, _, v in snapshot(owner, "hr")}
    got = _basis_attack(bob)
    assert sum(len(c) for c in got.values()) == 2 * DIM  # exactly the cap: 2 vectors' worth of scores
    assert all(len(c) < DIM for c in got.values())  # no point has every coordinate
    for pid, coords in got.items():  # what it did get is exact: the charge withholds, it does not distort
        assert all(abs(stored[pid][d] - s) < 1e-6 for d, s in coords.items())
    # The budget is spent: no vector, and no new score, is released any more.
    assert all(p.vector is None for p in bob.scroll("hr", with_vectors=True)[0])
    assert bob.query_points("hr", query=unit(np.random.default_rng(9)), limit=6).points == []
    # The same request again measures nothing new: what it returned before comes back, free.
    again = bob.query_points("hr", query=np.eye(DIM)[0].tolist(), limit=6).points
    assert {p.id for p in again} == {pid for pid, c in got.items() if 0 in c}
    entries = [r for r in audit_records(kit) if r.get("op") == "query_points" and r.get("details", {}).get("score_budget")]
    assert entries and entries[-1]["verdict"] == "BUDGET_EXCEEDED"
    assert entries[-1]["details"]["score_budget"]["cap"] == 2 * DIM


def test_knob_off_keeps_the_vector_only_budget(kit):
    # charge_scores = false is today's budget: scores uncounted, vectors capped at 2 (the default,
    # the key left out, is pinned by tests/test_review40.py).
    owner, bob = _collection(kit, False)
    got = _basis_attack(bob)
    assert all(len(c) == DIM for c in got.values()) and len(got) == 6
    assert sum(p.vector is not None for p in bob.scroll("hr", with_vectors=True)[0]) == 2


def test_charge_scores_needs_max_vectors(kit):
    pol = _policy(True)
    del pol["diversity"]["max_vectors"]
    with pytest.raises(ValueError, match="charge_scores = true charges scores .* would charge nothing"):
        kit.config({"hr": pol})


def test_exact_accounting_over_many_queries(kit):
    # Random queries and limits: the units charged are exactly the distinct (request, point) pairs
    # returned, never more than the cap, and once a query comes back short the cap is reached.
    owner, bob = _collection(kit, True, max_vectors=3, n=12)
    rng = np.random.default_rng(5)
    queries = [unit(rng) for _ in range(20)]
    returned: set = set()
    short_seen = False
    for step in range(60):
        q = random.Random(step).randrange(len(queries))
        limit = 1 + step % 7
        pts = bob.query_points("hr", query=queries[q], limit=limit).points
        new = {(q, p.id) for p in pts} - returned
        returned |= {(q, p.id) for p in pts}
        store = bob._guard.shared["budget_store"]
        (entries, total), = [v for k, v in store._units.keys.items() if k.startswith("vsu|bob")]
        assert total[0] == len(returned) == len(entries) <= 3 * DIM
        if len(pts) < limit:
            short_seen = True
            assert total[0] == 3 * DIM or new == set()
    assert short_seen and len(returned) == 3 * DIM


def test_owner_boundary_is_not_charged(kit):
    owner, bob = _collection(kit, True)
    assert all(len(c) == DIM for c in _basis_attack(owner).values())  # the owner ranks everything
    # and bob's budget is untouched by it: he still gets his full 2 vectors' worth.
    assert sum(len(c) for c in _basis_attack(bob).values()) == 2 * DIM
    matrix = owner.search_matrix_pairs("hr", sample=6, limit=2)
    assert matrix.pairs


def test_vectors_and_scores_share_the_cap(kit):
    # A returned vector costs a whole vector's 16 units: after one, 16 scores are left.
    owner, bob = _collection(kit, True)
    first = bob.retrieve("hr", [0], with_vectors=True)
    assert first[0].vector is not None
    assert sum(len(c) for c in _basis_attack(bob).values()) == DIM
    # A scored point with its vector costs 1 + 16: nothing is left for either.
    assert bob.query_points("hr", query=unit(np.random.default_rng(3)), with_vectors=True).points == []


def test_named_vectors_are_charged_in_their_own_size(kit):
    # Sizes 16 and 8: a unit is 1/16 of a vector, a score of the 8-d vector costs 2 units.
    owner, bob = _collection(kit, True, named=(("a", 16), ("b", 8)))
    total = 0
    for d in range(8):
        total += len(bob.query_points("hr", query=np.eye(8)[d].tolist(), using="b", limit=6).points)
    assert total == 2 * 8  # 2 vectors' worth of 8-d scores: the 16 scores that rebuild two of them
    assert bob.query_points("hr", query=np.eye(16)[0].tolist(), using="a", limit=6).points == []


def test_batch_groups_and_prefetch_are_charged(kit):
    owner, bob = _collection(kit, True, max_vectors=4)  # cap 4 * 16 = 64 units
    reqs = [models.QueryRequest(query=np.eye(DIM)[d].tolist(), limit=2) for d in range(DIM)]
    assert sum(len(r.points) for r in bob.query_batch_points("hr", reqs)) == 2 * DIM  # 16 requests of 2: 32 left
    groups = bob.query_points_groups("hr", query=unit(np.random.default_rng(4)), group_by="source", limit=6,
                                     group_size=1).groups
    assert sum(len(g.hits) for g in groups) == 6  # 26 left
    fused = 0
    for d in range(DIM):
        fused += len(bob.query_points("hr", prefetch=[models.Prefetch(query=np.eye(DIM)[d].tolist(), limit=6),
                                                      models.Prefetch(query=np.eye(DIM)[(d + 3) % DIM].tolist(), limit=6)],
                                      query=models.FusionQuery(fusion=models.Fusion.RRF), limit=6).points)
    assert fused == 26  # one unit per fused point: its one score, of the one vector both prefetches search


def test_search_matrix_is_refused_outside_the_owner_boundary(kit, tmp_path):
    owner, bob = _collection(kit, True)
    with pytest.raises(GuardRefusal, match="charge_scores") as ei:
        bob.search_matrix_offsets("hr", sample=6, limit=2)
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    (tmp_path / "off").mkdir()
    _, bob_off = _collection(make_kit(tmp_path / "off"), False)
    assert bob_off.search_matrix_pairs("hr", sample=6, limit=2).pairs  # knob off: as before


def _store_trace(store, seed):
    rng = random.Random(seed)
    out = []
    now = 1000.0
    for _ in range(300):
        now += rng.choice([0.0, 0.5, 3.0])
        groups = []
        for g in range(rng.randrange(1, 6)):
            items = [(f"u:{rng.randrange(40)}", rng.choice([1, 1, 2, 16])) for _ in range(rng.randrange(1, 4))]
            groups.append((items, rng.choice([-1] + list(range(g)))))
        out.append(store.admit_units("vsu|p|c|16", groups, cap=48, window_s=20.0, now=now))
    return out


def test_redis_sqlite_and_memory_stores_agree(redis_url, tmp_path):
    memory = _store_trace(MemoryBudgetStore(), 7)
    assert any(not all(flags) for flags, _, _ in memory) and any(b < a for (_, b, _), (_, _, a) in zip(memory[1:], memory))  # some expired
    assert all(after <= 48 for _, _, after in memory)
    redis_store = RedisBudgetStore(redis_url, prefix=f"qg:test:{uuid.uuid4().hex}:")
    assert _store_trace(redis_store, 7) == memory
    assert _store_trace(SqliteBudgetStore(str(tmp_path / "b.db")), 7) == memory


def test_redis_guard_agrees_with_the_memory_guard(kit, redis_url):
    name = f"hr{uuid.uuid4().hex[:8]}"
    results = []
    for spec in ("memory", redis_url):
        where = kit.tmp / spec.replace("/", "_").replace(":", "_")
        where.mkdir()
        sub = make_kit(where)  # a fresh audit log and keys
        _, bob = _collection(sub, True, name=name, raw=True, budget_store=spec)
        results.append([sorted(p.id for p in bob.query_points(name, query=np.eye(DIM)[d].tolist(), limit=6 - d % 3).points)
                        for d in range(DIM)])
    assert results[0] == results[1]
    assert sum(map(len, results[0])) == 2 * DIM


def test_async_client_is_charged(kit):
    async def main():
        owner = AsyncQdrantClient(":memory:", guard=kit.config({"hr": _policy(True)}), principal=kit.principal("alice", "hr"))
        await owner.create_collection("hr", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        rng = np.random.default_rng(1)
        await owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i}"}) for i in range(6)])
        bob = owner.with_principal(kit.principal("bob", "support"))
        n = 0
        for d in range(DIM):
            n += len((await bob.query_points("hr", query=np.eye(DIM)[d].tolist(), limit=6)).points)
        with pytest.raises(GuardRefusal):
            await bob.search_matrix_pairs("hr", sample=6, limit=2)
        await owner.close()
        return n

    assert asyncio.run(main()) == 2 * DIM


def test_policy_round_trip_keeps_the_knob():
    cfg = config_from_dict({"collections": {"m": {"class": "PROPRIETARY", "owner": "ml",
                                                  "diversity": {"max_vectors": 5, "charge_scores": True}}}}, source="t")
    assert cfg.collections["m"].diversity.charge_scores is True


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
def test_concurrent_admissions_never_pass_the_cap(kind, tmp_path, request):
    # 8 threads charging distinct ids of weights 1-16 into one key: the units admitted add up to
    # exactly what the store holds, never more than the cap, and the demand (8 * 40 ids) fills it.
    import threading

    if kind == "memory":
        store = MemoryBudgetStore()
    elif kind == "sqlite":
        store = SqliteBudgetStore(str(tmp_path / "c.db"))
    else:
        store = RedisBudgetStore(request.getfixturevalue("redis_url"), prefix=f"qg:test:{uuid.uuid4().hex}:")
    admitted: list[int] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        rng = random.Random(t)
        for i in range(40):
            w = rng.choice([1, 2, 16])
            (ok,), _, _ = store.admit_units("vsu|p|c|16", [([(f"u:{t}-{i}", w)], -1)], cap=160, window_s=60.0, now=100.0)
            if ok:
                with lock:
                    admitted.append(w)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    _, _, total = store.admit_units("vsu|p|c|16", [], cap=160, window_s=60.0, now=100.0)
    assert sum(admitted) == total and 160 - 16 < total <= 160


def test_monitor_mode_logs_what_it_would_withhold(kit):
    owner = QdrantClient(":memory:", guard=kit.config({"hr": {**_policy(True), "diversity": {
        **_policy(True)["diversity"], "mode": "monitor"}}}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(1)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i}"}) for i in range(6)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert sum(len(c) for c in _basis_attack(bob).values()) == 6 * DIM  # nothing withheld
    logged = [r["details"] for r in audit_records(kit) if r.get("details", {}).get("score_budget_monitor")]
    assert logged and logged[-1]["score_budget"]["withheld"] == 6 and logged[-1]["score_budget"]["cap"] == 2 * DIM


def test_a_store_without_admit_units_fails_closed(kit):
    from tests.protocol_store import ProtocolOnlyStore

    owner, bob = _collection(kit, True)
    owner._guard.shared["budget_store"] = ProtocolOnlyStore()
    with pytest.raises(GuardRefusal, match="admit_units") as ei:
        bob.query_points("hr", query=unit(np.random.default_rng(2)), limit=3)
    assert ei.value.verdict == "FAIL_CLOSED"
