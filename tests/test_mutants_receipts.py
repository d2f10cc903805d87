"""Receipt checks that the receipts mutation pass (scripts/mutate.py) found unpinned.

Each forgery here is re-signed by the trusted key where the check under test comes before the
signature, so only that check can refuse it.
"""
from __future__ import annotations

import base64

import numpy as np
import pytest
from test_receipts import _mutate as altered
from test_receipts import _resign

from qdrant_guard.keys import generate_keypair, key_id
from qdrant_guard.noise_params import NoiseParams, guarantee_sentence
from qdrant_guard.receipts import (
    ReceiptSigner,
    issue_receipt,
    stored_form,
    verify_receipt,
)

DIM = 8
NOW = 1_700_000_000.0


def make_params(dim: int = DIM, **kw) -> NoiseParams:
    args = dict(mechanism="gaussian", mechanism_version="1", epsilon=2.0, delta=1e-6, radius=0.5,
                clip_norm=1.0, scale=0.31, lattice_step=2.0 ** -20, rng_id="chacha20-getrandom-v1",
                dim=dim, dtype="float32")
    args.update(kw)
    if "guarantee" not in args:  # verify checks it against the fields: the one they give
        args["guarantee"] = guarantee_sentence(*(args[k] for k in ("mechanism", "epsilon", "delta", "radius",
                                                                   "clip_norm", "scale", "lattice_step", "dim",
                                                                   "dtype")))
    return NoiseParams(**args)


@pytest.fixture(scope="module")
def keys():
    sk, pk = generate_keypair()
    return {"signer": ReceiptSigner(sk), "pk": pk, "kid": key_id(pk)}


def fresh(keys, dim=DIM, **kw):
    vec = stored_form(np.random.default_rng(dim).normal(size=dim), distance="Cosine")
    args = dict(params=make_params(dim), vector=vec, collection="docs", point_id=5, model_id="m",
                issued_at=NOW)
    args.update(kw)
    return issue_receipt(keys["signer"], **args), vec


def check(receipt, vec, keys, **kw):
    args = dict(vector=vec, collection="docs", point_id=5, trusted_keys={keys["kid"]: keys["pk"]},
                now=NOW)
    args.update(kw)
    return verify_receipt(receipt, **args)


def resign(receipt, keys):
    return _resign(receipt, keys["signer"])


def test_int_where_optional_float_is_signed_is_non_canonical(keys):
    # clip_norm is float-or-None: an int there is a non-canonical float, as for a plain float field.
    r, vec = fresh(keys)
    res = check(resign(altered(r, ("params", "clip_norm"), 1), keys), vec, keys)
    assert res.reason == "non_canonical", res.detail


@pytest.mark.parametrize("path", [("kid",), ("collection",), ("model_id",), ("params", "rng_id")])
def test_int_where_a_string_is_signed_is_malformed(keys, path):
    # Only a float field can be "an int spelling of the same number"; an int for a string is junk.
    r, vec = fresh(keys)
    res = check(resign(altered(r, path, 5), keys), vec, keys)
    assert res.reason == "malformed", res.detail


def test_signed_unknown_mechanism_is_malformed(keys):
    r, vec = fresh(keys)
    res = check(resign(altered(r, ("params", "mechanism"), "uniform"), keys), vec, keys)
    assert not res.ok and res.reason == "malformed", res.detail


def test_signed_dim_zero_or_negative_is_malformed(keys):
    r, _ = fresh(keys)
    for dim in (0, -1):
        res = check(resign(altered(r, ("params", "dim"), dim), keys), np.zeros(0), keys)
        assert not res.ok and res.reason == "malformed", (dim, res.detail)


def test_one_dimensional_receipt_verifies(keys):
    r, vec = fresh(keys, dim=1)
    res = check(r, vec, keys)
    assert res.ok, res.detail
    assert res.params.dim == 1


@pytest.mark.parametrize("salt", ["!!!!", "AAAA AAAA", base64.b64encode(b"x" * 16).decode().rstrip("=")])
def test_salt_not_canonical_base64_is_malformed_not_an_exception(keys, salt):
    r, vec = fresh(keys)
    res = check(resign(altered(r, ("salt",), salt), keys), vec, keys)
    assert not res.ok and res.reason == "malformed", res.detail


@pytest.mark.parametrize("n", [15, 17, 32])
def test_signed_salt_of_the_wrong_length_is_malformed(keys, n):
    r, vec = fresh(keys)
    res = check(resign(altered(r, ("salt",), base64.b64encode(b"s" * n).decode()), keys), vec, keys)
    assert not res.ok and res.reason == "malformed", res.detail


def test_point_id_two_to_the_64_is_non_canonical(keys):
    r, vec = fresh(keys)
    for pid in (f"int:{2 ** 64}", f"int:{2 ** 64 + 1}"):
        res = check(resign(altered(r, ("point_id",), pid), keys), vec, keys)
        assert res.reason == "non_canonical", (pid, res.detail)
    # The largest Qdrant id is accepted by the parser (it fails only on its binding here).
    res = check(resign(altered(r, ("point_id",), f"int:{2 ** 64 - 1}"), keys), vec, keys)
    assert res.reason == "point_mismatch", res.detail


