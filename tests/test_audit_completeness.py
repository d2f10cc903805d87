"""Every decision on a guarded client reaches the audit log, with the right verdict."""
from __future__ import annotations

import json

import numpy as np
import pytest

from guardkit import create, make_kit, models, unit
from qdrant_guard import QdrantClient
from qdrant_guard.errors import ConfigError


def _records(kit):
    path = kit.tmp / "audit.jsonl"
    return [json.loads(line)["record"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture()
def setup(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True, "text_field": "text"}},
                     unlisted="refuse")
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    rng = np.random.default_rng(0)
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"n": i}) for i in range(4)])
    return kit, owner


@pytest.mark.parametrize("operation", [
    models.DeleteOperation(delete=models.PointIdsList(points=[3])),
    models.SetPayloadOperation(set_payload=models.SetPayload(payload={"x": 1}, points=[1])),
    models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"x": 1}, points=[1])),
    models.ClearPayloadOperation(clear_payload=models.PointIdsList(points=[1])),
    models.DeletePayloadOperation(delete_payload=models.DeletePayload(keys=["n"], points=[1])),
    models.DeleteVectorsOperation(delete_vectors=models.DeleteVectors(points=[2], vector=[""])),
])
def test_batch_payload_and_delete_operations_are_audited(setup, operation):
    # The same change made with delete()/set_payload()/... is audited; inside a batch it must be too.
    kit, owner = setup
    before = len(_records(kit))
    owner.batch_update_points("pii", [operation])
    new = _records(kit)[before:]
    assert len(new) == 1
    assert new[0]["op"] == "batch_update_points" and new[0]["verdict"] == "ALLOW"
    assert new[0]["collection"] == "pii" and new[0]["principal"] == "alice@hr"


def test_unlisted_collection_refusal_is_audited(setup):
    kit, owner = setup
    before = len(_records(kit))
    with pytest.raises(ConfigError):
        owner.scroll("elsewhere")
    new = _records(kit)[before:]
    assert len(new) == 1
    assert new[0]["verdict"] == "REFUSED_CROSS_BOUNDARY" and new[0]["collection"] == "elsewhere"
    assert new[0]["op"] == "scroll" and new[0]["principal"] == "alice@hr"


def test_vector_budget_in_monitor_mode_is_not_audited_as_withheld(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"emb": {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"],
                              "noise_on_write": True, "diversity": {"max_vectors": 2, "mode": "monitor"}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "emb")
    rng = np.random.default_rng(1)
    owner.upsert("emb", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i}"}) for i in range(5)])
    reader = owner.with_principal(kit.principal("bob", "support"))
    records, _ = reader.scroll("emb", limit=5, with_vectors=True)
    assert sum(r.vector is not None for r in records) == 5  # monitor: nothing withheld
    rec = _records(kit)[-1]
    assert rec["op"] == "scroll" and rec["verdict"] == "ALLOW"
    assert rec["details"]["vector_budget"]["withheld"] == 3 and rec["details"]["vector_budget_monitor"] is True


def _vectors(rng, *ids):
    return [models.PointVectors(id=i, vector=unit(rng)) for i in ids]


@pytest.mark.parametrize("call", [
    lambda c, rng: c.update_vectors("pii", _vectors(rng, 1), update_filter=models.Filter(must=[])),
    lambda c, rng: c.update_vectors("pii", _vectors(rng, 1, 99)),
    lambda c, rng: c.batch_update_points("pii", [
        models.DeleteOperation(delete=models.FilterSelector(filter=models.Filter(must=[]))),
        models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(points=_vectors(rng, 1)))]),
], ids=["update_filter", "missing_point", "after_delete_by_filter"])
def test_writes_the_guard_cannot_enforce_are_audited(setup, call):
    # UnsupportedWriteError is a refusal on policy grounds (receipts are bound by point id), not a
    # malformed argument: it must leave a trace like every other refusal.
    from qdrant_guard import UnsupportedWriteError
    kit, owner = setup
    before = len(_records(kit))
    with pytest.raises(UnsupportedWriteError):
        call(owner, np.random.default_rng(1))
    new = _records(kit)[before:]
    assert [r["verdict"] for r in new] == ["UNSUPPORTED_WRITE"]
    assert new[0]["collection"] == "pii" and new[0]["principal"] == "alice@hr"


