"""Encoded payloads a security review found passing the structural query scanner, now flagged.

Each test asserts that the scanner, with the default ``[collections.NAME.query]`` rules, flags an
encoded payload the docs say is refused: single ``%XX`` escapes of unreserved characters, short
base64 or hex that decodes to text, all-digit hex, and ``0x``-prefixed hex. The near misses below
keep ordinary text (words, numbers, hex ids, URLs with ``%20``) unflagged. Run against both twins
(native and reference) like tests/test_scan.py.
"""
from __future__ import annotations

import pytest

from qdrant_guard.policy import QueryRules
from oracle import both

NATIVE, PYTHON = both("scan")
TWINS = pytest.mark.parametrize("impl", [NATIVE, PYTHON], ids=["native", "python"])

# The rules querycheck.validate_structure passes for a default policy (min_blob_len and
# min_percent_run are not passed there, so the scanner's own defaults, 32 and 2, apply).
_DEFAULT = QueryRules()
RULES = {
    "max_tokens": _DEFAULT.max_tokens,
    "max_repetition": _DEFAULT.max_repetition,
    "max_ngram_run": _DEFAULT.max_ngram_run,
    "encoded_payloads": _DEFAULT.encoded_payloads,
}


def kinds(impl, text: str) -> list[str]:
    return [v.kind for v in impl.scan_query(text, **RULES).violations]


@TWINS
@pytest.mark.parametrize("text", [
    "123%2D45%2D6789",  # the threat model's own example (an SSN)
    "ssn 078%2d05%2d1120 lookup",
])
def test_percent_encoding_split_by_plain_characters(impl, text: str) -> None:
    assert "percent_encoding" in kinds(impl, text)


@TWINS
@pytest.mark.parametrize("text", [
    "MTIzLTQ1LTY3ODk=",  # base64("123-45-6789")
    "NDExMSAxMTExIDExMTEgMTExMQ==",  # base64("4111 1111 1111 1111"), 28 characters before '='
])
def test_short_base64_encoded_pii(impl, text: str) -> None:
    assert "base64_blob" in kinds(impl, text)


@TWINS
@pytest.mark.parametrize("text", [
    "3132332d34352d36373839",  # hex("123-45-6789"), 22 characters
    "34313131313131313131313131313131",  # hex("4111111111111111"), 32 digits: 'a long number'
])
def test_short_or_all_digit_hex_encoded_pii(impl, text: str) -> None:
    assert "hex_blob" in kinds(impl, text)


@TWINS
@pytest.mark.parametrize("text", [
    "key 0x" + "deadbeef0123456789abcdef" * 4,
    "0X" + "DEADBEEF0123456789ABCDEF" * 4,
    "0x" + "secret-token-abc".encode().hex(),
])
def test_0x_prefixed_hex_blob(impl, text: str) -> None:
    assert "hex_blob" in kinds(impl, text) or "base64_blob" in kinds(impl, text)


@TWINS
def test_controls_that_hold(impl) -> None:
    """The same families in the forms the scanner caught before the review."""
    assert "percent_encoding" in kinds(impl, "%31%32%33%2D%34%35")
    assert "base64_blob" in kinds(impl, "QWxhZGRpbjpvcGVuIHNlc2FtZSBzZWNy")
    assert "hex_blob" in kinds(impl, "deadbeef0123456789abcdefdeadbeef")
    assert "hex_blob" in kinds(impl, "0x" + "DEADBEEF0123456789ABCDEF" * 2)


@TWINS
@pytest.mark.parametrize("text", [
    "https://example.org/my%20file.pdf",  # one escape of a reserved character
    "a 100%25 match",  # '%' itself is reserved
    "set the mask to 0x7fffffff or 0xDEADBEEF",  # short hex constants
    "deadbeefcafebabe0123",  # hex id that is not text (decodes to bytes >= 0x80)
    "card 4111111111111111 and order 3333333333333333",  # 16-digit numbers: not 24+ digits
    "internationalization Constantinople getElementById",  # long words
    "os/path/join/dirname",  # a path is a base64-alphabet run that decodes to binary
    "MTIzNDU2Nzg",  # 11 characters: under DECODE_MIN
])
def test_near_misses_stay_clean(impl, text: str) -> None:
    assert not {"percent_encoding", "base64_blob", "hex_blob"} & set(kinds(impl, text))


@TWINS
def test_percent_escape_of_unreserved_character_alone(impl) -> None:
    violations = impl.scan_query("user %41dmin", **RULES).violations
    assert [(v.kind, v.position) for v in violations] == [("percent_encoding", 5)]


@TWINS
def test_decoded_blobs_respect_the_rules(impl) -> None:
    """min_blob_len=None turns every blob check off, the decoding ones too; min_percent_run=None
    turns every percent check off."""
    off = dict(RULES, min_blob_len=None, min_percent_run=None)
    for text in ("MTIzLTQ1LTY3ODk=", "3132332d34352d36373839", "123%2D45%2D6789"):
        assert impl.scan_query(text, **off).violations == ()


def test_python_documentation_is_not_flagged() -> None:
    """The decoding rules on real prose and code: no paragraph of the standard library's pydoc
    topics has a run that decodes to text or a hidden escape."""
    from pydoc_data.topics import topics

    flagged = {name: kinds(NATIVE, text) for name, text in topics.items()}
    flagged = {name: k for name, k in flagged.items()
               if {"percent_encoding", "base64_blob", "hex_blob"} & set(k)}
    assert flagged == {}



# A false positive a second review measured with the default rules: English words of 12+ letters
# that happen to decode as base64 to printable bytes ("enchantments" is b'zw!j{fz{l'; 3 of the
# 6,623 such words of /usr/share/dict/words, in lower, capitalised or upper case).
@TWINS
@pytest.mark.parametrize("text", [
    "the enchantments of spring",
    "Installments are due monthly",
    "SCREWDRIVERS AND HAMMERS",
])
def test_words_are_not_decoded_as_base64(impl, text: str) -> None:
    assert not {"percent_encoding", "base64_blob", "hex_blob"} & set(kinds(impl, text))


@TWINS
def test_mixed_case_letters_are_still_decoded(impl) -> None:
    assert "base64_blob" in kinds(impl, "bmloISBuaWgh")  # letters-only base64 of "nih! nih!"


# A false positive a second review measured with the default rules: printf conversions whose digit
# and letter read as one escaped unreserved character ('%4d' is 'M', '%2d' is '-'), 10 in the
# standard library's sources (dis.py, datetime.py, configparser.py, http/cookies.py, ...).
@TWINS
@pytest.mark.parametrize("text", [
    "print('%4d: %s' % (line, text))",
    "'[%2d] %s' % (index, name)",
    "fmt = \"%6d\\n\"",
    "printf(\"%2e %4f\", x, y);",
    "%5f",
])
def test_printf_conversions_are_not_escapes(impl, text: str) -> None:
    assert "percent_encoding" not in kinds(impl, text)


@TWINS
@pytest.mark.parametrize("text", [
    "ssn 078%2d05%2d1120 lookup",  # printf-like escapes between digits
    "x%4d",  # a letter before it
    "%4dmin",  # a letter after it
    "%2d%2d",  # two escapes: over min_percent_run
    "user %41dmin",  # '1' is no printf conversion
    "%2D",  # nor is upper-case D
])
def test_printf_exemption_is_narrow(impl, text: str) -> None:
    assert "percent_encoding" in kinds(impl, text)
