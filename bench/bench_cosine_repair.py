"""The Cosine repair step of a stored form against the noise kernel call it follows, same run.

Run: python -m pytest bench/bench_cosine_repair.py -p no:cacheprovider --benchmark-only -q
A guarded write to a Cosine collection noises its vectors (``noise.privatize``, keyed, as the
write path calls it), then takes their stored form: the grid snap and norm nudge
(``storedform._unit_grid_rows``), then ``_cosine_repair.repair`` on the grid integers it returns.
Groups ``cosine-repair-<shape>``, one per shape: a single write (1 x d, the call of one
``upsert`` of one point; the inputs cycle through 256 seeded vectors, as successive writes would)
and a batch (256 x d, cycling through 8 seeded batches), at d = 384, 3 and 2 (the dimensions where
the repair moves rows: about 1 row in 200 at d = 2, 3 in 10^5 at d = 3, none from d = 4 on).

  baseline  = ``noise.privatize`` of the same inputs (the kernel call the repair follows).
  candidate = ``_cosine_repair.repair`` of the grid integers of those inputs' noised stored form.
  info      = the whole ``stored_form_batch`` of the noised inputs (snap + nudge + repair).

Ratio printed by bench/conftest.py = baseline median / candidate median: above 1, the repair costs
less than the noise call before it (its share of the pair is 1 / (1 + ratio)).
The ``-moved`` groups' inputs are single writes the repair does move (found among 20,000 seeded
rows at d = 2 and 400,000 at d = 3): its slow path, which about 1 write in 200 takes at d = 2.
The repair works in place. Where it moves a row of a group's inputs (the 256 x 2 batches and the
``-moved`` groups), the pytest-benchmark timing copies each input outside the timed call
(``benchmark.pedantic`` with a setup), and the paired ratio (bench/_paired.py), whose blocks
cannot leave a copy out, times the copy with the repair: that paired figure is the conservative
one. Where it moves none, both time the repair on the same arrays, which it leaves as they were.
"""
from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

from _paired import paired_ratio
from qdrant_guard import _cosine_repair, noise, receipts, storedform

KW = dict(mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.1, clip_norm=1.0, key=bytes(range(32)))
# label -> (rows per input, d, inputs cycled through)
SHAPES = {"1x384": (1, 384, 256), "256x384": (256, 384, 8), "1x3": (1, 3, 256), "256x3": (256, 3, 8),
          "1x2": (1, 2, 256), "256x2": (256, 2, 8), "1x3-moved": (1, 3, 8), "1x2-moved": (1, 2, 64)}
# The seeded rows searched for the "-moved" groups' inputs (single writes the repair moves).
SEARCHED = {2: 20_000, 3: 400_000}
PEDANTIC_ROUNDS = {"256x2": 400, "256x3": 400, "1x2-moved": 2_000, "1x3-moved": 2_000}
TINY = os.environ.get("QG_BENCH_TINY") == "1"  # run.py --tiny: a few rounds (numbers meaningless)


def inputs(label: str) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Seeded float32 inputs, their noised forms, and the grid integers the repair is given."""
    rows, d, count = SHAPES[label]
    rng = np.random.default_rng(7)
    if label.endswith("-moved"):
        xs = moved_rows(d, count)
    else:
        xs = [rng.normal(size=(rows, d)).astype(np.float32) for _ in range(count)]
    noised = [noise.privatize(x, **KW)[0] for x in xs]
    ks = [storedform._unit_grid_rows(np.array(v, dtype=np.float64), "bench", rows == 1) for v in noised]
    return xs, noised, ks


def moved_rows(d: int, count: int) -> list[np.ndarray]:
    """Up to ``count`` seeded 1 x d inputs whose single write's stored form the repair moves."""
    pool = np.random.default_rng(11).normal(size=(SEARCHED[d], d)).astype(np.float32)
    k = storedform._unit_grid_rows(np.array(noise.privatize(pool, **KW)[0], dtype=np.float64), "bench", False)
    moved = k.copy()
    _cosine_repair.repair(moved)
    out = []
    for i in np.flatnonzero((moved != k).any(axis=1)):
        x = pool[i:i + 1]
        if moves_any([storedform._unit_grid_rows(np.array(noise.privatize(x, **KW)[0], dtype=np.float64),
                                               "bench", True)]):
            out.append(x)
        if len(out) == count:
            break
    assert out, f"no moved row among {SEARCHED[d]:,} at d = {d}"
    return out


def moves_any(ks: list[np.ndarray]) -> bool:
    """Whether the repair moves a row of any of ``ks`` (it then needs a fresh copy per call)."""
    for k in ks:
        moved = k.copy()
        _cosine_repair.repair(moved)
        if not np.array_equal(moved, k):
            return True
    return False


def _cycled(items: list, fn):
    it = itertools.cycle(items)
    return lambda: fn(next(it))


@pytest.fixture(scope="module")
def data():
    return {label: inputs(label) for label in SHAPES}


@pytest.mark.parametrize("label", list(SHAPES))
def test_baseline_privatize(benchmark, data, label):
    benchmark.group = f"cosine-repair-{label}"
    benchmark(_cycled(data[label][0], lambda x: noise.privatize(x, **KW)))


@pytest.mark.parametrize("label", list(SHAPES))
def test_repair(benchmark, data, label):
    benchmark.group = f"cosine-repair-{label}"
    xs, _, ks = data[label]
    copy = moves_any(ks)
    benchmark.extra_info["repair_moves_rows_of_the_pool"] = copy
    if copy:
        it = itertools.cycle(ks)
        benchmark.pedantic(_cosine_repair.repair, setup=lambda: ((next(it).copy(),), {}),
                           rounds=10 if TINY else PEDANTIC_ROUNDS.get(label, 20_000), warmup_rounds=10)
        candidate = _cycled(ks, lambda k: _cosine_repair.repair(k.copy()))
    else:
        candidate = _cycled(ks, _cosine_repair.repair)
        benchmark(candidate)
    benchmark.extra_info.update(paired_ratio(_cycled(xs, lambda x: noise.privatize(x, **KW)), candidate,
                                             block_s=1e-3))


@pytest.mark.parametrize("label", list(SHAPES))
def test_whole_stored_form_for_information(benchmark, data, label):
    benchmark.group = f"cosine-repair-{label}"
    benchmark(_cycled(data[label][1], lambda v: receipts.stored_form_batch(v, distance="Cosine")))
