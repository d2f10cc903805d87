"""Write-path review: receipts must certify exactly what Qdrant stores, and a batch the guard
accepts must behave as qdrant-client's would (real local-mode Qdrant)."""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import count, create, make_kit, models, snapshot, unit
from qdrant_guard import GuardRefusal, QdrantClient, UnsupportedWriteError, keys
from qdrant_guard.noise import privatize
from qdrant_guard.receipts import (
    RECEIPT_KEY,
    ReceiptItem,
    ReceiptSigner,
    issue_receipts_batch,
    receipts_for_payload,
    stored_form,
)
from qdrant_guard.receipts import verify as verify_stored


def _kit_client(tmp_path, *, noise_on_write: bool, named: tuple[str, ...] = (),
                distance: models.Distance = models.Distance.COSINE):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"],
                              "noise_on_write": noise_on_write,
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii", named=named, distance=distance)
    return kit, owner, owner.with_principal(kit.principal("bob", "support"))


def _receipts(owner):
    return [(r.point_id, r.vector_name, r.reason)
            for r in verify_stored(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys)]


@pytest.fixture()
def noised(tmp_path):
    _, owner, bob = _kit_client(tmp_path, noise_on_write=True)
    return owner, bob, np.random.default_rng(11)


@pytest.fixture()
def noised_named(tmp_path):
    _, owner, bob = _kit_client(tmp_path, noise_on_write=True, named=("a", "b"))
    return owner, bob, np.random.default_rng(12)


# -- receipted vectors: the receipt must match what Qdrant stores -----------------------------

def _caller_receipt(kit, vector, point_id):
    signer = ReceiptSigner(keys.load_private_key(kit.guard_key_path))
    noised, params = privatize(np.asarray(vector, dtype=np.float32), mechanism="gaussian", epsilon=1.0,
                               delta=1e-6, radius=0.01, clip_norm=1.0)
    # On the commitment grid, but not unit length: Qdrant normalises it on a Cosine collection.
    final = stored_form(np.asarray(noised, dtype=np.float64) * 3.0, distance="Euclid")
    rec = issue_receipts_batch(signer, [ReceiptItem(params=params, vector=final, collection="pii",
                                                    point_id=point_id, vector_name="")])[0]
    return final.tolist(), {RECEIPT_KEY: receipts_for_payload({"": rec})}


def test_a_receipt_over_a_vector_qdrant_renormalises_is_refused_on_cosine(tmp_path):
    kit, owner, bob = _kit_client(tmp_path, noise_on_write=False)
    rng = np.random.default_rng(1)
    vec, payload = _caller_receipt(kit, unit(rng), 1)
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [models.PointStruct(id=1, vector=vec, payload=payload)])
    assert ei.value.verdict == "INVALID_RECEIPT"
    assert count(owner, "pii") == 0


def test_the_same_receipt_is_accepted_where_qdrant_stores_the_vector_as_given(tmp_path):
    kit, owner, bob = _kit_client(tmp_path, noise_on_write=False, distance=models.Distance.EUCLID)
    rng = np.random.default_rng(1)
    vec, payload = _caller_receipt(kit, unit(rng), 1)
    bob.upsert("pii", [models.PointStruct(id=1, vector=vec, payload=payload)])
    assert _receipts(owner) == [(1, "", "ok")]


# -- batches whose upserts may not apply ------------------------------------------------------

_NO_MATCH = models.Filter(must=[models.FieldCondition(key="k", match=models.MatchValue(value="nope"))])


@pytest.mark.parametrize("condition", [
    {"update_mode": models.UpdateMode.INSERT_ONLY},
    {"update_filter": _NO_MATCH},
], ids=["insert_only", "update_filter"])
def test_a_payload_rewrite_after_a_conditional_upsert_keeps_receipts_valid(noised, condition):
    owner, bob, rng = noised
    bob.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"k": "old"})])
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match="conditional upsert"):
        bob.batch_update_points("pii", [
            models.UpsertOperation(upsert=models.PointsList(
                points=[models.PointStruct(id=1, vector=unit(rng), payload={"k": "new"})], **condition)),
            models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"k": "o"}, points=[1])),
        ])
    assert snapshot(owner, "pii") == before
    assert _receipts(owner) == [(1, "", "ok")]


