"""Mutation pass over h-card6's C lines (32a74f0, 676b2fe): cases that kill the mutants of
native/detect.c that tests/test_glued_card6.py, test_glued_card5.py, test_detect.py, the detect
oracle tests and scripts/glued_card_check.py let live.

``assert_redacts`` (tests/detect_cases.py) checks that the native kernel and the pure-Python twin
give the same findings; the redaction then holds for both. Each case names the mutant it kills (see
docs/security-testing.md, the h-mut18 entry).
"""
from __future__ import annotations

import pytest

from tests.detect_cases import assert_redacts

ONE = "4111111111111111"


@pytest.mark.parametrize(("text", "redacted"), [
    # phone_head's 3-digit group needs both of its first two characters digits: "5x5." is no
    # group of a phone number, so the dot before the one-group card stays a decimal point
    # (mutant: the first `||` of the group test as `&&`, which let one non-digit through)
    (f"555 5x5.{ONE}", f"555 5x5.{ONE}"),
    # the control: a whole 3-digit group glued by a dot is a phone number's, the card is read
    (f"555 555.{ONE}", "[CREDIT_CARD]"),
])
def test_phone_head_group_is_three_digits(text, redacted):
    assert_redacts(text, redacted)


@pytest.mark.parametrize(("text", "redacted"), [
    # a 3-digit country code before a card that a phone reading takes is a country code alone,
    # so the phone finding becomes the card's (mutant: code_only's `n - skip <= 3` as `< 3`,
    # which left the phone finding and a 1-digit card; test_glued_card6 has 1- and 2-digit codes)
    ("(+353) 4111 1111 1149 9", "(+353) [CREDIT_CARD]"),
    ("011 353 4111 1111 1149 9", "011 353 [CREDIT_CARD]"),
    ("00353 4111 1111 1149 9", "00353 [CREDIT_CARD]"),
])
def test_three_digit_country_code_before_a_card(text, redacted):
    assert_redacts(text, redacted)
