"""Twenty-first review (2026-12-05): receipts against the write and read paths (replay, weaker or
unknown parameters, reserved-key spellings, batches).

Each test of a fix fails on the code before it (checked, see docs/security-testing.md). Real local
Qdrant, real Ed25519 keys; no mocks."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from guardkit import count, create, make_kit, models, unit
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import GuardRefusal, QdrantClient, keys
from qdrant_guard.noise import check_release, privatize
from qdrant_guard.noise_params import guarantee_sentence
from qdrant_guard.receipts import (
    RECEIPT_KEY,
    ReceiptItem,
    ReceiptSigner,
    issue_receipts_batch,
    receipts_for_payload,
    stored_form,
    verify_receipt,
)


def _clients(tmp_path, **noise):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
                              "noise_on_write": False, "intent": {"enabled": False},
                              "diversity": {"enabled": False},
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01, **noise}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    return kit, owner, owner.with_principal(kit.principal("bob", "support"))


def _point(kit, pid, rng, *, mechanism="gaussian", delta=1e-6, dtype=None):
    """A point noised and receipted by a trusted signer (the guard's own key), its params' dtype
    replaced by ``dtype`` (with the guarantee sentence those fields give, so only dtype differs)."""
    signer = ReceiptSigner(keys.load_private_key(kit.guard_key_path))
    noised, params = privatize(np.asarray([unit(rng)], dtype=np.float32), mechanism=mechanism, epsilon=1.0,
                               delta=delta, radius=0.01, clip_norm=1.0)
    if dtype is not None:
        p = params
        params = dataclasses.replace(p, dtype=dtype, guarantee=guarantee_sentence(
            p.mechanism, p.epsilon, p.delta, p.radius, p.clip_norm, p.scale, p.lattice_step, p.dim, dtype))
    final = stored_form(noised[0], distance="Euclid")
    rec = issue_receipts_batch(signer, [ReceiptItem(params=params, vector=final, collection="pii",
                                                    point_id=pid, vector_name="")])[0]
    return models.PointStruct(id=pid, vector=final.tolist(),
                              payload={"t": "x", RECEIPT_KEY: receipts_for_payload({"": rec})}), rec


# ------------------------------------------------------------------ params.dtype (fixed)
# The receipt's params.dtype is "float32" or "float64" (NoiseParams, privatize admits only these);
# the verifier checked mechanism, rng_id and mechanism_version against the values it knows, but
# took any dtype string, so a trusted signer's receipt claiming "float16" (or "Float64", which also
# drops the float64 caveat from the guarantee sentence) was stored and released.

@pytest.mark.parametrize("dtype", ["float16", "Float64", "int8", ""])
def test_a_receipt_with_a_dtype_no_release_has_is_refused_and_nothing_is_written(tmp_path, dtype):
    kit, owner, bob = _clients(tmp_path)
    rng = np.random.default_rng(1)
    good, _ = _point(kit, 1, rng)
    bad, rec = _point(kit, 2, rng, dtype=dtype)
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [good, bad])
    assert ei.value.verdict == "INVALID_RECEIPT"
    assert count(owner, "pii") == 0  # the good point of the refused call is not written either
    check = verify_receipt(rec, vector=bad.vector, collection="pii", point_id=2,
                           trusted_keys=owner.guard.trusted_receipt_keys)
    assert (check.ok, check.reason) == (False, "malformed") and "dtype" in check.detail


def test_a_stored_vector_whose_receipt_names_an_unknown_dtype_is_stripped_on_read(tmp_path):
    kit, owner, bob = _clients(tmp_path)
    rng = np.random.default_rng(2)
    ok, _ = _point(kit, 1, rng)
    odd, _ = _point(kit, 2, rng, dtype="float16")
    RawClient.upsert(owner, "pii", [ok, odd])  # around the guard
    got = {p.id: p.vector for p in bob.retrieve("pii", [1, 2], with_vectors=True)}
    assert got[1] is not None
    assert got[2] is None


def test_check_release_names_the_dtype_and_the_fix():
    _, params = privatize(np.full((1, 4), 0.5, dtype=np.float32), mechanism="gaussian", epsilon=1.0,
                          delta=1e-6, radius=0.01, clip_norm=1.0)
    assert check_release(params) is None
    why = check_release(dataclasses.replace(params, dtype="float16"))
    assert why is not None and "float16" in why and "privatize" in why


# ------------------------------------------------------------------ pinned (held on the old code)
# The mechanism was not compared then: a laplace_l2 receipt at the same epsilon and radius was
# stored in a gaussian collection. Since 2026-12-05 (h-mech) a receipt of another mechanism than
# the collection's is refused either way (tests/test_receipt_mechanism.py has every write path).

def test_a_laplace_receipt_is_refused_on_a_gaussian_collection_at_no_weaker_parameters(tmp_path):
    kit, owner, bob = _clients(tmp_path)
    p, _ = _point(kit, 1, np.random.default_rng(3), mechanism="laplace_l2", delta=0.0)
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [p])
    assert ei.value.verdict == "NOISE_REQUIRED" and count(owner, "pii") == 0
    assert ei.value.details["reasons"]["1"].startswith("mechanism_mismatch: ")


def test_a_gaussian_receipt_is_refused_on_a_laplace_collection(tmp_path):
    kit, owner, bob = _clients(tmp_path, mechanism="laplace_l2", delta=0.0)
    p, _ = _point(kit, 1, np.random.default_rng(4))
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [p])
    assert ei.value.verdict == "NOISE_REQUIRED" and count(owner, "pii") == 0
    # For its mechanism, not (as before) for its delta alone.
    assert ei.value.details["reasons"]["1"].startswith("mechanism_mismatch: ")


@pytest.mark.parametrize("key", ['"_qdrant_guard_receipt"', " _qdrant_guard_receipt", "_qdrant_guard_receipt ",
                                 "_qdrant_guard_receipt[]", '_qdrant_guard_receipt.vectors[""]',
                                 '_qdrant_guard_receipt.vectors.""'])
def test_receipt_key_spellings_are_refused_by_payload_edits(tmp_path, key):
    kit, owner, bob = _clients(tmp_path)
    p, _ = _point(kit, 1, np.random.default_rng(5))
    bob.upsert("pii", [p])
    before = RawClient.retrieve(owner, "pii", [1], with_payload=True)[0].payload
    for call in (lambda: bob.delete_payload("pii", keys=[key], points=[1]),
                 lambda: bob.set_payload("pii", payload={"v": 1}, points=[1], key=key)):
        with pytest.raises(GuardRefusal) as ei:
            call()
        assert ei.value.verdict == "RECEIPT_TAMPERING"
    assert RawClient.retrieve(owner, "pii", [1], with_payload=True)[0].payload == before


def test_a_receipted_upload_in_batches_of_one_with_a_bad_last_point_writes_nothing(tmp_path):
    kit, owner, bob = _clients(tmp_path)
    rng = np.random.default_rng(6)
    pts = [_point(kit, i, rng)[0] for i in range(3)] + [models.PointStruct(id=9, vector=unit(rng))]
    with pytest.raises(GuardRefusal) as ei:
        bob.upload_points("pii", pts, batch_size=1)
    assert ei.value.verdict == "NOISE_REQUIRED" and count(owner, "pii") == 0


# ------------------------------------------------------------------ huge epsilon (fixed)
# The Gaussian calibration overflowed (OverflowError, outside the project's errors) for an
# epsilon above about 1e154: privatize raised it, and so did check_release on a receipt a trusted
# signer made with such an epsilon, on the write path (before the ceiling check) and on every
# guarded read returning that point's vector.

def _huge_epsilon_point(kit, pid, rng):
    signer = ReceiptSigner(keys.load_private_key(kit.guard_key_path))
    noised, p = privatize(np.asarray([unit(rng)], dtype=np.float32), mechanism="gaussian", epsilon=1.0,
                          delta=1e-6, radius=0.01, clip_norm=1.0)
    params = dataclasses.replace(p, epsilon=1e300, guarantee=guarantee_sentence(
        p.mechanism, 1e300, p.delta, p.radius, p.clip_norm, p.scale, p.lattice_step, p.dim, p.dtype))
    final = stored_form(noised[0], distance="Euclid")
    rec = issue_receipts_batch(signer, [ReceiptItem(params=params, vector=final, collection="pii",
                                                    point_id=pid, vector_name="")])[0]
    return models.PointStruct(id=pid, vector=final.tolist(),
                              payload={RECEIPT_KEY: receipts_for_payload({"": rec})}), params


def test_privatize_with_an_epsilon_too_large_to_calibrate_is_a_guard_error_naming_it():
    from qdrant_guard.errors import GuardArgumentValueError
    with pytest.raises(GuardArgumentValueError, match="epsilon"):
        privatize(np.full((1, 4), 0.5, dtype=np.float32), mechanism="gaussian", epsilon=1e300,
                  delta=1e-6, radius=0.01, clip_norm=1.0)


def test_a_receipt_with_a_huge_epsilon_is_refused_on_write_and_stripped_on_read(tmp_path):
    kit, owner, bob = _clients(tmp_path)
    rng = np.random.default_rng(7)
    pt, params = _huge_epsilon_point(kit, 1, rng)
    why = check_release(params)
    assert why is not None and "epsilon" in why
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [pt])
    assert ei.value.verdict == "NOISE_REQUIRED" and count(owner, "pii") == 0
    RawClient.upsert(owner, "pii", [pt, _point(kit, 2, rng)[0]])  # around the guard
    got = {p.id: p.vector for p in bob.retrieve("pii", [1, 2], with_vectors=True)}
    assert got[1] is None and got[2] is not None
