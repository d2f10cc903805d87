"""A/B of the budget exclusion's filter shape in qdrant-client local mode: the per-source form of
before h-lperf (tests/exclusion_old.py) against this tree's regrouped form
(``Exclusion.conditions``), in one process on one store.

Run: python bench/exclusion_local_ab.py [--points 1000] [--sources 10,50] [--rounds 9] [--calls 10]

For each ``--sources`` count: a local-mode PII collection of ``--points`` 384-d points (source
``s<i mod sources>``, coverage 0.25, no per-query diversity cap), and a reader of another boundary
who reads every point (top-100 queries) until each source is used up. Then, with the guarded
client's ``Exclusion.conditions`` set to each arm in turn, top-10 ``query_points`` of seeded
queries: each round times ``--calls`` reads per arm (the order alternates) and keeps the median.
Before timing, both arms must return the same points for every query. Printed: each arm's median
over rounds, the raw read's for scale, and the median and quartiles of the per-round ratio
new/old. Writes bench/results/exclusion_local_ab.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from qdrant_client import QdrantClient as RawClient  # noqa: E402

from qdrant_guard.sourcefilters import Exclusion  # noqa: E402
from tests.exclusion_old import old_conditions  # noqa: E402
from tests.guardkit import hr_shared, make_kit, models, unit  # noqa: E402

NEW = Exclusion.conditions


def bed(points: int, sources: int) -> tuple:
    kit = make_kit(Path(tempfile.mkdtemp(prefix="lperf-")))
    owner = hr_shared(kit, "hr", {"max_source_coverage": 0.25, "max_source_fraction": 1.0, "min_unique_sources": 1})
    rng = np.random.default_rng(7)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i % sources}", "v": i})
                        for i in range(points)])
    reader = owner.with_principal(kit.principal("reader", "support"))
    for _ in range(points // 50):  # reads past every source's cap
        reader.query_points("hr", query=unit(rng), limit=100)
    return owner, reader, [unit(rng) for _ in range(64)]


def timed(fn, calls: int) -> float:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--sources", default="10,50")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=10)
    a = ap.parse_args()
    results = {}
    for sources in [int(s) for s in a.sources.split(",")]:
        owner, reader, queries = bed(a.points, sources)
        arms = {"old": old_conditions, "new": NEW}

        def read(arm: str, q) -> list:
            Exclusion.conditions = arms[arm]
            try:
                return [(p.id, p.payload) for p in reader.query_points("hr", query=q, limit=10).points]
            finally:
                Exclusion.conditions = NEW
        for q in queries:
            if read("old", q) != read("new", q):
                sys.exit(f"the arms disagree on a query ({sources} sources)")
        excluded = read("new", queries[0]) and reader._guard.shared.get("exclusions")
        it = iter(range(10**9))
        per = {"old": [], "new": [], "raw": []}
        for r in range(a.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for arm in order:
                per[arm].append(timed(lambda arm=arm: read(arm, queries[next(it) % len(queries)]), a.calls))
            per["raw"].append(timed(lambda: RawClient.query_points(owner, "hr", query=queries[next(it) % len(queries)],
                                                                   limit=10), a.calls))
        ratios = sorted(n / o for n, o in zip(per["new"], per["old"]))
        q1, med, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
        row = {"old_ms": 1000 * statistics.median(per["old"]), "new_ms": 1000 * statistics.median(per["new"]),
               "raw_ms": 1000 * statistics.median(per["raw"]), "ratio_new_old": statistics.median(ratios),
               "ratio_q1": q1, "ratio_q3": q3, "exhausted_sources": max(
                   (len(v[3]) for v in (excluded or {}).values()), default=0)}
        results[str(sources)] = row
        print(f"{a.points} points, {sources} sources ({row['exhausted_sources']} used up): "
              f"old {row['old_ms']:.1f} ms, new {row['new_ms']:.1f} ms, raw {row['raw_ms']:.2f} ms; "
              f"new/old median {row['ratio_new_old']:.3f} (quartiles {q1:.3f}-{q3:.3f})", flush=True)
    out = HERE / "results" / "exclusion_local_ab.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"points": a.points, "rounds": a.rounds, "calls": a.calls, "results": results}, indent=1))


if __name__ == "__main__":
    main()
