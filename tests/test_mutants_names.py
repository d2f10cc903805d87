"""Cases that kill the surviving mutants of the password-name and payload-name rules
(``scripts/mutate.py`` on textguard's name rules and querycheck's filter paths; see
docs/security-testing.md, "Mutation pass, password-name rules"). Each goes through the public
client against real local-mode Qdrant: a write or filter that must be refused, or stored as given."""
from __future__ import annotations

import pytest

from guardkit import snapshot
from test_payload_fields import _kit_client, _stored, _write
from test_payload_values import WEAK
from test_review17 import _by, _refused
from qdrant_guard import UnsupportedWriteError

# Refused as credentials: each kills a mutant that let the value through.
REFUSED = [
    {"doorpasscode": WEAK},  # a password word as the end of one word ([:4] made [:3] dropped passcode)
]

# Stored as given on PII and PUBLIC collections: each kills a mutant that refused ordinary data.
ORDINARY = {
    "_": "data", "#": "tag",  # a key of no word is no password name (empty words read as one)
    "xpwd": "257 is the reply",  # FTP's XPWD: only pwd alone is a password word, no suffix ([:4] made [:5])
    # An HTML form's field: a two-letter key under a password name describes it (<= 1 made <= 2).
    "password": {"id": "signup-pw", "type": "password"},
    # Media ids at both ends of JCB's 3528..3589 range, Luhn-valid: no card under media_id (either
    # bound made strict refused them on PUBLIC).
    # A working directory under a name whose last word is pwd ([-1] made [0] read "shell").
    "shell_pwd": "/home/alice/src",
    "media_id": "3528041780612345673", "post": {"media_ids": [3589041780612345675]},
}


@pytest.mark.parametrize("payload", REFUSED, ids=range(len(REFUSED)))
def test_mutant_killing_credentials_are_refused(tmp_path, payload):
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "c"), snapshot(client, "pub")
    err = _refused(lambda: _write(client, "c", "upsert", payload))
    assert err.verdict == "CREDENTIAL_IN_TEXT" and "password name" in str(err)
    assert _refused(lambda: _write(client, "pub", "upsert", payload)).verdict == "SENSITIVITY_MISMATCH"
    assert (snapshot(client, "c"), snapshot(client, "pub")) == before


def test_mutant_killing_ordinary_payloads_are_stored(tmp_path):
    kit, client = _kit_client(tmp_path)
    for col in ("c", "pub"):
        _write(client, col, "upsert", ORDINARY)
        assert _stored(client, col, "upsert") == ORDINARY


def test_set_payload_reads_a_bare_pass_under_the_last_key_of_its_path(tmp_path):
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "c"), snapshot(client, "pub")
    # The object is named by the path's last key, not its first ([-1] made [0]).
    err = _refused(lambda: client.set_payload("c", payload={"pass": WEAK}, points=[1], key="mail.smtp"))
    assert err.verdict == "CREDENTIAL_IN_TEXT" and "password name" in str(err)
    assert (snapshot(client, "c"), snapshot(client, "pub")) == before
    # ... and by that key alone, as an upsert of the same object reads it: under auth's object "1"
    # a bare pass is no password in either form (the whole path read as the name made it auth's).
    nested = {"auth": {"1": {"pass": "gold"}}}
    _write(client, "pub", "upsert", nested)
    assert _stored(client, "pub", "upsert") == nested
    client.set_payload("pub", payload={"pass": "gold"}, points=[1], key='auth."1"')
    assert _stored(client, "pub", "set_payload")["auth"] == {"1": {"pass": "gold"}}


def test_a_filter_on_a_quoted_holder_key_under_a_password_name_is_refused(tmp_path):
    kit, client = _kit_client(tmp_path)
    # password."x" is the key x of password's object: its quotes are no part of the name
    # (group(1) made group(0) read '"x"', three characters and no holder word), and a quoted key
    # is a key (group(1) made group(2) dropped it, leaving auth).
    for key in ('password."x"', 'db_password."value"', 'auth."pass"'):
        err = _refused(lambda: client.count("c", count_filter=_by(key, WEAK)))
        assert err.verdict == "CREDENTIAL_IN_TEXT" and "password name" in str(err)


def test_a_remembered_clean_key_sent_twice_is_still_refused(tmp_path):
    kit, client = _kit_client(tmp_path)
    _write(client, "c", "upsert", {"note": "hi"})  # ("note", "hi") is now a remembered clean pair
    before = snapshot(client, "c")
    # In a nested object b"note" is stored as "note" and the second "note" would overwrite it: the
    # pair may not take the fast path past the check for a key stored twice (k not in out made
    # k in out did).
    with pytest.raises(UnsupportedWriteError):
        _write(client, "c", "upsert", {"m": {b"note": "hi", "note": "hi"}}, pid=3)
    assert snapshot(client, "c") == before


# The barcode exemption (field_screen._barcode), second mutation pass: a GTIN-14 that is also a
# Luhn-valid 14-digit Diners number must be stored under gtin (14 dropped from the lengths refused
# it); a 15-digit Amex number whose GS1 check digit happens to hold is no barcode length (15 added
# let it through); a card written with spaces under ean is a card (any of the three tests made
# "or" sent it to int(), a bare ValueError); EAN-13s (4 prefix, Luhn-valid) whose check digit is 0
# or 9, where the last "% 10" of the GS1 rule matters (% 11 made 10 of 0, % 9 made 0 of 9 and 1 of 0).
GTIN14_DINERS = "30566924323508"
AMEX15_GS1 = "370007947269152"
EAN_CHECK_0, EAN_CHECK_9 = "4066260515520", "4438239239179"


def test_a_gtin14_that_passes_luhn_is_stored_under_a_barcode_name(tmp_path):
    kit, client = _kit_client(tmp_path)
    payload = {"gtin": GTIN14_DINERS, "ean": EAN_CHECK_0, "item": {"barcode": EAN_CHECK_9}}
    _write(client, "pub", "upsert", payload)
    assert _stored(client, "pub", "upsert") == payload


@pytest.mark.parametrize("payload", [{"ean": AMEX15_GS1}, {"ean": "4111 1111 1111 1111"}])
def test_a_card_under_a_barcode_name_that_is_no_barcode_is_refused(tmp_path, payload):
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "pub")
    assert _refused(lambda: _write(client, "pub", "upsert", payload)).verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(client, "pub") == before
