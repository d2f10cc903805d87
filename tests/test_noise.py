"""Noise kernel: known answers, twin equality, argument errors, calibration, keyed release."""
from __future__ import annotations

import math

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from oracle import assert_same, both
from qdrant_guard import noise
from qdrant_guard.errors import InvalidVectorError

NATIVE, PY = both("noise")
KEY = bytes(range(32))
NONCE = bytes.fromhex("000000090000004a00000000")


# ------------------------------------------------------------------ ChaCha20 known answers
@pytest.mark.parametrize("mod", [NATIVE, PY], ids=["native", "python"])
def test_rfc8439_block_2_3_2(mod):
    expected = bytes.fromhex(
        "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
        "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e"
    )
    assert mod.chacha20_block(KEY, 1, NONCE) == expected


@pytest.mark.parametrize("mod", [NATIVE, PY], ids=["native", "python"])
def test_rfc8439_encryption_2_4_2(mod):
    plaintext = (b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for "
                 b"the future, sunscreen would be it.")
    nonce = bytes.fromhex("000000000000004a00000000")
    stream = mod.chacha20_stream(KEY, nonce, 1, len(plaintext))
    ciphertext = bytes(a ^ b for a, b in zip(plaintext, stream))
    assert ciphertext[:16] == bytes.fromhex("6e2e359a2568f98041ba0728dd0d6981")
    assert ciphertext[-2:] == bytes.fromhex("874d")


@pytest.mark.parametrize("mod", [NATIVE, PY], ids=["native", "python"])
def test_rfc8439_a1_vector1(mod):
    expected = bytes.fromhex(
        "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
        "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"
    )
    assert mod.chacha20_block(bytes(32), 0, bytes(12)) == expected


@pytest.mark.parametrize("counter", [0, 1, 0xFFFFFFF9])
@pytest.mark.parametrize("nbytes", [64, 64 * 9 + 7, 64 * 70])
def test_stream_matches_cryptography(counter, nbytes):
    # cryptography's ChaCha20 takes a 16-byte nonce: 4-byte LE counter then the 12-byte RFC nonce.
    # Near the 32-bit wrap the SIMD paths hand over to the scalar one; check all of them.
    if counter + (nbytes + 63) // 64 > 0xFFFFFFFF:
        pytest.skip("cryptography's counter carry differs from ours past 2**32 blocks")
    enc = Cipher(algorithms.ChaCha20(KEY, counter.to_bytes(4, "little") + NONCE), None).encryptor()
    reference = enc.update(bytes(nbytes))
    assert NATIVE.chacha20_stream(KEY, NONCE, counter, nbytes) == reference


def test_stream_counter_carry_twins():
    assert_same(NATIVE.chacha20_stream, PY.chacha20_stream, KEY, NONCE, 0xFFFFFFFD, 64 * 12)


# ------------------------------------------------------------------ twins agree bit for bit
def test_ziggurat_header_matches_reference():
    import pathlib
    import re

    header = (pathlib.Path(__file__).parents[1] / "native" / "ziggurat_tables.h").read_text()
    r, xs, fs = PY.ziggurat_tables()
    literals = [float.fromhex(h) for h in re.findall(r"-?0x[0-9a-f.]+p[+-]\d+|0x0\.0p\+0", header)]
    assert literals == [r, *xs, *fs]


def test_samplers_twins():
    assert_same(NATIVE.normals, PY.normals, KEY, NONCE, 30000)
    assert_same(NATIVE.gammas, PY.gammas, KEY, NONCE, 1.0, 3000)
    assert_same(NATIVE.gammas, PY.gammas, KEY, NONCE, 768, 300)


_vectors = hnp.arrays(
    dtype=st.sampled_from([np.float32, np.float64]),
    shape=st.one_of(hnp.array_shapes(min_dims=1, max_dims=1, min_side=1, max_side=24),
                    hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=6)),
    elements=st.floats(-1e6, 1e6, width=32),
)


