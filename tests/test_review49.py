"""Review 49: PII redacted next to a JSON escape keeps the escape whole, so llama-index's
``_node_content`` (a JSON string of the node) still parses (real local Qdrant)."""
from __future__ import annotations

import json

import pytest

from guardkit import make_kit
from qdrant_guard import detect

# llama-index indexes doc_id on collection creation; local mode warns that indexes do nothing there.
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")

ESCAPED = [
    "mail\\nalice@example.com",          # a newline written by json.dumps
    "mail\\r\\nbob.smith@corp.io",
    "x\\talice@example.com",
    "x\\falice@example.com",
    "x\\balice@example.com",
    "Jos\\u00e9alice@example.com",       # ensure_ascii's escape of a non-ASCII letter
    "x\\ud83d\\ude00john_doe@x.org",    # a surrogate pair
]


@pytest.mark.parametrize("text", ESCAPED)
def test_redaction_next_to_an_escape_leaves_a_valid_json_string(text):
    redacted = detect.redact(text)
    assert "[EMAIL]" in redacted and "@" not in redacted
    json.loads(f'"{redacted}"')  # a lone backslash before [EMAIL] is an invalid escape


def test_the_escape_before_the_finding_is_kept():
    assert detect.redact("mail\\nalice@example.com") == "mail\\n[EMAIL]"
    # An escape that stands for a character of the finding is covered with it.
    assert "\\u0041" not in detect.redact("x\\u0041lice@example.com")


@pytest.mark.parametrize("text", [
    '{"token": "8f3kLm2Qx9Zt7Wv1Rb4Yn6\\\\"}',     # an escaped backslash, then the closing quote
    '{"note": "dir\\\\nalice@example.com"}',        # an escaped backslash, then the letter n
])
def test_an_escaped_backslash_is_no_escape_start(text):
    redacted = detect.redact(text)
    assert len(json.loads(redacted)) == 1 and "@" not in redacted and "8f3k" not in redacted


def test_llamaindex_node_with_an_address_after_a_newline_parses_redacted(tmp_path):
    pytest.importorskip("llama_index.vector_stores.qdrant")
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import VectorStoreQuery
    from llama_index.vector_stores.qdrant import QdrantVectorStore

    from integration_embeddings import LIHashingEmbedding
    from qdrant_guard import QdrantClient

    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "noise_on_write": True,
           "text_field": "_node_content", "diversity": {"enabled": False}}
    owner = QdrantClient(":memory:", guard=kit.config({"kb": pol}), principal=kit.principal("alice", "hr"))
    emb = LIHashingEmbedding()
    text = "Refund contact:\nalice@example.com\nApproved."
    QdrantVectorStore(collection_name="kb", client=owner).add(
        [TextNode(text=text, metadata={"source": "d"}, embedding=emb.get_text_embedding(text))])
    bob = QdrantVectorStore(collection_name="kb", client=owner.with_principal(kit.principal("bob", "support")))
    (node,) = bob.query(VectorStoreQuery(query_embedding=emb.get_query_embedding("refund"), similarity_top_k=1)).nodes
    assert node.text == "Refund contact:\n[EMAIL]\nApproved."
    (mine,) = QdrantVectorStore(collection_name="kb", client=owner).get_nodes()
    assert mine.text == node.text
