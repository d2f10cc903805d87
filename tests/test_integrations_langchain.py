"""langchain-qdrant's QdrantVectorStore over the guarded client, on real local-mode Qdrant."""
from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

pytest.importorskip("langchain_qdrant")

import qdrant_client  # noqa: E402
from langchain_qdrant import QdrantVectorStore, RetrievalMode  # noqa: E402

from guardkit import count, make_kit, models, snapshot  # noqa: E402
from integration_embeddings import DIM, LCBagOfWordsSparse, LCHashingEmbeddings  # noqa: E402
from qdrant_guard import GuardRefusal, InvalidVectorError, QdrantClient  # noqa: E402
from qdrant_guard.receipts import RECEIPT_KEY, receipts_from_payload  # noqa: E402
from qdrant_guard.receipts import verify as verify_stored  # noqa: E402

from integration_embeddings import AWS_KEY_TEXT, TEXTS  # noqa: E402

# langchain stores {"page_content": text, "metadata": {...}}: the text rules apply to page_content.
SENSITIVE = {"class": "PII", "owner": "hr", "readers": ["support"], "noise_on_write": True,
             "text_field": "page_content", "diversity": {"enabled": False}}


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def emb():
    return LCHashingEmbeddings()


@pytest.fixture()
def owner(kit):
    cfg = kit.config({
        "kb": SENSITIVE,
        "secret": {"class": "CREDENTIAL", "owner": "hr", "text_field": "page_content"},
        "wiki": {"class": "PUBLIC", "text_field": "page_content"},
        "strict": {**SENSITIVE, "query": {"require_text": True}},
        "nested": {**SENSITIVE, "source_field": "metadata.source", "diversity": {"enabled": True}},
    })
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    for name in ("kb", "secret", "wiki", "strict", "nested"):
        client.create_collection(name, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    return client


def _store(client, name, emb, **kw):
    return QdrantVectorStore(client=client, collection_name=name, embedding=emb, **kw)


def _audit(kit):
    return [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text().splitlines()]


def test_guarded_client_passes_the_vector_store_type_check(owner, emb):
    vs = _store(owner, "kb", emb)  # validate_collection_config runs get_collection through the guard
    assert isinstance(vs.client, qdrant_client.QdrantClient) and vs.client is owner


def test_add_then_search_on_a_sensitive_collection_stores_noised_receipted_vectors(kit, owner, emb):
    vs = _store(owner, "kb", emb)
    ids = vs.add_texts(TEXTS, metadatas=[{"source": f"doc{i}"} for i in range(len(TEXTS))])
    assert len(ids) == len(TEXTS) and count(owner, "kb") == len(TEXTS)
    clean = {t: np.asarray(v) for t, v in zip(TEXTS, emb.embed_documents(TEXTS))}
    for _, payload, vector in snapshot(owner, "kb"):
        assert set(receipts_from_payload(payload)) == {""}
        assert not np.allclose(vector, clean[payload["page_content"]], atol=1e-3)  # really noised
    reports = verify_stored(owner, "kb", trusted_keys=owner.guard.trusted_receipt_keys)
    assert len(reports) == len(TEXTS) and all(r.ok for r in reports)
    assert any(r["verdict"] == "ALLOW_NOISED" and r["collection"] == "kb" for r in _audit(kit))

    for client in (owner, owner.with_principal(kit.principal("bob", "support"))):
        hits = _store(client, "kb", emb).similarity_search_with_score("refund for damaged goods", k=4)
        assert len(hits) == 4
        top, _ = hits[0]
        assert top.page_content == "refund policy for damaged goods"
        assert top.metadata["source"] == "doc0"
        assert RECEIPT_KEY not in top.metadata  # the receipt lives beside langchain's metadata


def test_reader_mmr_get_by_ids_and_delete(kit, owner, emb):
    ids = _store(owner, "kb", emb).add_texts(TEXTS, metadatas=[{"source": f"doc{i}"} for i in range(len(TEXTS))])
    bob_vs = _store(owner.with_principal(kit.principal("bob", "support")), "kb", emb)
    mmr = bob_vs.max_marginal_relevance_search("laptop return", k=3, fetch_k=6)  # asks with_vectors=True
    assert len(mmr) == 3 and "laptop return process after leaving" in [d.page_content for d in mmr]
    docs = bob_vs.get_by_ids(ids[:2])
    assert sorted(d.page_content for d in docs) == sorted(TEXTS[:2])
    assert _store(owner, "kb", emb).delete(ids[:2]) is True
    assert count(owner, "kb") == len(TEXTS) - 2


def test_public_collection_passes_vectors_through_unchanged(kit, owner, emb):
    anon = owner.with_principal(None)
    vs = _store(anon, "wiki", emb)
    vs.add_texts(TEXTS)
    stored = {p["page_content"]: (p, v) for _, p, v in snapshot(owner, "wiki")}
    for text, clean in zip(TEXTS, emb.embed_documents(TEXTS)):
        payload, vector = stored[text]
        assert RECEIPT_KEY not in payload
        np.testing.assert_allclose(vector, clean, atol=1e-6)
    assert vs.similarity_search("payroll fridays", k=1)[0].page_content == "payroll runs on fridays"


def test_search_from_another_boundary_raises_a_refusal_not_an_empty_list(kit, owner, emb):
    _store(owner, "secret", emb).add_texts(TEXTS[:3])
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        _store(bob, "secret", emb, validate_collection_config=False).similarity_search("payroll", k=2)
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert "support" in ei.value.directive and "hr" in ei.value.directive
    with pytest.raises(GuardRefusal) as ei:
        _store(bob, "secret", emb, validate_collection_config=False).add_texts(["bob was here"])
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    with pytest.raises(GuardRefusal) as ei:
        _store(owner.with_principal(None), "kb", emb).similarity_search("payroll", k=2)
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert count(owner, "secret") == 3


def test_a_document_holding_an_aws_key_is_refused_and_nothing_is_written(owner, emb):
    vs = _store(owner, "kb", emb)
    with pytest.raises(GuardRefusal) as ei:
        vs.add_texts([TEXTS[0], AWS_KEY_TEXT, TEXTS[1]])
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert "AKIAQ3EGRVXS4ZJPLJ7M" not in str(ei.value)
    assert count(owner, "kb") == 0  # the batch is refused as a whole


def test_secrets_on_a_public_collection_are_refused_as_mislabelled(owner, emb):
    with pytest.raises(GuardRefusal) as ei:
        _store(owner.with_principal(None), "wiki", emb).add_texts([AWS_KEY_TEXT])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert count(owner, "wiki") == 0


def test_pii_in_page_content_is_redacted_before_storage(kit, owner, emb):
    vs = _store(owner, "kb", emb)
    vs.add_texts(["refund for employee with SSN 123-45-6789 approved"])
    (doc,) = _store(owner.with_principal(kit.principal("bob", "support")), "kb", emb).similarity_search("refund", k=1)
    assert "123-45-6789" not in doc.page_content and "[SSN]" in doc.page_content


def test_query_text_reaches_the_guard_through_search_kwargs(kit, owner, emb):
    """similarity_search forwards **kwargs to query_points, so policies that need the query's text
    (require_text, structural checks, intent) work through langchain."""
    _store(owner, "strict", emb).add_texts(TEXTS)
    bob_vs = _store(owner.with_principal(kit.principal("bob", "support")), "strict", emb)
    with pytest.raises(GuardRefusal) as ei:
        bob_vs.similarity_search("payroll", k=2)
    assert ei.value.verdict == "TEXT_REQUIRED"
    question = "when does payroll run?"
    assert bob_vs.similarity_search(question, k=2, query_text=question)[0].page_content == "payroll runs on fridays"
    stuffed = "refund " * 200
    with pytest.raises(GuardRefusal) as ei:
        bob_vs.similarity_search(stuffed, k=2, query_text=stuffed)
    assert ei.value.verdict == "QUERY_REJECTED"


def test_async_api_runs_the_sync_guarded_client_and_surfaces_refusals(kit, owner, emb):
    """QdrantVectorStore has no async client: langchain-core runs the sync methods in an executor."""
    vs = _store(owner, "kb", emb)
    bob_secret = _store(owner.with_principal(kit.principal("bob", "support")), "secret", emb,
                        validate_collection_config=False)

    async def scenario():
        await vs.aadd_texts(TEXTS)
        hits = await vs.asimilarity_search("vpn setup", k=2)
        with pytest.raises(GuardRefusal) as ei:
            await bob_secret.asimilarity_search("vpn setup", k=2)
        return hits, ei.value

    hits, refusal = asyncio.run(scenario())
    assert hits[0].page_content == "vpn setup guide for laptops"
    assert refusal.verdict == "REFUSED_CROSS_BOUNDARY"
    assert count(owner, "kb") == len(TEXTS)


def test_hybrid_mode_needs_a_public_collection(kit, emb):
    """Sparse vectors are the words themselves: the guard refuses them on sensitive collections,
    the slot when the collection is created, and every write to one made before the guard."""
    cfg = kit.config({"kb": SENSITIVE, "wiki": {"class": "PUBLIC"}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    vectors = {"": models.VectorParams(size=DIM, distance=models.Distance.COSINE)}
    sparse_config = {"langchain-sparse": models.SparseVectorParams()}
    with pytest.raises(InvalidVectorError, match=r"collection 'kb' is PII, and sparse vector slot\(s\) \['langchain-sparse'\]"):
        owner.create_collection("kb", vectors_config=vectors, sparse_vectors_config=sparse_config)
    assert not owner.collection_exists("kb")
    qdrant_client.QdrantClient.create_collection(owner, "kb", vectors_config=vectors, sparse_vectors_config=sparse_config)
    owner.create_collection("wiki", vectors_config=vectors, sparse_vectors_config=sparse_config)
    sparse = LCBagOfWordsSparse()
    hybrid = _store(owner, "kb", emb, retrieval_mode=RetrievalMode.HYBRID, sparse_embedding=sparse)
    with pytest.raises(InvalidVectorError, match="sparse"):
        hybrid.add_texts(TEXTS)
    assert count(owner, "kb") == 0
    public = _store(owner, "wiki", emb, retrieval_mode=RetrievalMode.HYBRID, sparse_embedding=sparse)
    public.add_texts(TEXTS)
    assert public.similarity_search("warehouse lease", k=1)[0].page_content == "warehouse lease ends in march"


def test_from_texts_builds_a_plain_client_that_the_guard_never_sees(kit, emb):
    """construct_instance() calls qdrant_client.QdrantClient(**client_options) itself; local mode
    ignores unknown keywords, so guard= is silently dropped. Use the constructor instead."""
    cfg = kit.config({"kb": SENSITIVE})
    vs = QdrantVectorStore.from_texts(TEXTS[:1], emb, location=":memory:", collection_name="kb", guard=cfg)
    assert type(vs.client) is qdrant_client.QdrantClient
    assert not isinstance(vs.client, QdrantClient)


def test_diversity_caps_read_langchains_nested_metadata(kit, owner, emb):
    vs = _store(owner, "nested", emb)
    vs.add_texts(TEXTS, metadatas=[{"source": f"doc{i % 3}"} for i in range(len(TEXTS))])
    bob_vs = _store(owner.with_principal(kit.principal("bob", "support")), "nested", emb)
    hits = bob_vs.similarity_search("refund for damaged goods", k=5)
    sources = [d.metadata["source"] for d in hits]
    # 3 sources of 2 documents each; k=5 at 40% allows 2 per source: 5 results over all 3 sources.
    assert len(hits) == 5 and len(set(sources)) == 3
    assert max(sources.count(s) for s in set(sources)) == 2
