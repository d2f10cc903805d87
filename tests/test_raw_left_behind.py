"""Raw vectors left behind when an operator turns ``raw_in_boundary`` off.

Under ``raw_in_boundary`` the owner boundary stores raw vectors, without receipts. Turned off, the
policy no longer lets anyone store or read raw vectors, but the ones already stored stay. Under
``noise_queries`` a query that names a point (its stored vector becomes the query vector), MMR
re-ranking and ``search_matrix_*`` compare stored vectors with one another, where the query noise
never reaches: before the fix, a reader got exact raw-to-raw cosines from them again as soon as
the policy said "every stored vector is noised". The guard now asks Qdrant (one exact ``count``
per collection and client while none is found) whether any point holds a vector without a
receipt, and refuses those forms while some do. Real local Qdrant with ``path=`` reopened under
the changed policy, real Ed25519 keys; no mocks.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from guardkit import DIM, audit_records, make_kit, record_sent
from qdrant_client import AsyncQdrantClient as RawAsyncClient
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient
from qdrant_guard.receipts import RECEIPT_KEY

_ON = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True, "noise_queries": True,
       "diversity": {"enabled": False}, "intent": {"enabled": False}}
_OFF = {**_ON, "raw_in_boundary": False}


def _e(k):
    v = np.zeros(DIM)
    v[k] = 1.0
    return v


# The MMR test's layout (tests/test_mmr_order.py): s, a, and b near a (0.906), c far from it (-0.003).
_RAW = np.array([_e(0), 0.5 * _e(0) + np.sqrt(0.75) * _e(1),
                 0.6 * _e(0) + 0.7 * _e(1) + np.sqrt(0.64 - 0.49) * _e(2),
                 0.6 * _e(0) - 0.35 * _e(1) + np.sqrt(0.64 - 0.35 ** 2) * _e(3)])
_MMR = models.NearestQuery(nearest=_e(0).tolist(), mmr=models.Mmr(diversity=1.0, candidates_limit=4))


def _store(tmp_path, kit, collections, *, named=()):
    """alice@hr writes the raw layout under raw_in_boundary into a local-mode store at tmp_path/db."""
    owner = QdrantClient(path=str(tmp_path / "db"), guard=kit.config({n: _ON for n in collections}),
                         principal=kit.principal("alice", "hr"))
    for name in collections:
        cfg = ({n: models.VectorParams(size=DIM, distance=models.Distance.COSINE) for n in named} if named
               else models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        owner.create_collection(name, vectors_config=cfg)
        owner.upsert(name, [models.PointStruct(id=i, vector={n: v.tolist() for n in named} if named else v.tolist(),
                                               payload={"source": "s"}) for i, v in enumerate(_RAW)])
    owner.close()


def _reopen(tmp_path, kit, collections):
    """The same store under the policy with raw_in_boundary off: alice's client and bob's view."""
    owner = QdrantClient(path=str(tmp_path / "db"), guard=kit.config(collections),
                         principal=kit.principal("alice", "hr"))
    return owner, owner.with_principal(kit.principal("bob", "support"))


def _receipt_counts(calls):
    """The guard's own counts of points without a receipt among the recorded ``count`` calls."""
    return [kw for m, kw in calls if m == "count" and RECEIPT_KEY in repr(kw.get("count_filter"))]


def test_raw_vectors_left_by_raw_in_boundary_are_not_compared_by_point_id(tmp_path):
    kit = make_kit(tmp_path)
    _store(tmp_path, kit, ["emp"])
    owner, bob = _reopen(tmp_path, kit, {"emp": _OFF})
    # bob sees no vector of the raw points ...
    assert all(p.vector is None for p in bob.retrieve("emp", [0, 1, 2, 3], with_vectors=True))
    # ... and before the fix querying by id 1 gave him sim(a, s), sim(a, b), sim(a, c) exactly
    # (0.5, 0.9062, -0.0031): the raw vector of point 1 searched against the raw others. That is
    # what Qdrant answers to it (asked around the guard):
    got = {p.id: p.score for p in RawClient.query_points(bob, "emp", query=1, limit=3).points}
    assert got == pytest.approx({0: 0.5, 2: 0.9062, 3: -0.0031}, abs=1e-4)
    with pytest.raises(GuardRefusal) as err:
        bob.query_points("emp", query=1, limit=3)
    assert err.value.verdict == "QUERY_REJECTED"
    msg = str(err.value)
    assert "query is a point id" in msg and "collection 'emp'" in msg and "noise_queries" in msg
    assert "still holds 4 point(s) with a vector that has no receipt" in msg and "raw_in_boundary" in msg
    assert "qdrant-guard receipt verify --collection emp --policy POLICY" in err.value.directive
    refused = [r for r in audit_records(kit) if r["verdict"] == "QUERY_REJECTED"]
    assert len(refused) == 1 and refused[0]["collection"] == "emp"
    assert refused[0]["details"] == {"where": "query", "form": "point id", "unreceipted_points": 4}
    # A vector of his own is still searched with, noised.
    assert len(bob.query_points("emp", query=_RAW[1].tolist(), limit=3).points) == 3
    owner.close()


