"""Tests from mutation pass 16 (h-mut17 branch, 2026-12-06): the C ``card_floor`` and
``cover_cards`` mutants, hand mutants and h-card5 line mutants passes 14 and 15 left unrun, and the
twin's two unresolved mutants of pass 15. docs/security-testing.md ("Mutation pass 16") lists the
mutants and the equivalent ones. Every case goes through ``tests/oracle.py``'s ``assert_same``
(via tests/detect_cases.py's ``kernel_spans``): native and twin must give the same findings.
"""
from __future__ import annotations

from qdrant_guard.detect import redact
from tests.detect_cases import kernel_spans

# A Luhn-valid Visa number with varied digits, so 40 base64 characters starting with it have the
# entropy (>= 4.5, a '/' among them) that the AWS secret reader asks for without a context word.
_CARD = "4539578763621486"
_SECRET = _CARD + "/Ab9Zx+Qr7Lm2Kp8Wv3Ty6Nj"


def test_groups_glued_before_a_card_that_another_type_of_finding_starts_at_are_a_card_stretch():
    """Kills twin ``_cover_cards``' p20 (pass 15: the ``taken[k][2] == "CREDIT_CARD"`` test dropped
    where the card is a finding already) and its C twin (``f->items[lo].type == QG_CREDIT_CARD``
    dropped): the card floor "4539578763621486" (its dot is no decimal, "1.555." being a dot run)
    is where an AWS secret key starts, so the dot-glued groups "1.555" before it are a CREDIT_CARD
    stretch of their own; the mutants moved the secret's start back over them instead, typing the
    phone-like digits AWS_SECRET_KEY."""
    text = "1.555." + _SECRET
    assert len(_SECRET) == 40
    assert kernel_spans(text) == [(0, 5, "CREDIT_CARD", "luhn"), (6, 46, "AWS_SECRET_KEY", "entropy>=4.5")]
    assert redact(text) == "[CREDIT_CARD].[AWS_SECRET_KEY]"
    text = "aws secret 1.555." + _SECRET
    assert kernel_spans(text) == [(11, 16, "CREDIT_CARD", "luhn"), (17, 57, "AWS_SECRET_KEY", "aws-context")]
