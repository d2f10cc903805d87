"""Known bypasses of the structural query scanner's documented claims (security review).

Each test asserts that the scanner, with the default ``[collections.NAME.query]`` rules, flags an
encoded payload the docs say is refused; each is expected to fail today (``xfail(strict=True)``),
so CI reports it as soon as a fix lands in both twins. The limitations are listed in
docs/threat-model.md. Run against both twins (native and reference) like tests/test_scan.py.
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
@pytest.mark.xfail(strict=True, reason=(
    "known bypass: single %XX escapes separated by other characters are never a run of "
    "min_percent_run=2, yet docs/threat-model.md names 123%2D45%2D6789 as refused query text"
))
@pytest.mark.parametrize("text", [
    "123%2D45%2D6789",  # the threat model's own example (an SSN)
    "ssn 078%2d05%2d1120 lookup",
])
def test_percent_encoding_split_by_plain_characters(impl, text: str) -> None:
    assert "percent_encoding" in kinds(impl, text)


@TWINS
@pytest.mark.xfail(strict=True, reason=(
    "known bypass: base64 shorter than min_blob_len=32 is not a blob, yet docs/threat-model.md "
    "says base64-encoded secrets/PII in query text are refused"
))
@pytest.mark.parametrize("text", [
    "MTIzLTQ1LTY3ODk=",  # base64("123-45-6789")
    "NDExMSAxMTExIDExMTEgMTExMQ==",  # base64("4111 1111 1111 1111"), 28 characters before '='
])
def test_short_base64_encoded_pii(impl, text: str) -> None:
    assert "base64_blob" in kinds(impl, text)


@TWINS
@pytest.mark.xfail(strict=True, reason=(
    "known bypass: hex shorter than min_blob_len=32, or all digits (hex of a digit string), is not "
    "a hex blob, yet docs/threat-model.md says hex-encoded secrets/PII in query text are refused"
))
@pytest.mark.parametrize("text", [
    "3132332d34352d36373839",  # hex("123-45-6789"), 22 characters
    "34313131313131313131313131313131",  # hex("4111111111111111"), 32 digits: 'a long number'
])
def test_short_or_all_digit_hex_encoded_pii(impl, text: str) -> None:
    assert "hex_blob" in kinds(impl, text)


@TWINS
@pytest.mark.xfail(strict=True, reason=(
    "known bypass: a 0x prefix puts 'x' in the run, so 0x + lowercase hex (or 0X + uppercase) of "
    "any length is neither a hex blob nor base64 (README/policy: hex blobs are rejected)"
))
@pytest.mark.parametrize("text", [
    "key 0x" + "deadbeef0123456789abcdef" * 4,
    "0X" + "DEADBEEF0123456789ABCDEF" * 4,
    "0x" + "secret-token-abc".encode().hex(),
])
def test_0x_prefixed_hex_blob(impl, text: str) -> None:
    assert "hex_blob" in kinds(impl, text) or "base64_blob" in kinds(impl, text)


@TWINS
def test_controls_that_hold(impl) -> None:
    """The same families in the forms the scanner does catch (guards the tests above against a
    broken import or wrong rules making them 'fail' for the wrong reason)."""
    assert "percent_encoding" in kinds(impl, "%31%32%33%2D%34%35")
    assert "base64_blob" in kinds(impl, "QWxhZGRpbjpvcGVuIHNlc2FtZSBzZWNy")
    assert "hex_blob" in kinds(impl, "deadbeef0123456789abcdefdeadbeef")
    assert "base64_blob" in kinds(impl, "0x" + "DEADBEEF0123456789ABCDEF" * 2)
