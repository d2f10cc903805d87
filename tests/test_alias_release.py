"""A receipted vector leaves the owner boundary whatever name, among those that denote its collection
now, the write and the read used.

The guard binds a receipt to the name a write used, so a vector written through alias ``open_v2``
of ``open`` carries a receipt for "open_v2". Reads accepted it only under that alias: the same
point read by ``open``, or through another alias ``open_v3``, came back stripped, while
``receipts.verify`` accepted it. Reads now accept a receipt bound to any name that denotes the
stored collection as of the read (from the ``get_aliases`` the read already makes), and still strip
one bound to a name that denotes another collection now. Real local-mode Qdrant throughout.
"""
from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
import qdrant_client
from guardkit import DIM, RawClient, create, make_kit, models, unit

from qdrant_guard import AsyncQdrantClient, QdrantClient
from qdrant_guard.receipts import receipts_from_payload, verify

POLICY = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False}}
NAMES = ("open", "open_v2", "open_v3", "other")
IDS = [0, 1, 2]


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _config(kit):
    return kit.config({n: POLICY for n in NAMES})


def _alias_ops(collection, alias, *, move=False):
    ops = [models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))] if move else []
    return ops + [models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection,
                                                                             alias_name=alias))]


def _points(seed=3, n=len(IDS)):
    rng = np.random.default_rng(seed)
    return [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{seed}-{i}", "text": f"note {seed}-{i}"})
            for i in range(n)]


@pytest.fixture()
def clients(kit):
    """(alice in hr, dave in support): ``open`` with aliases ``open_v2`` and ``open_v3``, and
    ``other``; alice's points written to ``open`` through ``open_v2``."""
    alice = QdrantClient(":memory:", guard=_config(kit), principal=kit.principal("alice", "hr"))
    create(alice, "open")
    create(alice, "other")
    alice.update_collection_aliases(change_aliases_operations=_alias_ops("open", "open_v2")
                                    + _alias_ops("open", "open_v3"))
    alice.upsert("open_v2", _points())
    stored, _ = RawClient.scroll(alice, "open", limit=10, with_payload=True)
    # What the bug needs: the receipt names the alias the write used, not the collection.
    assert {receipts_from_payload(r.payload)[""]["collection"] for r in stored} == {"open_v2"}
    return alice, alice.with_principal(kit.principal("dave", "support"))


def _released(reader, name) -> dict[str, dict[int, bool]]:
    """Per read form, point id -> whether its vector came back."""
    q = unit(np.random.default_rng(9))
    out = {
        "retrieve": {r.id: r.vector is not None for r in reader.retrieve(name, IDS, with_vectors=True)},
        "scroll": {r.id: r.vector is not None for r in reader.scroll(name, limit=10, with_vectors=True)[0]},
        "query_points": {h.id: h.vector is not None
                         for h in reader.query_points(name, query=q, limit=10, with_vectors=True).points},
        "query_batch_points": {h.id: h.vector is not None for h in reader.query_batch_points(
            name, requests=[models.QueryRequest(query=q, limit=10, with_vector=True)])[0].points},
        "query_points_groups": {h.id: h.vector is not None for g in reader.query_points_groups(
            name, query=q, group_by="text", limit=10, group_size=1, with_vectors=True).groups for h in g.hits},
    }
    return out


def _all(flag: bool) -> dict[str, dict[int, bool]]:
    return {form: {i: flag for i in IDS}
            for form in ("retrieve", "scroll", "query_points", "query_batch_points", "query_points_groups")}


