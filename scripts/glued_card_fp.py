"""False positives of the one-group card rule at a ':' or '/' (h-card8) on real text.

Every run of 13-19 digits with no letter or digit on either side that is glued to a ':' or '/'
with a digit beyond it (the cards the rule read nowhere before h-card8): how many there are per
corpus, how many have a card's IIN and pass Luhn (tests/detect_cases.py's brute-force checks,
written apart from the kernels), and how many of those the detector now finds as CREDIT_CARD,
with examples. Run from the repository root, with the native extension built:

    python scripts/glued_card_fp.py                         # the default corpora below
    python scripts/glued_card_fp.py 'docs/*.md' '/usr/share/doc/**/*.md'
"""
from __future__ import annotations

import glob
import json
import re
import subprocess
import sys
from pathlib import Path

from qdrant_guard import _detect
from tests.detect_cases import iin, luhn

RUN = re.compile(r"(?<![0-9A-Za-z])[0-9]{13,19}(?![0-9A-Za-z])")


def corpora(patterns: list[str]) -> dict[str, list[str]]:
    if patterns:
        return {"files": [p for pat in patterns for p in glob.glob(pat, recursive=True)]}
    from pydoc_data import topics

    repo = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    return {
        "pydoc_data.topics": [topics.__file__],
        "planted negatives": ["tests/data/planted_secrets.jsonl"],
        "repo (git ls-files)": repo,
        "stdlib": [p for p in glob.glob(f"{Path(json.__file__).parent.parent}/**/*.py", recursive=True)
                   if "site-packages" not in p],
        "site-packages": [p for d in sys.path if d.endswith("site-packages")
                          for p in glob.glob(f"{d}/**/*.py", recursive=True)],
    }


def texts(name: str, path: str) -> list[str]:
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    if name == "pydoc_data.topics":
        from pydoc_data.topics import topics
        return list(topics.values())
    if name == "planted negatives":
        return [r["text"] for r in map(json.loads, raw.splitlines()) if r["kind"] == "negative"]
    return [raw]


def main() -> None:
    for name, paths in corpora(sys.argv[1:]).items():
        chars = runs = valid = found = 0
        examples = []
        for path in paths:
            for text in texts(name, path):
                chars += len(text)
                spans = None
                for m in RUN.finditer(text):
                    s, e = m.span()
                    if not ((text[s - 1:s] in (":", "/") and text[s - 2:s - 1].isdigit())
                            or (text[e:e + 1] in (":", "/") and text[e + 1:e + 2].isdigit())):
                        continue
                    runs += 1
                    if not (luhn(m.group()) and iin(m.group())):
                        continue
                    valid += 1
                    spans = spans if spans is not None else _detect.find_spans(text)
                    if any(a <= s and e <= b and t == "CREDIT_CARD" for a, b, t, _ in spans):
                        found += 1
                        examples.append(f"{path}: {text[max(0, s - 20):e + 20]!r}")
        print(f"{name}: {len(paths)} files, {chars:,} chars; {runs} runs glued to ':'/'/' and a digit, "
              f"{valid} with an IIN and Luhn, {found} found as CREDIT_CARD")
        for x in examples[:8]:
            print("    " + x)


if __name__ == "__main__":
    main()
