"""The guarded ``update_vectors`` (one UpdateVectors per point) against the raw one, same run.

Run: python -m pytest bench/bench_update_vectors.py -p no:cacheprovider --benchmark-only -q
Group ``update-vectors-<N>x384`` (N = 1,000; 40 with QG_BENCH_TINY=1, which ``run.py --tiny``
sets): local-mode (``:memory:``) store, two Cosine collections of N seeded 384-d points each, the
guarded one upserted through the guard (so every point holds receipts), the owner principal with
``raw_in_boundary = false`` (every vector noised on write, snapped and receipted). Every call
updates all N points' vectors to the same seeded new vectors.

  baseline  = ``qdrant_client.QdrantClient.update_vectors`` of the N points on the raw
              collection (what an application without the guard runs).
  candidate = ``qdrant_guard.QdrantClient.update_vectors`` of the same points: the receipt
              look-up, noise, stored form, receipts, and one ``batch_update_points`` holding an
              UpdateVectors and its receipt operations per point (writeprep.prepare_vector_updates).
  info      = the guard's own time, with Qdrant's answer to that final ``batch_update_points``
              replayed (``qdrant_guard.overhead.Replay``; the receipt look-up still goes to Qdrant);
              the raw ``batch_update_points`` of the very operations the guard sends; and the same
              operations with the per-point UpdateVectors merged into one in front (the shape
              before the per-point change), so Qdrant's share of the per-point split shows.

Ratio printed by bench/conftest.py = baseline median / candidate median (below 1: the guarded
call costs 1 / ratio times the raw one).

``python bench/bench_update_vectors.py [--rounds 7]`` (not run by run.py) times the same five calls in
interleaved rounds and prints the median CPU time (``time.process_time``) next to the wall time of
each: on a VM whose other jobs take the cores, wall time mostly measures the wait for a core.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as H  # noqa: E402  (first: it pins BLAS threads before numpy loads)
from _harness import RawClient, models  # noqa: E402
from _paired import paired_ratio  # noqa: E402
from qdrant_guard.overhead import Replay  # noqa: E402

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

TINY = os.environ.get("QG_BENCH_TINY") == "1"
N = 40 if TINY else 1_000
DIM = 384
GROUP = f"update-vectors-{N}x384"
ROUNDS = 2 if TINY else 5
INFO_ROUNDS = 2 if TINY else 3


class FinalCallReplay(Replay):
    """Replay whose final request is another method than the one called (``update_vectors``
    forwards one ``batch_update_points``): keeps that request's arguments and Qdrant's answer."""

    final = "batch_update_points"

    def record(self):
        def invoke(call):
            res = self._real(call)
            if call.method == self.final:
                self.answer, self.kwargs_sent = res, call.kwargs
            return res

        return self._drive(invoke)

    def _invoke(self, call):
        if call.method == self.final:
            return self.answer
        self.forwarded += 1
        return self._real(call)


def merged_update(ops: list) -> list:
    """``ops`` with every UpdateVectors operation's points in one UpdateVectors in front."""
    updates = [op for op in ops if isinstance(op, models.UpdateVectorsOperation)]
    points = [p for op in updates for p in op.update_vectors.points]
    first = models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
        points=points, shard_key=updates[0].update_vectors.shard_key))
    return [first] + [op for op in ops if not isinstance(op, models.UpdateVectorsOperation)]


