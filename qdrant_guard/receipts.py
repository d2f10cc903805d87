"""Signed reconstruction-resistance receipts: what noise the signer says it added to a stored vector.

A receipt binds the noise parameters to a salted commitment of the vector stored in Qdrant (each
coordinate as its point on the 2^-20 grid, so a vector within half a step of it verifies alike),
the collection, the point id and the vector name, under an Ed25519 signature. It proves that the
holder of the signing key *asserted* these facts; it does not prove that noise was really drawn
(a compromised signer can lie). See docs/receipt-format.md.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import inspect
import json
import math
import os
import re
import struct
import time
import uuid
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Mapping, Sequence

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from qdrant_client.http import models

from . import _cosine_repair, merkle
from ._impl import implementation, load_kernel
from .canonical import canonical_json, decode_canonical
from .errors import GuardArgumentTypeError, GuardArgumentValueError, InvalidVectorError, ReceiptError
from .keys import key_id as _key_id
from .names import shown as _shown
from .point_uuid import real_uuid
from .noise import check_release as _check_release
from .noise_params import DTYPES, MECHANISMS, NoiseParams, guarantee_mismatch

__all__ = [
    "RECEIPT_KEY",
    "RECEIPT_FORMAT",
    "COMMIT_GRID",
    "SIGNATURE_PREFIX",
    "BATCH_SIGNATURE_PREFIX",
    "REASONS",
    "ISSUED_AT_LEEWAY_S",
    "stored_form",
    "stored_form_batch",
    "commitment_bytes",
    "vector_commitment",
    "normalize_point_id",
    "ReceiptSigner",
    "ReceiptItem",
    "ReceiptCheck",
    "PointReceiptReport",
    "issue_receipt",
    "issue_receipts_batch",
    "receipts_for_payload",
    "receipts_from_payload",
    "stored_receipts",
    "verify_receipt",
    "verify",
]

RECEIPT_KEY = "_qdrant_guard_receipt"
RECEIPT_FORMAT = "qg-receipt/1"
PAYLOAD_CONTAINER_VERSION = 1
COMMIT_GRID = 2.0 ** -20
SIGNATURE_PREFIX = b"qdrant-guard receipt v1\x00"
BATCH_SIGNATURE_PREFIX = b"qdrant-guard receipt batch v1\x00"
COMMITMENT_PREFIX = b"qg-vec-v1"
SALT_BYTES = 16
#: With ``max_age_s``, receipts issued more than this far after ``now`` are refused (clock skew).
ISSUED_AT_LEEWAY_S = 300.0
ALGORITHM = "Ed25519"

REASONS = (
    "ok",
    "malformed",
    "non_canonical",
    "unknown_key",
    "revoked_key",
    "bad_signature",
    "bad_merkle_proof",
    "vector_mismatch",
    "collection_mismatch",
    "point_mismatch",
    "vector_name_mismatch",
    "expired",
    "unsupported_version",
    "algorithm",
    # The signed guarantee sentence does not state the signed numeric fields (it names another
    # epsilon, delta, radius, sigma or mechanism, or is no wording this library writes).
    "guarantee_mismatch",
    # Only from verify(): the point or its receipt is absent.
    "missing_point",
    "missing_receipt",
    # Only from verify(): a sparse vector or multivector, which the guard never stores on a
    # sensitive collection (no receipt can cover one).
    "unsupported_vector",
    # Only from verify(check_noise=True): the signature verified but the signed noise parameters
    # are ones a guarded write refuses (noise.check_release, or weaker than noise_policy).
    "insufficient_noise",
    # Only from verify(noise_policy=...): the signature verified but the receipt names another noise
    # mechanism than the collection's [noise] mechanism (mechanism_mismatch).
    "mechanism_mismatch",
    # Only from verify(policy=...): the signature verified but the receipt's signed model_id names
    # another embedding model than the policy's utility.embedding_model(s) declares for the vector.
    "model_mismatch",
    # Only from verify(policy=...) on a PUBLIC collection: a vector without a receipt, which that
    # class does not need. Not a failure (PointReceiptReport.ok is True), but no receipt verified.
    "not_required",
)

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
_HEX64 = re.compile(r"[0-9a-f]{64}")
_INT_ID = re.compile(r"int:(0|[1-9][0-9]*)")


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
    squares = None
    if _ROW_DOTS is not None:
        with np.errstate(over="ignore"):
            squares = _ROW_DOTS(arr, arr)
    if squares is not None and np.isfinite(squares).all():
        return np.sqrt(squares)
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
    keys = k.astype(key_type)
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
    return _stored_rows(arr, name, "stored_form", True)[0]


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


def normalize_point_id(point_id: Any) -> str:
    """Return the typed text form of a Qdrant point id: ``"int:<n>"`` or ``"uuid:<lowercase-hyphenated>"``.

    Raises:
        TypeError: not an int, str or uuid.UUID (bool is refused).
        ValueError: a negative or >= 2^64 int, or a str that is not a UUID.
    """
    if isinstance(point_id, bool):
        raise GuardArgumentTypeError("point_id must be int, str or uuid.UUID, not bool")
    if isinstance(point_id, int):
        # The int's own value, which pydantic sends: a subclass may override __int__ and comparisons.
        value = int.__int__(point_id)
        if not 0 <= value < 2 ** 64:
            raise GuardArgumentValueError(f"point_id {value} is outside Qdrant's unsigned 64-bit id range")
        return f"int:{value}"
    if isinstance(point_id, uuid.UUID):
        # The id's own 128 bits, not its str(): a subclass may override __str__ (or shadow .int).
        try:
            text = str(real_uuid(point_id))
        except GuardArgumentValueError:
            raise GuardArgumentTypeError(
                f"point_id {type(point_id).__name__} holds no UUID value; pass a uuid.UUID or its str") from None
        if type(point_id) is not uuid.UUID and str(point_id) != text:
            # qdrant-client sends str(id): the receipt would name one point and Qdrant store another
            # (or text that is no UUID, which the batch's inline JSON does not escape).
            raise GuardArgumentValueError(
                f"point_id {text} is a {type(point_id).__name__} whose str() is {str(point_id)!r}, not its "
                f"value, and qdrant-client would send that; pass str(point_id) or a plain uuid.UUID")
        return f"uuid:{text}"
    if isinstance(point_id, str):
        try:
            return f"uuid:{uuid.UUID(point_id)}"
        except ValueError:
            raise GuardArgumentValueError(
                f"point_id {point_id!r} is neither an unsigned integer nor a UUID string"
            ) from None
    raise GuardArgumentTypeError(f"point_id must be int, str or uuid.UUID, not {type(point_id).__name__}")


# --------------------------------------------------------------------------- signing

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    raw = base64.b64decode(text, validate=True)
    if _b64(raw) != text:
        raise ValueError("non-canonical base64")
    return raw


class ReceiptSigner:
    """Holds an Ed25519 private key and its key id; signs receipts and audit checkpoints.

    Args:
        private_key: the signing key.
        key_id: identifier written into receipts (default: :func:`qdrant_guard.keys.key_id`).
            Verifiers look keys up by this id.
    """

    def __init__(self, private_key: Ed25519PrivateKey, *, key_id: str | None = None) -> None:
        if not isinstance(private_key, Ed25519PrivateKey):
            raise GuardArgumentTypeError(
                "ReceiptSigner() private_key must be an Ed25519PrivateKey, not "
                f"{type(private_key).__name__}"
            )
        if key_id is not None and (not isinstance(key_id, str) or not key_id):
            raise GuardArgumentTypeError("ReceiptSigner() key_id must be a non-empty str or None")
        self._sk = private_key
        self.public_key: Ed25519PublicKey = private_key.public_key()
        self.key_id: str = key_id if key_id is not None else _key_id(self.public_key)

    def sign(self, data: bytes) -> bytes:
        """Return the 64-byte Ed25519 signature of ``data``."""
        return self._sk.sign(data)

    @property
    def audit_mac_key(self) -> bytes:
        """The key of this signer's MACs on audit entries (:func:`qdrant_guard.audit_mac.mac_key`)."""
        return self.audit_mac.key

    @property
    def audit_mac(self) -> Any:
        """This signer's :class:`qdrant_guard.audit_mac.EntryMac` (its key derived once)."""
        found = self.__dict__.get("_audit_mac")
        if found is None:
            from .audit_mac import EntryMac, mac_key

            found = self._audit_mac = EntryMac(self.key_id, mac_key(self._sk))
        return found

    def __repr__(self) -> str:
        return f"ReceiptSigner(key_id={self.key_id!r})"


