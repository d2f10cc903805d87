"""A card of one digit group glued to a ':' or '/' with a digit beyond it (h-card8).

The one-group exception of the card rule ("not glued to a '.', ':' or '/' that a digit is on the
other side of") left `4111111111111111:5`, `12:4111111111111111` and `4111111111111111/5` wholly
in the clear, while `4111 1111 1111 1111:5` was `[CREDIT_CARD]:5`. Only the '.' keeps it now: a
decimal's digits (`0.4111111111111111`, a float's repr) are no card; a time, a ratio or a date has
no 13-19 digit part, so ':' and '/' guard nothing a card rule would read. Both kernels, through
tests/detect_cases.py; the brute-force `cards` (written apart from the kernels) follows the rule.
"""
from __future__ import annotations

import random

import pytest

from tests.detect_cases import assert_redacts, card, cards, clear, kernel_spans, luhn

LEADS = ["4", "51", "2221", "34", "6011", "65", "36", "3528", "62", "67"]


@pytest.mark.parametrize(("text", "redacted"), [
    ("4111111111111111:5", "[CREDIT_CARD]:5"),
    ("4111111111111111/5", "[CREDIT_CARD]/5"),
    ("4111111111111111:555.1234", "[CREDIT_CARD]:555.1234"),  # as "4111 1111 1111 1111:555.1234"
    ("12:4111111111111111", "12:[CREDIT_CARD]"),
    ("12/4111111111111111", "12/[CREDIT_CARD]"),
    ("card 4111111111111111:5 ok", "card [CREDIT_CARD]:5 ok"),
    ("4111 1111 1111 1111:5", "[CREDIT_CARD]:5"),  # the grouped card, as before
    ("1:4111111111111111:2", "1:[CREDIT_CARD]:2"),
    ("4111111111111111:4111111111111111", "[CREDIT_CARD]:[CREDIT_CARD]"),
    ("/v1/orders/4111111111111111/7", "/v1/orders/[CREDIT_CARD]/7"),
    ("1.2:4111111111111111", "1.2:[CREDIT_CARD]"),
    ("é 12:4111111111111111 é", "é 12:[CREDIT_CARD] é"),  # code-point offsets in C
    ("555 123-4111111111111111:5", "[CREDIT_CARD]:5"),
    # the '.' keeps the exception: a decimal's digits, also beside a ':' or '/'
    ("0.4111111111111111", "0.4111111111111111"),
    ("4111111111111111.5", "4111111111111111.5"),
    ("12:4111111111111111.5", "12:4111111111111111.5"),
    ("0.4111111111111111:5", "0.4111111111111111:5"),
    ("0.4111111111111111/5", "0.4111111111111111/5"),
    # a letter glued to the card still makes it an identifier
    ("12:4111111111111111x", "12:4111111111111111x"),
    ("x4111111111111111/5", "x4111111111111111/5"),
    ("4111111111111112:5", "4111111111111112:5"),  # not Luhn-valid
])
def test_one_group_beside_a_colon_or_slash(text, redacted):
    assert_redacts(text, redacted)


@pytest.mark.parametrize("glue", [":", "/"])
@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("length", range(13, 20))
@pytest.mark.parametrize("side", ["before", "after", "both"])
def test_no_digit_of_a_glued_card_in_the_clear(glue, lead, length, side):
    d = card(length, lead)
    left = f"7{glue}" if side in ("before", "both") else ""
    right = f"{glue}3" if side in ("after", "both") else ""
    text = f"at {left}{d}{right} z"
    spans = kernel_spans(text)
    assert cards(text), text  # the brute force reads it
    assert clear(text, spans) == [], (text, spans)
    assert any(text[s:e] == d and t == "CREDIT_CARD" for s, e, t, _ in spans), (text, spans)


def test_seeded_runs_glued_by_colons_and_slashes():
    rng = random.Random(8)
    checked = 0
    for _ in range(1500):
        parts = []
        for _ in range(rng.randint(1, 5)):
            if rng.random() < 0.5:
                d = card(rng.randint(13, 19), rng.choice(LEADS))
                d = d[:-3] + "".join(rng.choice("0123456789") for _ in range(2))
                parts.append(next(d + c for c in "0123456789" if luhn(d + c)))
            else:
                parts.append("".join(rng.choice("0123456789") for _ in range(rng.choice([1, 2, 3, 4, 8]))))
            parts.append(rng.choice([":", "/", ":", "/", " ", "."]))
        text = "".join(parts)
        spans = kernel_spans(text)
        assert clear(text, spans) == [], (text, spans)
        checked += bool(cards(text))
    assert checked > 500
