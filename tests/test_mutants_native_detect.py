"""Tests written against mutants of native/detect.c that the suite let through (scripts/mutate_c.py).

Each case names the mutant it kills (detect.c line and mutation at the time of the pass). Every case
runs through both twins with the oracle helper (native and reference must agree on it) and then
through the public API, qdrant_guard.detect.find_sensitive, against the expected findings.
"""
from __future__ import annotations

import pytest

from qdrant_guard.detect import find_sensitive
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")

# (text, [(type, secret substring), ...])
CASES = [
    # ssa_valid: area >= 900 -> area >= 899 (899 is the highest area the SSA assigns)
    ("SSN 899-12-3456", [("SSN", "899-12-3456")]),
    # ssa_valid: the serial rule "d[5..8] all '0'" with its second && made || rejected any serial
    # that begins or ends with "00"; only 0000 is void
    ("SSN 123-45-6700", [("SSN", "123-45-6700")]),
    ("SSN 123-45-0067", [("SSN", "123-45-0067")]),
    ("SSN 123-45-0670", [("SSN", "123-45-0670")]),
    ("SSN 001-01-0001", [("SSN", "001-01-0001")]),  # the lowest valid area, group and serial
    # chain_match: a bare 9-digit number after an SSN keyword that breaks the SSA rules; with
    # "return 0" -> "return 1" the chain reported a finding it never filled in
    ("ssn 900123456", []),
    ("SSN: 123006789", []),
    ("social security 666123456", []),
    ("ssn 123450000", []),
    ("ssn 078051120", []),  # the advertising number
    # mod97: "v >= 10" -> "v > 10" (or >= 11) took the letter A (value 10) for a digit; no other
    # test IBAN had an A in it
    ("IBAN AT61 1904 3002 3457 3201", [("IBAN", "AT61 1904 3002 3457 3201")]),
    ("iban AT611904300234573201", [("IBAN", "AT611904300234573201")]),
    # aws_secret: "!(lo && up && dg)" with either && made || took 40-character values that lack
    # lower case, upper case or digits (the rule wants all three); the control first
    ("aws secret Kq2mZ8vT4xR/nW1pL6yB3cH9dF0gJ5sA2eU8iO+t", [("AWS_SECRET_KEY", "Kq2mZ8vT4xR/nW1pL6yB3cH9dF0gJ5sA2eU8iO+t")]),
    ("aws secret k9/2mz8vt4xr/nw1pl6yb3ch9df0gj5sa2eu8io+", []),
    ("aws secret Kq/mZvTxR/nWpLyBcHdFgJsAeUiO+tKqWmZvTxRn", []),
    ("aws secret KQ2MZ8VT4XR/NW1PL6YB3CH9DF0GJ5SA2EU8IO+T", []),
    # is_uuid: "n != 36" -> "n == 36" dropped the UUID filter, and no test noticed: the one UUID
    # among the negatives has too little entropy to be a secret with or without it. This one is
    # a GENERIC_SECRET without the filter (checked on the reference with _is_uuid stubbed out).
    # The same filter's shape rules (one mutant each): every group checked, so a non-hex last group
    # ("g < 5" -> "g < 4"), a 37th character, and a separator other than '-' are no UUID.
    ('api_key = "9b2f4e1a-7c3d-4a5b-8e6f-0d1c2b3a4f5e"', []),
    ('api_key = "9b2f4e1a-7c3d-4a5b-8e6f-0d1c2b3a4fzq"', [("GENERIC_SECRET", "9b2f4e1a-7c3d-4a5b-8e6f-0d1c2b3a4fzq")]),
    ('api_key = "9b2f4e1a-7c3d-4a5b-8e6f-0d1c2b3a4f5e0"', [("GENERIC_SECRET", "9b2f4e1a-7c3d-4a5b-8e6f-0d1c2b3a4f5e0")]),
    ('api_key = "9b2f4e1a-7c3d-4a5b-8e6f_0d1c2b3a4f5e"', [("GENERIC_SECRET", "9b2f4e1a-7c3d-4a5b-8e6f_0d1c2b3a4f5e")]),
    # is_placeholder: contains "xxxx" || contains "****" -> &&: each alone marks a placeholder
    ("db_password: Hq8#kLm2$pQr9vXz", [("GENERIC_SECRET", "Hq8#kLm2$pQr9vXz")]),  # the control
    ("db_password: Hq8#****$pQr9vXz", []),
    ("db_password: Hq8#xxxx$pQr9vXz", []),
    # -- the second pass (scripts/mutate_c.py; docs/security-testing.md, "Mutation pass 2")
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
