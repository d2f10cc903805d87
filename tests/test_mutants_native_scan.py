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
    # -- the second pass (scripts/mutate_c.py; docs/security-testing.md, "Mutation pass 2")
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
    # -- the third pass (scripts/mutate_c.py; docs/security-testing.md, "Mutation pass 4, native
    # scanner": the fourth run of the mutator, the third on scan.c)
    # classify (line 1268): the tag range E0000..E007F: ">= 0xE0000" -> ">" or 0xE0000 + 1 let
    # U+E0000 (the first tag code point, unassigned) through unflagged; 0xE0000 - 1 and
    # 0xE007F + 1 flagged its neighbours U+DFFFF and U+E0080 (no test held any of the three)
    ("x\U000e0000y", {}, [("invisible_char", 1)]),
    ("x\U000dffffy", {}, []),
    ("x\U000e0080y", {}, []),
    # decode (line 231): "b0 < 0xC2" -> 0xC2 - 1 read 0xC1 as a two-byte lead, so the overlong
    # 0xC1 0xBF decoded to U+007F (a control) instead of being invalid UTF-8 (the tests held only
    # the 0xC0 overlong)
    (b"a\xc1\xbfb", {}, [("invalid_utf8", 1)]),
    # decode (line 233): the two-byte leads end at 0xDF: "b0 < 0xE0" -> "<=" or 0xE0 + 1 read 0xE0
    # as a two-byte lead (U+0800, the first three-byte code point, became invalid), 0xE0 - 1 read
    # 0xDF as a three-byte one (U+07FF, the last two-byte code point, became invalid); no test held
    # either end
    (b"a\xe0\xa0\x80b", {}, []),
    (b"a\xdf\xbfb", {}, []),
    # decode (line 245): "left < 3 || s[i + 1] < lo" with || made && checked the lower bound of
    # the second byte only for a sequence cut by the end of the text, so the overlong 0xE0 0x9F
    # 0xBF (U+07FF in three bytes) was read as a character; the tests held no three-byte overlong
    (b"a\xe0\x9f\xbfb", {}, [("invalid_utf8", 1)]),
    # decode (line 250): "b0 < 0xF5" -> "<=" or 0xF5 + 1 read 0xF5 as a four-byte lead, decoding
    # 0xF5 0x80 0x80 0x80 to U+140000, past U+10FFFF (no test held an 0xF5 byte)
    (b"a\xf5\x80\x80\x80b", {}, [("invalid_utf8", 1)]),
    # decode (line 256): the same || -> && in the four-byte test took the overlong 0xF0 0x8F 0xBF
    # 0xBF (U+FFFF in four bytes); "s[i + 1] < lo" -> "<=" refused U+10000 (0xF0 0x90 0x80 0x80),
    # the first four-byte code point: every four-byte test character was an emoji, 0xF0 0x9F ...
    (b"a\xf0\x8f\xbf\xbfb", {}, [("invalid_utf8", 1)]),
    (b"a\xf0\x90\x80\x80b", {}, []),
]


@pytest.mark.parametrize(("text", "rules", "expected"), CASES)
def test_native_and_reference_agree_and_are_right(text: str, rules: dict, expected: list[tuple[str, int]]) -> None:
    assert_same(NATIVE.scan_query, PYTHON.scan_query, text, **rules)
    assert [(v.kind, v.position) for v in scan_query(text, **rules).violations] == expected
