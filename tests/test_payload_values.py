"""payload_fields beyond strings under their own key: numbers (read as the digits JSON stores), any
value under a password name, a value whose name sits in a sibling field, and the clean-key memory
scoped per collection and writer boundary. Real local-mode Qdrant."""
from __future__ import annotations

import random

import numpy as np
import pytest

from guardkit import make_kit, snapshot
from test_payload_fields import FORMS, _audit_text, _kit_client, _stored, _write
from test_perf_payload_screen import API, _guard, _screen
from qdrant_guard import GuardRefusal, QdrantClient, detect, field_screen, textguard
from qdrant_guard.receipts import verify as verify_stored

CARD = 4111111111111111
WEAK = "hunter2hunter2x"     # two classes, low entropy: the detector alone finds nothing
# Ordinary numbers: ids, counts, ms timestamps, snowflake ids (none is a finding as a string either).
ORDINARY_INTS = {"id": 7, "count": 123456, "neg": -42, "ts_ms": 1733356800000, "ts_us": 1733356800000000,
                 "snowflake": 1866000000000000000, "tweet": 1234567890123456789, "discord": 175928847299117063,
                 "big": 2**63 - 1, "price": 19.99, "score": 1e300, "flag": True, "none": None,
                 "rows": [1, 2, 3, 1733356800000]}
PLACEHOLDERS = ["", "********", "[REDACTED]", "<redacted>", "${DB_PASSWORD}", "{{ db_password }}", "[GENERIC_SECRET]"]


def _found(key: str, text: str) -> list:
    head = f'{key}: "'
    return [f for f in detect.find_sensitive(f'{head}{text}"') if f.end > len(head) and f.start < len(head) + len(text)]


# -- 1. numbers ------------------------------------------------------------------------------------

def test_the_short_number_bounds_hold_against_the_detector():
    # Under a plain key, numbers under 10**12 (10**8 where the key names an SSN) skip the detector:
    # pin that no digit string that short, signed or not, is a finding under names that give
    # numbers context, and that the bounds are tight.
    assert (field_screen._SHORT_NUMBER, field_screen._SHORT_SSN_NUMBER) == (10**12, 10**8)
    plain = ["x", "card", "credit_card_number", "phone", "tel", "mobile", "iban", "api_key", "secret", "token",
             "access_token", "pin", "a.b-c_d", "Number1", "created_at", "zip"]
    ssn = ["ssn", "SSN", "customer_ssn", "social_security_number", "socialSecurity", "Social-Security", "social"]
    assert {field_screen._number_bound(k) for k in plain} == {10**12}
    assert {field_screen._number_bound(k) for k in ssn} == {10**8}
    assert field_screen._number_bound("db_password") == field_screen._KEY_PASSWORD
    assert field_screen._number_bound("my key") == 0  # not plain: every number under it is screened
    rng = random.Random(0)
    for length in range(1, 13):
        lo, hi = 10 ** (length - 1) if length > 1 else 0, 10**length - 1
        sample = {lo, hi, *(int(p[:length]) for p in ("123456789012", "411111111111", "555555555555",
                                                         "212555123412", "121255512341", "498765432101"))}
        sample |= {rng.randint(lo, hi) for _ in range(150)}
        for n in sample:
            for text in (str(n), f"-{n}"):
                assert not any(_found(k, text) for k in plain + (ssn if length < 9 else [])), (length, text)
    assert [f.type for f in _found("ssn", "123456789")] == ["SSN"]
    assert [f.type for f in _found("x", "4222222222222")] == ["CREDIT_CARD"]  # 13 digits


@pytest.mark.parametrize("form", FORMS)
def test_public_refuses_card_and_ssn_numbers_on_every_write_path(tmp_path, form):
    kit, client = _kit_client(tmp_path)
    for payload in ({"card": CARD}, {"meta": {"ids": [1, CARD]}}, {"ssn": 123456789}, {"card": float(CARD)}):
        before = snapshot(client, "pub")
        with pytest.raises(GuardRefusal) as ei:
            _write(client, "pub", form, payload)
        assert ei.value.verdict == "SENSITIVITY_MISMATCH"
        assert snapshot(client, "pub") == before
    assert str(CARD) not in _audit_text(kit) and "123456789" not in _audit_text(kit)