@settings(max_examples=60, deadline=None)
@given(
    x=_vectors,
    mechanism=st.sampled_from(["gaussian", "laplace_l2"]),
    clip=st.sampled_from([None, 0.5, 1e9]),
    keyed=st.booleans(),
    transpose=st.booleans(),
    readonly=st.booleans(),
)
def test_noise_vectors_twins(x, mechanism, clip, keyed, transpose, readonly):
    if transpose and x.ndim == 2:
        x = x.T  # non-contiguous view
    x.flags.writeable = not readonly
    before = x.copy()
    rows = 1 if x.ndim == 1 else x.shape[0]
    row_keys = bytes(range(256))[: 32] * rows if keyed else None
    stream_key = None if keyed else KEY
    out = assert_same(NATIVE.noise_vectors, PY.noise_vectors, x, mechanism, 0.25, 2.0**-10, clip,
                      stream_key, row_keys, NONCE)
    assert np.array_equal(x, before)
    assert out.dtype == x.dtype and out.shape == x.shape and out.flags.c_contiguous


@pytest.mark.parametrize(
    "args",
    [
        (None, "gaussian", 0.1, 0.5, None, KEY, None, NONCE),
        ([1.0, 2.0], "gaussian", 0.1, 0.5, None, KEY, None, NONCE),
        (np.arange(4), "gaussian", 0.1, 0.5, None, KEY, None, NONCE),
        (np.zeros(3, ">f8"), "gaussian", 0.1, 0.5, None, KEY, None, NONCE),
        (np.zeros((2, 2, 2)), "gaussian", 0.1, 0.5, None, KEY, None, NONCE),
        (np.zeros((0, 3)), "gaussian", 0.1, 0.5, None, KEY, None, NONCE),
        (np.array([[1.0, 2.0], [1.0, np.nan]]), "gaussian", 0.1, 0.5, None, KEY, None, NONCE),
        (np.array([1.0, np.inf], np.float32), "laplace_l2", 0.1, 0.5, None, KEY, None, NONCE),
        (np.array([1e300, 1e300]), "gaussian", 0.1, 0.5, 1.0, KEY, None, NONCE),
        (np.full(8, 3.4e38, np.float32), "gaussian", 1e38, 2.0**100, None, KEY, None, NONCE),
        (np.ones(3), None, 0.1, 0.5, None, KEY, None, NONCE),
        (np.ones(3), "laplace", 0.1, 0.5, None, KEY, None, NONCE),
        (np.ones(3), "gaussian", None, 0.5, None, KEY, None, NONCE),
        (np.ones(3), "gaussian", -1.0, 0.5, None, KEY, None, NONCE),
        (np.ones(3), "gaussian", float("nan"), 0.5, None, KEY, None, NONCE),
        (np.ones(3), "gaussian", 0.1, 0.3, None, KEY, None, NONCE),
        (np.ones(3), "gaussian", 0.1, None, None, KEY, None, NONCE),
        (np.ones(3), "gaussian", 0.1, 0.5, "1", KEY, None, NONCE),
        (np.ones(3), "gaussian", 0.1, 0.5, 0.0, KEY, None, NONCE),
        (np.ones(3), "gaussian", 0.1, 0.5, None, b"short", None, NONCE),
        (np.ones(3), "gaussian", 0.1, 0.5, None, "k" * 32, None, NONCE),
        (np.ones(3), "gaussian", 0.1, 0.5, None, KEY, KEY, NONCE),
        (np.ones((2, 3)), "gaussian", 0.1, 0.5, None, None, KEY, NONCE),
        (np.ones(3), "gaussian", 0.1, 0.5, None, KEY, None, None),
        (np.ones(3), "gaussian", 0.1, 0.5, None, KEY, None, b"12"),
        (np.ones(3), "gaussian", True, 0.5, None, KEY, None, NONCE),
    ],
)
def test_noise_vectors_same_errors(args):
    err = assert_same(NATIVE.noise_vectors, PY.noise_vectors, *args)
    assert isinstance(err, (TypeError, ValueError)), err


def test_valid_numeric_types_take_the_slow_path_identically():
    x = np.ones((2, 3), np.float32)
    assert_same(NATIVE.noise_vectors, PY.noise_vectors, x, "gaussian", np.float32(0.5), 1, 2,
                KEY, None, NONCE)


