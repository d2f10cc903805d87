"""Receipts: stored form survives Qdrant, and a forgery matrix where each forgery gets its reason."""
from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import uuid

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from qdrant_client import QdrantClient, models

from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import ReceiptError
from qdrant_guard.keys import generate_keypair, key_id
from qdrant_guard.noise_params import NoiseParams, guarantee_sentence
from qdrant_guard.receipts import (
    COMMIT_GRID,
    RECEIPT_KEY,
    SIGNATURE_PREFIX,
    ReceiptItem,
    ReceiptSigner,
    commitment_bytes,
    issue_receipt,
    issue_receipts_batch,
    normalize_point_id,
    receipts_for_payload,
    receipts_from_payload,
    stored_form,
    vector_commitment,
    verify,
    verify_receipt,
)

DIM = 64
NOW = 1_700_000_000.0


def make_params(dim: int = DIM, epsilon: float = 2.0, mechanism: str = "gaussian") -> NoiseParams:
    return NoiseParams(
        mechanism=mechanism, mechanism_version="1", epsilon=epsilon, delta=1e-6, radius=0.5,
        clip_norm=1.0, scale=0.31, lattice_step=2.0 ** -20, rng_id="chacha20-getrandom-v1",
        dim=dim, dtype="float32",
        # verify checks the sentence against the fields, so it is the one they give
        guarantee=guarantee_sentence(mechanism, epsilon, 1e-6, 0.5, 1.0, 0.31, 2.0 ** -20, dim, "float32"),
    )


@pytest.fixture(scope="module")
def keys():
    sk, pk = generate_keypair()
    other_sk, other_pk = generate_keypair()
    return {"signer": ReceiptSigner(sk), "pk": pk, "kid": key_id(pk),
            "other": ReceiptSigner(other_sk), "other_pk": other_pk}


@pytest.fixture()
def rng():
    return np.random.default_rng(7)


def trusted(keys):
    return {keys["kid"]: keys["pk"]}


def fresh(keys, rng, **kw):
    vec = stored_form(rng.normal(size=DIM), distance="Cosine")
    args = dict(params=make_params(), vector=vec, collection="docs", point_id=5,
                model_id="m", issued_at=NOW)
    args.update(kw)
    return issue_receipt(keys["signer"], **args), args["vector"]


def check(receipt, vec, keys, **kw):
    args = dict(vector=vec, collection="docs", point_id=5, trusted_keys=trusted(keys), now=NOW)
    args.update(kw)
    return verify_receipt(receipt, **args)


# ----------------------------------------------------------------------------- stored form

@pytest.mark.parametrize("dim", [3, 64, 384, 1536])
def test_cosine_stored_form_survives_float32_renormalisation(dim):
    rng = np.random.default_rng(dim)
    for trial in range(40):
        raw = rng.normal(size=dim) * (10.0 ** rng.uniform(-3, 3))
        if trial % 4 == 0:  # a dominant coordinate: the hardest case for re-normalisation
            raw[0] = 50.0 * np.abs(raw).max()
        v = stored_form(raw, distance="Cosine")
        assert v.dtype == np.float32
        ints = np.rint(v.astype(np.float64) / COMMIT_GRID)
        assert np.array_equal(ints * COMMIT_GRID, v.astype(np.float64))
        # The same f32 normalisation Qdrant does: sum of squares, sqrt, divide, all in float32.
        norm32 = np.sqrt(np.sum(v * v, dtype=np.float32), dtype=np.float32)
        renorm = (v / norm32).astype(np.float32)
        assert commitment_bytes(renorm) == commitment_bytes(v)
        seq = np.float32(0)
        for x in v:
            seq = np.float32(seq + x * x)
        assert commitment_bytes((v / np.sqrt(seq)).astype(np.float32)) == commitment_bytes(v)


def test_stored_form_is_close_to_the_input_direction(rng):
    raw = rng.normal(size=384)
    v = stored_form(raw, distance="Cosine").astype(np.float64)
    assert np.max(np.abs(v - raw / np.linalg.norm(raw))) <= 2 * COMMIT_GRID
    e = stored_form(raw * 3, distance="Euclid").astype(np.float64)
    assert np.max(np.abs(e - raw * 3)) <= COMMIT_GRID / 2


