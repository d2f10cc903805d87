"""A QUERY_REJECTED refusal of the structural scan says what the text failed (each kind's first
detail and position), what to change in the text, and which policy keys decide those kinds, so a
user whose legitimate queries are refused can tell the rule from the text (a new user's walk found
only the kinds named). Real guard, local-mode Qdrant."""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import audit_records, create, make_kit, models, unit
from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.textfold import scan_refusal_text


@pytest.fixture()
def cl(tmp_path):
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}}
    client = QdrantClient(":memory:", guard=kit.config({"my docs": pol, "c": pol}),
                          principal=kit.principal("alice", "hr"))
    for name in ("c", "my docs"):
        create(client, name)
        client.upsert(name, [models.PointStruct(id=i, vector=unit(np.random.default_rng(i)), payload={"text": "t"})
                             for i in range(3)])
    client.kit = kit
    return client


def _refusal(cl, text: str, collection: str = "c") -> GuardRefusal:
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points(collection, query=unit(np.random.default_rng(9)), query_text=text, limit=2)
    assert ei.value.verdict == "QUERY_REJECTED"
    return ei.value


def test_repetition_names_the_measured_ratio_and_its_key(cl) -> None:
    msg = str(_refusal(cl, "dump " * 40 + "the records"))
    assert "repetition at 5: repetition ratio 0.929 > max_repetition=0.5" in msg
    assert "remove the repeated words" in msg
    assert "[collections.c.query] max_repetition decides it" in msg
    assert audit_records(cl.kit)[-1]["verdict"] == "QUERY_REJECTED"


def test_token_cap_and_repetition_together(cl) -> None:
    msg = str(_refusal(cl, "word " * 600))
    assert "token_cap at 2500: 600 whitespace tokens > max_tokens=500" in msg
    assert "shorten it, remove the repeated words" in msg
    assert "[collections.c.query] max_repetition, max_tokens decide them" in msg


def test_encoded_payload_names_encoded_payloads(cl) -> None:
    msg = str(_refusal(cl, "show me %2e%2e%2f%2e%2e%2fetc%2fpasswd please"))
    assert "percent_encoding at 8: run of 6 %XX escape(s)" in msg
    assert "send the text decoded" in msg
    assert "encoded_payloads decides it" in msg


def test_characters_no_key_admits_say_so_and_name_no_key(cl) -> None:
    msg = str(_refusal(cl, "who can read the salary\u200b table"))
    assert "invisible_char at 23: U+200B" in msg
    assert "(always refused)" in msg
    assert "decide" not in msg


def test_a_collection_name_toml_must_quote_is_quoted(cl) -> None:
    msg = str(_refusal(cl, "dump " * 40, collection="my docs"))
    assert '[collections."my docs".query] max_repetition decides it' in msg


def test_full_text_filter_match_gets_the_same_wording(cl) -> None:
    flt = models.Filter(must=[models.FieldCondition(key="text", match=models.MatchText(text="all " * 30))])
    with pytest.raises(GuardRefusal) as ei:
        cl.scroll("c", scroll_filter=flt, limit=2)
    assert ei.value.verdict == "QUERY_REJECTED"
    assert "failed structural validation: repetition at 4: repetition ratio 0.967 > max_repetition=0.5" in str(ei.value)
    assert "max_repetition decides it" in str(ei.value)


def test_each_kind_once_and_the_model_token_cap_named() -> None:
    text = scan_refusal_text([
        {"kind": "base64_blob", "position": 4, "detail": "71-character base64-like run"},
        {"kind": "base64_blob", "position": 90, "detail": "40-character base64-like run"},
        {"kind": "token_cap", "position": 7, "detail": "4100 estimated model tokens > max_model_tokens=4000"},
    ], "c")
    assert text.count("base64_blob") == 1 and "at 90" not in text
    assert "encoded_payloads, max_model_tokens decide them" in text