@pytest.mark.parametrize(
    "name,args",
    [
        ("chacha20_block", (KEY, 1, NONCE)),
        ("chacha20_stream", (KEY, NONCE, 0, 64)),
        ("normals", (KEY, NONCE, 5)),
        ("gammas", (KEY, NONCE, 2.0, 5)),
        ("check_vectors", (np.ones(2),)),
        ("noise_vectors", (np.ones(2), "gaussian", 0.1, 0.5, None, KEY, None, NONCE)),
        ("fresh_noise_cached", (np.ones(2), {}, "gaussian", 1.0, 0.5, 1e-6, 1.0)),
    ],
)
def test_native_entry_points_are_none_safe(name, args):
    for i in range(len(args)):
        bad = args[:i] + (None,) + args[i + 1:]
        if name == "fresh_noise_cached":  # a miss (None) whatever is None; delta/clip may be None
            assert getattr(NATIVE, name)(*bad) is None is getattr(PY, name)(*bad)
            continue
        if name == "noise_vectors" and i == 5:  # no stream key: fresh OS-keyed noise, twins differ
            assert getattr(NATIVE, name)(*bad).shape == (2,)
            continue
        result = assert_same(getattr(NATIVE, name), getattr(PY, name), *bad)
        if name == "noise_vectors" and i in (4, 6):  # clip_norm / row_keys may be None
            continue
        assert isinstance(result, (TypeError, ValueError)), (name, i, result)


def test_native_has_reference_docstrings():
    assert NATIVE.noise_vectors.__doc__ == PY.noise_vectors.__doc__


# ------------------------------------------------------------------ calibration
def test_calibration_satisfies_the_defining_equation():
    for eps, delta, sens in [(0.1, 1e-5, 1.0), (1.0, 1e-6, 0.3), (4.0, 1e-9, 2.0), (20.0, 1e-5, 1.0)]:
        sigma = noise.calibrate_gaussian_sigma(eps, delta, sens)
        assert noise.analytic_gaussian_delta(sigma, eps, sens) <= delta
        assert noise.analytic_gaussian_delta(sigma * (1 - 1e-9), eps, sens) > delta
        assert math.isclose(noise.calibrate_gaussian_sigma(eps, delta, 1.0) * sens, sigma, rel_tol=1e-9)


def test_calibration_against_scipy_log_space_formula():
    # Independent evaluation of Balle & Wang (2018) Theorem 8 with scipy's log-CDF.
    from scipy.stats import norm

    for eps, delta in [(0.5, 1e-5), (1.0, 1e-5), (3.0, 1e-7)]:
        s = noise.calibrate_gaussian_sigma(eps, delta, 1.0)
        d = norm.cdf(1 / (2 * s) - eps * s) - math.exp(eps) * norm.cdf(-1 / (2 * s) - eps * s)
        assert math.isclose(d, delta, rel_tol=1e-6)


@pytest.mark.parametrize("eps", [0.05, 0.3, 0.99])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-9])
def test_analytic_sigma_never_exceeds_classic(eps, delta):
    classic = math.sqrt(2 * math.log(1.25 / delta)) / eps
    assert noise.calibrate_gaussian_sigma(eps, delta, 1.0) <= classic


@pytest.mark.parametrize("args,exc", [
    ((0.0, 1e-5, 1.0), ValueError), ((1.0, 1.0, 1.0), ValueError), ((1.0, 1e-5, -1.0), ValueError),
    (("1", 1e-5, 1.0), TypeError), ((1.0, None, 1.0), TypeError), ((float("inf"), 1e-5, 1.0), ValueError),
])
def test_calibration_errors(args, exc):
    with pytest.raises(exc):
        noise.calibrate_gaussian_sigma(*args)


def test_lattice_step_is_the_power_of_two_below_scale_over_1024():
    for scale in [1.0, 0.3, 1024.0, 5e-3, 1234.5]:
        step = noise.lattice_step(scale)
        assert math.frexp(step)[0] == 0.5 and step <= scale / 1024 < 2 * step


