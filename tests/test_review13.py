"""Thirteenth review: the payload screen's numbers, password names, sibling names and scoped key
memory (f7bf6ef..bb4a3e4), tried against real local-mode Qdrant. Each test fails on the code
before its fix (see docs/security-testing.md, "Thirteenth review")."""
from __future__ import annotations

import pytest

from guardkit import audit_records, models, snapshot
from test_payload_fields import _kit_client, _write
from test_payload_values import WEAK
from qdrant_guard import GuardRefusal


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
