"""Drop-in compatibility found by using the guarded client as a qdrant-client user would: each test
runs the same calls on ``qdrant_client.QdrantClient(":memory:")`` and on the guarded client and
compares the results (local mode, no mocks)."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
import qdrant_client
from qdrant_client.http import models

import qdrant_guard
from qdrant_guard.policy import config_from_dict

DIM = 4
PUBLIC_POLICY = config_from_dict({"unlisted": "refuse", "collections": {"kb": {"class": "PUBLIC"}}})


def _vectors() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(8, DIM))


def _fill(client):
    client.create_collection("kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    client.upsert("kb", [models.PointStruct(id=i, vector=v.tolist(), payload={"source": "ab"[i % 2]})
                         for i, v in enumerate(_vectors())])
    return client


@pytest.mark.parametrize("method", ["query_points", "query_points_groups"])
def test_query_text_is_accepted_without_a_policy(method):
    # README: query_text= is an argument the guarded client adds. Code written for it must run on a
    # client built without guard= (a dev set-up with the policy off) as it runs under a PUBLIC
    # policy; it raised qdrant-client's bare "AssertionError: Unknown arguments: ['query_text']".
    q = _vectors()[0].tolist()
    extra = {"group_by": "source"} if method == "query_points_groups" else {}
    expected = getattr(_fill(qdrant_client.QdrantClient(":memory:")), method)("kb", query=q, limit=3, **extra)
    for client in (qdrant_guard.QdrantClient(":memory:"), qdrant_guard.QdrantClient(":memory:", guard=PUBLIC_POLICY)):
        got = getattr(_fill(client), method)("kb", query=q, limit=3, query_text="refund policy", **extra)
        assert got == expected


def test_query_text_is_accepted_without_a_policy_async():
    q = _vectors()[0].tolist()

    async def run(client, **extra):
        await client.create_collection("kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        await client.upsert("kb", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(_vectors())])
        return await client.query_points("kb", query=q, limit=3, **extra)

    expected = asyncio.run(run(qdrant_client.AsyncQdrantClient(":memory:")))
    assert asyncio.run(run(qdrant_guard.AsyncQdrantClient(":memory:"), query_text="refund policy")) == expected


def test_other_unknown_arguments_still_fail_as_in_qdrant_client():
    # Only the guard's own arguments are dropped; a typo still fails exactly as qdrant-client fails.
    raw, guarded = _fill(qdrant_client.QdrantClient(":memory:")), _fill(qdrant_guard.QdrantClient(":memory:"))
    errors = []
    for client in (raw, guarded):
        with pytest.raises(AssertionError) as info:
            client.query_points("kb", query=[1.0] * DIM, query_txt="typo")
        errors.append(str(info.value))
    assert errors[0] == errors[1]


def _shape(vector):
    """The shape a caller's code depends on: a dict's names, a list's length, or None."""
    if isinstance(vector, dict):
        return ("dict", sorted(vector))
    return None if vector is None else ("list", len(vector))


