"""Numbers glued next to a card that h-card4 left in the clear, and two over-wide or split redactions.

1. A dash-joined number after a card and a single space: no reader reads a 7-digit local number,
   so ``4111 1111 1111 1111 555-1234`` was ``[CREDIT_CARD] 555-1234``. ``_glued_after`` now takes in
   the first group after a single space when a dash separator glues the next group to it; a lone
   group (`` 2024``, `` 12 items``) or a decimal (`` 3.5``) stays apart.
2. An area code glued before a card by a dash (``(555)-123-4111-1111-1111-1111`` was
   ``(555)-[CREDIT_CARD]``) or with a letter glued before its ``(`` (``x(555) 123-4111 1111 1111
   1111`` was ``x(555) [CREDIT_CARD]``): ``_glued_start`` now joins an area code to the group after
   it by any glue and takes it in even after a letter (the ``(`` parts the two), stopping there.
3. A card of one group after two dot-joined groups (``555.123.4111111111111111``) was no card at
   all: the one-group decimal rule now holds only for a lone dot (a decimal has one).
4. A card's finding ran on over a dotted IPv4 tail (``4111 1111 1111 1111.10.0.0.1`` was one
   ``[CREDIT_CARD]``): a tail that is an IPv4 address and ends the run is left out.
5. ``123 - 45 - 6789 - 4111 1111 1111 1111`` was ``[CREDIT_CARD] - [CREDIT_CARD]``: a stretch that
   runs into a card finding now moves that finding's start instead of adding a second placeholder.
"""
from __future__ import annotations

import random
import re

import pytest

from qdrant_guard.detect import redact
from tests.detect_cases import assert_redacts, card, cards, grouped, iin, kernel_spans, luhn, random_text

DASHES = ("-", "--", " - ", " -- ")


@pytest.mark.parametrize(("text", "redacted"), [
    # 1: a space, then a dash-joined number
    ("4111 1111 1111 1111 555-1234", "[CREDIT_CARD]"),
    ("pay 4111 1111 1111 1111 555-1234, thanks", "pay [CREDIT_CARD], thanks"),
    ("4111-1111-1111-1111 555--1234", "[CREDIT_CARD]"),
    ("4111 1111 1111 1111 555 - 1234", "[CREDIT_CARD]"),  # a spaced dash after the card is h-card4's
    ("4111111111111111 12-25", "[CREDIT_CARD]"),  # an expiry: cardholder data next to the PAN
    ("4111 1111 1111 1111 2024-01-15", "[CREDIT_CARD]"),  # the cost: a date after a card goes too
    ("4111 1111 1111 1111 555-1234.5", "[CREDIT_CARD]"),
    ("é 4111 1111 1111 1111 555-1234 é", "é [CREDIT_CARD] é"),  # code-point offsets in C
    # 2: an area code glued before a card
    ("(555)-123-4111-1111-1111-1111", "([CREDIT_CARD]"),
    ("x(555) 123-4111 1111 1111 1111", "x([CREDIT_CARD]"),
    ("tel(555)-123-4111-1111-1111-1111", "tel([CREDIT_CARD]"),
    ("(555) - 123-4111-1111-1111-1111", "([CREDIT_CARD]"),
    ("é x(555) 123-4111 1111 1111 1111", "é x([CREDIT_CARD]"),
    # 3: a one-group card after or before two dot-joined groups
    ("555.123.4111111111111111", "[CREDIT_CARD]"),
    ("1.555.123.4111111111111111", "[CREDIT_CARD]"),
    ("4111111111111111.555.1234", "[CREDIT_CARD]"),
    ("é 555.123.4111111111111111 é", "é [CREDIT_CARD] é"),
    # 4: an IPv4 tail stays; a tail that is no IPv4 address goes
    ("4111 1111 1111 1111.10.0.0.1", "[CREDIT_CARD].10.0.0.1"),
    ("4111111111111111.10.0.0.1", "[CREDIT_CARD].10.0.0.1"),
    ("4111 1111 1111 1111.10.0.0.1 up", "[CREDIT_CARD].10.0.0.1 up"),
    ("4111 1111 1111 1111.079.123.45.67", "[CREDIT_CARD]"),  # a leading zero: a phone number's shape
    ("4111 1111 1111 1111.300.1.1.1", "[CREDIT_CARD]"),
    ("4111 1111 1111 1111.10.0.0.1.5", "[CREDIT_CARD]"),
    ("4111 1111 1111 1111.10.0.0.1-555", "[CREDIT_CARD]"),
    # 5: one placeholder
    ("123 - 45 - 6789 - 4111 1111 1111 1111", "[CREDIT_CARD]"),
    ("(555) 4111-1111-1111-1111", "([CREDIT_CARD]"),
])
def test_redacts_as_documented(text, redacted):
    assert_redacts(text, redacted)


@pytest.mark.parametrize(("text", "redacted"), [
    ("4111 1111 1111 1111 2024", "[CREDIT_CARD] 2024"),  # a lone group stays apart
    ("4111 1111 1111 1111 12 items", "[CREDIT_CARD] 12 items"),
    ("4111 1111 1111 1111 2.5% fee", "[CREDIT_CARD] 2.5% fee"),  # a decimal
    ("4111 1111 1111 1111  555-1234", "[CREDIT_CARD]  555-1234"),  # two spaces: apart
    ("4111 1111 1111 1111 555-1234x", "[CREDIT_CARD] 555-1234x"),  # a letter glued on: an identifier
    ("4111 1111 1111 1111 123-45-6789", "[CREDIT_CARD] [SSN]"),  # a reader's finding is kept
    ("pi 0.4111111111111111", "pi 0.4111111111111111"),  # a decimal's fraction is no card
    ("4111111111111111.5 m", "4111111111111111.5 m"),
    ("10.0.0.1", "10.0.0.1"),
    ("x(555) 123-4567", "x(555) 123-4567"),  # no card: nothing taken in
    ("(555) 4111 1111 1111 1111", "(555) [CREDIT_CARD]"),  # a space after the card's first group
    ("4111 1111 1111 1111 - 5500 0000 0000 0004", "[CREDIT_CARD] - [CREDIT_CARD]"),  # two cards
])
def test_what_stays_apart(text, redacted):
    assert_redacts(text, redacted)


