"""Mutation pass over h-card5's rules (9f75955, d3a3ac6): cases that kill the mutants of
native/detect.c and qdrant_guard/_detect_py.py that tests/test_glued_card5.py let live.

``assert_redacts`` (tests/detect_cases.py) checks that the native kernel and the pure-Python twin
give the same findings; the redaction then holds for both. Each case names the mutant it kills (see
docs/security-testing.md).
"""
from __future__ import annotations

import pytest

from tests.detect_cases import assert_redacts

CARD = "4111 1111 1111 1111"


@pytest.mark.parametrize(("text", "redacted"), [
    # ipv4_tail reads at most 4 digits a part, so a 4-digit last part is no IPv4 part (reading 3
    # would leave ".1000" looking like ".100" and keep the whole tail in the clear)
    (f"{CARD}.10.0.0.1000", "[CREDIT_CARD]"),
    # a leading zero in a two-digit part: no IPv4 address, a number's shape
    (f"{CARD}.10.0.0.01", "[CREDIT_CARD]"),
    (f"{CARD}.01.0.0.1", "[CREDIT_CARD]"),
    # 255 is the last IPv4 part value, 256 the first that is none
    (f"{CARD}.10.0.0.255", "[CREDIT_CARD].10.0.0.255"),
    (f"{CARD}.255.255.255.255", "[CREDIT_CARD].255.255.255.255"),
    (f"{CARD}.10.0.0.256", "[CREDIT_CARD]"),
    (f"{CARD}.256.0.0.1", "[CREDIT_CARD]"),
    # a letter glued after the fourth part: no address; the run stops before the lettered group
    (f"{CARD}.10.0.0.1x", "[CREDIT_CARD].1x"),
])
def test_ipv4_tail_edges(text, redacted):
    assert_redacts(text, redacted)


@pytest.mark.parametrize(("text", "redacted"), [
    # a ':' or '/' is no decimal point (h-card8): the card is read whatever is beyond it
    ("1.2:4111111111111111", "1.2:[CREDIT_CARD]"),
    ("1.2/4111111111111111", "1.2/[CREDIT_CARD]"),
    ("4111111111111111:5.5", "[CREDIT_CARD]:5.5"),
    ("4111111111111111/5.5", "[CREDIT_CARD]/5.5"),
    # a dot alone, with a dot run on the far side: no decimal
    ("5.5.4111111111111111", "[CREDIT_CARD]"),
    ("4111111111111111.5.5", "[CREDIT_CARD]"),
])
def test_dot_run_only_after_a_dot(text, redacted):
    assert_redacts(text, redacted)


@pytest.mark.parametrize(("text", "redacted"), [
    # the group after the space joins the card though a letter is glued after the next group,
    # when the next finding starts before that letter: the e-mail address takes "1234abc@..."
    ("4111 1111 1111 1111 555 - 1234abc@example.com", "[CREDIT_CARD] - [EMAIL]"),
    # the next finding starts inside the first group: nothing is taken in
    ("4111 1111 1111 1111 555-1234abc@example.com", "[CREDIT_CARD] [EMAIL]"),
    # a space, then a dash: no group after the space, nothing taken in (a sign, not a number's glue)
    ("4111 1111 1111 1111 -5 degrees", "[CREDIT_CARD] -5 degrees"),
    ("4111 1111 1111 1111 --5", "[CREDIT_CARD] --5"),
])
def test_the_group_after_a_space_up_to_the_next_finding(text, redacted):
    assert_redacts(text, redacted)