def test_stripped_vectors_keep_qdrant_clients_shape(tmp_path):
    # A reader outside the owner boundary gets receipted vectors, the others stripped (README). The
    # stripping returned None where qdrant-client returns a dict: for a point with no vector left
    # ({}), and for named vectors once all were stripped, though a partly stripped point stayed a
    # dict, so `hit.vector.items()` raised AttributeError only for some points.
    from tests.guardkit import make_kit

    kit = make_kit(tmp_path)
    pii = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"],
           "raw_in_boundary": True, "noise_on_write": True, "diversity": {"enabled": False}}
    owner = qdrant_guard.QdrantClient(":memory:", guard=kit.config({"u": pii, "n": pii}),
                                      principal=kit.principal("alice", "hr"))
    reader = owner.with_principal(kit.principal("bob", "support"))
    raw = qdrant_client.QdrantClient(":memory:")
    for client in (raw, owner):
        client.create_collection("u", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        client.create_collection("n", vectors_config={
            "a": models.VectorParams(size=DIM, distance=models.Distance.COSINE),
            "b": models.VectorParams(size=DIM, distance=models.Distance.COSINE)})
    for client, noised_writer in ((raw, raw), (owner, reader)):
        # Points 1 and 2 are written noised (receipted), point 3 raw by the owner boundary.
        noised_writer.upsert("u", [models.PointStruct(id=1, vector=[1.0, 0, 0, 0]),
                                   models.PointStruct(id=2, vector=[0, 1.0, 0, 0])])
        client.upsert("u", [models.PointStruct(id=3, vector=[1.0, 1, 0, 0])])
        client.delete_vectors("u", [""], [2])
        noised_writer.upsert("n", [models.PointStruct(id=1, vector={"a": [1.0, 0, 0, 0], "b": [0, 1.0, 0, 0]}),
                                   models.PointStruct(id=2, vector={"a": [1.0, 0, 0, 0]})])
        client.upsert("n", [models.PointStruct(id=3, vector={"a": [1.0, 1, 0, 0]})])

    def shapes(client, name, with_vectors):
        return [(r.id, _shape(r.vector)) for r in client.retrieve(name, [1, 2, 3], with_vectors=with_vectors)]

    # Unnamed: the point without a vector is {} as in qdrant-client; the raw vector is stripped to None.
    assert shapes(raw, "u", True) == [(1, ("list", DIM)), (2, ("dict", [])), (3, ("list", DIM))]
    assert shapes(reader, "u", True) == [(1, ("list", DIM)), (2, ("dict", [])), (3, None)]
    # Named: always a dict; the stripped raw vector 'a' of point 3 is absent.
    assert shapes(raw, "n", True) == [(1, ("dict", ["a", "b"])), (2, ("dict", ["a"])), (3, ("dict", ["a"]))]
    assert shapes(reader, "n", True) == [(1, ("dict", ["a", "b"])), (2, ("dict", ["a"])), (3, ("dict", []))]
    assert shapes(raw, "n", ["b"]) == shapes(reader, "n", ["b"]) == [(1, ("dict", ["b"])), (2, ("dict", [])), (3, ("dict", []))]
    hits = reader.query_points("n", query=[1.0, 0, 0, 0], using="a", with_vectors=True, limit=3).points
    assert all(isinstance(h.vector, dict) for h in hits) and "a" not in next(h.vector for h in hits if h.id == 3)


def _diversified(tmp_path):
    """A PII collection "kb" under the default source cap, filled as _fill does, read by its owner."""
    from tests.guardkit import make_kit

    kit = make_kit(tmp_path)
    pii = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True}
    return _fill(qdrant_guard.QdrantClient(":memory:", guard=kit.config({"kb": pii}),
                                           principal=kit.principal("alice", "hr")))


def _errors_of(guarded, call):
    """The ValueError texts of ``call`` on plain qdrant-client and on ``guarded``."""
    errors = []
    for client in (_fill(qdrant_client.QdrantClient(":memory:")), guarded):
        with pytest.raises(ValueError) as info:
            call(client)
        errors.append(str(info.value))
    return errors


@pytest.mark.parametrize("kwargs", [{"limit": 0}, {"limit": -1}, {"limit": 0, "offset": 2}])
def test_invalid_limit_fails_as_in_qdrant_client_on_a_diversified_collection(tmp_path, kwargs):
    # The source cap over-fetches, and read limit=0 as "the default": query_points(limit=0) on a PII
    # collection returned ten points where qdrant-client raises; limit=-1 raised the guard's own
    # "limit must be >= 1" instead of qdrant-client's error.
    guarded = _diversified(tmp_path)
    errors = _errors_of(guarded, lambda client: client.query_points("kb", query=[1.0] * DIM, **kwargs))
    assert errors[1] == errors[0]
    # Only counts Qdrant refuses pass through: a valid limit still gets the source cap.
    hits = guarded.query_points("kb", query=[1.0] * DIM, limit=5).points
    sources = [h.payload["source"] for h in hits]
    assert len(hits) <= 5 and max(sources.count(s) for s in set(sources)) <= 2  # floor(0.4 * 5)


