"""payload_fields: every string of a stored payload (values and keys, at any depth) is screened,
not only the text field, on every write path, against real local-mode Qdrant."""
from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from guardkit import DIM, create, make_kit, models, snapshot, unit
from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient, UnsupportedWriteError
from qdrant_guard.receipts import RECEIPT_KEY
from qdrant_guard.receipts import verify as verify_stored

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
API = "a8f3k2j9x0q7w1e5r4t6"         # found only as the value of a secret-like key
PASSWORD = "Hunter2hunter2x"         # found only as the value of a password-like key
SSN = "123-45-6789"
EMAIL = "alice@example.com"
RAW = (STRIPE, GHP, API, PASSWORD, SSN, EMAIL)

# Ordinary metadata: none of it may change, byte for byte, under any setting.
ORDINARY = {
    "count": 42, "price": 19.99, "flag": True,
    "id": "550e8400-e29b-41d4-a716-446655440000",
    "token": "550e8400-e29b-41d4-a716-446655440000",
    "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "api_key_sha1": "3f786850e387550fdab836ed7e6dc881de23001b",
    "commit": "9fceb02d0ae598e95dc970b74767f19372d61af8",
    "created": "2024-05-01T12:30:00Z", "day": "2024-05-01",
    "title": "Quarterly report for the northern region", "lang": "en", "category": "finance",
    "url": "https://example.com/docs/page?x=1&page=2", "source": "doc-42.pdf",
    "token_type": "Bearer", "auth_provider": "google-oauth2-provider", "password_policy": "strict",
    "tags": ["alpha", "beta", 3, {"k": "v"}], "nested": {"a": {"b": ["c", 1.5]}},
}

# The secrets, each somewhere else in a payload (every one of them was stored as given before).
SHAPES = {
    "value": {"note": STRIPE},
    "nested value": {"meta": {"x": [{"y": STRIPE}]}},
    "key": {GHP: 1},
    "nested key": {"meta": {GHP: "v"}},
    "api_key value": {"api_key": API},
    "password value": {"creds": [{"password": PASSWORD}]},
}

SECRETS = {"note": STRIPE, "meta": {"e": SSN, "deep": [{"api_key": API}], "who": [EMAIL]}, GHP: 1,
           "password": PASSWORD}


def _expected(pii: bool) -> dict:
    """SECRETS as stored when credentials are redacted (``pii``: personal data too)."""
    return {"note": "[STRIPE_KEY]",
            "meta": {"e": "[SSN]" if pii else SSN, "deep": [{"api_key": "[GENERIC_SECRET]"}],
                     "who": ["[EMAIL]" if pii else EMAIL]},
            "[GITHUB_TOKEN]": 1, "password": "[GENERIC_SECRET]"}


def _kit_client(tmp_path, **over):
    kit = make_kit(tmp_path)
    sens = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True, "text_field": "text",
            "intent": {"enabled": False}}
    pub = {"class": "PUBLIC", "text_field": "text"}
    sens.update(over.get("sens", {}))
    pub.update(over.get("pub", {}))
    cfg = kit.config({"c": sens, "pub": pub})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    rng = np.random.default_rng(0)
    for name in ("c", "pub"):
        create(client, name)
        client.upsert(name, [models.PointStruct(id=1, vector=unit(rng), payload={"text": "hello"})])
    return kit, client


def _vec(pid: int) -> list[float]:
    return unit(np.random.default_rng(pid))


def _write(c, col, form, payload, pid=2):
    """Write ``payload`` by ``form`` to point ``pid`` (new) or, for payload changes, point 1."""
    pt = models.PointStruct(id=pid, vector=_vec(pid), payload=payload)
    forms = {
        "upsert": lambda: c.upsert(col, [pt]),
        "upsert Batch": lambda: c.upsert(col, models.Batch(ids=[pid], vectors=[_vec(pid)], payloads=[payload])),
        "upload_points": lambda: c.upload_points(col, [pt], wait=True),
        "upload_collection": lambda: c.upload_collection(col, vectors=[_vec(pid)], payload=[payload], ids=[pid],
                                                         wait=True),
        "batch upsert": lambda: c.batch_update_points(col, [models.UpsertOperation(
            upsert=models.PointsList(points=[pt]))]),
        "set_payload": lambda: c.set_payload(col, payload=payload, points=[1]),
        "set_payload key": lambda: c.set_payload(col, payload=payload, points=[1], key="meta"),
        "overwrite_payload": lambda: c.overwrite_payload(col, payload=payload, points=[1]),
        "batch set_payload": lambda: c.batch_update_points(col, [models.SetPayloadOperation(
            set_payload=models.SetPayload(payload=payload, points=[1]))]),
        "batch set_payload key": lambda: c.batch_update_points(col, [models.SetPayloadOperation(
            set_payload=models.SetPayload(payload=payload, points=[1], key="meta"))]),
        "batch overwrite_payload": lambda: c.batch_update_points(col, [models.OverwritePayloadOperation(
            overwrite_payload=models.SetPayload(payload=payload, points=[1]))]),
    }
    forms[form]()


