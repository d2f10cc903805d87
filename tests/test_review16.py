"""Fourteenth pass: the gaps the thirteenth review left in the password-name rule (spellings outside
it, an object under a password name, ``set_payload``'s ``key``) and Instagram-style media ids read
as JCB cards, tried against real local-mode Qdrant. Each fix's test fails on the code before it
(see docs/security-testing.md, "Fourteenth pass"); the others pin what still passes."""
from __future__ import annotations

import asyncio

import pytest

from guardkit import audit_records, models, snapshot
from test_payload_fields import _kit_client, _stored, _vec, _write
from test_payload_values import CARD, WEAK, _found
from qdrant_guard import AsyncQdrantClient, GuardRefusal

# A Luhn-valid 19-digit number in JCB's 3528..3589 range, as one Instagram media id in ten is.
MEDIA = "3560417806123456789"
VISA19 = "4560417806123456788"
BCRYPT = "$2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW"


def _by(key, match):
    return models.Filter(must=[models.FieldCondition(key=key, match=match)])


def _refused(call) -> GuardRefusal:
    with pytest.raises(GuardRefusal) as ei:
        call()
    return ei.value


# -- 1. spellings outside the rule -------------------------------------------------------------------

SPELLED = ["pass_word", "pass-word", "passWord", "db_pass_word", "db_pw", "PW", "pw", "userPw", "pswd", "smtp_pswd",
           "db_pword", "db_pass", "DB_PASS", "smtp_pass", "mysql_pass", "user_pass", "admin_pass", "root_pass",
           "ldap_pass", "redis_pass", "wifi_pass", "login_pass", "api_pass", "MYSQL_ROOT_PASS", "db2_pass",
           "pass_phrase", "pass_code", "user_pass_code", "card_pin", "sim_pin", "SIM_PIN", "atmPin"]
# Names whose values are ordinary data: tickets and rounds named "pass", postal PIN codes, map pins,
# and the false positives the rule already passed.
ORDINARY = {"boarding_pass": "BA0117-14C", "bus_pass": "monthly", "day_pass": "2026-12-05", "season_pass": "gold",
            "first_pass": "tokenize", "second_pass": "link", "hall_pass": "library", "bypass": "on",
            "compass": "north", "pass": "first", "pin": "560001", "PIN": "110001", "map_pin": "45.52,-122.68",
            "pin_code": "400001", "pinned": "yes", "password_hash": BCRYPT, "password_changed_ms": 1733356800000,
            "has_password": True, "PWD": "/home/alice", "keyword": "hunter", "zip_code": "94103",
            "passage": "Call me Ishmael", "passenger": "Alice Smith", "pass_rate": "0.93", "pword_count": 3,
            "boarding_pass_code": "QX7T2K", "season_pass_word": "gold"}


@pytest.mark.parametrize("name", SPELLED)
def test_password_spellings_outside_the_old_rule_are_credentials(tmp_path, name):
    # Before: only password/passwd/passphrase/passcode/pwd as the last word were password names, so
    # {"db_pass": "hunter2hunter2x"} and {"card_pin": 4921} were stored (the detector needs more
    # than two character classes or high entropy) and filters on them passed.
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "c")
    for payload in ({name: WEAK}, {"cfg": [{name: 4921}]}):
        err = _refused(lambda: _write(client, "c", "upsert", payload))
        assert err.verdict == "CREDENTIAL_IN_TEXT" and "password name" in str(err)
    err = _refused(lambda: client.scroll("c", scroll_filter=_by(name, models.MatchValue(value=WEAK))))
    assert err.verdict == "CREDENTIAL_IN_TEXT"
    assert snapshot(client, "c") == before
    assert WEAK not in (kit.tmp / "audit.jsonl").read_text()


def test_ordinary_names_near_the_new_spellings_still_pass(tmp_path):
    kit, client = _kit_client(tmp_path)
    for col in ("c", "pub"):
        _write(client, col, "upsert", ORDINARY)
        assert _stored(client, col, "upsert") == ORDINARY
    for key, value in ORDINARY.items():
        if isinstance(value, str):
            client.count("c", count_filter=_by(key, models.MatchValue(value=value)))
    assert client.count("c", count_filter=_by("boarding_pass", models.MatchValue(value="BA0117-14C"))).count == 1
    # Placeholders under the new names pass as under the old ones.
    held = {"db_pass": "${DB_PASS}", "card_pin": "****", "PW": "[REDACTED]", "pass_word": ""}
    _write(client, "c", "upsert", held, pid=3)
    assert _stored(client, "c", "upsert", pid=3) == held


