"""Thirteenth review: the payload screen's numbers, password names, sibling names and scoped key
memory (f7bf6ef..bb4a3e4), tried against real local-mode Qdrant. Each test fails on the code
before its fix (see docs/security-testing.md, "Thirteenth review")."""
from __future__ import annotations

import asyncio
import enum

import pytest

from guardkit import DIM, audit_records, make_kit, models, record_sent, snapshot
from test_payload_fields import _kit_client, _stored, _vec, _write
from test_payload_values import CARD, WEAK
from test_perf_payload_screen import API, STRIPE, _guard, _screen
from qdrant_guard import AsyncQdrantClient, GuardRefusal
from qdrant_guard.receipts import RECEIPT_KEY
from qdrant_guard.receipts import verify as verify_stored


def _by(key, match):
    return models.Filter(must=[models.FieldCondition(key=key, match=match)])


# -- filters: a match on a password field carries a password --------------------------------------

def test_a_filter_matching_a_password_field_is_refused_as_a_credential(tmp_path):
    # Filters of PUBLIC collections are not screened (a Stripe key there passes too): "c" only.
    kit, client = _kit_client(tmp_path)
    col = "c"
    _write(client, col, "upsert", {"user": "bob"})
    before = snapshot(client, col)
    probes = [_by("password", models.MatchValue(value=WEAK)), _by("users[].db_password", models.MatchValue(value=12345678)),
              _by("cfg.adminPasswd", models.MatchAny(any=["x1", WEAK])),
              _by("password", models.MatchExcept(**{"except": [WEAK]})), _by("passphrase", models.MatchText(text="a b"))]
    for flt in probes:
        for call in (lambda: client.scroll(col, scroll_filter=flt), lambda: client.count(col, count_filter=flt),
                     lambda: client.delete(col, points_selector=models.FilterSelector(filter=flt))):
            with pytest.raises(GuardRefusal) as ei:
                call()
            assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert snapshot(client, col) == before
    assert WEAK not in (kit.tmp / "audit.jsonl").read_text()
    assert any(r.get("verdict") == "CREDENTIAL_IN_TEXT" for r in audit_records(kit))
    # Placeholders, a working directory under PWD, and fields that are no password names still filter.
    for flt in (_by("password", models.MatchValue(value="")), _by("password", models.MatchValue(value="[REDACTED]")),
                _by("PWD", models.MatchValue(value="/home/alice")), _by("password_policy", models.MatchValue(value=WEAK)),
                _by("user", models.MatchValue(value="bob"))):
        client.scroll(col, scroll_filter=flt)
        client.count(col, count_filter=flt)
    assert client.count(col, count_filter=_by("user", models.MatchValue(value="bob"))).count == 1


# -- keys as they are stored: bytes, Enum and str subclass keys --------------------------------------

class _Secret(enum.Enum):
    STRIPE = STRIPE
    RECEIPT = RECEIPT_KEY


class _Hidden(str):
    """A key that no lookup by "value" or "name" finds (its own hash and equality), stored as its characters."""

    def __hash__(self):
        return 7

    def __eq__(self, other):
        return False


def _set(client, col, form, payload):
    if form == "set_payload nested":
        return client.set_payload(col, payload={"cfg": [payload]}, points=[1])
    return getattr(client, form)(col, payload=payload, points=[1])


@pytest.mark.parametrize("form", ["set_payload", "overwrite_payload", "set_payload nested"])
def test_a_key_given_as_bytes_or_an_enum_is_screened_as_the_text_it_is_stored_as(tmp_path, form):
    # qdrant-client stores b"sk_live_..." and an Enum's value as the string key; the screen passed
    # any key that was not a str as it was, so the Stripe key was stored in the clear.
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact"})
    for key in (STRIPE.encode(), _Secret.STRIPE):
        _set(client, "c", form, {key: 1, "text": "hello"})
        stored = snapshot(client, "c")[0][1]
        assert STRIPE not in str(stored) and "[STRIPE_KEY]" in str(stored)
        before = snapshot(client, "pub")
        with pytest.raises(GuardRefusal) as ei:
            _set(client, "pub", form, {key: 1})
        assert ei.value.verdict == "SENSITIVITY_MISMATCH"
        assert snapshot(client, "pub") == before
    assert STRIPE not in (kit.tmp / "audit.jsonl").read_text()


