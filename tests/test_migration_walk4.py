"""What an existing qdrant-client app met when it swapped the import and wrote a policy (h-walk4).

The app: a PUBLIC knowledge base and a PII ticket store owned by one boundary and read by another,
both with named dense vectors and a sparse ``keywords`` vector for hybrid search, in local mode.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import QdrantClient
from qdrant_guard.errors import InvalidVectorError

from tests.guardkit import DIM, Kit, audit_records, make_kit, unit

TICKETS = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
           "text_field": "text", "intent": {"enabled": False}}
VECTORS = {"body": models.VectorParams(size=DIM, distance=models.Distance.COSINE)}
SPARSE = {"keywords": models.SparseVectorParams()}


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    return make_kit(tmp_path)


def _ticket(pid: int, rng: np.random.Generator, text: str, source: str, *, sparse: bool) -> models.PointStruct:
    vector: dict[str, Any] = {"body": unit(rng)}
    if sparse:
        vector["keywords"] = models.SparseVector(indices=[pid, 1000 + len(text)], values=[1.0, 0.5])
    return models.PointStruct(id=pid, vector=vector, payload={"text": text, "source": source})


def test_a_sparse_vector_refusal_says_what_to_do_and_each_way_out_works(kit: Kit, tmp_path: Path) -> None:
    # The app's hybrid search wrote a sparse vector beside the dense one: the refusal said "store
    # them in a PUBLIC collection or drop them", and nothing of the sparse vectors already stored
    # (which the guard refuses to write, yet every reader's sparse query still ranks by) nor of
    # what keyword search may use instead.
    store = tmp_path / "store"
    rng = np.random.default_rng(4)
    legacy = RawClient(path=str(store))  # the app before the switch
    legacy.create_collection("tickets", vectors_config=VECTORS, sparse_vectors_config=SPARSE)
    legacy.upsert("tickets", [_ticket(1, rng, "refund not received", "cust-1", sparse=True)])
    legacy.close()

    owner = QdrantClient(path=str(store), guard=kit.config({"tickets": TICKETS}), principal=kit.principal("alice", "hr"))
    try:
        support = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(InvalidVectorError) as refused:
            owner.upsert("tickets", [_ticket(2, rng, "package arrived damaged", "cust-2", sparse=True)])
        message = " ".join(str(refused.value).split())
        assert "point 2: vector 'keywords' is a sparse vector" in message
        assert "leave 'keywords' out of the point's vectors" in message
        assert "filter on the payload text with models.MatchText" in message
        assert "remove them with delete_vectors(collection_name, ['keywords'], points=...)" in message

        # The stored sparse vector still answers a reader's sparse query: what the message warns of.
        probe = models.SparseVector(indices=[1], values=[1.0])
        assert [p.id for p in support.query_points("tickets", query=probe, using="keywords", limit=3).points] == [1]
        # Each way out the message names works through the guard.
        owner.upsert("tickets", [_ticket(2, rng, "package arrived damaged", "cust-2", sparse=False)])
        owner.delete_vectors("tickets", ["keywords"], points=[1])
        assert support.query_points("tickets", query=probe, using="keywords", limit=3).points == []
        found = support.scroll("tickets", scroll_filter=models.Filter(must=[models.FieldCondition(
            key="text", match=models.MatchText(text="damaged"))]), limit=5)[0]
        assert [r.id for r in found] == [2]
    finally:
        owner.close()


def test_a_pii_filter_refusal_names_the_section_its_key_goes_in(kit: Kit, tmp_path: Path) -> None:
    # "set query.filter_pii = \"owner\"" left the user to find where: in the collection's query
    # table. The message now names it, and the line written there lets the owner erase a
    # customer's tickets by e-mail (the app's GDPR delete).
    rng = np.random.default_rng(5)
    erase = models.FilterSelector(filter=models.Filter(must=[models.FieldCondition(
        key="email", match=models.MatchValue(value="jane@example.com"))]))

    def owner_of(policy: dict[str, Any]) -> Any:
        client = QdrantClient(":memory:", guard=kit.config({"tickets": policy}), principal=kit.principal("alice", "hr"))
        client.create_collection("tickets", vectors_config=VECTORS)
        client.upsert("tickets", [models.PointStruct(id=1, vector={"body": unit(rng)},
                                                     payload={"text": "late", "source": "c1", "email": "jane@example.com"})])
        return client

    owner = owner_of(TICKETS)
    with pytest.raises(Exception) as refused:
        owner.delete("tickets", points_selector=erase)
    assert "QUERY_REJECTED" in str(refused.value)
    assert 'set filter_pii = "owner" in [collections.tickets.query] to let the owner boundary \'hr\' filter on PII' in str(
        refused.value)
    owner.close()

    owner = owner_of({**TICKETS, "query": {"filter_pii": "owner"}})
    owner.delete("tickets", points_selector=erase)
    assert owner.count("tickets").count == 0
    owner.close()


def test_a_grouped_read_by_the_source_field_audits_how_many_hits_the_caps_took(kit: Kit) -> None:
    # query_points_groups(group_by="source", group_size=4) returned one hit where qdrant-client
    # returned four, and the audit entry gave the caps but not that the answer came back short.
    rng = np.random.default_rng(6)
    points = [_ticket(i, rng, f"ticket {i}", "cust-1", sparse=False) for i in range(4)]
    points += [_ticket(4, rng, "ticket 4", "cust-2", sparse=False), _ticket(5, rng, "ticket 5", "cust-3", sparse=False)]
    query = unit(rng)
    ask = {"query": query, "using": "body", "group_by": "source", "limit": 3, "group_size": 4}

    raw = RawClient(":memory:")
    raw.create_collection("tickets", vectors_config=VECTORS)
    raw.upsert("tickets", points)
    uncapped = sum(len(g.hits) for g in raw.query_points_groups("tickets", **ask).groups)
    raw.close()

    owner = QdrantClient(":memory:", guard=kit.config({"tickets": TICKETS}), principal=kit.principal("alice", "hr"))
    owner.create_collection("tickets", vectors_config=VECTORS)
    owner.upsert("tickets", points)
    groups = owner.query_points_groups("tickets", **ask).groups
    owner.close()
    returned = sum(len(g.hits) for g in groups)
    assert (uncapped, returned) == (6, 3)  # cust-1's group: 1 of 4 (its share of the 6 hits is 2, of a group of 4 is 1)
    entry = [r for r in audit_records(kit) if r["op"] == "query_points_groups"][-1]
    assert entry["details"]["group_caps"] == {"group_cap": 1, "response_cap": 2, "short_by": uncapped - returned}


@pytest.mark.parametrize("with_embedder", [False, True])
def test_a_document_for_a_sparse_slot_is_refused_as_sparse_before_any_embedder_is_asked_for(
        kit: Kit, with_embedder: bool) -> None:
    # The app's BM25 write (models.Document(model="Qdrant/bm25") for the sparse slot) was told to
    # pass embedder=; with one, the guard embedded the text and then refused the slot as sparse.
    from qdrant_guard.hashing_embedder import HashingEmbedder

    texts: list[list[str]] = []

    def embedder(batch: list[str]) -> Any:
        texts.append(list(batch))
        return HashingEmbedder(DIM)(batch)

    owner = QdrantClient(":memory:", guard=kit.config({"tickets": TICKETS}), principal=kit.principal("alice", "hr"),
                         **({"embedder": embedder} if with_embedder else {}))
    # Made before the guard (as in the walk): the guard refuses sparse slots on sensitive collections.
    RawClient.create_collection(owner, "tickets", vectors_config=VECTORS, sparse_vectors_config=SPARSE)
    point = models.PointStruct(id=7, payload={"text": "refund please", "source": "c1"}, vector={
        "body": unit(np.random.default_rng(7)), "keywords": models.Document(text="refund please", model="Qdrant/bm25")})
    with pytest.raises(InvalidVectorError, match=r"^point 7: vector 'keywords' is a sparse vector; .*leave 'keywords' out"):
        owner.upsert("tickets", [point])
    assert texts == []
    entry = audit_records(kit)[-1]
    assert (entry["op"], entry["verdict"], entry["point_ids"]) == ("upsert", "UNSUPPORTED_WRITE", [7])
    owner.close()