def test_a_bare_pass_under_an_account_or_service_name_is_a_password(tmp_path):
    # nodemailer's {"auth": {"user": u, "pass": p}} and {"smtp": {"pass": p}}: before, a bare "pass"
    # key was data wherever it stood, so p was stored and a filter on auth.pass passed.
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "c")
    for payload in ({"mail": {"auth": {"user": "bob", "pass": WEAK}}}, {"smtp": [{"host": "mx", "PASS": WEAK}]},
                    {"db": {"pass": 12345678}}, {"credentials": {"Pass": WEAK}}):
        err = _refused(lambda: _write(client, "c", "upsert", payload))
        assert err.verdict == "CREDENTIAL_IN_TEXT" and "password name" in str(err)
    # A key qdrant-client stores as "pass" (bytes, a str subclass) is that key.
    err = _refused(lambda: _write(client, "c", "upsert", {"auth": {b"pass": WEAK}}))
    assert err.verdict == "CREDENTIAL_IN_TEXT"
    err = _refused(lambda: client.set_payload("c", payload={"user": "bob", "pass": WEAK}, points=[1], key="smtp"))
    assert err.verdict == "CREDENTIAL_IN_TEXT"
    for key in ("mail.auth.pass", "smtp[].PASS"):
        err = _refused(lambda: client.count("c", count_filter=_by(key, models.MatchValue(value=WEAK))))
        assert err.verdict == "CREDENTIAL_IN_TEXT"
    assert snapshot(client, "c") == before
    # A pass that is a ticket, or a bare pass with no account or service name over it, is data.
    ordinary = {"ticket": {"pass": "gold"}, "pass": "first", "visit": {"user": "bob", "pass": "season"},
                "auth": {"user": "bob", "pass": "${SMTP_PASS}"}}
    _write(client, "c", "upsert", ordinary)
    assert _stored(client, "c", "upsert") == ordinary
    client.set_payload("c", payload={"pass": "gold"}, points=[1], key="ticket")
    client.count("c", count_filter=_by("ticket.pass", models.MatchValue(value="gold")))


# -- 2. an object under a password name --------------------------------------------------------------

HELD = [{"password": {"value": WEAK}}, {"db_password": {"current": WEAK, "previous": "x"}},
        {"password": {"v": WEAK}}, {"password": {"x": WEAK}}, {"password": {"0": WEAK}},
        {"password": {"newValue": WEAK}}, {"cfg": {"pw": [{"plaintext": WEAK}]}}, {"password": {"value": {"text": WEAK}}},
        {"password": {"value": 12345678}}, {"password": {"value": [WEAK]}}, {"db_pass": {"Value": WEAK}},
        {"password": {"confirm": WEAK}}, {"admin_password": {"default": WEAK}}]


@pytest.mark.parametrize("payload", HELD)
def test_a_password_held_in_an_object_under_a_password_name_is_a_credential(tmp_path, payload):
    # Before: the object's keys were read as names of their own, so {"password": {"value": p}}
    # stored p in the clear.
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "c")
    err = _refused(lambda: _write(client, "c", "upsert", payload))
    assert err.verdict == "CREDENTIAL_IN_TEXT" and "password name" in str(err)
    assert snapshot(client, "c") == before
    assert _refused(lambda: _write(client, "pub", "upsert", payload)).verdict == "SENSITIVITY_MISMATCH"


def test_a_held_password_is_redacted_and_not_passed_by_a_remembered_pair(tmp_path):
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact"})
    # {"value": p} alone is no password, and the screen remembers the pair as clean: under a
    # password name the pair must not pass from that memory.
    _write(client, "c", "upsert", {"value": WEAK}, pid=3)
    assert _stored(client, "c", "upsert", pid=3) == {"value": WEAK}
    _write(client, "c", "upsert", {"password": {"value": WEAK, "algorithm": "bcrypt"}, "n": [{"pw": {"v": 1234}}]})
    assert _stored(client, "c", "upsert") == {"password": {"value": "[GENERIC_SECRET]", "algorithm": "bcrypt"},
                                              "n": [{"pw": {"v": "[GENERIC_SECRET]"}}]}


