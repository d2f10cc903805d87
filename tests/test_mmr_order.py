"""MMR under noise_queries: the order of the results must not tell a principal without raw access how
similar the raw vectors are to one another.

``models.NearestQuery(mmr=models.Mmr(...))`` makes Qdrant pick each next result by the candidates'
stored vectors compared with one another. Where the owner stores raw vectors (``raw_in_boundary``)
those comparisons are between raw vectors, which the query noise never reaches: a reader learns
from the order alone which raw vector is nearer which, and by bisecting ``diversity`` the exact
differences of their cosines. Each test below that expects a refusal fails on the code before it
(checked, see docs/security-testing.md). Real local Qdrant, real Ed25519 keys; no mocks.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import DIM, audit_records, create, make_kit
from qdrant_client.http import models

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient

_EMP = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True, "noise_queries": True,
        "diversity": {"enabled": False}, "intent": {"enabled": False}}


def _e(k):
    v = np.zeros(DIM)
    v[k] = 1.0
    return v


# s is the query's own direction; a, b and c are as relevant in both layouts (cosines 0.5, 0.6, 0.6
# with s), and a is nearer s than anything else but s: only whether b or c is near a differs.
_S = _e(0)
_A = 0.5 * _e(0) + np.sqrt(0.75) * _e(1)
_NEAR = (0.7, np.sqrt(0.64 - 0.49))     # cosine 0.906 with a
_FAR = (-0.35, np.sqrt(0.64 - 0.35 ** 2))  # cosine -0.003 with a


def _layout(b_near_a):
    bn, cn = (_NEAR, _FAR) if b_near_a else (_FAR, _NEAR)
    b = 0.6 * _e(0) + bn[0] * _e(1) + bn[1] * _e(2)
    c = 0.6 * _e(0) + cn[0] * _e(1) + cn[1] * _e(3)
    return np.array([_S, _A, b, c])


def _mmr(diversity, candidates=4):
    return models.NearestQuery(nearest=_S.tolist(), mmr=models.Mmr(diversity=diversity, candidates_limit=candidates))


def _two_collections(tmp_path, policy=_EMP):
    """alice@hr's client on x (b near a) and y (c near a), stored raw, and bob@support's view."""
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"x": policy, "y": policy}),
                         principal=kit.principal("alice", "hr"))
    for name, b_near_a in (("x", True), ("y", False)):
        create(owner, name)
        owner.upsert(name, [models.PointStruct(id=i, vector=v.tolist(), payload={"source": "s"})
                            for i, v in enumerate(_layout(b_near_a))])
    return kit, owner, owner.with_principal(kit.principal("bob", "support"))


def _order(client, name, **kw):
    return [p.id for p in client.query_points(name, query=_mmr(1.0), limit=4, **kw).points]


def test_the_mmr_order_tells_which_raw_vectors_are_near_each_other_so_it_is_refused(tmp_path):
    kit, owner, bob = _two_collections(tmp_path)
    # With diversity 1 each next pick is the candidate least like those already picked: after s and a
    # comes whichever of b and c is far from a. That is all that differs between x and y.
    assert _order(owner, "x") == [0, 1, 3, 2] and _order(owner, "y") == [0, 1, 2, 3]
    # bob gets no vector of these points (they are raw), so nothing he may see tells x from y ...
    assert all(p.vector is None for n in "xy" for p in bob.retrieve(n, [0, 1, 2, 3], with_vectors=True))
    # ... but before the fix his MMR query returned the same two orders as the owner's.
    for name in "xy":
        with pytest.raises(GuardRefusal) as err:
            _order(bob, name)
        assert err.value.verdict == "QUERY_REJECTED"
        msg = str(err.value)
        assert f"collection {name!r}" in msg and "raw_in_boundary" in msg and "noise_queries" in msg
        assert "query.mmr" in msg and "owner boundary 'hr'" in msg
        assert "similarity_search" in err.value.directive
    refused = [r for r in audit_records(kit) if r["verdict"] == "QUERY_REJECTED"]
    assert [r["collection"] for r in refused] == ["x", "y"]
    assert all(r["details"]["form"] == "Mmr" and r["details"]["where"] == ["query.mmr"] for r in refused)
    # Without mmr he still searches (his query noised) and gets no vectors.
    assert len(bob.query_points("x", query=_S.tolist(), limit=4).points) == 4


def _cosine_gap(client, name):
    """sim(s, w) - sim(s, a) for the w that follows s at diversity 0, from MMR orders and scores alone:
    the second pick flips from w to a where lambda * (rel_w - rel_a) = (1 - lambda) * (sim(w, s) - sim(a, s))."""
    rel = {p.id: p.score for p in client.query_points(name, query=_S.tolist(), limit=4).points}
    w = client.query_points(name, query=_mmr(0.0), limit=2).points[1].id
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if client.query_points(name, query=_mmr(mid), limit=2).points[1].id == 1:
            hi = mid
        else:
            lo = mid
    lam = 1 - (lo + hi) / 2
    return (rel[w] - rel[1]) * lam / (1 - lam)


def test_bisecting_the_diversity_gives_exact_differences_of_raw_cosines(tmp_path):
    kit, owner, bob = _two_collections(tmp_path)
    # The owner may compare raw vectors: 30 queries give sim(s, b) - sim(s, a) = 0.6 - 0.5.
    assert _cosine_gap(owner, "x") == pytest.approx(0.1, abs=1e-6)
    # Before the fix bob got the same 0.1 through his noised query vector: the relevances cancel
    # out (he reads them from the scores), the raw-to-raw cosines do not.
    with pytest.raises(GuardRefusal, match="QUERY_REJECTED: .*maximal marginal relevance"):
        _cosine_gap(bob, "x")


@pytest.mark.parametrize("call", [
    lambda c: c.query_points("x", prefetch=models.Prefetch(query=_mmr(1.0), limit=4),
                             query=_S.tolist(), limit=4),
    lambda c: c.query_points("x", prefetch=[models.Prefetch(query=_S.tolist()),
                                            models.Prefetch(query=_S.tolist(), prefetch=models.Prefetch(query=_mmr(1.0)))],
                             query=models.FusionQuery(fusion=models.Fusion.RRF), limit=4),
    lambda c: c.query_points("x", prefetch=[{"query": {"nearest": _S.tolist(), "mmr": {"diversity": 1.0}}}],
                             query=models.FusionQuery(fusion=models.Fusion.RRF), limit=4),
    lambda c: c.query_batch_points("x", [models.QueryRequest(query=_S.tolist(), limit=4),
                                         models.QueryRequest(query=_mmr(1.0), limit=4)]),
    lambda c: c.query_batch_points("x", [{"query": {"nearest": _S.tolist(), "mmr": {"diversity": 1.0}}, "limit": 4}]),
    lambda c: c.query_points_groups("x", group_by="source", query=_mmr(1.0), limit=2, group_size=4),
], ids=["prefetch", "nested-prefetch", "dict-prefetch", "batch", "dict-batch", "groups"])
def test_mmr_anywhere_in_the_query_is_refused(tmp_path, call):
    kit, owner, bob = _two_collections(tmp_path)
    call(owner)  # the owner boundary may compare its raw vectors
    with pytest.raises(GuardRefusal, match="QUERY_REJECTED: .*mmr asks Qdrant to re-rank") as err:
        call(bob)
    assert "collection 'x'" in str(err.value)


def test_a_top_level_dict_query_with_mmr_stays_refused_as_an_unchecked_form(tmp_path):
    kit, owner, bob = _two_collections(tmp_path)
    with pytest.raises(GuardRefusal, match="QUERY_REJECTED: query is a dict"):
        bob.query_points("x", query={"nearest": _S.tolist(), "mmr": {"diversity": 1.0}}, limit=4)


@pytest.mark.parametrize("change", [
    {"raw_in_boundary": False},  # every stored vector is a noised one bob may read: nothing to hide
    {"noise_queries": False},    # bob's exact query vectors already get exact raw cosines
], ids=["noised-store", "no-query-noise"])
def test_mmr_still_runs_where_it_compares_nothing_hidden(tmp_path, change):
    kit, owner, bob = _two_collections(tmp_path, {**_EMP, **change})
    assert sorted(_order(bob, "x")) == [0, 1, 2, 3]


def test_mmr_on_a_public_collection_runs(tmp_path):
    kit = make_kit(tmp_path)
    bob = QdrantClient(":memory:", guard=kit.config({"wiki": {"class": "PUBLIC"}}),
                       principal=kit.principal("bob", "support"))
    create(bob, "wiki")
    bob.upsert("wiki", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(_layout(True))])
    assert _order(bob, "wiki") == [0, 1, 3, 2]


def test_the_async_client_refuses_mmr_too(tmp_path):
    kit = make_kit(tmp_path)

    async def run():
        owner = AsyncQdrantClient(":memory:", guard=kit.config({"x": _EMP}), principal=kit.principal("alice", "hr"))
        await owner.create_collection("x", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        await owner.upsert("x", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(_layout(True))])
        bob = owner.with_principal(kit.principal("bob", "support"))
        got = await owner.query_points("x", query=_mmr(1.0), limit=4)
        assert [p.id for p in got.points] == [0, 1, 3, 2]
        with pytest.raises(GuardRefusal, match="QUERY_REJECTED: .*maximal marginal relevance"):
            await bob.query_points("x", query=_mmr(1.0), limit=4)
        with pytest.raises(GuardRefusal, match="QUERY_REJECTED: .*prefetch.query.mmr"):
            await bob.query_batch_points("x", [models.QueryRequest(prefetch=models.Prefetch(query=_mmr(1.0)),
                                                                   query=_S.tolist())])
        await owner.close()

    asyncio.run(run())


def test_langchains_mmr_search_is_refused_for_a_reader_and_runs_for_the_owner(tmp_path):
    pytest.importorskip("langchain_qdrant")
    from integration_embeddings import DIM as LC_DIM
    from integration_embeddings import TEXTS, LCHashingEmbeddings
    from langchain_qdrant import QdrantVectorStore

    kit = make_kit(tmp_path)
    emb = LCHashingEmbeddings()
    owner = QdrantClient(":memory:", guard=kit.config({"kb": {**_EMP, "text_field": "page_content"}}),
                         principal=kit.principal("alice", "hr"))
    owner.create_collection("kb", vectors_config=models.VectorParams(size=LC_DIM, distance=models.Distance.COSINE))
    QdrantVectorStore(client=owner, collection_name="kb", embedding=emb).add_texts(
        TEXTS, metadatas=[{"source": f"doc{i}"} for i in range(len(TEXTS))])
    assert len(QdrantVectorStore(client=owner, collection_name="kb", embedding=emb)
               .max_marginal_relevance_search("laptop return", k=3, fetch_k=6)) == 3
    bob = QdrantVectorStore(client=owner.with_principal(kit.principal("bob", "support")), collection_name="kb",
                            embedding=emb)
    # langchain sends models.NearestQuery(mmr=models.Mmr(diversity=lambda_mult, candidates_limit=fetch_k)).
    with pytest.raises(GuardRefusal, match="QUERY_REJECTED: .*max_marginal_relevance_search"):
        bob.max_marginal_relevance_search("laptop return", k=3, fetch_k=6)
    assert len(bob.similarity_search("laptop return", k=3)) == 3
