"""How the guard's cost scales: dimension, batch size, query length, result size.

Run: python bench/bench_scaling.py            (full: about 2-3 minutes on 2 cores)
     python bench/bench_scaling.py --tiny     (smoke: seconds; numbers meaningless)
Writes bench/results/scaling.json (or --out DIR). Set QDRANT_URL to run against a server.

Every point is measured like bench/bench_overhead.py (raw vs guarded vs guard-only, interleaved):

* dimension 384 / 768 / 1536: top-10 reads on 1,000 points, and upserts of 64-point batches;
* batch size 1 / 64 / 1024: upserts (noise on write + receipts) at 384-d;
* query length 50 / 500 / 5,000 tokens: reads with ``max_tokens`` raised to 10,000 and
  ``max_repetition`` off (the text is English-like from an ~90-word vocabulary, so it repeats), and
  the rejection path under the default rules (500-token cap, repetition <= 0.5);
* result size k = 10 / 100: reads on 1,000 points at 384-d.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as H  # noqa: E402  (first: it pins BLAS threads before numpy loads)
from _harness import RawClient  # noqa: E402
from bench_overhead import measure_reads, measure_upserts, read_bed, write_bed  # noqa: E402

from qdrant_guard import GuardRefusal  # noqa: E402


def _reads(points: int, dim: int, k: int, texts: list[str], rounds: int, **policy: Any) -> dict[str, Any]:
    bed, name = read_bed(points, dim, **policy)
    try:
        return measure_reads(bed, name, dim=dim, k=k, texts=texts, rounds=rounds, with_raw_overfetch=False)
    finally:
        bed.close()


def _upserts(dim: int, batch: int, n_batches: int, rounds: int) -> dict[str, Any]:
    bed = write_bed()
    try:
        return measure_upserts(bed, dim=dim, batch=batch, n_batches=n_batches, rounds=rounds)
    finally:
        bed.close()


def _rejections(points: int, dim: int, texts: dict[str, str], rounds: int) -> dict[str, Any]:
    """Latency of a refused query (default rules) next to a raw top-10 read of the same store."""
    bed, name = read_bed(points, dim)
    try:
        q = H.unit_rows(1, dim, H.SEED + 1)[0].tolist()
        labels = list(texts)
        verdicts: dict[str, list[str]] = {}

        def refused(i: int) -> None:
            try:
                bed.reader.query_points(name, query=q, query_text=texts[labels[i]], limit=10)
            except GuardRefusal as exc:
                verdicts[labels[i]] = sorted({v["kind"] for v in exc.details.get("violations", [])})
                return
            raise RuntimeError(f"the {labels[i]} query was expected to be refused under the default rules")

        raw = H.interleaved({"raw": lambda i: RawClient.query_points(bed.owner, name, query=q, limit=10),
                             "refused": refused}, len(labels), rounds)
        per = {lab: H.stats_us(raw["refused"][i::len(labels)]) for i, lab in enumerate(labels)}
        return {"raw_top10": H.stats_us(raw["raw"]), "refused": per, "violations": verdicts}
    finally:
        bed.close()


CONFIGS = {
    "full": {"points": 1000, "queries": 10, "rounds": 30, "dims": [384, 768, 1536], "dim_batch": 64,
             "dim_up": (3, 3), "batches": {1: (20, 5), 64: (4, 3), 1024: (2, 2)}, "lengths": [50, 500, 5000],
             "ks": [10, 100], "reject_rounds": 30},
    "tiny": {"points": 200, "queries": 2, "rounds": 1, "dims": [384, 768], "dim_batch": 4,
             "dim_up": (1, 1), "batches": {1: (2, 1), 8: (1, 1)}, "lengths": [50, 600], "ks": [10], "reject_rounds": 1},
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="smoke configuration (seconds; numbers meaningless)")
    ap.add_argument("--out", type=Path, default=None, help="results directory (default bench/results)")
    a = ap.parse_args(argv)
    cfg = CONFIGS["tiny" if a.tiny else "full"]
    pts, nq, rounds = cfg["points"], cfg["queries"], cfg["rounds"]
    texts = H.realistic_queries(nq)
    doc: dict[str, Any] = {"bench": "scaling", "config": "tiny" if a.tiny else "full",
                           "params": {k: (v if not isinstance(v, dict) else {str(x): y for x, y in v.items()})
                                      for k, v in cfg.items()},
                           "machine": H.machine()}
    doc["dimension"] = {str(d): {"reads": _reads(pts, d, 10, texts, rounds),
                                 "upserts": _upserts(d, cfg["dim_batch"], *cfg["dim_up"])} for d in cfg["dims"]}
    doc["batch"] = {str(b): _upserts(384, b, nb, r) for b, (nb, r) in cfg["batches"].items()}
    long_rules = {"query": {"max_tokens": 10000, "max_repetition": None}}
    doc["query_length"] = {str(n): _reads(pts, 384, 10, [H.long_query(n, seed=H.SEED + j) for j in range(nq)],
                                          rounds, **long_rules) for n in cfg["lengths"]}
    doc["query_length_rejected"] = _rejections(pts, 384, {f"{n} tokens": H.long_query(n, seed=H.SEED)
                                                          for n in cfg["lengths"] if n >= 500}, cfg["reject_rounds"])
    doc["k"] = {str(k): _reads(pts, 384, k, texts, rounds) for k in cfg["ks"]}
    path = H.write_json("scaling", doc, a.out)
    for axis in ("dimension", "query_length", "k"):
        for key, r in doc[axis].items():
            rr = r.get("reads", r)
            print(f"{axis}={key}: raw p50 {rr['raw']['p50_us']:.0f} us, guard_only p50 {rr['guard_only']['p50_us']:.0f} us")
    for key, r in doc["batch"].items():
        print(f"batch={key}: guarded/raw {r['guarded_over_raw_p50']:.2f}x, guard {r['per_point_guard_only_us']:.0f} us/point")
    print(f"wrote {path}")
    return doc


if __name__ == "__main__":
    main()
