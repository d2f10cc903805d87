"""Blind judging of an intent model on documentation fragments, against its harmful-side recall.

h-intentfp6 measured refusals of documentation fragments on two sets (``scripts/intent_doc_openings.py``:
pydoc paragraph openings and docstrings of 40 stdlib modules) and then read their refusals and
wrote training lines after them, so neither set can judge a fix any more: they are the *design*
sets here. This script adds sets nobody has read, from another source:

- ``blind``: the first six words of every docstring (module, class, function, method) in the
  standard library's own source files, read with ``ast`` (nothing is imported), outside the 40
  modules of the design set (whole packages: ``email``, ``asyncio``, ``json``, ...) and outside
  tests, ``site-packages``, ``idlelib``, ``lib2to3``, ``turtledemo``, ``_pydecimal`` and
  ``pydoc_data`` (the pydoc set's source); openings of six words or
  more, deduplicated, and none equal to a design opening. A group is a top-level module or
  package; groups are split in two halves by the CRC-32 of their name:
  ``blind-val`` (may be looked at to choose between candidates) and ``blind-final`` (looked at
  once, for the decision to ship). The script prints only counts for both, never their lines.
- The harmful side, held out from training: the suspicious and adversarial lines of
  ``tests/data/intent_harmful_heldout{2..7}.jsonl`` and of the trainer's held-out split
  (``scripts/intent_fp.py`` reads the same files).

A line counts as blocked when its label is suspicious or adversarial at ``--min-confidence`` or
above, as the pipeline decides. Rates carry a 95 % Wilson interval. ``--save FLAGS.json`` writes
every line's verdict (the blind lines too: a file for ``--baseline``, not for reading); ``--baseline FLAGS.json`` compares with one saved earlier, line by line (a
saved file, not a second model, because a model of another feature version cannot be loaded by
this code): the lines only one of them blocks, and the exact two-sided McNemar p-value of that
split.

    python scripts/intent_doc_blind.py [--model PATH] [--min-confidence 0.6] [--save FLAGS.json]
        [--baseline FLAGS.json] [--sets design,blind-val,blind-final,harmful] [--show-design]
"""
from __future__ import annotations

import argparse
import ast
import functools
import json
import math
import os
import sys
import sysconfig
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = ("suspicious", "adversarial")
# Never blind: the pydoc set's source, ``decimal``'s pure-Python twin (the design set read
# ``decimal``), tests, third-party code and tooling trees; the design set's 40 modules are added by package.
_SKIP_TOP = {"test", "site-packages", "pydoc_data", "_pydecimal", "idlelib", "turtledemo", "lib2to3",
             "__pycache__", "lib-dynload"}
_SKIP_DIRS = {"test", "tests", "idle_test", "__pycache__"}


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of the proportion ``k / n``."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value of ``b`` lines blocked by one model only, ``c`` by the other only."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def _opening(text: str) -> str | None:
    words = text.split()
    return " ".join(words[:6]) if len(words) >= 6 else None