FORMS = ["upsert", "upsert Batch", "upload_points", "upload_collection", "batch upsert", "set_payload",
         "set_payload key", "overwrite_payload", "batch set_payload", "batch set_payload key",
         "batch overwrite_payload"]


def _stored(client, col, form, pid=2):
    """The payload the write by ``form`` stored (without the receipt container), read back with
    qdrant-client; for ``... key`` forms, the object below the key."""
    by_id = {p: payload for p, payload, _ in snapshot(client, col)}
    payload = dict(by_id[1 if "payload" in form else pid])
    payload.pop(RECEIPT_KEY, None)
    if form in ("set_payload", "batch set_payload"):
        assert payload.pop("text") == "hello"  # point 1's, kept by a set
    return payload["meta"] if form.endswith(" key") else payload


def _audit_text(kit) -> str:
    return (kit.tmp / "audit.jsonl").read_text()


def _no_raw(text: str) -> None:
    for secret in RAW:
        assert secret not in text, secret


# -- sensitive collections -------------------------------------------------------------------------

@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("form", FORMS)
def test_default_refuses_a_credential_anywhere_in_the_payload(tmp_path, form, shape):
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "c")
    with pytest.raises(GuardRefusal) as ei:
        _write(client, "c", form, SHAPES[shape])
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert snapshot(client, "c") == before
    _no_raw(_audit_text(kit))
    _no_raw(str(ei.value))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("mode", ["credentials", "all"])
def test_redaction_of_every_field_and_key_with_receipts_that_still_verify(tmp_path, form, mode):
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact", "payload_fields": mode})
    _write(client, "c", form, {**ORDINARY, **SECRETS})
    stored = _stored(client, "c", form)
    assert stored == {**ORDINARY, **_expected(pii=mode == "all")}
    # Byte for byte: every ordinary field (and their order) is what was sent.
    assert json.dumps({k: stored[k] for k in ORDINARY}) == json.dumps(ORDINARY)
    _no_raw(_audit_text(kit))
    reports = verify_stored(client, "c", trusted_keys=client.guard.trusted_receipt_keys)
    assert reports and all(r.ok for r in reports), [r.reason for r in reports]


def test_all_redacts_pii_in_other_fields_even_where_the_text_field_keeps_it(tmp_path):
    kit, client = _kit_client(tmp_path, sens={"payload_fields": "all", "raw_in_boundary": True,
                                              "keep_payload_text_in_boundary": True})
    _write(client, "c", "upsert", {"text": f"SSN {SSN}", "meta": {"e": SSN}, EMAIL: "x"})
    stored = _stored(client, "c", "upsert")
    assert stored == {"text": f"SSN {SSN}", "meta": {"e": "[SSN]"}, "[EMAIL]": "x"}


def test_credentials_mode_stores_pii_in_other_fields_as_given(tmp_path):
    kit, client = _kit_client(tmp_path)
    _write(client, "c", "upsert", {"meta": {"e": SSN}, EMAIL: "x", "note": STRIPE.replace("sk_live_", "")})
    assert _stored(client, "c", "upsert") == {"meta": {"e": SSN}, EMAIL: "x",
                                              "note": STRIPE.replace("sk_live_", "")}
    with pytest.raises(GuardRefusal):
        _write(client, "c", "upsert", {"meta": {"e": SSN}, "k": STRIPE}, pid=3)


def test_text_field_mode_is_the_old_behaviour(tmp_path):
    kit, client = _kit_client(tmp_path, sens={"payload_fields": "text_field"},
                              pub={"payload_fields": "text_field"})
    for col in ("c", "pub"):
        _write(client, col, "upsert", {"note": STRIPE, GHP: 1, "meta": {"e": SSN}})
        assert _stored(client, col, "upsert") == {"note": STRIPE, GHP: 1, "meta": {"e": SSN}}
        with pytest.raises(GuardRefusal):  # the text field is still screened
            _write(client, col, "upsert", {"text": STRIPE}, pid=3)


