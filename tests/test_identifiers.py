"""Identifier generalisation (qdrant_guard.identifiers): the rules, word by word."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from qdrant_guard.identifiers import drop_identifiers, generalize_identifiers, identifier_kind


@pytest.mark.parametrize(
    "word, kind",
    [
        ("42", "NUMBER"), ("3.11", "NUMBER"), ("2024-05-01", "NUMBER"),
        ("utf-8", "CODE"), ("A1B2", "CODE"), ("__init__", "CODE"), ("format_spec", "CODE"),
        ("sys.path", "CODE"), ("TypeError", "CODE"), ("CPython", "CODE"), ("PEP", "CODE"),
        ("e.g", None), ("built-in", None), ("python", None), ("I", None),
    ],
)
def test_word_kinds_mid_sentence(word, kind):
    assert identifier_kind(word, sentence_start=False) == kind


def test_a_capitalised_word_is_a_name_only_mid_sentence():
    assert identifier_kind("Alice", sentence_start=False) == "NAME"
    assert identifier_kind("Alice", sentence_start=True) is None
    assert identifier_kind("TypeError", sentence_start=True) == "CODE"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The cat sat. Then it ran!", "The cat sat. Then it ran!"),
        ("ask Alice about it", "ask [NAME] about it"),
        ('He said: "Hello there" to (Bob).', 'He said: "Hello there" to ([NAME]).'),
        ("first line\nSecond line", "first line\nSecond line"),
        ("her SSN is [SSN] and mail [EMAIL]", "her [CODE] is [SSN] and mail [EMAIL]"),
        # Only typed placeholders are kept in brackets (hypothesis found "[0]" kept verbatim).
        ("call [Alice] at [5551234] re [NASA]", "call [[NAME]] at [[NUMBER]] re [[CODE]]"),
        ("[0]", "[[NUMBER]]"),
        ("[AWS_ACCESS_KEY] then [NUMBER]", "[AWS_ACCESS_KEY] then [NUMBER]"),
        ("version 3.11 of CPython", "version [NUMBER] of [CODE]"),
        ("see e.g. os.path.join", "see e.g. [CODE]"),
        ("ask Zoë Müller and José", "ask [NAME] [NAME] and [NAME]"),
        ("write to O’Neil about order ٣٤٥", "write to [CODE] about order [NUMBER]"),
        ("東京 and Ōsaka", "東京 and [NAME]"),
    ],
)
def test_generalize_identifiers(text, expected):
    assert generalize_identifiers(text) == expected


def test_text_without_identifiers_is_returned_as_is():
    text = "plain lower-case words only"
    assert generalize_identifiers(text) is text


def test_non_str_is_a_type_error():
    with pytest.raises(TypeError, match="takes str, not bytes"):
        generalize_identifiers(b"42")  # type: ignore[arg-type]


@given(st.text())
def test_output_keeps_no_ascii_digit_and_is_stable(text):
    out = generalize_identifiers(text)
    assert not any(c in "0123456789" for c in out if c.isascii())
    assert generalize_identifiers(out) == out


def test_drop_identifiers_deletes_what_generalisation_replaces():
    text = "Raised by sys.path in PEP 572 when Alice calls __init__ on [SSN]."
    assert drop_identifiers(text) == "Raised by  in   when  calls  on [SSN]."
    plain = "plain lower-case words only"
    assert drop_identifiers(plain) is plain
    with pytest.raises(TypeError, match=r"drop_identifiers\(\) takes str, not bytes"):
        drop_identifiers(b"42")  # type: ignore[arg-type]


@given(st.text())
def test_dropping_leaves_the_words_generalisation_keeps(text):
    # Same rules, so the two agree word for word outside the identifiers.
    kept = generalize_identifiers(text)
    for p in ("[NUMBER]", "[CODE]", "[NAME]"):
        kept = kept.replace(p, "")
    dropped = drop_identifiers(text)
    if not any(p in text for p in ("[NUMBER]", "[CODE]", "[NAME]")):
        assert dropped == kept