@pytest.fixture(scope="module")
def bed():
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": False,
           "noise_on_write": True, "diversity": {"enabled": False}}
    b = H.make_bed({"uv_guard": pol})
    raw_name = H.fill(b, "uv_raw", N, DIM)
    g_name = H.fill(b, "uv_guard", 0, DIM)
    rows = H.unit_rows(N, DIM, H.SEED)
    for start in range(0, N, 256):
        b.owner.upsert(g_name, points=[models.PointStruct(id=i, vector=rows[i].tolist(), payload={"source": f"doc{i % 50}"})
                                       for i in range(start, min(N, start + 256))])
    new = H.unit_rows(N, DIM, H.SEED + 5)
    points = [models.PointVectors(id=i, vector=new[i].tolist()) for i in range(N)]
    replay = FinalCallReplay(b.owner, "update_vectors", (g_name, points), {})
    replay.record()
    ops = replay.kwargs_sent["update_operations"]
    assert sum(isinstance(op, models.UpdateVectorsOperation) for op in ops) == N  # one per point
    yield {"bed": b, "raw": raw_name, "guard": g_name, "points": points, "replay": replay, "ops": ops}
    b.close()


def _raw(s):
    return lambda: RawClient.update_vectors(s["bed"].owner, s["raw"], points=s["points"])


def _guarded(s):
    return lambda: s["bed"].owner.update_vectors(s["guard"], points=s["points"])


def test_baseline_raw_update_vectors(benchmark, bed):
    benchmark.group = GROUP
    benchmark.pedantic(_raw(bed), rounds=ROUNDS, warmup_rounds=1)


def test_guarded_update_vectors(benchmark, bed):
    benchmark.group = GROUP
    benchmark.extra_info["points"] = N
    benchmark.pedantic(_guarded(bed), rounds=ROUNDS, warmup_rounds=1)
    benchmark.extra_info.update(paired_ratio(_raw(bed), _guarded(bed), rounds=11, block_s=0.0))


def test_guard_only_replayed_for_information(benchmark, bed):
    benchmark.group = GROUP
    replay = bed["replay"]
    replay.forwarded = 0
    benchmark.pedantic(replay.run, rounds=INFO_ROUNDS, warmup_rounds=1)
    # Requests other than the final one (the receipt look-up) still go to Qdrant, on the clock.
    benchmark.extra_info["forwarded_per_call"] = replay.forwarded / (INFO_ROUNDS + 1)


def test_raw_guard_ops_for_information(benchmark, bed):
    benchmark.group = GROUP
    ops = bed["ops"]
    benchmark.pedantic(lambda: RawClient.batch_update_points(bed["bed"].owner, bed["guard"], update_operations=ops),
                       rounds=INFO_ROUNDS, warmup_rounds=1)


def test_raw_guard_ops_one_update_for_information(benchmark, bed):
    benchmark.group = GROUP
    ops = merged_update(bed["ops"])
    benchmark.pedantic(lambda: RawClient.batch_update_points(bed["bed"].owner, bed["guard"], update_operations=ops),
                       rounds=INFO_ROUNDS, warmup_rounds=1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="update_vectors: CPU and wall time, interleaved rounds")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args(argv)
    fixture = bed.__wrapped__()  # the pytest fixture's generator, driven by hand
    s = next(fixture)
    owner, name = s["bed"].owner, s["guard"]
    fns = {"raw update_vectors (baseline)": _raw(s), "guarded update_vectors": _guarded(s),
           "guard-only (final request replayed)": s["replay"].run,
           "raw batch_update_points of the guard's ops": lambda: RawClient.batch_update_points(
               owner, name, update_operations=s["ops"]),
           "the same, one merged UpdateVectors": lambda: RawClient.batch_update_points(
               owner, name, update_operations=merged_update(s["ops"]))}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    wall: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(a.rounds):
        for k, fn in fns.items():
            t, c = time.perf_counter(), time.process_time()
            fn()
            cpu[k].append(time.process_time() - c)
            wall[k].append(time.perf_counter() - t)
    base = statistics.median(cpu["raw update_vectors (baseline)"])
    print(f"{N} points x {DIM}-d, {a.rounds} interleaved rounds, medians:")
    for k in fns:
        c = statistics.median(cpu[k])
        print(f"  {k:45s} cpu {c * 1e3:8.1f} ms ({c / base:5.2f}x raw)  wall {statistics.median(wall[k]) * 1e3:8.1f} ms")
    s["bed"].close()


if __name__ == "__main__":
    main()