def test_a_redacted_number_becomes_its_placeholder_string(tmp_path):
    # The digits are gone: no number can stand for "[CREDIT_CARD]", so the value becomes that string,
    # as the same digits given as a string would.
    kit, client = _kit_client(tmp_path, sens={"payload_fields": "all", "credentials_in_text": "redact"},
                              pub={"allow_redaction_on_public": True})
    payload = {"card": CARD, "ssn": 123456789, "m": {"l": [CARD, 5]}, "f": float(CARD), "db_password": 12345678}
    want = {"card": "[CREDIT_CARD]", "ssn": "[SSN]", "m": {"l": ["[CREDIT_CARD]", 5]}, "f": "[CREDIT_CARD]",
            "db_password": "[GENERIC_SECRET]"}
    _write(client, "c", "upsert", {**ORDINARY_INTS, **payload})
    assert _stored(client, "c", "upsert") == {**ORDINARY_INTS, **want}
    assert all(r.ok for r in verify_stored(client, "c", trusted_keys=client.guard.trusted_receipt_keys))
    with pytest.raises(GuardRefusal) as ei:  # a credential on PUBLIC still needs credentials_in_text = "redact"
        _write(client, "pub", "upsert", payload)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    _write(client, "pub", "upsert", {k: v for k, v in payload.items() if k != "db_password"})
    assert _stored(client, "pub", "upsert") == {k: v for k, v in want.items() if k != "db_password"}


def test_sensitive_collections_treat_numbers_as_their_digits(tmp_path):
    # "credentials": personal data stays as given (an int stays an int), a credential is refused.
    kit, client = _kit_client(tmp_path)
    _write(client, "c", "upsert", {**ORDINARY_INTS, "card": CARD, "ssn": 123456789})
    assert _stored(client, "c", "upsert") == {**ORDINARY_INTS, "card": CARD, "ssn": 123456789}
    for form in ("upsert", "set_payload", "overwrite_payload", "batch set_payload key"):
        with pytest.raises(GuardRefusal) as ei:
            _write(client, "c", form, {"cfg": [{"admin_pwd": 20240101}]}, pid=3)
        assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
        assert "20240101" not in _audit_text(kit)


def test_text_field_mode_stores_numbers_and_passwords_as_given(tmp_path):
    kit, client = _kit_client(tmp_path, sens={"payload_fields": "text_field"}, pub={"payload_fields": "text_field"})
    payload = {"card": CARD, "password": WEAK, "env": [{"name": "DB_PASSWORD", "value": WEAK}]}
    for col in ("c", "pub"):
        _write(client, col, "upsert", payload)
        assert _stored(client, col, "upsert") == payload


@pytest.mark.parametrize("over", [{}, {"credentials_in_text": "redact", "payload_fields": "all"}])
def test_a_number_screens_as_its_digits_would_as_a_string(tmp_path, over):
    _, guard, pol = _guard(tmp_path, **over)
    rng = random.Random(1)
    numbers = [CARD, 4012888888881881, 378282246310005, -CARD, 123456789, *ORDINARY_INTS.values()]
    numbers += [rng.randint(10 ** (d - 1), 10**d) for d in range(9, 20) for _ in range(20)]
    for n in numbers:
        if not isinstance(n, int) or isinstance(n, bool):
            continue
        for key in ("x", "ssn", "card", "api_key", "my key"):
            as_int, as_str = _screen(guard, pol, {key: n}), _screen(guard, pol, {key: str(n)})
            assert as_int[0] == as_str[0], (key, n)
            if as_int[0] == "stored":
                assert as_int[1][key] == (n if as_str[1][key] == str(n) else as_str[1][key]), (key, n)
    for s in ("1733356800000", "1866000000000000000", "1234567890123456789", "175928847299117063"):
        assert not _found("id", s), s


