"""Guard overhead against raw qdrant-client, same store, same queries, interleaved, same run.

Run: python bench/bench_overhead.py            (full: about 2-3 minutes on 2 cores)
     python bench/bench_overhead.py --tiny     (smoke: seconds; numbers meaningless)
Writes bench/results/overhead.json (or --out DIR). Set QDRANT_URL to run against a server.

Measured (see bench/_harness.py for the method):

* reads: top-k ``query_points`` on N seeded 384-d points. Variants timed in the same shuffled slot of
  each round: ``raw`` (unguarded top-k), ``raw_overfetch`` (unguarded top-3k, what the guard asks
  Qdrant for when diversity is on), ``guarded`` (the guarded client, reader of another boundary,
  with query_text), and ``guard_only`` (the same guarded call with Qdrant's answer replayed, so only
  the guard is on the clock). Targets: guard_only p50 <= 2 % of raw p50 at 1,000 points, <= 1 %
  at 10,000.
* upserts: batches of 256 points with noise on write and signed receipts, guarded vs raw upsert of
  the same batch into an identical collection. Target: guarded p50 <= 1.15x raw p50.
* intent: the same read with the built-in intent classifier on, minus with it off (added latency).
* profile: cProfile of guard_only, top functions and the cumulative cost of each pipeline stage.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as H  # noqa: E402  (first: it pins BLAS threads before numpy loads)
import numpy as np  # noqa: E402
from _harness import RawClient, models  # noqa: E402

READ_STAGES = {
    "facade: bind arguments": "_facade.py:bind",
    "policy + boundary checks": "callchecks.py:require_access",
    "query text: redact for audit + screen": "querycheck.py:prepare_query",
    "  of which structural scan": "querycheck.py:validate_structure",
    "  of which query noise": "queryops.py:noise_query",
    "plan (over-fetch rewrite)": "readrelease.py:plan_read",
    "budget exclusion (used-up sources, before sending)": "budgetops.py:budget_exclusion",
    "post-process: diversity+budget+projection": "readrelease.py:finish",
    "  of which diversity caps": "diversity.py:enforce_diversity",
    "  of which extraction budget": "budgetops.py:apply_budget",
    "decision record (canonical JSON + sha256)": "decision.py:record",
    "audit append (hash chain + file write)": "audit.py:append",
}

WRITE_STAGES = {
    "facade: bind arguments": "_facade.py:bind",
    "materialise points": "writepoints.py:points_from_any",
    "prepare_points (all checks, noise, receipts)": "writeprep.py:prepare_points",
    "  of which dense conversion": "vectors.py:as_dense",
    "  of which noise (privatize)": "noise.py:privatize",
    "  of which stored form (lattice/normalise)": "storedform.py:stored_form_batch",
    "  of which receipts (batch Merkle + Ed25519)": "receipts.py:issue_receipts_batch",
    "  of which payload receipt encoding": "receipt_format.py:receipts_for_payload",
    "decision record (canonical JSON + sha256)": "decision.py:record",
    "audit append (hash chain + file write)": "audit.py:append",
}


def measure_reads(bed: H.Bed, name: str, *, dim: int, k: int, texts: list[str], rounds: int,
                  with_raw_overfetch: bool = True, seed: int = H.SEED) -> dict[str, Any]:
    """Interleaved raw / guarded / guard-only top-``k`` reads of ``name``, one query per text."""
    qv = [row.tolist() for row in H.unit_rows(len(texts), dim, seed + 1)]
    fetch = bed.reader.guard.config.collections[name].diversity
    over = int(np.ceil(k * fetch.overfetch_factor)) if fetch.enabled else k
    replays = [H.Replay(bed.reader, "query_points", (name,), {"query": qv[i], "query_text": texts[i], "limit": k})
               for i in range(len(texts))]
    for r in replays:
        r.record()
        r.check()
    fns = {
        "raw": lambda i: RawClient.query_points(bed.owner, name, query=qv[i], limit=k),
        "guarded": lambda i: bed.reader.query_points(name, query=qv[i], query_text=texts[i], limit=k),
        "guard_only": lambda i: replays[i].run(),
    }
    if with_raw_overfetch and over != k:
        fns["raw_overfetch"] = lambda i: RawClient.query_points(bed.owner, name, query=qv[i], limit=over)
    got = bed.reader.query_points(name, query=qv[0], query_text=texts[0], limit=k)
    samples = H.interleaved(fns, len(texts), rounds, seed=seed)
    out: dict[str, Any] = {nm: H.stats_us(s) for nm, s in samples.items()}
    out["paired_guarded_minus_raw"] = H.paired_delta_us(samples["guarded"], samples["raw"])
    out["guard_only_over_raw_p50"] = out["guard_only"]["p50_us"] / out["raw"]["p50_us"]
    out["guarded_over_raw_p50"] = out["guarded"]["p50_us"] / out["raw"]["p50_us"]
    out["overfetch_limit"] = over
    out["returned"] = len(got.points)
    out["forwarded_calls"] = sum(r.forwarded for r in replays)
    return out


def read_bed(n_points: int, dim: int, **policy: Any) -> tuple[H.Bed, str]:
    bed = H.make_bed({"docs": H.read_policy(**policy)})
    # At least 20 points per source, so that no source is used up by the run's reads: a used-up
    # source adds an exclusion filter, which changes the request Qdrant is asked and so the path
    # timed (and the replay's check). The query noise is keyed by a fresh guard key each run, so
    # with the tiny bed's 4 points per source that happened in about 1 run in 75.
    n_sources = 50 if n_points >= 50 * 20 else max(1, n_points // 40)
    return bed, H.fill(bed, "docs", n_points, dim, n_sources=n_sources)


def read_overhead(sizes: dict[int, int], n_queries: int, *, dim: int = 384, k: int = 10) -> dict[str, Any]:
    """Reads at each collection size (``sizes``: points -> interleaved rounds)."""
    texts = H.realistic_queries(n_queries)
    res: dict[str, Any] = {"dim": dim, "k": k, "queries": len(texts), "rounds": {str(n): r for n, r in sizes.items()},
                           "query_text_tokens_mean": float(np.mean([len(t.split()) for t in texts])), "by_points": {}}
    for n, rounds in sizes.items():
        bed, name = read_bed(n, dim)
        try:
            res["by_points"][str(n)] = measure_reads(bed, name, dim=dim, k=k, texts=texts, rounds=rounds)
        finally:
            bed.close()
    return res


def measure_upserts(bed: H.Bed, *, dim: int, batch: int, n_batches: int, rounds: int,
                    seed: int = H.SEED) -> dict[str, Any]:
    """Interleaved raw / guarded / guard-only upserts of the same ``batch``-point batches."""
    raw_name = H.fill(bed, "w_raw", 0, dim)
    g_name = H.fill(bed, "w_guard", 0, dim)
    rows = H.unit_rows(n_batches * batch, dim, seed + 2)
    batches = [[models.PointStruct(id=b * batch + j, vector=rows[b * batch + j].tolist(),
                                   payload={"source": f"doc{(b * batch + j) % 50}", "chunk": b * batch + j})
                for j in range(batch)] for b in range(n_batches)]
    replays = [H.Replay(bed.owner, "upsert", (g_name, batches[b]), {}) for b in range(n_batches)]
    for r in replays:
        r.record()
    fns = {
        "raw": lambda b: RawClient.upsert(bed.owner, raw_name, points=batches[b]),
        "guarded": lambda b: bed.owner.upsert(g_name, points=batches[b]),
        "guard_only": lambda b: replays[b].run(),
    }
    samples = H.interleaved(fns, n_batches, rounds, seed=seed)
    stored, _ = RawClient.scroll(bed.owner, g_name, limit=1, with_payload=True)
    out: dict[str, Any] = {nm: H.stats_us(s) for nm, s in samples.items()}
    out["guarded_over_raw_p50"] = out["guarded"]["p50_us"] / out["raw"]["p50_us"]
    out["guard_only_over_raw_p50"] = out["guard_only"]["p50_us"] / out["raw"]["p50_us"]
    out["per_point_guard_only_us"] = out["guard_only"]["p50_us"] / batch
    out["receipted"] = bool(stored and "_qdrant_guard" in str(stored[0].payload))
    out.update({"dim": dim, "batch": batch, "batches": n_batches, "rounds": rounds})
    return out


def write_bed() -> H.Bed:
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": False, "noise_on_write": True,
           "diversity": {"enabled": False}}
    return H.make_bed({"w_guard": pol})


def upsert_overhead(rounds: int, n_batches: int, *, dim: int = 384, batch: int = 256) -> dict[str, Any]:
    bed = write_bed()
    try:
        return measure_upserts(bed, dim=dim, batch=batch, n_batches=n_batches, rounds=rounds)
    finally:
        bed.close()


def intent_overhead(n_points: int, rounds: int, n_queries: int, *, dim: int = 384, k: int = 10) -> dict[str, Any]:
    """Guarded reads with the built-in intent classifier on vs off, same data, interleaved."""
    from qdrant_guard.intent import BuiltinIntentClassifier

    texts = H.realistic_queries(n_queries)
    bed = H.make_bed({"docs": H.read_policy(), "docs_intent": H.read_policy(intent={"enabled": True})})
    try:
        off = H.fill(bed, "docs", n_points, dim)
        on = H.fill(bed, "docs_intent", n_points, dim)
        qv = [row.tolist() for row in H.unit_rows(len(texts), dim, H.SEED + 1)]
        rep = {c: [H.Replay(bed.reader, "query_points", (c,), {"query": qv[i], "query_text": texts[i], "limit": k})
                   for i in range(len(texts))] for c in (off, on)}
        for rs in rep.values():
            for r in rs:
                r.record()
        clf = BuiltinIntentClassifier()
        fns = {
            "guarded_intent_off": lambda i: bed.reader.query_points(off, query=qv[i], query_text=texts[i], limit=k),
            "guarded_intent_on": lambda i: bed.reader.query_points(on, query=qv[i], query_text=texts[i], limit=k),
            "guard_only_intent_off": lambda i: rep[off][i].run(),
            "guard_only_intent_on": lambda i: rep[on][i].run(),
            "classify_only": lambda i: clf.classify(texts[i]),
        }
        samples = H.interleaved(fns, len(texts), rounds)
        out: dict[str, Any] = {nm: H.stats_us(s) for nm, s in samples.items()}
        out["added_end_to_end_p50_us"] = out["guarded_intent_on"]["p50_us"] - out["guarded_intent_off"]["p50_us"]
        out["added_guard_only_p50_us"] = out["guard_only_intent_on"]["p50_us"] - out["guard_only_intent_off"]["p50_us"]
        out["added_guard_only_p99_us"] = out["guard_only_intent_on"]["p99_us"] - out["guard_only_intent_off"]["p99_us"]
        out["paired_on_minus_off"] = H.paired_delta_us(samples["guard_only_intent_on"], samples["guard_only_intent_off"])
        out.update({"points": n_points, "dim": dim, "k": k, "queries": len(texts), "rounds": rounds})
        return out
    finally:
        bed.close()


def profiles(n_points: int, calls: int, *, dim: int = 384, k: int = 10, batch: int = 256) -> dict[str, Any]:
    """Where the guard's time goes, per call (cProfile; shares, since cProfile inflates Python calls)."""
    texts = H.realistic_queries(20)
    bed, name = read_bed(n_points, dim)
    try:
        qv = [row.tolist() for row in H.unit_rows(len(texts), dim, H.SEED + 1)]
        reps = [H.Replay(bed.reader, "query_points", (name,), {"query": qv[i], "query_text": texts[i], "limit": k})
                for i in range(len(texts))]
        for r in reps:
            r.record()
        state = {"i": 0}

        def one_read() -> None:
            state["i"] = (state["i"] + 1) % len(reps)
            reps[state["i"]].run()

        read = {"stages": H.profile_stages(one_read, calls, READ_STAGES), "top": H.profile_top(one_read, calls)}
    finally:
        bed.close()
    wbed = write_bed()
    try:
        g_name = H.fill(wbed, "w_guard", 0, dim)
        rows = H.unit_rows(batch, dim, H.SEED + 2)
        pts = [models.PointStruct(id=j, vector=rows[j].tolist(), payload={"source": f"doc{j % 50}", "chunk": j})
               for j in range(batch)]
        rep = H.Replay(wbed.owner, "upsert", (g_name, pts), {})
        rep.record()
        wcalls = max(2, calls // 200)
        write = {"stages": H.profile_stages(rep.run, wcalls, WRITE_STAGES), "top": H.profile_top(rep.run, wcalls),
                 "batch": batch}
    finally:
        wbed.close()
    return {"read": read, "upsert": write, "calls": calls}


CONFIGS = {
    "full": {"sizes": {1000: 60, 10000: 15}, "queries": 20, "up_rounds": 6, "up_batches": 5,
             "intent_rounds": 30, "profile_calls": 1000},
    "tiny": {"sizes": {200: 2}, "queries": 3, "up_rounds": 1, "up_batches": 2,
             "intent_rounds": 1, "profile_calls": 10},
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="smoke configuration (seconds; numbers meaningless)")
    ap.add_argument("--out", type=Path, default=None, help="results directory (default bench/results)")
    a = ap.parse_args(argv)
    cfg = CONFIGS["tiny" if a.tiny else "full"]
    first = next(iter(cfg["sizes"]))
    doc: dict[str, Any] = {"bench": "overhead", "config": "tiny" if a.tiny else "full",
                           "params": {**cfg, "sizes": {str(n): r for n, r in cfg["sizes"].items()}},
                           "machine": H.machine()}
    doc["reads"] = read_overhead(cfg["sizes"], cfg["queries"])
    doc["upserts"] = upsert_overhead(cfg["up_rounds"], cfg["up_batches"])
    doc["intent"] = intent_overhead(first, cfg["intent_rounds"], cfg["queries"])
    doc["profile"] = profiles(first, cfg["profile_calls"])
    doc["profile"]["points"] = first
    path = H.write_json("overhead", doc, a.out)
    for n, r in doc["reads"]["by_points"].items():
        print(f"reads {n} pts: raw p50 {r['raw']['p50_us']:.0f} us, guard_only p50 {r['guard_only']['p50_us']:.0f} us "
              f"(p99 {r['guard_only']['p99_us']:.0f}) = {H.pct(r['guard_only_over_raw_p50'])} of raw; "
              f"guarded p50 {r['guarded']['p50_us']:.0f} us")
    u = doc["upserts"]
    print(f"upsert 256: raw p50 {u['raw']['p50_us'] / 1e3:.2f} ms, guarded {u['guarded']['p50_us'] / 1e3:.2f} ms "
          f"= {u['guarded_over_raw_p50']:.2f}x")
    print(f"intent: +{doc['intent']['added_guard_only_p50_us']:.0f} us p50 (guard-only)")
    print(f"wrote {path}")
    return doc


if __name__ == "__main__":
    main()