@pytest.mark.parametrize("form", ["set_payload", "overwrite_payload"])
def test_the_receipt_key_given_as_bytes_or_an_enum_is_refused(tmp_path, form):
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "c")
    for key in (RECEIPT_KEY.encode(), _Secret.RECEIPT):
        with pytest.raises(GuardRefusal) as ei:
            _set(client, "c", form, {key: {"forged": 1}, "text": "hello"})
        assert ei.value.verdict == "RECEIPT_TAMPERING"
    assert snapshot(client, "c") == before
    assert all(r.ok for r in verify_stored(client, "c", trusted_keys=client.guard.trusted_receipt_keys))


@pytest.mark.parametrize("form", ["set_payload nested", "upsert"])
def test_a_sibling_name_or_value_field_behind_an_odd_key_is_read_as_stored(tmp_path, form):
    # {"name": "DB_PASSWORD", <"value" that hides from dict lookups>: ...}: stored as "value", the
    # password was read under "value" alone. Also b"name" (bytes key) beside a plain "value".
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact"})
    for entry in ({"name": "DB_PASSWORD", _Hidden("value"): WEAK}, {_Hidden("name"): "DB_PASSWORD", "value": WEAK},
                  {b"name": "DB_PASSWORD", "value": WEAK}):
        if form == "upsert":
            client.upsert("c", [models.PointStruct(id=1, vector=_vec(1), payload={"text": "hello", "env": [entry]})])
        else:
            _set(client, "c", form, entry)
        stored = snapshot(client, "c")[0][1]
        assert WEAK not in str(stored) and "[GENERIC_SECRET]" in str(stored), entry
        with pytest.raises(GuardRefusal) as ei:
            _set(client, "pub", "set_payload nested", entry)
        assert ei.value.verdict == "SENSITIVITY_MISMATCH"


# -- numbers: an integral float above 2**53 is the integer it holds -----------------------------------

# Luhn-valid card numbers (UnionPay 18 digits, 17 digits) that a float64 holds exactly.
FLOAT_CARDS = (6.200000010156593e+17, 4.000000000000005e+16)


@pytest.mark.parametrize("form", ["upsert", "set_payload", "upload_collection"])
def test_an_integral_float_above_2_53_holding_a_card_is_found(tmp_path, form):
    assert [int(f) for f in FLOAT_CARDS] == [620000001015659264, 40000000000000048]
    kit, client = _kit_client(tmp_path, sens={"payload_fields": "all"})
    before = snapshot(client, "pub")
    for f in FLOAT_CARDS:
        with pytest.raises(GuardRefusal) as ei:
            _write(client, "pub", form, {"card": f})
        assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(client, "pub") == before
    _write(client, "c", form, {"card": FLOAT_CARDS[0], "m": [FLOAT_CARDS[1]], "score": 1e300, "big": 1e19, "f": 2.0**60})
    assert _stored(client, "c", form) == {"card": "[CREDIT_CARD]", "m": ["[CREDIT_CARD]"], "score": 1e300, "big": 1e19,
                                          "f": 2.0**60}


# -- password names read as the detector reads text ----------------------------------------------------

FOLDED_PASSWORD_NAMES = ("ＰＡＳＳＷＯＲＤ", "pass\u200bword", "db_pass\u00adword", "\U0001d429\U0001d41a\U0001d42c\U0001d42c\U0001d430\U0001d428\U0001d42b\U0001d41d")


def test_a_password_name_in_full_width_or_with_invisible_characters_is_a_password_name(tmp_path):
    # The detector folds full-width forms and drops invisible characters before it reads a text;
    # the password-name rule read the key as given, so these names stored a password.
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact"})
    _write(client, "c", "upsert", {k: WEAK for k in FOLDED_PASSWORD_NAMES} | {"pаssword": "x"})  # Cyrillic а: not folded
    assert _stored(client, "c", "upsert") == {k: "[GENERIC_SECRET]" for k in FOLDED_PASSWORD_NAMES} | {"pаssword": "x"}
    for k in FOLDED_PASSWORD_NAMES:
        with pytest.raises(GuardRefusal) as ei:
            _write(client, "pub", "set_payload", {"env": [{"name": k, "value": WEAK}]})
        assert ei.value.verdict == "SENSITIVITY_MISMATCH"
        with pytest.raises(GuardRefusal) as ei:
            client.count("c", count_filter=_by(k, models.MatchValue(value=WEAK)))
        assert ei.value.verdict == "CREDENTIAL_IN_TEXT"


