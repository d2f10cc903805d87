"""The stored form of a vector: the exact float32 vector the guard sends to Qdrant, and the salted
commitment to it that a receipt signs.

Every coordinate is a multiple of :data:`COMMIT_GRID` (2^-20); a Cosine vector's norm is corrected
by single grid steps so that Qdrant's own float32 re-normalisation leaves it on the same grid points
(:func:`stored_form`, :func:`stored_form_batch`). :func:`commitment_bytes` and
:func:`vector_commitment` hash those grid integers. :mod:`qdrant_guard.receipts` re-exports the
public names.
"""
from __future__ import annotations

import hashlib
import math
import struct
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt

from . import _cosine_repair
from ._impl import implementation, load_kernel
from .errors import GuardArgumentTypeError, GuardArgumentValueError, InvalidVectorError

__all__ = [
    "COMMIT_GRID",
    "stored_form",
    "stored_form_batch",
    "commitment_bytes",
    "vector_commitment",
]

COMMIT_GRID = 2.0 ** -20
COMMITMENT_PREFIX = b"qg-vec-v1"
SALT_BYTES = 16

_GRID_INV = 2.0 ** 20
_INT32_LIMIT = 2 ** 31 - 1
# Grid values float32 rounds to 2^31 (= 2048 / COMMIT_GRID): half a float32 step (2^6 grid units) below.
_FLOAT32_TO_2048 = 2.0 ** 31 - 2.0 ** 6
_DISTANCES = ("Cosine", "Euclid", "Dot", "Manhattan")
# Target for sum(k_i^2) of a Cosine stored form, on the integer grid: (1 / COMMIT_GRID)^2.
_UNIT_SQ = 1 << 40
# Stop correcting the norm once |n^2 - 1| <= 2^-26: far inside float32's resolution at 1.0, so
# a float32 re-normalisation moves no coordinate by half a grid step.
_NORM_TOL = 1 << 14


# --------------------------------------------------------------------------- vector commitment

