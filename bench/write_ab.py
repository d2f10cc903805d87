"""Guard-only write time of two source trees, timed in turn (an A/B for write-path changes).

Run: python bench/write_ab.py OLD_TREE NEW_TREE [--points 1000] [--rounds 21]
     (OLD_TREE e.g. from `git archive <commit> | tar -x -C /tmp/old`, with the built *.so copied in)

Each tree gets a worker process (run in the tree, with the tree's bench/_harness.py) with its own bed: a Cosine 384-d
collection of ``--points`` points upserted through the guard (owner, ``raw_in_boundary = false``:
every vector noised, snapped and receipted). Three measures, each round in each worker:

  update_vectors  CPU time (``time.process_time``), median of 3 guarded ``update_vectors`` of all
                  the points, every Qdrant answer (the receipt look-up and the final
                  ``batch_update_points``) replayed: the guard's own work only.
  upsert-1        wall time, median of 200 guarded single-point upserts (384-d), Qdrant's answer
                  replayed.
  stored_form-1   wall time, median of 2,000 ``stored_form_batch`` calls on one noised 384-d row.

The order of the workers alternates per round, so a slow phase of the shared machine slows both.
Prints each tree's median and quartiles over rounds, and the median and quartiles of the
per-round ratio new/old.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from _ab import alternate, start, summary

MEASURES = ("update_vectors", "upsert-1", "stored_form-1")


def worker(points: int) -> None:
    sys.path.insert(0, str(Path.cwd() / "bench"))  # the tree's own _harness, which puts that tree first
    import _harness as H
    import numpy as np
    from _harness import models

    import qdrant_guard
    from qdrant_guard.receipts import stored_form_batch

    assert Path(qdrant_guard.__file__).resolve().parent.parent == Path.cwd().resolve(), qdrant_guard.__file__

    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": False,
           "noise_on_write": True, "diversity": {"enabled": False}}
    bed = H.make_bed({"w": pol})
    name = H.fill(bed, "w", 0, 384)
    rows = H.unit_rows(points, 384, H.SEED)
    for lo in range(0, points, 256):
        bed.owner.upsert(name, points=[models.PointStruct(id=i, vector=rows[i].tolist(), payload={"source": f"doc{i % 50}"})
                                       for i in range(lo, min(points, lo + 256))])
    new = H.unit_rows(points, 384, H.SEED + 5)
    updates = [models.PointVectors(id=i, vector=new[i].tolist()) for i in range(points)]

    class AllReplayed(H.Replay):
        """Every request of the call answered from the recording (the look-up too)."""

        def record(self):
            self.answers = {}

            def invoke(call):
                res = self._real(call)
                self.answers[call.method] = res
                return res
            return self._drive(invoke)

        def run(self):
            return self._drive(lambda call: self.answers[call.method])

    uv = AllReplayed(bed.owner, "update_vectors", (name,), {"points": updates})
    uv.record()
    one = H.Replay(bed.owner, "upsert", (name,), {"points": [models.PointStruct(
        id=points + 1, vector=new[0].tolist(), payload={"source": "doc1"})]})
    one.record()
    noised = (np.asarray(new[1:2], dtype=np.float64) + 0.01).astype(np.float32)
    for _ in range(3):
        uv.run()
    for _ in range(200):
        one.run()
        stored_form_batch(noised, distance="Cosine")
    print("ready", flush=True)
    for _line in sys.stdin:
        cpu = []
        for _ in range(3):
            c = time.process_time()
            uv.run()
            cpu.append(time.process_time() - c)
        out = [statistics.median(cpu) * 1e3]
        ts = []
        for _ in range(200):
            t = time.perf_counter()
            one.run()
            ts.append(time.perf_counter() - t)
        out.append(statistics.median(ts) * 1e6)
        ts = []
        for _ in range(2000):
            t = time.perf_counter()
            stored_form_batch(noised, distance="Cosine")
            ts.append(time.perf_counter() - t)
        out.append(statistics.median(ts) * 1e6)
        print(" ".join(f"{x:.3f}" for x in out), flush=True)
    bed.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", nargs="?")
    ap.add_argument("new", nargs="?")
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.points)
    trees = {"old": a.old, "new": a.new}
    procs = {k: start([sys.executable, str(Path(__file__).resolve()), "--worker", "--points", str(a.points)],
                      cwd=d, env={**os.environ, "PYTHONPATH": str(Path(d).resolve())}) for k, d in trees.items()}
    got = alternate(procs, a.rounds, "go")
    units = {"update_vectors": "ms CPU", "upsert-1": "us", "stored_form-1": "us"}
    for m, measure in enumerate(MEASURES):
        print(f"{measure} ({a.points} points)" if m == 0 else measure)
        old = [row[m] for row in got["old"]]
        new = [row[m] for row in got["new"]]
        ratios = [n / o for o, n in zip(old, new)]
        for k, xs in (("old", old), ("new", new), ("new/old", ratios)):
            print("  " + summary(k, xs, "" if k == "new/old" else units[measure]))

if __name__ == "__main__":
    main()