def test_mmr_and_search_matrix_over_raw_vectors_left_behind_are_refused(tmp_path):
    kit = make_kit(tmp_path)
    _store(tmp_path, kit, ["emp"])
    owner, bob = _reopen(tmp_path, kit, {"emp": _OFF})
    # Before the fix bob got the raw-raw MMR order [0, 1, 3, 2] (c is far from a, so it follows a).
    with pytest.raises(GuardRefusal, match="QUERY_REJECTED: query.mmr asks Qdrant to re-rank") as err:
        bob.query_points("emp", query=_MMR, limit=4)
    assert "still holds 4 point(s)" in str(err.value) and "re-written through the guard" in err.value.directive
    for method in ("search_matrix_pairs", "search_matrix_offsets"):
        with pytest.raises(GuardRefusal, match=f"QUERY_REJECTED: {method} compares the stored vectors") as err:
            getattr(bob, method)("emp", sample=4, limit=3)
        assert "still holds 4 point(s)" in str(err.value) and f"--collection emp" in err.value.directive
    details = [r["details"] for r in audit_records(kit) if r["verdict"] == "QUERY_REJECTED"]
    assert [d.get("unreceipted_points") for d in details] == [4, 4, 4]
    owner.close()


def test_once_the_owner_rewrites_the_points_the_queries_run_again_and_are_counted_once(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    _store(tmp_path, kit, ["emp"])
    owner, bob = _reopen(tmp_path, kit, {"emp": _OFF})
    calls = record_sent(monkeypatch, ("count",), with_kwargs=True)
    for _ in range(2):  # a refusal is not kept: each attempt asks again
        with pytest.raises(GuardRefusal, match="still holds 4 point"):
            bob.query_points("emp", query=1, limit=3)
    assert len(_receipt_counts(calls)) == 2
    # The owner re-writes three of them through the guard (noised and receipted now), then the last.
    owner.upsert("emp", [models.PointStruct(id=i, vector=_RAW[i].tolist(), payload={"source": "s"}) for i in range(3)])
    with pytest.raises(GuardRefusal, match="still holds 1 point"):
        bob.query_points("emp", query=1, limit=3)
    owner.upsert("emp", [models.PointStruct(id=3, vector=_RAW[3].tolist(), payload={"source": "s"})])
    del calls[:]
    assert len(bob.query_points("emp", query=1, limit=3).points) == 3
    assert len(bob.query_points("emp", query=_MMR, limit=4).points) == 4
    assert bob.search_matrix_pairs("emp", sample=4, limit=2).pairs
    bob.query_batch_points("emp", [models.QueryRequest(query=0, limit=2), models.QueryRequest(query=_MMR, limit=2)])
    assert len(owner.query_points("emp", query=2, limit=3).points) == 3  # another view of the same client
    # Five queries and two principals, one count: the answer "none left" is kept.
    assert len(_receipt_counts(calls)) == 1
    owner.close()


def test_deleting_the_raw_points_also_clears_the_refusal(tmp_path):
    kit = make_kit(tmp_path)
    _store(tmp_path, kit, ["emp"])
    owner, bob = _reopen(tmp_path, kit, {"emp": _OFF})
    with pytest.raises(GuardRefusal, match="still holds 4 point"):
        bob.query_points("emp", query=_MMR, limit=4)
    owner.delete("emp", models.PointIdsList(points=[1, 2, 3]))
    with pytest.raises(GuardRefusal, match="still holds 1 point"):
        bob.query_points("emp", query=_MMR, limit=4)
    owner.delete("emp", models.PointIdsList(points=[0]))
    owner.upsert("emp", [models.PointStruct(id=i, vector=_RAW[i - 4].tolist()) for i in (4, 5)])  # noised now
    assert sorted(p.id for p in bob.query_points("emp", query=_MMR, limit=4).points) == [4, 5]
    owner.close()


def test_a_raw_vector_beside_a_receipted_one_still_counts_and_a_missing_vector_does_not(tmp_path):
    kit = make_kit(tmp_path)
    _store(tmp_path, kit, ["emp"], named=("a", "b"))
    owner, bob = _reopen(tmp_path, kit, {"emp": _OFF})
    # Vector a of every point re-written (noised, receipted): each point now has a receipt
    # container, but b is still raw in all four.
    owner.update_vectors("emp", [models.PointVectors(id=i, vector={"a": _RAW[i].tolist()}) for i in range(4)])
    with pytest.raises(GuardRefusal, match="still holds 4 point"):
        bob.query_points("emp", query=1, using="a", limit=3)
    # b re-written on points 0 and 1, deleted from 2 and 3 (which then have no b to be raw).
    owner.update_vectors("emp", [models.PointVectors(id=i, vector={"b": _RAW[i].tolist()}) for i in range(2)])
    owner.delete_vectors("emp", vectors=["b"], points=[2, 3])
    assert len(bob.query_points("emp", query=1, using="b", limit=3).points) == 1
    assert len(bob.query_points("emp", query=1, using="a", limit=3).points) == 3
    owner.close()


def raw_store(tmp_path: Path) -> tuple[QdrantClient, QdrantClient]:
    """An ``emp`` collection written raw (noise off) by alice (hr) on disk, and bob (support)
    reading it through the same client."""
    kit = make_kit(tmp_path)
    owner = QdrantClient(path=str(tmp_path / "db"), guard=kit.config({"emp": _OFF}),
                         principal=kit.principal("alice", "hr"))
    owner.create_collection("emp", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    owner.upsert("emp", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(_RAW)])
    return owner, owner.with_principal(kit.principal("bob", "support"))


def test_a_store_noised_from_the_start_costs_one_count(tmp_path, monkeypatch):
    owner, bob = raw_store(tmp_path)
    calls = record_sent(monkeypatch, ("count",), with_kwargs=True)
    bob.query_points("emp", query=_RAW[0].tolist(), limit=2)  # a vector: nothing stored is compared, no count
    assert _receipt_counts(calls) == []
    for _ in range(3):
        assert len(bob.query_points("emp", query=1, limit=3).points) == 3
    assert len(bob.query_points("emp", query=_MMR, limit=4).points) == 4
    assert len(_receipt_counts(calls)) == 1
    # Re-creating the collection through this client forgets the answer: the name may be another
    # collection now (another process with the old policy could fill it raw).
    owner.delete_collection("emp")
    owner.create_collection("emp", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    bob.query_points("emp", query=_MMR, limit=4)
    assert len(_receipt_counts(calls)) == 2
    owner.close()


def test_raw_in_boundary_public_collections_and_the_owner_under_raw_in_boundary_do_not_count(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    _store(tmp_path, kit, ["emp"])
    owner, bob = _reopen(tmp_path, kit, {"emp": _ON, "pub": {"class": "PUBLIC"}})
    owner.create_collection("pub", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    owner.upsert("pub", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(_RAW)])
    calls = record_sent(monkeypatch, ("count",), with_kwargs=True)
    assert {p.id: p.score for p in bob.query_points("pub", query=1, limit=3).points} == pytest.approx(
        {j: float(_RAW[1] @ _RAW[j]) for j in (0, 2, 3)}, abs=1e-5)  # PUBLIC: raw and readable by all
    assert len(owner.query_points("emp", query=1, limit=3).points) == 3  # the owner under raw_in_boundary
    with pytest.raises(GuardRefusal, match="QUERY_REJECTED: query is a point id") as err:
        bob.query_points("emp", query=1, limit=3)  # refused by the policy alone, as before
    assert "raw_in_boundary" in str(err.value) and "no receipt" not in str(err.value)
    assert _receipt_counts(calls) == []
    owner.close()


def test_a_failed_count_is_audited_and_nothing_is_sent(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    _store(tmp_path, kit, ["emp"])
    owner, bob = _reopen(tmp_path, kit, {"emp": _OFF})

    def broken(self, *a, **kw):
        raise ConnectionError("qdrant unreachable")

    monkeypatch.setattr(RawClient, "count", broken)
    sent = record_sent(monkeypatch, ("query_points",))
    with pytest.raises(ConnectionError):
        bob.query_points("emp", query=1, limit=3)
    assert sent == []
    last = audit_records(kit)[-1]
    assert last["verdict"] == "QDRANT_ERROR" and last["details"] == {"method": "count", "error": "ConnectionError"}
    owner.close()


def test_the_async_client_refuses_the_same_and_counts_once(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    _store(tmp_path, kit, ["emp"])
    counted = []
    original = RawAsyncClient.count

    async def counting(self, *a, **kw):
        if RECEIPT_KEY in repr(kw.get("count_filter")):
            counted.append(kw)
        return await original(self, *a, **kw)

    monkeypatch.setattr(RawAsyncClient, "count", counting)

    async def run():
        owner = AsyncQdrantClient(path=str(tmp_path / "db"), guard=kit.config({"emp": _OFF}),
                                  principal=kit.principal("alice", "hr"))
        bob = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(GuardRefusal, match="QUERY_REJECTED: .*point id.*still holds 4 point"):
            await bob.query_points("emp", query=models.RecommendQuery(recommend=models.RecommendInput(positive=[1])))
        with pytest.raises(GuardRefusal, match="QUERY_REJECTED: .*still holds 4 point"):
            await bob.search_matrix_offsets("emp", sample=4, limit=2)
        await owner.upsert("emp", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(_RAW)])
        for _ in range(2):
            assert len((await bob.query_points("emp", query=_MMR, limit=4)).points) == 4
        await owner.close()

    asyncio.run(run())
    assert len(counted) == 3
