"""Noise kernel speed vs a numpy baseline, measured in the same run.

Run: python -m pytest bench/bench_noise.py -p no:cacheprovider --benchmark-only -q
The baseline adds numpy normals (rng created outside the timed loop) and returns the input's
dtype, float32, as privatize does: numpy's float64 normals promote the sum, so without the cast
the baseline would skip a step the candidate must do. The uncast variant (the literal
``x + rng.normal(size=d) * sigma``) is kept in each group, so its figures are printed too. The
candidate is the full production release (validation, cached calibration, clip, noise from the
production CSPRNG (AES-256-CTR with AES-NI, else ChaCha20), lattice snapping).

Batches of at least ``qdrant_guard._noise.THREADS_MIN_ELEMENTS`` values are shared by threads by
default (knobs: QG_NOISE_THREADS, ``qdrant_guard._noise.set_threads``); ``test_privatize_one_thread``
times the same release with threading off, so the single-core ratio is printed next to the
default one.
"""
from __future__ import annotations

import numpy as np
import pytest

from _paired import paired_ratio
from qdrant_guard import noise

KW = dict(mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.1, clip_norm=1.0)
SHAPES = {"384": (384,), "768": (768,), "1536": (1536,), "batch10000x768": (10_000, 768)}


def _vectors(shape):
    return np.random.default_rng(0).normal(size=shape).astype(np.float32)


def _numpy_release(x, *, cast=True):
    """The baseline: numpy normals at privatize's own scale added to x (cast back to x's dtype)."""
    sigma = noise.privatize(x, **KW)[1].scale
    rng = np.random.default_rng()
    if cast:
        return lambda: (x + rng.normal(size=x.shape) * sigma).astype(np.float32)
    return lambda: x + rng.normal(size=x.shape) * sigma


@pytest.mark.parametrize("label", list(SHAPES))
def test_baseline_numpy(benchmark, label):
    benchmark.group = f"noise-{label}"
    benchmark(_numpy_release(_vectors(SHAPES[label])))


@pytest.mark.parametrize("label", list(SHAPES))
def test_numpy_uncast(benchmark, label):
    benchmark.group = f"noise-{label}"
    benchmark(_numpy_release(_vectors(SHAPES[label]), cast=False))


@pytest.mark.parametrize("label", list(SHAPES))
def test_privatize(benchmark, label):
    benchmark.group = f"noise-{label}"
    x = _vectors(SHAPES[label])
    benchmark(lambda: noise.privatize(x, **KW))
    benchmark.extra_info.update(paired_ratio(_numpy_release(x), lambda: noise.privatize(x, **KW)))


@pytest.mark.parametrize("label", ["batch10000x768"])
def test_privatize_one_thread(benchmark, label):
    benchmark.group = f"noise-{label}"
    x = _vectors(SHAPES[label])
    set_threads = getattr(noise._k, "set_threads", None)  # the native kernel's; Python has none
    before = set_threads(1) if set_threads else None
    try:
        benchmark(lambda: noise.privatize(x, **KW))
    finally:
        if set_threads:
            set_threads(before)