@dataclass(frozen=True)
class ReceiptItem:
    """One (point, vector name) to receive a receipt in :func:`issue_receipts_batch`."""

    params: NoiseParams
    vector: Any
    collection: str
    point_id: Any
    vector_name: str = ""
    model_id: str | None = None
    issued_at: float | None = None


def new_item(params: NoiseParams, vector: Any, collection: str, point_id: Any, vector_name: str,
             model_id: str | None) -> ReceiptItem:
    """``ReceiptItem(...)`` (issued_at None) without the frozen dataclass's ``__init__``, which sets
    each field with its own object.__setattr__ (~1.2 us; the guarded upsert makes one a point): the
    same fields, in the same order, in the instance's __dict__."""
    item = object.__new__(ReceiptItem)
    item.__dict__.update(params=params, vector=vector, collection=collection, point_id=point_id,
                         vector_name=vector_name, model_id=model_id, issued_at=None)
    return item


def _body(signer: ReceiptSigner, item: ReceiptItem) -> dict[str, Any]:
    if not isinstance(item.params, NoiseParams):
        raise GuardArgumentTypeError(f"params must be NoiseParams, not {type(item.params).__name__}")
    if not isinstance(item.collection, str) or not item.collection:
        raise GuardArgumentTypeError("collection must be a non-empty str")
    if not isinstance(item.vector_name, str):
        raise GuardArgumentTypeError(f"vector_name must be str, not {type(item.vector_name).__name__}")
    if item.model_id is not None and not isinstance(item.model_id, str):
        raise GuardArgumentTypeError(f"model_id must be str or None, not {type(item.model_id).__name__}")
    arr = _as_vector(item.vector, "issue_receipt")
    ints = _grid_ints(arr, "issue_receipt")
    if not np.array_equal(ints.astype(np.float64) * COMMIT_GRID, arr):
        raise GuardArgumentValueError(
            "issue_receipt() vector is not on the 2^-20 commitment grid; pass "
            "stored_form(vector, distance=...) and store exactly that vector"
        )
    if item.params.dim != arr.size:
        raise GuardArgumentValueError(
            f"issue_receipt() params.dim is {item.params.dim} but the vector has {arr.size} values"
        )
    issued = time.time() if item.issued_at is None else item.issued_at
    if isinstance(issued, bool) or not isinstance(issued, (int, float)) or not math.isfinite(issued):
        raise GuardArgumentTypeError("issued_at must be a finite number of seconds since the epoch or None")
    salt = os.urandom(SALT_BYTES)
    return _body_dict(signer, item, _signed_params(item.params), _b64(salt),
                      vector_commitment(arr, salt), issued)


def _signed_params(params: NoiseParams) -> dict[str, Any]:
    # The params object as signed: float fields as float, dim as int, in field order.
    out = params.as_dict()
    for name in ("epsilon", "delta", "radius", "scale", "lattice_step"):
        out[name] = float(out[name])
    if out["clip_norm"] is not None:
        out["clip_norm"] = float(out["clip_norm"])
    out["dim"] = int(out["dim"])
    _refuse_lying_sentence(out)
    return out


def _refuse_lying_sentence(params: dict[str, Any]) -> None:
    # Signing a sentence the fields contradict would hand out a receipt that every verifier
    # refuses (guarantee_mismatch): refuse it here, where the caller can still fix it.
    try:
        wrong = guarantee_mismatch(params)
    except (TypeError, ValueError, KeyError):
        return  # a malformed field: the caller's own checks name it
    if wrong is not None:
        raise ReceiptError(
            f"issue_receipt() params.guarantee does not state the other fields ({wrong}); build "
            "NoiseParams with qdrant_guard.noise_params.guarantee_sentence(...) of its fields, or take "
            "the params privatize() returned"
        )


def _body_dict(signer: ReceiptSigner, item: ReceiptItem, params: dict[str, Any], salt: str,
               commitment: str, issued: float) -> dict[str, Any]:
    return {
        "format": RECEIPT_FORMAT,
        "alg": ALGORITHM,
        "kid": signer.key_id,
        "params": params,
        "model_id": item.model_id,
        "salt": salt,
        "commitment": commitment,
        "collection": item.collection,
        "point_id": normalize_point_id(item.point_id),
        "vector_name": item.vector_name,
        "issued_at": int(round(issued * 1000)),
    }


def _batch_bodies(signer: ReceiptSigner, items: Sequence[ReceiptItem]
                  ) -> tuple[list[dict[str, Any]], list[bytes]] | None:
    """The bodies of :func:`_body` for a whole batch at once and their canonical encodings, or
    None if any item needs the item-by-item path (which then raises the first error exactly as
    before).

    Vectors are validated, snapped and committed as one matrix, the salts come from one
    ``os.urandom`` call (16 independent random bytes per item, as before), and each distinct
    NoiseParams is converted once.
    """
    vectors = []
    for item in items:
        vec = item.vector
        if (type(item.params) is not NoiseParams or type(item.collection) is not str
                or not item.collection or type(item.vector_name) is not str
                or (item.model_id is not None and type(item.model_id) is not str)
                or type(vec) is not np.ndarray or vec.ndim != 1):
            return None
        issued = item.issued_at
        if issued is not None and (type(issued) not in (int, float) or not math.isfinite(issued)):
            return None
        vectors.append(vec)
    return _column_bodies(signer, [item.params for item in items], vectors, [item.collection for item in items],
                          [item.point_id for item in items], [item.vector_name for item in items],
                          [item.model_id for item in items], [item.issued_at for item in items])


