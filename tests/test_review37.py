"""The thirty-seventh review (h-rev37): the write path against real local-mode Qdrant. A batch the
guard accepts must not fail half applied, and a receipt the guard accepts must verify against the
vector Qdrant stores."""
from __future__ import annotations

import json

import numpy as np
import pytest

from guardkit import guard_signer, make_kit, models, snapshot, unit
from qdrant_guard import GuardRefusal, QdrantClient, UnsupportedWriteError
from qdrant_guard.noise import privatize
from qdrant_guard.receipts import (RECEIPT_KEY, ReceiptItem, commitment_bytes, issue_receipts_batch,
                                   receipts_for_payload, stored_form)
from qdrant_guard.receipts import verify as verify_stored

M = models


def _clients(tmp_path, *, named=("a", "b"), distance=models.Distance.COSINE, noise_on_write=True):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"],
                              "noise_on_write": noise_on_write,
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    if named:
        owner.create_collection("pii", vectors_config={n: M.VectorParams(size=16, distance=distance) for n in named})
    else:
        owner.create_collection("pii", vectors_config=M.VectorParams(size=16, distance=distance))
    return kit, owner, owner.with_principal(kit.principal("bob", "support"))


def _bad_receipts(owner):
    return [(r.point_id, r.vector_name, r.reason)
            for r in verify_stored(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys) if r.reason != "ok"]


@pytest.fixture()
def three(tmp_path):
    _, owner, bob = _clients(tmp_path)
    rng = np.random.default_rng(37)
    bob.upsert("pii", [M.PointStruct(id=i, vector={"a": unit(rng), "b": unit(rng)}, payload={"k": i})
                       for i in (1, 2, 3)])
    return owner, bob, rng


def _update_vector(rng, pid=3):
    return M.UpdateVectorsOperation(update_vectors=M.UpdateVectors(
        points=[M.PointVectors(id=pid, vector={"a": unit(rng)})]))


# -- a vector deletion by id after a delete by filter ---------------------------------------------


@pytest.mark.parametrize("ids", [[1, 2], [2, 1]], ids=["deleted-first", "deleted-last"])
def test_a_vector_deletion_by_id_after_a_delete_by_filter_in_a_batch_is_refused(three, ids):
    # Qdrant deleted point 1 by the filter, then deleted vector "a" of point 2 and failed on point
    # 1 (KeyError) before the receipt strip after it ran: point 2 kept the receipt of a vector it
    # no longer had, and `receipt verify` failed on it (vector_mismatch).
    owner, bob, _ = three
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match="delete by filter") as ei:
        bob.batch_update_points("pii", [
            M.DeleteOperation(delete=M.FilterSelector(filter=M.Filter(
                must=[M.FieldCondition(key="k", match=M.MatchValue(value=1))]))),
            M.DeleteVectorsOperation(delete_vectors=M.DeleteVectors(points=ids, vector=["a"])),
        ])
    assert "separate calls" in str(ei.value)
    assert snapshot(owner, "pii") == before
    assert _bad_receipts(owner) == []


def test_a_vector_deletion_by_id_before_a_delete_by_filter_still_runs(three):
    owner, bob, _ = three
    bob.batch_update_points("pii", [
        M.DeleteVectorsOperation(delete_vectors=M.DeleteVectors(points=[2], vector=["a"])),
        M.DeleteOperation(delete=M.FilterSelector(filter=M.Filter(
            must=[M.FieldCondition(key="k", match=M.MatchValue(value=1))]))),
    ])
    assert [p[0] for p in snapshot(owner, "pii")] == [2, 3]
    assert _bad_receipts(owner) == []


# -- operations Qdrant refuses only once it reaches them -------------------------------------------


@pytest.mark.parametrize("empty", [
    M.PointsList(points=[]),
    M.PointsBatch(batch=M.Batch(ids=[], vectors={"a": []})),
], ids=["points-list", "points-batch"])
def test_an_empty_upsert_in_a_batch_is_refused_before_anything_is_sent(three, empty):
    # Qdrant fails an upsert of no point ("Empty update request") when it reaches it, after
    # applying the operations before it: the vector update below was stored, the call failed.
    owner, bob, rng = three
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match="names no point"):
        bob.batch_update_points("pii", [_update_vector(rng), M.UpsertOperation(upsert=empty)])
    assert snapshot(owner, "pii") == before


