"""A number after a '+' that is no phone number is read as if the '+' were not there.

Before, a '+' right before a digit run ended its reading whenever the run was not an E.164 phone
number from that '+': a '+' glued to a word (``ssn+123-45-6789``), or a shape E.164 does not take
(``+123.45.6789``), hid a valid SSN or card entirely (the twenty-fifth review's detector notes).
"""
from __future__ import annotations

import pytest

from oracle import both

NATIVE, PY = both("detect")


def _found(text: str) -> list[tuple[str, str]]:
    native, ref = NATIVE.find_spans(text), PY.find_spans(text)
    assert native == ref, text
    return [(t, text[s:e]) for s, e, t, _ in native]


@pytest.mark.parametrize("text,expected", [
    ("ssn+123-45-6789", ("SSN", "123-45-6789")),
    ("a+123-45-6789", ("SSN", "123-45-6789")),
    ("x+123 45 6789", ("SSN", "123 45 6789")),
    ("1+123-45-6789", ("SSN", "123-45-6789")),
    ("SSN:x+123-45 6789 on file", ("SSN", "123-45 6789")),
    ("+123.45.6789", ("SSN", "123.45.6789")),
    ("id+123--45--6789", ("SSN", "123--45--6789")),
    ("a+4111-1111-1111-1111", ("CREDIT_CARD", "4111-1111-1111-1111")),
    ("pay+4111 1111 1111 1111 now", ("CREDIT_CARD", "4111 1111 1111 1111")),
    ("call +1.415.555.1234 now", ("PHONE", "+1.415.555.1234")),  # whole since h-det4
])
def test_a_number_the_plus_does_not_make_a_phone_is_still_read(text: str, expected: tuple[str, str]) -> None:
    assert expected in _found(text)


@pytest.mark.parametrize("text,expected", [
    # E.164 from the '+' keeps the whole number, '+' included, as before.
    ("+123-45-6789", ("PHONE", "+123-45-6789")),
    ("note: +123-45-6789 is mine", ("PHONE", "+123-45-6789")),
    ("+1 (234) 567-8901", ("PHONE", "+1 (234) 567-8901")),
    ("+44 20 7946 0958", ("PHONE", "+44 20 7946 0958")),
])
def test_a_phone_from_its_plus_is_unchanged(text: str, expected: tuple[str, str]) -> None:
    assert _found(text) == [expected]


@pytest.mark.parametrize("text", [
    # signed decimals, offsets, versions and short runs after a '+': nothing to find
    "+3.14159265", "+123.45", "+05:30", "+1.2.3", "v+1.2.3456", "a+123-45-678", "x+12-34-5678",
    "+44.20.7946.0", "+12.34.56.78.90", "1.0.0+20130313144700", "a+1234", "+(123)-45-678",
    # the SSA rules and Luhn still apply once the '+' is set aside
    "ssn+666-12-3456", "ssn+000-12-3456", "ssn+123-00-6789", "ssn+900-45-6789", "a+4111-1111-1111-1112",
])
def test_no_finding_after_a_plus_where_none_is_due(text: str) -> None:
    assert _found(text) == []


def test_redact_removes_an_ssn_behind_a_glued_plus() -> None:
    from qdrant_guard.detect import classify_text, redact

    text = "customer ssn+123-45-6789, card a+4111-1111-1111-1111"
    out = redact(text)
    assert "123-45-6789" not in out and "4111-1111-1111-1111" not in out
    assert "[SSN]" in out and "[CREDIT_CARD]" in out
    assert str(classify_text(text)).endswith("PII")
