"""Receipt-preserving payload rewrites racing another writer (real local-mode Qdrant).

The guard reads a point's receipts, then rewrites its payload with them. Another client's write
is made to land exactly between the read and the rewrite: the tests run it from inside the
store's ``retrieve``/``scroll``, right after the guard's read returns.
"""
from __future__ import annotations

import numpy as np
import pytest
import qdrant_client

from guardkit import create, make_kit, models, unit
from qdrant_guard import QdrantClient
from qdrant_guard.receipts import RECEIPT_KEY, receipts_from_payload, verify_receipt
from qdrant_guard.receipts import verify as verify_stored


@pytest.fixture()
def store(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii", named=("a", "b"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    rng = np.random.default_rng(5)
    bob.upsert("pii", [models.PointStruct(id=i, vector={"a": unit(rng), "b": unit(rng)},
                                          payload={"k": "orig", "n": i}) for i in (1, 2, 3)])
    return owner, bob, rng


def _receipts(owner):
    return sorted((r.point_id, r.vector_name, r.reason)
                  for r in verify_stored(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys))


def _payload(owner, pid):
    got = owner._client.retrieve("pii", [pid], with_payload=True)
    return {k: v for k, v in got[0].payload.items() if k != RECEIPT_KEY} if got else None


def _interleave(monkeypatch, owner, method, concurrent, times=1):
    """Run ``concurrent()`` right after the store's next ``times`` ``method`` reads."""
    store = owner._client
    real = getattr(store, method)
    left = [times]

    busy = [False]

    def read_then_race(*a, **kw):
        out = real(*a, **kw)
        if left[0] > 0 and not busy[0]:  # not for the concurrent write's own reads
            left[0] -= 1
            busy[0] = True
            try:
                concurrent()
            finally:
                busy[0] = False
        return out

    monkeypatch.setattr(store, method, read_then_race)


@pytest.mark.parametrize("call", ["overwrite", "clear"])
def test_a_vector_update_between_read_and_rewrite_keeps_the_new_receipt(store, monkeypatch, call):
    owner, bob, rng = store
    _interleave(monkeypatch, owner, "retrieve", lambda: bob.update_vectors(
        "pii", [models.PointVectors(id=2, vector={"a": unit(rng)})]))
    if call == "overwrite":
        owner.overwrite_payload("pii", payload={"k": "new"}, points=[1, 2, 3])
        expected = {"k": "new"}
    else:
        owner.clear_payload("pii", points_selector=[1, 2, 3])
        expected = {}
    assert _receipts(owner) == [(i, v, "ok") for i in (1, 2, 3) for v in ("a", "b")]
    assert [_payload(owner, i) for i in (1, 2, 3)] == [expected] * 3


def test_a_rewrite_by_filter_racing_a_vector_update_keeps_the_new_receipt(store, monkeypatch):
    owner, bob, rng = store
    _interleave(monkeypatch, owner, "scroll", lambda: bob.update_vectors(
        "pii", [models.PointVectors(id=3, vector={"b": unit(rng)})]))
    flt = models.Filter(must=[models.FieldCondition(key="k", match=models.MatchValue(value="orig"))])
    owner.overwrite_payload("pii", payload={"k": "new"}, points=flt)
    assert _receipts(owner) == [(i, v, "ok") for i in (1, 2, 3) for v in ("a", "b")]
    assert [_payload(owner, i) for i in (1, 2, 3)] == [{"k": "new"}] * 3


def test_a_full_upsert_between_read_and_rewrite_leaves_a_consistent_point(store, monkeypatch):
    owner, bob, rng = store
    _interleave(monkeypatch, owner, "retrieve", lambda: bob.upsert("pii", [models.PointStruct(
        id=1, vector={"a": unit(rng), "b": unit(rng)}, payload={"k": "theirs"})]))
    owner.overwrite_payload("pii", payload={"k": "new"}, points=[1])
    assert _receipts(owner) == [(i, v, "ok") for i in (1, 2, 3) for v in ("a", "b")]
    # As if the rewrite came after the upsert: the rewrite's payload over the upsert's vectors.
    assert _payload(owner, 1) == {"k": "new"}


def test_a_delete_between_read_and_rewrite_does_not_resurrect_or_fail(store, monkeypatch):
    owner, bob, _ = store
    _interleave(monkeypatch, owner, "retrieve", lambda: bob.delete("pii", points_selector=[2]))
    owner.overwrite_payload("pii", payload={"k": "new"}, points=[1, 2])
    assert _payload(owner, 2) is None
    assert _payload(owner, 1) == {"k": "new"}
    assert _receipts(owner) == [(i, v, "ok") for i in (1, 3) for v in ("a", "b")]


def test_receipts_changing_on_every_read_never_end_stale(store, monkeypatch):
    owner, bob, rng = store
    _interleave(monkeypatch, owner, "retrieve", lambda: bob.update_vectors(
        "pii", [models.PointVectors(id=1, vector={"a": unit(rng)})]), times=10)
    owner.overwrite_payload("pii", payload={"k": "new"}, points=[1])
    assert _receipts(owner) == [(i, v, "ok") for i in (1, 2, 3) for v in ("a", "b")]
    assert _payload(owner, 1) == {"k": "new"}


def test_a_batch_rewrite_racing_a_vector_update_never_writes_a_stale_receipt(store, monkeypatch):
    owner, bob, rng = store
    _interleave(monkeypatch, owner, "retrieve", lambda: bob.update_vectors(
        "pii", [models.PointVectors(id=2, vector={"a": unit(rng)})]))
    owner.batch_update_points("pii", [models.OverwritePayloadOperation(
        overwrite_payload=models.SetPayload(payload={"k": "new"}, points=[1, 2]))])
    assert _receipts(owner) == [(i, v, "ok") for i in (1, 2, 3) for v in ("a", "b")]
    assert _payload(owner, 1) == {"k": "new"}


def test_without_a_race_the_rewrite_is_one_request_that_never_writes_receipts(store, monkeypatch):
    owner, _, _ = store
    sent = []
    store_ = owner._client
    real = store_.batch_update_points
    monkeypatch.setattr(store_, "batch_update_points",
                        lambda *a, **kw: sent.append(kw.get("update_operations") or a[1]) or real(*a, **kw))
    owner.overwrite_payload("pii", payload={"k": "new"}, points=[1, 2, 3])
    assert len(sent) == 1
    assert [type(op).__name__ for op in sent[0]] == ["SetPayloadOperation", "DeletePayloadOperation"]
    assert RECEIPT_KEY not in sent[0][0].set_payload.payload
    assert sent[0][1].delete_payload.keys == ['"n"']
    assert [_payload(owner, i) for i in (1, 2, 3)] == [{"k": "new"}] * 3


def test_a_vector_update_racing_delete_vectors_keeps_the_other_vectors_new_receipt(store, monkeypatch):
    owner, bob, rng = store
    _interleave(monkeypatch, owner, "retrieve", lambda: bob.update_vectors(
        "pii", [models.PointVectors(id=2, vector={"b": unit(rng)})]))
    owner.delete_vectors("pii", vectors=["a"], points=[1, 2])
    assert _receipts(owner) == sorted([(1, "b", "ok"), (2, "b", "ok"), (3, "a", "ok"), (3, "b", "ok")])
    assert _payload(owner, 2) == {"k": "orig", "n": 2}


def test_a_vector_update_racing_delete_vectors_in_a_batch_never_writes_a_stale_receipt(store, monkeypatch):
    owner, bob, rng = store
    _interleave(monkeypatch, owner, "retrieve", lambda: bob.update_vectors(
        "pii", [models.PointVectors(id=2, vector={"b": unit(rng)})]))
    owner.batch_update_points("pii", [models.DeleteVectorsOperation(
        delete_vectors=models.DeleteVectors(points=[1, 2], vector=["a"]))])
    assert _receipts(owner) == sorted([(1, "b", "ok"), (2, "b", "ok"), (3, "a", "ok"), (3, "b", "ok")])


def test_the_async_client_keeps_the_new_receipt_too(tmp_path, monkeypatch):
    import asyncio

    from qdrant_guard import AsyncQdrantClient

    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True,
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}})
    rng = np.random.default_rng(9)

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config={
            n: models.VectorParams(size=len(unit(rng)), distance=models.Distance.COSINE) for n in ("a", "b")})
        await owner.upsert("pii", [models.PointStruct(id=i, vector={"a": unit(rng), "b": unit(rng)},
                                                      payload={"k": "orig"}) for i in (1, 2)])
        store = owner._client
        real = store.retrieve
        left = [1]

        async def read_then_race(*a, **kw):
            out = await real(*a, **kw)
            if left[0]:
                left[0] = 0
                await owner.update_vectors("pii", [models.PointVectors(id=2, vector={"a": unit(rng)})])
            return out

        monkeypatch.setattr(store, "retrieve", read_then_race)
        await owner.overwrite_payload("pii", payload={"k": "new"}, points=[1, 2])
        monkeypatch.undo()
        got = await qdrant_client.AsyncQdrantClient.retrieve(owner, "pii", [1, 2], with_payload=True,
                                                             with_vectors=True)
        found = sorted((r.id, n, verify_receipt(rec, vector=r.vector[n], collection="pii", point_id=r.id,
                                                vector_name=n, trusted_keys=owner.guard.trusted_receipt_keys).reason)
                       for r in got for n, rec in receipts_from_payload(r.payload).items())
        await owner.close()
        return found, [{k: v for k, v in r.payload.items() if k != RECEIPT_KEY} for r in got]

    found, payloads = asyncio.run(main())
    assert found == [(i, v, "ok") for i in (1, 2) for v in ("a", "b")]
    assert payloads == [{"k": "new"}, {"k": "new"}]


