"""Review of the differential-privacy claims (docs/privacy.md, qdrant_guard/noise.py) against the code.

The calibration is checked against an independent 60-digit evaluation of Balle & Wang's condition
(mpmath), not against the code's own formula.
"""
from __future__ import annotations

import dataclasses
import math

import mpmath as mp
import numpy as np
import pytest

from qdrant_guard import noise


def _exact_delta(sigma: float, epsilon: float, sensitivity: float):
    """Balle & Wang (2018), Theorem 8, in 60-digit arithmetic."""
    with mp.workdps(60):
        s, e, d = mp.mpf(sigma), mp.mpf(epsilon), mp.mpf(sensitivity)
        a, b = d / (2 * s), e * s / d
        return mp.ncdf(a - b) - mp.exp(e) * mp.ncdf(-a - b)


# ------------------------------------------------------------- 1. analytic Gaussian calibration
# Corners where float64 evaluation of the condition breaks down: tiny epsilon with tiny delta (the
# two terms cancel) and large epsilon (e^eps * Phi(-a-b) underflows to 0 in the old evaluation).
GRID = [(eps, dlt) for eps in (1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 0.01, 0.1, 0.5, 1.0, 4.0, 8.0, 32.0, 100.0,
                               300.0, 700.0, 1000.0)
        for dlt in (1e-300, 1e-100, 1e-50, 1e-12, 1e-6, 1e-2, 0.5, 0.999)]


@pytest.mark.parametrize("sensitivity", [1e-6, 0.01, 1.0, 100.0])
def test_calibrated_sigma_meets_delta_and_is_minimal_on_a_grid(sensitivity):
    bad = []
    for eps, dlt in GRID:
        sigma = noise.calibrate_gaussian_sigma(eps, dlt, sensitivity)
        exact = _exact_delta(sigma, eps, sensitivity)
        # Privacy: the stated (epsilon, delta) holds for the returned sigma (docs/privacy.md states
        # the bound 5e-11 relative).
        if exact > dlt * (1 + 5e-11):
            bad.append(f"eps={eps:g} delta={dlt:g}: exact delta(sigma)/delta = {float(exact / dlt):.6g}")
        # "smallest sigma": a sigma 1e-9 smaller no longer meets delta.
        if _exact_delta(sigma * (1 - 1e-9), eps, sensitivity) <= dlt:
            bad.append(f"eps={eps:g} delta={dlt:g}: sigma {sigma!r} is not the smallest "
                       f"(delta(sigma)/delta = {float(exact / dlt):.6g})")
    assert not bad, "\n".join(bad)


def test_analytic_gaussian_delta_matches_a_60_digit_evaluation():
    rng = np.random.default_rng(11)
    worst = (0.0, None)
    for _ in range(1500):
        eps = 10 ** rng.uniform(-13, 3)
        ratio = 10 ** rng.uniform(-3, 14)  # sigma / sensitivity
        sens = 10 ** rng.uniform(-4, 2)
        exact = _exact_delta(ratio * sens, eps, sens)
        if exact < 1e-290:
            continue
        got = noise.analytic_gaussian_delta(ratio * sens, eps, sens)
        rel = abs(float(got / exact - 1))
        if rel > worst[0]:
            worst = (rel, (eps, ratio, sens, float(exact)))
    assert worst[0] < 5e-11, worst


def test_sigma_decreases_with_epsilon_at_every_delta():
    # utility.UtilityRecord orders measured levels by epsilon as a proxy for the noise scale.
    for dlt in (1e-300, 1e-50, 1e-6):
        sig = [noise.calibrate_gaussian_sigma(e, dlt, 1.0) for e in (1e-12, 1e-8, 1e-4, 0.1, 1, 10, 100, 999)]
        assert sig == sorted(sig, reverse=True), (dlt, sig)


@pytest.mark.parametrize("eps,dlt,sigma", [
    # Values of tests/test_noise_published_sigma.py (dp_accounting): the fix must not move them.
    (0.1, 1e-5, 30.749566131977407), (0.5, 1e-6, 8.057618480725047), (1.0, 1e-6, 4.2246788893268326),
    (8.0, 1e-5, 0.6002290721989517),
])
def test_ordinary_calibrations_are_unchanged(eps, dlt, sigma):
    assert noise.calibrate_gaussian_sigma(eps, dlt, 1.0) == pytest.approx(sigma, rel=1e-12)


