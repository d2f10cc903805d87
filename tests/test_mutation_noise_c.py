"""Inputs that kill the surviving mutants of native/noise.c (mutation pass 7, h-mutn).

Each test runs real arrays through the native kernel and its reference twin and checks an exact
property of the release (its bits, its lattice, or the error and the index it names). Rows of at
most three coordinates go through ``combine_scalar``/``snap`` at every SIMD level (the vector
loops take groups of four and eight), so these hold on whatever CPU runs them.
"""
from __future__ import annotations

import numpy as np
import pytest

from oracle import assert_same, both
from qdrant_guard.errors import InvalidVectorError

NATIVE, PY = both("noise")
KEY = bytes(range(32))
NONCE = bytes(12)


def _first_normal(key: bytes) -> float:
    return float(PY.normals(key, NONCE, 1)[0])


@pytest.mark.parametrize("mod", [NATIVE, PY], ids=["native", "python"])
def test_a_value_exactly_2_to_the_52_steps_is_returned_as_is_below_a_step_of_2_to_the_minus_1024(mod):
    # snap() returns v itself from |v| == 2**52 * step on. Below a step of 2**-1024, 1/step is
    # infinite, so rounding v / step instead (the mutant ">" for ">=") gives inf and a refusal of
    # a finite, on-lattice value. With x = 0 the released value is z * scale, here exactly
    # -2**-978 = -2**52 * 2**-1030.
    step = 2.0**-1030
    target = 2.0**52 * step
    z = _first_normal(KEY)
    scale = target / abs(z)
    while abs(z) * scale != target:
        scale = float(np.nextafter(scale, 0.0 if abs(z) * scale > target else 1.0))
    for mechanism in ("gaussian",):
        out = mod.noise_vectors(np.zeros(1), mechanism, scale, step, None, None, KEY, NONCE)
        assert out.tolist() == [np.copysign(target, z)]


@pytest.mark.parametrize("mod", [NATIVE, PY], ids=["native", "python"])
@pytest.mark.parametrize("dim", [1, 3])
def test_values_between_2_to_the_51_and_2_to_the_52_steps_round_to_the_nearest_step(mod, dim):
    # From |q| = 2**51 steps on, the magic-constant rounding ((q + 1.5 * 2**52) - 1.5 * 2**52)
    # rounds to an even multiple of 2 instead of to an integer; snap() uses rint() there. An odd q
    # is an exact multiple of the step and must come back unchanged (noise far below a step).
    x = np.array([2.0**51 + 1, -(2.0**51 + 3), 2.0**52 - 1][:dim])
    for mechanism in ("gaussian", "laplace_l2"):
        out = mod.noise_vectors(x, mechanism, 2.0**-40, 1.0, None, None, KEY * 1, NONCE)
        assert out.tolist() == x.tolist()


@pytest.mark.parametrize("dtype,big", [(np.float32, 3.0e38), (np.float64, 1.7e308)])
def test_an_overflow_in_a_short_row_is_refused_at_its_first_index(dtype, big):
    # Rows of one to three coordinates are combined by combine_scalar at every SIMD level; its
    # first-overflow index ("bad == n") is what the error names. Laplace rows always take it.
    seen = 0
    for seed in range(40):
        key = bytes([seed]) * 32
        x = np.array([big, -big, big], dtype=dtype)
        err = assert_same(NATIVE.noise_vectors, PY.noise_vectors, x, "laplace_l2", big, 2.0**20, None,
                          None, key, NONCE)
        if isinstance(err, InvalidVectorError):
            assert "overflows" in str(err)
            seen += 1
    assert seen >= 5