def test_a_vector_deletion_of_an_unknown_vector_name_in_a_batch_is_refused_before_anything_is_sent(three):
    # Qdrant checks a DeleteVectors' names when it reaches it: the vector update before it was
    # stored, and the call failed ("Not existing vector name").
    owner, bob, rng = three
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match="'zz'") as ei:
        bob.batch_update_points("pii", [
            _update_vector(rng),
            M.DeleteVectorsOperation(delete_vectors=M.DeleteVectors(points=[2], vector=["a", "zz"])),
        ])
    assert "['a', 'b']" in str(ei.value)
    assert snapshot(owner, "pii") == before


# -- a writer's receipt over a Cosine vector that is not unit length --------------------------------

_GRID = 2.0 ** 20


def _grid(v):
    return np.frombuffer(commitment_bytes(v), dtype="<i4")


def _fragile_cosine_vector(rng):
    """A vector on the commitment grid, not unit length, that numpy's float32 normalisation (the
    guard's emulation before) snaps back to the same grid points, and a float64 one does not."""
    for _ in range(20_000):
        v = stored_form(rng.normal(size=16), distance="Cosine").astype(np.float64)
        v[rng.integers(16)] += rng.integers(-3, 4) / _GRID
        f32 = v.astype(np.float32)
        if commitment_bytes(f32 / np.linalg.norm(f32)) != commitment_bytes(v):
            continue
        if commitment_bytes((v / np.linalg.norm(v)).astype(np.float32)) != commitment_bytes(v):
            return v
    raise AssertionError("no such vector found")


def test_a_receipt_over_a_cosine_vector_qdrant_may_renormalise_onto_other_grid_points_is_refused(tmp_path):
    # Local mode re-normalises the vector of a point it replaces in float64 (a new point's in
    # float32), the server in its own float32 summation order: a vector whose normalisation lands
    # near half a grid step was accepted, then stored where its receipt did not verify.
    kit, owner, bob = _clients(tmp_path, named=())
    rng = np.random.default_rng(3)
    bob.upsert("pii", [M.PointStruct(id=1, vector=unit(rng), payload={"k": 1})])
    final = _fragile_cosine_vector(rng)
    _, params = privatize(np.asarray([unit(rng)], dtype=np.float32), mechanism="gaussian", epsilon=1.0,
                          delta=1e-6, radius=0.01, clip_norm=1.0)
    rec = issue_receipts_batch(guard_signer(kit), [ReceiptItem(params=params, vector=final, collection="pii",
                                                               point_id=1, vector_name="")])[0]
    before = snapshot(owner, "pii")
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [M.PointStruct(id=1, vector=final.tolist(),
                                         payload={"k": 2, RECEIPT_KEY: receipts_for_payload({"": rec})})])
    assert ei.value.verdict == "INVALID_RECEIPT"
    assert snapshot(owner, "pii") == before
    assert _bad_receipts(owner) == []


def test_a_writers_receipt_over_the_cosine_stored_form_is_still_accepted(tmp_path):
    kit, owner, bob = _clients(tmp_path, named=(), noise_on_write=False)
    rng = np.random.default_rng(4)
    for pid in range(1, 41):
        noised, params = privatize(np.asarray([unit(rng)], dtype=np.float32), mechanism="gaussian", epsilon=1.0,
                                   delta=1e-6, radius=0.01, clip_norm=1.0)
        final = stored_form(noised[0], distance="Cosine")
        rec = issue_receipts_batch(guard_signer(kit), [ReceiptItem(params=params, vector=final, collection="pii",
                                                                   point_id=pid, vector_name="")])[0]
        point = M.PointStruct(id=pid, vector=final.tolist(), payload={RECEIPT_KEY: receipts_for_payload({"": rec})})
        bob.upsert("pii", [point])
        bob.upsert("pii", [point])  # replaced: local mode re-normalises it in float64
    assert _bad_receipts(owner) == []
    assert len(snapshot(owner, "pii")) == 40


# -- a payload rewrite point by point after a delete by filter --------------------------------------


@pytest.mark.parametrize("rewrite, keys", [
    (M.OverwritePayloadOperation(overwrite_payload=M.SetPayload(payload={"z": 1}, points=[2, 1])), {"z", RECEIPT_KEY}),
    (M.ClearPayloadOperation(clear_payload=M.PointIdsList(points=[2, 1])), {RECEIPT_KEY}),
], ids=["overwrite", "clear"])
def test_a_point_by_point_payload_rewrite_after_a_delete_by_filter_skips_the_deleted_point(tmp_path, rewrite, keys):
    # A key holding '"' has no JSON path, so the rewrite is sent as one overwrite a point (with its
    # receipts). Each named its point by id: Qdrant rewrote point 2, then failed on point 1, which
    # the delete by filter before it had removed.
    _, owner, bob = _clients(tmp_path)
    rng = np.random.default_rng(6)
    bob.upsert("pii", [M.PointStruct(id=i, vector={"a": unit(rng), "b": unit(rng)}, payload={"k": i, 'q"x': 1})
                       for i in (1, 2, 3)])
    bob.batch_update_points("pii", [
        M.DeleteOperation(delete=M.FilterSelector(filter=M.Filter(
            must=[M.FieldCondition(key="k", match=M.MatchValue(value=1))]))),
        rewrite,
    ])
    stored = {pid: payload for pid, payload, _ in snapshot(owner, "pii")}
    assert sorted(stored) == [2, 3]
    assert set(stored[2]) == keys
    assert _bad_receipts(owner) == []


