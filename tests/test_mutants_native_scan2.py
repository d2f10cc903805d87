"""Tests written against mutants of native/scan.c that the suite let through: the second pass of
scripts/mutate_c.py (selectors, numeric entities, escape runs, the printf exemption's neighbours).

Each case names the mutant it kills (scan.c line and mutation at the time of the pass). Every case
runs through both twins with the oracle helper (native and reference must agree on it) and then
through the public API, qdrant_guard.scan.scan_query, against the expected violations.
"""
from __future__ import annotations

import pytest

from qdrant_guard.scan import scan_query
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("scan")

# (text, rule arguments, [(violation kind, position), ...])
CASES = [
    # is_selector (line 218): the range FE00..FE0F widened by one at either end (0xFE00 - 1,
    # 0xFE0F + 1) took U+FDFF or U+FE10 (a vertical comma) for a variation selector, so one after a
    # selector was flagged as a second selector in a row; the control is two real selectors
    ("a\ufe00\ufdffb", {}, []),
    ("a\ufe0f\ufe10b", {}, []),
    ("a\ufe00\ufe0fb", {}, [("invisible_char", 2)]),
    # is_selector (line 218): 0xE0100 - 1 took U+E00FF (unassigned, past the tag characters) for a
    # variation selector supplement
    ("a\U000e0100\U000e00ffb", {}, []),
    ("a\U000e0100\U000e0101b", {}, [("invisible_char", 2)]),
    # is_selector (line 218): the supplement's upper end, "cp <= 0xE01EF" -> "<" (U+E01EF itself
    # no longer a selector) and 0xE01EF + 1 (U+E01F0, unassigned, taken for one)
    ("a\U000e0100\U000e01efb", {}, [("invisible_char", 2)]),
    ("a\U000e0100\U000e01f0b", {}, []),
    # entity_len (line 401): "j < n && (s[j] == 'x' || s[j] == 'X')" with && made || skipped the
    # first character after "&#" whatever it was and read hex from there: a one-digit decimal
    # reference lost its only digit, and a letter there began a "hex" reference
    ("a &#9; b", {}, [("html_entity", 2)]),
    ("a &#A1; b", {}, []),
    # entity_len (line 401): "s[j] == 'X'" -> "!=" or 'X' + 1: no test had an upper-case "&#X"
    # hexadecimal reference (the first of these also loses "&#9;" above)
    ("a &#X41; b", {}, [("html_entity", 2)]),
]


@pytest.mark.parametrize(("text", "rules", "expected"), CASES)
def test_native_and_reference_agree_and_are_right(text: str, rules: dict, expected: list[tuple[str, int]]) -> None:
    assert_same(NATIVE.scan_query, PYTHON.scan_query, text, **rules)
    assert [(v.kind, v.position) for v in scan_query(text, **rules).violations] == expected
