"""Second receipt review: the verify API with numpy vectors, huge coordinates and the lattice,
and keyed noise across representations of the same values."""
from __future__ import annotations

import base64
import warnings

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from qdrant_client import QdrantClient, models

from qdrant_guard import noise
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import InvalidVectorError
from qdrant_guard.receipts import (
    COMMIT_GRID,
    RECEIPT_KEY,
    SIGNATURE_PREFIX,
    ReceiptSigner,
    issue_receipt,
    receipts_for_payload,
    stored_form,
    verify,
    verify_receipt,
)

DIM = 8
KEY = bytes(range(32))
GAUSS = dict(mechanism="gaussian", epsilon=1.0, radius=0.01, delta=1e-6)


@pytest.fixture(scope="module")
def signer() -> ReceiptSigner:
    return ReceiptSigner(Ed25519PrivateKey.generate())


@pytest.fixture(scope="module")
def trusted(signer: ReceiptSigner) -> dict:
    return {signer.key_id: signer.public_key}


def _release(rows: int = 1, distance: str = "Cosine") -> tuple[np.ndarray, noise.NoiseParams]:
    x = np.random.default_rng(3).normal(size=(rows, DIM)).astype(np.float32)
    out, params = noise.privatize(x, clip_norm=1.0, key=KEY, **GAUSS)
    return np.stack([stored_form(r, distance=distance) for r in out]), params


@pytest.fixture(scope="module")
def stored(signer: ReceiptSigner) -> tuple[np.ndarray, dict]:
    vecs, params = _release()
    rec = issue_receipt(signer, params=params, vector=vecs[0], collection="c", point_id=1)
    return vecs[0], rec


