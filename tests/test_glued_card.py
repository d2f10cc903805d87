"""A Luhn-valid card glued to another number keeps none of its digits in the clear.

No number is read after a dash and a digit (which keeps ``12--123--45--6789`` unread), and none
ends before one, so ``555 123-4111 1111 1111 1111`` was ``[PHONE] 1111 1111 1111``: the NANP
reading took the card's first group and the card was never read. The kernels now also read, from
every digit group, the longest card whatever is glued to it (``_card_floor``) and add a
CREDIT_CARD finding over each stretch of it the findings leave uncovered (``_cover_cards``).

The property checked here, with a brute-force enumeration written apart from the kernels: every
card made of whole digit groups (13-19 digits; a card's grouping; joined by single spaces and
dashes ``-``, ``--``, `` - ``, `` -- `` in any mix, or by dots alone; a known IIN; Luhn), with no
letter glued to it and, in one group, no ``.``, ``:`` or ``/`` glued to it that a digit is on the
other side of, has every digit inside a finding.
"""
from __future__ import annotations

import random

import pytest

from qdrant_guard.detect import redact
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")
SEPS = (" ", "-", "--", " - ", " -- ")


def _spans(text: str) -> list[tuple[int, int, str, str]]:
    return assert_same(NATIVE.find_spans, PYTHON.find_spans, text)


def _luhn(d: str) -> bool:
    total = 0
    for k, ch in enumerate(reversed(d)):
        v = int(ch) * (2 if k % 2 else 1)
        total += v - 9 if v > 9 else v
    return total % 10 == 0


def _iin(d: str) -> bool:
    p2, p3, p4 = int(d[:2]), int(d[:3]), int(d[:4])
    return (d[0] == "4" or 51 <= p2 <= 55 or 2221 <= p4 <= 2720 or p2 in (34, 37, 65, 36, 38, 62, 50, 56, 57, 58, 67)
            or p4 == 6011 or 644 <= p3 <= 649 or 300 <= p3 <= 305 or 3528 <= p4 <= 3589)


def _grouping(g: list[int]) -> bool:
    return len(g) == 1 or g in ([4, 6, 5], [4, 6, 4]) or (all(x == 4 for x in g[:-1]) and 1 <= g[-1] <= 4)


def cards(text: str) -> list[tuple[int, int]]:
    """Every card of the property, by brute force over runs of whole digit groups."""
    n = len(text)

    def digit(k: int) -> bool:
        return 0 <= k < n and "0" <= text[k] <= "9"

    def letter(k: int) -> bool:
        return 0 <= k < n and text[k].isascii() and text[k].isalpha()

    groups = []
    i = 0
    while i < n:
        j = i
        while digit(j):
            j += 1
        if j > i:
            groups.append((i, j))
        i = j + 1
    out = []
    for a in range(len(groups)):
        for b in range(a, min(a + 5, len(groups))):
            seps = [text[groups[q][1]:groups[q + 1][0]] for q in range(a, b)]
            if seps and not (all(x in SEPS for x in seps) or all(x == "." for x in seps)):
                break
            s, e = groups[a][0], groups[b][1]
            g = [y - x for x, y in groups[a:b + 1]]
            d = "".join(text[x:y] for x, y in groups[a:b + 1])
            if not (13 <= len(d) <= 19 and _grouping(g) and _iin(d) and _luhn(d)) or letter(s - 1) or letter(e):
                continue
            if len(g) == 1 and ((text[s - 1:s] in (".", ":", "/") and digit(s - 2))
                                or (text[e:e + 1] in (".", ":", "/") and digit(e + 1))):
                continue
            out.append((s, e))
    return out


def clear(text: str, spans: list[tuple[int, int, str, str]]) -> list[str]:
    """The cards of ``text`` with a digit no finding covers."""
    covered = {k for s, e, _, _ in spans for k in range(s, e)}
    return [text[s:e] for s, e in cards(text) if any("0" <= text[k] <= "9" and k not in covered for k in range(s, e))]


def card(length: int, lead: str = "4") -> str:
    body = lead + "1" * (length - len(lead) - 1)
    return next(body + c for c in "0123456789" if _luhn(body + c))


def grouped(d: str, sep: str) -> str:
    if len(d) == 15 and sep == " ":  # American Express: 4-6-5
        return " ".join((d[:4], d[4:10], d[10:]))
    return sep.join(d[k:k + 4] for k in range(0, len(d), 4))


def test_the_known_leak_is_closed():
    # The phone number read across the card's first group stays; the card's rest is a card.
    assert redact("555 123-4111 1111 1111 1111") == "[PHONE] [CREDIT_CARD]"
    assert redact("555 123-4111--1111--1111--1111") == "[PHONE]--[CREDIT_CARD]"
    text = "555 123-4111 1111 1111 1111"
    assert _spans(text) == [(0, 12, "PHONE", "nanp"), (13, 27, "CREDIT_CARD", "luhn")]


