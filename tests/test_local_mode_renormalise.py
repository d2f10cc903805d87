"""docs/eval.md and ``calibrate``'s docstring say that qdrant-client's local mode rewrites a Cosine
collection's stored vectors in their last bits on every search, which is why a seeded calibration
(keyed noise depends on the exact bytes) is reproducible only on unchanged stored vectors. Pinned
with the figures the doc gives, so the sentence goes when qdrant-client changes."""
from __future__ import annotations

import numpy as np
from qdrant_client import QdrantClient, models


def _read(client: QdrantClient) -> np.ndarray:
    points, _ = client.scroll("x", limit=100, with_vectors=True)
    return np.array([p.vector for p in sorted(points, key=lambda p: p.id)], dtype=np.float32)


def test_each_search_rewrites_the_last_bits_of_stored_cosine_vectors() -> None:
    client = QdrantClient(":memory:")
    client.create_collection("x", vectors_config=models.VectorParams(size=64, distance=models.Distance.COSINE))
    v = np.random.default_rng(0).normal(size=(50, 64)).astype(np.float32)
    client.upsert("x", [models.PointStruct(id=i, vector=v[i].tolist()) for i in range(50)])
    before = _read(client)
    changed = []
    for k in range(3):
        client.query_points("x", query=v[k].tolist(), limit=5)
        after = _read(client)
        changed.append(int((after != before).sum()))
        np.testing.assert_allclose(after, before, rtol=0, atol=1e-6)  # the last bits only
        before = after
    assert changed == [1152, 128, 128]
