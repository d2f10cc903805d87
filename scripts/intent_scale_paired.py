"""Train-only lines and per-label weights, judged on the same group splits: how docs/intent.md chose CLASS_SCALE.

    python scripts/intent_scale_paired.py [--train-only PATH] [--scale 1,1,2,3] [--splits 5] [--show]

For each of ``--splits`` group splits of the packaged dataset (the trainer's seed and the next
ones), a model is fitted as ``python -m qdrant_guard.intent_train`` fits one: the split's training
part plus the lines of ``--train-only`` (default: the packaged train-only file; ``""`` for none),
with the example weights scaled per label by ``--scale`` (benign, exploratory, suspicious,
adversarial). It is scored at the default policy (block suspicious + adversarial at confidence
>= 0.6) on the held-out part, on the first three benign corpora and harmful sets, and on the
harmful queries (held-out, second and third sets) in the paddings of
scripts/intent_features_paired.py ("every form": caught as written and in every padding).
Figures are summed over the splits. The fourth judging set (tests/data/intent_*_heldout4.jsonl) is
left out on purpose: it judges a chosen model once, with scripts/intent_fp.py.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(path: str) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return [r["text"] for r in map(json.loads, filter(str.strip, fh)) if r.get("form") != "bulk_records"]


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from intent_features_paired import EVAL_PADS_NEW, EVAL_PADS_OLD, _Scorer, pad

    from qdrant_guard import intent_features as F
    from qdrant_guard import intent_train as T

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train-only", default=None, help="JSONL lines added to every training part")
    ap.add_argument("--scale", default=",".join(str(v) for v in T.CLASS_SCALE), help="four weights, comma-separated")
    ap.add_argument("--splits", type=int, default=5)
    ap.add_argument("--show", action="store_true", help="print what the trainer's split misses and refuses")
    args = ap.parse_args(argv)
    scale = tuple(float(v) for v in args.scale.split(","))
    path = T.default_train_only_path() if args.train_only is None else args.train_only
    extra = T.load_dataset(path) if path else []
    data = os.path.join(ROOT, "tests", "data")
    benign = {n: _load(os.path.join(data, f"intent_benign_heldout{s}.jsonl")) for n, s in (("b1", ""), ("b2", "2"), ("b3", "3"))}
    harm = {n: _load(os.path.join(data, f"intent_harmful_heldout{s}.jsonl")) for n, s in (("h2", "2"), ("h3", "3"))}
    base = T.load_dataset()
    total: dict[str, list[int]] = {}
    for seed in range(T.SEED, T.SEED + args.splits):
        tr, te = T.split_dataset(base, seed=seed)
        rows = list(base) + extra
        doc = T.train(rows, list(tr) + list(range(len(base), len(rows))), class_scale=scale)
        sc = _Scorer(doc, F.featurize, F.CUE_NAMES)
        sus = [base[i]["text"] for i in te if base[i]["label"] == "suspicious"]
        adv = [base[i]["text"] for i in te if base[i]["label"] == "adversarial"]
        harmless = [base[i]["text"] for i in te if base[i]["label"] in ("benign", "exploratory")]

        def every(texts: list[str], pads: tuple[str, ...]) -> list[str]:
            return [t for t in texts if all(sc.blocked(u) for u in [t] + [pad(p, t) for p in pads])]
        got = {"suspicious caught": ([t for t in sus if sc.blocked(t)], sus),
               "adversarial caught": ([t for t in adv if sc.blocked(t)], adv),
               "harmless blocked": ([t for t in harmless if sc.blocked(t)], harmless)}
        got.update({f"{n} blocked": ([t for t in ts if sc.blocked(t)], ts) for n, ts in benign.items()})
        got.update({f"{n} caught": ([t for t in ts if sc.blocked(t)], ts) for n, ts in harm.items()})
        two = sus + adv + harm["h2"]
        got["every form, 2 paddings"] = (every(two, EVAL_PADS_OLD), two)
        got["every form, 10 paddings"] = (every(two + harm["h3"], EVAL_PADS_OLD + EVAL_PADS_NEW), two + harm["h3"])
        for k, (hit, n) in got.items():
            acc = total.setdefault(k, [0, 0])
            acc[0] += len(hit)
            acc[1] += len(n)
        if args.show and seed == T.SEED:
            for k, (hit, n) in got.items():
                wrong = [t for t in n if t not in hit] if "caught" in k or "every" in k else hit
                for t in wrong:
                    print(f"    {k}: {'missed' if 'blocked' not in k else 'refused'}: {t}")
    print(f"scale {scale}, {len(extra)} train-only lines, {args.splits} splits")
    for k, (a, n) in total.items():
        print(f"    {k} {a}/{n} ({a / n:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
