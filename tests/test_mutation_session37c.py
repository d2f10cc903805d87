"""Tests from mutation pass 14, finished (h-mut16 branch, 2026-12-06): C ``card_floor`` and the
walk, gaps and merge of C ``cover_cards`` that pass 14 did not run, and hand-written C mutants of
both. docs/security-testing.md ("Mutation pass 14, finished") lists the mutants and the
equivalent ones. Every case goes through ``tests/oracle.py``'s ``assert_same`` (via ``kernel_spans``):
the native kernel and the twin must give the same findings.
"""
from __future__ import annotations

import pytest

from tests.test_detect import NEGATIVES, POSITIVES
from tests.detect_cases import kernel_spans

_DIGITS = "0123456789"
_CARD = "4111 1111 1111 1111"
_GLUES = ("", " ", "-", ".", " - ", "(555) ")


def _texts(sample: str):
    for glue in _GLUES:
        yield f"123{glue}{sample}{glue}{_CARD}"
        yield f"{_CARD}{glue}{sample}{glue}555"
        yield f"555-123{glue}{sample.strip()}{glue}{_CARD}.10"


@pytest.mark.parametrize("sample", [p[0] for p in POSITIVES] + list(NEGATIVES))
def test_every_card_finding_starts_at_a_digit_and_ends_after_one(sample):
    """The equivalence of C ``cover_cards``' ``f->items[k].start < ce`` -> ``<=`` (and of
    ``added[m].start < ce`` -> ``<=``) rests on this: a card floor ends before a non-digit, so only
    a CREDIT_CARD finding starting at its end could be run back over the gap before it, and every
    CREDIT_CARD finding (a reader's, one ``cover_cards`` moved back to the glued groups, or an added
    stretch) starts at a digit. Each reader's example with a card and digit groups glued on."""
    for text in _texts(sample):
        spans = kernel_spans(text)
        bad = [s for s in spans if s[2] == "CREDIT_CARD"
               and (text[s[0]] not in _DIGITS or text[s[1] - 1] not in _DIGITS)]
        assert not bad, (text, bad)


@pytest.mark.parametrize("sample", [p[0] for p in POSITIVES] + list(NEGATIVES))
def test_no_two_findings_share_a_start(sample):
    """The findings come out disjoint and by start: the equivalence of the merge's and the walk's
    ``start <`` -> ``start <=`` ties in C ``cover_cards`` (which of a finding and a stretch with the
    same start goes first) rests on no stretch starting where a finding does."""
    for text in _texts(sample):
        spans = kernel_spans(text)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (text, spans)


def test_a_finding_after_a_stretch_of_an_earlier_card_inside_a_card_still_bounds_the_gaps():
    """Kills C ``cover_cards``' step ``k++`` also after a stretch (``if (from_added) m++; k++;``):
    the card "5555 5555 5555 4444" is a stretch that reaches into the floor read from its last
    group on ("4444 - 4111 ..."), and the card finding after it inside that floor was skipped, so the
    stretch ran over the " - " and the whole second card (15-51, overlapping the finding)."""
    text = "(555) 123.5555 5555 5555 4444 - 4111 1111 1111 1111"
    assert kernel_spans(text) == [(0, 14, "PHONE", "nanp"), (15, 29, "CREDIT_CARD", "luhn"),
                            (32, 51, "CREDIT_CARD", "luhn")]


def test_a_stretch_that_goes_on_one_ends_after_its_last_digit():
    """Kills C ``cover_cards``' ``added[na - 1].end = next`` for ``e``: the stretch of
    "5555 5555 5555 4444-1234" goes on into the next floor and ends after "1234", not at the SSN
    after " - " (0-27 took the separator into the placeholder)."""
    text = "5555 5555 5555 4444-1234 - 123-45-6789 - 123-45-6789 6011 1111 1111 1117-555-123-4567 "
    assert kernel_spans(text) == [(0, 24, "CREDIT_CARD", "luhn"), (27, 38, "SSN", "ssa-rules"),
                            (41, 52, "SSN", "ssa-rules"), (53, 85, "CREDIT_CARD", "luhn")]
