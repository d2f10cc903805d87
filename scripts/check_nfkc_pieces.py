"""Check, over all of Unicode as this Python's unicodedata has it, the rule by which
qdrant_guard.intent_features._nfkc_prefix splits text: NFKC(a + x) == NFKC(a) + NFKC(x) for every
character x with _starts_nfkc_piece(x), after every character a that can compose with a following
one (first halves of canonical compositions, Hangul L jamo and LV syllables), alone and followed
by non-starters. Also checks that case folding maps each character on its own and the expansion
bounds the docstrings state. Takes about 5 minutes; exits nonzero on any counterexample.

    PYTHONPATH=. python scripts/check_nfkc_pieces.py
"""
from __future__ import annotations

import random
import sys
import unicodedata as ud

from qdrant_guard.intent_features import _starts_nfkc_piece


def main() -> int:
    firsts = {chr(0x1100 + i) for i in range(19)} | {chr(0xAC00 + 28 * i) for i in range(19 * 21)}
    for cp in range(0x110000):
        d = ud.decomposition(chr(cp))
        if d and not d.startswith("<") and len(d.split()) == 2:
            firsts.add(chr(int(d.split()[0], 16)))
    codepoints = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    # Unassigned and private-use characters neither decompose nor compose: a sample of them.
    starts = [x for i, x in enumerate(codepoints)
              if (ud.category(x) not in ("Cn", "Co") or i % 4096 == 0) and _starts_nfkc_piece(x)]
    want = [ud.normalize("NFKC", x) for x in starts]
    bad = 0
    contexts = [f + tail for f in sorted(firsts) for tail in ("", "\u0301", "\u0334", "\u0323\u0301")]
    for a in contexts:
        head = ud.normalize("NFKC", a)
        got = ud.normalize("NFKC", "\n".join(a + x for x in starts))
        if got != "\n".join(head + w for w in want):
            for x, w in zip(starts, want):
                if ud.normalize("NFKC", a + x) != head + w:
                    print(f"counterexample: {a!r} + {x!r}")
                    bad += 1
    print(f"{len(contexts)} contexts x {len(starts)} piece starts (Unicode {ud.unidata_version}): "
          f"{bad} counterexamples")
    others = [x for x in codepoints if not _starts_nfkc_piece(x)]
    grow = max(len(ud.normalize("NFKC", x)) for x in others)
    print(f"{len(others)} characters may not start a piece; NFKC makes them at most {grow} characters")
    bad += grow > 2
    shuffled = codepoints[:]
    random.Random(1).shuffle(shuffled)
    for order in (codepoints, shuffled):
        text = "".join(order)
        if text.casefold() != "".join(x.casefold() for x in order):
            print("casefold depends on context")
            bad += 1
    print("casefold expands at most", max(len(x.casefold()) for x in codepoints), "fold")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