@pytest.mark.parametrize("dlt", [1e-301, 1e-320, 5e-324])
def test_delta_below_the_resolvable_range_is_refused_by_name(dlt):
    # A subnormal target cannot be met to float precision: 5e-324 used to give exact delta(sigma)
    # 1.5 times the target, while the guarantee stated the target.
    with pytest.raises(ValueError, match="delta must be at least 1e-300"):
        noise.calibrate_gaussian_sigma(1.0, dlt, 1.0)
    with pytest.raises(ValueError, match="delta"):
        noise.privatize(np.ones(4, np.float32), mechanism="gaussian", epsilon=1.0, delta=dlt, radius=0.01)


# ------------------------------------------------------------- 2. errors name the bad parameter
def test_a_sigma_that_overflows_is_refused_not_returned():
    # Used to return inf (the bracket doubled past float64's range).
    with pytest.raises(ValueError, match=r"sensitivity=1e\+308"):
        noise.calibrate_gaussian_sigma(1.0, 1e-6, 1e308)


@pytest.mark.parametrize("epsilon", [1e-310, 1e-300])
def test_laplace_scale_overflow_names_epsilon_and_radius(epsilon):
    # Used to say "scale must be a finite number > 0, got inf": no such argument was passed.
    with pytest.raises(ValueError, match=r"epsilon=1e-3\d\d") as info:
        noise.privatize(np.ones(4, np.float32), mechanism="laplace_l2", epsilon=epsilon, radius=0.01)
    assert "radius=0.01" in str(info.value)


def test_noise_that_overflows_float32_names_the_noise_scale():
    # A policy may set laplace_l2 with epsilon 1e-40 (epsilon > 0 is all it requires): the noise
    # scale is 1e38 and the release overflows float32. The error blamed the vector's values.
    x = np.full(384, 0.05, np.float32)
    with pytest.raises(noise.InvalidVectorError, match="noise scale") as info:
        noise.privatize(x, mechanism="laplace_l2", epsilon=1e-40, radius=0.01, clip_norm=1.0)
    assert "epsilon" in str(info.value)


def test_receipts_calibrated_before_the_accuracy_fix_still_check():
    # The more accurate delta(sigma) moved this calibration up by 4e-14 relative; a release signed
    # with the earlier value (same mechanism_version) must not be refused for it.
    want = noise._params("gaussian", 0.05, 1e-15, 0.01, 1.0, 1536, "float32", noise.RNG_KEYED)
    earlier = dataclasses.replace(want, scale=6.7912696321832815)
    assert earlier.scale < want.scale
    assert noise.check_release(earlier) is None
    # ... but a scale visibly below the calibration still is.
    assert "below the calibrated" in noise.check_release(dataclasses.replace(want, scale=want.scale * (1 - 1e-9)))


def test_policy_refuses_a_gaussian_delta_the_calibration_cannot_meet(tmp_path):
    # The policy accepted delta = 1e-310; every noised write then failed with a bare ValueError.
    from guardkit import make_kit

    from qdrant_guard.errors import ConfigError

    kit = make_kit(tmp_path)
    with pytest.raises(ConfigError, match="delta"):
        kit.config({"pii": {"class": "PII", "owner": "hr",
                            "noise": {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-310}}})
    kit.config({"pii": {"class": "PII", "owner": "hr",
                        "noise": {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-300}}})


def test_an_overflow_from_the_values_does_not_blame_a_tiny_noise_scale():
    # 1e100 at a lattice step near 2^-840 is no overflow: it is a multiple of the step and is
    # released as it is (it was refused because 1e100 / step overflowed; tests/test_receipt_review2.py).
    out, _ = noise.privatize(np.full(8, 1e100), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=1e-250)
    assert np.array_equal(out, np.full(8, 1e100))
    # Values at float64's limit pushed past it by noise far below the limit.
    x = np.full(8, np.finfo(np.float64).max)
    with pytest.raises(noise.InvalidVectorError, match="values are too large") as info:
        noise.privatize(x, mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=1e298, key=bytes(range(32)))
    assert "noise scale" not in str(info.value)


