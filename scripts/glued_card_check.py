"""Random glued-number runs: native vs twin, and no card digit in the clear (tests/test_glued_card.py).

Runs N seeded texts from the test's generator (half built of cards, phone numbers, SSNs and glue;
half random digits, spaces, dashes and dots) through both detector twins, compares their findings,
and checks every card the brute-force enumeration of the test finds for a digit no finding covers.
Run from the repository root: ``PYTHONPATH=$PWD python scripts/glued_card_check.py [N] [SEED]``.
"""
from __future__ import annotations

import random
import sys

from qdrant_guard import _detect, _detect_py
from tests.test_glued_card import _random_text, cards, clear


def main(n: int = 20000, seed: int = 20261206) -> int:
    rng = random.Random(seed)
    differ = leaks = seen = 0
    for t in range(n):
        text = _random_text(rng) if t % 2 else "".join(
            rng.choice("0123456789      ----..+x") for _ in range(rng.randint(1, 60)))
        native = _detect.find_spans(text)
        if native != _detect_py.find_spans(text):
            differ += 1
            print("differ:", repr(text))
        seen += len(cards(text))
        if clear(text, native):
            leaks += 1
            print("clear:", repr(text), clear(text, native))
    print(f"texts {n}, cards {seen}, native != twin {differ}, texts with a card digit in the clear {leaks}")
    return 1 if differ or leaks else 0


if __name__ == "__main__":
    sys.exit(main(*(int(a) for a in sys.argv[1:3])))
