"""Guard-only read time of two source trees, timed in turn (an A/B for read-path changes).

Run: python bench/read_ab.py OLD_TREE NEW_TREE [--points 1000] [--rounds 31] [--calls 300] [--filtered]
     (OLD_TREE e.g. from `git archive <commit> | tar -x -C /tmp/old`, with the built *.so copied in)

Each tree gets a worker process with its own bed (bench_overhead.read_bed, every read defence on)
and 20 replayed top-10 reads (Qdrant's answer replayed, as ``guard_only``; ``--filtered``: each
with a two-condition ``query_filter`` every point passes, for changes to how filters are checked).
Each round both workers time ``--calls`` reads and report their median; the order alternates per
round, so a slow phase of the shared machine slows both. Prints each tree's median and quartiles over rounds, and the median
and quartiles of the per-round ratio new/old.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _ab import alternate, serve_replayed_reads, start, summary


def worker(points: int, filtered: bool) -> None:
    sys.path.insert(0, str(Path.cwd() / "bench"))
    import _harness as H
    import bench_overhead as B
    from qdrant_client.http import models

    bed, name = B.read_bed(points, 384)
    flt = {"query_filter": models.Filter(must=[
        models.FieldCondition(key="chunk", range=models.Range(gte=0)),
        models.FieldCondition(key="source", match=models.MatchAny(any=[f"doc{i}" for i in range(50)]))])} if filtered else {}
    serve_replayed_reads(H, bed, name, **flt)
    bed.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", nargs="?")
    ap.add_argument("new", nargs="?")
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--filtered", action="store_true", help="each read with a two-condition query_filter")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.points, a.filtered)
    trees = {"old": a.old, "new": a.new}
    procs = {k: start([sys.executable, str(Path(__file__).resolve()), "--worker", "--points", str(a.points)]
                      + (["--filtered"] if a.filtered else []), cwd=d) for k, d in trees.items()}
    got = {k: [row[0] for row in rows] for k, rows in alternate(procs, a.rounds, str(a.calls)).items()}
    ratios = [n / o for o, n in zip(got["old"], got["new"])]
    for k, xs in [*got.items(), ("new/old", ratios)]:
        print(summary(k, xs, "" if k == "new/old" else "us/read"))

if __name__ == "__main__":
    main()
