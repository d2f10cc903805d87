"""Tests written against mutants of native/scan.c that the suite let through (scripts/mutate_c.py).

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
    # base64_text: "len % 4 == 1 || word_shaped(r, len)" -> "&&" decoded runs shaped like a word
    # (a few English words decode to printable bytes: "enchantments" -> b"zw!j{fz{l") and runs of
    # 1 mod 4 characters, which decode to nothing whole ("SGVsbG8gV29y" is "Hello Wor", and a 13th
    # character adds 6 bits that make no byte)
    ("a enchantments b", {}, []),
    ("x SGVsbG8gV29yb y", {}, []),
    # classify: the surrogate range D800..DFFF widened by one at either end (0xD800 - 1, 0xDFFF + 1)
    # flagged U+D7FF (the last Hangul Jamo code point) or U+E000 (private use) as lone surrogates
    ("x\ud7ffy", {}, []),
    ("x\ue000y", {}, []),
]


@pytest.mark.parametrize(("text", "rules", "expected"), CASES)
def test_native_and_reference_agree_and_are_right(text: str, rules: dict, expected: list[tuple[str, int]]) -> None:
    assert_same(NATIVE.scan_query, PYTHON.scan_query, text, **rules)
    assert [(v.kind, v.position) for v in scan_query(text, **rules).violations] == expected
