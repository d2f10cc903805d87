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
              UpdateVectors and its receipt operations per point (writes.prepare_vector_updates).
  info      = the guard's own time, with Qdrant's answer to that final ``batch_update_points``
              replayed (``qdrant_guard.overhead.Replay``; the receipt look-up still goes to Qdrant);
              the raw ``batch_update_points`` of the very operations the guard sends; and the same
              operations with the per-point UpdateVectors merged into one in front (the shape
              before the per-point change), so Qdrant's share of the per-point split shows.

Ratio printed by bench/conftest.py = baseline median / candidate median (below 1: the guarded
call costs 1 / ratio times the raw one).
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
