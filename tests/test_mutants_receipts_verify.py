"""The offline check (receipts.verify and what it reads) where the third mutation pass
(scripts/mutate.py) found no test: each test here fails with one surviving mutant applied.

Real local-mode Qdrant throughout; the receipts are signed by a real Ed25519 key.
"""
from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from qdrant_client import QdrantClient as RawClient
from qdrant_client import models
from guardkit import make_kit
from test_receipt_review2 import _NumpyVectors
from test_verify_review3 import _release, _store

from qdrant_guard.errors import InvalidVectorError
from qdrant_guard.collection_verify import _split_vectors
from qdrant_guard.receipts import (
    RECEIPT_KEY,
    ReceiptSigner,
    issue_receipt,
    receipts_for_payload,
    receipts_from_payload,
    verify,
    verify_receipt,
)


@pytest.fixture(scope="module")
def signer() -> ReceiptSigner:
    return ReceiptSigner(Ed25519PrivateKey.generate())


def _trusted(signer):
    return {signer.key_id: signer.public_key}


# ------------------------------------------------------------------ receipts_from_payload

def test_a_payload_that_is_not_a_mapping_is_a_type_error():
    # Without the check a list reached `.get` and raised AttributeError, outside the documented
    # errors of the function.
    with pytest.raises(TypeError, match="payload must be a mapping or None, not list"):
        receipts_from_payload([RECEIPT_KEY])


# ------------------------------------------------------------------ the vector argument

def test_a_ragged_vector_is_refused_as_not_an_array_of_numbers(signer):
    vec, params = _release(1)
    receipt = issue_receipt(signer, params=params, vector=vec, collection="c", point_id=1)
    with pytest.raises(InvalidVectorError, match="vector is not an array of numbers"):
        verify_receipt(receipt, vector=[[0.5, 0.5], [0.5]], collection="c", point_id=1,
                       trusted_keys=_trusted(signer))


# ------------------------------------------------------------------ sparse and multivectors

def _multivector_collection(client, rows):
    client.create_collection("m", vectors_config=models.VectorParams(
        size=4, distance=models.Distance.DOT,
        multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM)))
    client.upsert("m", [models.PointStruct(id=7, vector=rows)])
    return client


def test_a_multivector_of_one_row_is_unsupported(signer):
    # One row is still a multivector (a list of lists): read as a dense vector it would be
    # reported as a missing receipt, as if the guard could have stored it.
    raw = _multivector_collection(RawClient(":memory:"), [[0.5, 0.5, 0.5, 0.5]])
    (r,) = verify(raw, "m", trusted_keys=_trusted(signer))
    assert (r.vector_name, r.reason) == ("", "unsupported_vector")


def test_a_multivector_read_back_as_a_2d_array_is_unsupported(signer):
    # A client wrapper that hands back numpy arrays (as test_receipt_review2's does) gives a
    # multivector as a 2-D array.
    raw = _multivector_collection(_NumpyVectors(":memory:"), [[0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 0.0]])
    (r,) = verify(raw, "m", trusted_keys=_trusted(signer))
    assert (r.vector_name, r.reason) == ("", "unsupported_vector")


def test_split_vectors_counts_empty_and_absent_values_as_dense_not_a_crash():
    # Documented: anything that is not a sparse vector or a multivector counts as dense, so that
    # verify_receipt reports it; an empty list has no first row to look at.
    assert _split_vectors(None) == ({}, {})
    assert _split_vectors({"e": [], "s": 0.5, "m": [[0.5]]}) == ({"e": [], "s": 0.5}, {"m": "multivector"})
    assert _split_vectors([]) == ({"": []}, {})


# ------------------------------------------------------------------ aliases

class _NoAliasListing(RawClient):
    """A real local-mode client that may not list aliases, as one with a server key scoped to a
    single collection."""

    def get_aliases(self, *args, **kwargs):
        raise PermissionError("this key may not list aliases")


def test_a_client_that_may_not_list_aliases_still_verifies(signer):
    raw = _store(signer, {1: _release(1), 2: _release(2)}, client=_NoAliasListing(":memory:"))
    assert [(r.point_id, r.reason) for r in verify(raw, "c", trusted_keys=_trusted(signer))] == [(1, "ok"), (2, "ok")]


# ------------------------------------------------------------------ arguments, before any read

