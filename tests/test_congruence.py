"""Transparent mode is congruent with qdrant-client: seeded random operation sequences give
identical results on the guarded client (no policy, and a policy whose collections are PUBLIC)
and on a raw ``qdrant_client.QdrantClient(":memory:")``."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
import qdrant_client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qdrant_client.http import models

import qdrant_guard
from qdrant_guard.policy import config_from_dict

DIM = 8
SOURCES = ["a", "b", "c"]

point = st.builds(
    lambda i, v, s, n: models.PointStruct(id=i, vector=v, payload={"source": s, "n": n}),
    st.integers(0, 30),
    st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=DIM, max_size=DIM).filter(lambda v: any(abs(x) > 1e-3 for x in v)),
    st.sampled_from(SOURCES),
    st.integers(0, 5),
)
vector = st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=DIM, max_size=DIM)
flt = st.one_of(st.none(), st.sampled_from(SOURCES).map(
    lambda s: models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value=s))])))

op = st.one_of(
    st.tuples(st.just("upsert"), st.lists(point, min_size=1, max_size=8)),
    st.tuples(st.just("query"), vector, st.integers(1, 12), flt, st.booleans()),
    st.tuples(st.just("groups"), vector, st.integers(1, 4), st.integers(1, 3)),
    st.tuples(st.just("scroll"), st.integers(1, 15), flt, st.booleans()),
    st.tuples(st.just("retrieve"), st.lists(st.integers(0, 30), max_size=6)),
    st.tuples(st.just("set_payload"), st.integers(0, 5), st.lists(st.integers(0, 30), min_size=1, max_size=4)),
    st.tuples(st.just("delete"), st.lists(st.integers(0, 30), min_size=1, max_size=4)),
    st.tuples(st.just("count"), flt),
    st.tuples(st.just("facet"), flt),
)


def apply(client, name, o):
    """The operation's result, or its exception's type and message (errors must be congruent too)."""
    try:
        return _apply(client, name, o)
    except Exception as exc:  # noqa: BLE001 - compared, not swallowed
        return ("raised", type(exc).__name__, str(exc))


def _apply(client, name, o):
    kind = o[0]
    if kind == "upsert":
        return client.upsert(name, o[1]).status
    if kind == "query":
        return client.query_points(name, query=o[1], limit=o[2], query_filter=o[3], with_vectors=o[4]).points
    if kind == "groups":
        return client.query_points_groups(name, group_by="source", query=o[1], limit=o[2], group_size=o[3]).groups
    if kind == "scroll":
        return client.scroll(name, limit=o[1], scroll_filter=o[2], with_vectors=o[3])
    if kind == "retrieve":
        return client.retrieve(name, o[1], with_vectors=True)
    if kind == "set_payload":
        return client.set_payload(name, payload={"n": o[1]}, points=o[2]).status
    if kind == "delete":
        return client.delete(name, points_selector=o[1]).status
    if kind == "count":
        return client.count(name, count_filter=o[1])
    return client.facet(name, key="source", facet_filter=o[1])


def fresh(client):
    client.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    client.create_payload_index("c", "source", models.PayloadSchemaType.KEYWORD)
    return client


PUBLIC_POLICY = config_from_dict({"unlisted": "refuse", "collections": {"c": {"class": "PUBLIC"}}})


# The keyword index is what a server needs for facet(); local mode warns that it ignores it.
@pytest.mark.filterwarnings("ignore:Payload indexes have no effect in the local Qdrant")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=15))
def test_random_sequences_are_identical(ops):
    raw = fresh(qdrant_client.QdrantClient(":memory:"))
    plain = fresh(qdrant_guard.QdrantClient(":memory:"))
    public = fresh(qdrant_guard.QdrantClient(":memory:", guard=PUBLIC_POLICY))
    for o in ops:
        expected = apply(raw, "c", o)
        assert apply(plain, "c", o) == expected, o
        assert apply(public, "c", o) == expected, o


def test_async_twin_is_congruent_too():
    rng = np.random.default_rng(5)
    pts = [models.PointStruct(id=i, vector=rng.normal(size=DIM).tolist(), payload={"source": SOURCES[i % 3]})
           for i in range(20)]

    async def run(client):
        await client.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.DOT))
        await client.upsert("c", pts)
        q = await client.query_points("c", query=pts[0].vector, limit=5, with_vectors=True)
        s = await client.scroll("c", limit=7)
        n = await client.count("c")
        await client.close()
        return q.points, s, n

    raw = asyncio.run(run(qdrant_client.AsyncQdrantClient(":memory:")))
    guarded = asyncio.run(run(qdrant_guard.AsyncQdrantClient(":memory:", guard=PUBLIC_POLICY)))
    assert guarded == raw
