"""glued_repetition before and after the stretch rule (h-glued3), on every distinct whitespace-free
run of 64+ code points in a corpus of files: how many the old measure (every code point equal to
the one a period before counts) and the current scanner refuse at a cap, with examples.

Run from the repository root, with the native extension built:

    python scripts/glued_fp.py                      # the default corpora below
    python scripts/glued_fp.py --cap 0.5 'docs/*.md' '/usr/share/i18n/locales/*'

The current count is never above the old one (it counts a subset of the same matches at the same
periods), so a run the old measure passed cannot be refused now; the script checks that too.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import os
import re

import numpy as np

from qdrant_guard import _scan

CORPORA = {
    "docs": ["/usr/share/doc/**/README*", "/usr/share/doc/**/*.md", "docs/*.md"],
    "stdlib": ["/usr/lib/python3.11/**/*.py"],
    "locales": ["/usr/share/i18n/locales/*"],
}
OFF = dict(max_tokens=None, max_model_tokens=None, max_repetition=None, encoded_payloads=False)


def old_ratio(run: str) -> float:
    u = np.frombuffer(run.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    return max(int((u[p:] == u[:-p]).sum()) for p in range(1, min(256, len(u) // 2) + 1)) / len(u)


def read(path: str) -> str | None:
    try:
        data = open(path, "rb").read()
        return (gzip.decompress(data) if path.endswith(".gz") else data).decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None


def measure(name: str, patterns: list[str], cap: float) -> None:
    seen: set[str] = set()
    old = new = 0
    freed: list[str] = []
    kept: list[str] = []
    for pattern in patterns:
        for path in glob.glob(pattern, recursive=True):
            text = read(path) if os.path.isfile(path) else None
            for m in re.finditer(r"\S+", text or ""):
                run = m.group()
                if len(run) < 64 or run in seen:
                    continue
                seen.add(run)
                was = old_ratio(run) > cap
                now = not _scan.scan_query(run, max_glued_repetition=cap, **OFF).ok
                assert was or not now, run
                old += was
                new += now
                if was and not now and len(freed) < 5:
                    freed.append(run[:60])
                if now and len(kept) < 5:
                    kept.append(run[:60])
    print(f"{name}: {len(seen)} distinct runs of 64+; refused at {cap}: old {old}, now {new}")
    print(f"  no longer refused, e.g. {freed}")
    print(f"  still refused, e.g. {kept}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("globs", nargs="*", help="file globs (default: the corpora named in the script)")
    ap.add_argument("--cap", type=float, default=0.5)
    args = ap.parse_args()
    for name, patterns in ({"given": args.globs} if args.globs else CORPORA).items():
        measure(name, patterns, args.cap)


if __name__ == "__main__":
    main()