@pytest.mark.parametrize("mod", [NATIVE, PY], ids=["native", "python"])
@pytest.mark.parametrize("dtype,big,step", [(np.float64, 1e300, 2.0**-100), (np.float32, 3e38, 2.0**-900)])
@pytest.mark.parametrize("dim", [8, 16, 21])
def test_a_gaussian_row_of_huge_values_on_a_fine_lattice_is_released_as_is(mod, dtype, big, step, dim):
    # |v| / step overflows float64 here. Such a row must not take the fused AVX2 Gaussian path
    # (row_snap_safe is false for it): that path rounds v / step without snap()'s |v| >= 2**52 *
    # step test and would turn these finite, on-lattice values into inf and refuse the row. Noise
    # of scale 1 is far below the values' float spacing, so the release is the input.
    x = np.full((2, dim), big, dtype=dtype)
    x[1, ::2] = -big
    out = mod.noise_vectors(x, "gaussian", 1.0, step, None, None, KEY * 2, NONCE)
    assert out.dtype == x.dtype and out.tolist() == x.tolist()


# ChaCha20(KEY, nonce) words whose first word has w >> 9 == 0: the first normal of the stream is
# then exactly +-0.0 (found by a search over nonces; the test checks it still holds).
ZERO_FIRST_NORMAL_NONCES = [(8670386).to_bytes(12, "little"), (17952651).to_bytes(12, "little")]


@pytest.mark.parametrize("nonce", ZERO_FIRST_NORMAL_NONCES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_laplace_direction_of_zeros_is_drawn_again(nonce, dtype):
    # A one-coordinate Laplace row whose direction is the normal 0.0 has |g| = 0: the kernel must
    # draw the direction again ("while (!(gs > 0.0))"); accepting it divides the radius by zero and
    # releases NaN (refused as an overflow).
    assert PY.normals(KEY, nonce, 1)[0] == 0.0 and NATIVE.normals(KEY, nonce, 1)[0] == 0.0
    x = np.array([[0.25], [-0.5]], dtype=dtype)
    for clip in (None, 0.1):
        out = assert_same(NATIVE.noise_vectors, PY.noise_vectors, x, "laplace_l2", 0.5, 2.0**-20, clip,
                          None, KEY * 2, nonce)
        assert np.isfinite(out).all() and not np.array_equal(out, np.round(x / 2.0**-20) * 2.0**-20)


@pytest.fixture
def threads():
    """Set the native thread limit for one test, restoring it afterwards."""
    before = NATIVE.get_threads()
    yield NATIVE.set_threads
    NATIVE.set_threads(before)


def _vm_size_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="needs /proc")
def test_every_worker_thread_of_a_batch_is_joined(threads):
    # qg_noise_rows joins each worker it started. One left unjoined (the mutants of "started[t]"
    # and of the create loop's bound) keeps its stack mapped (megabytes) after it ends, and the
    # batch may return before it has written its rows. The outputs are checked too.
    threads(2)
    rows = NATIVE.THREADS_MIN_ELEMENTS // 64 + 1
    x = np.random.default_rng(4).normal(size=(rows, 64)).astype(np.float32)
    row_keys = bytes(32 * rows)
    first = NATIVE.noise_vectors(x, "gaussian", 0.05, 2.0**-12, None, None, row_keys, NONCE)
    before = _vm_size_kib()
    for _ in range(16):
        out = NATIVE.noise_vectors(x, "gaussian", 0.05, 2.0**-12, None, None, row_keys, NONCE)
        assert out.tobytes() == first.tobytes()
        del out
    grown = _vm_size_kib() - before
    assert grown < 16 * 1024, f"the address space grew by {grown} KiB over 16 threaded batches"


def test_a_batch_of_many_grains_is_split_over_no_more_threads_than_the_limit(threads):
    # 17 grains of 2**19 values: the thread count is min(limit, grains, rows), never the number of
    # grains alone (the mutant that drops the "grains < limit" test starts 17 workers into arrays
    # of QG_NOISE_THREADS_CAP = 8, and ignores set_threads(1)). Keyed output is the same with any
    # limit.
    rows, dim = 17 * 512, 1024
    x = np.random.default_rng(5).normal(size=(rows, dim)).astype(np.float32)
    row_keys = bytes(np.random.default_rng(6).integers(0, 256, 32 * rows, dtype=np.uint8))
    outs = []
    for n in (1, 8):
        threads(n)
        outs.append(NATIVE.noise_vectors(x, "gaussian", 0.05, 2.0**-12, None, None, row_keys, NONCE))
    assert outs[0].tobytes() == outs[1].tobytes()
    ref = PY.noise_vectors(x[-1:], "gaussian", 0.05, 2.0**-12, None, None, row_keys[-32:], NONCE)
    assert ref.tobytes() == outs[0][-1:].tobytes()


