"""Fifteenth review: the fourteenth pass's password-name rule (tests/test_review16.py) tried in both
directions against real local-mode Qdrant. Each fix's test fails on the code before it (see
docs/security-testing.md, "Fifteenth review"); the others pin what still passes."""
from __future__ import annotations

import asyncio
import enum
import re

import pytest

from guardkit import models, snapshot
from test_payload_fields import FORMS, _kit_client, _stored, _vec, _write
from test_payload_values import WEAK
from test_review16 import async_pii_client
from qdrant_guard import GuardRefusal

MEDIA = "3560417806123456789"  # Luhn-valid, in JCB's 19-digit range (one Instagram media id in ten)


class _Key(str, enum.Enum):
    PASS1 = "pass1"


def _by(key, value):
    return models.Filter(must=[models.FieldCondition(key=key, match=models.MatchValue(value=value))])


def _refused(call) -> GuardRefusal:
    with pytest.raises(GuardRefusal) as ei:
        call()
    return ei.value


# -- 1. a bare pass (or pin) under its owner, in another spelling ------------------------------------

# Before: only "pass", "PASS" and "Pass" were looked up (and no bare pin at all), so WordPress's
# pass1/pass2, a full-width or zero-width pass, and {"card": {"pin": p}} were stored, though
# auth_pass1, ＡＵＴＨ_ＰＡＳＳ and card_pin were refused.
SPELLED = [{"user": {"login": "bob", "pass1": WEAK, "pass2": WEAK}}, {"auth": {"ｐａｓｓ": WEAK}},
           {"smtp": {"pa\u200bss": WEAK}}, {"db": [{"_pass": WEAK}]}, {"auth": {_Key.PASS1: WEAK}},
           {"card": {"number": "[CARD]", "pin": 4921}}, {"sim": {"PIN": "4921"}}, {"auth": {"pass": {"value": WEAK}}},
           {"mail": {"auth": {"Pass_2": WEAK}}}]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("payload", SPELLED, ids=range(len(SPELLED)))
def test_a_bare_pass_or_pin_in_any_spelling_under_its_owner_is_a_credential(tmp_path, payload, form):
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "c"), snapshot(client, "pub")
    err = _refused(lambda: _write(client, "c", form, payload))
    assert err.verdict == "CREDENTIAL_IN_TEXT" and "password name" in str(err)
    assert _refused(lambda: _write(client, "pub", form, payload)).verdict == "SENSITIVITY_MISMATCH"
    assert (snapshot(client, "c"), snapshot(client, "pub")) == before
    assert WEAK not in (kit.tmp / "audit.jsonl").read_text()


def test_a_bare_pass_remembered_clean_elsewhere_is_read_again_under_its_owner(tmp_path):
    kit, client = _kit_client(tmp_path)
    # At the top level pass1 is data (a bare pass with no owner), and the pair is found clean ...
    _write(client, "c", "upsert", {"pass1": WEAK, "ｐａｓｓ": WEAK}, pid=3)
    assert _stored(client, "c", "upsert", pid=3) == {"pass1": WEAK, "ｐａｓｓ": WEAK}
    # ... which must not let it pass under an owner.
    for payload in ({"auth": {"pass1": WEAK}}, {"auth": {"ｐａｓｓ": WEAK}}):
        assert _refused(lambda: _write(client, "c", "upsert", payload)).verdict == "CREDENTIAL_IN_TEXT"


