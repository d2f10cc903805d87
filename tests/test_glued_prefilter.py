"""The native glued pass skips decoding text with no 64 bytes in a row free of ASCII whitespace
(``has_stretch`` in native/scan.c); the twin has no such shortcut, so the two must still agree
wherever a run of 64 units begins or ends, and a run of exactly 64 units must still be judged."""
from __future__ import annotations

import pytest

from tests.oracle import both

NATIVE, PYTHON = both("scan")
OFF = {"max_tokens": None, "max_repetition": None, "encoded_payloads": False}


def glued(scan, text):
    return [(v.position, v.detail) for v in scan(text, max_glued_repetition=0.5, **OFF).violations
            if v.kind == "glued_repetition"]


def same(text) -> list:
    got = glued(NATIVE.scan_query, text)
    assert got == glued(PYTHON.scan_query, text), text
    return got


@pytest.mark.parametrize("unit", ["ab", "\u6771\u4eac", "\U0001F600x"])
@pytest.mark.parametrize("pad", ["", " ", "word ", "w" * 63 + " ", " " + "v" * 70 + " "])
def test_a_run_of_exactly_64_units_is_judged_and_63_is_not(unit, pad):
    run64 = (unit * 32)[:64]
    at = len(pad)  # a code-point position: the run starts right after the pad
    assert at in [pos for pos, _ in same(pad + run64 + " " + pad)]
    assert at not in [pos for pos, _ in same(pad + run64[:63] + " " + pad)]


def test_every_whitespace_position_around_the_window_agrees():
    base = "ab" * 80  # 160 units, one run: flagged
    assert same(base) != []
    for ws in (" ", "\t", "\n", "\u3000", "\u00a0"):
        for i in range(len(base) + 1):
            same(base[:i] + ws + base[i:])
    # two whitespace bytes cutting the run into pieces of every length around 64
    for i in range(0, 160, 3):
        for j in range(i + 1, 161, 7):
            same(base[:i] + " " + base[i:j] + " " + base[j:])


def test_multibyte_units_short_of_64_make_no_run():
    # 22 CJK characters are 66 bytes without ASCII whitespace but only 22 units
    assert same("\u6771\u4eac" * 11) == []
    assert same(("\u6771\u4eac" * 11 + " ") * 5) == []


def test_unicode_spaces_cut_runs_after_the_byte_prefilter_lets_them_through():
    # no ASCII whitespace at all: the prefilter passes, the decoder splits at U+3000
    text = "\u3000".join(["ab" * 31] * 4)  # four runs of 62 units
    assert same(text) == []
    assert same("\u3000".join(["ab" * 32] * 2)) != []


def test_bytes_and_invalid_bytes_agree_at_the_boundary():
    for n in (62, 63, 64, 65):
        for prefix in (b"", b" ", b"x" * 63 + b" "):
            same(prefix + b"\xff" * n)
            same(prefix + b"\xc3\xa9" * n)
