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
import statistics
import subprocess
import sys
import time
from pathlib import Path


def worker(charge: bool) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _harness as H
    import bench_overhead as B

    texts = H.realistic_queries(20)
    bed, name = B.read_bed(1000, 384, **{"class": "PROPRIETARY",
                                         "diversity": {"max_vectors": 10**9, "charge_scores": charge}})
    qv = [row.tolist() for row in H.unit_rows(len(texts), 384, H.SEED + 1)]
    reps = [H.Replay(bed.reader, "query_points", (name,), {"query": qv[i], "query_text": texts[i], "limit": 10})
            for i in range(len(texts))]
    for r in reps:
        r.record()
        r.check()
    for j in range(200):
        reps[j % 20].run()
    print("ready", flush=True)
    for line in sys.stdin:
        ts = []
        for j in range(int(line)):
            t = time.perf_counter()
            reps[j % 20].run()
            ts.append(time.perf_counter() - t)
        print(f"{statistics.median(ts) * 1e6:.2f}", flush=True)
    bed.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--worker", choices=["off", "on"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker == "on")
    procs = {k: subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", k],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for k in ("off", "on")}
    for p in procs.values():
        assert p.stdout.readline().strip() == "ready"
    got: dict[str, list[float]] = {"off": [], "on": []}
    for r in range(a.rounds):
        for k in (("off", "on") if r % 2 == 0 else ("on", "off")):
            procs[k].stdin.write(f"{a.calls}\n")
            procs[k].stdin.flush()
            got[k].append(float(procs[k].stdout.readline()))
    for p in procs.values():
        p.stdin.close()
        p.wait()
    ratios = [n / o for o, n in zip(got["off"], got["on"])]
    for k, xs in [*got.items(), ("on/off", ratios)]:
        q = statistics.quantiles(xs, n=4)
        print(f"{k:7s} median {statistics.median(xs):8.3f}  quartiles {q[0]:.3f}-{q[2]:.3f}  "
              f"min {min(xs):.3f}  max {max(xs):.3f}" + ("" if k == "on/off" else " us/read"))


if __name__ == "__main__":
    main()