def test_stored_form_round_trips_through_local_qdrant(keys, rng):
    client = QdrantClient(":memory:")
    client.create_collection("c", vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE))
    vecs = [stored_form(rng.normal(size=384), distance=models.Distance.COSINE) for _ in range(20)]
    client.upsert("c", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(vecs)])
    got = client.retrieve("c", list(range(20)), with_vectors=True)
    for p in got:
        assert commitment_bytes(p.vector) == commitment_bytes(vecs[p.id])
    # An off-grid non-unit vector is changed by Qdrant; the snapped form is what survives.
    raw = rng.normal(size=384) * 3
    client.upsert("c", [models.PointStruct(id=99, vector=raw.tolist())])
    back = client.retrieve("c", [99], with_vectors=True)[0].vector
    assert commitment_bytes(back) != commitment_bytes(raw)


def test_stored_form_errors():
    with pytest.raises(ValueError, match="zero vector"):
        stored_form([0.0, 0.0], distance="Cosine")
    with pytest.raises(ValueError, match="NaN or Inf"):
        stored_form([1.0, float("nan")], distance="Dot")
    with pytest.raises(ValueError, match="distance must be one of"):
        stored_form([1.0], distance="cosine")
    with pytest.raises(TypeError):
        stored_form([1.0], distance=None)
    with pytest.raises(TypeError):
        stored_form(None, distance="Dot")
    with pytest.raises(ValueError, match="2048"):
        stored_form([4096.0], distance="Euclid")
    with pytest.raises(ValueError, match="16 bytes"):
        vector_commitment([0.5], b"short")


def test_commitment_depends_on_salt_and_every_coordinate(rng):
    v = stored_form(rng.normal(size=8), distance="Cosine")
    salt = bytes(16)
    c = vector_commitment(v, salt)
    assert c != vector_commitment(v, b"\x01" + bytes(15))
    w = v.copy()
    w[3] += np.float32(COMMIT_GRID)
    assert c != vector_commitment(w, salt)
    # The commitment is not a bare hash of the vector bytes (no clean-vector hashes anywhere).
    assert c != hashlib.sha256(v.tobytes()).hexdigest()


def test_point_id_normalisation():
    u = uuid.uuid4()
    assert normalize_point_id(7) == "int:7"
    assert normalize_point_id(str(u).upper()) == f"uuid:{u}"
    assert normalize_point_id(u.hex) == f"uuid:{u}"
    assert normalize_point_id(u) == f"uuid:{u}"
    with pytest.raises(TypeError):
        normalize_point_id(True)
    with pytest.raises(ValueError):
        normalize_point_id(-1)
    with pytest.raises(ValueError):
        normalize_point_id("7")
    with pytest.raises(TypeError):
        normalize_point_id(None)


# ----------------------------------------------------------------------------- issue and verify

def test_valid_receipt_verifies_and_returns_params(keys, rng):
    r, vec = fresh(keys, rng)
    res = check(r, vec, keys)
    assert res.ok and res.reason == "ok" and res.key_id == keys["kid"]
    assert res.params == make_params()
    assert r["issued_at"] == int(NOW * 1000)
    assert r["point_id"] == "int:5"
    json.dumps(r)  # JSON-serialisable
    # The JSON text of the canonical encoding also verifies.
    assert check(canonical_json(r), vec, keys).ok


def test_issue_refuses_vector_off_grid_or_wrong_dim(keys, rng):
    with pytest.raises(ValueError, match="stored_form"):
        issue_receipt(keys["signer"], params=make_params(), vector=rng.normal(size=DIM),
                      collection="docs", point_id=1)
    with pytest.raises(ValueError, match="dim"):
        issue_receipt(keys["signer"], params=make_params(dim=3),
                      vector=stored_form(rng.normal(size=DIM), distance="Dot"),
                      collection="docs", point_id=1)
    with pytest.raises(TypeError):
        issue_receipt(object(), params=make_params(), vector=[0.5], collection="d", point_id=1)
    with pytest.raises(TypeError):
        ReceiptSigner(None)