# -- a vector update racing another client's delete -------------------------------------------------


@pytest.mark.parametrize("batch", [False, True], ids=["update_vectors", "batch"])
def test_a_point_deleted_between_the_look_up_and_a_vector_update_leaves_the_others_receipted(three, monkeypatch,
                                                                                              batch):
    # Another client deletes point 1 right after the guard's look-up (run from inside the store's
    # retrieve, as tests/test_concurrent_rewrite.py does). The update was one UpdateVectors of
    # every point, then the receipts: Qdrant stored point 2's new vector, failed on point 1, and
    # never wrote point 2's receipt (vector_mismatch).
    owner, bob, rng = three
    store = owner._client
    real = store.retrieve
    raced = []

    def read_then_delete(*a, **kw):
        out = real(*a, **kw)
        if not raced:
            raced.append(True)
            store.delete("pii", points_selector=[1])
        return out

    monkeypatch.setattr(store, "retrieve", read_then_delete)
    updates = [M.PointVectors(id=2, vector={"a": unit(rng)}), M.PointVectors(id=1, vector={"a": unit(rng)}),
               M.PointVectors(id=3, vector={"b": unit(rng)})]
    with pytest.raises(KeyError):
        if batch:
            bob.batch_update_points("pii", [M.UpdateVectorsOperation(update_vectors=M.UpdateVectors(points=updates))])
        else:
            bob.update_vectors("pii", updates)
    assert raced
    assert _bad_receipts(owner) == []
    assert [p[0] for p in snapshot(owner, "pii")] == [2, 3]


def test_a_vector_update_after_an_upsert_without_receipts_in_the_same_batch_makes_a_container(three):
    # Point 1 held a container before the batch; the upsert of it without vectors replaces its
    # payload with none, so the noised update after it must make the container again.
    owner, bob, rng = three
    bob.batch_update_points("pii", [
        M.UpsertOperation(upsert=M.PointsList(points=[M.PointStruct(id=1, vector={}, payload={"k": 1})])),
        _update_vector(rng, pid=1),
    ])
    assert _bad_receipts(owner) == []
    assert set(snapshot(owner, "pii")[0][1][RECEIPT_KEY]["vectors"]) == {"a"}


def test_delete_vectors_naming_an_unknown_vector_is_refused_and_audited(three, tmp_path):
    # Local mode checks the names before deleting; a server may delete "a" first (local mode's
    # delete_vectors says so), and the receipt strip sent after it would never run. qdrant-client's
    # ValueError came after the guard had audited the call as allowed.
    owner, bob, _ = three
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match="'zz'"):
        bob.delete_vectors("pii", vectors=["a", "zz"], points=[2])
    assert snapshot(owner, "pii") == before
    last = json.loads((tmp_path / "audit.jsonl").read_text(encoding="utf-8").split("\n")[-2])["record"]
    assert (last["op"], last["verdict"]) == ("delete_vectors", "UNSUPPORTED_WRITE")


# -- a vector named "" beside other named vectors ---------------------------------------------------


def test_a_vector_named_empty_in_a_collection_of_named_vectors_is_written_as_named(tmp_path):
    # The guard sent {"": v} alone as the bare list v, the unnamed vector, which Qdrant refuses on
    # a collection of named vectors (after an allow entry); plain qdrant-client stores it.
    _, owner, bob = _clients(tmp_path, named=("", "b"))
    rng = np.random.default_rng(9)
    bob.upsert("pii", [M.PointStruct(id=1, vector={"": unit(rng)})])
    bob.batch_update_points("pii", [M.UpsertOperation(upsert=M.PointsList(
        points=[M.PointStruct(id=2, vector={"": unit(rng)}, payload={"k": 2})]))])
    assert [pid for pid, _, _ in snapshot(owner, "pii")] == [1, 2]
    assert sorted((r.point_id, r.vector_name, r.reason) for r in verify_stored(
        owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys)) == [(1, "", "ok"), (2, "", "ok")]