@pytest.mark.parametrize("mechanism,delta", [("gaussian", 1e-6), ("laplace_l2", None)])
def test_params_account_for_the_lattice(mechanism, delta):
    x = np.ones((3, 100), np.float32)
    _, p = noise.privatize_seeded_for_tests(x, mechanism=mechanism, epsilon=2.0, radius=0.5,
                                            delta=delta, clip_norm=1.0, seed=1)
    sensitivity = 0.5 + 10.0 * p.lattice_step
    if mechanism == "gaussian":
        nominal = noise.calibrate_gaussian_sigma(2.0, 1e-6, 0.5)
        assert p.scale == noise.calibrate_gaussian_sigma(2.0, 1e-6, sensitivity) > nominal
    else:
        nominal = 0.5 / 2.0
        assert p.scale == sensitivity / 2.0
    assert p.lattice_step == noise.lattice_step(nominal)
    assert (p.mechanism, p.epsilon, p.radius, p.clip_norm, p.dim, p.dtype) == (
        mechanism, 2.0, 0.5, 1.0, 100, "float32")
    assert p.delta == (1e-6 if delta else 0.0)
    assert p.rng_id == "chacha20-seeded-TEST-ONLY-v2"
    for fragment in (mechanism, "epsilon=2", "radius=0.5", f"delta={p.delta:g}", "clip", "sqrt(100)"):
        assert fragment in p.guarantee, fragment


def test_unclipped_guarantee_says_inputs_as_given():
    _, p = noise.privatize(np.ones(4), mechanism="laplace_l2", epsilon=1.0, radius=1.0)
    assert "as given, not clipped" in p.guarantee and p.clip_norm is None
    assert p.rng_id == noise.RNG_PRODUCTION


def test_a_float64_guarantee_says_tiny_coordinates_are_read_as_zero():
    kw = dict(mechanism="gaussian", epsilon=1.0, radius=1.0, delta=1e-6)
    assert "below 2^-511 in magnitude are read as 0" in noise.privatize(np.ones(4), **kw)[1].guarantee
    assert "2^-511" not in noise.privatize(np.ones(4, np.float32), **kw)[1].guarantee


# ------------------------------------------------------------------ public API
def test_privatize_outputs_on_lattice_and_shape():
    x = np.random.default_rng(0).normal(size=(5, 64)).astype(np.float32)
    for mech, delta in [("gaussian", 1e-5), ("laplace_l2", None)]:
        out, p = noise.privatize(x[:, ::1], mechanism=mech, epsilon=1.0, radius=0.2, delta=delta,
                                 clip_norm=1.0)
        assert out.shape == x.shape and out.dtype == np.float32
        q = out.astype(np.float64) / p.lattice_step
        assert np.array_equal(q, np.round(q))
        assert not np.array_equal(out, noise.snap_to_lattice(x, p.lattice_step))


def test_keyed_release_is_deterministic_per_vector_and_key():
    x = np.random.default_rng(1).normal(size=(4, 32))
    kw = dict(mechanism="gaussian", epsilon=1.0, radius=0.1, delta=1e-6)
    a, pa = noise.privatize(x, key=b"k" * 32, **kw)
    b, _ = noise.privatize(x.copy(order="F"), key=b"k" * 32, **kw)
    assert np.array_equal(a, b) and pa.rng_id == "chacha20-keyed-hmac-sha256-v1"
    # Rows are keyed independently: one row alone gets the same noise as in the batch.
    single, _ = noise.privatize(x[2], key=b"k" * 32, **kw)
    assert np.array_equal(single, a[2])
    other_key, _ = noise.privatize(x, key=b"j" * 32, **kw)
    assert not np.any(np.all(other_key == a, axis=1))
    x2 = x.copy()
    x2[0, 0] = np.nextafter(x2[0, 0], 1.0)
    changed, _ = noise.privatize(x2, key=b"k" * 32, **kw)
    assert np.array_equal(changed[1:], a[1:])
    assert np.count_nonzero(changed[0] != a[0]) > 16  # fresh noise, not just the one coordinate
    other_eps, _ = noise.privatize(x, key=b"k" * 32, **{**kw, "epsilon": 1.5})
    assert not np.array_equal(other_eps, a)


def test_production_noise_is_fresh():
    x = np.zeros(64, np.float32)
    a, _ = noise.privatize(x, mechanism="gaussian", epsilon=1.0, radius=1.0, delta=1e-5)
    b, _ = noise.privatize(x, mechanism="gaussian", epsilon=1.0, radius=1.0, delta=1e-5)
    assert np.count_nonzero(a != b) > 60


