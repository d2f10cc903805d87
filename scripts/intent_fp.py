"""Block rate of an intent model at a policy's block set and threshold, on both sides.

    python scripts/intent_fp.py [--model PATH] [--min-confidence 0.6] [--show]

Harmless side: tests/data/intent_benign_heldout.jsonl, benign RAG queries written for this
measurement and kept out of the training data (its ``bulk_records`` lines, requests for records
in bulk that docs/intent.md calls suspicious, are counted apart), and
tests/data/intent_benign_heldout2.jsonl, a second corpus written independently (other domains and
wordings) before any model was tuned against the first. Harmful side: the suspicious and
adversarial queries of the classifier's held-out split (``split_dataset``) and of the whole
dataset, and tests/data/intent_harmful_heldout2.jsonl, suspicious and adversarial queries written
with the second corpus, none from the dataset. The third corpora,
tests/data/intent_benign_heldout3.jsonl (benign, many of them commands naming a document) and
tests/data/intent_harmful_heldout3.jsonl (half of them record grabs that name a document, policy or
process), were written before any model was trained with lines that name documents on both sides. The fourth
corpora, tests/data/intent_benign_heldout4.jsonl (benign, across HR, legal, engineering, support,
finance, medicine and more, many of them commands naming a document) and
tests/data/intent_harmful_heldout4.jsonl (record dumps, exfiltration, instruction overrides,
enumeration probes), were written and measured before the model was retrained against the
refusals of the first three, and are kept for the final measurement only. The fifth corpora,
tests/data/intent_benign_heldout5.jsonl (benign, in other domains, some naming tokens, keys,
passwords, hex codes and encodings) and tests/data/intent_harmful_heldout5.jsonl (about half of
them obfuscated: spaced letters, leetspeak, homoglyphs, zero-width characters, base64 and hex,
synonyms, split words; the kind is in each line's ``note``), were written and measured before
the obfuscation folding of feature version 3. The sixth and seventh corpora,
tests/data/intent_benign_heldout6.jsonl and tests/data/intent_harmful_heldout6.jsonl (plain bulk
requests for passwords, keys, tokens, SSNs and card numbers, and look-alikes that use the same verbs
and nouns harmlessly) and the smaller tests/data/intent_*_heldout7.jsonl, were written before any
model was trained against them (h-intent5's reverted builtin-linear-v2, then h-intent6's); the
bulk_secret cue of h-intent6 was written after reading both sets' lines, so neither is blind for
it. A query counts as
blocked when its label is in the block set at ``min_confidence`` or above, as the pipeline decides.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "data", "intent_benign_heldout.jsonl")
CORPUS2 = os.path.join(ROOT, "tests", "data", "intent_benign_heldout2.jsonl")
HARMFUL2 = os.path.join(ROOT, "tests", "data", "intent_harmful_heldout2.jsonl")
CORPUS3 = os.path.join(ROOT, "tests", "data", "intent_benign_heldout3.jsonl")
HARMFUL3 = os.path.join(ROOT, "tests", "data", "intent_harmful_heldout3.jsonl")
CORPUS4 = os.path.join(ROOT, "tests", "data", "intent_benign_heldout4.jsonl")
HARMFUL4 = os.path.join(ROOT, "tests", "data", "intent_harmful_heldout4.jsonl")
CORPUS5 = os.path.join(ROOT, "tests", "data", "intent_benign_heldout5.jsonl")
HARMFUL5 = os.path.join(ROOT, "tests", "data", "intent_harmful_heldout5.jsonl")
CORPUS6 = os.path.join(ROOT, "tests", "data", "intent_benign_heldout6.jsonl")
HARMFUL6 = os.path.join(ROOT, "tests", "data", "intent_harmful_heldout6.jsonl")
CORPUS7 = os.path.join(ROOT, "tests", "data", "intent_benign_heldout7.jsonl")
HARMFUL7 = os.path.join(ROOT, "tests", "data", "intent_harmful_heldout7.jsonl")
BLOCK = ("suspicious", "adversarial")


def load_corpus(path: str = CORPUS) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


SUM_BLOCKED = False  # --sum-blocked: a rule the pipeline does not apply, measured to compare


def blocked(clf, text: str, min_confidence: float) -> bool:
    if SUM_BLOCKED:
        scores = clf.scores(text)
        return sum(scores[label] for label in BLOCK) >= min_confidence
    res = clf.classify(text)
    return res.label in BLOCK and res.confidence >= min_confidence


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, ROOT)
    from qdrant_guard.intent import BuiltinIntentClassifier
    from qdrant_guard.intent_train import load_dataset, split_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model JSON (default: the packaged one)")
    ap.add_argument("--min-confidence", type=float, default=0.6)
    ap.add_argument("--show", action="store_true", help="print every blocked benign query")
    ap.add_argument("--sum-blocked", action="store_true",
                    help="count a query as blocked when the blocked labels' probabilities together reach "
                         "--min-confidence (not what the pipeline does: it takes the top label's)")
    args = ap.parse_args(argv)
    global SUM_BLOCKED
    SUM_BLOCKED = args.sum_blocked
    clf = BuiltinIntentClassifier(args.model)
    mc = args.min_confidence

    for title, path in (("held-out benign corpus", CORPUS), ("second benign corpus", CORPUS2),
                        ("third benign corpus", CORPUS3), ("fourth benign corpus", CORPUS4),
                        ("fifth benign corpus", CORPUS5), ("sixth benign corpus", CORPUS6),
                        ("seventh benign corpus", CORPUS7)):
        corpus = load_corpus(path)
        benign = [r for r in corpus if r["form"] != "bulk_records"]
        bulk = [r for r in corpus if r["form"] == "bulk_records"]
        hits = [r for r in benign if blocked(clf, r["text"], mc)]
        print(f"{title}: {len(hits)}/{len(benign)} blocked ({len(hits) / len(benign):.1%})")
        by_form = Counter(r["form"] for r in hits)
        for form in sorted({r["form"] for r in benign}):
            n = sum(r["form"] == form for r in benign)
            print(f"  {form:<11} {by_form[form]:>3}/{n}")
        if bulk:
            print(f"  bulk_records (apart): {sum(blocked(clf, r['text'], mc) for r in bulk)}/{len(bulk)} blocked")
        if args.show:
            for r in hits:
                res = clf.classify(r["text"])
                print(f"    {res.label} {res.confidence:.2f} [{r['form']}] {r['text']}")

    for title, path in (("second harmful set", HARMFUL2), ("third harmful set", HARMFUL3),
                        ("fourth harmful set", HARMFUL4), ("fifth harmful set", HARMFUL5),
                        ("sixth harmful set", HARMFUL6), ("seventh harmful set", HARMFUL7)):
        harmful2 = load_corpus(path)
        missed = [r for r in harmful2 if not blocked(clf, r["text"], mc)]
        parts = "; ".join(f"{lab} {sum(r['label'] == lab and r not in missed for r in harmful2)}/"
                          f"{sum(r['label'] == lab for r in harmful2)}" for lab in BLOCK)
        print(f"{title}: {len(harmful2) - len(missed)}/{len(harmful2)} blocked "
              f"({(len(harmful2) - len(missed)) / len(harmful2):.1%}; {parts})")
        obf = [r for r in harmful2 if r.get("note", "").startswith("obfuscation")]
        if obf:
            print(f"  obfuscated: {sum(r not in missed for r in obf)}/{len(obf)}; "
                  f"plain: {sum(r not in missed for r in harmful2 if r not in obf)}/{len(harmful2) - len(obf)}")
        if args.show:
            for r in missed:
                res = clf.classify(r["text"])
                print(f"    missed ({res.label} {res.confidence:.2f}) [{r['label']}] {r['text']}")

    rows = load_dataset()
    _, test = split_dataset(rows)
    for name, idx in (("held-out split", test), ("whole dataset", range(len(rows)))):
        harm = [i for i in idx if rows[i]["label"] in BLOCK]
        harmless = [i for i in idx if rows[i]["label"] not in BLOCK]
        caught = sum(blocked(clf, rows[i]["text"], mc) for i in harm)
        adv = [i for i in harm if rows[i]["label"] == "adversarial"]
        adv_caught = sum(blocked(clf, rows[i]["text"], mc) for i in adv)
        fp = sum(blocked(clf, rows[i]["text"], mc) for i in harmless)
        print(f"{name}: harmful blocked {caught}/{len(harm)} ({caught / len(harm):.1%}); adversarial "
              f"{adv_caught}/{len(adv)}; harmless blocked {fp}/{len(harmless)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
