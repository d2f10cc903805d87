"""Drop-in compatibility found by using the guarded client as a qdrant-client user would: each test
runs the same calls on ``qdrant_client.QdrantClient(":memory:")`` and on the guarded client and
compares the results (local mode, no mocks)."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
import qdrant_client
from qdrant_client.http import models

import qdrant_guard
from qdrant_guard.policy import config_from_dict

DIM = 4
PUBLIC_POLICY = config_from_dict({"unlisted": "refuse", "collections": {"kb": {"class": "PUBLIC"}}})


def _vectors() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(8, DIM))


def _fill(client):
    client.create_collection("kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    client.upsert("kb", [models.PointStruct(id=i, vector=v.tolist(), payload={"source": "ab"[i % 2]})
                         for i, v in enumerate(_vectors())])
    return client


@pytest.mark.parametrize("method", ["query_points", "query_points_groups"])
def test_query_text_is_accepted_without_a_policy(method):
    # README: query_text= is an argument the guarded client adds. Code written for it must run on a
    # client built without guard= (a dev set-up with the policy off) as it runs under a PUBLIC
    # policy; it raised qdrant-client's bare "AssertionError: Unknown arguments: ['query_text']".
    q = _vectors()[0].tolist()
    extra = {"group_by": "source"} if method == "query_points_groups" else {}
    expected = getattr(_fill(qdrant_client.QdrantClient(":memory:")), method)("kb", query=q, limit=3, **extra)
    for client in (qdrant_guard.QdrantClient(":memory:"), qdrant_guard.QdrantClient(":memory:", guard=PUBLIC_POLICY)):
        got = getattr(_fill(client), method)("kb", query=q, limit=3, query_text="refund policy", **extra)
        assert got == expected


def test_query_text_is_accepted_without_a_policy_async():
    q = _vectors()[0].tolist()

    async def run(client, **extra):
        await client.create_collection("kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        await client.upsert("kb", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(_vectors())])
        return await client.query_points("kb", query=q, limit=3, **extra)

    expected = asyncio.run(run(qdrant_client.AsyncQdrantClient(":memory:")))
    assert asyncio.run(run(qdrant_guard.AsyncQdrantClient(":memory:"), query_text="refund policy")) == expected


def test_other_unknown_arguments_still_fail_as_in_qdrant_client():
    # Only the guard's own arguments are dropped; a typo still fails exactly as qdrant-client fails.
    raw, guarded = _fill(qdrant_client.QdrantClient(":memory:")), _fill(qdrant_guard.QdrantClient(":memory:"))
    errors = []
    for client in (raw, guarded):
        with pytest.raises(AssertionError) as info:
            client.query_points("kb", query=[1.0] * DIM, query_txt="typo")
        errors.append(str(info.value))
    assert errors[0] == errors[1]
