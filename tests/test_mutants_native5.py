"""Tests written against mutants of native/detect.c and native/scan.c that the suite let through
(scripts/mutate_c.py; docs/security-testing.md, "Mutation pass 5, native detector and scanner").

Each case names the mutant it kills (line and mutation at the time of the pass). Every case runs
through both twins with the oracle helper (native and reference must agree on it) and then through
the public API (qdrant_guard.detect.find_sensitive, qdrant_guard.scan.scan_query) against the
expected result.
"""
from __future__ import annotations

import pytest

from qdrant_guard.detect import find_sensitive
from qdrant_guard.scan import scan_query
from tests.oracle import assert_same, both

DETECT_NATIVE, DETECT_PYTHON = both("detect")
SCAN_NATIVE, SCAN_PYTHON = both("scan")

# (text, [(type, secret substring), ...])
DETECT_CASES = [
    # iban (line 446): "letter letter digit digit" with any one of its three && made || let a
    # letter stand in a check digit; mod97 reads a letter as two digits, so a run with a letter
    # there can still leave 1 (GB5K... does), and every test IBAN with a bad prefix had failed
    # mod-97 too
    ("IBAN GB5KWEST12345698765432", []),
    ("iban gb5kwest12345698765432", []),
    # iban (line 477): a lower-case IBAN needs a digit in its BBAN (from index 4): "k >= 4" negated
    # or -> "k >= 3" counted the check digits, so a lower-case run of letters after "gb75" passed;
    # "k > 4" and "k >= 5" skipped index 4, the first BBAN character, and refused an IBAN whose only
    # BBAN digit is there. The upper-case form needs no BBAN digit.
    ("gb75 west abcd efgh ijkl mn", []),
    ("GB75 WEST ABCD EFGH IJKL MN", [("IBAN", "GB75 WEST ABCD EFGH IJKL MN")]),
    ("gb10 5est abcd efgh ijkl mn", [("IBAN", "gb10 5est abcd efgh ijkl mn")]),
]

# (text, rule arguments, [(violation kind, position), ...])
SCAN_CASES: list[tuple[str | bytes, dict, list[tuple[str, int]]]] = [
    # scan_blobs (line 689): a run of min_blob_len (32) or more with a digit needs an upper- and a
    # lower-case letter to be a base64 blob; "s[k] >= 'A'" -> ">" no longer counted an A, and no
    # long test run had A for its only capital. The control, with no capital, is no blob.
    ("key k9m2p7q8r1s5t6u3v0w2y4x8n1g2h3j4A end", {}, [("base64_blob", 4)]),
    ("key k9m2p7q8r1s5t6u3v0w2y4x8n1g2h3j4b end", {}, []),
    # scan_blobs (line 703): the loop over the digits after a 0x prefix, "k < hlen" -> "<=", also
    # read the byte after the run, which is no digit, so a run of decimal digits after 0x counted
    # as having a letter: 32 of them became a hex blob (min_blob_len wants a digit and a letter),
    # and 16 that spell ASCII ("12345678") were decoded, where all-decimal hex needs 24. No test had
    # a 0x run of decimal digits only; the controls (24 such digits; one letter) are blobs.
    ("id 0x12345678901234567890123456789012 end", {}, []),
    ("id 0x3132333435363738 end", {}, []),
    ("id 0x313233343536373839303132 end", {}, [("hex_blob", 3)]),
    ("id 0x1a345678901234567890123456789012 end", {}, [("hex_blob", 3)]),
    # scan_blobs (line 704): "hdigit |= (... & C_DIGIT) != 0" -> "== 0" took any letter for a
    # digit after a 0x prefix, so 34 hex letters and no digit became a hex blob (every long 0x test
    # run mixed digits and letters)
    ("id 0xabcdefabcdefabcdefabcdefabcdefabcd end", {}, []),
    # word_shaped (lines 605-608): base64_text never decodes a run shaped like a word (all lower-
    # case, all upper-case, or one capital then lower-case). A token of letters only up to 16
    # long never gets there (scan_blobs passes it over first, word_token16), so these runs end in
    # a full stop. Each decodes to printable ASCII, so a mutant that no longer sees its word shape
    # reports a base64 blob: the lower-case range cut to 'y' ("<= 'z'" -> "<" or 'z' - 1), the
    # upper-case range without A (">= 'A'" -> ">" or 'A' + 1) or without Z ("<= 'Z'" -> "<" or
    # 'Z' - 1) or negated, and a capital at index 0 counted as a later one ("k > 0" -> ">=").
    # The suite had no such run outside a letters-only token.
    ("w dmpmekhpczlp. x", {}, []),
    ("w LTVANURWIHZH. x", {}, []),
    ("w PDVSODJKZDRJ. x", {}, []),
    ("w Smptaidrbitk. x", {}, []),
    # word_shaped (line 607): "c >= 'A' && c <= 'Z'" -> "||" took digits (every character) for
    # capitals, so a run of capitals and digits that decodes to ASCII ("W`vMcI /X") was taken for
    # a word and not decoded
    ("w V2B2TWNJIC9Y. x", {}, [("base64_blob", 2)]),
]


@pytest.mark.parametrize(("text", "expected"), DETECT_CASES)
def test_detect_twins_agree_and_are_right(text: str, expected: list[tuple[str, str]]) -> None:
    spans = assert_same(DETECT_NATIVE.find_spans, DETECT_PYTHON.find_spans, text)
    assert [(t, text[a:b]) for a, b, t, _ in spans] == expected
    assert [(f.type, text[f.start:f.end]) for f in find_sensitive(text)] == expected


@pytest.mark.parametrize(("text", "rules", "expected"), SCAN_CASES)
def test_scan_twins_agree_and_are_right(text: str | bytes, rules: dict, expected: list[tuple[str, int]]) -> None:
    assert_same(SCAN_NATIVE.scan_query, SCAN_PYTHON.scan_query, text, **rules)
    assert [(v.kind, v.position) for v in scan_query(text, **rules).violations] == expected
