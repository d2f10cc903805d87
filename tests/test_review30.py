"""Thirtieth adversarial review (2026-12-06, branch h-rev30): findings on key roles, the
left-behind count, reads' ``details.stripped``, the declared model on reads and query inference,
and the answers a write-only principal gets.

Real qdrant-client local mode, real Ed25519 keys; no mocks.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import DIM, make_kit, models, record_sent, unit

from qdrant_guard import AsyncQdrantClient, ConfigError, QdrantClient
from tests.test_utility_model_reads import MODEL_A, MODEL_B, QUERIES, _clients, _policy, _query

# ------------------------------------------------------------------ 1. a query models.Image names its model too
# qdrant-client's inference embeds a models.Image with the model it names, as it does a Document;
# the Document's model was held to utility.embedding_model(s), the Image's was not.


def _image(model: str) -> models.Image:
    return models.Image(image="https://example.invalid/a.png", model=model)


def _inference_setup(tmp_path, model=MODEL_A, **utility):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, model, **utility), embedder=None)
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(4)), payload={"t": "x"})])
    return bob


@pytest.mark.parametrize("method", QUERIES)
def test_a_query_image_naming_another_model_is_refused_before_it_is_sent(tmp_path, monkeypatch, method):
    bob = _inference_setup(tmp_path)
    sent = record_sent(monkeypatch, tuple(QUERIES))
    with pytest.raises(ConfigError) as ei:
        _query(bob, method, _image(MODEL_B))
    text = str(ei.value)
    assert "models.Image" in text and f"naming model {MODEL_B!r}" in text
    assert f'declares utility.embedding_model = "{MODEL_A}"' in text and "Nothing was sent" in text
    assert sent == []


@pytest.mark.parametrize("where", ["prefetch", "recommend", "nearest"])
def test_an_image_elsewhere_in_the_query_is_held_to_its_own_vectors_model(tmp_path, monkeypatch, where):
    # Each Image is held to the model declared for the vector of the query or prefetch it is in.
    bob = _inference_setup(tmp_path)
    sent = record_sent(monkeypatch, ("query_points",))
    image = _image(MODEL_B)
    if where == "prefetch":
        kw = {"prefetch": [models.Prefetch(query=[0.1] * DIM, limit=5),
                           models.Prefetch(query=models.NearestQuery(nearest=image), limit=5)],
              "query": models.FusionQuery(fusion=models.Fusion.RRF)}
    elif where == "recommend":
        kw = {"query": models.RecommendQuery(recommend=models.RecommendInput(positive=[image]))}
    else:
        kw = {"query": models.NearestQuery(nearest=image)}
    with pytest.raises(ConfigError, match="naming model"):
        bob.query_points("pii", limit=3, **kw)
    assert sent == []


def test_an_image_for_a_vector_of_no_declared_model_is_left_alone(tmp_path):
    bob = _inference_setup(tmp_path, None, embedding_models={"image": MODEL_A})
    with pytest.raises(Exception) as ei:  # no inference backend here: it fails inside qdrant-client
        bob.query_points("pii", query=_image(MODEL_B), limit=3)
    assert "naming model" not in str(ei.value)


def test_the_async_client_refuses_an_image_alike(tmp_path):
    kit = make_kit(tmp_path)
    cfg = _policy(kit)

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM,
                                                                                 distance=models.Distance.EUCLID))
        bob = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(ConfigError, match="naming model"):
            await bob.query_points("pii", query=_image(MODEL_B), limit=3)

    asyncio.run(main())


def test_a_nested_prefetchs_image_is_held_to_the_model_of_its_own_using(tmp_path, monkeypatch):
    # text: no model declared; image: MODEL_A. The Image sits in a prefetch two levels down whose
    # using= is "image", under a top-level query on "text".
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, None, embedding_models={"image": MODEL_A}), named=("text", "image"),
                          embedder=None)
    sent = record_sent(monkeypatch, ("query_points",))
    inner = models.Prefetch(query=models.NearestQuery(nearest=_image(MODEL_B)), using="image", limit=5)
    outer = [models.Prefetch(query=[0.1] * DIM, using="text", limit=5),
             models.Prefetch(prefetch=[inner], query=[0.2] * DIM, using="text", limit=5)]
    with pytest.raises(ConfigError) as ei:
        bob.query_points("pii", prefetch=outer, query=[0.3] * DIM, using="text", limit=3)
    text = str(ei.value)
    assert "prefetch[1].prefetch[0].query.nearest is a models.Image for vector 'image'" in text
    assert 'declares utility.embedding_models.image = "' in text and sent == []
    # The same Image under using="text" (no model declared there) is not this check's.
    inner = inner.model_copy(update={"using": "text"})
    with pytest.raises(Exception) as ei:
        bob.query_points("pii", prefetch=[inner], query=[0.3] * DIM, using="text", limit=3)
    assert "naming model" not in str(ei.value)
