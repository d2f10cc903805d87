"""Nineteenth review (2026-12-05): collection-level information across boundaries, and the write
path with qdrant-client 1.20's features.

Each test of a fix fails on the code before it (checked, see docs/security-testing.md). Real local
Qdrant, real Ed25519 keys; no mocks."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import DIM, make_kit, unit
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient

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
    # What stays for every principal (documented): the configuration and the counts.
    assert info.config.params.vectors.size == DIM and info.points_count == 3
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
