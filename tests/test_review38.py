"""The thirty-eighth review (h-rev38): review 37's leftovers on the write path."""
from __future__ import annotations

import pytest
from qdrant_client import QdrantClient as RawClient

from guardkit import make_kit, models
from qdrant_guard import QdrantClient

M = models
SSN = "Customer John Doe, SSN 123-45-6789"


# -- a PUBLIC collection: a lone vector named "" given as a models.Document ------------------------


@pytest.fixture()
def public(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pub": {"class": "PUBLIC", "text_field": "text", "allow_redaction_on_public": True}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    client.create_collection("pub", vectors_config={n: M.VectorParams(size=4, distance=M.Distance.COSINE)
                                                    for n in ("", "b")})
    return client


def test_a_lone_document_named_empty_on_a_public_collection_stays_a_named_vector(public):
    # The screened Document was joined back into a bare Document, the unnamed vector, which Qdrant
    # refuses on a collection of named vectors (review 37 fixed the same on sensitive collections).
    pol = public.guard.policy("pub")
    doc = M.Document(text=SSN, model="m")
    points = public.guard.public_points("upsert", "pub", pol, [M.PointStruct(id=1, vector={"": doc})])
    assert isinstance(points[0].vector, dict) and set(points[0].vector) == {""}
    assert points[0].vector[""].text == "Customer John Doe, SSN [SSN]"
    updates = public.guard._public_vector_updates("update_vectors", "pub", pol,
                                                  [M.PointVectors(id=1, vector={"": doc})])
    assert set(updates[0].vector) == {""}
    # A bare Document (the unnamed vector) keeps its bare form.
    bare = public.guard.public_points("upsert", "pub", pol, [M.PointStruct(id=1, vector=doc)])
    assert isinstance(bare[0].vector, M.Document)


def test_why_the_named_form_matters_qdrant_refuses_a_bare_vector_there():
    # Control on plain qdrant-client: the bare form is the unnamed vector, refused on this layout.
    raw = RawClient(":memory:")
    raw.create_collection("c", vectors_config={n: M.VectorParams(size=4, distance=M.Distance.COSINE)
                                               for n in ("", "b")})
    raw.upsert("c", [M.PointStruct(id=1, vector={"": [0.5] * 4})])
    with pytest.raises(Exception):
        raw.upsert("c", [M.PointStruct(id=2, vector=[0.5] * 4)])
    assert raw.count("c").count == 1
