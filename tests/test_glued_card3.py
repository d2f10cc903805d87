"""A parenthesised area code or a dotted phone number glued before a card keeps no digit in the clear.

``_glued_start`` took in only the digit groups glued before a card by a space or a dash separator,
so ``(555) 123-4111-1111-1111-1111`` was ``(555) [CREDIT_CARD]`` (the area code in the clear) and
``555.123.4111.1111.1111.1111`` was ``555.123.[CREDIT_CARD]``. Now a dot glues groups as a dash
does, and a parenthesised area code (``(555) `` or ``(555)``) before a group is taken in too.
"""
from __future__ import annotations

import random
import re

import pytest

from tests.detect_cases import assert_redacts, card, cards, clear, grouped, kernel_spans, luhn, random_text

GLUES = ("-", "--", " - ", " -- ", ".")
# A phone number's first groups with a parenthesised area code, or joined by dots, glued to what
# follows by a dash separator or a dot; no letter glued before it.
_PAREN = re.compile(r"(?<![A-Za-z])(?:\+?1 )?\(\d{3}\) ?\d{3}(?:-|--| - | -- |\.)$")
_DOTTED = re.compile(r"(?<![0-9A-Za-z])(?:\+?1\.)?\d{3}\.\d{3}(?:-|--| - | -- |\.)$")


def glued3(text: str) -> list[tuple[int, int]]:
    """The area-coded and dotted phone prefixes glued before a card, by brute force."""
    out = []
    for s, _ in cards(text):
        for rx in (_PAREN, _DOTTED):
            m = rx.search(text, 0, s)
            if m:
                out.append(m.span())
    return out


def glued3_clear(text: str, spans: list[tuple[int, int, str, str]]) -> list[str]:
    """The prefixes of :func:`glued3` with a digit no finding covers."""
    covered = {k for s, e, _, _ in spans for k in range(s, e)}
    return [text[a:b] for a, b in glued3(text)
            if any("0" <= text[k] <= "9" and k not in covered for k in range(a, b))]


def glued3_text(rng: random.Random) -> str:
    """A random text of glued runs with area-coded and dotted phone prefixes before cards."""
    out = []
    for _ in range(rng.randint(1, 4)):
        out.append(random_text(rng) if rng.random() < 0.3 else rng.choice(["", " ", "x", "1.", "12 "]))
        out.append(rng.choice(["(555) 123", "(555)123", "+1 (555) 123", "(55) 123", "555.123", "1.555.123",
                               "+1.555.123", "55.12", "x(555) 123"]) + rng.choice(GLUES + (" ",)))
        d = card(rng.randint(13, 19), rng.choice(["4", "51", "34", "6011", "36"]))
        d = d[:-3] + "".join(rng.choice("0123456789") for _ in range(2))
        out.append(grouped(next(d + c for c in "0123456789" if luhn(d + c)), rng.choice([" ", "-", "--", "."])))
        out.append(rng.choice([" ", "-5", " 12", ".", "", "x", ".5"]))
    return "".join(out)


@pytest.mark.parametrize(("text", "redacted"), [
    ("(555) 123-4111-1111-1111-1111", "([CREDIT_CARD]"),  # was (555) [CREDIT_CARD]
    ("(555)123-4111-1111-1111-1111", "([CREDIT_CARD]"),
    ("+1 (555) 123-4111-1111-1111-1111", "+[CREDIT_CARD]"),
    # the card is a finding already; one placeholder since h-card5 (was ([CREDIT_CARD]) [CREDIT_CARD])
    ("(555) 4111-1111-1111-1111", "([CREDIT_CARD]"),
    ("555.123.4111.1111.1111.1111", "[CREDIT_CARD]"),  # was 555.123.[CREDIT_CARD]
    ("555.123-4111-1111-1111-1111", "[CREDIT_CARD]"),  # was 555.[CREDIT_CARD]
    ("1.2.4111.1111.1111.1111", "[CREDIT_CARD]"),  # was 1.2.[CREDIT_CARD]: the cost, a version is taken in
    ("é (555) 123-4111-1111-1111-1111 é", "é ([CREDIT_CARD] é"),  # code-point offsets in C
])
def test_area_codes_and_dotted_prefixes_redact_whole(text, redacted):
    assert_redacts(text, redacted)


PREFIXES = ["(555) 123", "(555)123", "+1 (555) 123", "1 (555) 123", "555.123", "1.555.123", "+1.555.123"]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("glue", GLUES)
@pytest.mark.parametrize("sep", [" ", "-", "--", " - ", "."])
@pytest.mark.parametrize("length", [13, 16, 19])
def test_a_glued_area_coded_or_dotted_phone_keeps_no_digit_in_the_clear(prefix, glue, sep, length):
    text = f"x {prefix}{glue}{grouped(card(length), sep)} y"
    spans = kernel_spans(text)
    assert clear(text, spans) == [], spans
    assert glued3_clear(text, spans) == [], spans
    assert not any(c.isdigit() and not any(s <= k < e for s, e, _, _ in spans)
                   for k, c in enumerate(text)), (text, spans)


@pytest.mark.parametrize("text", [
    "12--123--45--6789", "0.4111111111111111", "4111111111111111.5", "10.0.0.1", "2023-10-15", "2023.10.15",
    "version 1.2.3-4", "3.14159", "(12) 345-6789-0", "555.123.4111.1111.1111.1112",  # not Luhn-valid
    "(555) 123-4111-1111-1111-1112",
])
def test_no_finding_where_no_card_is_glued(text):
    assert kernel_spans(text) == []


@pytest.mark.parametrize(("text", "redacted"), [
    # A letter before the "(": taken in since h-card5 (the parenthesis parts them), was x(555) [CREDIT_CARD].
    ("x(555) 123-4111-1111-1111-1111", "x([CREDIT_CARD]"),
    ("(555) 4111 1111 1111 1111", "(555) [CREDIT_CARD]"),  # a space and no dash: apart, as before
    # The cost: a dot glues whatever digits are before it, as a dash does (a decimal, a version).
    ("0.4111 1111 1111 1111", "[CREDIT_CARD]"),
    ("(555) 123-4567", "[PHONE]"),
    # Was left open (a number glued after a card); taken in since h-card4, was [CREDIT_CARD]-555.
    ("4111 1111 1111 1111-555", "[CREDIT_CARD]"),
])
def test_what_is_not_taken_in(text, redacted):
    assert_redacts(text, redacted)


def test_random_runs_agree_and_keep_no_glued_prefix_in_the_clear():
    rng = random.Random(20261208)
    seen = 0
    for _ in range(3000):
        text = glued3_text(rng)
        spans = kernel_spans(text)
        assert clear(text, spans) == [] and glued3_clear(text, spans) == [], (text, spans)
        seen += len(glued3(text))
    assert seen > 2000  # the runs hold glued prefixes of the property, not only noise
