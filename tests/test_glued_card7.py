"""What h-card6 and mutation pass 18 left open about numbers beside a card (h-card7, 2026-12-06).

1. A phone number's dotted local part is taken in after a card and a single space
   (``4111 1111 1111 1111 555.1234`` is one ``[CREDIT_CARD]``), as a dash-joined number is. After
   two spaces, or with a ``:`` or ``/`` in the number or between the card and it, it stays apart:
   no number rule joins digit groups across a doubled space or a tab (a card's own are not),
   ``:`` and ``/`` join times, ratios, dates, paths and key-value pairs, and no
   phone number is written ``555:1234`` or ``555/1234``; a 7-digit local number alone is no
   finding anywhere (docs/threat-model.md says so).
2. The equivalent mutant of pass 18 (``cover_cards``' ``end == pos`` test deleted): a finding that
   starts inside the floor of a card read after a country code reaches past the floor's end, so
   no gap of the card follows it (docs/security-testing.md, the h-card7 entry, has the argument).
"""
from __future__ import annotations

import pytest

from tests.detect_cases import assert_redacts, kernel_spans

CARD = "4111 1111 1111 1111"


@pytest.mark.parametrize(("text", "redacted"), [
    (f"{CARD}  555.1234", "[CREDIT_CARD]  555.1234"),  # two spaces: a field break
    (f"{CARD}  555-1234", "[CREDIT_CARD]  555-1234"),  # as for the dash-joined number
    (f"{CARD}\t555.1234", "[CREDIT_CARD]\t555.1234"),
    (f"{CARD} 555:1234", "[CREDIT_CARD] 555:1234"),  # no phone number is written with ':' or '/'
    (f"{CARD} 555/1234", "[CREDIT_CARD] 555/1234"),
    (f"{CARD}:555.1234", "[CREDIT_CARD]:555.1234"),  # a key-value or field separator after the card
    (f"{CARD}/555.1234", "[CREDIT_CARD]/555.1234"),
    (f"{CARD}:555-1234", "[CREDIT_CARD]:555-1234"),
    (f"{CARD} 12:30", "[CREDIT_CARD] 12:30"),  # a time
    (f"{CARD} 1/2", "[CREDIT_CARD] 1/2"),  # a date or a fraction
    (f"{CARD}  2024-01-15", "[CREDIT_CARD]  2024-01-15"),  # a date in the next column
    (f"{CARD}  12.50", "[CREDIT_CARD]  12.50"),  # a price in the next column
])
def test_what_stays_apart(text, redacted):
    assert_redacts(text, redacted)


@pytest.mark.parametrize("text", [
    f"{CARD} 555.1234",  # the single-space rules these stop at
    f"{CARD} 555-1234",
    f"{CARD}.555.1234",  # glued by the card's own separators
    f"{CARD}-555.1234",
])
def test_the_single_space_and_glued_forms_are_still_taken_in(text):
    assert_redacts(text, "[CREDIT_CARD]")


def test_a_finding_inside_a_card_read_after_a_country_code_reaches_past_the_card():
    # The card "4877 6437 5056 0020" is read after "(+1)" (the phone reading "(+1) 4877 6437"
    # becomes its card finding); the phone number "0020-37 38-3703" after the "--" starts inside
    # the card's groups and runs past them, so the card leaves no digit after it to cover.
    text = "(+1) 4877 6437--5056--0020-37 38-3703"
    assert kernel_spans(text) == [(5, 20, "CREDIT_CARD", "luhn"), (22, 37, "PHONE", "e164")]
    assert_redacts(text, "(+1) [CREDIT_CARD]--[PHONE]")