def test_upper_case_name_and_value_fields_are_siblings(tmp_path):
    # The detector reads {"NAME": "DB_PASSWORD", "VALUE": ...} as a pair in text; the screen knew
    # only name/key/field and value in lower case or capitalised.
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact"})
    _write(client, "c", "upsert", {"env": [{"NAME": "DB_PASSWORD", "VALUE": WEAK}, {"KEY": "api_key", "VALUE": API}],
                                   "ok": {"NAME": "LOG_LEVEL", "VALUE": "debug"}})
    assert _stored(client, "c", "upsert") == {
        "env": [{"NAME": "DB_PASSWORD", "VALUE": "[GENERIC_SECRET]"}, {"KEY": "api_key", "VALUE": "[GENERIC_SECRET]"}],
        "ok": {"NAME": "LOG_LEVEL", "VALUE": "debug"}}


def test_cloudformation_and_beanstalk_name_value_pairs_are_siblings(tmp_path):
    # describe_stacks' Parameters/Outputs and Elastic Beanstalk option settings name a value in a
    # prefixed field; the detector reads "ParameterKey=DbPassword,ParameterValue=..." in text.
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact"})
    _write(client, "c", "upsert", {
        "Parameters": [{"ParameterKey": "DbPassword", "ParameterValue": WEAK}, {"ParameterKey": "Env", "ParameterValue": "prod"}],
        "Outputs": [{"OutputKey": "ApiKey", "OutputValue": API}],
        "OptionSettings": [{"Namespace": "aws:elasticbeanstalk:application:environment", "OptionName": "DB_PASSWORD",
                            "Value": WEAK}]})
    assert _stored(client, "c", "upsert") == {
        "Parameters": [{"ParameterKey": "DbPassword", "ParameterValue": "[GENERIC_SECRET]"},
                       {"ParameterKey": "Env", "ParameterValue": "prod"}],
        "Outputs": [{"OutputKey": "ApiKey", "OutputValue": "[GENERIC_SECRET]"}],
        "OptionSettings": [{"Namespace": "aws:elasticbeanstalk:application:environment", "OptionName": "DB_PASSWORD",
                            "Value": "[GENERIC_SECRET]"}]}


# -- the clean-key memory ---------------------------------------------------------------------------

def test_long_keys_are_not_remembered(tmp_path):
    # Keys are the writer's data: remembered whatever their length, 4,096 keys of a megabyte each
    # stayed in memory after their writes.
    _, guard, pol = _guard(tmp_path)
    long_key = "k" * 100_000
    assert _screen(guard, pol, {long_key: 1, "short": 1}) == ("stored", {long_key: 1, "short": 1})
    assert "short" in guard.clean_keys("c") and long_key not in guard.clean_keys("c")
    assert _screen(guard, pol, {long_key: WEAK, ("x" * 300) + "_password": WEAK})[0] == "refused"


def test_the_async_client_screens_keys_floats_and_password_filters_alike(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"c": {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False},
                            "credentials_in_text": "redact", "payload_fields": "all"}})

    async def main():
        client = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await client.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        await client.upsert("c", [models.PointStruct(id=1, vector=_vec(1), payload={"card": FLOAT_CARDS[0]})])
        await client.overwrite_payload("c", payload={STRIPE.encode(): 1, "ＰＡＳＳＷＯＲＤ": WEAK}, points=[1])
        with pytest.raises(GuardRefusal) as ei:
            await client.count("c", count_filter=_by("db_password", models.MatchValue(value=WEAK)))
        assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
        with pytest.raises(GuardRefusal) as ei:
            await client.set_payload("c", payload={RECEIPT_KEY.encode(): {}}, points=[1])
        assert ei.value.verdict == "RECEIPT_TAMPERING"
        records, _ = await client.scroll("c", limit=10, with_payload=True)
        return records

    (record,) = asyncio.run(main())
    assert {k: v for k, v in record.payload.items() if k != RECEIPT_KEY} == {"[STRIPE_KEY]": 1, "ＰＡＳＳＷＯＲＤ": "[GENERIC_SECRET]"}


class _Float(float):
    """A float whose own methods deny it is a whole number in range; sent as its value."""

    def is_integer(self):
        return False

    def __lt__(self, other):
        return False

    def __gt__(self, other):
        return False


@pytest.mark.parametrize("form", ["upsert", "overwrite_payload", "upload_collection"])
def test_a_float_subclass_is_screened_by_its_value(tmp_path, form):
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "pub")
    with pytest.raises(GuardRefusal) as ei:
        _write(client, "pub", form, {"card": _Float(4111111111111111.0)})
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(client, "pub") == before


