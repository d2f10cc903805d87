"""A guarded write to a sensitive collection refused because of its input (a NaN, Inf, out-of-range
or wrong-sized vector, a vector past the receipt grid after noising, a malformed point or batch)
leaves exactly one audit entry naming the method, the reason and the point, never the vector
values or payload text; the caller gets the same exception as before, and nothing is written
(real local-mode Qdrant, real crypto)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import AuditError, InvalidVectorError, QdrantClient, UnsupportedWriteError
from tests.guardkit import DIM, create, make_kit, models, snapshot, unit

SECRET = "patient Jane Roe, SSN 078-05-1120"
# Beyond float32: Qdrant would store it as inf. Its digits must not reach the log.
HUGE = 1.2345678901e39


def _records(kit):
    path = kit.tmp / "audit.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["record"] for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture()
def setup(tmp_path):
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False}}
    cfg = kit.config({"pii": pol, "named": pol})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    create(owner, "named", named=("a",))
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(np.random.default_rng(i)), payload={"n": i})
                         for i in range(3)])
    return kit, owner


def _bad(kind):
    v = unit(np.random.default_rng(7))
    if kind == "nan":
        v[3] = float("nan")
    elif kind == "inf":
        v[3] = float("-inf")
    elif kind == "beyond_float32":
        v[3] = HUGE
    elif kind == "dimension":
        v = v[:-1]
    elif kind == "shape":
        v = [v, v]
    return v


KINDS = {"nan": ("non_finite", "non-finite value"), "inf": ("non_finite", "non-finite value"),
         "beyond_float32": ("beyond_float32", "outside the float32 range"),
         "dimension": ("wrong_dimension", f"has dimension {DIM - 1}"),
         # A list of vectors (a multivector) on a collection without multivector_config. A
         # non-float dtype is refused by qdrant-client's models before the guard sees it.
         "shape": ("bad_shape", "expected a 1-d vector")}

WRITES = {
    "upsert": lambda c, v: c.upsert("pii", [models.PointStruct(id=11, vector=v, payload={"note": SECRET})]),
    "upload_points": lambda c, v: c.upload_points(
        "pii", [models.PointStruct(id=11, vector=v, payload={"note": SECRET})]),
    "upload_collection": lambda c, v: c.upload_collection("pii", [v], payload=[{"note": SECRET}], ids=[11]),
    "update_vectors": lambda c, v: c.update_vectors("pii", [models.PointVectors(id=1, vector=v)]),
    "batch_update_points": lambda c, v: c.batch_update_points("pii", [
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={"note": SECRET}, points=[2])),
        models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=11, vector=v)]))]),
}
POINT = {"upsert": 11, "upload_points": 11, "upload_collection": 11, "update_vectors": 1,
         "batch_update_points": 11}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("method", sorted(WRITES))
def test_a_refused_vector_is_audited_once_and_nothing_is_written(setup, method, kind):
    kit, owner = setup
    reason, message = KINDS[kind]
    before, stored = len(_records(kit)), snapshot(owner, "pii")
    with pytest.raises(InvalidVectorError) as info:
        WRITES[method](owner, _bad(kind))
    assert message in str(info.value) and f"point {POINT[method]}" in str(info.value)
    new = _records(kit)[before:]
    assert [(r["op"], r["verdict"], r["collection"], r["principal"]) for r in new] == [
        (method, "UNSUPPORTED_WRITE", "pii", "alice@hr")]
    assert new[0]["point_ids"] == [POINT[method]]
    # A batch's entry also names the operation (update_operations[1]).
    at = {"operation": 1} if method == "batch_update_points" else {}
    assert new[0]["details"] == {"error": "InvalidVectorError", "reason": reason, "vector_name": "", **at}
    text = json.dumps(new)
    assert "1.2345678" not in text and "078-05-1120" not in text and "Jane" not in text
    assert snapshot(owner, "pii") == stored


def test_an_unknown_vector_name_is_audited_with_its_name(setup):
    kit, owner = setup
    before = len(_records(kit))
    with pytest.raises(InvalidVectorError, match="unknown vector name 'b'"):
        owner.upsert("named", [models.PointStruct(id=5, vector={"b": unit(np.random.default_rng(1))})])
    (rec,) = _records(kit)[before:]
    assert rec["verdict"] == "UNSUPPORTED_WRITE" and rec["point_ids"] == [5]
    assert rec["details"] == {"error": "InvalidVectorError", "reason": "unknown_vector_name", "vector_name": "b"}
    assert snapshot(owner, "named") == []


def test_a_document_without_an_embedder_is_audited(setup):
    kit, owner = setup
    before, stored = len(_records(kit)), snapshot(owner, "pii")
    with pytest.raises(InvalidVectorError, match="pass embedder="):
        owner.upsert("pii", [models.PointStruct(id=12, vector=models.Document(text=SECRET, model="m"))])
    (rec,) = _records(kit)[before:]
    assert (rec["op"], rec["verdict"], rec["point_ids"]) == ("upsert", "UNSUPPORTED_WRITE", [12])
    assert "078-05-1120" not in json.dumps(rec)
    assert snapshot(owner, "pii") == stored


@pytest.mark.parametrize("call, error, match", [
    (lambda c: c.upsert("pii", models.Batch(ids=[20, 21], vectors=[unit(np.random.default_rng(0))])),
     ValueError, "every column must have one entry per id"),
    (lambda c: c.upload_collection("pii", [unit(np.random.default_rng(0))] * 2, ids=[20]),
     ValueError, "the three must have the same length"),
    (lambda c: c.upsert("pii", [models.Record(id=1, payload={"n": 1})]),
     UnsupportedWriteError, "has no vector"),
    (lambda c: c.upload_points("pii", [(20, [0.0] * DIM)]),
     TypeError, "must be models.PointStruct"),
    # A dict is read as the REST client reads it; one that is no PointStruct is refused the same way.
    (lambda c: c.upload_points("pii", [{"id": 20, "vector": "not a vector"}]),
     TypeError, "is a dict that is not a models.PointStruct"),
], ids=["uneven_batch", "uneven_columns", "record_without_vector", "not_a_point", "invalid_dict_point"])
def test_a_malformed_write_argument_is_audited_once(setup, call, error, match):
    kit, owner = setup
    before, stored = len(_records(kit)), snapshot(owner, "pii")
    with pytest.raises(error, match=match) as raised:
        call(owner)
    new = _records(kit)[before:]
    assert [(r["verdict"], r["collection"]) for r in new] == [("UNSUPPORTED_WRITE", "pii")]
    # The audit names the class raised (a GuardArgument* subclass of the builtin, where it is one).
    assert new[0]["details"] == {"error": type(raised.value).__name__, "reason": "invalid_input"}
    assert snapshot(owner, "pii") == stored


def test_a_refusal_already_audited_is_not_audited_again(setup):
    # check_point_ids audits its own UnsupportedWriteError: the input audit must not add a second.
    kit, owner = setup
    before = len(_records(kit))
    with pytest.raises(UnsupportedWriteError, match="point ids are integers"):
        owner.upsert("pii", [models.PointStruct(id=2**64, vector=unit(np.random.default_rng(0)))])
    assert [r["verdict"] for r in _records(kit)[before:]] == ["UNSUPPORTED_WRITE"]


def _unclipped(tmp_path, distance):
    kit = make_kit(tmp_path)
    cfg = kit.config({"raw": {"class": "PII", "owner": "hr", "noise_on_write": True,
                              "intent": {"enabled": False}, "noise": {"clip_norm": None}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "raw", distance=distance)
    return kit, owner


def _at(value):
    v = [0.0] * DIM
    v[0] = value
    return v


@pytest.mark.parametrize("distance", [models.Distance.EUCLID, models.Distance.DOT])
@pytest.mark.parametrize("value, before_noise", [(3000.0, True), (2049.0, False)])
def test_a_vector_past_the_receipt_grid_is_audited_with_its_point(tmp_path, distance, value, before_noise):
    # Without clipping a coordinate of 3000 stays near 3000 after noising, past the commitment
    # grid's |v| < 2048: refused before any noise is drawn, as no noise can bring it back. One of
    # 2049 is within the noise's reach (the default PII noise moves a coordinate by up to ~0.5):
    # it is noised and refused after, as before. Either refusal names its point in the log.
    kit, owner = _unclipped(tmp_path, distance)
    before = len(_records(kit))
    with pytest.raises(InvalidVectorError, match="magnitude .*clip_norm") as info:
        owner.upsert("raw", [models.PointStruct(id=30, vector=_at(5.0)), models.PointStruct(id=31, vector=_at(value))])
    if before_noise:
        assert str(info.value).startswith("point 31: vector '<unnamed>' has a coordinate of magnitude 3000,")
        assert str(info.value).endswith("Nothing was noised or written")
    else:
        assert str(info.value).startswith("stored_form_batch() row 1 has a coordinate of magnitude 204")
    (rec,) = _records(kit)[before:]
    assert (rec["op"], rec["verdict"], rec["point_ids"]) == ("upsert", "UNSUPPORTED_WRITE", [31])
    assert rec["details"] == {"error": "InvalidVectorError", "reason": "beyond_commit_grid", "vector_name": ""}
    assert "204" not in json.dumps(rec) and "3000" not in json.dumps(rec)
    assert snapshot(owner, "raw") == []


def test_the_check_before_noise_refuses_nothing_noise_could_accept(tmp_path):
    # 2047.5 is accepted (keyed noise: the same release every time) and stored as noised; on a
    # Cosine collection (the release is normalised) no magnitude is refused.
    kit, owner = _unclipped(tmp_path, models.Distance.EUCLID)
    owner.upsert("raw", [models.PointStruct(id=1, vector=_at(2047.5))])
    (stored,) = owner.retrieve("raw", [1], with_vectors=True)
    assert 2046 < stored.vector[0] < 2048 and stored.vector[0] != 2047.5
    cfg = kit.config({"cos": {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False},
                              "noise": {"clip_norm": None}}})
    cos = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(cos, "cos")
    cos.upsert("cos", [models.PointStruct(id=1, vector=_at(1e30))])
    assert cos.count("cos").count == 1


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("method", sorted(WRITES))
def test_a_refused_vector_with_a_failing_audit_log_raises_audit_error_and_writes_nothing(tmp_path, method):
    kit = make_kit(tmp_path)
    store = tmp_path / "store"
    raw = RawClient(path=str(store))
    raw.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    raw.upsert("pii", [models.PointStruct(id=i, vector=unit(np.random.default_rng(i))) for i in range(3)])
    raw.close()
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True,
                              "intent": {"enabled": False}}})
    owner = QdrantClient(path=str(store), guard=cfg, principal=kit.principal("alice", "hr"))
    # The log's descriptor now writes to /dev/full (ENOSPC): an audit log path naming a device
    # is refused at open (tests/test_review42.py), so the failing log is made after it.
    full = os.open("/dev/full", os.O_RDWR)
    try:
        os.dup2(full, owner.guard.audit._fd)
    finally:
        os.close(full)
    try:
        stored = snapshot(owner, "pii")
        with pytest.raises(AuditError):
            WRITES[method](owner, _bad("nan"))
        assert snapshot(owner, "pii") == stored
    finally:
        owner.close()


def test_a_batch_payload_rewrite_refused_by_its_own_audit_is_not_audited_again(setup):
    # payloadops audits the refusal of an overwrite naming a missing point itself; inside a batch
    # the input audit around the batch must not add a second entry for it.
    kit, owner = setup
    before, stored = len(_records(kit)), snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match="do not exist"):
        owner.batch_update_points("pii", [models.OverwritePayloadOperation(
            overwrite_payload=models.SetPayload(payload={"n": 0}, points=[99]))])
    assert [r["verdict"] for r in _records(kit)[before:]] == ["UNSUPPORTED_WRITE"]
    assert snapshot(owner, "pii") == stored


def test_the_async_client_audits_a_refused_vector(setup):
    import asyncio

    from qdrant_guard import AsyncQdrantClient
    kit, _ = setup
    pol = {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False}}

    async def main():
        client = AsyncQdrantClient(":memory:", guard=kit.config({"pii": pol}), principal=kit.principal("alice", "hr"))
        await client.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        before = len(_records(kit))
        with pytest.raises(InvalidVectorError, match="non-finite"):
            await client.upsert("pii", [models.PointStruct(id=7, vector=_bad("nan"))])
        new = _records(kit)[before:]
        assert [(r["op"], r["verdict"], r["point_ids"]) for r in new] == [("upsert", "UNSUPPORTED_WRITE", [7])]
        assert (await client.count("pii")).count == 0

    asyncio.run(main())