def _resign(receipt, signer):
    body = {k: v for k, v in receipt.items() if k != "sig"}
    out = dict(body)
    out["sig"] = base64.b64encode(signer.sign(SIGNATURE_PREFIX + canonical_json(body))).decode()
    return out


def _mutate(receipt, path, value):
    r = copy.deepcopy(receipt)
    target = r
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return r


FORGERIES = [
    ("epsilon", lambda r: _mutate(r, ("params", "epsilon"), 20.0), "bad_signature"),
    ("mechanism", lambda r: _mutate(r, ("params", "mechanism"), "laplace_l2"), "bad_signature"),
    ("collection_field", lambda r: _mutate(r, ("collection",), "other"), "bad_signature"),
    ("point_field", lambda r: _mutate(r, ("point_id",), "int:6"), "bad_signature"),
    ("model", lambda r: _mutate(r, ("model_id",), "other-model"), "bad_signature"),
    ("issued_at", lambda r: _mutate(r, ("issued_at",), r["issued_at"] + 1), "bad_signature"),
    ("kid_swap", lambda r: _mutate(r, ("kid",), "ed25519:" + "0" * 32), "unknown_key"),
    ("truncated_sig", lambda r: _mutate(r, ("sig",), base64.b64encode(base64.b64decode(r["sig"])[:63]).decode()), "bad_signature"),
    ("extended_sig", lambda r: _mutate(r, ("sig",), base64.b64encode(base64.b64decode(r["sig"]) + b"\0").decode()), "bad_signature"),
    ("flipped_sig_bit", lambda r: _mutate(r, ("sig",), base64.b64encode(bytes([base64.b64decode(r["sig"])[0] ^ 1]) + base64.b64decode(r["sig"])[1:]).decode()), "bad_signature"),
    ("sig_not_b64", lambda r: _mutate(r, ("sig",), "!!!"), "bad_signature"),
    ("alg_changed", lambda r: _mutate(r, ("alg",), "HS256"), "algorithm"),
    ("alg_none", lambda r: _mutate(r, ("alg",), "none"), "algorithm"),
    ("format", lambda r: _mutate(r, ("format",), "qg-receipt/2"), "unsupported_version"),
    ("no_format", lambda r: {k: v for k, v in r.items() if k != "format"}, "malformed"),
    ("missing_field", lambda r: {k: v for k, v in r.items() if k != "salt"}, "malformed"),
    ("extra_field", lambda r: _mutate(r, ("note",), "x"), "malformed"),
    ("not_a_dict", lambda r: [r], "malformed"),
    ("int_for_float", lambda r: _mutate(r, ("params", "epsilon"), int(r["params"]["epsilon"])), "non_canonical"),
    ("upper_hex", lambda r: _mutate(r, ("commitment",), r["commitment"].upper()), "non_canonical"),
    ("nan", lambda r: _mutate(r, ("params", "epsilon"), float("nan")), "malformed"),
    ("bool_dim", lambda r: _mutate(r, ("params", "dim"), True), "malformed"),
    ("leading_zero_id", lambda r: _mutate(r, ("point_id",), "int:05"), "non_canonical"),
]


@pytest.mark.parametrize("name,forge,reason", FORGERIES, ids=[f[0] for f in FORGERIES])
def test_forgery_matrix(keys, rng, name, forge, reason):
    r, vec = fresh(keys, rng)
    res = check(forge(r), vec, keys)
    assert not res.ok
    assert res.reason == reason, res.detail
    assert res.params is None


def test_flipped_bit_in_vector(keys, rng):
    r, vec = fresh(keys, rng)
    bad = vec.copy()
    bits = bad.view(np.uint32)
    bits[10] ^= 1 << 12  # well above the grid rounding: a real change of the stored value
    res = check(r, bad, keys)
    assert res.reason == "vector_mismatch"
    # The lowest mantissa bits are below the commitment grid, so they are (by design) tolerated.
    low = vec.copy()
    low.view(np.uint32)[10] ^= 1
    assert check(r, low, keys).ok
    assert check(r, vec[:-1], keys).reason == "vector_mismatch"
    assert check(r, [float("nan")] * DIM, keys).reason == "vector_mismatch"


