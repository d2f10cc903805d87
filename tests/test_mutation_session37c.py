"""Tests from mutation pass 14, finished (h-mut16 branch, 2026-12-06): C ``card_floor`` and the
walk, gaps and merge of C ``cover_cards`` that pass 14 did not run, and hand-written C mutants of
both. docs/security-testing.md ("Mutation pass 14, finished") lists the mutants and the
equivalent ones. Every case goes through ``tests/oracle.py``'s ``assert_same`` (via ``_spans``):
the native kernel and the twin must give the same findings.
"""
from __future__ import annotations

import pytest

from tests.test_detect import NEGATIVES, POSITIVES
from tests.test_glued_card import _spans

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
        spans = _spans(text)
        bad = [s for s in spans if s[2] == "CREDIT_CARD"
               and (text[s[0]] not in _DIGITS or text[s[1] - 1] not in _DIGITS)]
        assert not bad, (text, bad)


@pytest.mark.parametrize("sample", [p[0] for p in POSITIVES] + list(NEGATIVES))
def test_no_two_findings_share_a_start(sample):
    """The findings come out disjoint and by start: the equivalence of the merge's and the walk's
    ``start <`` -> ``start <=`` ties in C ``cover_cards`` (which of a finding and a stretch with the
    same start goes first) rests on no stretch starting where a finding does."""
    for text in _texts(sample):
        spans = _spans(text)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (text, spans)