def _check(rec: dict, vector, trusted: dict, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's ComplexWarning must not be the only signal
        return verify_receipt(rec, vector=vector, collection="c", point_id=1, trusted_keys=trusted, **kw)


# ------------------------------------------------------------------ 1. verify with numpy vectors
def _same_values(v: np.ndarray) -> dict:
    wide = np.zeros(2 * DIM, np.float32)
    wide[::2] = v
    return {
        "list": v.tolist(),
        "tuple": tuple(v.tolist()),
        "float32": v,
        "float64": v.astype(np.float64),
        "float32 strided view": wide[::2],
        "float64 strided view": wide.astype(np.float64)[::2],
        "Fortran column": np.asfortranarray(np.stack([v, v], axis=1))[:, 0],
        "big-endian float32": v.astype(">f4"),
        "list of np.float32": [np.float32(t) for t in v],
        "list of np.float64": [np.float64(t) for t in v],
        "read-only": np.frombuffer(v.tobytes(), np.float32),
    }


@pytest.mark.parametrize("form", list(_same_values(np.zeros(DIM, np.float32))))
def test_every_exact_form_of_the_stored_values_verifies(stored, trusted, form):
    # The commitment is to the 2^-20 grid integers, so float32 and float64 of the same values
    # (and views of them) are the same vector.
    v, rec = stored
    assert _check(rec, _same_values(v)[form], trusted).ok


def test_float64_values_off_the_stored_float32_by_a_grid_step_are_a_mismatch(stored, trusted):
    v, rec = stored
    moved = v.astype(np.float64)
    moved[3] += COMMIT_GRID
    assert _check(rec, moved, trusted).reason == "vector_mismatch"
    # Within half a grid step the rounding gives the same integers: the documented resolution.
    near = v.astype(np.float64)
    near[3] += 0.4 * COMMIT_GRID
    assert _check(rec, near, trusted).ok


def test_a_complex_vector_is_refused_not_verified_on_its_real_part(stored, trusted):
    # numpy's float64 conversion drops the imaginary part with only a ComplexWarning: a complex
    # vector whose real part is the stored one verified (a false accept).
    v, rec = stored
    with pytest.raises(InvalidVectorError, match="complex values.*list of floats"):
        _check(rec, v.astype(np.complex128) + 1j, trusted)


@pytest.mark.parametrize("bad,what", [
    (lambda v: [repr(float(t)) for t in v], "strings"),
    (lambda v: np.array([repr(float(t)) for t in v]), "strings"),
    (lambda v: v != 0, "bools"),
    (lambda v: np.array(list(v), dtype=object), "Python objects"),
    (lambda v: v.astype(np.float16), "float16, which cannot hold"),
    (lambda v: np.ma.masked_array(v, mask=[True] + [False] * (DIM - 1)), "masked"),
])
def test_values_numpy_would_convert_silently_are_refused_with_the_fix(stored, trusted, bad, what):
    # Strings were parsed (and verified), masked entries read from the hidden data, float16
    # reported as a changed stored vector.
    v, rec = stored
    with pytest.raises(InvalidVectorError, match=what) as info:
        _check(rec, bad(v), trusted)
    assert "float32/float64 numpy array" in str(info.value)


def test_the_argument_is_checked_before_the_receipt(trusted):
    # A bad vector argument raises whatever the receipt holds, as the other arguments do.
    with pytest.raises(InvalidVectorError, match="complex"):
        verify_receipt({}, vector=np.ones(DIM, np.complex64), collection="c", point_id=1,
                       trusted_keys=trusted)


@pytest.mark.parametrize("shape", [(1, DIM), (DIM, 1), ()])
def test_a_vector_that_is_not_1d_is_a_mismatch_naming_the_shape_and_the_fix(stored, trusted, shape):
    v, rec = stored
    arr = v.reshape(shape) if shape else np.float32(v[0])
    check = _check(rec, arr, trusted)
    assert check.reason == "vector_mismatch"
    assert f"shape {np.shape(arr)}" in check.detail and "pass vector[0]" in check.detail


def test_a_vector_of_another_length_is_a_mismatch_naming_both_lengths(stored, trusted):
    v, rec = stored
    check = _check(rec, np.concatenate([v, v]), trusted)
    assert check.reason == "vector_mismatch" and f"{2 * DIM} values" in check.detail
    assert f"dim is {DIM}" in check.detail


class _NumpyVectors(QdrantClient):
    """A real local-mode client whose reads hand back numpy vectors, as a caller's wrapper may."""

    def _arrays(self, points):
        for p in points:
            if isinstance(p.vector, dict):
                p.vector = {k: np.asarray(v, np.float32) for k, v in p.vector.items()}
            elif p.vector is not None:
                p.vector = np.asarray(p.vector, np.float32)
        return points

    def retrieve(self, *args, **kwargs):
        return self._arrays(super().retrieve(*args, **kwargs))

    def scroll(self, *args, **kwargs):
        points, offset = super().scroll(*args, **kwargs)
        return self._arrays(points), offset


@pytest.mark.parametrize("named", [True, False])
def test_verify_reads_numpy_vectors_of_named_and_default_vectors(signer, trusted, named):
    # Named numpy vectors crashed verify(): `v and ...` asks for an array's truth value.
    client = _NumpyVectors(":memory:")
    vname = "x" if named else ""
    params_cfg = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
    client.create_collection("c", vectors_config={vname: params_cfg} if named else params_cfg)
    vecs, params = _release(rows=3)
    points = []
    for i, v in enumerate(vecs):
        rec = issue_receipt(signer, params=params, vector=v, collection="c", point_id=i + 1, vector_name=vname)
        points.append(models.PointStruct(id=i + 1, vector={vname: v.tolist()} if named else v.tolist(),
                                         payload={RECEIPT_KEY: receipts_for_payload({vname: rec})}))
    client.upsert("c", points)
    for ids in (None, [1, 2, 3]):
        reports = verify(client, "c", ids, trusted_keys=trusted)
        assert [(r.point_id, r.vector_name, r.reason) for r in reports] == [(i, vname, "ok") for i in (1, 2, 3)]


def test_a_receipt_signed_far_in_the_future_is_not_yet_valid_not_an_overflow(stored, signer, trusted):
    # issued_at beyond float range raised OverflowError from verify_receipt with max_age_s
    # ("never raises for a bad receipt"). Dated ahead, it is not_yet_valid, max_age_s or not.
    v, rec = stored
    body = {k: val for k, val in rec.items() if k != "sig"}
    body["issued_at"] = 10 ** 400
    forged = dict(body, sig=base64.b64encode(signer.sign(SIGNATURE_PREFIX + canonical_json(body))).decode())
    assert _check(forged, v, trusted, max_clock_skew_s=None).ok  # the date check turned off
    for kw in ({}, {"max_age_s": 60.0}):
        check = _check(forged, v, trusted, now=1.7e9, **kw)
        assert check.reason == "not_yet_valid" and "future" in check.detail


# ------------------------------------------- 2. huge unclipped coordinates and a tiny lattice step
def _on_lattice(out: np.ndarray, step: float) -> bool:
    # v / step overflows for a huge v and a tiny step; such a v (|v| >= 2^52 step) has a float
    # spacing of step or coarser, so it is a multiple of step.
    x = out.astype(np.float64)
    with np.errstate(over="ignore"):
        q = x / step
    return bool(np.all((np.abs(x) >= 2.0 ** 52 * step) | (np.rint(q) == q)))


HUGE = [
    # (label, values, mechanism kwargs): coordinate / lattice_step overflows float64
    ("1.7e308 at step 2^-15", [1.7e308, -1.7e308, np.finfo(np.float64).max, 0.5], GAUSS),
    ("1e120 at a step near 2^-680", [1e120, -3e150, 1.0, 0.0],
     dict(mechanism="gaussian", epsilon=1.0, radius=1e-200, delta=1e-6)),
    ("laplace_l2, 1e300 at a step near 2^-1000", [1e300, -1e300, 1.0, 0.0],
     dict(mechanism="laplace_l2", epsilon=0.5, radius=1e-298)),
]


@pytest.mark.parametrize("label,values,kw", HUGE, ids=[h[0] for h in HUGE])
@pytest.mark.parametrize("key", [None, KEY], ids=["fresh", "keyed"])
def test_an_unclipped_huge_coordinate_is_released_not_refused_as_an_overflow(label, values, kw, key):
    # v * (1/step) overflowed to inf and the release of a finite value, already a multiple of the
    # step, failed as "overflows float64 after noising".
    x = np.tile(np.asarray(values), (3, 5))  # 20 coordinates: the SIMD body and its tail
    out, params = noise.privatize(x, clip_norm=None, key=key, **kw)
    assert np.isfinite(out).all() and _on_lattice(out, params.lattice_step)
    huge = np.abs(x) >= 2.0 ** 53 * params.lattice_step
    # Their float spacing is far above the noise scale: float64 cannot hold the noise there.
    assert np.array_equal(out[huge], x[huge])


@pytest.mark.parametrize("label,values,kw", HUGE, ids=[h[0] for h in HUGE])
def test_huge_coordinates_release_identically_in_both_kernels(label, values, kw):
    from qdrant_guard import _noise, _noise_py

    x = np.tile(np.asarray(values), (2, 9))  # 36 coordinates
    _, params = noise.privatize(x, clip_norm=None, key=KEY, **kw)
    args = (kw["mechanism"], params.scale, params.lattice_step, None, None, bytes(range(64)), bytes(12))
    assert np.array_equal(_noise.noise_vectors(x, *args), _noise_py.noise_vectors(x, *args))


_SIMD_HUGE = """
import sys, numpy as np
from qdrant_guard import _noise, _noise_py
rows = np.tile(np.array([1.7e308, -1.7e308, 1.0, 0.0, 1e300, np.finfo(np.float64).max, -0.25]), (3, 11))
rows[1] *= 1e-8   # still overflowing v / step at step 2^-1000
rows[2, ::2] = 0.5
keys, nonce = bytes(range(96)), bytes(12)
same = []
for x in (rows, rows[:, :13], np.clip(rows, -3e38, 3e38).astype(np.float32)):
    for mech in ("gaussian", "laplace_l2"):
        for scale, step in ((0.05, 2.0**-15), (2.0**-900, 2.0**-1000)):
            a = _noise.noise_vectors(x, mech, scale, step, None, None, keys[:32 * x.shape[0]], nonce)
            b = _noise_py.noise_vectors(x, mech, scale, step, None, None, keys[:32 * x.shape[0]], nonce)
            same.append(bool(np.array_equal(a, b) and np.isfinite(a).all()))
print(_noise.IMPLEMENTATION, same)
sys.exit(0 if all(same) else 1)
"""


@pytest.mark.parametrize("level", ["scalar", "sse2", "avx2", "avx512"])
def test_every_simd_level_releases_huge_coordinates_as_the_reference(level):
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _SIMD_HUGE], env={**os.environ, "QG_NOISE_SIMD": level},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("mod", ["_noise", "_noise_py"])
def test_a_release_that_really_overflows_is_still_refused(mod):
    import importlib

    kernel = importlib.import_module(f"qdrant_guard.{mod}")
    x = np.full((1, 16), np.finfo(np.float64).max)
    # Noise of scale 1e307 pushes some coordinate of the maximal double past the float64 range.
    with pytest.raises(InvalidVectorError, match="overflows float64 after noising"):
        kernel.noise_vectors(x, "gaussian", 1e307, 2.0 ** 990, None, None, KEY, bytes(12))


