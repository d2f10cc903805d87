"""Drop-in compatibility of ``with_payload`` given as a dict, on the reads where the guard fetches the
whole payload (for the source caps) and projects the caller's selector itself.

qdrant-client's REST client validates such a dict into ``models.PayloadSelectorInclude`` /
``PayloadSelectorExclude`` (a server returns the fields) or refuses it with a pydantic
``ValidationError``; local mode reads it as a list of its keys (``{"include": ["n"]}`` selects a
payload key named "include"). The guard's path is the same for both, so it projects what a server
returns: these tests compare it with raw qdrant-client (local mode, no mocks) given the selector the
REST client validates the dict into, and its refusals with the REST request model's own error.
"""
from __future__ import annotations

import asyncio

import pydantic
import pytest
import qdrant_client
from qdrant_client.http import models

import qdrant_guard
from tests.guardkit import make_kit

DIM = 4
VECS = [[1.0, 0.0, 0.0, 0.0], [0.9, 0.1, 0.0, 0.0], [0.8, 0.0, 0.2, 0.0], [0.7, 0.3, 0.0, 0.0],
        [0.6, 0.0, 0.0, 0.4], [0.5, 0.5, 0.0, 0.0]]
# "include" and "exclude" are payload keys too, so local mode's reading of the dict (its keys as a
# list) returns something other than {} and cannot pass for the server's answer by accident.
POINTS = [models.PointStruct(id=i, vector=v, payload={"source": "ab"[i % 2], "n": i, "meta": {"x": i, "y": -i},
                                                      "include": "k", "exclude": "e"})
          for i, v in enumerate(VECS)]
POLICY = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
          "diversity": {"max_source_coverage": 1.0}}
Q = [1.0, 0.0, 0.0, 0.0]

# Each read, as (method, its arguments besides with_payload): all four project the caller's selector
# after fetching the whole payload under POLICY.
READS = [("query_points", {"query": Q, "limit": 4}),
         ("query_points_groups", {"query": Q, "group_by": "source", "limit": 2, "group_size": 2}),
         ("scroll", {"limit": 10}),
         ("retrieve", {"ids": [0, 1, 2, 3]})]
# The request model qdrant-client's REST client builds for each method (required fields filled).
REST_REQUEST = {"query_points": lambda sel: models.QueryRequest(with_payload=sel),
                "query_points_groups": lambda sel: models.QueryGroupsRequest(group_by="source", with_payload=sel),
                "scroll": lambda sel: models.ScrollRequest(with_payload=sel),
                "retrieve": lambda sel: models.PointRequest(ids=[0], with_payload=sel)}


def _fill(client):
    client.create_collection("kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    client.upsert("kb", POINTS)
    return client


def _guarded(tmp_path):
    kit = make_kit(tmp_path)
    return _fill(qdrant_guard.QdrantClient(":memory:", guard=kit.config({"kb": POLICY}),
                                           principal=kit.principal("alice", "hr")))


def _payloads(result):
    """(id, payload) of every point a read returned, in order."""
    if isinstance(result, tuple):  # scroll
        result = result[0]
    if isinstance(result, models.GroupsResult):
        result = [h for g in result.groups for h in g.hits]
    elif isinstance(result, models.QueryResponse):
        result = result.points
    return [(p.id, p.payload) for p in result]


SELECTORS = [{"include": ["n"]}, {"exclude": ["source", "include", "exclude"]}, {"include": ["meta.x", "n"]},
             {"exclude": ["meta.y"]}, {"include": ("n",)}, {"include": []}]


@pytest.mark.parametrize("method, args", READS, ids=[r[0] for r in READS])
@pytest.mark.parametrize("selector", SELECTORS, ids=str)
def test_dict_selector_is_projected_as_the_rest_client_sends_it(tmp_path, method, args, selector):
    # The guard projected a dict as local mode reads it ({"include": ["n"]} -> the key "include"),
    # where qdrant-client's REST client sends models.PayloadSelectorInclude(include=["n"]) and a
    # server returns n.
    validated = REST_REQUEST[method](selector).with_payload
    assert isinstance(validated, (models.PayloadSelectorInclude, models.PayloadSelectorExclude))
    got = _payloads(getattr(_guarded(tmp_path), method)("kb", with_payload=selector, **args))
    # The source cap picks which points come back; each one's payload is what raw qdrant-client
    # returns for the validated selector.
    raw = _fill(qdrant_client.QdrantClient(":memory:"))
    ids = [pid for pid, _ in got]
    want = _payloads(raw.retrieve("kb", ids, with_payload=validated))
    assert len(ids) >= 2 and got == want
    assert _payloads(raw.retrieve("kb", ids, with_payload=selector)) != want  # local mode reads the dict otherwise


def test_dict_selector_is_projected_as_the_rest_client_sends_it_async(tmp_path):
    kit = make_kit(tmp_path)

    async def run():
        client = qdrant_guard.AsyncQdrantClient(":memory:", guard=kit.config({"kb": POLICY}),
                                                principal=kit.principal("alice", "hr"))
        await client.create_collection("kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        await client.upsert("kb", POINTS)
        return await client.query_points("kb", query=Q, limit=3, with_payload={"include": ["n"]})

    got = _payloads(asyncio.run(run()))
    assert got and all(payload == {"n": pid} for pid, payload in got)


REFUSED = [{"include": ["n"], "exclude": ["source"]}, {}, {"include": "n"}, {"include": [1]}, {"fields": ["n"]},
           {"include": {"fields": ["n"]}}]


@pytest.mark.parametrize("method, args", READS, ids=[r[0] for r in READS])
@pytest.mark.parametrize("selector", REFUSED, ids=str)
def test_dict_selector_the_rest_client_refuses_is_refused_with_its_error(tmp_path, method, args, selector):
    # The REST client refuses these dicts (pydantic's ValidationError naming its request model);
    # the guard read them as local mode does, as lists of keys, and returned whatever payload keys
    # they happened to name.
    with pytest.raises(pydantic.ValidationError) as rest:
        REST_REQUEST[method](selector)
    guarded = _guarded(tmp_path)
    with pytest.raises(pydantic.ValidationError) as info:
        getattr(guarded, method)("kb", with_payload=selector, **args)
    assert str(info.value) == str(rest.value)