def test_keys_that_redact_to_the_same_key_are_refused(tmp_path):
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact"})
    other = "ghp_26C7e42F292c6912E7710c838347Ae178B4b"
    before = snapshot(client, "c")
    with pytest.raises(UnsupportedWriteError):
        _write(client, "c", "upsert", {"m": {GHP: 1, other: 2}})
    with pytest.raises(UnsupportedWriteError):
        _write(client, "c", "upsert", {"[GITHUB_TOKEN]": 0, GHP: 1})
    assert snapshot(client, "c") == before
    _no_raw(_audit_text(kit))
    assert other not in _audit_text(kit)


def test_a_redacted_key_set_earlier_in_a_batch_is_dropped_by_a_later_overwrite(tmp_path):
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact"})
    client.upsert("c", [models.PointStruct(id=2, vector=_vec(2), payload={"n": 2})])
    client.batch_update_points("c", [
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={GHP: 1}, points=[1])),
        models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"a": 1}, points=[1])),
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={GHP: 2}, points=[2])),
    ])
    stored = {pid: {k: v for k, v in p.items() if k != RECEIPT_KEY} for pid, p, _ in snapshot(client, "c")}
    assert stored == {1: {"a": 1}, 2: {"n": 2, "[GITHUB_TOKEN]": 2}}


def test_the_receipt_container_is_left_alone(tmp_path):
    # The guard writes and verifies it itself; a screened signature or salt would break the receipt.
    kit, client = _kit_client(tmp_path, sens={"payload_fields": "all", "credentials_in_text": "redact"})
    _write(client, "c", "upsert", {"note": STRIPE})
    (_, payload, _), = [r for r in snapshot(client, "c") if r[0] == 2]
    assert payload["note"] == "[STRIPE_KEY]" and RECEIPT_KEY in payload
    before = payload[RECEIPT_KEY]
    client.set_payload("c", payload={"x": EMAIL}, points=[2])
    (_, payload, _), = [r for r in snapshot(client, "c") if r[0] == 2]
    assert payload[RECEIPT_KEY] == before and payload["x"] == "[EMAIL]"
    reports = verify_stored(client, "c", trusted_keys=client.guard.trusted_receipt_keys)
    assert all(r.ok for r in reports), [r.reason for r in reports]


# -- PUBLIC collections -----------------------------------------------------------------------------

@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("found", [{"meta": {"e": SSN}}, {"note": STRIPE}, {"m": [{EMAIL: 1}]}])
def test_public_refuses_any_finding_in_any_field_as_mislabelled(tmp_path, form, found):
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "pub")
    with pytest.raises(GuardRefusal) as ei:
        _write(client, "pub", form, found)
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(client, "pub") == before
    _no_raw(_audit_text(kit))


@pytest.mark.parametrize("form", FORMS)
def test_public_with_redaction_allowed_redacts_every_field_and_key(tmp_path, form):
    kit, client = _kit_client(tmp_path, pub={"allow_redaction_on_public": True, "credentials_in_text": "redact"})
    _write(client, "pub", form, {**ORDINARY, **SECRETS})
    stored = _stored(client, "pub", form)
    assert stored == {**ORDINARY, **_expected(pii=True)}
    assert json.dumps({k: stored[k] for k in ORDINARY}) == json.dumps(ORDINARY)


def test_public_set_payload_key_path_with_a_finding_is_refused(tmp_path):
    kit, client = _kit_client(tmp_path, pub={"allow_redaction_on_public": True, "credentials_in_text": "redact"})
    before = snapshot(client, "pub")
    for key in (f"meta.{EMAIL}", GHP):
        with pytest.raises(GuardRefusal) as ei:
            client.set_payload("pub", payload={"a": 1}, points=[1], key=key)
        assert ei.value.verdict == "SENSITIVITY_MISMATCH"
        with pytest.raises(GuardRefusal):
            client.batch_update_points("pub", [models.SetPayloadOperation(
                set_payload=models.SetPayload(payload={"a": 1}, points=[1], key=key))])
    assert snapshot(client, "pub") == before
    _no_raw(_audit_text(kit))


