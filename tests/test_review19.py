"""Seventeenth review (2026-12-05): defects found in the day's changes (c932c8d..4bb75fd).

Each test fails on the code before its fix (checked, see docs/security-testing.md). Real local
Qdrant, real Ed25519 keys; no mocks."""
from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard.utility import calibrate


def _sparse_staging():
    """A staging collection whose vector ``image`` only every other point has (Qdrant allows a
    point to lack a named vector)."""
    raw = RawClient(":memory:")
    raw.create_collection("s", vectors_config={
        "text": models.VectorParams(size=8, distance=models.Distance.COSINE),
        "image": models.VectorParams(size=8, distance=models.Distance.COSINE)})
    rng = np.random.default_rng(0)
    raw.upsert("s", [models.PointStruct(id=i, vector={"text": rng.normal(size=8).tolist(),
                                                      **({"image": rng.normal(size=8).tolist()} if i % 2 else {})})
                     for i in range(100)])
    return raw, rng.normal(size=(10, 8)).tolist()


def test_calibrate_a_named_vector_some_points_lack():
    # `calibrate --vector-name image` raised KeyError('image') on the first point without it.
    raw, queries = _sparse_staging()
    rec = calibrate(raw, "s", queries, k=5, radius=0.01, epsilons=(1.0, 8.0), threshold=0.5, progress=False,
                    seed=1, vector_name="image")
    assert (rec.vector_name, rec.n_documents, rec.dim) == ("image", 50, 8)


def test_calibrate_a_named_vector_no_point_has_says_so():
    raw = RawClient(":memory:")
    raw.create_collection("s", vectors_config={
        "text": models.VectorParams(size=8, distance=models.Distance.COSINE),
        "image": models.VectorParams(size=8, distance=models.Distance.COSINE)})
    raw.upsert("s", [models.PointStruct(id=1, vector={"text": [1.0] + [0.0] * 7})])
    with pytest.raises(ValueError, match="has no point with vector 'image'"):
        calibrate(raw, "s", [[1.0] + [0.0] * 7], k=1, radius=0.01, epsilons=(8.0,), threshold=0.5,
                  progress=False, seed=1, vector_name="image")