def test_seeded_mode_is_reproducible_and_twin_exact():
    x = np.random.default_rng(2).normal(size=(3, 40)).astype(np.float32)
    kw = dict(mechanism="laplace_l2", epsilon=1.0, radius=0.1, clip_norm=2.0, seed=7)
    a, _ = noise.privatize_seeded_for_tests(x, **kw)
    b, _ = noise.privatize_seeded_for_tests(x, **kw)
    c, _ = noise.privatize_seeded_for_tests(x, **{**kw, "seed": 8})
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize("kwargs,exc", [
    (dict(mechanism="gaussian", epsilon=1.0, radius=1.0), ValueError),  # no delta
    (dict(mechanism="laplace_l2", epsilon=1.0, radius=1.0, delta=1e-5), ValueError),
    (dict(mechanism="gauss", epsilon=1.0, radius=1.0, delta=1e-5), ValueError),
    (dict(mechanism="gaussian", epsilon=-1.0, radius=1.0, delta=1e-5), ValueError),
    (dict(mechanism="gaussian", epsilon=1.0, radius="1", delta=1e-5), TypeError),
    (dict(mechanism="gaussian", epsilon=1.0, radius=1.0, delta=1e-5, key=b"x" * 8), ValueError),
    (dict(mechanism="gaussian", epsilon=1.0, radius=1.0, delta=1e-5, key="x" * 32), TypeError),
    (dict(mechanism=["gaussian"], epsilon=1.0, radius=1.0, delta=1e-5), TypeError),
])
def test_privatize_argument_errors(kwargs, exc):
    with pytest.raises(exc):
        noise.privatize(np.ones(4, np.float32), **kwargs)


@pytest.mark.parametrize("vectors,exc", [
    ([1.0, 2.0], TypeError), (np.arange(3), InvalidVectorError), (np.zeros((1, 1, 1)), InvalidVectorError),
    (np.zeros(0), InvalidVectorError), (np.array([np.nan, 1.0]), InvalidVectorError),
])
def test_privatize_vector_errors(vectors, exc):
    with pytest.raises(exc):
        noise.privatize(vectors, mechanism="laplace_l2", epsilon=1.0, radius=1.0)


def test_clip_and_snap_helpers():
    x = np.array([[3.0, 4.0], [0.3, 0.4]])
    assert np.allclose(noise.clip_l2(x, 1.0), [[0.6, 0.8], [0.3, 0.4]])
    assert np.array_equal(noise.snap_to_lattice(np.array([0.3, -0.7]), 0.5), [0.5, -0.5])
    with pytest.raises(ValueError):
        noise.snap_to_lattice(x, 0.3)


# ------------------------------------------------------------------ SIMD paths
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace_l2"])
@pytest.mark.parametrize("dim", [7, 16, 33, 768, 1537])
def test_wide_rows_twins(mechanism, dim):
    # Rows long enough for the vector loops, their tails and the chunking, clipped and unclipped.
    x = np.random.default_rng(dim).normal(size=(2, dim)).astype(np.float32)
    for clip in (None, 1.0):
        assert_same(NATIVE.noise_vectors, PY.noise_vectors, x, mechanism, 0.37, 2.0**-12, clip,
                    KEY, None, NONCE)
        assert_same(NATIVE.noise_vectors, PY.noise_vectors, x.astype(np.float64), mechanism, 0.37,
                    2.0**-12, clip, None, KEY * 2, NONCE)


def test_normals_every_length_twins():
    # Partial vector groups at the end of a request, and requests across a buffer refill.
    for count in [*range(0, 40), 1023, 1025, 2100]:
        assert_same(NATIVE.normals, PY.normals, KEY, NONCE, count)


