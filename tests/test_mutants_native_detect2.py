"""Tests written against mutants of native/detect.c that the suite let through: the second pass of
scripts/mutate_c.py (card grouping, IBAN grouping).

Each case names the mutant it kills (detect.c line and mutation at the time of the pass). Every case
runs through both twins with the oracle helper (native and reference must agree on it) and then
through the public API, qdrant_guard.detect.find_sensitive, against the expected findings. The card
numbers are Luhn-valid with a known IIN, so only the grouping decides.
"""
from __future__ import annotations

import pytest

from qdrant_guard.detect import find_sensitive
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")

# (text, [(type, secret substring), ...])
CASES = [
    # card_groups_ok (line 274): "k < ng - 1" -> "k <= ng - 1" also wanted the last group to be 4
    # digits; a last group of 1 to 3 digits after groups of 4 is a card (13, 15 digits)
    ("card 4111 7392 0184 650", [("CREDIT_CARD", "4111 7392 0184 650")]),
    ("card 4111-7392-0184-650", [("CREDIT_CARD", "4111-7392-0184-650")]),
    # card_groups_ok (line 276): "g[ng - 1] >= 1" -> "> 1" or ">= 2" refused a last group of one
    # digit (4-4-4-1, a 13-digit Visa)
    ("card 4111 7392 0184 7", [("CREDIT_CARD", "4111 7392 0184 7")]),
    # iin_known (line 256): Mastercard's 2-series 2221..2720 widened at the low end (2221 - 1 took
    # 2220) or narrowed at the high end ("<= 2720" -> "<", which lost 2720); no test card came from
    # the 2-series ends
    ("card 2220739201846576", []),
    ("card 2221739201846575", [("CREDIT_CARD", "2221739201846575")]),
    ("card 2720739201846571", [("CREDIT_CARD", "2720739201846571")]),
    ("card 2721739201846570", []),
    # iin_known (line 256): "p2 == 34" -> "p2 == 35" lost American Express's 34 prefix (every test
    # Amex number began 37)
    ("card 347392018465735", [("CREDIT_CARD", "347392018465735")]),
    # iban (line 460): "glen == 0 || glen > 4" -> "&&" let a group of 5 characters through (the
    # run is read up to 5): a valid IBAN regrouped 4-4-4-4-5-1 is no grouped IBAN
    ("iban GB82 WEST 1234 5698 76543 2", []),
    ("iban GB82 WEST 1234 5698 7654 32", [("IBAN", "GB82 WEST 1234 5698 7654 32")]),
    # iban (line 460): "count + glen > length" joined by "&&" to either neighbour took a last group
    # that runs past the country's length (22 for GB: a 24-character run, checked on its first
    # 22), and the second also a 3-character group in the middle
    ("iban GB82 WEST 1234 5698 7654 3210", []),
    ("iban GB82 WES T123 4569 8765 432", []),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_native_and_reference_agree_and_are_right(text: str, expected: list[tuple[str, str]]) -> None:
    spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
    assert [(t, text[a:b]) for a, b, t, _ in spans] == expected
    assert [(f.type, text[f.start:f.end]) for f in find_sensitive(text)] == expected
