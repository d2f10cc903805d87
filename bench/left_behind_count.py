"""The cost of the ``noise_queries`` count of raw vectors left behind, in local mode, in one run.

Run: python bench/left_behind_count.py [--points 10000] [--dim 16] [--rounds 5]

A PII collection under ``noise_on_write`` and ``noise_queries`` is filled with ``--points``
vectors noised and receipted by the guard (a writer outside the owner boundary). Then, in
alternating rounds, it times (process CPU time, so other processes' load counts less) the exact
``count`` the guard makes before the first query by point id, MMR or ``search_matrix_*``
(``rawstored.left_behind_filter``: every receipt field the read strips on) against a count that
checks a receipt's presence only, the cheapest filter that could stand in for it. Both must count
the same points (none: every receipt is the policy's). Prints each count's minimum and median
CPU seconds and the median of the per-round ratios; docs/server.md quotes them.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main() -> None:
    import warnings

    import numpy as np
    from guardkit import make_kit, models
    from qdrant_client import QdrantClient as Raw

    from qdrant_guard import QdrantClient
    from qdrant_guard.rawstored import left_behind_filter
    from qdrant_guard.receipts import RECEIPT_KEY
    from qdrant_guard.vectors import shape_from_info

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    warnings.simplefilter("ignore")  # local mode's "payload indexes have no effect"
    kit = make_kit(Path(tempfile.mkdtemp()))
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                              "noise_queries": True, "intent": {"enabled": False}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=a.dim, distance=models.Distance.COSINE))
    writer = owner.with_principal(kit.principal("bob", "support"))
    x = np.random.default_rng(20261207).normal(size=(a.points, a.dim))
    for s in range(0, a.points, 1000):
        writer.upsert("pii", [models.PointStruct(id=i, vector=x[i].tolist(), payload={"source": f"s{i % 50}"})
                              for i in range(s, min(s + 1000, a.points))])
    guard = left_behind_filter(shape_from_info(Raw.get_collection(owner, "pii")), cfg.policy_for("pii"), ())
    presence = models.Filter(must_not=[models.IsEmptyCondition(
        is_empty=models.PayloadField(key=f'{RECEIPT_KEY}.vectors.""'))])
    arms = {"guard's count": guard, "presence only": presence}
    cpu: dict[str, list[float]] = {k: [] for k in arms}
    counts = {}
    for r in range(a.rounds):
        for name in (list(arms) if r % 2 == 0 else list(reversed(arms))):
            t = time.process_time()
            n = Raw.count(owner, "pii", count_filter=arms[name], exact=True).count
            cpu[name].append(time.process_time() - t)
            counts[name] = n
    assert counts == {"guard's count": 0, "presence only": a.points}, counts
    for name, ts in cpu.items():
        print(f"{name}: min {min(ts):.3f} s, median {statistics.median(ts):.3f} s CPU ({a.points} points, {a.dim}-d)")
    ratios = [g / p for g, p in zip(cpu["guard's count"], cpu["presence only"])]
    print(f"guard's count / presence only: median {statistics.median(ratios):.1f} "
          f"(load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