def test_replay_onto_other_point_collection_and_vector_name(keys, rng):
    r, vec = fresh(keys, rng)
    assert check(r, vec, keys, point_id=6).reason == "point_mismatch"
    assert check(r, vec, keys, point_id=str(uuid.uuid4())).reason == "point_mismatch"
    assert check(r, vec, keys, collection="other").reason == "collection_mismatch"
    assert check(r, vec, keys, vector_name="image").reason == "vector_name_mismatch"


def test_uuid_point_ids_are_typed(keys, rng):
    u = uuid.uuid4()
    r, vec = fresh(keys, rng, point_id=str(u).upper())
    assert r["point_id"] == f"uuid:{u}"
    assert check(r, vec, keys, point_id=str(u)).ok
    assert check(r, vec, keys, point_id=u).ok
    # An int id whose decimal happens to equal the UUID's integer value is a different point.
    assert check(r, vec, keys, point_id=u.int % 2 ** 64).reason == "point_mismatch"
    res = check(_mutate(r, ("point_id",), f"uuid:{str(u).upper()}"), vec, keys, point_id=u)
    assert res.reason == "non_canonical"


def test_unknown_and_revoked_keys(keys, rng):
    r, vec = fresh(keys, rng)
    assert check(r, vec, keys, trusted_keys={}).reason == "unknown_key"
    assert check(r, vec, keys, revoked={keys["kid"]}).reason == "revoked_key"
    # Trusting the id but with another public key: the signature fails.
    assert check(r, vec, keys, trusted_keys={keys["kid"]: keys["other_pk"]}).reason == "bad_signature"
    # A receipt re-signed by an untrusted key that claims the trusted key id.
    forged = _resign(r, keys["other"])
    assert check(forged, vec, keys).reason == "bad_signature"
    # Signed properly by the other key under its own id: unknown.
    own = issue_receipt(keys["other"], params=make_params(), vector=vec, collection="docs",
                        point_id=5, issued_at=NOW)
    assert check(own, vec, keys).reason == "unknown_key"


def test_algorithm_confusion_other_signature_schemes(keys, rng):
    r, vec = fresh(keys, rng)
    body = {k: v for k, v in r.items() if k != "sig"}
    msg = SIGNATURE_PREFIX + canonical_json(body)
    ecdsa_sig = ec.generate_private_key(ec.SECP256R1()).sign(msg, ec.ECDSA(hashes.SHA256()))
    rsa_sig = rsa.generate_private_key(65537, 2048).sign(msg, padding.PKCS1v15(), hashes.SHA256())
    # An HMAC keyed with the public key bytes: the classic "verify with the public key as secret".
    from qdrant_guard.keys import public_key_bytes
    mac = hmac.new(public_key_bytes(keys["pk"]), msg, hashlib.sha256).digest()
    mac64 = hmac.new(public_key_bytes(keys["pk"]), msg, hashlib.sha512).digest()
    for sig, alg in ((ecdsa_sig, "ES256"), (rsa_sig, "RS256"), (mac, "HS256"), (mac64, "HS512")):
        b64 = base64.b64encode(sig).decode()
        claimed = dict(body, sig=b64)
        assert check(claimed, vec, keys).reason == "bad_signature"
        relabelled = dict(body, sig=b64, alg=alg)
        assert check(relabelled, vec, keys).reason == "algorithm"
    with pytest.raises(TypeError, match="Ed25519PublicKey"):
        check(r, vec, keys, trusted_keys={keys["kid"]: ec.generate_private_key(ec.SECP256R1()).public_key()})


