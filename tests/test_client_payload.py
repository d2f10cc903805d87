"""Receipts cannot be forged, altered or stripped through payload methods on sensitive collections."""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import create, make_kit, models, snapshot, unit
from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.receipts import RECEIPT_KEY
from qdrant_guard.receipts import verify as verify_stored


@pytest.fixture()
def setup(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                              "text_field": "text"}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    rng = np.random.default_rng(0)
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"n": i, "tag": "a" if i < 3 else "b"})
                         for i in range(6)])
    return kit, owner


def _receipts(owner):
    return {pid: p[RECEIPT_KEY] for pid, p, _ in snapshot(owner, "pii")}


def _all_verify(owner):
    reps = verify_stored(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys)
    return len(reps) == 6 and all(r.ok for r in reps)


@pytest.mark.parametrize("call", [
    lambda c: c.set_payload("pii", payload={RECEIPT_KEY: {"v": 1, "vectors": {}}}, points=[0]),
    lambda c: c.set_payload("pii", payload={"x": 1}, points=[0], key=RECEIPT_KEY),
    lambda c: c.set_payload("pii", payload={"sig": "AAAA"}, points=[0], key=f"{RECEIPT_KEY}.vectors"),
    lambda c: c.delete_payload("pii", keys=[RECEIPT_KEY], points=[0]),
    lambda c: c.delete_payload("pii", keys=["n", f"{RECEIPT_KEY}.vectors"], points=[0]),
    lambda c: c.overwrite_payload("pii", payload={RECEIPT_KEY: "forged"}, points=[0]),
    lambda c: c.batch_update_points("pii", [models.SetPayloadOperation(
        set_payload=models.SetPayload(payload={RECEIPT_KEY: None}, points=[1]))]),
    lambda c: c.batch_update_points("pii", [models.DeletePayloadOperation(
        delete_payload=models.DeletePayload(keys=[RECEIPT_KEY], points=[1]))]),
])
def test_receipt_tampering_is_refused_and_nothing_changes(setup, call):
    kit, owner = setup
    before = snapshot(owner, "pii")
    for client in (owner, owner.with_principal(kit.principal("bob", "support"))):
        with pytest.raises(GuardRefusal) as ei:
            call(client)
        assert ei.value.verdict == "RECEIPT_TAMPERING"
    assert snapshot(owner, "pii") == before


def test_ordinary_payload_changes_keep_receipts(setup):
    _, owner = setup
    before = _receipts(owner)
    owner.set_payload("pii", payload={"extra": 1}, points=[0, 1])
    owner.delete_payload("pii", keys=["n"], points=[2])
    assert _receipts(owner) == before
    assert _all_verify(owner)


def test_overwrite_and_clear_preserve_receipts(setup):
    _, owner = setup
    before = _receipts(owner)
    owner.overwrite_payload("pii", payload={"only": "this"}, points=[0, 1])
    owner.overwrite_payload("pii", payload={"by": "filter"},
                            points=models.Filter(must=[models.FieldCondition(key="tag", match=models.MatchValue(value="b"))]))
    owner.clear_payload("pii", points_selector=[2])
    after = snapshot(owner, "pii")
    assert _receipts(owner) == before
    payloads = {pid: {k: v for k, v in p.items() if k != RECEIPT_KEY} for pid, p, _ in after}
    assert payloads[0] == {"only": "this"} and payloads[2] == {}
    assert payloads[3] == {"by": "filter"} and payloads[5] == {"by": "filter"}
    assert _all_verify(owner)


def test_payload_text_is_redacted_on_set_payload(setup):
    _, owner = setup
    owner.set_payload("pii", payload={"text": "call me at SSN 123-45-6789"}, points=[0])
    (pid, payload, _), *_ = snapshot(owner, "pii")
    assert payload["text"] == "call me at SSN [SSN]"


def test_credentials_in_payload_text_are_refused(setup):
    kit, owner = setup
    before = snapshot(owner, "pii")
    with pytest.raises(GuardRefusal) as ei:
        owner.set_payload("pii", payload={"text": "key AKIAZ7QP3LMNB4XKDT2Q"}, points=[0])
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert snapshot(owner, "pii") == before


def test_payload_methods_from_outside_writers_are_refused(setup):
    kit, owner = setup
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True}})
    owner.guard.config = cfg
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        bob.set_payload("pii", payload={"x": 1}, points=[0])
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    with pytest.raises(GuardRefusal):
        bob.delete("pii", points_selector=[0])


def test_payload_only_batches_need_write_access(setup):
    kit, owner = setup
    owner.guard.config = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True}})
    bob = owner.with_principal(kit.principal("bob", "support"))
    before = snapshot(owner, "pii")
    with pytest.raises(GuardRefusal) as ei:
        bob.batch_update_points("pii", [models.SetPayloadOperation(set_payload=models.SetPayload(payload={"x": 1}, points=[0]))])
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert snapshot(owner, "pii") == before
