"""Large batches split over threads: keyed output and errors as with one thread, fresh noise fresh."""
from __future__ import annotations

import re

import numpy as np
import pytest

from oracle import both
from qdrant_guard import noise
from qdrant_guard.errors import InvalidVectorError

NATIVE, PY = both("noise")
KW = dict(mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.1, clip_norm=1.0)
NONCE = bytes(12)
# Just above the threshold, in rows of 768 (the grain gives two ranges at least).
ROWS = NATIVE.THREADS_MIN_ELEMENTS // 768 + 3


@pytest.fixture
def threads():
    """Set the thread limit for one test, restoring it afterwards."""
    before = NATIVE.get_threads()
    yield NATIVE.set_threads
    NATIVE.set_threads(before)


def _batch(dtype=np.float32, rows=ROWS, dim=768, seed=0):
    return np.random.default_rng(seed).normal(size=(rows, dim)).astype(dtype)


def test_set_threads_returns_the_old_limit_and_checks_its_type(threads):
    threads(3)
    assert threads(1) == 3
    assert NATIVE.get_threads() == 1
    threads(0)
    assert NATIVE.get_threads() >= 1
    with pytest.raises(TypeError):
        NATIVE.set_threads(2.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace_l2"])
def test_keyed_rows_are_identical_with_any_thread_count(threads, dtype, mechanism):
    x = _batch(dtype)
    rng = np.random.default_rng(1)
    row_keys = bytes(rng.integers(0, 256, 32 * ROWS, dtype=np.uint8))
    outs = []
    for n in (1, 2, 3, 8):
        threads(n)
        outs.append(NATIVE.noise_vectors(x, mechanism, 0.05, 2.0**-12, 1.0, None, row_keys, NONCE))
    for out in outs[1:]:
        assert out.tobytes() == outs[0].tobytes()
    # And the reference agrees on a few rows from each end (the whole batch is slow in Python).
    for lo, hi in ((0, 2), (ROWS - 2, ROWS)):
        ref = PY.noise_vectors(x[lo:hi], mechanism, 0.05, 2.0**-12, 1.0, None, row_keys[32 * lo:32 * hi], NONCE)
        assert ref.tobytes() == outs[0][lo:hi].tobytes()


def test_keyed_privatize_is_identical_with_any_thread_count(threads):
    x = _batch()
    threads(1)
    one, _ = noise.privatize(x, key=b"k" * 32, **KW)
    threads(4)
    many, _ = noise.privatize(x, key=b"k" * 32, **KW)
    assert one.tobytes() == many.tobytes()


def test_seeded_stream_is_never_split(threads):
    x = _batch()
    threads(1)
    one, _ = noise.privatize_seeded_for_tests(x, seed=7, **KW)
    threads(4)
    many, _ = noise.privatize_seeded_for_tests(x, seed=7, **KW)
    assert one.tobytes() == many.tobytes()


@pytest.mark.parametrize("bad_rows", [[ROWS - 1], [ROWS // 2 + 1, ROWS - 1], [1, ROWS - 1]])
@pytest.mark.parametrize("keyed", [False, True])
def test_first_bad_row_is_reported_as_with_one_thread(threads, bad_rows, keyed):
    x = _batch()
    for r in bad_rows:
        x[r, 5 + r % 7] = np.nan
    row_keys = bytes(32 * ROWS) if keyed else None
    messages = []
    for n in (1, 4):
        threads(n)
        with pytest.raises(InvalidVectorError) as err:
            NATIVE.noise_vectors(x, "gaussian", 0.05, 2.0**-12, 1.0, None, row_keys, NONCE)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    r = bad_rows[0]
    assert re.search(rf"vectors\[{r}\] contains NaN or Inf at index {5 + r % 7}\b", messages[0])


def test_fresh_noise_over_threads_is_fresh_and_on_the_lattice(threads):
    threads(4)
    x = np.zeros((ROWS, 768), dtype=np.float32)
    out, params = noise.privatize(x, **KW)
    again, _ = noise.privatize(x, **KW)
    assert not np.array_equal(out, again)
    step = params.lattice_step
    assert np.array_equal(np.round(out.astype(np.float64) / step) * step, out.astype(np.float64))
    # Every range gets noise of the calibrated size, and no two rows repeat.
    per_row = out.astype(np.float64).std(axis=1)
    assert np.all(np.abs(per_row / params.scale - 1.0) < 0.2)
    assert len({row.tobytes() for row in out}) == ROWS
    first, last = out[: ROWS // 2].ravel(), out[ROWS // 2:].ravel()
    assert abs(np.corrcoef(first[: last.size], last[: first.size])[0, 1]) < 0.01


@pytest.mark.parametrize("rows,dim", [(8, 1 << 17), (NATIVE.THREADS_MIN_ELEMENTS // 3 + 1, 3)])
def test_very_wide_and_very_narrow_rows_split_identically(threads, rows, dim):
    x = _batch(np.float32, rows=rows, dim=dim, seed=2)
    row_keys = bytes(np.random.default_rng(3).integers(0, 256, 32 * rows, dtype=np.uint8))
    threads(1)
    one = NATIVE.noise_vectors(x, "gaussian", 0.05, 2.0**-12, None, None, row_keys, NONCE)
    threads(3)
    many = NATIVE.noise_vectors(x, "gaussian", 0.05, 2.0**-12, None, None, row_keys, NONCE)
    assert one.tobytes() == many.tobytes()