def test_non_canonical_json_encodings_rejected(keys, rng):
    r, vec = fresh(keys, rng)
    canon = canonical_json(r)
    assert check(canon, vec, keys).ok
    variants = {
        "reordered": json.dumps(dict(reversed(list(r.items()))), separators=(",", ":"), ensure_ascii=False),
        "whitespace": json.dumps(r, sort_keys=True, ensure_ascii=False),
        "escaped": canon.decode().replace('"gaussian: (', '"\\u0067aussian: (', 1),
        "float_as_exponent": canon.decode().replace('"epsilon":2.0', '"epsilon":2e0'),
        "float_as_int": canon.decode().replace('"epsilon":2.0', '"epsilon":2'),
        "duplicate_key": canon.decode().replace('{"alg"', '{"alg":"x","alg"', 1),
    }
    for name, text in variants.items():
        assert text.encode() != canon, name
        res = check(text.encode(), vec, keys)
        assert res.reason == "non_canonical", (name, res)
    assert check(b"{not json", vec, keys).reason == "malformed"


def test_deeply_nested_receipt_json_is_malformed_not_an_exception(keys, rng):
    # json's decoder raises RecursionError (not ValueError) on deep nesting: verify_receipt must
    # still return a reason instead of raising.
    _, vec = fresh(keys, rng)
    for junk in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000):
        res = check(junk, vec, keys)
        assert not res.ok and res.reason == "malformed", res


def test_overlong_int_point_id_is_a_rejection_not_an_exception(keys, rng):
    # int() refuses decimal strings over 4300 digits with ValueError; the range check must not
    # let that escape verify_receipt.
    r, vec = fresh(keys, rng)
    for digits in ("1" * 21, "1" * 5000):
        res = check(_mutate(r, ("point_id",), "int:" + digits), vec, keys)
        assert not res.ok and res.reason == "non_canonical", res
    assert check(_mutate(r, ("point_id",), f"int:{2 ** 64 - 1}"), vec, keys).reason == "bad_signature"


def test_expiry(keys, rng):
    r, vec = fresh(keys, rng)
    assert check(r, vec, keys, max_age_s=60, now=NOW + 59).ok
    assert check(r, vec, keys, max_age_s=60, now=NOW + 61).reason == "expired"


def test_argument_type_errors(keys, rng):
    r, vec = fresh(keys, rng)
    with pytest.raises(TypeError):
        check(r, vec, keys, trusted_keys=[keys["pk"]])
    with pytest.raises(TypeError):
        check(r, vec, keys, collection=None)
    with pytest.raises(TypeError):
        check(r, None, keys)
    with pytest.raises(TypeError):
        check(r, vec, keys, point_id=None)
    with pytest.raises(TypeError):
        check(r, vec, keys, revoked="abc")
    # A garbage receipt never raises.
    for junk in (None, 5, "x", b"\xff", {}, {"format": 1}):
        assert not check(junk, vec, keys).ok


# ----------------------------------------------------------------------------- Merkle batches

def _batch(keys, rng, n):
    vecs = [stored_form(rng.normal(size=DIM), distance="Cosine") for _ in range(n)]
    items = [ReceiptItem(make_params(), v, "docs", i, issued_at=NOW) for i, v in enumerate(vecs)]
    return issue_receipts_batch(keys["signer"], items), vecs


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13])
def test_batch_each_point_verifies_alone(keys, rng, n):
    receipts, vecs = _batch(keys, rng, n)
    assert len({r["sig"] for r in receipts}) == 1
    for i, (r, v) in enumerate(zip(receipts, vecs)):
        assert r["batch"]["index"] == i and r["batch"]["size"] == n
        assert check(r, v, keys, point_id=i).ok
        # Swapping in another point's vector or id fails.
        if n > 1:
            j = (i + 1) % n
            assert check(r, vecs[j], keys, point_id=i).reason == "vector_mismatch"
            assert check(r, v, keys, point_id=j).reason == "point_mismatch"


