"""The payload field screen remembers (key, value) pairs the detector found nothing in
(TextOps.clean_values): a remembered pair must screen exactly as the detector would, and a pair
with a finding, or a value that is a finding only under another key, must never be let through."""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import create, make_kit, models, unit
from qdrant_guard import GuardRefusal, QdrantClient, field_screen, textguard
from qdrant_guard.errors import QdrantGuardError

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
API = "a8f3k2j9x0q7w1e5r4t6"         # a finding only as the value of a secret-like key
PASSWORD = "Hunter2hunter2x"         # a finding only as the value of a password-like key
SSN = "123-45-6789"
EMAIL = "alice@example.com"

# Clean metadata, a finding in one leaf of several, findings split or joined across a leaf
# boundary (key/value, value/value), findings in keys, values that are findings only under a
# secret-like key, quotes and backslashes (the value is then screened bare), a long value.
PAYLOADS = [
    {"source": "doc7", "lang": "en", "title": "Onboarding guide part 3", "chunk": 4},
    {"a": "plain", "b": SSN, "c": "plain"},
    {"a": "ends with 123", "b": "-45-6789 starts the rest"},
    {"ssn 123-45": "-6789"}, {"123": "-45-6789"},
    {"a": "alice@", "b": "example.com"},
    {"note": API}, {"api_key": API}, {"note": API},
    {"note": PASSWORD}, {"pwd": PASSWORD}, {"password": PASSWORD}, {"note": PASSWORD},
    {"meta": {"deep": [{"api_key": API}, "x", EMAIL], "note": API}},
    {GHP: 1, "plain_key": "v"}, {"email_" + EMAIL: "v"}, {"v": GHP},
    {"q": 'has "quotes" and \\ a backslash ' + SSN}, {"q": 'has "quotes" only'},
    {"a": "x" * 300}, {"b": "y" * 300 + SSN},
    {"note": STRIPE}, {"note": "see " + STRIPE + " now"}, {1: API}, {"1": API},
    # A clean key that a redacted key before it in the same object became: refused as a collision.
    {"[EMAIL]": "x"}, {EMAIL: "y", "[EMAIL]": "x"}, {"[GITHUB_TOKEN]": 2}, {GHP: 1, "[GITHUB_TOKEN]": 2},
    {"text": "hello", "meta": {"text": "hello", "n": None, "f": 1.5, "b": True}},
    # Numbers, short and long, under plain, secret-like and password names; a name in a sibling field.
    {"chunk": 4, "ts": 1733356800, "ts_ms": 1733356800000, "card": 4111111111111111, "ssn": 123456789,
     "f": 4111111111111111.0, "n": 123456789, "SocialSecurityNo": 987654321, "my ssn": 123456789},
    {"db_password": 1234, "pwd": "hunter2hunter2x", "password": "********", "ssn": -12345678},
    {"env": [{"name": "DB_PASSWORD", "value": "hunter2hunter2x"}, {"name": "LOG_LEVEL", "value": "debug"}]},
]


def _guard(tmp_path, **over):
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "noise_on_write": True, "text_field": "text", "intent": {"enabled": False}}
    pol.update(over)
    client = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(client, "c")
    return client, client.guard, client.guard.policy("c")