SUFFIXES = ("555-1234", "555--1234", "12-34-56", "555-1234.5", "1-2")
CARD_SEPS = (" ", "-", "--", ".")


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("sep", CARD_SEPS)
@pytest.mark.parametrize("length", [13, 16, 19])
def test_a_dash_joined_number_after_a_space_keeps_no_digit_in_the_clear(suffix, sep, length):
    text = f"x {grouped(card(length), sep)} {suffix} y"
    kernel_spans(text)
    out = redact(text)
    assert out == "x [CREDIT_CARD] y", (text, out)


AREA = ("(555)-123", "(555)--123", "(555) - 123", "(555).123", "x(555) 123", "x(555)-123", "tel(555)123",
        "+1 (555)-123")


@pytest.mark.parametrize("prefix", AREA)
@pytest.mark.parametrize("glue", ("-", "--", " - ", "."))
@pytest.mark.parametrize("sep", ("-", "--", ".", " "))
def test_an_area_code_glued_before_a_card_keeps_no_digit_in_the_clear(prefix, glue, sep):
    text = f"y {prefix}{glue}{grouped(card(16), sep)} z"
    spans = kernel_spans(text)
    covered = {k for s, e, _, _ in spans for k in range(s, e)}
    assert [k for k, ch in enumerate(text) if ch.isdigit() and k not in covered] == [], (text, spans)


@pytest.mark.parametrize(("before", "after"), [
    (b, a) for b in ("555.123.", "1.555.123.", "2023.10.", "") for a in (".555.1234", ".1.2", "") if a or b])
@pytest.mark.parametrize("length", [13, 16, 19])
def test_a_one_group_card_between_dotted_groups_keeps_no_digit_in_the_clear(before, after, length):
    text = f"q {before}{card(length)}{after} r"
    kernel_spans(text)
    assert redact(text) == "q [CREDIT_CARD] r", text


_TAIL = re.compile(r" (\d+(?:(?:-|--| - | -- )\d+)+)(?![0-9A-Za-z]|[-.]\d|--\d| - \d| -- \d)")
_ONE = re.compile(r"(?<![0-9A-Za-z])\d+\.\d+\.(\d{13,19})(?![0-9A-Za-z]|[.:/]\d)"
                  r"|(?<![0-9A-Za-z])(?<!\d[.:/])(\d{13,19})\.\d+\.\d")


def one_group(text: str) -> list[tuple[int, int]]:
    """The one-group cards next to two dot-joined groups, by brute force."""
    out = []
    for m in _ONE.finditer(text):
        g = 1 if m.group(1) else 2
        d = m.group(g)
        if luhn(d) and iin(d):
            out.append(m.span(g))
    return out


def tails(text: str) -> list[tuple[int, int]]:
    """The whole dash-joined runs after a single space after a card of ``cards()``, by brute force."""
    out = []
    for _, e in cards(text):
        m = _TAIL.match(text, e)
        if m:
            out.append(m.span(1))
    return out


def tails_clear(text: str, spans: list[tuple[int, int, str, str]]) -> list[str]:
    """The runs of :func:`tails` and cards of :func:`one_group` with a digit no finding covers.

    A run counts only after a card whose last digit a CREDIT_CARD finding covers: a card read
    inside another finding (``+1 4111 1111 1149 9`` is a phone number) is not run on."""
    covered = {k for s, e, _, _ in spans for k in range(s, e)}
    carded = {k for s, e, t, _ in spans if t == "CREDIT_CARD" for k in range(s, e)}
    # up to the first finding that starts in the run: what follows is that finding's to cover
    runs = [(a, min([s for s, _, _, _ in spans if a <= s < b] + [b])) for a, b in tails(text) if a - 2 in carded]
    return [text[a:b] for a, b in runs + one_group(text)
            if any("0" <= text[k] <= "9" and k not in covered for k in range(a, b))]


def tail_text(rng: random.Random) -> str:
    """A random text of cards with dash-joined numbers after a space and one-group dotted cards."""
    out = []
    for _ in range(rng.randint(1, 4)):
        out.append(random_text(rng) if rng.random() < 0.3 else rng.choice(["", " ", "x", "1.", "555.123."]))
        d = card(rng.randint(13, 19), rng.choice(["4", "51"]))
        d = d[:-3] + "".join(rng.choice("0123456789") for _ in range(2))
        d = next(d + c for c in "0123456789" if luhn(d + c))
        out.append(grouped(d, rng.choice([" ", "-", "--", "."])) if rng.random() < 0.7 else d)
        out.append(rng.choice([" 555-1234", " 12-34", " 555 - 1234", " 2024", ".555.1234", ".10.0.0.1", " 1-2-3",
                               " 555-1234x", ""]))
        out.append(rng.choice([" ", "", "-5", " 12", "x", "."]))
    return "".join(out)


def test_random_texts_agree_and_keep_no_tail_digit_in_the_clear():
    rng = random.Random(20261207)
    seen = 0
    for _ in range(3000):
        text = tail_text(rng)
        spans = kernel_spans(text)
        seen += len(tails(text)) + len(one_group(text))
        assert tails_clear(text, spans) == [], (text, spans)
    assert seen > 1000  # the texts hold the shapes, not only noise