def test_a_vector_update_after_a_conditional_upsert_keeps_receipts_valid(noised_named):
    owner, bob, rng = noised_named
    bob.upsert("pii", [models.PointStruct(id=1, vector={"a": unit(rng), "b": unit(rng)})])
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match="conditional upsert"):
        bob.batch_update_points("pii", [
            models.UpsertOperation(upsert=models.PointsList(
                points=[models.PointStruct(id=1, vector={"a": unit(rng), "b": unit(rng)})],
                update_mode=models.UpdateMode.INSERT_ONLY)),
            models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
                points=[models.PointVectors(id=1, vector={"a": unit(rng)})])),
        ])
    assert snapshot(owner, "pii") == before
    assert _receipts(owner) == [(1, "a", "ok"), (1, "b", "ok")]


def test_a_vector_update_of_a_point_an_update_only_upsert_did_not_create_changes_nothing(noised):
    owner, bob, rng = noised
    bob.upsert("pii", [models.PointStruct(id=1, vector=unit(rng))])
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match="2"):
        bob.batch_update_points("pii", [
            models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
                points=[models.PointVectors(id=1, vector=unit(rng))])),
            models.UpsertOperation(upsert=models.PointsList(
                points=[models.PointStruct(id=2, vector=unit(rng))], update_mode=models.UpdateMode.UPDATE_ONLY)),
            models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
                points=[models.PointVectors(id=2, vector=unit(rng))])),
        ])
    assert snapshot(owner, "pii") == before


def test_an_unconditional_upsert_mode_still_counts_as_written(noised):
    owner, bob, rng = noised
    bob.batch_update_points("pii", [
        models.UpsertOperation(upsert=models.PointsList(
            points=[models.PointStruct(id=3, vector=unit(rng))], update_mode=models.UpdateMode.UPSERT)),
        models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
            points=[models.PointVectors(id=3, vector=unit(rng))])),
    ])
    assert _receipts(owner) == [(3, "", "ok")]


def test_a_later_unconditional_upsert_makes_the_point_certain_again(noised):
    owner, bob, rng = noised
    bob.upsert("pii", [models.PointStruct(id=1, vector=unit(rng))])
    bob.batch_update_points("pii", [
        models.UpsertOperation(upsert=models.PointsList(
            points=[models.PointStruct(id=1, vector=unit(rng))], update_mode=models.UpdateMode.INSERT_ONLY)),
        models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=1, vector=unit(rng))])),
        models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"k": "o"}, points=[1])),
    ])
    assert snapshot(owner, "pii")[0][1]["k"] == "o"
    assert _receipts(owner) == [(1, "", "ok")]


# -- one point named twice in a vector update -------------------------------------------------

def test_a_point_named_twice_in_one_vector_update_keeps_both_receipts(noised_named):
    owner, bob, rng = noised_named
    bob.upsert("pii", [models.PointStruct(id=1, vector={"a": unit(rng), "b": unit(rng)})])
    bob.update_vectors("pii", [models.PointVectors(id=1, vector={"a": unit(rng)}),
                               models.PointVectors(id=1, vector={"b": unit(rng)})])
    assert _receipts(owner) == [(1, "a", "ok"), (1, "b", "ok")]


# -- payload rewrites by filter inside a batch ------------------------------------------------

def _k(value):
    return models.Filter(must=[models.FieldCondition(key="k", match=models.MatchValue(value=value))])


@pytest.mark.parametrize("earlier", [
    models.DeleteOperation(delete=models.PointIdsList(points=[1])),
    models.SetPayloadOperation(set_payload=models.SetPayload(payload={"k": "x"}, points=[2])),
    models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=5, vector=[0.25] * 16,
                                                                               payload={"k": "x"})])),
], ids=["delete", "set_payload", "upsert"])
@pytest.mark.parametrize("rewrite", [
    models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"k": "y"}, filter=_k("x"))),
    models.ClearPayloadOperation(clear_payload=models.FilterSelector(filter=_k("x"))),
], ids=["overwrite", "clear"])
def test_a_payload_rewrite_by_filter_after_other_operations_is_not_half_applied(noised, earlier, rewrite):
    # The guard resolves the filter to point ids against the store as it was before the batch;
    # the earlier operation changes which points the filter names when Qdrant runs it.
    owner, bob, rng = noised
    bob.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"k": "x"}),
                       models.PointStruct(id=2, vector=unit(rng), payload={"k": "z"})])
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match="filter"):
        bob.batch_update_points("pii", [earlier, rewrite])
    assert snapshot(owner, "pii") == before