def test_numpy_integers_are_refused_by_the_client_not_stored(tmp_path):
    # qdrant-client (pydantic) cannot serialise them: nothing reaches Qdrant, screened or not.
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "c")
    with pytest.raises(Exception, match="numpy"):
        _write(client, "c", "upsert", {"card": np.int64(CARD)})
    assert snapshot(client, "c") == before


# -- 2. a password name ----------------------------------------------------------------------------

@pytest.mark.parametrize("form", FORMS)
def test_any_value_under_a_password_name_is_a_credential(tmp_path, form):
    kit, client = _kit_client(tmp_path)
    for payload in ({"password": WEAK}, {"users": [{"db_password": WEAK}]}, {"passwd": ["abc", "de"]},
                    {"userPassword2": "x1"}, {"PWD": "hunter2"}):
        with pytest.raises(GuardRefusal) as ei:
            _write(client, "c", form, payload)
        assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
        with pytest.raises(GuardRefusal) as ei:
            _write(client, "pub", form, payload)
        assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert WEAK not in _audit_text(kit)


def test_password_names_redact_and_placeholders_and_other_names_pass(tmp_path):
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact"})
    ordinary = {"PWD": "/home/alice", "OLDPWD": "~/src", "env": {"pwd": "/srv/app"}, "token": "the", "secret": WEAK, "key": "abc", "password_policy": "strict", "passwordHash": "x",
                "passport": "X1234567", "bypass": "on", "pass": "first", "compass": "north", "db_pass": "x",
                "passwords": 3, "password_changed": True}
    held = {f"p{i}": {"password": v} for i, v in enumerate(PLACEHOLDERS)}
    _write(client, "c", "upsert", {**ordinary, **held, "admin_passwd": WEAK, "m": {"pw": [{"passphrase": "a b"}]}})
    assert _stored(client, "c", "upsert") == {**ordinary, **held, "admin_passwd": "[GENERIC_SECRET]",
                                              "m": {"pw": [{"passphrase": "[GENERIC_SECRET]"}]}}
    # What the guard stored is written back unchanged (its placeholder is no password).
    _write(client, "c", "overwrite_payload", _stored(client, "c", "upsert"))
    assert _stored(client, "c", "overwrite_payload") == {**ordinary, **held, "admin_passwd": "[GENERIC_SECRET]",
                                                         "m": {"pw": [{"passphrase": "[GENERIC_SECRET]"}]}}


# -- 3. a name in a sibling field ------------------------------------------------------------------

@pytest.mark.parametrize("form", ["upsert", "set_payload", "overwrite_payload", "batch set_payload key"])
def test_a_value_is_read_under_the_name_in_its_sibling_field(tmp_path, form):
    kit, client = _kit_client(tmp_path, sens={"credentials_in_text": "redact"})
    found = {"env": [{"name": "DB_PASSWORD", "value": WEAK}, {"name": "LOG_LEVEL", "value": "debug"}],
             "tags": [{"Key": "api_key", "Value": API}], "f": {"field": "password", "value": 1234},
             "k": {"key": "db_password", "value": ["a1", "b2"]}}
    passes = {"label": {"label": "password", "value": WEAK}, "data": {"name": "db_password", "data": WEAK},
              "num": {"name": 5, "value": WEAK}, "other": {"name": "token", "value": "the"}}
    _write(client, "c", form, {**found, **passes})
    assert _stored(client, "c", form) == {
        "env": [{"name": "DB_PASSWORD", "value": "[GENERIC_SECRET]"}, {"name": "LOG_LEVEL", "value": "debug"}],
        "tags": [{"Key": "api_key", "Value": "[GENERIC_SECRET]"}], "f": {"field": "password", "value": "[GENERIC_SECRET]"},
        "k": {"key": "db_password", "value": ["[GENERIC_SECRET]", "[GENERIC_SECRET]"]}, **passes}
    with pytest.raises(GuardRefusal) as ei:
        _write(client, "pub", form, {"env": [{"name": "DB_PASSWORD", "value": WEAK}]})
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert WEAK not in _audit_text(kit) and API not in _audit_text(kit)


