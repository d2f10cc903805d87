"""Tests written against mutants of native/scan.c's ``classify`` that the suite let through.

Mutation pass 6 (scripts/mutate_c.py; docs/security-testing.md, "Mutation pass 6, native scanner
classify"). Each case names the mutant it kills (scan.c line and mutation at the time of the pass).
Every case runs through both twins with the oracle helper (native and reference must agree on it),
as str and as UTF-8 bytes, and then through the public API, qdrant_guard.scan.scan_query, against
the expected violations (positions are code points for str and bytes for bytes).
"""
from __future__ import annotations

import pytest

from qdrant_guard.scan import scan_query
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("scan")

GRIN = "\U0001F600"  # Extended_Pictographic
ZWJ = "\u200d"


def _tags(letters: str) -> str:
    return "".join(chr(0xE0000 + ord(c)) for c in letters) + "\U000E007F"


# (text, [(violation kind, code point index), ...])
CASES = [
    # classify (line 1277): "cp == 0xFE0F && st->chain_end == i" with && made || let any VS16 (here
    # after a letter) or any selector right after an emoji (here VS15, U+FE0E) extend the emoji
    # chain, so the ZWJ after it was taken for part of an emoji ZWJ sequence; the suite held VS16
    # only after emoji. The control is VS16 after an emoji, which does extend the chain
    ("x\ufe0f" + ZWJ + GRIN, [("invisible_char", 2)]),
    (GRIN + "\ufe0e" + ZWJ + GRIN, [("invisible_char", 2)]),
    (GRIN + "\ufe0f" + ZWJ + GRIN, []),
    # classify (line 1281): the emoji modifier range 1F3FB..1F3FF: ">= 0x1F3FB" -> ">" and
    # 0x1F3FB + 1 dropped U+1F3FB, "<= 0x1F3FF" -> "<" and 0x1F3FF - 1 dropped U+1F3FF (a ZWJ after
    # emoji + that skin tone was flagged); 0x1F3FB - 1 and 0x1F3FF + 1 took U+1F3FA (amphora) and
    # U+1F400 (rat), both Extended_Pictographic, for modifiers, which end no chain of their own, so
    # a ZWJ after them was flagged. No test held a skin tone before a ZWJ, nor either neighbour
    (GRIN + "\U0001F3FB" + ZWJ + GRIN, []),
    (GRIN + "\U0001F3FF" + ZWJ + GRIN, []),
    ("x\U0001F3FA" + ZWJ + GRIN, []),
    ("x\U0001F400" + ZWJ + GRIN, []),
    # classify (line 1289): "f < 3" -> 3 - 1 compared only the England and Scotland tags, so the
    # Wales flag (U+1F3F4 + g b w l s + CANCEL TAG), the third RGI subdivision flag, had its tags
    # flagged; the suite held only the first two
    ("x\U0001F3F4" + _tags("gbwls"), []),
    # classify (line 1288): "cp == 0x1F3F4 && st->n - (i + len) >= 24" with && made || compared
    # the 24 bytes after any Extended_Pictographic code point with the RGI flag tags, so the England
    # flag's tag sequence after a grinning face (not after U+1F3F4, the black flag) passed
    ("x" + GRIN + _tags("gbeng"), [("invisible_char", 2)]),
]


def _utf8_index(text: str, k: int) -> int:
    return len(text[:k].encode("utf-8"))


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_native_and_reference_agree_and_are_right(text: str, expected: list[tuple[str, int]]) -> None:
    data = text.encode("utf-8")
    assert_same(NATIVE.scan_query, PYTHON.scan_query, text)
    assert_same(NATIVE.scan_query, PYTHON.scan_query, data)
    assert [(v.kind, v.position) for v in scan_query(text).violations] == expected
    assert [(v.kind, v.position) for v in scan_query(data).violations] == [
        (kind, _utf8_index(text, k)) for kind, k in expected
    ]
