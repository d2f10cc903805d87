"""issue_receipts_batch's whole-batch path signs exactly what the item-by-item path signs."""
from __future__ import annotations

import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qdrant_guard import merkle, receipt_format, receipts
from qdrant_guard.canonical import canonical_json
from qdrant_guard.keys import generate_keypair, key_id
from qdrant_guard.noise_params import NoiseParams, guarantee_sentence
from qdrant_guard.receipts import (
    ReceiptItem,
    ReceiptSigner,
    issue_receipt,
    issue_receipts_batch,
    stored_form_batch,
    vector_commitment,
    verify_receipt,
)

NOW = 1_700_000_000.0
FIELDS = ["format", "alg", "kid", "params", "model_id", "salt", "commitment", "collection",
          "point_id", "vector_name", "issued_at", "batch", "sig"]


def make_params(dim: int, epsilon: float = 2.0, clip_norm: float | None = 1.0) -> NoiseParams:
    return NoiseParams(
        mechanism="gaussian", mechanism_version="1", epsilon=epsilon, delta=1e-6, radius=0.5,
        clip_norm=clip_norm, scale=0.31, lattice_step=2.0 ** -20, rng_id="chacha20-getrandom-v1",
        dim=dim, dtype="float32",
        guarantee=guarantee_sentence("gaussian", epsilon, 1e-6, 0.5, clip_norm, 0.31, 2.0 ** -20, dim, "float32"),
    )


@pytest.fixture(scope="module")
def signer():
    sk, pk = generate_keypair()
    return ReceiptSigner(sk), {key_id(pk): pk}


def _without_random(receipt):
    return {k: v for k, v in receipt.items() if k not in ("salt", "commitment", "sig", "batch")}


def test_batch_fields_match_the_item_by_item_receipt(signer):
    sign, trusted = signer
    vecs = stored_form_batch(np.random.default_rng(1).normal(size=(7, 16)), distance="Cosine")
    shared = make_params(16)
    items = [ReceiptItem(shared if i % 2 else make_params(16, 0.5, None), vecs[i], "docs", i,
                         "v", "model-é", NOW) for i in range(7)]
    batch = issue_receipts_batch(sign, items)
    for i, (item, rec) in enumerate(zip(items, batch)):
        single = issue_receipt(sign, params=item.params, vector=item.vector, collection="docs",
                               point_id=i, vector_name="v", model_id="model-é", issued_at=NOW)
        assert list(rec) == FIELDS
        assert _without_random(rec) == _without_random(single)
        assert canonical_json(_without_random(rec)) == canonical_json(_without_random(single))
        assert rec["commitment"] == vector_commitment(item.vector, receipt_format._unb64(rec["salt"]))
        assert verify_receipt(rec, vector=item.vector, collection="docs", point_id=i, vector_name="v",
                              trusted_keys=trusted).ok
    assert len({r["salt"] for r in batch}) == 7
    # Receipts share no mutable state.
    batch[0]["params"]["epsilon"] = 99.0
    batch[0]["batch"]["path"].append("x")
    assert batch[2]["params"]["epsilon"] == 0.5 and batch[1]["params"]["epsilon"] == 2.0
    assert "x" not in batch[1]["batch"]["path"]


names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(collection=names, vector_name=st.text(st.characters(codec="utf-8"), max_size=6),
       model_id=st.none() | names, pid=st.integers(0, 2 ** 64 - 1) | st.uuids().map(str),
       issued=st.floats(0, 4e9) | st.integers(0, 4_000_000_000), n=st.integers(1, 5))
def test_batch_encoding_is_canonical_json(signer, collection, vector_name, model_id, pid, issued, n):
    sign, trusted = signer
    vecs = stored_form_batch(np.random.default_rng(n).normal(size=(n, 4)), distance="Dot")
    items = [ReceiptItem(make_params(4), vecs[i], collection, pid, vector_name, model_id, issued)
             for i in range(n)]
    out = receipts._batch_bodies(sign, items)
    assert out is not None
    bodies, encoded = out
    for body, data in zip(bodies, encoded):
        assert data == canonical_json(body)
    for i, rec in enumerate(issue_receipts_batch(sign, items)):
        # A verifier's clock after every issued_at drawn (up to 4e9): none is dated ahead of it.
        check = verify_receipt(rec, vector=vecs[i], collection=collection, point_id=pid,
                               vector_name=vector_name, trusted_keys=trusted, now=4e9 + 1)
        assert check.ok, check.detail


def test_merkle_paths_match_audit_path(signer):
    sign, _ = signer
    vecs = stored_form_batch(np.random.default_rng(2).normal(size=(11, 8)), distance="Euclid")
    batch = issue_receipts_batch(sign, [ReceiptItem(make_params(8), v, "c", i) for i, v in enumerate(vecs)])
    leaves = [merkle.leaf_hash(canonical_json(_without_random(r) | {"salt": r["salt"], "commitment": r["commitment"]}))
              for r in batch]
    levels = merkle.build_levels(leaves)
    for i, rec in enumerate(batch):
        assert rec["batch"] == {"index": i, "size": 11,
                                "path": [h.hex() for h in merkle.audit_path(levels, i)]}


def _error(fn):
    try:
        fn()
    except Exception as exc:
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize("bad", [
    dict(vector=[0.1, 0.2, 0.3, 0.4]),                   # a list: item path, off the grid
    dict(vector=np.array([0.1, 0.2, 0.3, 0.4])),         # off the grid
    dict(vector=np.zeros(5)),                            # wrong dim
    dict(vector=np.array([np.nan, 0, 0, 0])),
    dict(vector=np.full(4, 4096.0)),
    dict(collection=""), dict(collection=5), dict(vector_name=None), dict(model_id=3),
    dict(issued_at=float("inf")), dict(issued_at=True), dict(point_id=-1), dict(point_id="nope"),
    dict(params="gaussian"),
])
def test_batch_errors_are_the_item_by_item_errors(signer, bad):
    sign, _ = signer
    vecs = stored_form_batch(np.random.default_rng(3).normal(size=(4, 4)), distance="Dot")
    good = [ReceiptItem(make_params(4), v, "c", i) for i, v in enumerate(vecs)]
    fields = dict(params=make_params(4), vector=vecs[0], collection="c", point_id=9)
    fields.update(bad)
    broken = ReceiptItem(**fields)
    got = _error(lambda: issue_receipts_batch(sign, good[:2] + [broken] + good[2:]))
    want = _error(lambda: receipts._body(sign, broken))
    assert got is not None and got == want


def test_uuid_point_ids_in_batches(signer):
    sign, trusted = signer
    vecs = stored_form_batch(np.ones((2, 3)), distance="Cosine")
    u = uuid.uuid4()
    recs = issue_receipts_batch(sign, [ReceiptItem(make_params(3), vecs[0], "c", u),
                                       ReceiptItem(make_params(3), vecs[1], "c", str(u).upper())])
    assert recs[0]["point_id"] == recs[1]["point_id"] == f"uuid:{u}"
    assert verify_receipt(recs[1], vector=vecs[1], collection="c", point_id=u, trusted_keys=trusted).ok
