"""Paired ratio: a candidate against its baseline, timed back to back in alternating rounds.

pytest-benchmark times the baseline and the candidate as two tests, one after the other. On a
shared VM the machine's speed can change between them (the host's other tenants come and go), and
the ratio of the two medians then measures that change as much as the code: on this project's
2-core VM the same build's 384-d noise ratio ranged 2.8x-4.8x across four runs of one afternoon.

Here each round times a block of baseline calls and a block of candidate calls next to each other
(which goes first alternates), and the figure is the median over rounds of the per-round ratio:
a slow phase slows both blocks of a round alike, so it cancels. It is reported next to the
ratio of medians, not instead of it.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

import numpy as np


def _block(fn: Callable[[], Any], calls: int) -> int:
    clock = time.perf_counter_ns
    t = clock()
    for _ in range(calls):
        fn()
    return clock() - t


def paired_ratio(baseline: Callable[[], Any], candidate: Callable[[], Any], *, rounds: int = 101,
                 block_s: float = 2e-4, budget_s: float | None = None) -> dict[str, float]:
    """Median and quartiles over rounds of baseline time / candidate time (>1: candidate faster).

    Each round times ``calls`` consecutive calls of each function, with ``calls`` chosen so that a
    candidate block lasts about ``block_s`` (at least one call). ``rounds`` is lowered, to no fewer
    than 11 (3 for a budget under a second), so that the whole measurement takes about
    ``budget_s`` (default: the environment's ``QG_BENCH_PAIRED_S``, else 6 s; ``run.py --tiny``
    sets 0.05).
    """
    if budget_s is None:
        budget_s = float(os.environ.get("QG_BENCH_PAIRED_S", "6"))
    least = 11 if budget_s >= 1.0 else 3
    for _ in range(3):  # warm both
        baseline()
        candidate()
    t_cand = max(_block(candidate, 5) / 5, 1.0)
    t_base = max(_block(baseline, 3) / 3, 1.0)
    calls = max(1, int(block_s * 1e9 / t_cand))
    per_round = calls * (t_cand + t_base) * 1e-9
    rounds = max(least, min(rounds, int(budget_s / per_round)))
    ratios = np.empty(rounds)
    for r in range(rounds):
        if r % 2:
            c = _block(candidate, calls)
            b = _block(baseline, calls)
        else:
            b = _block(baseline, calls)
            c = _block(candidate, calls)
        ratios[r] = b / c
    q1, med, q3 = np.percentile(ratios, [25, 50, 75])
    return {"paired_ratio": float(med), "paired_q1": float(q1), "paired_q3": float(q3),
            "paired_rounds": rounds, "paired_calls": calls}
