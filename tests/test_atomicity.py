"""A failure injected between the guard's decision and the Qdrant call leaves Qdrant unchanged and
is audited; a Qdrant failure mid-upload leaves only whole, receipted batches."""
from __future__ import annotations

import json

import numpy as np
import pytest
import qdrant_client

from guardkit import count, create, make_kit, models, snapshot, unit
from qdrant_guard import QdrantClient
from qdrant_guard.audit import verify_audit_file
from qdrant_guard.receipts import verify as verify_stored


class Injected(RuntimeError):
    pass


@pytest.fixture()
def owner(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "pii")
    rng = np.random.default_rng(0)
    client.upsert("pii", [models.PointStruct(id=i, vector=unit(rng)) for i in range(3)])
    return client, kit


@pytest.mark.parametrize("method", ["upsert", "upload_points", "batch_update_points", "update_vectors"])
def test_failure_between_decision_and_call_leaves_qdrant_unchanged(owner, monkeypatch, method):
    client, kit = owner
    before = snapshot(client, "pii")
    called = []

    def fail(self, *a, **kw):
        called.append(method)
        raise Injected("transport down")

    target = "upload_points" if method == "upload_points" else method
    if method == "update_vectors":
        target = "batch_update_points"  # update_vectors is sent as one batch with its receipts
    monkeypatch.setattr(qdrant_client.QdrantClient, target, fail)
    rng = np.random.default_rng(1)
    pts = [models.PointStruct(id=i, vector=unit(rng)) for i in range(10, 20)]
    with pytest.raises(Injected):
        if method == "upsert":
            client.upsert("pii", pts)
        elif method == "upload_points":
            client.upload_points("pii", pts)
        elif method == "batch_update_points":
            client.batch_update_points("pii", [models.UpsertOperation(upsert=models.PointsList(points=pts))])
        else:
            client.update_vectors("pii", [models.PointVectors(id=0, vector=unit(rng))])
    monkeypatch.undo()
    assert called
    assert snapshot(client, "pii") == before
    records = [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text().splitlines()]
    assert records[-1]["verdict"] == "QDRANT_ERROR" and records[-1]["details"]["error"] == "Injected"
    assert "transport down" not in json.dumps(records[-1])  # the type, never the message
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


def test_qdrant_failing_inside_the_call_is_audited_and_retry_is_idempotent(owner, monkeypatch):
    """Local mode applies an upload as one upsert; when it fails nothing is written. (Against a
    server, qdrant-client splits uploads into batch_size requests: see docs/atomicity.md.)"""
    from qdrant_client.local.local_collection import LocalCollection

    client, kit = owner
    before = snapshot(client, "pii")

    def dying(self, *a, **kw):
        raise Injected("qdrant died while applying the upload")

    monkeypatch.setattr(LocalCollection, "upsert", dying)
    rng = np.random.default_rng(2)
    pts = [models.PointStruct(id=100 + i, vector=unit(rng)) for i in range(50)]
    with pytest.raises(Injected):
        client.upload_points("pii", pts, batch_size=10, max_retries=0)
    monkeypatch.undo()
    assert snapshot(client, "pii") == before
    rec = json.loads((kit.tmp / "audit.jsonl").read_text().splitlines()[-1])["record"]
    assert rec["verdict"] == "QDRANT_ERROR"
    client.upload_points("pii", pts, batch_size=10)
    client.upload_points("pii", pts, batch_size=10)  # re-running is idempotent: same ids, same vectors
    assert count(client, "pii") == 53
    reports = verify_stored(client, "pii", trusted_keys=client.guard.trusted_receipt_keys)
    assert len(reports) == 53 and all(r.ok for r in reports)
