"""llama-index-vector-stores-qdrant's QdrantVectorStore over the guarded clients (sync and async),
on real local-mode Qdrant."""
from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

pytest.importorskip("llama_index.vector_stores.qdrant")

import qdrant_client  # noqa: E402
from llama_index.core import VectorStoreIndex  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode  # noqa: E402
from llama_index.vector_stores.qdrant import QdrantVectorStore  # noqa: E402

from guardkit import count, make_kit, snapshot  # noqa: E402
from integration_embeddings import LIHashingEmbedding, sparse_batch  # noqa: E402
from qdrant_guard import AsyncQdrantClient, GuardRefusal, InvalidVectorError, QdrantClient  # noqa: E402
from qdrant_guard.receipts import RECEIPT_KEY, receipts_from_payload  # noqa: E402
from qdrant_guard.receipts import verify as verify_stored  # noqa: E402

# llama-index indexes doc_id on collection creation; local mode warns that indexes do nothing there.
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")

from integration_embeddings import AWS_KEY_TEXT, TEXTS  # noqa: E402
DENSE = "text-dense"  # llama-index's dense vector name in hybrid collections (others use the unnamed one)

# llama-index keeps the node text only inside the JSON string "_node_content": the text rules
# screen that string. Node metadata is stored flat, so source_field can name a metadata key.
SENSITIVE = {"class": "PII", "owner": "hr", "readers": ["support"], "noise_on_write": True,
             "text_field": "_node_content", "diversity": {"enabled": False}}
POLICIES = {
    "kb": SENSITIVE,
    "secret": {"class": "CREDENTIAL", "owner": "hr", "text_field": "_node_content"},
    "wiki": {"class": "PUBLIC", "text_field": "_node_content"},
    "capped": {**SENSITIVE, "source_field": "source", "diversity": {"enabled": True}},
    "strict": {**SENSITIVE, "query": {"require_text": True}},
}


@pytest.fixture(scope="module")
def emb():
    return LIHashingEmbedding()


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def owner(kit):
    return QdrantClient(":memory:", guard=kit.config(POLICIES), principal=kit.principal("alice", "hr"))


def _nodes(emb, texts=TEXTS, sources=None):
    sources = sources or [f"doc{i}" for i in range(len(texts))]
    return [TextNode(text=t, metadata={"source": s}, embedding=emb.get_text_embedding(t))
            for t, s in zip(texts, sources)]


def _query(emb, text, k=4, **kw):
    return VectorStoreQuery(query_embedding=emb.get_query_embedding(text), similarity_top_k=k, **kw)


def _dense(vector):
    return vector[DENSE] if isinstance(vector, dict) else vector


def _audit(kit):
    return [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text().splitlines()]


def test_add_creates_the_collection_and_stores_noised_receipted_vectors(kit, owner, emb):
    vs = QdrantVectorStore(collection_name="kb", client=owner)
    nodes = _nodes(emb)
    ids = vs.add(nodes)  # creates the collection (owner boundary) and upload_points through the guard
    assert ids == [n.node_id for n in nodes] and count(owner, "kb") == len(nodes)
    clean = {n.node_id: np.asarray(n.embedding) for n in nodes}
    for pid, payload, vector in snapshot(owner, "kb"):
        assert set(receipts_from_payload(payload)) == {vs.dense_vector_name}
        assert not np.allclose(vector, clean[str(pid)], atol=1e-3)  # really noised
    reports = verify_stored(owner, "kb", trusted_keys=owner.guard.trusted_receipt_keys)
    assert len(reports) == len(nodes) and all(r.ok for r in reports)
    assert any(r["verdict"] == "ALLOW_NOISED" and r["collection"] == "kb" for r in _audit(kit))

    bob = owner.with_principal(kit.principal("bob", "support"))
    for client in (owner, bob):
        res = QdrantVectorStore(collection_name="kb", client=client).query(_query(emb, "refund for damaged goods"))
        assert len(res.nodes) == 4
        assert res.nodes[0].text == "refund policy for damaged goods"
        assert res.nodes[0].metadata == {"source": "doc0"}  # the receipt is not node metadata
    # get_nodes asks for vectors: the reader gets the noised, receipted ones (never raw ones)
    (got,) = QdrantVectorStore(collection_name="kb", client=bob).get_nodes(node_ids=[nodes[0].node_id])
    stored = {str(pid): v for pid, _, v in snapshot(owner, "kb")}
    np.testing.assert_allclose(got.embedding, stored[nodes[0].node_id], atol=1e-6)