_SIMD_PROBE = """
import sys, numpy as np
from qdrant_guard import _noise, _noise_py
key, nonce = bytes(range(32)), bytes(12)
x = np.random.default_rng(5).normal(size=(3, 300)).astype(np.float32)
x[1] *= 1e-3  # an unclipped row
# float64 rows with coordinates read as zero (below 2**-511: subnormals, tiny normals, -0.0),
# the threshold itself and the double just below it, in clipped and unclipped rows and tails.
t = np.random.default_rng(6).normal(size=(4, 301))
t[0, ::3] = 5e-324
t[0, 1::7] = -2.0**-1023
t[1] = 1e-300
t[1, 7], t[1, 8], t[1, 300] = 2.0**-511, np.nextafter(2.0**-511, 0), -2.0**-511
t[2] *= 1e5
t[2, ::5] = 1e-320
t[3, ::2] = -0.0
tiny = [np.array_equal(_noise.noise_vectors(t, mech, scale, step, clip, None, bytes(range(128)), nonce),
                       _noise_py.noise_vectors(t, mech, scale, step, clip, None, bytes(range(128)), nonce))
        for mech in ("gaussian", "laplace_l2") for scale, step in ((0.5, 2.0**-9), (2.0**-900, 2.0**-1000))
        for clip in (None, 1.0)]
checks = [
    all(tiny),
    _noise.chacha20_stream(key, nonce, 0xFFFFFFF0, 64 * 40) == _noise_py.chacha20_stream(key, nonce, 0xFFFFFFF0, 64 * 40),
    np.array_equal(_noise.normals(key, nonce, 3000), _noise_py.normals(key, nonce, 3000)),
    np.array_equal(_noise.noise_vectors(x, "gaussian", 0.5, 2.0**-9, 1.0, key, None, nonce),
                   _noise_py.noise_vectors(x, "gaussian", 0.5, 2.0**-9, 1.0, key, None, nonce)),
]
print(_noise.IMPLEMENTATION, checks)
sys.exit(0 if all(checks) else 1)
"""