def _nudge_both(k, residual, order, shift, tol, passes):
    out = []
    for twin in (NATIVE, PY):
        k1, r1 = k.copy(), residual.copy()
        twin.unit_grid_nudge(k1, r1, order, shift, tol, passes)
        out.append((k1, r1))
    (kn, rn), (kp, rp) = out
    assert kn.tobytes() == kp.tobytes() and rn.tobytes() == rp.tobytes(), (kn, kp, rn, rp)
    return kn, rn


@pytest.mark.parametrize("key_type", [np.int32, np.int64])
def test_nudge_a_first_pass_key_that_disagrees_with_k_steps_a_zero_coordinate_by_nothing(key_type):
    # The first pass reads |k_j| from the key, not from k, so a key saying |k_j| = 5 reaches a k_j
    # of 0.0 or -0.0, which the step leaves as it is (sign(0) = 0): the twins agree on this for
    # any order the binding accepts, in the domain of receipts or not. (-0.0 + 0.0 is +0.0.)
    shift = 2
    k = np.array([[0.0, -0.0, 7.0]])
    residual = np.array([1000.0])
    order = np.array([[((1 << 20) - 5) << shift | 0, ((1 << 20) - 5) << shift | 1,
                       ((1 << 20) - 7) << shift | 2]], dtype=key_type)
    kn, rn = _nudge_both(k, residual, order, shift, 0.0, 1)
    assert kn.tolist() == [[0.0, 0.0, 8.0]] and not np.signbit(kn).any()
    assert rn.tolist() == [1000.0 - 11 - 11 - 15]


def test_nudge_with_a_negative_tolerance_steps_a_zero_residual_downwards():
    # |r| = 0 > max(a, tol) when the key gives a negative a and tol < 0: the step's sign is that of
    # "r > 0.0", so -1 for r = 0.0 (the reference's rule), never +1.
    shift = 1
    k = np.array([[3.0]])
    residual = np.array([0.0])
    order = np.array([[((1 << 20) + 5) << shift | 0]], dtype=np.int64)  # a = 2**20 - (key >> 1) = -5
    kn, rn = _nudge_both(k, residual, order, shift, -1.0, 1)
    assert kn.tolist() == [[2.0]] and rn.tolist() == [-11.0]