def test_set_payload_and_filters_read_a_bare_pass_or_pin_in_any_spelling(tmp_path):
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "pub")
    for key, payload in (("auth", {"pass1": WEAK}), ("smtp", {"ｐａｓｓ": WEAK}), ("card", {"pin": 4921}),
                         ("auth.pass2", {"x": WEAK})):
        assert _refused(lambda: client.set_payload("pub", payload=payload, points=[1], key=key)).verdict \
            == "SENSITIVITY_MISMATCH"
        assert _refused(lambda: client.set_payload("c", payload=payload, points=[1], key=key)).verdict \
            == "CREDENTIAL_IN_TEXT"
    assert snapshot(client, "pub") == before
    for key, value in (("user.pass1", WEAK), ("auth.ｐａｓｓ", WEAK), ("card.pin", 4921), ("phone.sim[].PIN", "4921")):
        err = _refused(lambda: client.count("c", count_filter=_by(key, value)))
        assert err.verdict == "CREDENTIAL_IN_TEXT"


def test_async_upsert_of_a_spelled_bare_pass_is_refused(tmp_path):
    kit, _ = _kit_client(tmp_path)

    async def run():
        a = await async_pii_client(kit)
        with pytest.raises(GuardRefusal) as ei:
            await a.upsert("c", [models.PointStruct(id=1, vector=_vec(1), payload={"user": {"pass2": WEAK}})])
        return ei.value, (await a.count("c")).count

    err, n = asyncio.run(run())
    assert err.verdict == "CREDENTIAL_IN_TEXT" and n == 0


def test_bare_pass_and_pin_without_an_owner_stay_data(tmp_path):
    kit, client = _kit_client(tmp_path)
    ordinary = {"stats": {"pass1": "12", "pass2": "9"}, "address": {"pin": "560001", "PIN2": "110001"},
                "auth": {"pin": "560001"}, "ticket": {"ｐａｓｓ": "gold"}, "card": {"pass": "gold"},
                "pass1": "first", "pins": {"pin": "45.5,-122.6"},
                # A GPIO pin, a postal code: a bare pin is a PIN under a card or SIM only.
                "device": {"pin": 13, "mode": "out"}, "account": {"city": "Bengaluru", "pin": "560001"}}
    for col in ("c", "pub"):
        _write(client, col, "upsert", ordinary)
        assert _stored(client, col, "upsert") == ordinary
    for key, value in (("address.pin", "560001"), ("device.pin", 13), ("stats.pass1", "12")):
        client.count("c", count_filter=_by(key, value))


# -- 2. a media id in a card's object ------------------------------------------------------------------

@pytest.mark.parametrize("payload", [{"card": {"id": MEDIA}}, {"cards": [{"id": int(MEDIA)}]},
                                     {"payment": {"media_id": MEDIA}}, {"credit_card": {"ids": [MEDIA]}}])
def test_a_jcb_number_under_an_id_in_a_card_object_is_a_card(tmp_path, payload):
    # Before: the exemption read the last key only, so {"card": {"id": n}} stored a 19-digit JCB
    # card on a PUBLIC collection, while a filter on card.id (the whole path) was refused as PII.
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "pub")
    assert _refused(lambda: _write(client, "pub", "upsert", payload)).verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(client, "pub") == before


def test_set_payload_of_an_id_under_a_card_key_is_a_card_and_media_ids_still_pass(tmp_path):
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "pub")
    for key in ("card", "payment.card", "cards[0]"):
        assert _refused(lambda: client.set_payload("pub", payload={"id": MEDIA}, points=[1], key=key)).verdict \
            == "SENSITIVITY_MISMATCH"
    assert snapshot(client, "pub") == before
    client.set_payload("pub", payload={"id": MEDIA}, points=[1], key="post.media")
    media = {"post": {"media_id": int(MEDIA), "carousel": [{"id": MEDIA}]}, "media_ids": [MEDIA]}
    _write(client, "pub", "upsert", media)
    assert _stored(client, "pub", "upsert") == media


# -- 3. nginx's proxy_pass ---------------------------------------------------------------------------