def test_a_payload_rewrite_by_filter_first_in_a_batch_still_works(noised):
    owner, bob, rng = noised
    bob.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"k": "x"}),
                       models.PointStruct(id=2, vector=unit(rng), payload={"k": "z"})])
    bob.batch_update_points("pii", [
        models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"k": "y"}, filter=_k("x"))),
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={"n": 1}, points=[2])),
    ])
    assert [(p[0], {k: v for k, v in p[1].items() if k != RECEIPT_KEY}) for p in snapshot(owner, "pii")] == [
        (1, {"k": "y"}), (2, {"k": "z", "n": 1})]
    assert _receipts(owner) == [(1, "", "ok"), (2, "", "ok")]


# -- a Batch whose columns disagree ------------------------------------------------------------

@pytest.mark.parametrize("batch", [
    models.Batch(ids=[1, 2, 3], vectors=[[0.25] * 16, [0.5] * 16]),
    models.Batch(ids=[1, 2], vectors=[[0.25] * 16, [0.5] * 16], payloads=[{}]),
], ids=["vectors", "payloads"])
def test_a_batch_with_columns_of_different_lengths_is_refused_naming_them(noised, batch):
    owner, bob, _ = noised
    with pytest.raises(ValueError, match="ids"):
        bob.upsert("pii", batch)
    assert count(owner, "pii") == 0


# -- vector storage datatypes that do not keep the signed float32 values ----------------------

def _typed_collection(tmp_path, datatype):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"],
                              "noise_on_write": True, "raw_in_boundary": True}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(
        size=16, distance=models.Distance.COSINE, datatype=datatype))
    return owner, owner.with_principal(kit.principal("bob", "support"))


@pytest.mark.parametrize("datatype", [models.Datatype.FLOAT16, models.Datatype.UINT8])
def test_a_receipt_is_not_issued_for_a_vector_stored_at_lower_precision(tmp_path, datatype):
    # A server stores float16/uint8 vectors rounded (local mode does not): the receipt's
    # commitment to the float32 vector would never verify against the vector read back.
    owner, bob = _typed_collection(tmp_path, datatype)
    rng = np.random.default_rng(5)
    with pytest.raises(UnsupportedWriteError, match=datatype.value):
        bob.upsert("pii", [models.PointStruct(id=1, vector=unit(rng))])
    assert count(owner, "pii") == 0


def test_raw_in_boundary_writes_to_a_lower_precision_collection_still_work(tmp_path):
    owner, _ = _typed_collection(tmp_path, models.Datatype.FLOAT16)
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(6)))])
    assert count(owner, "pii") == 1


def test_float32_datatype_is_receipted_as_usual(tmp_path):
    owner, bob = _typed_collection(tmp_path, models.Datatype.FLOAT32)
    bob.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(7)))])
    assert _receipts(owner) == [(1, "", "ok")]


@pytest.mark.parametrize("rows", [(3, 2), (2, 3)])
def test_upload_collection_with_named_columns_of_different_lengths_is_refused(noised_named, rows):
    owner, bob, rng = noised_named
    vectors = {"a": np.asarray([unit(rng) for _ in range(rows[0])]),
               "b": np.asarray([unit(rng) for _ in range(rows[1])])}
    with pytest.raises(ValueError, match="'a': 3|'b': 3"):
        bob.upload_collection("pii", vectors=vectors, ids=None)
    assert count(owner, "pii") == 0


# -- gRPC selectors on payload rewrites (qdrant-client converts them for a server) -------------

def _grpc_selectors():
    from qdrant_client import grpc
    gf = grpc.Filter(must=[grpc.Condition(field=grpc.FieldCondition(key="k", match=grpc.Match(keyword="x")))])
    return {
        "filter": gf,
        "selector_ids": grpc.PointsSelector(points=grpc.PointsIdsList(ids=[grpc.PointId(num=1)])),
        "selector_filter": grpc.PointsSelector(filter=gf),
        "point_ids": [grpc.PointId(num=1)],
    }