def _stdlib_files() -> list[tuple[str, str]]:
    """(group, path) of every stdlib source file that may hold blind docstrings, sorted."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from intent_doc_openings import MODULES

    skip = _SKIP_TOP | {m.split(".")[0] for m in MODULES}
    lib = sysconfig.get_paths()["stdlib"]
    out = []
    for name in sorted(os.listdir(lib)):
        top = name[:-3] if name.endswith(".py") else name
        path = os.path.join(lib, name)
        if top in skip or top.startswith("_sysconfigdata") or top.startswith("config-"):
            continue
        if os.path.isfile(path) and name.endswith(".py"):
            out.append((top, path))
        elif os.path.isdir(path):
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
                out.extend((top, os.path.join(dirpath, f)) for f in sorted(filenames) if f.endswith(".py"))
    return out


def blind_openings(half: str) -> list[str]:
    """Six-word docstring openings of the stdlib groups in ``half`` (``"val"`` or ``"final"``).

    An opening found in several files belongs to the half of the first (in sorted file order), so
    the halves share no line.
    """
    return list(_blind_halves()[half])


@functools.lru_cache(maxsize=1)
def _blind_halves() -> dict[str, tuple[str, ...]]:
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from intent_doc_openings import docstring_openings, pydoc_openings

    seen = set(pydoc_openings()) | set(docstring_openings())
    out: dict[str, list[str]] = {"val": [], "final": []}
    for group, path in _stdlib_files():
        half = out[("val", "final")[zlib.crc32(group.encode()) & 1]]
        try:
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read(), filename=path)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # a few stdlib files are templates or Python 2 (lib2to3 fixtures)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                s = _opening(doc) if doc else None
                if s is not None and s not in seen:
                    seen.add(s)
                    half.append(s)
    return {k: tuple(v) for k, v in out.items()}


def harmful_sets() -> list[tuple[str, list[str], list[bool]]]:
    """(name, texts, is_adversarial) of each held-out harmful set."""
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import intent_fp
    from qdrant_guard.intent_train import load_dataset, split_dataset

    out = []
    for n in range(2, 8):
        rows = intent_fp.load_corpus(getattr(intent_fp, f"HARMFUL{n}"))
        out.append((f"harmful set {n}", [r["text"] for r in rows], [r["label"] == "adversarial" for r in rows]))
    rows = load_dataset()
    _, test = split_dataset(rows)
    harm = [rows[i] for i in test if rows[i]["label"] in BLOCK]
    out.append(("held-out split harmful", [r["text"] for r in harm], [r["label"] == "adversarial" for r in harm]))
    return out


def _rate(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k}/{n} ({k / n:.1%}, 95% CI {lo:.1%}-{hi:.1%})" if n else "0/0"


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from intent_doc_openings import docstring_openings, pydoc_openings
    from qdrant_guard.intent_builtin import BuiltinIntentClassifier

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model JSON (default: the packaged one)")
    ap.add_argument("--min-confidence", type=float, default=0.6)
    ap.add_argument("--save", default=None, help="write every line's verdict to this JSON file")
    ap.add_argument("--baseline", default=None, help="verdicts saved earlier with --save, compared line by line")
    ap.add_argument("--sets", default="design,blind-val,blind-final,harmful")
    ap.add_argument("--show-design", action="store_true",
                    help="print the design sets' lines on which the verdict differs from --baseline (never the blind ones)")
    args = ap.parse_args(argv)
    clf = BuiltinIntentClassifier(args.model)
    sets = args.sets.split(",")
    base: dict[str, dict[str, bool]] = {}
    if args.baseline:
        with open(args.baseline, encoding="utf-8") as fh:
            base = json.load(fh)
    saved: dict[str, dict[str, bool]] = {}

    def blocked(text: str) -> bool:
        r = clf.classify(text)
        return r.label in BLOCK and r.confidence >= args.min_confidence

    def report(name: str, texts: list[str], harmful: bool, show: bool = False) -> None:
        flags = saved[name] = {t: blocked(t) for t in texts}
        word = "blocked (recall)" if harmful else "blocked (false positives)"
        print(f"{name}: {word} {_rate(sum(flags.values()), len(flags))}", end="")
        if name in base:
            old = base[name]
            if set(old) != set(flags):
                raise SystemExit(f"--baseline {args.baseline}: set {name!r} holds other lines; save it again")
            only_new = sum(flags[t] and not old[t] for t in flags)
            only_old = sum(old[t] and not flags[t] for t in flags)
            print(f"; baseline {_rate(sum(old.values()), len(old))}; blocked now only {only_new}, "
                  f"by the baseline only {only_old} (McNemar p={mcnemar_p(only_new, only_old):.3g})", end="")
            if show:
                for t in flags:
                    if flags[t] != old[t]:
                        print(f"\n    {'now' if flags[t] else 'baseline'} only: {t!r}", end="")
        print()

    if "design" in sets:
        report("design pydoc", pydoc_openings(), False, args.show_design)
        report("design docstrings", docstring_openings(), False, args.show_design)
    for half in ("val", "final"):
        if f"blind-{half}" in sets:
            report(f"blind-{half} docstrings", blind_openings(half), False)
    if "harmful" in sets:
        total: list[tuple[str, bool]] = []
        for name, texts, adv in harmful_sets():
            report(name, texts, True)
            report(f"  {name} adversarial", [t for t, a in zip(texts, adv) if a], True)
            total.extend(zip(texts, adv))
        report("all harmful", [t for t, _ in total], True)
        report("all adversarial", [t for t, a in total if a], True)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as fh:
            json.dump(saved, fh, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
