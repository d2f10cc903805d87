"""How the payload screen's two rare refusals name the points a payload rewrite targets: two keys
that redact to one key, and a text field nested past 64 levels. They printed a ``set_payload``'s
ids as a Python list (``of point [1, 2]``), a filter as ``point 'by filter'`` and a collection's
metadata as ``of point None``."""
from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient

from guardkit import create, make_kit, models, unit
from qdrant_guard import QdrantClient, UnsupportedWriteError
from qdrant_guard.textguard import PointSelection, point_words, selection_of

GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
TWO_KEYS = {GHP: 1, "[GITHUB_TOKEN]": 2}  # both stored as "[GITHUB_TOKEN]" once redacted


def _nested(depth: int, leaf: str) -> object:
    out: object = leaf
    for _ in range(depth):
        out = {"a": out}
    return out


@pytest.fixture
def client(tmp_path):
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "text_field": "text", "intent": {"enabled": False},
           "credentials_in_text": "redact"}
    c = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(c, "c")
    rng = np.random.default_rng(3)
    c.upsert("c", [models.PointStruct(id=i, vector=unit(rng), payload={"text": "hello"}) for i in (1, 2)])
    return c


def test_two_keys_of_a_rewrite_of_two_points_name_both_points(client):
    with pytest.raises(UnsupportedWriteError) as ei:
        client.set_payload("c", payload=TWO_KEYS, points=[1, 2])
    msg = str(ei.value)
    assert "at '<top level>' of points 1, 2 would both be stored as '[GITHUB_TOKEN]'" in msg
    assert "[1, 2]" not in msg and GHP not in msg
    assert [RawClient.retrieve(client, "c", [i])[0].payload["text"] for i in (1, 2)] == ["hello"] * 2


def test_two_keys_of_a_rewrite_by_filter_name_the_filter(client):
    flt = models.Filter(must=[models.HasIdCondition(has_id=[1])])
    with pytest.raises(UnsupportedWriteError, match="of the points a filter selects would both be stored") as ei:
        client.set_payload("c", payload=TWO_KEYS, points=flt)
    assert "by filter'" not in str(ei.value)


def test_two_keys_of_an_upsert_still_name_its_point(client):
    rng = np.random.default_rng(4)
    with pytest.raises(UnsupportedWriteError, match="at '<top level>' of point 7 would both be stored"):
        client.upsert("c", [models.PointStruct(id=7, vector=unit(rng), payload={"text": "x", **TWO_KEYS})])


def test_two_keys_of_collection_metadata_name_no_point(client):
    guard = client.guard
    with pytest.raises(UnsupportedWriteError) as ei:
        guard.screen_collection_metadata("update_collection", "c", guard.policy("c"), TWO_KEYS)
    msg = str(ei.value)
    assert "at '<top level>' would both be stored as '[GITHUB_TOKEN]'" in msg
    assert "None" not in msg


def test_text_field_nested_too_deep_in_a_rewrite_names_the_points(client):
    with pytest.raises(UnsupportedWriteError, match=r"set_payload: points 1, 2: the text field 'text' nests objects"):
        client.set_payload("c", payload={"text": _nested(65, "x")}, points=[1, 2])
    with pytest.raises(UnsupportedWriteError, match=r"set_payload: point 2: the text field 'text' nests objects"):
        client.set_payload("c", payload=_nested(65, "x"), key="text", points=[2])
    assert RawClient.retrieve(client, "c", [2])[0].payload["text"] == "hello"


def test_point_words():
    assert point_words(5) == "point 5"
    assert point_words("5d1c2f8e-0000-4000-8000-000000000001") == "point '5d1c2f8e-0000-4000-8000-000000000001'"
    assert point_words(None) == ""
    assert point_words(selection_of([3])) == "point 3"
    assert point_words(selection_of(("a", "b"))) == "points 'a', 'b'"
    assert point_words(selection_of(list(range(1, 8)))) == "points 1, 2, 3, 4, 5 (+2 more)"
    assert point_words(selection_of(models.PointIdsList(points=[1, 2]))) == "points 1, 2"
    assert point_words(selection_of(models.Filter(must=[]))) == "the points a filter selects"
    assert point_words(PointSelection()) == "the points selected"
