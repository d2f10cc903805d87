"""Moves the few Cosine stored forms that an exact re-normalisation would take far from their grid
points (about 1 row in 200 at d = 2, 3 in 10^5 at d = 3, none seen from d = 4 on) to nearby grid points that it
leaves in place.

The norm nudge (``storedform._unit_grid_rows``, C and twin alike) takes single steps, largest
coordinate first, for at most 16 passes. With two or three coordinates those steps change
sum(k^2) by about 2|k_j| each, too coarsely to reach unit length: the re-normalisation Qdrant
applies (float32 on a new point, float64 on a replaced one in local mode) then moves a coordinate
up to half a grid step, and the stored vector may round to other grid points than its receipt
commits to. This runs after either kernel on its result, so both stay identical.
"""
from __future__ import annotations

import math

import numpy as np

_GRID_INV = 2.0 ** 20
# Rows whose exact re-normalisation moves a coordinate more than this (in grid steps) are moved.
# Qdrant's float32 arithmetic errs by about 1/16 step; the guard refuses a writer's receipt beyond
# 3/8 step (writereceipts._altered_by_storage).
TARGET = 0.25
# The search: up to _SMALL steps on the second-largest coordinate, _LARGE on the largest. Near an
# axis, k = (~2^20, s), the largest coordinate's drift is the distance of s^2 / 2^21 to an
# integer, so at s = 1024 (drift 1/2) reaching TARGET takes 230 steps of s (1254^2 / 2^21 = 0.75).
_SMALL = 320
_LARGE = 2
# Most rows reach TARGET within a few steps: searched first in this window, the rest in the whole.
_FIRST = 16


def drift(k: np.ndarray) -> np.ndarray:
    """Per row of grid integers ``k`` (float64), the largest distance in grid steps between a
    coordinate and its value after exact normalisation to unit length."""
    norms = np.sqrt(np.einsum("ij,ij->i", k, k))
    largest: np.ndarray = np.abs(k * (_GRID_INV / norms)[:, None] - k).max(axis=1)
    return largest


def repair(k: np.ndarray) -> None:
    """Move, in place, every row of ``k`` whose :func:`drift` exceeds :data:`TARGET` to a nearby
    grid point whose drift is within it: of the points a steps of the second-largest coordinate
    and b of the largest away (|a| <= 320, |b| <= 2; a step away from zero is positive), the one
    with the fewest steps |a| + |b|, then the smallest drift, then the smallest (a, b); the one
    with the smallest drift when none is within TARGET (not seen in 10^6 normal rows at d = 2 or
    3). Rows within TARGET are untouched, so stored forms from d = 4 on are as before."""
    n, d = k.shape
    if d < 2 or n == 0:
        return
    # An upper bound of the drift, one pass over k: | |k| - 2^20 | >= |k_i| * | |k| - 2^20 | / |k|.
    # Nearly every row passes it, so a single row (every single write) is checked in Python floats:
    # numpy's per-call cost was most of the step. The margin covers any rounding of the bound.
    if n == 1:
        sq1 = float(np.dot(k[0], k[0]))
        if abs(sq1 - _GRID_INV ** 2) / (math.sqrt(sq1) + _GRID_INV) <= TARGET * 0.999:
            return
    sq = np.einsum("ij,ij->i", k, k)
    bound = np.abs(sq - _GRID_INV ** 2) / (np.sqrt(sq) + _GRID_INV)
    rows = np.flatnonzero(bound > TARGET * 0.999)
    if rows.size == 0:
        return
    rows = rows[drift(k[rows]) > TARGET]
    for window in (_FIRST, _SMALL):
        for start in range(0, rows.size, _ROWS_PER_BLOCK):
            _repair_rows(k, rows[start:start + _ROWS_PER_BLOCK], window)
        if window == _SMALL or rows.size == 0:
            break
        rows = rows[drift(k[rows]) > TARGET]


# Rows searched together: 64 x 641 x 5 candidates of float64, about 1.6 MB an array.
_ROWS_PER_BLOCK = 64
_B = np.arange(-_LARGE, _LARGE + 1, dtype=np.float64)[None, None, :]


def _repair_rows(k: np.ndarray, rows: np.ndarray, window: int) -> None:
    # A row with no candidate within TARGET in the first window is left for the whole one.
    a_steps = np.arange(-window, window + 1, dtype=np.float64)[None, :, None]
    steps = np.abs(a_steps) + np.abs(_B)
    sub = k[rows]
    order = np.argsort(-np.abs(sub), axis=1, kind="stable")
    at = np.arange(rows.size)
    big, small = order[:, 0], order[:, 1]
    kb0, ks0 = sub[at, big], sub[at, small]
    rest_sq = np.einsum("ij,ij->i", sub, sub) - kb0 ** 2 - ks0 ** 2
    rest_max = np.abs(sub[at, order[:, 2]]) if sub.shape[1] > 2 else np.zeros(rows.size)
    # A step moves a coordinate away from zero or towards it, as the nudge's steps do.
    ks = ks0[:, None, None] + a_steps * np.where(ks0 >= 0, 1.0, -1.0)[:, None, None]
    kb = kb0[:, None, None] + _B * np.where(kb0 >= 0, 1.0, -1.0)[:, None, None]
    norms = np.sqrt(rest_sq[:, None, None] + ks ** 2 + kb ** 2)
    peak = np.maximum(np.maximum(np.abs(ks), np.abs(kb)), rest_max[:, None, None])
    cand = peak * np.abs(_GRID_INV / norms - 1.0)
    # Fewest steps within TARGET first, then the smallest drift, then the first in (a, b) order;
    # the smallest drift in a row with none within TARGET.
    ok = cand <= TARGET
    by_steps = np.where(ok, steps, np.inf)
    fewest = ok & (by_steps == by_steps.min(axis=(1, 2), keepdims=True))
    score = np.where(ok.any(axis=(1, 2))[:, None, None], np.where(fewest, cand, np.inf), cand)
    best = np.argmin(score.reshape(rows.size, -1), axis=1)
    ia, ib = np.unravel_index(best, score.shape[1:])
    # Taken from the first window only when its winner takes at most `window` steps: no
    # candidate outside it takes as few, so both searches choose the same point.
    take = (ok.any(axis=(1, 2)) & (steps.reshape(-1)[best] <= window)) | (window == _SMALL)
    sub[at[take], small[take]] = ks[at, ia, 0][take]
    sub[at[take], big[take]] = kb[at, 0, ib][take]
    k[rows] = sub