def _screen(guard, pol, payload):
    """What the screen makes of ``payload``: the payload to store, or the refusal's message."""
    try:
        return ("stored", guard.screen_payload_fields("upsert", "c", pol, dict(payload), point_id=9))
    except QdrantGuardError as exc:
        return ("refused", f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("over", [{"credentials_in_text": "redact"}, {},
                                  {"credentials_in_text": "redact", "payload_fields": "all"}])
def test_remembered_pairs_screen_exactly_as_the_detector(tmp_path, over, monkeypatch):
    _, guard, pol = _guard(tmp_path, **over)
    # The detector's answer for each payload, with nothing remembered and no leaf passed as is.
    fresh = []
    with monkeypatch.context() as m:
        m.setattr(field_screen, "_SCALARS", ())
        m.setattr(field_screen, "_SHORT_NUMBER", 0)
        m.setattr(field_screen, "_SHORT_SSN_NUMBER", 0)
        for p in PAYLOADS:
            guard.clean_values("c").clear()
            guard.clean_keys("c").clear()
            fresh.append(_screen(guard, pol, p))
    # Then all in turn, twice, remembering as they go: every answer must be the same.
    guard.clean_values("c").clear()
    for _ in range(2):
        assert [_screen(guard, pol, p) for p in PAYLOADS] == fresh
    assert ("source", "doc7") in guard.clean_values("c")  # the shortcut did run
    assert any(r[0] == "refused" for r in fresh) or any(
        "[GENERIC_SECRET]" in str(r[1]) for r in fresh)  # and findings were among the inputs


def test_a_value_clean_under_one_key_is_still_found_under_a_secret_like_key(tmp_path):
    _, guard, pol = _guard(tmp_path, credentials_in_text="redact")
    guard.clean_values("c").clear()
    assert _screen(guard, pol, {"note": API}) == ("stored", {"note": API})
    assert ("note", API) in guard.clean_values("c")
    assert _screen(guard, pol, {"api_key": API}) == ("stored", {"api_key": "[GENERIC_SECRET]"})
    assert _screen(guard, pol, {"note": PASSWORD}) == ("stored", {"note": PASSWORD})
    assert _screen(guard, pol, {"password": PASSWORD}) == ("stored", {"password": "[GENERIC_SECRET]"})


def test_pairs_with_a_finding_are_never_remembered(tmp_path):
    _, guard, pol = _guard(tmp_path, credentials_in_text="redact", payload_fields="all")
    guard.clean_values("c").clear()
    for _ in range(2):
        assert _screen(guard, pol, {"note": STRIPE, "who": EMAIL, "api_key": API}) == (
            "stored", {"note": "[STRIPE_KEY]", "who": "[EMAIL]", "api_key": "[GENERIC_SECRET]"})
    remembered = {v for _, v in guard.clean_values("c")}
    assert not remembered & {STRIPE, EMAIL, API}


def test_refusals_are_repeated_and_audited_each_time(tmp_path):
    client, guard, pol = _guard(tmp_path)
    guard.clean_values("c").clear()
    rng = np.random.default_rng(0)
    for pid in (1, 2):
        with pytest.raises(GuardRefusal, match="credentials"):
            client.upsert("c", [models.PointStruct(id=pid, vector=unit(rng), payload={"lang": "en", "note": STRIPE})])
    audit = (tmp_path / "audit.jsonl").read_text()
    assert audit.count("CREDENTIAL_IN_TEXT") == 2 and STRIPE not in audit


def test_the_memory_is_bounded(tmp_path, monkeypatch):
    _, guard, pol = _guard(tmp_path, credentials_in_text="redact")
    monkeypatch.setattr(textguard, "_CLEAN_VALUES_MAX", 8)
    guard.clean_values("c").clear()
    for i in range(20):
        assert _screen(guard, pol, {"k": f"value {i}"}) == ("stored", {"k": f"value {i}"})
        assert len(guard.clean_values("c")) <= 8
    long = "z" * (field_screen._CLEAN_VALUE_MAX_LEN + 1)
    assert _screen(guard, pol, {"k": long}) == ("stored", {"k": long})
    assert ("k", long) not in guard.clean_values("c")


def test_a_clean_value_under_a_key_with_personal_data_is_not_remembered(tmp_path):
    # payload_fields = "credentials" stores the key as given, PII and all; it must not stay in memory.
    _, guard, pol = _guard(tmp_path, credentials_in_text="redact")
    guard.clean_values("c").clear()
    key = "contact " + EMAIL
    assert _screen(guard, pol, {key: "v"}) == ("stored", {key: "v"})
    assert not any(EMAIL in k or EMAIL in v for k, v in guard.clean_values("c"))


def test_the_memory_is_per_collection_and_writer_boundary(tmp_path):
    # Values are data: a writer of one boundary must not be able to time whether another boundary
    # (or a write to another collection) stored a value, so each has a memory of its own.
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True, "intent": {"enabled": False}}
    client = QdrantClient(":memory:", guard=kit.config({"c": pol, "d": pol}), principal=kit.principal("alice", "hr"))
    hr = client.guard
    support = client.with_principal(kit.principal("bob", "support")).guard
    payload = {"diagnosis": "seasonal flu"}
    assert _screen(hr, hr.policy("c"), payload) == ("stored", payload)
    assert ("diagnosis", "seasonal flu") in hr.clean_values("c")
    assert not support.clean_values("c") and not hr.clean_values("d")
    assert support.clean_values("c") is not hr.clean_values("c")
