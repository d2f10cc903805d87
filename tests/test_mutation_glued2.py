"""Mutation pass on the glued_repetition stretch rule (81784fa): which code points are "strong"
(count wherever they match) and which set a run's weak flag, at the edges of the ASCII letter
test ``(c | 0x20) - 'a' < 26`` and of ``c >= 0x80``. The runs are built so that only one code
point ever matches: a sparse match of it counts exactly when it is strong."""
from __future__ import annotations

import pytest

from tests.oracle import both
from tests.test_mutation_glued import assert_run, naive

NATIVE, PYTHON = both("scan")
# 63 distinct filler code points per width, none ASCII (so none weak) and none whitespace.
FILLER = {"8-bit": 0xC0, "16-bit": 0x4E00, "32-bit": 0x1F300}


def sparse(ch: str, width: str, lead: str = "") -> str:
    """``lead``, then 9 groups of 7 distinct fillers and ``ch``: ``ch`` matches itself at period
    8 (and 16, 24, ...) in stretches of one, nothing else matches anywhere."""
    base = FILLER[width]
    return lead + "".join(
        "".join(chr(base + 7 * g + j) for j in range(7)) + ch for g in range(9))


@pytest.mark.parametrize("scan", [NATIVE.scan_query, PYTHON.scan_query], ids=["native", "python"])
@pytest.mark.parametrize("width", list(FILLER))
# '[' and '{' sit at (c | 0x20) - 'a' == 26, '@' and '`' wrap below 'a'; none is a letter.
@pytest.mark.parametrize("ch", ["[", "{", "@", "`", "\x7f", "0", ":"])
def test_ascii_non_letter_at_the_letter_edges_counts_only_in_a_stretch(scan, width, ch) -> None:
    run = sparse(ch, width)
    assert naive(run) == (0, 0)
    assert_run(scan, run, 0, len(run), 0, 0)
    # Control: a letter in the same place is strong, 8 matches at period 8 (the edge letters).
    for letter in ("a", "z", "A", "Z"):
        run = sparse(letter, width)
        assert naive(run) == (8, 8)
        assert_run(scan, run, 0, len(run), 8, 8)


@pytest.mark.parametrize("scan", [NATIVE.scan_query, PYTHON.scan_query], ids=["native", "python"])
@pytest.mark.parametrize("width", list(FILLER))
def test_u0080_is_strong_in_a_run_with_weak_units(scan, width) -> None:
    # The lead '!' makes the run weak (the exact count runs); U+0080, the first code point past
    # ASCII, still counts at every match, like any non-ASCII one.
    run = sparse("\x80", width, lead="!")
    assert naive(run) == (8, 8)
    assert_run(scan, run, 0, len(run), 8, 8)
