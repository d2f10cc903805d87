"""Mutation pass 43: native/detect.c's e-mail rules, validators and false-positive filters.

Each case kills a mutant of the C kernel that every earlier test let through (the pass's entry in
docs/security-testing.md names them). Every text runs through the native kernel and its
pure-Python twin, which must agree, and through the public ``find_sensitive``.
"""
from __future__ import annotations

import pytest

from qdrant_guard.detect import find_sensitive
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")


def found(text: str) -> list[tuple[str, str]]:
    """(type, substring) of every finding, the twins agreeing and find_sensitive the same."""
    spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
    out = [(t, text[a:b]) for a, b, t, _ in spans]
    assert [(f.type, text[f.start:f.end]) for f in find_sensitive(text)] == out
    return out


# (text, [(type, found substring), ...])
CASES = [
    # db_scheme reads a scheme of at most 32 characters; a longer one names no database, so a '?'
    # after "://" ends the authority and the address after it is found. Mutants that read a
    # 33-character scheme as its last 32 ("postgresql+...") took the '?' for the password's.
    ("Xpostgresql+" + "a" * 21 + "://u:pa?ss@corp.io", [("EMAIL", "ss@corp.io")]),
    ("postgresql+" + "a" * 21 + "://u:pa?ss@corp.io", [("DATABASE_URL_PASSWORD", "pa?ss")]),
    # ssn_word wants the three letters s, s, n: "ASN" (an autonomous system number), "PSN" or
    # "isn" before nine digits is no SSN's context (a mutant took any "?sn" or "s?n").
    ("ASN 212345678", []),
    ("PSN 212345678", []),
    ("isn: 212345678", []),
    ("SSL serial 212345678", []),
    ("ssn 212345678", [("SSN", "212345678")]),
    # ... and, glued after a capital, a capital S starts a word only as "SSN": "ADDRESSno" holds
    # "SSn" after an "E" (a mutant took every "S" there for a camelCase start)
    ("ADDRESSno 212345678", []),
    ("userSsn 212345678", [("SSN", "212345678")]),
    # camelCase starts after either end of a-z: mutants left out 'a' or 'z' before the "S"
    ("dataSsn 212345678", [("SSN", "212345678")]),
    ("bizSsn: 212345678", [("SSN", "212345678")]),
    # "ssn" one letter into the text is glued to that letter (a mutant read the first letter only
    # at index 1, so "Assn." started an SSN's context; at index 0 it read the byte before the text)
    ("Assn. member no. 212345678", []),
]


@pytest.mark.parametrize("text, expected", CASES)
def test_native_and_twin_agree_and_are_right(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected
