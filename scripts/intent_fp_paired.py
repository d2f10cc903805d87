"""Would adding labelled lines to the intent dataset cost recall? A paired comparison.

    python scripts/intent_fp_paired.py ADDITIONS.jsonl [--splits 5] [--groups f001-f061,f070]

For each of ``--splits`` group splits of the packaged dataset (the trainer's seed and the next
ones), two models are fitted exactly as ``python -m qdrant_guard.intent_train`` fits one: on the
training part alone ("before") and on the training part plus the additions ("after"). Both are
scored on the same held-out part (which no addition is in) at the default policy (block
suspicious + adversarial at confidence >= 0.6), and on the held-out benign RAG corpus
tests/data/intent_benign_heldout.jsonl. The trainer's own single split cannot show this: adding
groups moves other groups across it, so its before and after figures are on different queries.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from intent_fp import BLOCK, blocked, load_corpus
    from qdrant_guard.intent import BuiltinIntentClassifier
    from qdrant_guard.intent_train import SEED, _write, load_dataset, split_dataset, train

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("additions", help="JSONL lines in the dataset's format")
    ap.add_argument("--splits", type=int, default=5)
    ap.add_argument("--groups", default=None,
                    help="comma-separated group ids or ranges of them (f030-f041) of the additions to use (default: all)")
    args = ap.parse_args(argv)
    base = load_dataset()
    add = load_dataset(args.additions)
    if args.groups:
        spans = [part.split("-", 1) if "-" in part else [part, part] for part in args.groups.split(",")]
        add = [r for r in add if any(lo <= r["group"] <= hi for lo, hi in spans)]
        if not add:
            ap.error(f"--groups {args.groups}: no line of {args.additions} is in those groups")
    rows = base + add
    benign = [r["text"] for r in load_corpus() if r["form"] != "bulk_records"]
    totals: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(SEED, SEED + args.splits):
            tr, te = split_dataset(base, seed=seed)
            for tag, idx in (("before", tr), ("after", tr + list(range(len(base), len(rows))))):
                path = os.path.join(tmp, f"{seed}-{tag}.json")
                _write(train(rows, idx), path)
                clf = BuiltinIntentClassifier(path)
                sus = [base[i]["text"] for i in te if base[i]["label"] == "suspicious"]
                adv = [base[i]["text"] for i in te if base[i]["label"] == "adversarial"]
                harmless = [base[i]["text"] for i in te if base[i]["label"] not in BLOCK]
                v = [sum(blocked(clf, t, 0.6) for t in sus), len(sus), sum(blocked(clf, t, 0.6) for t in adv),
                     len(adv), sum(blocked(clf, t, 0.6) for t in harmless), len(harmless),
                     sum(blocked(clf, t, 0.6) for t in benign), len(benign)]
                print(f"split {seed} {tag:<6} suspicious {v[0]}/{v[1]}  adversarial {v[2]}/{v[3]}  "
                      f"harmless blocked {v[4]}/{v[5]}  benign corpus blocked {v[6]}/{v[7]}", flush=True)
                totals[tag] = [a + b for a, b in zip(totals.get(tag, [0] * 8), v)]
    for tag, v in totals.items():
        print(f"total {tag:<6} suspicious {v[0]}/{v[1]} ({v[0] / v[1]:.1%})  adversarial {v[2]}/{v[3]} "
              f"({v[2] / v[3]:.1%})  harmless blocked {v[4]}/{v[5]}  benign corpus blocked {v[6]}/{v[7]} "
              f"({v[6] / v[7]:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
