"""set_payload / delete_payload (and their batch operations) naming a point that does not exist on
a sensitive collection: refused before anything is written, audited, naming the missing ids.
Plain qdrant-client (local mode, and a server alike) writes the other points, then fails.
Real local-mode Qdrant throughout."""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import audit_records, create, make_kit, snapshot, unit
from qdrant_guard import QdrantClient, UnsupportedWriteError
from qdrant_guard.receipts import verify
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def owner(kit):
    cfg = kit.config({"c": {"class": "PII", "owner": "hr"}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "c")
    rng = np.random.default_rng(0)
    client.upsert("c", [models.PointStruct(id=i, vector=unit(rng), payload={"a": i}) for i in (1, 3)])
    return client


def _payloads(client):
    return {pid: {k: v for k, v in (p or {}).items() if not k.startswith("_qdrant_guard")}
            for pid, p, _ in snapshot(client, "c")}


def test_plain_qdrant_client_half_applies_a_payload_change_naming_a_missing_point():
    # The behaviour the guard must not pass on.
    raw = RawClient(":memory:")
    raw.create_collection("c", vectors_config=models.VectorParams(size=2, distance=models.Distance.DOT))
    raw.upsert("c", [models.PointStruct(id=i, vector=[1.0, 0.0], payload={"a": i}) for i in (1, 3)])
    with pytest.raises(Exception):
        raw.set_payload("c", payload={"x": 1}, points=[1, 2, 3])
    assert {p.id: p.payload for p in raw.scroll("c")[0]} == {1: {"a": 1, "x": 1}, 3: {"a": 3, "x": 1}}


@pytest.mark.parametrize("selector", [[1, 2, 3], models.PointIdsList(points=[1, 2, 3])], ids=["list", "PointIdsList"])
@pytest.mark.parametrize("method, kw", [("set_payload", {"payload": {"x": 1}}), ("delete_payload", {"keys": ["a"]})])
def test_a_payload_change_naming_a_missing_point_writes_nothing(kit, owner, method, kw, selector):
    # Before: points 1 and 3 were written, then the call failed (KeyError in local mode).
    before = _payloads(owner)
    n_before = len(audit_records(kit))
    with pytest.raises(UnsupportedWriteError, match=r"point\(s\) \[2\] do not exist.*Nothing was written"):
        getattr(owner, method)("c", points=selector, **kw)
    assert _payloads(owner) == before
    (entry,) = audit_records(kit)[n_before:]
    assert (entry["verdict"], entry["op"]) == ("UNSUPPORTED_WRITE", method)
    assert "[2]" in entry["directive"]


@pytest.mark.parametrize("selector", [[1, 3], models.PointIdsList(points=[1, 3])], ids=["list", "PointIdsList"])
def test_payload_changes_naming_existing_points_apply_and_keep_receipts(kit, owner, selector):
    trusted = dict(owner.guard.trusted_receipt_keys)
    owner.set_payload("c", payload={"x": 1}, points=selector)
    owner.delete_payload("c", keys=["a"], points=selector)
    assert _payloads(owner) == {1: {"x": 1}, 3: {"x": 1}}
    assert [r.reason for r in verify(owner, "c", trusted_keys=trusted)] == ["ok", "ok"]
    # By filter, nothing to look up: applied as before.
    owner.set_payload("c", payload={"y": 2}, points=models.Filter(must=[models.HasIdCondition(has_id=[1, 2])]))
    assert _payloads(owner) == {1: {"x": 1, "y": 2}, 3: {"x": 1}}


def test_an_invalid_point_id_is_refused_and_audited(kit, owner):
    n_before = len(audit_records(kit))
    with pytest.raises(UnsupportedWriteError, match="point ids are integers"):
        owner.set_payload("c", payload={"x": 1}, points=[1, -4])
    assert audit_records(kit)[n_before]["verdict"] == "UNSUPPORTED_WRITE"
    assert _payloads(owner) == {1: {"a": 1}, 3: {"a": 3}}


def _set(points, **kw):
    return models.SetPayloadOperation(set_payload=models.SetPayload(payload={"x": 1}, points=points, **kw))


def _del(points):
    return models.DeletePayloadOperation(delete_payload=models.DeletePayload(keys=["a"], points=points))


@pytest.mark.parametrize("op", [_set([1, 2, 3]), _del([1, 2, 3])], ids=["SetPayload", "DeletePayload"])
def test_a_batch_payload_operation_naming_a_missing_point_writes_nothing(kit, owner, op):
    before = snapshot(owner, "c")
    with pytest.raises(UnsupportedWriteError, match=r"point\(s\) \[2\] do not exist"):
        owner.batch_update_points("c", [_set([1]), op])
    assert snapshot(owner, "c") == before


def test_a_batch_payload_operation_may_name_a_point_upserted_earlier_in_it(owner):
    rng = np.random.default_rng(5)
    owner.batch_update_points("c", [
        models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=5, vector=unit(rng))])),
        _set([1, 5]),
    ])
    assert _payloads(owner) == {1: {"a": 1, "x": 1}, 3: {"a": 3}, 5: {"x": 1}}


