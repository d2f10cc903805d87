"""Review 50: the LangChain and LlamaIndex paths review 49 left untried, on real local-mode Qdrant.

Each test pins a guard rule on one integration path so that a regression there fails."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain_qdrant")
pytest.importorskip("llama_index.vector_stores.qdrant")

from langchain_core.documents import Document  # noqa: E402
from langchain_qdrant import QdrantVectorStore as LCStore  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    FilterOperator, MetadataFilter, MetadataFilters, VectorStoreQuery, VectorStoreQueryMode)
from llama_index.vector_stores.qdrant import QdrantVectorStore as LIStore  # noqa: E402
from qdrant_client.http import models as rest  # noqa: E402

from guardkit import count, make_kit, models, snapshot  # noqa: E402
from integration_embeddings import DIM, TEXTS, LCHashingEmbeddings, LIHashingEmbedding  # noqa: E402
from qdrant_guard import GuardRefusal, QdrantClient  # noqa: E402
from qdrant_guard.receipts import receipts_from_payload  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")

BASE = {"class": "PII", "owner": "hr", "readers": ["support"], "noise_on_write": True}
POLICIES = {
    "lc": {**BASE, "text_field": "page_content", "diversity": {"enabled": False}},
    "lc_capped": {**BASE, "text_field": "page_content", "source_field": "metadata.source",
                  "diversity": {"enabled": True}},
    "li": {**BASE, "text_field": "_node_content", "diversity": {"enabled": False}},
    "lc_sec": {**BASE, "readers": [], "text_field": "page_content", "diversity": {"enabled": False}},
    "li_sec": {**BASE, "readers": [], "text_field": "_node_content", "diversity": {"enabled": False}},
    "pub": {"class": "PUBLIC", "text_field": "page_content"},
    "li_capped": {**BASE, "text_field": "_node_content", "source_field": "source",
                  "diversity": {"enabled": True}},
}


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def owner(kit):
    client = QdrantClient(":memory:", guard=kit.config(POLICIES), principal=kit.principal("alice", "hr"))
    for name in ("lc", "lc_capped", "lc_sec"):
        client.create_collection(name, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    return client


def _lc(client, name, **kw):
    return LCStore(client=client, collection_name=name, embedding=LCHashingEmbeddings(), **kw)


def _outsider(kit, owner):
    """support reads lc, lc_capped, li, li_capped; lc_sec and li_sec have no readers."""
    return owner.with_principal(kit.principal("bob", "support"))


def test_langchain_read_paths_refuse_a_principal_outside_the_readers(kit, owner):
    _lc(owner, "lc_sec").add_texts(TEXTS)
    bob = _lc(_outsider(kit, owner), "lc_sec", validate_collection_config=False)
    vector = LCHashingEmbeddings().embed_query("payroll")
    attempts = {
        "similarity_search_with_score": lambda: bob.similarity_search_with_score("payroll", k=2),
        "similarity_search_by_vector": lambda: bob.similarity_search_by_vector(vector, k=2),
        "max_marginal_relevance_search": lambda: bob.max_marginal_relevance_search("payroll", k=2, fetch_k=6),
        "max_marginal_relevance_search_by_vector": lambda: bob.max_marginal_relevance_search_by_vector(vector, k=2),
        "asimilarity_search": lambda: asyncio.run(bob.asimilarity_search("payroll", k=2)),
        "amax_marginal_relevance_search": lambda: asyncio.run(bob.amax_marginal_relevance_search("payroll", k=2)),
    }
    for name, attempt in attempts.items():
        with pytest.raises(GuardRefusal) as ei:
            attempt()
        assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY", name


def test_langchain_write_paths_refuse_a_principal_outside_the_readers(kit, owner):
    ids = _lc(owner, "lc_sec").add_texts(TEXTS)
    bob = _lc(_outsider(kit, owner), "lc_sec", validate_collection_config=False)
    doc = Document(page_content="bob was here", metadata={"source": "bob"})
    attempts = {
        "add_documents": lambda: bob.add_documents([doc], ids=["00000000-0000-0000-0000-000000000001"]),
        "aadd_texts": lambda: asyncio.run(bob.aadd_texts(["bob was here"])),
        "delete": lambda: bob.delete(ids[:2]),
        "adelete": lambda: asyncio.run(bob.adelete(ids[:2])),
    }
    for name, attempt in attempts.items():
        with pytest.raises(GuardRefusal) as ei:
            attempt()
        assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY", name
    assert count(owner, "lc_sec") == len(TEXTS)


def test_langchain_add_documents_with_ids_redacts_and_receipts_each_point(owner):
    ids = ["00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"]
    docs = [Document(page_content="refund approved for SSN 123-45-6789", metadata={"source": "a"}),
            Document(page_content="call 555-867-5309 about jane.doe@example.com", metadata={"source": "b"})]
    assert _lc(owner, "lc").add_documents(docs, ids=ids) == ids
    stored = {str(pid): payload for pid, payload, _ in snapshot(owner, "lc")}
    assert sorted(stored) == ids
    for payload in stored.values():
        assert set(receipts_from_payload(payload)) == {""}
        assert "123-45-6789" not in payload["page_content"]
        assert "jane.doe@example.com" not in payload["page_content"]
    assert "[SSN]" in stored[ids[0]]["page_content"] and "[EMAIL]" in stored[ids[1]]["page_content"]


def test_langchain_mmr_holds_the_diversity_cap_whatever_fetch_k(kit, owner):
    _lc(owner, "lc_capped").add_texts(TEXTS, metadatas=[{"source": "one"}] * len(TEXTS))
    bob = _lc(owner.with_principal(kit.principal("bob", "support")), "lc_capped")
    # one source, k=5: the cap allows max(1, floor(0.4*5)) = 2 documents however many candidates MMR sees.
    for search in (lambda: bob.max_marginal_relevance_search("refund", k=5, fetch_k=len(TEXTS)),
                   lambda: bob.similarity_search_with_score("refund", k=5),
                   lambda: asyncio.run(bob.amax_marginal_relevance_search("refund", k=5, fetch_k=len(TEXTS)))):
        assert len(search()) == 2


def test_langchain_filter_on_personal_data_is_refused_on_a_sensitive_collection(kit, owner):
    _lc(owner, "lc").add_texts(TEXTS)
    bob = _lc(owner.with_principal(kit.principal("bob", "support")), "lc")
    flt = rest.Filter(must=[rest.FieldCondition(key="metadata.email",
                                                match=rest.MatchValue(value="jane.doe@example.com"))])
    for search in (lambda: bob.similarity_search("refund", k=2, filter=flt),
                   lambda: bob.max_marginal_relevance_search("refund", k=2, filter=flt)):
        with pytest.raises(GuardRefusal) as ei:
            search()
        assert ei.value.verdict == "QUERY_REJECTED"


def _li_nodes(texts, sources=None):
    emb = LIHashingEmbedding()
    sources = sources or [f"doc{i}" for i in range(len(texts))]
    return [TextNode(text=t, metadata={"source": s}, embedding=emb.get_text_embedding(t))
            for t, s in zip(texts, sources)]


def _li_query(text, k=4, **kw):
    return VectorStoreQuery(query_embedding=LIHashingEmbedding().get_query_embedding(text), similarity_top_k=k, **kw)


def test_llamaindex_mmr_mode_and_filters_refuse_a_principal_outside_the_readers(kit, owner):
    LIStore(collection_name="li_sec", client=owner).add(_li_nodes(TEXTS))
    bob = LIStore(collection_name="li_sec", client=_outsider(kit, owner))
    flt = MetadataFilters(filters=[MetadataFilter(key="source", value="doc1", operator=FilterOperator.EQ)])
    for query in (_li_query("payroll", mode=VectorStoreQueryMode.MMR),
                  _li_query("payroll", filters=flt)):
        with pytest.raises(GuardRefusal) as ei:
            bob.query(query)
        assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    with pytest.raises(GuardRefusal) as ei:
        bob.delete_nodes(node_ids=["x"])
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert count(owner, "li_sec") == len(TEXTS)


def test_llamaindex_mmr_mode_and_filtered_queries_hold_the_diversity_cap(kit, owner):
    LIStore(collection_name="li_capped", client=owner).add(_li_nodes(TEXTS, ["one"] * len(TEXTS)))
    bob = LIStore(collection_name="li_capped", client=owner.with_principal(kit.principal("bob", "support")))
    flt = MetadataFilters(filters=[MetadataFilter(key="source", value="one", operator=FilterOperator.EQ)])
    for query in (_li_query("refund", k=5, mode=VectorStoreQueryMode.MMR),
                  _li_query("refund", k=5, filters=flt)):
        assert len(bob.query(query).nodes) == 2


def test_llamaindex_filter_on_personal_data_is_refused(kit, owner):
    LIStore(collection_name="li", client=owner).add(_li_nodes(TEXTS))
    bob = LIStore(collection_name="li", client=owner.with_principal(kit.principal("bob", "support")))
    flt = MetadataFilters(filters=[MetadataFilter(key="email", value="jane.doe@example.com")])
    with pytest.raises(GuardRefusal) as ei:
        bob.query(_li_query("refund", filters=flt))
    assert ei.value.verdict == "QUERY_REJECTED"


def test_langchain_mmr_vectors_are_charged_to_the_distillation_budget(kit):
    """MMR asks for vectors: they count against max_vectors like any read returning vectors, so
    after MMR has used the budget no other point's vector reaches the reader."""
    policy = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "noise_on_write": True,
              "text_field": "page_content", "diversity": {"max_vectors": 3, "max_source_fraction": 1.0}}
    owner = QdrantClient(":memory:", guard=kit.config({"model": policy}), principal=kit.principal("alice", "hr"))
    owner.create_collection("model", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    _lc(owner, "model").add_texts(TEXTS)
    bob_client = owner.with_principal(kit.principal("bob", "support"))
    bob = _lc(bob_client, "model")
    seen = {d.metadata["_id"] for d in bob.max_marginal_relevance_search("refund", k=3, fetch_k=len(TEXTS))}
    assert len(seen) == 3 < len(TEXTS)  # three vectors: the whole budget
    others = rest.Filter(must_not=[rest.HasIdCondition(has_id=sorted(seen))])
    rest_points = bob_client.query_points("model", query_filter=others, limit=len(TEXTS), with_vectors=True).points
    assert rest_points and all(p.vector is None for p in rest_points)
    owner_points = owner.query_points("model", query_filter=others, limit=len(TEXTS), with_vectors=True).points
    assert all(p.vector is not None for p in owner_points)


def test_langchain_nested_metadata_pii_is_refused_on_a_public_collection(owner):
    owner.create_collection("pub", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    for metadata, field in (({"email": "jane.doe@example.com"}, "metadata.email"),
                            ({"contact": {"phone": "555-867-5309"}}, "metadata.contact.phone")):
        with pytest.raises(GuardRefusal) as ei:
            _lc(owner, "pub").add_texts(["hello"], metadatas=[metadata])
        assert ei.value.verdict == "SENSITIVITY_MISMATCH" and field in ei.value.directive
    assert count(owner, "pub") == 0