def test_updates_of_two_vectors_of_one_point_racing_keep_both_new_receipts(store, monkeypatch):
    owner, bob, rng = store
    _interleave(monkeypatch, owner, "retrieve", lambda: bob.update_vectors(
        "pii", [models.PointVectors(id=1, vector={"b": unit(rng)})]))
    owner.update_vectors("pii", [models.PointVectors(id=1, vector={"a": unit(rng)})])
    assert _receipts(owner) == [(i, v, "ok") for i in (1, 2, 3) for v in ("a", "b")]
    assert _payload(owner, 1) == {"k": "orig", "n": 1}


# -- the key-deleting rewrite must still overwrite exactly -------------------------------------

def test_a_batch_overwrite_removes_keys_written_earlier_in_the_same_batch(store):
    owner, bob, rng = store
    owner.batch_update_points("pii", [
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={"y": 1}, points=[1])),
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={"z": 1}, key="meta.deep", points=[2])),
        models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(
            id=9, vector={"a": unit(rng), "b": unit(rng)}, payload={"w": 1})])),
        models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"k": 2}, points=[1, 2, 9])),
    ])
    assert [_payload(owner, i) for i in (1, 2, 9)] == [{"k": 2}] * 3
    assert _receipts(owner) == [(i, v, "ok") for i in (1, 2, 3, 9) for v in ("a", "b")]


def test_keys_a_json_path_cannot_quote_fall_back_to_a_whole_overwrite(store):
    owner, _, _ = store
    odd = {'say "hi"': 1, "back\\slash": 2, "dotted.key": 3, "": 4}
    owner.set_payload("pii", payload=odd, points=[1])
    owner.overwrite_payload("pii", payload={"k": "new"}, points=[1, 2])
    owner.set_payload("pii", payload={"dotted.key": 3, "": 4}, points=[3])
    owner.clear_payload("pii", points_selector=[3])
    assert [_payload(owner, i) for i in (1, 2, 3)] == [{"k": "new"}, {"k": "new"}, {}]
    assert _receipts(owner) == [(i, v, "ok") for i in (1, 2, 3) for v in ("a", "b")]
