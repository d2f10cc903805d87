"""Block rate of an intent model on the six-word openings of documentation paragraphs.

A new-user walk pasted the first words of pydoc paragraphs as queries and saw some refused. Two
benign sets, both from the standard library; since builtin-linear-v3 every opening of both is a
benign train-only line of weight 0.05 (qdrant_guard/data/intent_train_only.jsonl), so the shipped
model's figures here are training-set figures (judge a model on scripts/intent_doc_blind.py):

- ``pydoc``: the first six words of every paragraph of ``pydoc_data.topics`` (split on blank
  lines, sorted by topic; indented code blocks and paragraphs of fewer than six words left out;
  duplicates dropped);
- ``docstrings``: the first six words of the docstring of every public-or-not function and class
  of 40 common stdlib modules (those with at least six words; duplicates dropped).

A query counts as blocked when its label is suspicious or adversarial at ``--min-confidence`` or
above, as the pipeline decides (scripts/intent_fp.py). ``--unmarked`` also scores each blocked
opening with its ``*`` and ``"`` removed, to tell markup from wording.

    python scripts/intent_doc_openings.py [--model PATH] [--min-confidence 0.6] [--show] [--unmarked]
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import re
import warnings
from collections import Counter

from qdrant_guard.intent_builtin import BuiltinIntentClassifier
from qdrant_guard.intent_features import featurize

MODULES = (
    "os", "json", "re", "collections", "itertools", "functools", "pathlib", "shutil", "subprocess",
    "threading", "asyncio", "string", "textwrap", "datetime", "random", "statistics", "zipfile",
    "tarfile", "csv", "logging", "argparse", "socket", "email", "http.client", "urllib.parse",
    "inspect", "typing", "enum", "dataclasses", "heapq", "bisect", "tempfile", "glob", "hashlib",
    "base64", "pickle", "sqlite3", "decimal", "fractions", "math",
)
BLOCK = ("suspicious", "adversarial")


def _opening(text: str) -> str | None:
    words = text.split()
    return " ".join(words[:6]) if len(words) >= 6 else None


def _unique(items):
    seen: set[str] = set()
    return [s for s in items if s is not None and not (s in seen or seen.add(s))]


def pydoc_openings() -> list[str]:
    from pydoc_data import topics

    return _unique(_opening(p) for name in sorted(topics.topics)
                   for p in re.split(r"\n\s*\n", topics.topics[name]) if not p.startswith("   "))


def docstring_openings() -> list[str]:
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # typing.io / typing.re on 3.11
        for mod in MODULES:
            m = importlib.import_module(mod)
            for name in sorted(dir(m)):
                obj = getattr(m, name, None)
                if inspect.isfunction(obj) or inspect.isclass(obj):
                    doc = getattr(obj, "__doc__", None)
                    if isinstance(doc, str):
                        out.append(_opening(doc))
    return _unique(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model JSON (default: the packaged one)")
    ap.add_argument("--min-confidence", type=float, default=0.6)
    ap.add_argument("--show", action="store_true", help="print every blocked opening")
    ap.add_argument("--unmarked", action="store_true", help="rescore blocked openings without * and \"")
    args = ap.parse_args()
    clf = BuiltinIntentClassifier(args.model)

    def blocked(text: str):
        r = clf.classify(text)
        return r if r.label in BLOCK and r.confidence >= args.min_confidence else None

    for name, openings in (("pydoc", pydoc_openings()), ("docstrings", docstring_openings())):
        hits = [(s, r) for s in openings for r in [blocked(s)] if r]
        labels = Counter(r.label for _, r in hits)
        cues = Counter(k for s, _ in hits for k in featurize(s).evidence)
        print(f"{name}: {len(hits)}/{len(openings)} blocked ({dict(labels)}); "
              f"with '*': {sum('*' in s for s, _ in hits)}/{sum('*' in s for s in openings)}; "
              f"cues with evidence: {dict(cues)}")
        if args.unmarked:
            cleared = [s for s, _ in hits if not blocked(s.replace("*", "").replace('"', ""))]
            print(f"  cleared by removing * and \": {len(cleared)}")
        if args.show:
            for s, r in hits:
                print(f"  {r.label} {r.confidence:.2f} {s!r}  ({r.reasoning})")


if __name__ == "__main__":
    main()
