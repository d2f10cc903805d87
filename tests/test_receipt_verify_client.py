"""``receipts.verify()`` given a guarded ``qdrant_guard.QdrantClient``.

A guarded read strips the vectors its principal may not get, and those include every vector whose
receipt fails. Before, verify() through such a client reported a stripped vector whose receipt was
kept as ``vector_mismatch`` (not its receipt's own reason) and a stripped unreceipted one not at all,
so a raw vector in a sensitive collection looked verified. Now the owner boundary's client is read
past its guard on the same connection (its reports name only what its own reads return), a PUBLIC
collection through it as before, and any other principal's client is refused with an argument error
that names the fix. Real qdrant-client local mode throughout.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import DIM, audit_records, create, make_kit, receipted_point, receipted_vector, unit
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import AsyncQdrantClient, QdrantClient, keys
from qdrant_guard.errors import GuardArgumentTypeError, QdrantGuardError
from qdrant_guard.receipts import RECEIPT_KEY, ReceiptSigner, receipts_for_payload, verify


def _pii(**extra) -> dict:
    return {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "noise_on_write": True,
            "intent": {"enabled": False}, "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}, **extra}


def _trusted(kit) -> dict:
    pk = keys.load_private_key(kit.guard_key_path).public_key()
    return {keys.key_id(pk): pk}


def _reasons(client, **kw) -> dict:
    return {(r.point_id, r.vector_name): r.reason for r in verify(client, "pii", **kw)}


def _store(kit, path: str, **extra) -> None:
    """Points 0-2 written raw by the owner (raw_in_boundary), 10-12 noised and receipted by the guard
    for bob@support, 20 written past the guard with a receipt whose issued_at was changed after
    signing, and 21 with a receipt by a key the guard does not trust."""
    owner = QdrantClient(path=path, guard=kit.config({"pii": _pii(raw_in_boundary=True, **extra)}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    rng = np.random.default_rng(0)
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng)) for i in range(3)])
    owner.with_principal(kit.principal("bob", "support")).upsert(
        "pii", [models.PointStruct(id=10 + i, vector=unit(rng)) for i in range(3)])
    owner.close()
    raw = RawClient(path=path)
    forged = receipted_point(kit, 20, rng, collection="pii")
    rec = forged.payload[RECEIPT_KEY]["vectors"][""]
    forged.payload[RECEIPT_KEY] = receipts_for_payload({"": dict(rec, issued_at=rec["issued_at"] + 1)})
    other = ReceiptSigner(keys.generate_keypair()[0])
    vec, rec = receipted_vector(other, 21, unit(rng))
    raw.upsert("pii", [forged, models.PointStruct(id=21, vector=vec,
                                                  payload={RECEIPT_KEY: receipts_for_payload({"": rec})})])
    raw.close()


WANT = {**{(i, ""): "missing_receipt" for i in range(3)}, **{(10 + i, ""): "ok" for i in range(3)},
        (20, ""): "bad_merkle_proof", (21, ""): "unknown_key"}


def test_the_owner_guarded_client_reports_what_an_unguarded_one_does(tmp_path):
    kit = make_kit(tmp_path)
    path = str(tmp_path / "store")
    _store(kit, path)
    raw = RawClient(path=path)
    assert _reasons(raw, trusted_keys=_trusted(kit)) == WANT
    raw.close()
    # Without raw_in_boundary the owner's own reads strip the raw and the badly receipted vectors:
    # before, points 0-2 were not reported at all and 20 and 21 were vector_mismatch.
    owner = QdrantClient(path=path, guard=kit.config({"pii": _pii()}), principal=kit.principal("alice", "hr"))
    assert owner.retrieve("pii", [0, 20], with_vectors=True)[0].vector is None
    assert _reasons(owner, trusted_keys=_trusted(kit)) == WANT
    assert _reasons(owner, trusted_keys=_trusted(kit), ids=[0, 20, 99]) == {
        (0, ""): "missing_receipt", (20, ""): "bad_merkle_proof", (99, ""): "missing_point"}
    # Each such verify() is one audit entry naming the owner; one refused for its arguments, none.
    before = audit_records(kit)
    with pytest.raises(ValueError, match="batch_size"):
        verify(owner, "pii", trusted_keys=_trusted(kit), batch_size=0)
    assert len(audit_records(kit)) == len(before)
    verify(owner, "pii", trusted_keys=_trusted(kit), batch_size=2)  # four scroll pages
    after = audit_records(kit)
    assert len(after) == len(before) + 1
    assert after[-1]["op"] == "receipts.verify" and after[-1]["collection"] == "pii"
    assert after[-1]["verdict"] == "ALLOW" and "alice" in after[-1]["principal"]
    owner.close()


def test_a_readers_guarded_client_is_refused_naming_the_fix(tmp_path):
    kit = make_kit(tmp_path)
    path = str(tmp_path / "store")
    _store(kit, path)
    owner = QdrantClient(path=path, guard=kit.config({"pii": _pii()}), principal=kit.principal("alice", "hr"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    # bob may read the collection; before, verify() through his client reported the six points
    # his reads release, all "ok", and nothing of the raw points 0-2.
    with pytest.raises(GuardArgumentTypeError) as exc:
        verify(bob, "pii", trusted_keys=_trusted(kit))
    text = str(exc.value)
    assert isinstance(exc.value, QdrantGuardError) and isinstance(exc.value, TypeError)
    assert "'support'" in text and "'pii'" in text and "owned by 'hr'" in text
    assert "unguarded qdrant_client.QdrantClient" in text and "close this one first" in text
    anonymous = QdrantClient(":memory:", guard=kit.config({"pii": _pii()}))
    with pytest.raises(GuardArgumentTypeError, match="an unverified principal"):
        verify(anonymous, "pii", trusted_keys=_trusted(kit))
    anonymous.close()
    owner.close()


def test_a_public_or_unguarded_collection_is_read_through_the_client_as_before(tmp_path):
    kit = make_kit(tmp_path)
    rng = np.random.default_rng(3)
    for client in (QdrantClient(":memory:"),  # no guard=: plain qdrant-client
                   QdrantClient(":memory:", guard=kit.config({"pii": {"class": "PUBLIC"}}),
                                principal=kit.principal("bob", "support"))):
        create(client, "pii", distance=models.Distance.EUCLID)
        client.upsert("pii", [receipted_point(kit, 1, rng), models.PointStruct(id=2, vector=unit(rng))])
        assert _reasons(client, trusted_keys=_trusted(kit)) == {(1, ""): "ok", (2, ""): "missing_receipt"}
        client.close()


def test_an_async_guarded_client_is_refused_naming_the_fix(tmp_path):
    kit = make_kit(tmp_path)

    async def build():
        client = AsyncQdrantClient(":memory:", guard=kit.config({"pii": _pii()}), principal=kit.principal("alice", "hr"))
        await client.create_collection("pii", vectors_config=models.VectorParams(size=DIM,
                                                                                 distance=models.Distance.EUCLID))
        return client

    owner = asyncio.run(build())
    reader = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardArgumentTypeError, match="unguarded qdrant_client.QdrantClient") as exc:
        verify(reader, "pii", trusted_keys=_trusted(kit))
    assert "AsyncQdrantClient acting for a principal of boundary 'support'" in str(exc.value)
    with pytest.raises(GuardArgumentTypeError, match="synchronous"):  # the owner's too: verify() is sync
        verify(owner, "pii", trusted_keys=_trusted(kit))
    asyncio.run(owner.close())