def _as_vector(vector: Any, func: str) -> np.ndarray:
    if vector is None or isinstance(vector, (str, bytes, dict)):
        raise GuardArgumentTypeError(
            f"{func}() vector must be a 1-D sequence of numbers, not {type(vector).__name__}"
        )
    try:
        arr = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise GuardArgumentTypeError(f"{func}() vector must be a 1-D sequence of numbers ({exc})") from exc
    if arr.ndim != 1 or arr.size == 0:
        raise GuardArgumentValueError(f"{func}() vector must be 1-D and non-empty, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise GuardArgumentValueError(f"{func}() vector contains NaN or Inf; only finite vectors can be stored")
    return arr


def _range_error(func: str, what: str, magnitude: float) -> InvalidVectorError:
    # magnitude is read from the values themselves: scaled to the grid it overflowed to inf.
    shown = f"{magnitude:g}" if magnitude >= 2048.0 else f"{magnitude!r}, which float32 rounds to 2048"
    return InvalidVectorError(
        f"{func}() {what} has a coordinate of magnitude {shown}; the commitment grid 2^-20 "
        "holds |v| < 2048 in int32, rescale the vectors (on a guarded collection: noise them with "
        "a clip_norm, which keeps noised coordinates far below that)"
    )


def _grid_ints(arr: np.ndarray, func: str) -> np.ndarray:
    with np.errstate(over="ignore"):  # a coordinate near float64's limit: refused just below
        scaled = np.rint(arr * _GRID_INV)
    worst = float(np.max(np.abs(scaled)))
    if worst > _INT32_LIMIT:
        raise _range_error(func, "vector", float(np.max(np.abs(arr))))
    return scaled.astype(np.int64)


def _distance_name(distance: Any, func: str) -> str:
    if not isinstance(distance, str):
        raise GuardArgumentTypeError(f"{func}() distance must be str, not {type(distance).__name__}")
    name = str(getattr(distance, "value", distance))
    if name not in _DISTANCES:
        raise GuardArgumentValueError(f"{func}() distance must be one of {_DISTANCES}, got {name!r}")
    return name


def _as_matrix(matrix: Any, func: str) -> np.ndarray:
    if matrix is None or isinstance(matrix, (str, bytes, dict)):
        raise GuardArgumentTypeError(
            f"{func}() matrix must be a 2-D array of numbers (n vectors x d), not {type(matrix).__name__}"
        )
    try:
        arr = np.array(matrix, dtype=np.float64, order="C")
    except (TypeError, ValueError) as exc:
        raise GuardArgumentTypeError(f"{func}() matrix must be a 2-D array of numbers ({exc})") from exc
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise GuardArgumentValueError(f"{func}() matrix must be 2-D (n vectors x d >= 1), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        row = int(np.argmin(np.isfinite(arr).all(axis=1)))
        raise GuardArgumentValueError(f"{func}() row {row} contains NaN or Inf; only finite vectors can be stored")
    return arr


def _nudge_pass(r: Any, aeff: Sequence[Any], twoa: Sequence[Any], deltas: Any, done: Any) -> tuple[Any, int]:
    # One pass of the norm correction over the visiting order, for one residual (a float; aeff,
    # twoa lists of floats; deltas a 1-D array) or for many rows in lockstep (r an array; aeff,
    # twoa, deltas lists of per-position rows): at position p, a row whose |residual| exceeds
    # aeff = max(|k_j|, tolerance) (inf where k_j = 0) steps k_j by one grid unit towards closing
    # the residual, which changes the residual by -(sign(residual) * 2|k_j| + 1). deltas[p]
    # receives sign(residual) * 2|k_j| where a step was taken (else stays 0). Residuals are exact
    # integers in float64 (|r| << 2^53). Returns the new residual and the positions visited.
    scalar = isinstance(r, float)
    p = 0
    for p in range(len(aeff)):
        step = abs(r) > aeff[p]
        if scalar:
            if step:
                delta = math.copysign(twoa[p], r)
                deltas[p] = delta
                r = r - delta - 1.0
            elif r <= _NORM_TOL and r >= -_NORM_TOL:
                break
        else:
            delta = deltas[p]
            np.copysign(twoa[p], r, out=delta)
            delta *= step
            r = r - delta - step
            if p & 15 == 15 and done(r):
                break
    return r, p + 1


# numpy >= 2.0 (the project supports 1.26, which has no vecdot: the row loop then).
_ROW_DOTS = getattr(np, "vecdot", None)


def _row_norms(arr: np.ndarray) -> np.ndarray:
    """Each row's Euclidean norm, bit for bit as np.linalg.norm gives it for the row alone (the
    square root of ndarray.dot of the row with itself)."""
    # np.vecdot's float64 loop calls the same dot function (BLAS ddot) on each row, without a
    # Python loop over the rows.
    squares: np.ndarray | None = None
    if _ROW_DOTS is not None:
        with np.errstate(over="ignore"):
            squares = _ROW_DOTS(arr, arr)
    if squares is not None and np.isfinite(squares).all():
        roots: np.ndarray = np.sqrt(squares)
        return roots
    # A square that overflowed (the rows are finite): the row loop, bit for bit as before; the
    # caller rescales the rows whose norm came out inf (_rescale_extreme_rows).
    norms = np.empty(arr.shape[0])
    with np.errstate(over="ignore"):
        for i, row in enumerate(arr):
            norms[i] = math.sqrt(row.dot(row))
    return norms


# Below this a row's sum of squares has lost bits to the subnormal range (or underflowed to 0).
_NORM_FLOOR = 2.0 ** -500


def _rescale_extreme_rows(arr: np.ndarray, norms: np.ndarray, rows: np.ndarray) -> None:
    # A finite row whose sum of squares overflows (norm inf: divided by it, the row became all
    # zeros and was stored as such) or underflows (a non-zero row refused as a zero vector) is
    # first scaled by a power of two that brings its largest coordinate near 1: exact, and
    # normalising removes the scale again. Rows of ordinary magnitude never come here, so their
    # stored form is unchanged.
    for i in rows:
        peak = float(np.max(np.abs(arr[i])))
        if peak == 0.0:
            continue  # a true zero row: refused as before
        arr[i] = np.ldexp(arr[i], -math.frexp(peak)[1])
        row = arr[i]
        norms[i] = math.sqrt(row.dot(row))


def _unit_grid_rows(arr: np.ndarray, func: str, single: bool) -> np.ndarray:
    # Works in place on ``arr`` (the caller's private float64 copy) and returns the grid
    # integers k as exact float64 values; full-size temporaries are avoided because each one
    # costs more in page faults than the arithmetic done on it.
    n, d = arr.shape
    if n == 1 and _ROW_DOTS is not None and _NATIVE_NUDGE is not None:
        k = _unit_grid_row(arr)
        if k is not None:
            return k
    norms = _row_norms(arr)
    extreme = ~(norms >= _NORM_FLOOR) | (norms == np.inf)
    if extreme.any():
        _rescale_extreme_rows(arr, norms, np.flatnonzero(extreme))
    if not norms.all():
        if single:
            raise GuardArgumentValueError("stored_form() cannot normalise a zero vector for Cosine distance")
        raise GuardArgumentValueError(f"{func}() row {int(np.argmin(norms != 0))} is a zero vector; Cosine "
                                      "distance cannot normalise it")
    k = arr
    k /= norms[:, None]
    k *= _GRID_INV
    np.rint(k, out=k)
    # Nudge coordinates by single grid steps, largest first, until sum(k^2) is within _NORM_TOL
    # of 2^40, i.e. the snapped vector has unit norm to ~1e-8 and Qdrant's f32 re-normalisation
    # is (almost) the identity, so snapping the stored value back gives k exactly. Each row walks
    # its coordinates in the order of decreasing |k| (ties by index) for at most 16 passes; rows
    # walk in lockstep, one array operation per position for the whole batch. All values here
    # are integers far below 2^53, so float64 holds them (and sums of their squares) exactly.
    # Exact integer sums (below 2^53), so any order of summation gives the same residual: vecdot
    # (when there) is einsum's result at half its per-call cost.
    residual = _UNIT_SQ - (np.einsum("ij,ij->i", k, k) if _ROW_DOTS is None else _ROW_DOTS(k, k))
    keys, shift = _sort_keys(k, d)
    if _NATIVE_NUDGE is not None:
        _NATIVE_NUDGE(k, residual, keys, shift, float(_NORM_TOL), 16)
        return k
    flat_k = k.reshape(-1)
    live = np.flatnonzero(np.abs(residual) > _NORM_TOL)
    for n_pass in range(16):
        if live.size == 0:
            break
        # Position-major layout (one contiguous row of live rows per visiting position): each
        # row's p-th key (its coordinate index in the low bits) and |k| there.
        keys_t = np.ascontiguousarray((keys if live.size == n else keys[live]).T)
        if live.size == 1:
            r, _ = _positions(float(residual[live[0]]), keys_t, flat_k, live, n_pass == 0, shift, d)
        else:
            # Blocks of positions: the whole-pass arrays (three of d x n float64) were the peak
            # of the write path and were page-faulted in again on every call.
            r = residual[live]
            for start in range(0, d, _POSITIONS_PER_BLOCK):
                r, done = _positions(r, keys_t[start:start + _POSITIONS_PER_BLOCK], flat_k, live,
                                     n_pass == 0, shift, d)
                if done:
                    break
        residual[live] = r
        live = live[np.abs(residual[live]) > _NORM_TOL]
    return k


def _sort_keys(k: np.ndarray, d: int) -> tuple[np.ndarray, int]:
    """Each row's coordinates in descending-|k| order as sorted keys ((2^20 - |k|) << shift |
    index), and the shift."""
    # One unique key per coordinate (|k| <= 2^20 after normalising), so a plain sort gives the
    # stable descending-|k| order; int32 keys when they fit (at most 2^30 + 1023 up to shift 10),
    # as they sort about three times faster.
    shift = max(1, (d - 1).bit_length())
    key_type = np.int32 if shift <= 10 else np.int64
    keys: npt.NDArray[np.signedinteger[Any]] = k.astype(key_type)
    np.abs(keys, out=keys)
    np.subtract(1 << 20, keys, out=keys)
    keys <<= shift
    keys |= _indices(d, key_type)
    keys.sort(axis=1)
    return keys, shift


def _unit_grid_row(arr: np.ndarray) -> np.ndarray | None:
    """:func:`_unit_grid_rows` of a single row (``arr`` of shape (1, d)) with the native nudge, in
    Python floats where numpy's per-call cost was most of the work; the same operations on the same
    values, so the same k bit for bit. None (``arr`` untouched): a zero or extreme row, which the
    general path handles (rescales or refuses)."""
    row = arr[0]
    with np.errstate(over="ignore"):
        sq = row.dot(row)  # np.vecdot's value for the row (the same BLAS ddot: _row_norms)
    norm = math.sqrt(sq)  # np.sqrt's value: both are IEEE square roots
    if not _NORM_FLOOR <= norm < math.inf:
        return None
    d = row.shape[0]
    row /= norm
    row *= _GRID_INV
    np.rint(row, out=row)
    # An exact integer sum (below 2^53), so the same value as the batch path's.
    residual = np.array([_UNIT_SQ - row.dot(row)])
    keys, shift = _sort_keys(arr, d)
    _NATIVE_NUDGE(arr, residual, keys, shift, float(_NORM_TOL), 16)  # type: ignore[misc]
    return arr


_INDICES: dict[tuple[int, Any], np.ndarray] = {}


def _indices(d: int, key_type: Any) -> np.ndarray:
    """``np.arange(d, dtype=key_type)``, kept (read-only) per dimension: a collection's writes all
    have its dimension."""
    got = _INDICES.get((d, key_type))
    if got is None:
        got = np.arange(d, dtype=key_type)
        got.setflags(write=False)
        if len(_INDICES) >= 64:
            _INDICES.clear()
        _INDICES[(d, key_type)] = got
    return got


# The passes above, row by row in C (native/noise.c, qg_unit_grid_nudge): the same steps, about
# 30x faster than the lockstep array operations, which stay as the pure-Python implementation
# (the kernel's reference twin, _noise_py.unit_grid_nudge, is plain loops, slower still).
_NATIVE_NUDGE = load_kernel("_noise", "_noise_py").unit_grid_nudge if implementation() == "native" else None

# Visiting positions handled per block by _unit_grid_rows: a multiple of 16, so the lockstep
# pass checks for the end at the same positions as over the whole order; 32 x 256 rows of
# float64 are 64 KiB, served from the heap instead of fresh pages.
_POSITIONS_PER_BLOCK = 32


def _positions(r: Any, keys_t: np.ndarray, flat_k: np.ndarray, live: np.ndarray, first: bool,
               shift: int, d: int) -> tuple[Any, bool]:
    # One run of a pass over consecutive visiting positions (keys_t: their keys, one row per
    # position, a column per live row): nudge, then apply the steps taken to flat_k. Returns the
    # residual(s) and whether the pass stopped inside these positions. Each coordinate is
    # visited once per pass and only these positions' coordinates change, so reading |k| for
    # later positions after applying these steps reads the values from the start of the pass.
    if first:
        mag = np.subtract(1 << 20, keys_t >> shift, dtype=np.float64)
    else:
        mag = np.abs(flat_k[(keys_t & ((1 << shift) - 1)) + live * d])
    aeff = np.maximum(mag, float(_NORM_TOL))
    aeff[mag == 0.0] = np.inf
    mag *= 2.0
    deltas = np.zeros(mag.shape)
    if isinstance(r, float):
        r, visited = _nudge_pass(r, aeff[:, 0].tolist(), mag[:, 0].tolist(), deltas[:, 0],
                                 lambda v: abs(v) <= _NORM_TOL)
        stopped = visited < len(keys_t)
    else:
        r, visited = _nudge_pass(r, list(aeff), list(mag), list(deltas), _settled)
        # Settled rows take no further steps, so stopping here changes nothing either way.
        stopped = visited < len(keys_t) or _settled(r)
    # Apply the steps: k_j moves by sign(residual) * sign(k_j), its value at the start of the
    # pass.
    stepped = np.flatnonzero(deltas[:visited] != 0.0)
    at = (keys_t.reshape(-1)[stepped] & ((1 << shift) - 1)) + live[stepped % live.size] * d
    current = flat_k[at]
    flat_k[at] = current + np.sign(deltas.reshape(-1)[stepped]) * np.sign(current)
    return r, stopped


def _settled(r: np.ndarray) -> bool:
    return not (np.abs(r) > _NORM_TOL).any()


def _grid_rows(arr: np.ndarray, func: str, single: bool) -> np.ndarray:
    with np.errstate(over="ignore"):  # a coordinate near float64's limit: refused just below
        scaled = np.rint(arr * _GRID_INV)
    worst = np.max(np.abs(scaled), axis=1)
    # Not _INT32_LIMIT: from 2048 - 2^-14 up, the float32 cast in _stored_rows rounds a coordinate
    # to 2048 itself, a stored vector that no receipt could commit to (commitment_bytes refuses it).
    too_big = worst >= _FLOAT32_TO_2048
    if too_big.any():
        row = int(np.argmax(too_big))
        raise _range_error(func, "vector" if single else f"row {row}", float(np.max(np.abs(arr[row]))))
    return scaled


def _stored_rows(arr: np.ndarray, name: str, func: str, single: bool) -> np.ndarray:
    if arr.shape[0] == 0:
        return np.empty(arr.shape, dtype=np.float32)
    if name == "Cosine":
        k = _unit_grid_rows(arr, func, single)
        _cosine_repair.repair(k)
    else:
        k = _grid_rows(arr, func, single)
    # k holds integers as float64; rint gives -0.0 for small negatives, and + 0.0 makes every
    # zero +0.0, as the original int64 path did.
    k += 0.0
    # float64 -> float32 rounds large grid values to float32's coarser grid, still a multiple of
    # 2^-20 whenever |v| >= 8, so the result is exactly representable and on the grid.
    k *= COMMIT_GRID
    return k.astype(np.float32)


def stored_form(vector: Any, *, distance: str) -> np.ndarray:
    """Return the exact float32 vector the guard sends to Qdrant and commits to in the receipt.

    Every coordinate is a multiple of :data:`COMMIT_GRID` (2^-20). For ``"Cosine"`` the vector is
    first normalised in float64 and its norm is then corrected by single grid steps so that
    Qdrant's own float32 re-normalisation leaves every coordinate within half a grid step, which
    :func:`commitment_bytes` rounds back to the same integers. A vector still more than 1/4 grid
    step from its exact normalisation (about 1 in 200 at d = 2, rare at d = 3) is then moved to a
    nearby grid point that is within it (``_cosine_repair``).

    Args:
        vector: 1-D finite numbers.
        distance: Qdrant distance of the collection: ``"Cosine"``, ``"Euclid"``, ``"Dot"`` or
            ``"Manhattan"`` (a ``qdrant_client.models.Distance`` works too).

    Returns:
        A new float32 array.

    Raises:
        TypeError: ``vector`` is not a sequence of numbers or ``distance`` is not a str.
        ValueError: NaN/Inf, wrong shape, a zero vector for Cosine, unknown distance.
        InvalidVectorError: a coordinate too large for the commitment grid (|v| >= 2048, not
            Cosine); a ValueError too.
    """
    name = _distance_name(distance, "stored_form")
    arr = _as_vector(vector, "stored_form")[None, :]
    if name == "Cosine":
        arr = arr.copy()  # the Cosine path works in place on a private copy
    row: np.ndarray = _stored_rows(arr, name, "stored_form", True)[0]
    return row


def stored_form_batch(matrix: Any, *, distance: str) -> np.ndarray:
    """Return :func:`stored_form` of every row of ``matrix`` at once.

    The result is bit-identical to ``np.stack([stored_form(row, distance=distance) for row in
    matrix])``; the Cosine norm correction runs for all rows together as array operations.

    Args:
        matrix: n x d finite numbers (n may be 0; d >= 1).
        distance: Qdrant distance of the collection, as for :func:`stored_form`.

    Returns:
        A new (n, d) float32 array.

    Raises:
        TypeError: ``matrix`` is not a 2-D array of numbers or ``distance`` is not a str.
        ValueError: NaN/Inf, wrong shape, a zero row for Cosine, |v| >= 2048, unknown distance
            (the message names the first bad row).
    """
    name = _distance_name(distance, "stored_form_batch")
    arr = _as_matrix(matrix, "stored_form_batch")
    return _stored_rows(arr, name, "stored_form_batch", False)


def commitment_bytes(vector: Any) -> bytes:
    """Return the vector snapped to the 2^-20 grid as little-endian int32 (round half to even).

    Raises:
        TypeError: ``vector`` is not a sequence of numbers.
        ValueError: NaN/Inf, wrong shape, or |v| >= 2048.
    """
    ints = _grid_ints(_as_vector(vector, "commitment_bytes"), "commitment_bytes")
    return ints.astype("<i4").tobytes()


def vector_commitment(vector: Any, salt: bytes) -> str:
    """Return hex SHA-256(b"qg-vec-v1" || salt || uint32_le(dim) || commitment_bytes(vector)).

    Args:
        vector: the stored (noised) vector; never call this on a clean vector.
        salt: 16 random bytes.

    Raises:
        TypeError: ``salt`` is not bytes.
        ValueError: ``salt`` is not 16 bytes, or the vector is invalid.
    """
    if not isinstance(salt, (bytes, bytearray)):
        raise GuardArgumentTypeError(f"vector_commitment() salt must be bytes, not {type(salt).__name__}")
    if len(salt) != SALT_BYTES:
        raise GuardArgumentValueError(f"vector_commitment() salt must be {SALT_BYTES} bytes, got {len(salt)}")
    data = commitment_bytes(vector)
    h = hashlib.sha256(COMMITMENT_PREFIX)
    h.update(bytes(salt))
    h.update(struct.pack("<I", len(data) // 4))
    h.update(data)
    return h.hexdigest()


# Vectors snapped at a time by _grid_blocks. Whole-batch temporaries (256 x 384 float64 =
# 768 KiB each, five of them) grew the heap past glibc's trim threshold, so every call
# page-faulted them in afresh (about 330 faults per 256-point batch, seen with strace and
# getrusage); 32-vector blocks (96 KiB) are reused from the free heap.
_GRID_BLOCK_ROWS = 32


def _grid_blocks(vectors: Sequence[np.ndarray]) -> list[bytes] | None:
    """:func:`commitment_bytes` of the vectors, concatenated per block of :data:`_GRID_BLOCK_ROWS`,
    or None when one is not numeric, not finite, too large or off the grid (the item-by-item
    path then raises the first error). Every check is elementwise or an all/any, so the blocks
    decide exactly as one whole-batch matrix did."""
    blocks = []
    for start in range(0, len(vectors), _GRID_BLOCK_ROWS):
        try:
            arr = np.array(vectors[start:start + _GRID_BLOCK_ROWS], dtype=np.float64)
        except (TypeError, ValueError):
            return None
        if not np.isfinite(arr).all():
            return None
        ints = np.rint(arr * _GRID_INV)
        if float(np.max(np.abs(ints))) > _INT32_LIMIT or not np.array_equal(ints * COMMIT_GRID, arr):
            return None
        blocks.append(ints.astype("<i4").tobytes())
    return blocks
