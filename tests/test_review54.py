"""Review 54 (docs/security-testing.md): secrets the detector finds in the JSON a payload is stored
as, or a filter is sent as, that the payload and filter screens let through after the quoted
re-read of 2026-12-07: a secret behind an escaped quote or a control character (found only beside
its JSON escape), a secret behind an apostrophe in a filter (read bare only), and a password under a
password name shaped as PII (an SSN, a card number, an e-mail), which the PII finding kept from the
password rule. Real guard, real local-mode Qdrant; nothing mocked."""
from __future__ import annotations

import json

import numpy as np
import pytest
from guardkit import create, make_kit, models, unit

from qdrant_guard import GuardRefusal, QdrantClient, detect
from qdrant_guard.field_screen import stored_findings

SECRET = "a8f3k2j9x0q7w1e5r4t6"  # a finding only as the value of a secret-like key


def _client(tmp_path, **over):
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "text_field": "text", "intent": {"enabled": False}, **over}
    client = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(client, "c")
    client.upsert("c", [models.PointStruct(id=0, vector=unit(np.random.default_rng(0)), payload={"text": "t"})])
    return client


def _point(payload):
    return [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload=payload)]


@pytest.mark.parametrize("value", ['\\"' + SECRET, "\n" + SECRET, "\t" + SECRET, SECRET[:6] + "\n" + SECRET[6:] + "\x01"])
def test_a_secret_found_only_beside_its_json_escape_is_not_stored(tmp_path, value):
    # Before: read bare or with neutral quotes the detector found nothing, and the point was stored,
    # though it finds the secret in the JSON stored.
    assert any(f.category == "CREDENTIAL" for f in detect.find_sensitive(json.dumps({"api_key": value})))
    client = _client(tmp_path)
    with pytest.raises(GuardRefusal, match="payload field 'api_key' contains credentials") as ei:
        client.upsert("c", _point({"api_key": value}))
    assert SECRET not in str(ei.value)
    assert client.count("c").count == 1


def test_a_finding_in_the_escaped_form_redacts_the_characters_it_spells(tmp_path):
    client = _client(tmp_path, credentials_in_text="redact")
    client.upsert("c", _point({"api_key": "\n" + SECRET, "note": "ok"}))
    got = client.retrieve("c", [1])[0].payload
    assert got["api_key"] == "[GENERIC_SECRET]" and got["note"] == "ok"
    # Offsets are the value's: the two characters of an escape map back to the one they spell.
    assert [(f.start, f.end) for f in stored_findings("api_key", SECRET + "\n")] == [(0, len(SECRET) + 1)]
    assert [(f.start, f.end) for f in stored_findings("api_key", 'x\\"' + SECRET)] == [(0, len(SECRET) + 3)]
    assert stored_findings("api_key", "no escapes here " + SECRET) == []


@pytest.mark.parametrize("payload", [{"password": "123-45-6789"}, {"db_password": "4111111111111111"},
                                     {"password": "jane.doe@example.com"}, {"card": {"pin": "123-45-6789"}}])
def test_a_password_shaped_as_pii_is_a_password(tmp_path, payload):
    # Before: the detector's SSN, card or e-mail finding kept the password rule from running, and on
    # payload_fields = "credentials" PII is stored as given.
    client = _client(tmp_path)
    with pytest.raises(GuardRefusal, match="contains credentials"):
        client.upsert("c", _point(payload))
    assert client.count("c").count == 1


def test_pii_outside_a_password_name_is_still_stored_as_given(tmp_path):
    client = _client(tmp_path)
    client.upsert("c", _point({"ssn": "123-45-6789", "email": "jane.doe@example.com", "password": "********"}))
    assert client.retrieve("c", [1])[0].payload["ssn"] == "123-45-6789"


@pytest.mark.parametrize("match", [
    models.MatchValue(value="'" + SECRET), models.MatchValue(value=SECRET[:5] + "'" + SECRET[5:]),
    models.MatchAny(any=["x", "'" + SECRET]), models.MatchExcept(**{"except": ["\n" + SECRET]}),
    models.MatchValue(value='\\"' + SECRET)])
def test_a_filter_secret_behind_an_apostrophe_or_escape_is_refused(tmp_path, match):
    # Before: a match value was read bare ('client_secret: \'a8f3...'), an apostrophe opened a quote
    # never closed, and the secret was sent; the payload screen found it.
    client = _client(tmp_path, query={"filter_pii": "allow"})
    flt = models.Filter(must=[models.FieldCondition(key="client_secret", match=match)])
    with pytest.raises(GuardRefusal) as ei:
        client.scroll("c", scroll_filter=flt, limit=1)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert SECRET not in str(ei.value)


def test_a_filter_on_a_password_shaped_as_an_ssn_is_refused_even_where_pii_is_allowed(tmp_path):
    client = _client(tmp_path, query={"filter_pii": "allow"})
    flt = models.Filter(must=[models.FieldCondition(key="db_password", match=models.MatchValue(value="123-45-6789"))])
    with pytest.raises(GuardRefusal) as ei:
        client.scroll("c", scroll_filter=flt, limit=1)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    # The same SSN under a field that names none is a PII lookup, which this policy allows.
    flt = models.Filter(must=[models.FieldCondition(key="ssn", match=models.MatchValue(value="123-45-6789"))])
    assert client.scroll("c", scroll_filter=flt, limit=1)[0] == []


def test_a_member_listed_in_gshadow_only_makes_the_group_not_private_where_it_can_be_read():
    # `sg GROUP` lets a user /etc/gshadow lists as a member join with no password, though /etc/group
    # does not name them: measured, bob then appended to alice's 664 policy file. Before, a guard
    # that may read /etc/gshadow (root) still judged the group private; one that may not (alice
    # herself) cannot tell, the limit pinned last.
    import grp
    import subprocess

    from groupkit import add_user, as_user, in_private_etc

    from qdrant_guard.group_writers import GSHADOW, outsider

    def child() -> str:
        alice, bob = add_user("-U"), add_user("-U")
        assert outsider(alice.pw_gid, alice.pw_uid) is None
        with open(GSHADOW) as fh:
            lines = fh.read().splitlines()
        with open(GSHADOW, "w") as fh:
            fh.write("\n".join(line + bob.pw_name if line.startswith(alice.pw_name + ":") else line
                               for line in lines) + "\n")
        assert grp.getgrgid(alice.pw_gid).gr_mem == []
        joined = as_user(bob, lambda: subprocess.run(["sg", alice.pw_name, "-c", "id -g"], capture_output=True,
                                                     text=True, input="").stdout.strip())
        assert joined == str(alice.pw_gid), joined
        assert outsider(alice.pw_gid, alice.pw_uid) == f"user {bob.pw_name!r} (uid {bob.pw_uid}) is in it"
        assert as_user(alice, lambda: repr(outsider(alice.pw_gid, alice.pw_uid))) == "None"
        subprocess.run(["gpasswd", "-d", bob.pw_name, alice.pw_name], check=True, capture_output=True)
        subprocess.run(["chgpasswd"], input=f"{alice.pw_name}:secret\n", text=True, check=True, capture_output=True)
        assert outsider(alice.pw_gid, alice.pw_uid) == f"its password in {GSHADOW} lets whoever knows it join it (newgrp)"
        return "ok"

    assert in_private_etc(child) == "ok"
