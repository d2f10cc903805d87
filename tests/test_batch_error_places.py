"""A refusal inside a batch names the input's full place, so the caller can find and fix it:
``requests[1].query`` (not ``query``) in ``query_batch_points``, and
``update_operations[2].upsert.points[0]`` (not ``points[0]``) in ``batch_update_points``.

Real qdrant-client local mode; the verdicts and what is refused are those of the same input
outside a batch (checked beside each place).
"""
from __future__ import annotations

import pytest
from guardkit import DIM, audit_records, create, make_kit, models

from qdrant_guard import GuardRefusal, QdrantClient, QdrantGuardError

IMAGE = models.Image(image="https://example.org/a.png", model="m")
V = [0.1] * DIM


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _client(kit, pii=None):
    pol = {"pub": {"class": "PUBLIC"},
           "pii": {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text",
                   "intent": {"enabled": False}, **(pii or {})}}
    cl = QdrantClient(":memory:", guard=kit.config(pol), principal=kit.principal("alice", "hr"))
    create(cl, "pub")
    create(cl, "pii")
    return cl


def _batch(cl, second, first=None):
    return cl.query_batch_points("pii", [first or models.QueryRequest(query=V, limit=3), second])


def _refused(call):
    with pytest.raises(QdrantGuardError) as ei:
        call()
    return ei.value


def test_an_image_query_in_a_batch_request_is_named_by_its_request(kit):
    cl = _client(kit)
    exc = _refused(lambda: _batch(cl, models.QueryRequest(query=IMAGE, limit=3)))
    assert isinstance(exc, GuardRefusal) and exc.verdict == "QUERY_REJECTED"
    assert "requests[1].query is a models.Image" in str(exc)
    assert audit_records(kit)[-1]["details"]["where"] == ["requests[1].query"]
    # The same verdict as outside a batch, where the place is the call's own query.
    top = _refused(lambda: cl.query_points("pii", query=IMAGE, limit=3))
    assert top.verdict == exc.verdict and "query is a models.Image" in str(top)


def test_an_image_in_a_batch_request_prefetch_is_named_by_its_request(kit):
    cl = _client(kit)
    req = models.QueryRequest(prefetch=[models.Prefetch(query=V), models.Prefetch(query=IMAGE)],
                              query=models.FusionQuery(fusion="rrf"), limit=3)
    exc = _refused(lambda: _batch(cl, req, first=req.model_copy()))
    assert "requests[0].prefetch[1].query is a models.Image" in str(exc)


def test_an_image_refused_under_query_noise_names_its_request(kit):
    cl = _client(kit, pii={"noise_queries": True})
    exc = _refused(lambda: _batch(cl, models.QueryRequest(query=models.NearestQuery(nearest=IMAGE), limit=3)))
    assert isinstance(exc, GuardRefusal) and exc.verdict == "QUERY_REJECTED"
    assert "requests[1].query.nearest is a models.Image" in str(exc)


def test_unchecked_text_in_a_batch_request_is_named_by_its_request(kit):
    cl = _client(kit)
    doc = models.Document(text="a plain sentence", model="m")
    req = models.QueryRequest(query=models.RecommendQuery(recommend=models.RecommendInput(positive=[V, doc])),
                              limit=3)
    exc = _refused(lambda: _batch(cl, req))
    assert isinstance(exc, GuardRefusal) and exc.verdict == "QUERY_REJECTED"
    assert "text at requests[1].query.recommend.positive[1] would be embedded" in str(exc)
    assert audit_records(kit)[-1]["details"]["unchecked_text"] == ["requests[1].query.recommend.positive[1]"]


def test_a_batch_request_top_level_document_is_still_its_checked_text(kit):
    # The request's own Document is its query text (checked), not unchecked text: still let through
    # to inference (which local mode here lacks), as before.
    cl = _client(kit)
    try:
        _batch(cl, models.QueryRequest(query=models.Document(text="a plain sentence", model="m"), limit=3))
    except QdrantGuardError:
        raise
    except Exception:  # noqa: BLE001 - qdrant-client's own (no fastembed)
        pass


def test_a_batch_request_query_that_does_not_validate_names_its_request(kit):
    cl = _client(kit)
    bad = models.NearestQuery.model_construct(nearest=[0.1, "x", None])
    exc = _refused(lambda: _batch(cl, models.QueryRequest.model_construct(query=bad, limit=3)))
    assert isinstance(exc, GuardRefusal) and exc.verdict == "QUERY_REJECTED"
    assert "requests[1].query is a NearestQuery" in str(exc)


def _upsert(points):
    return models.UpsertOperation(upsert=models.PointsList(points=points))


def _ops(bad):
    return [models.DeleteOperation(delete=models.PointIdsList(points=[5])),
            _upsert([models.PointStruct(id=1, vector=V, payload={"a": 1})]),
            _upsert([models.PointStruct(id=2, vector=V), bad])]


@pytest.mark.parametrize("name", ["pii", "pub"])
def test_a_bad_point_in_a_batch_upsert_names_its_operation(kit, name):
    cl = _client(kit)
    bad = models.PointStruct.model_construct(id=3, vector=V, payload=["not", "a", "dict"])
    exc = _refused(lambda: cl.batch_update_points(name, _ops(bad)))
    assert "update_operations[2].upsert.points[1] (point id 3)" in str(exc)
    # The same error as a plain upsert of that point, where the place is the call's points.
    top = _refused(lambda: cl.upsert(name, [bad]))
    assert type(top) is type(exc) and "points[0] (point id 3)" in str(top)


@pytest.mark.parametrize("name", ["pii", "pub"])
def test_a_bad_vector_update_in_a_batch_names_its_operation(kit, name):
    cl = _client(kit)
    cl.upsert(name, [models.PointStruct(id=1, vector=V)])
    bad = models.PointVectors.model_construct(id=1, vector=object())
    op = models.UpdateVectorsOperation(update_vectors=models.UpdateVectors.model_construct(points=[bad]))
    exc = _refused(lambda: cl.batch_update_points(name, [_upsert([models.PointStruct(id=2, vector=V)]), op]))
    assert "update_operations[1].update_vectors.points[0] (point id 1)" in str(exc)
