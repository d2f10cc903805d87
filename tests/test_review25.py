"""Twenty-third review (adversarial, query scanning and detection): regressions for the bypasses
it found. docs/security-testing.md, "Twenty-third review"."""
from __future__ import annotations

import pytest
from guardkit import Recorder, create, hr_policy, make_kit
from qdrant_client.http import models

from qdrant_guard import QdrantClient
from qdrant_guard.detect import find_sensitive, redact

SSN = "123-45-6789"


def _in_digits(text: str, zero: int) -> str:
    return "".join(chr(zero + int(c)) if c.isdigit() else c for c in text)


# Decimal digit sets outside the BMP (Unicode 14): Osmanya, Adlam, segmented digits, Brahmi.
ASTRAL_ZEROS = [0x104A0, 0x1E950, 0x1FBF0, 0x11066]


@pytest.mark.parametrize("zero", ASTRAL_ZEROS, ids=hex)
def test_an_ssn_in_decimal_digits_outside_the_bmp_is_found(zero):
    # The folded view knew the BMP's digit sets and the mathematical digits only, so an SSN in
    # Adlam or Osmanya digits (Unicode decimal digits, as docs/threat-model.md says are seen
    # through) was not found.
    text = f"my ssn is {_in_digits(SSN, zero)} thanks"
    assert [f.type for f in find_sensitive(text)] == ["SSN"]
    assert redact(text) == "my ssn is [SSN] thanks"


@pytest.mark.parametrize("zero", ASTRAL_ZEROS, ids=hex)
def test_a_card_in_decimal_digits_outside_the_bmp_is_found(zero):
    text = f"card {_in_digits('4111 1111 1111 1111', zero)} exp 12/29"
    assert "CREDIT_CARD" in [f.type for f in find_sensitive(text)]


@pytest.mark.parametrize("text", [
    "write to john.doe\ufe6bexample.com please",  # SMALL COMMERCIAL AT
    "write to john.doe\ufe6bexample\ufe52com please",  # and SMALL FULL STOP
])
def test_an_email_with_small_form_punctuation_is_found(text):
    # NFKC folds the small form variants (U+FE50..U+FE6B) to ASCII as it folds full-width forms;
    # full-width @ was seen through, the small @ was not.
    assert [f.type for f in find_sensitive(text)] == ["EMAIL"]


def test_a_query_with_an_adlam_ssn_reaches_the_embedder_redacted(tmp_path):
    kit = make_kit(tmp_path)
    pol = {**hr_policy({}), "generalize_identifiers": False}
    emb = Recorder()
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"), embedder=emb)
    create(owner, "c")
    owner.query_points("c", query=models.Document(text=f"claims of ssn {_in_digits(SSN, 0x1E950)}", model="m"), limit=3)
    assert emb.seen == ["claims of ssn [SSN]"]


def test_plain_text_in_astral_scripts_is_not_folded_into_findings():
    # The digit sets are folded, other astral letters are left alone (no false positive).
    text = "\U0001e900\U0001e901\U0001e902 \U000104a0 ok"  # Adlam letters, one Osmanya zero
    assert find_sensitive(text) == []


def test_an_aws_key_in_mathematical_letters_is_found():
    # Mathematical alphanumeric letters (U+1D400..U+1D6A3) are NFKC-equivalent to ASCII, as
    # full-width letters are, which were already seen through.
    bold = "".join(chr(0x1D400 + ord(c) - 65) if c.isupper() else c for c in "AKIA")
    text = f"key {bold}4QWERTZUI7OPLKJH"
    assert [f.type for f in find_sensitive(text)] == ["AWS_ACCESS_KEY"]
    assert redact(text) == "key [AWS_ACCESS_KEY]"


def test_an_ssn_in_superscript_digits_is_found():
    sup = dict(zip("0123456789", "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"))
    text = "ssn " + "".join(sup.get(c, c) for c in SSN)
    assert [f.type for f in find_sensitive(text)] == ["SSN"]
    sub = "ssn " + "".join(chr(0x2080 + int(c)) if c.isdigit() else c for c in SSN)
    assert [f.type for f in find_sensitive(sub)] == ["SSN"]


def test_query_max_model_tokens_bounds_text_without_whitespace(tmp_path):
    # max_tokens counts whitespace tokens: a phrase glued to itself is one token and passed. The
    # policy had no way to set the scanner's subword cap; query.max_model_tokens passes it.
    from qdrant_guard.errors import GuardRefusal

    kit = make_kit(tmp_path)
    stuffed = "passwordleak" * 400
    # glued_repetition (default 0.5 since this test was written) refuses the stuffing too: off
    # here, so the test still measures the token cap alone (h-rev27 found it failing on the merge).
    base = {**hr_policy({}), "generalize_identifiers": False, "query": {"max_glued_repetition": 1}}
    open_client = QdrantClient(":memory:", guard=kit.config({"c": base}), principal=kit.principal("alice", "hr"),
                               embedder=Recorder())
    create(open_client, "c")
    open_client.query_points("c", query=models.Document(text=stuffed, model="m"), limit=3)  # one token: passes

    capped = {**base, "query": {"max_model_tokens": 1000, "max_glued_repetition": 1}}
    client = QdrantClient(":memory:", guard=kit.config({"c": capped}), principal=kit.principal("alice", "hr"),
                          embedder=Recorder())
    create(client, "c")
    with pytest.raises(GuardRefusal, match="token_cap"):
        client.query_points("c", query=models.Document(text=stuffed, model="m"), limit=3)
    client.query_points("c", query=models.Document(text="what is the refund policy", model="m"), limit=3)
