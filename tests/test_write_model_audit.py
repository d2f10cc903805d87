"""A write refused because the guard's embedder names another model than the policy declares is
audited (2026-12-06, left open by h-left3: the query side was audited, the write side raised its
ConfigError with no entry, so that decision was missing from the log).

Real local Qdrant, real Ed25519 keys; no mocks. Each test fails on the code before.
"""
from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from guardkit import DIM, Recorder, audit_records, count, make_kit, models, unit

from qdrant_guard import AsyncQdrantClient, ConfigError
from qdrant_guard.audit_verify import verify_audit_file
from tests.test_utility_model_writes import MODEL_A, _clients, _doc_point, _policy

HASHING = f"qg-hashing-v1-{DIM}"


def _assert_entry(kit, err, *, op, principal, point_id=1) -> None:
    rec = audit_records(kit)[-1]
    assert rec["op"] == op and rec["collection"] == "pii" and rec["verdict"] == "UNSUPPORTED_WRITE"
    assert rec["principal"] == principal
    assert rec["directive"] == str(err) and "Nothing was embedded or written" in str(err)
    assert rec["details"] == {"reason": "model_mismatch", "where": "write", "form": "Document",
                              "embedded_by": "embedder", "vector_name": "", "model": HASHING,
                              "declared": MODEL_A, "key": "utility.embedding_model"}
    assert rec["point_ids"] == [point_id]
    assert err.manifest_digest == json.loads((kit.tmp / "audit.jsonl").read_text().splitlines()[-1])["hash"]
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


def test_a_write_refused_for_its_embedders_model_leaves_one_entry(tmp_path):
    kit = make_kit(tmp_path)
    embed = Recorder()  # names the hashing model, the policy declares MODEL_A
    owner, bob = _clients(kit, _policy(kit, noise_on_write=True), embedder=embed)
    for client, who in ((bob, "bob@support"), (owner, "alice@hr")):
        before = len(audit_records(kit))
        with pytest.raises(ConfigError) as ei:  # still the ConfigError it was
            client.upsert("pii", [_doc_point(1)])
        assert len(audit_records(kit)) == before + 1
        _assert_entry(kit, ei.value, op="upsert", principal=who)
    assert embed.seen == [] and count(owner, "pii") == 0


def test_update_vectors_refused_for_its_embedders_model_is_audited(tmp_path):
    kit = make_kit(tmp_path)
    embed = Recorder()
    owner, _ = _clients(kit, _policy(kit, noise_on_write=True), embedder=embed)
    owner.upsert("pii", [models.PointStruct(id=7, vector=unit(np.random.default_rng(10)))])
    before = len(audit_records(kit))
    with pytest.raises(ConfigError) as ei:
        owner.update_vectors("pii", [models.PointVectors(id=7, vector=models.Document(text="x", model="any"))])
    assert len(audit_records(kit)) == before + 1
    _assert_entry(kit, ei.value, op="update_vectors", principal="alice@hr", point_id=7)


def test_the_async_client_audits_the_write_refusal_alike(tmp_path):
    kit = make_kit(tmp_path)

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_policy(kit, noise_on_write=True),
                                  principal=kit.principal("alice", "hr"), embedder=Recorder())
        await owner.create_collection("pii", vectors_config=models.VectorParams(
            size=DIM, distance=models.Distance.EUCLID))
        bob = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(ConfigError) as ei:
            await bob.upsert("pii", [_doc_point(1)])
        return ei.value

    err = asyncio.run(main())
    _assert_entry(kit, err, op="upsert", principal="bob@support")