# ------------------------------------------------------------- 3. the stated guarantee
@pytest.mark.parametrize("mechanism,delta", [("gaussian", 1.23456789e-6), ("laplace_l2", None)])
def test_the_guarantee_sentence_states_the_parameters_exactly(mechanism, delta):
    # The sentence used f"{x:g}" (6 digits): epsilon 0.1234567 read "0.123457" and radius
    # 0.0123456789 read "0.0123457" — a smaller epsilon at a larger radius than provided.
    eps, radius, clip = 0.1234567, 0.0123456789, 0.987654321
    _, p = noise.privatize(np.ones(16, np.float32) / 4, mechanism=mechanism, epsilon=eps, radius=radius,
                           delta=delta, clip_norm=clip)
    for fragment in (f"epsilon={eps!r}", f"radius={radius!r}", f"L2 norm {clip!r}",
                     f"multiples of {p.lattice_step!r}"):
        assert fragment in p.guarantee, (fragment, p.guarantee)
    if delta is not None:
        assert f"delta={delta!r}" in p.guarantee, p.guarantee
    # Ordinary values read as before.
    _, q = noise.privatize(np.ones(16, np.float32) / 4, mechanism="gaussian", epsilon=1.0, radius=0.01,
                           delta=1e-6, clip_norm=1.0)
    assert "(epsilon=1, delta=1e-06)" in q.guarantee and "radius=0.01 " in q.guarantee


# ------------------------------------------------------------- 4. keyed deterministic noise
def test_keyed_noise_depends_on_key_parameters_and_exact_row_only():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 64)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    kw = dict(mechanism="gaussian", epsilon=1.0, radius=0.01, delta=1e-6, clip_norm=1.0)
    key = bytes(range(32))
    batch, _ = noise.privatize(x, key=key, **kw)
    # The same row alone, again, or in a strided view of another batch: the same release.
    assert np.array_equal(noise.privatize(x[2], key=key, **kw)[0], batch[2])
    wide = np.zeros((4, 128), np.float32)
    wide[:, ::2] = x
    assert np.array_equal(noise.privatize(wide[:, ::2], key=key, **kw)[0], batch)
    # Another key, other parameters or one ulp in one coordinate: independent noise (so the noise
    # differences are of the noise's size, not of the input change).
    sigma = noise.privatize(x[0], key=key, **kw)[1].scale
    other = [noise.privatize(x[0], key=bytes(32), **kw)[0],
             noise.privatize(x[0], key=key, **{**kw, "epsilon": 1.0 + 1e-12})[0]]
    y = x[0].copy()
    y[5] = np.nextafter(y[5], np.float32(1))
    other.append(noise.privatize(y, key=key, **kw)[0])
    for o in other:
        assert np.std(o - batch[0]) > 0.5 * sigma
    # float32 and float64 copies of one vector are different releases (docs/privacy.md: "the same
    # exact vector bytes (and dtype)").
    assert not np.allclose(noise.privatize(x[0].astype(np.float64), key=key, **kw)[0], batch[0],
                           atol=3 * noise.privatize(x[0], key=key, **kw)[1].lattice_step)


@pytest.mark.parametrize("mechanism,delta", [("gaussian", 1e-6), ("laplace_l2", None)])
def test_the_guarantee_sentence_says_it_is_for_the_ideal_noise(mechanism, delta):
    # docs/privacy.md: bounded samplers cannot be pure DP (laplace_l2 is (epsilon, ~1e-34), the
    # Gaussian's delta grows by about d * 2.3e-34); the per-release sentence said "delta=0" flatly.
    _, p = noise.privatize(np.ones(384, np.float32) / 20, mechanism=mechanism, epsilon=1.0, radius=0.01,
                           delta=delta, clip_norm=1.0)
    assert "ideal noise" in p.guarantee and "8.8e-32" in p.guarantee, p.guarantee


def test_clip_l2_reaches_clip_norm_up_to_rounding_only():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5000, 384)) * 3
    norms = np.linalg.norm(noise.clip_l2(x, 1.0), axis=1)
    assert np.all(np.abs(norms - 1.0) <= 1e-15)
    assert "up to rounding" in noise.clip_l2.__doc__


def test_keyed_noise_of_zero_and_negative_zero_differs_as_documented():
    # policy.md (keyed): "the same float32 values bit for bit (0.0 and -0.0 differ)".
    x = np.zeros(32, np.float32)
    x[0] = 1.0
    y = x.copy()
    y[1] = -0.0
    kw = dict(mechanism="gaussian", epsilon=1.0, radius=0.01, delta=1e-6, clip_norm=1.0, key=bytes(range(32)))
    a, p = noise.privatize(x, **kw)
    b, _ = noise.privatize(y, **kw)
    assert np.std(a - b) > 0.5 * p.scale
    from qdrant_guard.policy import NoisePolicy

    assert "0.0 and -0.0 differ" in (NoisePolicy.model_fields["keyed"].description or "")