def test_a_batch_payload_operation_naming_a_point_deleted_earlier_in_it_is_refused(owner):
    before = snapshot(owner, "c")
    with pytest.raises(UnsupportedWriteError, match=r"point\(s\) \[1\] deleted earlier"):
        owner.batch_update_points("c", [
            models.DeleteOperation(delete=models.PointIdsList(points=[1])),
            _del([1, 3]),
        ])
    assert snapshot(owner, "c") == before


def test_a_failing_look_up_is_audited_and_writes_nothing(kit):
    # The look-up is a new request of these calls: when Qdrant fails it (here: no such
    # collection), the call must still leave an entry, as it did when sent without one.
    cfg = kit.config({"gone": {"class": "PII", "owner": "hr"}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    n_before = len(audit_records(kit))
    with pytest.raises(ValueError, match="not found"):
        client.set_payload("gone", payload={"x": 1}, points=[1])
    (entry,) = audit_records(kit)[n_before:]
    assert (entry["verdict"], entry["op"]) == ("QDRANT_ERROR", "set_payload")
    assert "nothing was written" in entry["directive"]


def test_a_batch_payload_operation_after_a_delete_by_filter_skips_the_deleted_point(owner):
    # Plain qdrant-client applies the delete and point 3's payload, then fails on point 1; the
    # guard sends the ids as a has_id filter, so the batch applies whole.
    owner.batch_update_points("c", [
        models.DeleteOperation(delete=models.FilterSelector(filter=models.Filter(must=[
            models.HasIdCondition(has_id=[1])]))),
        _set([1, 3]),
    ])
    assert _payloads(owner) == {3: {"a": 3, "x": 1}}


@pytest.mark.parametrize("call", [
    lambda c: c.overwrite_payload("gone", payload={"x": 1}, points=[1]),
    lambda c: c.clear_payload("gone", points_selector=[1]),
    lambda c: c.clear_payload("gone", points_selector=models.Filter(must=[
        models.FieldCondition(key="a", match=models.MatchValue(value=1))])),
    lambda c: c.delete_vectors("gone", vectors=[""], points=[1]),
    lambda c: c.update_vectors("gone", points=[models.PointVectors(id=1, vector=[0.25] * 16)]),
], ids=["overwrite_payload", "clear_payload", "clear_payload-filter", "delete_vectors", "update_vectors"])
def test_every_look_up_before_a_write_is_audited_when_qdrant_fails_it(kit, call):
    # The guard reads the points these calls name before it decides; a failure there (here: no
    # such collection) left no entry at all. It names the method and the error type only.
    cfg = kit.config({"gone": {"class": "PII", "owner": "hr", "raw_in_boundary": True}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    n_before = len(audit_records(kit))
    with pytest.raises(ValueError, match="not found"):
        call(client)
    (entry,) = audit_records(kit)[n_before:]
    assert entry["verdict"] == "QDRANT_ERROR"
    assert entry["details"]["error"] == "ValueError"
    assert entry["details"]["method"] in ("retrieve", "scroll")
    assert "not found" not in entry["directive"]


@pytest.mark.parametrize("call", [
    lambda c: c.overwrite_payload("c", payload={"x": 1}, points=[]),
    lambda c: c.clear_payload("c", points_selector=[]),
    lambda c: c.clear_payload("c", points_selector=models.PointIdsList(points=[])),
], ids=["overwrite_payload", "clear_payload", "clear_payload-PointIdsList"])
def test_an_empty_id_list_is_refused_as_plain_qdrant_client_refuses_it(owner, call):
    # Plain qdrant-client raises "Empty update request"; the guard answered COMPLETED without
    # sending anything. Nothing is written either way; the error is now the same.
    raw = RawClient(":memory:")
    create(raw, "c")
    with pytest.raises(ValueError, match="Empty update request"):
        call(raw)
    before = snapshot(owner, "c")
    with pytest.raises(ValueError, match="Empty update request"):
        call(owner)
    assert snapshot(owner, "c") == before