def test_batch_merkle_tampering(keys, rng):
    receipts, vecs = _batch(keys, rng, 5)
    r, v = receipts[2], vecs[2]
    path = r["batch"]["path"]
    flipped = ("0" if path[0][0] != "0" else "1") + path[0][1:]
    cases = {
        "path_hash": _mutate(r, ("batch", "path"), [flipped] + path[1:]),
        "path_short": _mutate(r, ("batch", "path"), path[:-1]),
        "path_long": _mutate(r, ("batch", "path"), path + [path[0]]),
        "path_swapped": _mutate(r, ("batch", "path"), list(reversed(path))),
        "index": _mutate(r, ("batch", "index"), 3),
        "index_oob": _mutate(r, ("batch", "index"), 9),
        "size": _mutate(r, ("batch", "size"), 6),
        "body_epsilon": _mutate(r, ("params", "epsilon"), 50.0),
        "path_not_hex": _mutate(r, ("batch", "path"), ["zz"] + path[1:]),
        "sig_bit": _mutate(r, ("sig",), base64.b64encode(
            bytes([base64.b64decode(r["sig"])[5] ^ 4]).join([base64.b64decode(r["sig"])[:5],
                                                             base64.b64decode(r["sig"])[6:]])).decode()),
    }
    for name, forged in cases.items():
        res = check(forged, v, keys, point_id=2)
        # The signature covers only the root, so a changed body, path or signature all show as a
        # root that is not the signed one.
        assert res.reason == "bad_merkle_proof", (name, res)
    # Stripping the batch proof and presenting it as a single receipt: the root signature is not
    # a signature over the body.
    single = {k: val for k, val in r.items() if k != "batch"}
    assert check(single, v, keys, point_id=2).reason == "bad_signature"
    # A single receipt dressed up as a one-leaf batch.
    lone, lv = fresh(keys, rng)
    dressed = dict(lone, batch={"index": 0, "size": 1, "path": []})
    assert check(dressed, lv, keys).reason == "bad_merkle_proof"
    assert check(_mutate(r, ("batch", "index"), "2"), v, keys, point_id=2).reason == "malformed"


def test_batch_size_beyond_uint64_is_a_rejection_not_an_exception(keys, rng):
    # The signed size is a uint64: a size (or index) past it cannot have been signed, and must be
    # reported like any other bad proof instead of raising out of verify_receipt (which would
    # abort receipts.verify() over a whole collection and every read of the point).
    receipts, vecs = _batch(keys, rng, 3)
    r, v = receipts[0], vecs[0]
    big = _mutate(_mutate(r, ("batch", "size"), 2 ** 64), ("batch", "path"), [r["batch"]["path"][0]] * 64)
    res = check(big, v, keys, point_id=0)
    assert not res.ok and res.reason == "malformed", res
    huge = _mutate(_mutate(r, ("batch", "size"), 2 ** 70), ("batch", "index"), 2 ** 70 - 1)
    assert check(huge, v, keys, point_id=0).reason == "malformed"


def test_batch_argument_errors(keys):
    assert issue_receipts_batch(keys["signer"], []) == []
    with pytest.raises(TypeError):
        issue_receipts_batch(keys["signer"], [object()])
    with pytest.raises(TypeError):
        issue_receipts_batch(keys["signer"], None)


# ----------------------------------------------------------------------------- payload + Qdrant

def test_payload_container_round_trip(keys, rng):
    r, _ = fresh(keys, rng)
    payload = {"text": "x", RECEIPT_KEY: receipts_for_payload({"": r})}
    assert payload[RECEIPT_KEY]["v"] == 1
    assert receipts_from_payload(payload) == {"": r}
    assert receipts_from_payload({"text": "x"}) == {}
    assert receipts_from_payload(None) == {}
    with pytest.raises(ReceiptError):
        receipts_from_payload({RECEIPT_KEY: {"v": 2, "vectors": {}}})
    with pytest.raises(ReceiptError):
        receipts_from_payload({RECEIPT_KEY: [1]})
    with pytest.raises(TypeError):
        receipts_for_payload([r])


