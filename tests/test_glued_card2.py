"""An SSN or a phone number glued by a dash to a card keeps no digit in the clear.

No number is read after a dash and a digit, and none ends before one, so a card glued after an SSN
or a phone number by a dash was covered by the stretch ``_cover_cards`` adds (tests/test_glued_card.py)
while the number before it stayed unread: ``123-45-6789-4111 1111 1111 1111`` was
``123-45-[CREDIT_CARD] [CREDIT_CARD]`` and ``555 123-4111-1111-1111-1111`` was
``555 123-[CREDIT_CARD]``. Now an added stretch takes in the uncovered digit groups glued before it
(``_glued_start``), and a stretch that goes on one the same card already reaches into extends it
(one placeholder for one card).
"""
from __future__ import annotations

import random
import re

import pytest

from tests.detect_cases import assert_redacts, card, cards, clear, grouped, kernel_spans, luhn, random_text

DASHES = ("-", "--", " - ", " -- ")
# An SSN the SSA could issue (area not 000, 666 or 9xx; group not 00; serial not 0000), or a phone
# number's first groups, joined to what follows by a dash separator; not glued to a letter or digit.
_SSN = re.compile(r"(?<![0-9A-Za-z])(\d{3})(-|--| - | -- | )(\d{2})\2(\d{4})(?:-|--| - | -- )$")
_PHONE = re.compile(r"(?<![0-9A-Za-z])(?:\+?1[ -])?\d{3}[ -]\d{3}(?:-|--| - | -- )$")


def glued(text: str) -> list[tuple[int, int]]:
    """The valid SSNs and phone prefixes glued by a dash separator before a card, by brute force."""
    out = []
    for s, _ in cards(text):
        m = _SSN.search(text, 0, s)
        if m and not (m[1] in ("000", "666") or m[1][0] == "9" or m[3] == "00" or m[4] == "0000"):
            out.append(m.span())
        m = _PHONE.search(text, 0, s)
        if m:
            out.append(m.span())
    return out


def glued_clear(text: str, spans: list[tuple[int, int, str, str]]) -> list[str]:
    """The numbers of :func:`glued` with a digit no finding covers."""
    covered = {k for s, e, _, _ in spans for k in range(s, e)}
    return [text[a:b] for a, b in glued(text) if any(text[k].isdigit() and k not in covered for k in range(a, b))]


def glued_text(rng: random.Random) -> str:
    """A random text of the glued-card test with SSNs and phone numbers glued before cards by dashes."""
    out = []
    for _ in range(rng.randint(1, 4)):
        out.append(random_text(rng) if rng.random() < 0.3 else "")
        area = rng.choice(["123", "078", "000", "666", "901", "555"])
        out.append(rng.choice([f"{area}-{rng.randint(0, 99):02d}-{rng.randint(0, 9999):04d}", f"{area} 45 6789",
                               f"555 {area}", f"+1 555-{area}", f"1-555-{area}"]) + rng.choice(DASHES))
        d = card(rng.randint(13, 19), rng.choice(["4", "51", "34", "6011", "36"]))
        d = d[:-3] + "".join(rng.choice("0123456789") for _ in range(2))
        out.append(grouped(next(d + c for c in "0123456789" if luhn(d + c)), rng.choice([" ", "-", "--", " - "])))
        out.append(rng.choice([" ", "-5", " 12", ".", "", "x"]))
    return "".join(out)


@pytest.mark.parametrize(("text", "redacted"), [
    ("123-45-6789-4111 1111 1111 1111", "[CREDIT_CARD]"),
    ("555 123-4111-1111-1111-1111", "[CREDIT_CARD]"),
    ("123-45-6789-4111-1111-1111-1111", "[CREDIT_CARD]"),
    ("+1 555 123-4111-1111-1111-1111", "+[CREDIT_CARD]"),
    ("1-800-555-4111-1111-1111-1111", "[CREDIT_CARD]"),
    ("ssn 123-45-6789--4111--1111--1111--1111.", "ssn [SSN]--[CREDIT_CARD]."),  # "--": the SSN is read
    ("6789-4111-1111-1111-1111-5", "[CREDIT_CARD]"),  # h-card4; was [CREDIT_CARD]-5, before that [CREDIT_CARD]-[CREDIT_CARD]-5
    ("é 555 123-4111-1111-1111-1111 é", "é [CREDIT_CARD] é"),  # code-point offsets in C
])
def test_glued_numbers_redact_whole(text, redacted):
    assert_redacts(text, redacted)


PREFIXES = ["123-45-6789", "123 45 6789", "078-05-1120", "555 123", "555-123", "+1 555 123", "1-555-123",
            "1 555 123", "123--45--6789"]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("glue", DASHES)
@pytest.mark.parametrize("sep", [" ", "-", "--", " - "])
@pytest.mark.parametrize("length", [13, 15, 16, 19])
def test_a_number_glued_by_a_dash_before_a_card_keeps_no_digit_in_the_clear(prefix, glue, sep, length):
    text = f"x {prefix}{glue}{grouped(card(length), sep)} y"
    spans = kernel_spans(text)
    assert clear(text, spans) == [], spans
    assert not any(c.isdigit() and not any(s <= k < e for s, e, _, _ in spans)
                   for k, c in enumerate(text)), (text, spans)
    assert glued_clear(text, spans) == []


@pytest.mark.parametrize("text", [
    "12--123--45--6789", "2023-10-15", "version 1.2.3-4", "555 123-4567-5", "123-45-6789-5",
    "1234-5678-9012-3456-7890",
    "555 123-4111-1111-1111-1112",  # not Luhn-valid: no card, so nothing is taken in
])
def test_no_finding_where_no_card_is_glued(text):
    assert kernel_spans(text) == []


@pytest.mark.parametrize(("text", "redacted"), [
    ("123-45-6789 4111 1111 1111 1111", "[SSN] [CREDIT_CARD]"),  # a space: the SSN is read
    ("qty 2 4111 1111 1111 1111", "qty 2 [CREDIT_CARD]"),  # a space and no dash: apart
    ("ab12-4111-1111-1111-1111", "ab12-[CREDIT_CARD]"),  # glued to a letter: an identifier
    ("555 123-4111 1111 1111 1111", "[PHONE] [CREDIT_CARD]"),  # a finding is never changed
    # The cost: whatever is glued is taken in, typed CREDIT_CARD (a date, a count before a dash).
    ("2023-10-15-4111-1111-1111-1111", "[CREDIT_CARD]"),
    # One placeholder since h-card5 (the stretch moves the card finding's start; was
    # qty [CREDIT_CARD] [CREDIT_CARD]).
    ("qty 2 4111-1111-1111-1111", "qty [CREDIT_CARD]"),
])
def test_what_is_not_taken_in(text, redacted):
    assert_redacts(text, redacted)


def test_random_glued_runs_agree_and_keep_no_glued_number_in_the_clear():
    rng = random.Random(20261207)
    seen = 0
    for _ in range(3000):
        text = glued_text(rng)
        spans = kernel_spans(text)
        assert clear(text, spans) == [] and glued_clear(text, spans) == [], (text, spans)
        seen += len(glued(text))
    assert seen > 3000  # the runs hold glued numbers of the property, not only noise
