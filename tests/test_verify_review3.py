"""Third review of the offline check (receipts.verify and `qdrant-guard receipt verify`):
sparse vectors and multivectors written around the guard, and receipts whose signed noise a
guarded write would refuse. Real local-mode Qdrant throughout."""
from __future__ import annotations

import json

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from qdrant_client import QdrantClient as RawClient
from qdrant_client import models

from guardkit import DIM, make_kit, unit
from qdrant_guard import InvalidVectorError, QdrantClient, keys
from qdrant_guard.cli import main as cli_main
from qdrant_guard.receipts import (
    REASONS,
    ReceiptSigner,
    verify,
)

KEY = bytes(range(32))


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


# ------------------------------------------------------------------ 1. sparse vectors and multivectors
def _guarded_mixed(kit, *, close: bool = True):
    """A sensitive collection with a dense, a sparse and a multivector slot, on disk; the guard
    noises and receipts point 1's dense vector. Returns (guarded owner client, or a raw client on
    the same store once the guarded one is closed; the trusted receipt keys)."""
    cfg = kit.config({"mix": {"class": "PII", "owner": "hr", "noise_on_write": True}})
    store = str(kit.tmp / "store")
    owner = QdrantClient(path=store, guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection(
        "mix",
        vectors_config={
            "d": models.VectorParams(size=DIM, distance=models.Distance.COSINE),
            "m": models.VectorParams(size=DIM, distance=models.Distance.DOT,
                                     multivector_config=models.MultiVectorConfig(
                                         comparator=models.MultiVectorComparator.MAX_SIM)),
        },
        sparse_vectors_config={"s": models.SparseVectorParams()},
    )
    owner.upsert("mix", [models.PointStruct(id=1, vector={"d": unit(np.random.default_rng(1))})])
    trusted = dict(owner.guard.trusted_receipt_keys)
    if not close:
        return owner, trusted
    owner.close()
    return RawClient(path=store), trusted


def _by_name(reports):
    return {(r.point_id, r.vector_name): r for r in reports}


def test_the_guard_refuses_sparse_and_multivectors_on_a_sensitive_collection(kit):
    # The premise of the verify fix: no guarded write, receipted or not, stores either.
    owner, _ = _guarded_mixed(kit, close=False)
    sparse = models.SparseVector(indices=[1, 5], values=[0.5, 0.2])
    multi = [unit(np.random.default_rng(2))] * 2
    for vec in ({"s": sparse}, {"m": multi}):
        with pytest.raises(InvalidVectorError, match="sparse|multivector"):
            owner.upsert("mix", [models.PointStruct(id=2, vector=vec)])


def test_what_the_guard_stores_in_a_collection_with_sparse_and_multivector_slots_verifies(kit):
    # Empty sparse and multivector slots are not reported: the point has no such vector.
    raw, trusted = _guarded_mixed(kit)
    reports = verify(raw, "mix", trusted_keys=trusted)
    assert [(r.point_id, r.vector_name, r.reason) for r in reports] == [(1, "d", "ok")]


def test_a_named_sparse_vector_written_around_the_guard_is_reported(kit):
    # Before: verify skipped every named vector that was not a dense list, so this was silent.
    raw, trusted = _guarded_mixed(kit)
    raw.update_vectors("mix", [models.PointVectors(
        id=1, vector={"s": models.SparseVector(indices=[3, 7], values=[1.0, 0.5])})])
    got = _by_name(verify(raw, "mix", trusted_keys=trusted))
    assert set(got) == {(1, "d"), (1, "s")}
    assert got[(1, "d")].ok
    assert got[(1, "s")].reason == "unsupported_vector"
    assert "sparse vector" in got[(1, "s")].check.detail


def test_a_named_multivector_written_around_the_guard_is_reported(kit):
    raw, trusted = _guarded_mixed(kit)
    rng = np.random.default_rng(3)
    raw.upsert("mix", [models.PointStruct(id=2, vector={"m": [unit(rng), unit(rng)]})])
    got = _by_name(verify(raw, "mix", trusted_keys=trusted))
    assert set(got) == {(1, "d"), (2, "m")}
    assert got[(2, "m")].reason == "unsupported_vector"
    assert "multivector" in got[(2, "m")].check.detail
    # Also when asked for by id.
    (only,) = verify(raw, "mix", [2], trusted_keys=trusted)
    assert (only.vector_name, only.reason) == ("m", "unsupported_vector")


def test_a_receipt_entry_for_a_sparse_vector_does_not_make_it_ok(kit):
    # A receipt commits to one dense vector; an entry under a sparse name is no cover for it.
    raw, trusted = _guarded_mixed(kit)
    (point,) = raw.retrieve("mix", [1], with_payload=True, with_vectors=True)
    container = point.payload["_qdrant_guard_receipt"]
    container["vectors"]["s"] = container["vectors"]["d"]
    raw.upsert("mix", [models.PointStruct(
        id=1, payload={**point.payload, "_qdrant_guard_receipt": container},
        vector={"d": point.vector["d"], "s": models.SparseVector(indices=[0], values=[1.0])})])
    got = _by_name(verify(raw, "mix", trusted_keys=trusted))
    assert got[(1, "d")].ok and got[(1, "s")].reason == "unsupported_vector"


def test_a_default_multivector_is_reported_as_the_named_one_is():
    raw = RawClient(":memory:")
    raw.create_collection("m", vectors_config=models.VectorParams(
        size=4, distance=models.Distance.DOT,
        multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM)))
    raw.upsert("m", [models.PointStruct(id=7, vector=[[0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 0.0]])])
    signer = ReceiptSigner(Ed25519PrivateKey.generate())
    (r,) = verify(raw, "m", trusted_keys={signer.key_id: signer.public_key})
    assert (r.point_id, r.vector_name, r.reason) == (7, "", "unsupported_vector")


def test_the_new_reason_is_listed_and_the_old_ones_kept():
    for reason in ("ok", "missing_point", "missing_receipt", "vector_mismatch", "bad_signature"):
        assert reason in REASONS
    assert "unsupported_vector" in REASONS


@pytest.fixture(scope="module")
def signer() -> ReceiptSigner:
    return ReceiptSigner(Ed25519PrivateKey.generate())


# ------------------------------------------------------------------ the CLI
def _cli(capsys, argv):
    rc = cli_main(argv)
    return rc, capsys.readouterr().out


def test_cli_reports_a_sparse_vector_with_its_reason(tmp_path, signer, capsys):
    store = str(tmp_path / "store")
    raw = RawClient(path=store)
    raw.create_collection("sp", vectors_config={}, sparse_vectors_config={"s": models.SparseVectorParams()})
    raw.upsert("sp", [models.PointStruct(id=1, vector={"s": models.SparseVector(indices=[2], values=[0.7])})])
    raw.close()
    rc, out = _cli(capsys, ["receipt", "verify", "--path", store, "--collection", "sp",
                            "--trusted-key", keys.public_key_to_str(signer.public_key)])
    assert rc == 1
    (bad,) = map(json.loads, out.splitlines()[:-1])
    assert (bad["vector"], bad["reason"]) == ("s", "unsupported_vector")
