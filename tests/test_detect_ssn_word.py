"""A bare 9-digit SSN needs "ssn" nearby as a word of its own, not as letters inside another word.

Any "ssn" used to count, so 9 digits under ``businessNumber``, ``classNumber`` or
``accessNumber`` (JSON keys, and since the payload screen reads numbers, integer values under
them) were SSNs. Every case runs on both twins (native and the pure-Python reference).
"""
from __future__ import annotations

import pytest

from qdrant_guard import _detect, _detect_py

TWINS = [pytest.param(_detect, id="native"), pytest.param(_detect_py, id="python")]

NOT_CONTEXT = ["businessNumber: 123456789", 'classNumber: "123456789"', "accessNumber=123456789",
               "myssn 123456789", "processNumber 123456789"]
CONTEXT = ["ssn: 123456789", "SSN 123456789", "SSNs: 123456789", "user_ssn=123456789", "userSsn 123456789",
           "USER_SSN 123456789", "USERSSN 123456789", "(ssn) 123456789", "éssn 123456789",
           "socialSecurityNumber 123456789", "social security number 123456789"]


@pytest.mark.parametrize("kernel", TWINS)
@pytest.mark.parametrize("text", NOT_CONTEXT)
def test_ssn_inside_another_word_is_no_context(kernel, text: str) -> None:
    assert kernel.find_spans(text) == []


@pytest.mark.parametrize("kernel", TWINS)
@pytest.mark.parametrize("text", CONTEXT)
def test_ssn_as_a_word_is_context(kernel, text: str) -> None:
    assert [t for _, _, t, _ in kernel.find_spans(text)] == ["SSN"]


@pytest.mark.parametrize("kernel", TWINS)
def test_the_word_may_start_the_window_and_the_letter_before_it_still_counts(kernel) -> None:
    # The 40-character window can begin right at "ssn": the character before it is read from the
    # text, outside the window, in both twins.
    pad = " " * 37  # "ssn" + pad is 40 characters: the window starts at the "s"
    assert kernel.find_spans("xx" + "ssn" + pad + "123456789") == []
    assert [t for _, _, t, _ in kernel.find_spans("x " + "ssn" + pad + "123456789")] == ["SSN"]
    assert kernel.find_spans("x " + "ssn" + pad + " 123456789") == []  # one more: out of the window
