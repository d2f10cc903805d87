"""Review fixes on the facade surface (local Qdrant): operations given as dicts are checked like
models, the async client's plain upload methods work and are guarded, snapshot recovery is refused
under a policy."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
import qdrant_client

from guardkit import DIM, count, create, make_kit, models, snapshot, unit
from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient, UnsupportedWriteError
from qdrant_guard.receipts import RECEIPT_KEY, receipts_from_payload

SSN = "Customer John Doe, SSN 123-45-6789"


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _cfg(kit, **over):
    pii = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False, "raw_in_boundary": True,
           "text_field": "text"}
    pii.update(over)
    # One audit log per policy: the tests below build clients with two policies side by side.
    log = kit.tmp / f"audit-{'noise' if pii['noise_on_write'] else 'raw'}.jsonl"
    return kit.config({"pii": pii, "pub": {"class": "PUBLIC", "text_field": "text"}}, audit_log=str(log))


@pytest.fixture()
def clients(kit):
    """(owner in boundary hr, bob in boundary support) sharing one store with pii and pub."""
    owner = QdrantClient(":memory:", guard=_cfg(kit), principal=kit.principal("alice", "hr"))
    for name in ("pii", "pub"):
        create(owner, name)
    rng = np.random.default_rng(0)
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"n": i}) for i in range(3)])
    owner.upsert("pub", [models.PointStruct(id=1, vector=unit(rng), payload={"text": "plain words"})])
    return owner, owner.with_principal(kit.principal("bob", "support"))


# -- 1. dict operations --------------------------------------------------------------------------
def _upsert_dict(vec):
    return {"upsert": {"points": [{"id": 9, "vector": vec, "payload": {"n": 9}}]}}


def _upsert_model(vec):
    return models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=9, vector=vec, payload={"n": 9})]))


@pytest.mark.parametrize("form", [_upsert_dict, _upsert_model], ids=["dict", "model"])
def test_raw_vector_upsert_by_a_non_owner_is_refused_in_dict_and_model_form(clients, form):
    _, bob = clients
    before = snapshot(bob, "pii")
    with pytest.raises(GuardRefusal) as ei:
        bob.batch_update_points("pii", [form(unit(np.random.default_rng(1)))])
    assert ei.value.verdict == "NOISE_REQUIRED"
    assert snapshot(bob, "pii") == before


@pytest.mark.parametrize("op", [
    {"delete_payload": {"keys": [RECEIPT_KEY], "points": [0]}},
    models.DeletePayloadOperation(delete_payload=models.DeletePayload(keys=[RECEIPT_KEY], points=[0])),
], ids=["dict", "model"])
def test_receipt_deletion_is_refused_in_dict_and_model_form(kit, op):
    owner = QdrantClient(":memory:", guard=_cfg(kit, noise_on_write=True), principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    bob = owner.with_principal(kit.principal("bob", "support"))
    bob.upsert("pii", [models.PointStruct(id=0, vector=unit(np.random.default_rng(2)), payload={"n": 0})])
    before = snapshot(owner, "pii")
    assert RECEIPT_KEY in before[0][1]
    with pytest.raises(GuardRefusal) as ei:
        bob.batch_update_points("pii", [op])
    assert ei.value.verdict == "RECEIPT_TAMPERING"
    assert snapshot(owner, "pii") == before


def test_dict_upsert_allowed_for_the_owner_is_stored_like_the_model_form(clients):
    owner, _ = clients
    vec = unit(np.random.default_rng(3))
    res = owner.batch_update_points("pii", [_upsert_dict(vec)])
    assert len(res) == 1 and res[0].status == models.UpdateStatus.COMPLETED
    assert count(owner, "pii") == 4


def test_dict_set_payload_on_public_is_screened(clients):
    owner, _ = clients
    before = snapshot(owner, "pub")
    with pytest.raises(GuardRefusal) as ei:
        owner.batch_update_points("pub", [{"set_payload": {"payload": {"text": SSN}, "points": [1]}}])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(owner, "pub") == before


@pytest.mark.parametrize("op", [
    {"create_alias": {"collection_name": "pii", "alias_name": "leak"}},
    models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name="pii", alias_name="leak")),
], ids=["dict", "model"])
def test_create_alias_by_a_non_admin_is_refused_in_dict_and_model_form(clients, op):
    owner, bob = clients
    with pytest.raises(GuardRefusal) as ei:
        bob.update_collection_aliases(change_aliases_operations=[op])
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert owner.get_aliases().aliases == []


@pytest.mark.parametrize("ops,where", [
    ([_upsert_model([0.1] * DIM), {"upsert": {"points": "not points"}}], "update_operations[1] is not a valid models.UpsertOperation"),
    ([{"upsert": {"points": []}, "delete_payload": {"keys": ["a"], "points": [0]}}], "update_operations[0] is a dict with keys"),
    ([{"no_such_op": {}}], "update_operations[0] is a dict with keys"),
    ([object()], "update_operations[0] is a builtins.object"),
    ({"upsert": {"points": []}}, "must be a sequence of operations"),
])
def test_unknown_or_invalid_operations_are_refused_naming_the_index(clients, ops, where):
    owner, _ = clients
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match=r"models\.UpsertOperation") as ei:
        owner.batch_update_points("pii", ops)
    assert where in str(ei.value)
    assert snapshot(owner, "pii") == before


def test_invalid_dict_alias_operation_is_refused_naming_the_index(clients):
    owner, _ = clients
    with pytest.raises(UnsupportedWriteError, match=r"change_aliases_operations\[0\].*models\.CreateAliasOperation"):
        owner.update_collection_aliases([{"create_alias": {"collection_name": "pii"}}])
    assert owner.get_aliases().aliases == []


def test_transparent_client_passes_operations_through_unchanged():
    ops = [{"no_such_op": {}}]
    for client in (QdrantClient(":memory:"), qdrant_client.QdrantClient(":memory:")):
        create(client, "c")
        with pytest.raises(Exception) as ei:
            client.batch_update_points("c", ops)
        assert not isinstance(ei.value, UnsupportedWriteError)  # qdrant-client's own error, untouched


# -- 2. the async client's plain upload methods --------------------------------------------------
def test_async_uploads_work_without_a_policy():
    async def main():
        c = AsyncQdrantClient(":memory:")
        await c.create_collection("c", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
        c.upload_points("c", [models.PointStruct(id=1, vector=[1, 0, 0, 0], payload={})], wait=True)
        c.upload_collection("c", vectors=[[0, 1, 0, 0]], ids=[2], wait=True)
        assert (await c.count("c")).count == 2
        await c.close()

    asyncio.run(main())


@pytest.mark.parametrize("method", ["upload_points", "upload_collection"])
def test_async_uploads_are_guarded_under_a_policy(kit, method):
    def upload(client, vectors, ids):
        if method == "upload_points":
            client.upload_points("pii", [models.PointStruct(id=i, vector=v, payload={"n": i})
                                         for i, v in zip(ids, vectors)], wait=True)
        else:
            client.upload_collection("pii", vectors=vectors, payload=[{"n": i} for i in ids], ids=ids, wait=True)

    async def owner_and_bob(cfg):
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        return owner, owner.with_principal(kit.principal("bob", "support"))

    async def main():
        rng = np.random.default_rng(4)
        owner, bob = await owner_and_bob(_cfg(kit))
        with pytest.raises(GuardRefusal) as ei:
            upload(bob, [unit(rng) for _ in range(3)], [0, 1, 2])
        assert ei.value.verdict == "NOISE_REQUIRED"
        assert (await owner.count("pii")).count == 0
        await owner.close()

        owner, bob = await owner_and_bob(_cfg(kit, noise_on_write=True))
        raw = [unit(rng) for _ in range(3)]
        upload(bob, raw, [0, 1, 2])
        recs = await owner.retrieve("pii", [0, 1, 2], with_vectors=True, with_payload=True)
        assert len(recs) == 3
        for r in recs:
            assert set(receipts_from_payload(r.payload)) == {""}
            assert not np.allclose(r.vector, raw[r.id], atol=1e-3)
        await owner.close()

    asyncio.run(main())


# -- 3. snapshot recovery ------------------------------------------------------------------------
@pytest.mark.parametrize("method,kwargs", [
    ("recover_snapshot", {"location": "file:///qdrant/snapshots/pii/pii-1.snapshot"}),
    ("recover_shard_snapshot", {"shard_id": 0, "location": "file:///qdrant/snapshots/pii/pii-1.snapshot"}),
])
@pytest.mark.parametrize("target", ["pub", "pii"])
def test_snapshot_recovery_is_refused_under_a_policy_even_for_the_owner(clients, monkeypatch, method, kwargs, target):
    owner, _ = clients
    reached = []
    monkeypatch.setattr(qdrant_client.QdrantClient, method, lambda *a, **k: reached.append(a))
    with pytest.raises(GuardRefusal, match="without guard=") as ei:
        getattr(owner, method)(target, **kwargs)
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert reached == []


@pytest.mark.parametrize("method,kwargs", [
    ("remove_peer", {"peer_id": 1}), ("recover_current_peer", {}), ("delete_full_snapshot", {"snapshot_name": "x"}),
])
def test_cluster_maintenance_is_refused_under_a_policy_even_for_the_owner(clients, method, kwargs):
    # No data leaks, but removing a peer or the full snapshots would take replicas or backups of
    # every collection away from whichever boundary owns them. Passed through, local mode would
    # answer (or raise NotImplementedError) instead of this refusal.
    owner, _ = clients
    with pytest.raises(GuardRefusal, match="without guard=") as ei:
        getattr(owner, method)(**kwargs)
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY" and "cluster" in str(ei.value)


def test_async_snapshot_recovery_is_refused_under_a_policy(kit):
    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_cfg(kit), principal=kit.principal("alice", "hr"))
        with pytest.raises(GuardRefusal, match="without guard="):
            await owner.recover_snapshot("pub", location="file:///x.snapshot")

    asyncio.run(main())


def test_snapshot_recovery_without_a_policy_is_qdrant_clients_own():
    with pytest.raises(NotImplementedError):  # local mode has no snapshots, exactly as in qdrant-client
        QdrantClient(":memory:").recover_snapshot("c", location="file:///x.snapshot")


def test_renaming_an_alias_is_checked_like_creating_one(kit):
    # A renamed alias takes the policy of its new name: renaming hr's alias to an unlisted name
    # used to hand hr's points to anyone that name's (default) policy lets read.
    pol = {"class": "PII", "owner": "hr", "raw_in_boundary": True}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol, "hr_alias": pol, "hr_alias2": pol}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    owner.upsert("hr", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"text": "secret"})])
    owner.update_collection_aliases(change_aliases_operations=[
        models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name="hr", alias_name="hr_alias"))])

    def rename(who, new):
        who.update_collection_aliases(change_aliases_operations=[
            models.RenameAliasOperation(rename_alias=models.RenameAlias(old_alias_name="hr_alias", new_alias_name=new))])

    bob = owner.with_principal(kit.principal("bob", "support"))
    for who in (bob, owner):  # bob may not administer hr; no one may rename it to a weaker name
        with pytest.raises(GuardRefusal) as ei:
            rename(who, "leak")
        assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert [a.alias_name for a in owner.get_aliases().aliases] == ["hr_alias"]
    rename(owner, "hr_alias2")
    assert [a.alias_name for a in owner.get_aliases().aliases] == ["hr_alias2"]


def test_deleting_an_alias_needs_the_access_deleting_the_collection_needs(kit):
    # Another boundary could delete hr's alias and cut hr's own agents off the collection.
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol, "hr_alias": pol, "pub": {"class": "PUBLIC"}}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    create(owner, "pub")
    for collection, alias in (("hr", "hr_alias"), ("pub", "pub_alias")):
        owner.update_collection_aliases(change_aliases_operations=[
            models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection, alias_name=alias))])

    def delete(who, alias):
        who.update_collection_aliases(change_aliases_operations=[
            models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))])

    bob = owner.with_principal(kit.principal("bob", "support"))  # may read hr, not administer it
    with pytest.raises(GuardRefusal) as ei:
        delete(bob, "hr_alias")
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert sorted(a.alias_name for a in owner.get_aliases().aliases) == ["hr_alias", "pub_alias"]
    delete(bob, "pub_alias")  # a PUBLIC collection's alias is anyone's to change
    delete(owner, "hr_alias")
    assert owner.get_aliases().aliases == []