@pytest.mark.parametrize("dtype,values,step", [
    (np.float32, [3e38, 1.0, 0.3, -2.5e-7], 2.0 ** -15),    # float32 v / step overflowed to inf
    (np.float32, [3e38, 1.0, 0.3, -2.5e-7], 2.0 ** -200),   # a step below float32's range: NaN
    (np.float64, [1e300, 1.0, 0.3, -2.5e-7], 2.0 ** -1000),  # float64 v / step overflowed to inf
    (np.float64, [1.5, -0.2, 0.3, -2.5e-7], 2.0 ** -2),
])
def test_snap_to_lattice_snaps_as_the_kernel_does(dtype, values, step):
    from qdrant_guard import _noise_py

    x = np.asarray(values, dtype=dtype)
    got = noise.snap_to_lattice(x, step)
    want = np.array([_noise_py._snap(float(v), 1.0 / step, step) for v in x]).astype(dtype)
    assert got.dtype == dtype and np.isfinite(got).all()
    assert got.tobytes() == want.tobytes()  # -0.0 snaps to +0.0, as in the kernel


def test_a_tiny_step_release_is_receipted_and_verifies_below_the_grid_limit(signer, trusted):
    # The receipt path: privatize at a lattice step near 2^-1000, stored_form, issue, verify.
    x = np.array([[2000.0, -1999.5, 1e-3, 0.0] * 2])
    out, params = noise.privatize(x, clip_norm=None, key=KEY, mechanism="gaussian", epsilon=1.0,
                                  radius=1e-298, delta=1e-6)
    assert params.lattice_step <= 2.0 ** -980 and noise.check_release(params) is None
    v = stored_form(out[0], distance="Euclid")
    rec = issue_receipt(signer, params=params, vector=v, collection="c", point_id=1)
    assert _check(rec, v.tolist(), trusted).ok