@pytest.fixture()
def empty():
    raw = RawClient(":memory:")
    raw.create_collection("c", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    return raw


@pytest.mark.parametrize("kw, error, match", [
    # An empty collection reaches no verify_receipt, so verify's own checks are the only ones.
    (dict(trusted_keys=["kid"]), TypeError, "trusted_keys must be a mapping"),
    (dict(revoked="kid"), TypeError, "revoked must be a collection"),
    (dict(now="soon"), TypeError, "now must be a number"),
    (dict(now=float("nan")), ValueError, "now must be a finite number"),
    (dict(batch_size=0), ValueError, "batch_size must be a positive int"),
    (dict(batch_size=True), ValueError, "batch_size must be a positive int"),
    (dict(batch_size=2.0), ValueError, "batch_size must be a positive int"),
])
def test_bad_arguments_are_refused_before_any_point_is_read(empty, signer, kw, error, match):
    args = dict(trusted_keys=_trusted(signer))
    args.update(kw)
    with pytest.raises(error, match=match):
        verify(empty, "c", **args)
    with pytest.raises(error, match=match):
        verify(empty, "c", [1], **args)


def test_a_collection_name_that_is_not_a_str_is_a_type_error(empty, signer):
    with pytest.raises(TypeError, match="collection_name must be str, not int"):
        verify(empty, 5, trusted_keys=_trusted(signer))


@pytest.mark.parametrize("batch_size", [1, 2])
def test_small_batches_read_every_point(signer, batch_size):
    raw = _store(signer, {i: _release(i) for i in (1, 2, 3)})
    for ids in (None, [3, 1, 2]):
        got = verify(raw, "c", ids, trusted_keys=_trusted(signer), batch_size=batch_size)
        assert sorted((r.point_id, r.reason) for r in got) == [(1, "ok"), (2, "ok"), (3, "ok")]


# ------------------------------------------------------------------ what a report says

def test_a_missing_point_is_a_failure(signer):
    raw = _store(signer, {1: _release(1)})
    reports = verify(raw, "c", [1, 2], trusted_keys=_trusted(signer))
    assert [(r.point_id, r.reason, r.ok, bool(r.check)) for r in reports] == [
        (2, "missing_point", False, False), (1, "ok", True, True)]


@pytest.mark.parametrize("container", ["junk", {"v": 2, "vectors": {}}, {"v": True, "vectors": {}},
                                       {"v": 1, "vectors": []}])
def test_a_malformed_receipt_container_is_reported_not_skipped(signer, container):
    # Skipped, the point would have no report at all: a check of the collection would pass.
    raw = _store(signer, {1: _release(1), 2: _release(2)})
    raw.overwrite_payload("c", {RECEIPT_KEY: container}, points=[2])
    for ids in (None, [1, 2]):
        reports = verify(raw, "c", ids, trusted_keys=_trusted(signer))
        assert [(r.point_id, r.vector_name, r.reason, r.ok) for r in reports] == [
            (1, "", "ok", True), (2, "", "malformed", False)]


def test_a_receipt_on_a_multivector_of_a_public_collection_is_a_failure(signer, tmp_path):
    # PUBLIC needs no receipt, but one that is there claims to certify what is stored: on a
    # multivector it certifies nothing, and the report must say so (not ok).
    cfg = make_kit(tmp_path).config({"m": {"class": "PUBLIC"}})
    raw = _multivector_collection(RawClient(":memory:"), [[0.5, 0.5, 0.5, 0.5]])
    vec, params = _release(7)
    receipt = issue_receipt(signer, params=params, vector=vec, collection="m", point_id=7)
    raw.overwrite_payload("m", {RECEIPT_KEY: receipts_for_payload({"": receipt})}, points=[7])
    (r,) = verify(raw, "m", trusted_keys=_trusted(signer), policy=cfg)
    assert (r.vector_name, r.reason, r.ok) == ("", "unsupported_vector", False)


def test_a_receipt_for_a_vector_the_point_lacks_is_a_failure(signer):
    raw = _store(signer, {1: _release(1)})
    (point,) = raw.retrieve("c", [1], with_payload=True)
    receipts = receipts_from_payload(point.payload)
    raw.overwrite_payload("c", {RECEIPT_KEY: receipts_for_payload({**receipts, "ghost": receipts[""]})}, points=[1])
    reports = verify(raw, "c", trusted_keys=_trusted(signer))
    assert [(r.vector_name, r.reason, r.ok) for r in reports] == [("", "ok", True), ("ghost", "vector_mismatch", False)]


class _HalfVectors(_NumpyVectors):
    """Hands vectors back as float16 arrays, which cannot hold the stored float32 values."""

    def _arrays(self, points):
        for p in super()._arrays(points):
            p.vector = p.vector.astype(np.float16)
        return points


def test_a_vector_read_back_in_a_form_verify_receipt_refuses_is_a_failure(signer):
    raw = _store(signer, {1: _release(1)}, client=_HalfVectors(":memory:"))
    (r,) = verify(raw, "c", trusted_keys=_trusted(signer))
    assert (r.reason, r.ok) == ("vector_mismatch", False)
    assert "float16, which cannot hold the stored float32 values" in r.check.detail
