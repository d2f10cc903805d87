"""Tests from mutation pass 20 (h-mut20 branch, 2026-12-06): open hand mutants of mutation pass
19 in qdrant_guard/payloadops.py and writes.py. docs/security-testing.md ("Mutation pass 20")
lists which are killed, and by which test.
"""
from __future__ import annotations

import numpy as np
import pytest
from guardkit import create, make_kit, models, snapshot, unit

from qdrant_guard import QdrantClient, UnsupportedWriteError
from qdrant_guard.receipts import RECEIPT_KEY
from qdrant_guard.receipts import verify as verify_stored


def _owner(tmp_path):
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"c": {"class": "PII", "owner": "hr"}}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "c")
    return owner


def test_an_overwrite_of_several_points_holding_an_unquotable_key_rewrites_every_point(tmp_path):
    """Kills the ``has_id`` filter of ``_preserving_overwrite``'s per-point overwrites (the path
    for a key holding ``"``) cut to the first point (P4): the other points kept their old payload,
    the unquotable key included, and the call still reported them overwritten."""
    owner = _owner(tmp_path)
    rng = np.random.default_rng(40)
    owner.upsert("c", [models.PointStruct(id=i, vector=unit(rng), payload={'a"b': i, "k": i}) for i in (1, 2, 3)])
    owner.overwrite_payload("c", payload={"n": 7}, points=[1, 2, 3])
    stored = snapshot(owner, "c")
    assert [p for p, _, _ in stored] == [1, 2, 3]
    for _, payload, _ in stored:
        assert {k: v for k, v in payload.items() if k != RECEIPT_KEY} == {"n": 7}
        assert RECEIPT_KEY in payload
    bad = [r for r in verify_stored(owner, "c", trusted_keys=owner.guard.trusted_receipt_keys) if r.reason != "ok"]
    assert bad == []
    owner.close()


@pytest.mark.parametrize("call", [
    lambda c: c.set_payload("c", payload={"x": 1}, points=[]),
    lambda c: c.delete_payload("c", keys=["a"], points=[]),
], ids=["set_payload", "delete_payload"])
def test_a_payload_change_naming_no_point_outside_a_batch_fails_as_in_qdrant_client(tmp_path, call):
    """Kills ``_existing``'s empty-id-list refusal made to apply outside batches too (P5, the
    ``fresh is not None`` test dropped): a standalone call naming no point goes to Qdrant, which
    fails it as it fails plain qdrant-client's ("Empty update request"), not as a guard refusal."""
    owner = _owner(tmp_path)
    owner.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"a": 1})])
    before = snapshot(owner, "c")
    with pytest.raises(ValueError, match="Empty update request") as ei:
        call(owner)
    assert not isinstance(ei.value, UnsupportedWriteError)
    assert snapshot(owner, "c") == before
    owner.close()


# Found by perturbing one coordinate of stored_form(normal(8)) rows (seed 0) by up to 1/2 grid step;
# float32 normalisation leaves both on their grid point, so only the drift test decides.
_DRIFT_LOW = [0.1545734405517578, -0.708735466003418, -0.14683818817138672, -0.11177349090576172,
              0.3796653747558594, 0.15068721771240234, 0.2494659423828125, -0.458977327835241]
_DRIFT_HIGH = [0.06750106811523438, -0.0709238052368164, 0.34382152557373047, 0.05631732940673828,
               -0.2875852584838867, 0.19412845141641977, 0.7000770568847656, 0.508458137512207]


def _drift_and_same_grid(row):
    from qdrant_guard.receipts import commitment_bytes

    arr = np.asarray(row)
    ints = np.frombuffer(commitment_bytes(arr), dtype="<i4")
    drift = np.abs(arr / np.linalg.norm(arr) * 2.0 ** 20 - ints).max()
    f32 = arr.astype(np.float32)
    return drift, commitment_bytes(f32 / np.linalg.norm(f32)) == commitment_bytes(arr)


def test_a_cosine_row_within_three_eighths_of_a_step_is_kept_and_one_beyond_is_refused():
    """Kills ``_altered_by_storage``'s 3/8-step margin moved to 1/4 (W6: a row drifting 0.28 of a
    step, which Qdrant's float32 normalisation keeps on its grid point, was taken as altered) and
    to 1/2 (W5: a row drifting 0.42 of a step, near enough a rounding boundary for Qdrant's own
    normalisation to land on either side, was passed)."""
    from qdrant_guard.writereceipts import _altered_by_storage

    low, low_same = _drift_and_same_grid(_DRIFT_LOW)
    high, high_same = _drift_and_same_grid(_DRIFT_HIGH)
    assert 0.25 < low < 0.375 and low_same
    assert 0.375 < high < 0.5 and high_same
    assert _altered_by_storage(np.asarray(_DRIFT_LOW), "Cosine") is False
    assert _altered_by_storage(np.asarray(_DRIFT_HIGH), "Cosine") is True


def test_a_point_updated_twice_in_one_vector_update_then_overwritten_in_the_batch_keeps_both_receipts(tmp_path):
    """Kills ``prepare_vector_updates`` forgetting, for a later update of the same point in one
    call, the receipts the earlier one made (W24, ``existing[...] = merged`` dropped): the receipt
    container handed on to the batch's overwrite (whole, as a key holding ``"`` forces) then held
    vector "a"'s old receipt, which no longer verified against the stored vector."""
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True,
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config={n: models.VectorParams(size=16, distance=models.Distance.COSINE)
                                                   for n in ("a", "b")})
    rng = np.random.default_rng(24)
    owner.upsert("pii", [models.PointStruct(id=i, vector={"a": unit(rng, 16), "b": unit(rng, 16)},
                                            payload={'q"k': i}) for i in (1, 2)])
    owner.batch_update_points("pii", [
        models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(points=[
            models.PointVectors(id=1, vector={"a": unit(rng, 16)}),
            models.PointVectors(id=1, vector={"b": unit(rng, 16)})])),
        models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"n": 1}, points=[1])),
    ])
    stored = {p: payload for p, payload, _ in snapshot(owner, "pii")}
    assert {k: v for k, v in stored[1].items() if k != RECEIPT_KEY} == {"n": 1}
    results = [(r.point_id, r.vector_name, r.reason)
               for r in verify_stored(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys)]
    assert sorted(results) == [(1, "a", "ok"), (1, "b", "ok"), (2, "a", "ok"), (2, "b", "ok")]
    owner.close()