def test_nginx_proxy_pass_is_no_password(tmp_path):
    # Before: "proxy" was an owner of "pass", so every nginx location's proxy_pass URL (as JSON from
    # crossplane or an Ansible role's variables) was refused on a PUBLIC collection, and a filter on it.
    kit, client = _kit_client(tmp_path)
    conf = {"server": {"listen": 443, "locations": [{"path": "/", "proxy_pass": "http://app:8000"},
                                                    {"path": "/api", "PROXY_PASS": "http://api.internal:9000/v1"}]}}
    for col in ("c", "pub"):
        _write(client, col, "upsert", conf)
        assert _stored(client, col, "upsert") == conf
    client.count("c", count_filter=_by("server.locations[].proxy_pass", "http://app:8000"))
    # A password of a named service is still one.
    assert _refused(lambda: _write(client, "pub", "upsert", {"smtp_pass": WEAK, "proxy_password": WEAK})).verdict \
        == "SENSITIVITY_MISMATCH"


# -- 4. a range on a password name -------------------------------------------------------------------

def test_a_range_on_a_pin_or_password_name_is_refused_as_its_match_is(tmp_path):
    # Before: MatchValue(4921) on card_pin was refused, but Range(gte=4921, lte=4921) (or a count's
    # binary search over ranges) sent the PIN and asked whether a point held it.
    kit, client = _kit_client(tmp_path)
    _write(client, "c", "upsert", {"stats": {"pass": 42}, "pass_rate": 93, "password_changed_ms": 1733356800000})
    for key, rng in (("card_pin", models.Range(gte=4921, lte=4921)), ("card.pin", models.Range(gt=4920.5, lt=4921.5)),
                     ("db_password", models.Range(lte=12345678)), ("auth.pass1", models.Range(gte=10**7))):
        cond = models.FieldCondition(key=key, range=rng)
        for call in (lambda: client.count("c", count_filter=models.Filter(must=[cond])),
                     lambda: client.scroll("c", scroll_filter=models.Filter(should=[cond]))):
            err = _refused(call)
            assert err.verdict == "CREDENTIAL_IN_TEXT" and "password name" in str(err)
    # The PIN as a number of its own: hashes and timestamps may hold the digits 4921 by chance.
    assert not re.search(r"(?<![0-9a-fA-F.])4921(?![0-9a-fA-F])", (kit.tmp / "audit.jsonl").read_text())
    for key, rng in (("stats.pass", models.Range(gte=40, lte=45)), ("pass_rate", models.Range(gt=90)),
                     ("password_changed_ms", models.Range(gte=1733356800000))):
        assert client.count("c", count_filter=models.Filter(must=[models.FieldCondition(key=key, range=rng)])).count == 1


# -- 5. a tally of test results under a bare pass (the lead, after the review) -------------------------

TALLIES = [{"results": {"api": {"pass": 120, "fail": 3, "skip": 1}}}, {"user": {"pass": 23, "total": 25}},
           {"db": {"PASS": 57.0, "Failed": 0}}, {"web": [{"pass": 40, "errors": 2}]}]


@pytest.mark.parametrize("payload", TALLIES, ids=range(len(TALLIES)))
def test_a_count_under_a_bare_pass_beside_a_count_of_failures_is_data(tmp_path, payload):
    # Before: {"api": {"pass": 120, "fail": 3}} was read as the API's password on every collection.
    kit, client = _kit_client(tmp_path)
    for col in ("c", "pub"):
        _write(client, col, "upsert", payload)
        assert _stored(client, col, "upsert") == payload


@pytest.mark.parametrize("payload", [{"db": {"pass": 12345678}}, {"db": {"pass": "12345678", "fail": 3}},
                                     {"smtp": {"pass": 12345678, "user": "bob"}},
                                     {"auth": {"pass": 4921.0, "status": "failed"}}])
def test_a_number_under_a_bare_pass_without_a_tally_beside_it_is_still_a_password(tmp_path, payload):
    kit, client = _kit_client(tmp_path)
    before = snapshot(client, "pub")
    assert _refused(lambda: _write(client, "pub", "upsert", payload)).verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(client, "pub") == before
