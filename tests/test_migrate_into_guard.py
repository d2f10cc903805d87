"""``qdrant_client.QdrantClient.migrate`` with a guarded client as its destination.

qdrant-client's migrate creates each collection on the destination with the source's vector and
sparse vector configs, then uploads the points: through a guarded destination both calls go through
the guard. A sensitive collection with a sparse slot is refused at creation, before anything is
created or uploaded; a dense one arrives noised and receipted; a PUBLIC one keeps its sparse slot.
Real qdrant-client local mode throughout.
"""
from __future__ import annotations

import numpy as np
import pytest
from guardkit import DIM, RawClient, audit_records, make_kit, models, unit

from qdrant_guard import InvalidVectorError, QdrantClient, keys
from qdrant_guard.receipts import verify

_VP = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
_PII = {"class": "PII", "owner": "hr", "readers": [], "intent": {"enabled": False},
        "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}


def _source(sparse: bool) -> tuple[RawClient, dict[int, list[float]]]:
    src = RawClient(":memory:")
    src.create_collection("docs", vectors_config={"d": _VP},
                          sparse_vectors_config={"kw": models.SparseVectorParams()} if sparse else None)
    rng = np.random.default_rng(3)
    dense = {i: unit(rng) for i in range(6)}
    src.upsert("docs", [models.PointStruct(
        id=i, payload={"text": f"note {i}"},
        vector={"d": v, **({"kw": models.SparseVector(indices=[1, 7], values=[0.5, 0.25])} if sparse else {})})
        for i, v in dense.items()])
    return src, dense


def _dest(kit, policy: dict) -> QdrantClient:
    return QdrantClient(":memory:", guard=kit.config({"docs": policy}), principal=kit.principal("alice", "hr"))


def test_a_sparse_slot_into_a_sensitive_collection_is_refused_before_anything_is_created(tmp_path):
    kit = make_kit(tmp_path)
    src, _ = _source(sparse=True)
    dest = _dest(kit, _PII)
    with pytest.raises(InvalidVectorError, match=r"collection 'docs' is PII, and sparse vector slot\(s\) \['kw'\]"):
        src.migrate(dest, collection_names=["docs"])
    assert not RawClient.collection_exists(dest, "docs")
    assert [(r["op"], r["verdict"]) for r in audit_records(kit)] == [("create_collection", "UNSUPPORTED_WRITE")]


def test_dense_points_migrated_into_a_sensitive_collection_are_noised_and_receipted(tmp_path):
    kit = make_kit(tmp_path)
    src, dense = _source(sparse=False)
    dest = _dest(kit, _PII)
    src.migrate(dest, collection_names=["docs"])
    stored = {p.id: p.vector["d"] for p in RawClient.scroll(dest, "docs", limit=100, with_vectors=True)[0]}
    assert sorted(stored) == sorted(dense)
    for i, v in dense.items():
        assert not np.allclose(stored[i], v), f"point {i} was stored as sent, without noise"
    pk = keys.load_private_key(kit.guard_key_path).public_key()
    reports = verify(dest, "docs", trusted_keys={keys.key_id(pk): pk}, check_noise=True)
    assert len(reports) == len(dense) and all(r.ok for r in reports), [r.reason for r in reports if not r.ok]


def test_a_public_collection_keeps_its_sparse_slot_and_points(tmp_path):
    kit = make_kit(tmp_path)
    src, dense = _source(sparse=True)
    dest = _dest(kit, {"class": "PUBLIC"})
    src.migrate(dest, collection_names=["docs"])
    assert RawClient.count(dest, "docs").count == len(dense)
    assert "kw" in RawClient.get_collection(dest, "docs").config.params.sparse_vectors