@pytest.mark.parametrize("kwargs", [{"group_size": 0}, {"group_size": -2}])
def test_invalid_group_counts_fail_as_in_qdrant_client_on_a_diversified_collection(tmp_path, kwargs):
    # group_size=0 was read as the default (3) and returned groups; -2 raised the guard's own error.
    errors = _errors_of(_diversified(tmp_path),
                        lambda client: client.query_points_groups("kb", "source", query=[1.0] * DIM, **kwargs))
    assert errors[1] == errors[0]


@pytest.mark.parametrize("klass", ["PUBLIC", "PII"])
def test_update_vectors_refuses_a_grpc_point_by_name(tmp_path, klass):
    # qdrant-client types update_vectors' points as models.PointVectors or grpc.PointVectors. The
    # guard refuses gRPC points on writes (upsert says so, naming the fix), but update_vectors
    # crashed with a bare "AttributeError: vector" on a PUBLIC collection and blamed the point id
    # on a PII one. Nothing may be written either way.
    from qdrant_client import grpc
    from qdrant_client.conversions.conversion import RestToGrpc

    from tests.guardkit import make_kit

    kit = make_kit(tmp_path)
    pol = {"class": "PUBLIC"} if klass == "PUBLIC" else {"class": "PII", "owner": "hr", "raw_in_boundary": True}
    client = _fill(qdrant_guard.QdrantClient(":memory:", guard=kit.config({"kb": pol}), principal=kit.principal("alice", "hr")))
    before = qdrant_client.QdrantClient.retrieve(client, "kb", [1], with_vectors=True)
    update = grpc.PointVectors(id=RestToGrpc.convert_extended_point_id(1),
                               vectors=RestToGrpc.convert_vector_struct([0.0, 1.0, 0.0, 0.0]))
    with pytest.raises(TypeError, match=r"got points_pb2\.PointVectors.*convert it to models\.PointVectors"):
        client.update_vectors("kb", [update])
    with pytest.raises(TypeError, match=r"points\[0\] is a dict that is not a models\.PointVectors \(invalid: vector\)"):
        client.update_vectors("kb", [{"id": 1, "vector": "not a vector"}])
    assert qdrant_client.QdrantClient.retrieve(client, "kb", [1], with_vectors=True) == before


def test_writes_follow_a_collection_recreated_by_another_client(tmp_path):
    # Agents share one store; another agent's process (or an operator) may recreate a collection
    # with another layout. The guard cached the first layout per collection and then refused every
    # write that fit the new one ("unknown vector name", "has dimension 5, the collection expects
    # 4") until restarted, where qdrant-client writes. The base-class call below stands for that
    # other client: it changes the store without this guard seeing it.
    from tests.guardkit import make_kit

    kit = make_kit(tmp_path)
    pii = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"],
           "raw_in_boundary": True, "noise_on_write": True}
    owner = qdrant_guard.QdrantClient(":memory:", guard=kit.config({"kb": pii}), principal=kit.principal("alice", "hr"))
    writer = owner.with_principal(kit.principal("bob", "support"))
    owner.create_collection("kb", vectors_config={"a": models.VectorParams(size=3, distance=models.Distance.COSINE)})
    writer.upsert("kb", [models.PointStruct(id=1, vector={"a": [1.0, 0.0, 0.0]})])  # caches the layout

    qdrant_client.QdrantClient.delete_collection(owner, "kb")
    qdrant_client.QdrantClient.create_collection(
        owner, "kb", vectors_config=models.VectorParams(size=5, distance=models.Distance.COSINE))
    v = [1.0, 0.0, 0.0, 0.0, 0.0]
    writer.upsert("kb", [models.PointStruct(id=1, vector=v)])
    owner.upload_collection("kb", vectors=[v], ids=[2])
    writer.update_vectors("kb", [models.PointVectors(id=1, vector=[0.0, 1.0, 0.0, 0.0, 0.0])])
    assert qdrant_client.QdrantClient.count(owner, "kb").count == 2
    # A point that fits neither layout is still refused, naming the current one.
    with pytest.raises(qdrant_guard.InvalidVectorError, match="has dimension 3, the collection expects 5"):
        writer.upsert("kb", [models.PointStruct(id=3, vector=[1.0, 0.0, 0.0])])