@pytest.mark.parametrize("col", ["c", "pub"])
def test_ordinary_payloads_are_stored_unchanged_next_to_a_screened_field(tmp_path, col):
    kit, client = _kit_client(tmp_path, sens={"payload_fields": "all", "credentials_in_text": "redact"},
                              pub={"allow_redaction_on_public": True, "credentials_in_text": "redact"})
    _write(client, col, "upsert", {**ORDINARY, "text": "plain words"})
    assert json.dumps(_stored(client, col, "upsert")) == json.dumps({**ORDINARY, "text": "plain words"})
    # The same payload with one secret-bearing field changes in that field only.
    _write(client, col, "upsert", {**ORDINARY, "password": PASSWORD}, pid=3)
    assert json.dumps(_stored(client, col, "upsert", pid=3)) == json.dumps(
        {**ORDINARY, "password": "[GENERIC_SECRET]"})


# -- the async client: the same pipeline -------------------------------------------------------------

def test_async_client_screens_every_field(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"c": {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False},
                            "credentials_in_text": "redact"},
                      "pub": {"class": "PUBLIC"}})

    async def main():
        client = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        for col in ("c", "pub"):
            await client.create_collection(col, vectors_config=models.VectorParams(
                size=DIM, distance=models.Distance.COSINE))
        await client.upsert("c", [models.PointStruct(id=1, vector=_vec(1), payload={"m": {"k": STRIPE}, GHP: 1})])
        await client.set_payload("c", payload={"password": PASSWORD}, points=[1])
        with pytest.raises(GuardRefusal) as ei:
            await client.upsert("pub", [models.PointStruct(id=1, vector=_vec(1), payload={"m": {"e": SSN}})])
        assert ei.value.verdict == "SENSITIVITY_MISMATCH"
        records, _ = await client.scroll("c", limit=10, with_payload=True)
        assert (await client.count("pub")).count == 0
        return records

    (record,) = asyncio.run(main())
    payload = {k: v for k, v in record.payload.items() if k != RECEIPT_KEY}
    assert payload == {"m": {"k": "[STRIPE_KEY]"}, "[GITHUB_TOKEN]": 1, "password": "[GENERIC_SECRET]"}
    _no_raw(_audit_text(kit))


def test_only_keys_without_findings_are_remembered_between_calls(tmp_path):
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact"})
    _write(client, "c", "upsert", {GHP: 1, "plain_key": 2})
    assert _stored(client, "c", "upsert") == {"[GITHUB_TOKEN]": 1, "plain_key": 2}
    assert "plain_key" in client.guard.clean_keys("c") and GHP not in client.guard.clean_keys("c")
    # A remembered key is still screened with its value.
    _write(client, "c", "upsert", {"plain_key": STRIPE}, pid=3)
    assert _stored(client, "c", "upsert", pid=3) == {"plain_key": "[STRIPE_KEY]"}


def test_what_the_docs_say_is_and_is_not_found(tmp_path):
    # docs/threat-model.md and the payload_fields docstring: found under a secret-like key by the
    # detector's rules for assigned secrets, any value under a password name (here or in a sibling
    # "name" field), numbers as their digits; a plain value under another name, a name in a field
    # not so named, PII under "credentials" (numbers too) and fractions pass.
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact"})
    passes = {"db_pass": {"token": "hunter2hunter2x"}, "ssn_int": 123456789, "ratio": 4111111111111111.5,
              "split": {"label": "db_password", "data": "hunter2hunter2x"}, "masked": {"password": "********"}}
    _write(client, "c", "upsert", {**passes, "api_key": API, "pwd": PASSWORD, "plain": {"password": "hunter2x"},
                                   "env": [{"name": "db_password", "value": "hunter2x"}]})
    assert _stored(client, "c", "upsert") == {**passes, "api_key": "[GENERIC_SECRET]", "pwd": "[GENERIC_SECRET]",
                                              "plain": {"password": "[GENERIC_SECRET]"},
                                              "env": [{"name": "db_password", "value": "[GENERIC_SECRET]"}]}


def test_listed_public_collections_are_screened_and_unlisted_public_ones_pass_through(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pub": {"class": "PUBLIC"}}, unlisted="public")
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    for col in ("pub", "elsewhere"):
        create(client, col)
    with pytest.raises(GuardRefusal) as ei:
        _write(client, "pub", "upsert", {"meta": {"e": SSN}})
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    _write(client, "elsewhere", "upsert", {"meta": {"e": SSN}, "note": STRIPE})  # unlisted = "public": as given
    assert _stored(client, "elsewhere", "upsert") == {"meta": {"e": SSN}, "note": STRIPE}
