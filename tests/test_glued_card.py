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
from tests.detect_cases import SEPS, assert_redacts, card, cards, clear, grouped, kernel_spans, random_text


def test_the_known_leak_is_closed():
    # The phone number read across the card's first group stays; the card's rest is a card.
    assert redact("555 123-4111 1111 1111 1111") == "[PHONE] [CREDIT_CARD]"
    assert redact("555 123-4111--1111--1111--1111") == "[PHONE]--[CREDIT_CARD]"
    text = "555 123-4111 1111 1111 1111"
    assert kernel_spans(text) == [(0, 12, "PHONE", "nanp"), (13, 27, "CREDIT_CARD", "luhn")]


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
    spans = kernel_spans(text)
    assert cards(text), text  # the case holds a card of the property
    assert clear(text, spans) == [], (text, spans)


@pytest.mark.parametrize("suffix", ["-2", "--12", " - 555", "-555 123-4567", " 123-45-6789", "-123-45-6789", ".5"])
@pytest.mark.parametrize("sep", [" ", "-", "--", "."])
def test_a_card_glued_before_a_number_keeps_no_digit_in_the_clear(suffix, sep):
    text = "pay " + grouped(card(16), sep) + suffix
    spans = kernel_spans(text)
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
    ("t 12:4111111111111111", "t 12:[CREDIT_CARD]"),  # were negatives: one group after ':' or '/' (h-card8)
    ("v 1/4111111111111111", "v 1/[CREDIT_CARD]"),
])
def test_glued_cards_redact_as_documented(text, redacted):
    assert_redacts(text, redacted)


@pytest.mark.parametrize("text", [
    "12--123--45--6789",  # the rule the leak came from still holds for SSNs
    "1234-5678-9012-3456-7890",  # a dashed run with no card in it
    "pi 0.4111111111111111",  # a decimal's fraction is no card
    "4111111111111111.5 m",
    "x4111-1111-1111-1111", "4111-1111-1111-1111y",  # glued to a letter: an identifier
    "555 123-4111 1111 1111 1112",  # not Luhn-valid
])
def test_no_card_where_the_rule_reads_none(text):
    assert [t for _, _, t, _ in kernel_spans(text) if t == "CREDIT_CARD"] == []


def test_a_glued_card_adds_a_finding_and_changes_none():
    # The findings of the readers are kept as they are; only the uncovered stretch is added.
    text = "call +44 20 7946 0958 or 4111 1111 1111 1111"
    assert kernel_spans(text) == [(5, 21, "PHONE", "e164"), (25, 44, "CREDIT_CARD", "luhn")]


def test_random_glued_runs_agree_and_keep_no_card_digit_in_the_clear():
    rng = random.Random(20261206)
    seen = 0
    for t in range(3000):
        text = random_text(rng) if t % 2 else "".join(rng.choice("0123456789      ----..+x") for _ in range(rng.randint(1, 60)))
        spans = kernel_spans(text)
        seen += len(cards(text))
        assert clear(text, spans) == [], (text, spans)
    assert seen > 1000  # the runs hold cards of the property, not only noise
