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
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_native_and_reference_agree_and_are_right(text: str, expected: list[tuple[str, str]]) -> None:
    spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
    assert [(t, text[a:b]) for a, b, t, _ in spans] == expected
    assert [(f.type, text[f.start:f.end]) for f in find_sensitive(text)] == expected