def _column_bodies(signer: ReceiptSigner, params_of: Sequence[NoiseParams], vectors: Sequence[np.ndarray],
                   collections: Sequence[str], point_ids: Sequence[Any], vector_names: Sequence[str],
                   model_ids: Sequence[str | None], issued_ats: Sequence[float | None]
                   ) -> tuple[list[dict[str, Any]], list[bytes]] | None:
    """:func:`_batch_bodies` of the items these columns hold, once each item's field types are
    known to be those the fast path takes (NoiseParams, a non-empty str collection, a str vector
    name, None or a str model id, a 1-D ndarray vector, None or a finite int/float issued_at)."""
    dim = vectors[0].size
    if dim == 0 or any(v.size != dim for v in vectors):
        return None
    blocks = _grid_blocks(vectors)
    if blocks is None:
        return None
    params_by_id: dict[int, tuple[dict[str, Any], str]] = {}
    for prm in params_of:
        if prm.dim != dim:
            return None
        if id(prm) not in params_by_id:
            signed = _signed_params(prm)
            try:
                params_by_id[id(prm)] = (signed, canonical_json(signed).decode("utf-8"))
            except (TypeError, ValueError):
                return None
    n = len(vectors)
    row = 4 * dim
    salts = os.urandom(SALT_BYTES * n)
    salts_b64 = _b64_salts(salts, n)
    now_ms = int(round(time.time() * 1000))
    prefix = COMMITMENT_PREFIX
    dim_bytes = struct.pack("<I", dim)
    sha256 = hashlib.sha256
    kid = signer.key_id
    kid_json = _encode_str(kid)
    # The batch's collection, vector names and model ids repeat: each distinct one is encoded once.
    encoded_strs: dict[str, str] = {}
    bodies, encoded = [], []
    for i, (prm, collection, pid, vector_name, model_id, issued_at) in enumerate(
            zip(params_of, collections, point_ids, vector_names, model_ids, issued_ats)):
        salt = salts[SALT_BYTES * i:SALT_BYTES * (i + 1)]
        block, at = blocks[i // _GRID_BLOCK_ROWS], row * (i % _GRID_BLOCK_ROWS)
        commitment = sha256(b"".join((prefix, salt, dim_bytes, block[at:at + row]))).hexdigest()
        params, params_json = params_by_id[id(prm)]
        # normalize_point_id's own result for an int in range, without its isinstance chain.
        pid = f"int:{pid}" if type(pid) is int and 0 <= pid < _ID_LIMIT else normalize_point_id(pid)
        issued = now_ms if issued_at is None else int(round(issued_at * 1000))
        # The same dict as _body_dict, key for key in the same order.
        body = {
            "format": RECEIPT_FORMAT,
            "alg": ALGORITHM,
            "kid": kid,
            "params": dict(params),
            "model_id": model_id,
            "salt": salts_b64[i],
            "commitment": commitment,
            "collection": collection,
            "point_id": pid,
            "vector_name": vector_name,
            "issued_at": issued,
        }
        bodies.append(body)
        if (coll_json := encoded_strs.get(collection)) is None:
            coll_json = encoded_strs[collection] = _encode_str(collection)
        if (name_json := encoded_strs.get(vector_name)) is None:
            name_json = encoded_strs[vector_name] = _encode_str(vector_name)
        if model_id is None:
            model_json = "null"
        elif (model_json := encoded_strs.get(model_id)) is None:
            model_json = encoded_strs[model_id] = _encode_str(model_id)
        # canonical_json(body) (tests/test_receipts_batch.py checks it): the keys in code-point
        # order, the params encoded once per NoiseParams, the repeated strings once per batch;
        # issued_at is an int, and the point id ("int:<digits>" or "uuid:<hex and hyphens>"),
        # the hex commitment and the base64 salt hold no character JSON escapes.
        encoded.append((
            f'{{"alg":{_ALG_JSON},"collection":{coll_json},"commitment":"{commitment}",'
            f'"format":{_FORMAT_JSON},"issued_at":{issued},"kid":{kid_json},"model_id":{model_json},'
            f'"params":{params_json},"point_id":"{pid}","salt":"{salts_b64[i]}","vector_name":{name_json}}}'
        ).encode("utf-8"))
    return bodies, encoded


_ID_LIMIT = 2 ** 64


def _b64_salts(salts: bytes, n: int) -> list[str]:
    """``[_b64(salt) for salt in the n SALT_BYTES-byte salts of salts]`` with one base64 call.

    Each 16-byte salt, padded with two zero bytes to a multiple of three, encodes to 24
    characters whose first 22 are the salt's own encoding (the zeros only fill what the salt's
    "==" padding stands for), so each salt's text is its 22 characters and "==".
    """
    padded = np.zeros((n, SALT_BYTES + 2), dtype=np.uint8)
    padded[:, :SALT_BYTES] = np.frombuffer(salts, dtype=np.uint8).reshape(n, SALT_BYTES)
    text = base64.b64encode(padded.tobytes()).decode("ascii")
    return [text[24 * i:24 * i + 22] + "==" for i in range(n)]


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


_encode_str = json.encoder.encode_basestring  # json's own string encoder, as canonical_json uses
_ALG_JSON = _encode_str(ALGORITHM)
_FORMAT_JSON = _encode_str(RECEIPT_FORMAT)


def _check_signer(signer: Any, func: str) -> None:
    if not isinstance(signer, ReceiptSigner):
        raise GuardArgumentTypeError(f"{func}() signer must be a ReceiptSigner, not {type(signer).__name__}")


def issue_receipt(
    signer: ReceiptSigner,
    *,
    params: NoiseParams,
    vector: Any,
    collection: str,
    point_id: int | str | uuid.UUID,
    vector_name: str = "",
    model_id: str | None = None,
    issued_at: float | None = None,
) -> dict[str, Any]:
    """Issue one individually signed receipt for a stored vector.

    Args:
        signer: the signing key.
        params: the noise release parameters.
        vector: the stored form (output of :func:`stored_form`), exactly as sent to Qdrant.
        collection: collection name.
        point_id: Qdrant point id (unsigned int or UUID).
        vector_name: named vector ("" for the default vector).
        model_id: embedding model identifier, if known.
        issued_at: seconds since the epoch (default: now); recorded in integer milliseconds.

    Returns:
        A JSON-serialisable dict to store under :data:`RECEIPT_KEY` (via :func:`receipts_for_payload`).

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: the vector is invalid, off the commitment grid, or does not match ``params.dim``.
        ReceiptError: ``params.guarantee`` is not the sentence its fields give (the receipt would
            fail verification as ``guarantee_mismatch``).
    """
    _check_signer(signer, "issue_receipt")
    body = _body(signer, ReceiptItem(params, vector, collection, point_id, vector_name, model_id,
                                     issued_at))
    receipt = dict(body)
    receipt["sig"] = _b64(signer.sign(SIGNATURE_PREFIX + canonical_json(body)))
    return receipt


def _batch_message(root: bytes, size: int) -> bytes:
    return BATCH_SIGNATURE_PREFIX + root + struct.pack(">Q", size)


def issue_receipts_batch(signer: ReceiptSigner, items: Sequence[ReceiptItem]) -> list[dict[str, Any]]:
    """Issue receipts for many points under one signature over a Merkle root.

    Each receipt carries ``batch = {"index", "size", "path"}`` (its leaf index, the number of
    leaves and the sibling hashes) and ``sig`` (the root signature), so it verifies on its own.

    Args:
        signer: the signing key.
        items: one :class:`ReceiptItem` per (point, vector name).

    Returns:
        Receipts in the order of ``items`` (empty list for no items).

    Raises:
        ReceiptError: an item's ``params.guarantee`` is not the sentence its fields give.
    """
    _check_signer(signer, "issue_receipts_batch")
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise GuardArgumentTypeError(
            f"issue_receipts_batch() items must be a sequence of ReceiptItem, not {type(items).__name__}"
        )
    for i, item in enumerate(items):
        if not isinstance(item, ReceiptItem):
            raise GuardArgumentTypeError(f"items[{i}] must be ReceiptItem, not {type(item).__name__}")
    if not items:
        return []
    fast = _batch_bodies(signer, items)
    if fast is None:
        bodies = [_body(signer, item) for item in items]
        encoded = [canonical_json(b) for b in bodies]
    else:
        bodies, encoded = fast
    return _signed_batch(signer, bodies, encoded)


def issue_receipts_rows(signer: ReceiptSigner, groups: Sequence[tuple[NoiseParams, Sequence[np.ndarray], str,
                                                                       Sequence[Any], str, Sequence[str | None]]]
                        ) -> list[dict[str, Any]]:
    """:func:`issue_receipts_batch` of the items ``ReceiptItem(params, vector, collection, point_id,
    vector_name, model_id)`` for each ``(params, vectors, collection, point_ids, vector_name,
    model_ids)`` group and its vectors, point ids and model ids in turn (issued_at None), without
    making the items: the guarded upsert's receipts, one group per noised vector name. The same
    receipts, errors and order; items are made only where issue_receipts_batch's fast path would
    not take them."""
    _check_signer(signer, "issue_receipts_rows")
    for i, (_, vecs, _, pids, _, models_) in enumerate(groups):
        # The groups are flattened column by column below: a short column would shift the point ids
        # (or model ids) of every later row and group, and each receipt would name another point.
        if not len(vecs) == len(pids) == len(models_):
            raise GuardArgumentValueError(
                f"issue_receipts_rows() group {i} has {len(vecs)} vector(s), {len(pids)} point id(s) and "
                f"{len(models_)} model id(s); give one point id and one model id (or None) per vector")
    fast = None
    if all(type(prm) is NoiseParams and type(coll) is str and coll and type(vname) is str
           and all(m is None or type(m) is str for m in models_)
           and all(type(v) is np.ndarray and v.ndim == 1 for v in vecs)
           for prm, vecs, coll, _, vname, models_ in groups):
        n = sum(len(g[1]) for g in groups)
        if n:
            fast = _column_bodies(
                signer, [g[0] for g in groups for _ in range(len(g[1]))], [v for g in groups for v in g[1]],
                [g[2] for g in groups for _ in range(len(g[1]))], [p for g in groups for p in g[3]],
                [g[4] for g in groups for _ in range(len(g[1]))], [m for g in groups for m in g[5]], [None] * n)
    if fast is None:
        return issue_receipts_batch(signer, [
            new_item(prm, v, coll, pid, vname, m)
            for prm, vecs, coll, pids, vname, models_ in groups for v, pid, m in zip(vecs, pids, models_)])
    return _signed_batch(signer, *fast)


def _signed_batch(signer: ReceiptSigner, bodies: list[dict[str, Any]], encoded: list[bytes]) -> list[dict[str, Any]]:
    """The receipts of a batch's bodies: one signature over the Merkle root of their encodings,
    and each its leaf's index and audit path."""
    levels = merkle.build_levels([merkle.leaf_hash(e) for e in encoded])
    root = levels[-1][0]
    sig = _b64(signer.sign(_batch_message(root, len(bodies))))
    hex_levels = [[h.hex() for h in level] for level in levels]  # each node's hex once
    size = len(bodies)
    # Every leaf's audit path in one pass (merkle.audit_paths equals audit_path leaf by leaf).
    for i, (receipt, path) in enumerate(zip(bodies, merkle.audit_paths(hex_levels))):
        receipt["batch"] = {"index": i, "size": size, "path": path}
        receipt["sig"] = sig
    return bodies


def receipts_for_payload(receipts_by_name: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Wrap receipts for storage: ``payload[RECEIPT_KEY] = {"v": 1, "vectors": {name: receipt}}``.

    The default (unnamed) vector uses the name ``""``.
    """
    # `type(x) is dict` first: isinstance against typing.Mapping goes through typing's generic
    # alias checks (microseconds a call, twice per point on every guarded write); a dict is a
    # Mapping, so the outcome is the same.
    if type(receipts_by_name) is not dict and not isinstance(receipts_by_name, Mapping):
        raise GuardArgumentTypeError(
            "receipts_for_payload() argument must be a mapping of vector name to receipt, not "
            f"{type(receipts_by_name).__name__}"
        )
    vectors = {}
    for name, receipt in receipts_by_name.items():
        if not isinstance(name, str):
            raise GuardArgumentTypeError(f"vector name must be str, not {type(name).__name__}")
        if type(receipt) is not dict and not isinstance(receipt, Mapping):
            raise GuardArgumentTypeError(f"receipt for {name!r} must be a dict, not {type(receipt).__name__}")
        vectors[name] = dict(receipt)
    return {"v": PAYLOAD_CONTAINER_VERSION, "vectors": vectors}


def receipts_from_payload(payload: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return ``{vector_name: receipt}`` stored in a point payload (``{}`` when there is none).

    Raises:
        ReceiptError: the reserved key holds something that is not a version-1 container.
    """
    if payload is None:
        return {}
    # `type(x) is dict` first, as in receipts_for_payload (a dict is a Mapping: same outcome;
    # three typing.Mapping checks cost microseconds a point, up to three times per updated point).
    if type(payload) is not dict and not isinstance(payload, Mapping):
        raise GuardArgumentTypeError(f"payload must be a mapping or None, not {type(payload).__name__}")
    container = payload.get(RECEIPT_KEY)
    if container is None:
        return {}
    if (
        (type(container) is not dict and not isinstance(container, Mapping))
        or container.get("v") != PAYLOAD_CONTAINER_VERSION
        or type(container.get("v")) is not int
        or (type(vectors := container.get("vectors")) is not dict and not isinstance(vectors, Mapping))
    ):
        raise ReceiptError(
            f"payload[{RECEIPT_KEY!r}] is not a receipt container "
            '{"v": 1, "vectors": {name: receipt}}'
        )
    return dict(container["vectors"])


def stored_receipts(payload: Mapping[str, Any] | None) -> dict[str, Any]:
    """:func:`receipts_from_payload` for a point read back from Qdrant: a malformed container
    (written around the guard) counts as no receipts, so the vectors it claims to certify are
    treated as unreceipted instead of failing every read of the collection."""
    try:
        return receipts_from_payload(payload)
    except ReceiptError:
        return {}


# --------------------------------------------------------------------------- verification

@dataclass(frozen=True)
class ReceiptCheck:
    """Outcome of :func:`verify_receipt`.

    Attributes:
        ok: True only if every check passed.
        reason: ``"ok"`` or one of :data:`REASONS`.
        params: the signed noise parameters (only when ``ok``, or ``"insufficient_noise"``).
        key_id: the key id named by the receipt (when it could be read).
        detail: a human-readable explanation.
        model_id: the embedding model the receipt's signer names (its signed ``model_id``; only
            when the signature verified; None also when the signer named none). It is what the
            signer asserts: nothing in a vector shows which model made it.
    """

    ok: bool
    reason: str
    params: NoiseParams | None
    key_id: str | None
    detail: str = ""
    model_id: str | None = None

    def __bool__(self) -> bool:
        return self.ok


class _Reject(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


_TOP_FIELDS = {
    "format": str, "alg": str, "kid": str, "params": dict, "model_id": (str, type(None)),
    "salt": str, "commitment": str, "collection": str, "point_id": str, "vector_name": str,
    "issued_at": int, "sig": str,
}
_PARAM_FIELDS = {
    "mechanism": str, "mechanism_version": str, "epsilon": float, "delta": float,
    "radius": float, "clip_norm": (float, type(None)), "scale": float, "lattice_step": float,
    "rng_id": str, "dim": int, "dtype": str, "guarantee": str,
}


def _check_fields(obj: Mapping[str, Any], spec: Mapping[str, Any], where: str,
                  optional: Collection[str] = ()) -> None:
    missing = [k for k in spec if k not in obj and k not in optional]
    if missing:
        raise _Reject("malformed", f"{where} lacks field(s) {', '.join(sorted(missing))}")
    extra = [k for k in obj if k not in spec]
    if extra:
        raise _Reject("malformed", f"{where} has unknown field(s) {', '.join(sorted(map(str, extra)))}")
    for name, want in spec.items():
        if name not in obj:
            continue
        value = obj[name]
        if isinstance(value, bool) and want is not bool:
            raise _Reject("malformed", f"{where}.{name} is a bool")
        if isinstance(value, want):
            continue
        wants_float = want is float or (isinstance(want, tuple) and float in want)
        if wants_float and isinstance(value, int):
            raise _Reject("non_canonical", f"{where}.{name} is the int {value}; a float is signed")
        raise _Reject("malformed", f"{where}.{name} has type {type(value).__name__}")


# Deeper than any receipt (receipt.batch.path's items are at depth 3): a value below is kept as it
# is, and the field checks refuse it.
_PLAIN_DEPTH = 6


def plain_receipt(value: Any, _depth: int = 0) -> Any:
    """A receipt given as Python objects, as exact JSON types (str, int, float, bool, None, list,
    dict): a str, int or float subclass becomes its value, a dict subclass or other Mapping a dict
    of its entries, a list subclass or tuple a list. Anything else is kept (the checks refuse it).

    The signature covers the values (JSON encodes a subclass by its value), but the binding
    checks compare with ``!=``, ``>`` and ``in``: a str subclass whose ``__ne__`` said False made
    a receipt for another point, collection or vector verify here, and a float subclass could hide
    an epsilon above the ceiling. Verifying this copy, and storing it, closes that."""
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    if _depth > _PLAIN_DEPTH:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):  # bool is exact (it has no subclasses)
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, dict) or (_depth == 0 and isinstance(value, Mapping)):
        items = dict.items(value) if isinstance(value, dict) else value.items()
        return {plain_receipt(k, _depth + 1): plain_receipt(v, _depth + 1) for k, v in items}
    if isinstance(value, list):
        return [plain_receipt(v, _depth + 1) for v in list.__iter__(value)]
    return value


def _parse(receipt: Any) -> tuple[dict[str, Any], bytes, dict[str, Any] | None]:
    if isinstance(receipt, Mapping):
        receipt = plain_receipt(receipt)
    if isinstance(receipt, (bytes, bytearray, str)):
        try:
            data = receipt.encode("utf-8") if isinstance(receipt, str) else bytes(receipt)
        except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 text, so no receipt
            raise _Reject("malformed", f"receipt text is not valid Unicode ({exc.reason} at index "
                                       f"{exc.start})") from None
        try:
            receipt = decode_canonical(data)
        except (ValueError, TypeError) as exc:
            try:
                json.loads(data)
            except (ValueError, RecursionError):
                raise _Reject("malformed", f"receipt is not JSON: {exc}") from None
            raise _Reject("non_canonical", str(exc)) from None
    if not isinstance(receipt, Mapping):
        raise _Reject("malformed", f"receipt is a {type(receipt).__name__}, not a JSON object")
    fmt = receipt.get("format")
    if not isinstance(fmt, str):
        raise _Reject("malformed", "receipt has no 'format' string")
    if fmt != RECEIPT_FORMAT:
        raise _Reject("unsupported_version", f"receipt format {fmt!r}; this verifier reads {RECEIPT_FORMAT!r}")
    if receipt.get("alg") != ALGORITHM:
        raise _Reject("algorithm", f"receipt alg is {receipt.get('alg')!r}; only {ALGORITHM!r} is accepted")
    spec = dict(_TOP_FIELDS)
    spec["batch"] = dict
    _check_fields(receipt, spec, "receipt", optional=("batch",))
    _check_fields(receipt["params"], _PARAM_FIELDS, "receipt.params")
    params = receipt["params"]
    if params["mechanism"] not in MECHANISMS:
        raise _Reject("malformed", f"unknown mechanism {params['mechanism']!r}")
    if params["dim"] <= 0:
        raise _Reject("malformed", "params.dim must be positive")
    if params["dtype"] not in DTYPES:
        # No release is made in another dtype, and the guarantee sentence's float64 caveat keys on it.
        raise _Reject("malformed", f"unknown params.dtype {params['dtype']!r} (a release is made in "
                                   f"{' or '.join(DTYPES)}); re-noise with qdrant_guard.noise.privatize")
    if not _HEX64.fullmatch(receipt["commitment"]):
        kind = "non_canonical" if _HEX64.fullmatch(receipt["commitment"].lower()) else "malformed"
        raise _Reject(kind, "commitment must be 64 lowercase hex digits")
    try:
        salt = _unb64(receipt["salt"])
    except (binascii.Error, ValueError) as exc:
        raise _Reject("malformed", f"salt is not canonical base64: {exc}") from None
    if len(salt) != SALT_BYTES:
        raise _Reject("malformed", f"salt has {len(salt)} bytes, expected {SALT_BYTES}")
    pid = receipt["point_id"]
    if pid.startswith("int:"):
        # 2^64 - 1 has 20 digits; the length check first keeps int() from refusing (ValueError)
        # a string of more than 4300 digits.
        if not _INT_ID.fullmatch(pid) or len(pid) > 24 or int(pid[4:]) >= 2 ** 64:
            raise _Reject("non_canonical" if pid[4:].isdigit() else "malformed",
                          f"point_id {pid!r} is not 'int:' + a canonical unsigned 64-bit decimal")
    elif pid.startswith("uuid:"):
        try:
            norm = f"uuid:{uuid.UUID(pid[5:])}"
        except ValueError:
            raise _Reject("malformed", f"point_id {pid!r} is not a UUID") from None
        if norm != pid:
            raise _Reject("non_canonical", f"point_id {pid!r} is not lowercase hyphenated ({norm!r})")
    else:
        raise _Reject("malformed", f"point_id {pid!r} must start with 'int:' or 'uuid:'")
    if receipt["issued_at"] < 0:
        raise _Reject("malformed", "issued_at is negative")
    try:
        sig = _unb64(receipt["sig"])
    except (binascii.Error, ValueError):
        raise _Reject("bad_signature", "sig is not canonical base64") from None
    body = {k: v for k, v in receipt.items() if k not in ("sig", "batch")}
    try:
        canonical_json(body)
    except (TypeError, ValueError) as exc:
        raise _Reject("malformed", f"receipt cannot be canonically encoded: {exc}") from None
    batch = receipt.get("batch")
    if batch is not None:
        _check_fields(batch, {"index": int, "size": int, "path": list}, "receipt.batch")
        if not all(isinstance(h, str) for h in batch["path"]):
            raise _Reject("bad_merkle_proof", "batch.path must be a list of hex strings")
        if batch["size"] >= 2 ** 64:
            # The root signature encodes size as a uint64: a larger size was never signed.
            raise _Reject("malformed", f"batch.size {batch['size']} does not fit the signed uint64")
    return dict(body), sig, (dict(batch) if batch is not None else None)


def _verify_signature(body: dict[str, Any], sig: bytes, batch: dict[str, Any] | None,
                      pk: Ed25519PublicKey) -> None:
    if len(sig) != 64:
        raise _Reject("bad_signature", f"signature has {len(sig)} bytes; Ed25519 signatures have 64")
    body_bytes = canonical_json(body)
    if batch is None:
        try:
            pk.verify(sig, SIGNATURE_PREFIX + body_bytes)
        except InvalidSignature:
            raise _Reject("bad_signature", "Ed25519 signature does not verify") from None
        return
    path_hex = batch["path"]
    if not all(_HEX64.fullmatch(h) for h in path_hex):
        raise _Reject("bad_merkle_proof", "batch.path entries must be 64 lowercase hex digits")
    try:
        root = merkle.root_from_path(merkle.leaf_hash(body_bytes), batch["index"], batch["size"],
                                     [bytes.fromhex(h) for h in path_hex])
    except ValueError as exc:
        raise _Reject("bad_merkle_proof", str(exc)) from None
    try:
        pk.verify(sig, _batch_message(root, batch["size"]))
    except InvalidSignature:
        # The signature covers only the root: a changed body, path, index or size and a forged
        # signature are indistinguishable here.
        raise _Reject("bad_merkle_proof",
                      "the Merkle root rebuilt from this receipt is not the signed root") from None


def _verify_values(vector: Any) -> np.ndarray:
    """The ``vector`` argument of :func:`verify_receipt` as float64 values (any shape).

    A stored vector is real numbers; Qdrant returns a list of floats. Numbers in any exact form
    are read as their values (float32 and float64 arrays of the same values verify alike, since
    the commitment is to the 2^-20 grid integers). What numpy would otherwise convert silently is
    refused: complex values (numpy drops the imaginary part), strings (numpy parses them), bools,
    Python objects, float16 (it cannot hold a stored float32 vector, so it would fail as if the
    stored vector had changed) and masked arrays with masked entries (numpy reads the hidden data).
    """
    if vector is None or isinstance(vector, (str, bytes, dict)):
        raise GuardArgumentTypeError(f"vector must be a sequence of numbers, not {type(vector).__name__}")
    fix = ("pass the vector as read from Qdrant (a list of floats) or a float32/float64 numpy "
           "array of it")
    if isinstance(vector, np.ma.MaskedArray) and np.ma.is_masked(vector):
        raise InvalidVectorError(f"vector is a masked array with masked entries, which have no value; {fix}")
    try:
        arr = np.asarray(vector)
    except (TypeError, ValueError) as exc:
        raise InvalidVectorError(f"vector is not an array of numbers ({exc}); {fix}") from None
    kind, size = arr.dtype.kind, arr.dtype.itemsize
    if kind not in "fiu" or (kind == "f" and size < 4):
        if kind == "f":
            raise InvalidVectorError(f"vector has dtype {arr.dtype}, which cannot hold the stored float32 "
                                     f"values exactly; {fix}")
        what = {"c": "complex values", "b": "bools", "U": "strings", "S": "bytes",
                "O": "Python objects"}.get(kind, f"values of dtype {arr.dtype}")
        raise InvalidVectorError(f"vector holds {what}, not real numbers; {fix}")
    return arr.astype(np.float64, copy=False)


def _check_trusted(trusted_keys: Any, revoked: Any) -> None:
    if not isinstance(trusted_keys, Mapping):
        raise GuardArgumentTypeError(
            "trusted_keys must be a mapping of key id to Ed25519PublicKey, not "
            f"{type(trusted_keys).__name__}"
        )
    for kid, pk in trusted_keys.items():
        if not isinstance(pk, Ed25519PublicKey):
            raise GuardArgumentTypeError(
                f"trusted_keys[{kid!r}] must be an Ed25519PublicKey, not {type(pk).__name__}"
            )
    if isinstance(revoked, (str, bytes)) or not isinstance(revoked, Iterable):
        raise GuardArgumentTypeError(f"revoked must be a collection of key ids, not {type(revoked).__name__}")


def _check_times(now: Any, max_age_s: Any) -> None:
    for label, value in (("now", now), ("max_age_s", max_age_s)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise GuardArgumentTypeError(f"{label} must be a number or None, not {type(value).__name__}")
    # NaN compares false with everything: the age check would pass a receipt of any age.
    if now is not None and not math.isfinite(now):
        raise GuardArgumentValueError(f"now must be a finite number of seconds, got {now!r}")
    if max_age_s is not None and math.isnan(max_age_s):
        raise GuardArgumentValueError("max_age_s must be a number of seconds or None, got nan")


def verify_receipt(
    receipt: Any,
    *,
    vector: Any,
    collection: str,
    point_id: int | str | uuid.UUID,
    vector_name: str = "",
    trusted_keys: Mapping[str, Ed25519PublicKey],
    revoked: Collection[str] = (),
    now: float | None = None,
    max_age_s: float | None = None,
) -> ReceiptCheck:
    """Verify a receipt against the vector and the place it was read from.

    Checks, in order: format and algorithm, field types and canonical form, signer key (trusted,
    not revoked), signature (or Merkle proof + root signature), that the ``guarantee`` sentence
    states the numeric fields (``"guarantee_mismatch"``: it must be
    :func:`qdrant_guard.noise_params.guarantee_sentence` of them in one of the wordings this
    library has written), age, collection, point id, vector name, and the salted commitment of
    ``vector`` rounded to the 2^-20 grid. It does not judge the
    signed noise parameters (a TEST-ONLY seeded release verifies too): apply
    :func:`qdrant_guard.noise.check_release` to ``params`` for that, as the guard does on writes.
    A receipt that verifies proves what its signer asserts about the stored vector, not that the
    noise was drawn (docs/receipt-format.md, "What a receipt proves, and what it does not").

    Args:
        receipt: the receipt dict (as stored in the payload), or its JSON bytes/str, which must
            then be canonical. A dict is read as the JSON values it holds (:func:`plain_receipt`:
            a str, int or float subclass as its value), so its own comparisons decide nothing.
        vector: the vector read back from Qdrant: a list of numbers (numpy scalars too) or a
            float32/float64 (or integer) numpy array, any strides. The receipt commits to the
            values rounded to the 2^-20 grid, so float32 and float64 forms of the same values
            verify alike. A vector of another shape or length is ``"vector_mismatch"``.
        collection: the collection it was read from.
        point_id: the point it was read from.
        vector_name: the named vector it was read from ("" for the default vector).
        trusted_keys: key id -> Ed25519 public key.
        revoked: revoked key ids.
        now: current time in seconds (default: ``time.time()``).
        max_age_s: reject receipts issued more than this many seconds before ``now``, or more
            than :data:`ISSUED_AT_LEEWAY_S` after it (both as ``"expired"``).

    Returns:
        :class:`ReceiptCheck`; never raises for a bad receipt.

    Raises:
        TypeError: an argument (not the receipt) has the wrong type.
        InvalidVectorError: ``vector`` holds something other than real numbers (complex values,
            strings, bools, objects, float16, masked entries), which numpy would convert silently.
        ValueError: ``now`` is not finite or ``max_age_s`` is NaN.
    """
    if not isinstance(collection, str):
        raise GuardArgumentTypeError(f"collection must be str, not {type(collection).__name__}")
    if not isinstance(vector_name, str):
        raise GuardArgumentTypeError(f"vector_name must be str, not {type(vector_name).__name__}")
    # Their characters: a str subclass's reflected __ne__ would answer the binding checks below.
    collection, vector_name = str.__str__(collection), str.__str__(vector_name)
    want_pid = normalize_point_id(point_id)
    _check_trusted(trusted_keys, revoked)
    _check_times(now, max_age_s)
    values = _verify_values(vector)
    kid = None
    try:
        body, sig, batch = _parse(receipt)
        kid = body["kid"]
        if kid in set(revoked):
            raise _Reject("revoked_key", f"signer key {_shown(kid)} is revoked")
        pk = trusted_keys.get(kid)
        if pk is None:
            raise _Reject("unknown_key", f"signer key {_shown(kid)} is not trusted")
        _verify_signature(body, sig, batch, pk)
        # A reader shows the sentence, not the fields: one that says other numbers misleads even
        # under a trusted signature.
        wrong = guarantee_mismatch(body["params"])
        if wrong is not None:
            raise _Reject("guarantee_mismatch", wrong)
        if max_age_s is not None:
            current = time.time() if now is None else float(now)
            try:
                issued_s = body["issued_at"] / 1000.0
            except OverflowError:  # a signed int beyond float range: far in the future
                issued_s = math.inf
            age = current - issued_s
            if age < -ISSUED_AT_LEEWAY_S:
                # A negative age never exceeds max_age_s: such a receipt would never expire.
                raise _Reject("expired", f"receipt issued_at is {-age:.0f} s in the future, beyond the "
                              f"{ISSUED_AT_LEEWAY_S:g} s clock-skew leeway; its age cannot be checked")
            if age > max_age_s:
                raise _Reject("expired", f"receipt issued {age:.0f} s ago; max_age_s={max_age_s}")
        if body["collection"] != collection:
            raise _Reject("collection_mismatch",
                          f"receipt is for collection {body['collection']!r}, not {collection!r}")
        if body["point_id"] != want_pid:
            raise _Reject("point_mismatch", f"receipt is for point {body['point_id']}, not {want_pid}")
        if body["vector_name"] != vector_name:
            raise _Reject("vector_name_mismatch",
                          f"receipt is for vector {body['vector_name']!r}, not {vector_name!r}")
        if values.ndim != 1:
            raise _Reject("vector_mismatch",
                          f"vector has shape {values.shape}; a receipt binds one 1-D dense vector of "
                          f"{body['params']['dim']} values (for an array of shape (1, d) pass vector[0])")
        if values.size != body["params"]["dim"]:
            raise _Reject("vector_mismatch",
                          f"vector has {values.size} values; the receipt's dim is {body['params']['dim']}")
        try:
            got = vector_commitment(values, _unb64(body["salt"]))
        except (TypeError, ValueError) as exc:
            raise _Reject("vector_mismatch", f"vector cannot be committed: {exc}") from None
        if got != body["commitment"]:
            raise _Reject("vector_mismatch", "stored vector does not match the signed commitment")
        params = NoiseParams(**body["params"])
    except _Reject as rej:
        return ReceiptCheck(False, rej.reason, None, kid if isinstance(kid, str) else None, rej.detail)
    model_id = body["model_id"]
    # Its characters: a str subclass (a receipt given as a dict) could compare equal to any name.
    return ReceiptCheck(True, "ok", params, kid, "receipt verified",
                        None if model_id is None else str.__str__(model_id))


# --------------------------------------------------------------------------- verify a collection

@dataclass(frozen=True)
class PointReceiptReport:
    """Verification result of one (point, vector name) read from Qdrant."""

    point_id: int | str
    vector_name: str
    check: ReceiptCheck

    @property
    def ok(self) -> bool:
        """True if the receipt verified, or the vector has none and its collection's class needs
        none (reason ``"not_required"``, only with ``verify(policy=...)``; ``check.ok`` is then
        False: no receipt was verified)."""
        return self.check.ok or self.check.reason == "not_required"

    @property
    def reason(self) -> str:
        """``"ok"`` or the failure reason."""
        return self.check.reason


def _unsupported_kind(v: Any) -> str | None:
    """``"sparse vector"`` or ``"multivector"`` for a value the guard never stores on a sensitive
    collection (vectors.as_dense refuses both, receipted or not), else None."""
    if isinstance(v, models.SparseVector):
        return "sparse vector"
    if isinstance(v, np.ndarray):
        return "multivector" if v.ndim == 2 else None
    if isinstance(v, (list, tuple)) and len(v) > 0 and isinstance(v[0], (list, tuple, np.ndarray)):
        return "multivector"
    return None


def _split_vectors(vector: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """``({name: dense value}, {name: unsupported kind})`` of a point's vector field.

    Every value that is not a sparse vector or a multivector counts as dense, so that anything
    else read back (an empty list, a scalar) is reported by verify_receipt or as missing_receipt
    rather than skipped.
    """
    if vector is None:
        return {}, {}
    items = vector.items() if isinstance(vector, Mapping) else (("", vector),)
    dense: dict[str, Any] = {}
    unsupported: dict[str, str] = {}
    for name, v in items:
        kind = _unsupported_kind(v)
        if kind is None:
            dense[name] = v
        else:
            unsupported[name] = kind
    return dense, unsupported


def noise_shortfall(params: NoiseParams, noise_policy: Any) -> str | None:
    """Why ``params`` are weaker than ``noise_policy`` (a policy.NoisePolicy), or None.

    The comparison a guarded write makes on a receipted vector (writes.py) and ``verify`` makes with
    ``noise_policy=``: a larger epsilon, a smaller protected radius, a larger delta, or less
    clipping than the policy states (the radius is measured between inputs clipped to clip_norm,
    and clipping harder never increases a distance, so only a larger clip_norm is weaker).
    """
    clip = noise_policy.clip_norm
    clipped_less = clip is not None and (params.clip_norm is None or params.clip_norm > clip)
    if (params.epsilon > noise_policy.epsilon or params.radius < noise_policy.radius
            or params.delta > max(noise_policy.delta, 0.0) or clipped_less):
        return (f"receipt gives epsilon {params.epsilon} at radius {params.radius} with delta "
                f"{params.delta} and clip_norm {params.clip_norm}; the policy requires epsilon <= "
                f"{noise_policy.epsilon}, radius >= {noise_policy.radius}, delta <= {noise_policy.delta} "
                f"and clip_norm <= {clip}")
    return None


def mechanism_mismatch(params: NoiseParams, noise_policy: Any, collection: str) -> str | None:
    """Why a receipt of ``params`` does not belong in ``collection``, whose ``[noise]`` section is
    ``noise_policy`` (a policy.NoisePolicy): it names another mechanism. None when it names the same.

    The comparison a guarded write makes on a receipted vector before :func:`noise_shortfall`
    (writes.py), a guarded read makes before releasing a stored one (reads.py) and ``verify`` makes
    with ``noise_policy=``. The numbers of two mechanisms do not order: a ``laplace_l2`` release
    (pure metric DP) and a ``gaussian`` one at the same epsilon and radius state different
    guarantees with differently shaped noise, and the collection's utility record was measured
    for its own mechanism (``utility.drop_for(epsilon, mechanism)``). So a collection holds the
    releases of the mechanism its policy names, and no other.
    """
    if params.mechanism == noise_policy.mechanism:
        return None
    want = noise_policy.mechanism
    return (f"the receipt's noise mechanism is {params.mechanism!r} but collection {collection!r} holds "
            f"{want!r} releases only ([noise] mechanism = \"{want}\"); re-noise the clean vector with the "
            f"collection's mechanism and parameters (qdrant_guard.noise.privatize(vector, mechanism={want!r}, "
            f"epsilon=..., radius=..., ...)) and sign a fresh receipt, or, with noise_on_write = true on the "
            "collection, send the clean vector without a receipt and the guard noises it")


def model_mismatch(model_id: str | None, utility_policy: Any, collection: str, vector_name: str) -> str | None:
    """Why a receipt whose signed ``model_id`` is ``model_id`` does not belong to vector
    ``vector_name`` of ``collection``, whose ``[utility]`` section is ``utility_policy`` (a
    policy.UtilityPolicy): it names another embedding model than the one the policy declares for
    that vector (``utility.embedding_models``, else ``utility.embedding_model``). None when the
    policy declares none, the receipt names none, or both name the same (compared as qdrant-client
    resolves model names, exactly but for case: :func:`~qdrant_guard.utility.same_model`).

    The comparison a guarded write makes on a writer's receipt (writes.py) and ``verify`` makes with
    ``policy=``. ``model_id`` is the signer's word: a raw vector does not show its model, so a
    receipt naming none is not refused, and one naming the declared model proves no more than that
    its signer says so.
    """
    from .utility import same_model

    declared, key = utility_policy.declared_model(vector_name)
    if declared is None or model_id is None or same_model(model_id, declared):
        return None
    from .policy import toml_str

    return (f"the receipt of vector {vector_name or '<unnamed>'!r} names embedding model {model_id!r} (its signed "
            f"model_id), but collection {collection!r} declares {key} = {toml_str(declared)}: vectors of two "
            f"models do not rank against each other, and a utility record measured on one says nothing of the "
            f"other; embed the text with {declared!r}, noise it and sign a fresh receipt with "
            f"model_id={declared!r}, or correct {key} if this collection's vectors come from {model_id!r}")


def _collection_names(client: Any, name: str) -> frozenset[str]:
    """The names that denote collection ``name`` now: the collection itself (also when ``name``
    is an alias) and every alias of it, read with one ``get_aliases``. A client that may not list
    aliases (a server key scoped to one collection) gets ``name`` alone: receipts bound to an alias
    then report ``collection_mismatch``, as before aliases were resolved."""
    try:
        aliases = client.get_aliases().aliases
    except Exception:  # not allowed, or no such endpoint: verify what can be verified
        return frozenset({name})
    target = next((a.collection_name for a in aliases if a.alias_name == name), name)
    return frozenset({name, target} | {a.alias_name for a in aliases if a.collection_name == target})


def _collection_policy(policy: Any, collection: str) -> Any:
    """The policy of ``collection`` that ``verify``'s ``policy`` argument gives (a GuardConfig's
    ``policy_for(collection)``, or a CollectionPolicy itself), or None for None."""
    if policy is None:
        return None
    if callable(getattr(policy, "policy_for", None)):
        policy = policy.policy_for(collection)
    if not isinstance(getattr(policy, "is_public", None), bool) or not callable(
            getattr(getattr(policy, "utility", None), "declared_model", None)):
        raise GuardArgumentTypeError(f"policy must be a qdrant_guard.policy.GuardConfig (e.g. load_policy(path)) or "
                                     f"CollectionPolicy (config.policy_for(collection)), not {type(policy).__name__}")
    return policy


def _receipts_required(policy: Any) -> bool:
    """Whether the vectors of a collection whose policy is ``policy`` (None: not given) need
    receipts (see :func:`verify`): every class but PUBLIC, which the guard passes through
    unchanged (writes.py noises and receipts what a sensitive collection stores; a PUBLIC one
    stores vectors as given)."""
    return policy is None or not policy.is_public


def verify(
    client: Any,
    collection_name: str,
    ids: Sequence[int | str] | None = None,
    *,
    trusted_keys: Mapping[str, Ed25519PublicKey],
    revoked: Collection[str] = (),
    now: float | None = None,
    max_age_s: float | None = None,
    batch_size: int = 256,
    check_noise: bool = False,
    noise_policy: Any = None,
    policy: Any = None,
) -> list[PointReceiptReport]:
    """Read points from Qdrant and verify each stored receipt against the stored vector.

    On a sensitive collection (the default, without ``policy``) every dense vector of every point
    must carry a valid receipt; a vector without one is reported as ``"missing_receipt"``, an id
    not found as ``"missing_point"``. A sparse vector or a multivector (named or the default
    vector) is ``"unsupported_vector"`` whatever its receipt: the guard refuses both on sensitive
    collections, so one can only have been written around it.

    A receipt bound to an alias that names the collection now (the guard binds a vector written
    through an alias to the alias's name) verifies as one bound to the collection; ``collection_name``
    may be an alias too. One bound to an alias that names another collection now, or no longer
    exists, is ``"collection_mismatch"``.

    On a PUBLIC collection (``policy`` says so) the guard stores vectors as given, unreceipted:
    a vector without a receipt, of any kind, is ``"not_required"``, which is not a failure
    (``report.ok`` is True). A receipt that is there is still verified, and a bad one reported:
    it asserts something about the stored vector, true or not.

    A receipt that verifies shows what its signer asserts, not that the noise was drawn: a trusted
    signer that lies consistently passes every check here, ``check_noise`` included.

    Args:
        client: any ``qdrant_client.QdrantClient`` (a raw one: the guard must not alter reads).
        collection_name: collection to check.
        ids: point ids to check (default: every point, by scrolling); an id named twice (in any
            spelling of the same id) is checked once.
        trusted_keys: key id -> Ed25519 public key.
        revoked: revoked key ids (any iterable; read once).
        now: current time in seconds (for ``max_age_s``).
        max_age_s: reject receipts older than this, or issued more than
            :data:`ISSUED_AT_LEEWAY_S` after ``now``.
        batch_size: points per scroll/retrieve request.
        check_noise: also judge the signed noise parameters of each receipt that verifies, as a
            guarded write does: one that :func:`qdrant_guard.noise.check_release` refuses (the
            TEST-ONLY seeded generator, a scale below the calibration, an unknown mechanism
            version) is ``"insufficient_noise"``, with check_release's explanation in ``detail``
            and the params in ``check.params``. Off by default: without it a receipt's
            parameters are not judged (the signature and binding only).
        noise_policy: a :class:`qdrant_guard.policy.NoisePolicy` (e.g.
            ``config.policy_for(name).noise``); implies ``check_noise`` and also reports as
            ``"insufficient_noise"`` a receipt weaker than it (larger epsilon or delta, smaller
            radius, larger or no clip_norm), the comparison a guarded write makes; a receipt
            of another mechanism than ``noise_policy.mechanism`` is ``"mechanism_mismatch"``
            (a guarded write refuses it, a guarded read strips it: :func:`mechanism_mismatch`).
        policy: the collection's policy, which decides whether its vectors need receipts: a
            :class:`qdrant_guard.policy.GuardConfig` (e.g. ``load_policy("policy.toml")``; its
            ``policy_for(collection_name)`` is used) or a
            :class:`qdrant_guard.policy.CollectionPolicy`. Only PUBLIC needs none. A receipt that
            verifies but whose signed ``model_id`` names another embedding model than the one the
            policy declares for its vector (``utility.embedding_models``, else
            ``utility.embedding_model``) is ``"model_mismatch"`` (a guarded write refuses it:
            :func:`model_mismatch`); one naming no model is not (its signer named none). None (the
            default): every vector is taken to need one, and models are not compared.

    Returns:
        One :class:`PointReceiptReport` per (point, vector name), in read order.

    Raises:
        TypeError: ``client`` has no ``scroll``, ``retrieve`` or ``get_aliases`` or is an
            AsyncQdrantClient (its methods return coroutines), ``check_noise`` is
            not a bool, ``noise_policy`` lacks mechanism, epsilon, delta, radius or
            clip_norm, ``policy`` is neither a GuardConfig nor a CollectionPolicy, or another
            argument has the wrong type.
        ConfigError: ``policy`` is a GuardConfig with ``unlisted = "refuse"`` that does not list
            the collection (it states no class for it).
        ValueError: ``batch_size`` is not a positive int, or an id in ``ids`` is not a Qdrant point
            id (an int 0 <= id < 2**64 or a UUID string), before any point is read.
    """
    lacking = [m for m in ("scroll", "retrieve", "get_aliases") if not callable(getattr(client, m, None))]
    if lacking:
        raise GuardArgumentTypeError(
            f"verify() client must be a qdrant_client.QdrantClient (e.g. QdrantClient(path=...) or url=...), "
            f"not {type(client).__name__}, which has no {', '.join(lacking)}")
    # An AsyncQdrantClient has the methods, but they return coroutines: it failed below with a bare
    # TypeError ("cannot unpack non-iterable coroutine object") and unawaited-coroutine warnings.
    if any(inspect.iscoroutinefunction(getattr(client, m)) for m in ("scroll", "retrieve", "get_aliases")):
        raise GuardArgumentTypeError(
            f"verify() is synchronous and client is a {type(client).__name__}, whose methods return coroutines; "
            "pass a qdrant_client.QdrantClient on the same storage (QdrantClient(path=...) or url=...)")
    if not isinstance(collection_name, str):
        raise GuardArgumentTypeError(f"collection_name must be str, not {type(collection_name).__name__}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise GuardArgumentValueError(f"batch_size must be a positive int, got {batch_size!r}")
    _check_trusted(trusted_keys, revoked)
    _check_times(now, max_age_s)
    if not isinstance(check_noise, bool):
        raise GuardArgumentTypeError(f"check_noise must be True or False, not {type(check_noise).__name__}")
    if noise_policy is not None:
        missing = [a for a in ("mechanism", "epsilon", "delta", "radius", "clip_norm") if not hasattr(noise_policy, a)]
        if missing:
            raise GuardArgumentTypeError(f"noise_policy must be a qdrant_guard.policy.NoisePolicy (e.g. "
                                         f"config.policy_for(collection).noise); a {type(noise_policy).__name__} "
                                         f"has no {', '.join(missing)}")
        check_noise = True
    policy = _collection_policy(policy, collection_name)
    required = _receipts_required(policy)
    names = _collection_names(client, collection_name)
    # Read once: a one-shot iterable (a generator) passed on to every verify_receipt call was
    # empty from the second point on, so a revoked key verified there.
    revoked = frozenset(revoked)
    points: list[Any] = []
    reports: list[PointReceiptReport] = []
    if ids is None:
        offset = None
        while True:
            page, offset = client.scroll(collection_name, limit=batch_size, offset=offset,
                                         with_payload=True, with_vectors=True)
            points.extend(page)
            if offset is None:
                break
    else:
        # One report per point, as documented: Qdrant returns a point once per time it is named.
        by_key: dict[str, Any] = {}
        for pid in ids:
            try:
                key = normalize_point_id(pid)
            except (TypeError, ValueError) as exc:
                raise GuardArgumentValueError(f"verify(ids=...): {pid!r} is not a Qdrant point id ({exc}); pass ints "
                                              "0 <= id < 2**64 or UUID strings") from None
            by_key.setdefault(key, pid)
        id_list = list(by_key.values())
        for start in range(0, len(id_list), batch_size):
            chunk = id_list[start:start + batch_size]
            got = client.retrieve(collection_name, chunk, with_payload=True, with_vectors=True)
            found = {normalize_point_id(p.id) for p in got}
            points.extend(got)
            for pid in chunk:
                if normalize_point_id(pid) not in found:
                    reports.append(PointReceiptReport(
                        pid, "", ReceiptCheck(False, "missing_point", None, None,
                                              f"point {pid!r} not found in {collection_name!r}")))
    for point in points:
        try:
            stored = receipts_from_payload(point.payload)
        except ReceiptError as exc:
            reports.append(PointReceiptReport(point.id, "", ReceiptCheck(False, "malformed", None,
                                                                         None, str(exc))))
            continue
        vectors, unsupported = _split_vectors(point.vector)
        for name in sorted(set(vectors) | set(stored) | set(unsupported)):
            if not required and name not in stored:
                check = ReceiptCheck(False, "not_required", None, None,
                                     f"vector {name!r} has no receipt; the collection is PUBLIC, whose "
                                     "vectors the guard stores as given and needs none")
            elif not required and name in unsupported:
                check = ReceiptCheck(False, "unsupported_vector", None, None, (
                    f"vector {name!r} is a {unsupported[name]} but carries a receipt, which commits to "
                    "one dense vector: it certifies nothing stored here"))
            elif name in unsupported:
                check = ReceiptCheck(False, "unsupported_vector", None, None, (
                    f"vector {name!r} is a {unsupported[name]}; the guard refuses "
                    f"{unsupported[name]}s on sensitive collections (no receipt can cover one), so on a "
                    "sensitive collection it was written around the guard"))
            elif name not in stored:
                check = ReceiptCheck(False, "missing_receipt", None, None,
                                     f"vector {name!r} has no receipt")
            elif name not in vectors:
                check = ReceiptCheck(False, "vector_mismatch", None, None,
                                     f"receipt for vector {name!r} but the point has no such dense vector")
            else:
                bound = stored[name].get("collection") if isinstance(stored[name], Mapping) else None
                # A vector the guard wrote through an alias has a receipt bound to the alias's name;
                # the signature still covers that name, which must name this collection now.
                where = bound if isinstance(bound, str) and bound in names else collection_name
                try:
                    check = verify_receipt(stored[name], vector=vectors[name], collection=where,
                                           point_id=point.id, vector_name=name,
                                           trusted_keys=trusted_keys, revoked=revoked, now=now,
                                           max_age_s=max_age_s)
                except (TypeError, InvalidVectorError) as exc:
                    # What the client returned is not numbers: one point's report, not a crash.
                    check = ReceiptCheck(False, "vector_mismatch", None, None, str(exc))
                if check.ok and policy is not None:
                    other_model = model_mismatch(check.model_id, policy.utility, collection_name, name)
                    if other_model is not None:
                        check = ReceiptCheck(False, "model_mismatch", check.params, check.key_id, other_model,
                                             check.model_id)
                if check_noise and check.ok and check.params is not None:
                    problem = _check_release(check.params)
                    if problem is None and noise_policy is not None:
                        other = mechanism_mismatch(check.params, noise_policy, collection_name)
                        if other is not None:
                            check = ReceiptCheck(False, "mechanism_mismatch", check.params, check.key_id, other,
                                                 check.model_id)
                        problem = noise_shortfall(check.params, noise_policy) if other is None else None
                    if problem is not None:
                        check = ReceiptCheck(False, "insufficient_noise", check.params, check.key_id, problem,
                                             check.model_id)
            reports.append(PointReceiptReport(point.id, name, check))
    return reports