@pytest.mark.parametrize("level", ["scalar", "sse2", "avx2", "avx512"])
def test_every_simd_level_matches_the_reference(level):
    # The CPU picks one path; QG_NOISE_SIMD caps it so each path is checked on this machine.
    import os
    import subprocess
    import sys

    env = {**os.environ, "QG_NOISE_SIMD": level}
    proc = subprocess.run([sys.executable, "-c", _SIMD_PROBE], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = proc.stdout.split()[0]
    assert ran in ("scalar", "sse2", "avx2", "avx512")
    # The cap must select exactly the level asked for whenever the CPU has it: a dispatcher that
    # quietly stayed on a narrower path would leave that path unchecked on the one machine that can
    # check it.
    order = ["scalar", "sse2", "avx2", "avx512"]
    widest = _cpu_simd_level()
    if widest is None:
        pytest.skip("no /proc/cpuinfo flags to say which SIMD levels this CPU has")
    assert ran == order[min(order.index(level), order.index(widest))], (level, widest, ran)


@pytest.mark.parametrize("mod", [NATIVE, PY], ids=["native", "python"])
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace_l2"])
def test_float64_coordinates_below_2_to_the_minus_511_are_read_as_zero(mod, mechanism):
    # The kernel reads them as +0.0 so that no arithmetic sees a subnormal (slow on some CPUs,
    # which would make the release time depend on the input); 2**-511 itself is kept.
    x = np.random.default_rng(8).normal(size=(3, 37))
    x[0, 3], x[0, 4], x[0, 5] = 5e-324, -1e-300, np.nextafter(2.0**-511, 0)
    x[1, :] = 1e-310
    x[2, 9] = -0.0
    zeroed = np.where(np.abs(x) < 2.0**-511, 0.0, x)
    for scale, step, clip in ((0.5, 2.0**-9, 1.0), (0.5, 2.0**-9, None), (2.0**-900, 2.0**-1000, None)):
        args = (mechanism, scale, step, clip, None, KEY * 3, NONCE)
        assert np.array_equal(mod.noise_vectors(x, *args), mod.noise_vectors(zeroed, *args))
    # With noise far below it, a coordinate of 2**-511 survives and one just below it does not.
    y = np.zeros((1, 9))
    y[0, 0], y[0, 1] = 2.0**-511, np.nextafter(2.0**-511, 0)
    out = mod.noise_vectors(y, mechanism, 2.0**-900, 2.0**-1000, None, None, KEY, NONCE)
    assert abs(out[0, 0] - 2.0**-511) < 2.0**-880 and abs(out[0, 1]) < 2.0**-880


def _cpu_simd_level():
    """The widest level the noise kernel may use on this CPU, from /proc/cpuinfo (None elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        return None
    if flags is None:
        return None
    if {"avx512f", "avx512vl", "avx512dq"} <= set(flags):
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    return "sse2" if "sse2" in flags else "scalar"


# ------------------------------------------------------------------ production fast path
def _cache_for(x, **kw):
    noise._FRESH.clear()
    _, params = noise.privatize(x, **kw)  # the checked path fills the cache
    return dict(noise._FRESH), params


@pytest.mark.parametrize("mod", [NATIVE, PY], ids=["native", "python"])
def test_fresh_noise_cached_hits_only_exact_keys(mod):
    x = np.random.default_rng(3).normal(size=(2, 40)).astype(np.float32)
    kw = dict(mechanism="gaussian", epsilon=1.0, radius=0.1, delta=1e-6, clip_norm=1.0)
    cache, params = _cache_for(x, **kw)
    assert len(cache) == 1
    out, p = mod.fresh_noise_cached(x, cache, "gaussian", 1.0, 0.1, 1e-6, 1.0)
    assert p is params and out.shape == x.shape and out.dtype == np.float32
    q = out.astype(np.float64) / p.lattice_step
    assert np.array_equal(q, np.round(q)) and not np.array_equal(out, mod.fresh_noise_cached(
        x, cache, "gaussian", 1.0, 0.1, 1e-6, 1.0)[0])
    assert mod.fresh_noise_cached(x[0], cache, "gaussian", 1.0, 0.1, 1e-6, 1.0) is not None
    # Anything that is not the exact cached key, or not a plain float/str, is a miss.
    for args in [("gaussian", 1.0, 0.1, 1e-6, None), ("gaussian", 2.0, 0.1, 1e-6, 1.0),
                 ("gaussian", 1, 0.1, 1e-6, 1.0), ("gaussian", True, 0.1, 1e-6, 1.0),
                 ("gaussian", np.float64(1.0), 0.1, 1e-6, 1.0), (np.str_("gaussian"), 1.0, 0.1, 1e-6, 1.0)]:
        assert mod.fresh_noise_cached(x, cache, *args) is None, args
    for vec in [x.astype(np.float64), x[:, :20], x.astype(">f4"), x[:0], x.reshape(2, 4, 10), list(x)]:
        assert mod.fresh_noise_cached(vec, cache, "gaussian", 1.0, 0.1, 1e-6, 1.0) is None
    assert mod.fresh_noise_cached(x, dict.fromkeys(cache), "gaussian", 2.0, 0.1, 1e-6, 1.0) is None
    # Right after a hit: equal values in new objects still hit, the same objects with another cache miss.
    assert mod.fresh_noise_cached(x, cache, "gaussian", 1.0, 0.1, 1e-6, 1.0) is not None
    eps = float("1.0")
    assert mod.fresh_noise_cached(x, cache, "gaussian", eps, 0.1, 1e-6, 1.0)[1] is params
    assert mod.fresh_noise_cached(x, {}, "gaussian", 1.0, 0.1, 1e-6, 1.0) is None


def test_fresh_noise_cached_non_contiguous_and_errors():
    x = np.random.default_rng(4).normal(size=(40, 3))
    kw = dict(mechanism="laplace_l2", epsilon=1.0, radius=0.1, delta=None, clip_norm=None)
    cache, _ = _cache_for(x.T.copy(), **kw)
    out, _ = NATIVE.fresh_noise_cached(x.T, cache, "laplace_l2", 1.0, 0.1, None, None)
    assert out.flags.c_contiguous and out.shape == (3, 40)
    bad = x.T.copy()
    bad[1, 5] = np.nan
    for mod in (NATIVE, PY):
        with pytest.raises(InvalidVectorError, match=r"vectors\[1\] contains NaN or Inf at index 5"):
            mod.fresh_noise_cached(bad, cache, "laplace_l2", 1.0, 0.1, None, None)


def test_privatize_fast_path_keeps_the_checks():
    x = np.ones(8, np.float32)
    kw = dict(mechanism="gaussian", epsilon=1.0, radius=1.0, delta=1e-5)
    _, first = noise.privatize(x, **kw)
    _, second = noise.privatize(x, **kw)  # served from the cache: same parameters object
    assert second is first
    with pytest.raises(TypeError):
        noise.privatize(x, **{**kw, "epsilon": True})
    with pytest.raises(InvalidVectorError):
        noise.privatize(np.array([1.0, np.inf], np.float32), **kw)