# Rows whose length puts a NaN, an overflow or the end of the row in every lane of the 4- and
# 8-wide loops and in their scalar tails, run at each SIMD level (QG_NOISE_SIMD caps the level,
# so this machine checks every path it has; the default process runs only the widest).
_LEVEL_PROBE = r"""
import sys
import numpy as np
from qdrant_guard import _noise, _noise_py

def run(mod, args):
    try:
        return True, mod.noise_vectors(*args)
    except Exception as exc:
        return False, (type(exc).__name__, str(exc))

bad = []
def same(*args):
    (ok_n, n), (ok_p, p) = run(_noise, args), run(_noise_py, args)
    if ok_n != ok_p or (ok_n and not (n.dtype == p.dtype and n.tobytes() == p.tobytes())) or (not ok_n and n != p):
        bad.append((args[0].dtype.name, args[0].shape, args[1:5], n if not ok_n else "array",
                    p if not ok_p else "array"))
    return ok_n

nonce = bytes(12)
rng = np.random.default_rng(11)
dims = [*range(1, 18), 23, 31, 33]
for dtype in (np.float32, np.float64):
    for d in dims:
        keys = bytes(rng.integers(0, 256, 32 * 3, dtype=np.uint8))
        x = (rng.normal(size=(3, d)) * [[1.0], [1e-3], [40.0]]).astype(dtype)
        for mech in ("gaussian", "laplace_l2"):
            for clip in (None, 1.0):
                same(x, mech, 0.25, 2.0**-10, clip, None, keys, nonce)
        for j in range(d):
            for v in (np.nan, -np.inf):
                y = x.copy()
                y[1, j] = v
                same(y, "gaussian", 0.25, 2.0**-10, 1.0, None, keys, nonce)
        big = 3.0e38 if dtype == np.float32 else 1.7e308
        fine = 2.0**-900 if dtype == np.float32 else 2.0**-100
        h = np.full((2, d), big, dtype=dtype)
        h[1, ::2] = -big
        same(h, "gaussian", 1.0, fine, None, None, keys[:64], nonce)
        refused = 0
        for mech, scale, step in (("laplace_l2", big, 2.0**20), ("gaussian", big / 4, 2.0**20),
                                  ("gaussian", big / 4, 2.0**100)):
            refused += not same(h, mech, scale, step, None, None, keys[:64], nonce)
        if d >= 8 and refused < 2:
            bad.append(("too few overflows", dtype.__name__, d, refused))
        # A shared (seeded) stream: rows after the first start with words already buffered, so a
        # row of 8 or 16 can be one fused AVX2 run, whose own overflow flag alone must report it.
        # Rows of zeros first (no overflow at this scale), so the first refused row is such a row.
        if dtype == np.float32:
            s = np.concatenate([np.zeros((3, d), dtype), h, h])
            same(s, "gaussian", big / 4, 2.0**100, None, bytes(range(32)), None, nonce)
    # Rows whose first overflow is past the first 8 coordinates (zeros there, noise far below the
    # range): the error must come from the tail after a clean vector part.
    late = 0
    for d in (9, 11, 13, 15, 17, 23, 33):
        for seed in range(4):
            keys = bytes([seed + 1]) * 64
            t = np.zeros((2, d), dtype=dtype)
            t[:, 8:] = big
            for mech in ("laplace_l2", "gaussian"):
                args = (t, mech, big / 10, 2.0**20, None, None, keys, nonce)
                same(*args)
                ok, res = run(_noise_py, args)
                late += not ok and int(res[1].split("index ")[1].split(";")[0]) >= 8
    if late < 4:
        bad.append(("too few late overflows", dtype.__name__, late))
print(_noise.IMPLEMENTATION, len(bad), bad[:3])
sys.exit(1 if bad else 0)
"""


@pytest.mark.parametrize("level", ["scalar", "sse2", "avx2", "avx512"])
def test_every_lane_and_tail_of_each_simd_level_matches_the_reference(level):
    import os
    import subprocess
    import sys

    env = {**os.environ, "QG_NOISE_SIMD": level}
    proc = subprocess.run([sys.executable, "-c", _LEVEL_PROBE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


_THREADS_PROBE = r"""
import os, sys
from qdrant_guard import _noise
first = _noise.get_threads()
_noise.set_threads(0)
# Changed after set_threads(0) resolved the default: a batch (which may run without the GIL)
# must not read the environment again.
os.environ["QG_NOISE_THREADS"] = "5"
again = _noise.get_threads()
later = _noise.get_threads()
print(first, again, later)
"""


@pytest.mark.parametrize("env,expected", [(None, "cpus"), ("0", 1), ("-3", 1), ("1", 1), ("3", 3),
                                          ("8", 8), ("9", 8), ("999", 8)])
def test_the_default_thread_limit_comes_from_the_environment_or_the_cpus_once(env, expected):
    # threads_default(): QG_NOISE_THREADS clamped to 1..8, else the CPUs this process may run on
    # (at most 8); set_threads(0) restores that default, resolved then, not in a later batch.
    import os
    import subprocess
    import sys

    if expected == "cpus":
        expected = min(len(os.sched_getaffinity(0)), 8)
    child = {k: v for k, v in os.environ.items() if k != "QG_NOISE_THREADS"}
    if env is not None:
        child["QG_NOISE_THREADS"] = env
    proc = subprocess.run([sys.executable, "-c", _THREADS_PROBE], env=child, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(expected)] * 3