def _pii_client(tmp_path):
    from tests.guardkit import make_kit

    kit = make_kit(tmp_path)
    pii = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True}
    return qdrant_guard.QdrantClient(":memory:", guard=kit.config({"kb": pii}), principal=kit.principal("alice", "hr"))


@pytest.mark.parametrize("method", ["query_points", "query_points_groups"])
def test_with_payload_as_a_str_fails_as_in_qdrant_client_on_a_diversified_collection(tmp_path, method):
    # The source cap fetches the whole payload and projects the caller's selector afterwards; a
    # str selector, which qdrant-client refuses, fell through the projection and returned every
    # payload key.
    extra = {"group_by": "source"} if method == "query_points_groups" else {}
    errors = []
    for client in (_fill(qdrant_client.QdrantClient(":memory:")), _fill(_pii_client(tmp_path))):
        with pytest.raises(ValueError) as info:
            getattr(client, method)("kb", query=[1.0] * DIM, limit=2, with_payload="source", **extra)
        errors.append(str(info.value))
    assert errors[1] == errors[0]


@pytest.mark.parametrize("method", ["query_points", "query_points_groups"])
def test_grpc_payload_selector_is_projected_on_a_diversified_collection(tmp_path, method):
    # qdrant-client takes a grpc.WithPayloadSelector too (sent as its REST model). Projected after
    # the guard fetched the whole payload, it returned every key; it must select what the REST
    # selector it stands for selects.
    from qdrant_client import grpc

    extra = {"group_by": "source"} if method == "query_points_groups" else {}
    client = _pii_client(tmp_path)
    client.create_collection("kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    client.upsert("kb", [models.PointStruct(id=i, vector=v.tolist(), payload={"source": "ab"[i % 2], "n": i, "note": "x"})
                         for i, v in enumerate(_vectors())])
    q = _vectors()[0].tolist()
    grpc_sel = grpc.WithPayloadSelector(include=grpc.PayloadIncludeSelector(fields=["n"]))
    got = getattr(client, method)("kb", query=q, limit=2, with_payload=grpc_sel, **extra)
    want = getattr(client, method)("kb", query=q, limit=2, with_payload=models.PayloadSelectorInclude(include=["n"]), **extra)
    assert got == want
    hits = got.points if method == "query_points" else [h for g in got.groups for h in g.hits]
    assert hits and all(set(h.payload) == {"n"} for h in hits)


@pytest.mark.parametrize("cls", [qdrant_guard.QdrantClient, qdrant_guard.AsyncQdrantClient])
@pytest.mark.parametrize("given", [{"principal": "tok"}, {"embedder": lambda texts: np.zeros((len(texts), DIM))},
                                   {"principal": "tok", "embedder": lambda texts: np.zeros((len(texts), DIM))}])
def test_guard_arguments_without_guard_are_refused(cls, given):
    # principal=/embedder= act only through a policy. Without guard= they were silently ignored, so
    # a caller who forgot guard= got plain qdrant-client and believed the store protected.
    with pytest.raises(qdrant_guard.ConfigError) as err:
        cls(":memory:", **given)
    msg = str(err.value)
    for name in given:
        assert f"{name}=" in msg
    assert "without guard=" in msg and "pass guard=" in msg


def test_plain_client_without_guard_arguments_still_builds():
    client = qdrant_guard.QdrantClient(":memory:", principal=None, embedder=None)
    assert client.guard is None
    _fill(client)
    assert client.count("kb").count == 8


