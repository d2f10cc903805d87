"""The write path's shortcuts give the same results as the general code they skip.

* The Cosine norm correction runs in C (``_noise.unit_grid_nudge``) in native builds; the lockstep
  array passes of storedform._unit_grid_rows (still the pure-Python implementation) and the plain
  loops of the reference twin ``_noise_py.unit_grid_nudge`` must give the same bytes.
* as_dense reads a list of exact floats in C (``_noise.dense_floats``); everything else, and the
  result of every input, must be what ``np.asarray`` gave.
"""
from __future__ import annotations

import numpy as np
import pytest

from qdrant_guard import _noise_py, storedform
from qdrant_guard._impl import implementation
from qdrant_guard.receipts import stored_form, stored_form_batch

native = pytest.mark.skipif(implementation() != "native", reason="native kernel only")


def _lockstep(matrix: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> bytes:
    with monkeypatch.context() as m:
        m.setattr(storedform, "_NATIVE_NUDGE", None)
        return stored_form_batch(matrix, distance="Cosine").tobytes()


def _twin(matrix: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> bytes:
    with monkeypatch.context() as m:
        m.setattr(storedform, "_NATIVE_NUDGE", _noise_py.unit_grid_nudge)
        return stored_form_batch(matrix, distance="Cosine").tobytes()


def _matrices(seed: int):
    rng = np.random.default_rng(seed)
    for rows, dim in [(1, 1), (1, 2), (2, 3), (1, 384), (3, 16), (5, 17), (31, 31), (32, 32), (33, 33),
                      (7, 100), (257, 384), (4, 1024), (3, 1025), (2, 1536)]:
        yield rng.standard_normal((rows, dim))
        yield rng.standard_normal((rows, dim)).astype(np.float32)
        # Many equal magnitudes (the visiting order's ties), zeros and signed zeros.
        ties = rng.integers(-3, 4, (rows, dim)).astype(np.float64) * (rng.random((rows, dim)) < 0.9)
        ties[:, 0] = np.where(ties[:, 0] == 0, -2.0, ties[:, 0])
        yield ties
        spread = rng.standard_normal((rows, dim)) * 10.0 ** rng.integers(-30, 3, (rows, dim))
        spread[:, 0] = np.where(spread[:, 0] == 0, 1.0, spread[:, 0])
        yield spread
        one_hot = np.zeros((rows, dim))
        one_hot[:, rng.integers(0, dim)] = -2.5
        yield one_hot
        # Tiny rows: every normalised coordinate far below the grid except one.
        tiny = rng.standard_normal((rows, dim)) * 1e-9
        tiny[:, -1] = 1.0
        yield tiny


@native
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_native_norm_correction_matches_lockstep_and_twin(seed, monkeypatch):
    for matrix in _matrices(seed):
        got = stored_form_batch(matrix, distance="Cosine").tobytes()
        assert got == _lockstep(matrix, monkeypatch), matrix.shape
        if matrix.size <= 4096:
            assert got == _twin(matrix, monkeypatch), matrix.shape
        # One row at a time (stored_form) is the same kernel on one row.
        assert np.stack([stored_form(r, distance="Cosine") for r in matrix]).tobytes() == got


@native
def test_native_norm_correction_on_noised_batches(monkeypatch):
    # The write path's input: keyed Gaussian noise on unit rows, 256 x 384 as in the benchmark.
    from qdrant_guard.noise import privatize

    rng = np.random.default_rng(7)
    for rows, dim in [(256, 384), (1, 384), (45, 768)]:
        x = rng.standard_normal((rows, dim)).astype(np.float32)
        noised, _ = privatize(x, mechanism="gaussian", epsilon=2.0, radius=0.5, delta=1e-6, key=b"k" * 32)
        assert stored_form_batch(noised, distance="Cosine").tobytes() == _lockstep(noised, monkeypatch)


@native
@pytest.mark.parametrize("passes", [0, 1, 2, 16])
def test_kernel_matches_twin_directly(passes):
    # Arbitrary (not normalised) integer rows and residuals in any visiting order, few passes: the
    # kernel and the twin take the same steps and stop at the same place. Keys are built as
    # _unit_grid_rows builds them, int32 up to shift 10.
    from qdrant_guard import _noise

    rng = np.random.default_rng(passes)
    changed = 0
    for rows, dim in [(1, 1), (3, 5), (40, 33), (9, 200), (5, 1000), (3, 1030)]:
        shift = max(1, (dim - 1).bit_length())
        key_type = np.int32 if shift <= 10 else np.int64
        k = np.rint(rng.standard_normal((rows, dim)) * 10.0 ** rng.integers(0, 6, (rows, 1)))
        k[rng.random((rows, dim)) < 0.1] = 0.0
        residual = np.rint(rng.standard_normal(rows) * 10.0 ** rng.integers(2, 9, rows))
        keys = np.abs(k.astype(key_type))
        keys = ((1 << 20) - keys) << shift | np.arange(dim, dtype=key_type)
        keys = np.take_along_axis(keys, np.argsort(rng.random((rows, dim)), axis=1), axis=1).astype(key_type)
        tol = float(rng.choice([0.0, 3.0, float(1 << 14)]))
        k1, r1, k2, r2 = k.copy(), residual.copy(), k.copy(), residual.copy()
        _noise.unit_grid_nudge(k1, r1, keys, shift, tol, passes)
        _noise_py.unit_grid_nudge(k2, r2, keys, shift, tol, passes)
        assert k1.tobytes() == k2.tobytes() and r1.tobytes() == r2.tobytes()
        changed += not np.array_equal(k1, k)
    assert changed or not passes


@native
def test_kernel_hands_unusual_arguments_to_the_twin():
    from qdrant_guard import _noise

    k = np.asfortranarray(np.array([[900.0, 3.0], [5.0, -700.0]]))
    r = np.array([5000.0, -4000.0])
    order = np.array([[0, 1], [1, 0]], dtype=np.int64)
    k2, r2 = np.ascontiguousarray(k), r.copy()
    _noise.unit_grid_nudge(k, r, order, 1, 10.0, 16)
    _noise_py.unit_grid_nudge(k2, r2, order, 1, 10.0, 16)
    assert np.array_equal(k, k2) and np.array_equal(r, r2)


@native
@pytest.mark.parametrize("key_type,dim,shift", [(np.int32, 5, 3), (np.int64, 5, 3), (np.int32, 600, 10),
                                                (np.int64, 600, 10), (np.int64, 3, 40)])
def test_an_order_naming_a_coordinate_outside_the_row_is_refused_before_any_step(key_type, dim, shift):
    # The row is indexed by each key's low bits: a key naming coordinate >= dim would have the C
    # kernel read and write past the row. Both twins refuse the whole call, nothing changed, even
    # when the bad key comes after keys that would step. (int32 keys hold shifts up to 10.)
    from qdrant_guard import _noise

    rng = np.random.default_rng(dim)
    k = np.rint(rng.standard_normal((3, dim)) * 1000.0)
    residual = np.array([1e7, -1e7, 3e6])
    keys = (((1 << 20) - np.abs(k).astype(np.int64)) << shift | np.arange(dim)).astype(key_type)
    keys.sort(axis=1)
    bad = keys.copy()
    bad[2, -1] = (bad[2, -1] >> shift << shift) | dim  # dim < 2^shift: a coordinate past the row
    for twin in (_noise, _noise_py):
        k1, r1 = k.copy(), residual.copy()
        with pytest.raises(ValueError, match="must name a coordinate below the row length"):
            twin.unit_grid_nudge(k1, r1, bad, shift, 10.0, 16)
        assert np.array_equal(k1, k) and np.array_equal(r1, residual)
        twin.unit_grid_nudge(k1, r1, keys, shift, 10.0, 16)  # the same call with a good order runs
        assert not np.array_equal(k1, k)


# --------------------------------------------------------------------------- dense conversion

class _Float(float):
    pass


def _dense_inputs(seed: int):
    rng = np.random.default_rng(seed)
    for dim in (1, 2, 3, 17, 384):
        base = rng.standard_normal(dim)
        yield base.tolist()
        yield (base * 1e300).tolist()                         # finite, large
        yield (base * 5e-324).tolist()                        # subnormal / signed zeros
        yield [-0.0] * dim
        f32max = float(np.finfo(np.float32).max)
        yield [f32max, -f32max] * dim                         # the float32 range's edges: storable
        edge = base.tolist()
        edge[int(rng.integers(0, dim))] = float(np.nextafter(f32max, np.inf)) * (-1) ** dim
        yield edge                                            # just past it: refused
        for special in (float("nan"), float("inf"), float("-inf")):
            bad = base.tolist()
            bad[int(rng.integers(0, dim))] = special
            yield bad
        yield [int(x) for x in rng.integers(-5, 5, dim)]      # ints: int64 array, accepted
        yield [bool(x) for x in rng.integers(0, 2, dim)]      # bools: refused
        mixed = base.tolist()
        mixed[0] = 1                                          # one int among floats
        yield mixed
        mixed = base.tolist()
        mixed[-1] = True
        yield mixed
        yield [_Float(x) for x in base]                        # float subclass
        yield [np.float64(x) for x in base]
        yield [np.float32(x) for x in base]
        yield base.tolist()[:-1] + ["1.5"]                    # a string
        yield base.tolist()[:-1] + [None]
        yield base.tolist()[:-1] + [[1.0]]                    # ragged
        yield [base.tolist()]                                 # 2-d
        yield tuple(base.tolist())
        yield base
        yield base.astype(np.float32)
        yield base.astype(np.float16)
        yield base.astype(np.int8)
        yield base.astype(">f8")
    yield []
    yield [[]]


def _as_dense_outcome(value, spec, where="point 1"):
    from qdrant_guard.vectors import as_dense

    try:
        out = as_dense(value, spec, where=where)
    except Exception as exc:  # noqa: BLE001  (compared, not swallowed)
        return ("error", type(exc), str(exc))
    return ("ok", out.dtype.str, out.shape, out.tobytes(), out.flags.writeable)


@native
@pytest.mark.parametrize("seed", [0, 1])
def test_as_dense_fast_path_matches_np_asarray(seed, monkeypatch):
    from qdrant_guard import vectors
    from qdrant_guard.vectors import VectorSpec

    assert vectors._DENSE_FLOATS is not None
    fast_taken = 0
    for value in _dense_inputs(seed):
        size = len(value) if len(value) else 1
        for spec in (VectorSpec("v", size, "Cosine", False), VectorSpec("", size + 1, "Dot", False)):
            got = _as_dense_outcome(value, spec)
            with monkeypatch.context() as m:
                m.setattr(vectors, "_DENSE_FLOATS", None)
                want = _as_dense_outcome(value, spec)
            assert got == want, (type(value), value[:3] if len(value) else value)
        fast_taken += vectors._DENSE_FLOATS(value) is not None
    assert fast_taken > 20


@native
def test_dense_floats_kernel_matches_twin():
    from qdrant_guard import _noise

    for value in _dense_inputs(3):
        got, want = _noise.dense_floats(value), _noise_py.dense_floats(value)
        assert (got is None) == (want is None)
        if got is not None:
            assert got[0].tobytes() == want[0].tobytes() and got[0].dtype == np.float64
            assert got[1] is want[1]
            assert got[0].tobytes() == np.asarray(value).tobytes()


@native
def test_as_dense_fast_path_copies_the_list():
    from qdrant_guard.vectors import VectorSpec, as_dense

    value = [0.5, -1.5, 2.0]
    out = as_dense(value, VectorSpec("", 3, "Dot", False), where="p")
    value[0] = 9.0
    assert out.tolist() == [0.5, -1.5, 2.0] and out.flags.c_contiguous and out.flags.writeable
