"""Random glued-number runs: native vs twin, and no card digit in the clear (tests/test_glued_card.py).

Runs N seeded texts from the test's generator (half built of cards, phone numbers, SSNs and glue;
half random digits, spaces, dashes and dots) through both detector twins, compares their findings,
and checks every card the brute-force enumeration of the test finds for a digit no finding covers,
every valid SSN or phone prefix glued before such a card by a dash (tests/test_glued_card2.py), and
every phone prefix with a parenthesised area code or joined by dots glued before one by a dash or a
dot (tests/test_glued_card3.py), and every dash-joined number after a card and a single space or
one-group card between dot-joined groups (tests/test_glued_card5.py), and every dotted 3-4 group after
a card and a space, phone number's 3-3 groups glued to a one-group card by a dot, card after a
country code (all digits in a CREDIT_CARD finding) and IPv4 address before a one-group card (left
out of it) (tests/test_glued_card6.py).
Run from the repository root: ``PYTHONPATH=$PWD python scripts/glued_card_check.py [N] [SEED]``.
"""
from __future__ import annotations

import random
import sys

from qdrant_guard import _detect, _detect_py
from tests.detect_cases import cards, clear, random_text
from tests.test_glued_card2 import glued, glued_clear, glued_text
from tests.test_glued_card3 import glued3, glued3_clear, glued3_text
from tests.test_glued_card5 import one_group, tail_text, tails, tails_clear
from tests.test_glued_card6 import card6_clear, card6_text, code_cards, dot_tails, ip_heads, phone_heads


def main(n: int = 20000, seed: int = 20261206) -> int:
    rng = random.Random(seed)
    differ = leaks = seen = near = near3 = near5 = near6 = 0
    shapes = (random_text, glued_text, random_text, glued3_text, tail_text, card6_text)
    for t in range(n):
        text = shapes[(t // 2) % 6](rng) if t % 2 else "".join(
            rng.choice("0123456789      ----..()+x") for _ in range(rng.randint(1, 60)))
        native = _detect.find_spans(text)
        if native != _detect_py.find_spans(text):
            differ += 1
            print("differ:", repr(text))
        seen += len(cards(text))
        near += len(glued(text))
        near3 += len(glued3(text))
        near5 += len(tails(text)) + len(one_group(text))
        near6 += len(dot_tails(text)) + len(phone_heads(text)) + len(code_cards(text)) + len(ip_heads(text))
        lost = clear(text, native) + glued_clear(text, native) + glued3_clear(text, native) + tails_clear(text, native)
        lost += card6_clear(text, native)
        if lost:
            leaks += 1
            print("clear:", repr(text), lost)
    print(f"texts {n}, cards {seen}, glued SSNs/phone prefixes {near}, glued area-coded/dotted phone prefixes "
          f"{near3}, dash-joined numbers after a space or dotted one-group cards {near5}, dotted 3-4 tails, 3-3 phone "
          f"heads, cards after a country code and IPv4 heads {near6}, native != twin {differ}, "
          f"texts with a digit of a card or of a glued number in the clear {leaks}")
    return 1 if differ or leaks else 0


if __name__ == "__main__":
    sys.exit(main(*(int(a) for a in sys.argv[1:3])))
