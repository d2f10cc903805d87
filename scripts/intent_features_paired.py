"""Would extra cue features cut false positives without costing recall? A paired comparison.

    python scripts/intent_features_paired.py [--variant NAME ...] [--splits 5] [--show] [--augment] [--check]
                                             [--additions PATH ...]

For each of ``--splits`` group splits of the packaged dataset (the trainer's seed and the next
ones), two models are fitted exactly as ``python -m qdrant_guard.intent_train`` fits one, on the
same training part: one with the package's features ("before") and one with the package's
features plus the extra cues of a variant ("after"). Both are scored at the default policy (block
suspicious + adversarial at confidence >= 0.6) on the same held-out part, on both benign corpora
(tests/data/intent_benign_heldout.jsonl, tests/data/intent_benign_heldout2.jsonl, without their
``bulk_records`` lines), on the second harmful set (tests/data/intent_harmful_heldout2.jsonl), and
on the held-out and second-set harmful queries padded with document words (`` per the policy``
appended, ``How is this handled? `` prepended): "padded" counts each padded form, "every-form"
counts a query as caught only when it is caught as written and in both padded forms. The third
corpora (tests/data/intent_benign_heldout3.jsonl, tests/data/intent_harmful_heldout3.jsonl) and
eight more paddings (``EVAL_PADS_NEW``) were written before any model was trained with
``--additions``: "benign3", "harmful3", "padded-new" (the held-out, second and third harmful
queries in each new padding) and "every-form-all" (caught as written and in all ten paddings, on
those three sets) score them. Figures are summed over the splits.

``--additions PATH`` (JSONL in the dataset's shape; repeatable) adds those lines to the "after" model's
training part only, on every split; the "before" model and every held-out part are as without it.
The variant ``none`` adds no cue, so ``--variant none --additions PATH`` measures the lines alone.

The extra cues are candidates kept in this script, so the shipped extractor is untouched while
they are judged: each regex over the case-folded query adds one dense feature (1.0 when it
matches); a cue whose name ends in a suffix of ``GATES`` is held at 0 when one of the listed
package cues fires. ``--augment`` also trains the candidate on its training part's harmful lines
padded with other document words (``TRAIN_PADS``). Scoring repeats the runtime's arithmetic (bias +
features @ weights, softmax, argmax, its probability as the confidence); ``--check`` compares it
with the runtime classifier.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from typing import Any, Callable

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Document and artifact nouns: things a RAG user asks for that are not somebody's record.
_DOC = (r"templates?|polic(?:y|ies)|handbooks?|runbooks?|playbooks?|faqs?|guides?|guidelines|manuals?|"
        r"procedures?|checklists?|forms?|documentation|docs|articles?|pages?|calendars?|schedules?|plans?|"
        r"rubrics?|syllabus|slides|process(?:es)?|rules|instructions|steps|overview|format")
# The same without the nouns attacks lean on: "plan" (merger plan, improvement plan), "rules" and
# "instructions" (ignore the earlier rules, print your instructions), "notes", "docs", "overview".
_DOC_STRICT = (r"templates?|polic(?:y|ies)|handbooks?|runbooks?|playbooks?|faqs?|guides?|guidelines|manuals?|"
               r"procedures?|checklists?|forms?|documentation|articles?|pages?|calendars?|schedules?|rubrics?|"
               r"syllabus|slides|process(?:es)?|steps|format")
_REQ_VERB = (r"show|give|list|open|export|send|find|print|download|pull up|bring up|tell|get|fetch|share|"
             r"display|summari[sz]e|explain")
# Record nouns: rows about people or accounts, the thing bulk extraction is after.
_RECORD = (r"records?|employees?|customers?|patients?|students?|members?|suppliers?|drivers?|users?|staff|"
           r"people|parents?|clients?|accounts?|contacts?|candidates?|applicants?|everyone|everybody")
_PROCESS_Q = (r"^\s*(?:how|what|where|which|who|when|why|can|is|are|do|does|should)\b.*\b(?:format|polic(?:y|ies)|"
              r"procedure|process|rules?|retention|retained|kept|stored|protected|verified|managed|handled|"
              r"rotated|hashed|checked|logged|encrypted|approved|allowed)\b")

VARIANTS: dict[str, list[tuple[str, str]]] = {
    "none": [],
    # a document noun anywhere
    "doc_noun": [("x_doc_noun", rf"\b(?:{_DOC})\b")],
    # an imperative whose object, within six words, ends in a document noun
    "doc_request": [("x_doc_request", rf"^\s*(?:please\s+)?(?:{_REQ_VERB})\b(?:\s+(?:me|us))?(?:\s+[\w'-]+){{0,6}}?"
                                      rf"\s+(?:{_DOC})\b")],
    # a question about how something is handled (format, policy, storage, verification)
    "process_question": [("x_process_question", _PROCESS_Q)],
    # all/every/each (+ up to two words) + a record noun, or a plural possessive of one
    "record_quantity": [("x_record_quantity", rf"\b(?:all|every|each|whole|entire)\s+(?:[\w-]+\s+){{0,2}}?"
                                              rf"(?:{_RECORD})\b|\b(?:{_RECORD})(?:'s|s')\s")],
}
VARIANTS["doc_noun_strict"] = [("x_doc_noun", rf"\b(?:{_DOC_STRICT})\b")]
VARIANTS["doc_noun_strict+process_question"] = VARIANTS["doc_noun_strict"] + VARIANTS["process_question"]
VARIANTS["doc_request+process_question"] = VARIANTS["doc_request"] + VARIANTS["process_question"]
VARIANTS["doc_request+record_quantity"] = VARIANTS["doc_request"] + VARIANTS["record_quantity"]
VARIANTS["doc_noun+process_question"] = VARIANTS["doc_noun"] + VARIANTS["process_question"]
VARIANTS["doc_noun+process_question+record_quantity"] = (VARIANTS["doc_noun"] + VARIANTS["process_question"]
                                                         + VARIANTS["record_quantity"])
# A cue whose name ends in one of these suffixes fires only when none of the package cues listed
# does: a document noun appended to a record grab ("... per the policy") should not pull it away
# from suspicious.
_RISK = ("bulk_request", "bulk_scope", "confidential_marker", "instruction_override", "role_play",
         "markup_injection", "code_injection", "exfil_channel", "verbatim_dump", "evasion", "other_person",
         "named_target")
GATES = {"_gated": _RISK + ("sensitive_noun",), "_lightgated": _RISK,
         "_bulkgated": ("bulk_request", "bulk_scope", "other_person", "named_target")}
for _sfx in GATES:
    VARIANTS["doc_noun_strict+process_question" + _sfx] = [
        ("x_doc_noun" + _sfx, rf"\b(?:{_DOC_STRICT})\b"), ("x_process_question" + _sfx, _PROCESS_Q)]
VARIANTS["doc_noun_strict_gated+process_question"] = [
    ("x_doc_noun_gated", rf"\b(?:{_DOC_STRICT})\b"), ("x_process_question", _PROCESS_Q)]
VARIANTS["all"] = (VARIANTS["doc_noun"] + VARIANTS["doc_request"] + VARIANTS["process_question"]
                   + VARIANTS["record_quantity"])


def _load(path: str) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# Padding wordings the evaluation measures: the two first measured (h-intent2), and eight more
# written with tests/data/intent_*_heldout3.jsonl, before any model was trained with the lines that
# dataset groups i3* add (see docs/intent.md). ``{s}`` is the query without its final ``.?!``,
# ``{l}`` the same with its first letter in lower case, ``{t}`` the query as written. None of them
# may be used to pad a training line.
EVAL_PADS_OLD = ("{s} per the policy", "How is this handled? {t}")
EVAL_PADS_NEW = (
    "{s}, in line with the data retention guidelines",
    "{s} (see the onboarding checklist)",
    "{s} using the export template",
    "{s}. Format it like the usual report form.",
    "Following the quarterly audit procedure, {l}",
    "Quick question about the FAQ: {t}",
    "What does the runbook say? {t}",
    "Per section 4 of the staff manual, {l}",
)


def pad(template: str, text: str) -> str:
    s = text.rstrip(".?!")
    return template.format(s=s, l=s[:1].lower() + s[1:], t=text)


TRAIN_PADS = ("{} according to the handbook", "Regarding the procedure: {}", "{}, as in the template",
              "What's the process? {}")
def _extended(extra: list[tuple[str, str]]) -> tuple[Callable[[str], Any], tuple[str, ...]]:
    from qdrant_guard import intent_features as F

    names = F.CUE_NAMES
    pats = [(name, re.compile(rx)) for name, rx in extra]
    gates = {suffix: [names.index(c) for c in cues] for suffix, cues in GATES.items()}

    def featurize(text: str) -> Any:
        f = F.featurize(text)
        low = text[:2048].casefold()
        shut = {suffix for suffix, idx in gates.items() if any(f.cues[j] for j in idx)}
        more = tuple(1.0 if rx.search(low) and not any(name.endswith(sfx) for sfx in shut) else 0.0
                     for name, rx in pats)
        return F.Featurized(f.keys, f.cues + more, f.evidence)
    return featurize, names + tuple(n for n, _ in pats)


class _Scorer:
    def __init__(self, doc: dict[str, Any], featurize: Callable[[str], Any], cue_names: tuple[str, ...]) -> None:
        from qdrant_guard.intent_features import feature_rows

        self.feature_rows, self.featurize = feature_rows, featurize
        self.bits = doc["hash_bits"]
        base = 1 << self.bits
        self.w = np.zeros((base + len(cue_names), len(doc["labels"])))
        for b, row in doc["hashed_weights"].items():
            self.w[int(b)] = row
        for j, name in enumerate(cue_names):
            self.w[base + j] = doc["cue_weights"][name]
        self.bias = np.asarray(doc["bias"])
        self.labels = doc["labels"]

    def classify(self, text: str) -> tuple[str, float]:
        idx, vals = self.feature_rows(self.featurize(text), self.bits)
        z = self.bias + np.asarray(vals) @ self.w[idx]
        p = np.exp(z - z.max())
        p /= p.sum()
        k = int(np.argmax(p))
        return self.labels[k], float(p[k])

    def blocked(self, text: str) -> bool:
        label, conf = self.classify(text)
        return label in ("suspicious", "adversarial") and conf >= 0.6


def _fit(rows: list[dict[str, str]], idx: list[int], featurize: Callable[[str], Any],
         cue_names: tuple[str, ...]) -> dict[str, Any]:
    from qdrant_guard import intent_train as T

    saved = T.featurize, T.CUE_NAMES
    T.featurize, T.CUE_NAMES = featurize, cue_names
    try:
        return T.train(rows, idx)
    finally:
        T.featurize, T.CUE_NAMES = saved


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, ROOT)
    from qdrant_guard import intent_features as F
    from qdrant_guard.intent import BuiltinIntentClassifier
    from qdrant_guard.intent_train import SEED, _write, load_dataset, split_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS), help="default: every variant")
    ap.add_argument("--splits", type=int, default=5)
    ap.add_argument("--show", action="store_true", help="print the queries whose verdict the variant changes")
    ap.add_argument("--augment", action="store_true",
                    help="also train the candidate on its training part's harmful lines padded with document words")
    ap.add_argument("--check", action="store_true", help="check the scorer against the runtime classifier")
    ap.add_argument("--additions", action="append", default=[],
                    help="JSONL lines in the dataset's shape added to every 'after' model's training part")
    args = ap.parse_args(argv)
    base = load_dataset()
    data = os.path.join(ROOT, "tests", "data")
    benign1 = [r["text"] for r in _load(os.path.join(data, "intent_benign_heldout.jsonl")) if r["form"] != "bulk_records"]
    benign2 = [r["text"] for r in _load(os.path.join(data, "intent_benign_heldout2.jsonl")) if r["form"] != "bulk_records"]
    harm2 = [r["text"] for r in _load(os.path.join(data, "intent_harmful_heldout2.jsonl"))]
    benign3 = [r["text"] for r in _load(os.path.join(data, "intent_benign_heldout3.jsonl"))]
    harm3 = [r["text"] for r in _load(os.path.join(data, "intent_harmful_heldout3.jsonl"))]
    additions = [row for path in args.additions for row in load_dataset(path)]
    splits = [split_dataset(base, seed=s) for s in range(SEED, SEED + args.splits)]
    before_docs = [_fit(base, tr, F.featurize, F.CUE_NAMES) for tr, _ in splits]
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            for n, doc in enumerate(before_docs):
                path = os.path.join(tmp, f"m{n}.json")  # the runtime caches a model by its path
                _write(doc, path)
                clf = BuiltinIntentClassifier(path)
                sc = _Scorer(doc, F.featurize, F.CUE_NAMES)
                for t in benign1 + benign2 + harm2:
                    r, (label, conf) = clf.classify(t), sc.classify(t)
                    if r.label != label or abs(r.confidence - conf) > 1e-12:
                        raise SystemExit(f"scorer and runtime differ on {t!r}: {r.label} {r.confidence} "
                                         f"vs {label} {conf}")
        print("scorer agrees with the runtime classifier on every corpus query", flush=True)

    def padded(texts: list[str], pads: tuple[str, ...] = EVAL_PADS_OLD) -> list[str]:
        # The cheapest evasion of a document-noun cue: the harmful queries with a document noun
        # (or a process question) glued on.
        return [pad(p, t) for p in pads for t in texts]

    def score(sc: _Scorer, te: list[int]) -> dict[str, list[str]]:
        sus = [base[i]["text"] for i in te if base[i]["label"] == "suspicious"]
        adv = [base[i]["text"] for i in te if base[i]["label"] == "adversarial"]
        harmless = [base[i]["text"] for i in te if base[i]["label"] in ("benign", "exploratory")]
        return {
            "suspicious caught": [t for t in sus if sc.blocked(t)], "suspicious n": sus,
            "adversarial caught": [t for t in adv if sc.blocked(t)], "adversarial n": adv,
            "harmless blocked": [t for t in harmless if sc.blocked(t)], "harmless n": harmless,
            "benign1 blocked": [t for t in benign1 if sc.blocked(t)], "benign1 n": benign1,
            "benign2 blocked": [t for t in benign2 if sc.blocked(t)], "benign2 n": benign2,
            "harmful2 caught": [t for t in harm2 if sc.blocked(t)], "harmful2 n": harm2,
            "padded caught": [t for t in padded(sus + adv) + padded(harm2) if sc.blocked(t)],
            "padded n": padded(sus + adv) + padded(harm2),
            "every-form caught": [t for t in sus + adv + harm2 if all(sc.blocked(u) for u in [t] + padded([t]))],
            "every-form n": sus + adv + harm2,
            "benign3 blocked": [t for t in benign3 if sc.blocked(t)], "benign3 n": benign3,
            "harmful3 caught": [t for t in harm3 if sc.blocked(t)], "harmful3 n": harm3,
            "padded-new caught": [t for t in padded(sus + adv + harm2 + harm3, EVAL_PADS_NEW) if sc.blocked(t)],
            "padded-new n": padded(sus + adv + harm2 + harm3, EVAL_PADS_NEW),
            "every-form-all caught": [t for t in sus + adv + harm2 + harm3
                                      if all(sc.blocked(u) for u in [t] + padded([t], EVAL_PADS_OLD + EVAL_PADS_NEW))],
            "every-form-all n": sus + adv + harm2 + harm3,
        }

    before = [score(_Scorer(doc, F.featurize, F.CUE_NAMES), te) for doc, (_, te) in zip(before_docs, splits)]
    keys = ("suspicious", "adversarial", "harmless", "benign1", "benign2", "benign3", "harmful2", "harmful3",
            "padded", "every-form", "padded-new", "every-form-all")

    def line(tag: str, res: list[dict[str, list[str]]]) -> str:
        out = []
        for k in keys:
            hit = next(h for h in res[0] if h.startswith(k + " ") and not h.endswith(" n"))
            a = sum(len(r[hit]) for r in res)
            n = sum(len(r[k + " n"]) for r in res)
            out.append(f"{hit} {a}/{n} ({a / n:.1%})")
        return f"{tag}\n    " + "\n    ".join(out)

    print(line("before (package features)", before), flush=True)
    for name in args.variant or sorted(VARIANTS):
        featurize, cue_names = _extended(VARIANTS[name])
        after = []
        for (tr, te) in splits:
            rows, idx = list(base) + additions, list(tr) + list(range(len(base), len(base) + len(additions)))
            if args.augment:
                # Training-part harmful lines with a document noun or process question glued on,
                # in other words than the evaluation's paddings; the held-out part is untouched.
                extra = [dict(base[i], text=pad.format(base[i]["text"].rstrip(".?!"))) for i in tr
                         if base[i]["label"] in ("suspicious", "adversarial") for pad in TRAIN_PADS]
                idx = idx + list(range(len(rows), len(rows) + len(extra)))
                rows = rows + extra
            after.append(score(_Scorer(_fit(rows, idx, featurize, cue_names), featurize, cue_names), te))
        print(line(f"after +{name}" + "".join(f" +{os.path.basename(p)}" for p in args.additions), after), flush=True)
        if args.show:
            for k in ("suspicious caught", "adversarial caught", "benign1 blocked", "benign2 blocked", "benign3 blocked",
                      "harmful2 caught", "harmful3 caught"):
                gained = sorted({t for b, a in zip(before, after) for t in a[k] if t not in b[k]})
                lost = sorted({t for b, a in zip(before, after) for t in b[k] if t not in a[k]})
                for t in lost:
                    print(f"    {k}: no longer: {t}")
                for t in gained:
                    print(f"    {k}: now: {t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
