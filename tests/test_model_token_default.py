"""``query.max_model_tokens`` defaults to "auto" (eight times ``max_tokens``): text without
whitespace is one token to ``max_tokens``, and only ``max_chars`` bounded it by default."""
from __future__ import annotations

import pydoc_data.topics

import pytest
from guardkit import Recorder, create, hr_policy, make_kit
from qdrant_client.http import models

from qdrant_guard import QdrantClient
from qdrant_guard.errors import ConfigError, GuardRefusal
from qdrant_guard.policy import QueryRules
from qdrant_guard.scan import scan_query

CJK = "数据库密码是什么"  # 8 characters, no spaces


def _client(tmp_path, query=None, *, glued=None):
    # CJK glued to itself is what max_glued_repetition refuses (tests/test_glued_repetition.py); it
    # is off here, where the length cap alone is measured, unless `glued` sets it.
    kit = make_kit(tmp_path)
    pol = {**hr_policy({}), "generalize_identifiers": False,
           "query": {"max_glued_repetition": glued, **(query or {})}}
    client = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"),
                          embedder=Recorder())
    create(client, "c")
    return client


def test_the_default_caps_text_without_whitespace(tmp_path):
    client = _client(tmp_path)
    with pytest.raises(GuardRefusal, match="token_cap"):
        client.query_points("c", query=models.Document(text=CJK * 600, model="m"), limit=3)  # 4,800 characters
    client.query_points("c", query=models.Document(text=CJK * 400, model="m"), limit=3)  # 3,200: under 4000
    # With the default glued-repetition cap, the same stuffing is refused whatever its length.
    (tmp_path / "glued").mkdir()
    glued = _client(tmp_path / "glued", glued=0.5)
    with pytest.raises(GuardRefusal, match=r"glued_repetition at 0: "):
        glued.query_points("c", query=models.Document(text=CJK * 400, model="m"), limit=3)


def test_the_default_follows_max_tokens(tmp_path):
    client = _client(tmp_path, {"max_tokens": 1000})
    client.query_points("c", query=models.Document(text=CJK * 600, model="m"), limit=3)  # under 8000
    with pytest.raises(GuardRefusal, match="token_cap"):
        client.query_points("c", query=models.Document(text=CJK * 1100, model="m"), limit=3)


def test_resolved_caps():
    assert QueryRules().model_token_cap() == 4000
    assert QueryRules(max_tokens=64).model_token_cap() == 512
    assert QueryRules(max_tokens=None).model_token_cap() is None
    assert QueryRules(max_model_tokens=None).model_token_cap() is None
    assert QueryRules(max_model_tokens=7, max_tokens=None).model_token_cap() == 7
    # The same object each call: the scan binding skips re-checking rules it saw last.
    assert QueryRules().model_token_cap() is QueryRules().model_token_cap()


@pytest.mark.parametrize("value", ["AUTO", "4000", 0, -3, 1.5, True])
def test_bad_values_in_a_policy_name_the_key_and_the_choices(tmp_path, value):
    kit = make_kit(tmp_path)
    with pytest.raises(ConfigError, match=r'max_model_tokens[\s\S]*positive integer or "auto"'):
        kit.config({"c": {**hr_policy({}), "query": {"max_model_tokens": value}}})


def test_auto_in_a_policy(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"c": {**hr_policy({}), "query": {"max_tokens": 100, "max_model_tokens": "auto"}}})
    assert cfg.collections["c"].query.model_token_cap() == 800


def test_real_documentation_within_max_tokens_stays_under_the_default():
    # The standard library's pydoc topics, code samples and all, cut to the default 500 tokens.
    cap = QueryRules().model_token_cap()
    for name, text in pydoc_data.topics.topics.items():
        cut = " ".join(text.split()[:500])
        result = scan_query(cut, max_tokens=None, max_repetition=None, encoded_payloads=False, max_model_tokens=cap)
        assert result.ok, (name, result.model_token_estimate)