def test_index_retriever_end_to_end(kit, owner, emb):
    QdrantVectorStore(collection_name="kb", client=owner).add(_nodes(emb))
    bob_vs = QdrantVectorStore(collection_name="kb", client=owner.with_principal(kit.principal("bob", "support")))
    index = VectorStoreIndex.from_vector_store(bob_vs, embed_model=emb)
    hits = index.as_retriever(similarity_top_k=2).retrieve("vpn guide for laptops")
    assert hits[0].node.text == "vpn setup guide for laptops"


def test_public_collection_passes_vectors_through_unchanged(owner, emb):
    vs = QdrantVectorStore(collection_name="wiki", client=owner.with_principal(None))
    nodes = _nodes(emb)
    vs.add(nodes)  # PUBLIC is pass-through: even an anonymous principal creates and writes it
    stored = {str(pid): (p, v) for pid, p, v in snapshot(owner, "wiki")}
    for n in nodes:
        payload, vector = stored[n.node_id]
        assert RECEIPT_KEY not in payload
        np.testing.assert_allclose(_dense(vector), n.embedding, atol=1e-6)
    assert vs.query(_query(emb, "payroll fridays", k=1)).nodes[0].text == "payroll runs on fridays"


def test_query_from_another_boundary_raises_a_refusal_not_an_empty_result(kit, owner, emb):
    QdrantVectorStore(collection_name="secret", client=owner).add(_nodes(emb, TEXTS[:3]))
    bob_vs = QdrantVectorStore(collection_name="secret", client=owner.with_principal(kit.principal("bob", "support")))
    with pytest.raises(GuardRefusal) as ei:
        bob_vs.query(_query(emb, "payroll"))
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert "support" in ei.value.directive and "hr" in ei.value.directive
    for attempt in (lambda: bob_vs.add(_nodes(emb, ["bob was here"])), lambda: bob_vs.get_nodes(limit=5),
                    lambda: bob_vs.delete(ref_doc_id="None"), bob_vs.clear):
        with pytest.raises(GuardRefusal) as ei:
            attempt()
        assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert count(owner, "secret") == 3


def test_a_node_holding_an_aws_key_is_refused_and_nothing_is_written(owner, emb):
    vs = QdrantVectorStore(collection_name="kb", client=owner)
    vs.add(_nodes(emb, TEXTS[:1]))
    with pytest.raises(GuardRefusal) as ei:
        vs.add(_nodes(emb, [TEXTS[1], AWS_KEY_TEXT, TEXTS[2]]))
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert "AKIAQ3EGRVXS4ZJPLJ7M" not in str(ei.value)
    assert count(owner, "kb") == 1  # the batch is refused as a whole


def test_pii_is_redacted_inside_node_content_and_the_node_still_parses(kit, owner, emb):
    QdrantVectorStore(collection_name="kb", client=owner).add(
        _nodes(emb, ["refund for employee with SSN 123-45-6789 approved"]))
    bob_vs = QdrantVectorStore(collection_name="kb", client=owner.with_principal(kit.principal("bob", "support")))
    (node,) = bob_vs.query(_query(emb, "refund", k=1)).nodes
    assert "123-45-6789" not in node.text and "[SSN]" in node.text
    assert node.metadata == {"source": "doc0"}


def test_delete_by_ref_doc_id_and_by_node_id(owner, emb):
    vs = QdrantVectorStore(collection_name="kb", client=owner)
    nodes = _nodes(emb)
    vs.add(nodes)
    vs.delete_nodes([nodes[0].node_id])
    assert count(owner, "kb") == len(nodes) - 1
    vs.delete(ref_doc_id="None")  # llama-index writes doc_id "None" for nodes without a source document
    assert count(owner, "kb") == 0