@pytest.mark.parametrize("pid", ["uuid:not-a-uuid", "uuid:", "5", "str:5", ""])
def test_signed_point_id_of_no_known_form_is_malformed_not_an_exception(keys, pid):
    r, vec = fresh(keys)
    res = check(resign(altered(r, ("point_id",), pid), keys), vec, keys)
    assert not res.ok and res.reason == "malformed", (pid, res.detail)


def test_signed_negative_issued_at_is_malformed(keys):
    r, vec = fresh(keys)
    for issued in (-1, -1000):
        res = check(resign(altered(r, ("issued_at",), issued), keys), vec, keys)
        assert not res.ok and res.reason == "malformed", (issued, res.detail)
    res = check(resign(altered(r, ("issued_at",), 0), keys), vec, keys)
    assert res.ok, res.detail


def _batch(keys, n=5):
    from qdrant_guard.receipts import ReceiptItem, issue_receipts_batch
    rng = np.random.default_rng(11)
    vecs = [stored_form(rng.normal(size=DIM), distance="Cosine") for _ in range(n)]
    items = [ReceiptItem(make_params(), v, "docs", i, issued_at=NOW) for i, v in enumerate(vecs)]
    return issue_receipts_batch(keys["signer"], items), vecs


def test_batch_path_entries_must_be_lowercase_hex_strings(keys):
    receipts, vecs = _batch(keys)
    r, v = receipts[2], vecs[2]
    assert check(r, v, keys, point_id=2).ok
    path = r["batch"]["path"]
    # bytes.fromhex reads upper case as the same hash: the receipt must still be refused.
    upper = altered(r, ("batch", "path"), [path[0].upper()] + path[1:])
    assert path[0].upper() != path[0]
    assert check(upper, v, keys, point_id=2).reason == "bad_merkle_proof"
    for junk in ([1] + path[1:], [None] + path[1:], [bytes.fromhex(path[0])] + path[1:]):
        res = check(altered(r, ("batch", "path"), junk), v, keys, point_id=2)
        assert res.reason == "bad_merkle_proof", res.detail


def test_batch_size_that_fits_uint64_is_not_malformed(keys):
    receipts, vecs = _batch(keys)
    r, v = receipts[2], vecs[2]
    for size in (2 ** 63, 2 ** 64 - 1):
        res = check(altered(r, ("batch", "size"), size), v, keys, point_id=2)
        assert res.reason == "bad_merkle_proof", (size, res.detail)
    assert check(altered(r, ("batch", "size"), 2 ** 64), v, keys, point_id=2).reason == "malformed"


def test_batch_signature_of_the_wrong_length_is_bad_signature(keys):
    receipts, vecs = _batch(keys)
    r, v = receipts[2], vecs[2]
    sig = base64.b64decode(r["sig"])
    for bad in (sig[:63], sig + b"\0", b""):
        res = check(altered(r, ("sig",), base64.b64encode(bad).decode()), v, keys, point_id=2)
        assert res.reason == "bad_signature", res.detail


@pytest.mark.parametrize("arg", ["now", "max_age_s"])
@pytest.mark.parametrize("value", [True, False, "60"])
def test_time_arguments_must_be_numbers(keys, arg, value):
    r, vec = fresh(keys)
    kw = {"now": NOW, "max_age_s": 60.0, arg: value}
    with pytest.raises(TypeError, match=f"{arg} must be a number or None"):
        check(r, vec, keys, **kw)


def test_vector_name_must_be_a_string(keys):
    r, vec = fresh(keys)
    with pytest.raises(TypeError, match="vector_name must be str"):
        check(r, vec, keys, vector_name=0)


def test_age_bounds_are_inclusive(keys):
    r, vec = fresh(keys)
    assert check(r, vec, keys, max_age_s=60, now=NOW + 60).ok
    assert check(r, vec, keys, max_age_s=60, now=NOW + 60.5).reason == "expired"
    # Issued in the future: up to the 300 s clock-skew leeway it verifies, beyond it it is
    # refused, whatever max_age_s (a negative age never exceeds it: such a receipt never expired).
    assert check(r, vec, keys, max_age_s=60, now=NOW - 300).ok
    for ahead in (300.5, 3600, 10 ** 9):
        res = check(r, vec, keys, max_age_s=60, now=NOW - ahead)
        assert res.reason == "not_yet_valid", (ahead, res.detail)
    # Without max_age_s too; only max_clock_skew_s=None turns the date check off.
    assert check(r, vec, keys, now=NOW - 10 ** 9).reason == "not_yet_valid"
    assert check(r, vec, keys, now=NOW - 10 ** 9, max_clock_skew_s=None).ok


def test_rejection_reports_the_key_id_once_read(keys):
    r, vec = fresh(keys)
    res = check(r, vec, keys, revoked={keys["kid"]})
    assert res.reason == "revoked_key" and res.key_id == keys["kid"]
    res = check(r, vec, keys, collection="other")
    assert res.reason == "collection_mismatch" and res.key_id == keys["kid"]
    assert check(altered(r, ("kid",), 5), vec, keys).key_id is None