def test_objects_describing_a_password_still_pass(tmp_path):
    kit, client = _kit_client(tmp_path)
    ordinary = {
        "password": {"min_length": 12, "require_symbols": True, "algorithm": "bcrypt", "hash": BCRYPT,
                     "help_text": "At least 12 characters", "expires_days": 90},
        "form": {"properties": {"password": {"type": "string", "format": "password", "title": "Password",
                                             "description": "Your account password", "minLength": 8}}},
        "db_password": {"value": "${DB_PASSWORD}", "source": "vault"},
        "fields": [{"password": {"label": "Password", "input": "password", "inputType": "password",
                                 "placeholder": "Enter your password", "value": ""}}],
        "policy": {"value": WEAK},
    }
    for col in ("c", "pub"):
        _write(client, col, "upsert", ordinary)
        assert _stored(client, col, "upsert") == ordinary


def test_a_filter_on_a_held_password_is_refused(tmp_path):
    kit, client = _kit_client(tmp_path)
    for key in ("password.value", "users[].db_password.current", "cfg.pw[0].v", "password.value.text"):
        err = _refused(lambda: client.count("c", count_filter=_by(key, models.MatchValue(value=WEAK))))
        assert err.verdict == "CREDENTIAL_IN_TEXT" and "password name" in str(err)
    for key, value in (("password.algorithm", "bcrypt"), ("password.value", "[REDACTED]"),
                       ("policy.value", WEAK), ("form.properties.password.format", "password")):
        client.count("c", count_filter=_by(key, models.MatchValue(value=value)))


# -- 3. set_payload's key ----------------------------------------------------------------------------

KEYED = [({"x": WEAK}, "db_password"), ({"value": WEAK}, "creds.password"), ({"x": WEAK}, "password.value"),
         ({"v": 12345678}, "users[0].db_pass"), ({"a": {"b": 1}, "0": WEAK}, '"my.password"')]


@pytest.mark.parametrize("payload,key", KEYED)
def test_set_payload_under_a_password_key_reads_the_payload_there(tmp_path, payload, key):
    # Before: the payload was screened without the path it is stored under, so {"x": p} set at
    # key="db_password" stored p as db_password.x.
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "c")
    calls = (lambda: client.set_payload("c", payload=payload, points=[1], key=key),
             lambda: client.batch_update_points("c", [models.SetPayloadOperation(
                 set_payload=models.SetPayload(payload=payload, points=[1], key=key))]))
    for call in calls:
        assert _refused(call).verdict == "CREDENTIAL_IN_TEXT"
    assert snapshot(client, "c") == before
    before = snapshot(client, "pub")
    assert _refused(lambda: client.set_payload("pub", payload=payload, points=[1], key=key)).verdict \
        == "SENSITIVITY_MISMATCH"
    assert _refused(lambda: client.batch_update_points("pub", [models.SetPayloadOperation(
        set_payload=models.SetPayload(payload=payload, points=[1], key=key))])).verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(client, "pub") == before
    assert WEAK not in (kit.tmp / "audit.jsonl").read_text()
    assert any(r.get("verdict") == "CREDENTIAL_IN_TEXT" for r in audit_records(kit))


def test_set_payload_under_other_keys_and_describing_objects_still_pass(tmp_path):
    kit, client = _kit_client(tmp_path)
    for payload, key in (({"x": WEAK}, "meta"), ({"min_length": 12, "algorithm": "bcrypt"}, "password"),
                         ({"value": "${DB_PASSWORD}"}, "db_password"), ({"value": WEAK}, "env[0]")):
        client.set_payload("c", payload=payload, points=[1], key=key)
    stored = {p: pl for p, pl, _ in snapshot(client, "c")}[1]
    assert stored["meta"] == {"x": WEAK}
    assert stored["password"] == {"min_length": 12, "algorithm": "bcrypt"}


