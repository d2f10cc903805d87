"""A query ``models.Document`` that the guard passes to qdrant-client's own inference (no
``embedder=``, no query noise) is embedded with the model the Document names, so under a declared
``utility.embedding_model(s)`` that name is held to it too (h-umodel3 left it unchecked).

Real local Qdrant, real keys; no mocks. Local mode here has no inference installed, so a Document
the guard lets through fails inside qdrant-client; the tests tell the guard's refusal from that.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import DIM, make_kit, models, record_sent, unit

from qdrant_guard import AsyncQdrantClient, ConfigError
from tests.test_utility_model_reads import MODEL_A, MODEL_B, QUERIES, _clients, _policy, _query


def _doc(model: str) -> models.Document:
    return models.Document(text="the quarterly plan", model=model)


def _setup(tmp_path, model=MODEL_A, **utility):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, model, **utility), embedder=None)
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(4)), payload={"t": "x"})])
    return bob


@pytest.mark.parametrize("method", QUERIES)
def test_a_document_naming_another_model_is_refused_before_it_is_sent(tmp_path, monkeypatch, method):
    bob = _setup(tmp_path)
    sent = record_sent(monkeypatch, tuple(QUERIES))
    with pytest.raises(ConfigError) as ei:
        _query(bob, method, _doc(MODEL_B))
    text = str(ei.value)
    assert f"naming model {MODEL_B!r}" in text and f'declares utility.embedding_model = "{MODEL_A}"' in text
    assert f"Name model={MODEL_A!r} in the Document" in text and "Nothing was sent" in text
    assert sent == []


@pytest.mark.parametrize("method", QUERIES)
def test_a_document_naming_the_declared_model_goes_to_inference(tmp_path, method):
    bob = _setup(tmp_path)
    with pytest.raises(Exception) as ei:  # no inference backend in local mode here
        _query(bob, method, _doc(MODEL_A))
    assert not isinstance(ei.value, ConfigError) or "naming model" not in str(ei.value)


@pytest.mark.parametrize("utility", [{}, {"embedding_models": {"image": MODEL_A}}], ids=["unset", "other-vector"])
def test_unset_or_another_vector_only_leaves_the_document_alone(tmp_path, utility):
    bob = _setup(tmp_path, None, **utility)
    with pytest.raises(Exception) as ei:
        _query(bob, "query_points", _doc(MODEL_B))
    assert "naming model" not in str(ei.value)


def assert_async_refuses(tmp_path, query) -> None:
    """The async client refuses ``query`` (an inference input naming MODEL_B) as the sync one does."""
    kit = make_kit(tmp_path)
    cfg = _policy(kit)

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM,
                                                                                 distance=models.Distance.EUCLID))
        bob = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(ConfigError, match="naming model"):
            await bob.query_points("pii", query=query, limit=3)

    asyncio.run(main())


def test_the_async_client_refuses_alike(tmp_path):
    assert_async_refuses(tmp_path, _doc(MODEL_B))
