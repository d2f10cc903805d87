"""Nineteenth review (2026-12-05): collection-level information across boundaries, and the write
path with qdrant-client 1.20's features.

Each test of a fix fails on the code before it (checked, see docs/security-testing.md). Real local
Qdrant, real Ed25519 keys; no mocks."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import DIM, audit_records, make_kit, unit
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient
from qdrant_guard.hashing_embedder import HashingEmbedder
from qdrant_guard.receipts import verify

_VP = models.VectorParams(size=DIM, distance=models.Distance.COSINE)

# hr's own collection (no readers) and one that support may read.
_PRIVATE = {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "diversity": {"enabled": False}}
_SHARED = {**_PRIVATE, "readers": ["support"]}

_STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"


def _clients(tmp_path, **policies):
    kit = make_kit(tmp_path)
    cols = {"emp": _PRIVATE, "shared": _SHARED, "pub": {"class": "PUBLIC"}, **policies}
    alice = QdrantClient(":memory:", guard=kit.config(cols), principal=kit.principal("alice", "hr"))
    return kit, alice, alice.with_principal(kit.principal("bob", "support"))


# ------------------------------------------------------------------ collection metadata (1.20)
# qdrant-client 1.20 stores arbitrary JSON `metadata` with a collection (create_collection,
# update_collection) and get_collection returns it. get_collection passed through the guard for any
# principal ("configuration and counts; no points, payloads or vectors"), and the metadata was never
# screened: the owner's data, credentials included, went to every boundary.

def test_metadata_is_hidden_from_a_principal_who_may_not_read_the_collection(tmp_path):
    kit, alice, bob = _clients(tmp_path)
    alice.create_collection("emp", vectors_config=_VP, metadata={"project": "acquisition of Initech", "lead": "alice"})
    alice.create_collection("shared", vectors_config=_VP, metadata={"project": "handbook"})
    rng = np.random.default_rng(0)
    alice.upsert("emp", [models.PointStruct(id=i, vector=unit(rng)) for i in range(3)])
    with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
        bob.count("emp")  # bob may not read emp
    info = bob.get_collection("emp")
    assert info.config.metadata is None  # before the fix: the owner's metadata as stored
    # What stays for every principal: the configuration. The counts went with the h-meta review
    # (tests/test_collection_metadata_visibility.py).
    assert info.config.params.vectors.size == DIM and info.points_count is None
    # A reader and the owner get the metadata.
    assert bob.get_collection("shared").config.metadata == {"project": "handbook"}
    assert alice.get_collection("emp").config.metadata == {"project": "acquisition of Initech", "lead": "alice"}
    # The store itself is unchanged.
    assert RawClient.get_collection(alice, "emp").config.metadata["lead"] == "alice"


def test_metadata_is_hidden_from_a_non_reader_in_async_too(tmp_path):
    kit = make_kit(tmp_path)

    async def run():
        alice = AsyncQdrantClient(":memory:", guard=kit.config({"emp": _PRIVATE}), principal=kit.principal("alice", "hr"))
        await alice.create_collection("emp", vectors_config=_VP, metadata={"lead": "alice"})
        bob = alice.with_principal(kit.principal("bob", "support"))
        return (await bob.get_collection("emp")).config.metadata, (await alice.get_collection("emp")).config.metadata

    assert asyncio.run(run()) == (None, {"lead": "alice"})


def test_metadata_of_an_unlisted_collection_under_refuse_is_hidden_but_the_call_answers(tmp_path):
    # unlisted = "refuse": no principal reads the collection, but get_collection still answers (policy doc).
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"emp": _PRIVATE}, unlisted="refuse"),
                         principal=kit.principal("alice", "hr"))
    RawClient.create_collection(alice, "stray", vectors_config=_VP, metadata={"lead": "carol"})
    assert alice.get_collection("stray").config.metadata is None
    assert alice.get_collection("stray").config.params.vectors.size == DIM


@pytest.mark.parametrize("how", ["create", "update", "recreate"])
def test_credentials_in_metadata_are_refused(tmp_path, how):
    kit, alice, bob = _clients(tmp_path)
    meta = {"embedding": {"provider": "openai", "api_key": _STRIPE}}
    if how == "update":
        alice.create_collection("shared", vectors_config=_VP, metadata={"project": "handbook"})
    with pytest.raises(GuardRefusal, match="CREDENTIAL_IN_TEXT") as err:
        if how == "create":
            alice.create_collection("shared", vectors_config=_VP, metadata=meta)
        elif how == "update":
            alice.update_collection("shared", metadata=meta)
        else:
            alice.recreate_collection("shared", vectors_config=_VP, metadata=meta)
    assert "metadata" in str(err.value) and _STRIPE not in str(err.value)
    # Nothing was sent: before the fix the key was stored, and bob (a reader) got it.
    if how == "update":
        assert RawClient.get_collection(alice, "shared").config.metadata == {"project": "handbook"}
    else:
        assert not RawClient.collection_exists(alice, "shared")
    entry = audit_records(kit)[-1]
    assert entry["verdict"] == "CREDENTIAL_IN_TEXT" and _STRIPE not in str(entry)


def test_credentials_in_metadata_are_refused_in_async_too(tmp_path):
    kit = make_kit(tmp_path)

    async def run():
        alice = AsyncQdrantClient(":memory:", guard=kit.config({"emp": _PRIVATE}), principal=kit.principal("alice", "hr"))
        with pytest.raises(GuardRefusal, match="CREDENTIAL_IN_TEXT: collection metadata field 'api_key'"):
            await alice.create_collection("emp", vectors_config=_VP, metadata={"api_key": _STRIPE})
        return await alice.collection_exists("emp")

    assert asyncio.run(run()) is False


def test_credentials_in_metadata_are_redacted_under_credentials_in_text_redact(tmp_path):
    kit, alice, bob = _clients(tmp_path, shared={**_SHARED, "credentials_in_text": "redact"})
    alice.create_collection("shared", vectors_config=_VP, metadata={"db": {"password": "hunter2hunter2x", "host": "db1"}})
    stored = RawClient.get_collection(alice, "shared").config.metadata
    assert stored["db"]["host"] == "db1" and "hunter2" not in str(stored)


def test_pii_in_metadata_follows_payload_fields(tmp_path):
    # As a payload's other fields: kept under the default "credentials" (readers may see the
    # collection's PII), redacted under "all", refused on PUBLIC collections as mislabelled.
    kit, alice, bob = _clients(tmp_path, strict={**_SHARED, "payload_fields": "all"})
    alice.create_collection("shared", vectors_config=_VP, metadata={"contact": "alice.smith@example.com"})
    assert RawClient.get_collection(alice, "shared").config.metadata == {"contact": "alice.smith@example.com"}
    alice.create_collection("strict", vectors_config=_VP, metadata={"contact": "alice.smith@example.com"})
    assert "alice.smith@" not in str(RawClient.get_collection(alice, "strict").config.metadata)
    with pytest.raises(GuardRefusal, match="SENSITIVITY_MISMATCH"):
        bob.create_collection("pub", vectors_config=_VP, metadata={"ssn": "123-45-6789"})
    assert not RawClient.collection_exists(alice, "pub")


def test_metadata_without_findings_passes_unchanged(tmp_path):
    kit, alice, bob = _clients(tmp_path)
    meta = {"model": "all-MiniLM-L6-v2", "dim": DIM, "created": "2026-12-05", "tags": ["hr", "v2"]}
    alice.create_collection("emp", vectors_config=_VP, metadata=meta)
    alice.update_collection("emp", metadata={"migrated": True})
    assert RawClient.get_collection(alice, "emp").config.metadata == {**meta, "migrated": True}


# ------------------------------------------------------------------ the write path with 1.20 features
# Tried and holding (no fix): each asserts what the guard does, so a regression fails here.

_RW = {**_SHARED, "writers": ["support"]}


def _sparse_store(tmp_path):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"emp": _RW}), principal=kit.principal("alice", "hr"),
                         embedder=HashingEmbedder(DIM))
    # Made before the guard: the guard refuses sparse slots on sensitive collections.
    RawClient.create_collection(alice, "emp", vectors_config={"d": _VP}, sparse_vectors_config={"s": models.SparseVectorParams()})
    return kit, alice, alice.with_principal(kit.principal("bob", "support"))


def test_a_document_for_a_sparse_vector_is_refused_before_it_is_embedded(tmp_path):
    # Qdrant/bm25 would turn the text into its words' weights: sparse vectors are refused on
    # sensitive collections (the guard embeds Documents itself, densely, whatever the model says).
    kit, alice, bob = _sparse_store(tmp_path)
    doc = models.Document(text="alice ssn 123-45-6789", model="Qdrant/bm25")
    for point in ({"s": doc}, {"d": models.Document(text="fine", model="x"), "s": doc}):
        with pytest.raises(Exception, match="sparse vector"):
            bob.upsert("emp", [models.PointStruct(id=1, vector=point)])
    assert RawClient.count(alice, "emp").count == 0


def test_conditional_upserts_and_mixed_batches_leave_every_receipt_verifying(tmp_path):
    kit, alice, bob = _sparse_store(tmp_path)
    rng = np.random.default_rng(1)
    bob.upload_points("emp", [models.PointStruct(id=i, vector={"d": models.Document(text=f"mail bob{i}@example.com",
                                                                                    model="x")},
                                                 payload={"source": "a"}) for i in range(4)], parallel=2, wait=True)
    skip = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value="zzz"))])
    bob.upsert("emp", [models.PointStruct(id=0, vector={"d": unit(rng)})], update_mode=models.UpdateMode.INSERT_ONLY)
    bob.upsert("emp", [models.PointStruct(id=1, vector={"d": unit(rng)})], update_filter=skip)
    bob.upsert("emp", [models.PointStruct(id=9, vector={"d": unit(rng)})], update_mode=models.UpdateMode.UPDATE_ONLY)
    bob.batch_update_points("emp", [
        models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=5, vector={"d": unit(rng)})])),
        models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
            points=[models.PointVectors(id=5, vector={"d": unit(rng)})]))])
    bob.update_vectors("emp", [models.PointVectors(id=2, vector={"d": unit(rng)})])
    bob.delete_vectors("emp", ["d"], [3])
    report = verify(alice, "emp", trusted_keys=alice.guard.trusted_receipt_keys)
    assert sorted(r.point_id for r in report) == [0, 1, 2, 5] and all(r.check.ok for r in report)
    assert not RawClient.retrieve(alice, "emp", [9])  # update_only did not create it
    stored = RawClient.retrieve(alice, "emp", [3], with_payload=True, with_vectors=True)[0]
    assert stored.vector == {} and stored.payload["_qdrant_guard_receipt"]["vectors"] == {}


def test_deleting_a_vector_name_drops_its_receipts(tmp_path):
    # delete_vector_name (1.20) takes a named vector off every point; the receipts that certified
    # it stayed in the payloads, and receipts.verify then failed the collection (vector_mismatch),
    # as delete_vectors did before its receipts were dropped with the vectors.
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"emp": _RW}), principal=kit.principal("alice", "hr"))
    alice.create_collection("emp", vectors_config={"d": _VP, "e": _VP})
    bob = alice.with_principal(kit.principal("bob", "support"))
    rng = np.random.default_rng(2)
    bob.upsert("emp", [models.PointStruct(id=i, vector={"d": unit(rng), "e": unit(rng)}, payload={"source": "a"})
                       for i in range(3)])
    bob.upsert("emp", [models.PointStruct(id=7, vector={"d": unit(rng)})])  # no vector e to begin with
    with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
        bob.delete_vector_name("emp", "e")  # an admin act: owner only
    alice.delete_vector_name("emp", "e")
    entry = audit_records(kit)[-1]
    assert entry["op"] == "delete_vector_name" and entry["verdict"] == "ALLOW"
    report = verify(alice, "emp", trusted_keys=alice.guard.trusted_receipt_keys)
    assert [(r.point_id, r.vector_name, r.check.reason) for r in report] == [
        (0, "d", "ok"), (1, "d", "ok"), (2, "d", "ok"), (7, "d", "ok")]
    for rec in RawClient.retrieve(alice, "emp", [0, 1, 2, 7], with_payload=True):
        assert set(rec.payload["_qdrant_guard_receipt"]["vectors"]) == {"d"}



def test_deleting_a_vector_name_drops_its_receipts_in_async_too(tmp_path):
    kit = make_kit(tmp_path)

    async def run():
        alice = AsyncQdrantClient(":memory:", guard=kit.config({"emp": _RW}), principal=kit.principal("alice", "hr"))
        await alice.create_collection("emp", vectors_config={"d": _VP, "e": _VP})
        rng = np.random.default_rng(3)
        await alice.with_principal(kit.principal("bob", "support")).upsert(
            "emp", [models.PointStruct(id=1, vector={"d": unit(rng), "e": unit(rng)})])
        await alice.delete_vector_name("emp", "e")
        (rec,), _ = await alice.scroll("emp", with_payload=True)
        return set(rec.payload["_qdrant_guard_receipt"]["vectors"])

    assert asyncio.run(run()) == {"d"}