class _Unguarded:
    """The same local store through qdrant-client's own methods (what ``receipt verify`` reads with)."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, method):
        return getattr(RawClient, method).__get__(self._client)


def _audit(kit) -> list[dict[str, Any]]:
    return [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", ["open", "open_v2", "open_v3"])
def test_a_vector_written_through_an_alias_is_released_under_every_name_of_its_collection(clients, name):
    _, dave = clients
    assert _released(dave, name) == _all(True)


def test_reads_and_verify_agree(kit, clients):
    alice, dave = clients
    trusted = dict(alice.guard.trusted_receipt_keys)
    for name in ("open", "open_v3"):
        assert all(r.ok for r in verify(_Unguarded(alice), name, IDS, trusted_keys=trusted))
        assert _released(dave, name)["retrieve"] == {i: True for i in IDS}


def test_a_vector_whose_alias_was_moved_to_another_collection_is_stripped(kit, clients):
    # The receipt names open_v2, which now names other: it no longer denotes the collection the
    # vector is stored in, under any name it is read by.
    alice, dave = clients
    alice.update_collection_aliases(change_aliases_operations=_alias_ops("other", "open_v2", move=True))
    for name in ("open", "open_v3"):
        assert _released(dave, name) == _all(False)
    trusted = dict(alice.guard.trusted_receipt_keys)
    assert {r.reason for r in verify(_Unguarded(alice), "open", IDS, trusted_keys=trusted)} == {"collection_mismatch"}
    # Moved back, it denotes open again (resolved on every read, never cached across reads).
    alice.update_collection_aliases(change_aliases_operations=_alias_ops("open", "open_v2", move=True))
    assert _released(dave, "open_v3") == _all(True)


def test_a_receipt_for_an_unrelated_collection_is_stripped(clients):
    # A receipted point of other, copied into open around the guard: its receipt names a
    # collection that is no alias of open, so no name of open releases it.
    alice, dave = clients
    alice.upsert("other", _points(seed=4, n=1))
    (copied,) = RawClient.retrieve(alice, "other", [0], with_payload=True, with_vectors=True)
    RawClient.upsert(alice, "open", [models.PointStruct(id=0, vector=copied.vector, payload=copied.payload)])
    for name in ("open", "open_v2", "open_v3"):
        got = {r.id: r.vector is not None for r in dave.retrieve(name, IDS, with_vectors=True)}
        assert got == {0: False, 1: True, 2: True}
    assert all(v is not None for v in (r.vector for r in dave.retrieve("other", [0], with_vectors=True)))


@pytest.fixture()
def calls(monkeypatch):
    seen: Counter = Counter()
    original = qdrant_client.QdrantClient.get_aliases

    def counting(self, *a, **kw):
        seen["get_aliases"] += 1
        return original(self, *a, **kw)

    monkeypatch.setattr(qdrant_client.QdrantClient, "get_aliases", counting)
    return seen


def test_one_alias_lookup_per_read_and_none_without_vectors(clients, calls):
    _, dave = clients
    q = unit(np.random.default_rng(1))
    dave.query_points("open", query=q, limit=10)
    dave.retrieve("open_v3", IDS)
    assert calls["get_aliases"] == 0
    assert all(h.vector is not None for h in dave.query_points("open", query=q, limit=10, with_vectors=True).points)
    assert calls["get_aliases"] == 1
    dave.query_batch_points("open_v3", requests=[models.QueryRequest(query=q, limit=10, with_vector=True)] * 3)
    assert calls["get_aliases"] == 2  # one for the whole batch


def test_a_failed_alias_lookup_strips_and_is_audited(kit, clients, monkeypatch):
    alice, dave = clients
    alice.upsert("open", _points(seed=5, n=1))  # point 0 now has a receipt naming open itself

    def unreachable(self, *a, **kw):
        raise ConnectionError("qdrant unreachable")

    monkeypatch.setattr(qdrant_client.QdrantClient, "get_aliases", unreachable)
    got = {r.id: r.vector is not None for r in dave.retrieve("open", IDS, with_vectors=True)}
    assert got == {0: True, 1: False, 2: False}  # fail closed for the receipts bound to an alias
    assert "ConnectionError" in _audit(kit)[-1]["details"]["alias_error"]


def test_async_client_releases_alike(kit):
    async def main():
        alice = AsyncQdrantClient(":memory:", guard=_config(kit), principal=kit.principal("alice", "hr"))
        for name in ("open", "other"):
            await alice.create_collection(name, vectors_config=models.VectorParams(
                size=DIM, distance=models.Distance.COSINE))
        await alice.update_collection_aliases(change_aliases_operations=_alias_ops("open", "open_v2")
                                              + _alias_ops("open", "open_v3"))
        await alice.upsert("open_v2", _points())
        dave = alice.with_principal(kit.principal("dave", "support"))
        got = {}
        for name in ("open", "open_v2", "open_v3"):
            got[name] = {r.id: r.vector is not None for r in await dave.retrieve(name, IDS, with_vectors=True)}
        await alice.update_collection_aliases(change_aliases_operations=_alias_ops("other", "open_v2", move=True))
        got["moved"] = {r.id: r.vector is not None for r in await dave.retrieve("open", IDS, with_vectors=True)}
        return got

    got = asyncio.run(main())
    assert got == {"open": dict.fromkeys(IDS, True), "open_v2": dict.fromkeys(IDS, True),
                   "open_v3": dict.fromkeys(IDS, True), "moved": dict.fromkeys(IDS, False)}