def test_diversity_caps_apply_to_llamaindex_flat_metadata(kit, owner, emb):
    texts = [f"refund request number {i} for damaged goods" for i in range(6)] + TEXTS[1:4]
    sources = ["refunds"] * 6 + ["a", "b", "c"]
    QdrantVectorStore(collection_name="capped", client=owner).add(_nodes(emb, texts, sources))
    bob_vs = QdrantVectorStore(collection_name="capped", client=owner.with_principal(kit.principal("bob", "support")))
    res = bob_vs.query(_query(emb, "refund for damaged goods", k=5))
    got = [n.metadata["source"] for n in res.nodes]
    assert len(got) == 5
    assert got.count("refunds") == 2  # floor(5 * 0.4): the per-source cap holds through llama-index


def test_require_text_policies_refuse_llamaindex_queries_clearly(kit, owner, emb):
    """query() sends only the embedding (VectorStoreQuery.query_str is not forwarded to
    query_points), so a require_text collection refuses it, with a verdict and a directive."""
    QdrantVectorStore(collection_name="strict", client=owner).add(_nodes(emb))
    bob_vs = QdrantVectorStore(collection_name="strict", client=owner.with_principal(kit.principal("bob", "support")))
    q = _query(emb, "payroll", query_str="payroll")
    with pytest.raises(GuardRefusal) as ei:
        bob_vs.query(q)
    assert ei.value.verdict == "TEXT_REQUIRED" and "query_text=" in ei.value.directive


def test_hybrid_mode_needs_a_public_collection(owner, emb):
    """Sparse vectors are the words themselves: the guard refuses them on sensitive collections,
    here the sparse slot of the collection the store creates on its first add."""
    kw = {"enable_hybrid": True, "sparse_doc_fn": sparse_batch, "sparse_query_fn": sparse_batch}
    hybrid = QdrantVectorStore(collection_name="kb", client=owner, **kw)
    with pytest.raises(InvalidVectorError, match=r"^create_collection: collection 'kb' is PII, and sparse vector slot"):
        hybrid.add(_nodes(emb))
    assert not owner.collection_exists("kb")
    public = QdrantVectorStore(collection_name="wiki", client=owner, **kw)
    public.add(_nodes(emb))
    q = _query(emb, "warehouse lease", k=1, query_str="warehouse lease", mode=VectorStoreQueryMode.HYBRID)
    assert public.query(q).nodes[0].text == "warehouse lease ends in march"


def test_async_client_add_query_and_refusal(kit, emb):
    """aclient= takes the guarded AsyncQdrantClient; readers use with_principal on the same client
    (a local-mode async client does not share storage with a sync one)."""
    aowner = AsyncQdrantClient(":memory:", guard=kit.config(POLICIES), principal=kit.principal("alice", "hr"))
    assert isinstance(aowner, qdrant_client.AsyncQdrantClient)
    abob = aowner.with_principal(kit.principal("bob", "support"))
    nodes = _nodes(emb)

    async def scenario():
        await QdrantVectorStore(collection_name="kb", aclient=aowner).async_add(nodes)
        await QdrantVectorStore(collection_name="secret", aclient=aowner).async_add(nodes[:2])
        res = await QdrantVectorStore(collection_name="kb", aclient=abob).aquery(_query(emb, "holiday schedule"))
        with pytest.raises(GuardRefusal) as ei:
            await QdrantVectorStore(collection_name="secret", aclient=abob).aquery(_query(emb, "payroll"))
        with pytest.raises(GuardRefusal) as ci:
            await QdrantVectorStore(collection_name="kb", aclient=aowner).async_add(_nodes(emb, [AWS_KEY_TEXT]))
        n = (await aowner.count("kb")).count
        await aowner.close()
        return res, ei.value, ci.value, n

    res, refusal, cred, n = asyncio.run(scenario())
    assert res.nodes[0].text == "holiday schedule for the support team" and len(res.nodes) == 4
    assert refusal.verdict == "REFUSED_CROSS_BOUNDARY"
    assert cred.verdict == "CREDENTIAL_IN_TEXT"
    assert n == len(nodes)
