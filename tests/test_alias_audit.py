"""A failed alias resolution that the guard goes on past is in the audit log, not only in the
process log. Real local-mode Qdrant; ``get_aliases`` is made to fail by replacing the unguarded
client's method (fault injection, as in tests/test_alias_budget.py)."""
from __future__ import annotations

import numpy as np
import pytest
import qdrant_client

from guardkit import audit_records, create, make_kit, models, unit
from qdrant_guard import QdrantClient

BUDGETED = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
            "diversity": {"max_source_coverage": 0.25, "restricted_sources": ["memo"]}}
UNBUDGETED = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False}}


class Down(ConnectionError):
    pass


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _setup(kit, **memo):
    budgeted = {**BUDGETED, **memo}
    policies = {"memo": budgeted, "memo_v2": budgeted, "open": UNBUDGETED, "open_v2": UNBUDGETED}
    alice = QdrantClient(":memory:", guard=kit.config(policies), principal=kit.principal("alice", "hr"))
    rng = np.random.default_rng(7)
    for name in ("memo", "open"):
        create(alice, name)
        alice.upsert(name, [models.PointStruct(id=i, vector=unit(rng), payload={"source": "memo", "text": f"t{i}"})
                            for i in range(20)])
        alice.update_collection_aliases(change_aliases_operations=[models.CreateAliasOperation(
            create_alias=models.CreateAlias(collection_name=name, alias_name=f"{name}_v2"))])
    return alice, alice.with_principal(kit.principal("dave", "support"))


@pytest.fixture()
def aliases_fail(monkeypatch):
    def unreachable(self, *a, **kw):
        raise Down("qdrant unreachable")

    monkeypatch.setattr(qdrant_client.QdrantClient, "get_aliases", unreachable)


READS = {
    "query_points": lambda c, n: c.query_points(n, query=unit(np.random.default_rng(3)), limit=5),
    "query_batch_points": lambda c, n: c.query_batch_points(
        n, requests=[models.QueryRequest(query=unit(np.random.default_rng(3)), limit=5)]),
    "query_points_groups": lambda c, n: c.query_points_groups(
        n, query=unit(np.random.default_rng(3)), group_by="text", limit=5, group_size=1),
    "scroll": lambda c, n: c.scroll(n, limit=5),
    "retrieve": lambda c, n: c.retrieve(n, list(range(20))),
}


@pytest.mark.parametrize("method", sorted(READS))
def test_a_budgeted_read_charged_to_the_name_used_says_so_in_its_entry(kit, aliases_fail, method):
    _, dave = _setup(kit, fail_closed=False)
    before = len(audit_records(kit))
    READS[method](dave, "memo_v2")
    new = audit_records(kit)[before:]
    assert len(new) == 1 and new[0]["op"] == method and new[0]["collection"] == "memo_v2"
    assert new[0]["verdict"] in ("ALLOW", "BUDGET_EXCEEDED")
    assert new[0]["details"]["alias_error"] == "Down('qdrant unreachable')"
    assert "alias_of" not in new[0]["details"]  # charged to the name used, as the note says


def test_vectors_stripped_for_want_of_alias_resolution_are_noted(kit, aliases_fail):
    # Unbudgeted, so never refused: the receipts name "open", the read names "open_v2", and the
    # vectors are stripped. The entry says why, whatever fail_closed says (true here).
    _, dave = _setup(kit)
    before = len(audit_records(kit))
    recs = dave.retrieve("open_v2", [0, 1, 2], with_vectors=True)
    assert [r.vector for r in recs] == [None, None, None]
    new = audit_records(kit)[before:]
    assert len(new) == 1 and new[0]["verdict"] == "ALLOW"
    assert new[0]["details"]["alias_error"] == "Down('qdrant unreachable')"


def test_a_read_that_resolved_its_alias_has_no_alias_error(kit):
    _, dave = _setup(kit, fail_closed=False)
    dave.retrieve("memo_v2", list(range(20)))
    rec = audit_records(kit)[-1]
    assert "alias_error" not in rec["details"] and rec["details"]["alias_of"] == "memo"


def test_an_alias_change_that_cannot_resolve_aliases_is_audited(kit, monkeypatch):
    alice, _ = _setup(kit)
    before = len(audit_records(kit))

    def unreachable(self, *a, **kw):
        raise Down("qdrant unreachable")

    monkeypatch.setattr(qdrant_client.QdrantClient, "get_aliases", unreachable)
    with pytest.raises(Down):
        alice.update_collection_aliases(change_aliases_operations=[models.RenameAliasOperation(
            rename_alias=models.RenameAlias(old_alias_name="memo_v2", new_alias_name="memo_v3"))])
    new = audit_records(kit)[before:]
    assert [r["verdict"] for r in new] == ["QDRANT_ERROR"]
    assert new[0]["op"] == "update_collection_aliases"
    assert new[0]["details"] == {"method": "get_aliases", "error": "Down"}
    assert "qdrant unreachable" not in new[0]["directive"]
    monkeypatch.undo()
    assert sorted(a.alias_name for a in alice.get_aliases().aliases) == ["memo_v2", "open_v2"]  # nothing changed