def test_verify_collection_in_local_qdrant_named_vectors(keys, rng):
    client = QdrantClient(":memory:")
    client.create_collection("docs", vectors_config={
        "text": models.VectorParams(size=DIM, distance=models.Distance.COSINE),
        "img": models.VectorParams(size=8, distance=models.Distance.EUCLID),
    })
    items, points = [], []
    ids = [1, 2, str(uuid.uuid4())]
    vecs = {}
    for pid in ids:
        vecs[pid] = {"text": stored_form(rng.normal(size=DIM), distance="Cosine"),
                     "img": stored_form(rng.normal(size=8) * 5, distance="Euclid")}
        items.append(ReceiptItem(make_params(), vecs[pid]["text"], "docs", pid, "text", issued_at=NOW))
        items.append(ReceiptItem(make_params(dim=8), vecs[pid]["img"], "docs", pid, "img", issued_at=NOW))
    receipts = issue_receipts_batch(keys["signer"], items)
    for n, pid in enumerate(ids):
        payload = {"title": f"p{n}", RECEIPT_KEY: receipts_for_payload(
            {"text": receipts[2 * n], "img": receipts[2 * n + 1]})}
        points.append(models.PointStruct(id=pid, vector={k: v.tolist() for k, v in vecs[pid].items()},
                                         payload=payload))
    client.upsert("docs", points)
    reports = verify(client, "docs", trusted_keys=trusted(keys), now=NOW)
    assert len(reports) == 6 and all(rep.ok for rep in reports), [r.check for r in reports]

    # Tamper with the stored vector of one point, drop the receipt of another, ask for a missing id.
    bad = vecs[2]["text"].copy()
    bad[0] = -bad[0] if bad[0] != 0 else np.float32(0.5)
    client.update_vectors("docs", [models.PointVectors(id=2, vector={"text": bad.tolist()})])
    client.overwrite_payload("docs", {"title": "x"}, points=[1])
    reports = verify(client, "docs", [1, 2, ids[2], 77], trusted_keys=trusted(keys), now=NOW)
    by = {(str(r.point_id), r.vector_name): r.reason for r in reports}
    assert by[("77", "")] == "missing_point"
    assert by[("1", "text")] == by[("1", "img")] == "missing_receipt"
    assert by[("2", "text")] == "vector_mismatch" and by[("2", "img")] == "ok"
    assert by[(ids[2], "text")] == by[(ids[2], "img")] == "ok"

    # Replaying point 3's payload onto point 1 (same collection) is caught.
    replay = client.retrieve("docs", [ids[2]], with_payload=True)[0].payload
    client.upsert("docs", [models.PointStruct(id=1, vector={k: v.tolist() for k, v in vecs[ids[2]].items()},
                                              payload=replay)])
    reports = verify(client, "docs", [1], trusted_keys=trusted(keys), now=NOW)
    assert {r.reason for r in reports} == {"point_mismatch"}

    # Replaying onto another collection is caught.
    client.create_collection("other", vectors_config={
        "text": models.VectorParams(size=DIM, distance=models.Distance.COSINE),
        "img": models.VectorParams(size=8, distance=models.Distance.EUCLID)})
    client.upsert("other", [models.PointStruct(id=ids[2], vector={k: v.tolist() for k, v in vecs[ids[2]].items()},
                                               payload=replay)])
    reports = verify(client, "other", trusted_keys=trusted(keys), now=NOW)
    assert {r.reason for r in reports} == {"collection_mismatch"}


def test_verify_default_vector_collection(keys, rng):
    client = QdrantClient(":memory:")
    client.create_collection("docs", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.DOT))
    vec = stored_form(rng.normal(size=DIM), distance="Dot")
    r = issue_receipt(keys["signer"], params=make_params(), vector=vec, collection="docs",
                      point_id=3, issued_at=NOW)
    client.upsert("docs", [models.PointStruct(id=3, vector=vec.tolist(),
                                              payload={RECEIPT_KEY: receipts_for_payload({"": r})})])
    reports = verify(client, "docs", trusted_keys=trusted(keys), now=NOW)
    assert [(rep.point_id, rep.vector_name, rep.reason) for rep in reports] == [(3, "", "ok")]
    assert verify(client, "docs", trusted_keys={}, now=NOW)[0].reason == "unknown_key"
    with pytest.raises(ValueError):
        verify(client, "docs", trusted_keys={}, batch_size=0)