PREFIXES = [
    "555 123-", "555-123-", "555.123.", "555 123 ", "(555) 123-", "1-555-123-", "+1 555 123-", "+1 555.123.",
    "+44 20 7946 ", "123-45-6789 ", "123-45-6789-", "123--45--", "12--", "12-", "5 - ", "2023-10-15-",
    "tel 555 123-", "é 555 123-",
]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("sep", [*SEPS, "."])
@pytest.mark.parametrize("length", range(13, 20))
def test_a_card_glued_after_a_number_keeps_no_digit_in_the_clear(prefix, sep, length):
    text = prefix + grouped(card(length), sep) + " exp"
    spans = _spans(text)
    assert cards(text), text  # the case holds a card of the property
    assert clear(text, spans) == [], (text, spans)


@pytest.mark.parametrize("suffix", ["-2", "--12", " - 555", "-555 123-4567", " 123-45-6789", "-123-45-6789", ".5"])
@pytest.mark.parametrize("sep", [" ", "-", "--", "."])
def test_a_card_glued_before_a_number_keeps_no_digit_in_the_clear(suffix, sep):
    text = "pay " + grouped(card(16), sep) + suffix
    spans = _spans(text)
    assert clear(text, spans) == [], (text, spans)


@pytest.mark.parametrize(("text", "redacted"), [
    ("555 123-4111-1111-1111-1111", "[CREDIT_CARD]"),  # the glued groups join the stretch (test_glued_card2)
    ("+1 555 123-4111 1111 1111 1111", "[PHONE] [CREDIT_CARD]"),
    ("555.123.4111 1111 1111 1111", "[PHONE] [CREDIT_CARD]"),
    ("555.123.4111.1111.1111.1111", "[CREDIT_CARD]"),  # a dot glues too (test_glued_card3)
    ("12--4111--1111--1111--1111", "[CREDIT_CARD]"),
    ("4111-1111-1111-1111-2", "[CREDIT_CARD]"),  # was [CREDIT_CARD]-2 (glued after: h-card4)
    ("4111 1111 1111 1111-555", "[CREDIT_CARD]"),  # was [CREDIT_CARD]-555 (h-card4)
    ("é 555 123-4111 1111 1111 1111 é", "é [PHONE] [CREDIT_CARD] é"),  # code-point offsets in C
])
def test_glued_cards_redact_as_documented(text, redacted):
    _spans(text)
    assert redact(text) == redacted


@pytest.mark.parametrize("text", [
    "12--123--45--6789",  # the rule the leak came from still holds for SSNs
    "1234-5678-9012-3456-7890",  # a dashed run with no card in it
    "pi 0.4111111111111111",  # a decimal's fraction is no card
    "t 12:4111111111111111", "4111111111111111.5 m", "v 1/4111111111111111",
    "x4111-1111-1111-1111", "4111-1111-1111-1111y",  # glued to a letter: an identifier
    "555 123-4111 1111 1111 1112",  # not Luhn-valid
])
def test_no_card_where_the_rule_reads_none(text):
    assert [t for _, _, t, _ in _spans(text) if t == "CREDIT_CARD"] == []


def test_a_glued_card_adds_a_finding_and_changes_none():
    # The findings of the readers are kept as they are; only the uncovered stretch is added.
    text = "call +44 20 7946 0958 or 4111 1111 1111 1111"
    assert _spans(text) == [(5, 21, "PHONE", "e164"), (25, 44, "CREDIT_CARD", "luhn")]


SEP_POOL = [" ", "-", "--", " - ", " -- ", ".", ":", "/", "+", "(", ")", "x", "é", "\u2014", "  ", ", ", "+1 "]
PIECES = ["555 123-4111", "555.123.", "555 123-", "+1 555 123-", "123-45-6789", "2023-10-15", "0.5", "12:30"]


def _random_text(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.35:
            d = card(rng.randint(13, 19), rng.choice(["4", "51", "34", "6011", "36", "3528", "62"]))
            d = d[:len(d) - 3] + "".join(rng.choice("0123456789") for _ in range(2))
            d = next(d + c for c in "0123456789" if _luhn(d + c))
            out.append(d if rng.random() < 0.15 else grouped(d, "." if rng.random() < 0.15 else rng.choice(SEPS)))
        elif r < 0.55:
            out.append(rng.choice(PIECES))
        else:
            out.append("".join(rng.choice("0123456789") for _ in range(rng.choice([1, 2, 3, 4, 4, 5, 9, 13, 16]))))
        out.append(rng.choice(SEP_POOL))
    return "".join(out)


def test_random_glued_runs_agree_and_keep_no_card_digit_in_the_clear():
    rng = random.Random(20261206)
    seen = 0
    for t in range(3000):
        text = _random_text(rng) if t % 2 else "".join(rng.choice("0123456789      ----..+x") for _ in range(rng.randint(1, 60)))
        spans = _spans(text)
        seen += len(cards(text))
        assert clear(text, spans) == [], (text, spans)
    assert seen > 1000  # the runs hold cards of the property, not only noise