def test_past_the_grid_limit_the_receipt_refuses_with_a_guard_error_naming_clip_norm():
    # privatize releases 3000 (on its lattice); the commitment grid cannot hold it. That was a
    # bare ValueError; it is an InvalidVectorError (still a ValueError) naming the fix.
    out, _ = noise.privatize(np.array([3000.0, 0.5, 0.25, 1.0]), clip_norm=None, key=KEY, **GAUSS)
    for call in (lambda: stored_form(out, distance="Euclid"),
                 lambda: issue_receipt(ReceiptSigner(Ed25519PrivateKey.generate()), params=_,
                                       vector=out, collection="c", point_id=1)):
        with pytest.raises(InvalidVectorError, match=r"magnitude (2999|300)\S*;.*clip_norm"):
            call()
    with pytest.raises(InvalidVectorError, match="magnitude 1.7e"):
        stored_form([1.7e308, 0.0], distance="Dot")  # the magnitude, not inf


def test_a_guarded_write_without_clip_norm_past_the_grid_limit_is_refused_as_a_guard_error(tmp_path):
    from tests.guardkit import make_kit
    from qdrant_guard.client import QdrantClient as GuardedClient
    from qdrant_guard.errors import QdrantGuardError

    kit = make_kit(tmp_path)
    off = {"diversity": {"enabled": False}, "intent": {"enabled": False}}
    cfg = kit.config({name: {"class": "PII", "owner": "hr", "noise": {"clip_norm": None}, **off}
                      for name in ("euclid", "cosine")})
    alice = GuardedClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    for name, dist in (("euclid", models.Distance.EUCLID), ("cosine", models.Distance.COSINE)):
        alice.create_collection(name, vectors_config=models.VectorParams(size=4, distance=dist))
    with pytest.raises(QdrantGuardError, match="magnitude .*clip_norm"):
        alice.upsert("euclid", [models.PointStruct(id=1, vector=[3000.0, 0.5, 0.25, 1.0], payload={"source": "a"})])
    assert alice.count("euclid").count == 0
    # Cosine normalises the release, so no coordinate is large and the write is receipted.
    alice.upsert("cosine", [models.PointStruct(id=1, vector=[1e30, 0.5, 0.25, 1.0], payload={"source": "a"})])
    stored = alice.retrieve("cosine", [1], with_vectors=True)[0]
    assert abs(float(np.linalg.norm(stored.vector)) - 1.0) < 1e-6