# -- a number in the text field --------------------------------------------------------------------

@pytest.mark.parametrize("form", ["upsert", "upsert Batch", "upload_collection", "overwrite_payload"])
def test_a_number_in_the_text_field_is_redacted_as_its_digits_are(tmp_path, form):
    # The text field's rules redact PII for every writer unless kept in boundary; they read strings
    # and lists of strings only, so {"text": 4111111111111111} kept the card the string lost (and on
    # PUBLIC under payload_fields = "text_field" it was stored).
    kit, client = _kit_client(tmp_path, pub={"payload_fields": "text_field"})
    for text, want in ((CARD, "[CREDIT_CARD]"), ([CARD, "x", 5], ["[CREDIT_CARD]", "x", 5]), (7, 7)):
        _write(client, "c", form, {"text": text})
        assert _stored(client, "c", form) == {"text": want}
    assert all(r.ok for r in verify_stored(client, "c", trusted_keys=client.guard.trusted_receipt_keys))
    before = snapshot(client, "pub")
    for text in (CARD, [CARD]):
        with pytest.raises(GuardRefusal) as ei:
            _write(client, "pub", form, {"text": text})
        assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(client, "pub") == before


def test_a_number_in_the_text_field_is_not_kept_in_boundary(tmp_path):
    # keep_payload_text_in_boundary keeps PII in a string text field, which other boundaries' reads
    # redact; they redact no number, so a number holding PII is redacted at the write.
    kit, client = _kit_client(tmp_path, sens={"keep_payload_text_in_boundary": True, "raw_in_boundary": True})
    _write(client, "c", "upsert", {"text": CARD, "t2": str(CARD)})
    assert _stored(client, "c", "upsert") == {"text": "[CREDIT_CARD]", "t2": str(CARD)}
    _write(client, "c", "upsert", {"text": str(CARD)})
    assert _stored(client, "c", "upsert") == {"text": str(CARD)}


@pytest.mark.parametrize("method", ["set_payload", "overwrite_payload"])
def test_the_text_field_given_as_a_bytes_key_is_screened_on_public_collections(tmp_path, monkeypatch, method):
    # Under payload_fields = "text_field" nothing but the text field is screened, and b"text" was
    # not it: the SSN reached qdrant-client, whose models store it as "text" (over REST; local
    # mode's json then fails).
    kit, client = _kit_client(tmp_path, pub={"payload_fields": "text_field"})
    sent = record_sent(monkeypatch, (method,))
    with pytest.raises(GuardRefusal) as ei:
        getattr(client, method)("pub", payload={b"text": "ssn 123-45-6789"}, points=[1])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert sent == []


def test_a_value_its_sibling_name_finds_is_not_remembered(tmp_path):
    # Read under "value" first, a password or key whose name sits beside it was remembered as a
    # clean ("value", ...) pair: the secret stayed in memory past its call.
    _, guard, pol = _guard(tmp_path, credentials_in_text="redact")
    for entry in ({"name": "DB_PASSWORD", "value": WEAK}, {"Key": "api_key", "Value": API},
                  {b"name": "db_password", "value": WEAK + "2"}, {"env": [{"NAME": "PASSWD", "VALUE": WEAK + "3"}]}):
        assert "[GENERIC_SECRET]" in str(_screen(guard, pol, {"cfg": [entry]}))
    assert not [p for p in guard.clean_values("c") if WEAK in p[1] or API in p[1]]
    assert _screen(guard, pol, {"env": [{"name": "LOG_LEVEL", "value": "debug"}]})[0] == "stored"
    assert ("value", "debug") in guard.clean_values("c")  # clean under every name: remembered


def test_a_number_key_is_screened_as_the_string_key_it_is_stored_as(tmp_path):
    # Local mode stores {4111111111111111: 1} as {"4111111111111111": 1}; the key was passed as it was.
    kit, client = _kit_client(tmp_path, sens={"payload_fields": "all"})
    client.set_payload("c", payload={CARD: 1, "m": {7: "x"}}, points=[1])
    stored = snapshot(client, "c")[0][1]
    assert stored["[CREDIT_CARD]"] == 1 and stored["m"] == {"7": "x"} and str(CARD) not in str(stored)
    with pytest.raises(GuardRefusal) as ei:
        client.set_payload("pub", payload={"m": {CARD: 1}}, points=[1])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
