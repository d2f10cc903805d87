"""Mutation pass on the glued_repetition rule: exact figures where the first tests compared the
twins only, or not at all. Each run's period and match count are pinned against a naive count
(a plain loop over every period, independent of the twin's numpy), at each unit width (8, 16 and
32 bits), for every vector tail, at the lane limits of the SIMD counts, and on the generic SSE2
path (QG_SCAN_GENERIC, read once per process, so in a subprocess)."""
from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from qdrant_guard.policy import QueryRules
from tests.oracle import both

NATIVE, PYTHON = both("scan")
OFF = {"max_tokens": None, "max_repetition": None, "encoded_payloads": False}
# Alphabets per unit width; U+0100 and U+10000 narrow to 0 if put in a width too small for them,
# which makes them equal to U+0000 (a control character, not whitespace: inside a run).
WIDTHS = {
    "8-bit": "ab\u00e9\u00ff\x00",
    "16-bit": "\u6771\u4eac\u0100\uffff\x00",
    "32-bit": "\U0001F600\U0001F601\U00010000\x00a",
}


def naive(run: str) -> tuple[int, int]:
    """(period, matches) by the rule's definition, one comparison at a time: a code point equal to
    the one p before counts, unless it is ASCII other than a letter and its stretch of consecutive
    matches is shorter than 8."""
    best_p, best_m = 0, 0
    for p in range(1, min(256, len(run) // 2) + 1):
        m, k = 0, p
        while k < len(run):
            if run[k] != run[k - p]:
                k += 1
                continue
            end = k
            while end < len(run) and run[end] == run[end - p]:
                end += 1
            m += sum(1 for j in range(k, end)
                     if end - k >= 8 or ord(run[j]) >= 0x80 or run[j].isascii() and run[j].isalpha())
            k = end
        if m > best_m:
            best_p, best_m = p, m
    return best_p, best_m


def assert_run(scan, text, position: int, length: int, period: int, matches: int) -> None:
    """The one run of ``text`` is flagged at a cap just under matches/length, with exactly this
    position, period and ratio, and not at a cap just over it: matches is pinned to the unit."""
    if matches:
        cap = (matches - 0.5) / length
        found = [v for v in scan(text, max_glued_repetition=cap, **OFF).violations
                 if v.kind == "glued_repetition"]
        assert [(v.position, v.detail) for v in found] == [(position, (
            f"{length} code points without whitespace repeat at a period of {period}: ratio "
            f"{matches / length:.3f} > max_glued_repetition={cap}"))], (text, period, matches)
    over = min(1.0, (matches + 0.5) / length) if matches else 0.0
    assert not [v for v in scan(text, max_glued_repetition=over, **OFF).violations
                if v.kind == "glued_repetition"], (text, period, matches)


def crafted(alphabet: str, length: int, seed: int) -> str:
    """A run of ``length`` units: a random base of period 1..40 repeated, one unit changed."""
    rng = random.Random(seed)
    period = 1 + seed % 40
    base = "".join(rng.choice(alphabet) for _ in range(period))
    chars = list((base * (length // period + 1))[:length])
    chars[(seed * 7) % length] = rng.choice(alphabet)
    return "".join(chars)


def exact_tails(scan, width: str) -> None:
    # Every length 64..199 (len - p then leaves every tail modulo 16, 32 and 64 units).
    for length in range(64, 200):
        run = crafted(WIDTHS[width], length, length)
        period, matches = naive(run)
        assert_run(scan, run, 0, length, period, matches)
        text = "x" * 3 + "\u3000" + run
        assert_run(scan, text, 4, length, period, matches)


def lane_limits(scan, generic: bool, native: bool) -> None:
    # One unit repeated: period 1 and matches length - 1. The vector counts add up their lanes
    # every LIMIT blocks, before a lane wraps; these lengths make a chunk of exactly LIMIT blocks
    # and of LIMIT + 1 (capped) at period 1 (length - 1 compared units), first and second chunk:
    # 8-bit lanes 255 blocks of 16 units (SSE2) or 64 (AVX2, two accumulators of 32);
    # 16-bit lanes 32767 blocks of 8 (SSE2) or 32 (AVX2).
    if generic:
        cases = [("a", 255 * 16 + 1), ("a", 256 * 16 + 4), ("a", 255 * 16 + 256 * 16 + 3),
                 ("\u00e9", 256 * 16 + 1)]
        cases += [("\u6771", 32767 * 8 + 1), ("\u6771", 32768 * 8 + 6)]
    else:
        cases = [("a", 255 * 64 + 1), ("a", 256 * 64 + 10), ("a", 255 * 64 + 256 * 64 + 3)]
        if native:
            cases += [("\u6771", 32768 * 32 + 5)]
    for unit, length in cases:
        assert_run(scan, unit * length, 0, length, 1, length - 1)


@pytest.mark.parametrize("scan", [NATIVE.scan_query, PYTHON.scan_query], ids=["native", "python"])
@pytest.mark.parametrize("width", list(WIDTHS))
def test_exact_figures_at_every_tail(scan, width) -> None:
    exact_tails(scan, width)


# Not ASCII: a lone equal ASCII digit or punctuation mark does not count (tests/test_glued_structured.py).
DISTINCT = {"8-bit": 0xC0, "16-bit": 0x4E00, "32-bit": 0x1F300}


@pytest.mark.parametrize("scan", [NATIVE.scan_query, PYTHON.scan_query], ids=["native", "python"])
@pytest.mark.parametrize("width", list(DISTINCT))
def test_sparse_matches(scan, width) -> None:
    """64 distinct code points with a few made equal: single matches, ties between periods, and a
    match only at a period above half the run (not tried: the run is not flagged even at 0)."""
    def run(*pairs: tuple[int, int]) -> str:
        chars = [chr(DISTINCT[width] + k) for k in range(64)]
        for dst, src in pairs:
            chars[dst] = chars[src]
        return "".join(chars)

    assert_run(scan, run((10, 3)), 0, 64, 7, 1)
    assert_run(scan, run((10, 3), (30, 20)), 0, 64, 7, 1)          # a tie: the smaller period
    assert_run(scan, run((30, 20), (10, 3)), 0, 64, 7, 1)
    assert_run(scan, run((30, 20), (40, 30), (60, 50)), 0, 64, 10, 3)
    assert_run(scan, run((40, 0)), 0, 64, 0, 0)                    # period 40 > 64 // 2
    assert_run(scan, run((63, 31)), 0, 64, 32, 1)                  # period 32 = 64 // 2
    assert_run(scan, run((63, 0)), 0, 64, 0, 0)
    assert_run(scan, run((63, 30)), 0, 64, 0, 0)                   # period 33 = 64 // 2 + 1
    assert_run(scan, run((11, 10)), 0, 64, 1, 1)                   # period 1, the first tried


@pytest.mark.parametrize("scan", [NATIVE.scan_query, PYTHON.scan_query], ids=["native", "python"])
@pytest.mark.parametrize("top", ["\u00ff", "\u0100", "\uffff", "\U00010000"])
def test_narrowing_at_the_width_boundaries(scan, top) -> None:
    """A run whose largest unit is at a width boundary, with U+0000 in it: U+0100 (U+10000) kept in
    8 (16) bits would become 0 and the run one repeated unit (period 1, not 2)."""
    for text, length in (((top + "\x00") * 40, 80), (("\x00" + top) * 33 + "\x00", 67)):
        assert_run(scan, text, 0, length, 2, length - 2)
        assert_run(scan, "\x01\u3000" + text, 2, length, 2, length - 2)


@pytest.mark.parametrize("scan", [NATIVE.scan_query, PYTHON.scan_query], ids=["native", "python"])
def test_lane_limits_of_the_counts(scan) -> None:
    lane_limits(scan, generic=False, native=scan is NATIVE.scan_query)


def test_generic_sse2_path_exact_figures() -> None:
    code = (
        "from qdrant_guard import _scan\n"
        "from tests import test_mutation_glued as t\n"
        "for width in t.WIDTHS:\n"
        "    t.exact_tails(_scan.scan_query, width)\n"
        "t.lane_limits(_scan.scan_query, generic=True, native=True)\n"
        "print('ok')\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, QG_SCAN_GENERIC="1",
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_policy_refuses_a_negative_cap() -> None:
    # The scanner refuses a negative cap on every query; the policy must refuse it when loaded.
    with pytest.raises(ValueError, match="max_glued_repetition"):
        QueryRules(max_glued_repetition=-0.01)
    assert QueryRules(max_glued_repetition=0).max_glued_repetition == 0


@pytest.mark.parametrize("scan", [NATIVE.scan_query, PYTHON.scan_query], ids=["native", "python"])
def test_an_invalid_byte_is_not_the_code_point_of_its_value(scan) -> None:
    """In bytes input an invalid byte is the unit 0xDC00 + byte (surrogateescape), so 0x80 alone
    differs from U+0080 (C2 80): read as ASCII it would make the run one repeated unit."""
    for run in (b"\x80\xc2\x80", b"\xc2\x80\x80", b"\xff\xc3\xbf", b"\xc3\xbf\xff"):
        text = run * 33
        assert_run(scan, text, 0, 66, 2, 64)
        assert_run(scan, b"\x01 " + text, 2, 66, 2, 64)
