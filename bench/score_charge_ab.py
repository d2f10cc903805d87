"""Guard-only read time with diversity.charge_scores off and on, timed in turn (one tree).

Run: python bench/score_charge_ab.py [--rounds 31] [--calls 300]

As bench/read_ab.py, but both workers run this tree on a PROPRIETARY read bed
(bench_overhead.read_bed, max_vectors 10**9 so nothing is withheld) and differ only in
charge_scores. The 20 replayed reads repeat, so with the knob on each admission refreshes ids the
key already holds (a repeated request's cost; a new request also inserts its ids). Prints each
side's median and quartiles over rounds, and those of the per-round ratio on/off.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _ab import alternate, serve_replayed_reads, start, summary


def worker(charge: bool) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _harness as H
    import bench_overhead as B

    bed, name = B.read_bed(1000, 384, **{"class": "PROPRIETARY",
                                         "diversity": {"max_vectors": 10**9, "charge_scores": charge}})
    serve_replayed_reads(H, bed, name)
    bed.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--worker", choices=["off", "on"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker == "on")
    procs = {k: start([sys.executable, str(Path(__file__).resolve()), "--worker", k]) for k in ("off", "on")}
    got = {k: [row[0] for row in rows] for k, rows in alternate(procs, a.rounds, str(a.calls)).items()}
    ratios = [n / o for o, n in zip(got["off"], got["on"])]
    for k, xs in [*got.items(), ("on/off", ratios)]:
        print(summary(k, xs, "" if k == "on/off" else "us/read", width=7))

if __name__ == "__main__":
    main()
