"""Tests from mutation pass 14 (h-mut14 branch, 2026-12-06): the glued-after rule (twin
``_glued_after``, C ``glued_after``), the card floor (``_card_floor``, C ``card_floor``) and the
card coverage (``_cover_cards``, C ``cover_cards``).

docs/security-testing.md ("Mutation pass 14") lists the mutants, which test kills each and the
equivalent ones. Every case goes through ``tests/oracle.py``'s ``assert_same``: the native kernel
and the twin must give the same findings.
"""
from __future__ import annotations

import pytest

from tests.test_detect import NEGATIVES, POSITIVES
from tests.detect_cases import kernel_spans

_DIGITS = "0123456789"
_GLUES = ("", " ", "-", ".", " - ")


def _between_digits(text: str, i: int) -> bool:
    return 0 < i < len(text) and text[i - 1] in _DIGITS and text[i] in _DIGITS


@pytest.mark.parametrize("sample", [p[0] for p in POSITIVES] + list(NEGATIVES))
def test_no_finding_starts_or_ends_between_two_digits(sample):
    """The equivalence of ``g > limit`` -> ``g >= limit`` in ``_glued_start``/``glued_start`` rests
    on this: the limit is the end of a finding or of an added stretch (which ends where a finding
    starts, or after a card), and the mutant differs only when that end lies between two digits.
    Each reader's example with digit groups and a card glued on both sides."""
    for glue in _GLUES:
        for text in (f"123{glue}{sample}{glue}4111 1111 1111 1111",
                     f"4111 1111 1111 1111{glue}{sample}{glue}555",
                     f"555-123{glue}{sample.strip()}{glue}6789"):
            spans = kernel_spans(text)
            bad = [s for s in spans if _between_digits(text, s[0]) or _between_digits(text, s[1])]
            assert not bad, (text, bad)


_PEM_OPEN = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA\n"


@pytest.mark.parametrize("lead", ["", "é ", "x\u6771 "])
def test_a_group_glued_after_a_card_up_to_the_next_finding_is_taken_in(lead):
    """A group that ends exactly where the next finding starts is taken in (``k > limit``; with
    ``>=`` it stayed in the clear). A PEM header may start right after a digit, so "-555" lies
    between the card and the key. In the twin, the text's end is the limit of the last finding
    and the glued-after tests kill ``>=`` there; the C's limit past the last finding is
    INT64_MAX, so only a next finding shows it. Non-ASCII before the card: the C maps the
    code-point limit to bytes (``k - d``)."""
    text = f"{lead}4111 1111 1111 1111-555{_PEM_OPEN}"
    n = len(lead)
    assert kernel_spans(text) == [(n, n + 23, "CREDIT_CARD", "luhn"), (n + 23, n + 79, "PRIVATE_KEY", "pem-begin")]
