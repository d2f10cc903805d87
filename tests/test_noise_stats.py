"""Distribution tests of the samplers (fixed seeds, so deterministic) plus fork/thread freshness."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from scipy import stats

from oracle import both
from qdrant_guard import noise

NATIVE, _ = both("noise")
KEY = bytes(range(32))
NONCE = bytes(12)
P_MIN = 1e-3  # fixed streams: a pass/fail that cannot flip between runs


def test_normals_are_standard_normal():
    z = NATIVE.normals(KEY, NONCE, 200_000)
    assert stats.kstest(z, "norm").pvalue > P_MIN
    # the tail layer (|z| > r) is reached and has the right mass
    assert abs(np.mean(np.abs(z) > 3.0) - 2 * stats.norm.sf(3.0)) < 4e-4


@pytest.mark.parametrize("shape", [1.0, 3.5, 768.0])
def test_gammas_match_gamma_distribution(shape):
    g = NATIVE.gammas(KEY, NONCE, shape, 50_000)
    assert stats.kstest(g, stats.gamma(shape).cdf).pvalue > P_MIN


def test_gaussian_coordinates_match_sigma():
    x = np.zeros((100, 1000), np.float32)
    out, p = noise.privatize_seeded_for_tests(x, mechanism="gaussian", epsilon=1.0, delta=1e-6,
                                              radius=0.1, seed=3)
    assert stats.kstest(out.ravel().astype(np.float64) / p.scale, "norm").pvalue > P_MIN
    q = out.astype(np.float64) / p.lattice_step
    assert np.array_equal(q, np.round(q))


def test_laplace_l2_norms_and_directions():
    d = 16
    x = np.zeros((20_000, d))
    out, p = noise.privatize_seeded_for_tests(x, mechanism="laplace_l2", epsilon=2.0, radius=0.5, seed=4)
    norms = np.linalg.norm(out, axis=1)
    assert stats.kstest(norms, stats.gamma(d, scale=p.scale).cdf).pvalue > P_MIN
    # A uniform direction's first coordinate u satisfies (u+1)/2 ~ Beta((d-1)/2, (d-1)/2).
    u = out[:, 0] / norms
    assert stats.kstest((u + 1) / 2, stats.beta((d - 1) / 2, (d - 1) / 2).cdf).pvalue > P_MIN
    unit = out / norms[:, None]
    assert np.linalg.norm(unit.mean(axis=0)) < 0.03
    assert np.allclose((unit**2).mean(axis=0), 1 / d, atol=0.005)


def test_clipping_is_respected():
    x = np.random.default_rng(5).normal(size=(50, 32)) * 10
    out = NATIVE.noise_vectors(x, "gaussian", 1e-12, 2.0**-60, 1.0, KEY, None, NONCE)
    assert np.all(np.linalg.norm(out, axis=1) <= 1.0 + 1e-9)
    assert np.allclose(out, noise.clip_l2(x, 1.0), atol=1e-9)


def test_production_rng_distribution():
    x = np.zeros((100, 1000), np.float32)
    out, p = noise.privatize(x, mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.1)
    # Loose but meaningful: a broken generator (constant, biased, wrong scale) fails by far.
    assert stats.kstest(out.ravel().astype(np.float64) / p.scale, "norm").pvalue > 1e-6


def _draw() -> bytes:
    out, _ = noise.privatize(np.zeros(256), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=1.0)
    return out.tobytes()


def test_fork_child_gets_fresh_stream():
    _draw()  # the parent's per-thread stream exists and has buffered keystream before the fork
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            os.write(w, _draw())
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    child = b"".join(chunks)
    parent = _draw()
    assert len(child) == len(parent) == 256 * 8
    assert np.count_nonzero(np.frombuffer(child) != np.frombuffer(parent)) > 250


def test_threads_have_distinct_streams():
    results: list[bytes] = []
    barrier = threading.Barrier(4)

    def work() -> None:
        barrier.wait()
        results.append(_draw())

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    arrays = [np.frombuffer(b) for b in results]
    for i in range(4):
        for j in range(i + 1, 4):
            assert np.count_nonzero(arrays[i] != arrays[j]) > 250