def test_a_rejected_credential_is_audited(setup):
    # A forged or mismatched credential fails before any call, but the attempt must leave a trace.
    from qdrant_guard import CredentialError, Principal
    kit, owner = setup
    support = kit.principal("bob", "support")
    claims_hr = Principal(agent_id="bob", boundary="hr", credential=support.credential)
    forged = support.credential[:-2] + ("AA" if not support.credential.endswith("AA") else "BB")
    before = len(_records(kit))
    with pytest.raises(CredentialError):
        owner.with_principal(claims_hr)
    with pytest.raises(CredentialError):
        owner.with_principal(Principal(agent_id="bob", boundary="support", credential=forged))
    new = _records(kit)[before:]
    assert [(r["op"], r["verdict"], r["principal"]) for r in new] == [
        ("with_principal", "INVALID_CREDENTIAL", "bob@hr (rejected)"),
        ("with_principal", "INVALID_CREDENTIAL", "bob@support (rejected)"),
    ]
    assert new[1]["details"]["reason"] == "bad_signature"
    assert forged not in json.dumps(new) and support.credential not in json.dumps(new)


def _batch(rng, missing_id):
    return [
        models.UpsertOperation(upsert=models.PointsList(points=[
            models.PointStruct(id=i, vector=unit(rng), payload={"n": i}) for i in (10, 11)])),
        models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(points=[
            models.PointVectors(id=missing_id, vector=unit(rng))])),
    ]


def test_batch_refused_late_audits_no_earlier_acceptance(setup):
    """A batch is sent whole or not at all: when its second operation is refused, the first's
    acceptance must not be in the log (nothing was written)."""
    from qdrant_guard.errors import UnsupportedWriteError

    kit, owner = setup
    before = len(_records(kit))
    with pytest.raises(UnsupportedWriteError):
        owner.batch_update_points("pii", _batch(np.random.default_rng(1), missing_id=999))
    new = _records(kit)[before:]
    assert [r["verdict"] for r in new] == ["UNSUPPORTED_WRITE"]
    assert owner.retrieve("pii", [10, 11]) == []


def test_batch_accepted_audits_every_operation_in_order(setup):
    kit, owner = setup
    before = len(_records(kit))
    owner.batch_update_points("pii", _batch(np.random.default_rng(2), missing_id=1))
    new = _records(kit)[before:]
    assert len(new) == 2 and all(r["op"] == "batch_update_points" for r in new)
    assert [r["point_ids"] for r in new] == [[10, 11], [1]]
    assert all(r["verdict"] not in ("UNSUPPORTED_WRITE", "FAIL_CLOSED") for r in new)


@pytest.mark.parametrize("handle", ["http", "grpc_points", "init_options"])
def test_raw_handle_refusals_are_audited(setup, handle):
    # Reaching for a raw handle under a policy is an attempt to leave the guard: the log must show it.
    from qdrant_guard import GuardRefusal

    kit, owner = setup
    before = len(_records(kit))
    with pytest.raises(GuardRefusal, match="bypass the guard"):
        getattr(owner, handle)
    new = _records(kit)[before:]
    assert [(r["op"], r["verdict"], r["principal"]) for r in new] == [
        (handle, "REFUSED_CROSS_BOUNDARY", "alice@hr")]


def test_batch_audits_its_operations_in_batch_order(setup):
    # [delete 1, upsert 1] leaves point 1 stored, [upsert 1, delete 1] leaves it deleted: the log
    # must tell them apart, so each operation's entry stands where the operation stood.
    kit, owner = setup
    rng = np.random.default_rng(3)
    delete = models.DeleteOperation(delete=models.PointIdsList(points=[1]))
    set_payload = models.SetPayloadOperation(set_payload=models.SetPayload(payload={"x": 1}, points=[1]))
    upsert = models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=1, vector=unit(rng))]))
    for batch, verdicts, stored in (([delete, upsert, set_payload], ["ALLOW", "ALLOW_NOISED", "ALLOW"], True),
                                    ([upsert, delete], ["ALLOW_NOISED", "ALLOW"], False)):
        before = len(_records(kit))
        owner.batch_update_points("pii", batch)
        new = _records(kit)[before:]
        assert [r["verdict"] for r in new] == verdicts
        assert [r["details"].get("operations") for r in new if r["verdict"] == "ALLOW"] == [
            {type(op).__name__.removesuffix("Operation"): 1} for op in batch if op is not upsert]
        assert bool(owner.retrieve("pii", [1])) == stored
