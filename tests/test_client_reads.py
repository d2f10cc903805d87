"""Guarded reads against real local-mode Qdrant: boundaries, vector release, credentials."""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import count, create, make_kit, models, unit
from qdrant_guard import CredentialError, GuardRefusal, Principal, QdrantClient
from qdrant_guard.audit import verify_audit_file
from qdrant_guard.receipts import RECEIPT_KEY


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def store(kit):
    """Owner client (alice@hr) with one noised collection, one raw collection, one public one."""
    cfg = kit.config({
        "noised": {"class": "PII", "owner": "hr", "readers": ["support"], "noise_on_write": True,
                   "diversity": {"enabled": False}},
        "rawish": {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
                   "diversity": {"enabled": False}},
        "secret": {"class": "CREDENTIAL", "owner": "hr"},
        "open": {"class": "PUBLIC"},
    })
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    rng = np.random.default_rng(0)
    for name in ("noised", "rawish", "secret", "open"):
        create(owner, name)
        owner.upsert(name, [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i % 3}", "i": i})
                            for i in range(12)])
    return owner


READS = {
    "query_points": lambda c, n: c.query_points(n, query=[0.1] * 16, limit=3),
    "query_batch_points": lambda c, n: c.query_batch_points(n, [models.QueryRequest(query=[0.1] * 16, limit=3)]),
    "query_points_groups": lambda c, n: c.query_points_groups(n, group_by="source", query=[0.1] * 16, limit=2),
    "scroll": lambda c, n: c.scroll(n, limit=3),
    "retrieve": lambda c, n: c.retrieve(n, [1, 2]),
    "count": lambda c, n: c.count(n),
    "facet": lambda c, n: c.facet(n, key="source"),
}


@pytest.mark.parametrize("method", sorted(READS))
def test_cross_boundary_reads_are_refused_before_qdrant(kit, store, method):
    bob = store.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        READS[method](bob, "secret")
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert "support" in ei.value.directive and "hr" in ei.value.directive


@pytest.mark.parametrize("method", sorted(READS))
def test_anonymous_reads_of_sensitive_collections_are_refused(store, method):
    anon = store.with_principal(None)
    with pytest.raises(GuardRefusal) as ei:
        READS[method](anon, "noised")
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"


@pytest.mark.parametrize("method", sorted(READS))
def test_allowed_reads_work_for_readers(kit, store, method):
    bob = store.with_principal(kit.principal("bob", "support"))
    assert READS[method](bob, "noised") is not None


def test_self_asserted_boundary_is_not_trusted(store):
    liar = store.with_principal(Principal("mallory", "hr"))  # no credential: boundary is only claimed
    with pytest.raises(GuardRefusal) as ei:
        liar.query_points("secret", query=[0.1] * 16)
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert "unverified" in ei.value.directive


def test_credential_from_wrong_authority_is_rejected(kit, store):
    forged = kit.principal("mallory", "support")
    token_claiming_hr = forged.credential
    with pytest.raises(CredentialError):
        store.with_principal(Principal("mallory", "hr", token_claiming_hr))


def test_expired_credential_is_refused(kit, store):
    import time

    bob = store.with_principal(kit.principal("bob", "support", ttl_s=60, now=time.time() - 30))
    bob.query_points("noised", query=[0.1] * 16)  # still valid
    bob.guard.clock = lambda: time.time() + 120
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("noised", query=[0.1] * 16)
    assert ei.value.verdict == "INVALID_CREDENTIAL"


def test_readers_get_receipted_noised_vectors(kit, store):
    bob = store.with_principal(kit.principal("bob", "support"))
    res = bob.query_points("noised", query=[0.1] * 16, limit=5, with_vectors=True)
    assert len(res.points) == 5
    assert all(p.vector is not None for p in res.points)
    records = bob.retrieve("noised", [0, 1], with_vectors=True, with_payload=False)
    assert all(r.vector is not None for r in records)
    assert all(r.payload is None for r in records)  # the user's payload selector still applies


def test_raw_vectors_never_leave_the_boundary(kit, store):
    bob = store.with_principal(kit.principal("bob", "support"))
    res = bob.query_points("rawish", query=[0.1] * 16, limit=5, with_vectors=True, with_payload=["i"])
    assert len(res.points) == 5
    assert all(p.vector is None for p in res.points)
    assert all(set(p.payload) == {"i"} for p in res.points)
    recs, _ = bob.scroll("rawish", limit=20, with_vectors=True)
    assert len(recs) == 12 and all(r.vector is None for r in recs)
    # the owner still sees its raw vectors
    own = store.retrieve("rawish", [0], with_vectors=True)
    assert own[0].vector is not None


def test_a_planted_receipt_does_not_release_a_raw_vector(kit, store):
    """A receipt copied from another point does not verify for this vector: it stays stripped."""
    donor = store.retrieve("noised", [0], with_payload=True)[0].payload[RECEIPT_KEY]
    from qdrant_client import QdrantClient as Raw

    Raw.set_payload(store, "rawish", payload={RECEIPT_KEY: donor}, points=[0])  # bypasses the guard
    bob = store.with_principal(kit.principal("bob", "support"))
    rec = bob.retrieve("rawish", [0], with_vectors=True)[0]
    assert rec.vector is None


def test_public_collections_pass_through_for_anyone(store):
    anon = store.with_principal(None)
    res = anon.query_points("open", query=[0.1] * 16, limit=4, with_vectors=True)
    assert len(res.points) == 4 and all(p.vector is not None for p in res.points)
    assert count(anon, "open") == 12


def test_every_decision_is_audited_and_the_chain_verifies(kit, store):
    bob = store.with_principal(kit.principal("bob", "support"))
    bob.query_points("noised", query=[0.1] * 16)
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("secret", query=[0.1] * 16)
    path = kit.tmp / "audit.jsonl"
    rep = verify_audit_file(path)
    assert rep.ok, rep
    import json

    lines = [json.loads(x) for x in path.read_text().splitlines()]
    verdicts = [ln["record"]["verdict"] for ln in lines]
    assert "REFUSED_CROSS_BOUNDARY" in verdicts and "ALLOW_NOISED" in verdicts
    last = lines[-1]["record"]
    assert lines[-1]["hash"] == ei.value.manifest_digest
    assert last["principal"] == "bob@support"
    assert set(last["manifest"]) == {"embedding_sensitivity_class", "differential_privacy_epsilon",
                                     "reconstruction_resistance_receipt", "retrieval_utility_guard_hash"}


def test_audit_write_failure_fails_closed(kit, store, monkeypatch):
    from qdrant_guard.errors import AuditError

    bob = store.with_principal(kit.principal("bob", "support"))

    def broken(record):
        raise OSError("disk full")

    monkeypatch.setattr(bob.guard.audit, "append", broken)
    before = count(store, "noised")
    with pytest.raises(AuditError):
        bob.upsert("noised", [models.PointStruct(id=100, vector=[0.2] * 16)])
    with pytest.raises(AuditError):
        bob.query_points("noised", query=[0.1] * 16)
    assert count(store, "noised") == before
