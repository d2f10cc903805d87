"""Fifteenth review: today's payload screen and filter rules against ordinary usage, on real
local-mode Qdrant (see docs/security-testing.md, "Thirteenth review"). Each test fails on the code
before its fix."""
from __future__ import annotations

import asyncio

import pytest

from guardkit import make_kit, models
from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient

POLICIES = {
    "kb": {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text", "diversity": {"enabled": False}},
    "wiki": {"class": "PUBLIC", "text_field": "text"},
}
VEC = [1.0, 0.0, 0.0, 0.0]


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _client(kit):
    c = QdrantClient(":memory:", guard=kit.config(POLICIES), principal=kit.principal("alice", "hr"))
    for n in POLICIES:
        c.create_collection(n, vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    return c


def _refused(call) -> str:
    with pytest.raises(GuardRefusal) as e:
        call()
    return str(e.value)


@pytest.mark.parametrize("name", ["kb", "wiki"])
def test_a_flag_under_a_password_name_is_refused_naming_the_rule_and_the_fix(kit, name):
    # {"has_password": "yes"} is a password by the password-name rule (documented), but the refusal
    # said only GENERIC_SECRET, which does not tell a writer why "yes" is a secret nor what to do.
    c = _client(kit)
    msg = _refused(lambda: c.upsert(name, [models.PointStruct(id=1, vector=VEC, payload={"has_password": "yes"})]))
    assert "password name 'has_password'" in msg and "true/false" in msg
    c.upsert(name, [models.PointStruct(id=1, vector=VEC, payload={"has_password": True})])  # the fix it names


def test_a_value_refused_under_a_sibling_name_names_that_name(kit):
    # {"name": "Forgot password", "value": "/account/forgot"}: the value's path ("links[0].value") does
    # not hold the name that made it a password; the refusal named neither.
    c = _client(kit)
    point = models.PointStruct(id=1, vector=VEC, payload={"links": [{"name": "Forgot password", "value": "/account/forgot"}]})
    msg = _refused(lambda: c.upsert("kb", [point]))
    assert "links[0].value" in msg and "password name 'Forgot password'" in msg
    assert "/account/forgot" not in msg


def test_a_filter_flag_under_a_password_name_is_refused_naming_the_rule_and_the_fix(kit):
    c = _client(kit)
    c.upsert("kb", [models.PointStruct(id=1, vector=VEC, payload={"has_password": True})])

    def count(value):
        flt = models.Filter(must=[models.FieldCondition(key="has_password", match=models.MatchValue(value=value))])
        return c.count("kb", count_filter=flt).count

    msg = _refused(lambda: count("enabled"))
    assert "key 'has_password'" in msg and "password name 'has_password'" in msg and "match a flag as true/false" in msg
    assert "enabled" not in msg
    assert count(True) == 1
    audit = (kit.tmp / "audit.jsonl").read_text()
    assert "CREDENTIAL_IN_TEXT" in audit and "enabled" not in audit  # the value is in neither


def test_a_detector_finding_adds_no_password_hint(kit):
    # The hint is the password-name rule's only: a card under an ordinary key is the detector's.
    c = _client(kit)
    msg = _refused(lambda: c.upsert("wiki", [models.PointStruct(id=1, vector=VEC, payload={"order": 4000000000000002})]))
    assert "CREDIT_CARD" in msg and "password name" not in msg


def test_async_refusals_carry_the_same_hint(kit):
    async def run():
        a = AsyncQdrantClient(":memory:", guard=kit.config(POLICIES), principal=kit.principal("alice", "hr"))
        await a.create_collection("kb", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
        msgs = []
        for call in (a.upsert("kb", [models.PointStruct(id=1, vector=VEC, payload={"db_password": "letmein"})]),
                     a.count("kb", count_filter=models.Filter(must=[models.FieldCondition(
                         key="user.password", match=models.MatchValue(value="letmein"))]))):
            with pytest.raises(GuardRefusal) as e:
                await call
            msgs.append(str(e.value))
        return msgs

    stored, filtered = asyncio.run(run())
    assert "password name 'db_password'" in stored and "password name 'user.password'" in filtered
    assert all("letmein" not in m for m in (stored, filtered))