def test_a_remembered_value_pair_does_not_skip_the_sibling_name(tmp_path):
    _, guard, pol = _guard(tmp_path)
    assert _screen(guard, pol, {"value": WEAK}) == ("stored", {"value": WEAK})
    assert ("value", WEAK) in guard.clean_values("c")
    assert _screen(guard, pol, {"name": "db_password", "value": WEAK})[0] == "refused"


# -- 4. the clean-key memory -----------------------------------------------------------------------

def _hr_and_support(tmp_path):
    """The guards of alice@hr and bob@support on two PII collections c and d that both may write."""
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True, "intent": {"enabled": False}}
    client = QdrantClient(":memory:", guard=kit.config({"c": pol, "d": pol}), principal=kit.principal("alice", "hr"))
    return client.guard, client.with_principal(kit.principal("bob", "support")).guard


def _screen_in(guard, col, payload):
    return guard.screen_payload_fields("upsert", col, guard.policy(col), dict(payload), point_id=9)


def test_clean_keys_are_remembered_per_collection_and_writer_boundary(tmp_path, monkeypatch):
    # A key hr wrote must still cost support (or a write to another collection) a detector call:
    # with one memory for all, a writer could time whether some other boundary had used a key.
    hr, support = _hr_and_support(tmp_path)
    key = "zz_rare_key_of_hr"
    assert _screen_in(hr, "c", {key: 1}) == {key: 1}
    scanned: list[str] = []
    original = detect.find_sensitive
    monkeypatch.setattr(detect, "find_sensitive", lambda text: (scanned.append(text), original(text))[1])
    assert _screen_in(hr, "c", {key: 1}) == {key: 1}
    assert key not in scanned  # remembered for hr on c
    for guard, col in ((support, "c"), (hr, "d")):
        assert _screen_in(guard, col, {key: 1}) == {key: 1}
        assert scanned.count(key) == 1, (guard.boundary(), col)
        scanned.clear()


def test_clean_keys_stay_bounded_over_all_scopes(tmp_path, monkeypatch):
    monkeypatch.setattr(textguard, "_CLEAN_KEYS_MAX", 8)
    hr, support = _hr_and_support(tmp_path)
    for i in range(30):
        guard, col = (hr, support)[i % 2], "cd"[i % 3 == 0]
        assert _screen_in(guard, col, {f"k{i}": 1}) == {f"k{i}": 1}
        assert sum(len(d) for d in hr.shared["clean_keys"].values()) <= 8
    assert len(hr.shared["clean_keys"]) == 4  # two boundaries on two collections


# -- 5. product barcodes ---------------------------------------------------------------------------

# Valid EAN-13s (GS1 check digit) with a German 4 prefix that also pass Luhn: the detector finds
# each as a 13-digit Visa number in free text.
EANS = ["4684847513501", "4195364052591", "4059292244698"]


def test_barcodes_that_pass_luhn_are_stored_under_a_barcode_name(tmp_path):
    # Before: a product catalogue on a PUBLIC collection had about one EAN-13 in ten refused as a card.
    kit, client = _kit_client(tmp_path)
    assert all(_found("note", e) for e in EANS)
    payload = {"ean": EANS[0], "gtin13": int(EANS[1]), "item": {"productEan": EANS[2]}, "isbn": "9780306406157"}
    _write(client, "pub", "upsert", payload)
    assert _stored(client, "pub", "upsert") == payload


@pytest.mark.parametrize("payload", [{"card": EANS[0]}, {"note": int(EANS[1])}, {"ean": "4398259791907"},
                                     {"ean": "4111111111111111"}])
def test_the_barcode_exemption_needs_the_name_and_a_valid_check_digit(tmp_path, payload):
    # Another name, a 13-digit Luhn number whose GS1 check digit is wrong, or a card's length keep
    # the card finding.
    kit, client = _kit_client(tmp_path)
    with pytest.raises(GuardRefusal) as ei:
        _write(client, "pub", "upsert", payload)
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