async def async_pii_client(kit) -> AsyncQdrantClient:
    """An async guarded client of hr's owner with an empty PII collection "c" (text field "text")."""
    a = AsyncQdrantClient(":memory:", guard=kit.config({"c": {"class": "PII", "owner": "hr", "text_field": "text",
                                                              "intent": {"enabled": False}}}),
                          principal=kit.principal("alice", "hr"))
    await a.create_collection("c", vectors_config=models.VectorParams(size=len(_vec(1)), distance=models.Distance.COSINE))
    return a


def test_async_set_payload_under_a_password_key_is_refused(tmp_path):
    kit, _ = _kit_client(tmp_path)

    async def run():
        a = await async_pii_client(kit)
        await a.upsert("c", [models.PointStruct(id=1, vector=_vec(1), payload={"text": "hello"})])
        with pytest.raises(GuardRefusal) as ei:
            await a.set_payload("c", payload={"x": WEAK}, points=[1], key="db_password")
        await a.set_payload("c", payload={"x": WEAK}, points=[1], key="meta")
        (rec,), _ = await a.scroll("c", with_payload=True)
        return ei.value, rec.payload

    err, payload = asyncio.run(run())
    assert err.verdict == "CREDENTIAL_IN_TEXT" and "password name 'db_password'" in str(err)
    assert "db_password" not in payload and payload["meta"] == {"x": WEAK}


# -- 4. 19-digit media ids in JCB's range ----------------------------------------------------------

def test_media_ids_in_the_jcb_range_are_stored_under_an_id_name(tmp_path):
    # Before: a PUBLIC collection refused about one Instagram media id in ten as a JCB card.
    kit, client = _kit_client(tmp_path)
    assert _found("note", MEDIA) and [f.type for f in _found("media_id", MEDIA)] == ["CREDIT_CARD"]
    payload = {"media_id": int(MEDIA), "id": MEDIA, "post": {"mediaIds": [int(MEDIA), MEDIA]}, "ig_id2": MEDIA}
    _write(client, "pub", "upsert", payload)
    assert _stored(client, "pub", "upsert") == payload
    (tmp_path / "all").mkdir()
    kit, client = _kit_client(tmp_path / "all", sens={"payload_fields": "all"})
    _write(client, "c", "upsert", payload)
    assert _stored(client, "c", "upsert") == payload


@pytest.mark.parametrize("payload", [{"card_id": MEDIA}, {"cc_id": int(MEDIA)}, {"paymentId": MEDIA},
                                     {"media": int(MEDIA)}, {"id": "4111111111111111"}, {"id": CARD},
                                     {"media_id": VISA19}])
def test_the_media_id_exemption_needs_an_id_name_without_a_card_word_and_the_jcb_range(tmp_path, payload):
    kit, client = _kit_client(tmp_path)
    assert _found("media_id", VISA19)  # a 19-digit Visa number, outside JCB's range
    assert _refused(lambda: _write(client, "pub", "upsert", payload)).verdict == "SENSITIVITY_MISMATCH"


def test_a_filter_on_a_media_id_or_a_barcode_is_no_card_probe(tmp_path):
    # Before: the filter screen read the id as a JCB card (and an EAN-13 as a Visa number), so a
    # sensitive collection refused a lookup by media id or barcode (filter_pii = "refuse").
    kit, client = _kit_client(tmp_path)
    _write(client, "c", "upsert", {"media_id": int(MEDIA), "ean": "4684847513501"})
    for key, value in (("media_id", int(MEDIA)), ("media_id", MEDIA), ("post.mediaIds[]", int(MEDIA)),
                       ("ean", "4684847513501")):
        client.count("c", count_filter=_by(key, models.MatchValue(value=value)))
    assert client.count("c", count_filter=_by("media_id", models.MatchValue(value=int(MEDIA)))).count == 1
    for key, value in (("card_id", int(MEDIA)), ("media", MEDIA), ("media_id", VISA19), ("ean", "4111111111111111")):
        err = _refused(lambda: client.count("c", count_filter=_by(key, models.MatchValue(value=value))))
        assert err.verdict == "QUERY_REJECTED"