@pytest.mark.parametrize("klass", ["PUBLIC", "PII"])
def test_dict_points_are_stored_as_the_rest_client_stores_them(tmp_path, klass):
    # qdrant-client's REST client validates a list of dicts into models.PointsList, so against a
    # server upsert(points=[{...}]) stores them; the guard refused them with a TypeError. They are
    # now read as those PointStructs (local mode itself still fails on them, with or without guard).
    from tests.guardkit import make_kit

    kit = make_kit(tmp_path)
    pol = {"class": "PUBLIC"} if klass == "PUBLIC" else {"class": "PII", "owner": "hr", "raw_in_boundary": True}
    vecs = _vectors()
    as_dicts, as_models = (qdrant_guard.QdrantClient(":memory:", guard=kit.config({"kb": pol}),
                                                     principal=kit.principal("alice", "hr")) for _ in range(2))
    for client in (as_dicts, as_models):
        client.create_collection("kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    as_dicts.upsert("kb", [{"id": i, "vector": v.tolist(), "payload": {"source": "ab"[i % 2]}} for i, v in enumerate(vecs)])
    as_dicts.upload_points("kb", [{"id": 100 + i, "vector": v.tolist()} for i, v in enumerate(vecs[:2])])
    as_models.upsert("kb", [models.PointStruct(id=i, vector=v.tolist(), payload={"source": "ab"[i % 2]})
                            for i, v in enumerate(vecs)])
    as_models.upload_points("kb", [models.PointStruct(id=100 + i, vector=v.tolist()) for i, v in enumerate(vecs[:2])])

    def stored(client):
        points = qdrant_client.QdrantClient.scroll(client, "kb", limit=100, with_vectors=True)[0]
        return [(p.id, p.vector, {k: v for k, v in (p.payload or {}).items() if k != "_qdrant_guard_receipt"})
                for p in points]

    assert stored(as_dicts) == stored(as_models) and len(stored(as_dicts)) == 10


def test_an_invalid_dict_point_is_refused_by_field_without_its_values():
    client = qdrant_guard.QdrantClient(":memory:", guard=PUBLIC_POLICY)
    _fill(client)
    secret = "hunter2-secret-value"
    with pytest.raises(TypeError, match=r"points\[1\] is a dict that is not a models\.PointStruct \(invalid: vector\)") as info:
        client.upsert("kb", [{"id": 20, "vector": [0.0] * DIM}, {"id": 21, "vector": secret, "payload": {}}])
    assert secret not in str(info.value)
    assert client.count("kb").count == 8  # nothing was written


@pytest.mark.parametrize("klass", ["PUBLIC", "PII"])
def test_dict_vector_updates_are_applied_as_the_rest_client_applies_them(tmp_path, klass):
    # As with upsert: qdrant-client's REST client validates update_vectors' dicts into
    # models.UpdateVectors, so a server applies them.
    from tests.guardkit import make_kit

    kit = make_kit(tmp_path)
    pol = {"class": "PUBLIC"} if klass == "PUBLIC" else {"class": "PII", "owner": "hr", "raw_in_boundary": True}
    a, b = (_fill(qdrant_guard.QdrantClient(":memory:", guard=kit.config({"kb": pol}), principal=kit.principal("alice", "hr")))
            for _ in range(2))
    a.update_vectors("kb", [{"id": 1, "vector": [0.0, 1.0, 0.0, 0.0]}])
    b.update_vectors("kb", [models.PointVectors(id=1, vector=[0.0, 1.0, 0.0, 0.0])])
    got = [qdrant_client.QdrantClient.retrieve(c, "kb", [1], with_vectors=True)[0].vector for c in (a, b)]
    assert got[0] == got[1] and got[0] != qdrant_client.QdrantClient.retrieve(
        _fill(qdrant_client.QdrantClient(":memory:")), "kb", [1], with_vectors=True)[0].vector