def test_the_keyed_guess_oracle_spans_collections_with_the_same_noise_parameters(tmp_path):
    # docs/privacy.md ("Known limit of keyed mode") said the remedy against write-then-compare is no
    # write access to *the* collection. Keyed noise does not depend on the collection, so a reader
    # of A who may write B (same guard key, same noise parameters and dimension) confirms a guess
    # about A's vector through B.
    from guardkit import make_kit, models

    from qdrant_guard import QdrantClient

    dim = 32
    kit = make_kit(tmp_path)
    off = {"diversity": {"enabled": False}, "intent": {"enabled": False}}
    cfg = kit.config({
        "victim": {"class": "PII", "owner": "hr", "readers": ["support"], **off},  # support cannot write
        "mine": {"class": "PII", "owner": "support", **off},                      # support's own
    })
    alice = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    bob = alice.with_principal(kit.principal("bob", "support"))
    for client, name in ((alice, "victim"), (bob, "mine")):
        client.create_collection(name, vectors_config=models.VectorParams(size=dim, distance=models.Distance.DOT))
    rng = np.random.default_rng(8)
    secret = rng.normal(size=dim)
    secret = (secret / np.linalg.norm(secret)).astype(np.float32).tolist()
    alice.upsert("victim", [models.PointStruct(id=1, vector=secret, payload={"source": "a"})])
    with pytest.raises(Exception):
        bob.upsert("victim", [models.PointStruct(id=2, vector=secret, payload={"source": "a"})])
    released = bob.retrieve("victim", ids=[1], with_vectors=True)[0].vector
    guesses = {"right": secret, "wrong": (np.asarray(secret) * np.float32(0.999)).tolist()}
    seen = {}
    for i, (label, guess) in enumerate(guesses.items()):
        bob.upsert("mine", [models.PointStruct(id=10 + i, vector=guess, payload={"source": "b"})])
        seen[label] = bob.retrieve("mine", ids=[10 + i], with_vectors=True)[0].vector
    assert seen["right"] == released and seen["wrong"] != released
    text = " ".join(open(__file__.replace("tests/test_review_dp.py", "docs/privacy.md")).read().split())
    assert "any collection the guard noises with the same key and noise parameters" in text


# ------------------------------------------------------------- 5. the lattice
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mechanism,epsilon,radius,delta", [
    ("gaussian", 1.0, 0.01, 1e-6),        # step 2^-15
    ("laplace_l2", 1.0, 0.01, None),
    ("gaussian", 1.0, 1e-200, 1e-6),      # step far below float32's smallest subnormal
    ("gaussian", 1e-3, 2.0, 1e-6),        # step 2: coarser than a float32 ulp up to 2^24
    ("laplace_l2", 0.5, 1e-40, None),
])
@pytest.mark.parametrize("key", [None, bytes(range(32))])
def test_every_release_is_on_its_lattice_at_every_magnitude(dtype, mechanism, epsilon, radius, delta, key):
    rng = np.random.default_rng(1)
    for mag in (0.0, 1e-40, 1e-10, 1.0, 1e10, 1e30):
        x = (rng.normal(size=(3, 64)) * mag).astype(dtype)
        out, p = noise.privatize(x, mechanism=mechanism, epsilon=epsilon, radius=radius, delta=delta, key=key)
        assert out.dtype == dtype
        q = out.astype(np.float64) / p.lattice_step
        assert np.all(np.isfinite(q)) and np.array_equal(q, np.round(q)), (mag, p.lattice_step)


def test_lattice_step_of_a_subnormal_scale_is_not_one_half():
    # scale/1024 underflowed to 0 and frexp(0) made the step 2^-1 = 0.5: a step 2^1074 times the
    # noise scale instead of 1/1024 of it, and the "too small to snap" refusal never triggered.
    assert noise.lattice_step(5e-324) == 0.0
    assert noise.lattice_step(1e-310) == 2.0 ** (math.frexp(1e-310)[1] - 11)
    for scale in (1e-300, 3e-5, 1.0, 1e300):  # unchanged elsewhere
        assert noise.lattice_step(scale) == 2.0 ** math.floor(math.log2(scale / 1024))
    for mechanism, delta in (("laplace_l2", None), ("gaussian", 1e-6)):
        with pytest.raises(ValueError, match="too small to snap"):
            noise.privatize(np.zeros(4), mechanism=mechanism, epsilon=1.0, delta=delta, radius=5e-324)


def test_utility_calibrate_refuses_an_unresolvable_delta_up_front():
    from qdrant_guard.utility import calibrate

    # Checked with the other arguments, before any client call (the client here has no methods).
    with pytest.raises(ValueError, match=r"1e-300 <= delta"):
        calibrate(object(), "c", ["q"], radius=0.01, delta=1e-310, progress=False)