# --------------------------------- 3. keyed noise is keyed by the exact bytes, not canonicalised
def test_keyed_noise_follows_the_exact_row_bytes_and_stays_bit_identical():
    # Deliberately not canonicalised (docs/privacy.md): canonicalising would change the keyed
    # noise of every vector already released. 0.0 and -0.0, float32 and float64 of the same
    # values, and a float64 coordinate below 2^-511 (read as 0.0) and 0.0 get independent noise.
    import hashlib

    base = np.array([0.5, 0.0, -0.25, 0.125, 0.0, 1.0, -0.5, 0.75])
    neg, tiny = base.copy(), base.copy()
    neg[1], tiny[4] = -0.0, 1e-300
    known = {  # SHA-256 (first 32 hex digits) of the keyed releases; both kernels give these
        "float64": (base, "c2f9b56a1b195749c30ef0cc334980eb"),
        "float64 with -0.0": (neg, "f9686fec67a02030f58d5bee7d3fc309"),
        "float64 with 1e-300": (tiny, "78e644a6b5239d80a64f84d14a545e75"),
        "float32": (base.astype(np.float32), "ffa29e24db0ef47b5099f318b65b4884"),
        "float32 with -0.0": (neg.astype(np.float32), "d90d4feeda7529cbbe81093a3d9b7128"),
    }
    outs = {}
    for label, (x, digest) in known.items():
        out, _ = noise.privatize(x, clip_norm=1.0, key=KEY, **GAUSS)
        again, _ = noise.privatize(x.copy(), clip_norm=1.0, key=KEY, **GAUSS)
        assert out.tobytes() == again.tobytes(), label
        assert hashlib.sha256(out.tobytes()).hexdigest()[:32] == digest, label
        outs[label] = out.astype(np.float64)
    labels = list(outs)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            assert not np.array_equal(outs[a], outs[b]), (a, b)
    text = " ".join(open(__file__.replace("tests/test_receipt_review2.py", "docs/privacy.md")).read().split())
    assert "`0.0` and `-0.0`" in text and "not canonicalised" in text


# ------------------------------------------------------------------ 4. other verification gaps
@pytest.mark.parametrize("one_shot", [iter, lambda ids: (k for k in ids)], ids=["iterator", "generator"])
def test_verify_applies_a_one_shot_revocation_list_to_every_point(signer, trusted, one_shot):
    # verify() handed the same iterable to each verify_receipt call: the first point consumed it
    # and the revoked key verified on every later point (a false accept).
    client = QdrantClient(":memory:")
    client.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    vecs, params = _release(rows=3)
    client.upsert("c", [
        models.PointStruct(id=i + 1, vector=v.tolist(), payload={RECEIPT_KEY: receipts_for_payload(
            {"": issue_receipt(signer, params=params, vector=v, collection="c", point_id=i + 1)})})
        for i, v in enumerate(vecs)])
    reports = verify(client, "c", trusted_keys=trusted, revoked=one_shot([signer.key_id]))
    assert [r.reason for r in reports] == ["revoked_key"] * 3
