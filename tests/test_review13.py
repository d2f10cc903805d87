"""Thirteenth review: the payload screen's numbers, password names, sibling names and scoped key
memory (f7bf6ef..bb4a3e4), tried against real local-mode Qdrant. Each test fails on the code
before its fix (see docs/security-testing.md, "Thirteenth review")."""
from __future__ import annotations

import enum

import pytest

from guardkit import audit_records, models, snapshot
from test_payload_fields import _kit_client, _vec, _write
from test_payload_values import WEAK
from test_perf_payload_screen import STRIPE
from qdrant_guard import GuardRefusal
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