@pytest.mark.parametrize("selector", list(_grpc_selectors()))
@pytest.mark.parametrize("method", ["overwrite_payload", "clear_payload"])
def test_payload_rewrites_accept_grpc_selectors_and_keep_receipts(noised, selector, method):
    owner, bob, rng = noised
    bob.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"k": "x"}),
                       models.PointStruct(id=2, vector=unit(rng), payload={"k": "z"})])
    sel = _grpc_selectors()[selector]
    if method == "overwrite_payload":
        bob.overwrite_payload("pii", payload={"k": "y"}, points=sel)
    else:
        bob.clear_payload("pii", points_selector=sel)
    kept = [(p[0], {k: v for k, v in p[1].items() if k != RECEIPT_KEY}) for p in snapshot(owner, "pii")]
    assert kept == [(1, {"k": "y"} if method == "overwrite_payload" else {}), (2, {"k": "z"})]
    assert _receipts(owner) == [(1, "", "ok"), (2, "", "ok")]


# -- shard keys and timeouts of payload rewrites reach Qdrant -------------------------------
# Local mode ignores shard keys (a server applies an update without one to every shard, so the
# rewrite, with the resolved point's receipt, would reach a same-id point of another shard key):
# the requests the guard sends to the real local client are recorded on the way.

@pytest.fixture()
def sent(monkeypatch):
    import qdrant_client

    calls: list[tuple[str, dict]] = []
    for meth in ("batch_update_points", "retrieve", "scroll"):
        original = getattr(qdrant_client.QdrantClient, meth)

        def spy(self, *args, _original=original, _meth=meth, **kwargs):
            calls.append((_meth, kwargs))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(qdrant_client.QdrantClient, meth, spy)
    return calls


def _shard_key(op):
    inner = getattr(op, "set_payload", None) or getattr(op, "delete_payload", None) or op.overwrite_payload
    return inner.shard_key


@pytest.mark.parametrize("selector", ["ids", "filter"])
@pytest.mark.parametrize("method", ["overwrite_payload", "clear_payload"])
def test_payload_rewrites_forward_shard_key_and_timeout(noised, sent, method, selector):
    owner, bob, rng = noised
    bob.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"k": "x"})])
    sel = [1] if selector == "ids" else _k("x")
    sent.clear()
    if method == "overwrite_payload":
        bob.overwrite_payload("pii", {"k": "y"}, points=sel, shard_key_selector="s1", timeout=7)
    else:
        bob.clear_payload("pii", points_selector=sel, shard_key_selector="s1", timeout=7)
    reads = [kw for m, kw in sent if m in ("retrieve", "scroll")]
    assert reads and all(kw.get("shard_key_selector") == "s1" for kw in reads)
    (write,) = [kw for m, kw in sent if m == "batch_update_points"]
    assert write.get("timeout") == 7
    assert write["update_operations"] and all(_shard_key(op) == "s1" for op in write["update_operations"])
    assert _receipts(owner) == [(1, "", "ok")]


@pytest.mark.parametrize("operation", [
    models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"k": "y"}, points=[1],
                                                                         shard_key="s1")),
    models.ClearPayloadOperation(clear_payload=models.PointIdsList(points=[1], shard_key="s1")),
    models.ClearPayloadOperation(clear_payload=models.FilterSelector(filter=_k("x"), shard_key="s1")),
], ids=["overwrite", "clear_ids", "clear_filter"])
def test_batch_payload_rewrites_keep_their_shard_key(noised, sent, operation):
    owner, bob, rng = noised
    bob.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"k": "x"})])
    sent.clear()
    bob.batch_update_points("pii", [operation])
    reads = [kw for m, kw in sent if m in ("retrieve", "scroll")]
    assert reads and all(kw.get("shard_key_selector") == "s1" for kw in reads)
    (write,) = [kw for m, kw in sent if m == "batch_update_points"]
    assert write["update_operations"] and all(_shard_key(op) == "s1" for op in write["update_operations"])
    assert _receipts(owner) == [(1, "", "ok")]


