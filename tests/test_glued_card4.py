"""A number glued after a card by a dash or a dot keeps no digit in the clear.

The readers refuse a number that follows a card by a dash or a dot, and ``_cover_cards`` covered
only the card's own digits, so ``4111 1111 1111 1111-555-123-4567`` was
``[CREDIT_CARD]-555-123-4567``. Now ``_glued_after`` runs each CREDIT_CARD finding on over the
digit groups glued after it by a dot or a dash separator, up to the next finding or a group with a
letter glued after it.
"""
from __future__ import annotations

import pytest

from qdrant_guard.detect import redact
from tests.detect_cases import assert_redacts, kernel_spans

CARDS = ("4111 1111 1111 1111", "4111-1111-1111-1111", "4111.1111.1111.1111", "4111111111111111")
GLUES = ("-", "--", " - ", " -- ", ".")
SUFFIXES = ("555-123-4567", "123-45-6789", "555.123.4567", "5")


@pytest.mark.parametrize(("text", "redacted"), [
    ("4111 1111 1111 1111-555-123-4567", "[CREDIT_CARD]"),
    ("4111-1111-1111-1111-123-45-6789", "[CREDIT_CARD]"),
    ("card 4111 1111 1111 1111-555-123-4567, call", "card [CREDIT_CARD], call"),
    ("é 4111 1111 1111 1111-555-123-4567 é", "é [CREDIT_CARD] é"),
])
def test_glued_after_is_taken_in(text, redacted):
    assert_redacts(text, redacted)


@pytest.mark.parametrize("number", CARDS)
@pytest.mark.parametrize("glue", GLUES)
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_grid(number, glue, suffix):
    text = f"x {number}{glue}{suffix} y"
    if number == "4111111111111111" and glue == ".":
        pytest.skip("a single group before a dot and a digit is a decimal, not a card")
    kernel_spans(text)
    out = redact(text)
    assert not any(c.isdigit() for c in out), out
    if glue in ("-", "."):  # the readers refuse what follows: the card's finding takes it in
        assert out == "x [CREDIT_CARD] y"


@pytest.mark.parametrize(("text", "redacted"), [
    ("4111 1111 1111 1111 555", "[CREDIT_CARD] 555"),  # a plain space: apart, as before
    ("4111111111111111.5", "4111111111111111.5"),  # a decimal, as before
    ("4111-1111-1111-1111-5abc", "[CREDIT_CARD]-5abc"),  # a letter glued after: an identifier
    ("10.0.0.1", "10.0.0.1"),
    ("v1.2.3-4", "v1.2.3-4"),
])
def test_what_is_not_taken_in(text, redacted):
    assert_redacts(text, redacted)