# -- values Qdrant's float32 storage cannot hold ---------------------------------------------

@pytest.mark.parametrize("raw", [True, False], ids=["raw_in_boundary", "noised"])
@pytest.mark.parametrize("value", [1e39, -1e300])
def test_a_value_outside_float32_range_is_refused_naming_it(tmp_path, raw, value):
    from qdrant_guard import InvalidVectorError

    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                              "raw_in_boundary": True}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    client = owner if raw else owner.with_principal(kit.principal("bob", "support"))
    vec = [0.1] * 16
    vec[3] = value
    with pytest.raises(InvalidVectorError, match=r"index 3.*float32|float32.*index 3"):
        client.upsert("pii", [models.PointStruct(id=1, vector=vec)])
    assert count(owner, "pii") == 0


# -- delete_vectors drops the receipts of the vectors it deletes ------------------------------

@pytest.mark.parametrize("points", [[1], models.Filter(must=[models.HasIdCondition(has_id=[1])])],
                         ids=["ids", "filter"])
def test_delete_vectors_leaves_the_collection_verifiable(noised_named, points):
    owner, bob, rng = noised_named
    bob.upsert("pii", [models.PointStruct(id=1, vector={"a": unit(rng), "b": unit(rng)}, payload={"k": 1}),
                       models.PointStruct(id=2, vector={"a": unit(rng), "b": unit(rng)})])
    bob.delete_vectors("pii", ["a"], points=points)
    assert _receipts(owner) == [(1, "b", "ok"), (2, "a", "ok"), (2, "b", "ok")]
    assert snapshot(owner, "pii")[0][1]["k"] == 1
    assert set(snapshot(owner, "pii")[0][2]) == {"b"}


def test_delete_vectors_naming_a_missing_point_changes_nothing(noised_named):
    # Qdrant deletes the vectors of the points before the missing one and then fails: the
    # receipt operations after it would never run.
    owner, bob, rng = noised_named
    bob.upsert("pii", [models.PointStruct(id=1, vector={"a": unit(rng), "b": unit(rng)})])
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match="99"):
        bob.delete_vectors("pii", ["a"], points=[1, 99])
    assert snapshot(owner, "pii") == before
    assert _receipts(owner) == [(1, "a", "ok"), (1, "b", "ok")]


def _dv(points, names=("a",)):
    return models.DeleteVectorsOperation(delete_vectors=models.DeleteVectors(points=points, vector=list(names)))


def test_a_batch_vector_deletion_drops_the_receipts_it_orphans(noised_named):
    owner, bob, rng = noised_named
    bob.upsert("pii", [models.PointStruct(id=1, vector={"a": unit(rng), "b": unit(rng)})])
    bob.batch_update_points("pii", [
        _dv([1]),
        models.UpsertOperation(upsert=models.PointsList(points=[
            models.PointStruct(id=5, vector={"a": unit(rng), "b": unit(rng)})])),
        _dv([5], ("a", "b")),
        models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"k": 1}, points=[1, 5])),
    ])
    assert _receipts(owner) == [(1, "b", "ok")]
    # Point 5's receipts are deleted by path: an empty container stays (it certifies nothing).
    assert snapshot(owner, "pii")[1][1] == {RECEIPT_KEY: {"v": 1, "vectors": {}}, "k": 1}


@pytest.mark.parametrize("before_op", [None, models.DeleteOperation(delete=models.PointIdsList(points=[1]))],
                         ids=["missing", "deleted_earlier"])
def test_a_batch_vector_deletion_of_a_missing_point_changes_nothing(noised_named, before_op):
    owner, bob, rng = noised_named
    bob.upsert("pii", [models.PointStruct(id=1, vector={"a": unit(rng), "b": unit(rng)}),
                       models.PointStruct(id=2, vector={"a": unit(rng), "b": unit(rng)})])
    before = snapshot(owner, "pii")
    ops = [_dv([2, 99])] if before_op is None else [before_op, _dv([2, 1])]
    with pytest.raises(UnsupportedWriteError, match="99|deleted earlier"):
        bob.batch_update_points("pii", ops)
    assert snapshot(owner, "pii") == before
