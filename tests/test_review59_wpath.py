"""Review 59, write path: a sparse vector slot is refused when a sensitive collection would get one
(not at the first write to it), and a ``model_construct``'ed point whose vector holds no numbers
is refused with the guard's InvalidVectorError naming the point, not pydantic's ValidationError.
Real qdrant-client local mode throughout."""
from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any, Iterator

import numpy as np
import pytest
from guardkit import DIM, RawClient, audit_records, make_kit, models, record_sent, snapshot, unit

from qdrant_guard import AsyncQdrantClient, ConfigError, GuardArgumentTypeError, GuardRefusal, InvalidVectorError, QdrantClient

_VP = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
_SPARSE = {"kw": models.SparseVectorParams(), "title-kw": models.SparseVectorParams()}
_OWNED = {"owner": "hr", "readers": ["support"], "intent": {"enabled": False}}
_SENT = ("create_collection", "recreate_collection", "create_vector_name", "delete_collection")


@pytest.fixture
def kit(tmp_path):
    return make_kit(tmp_path)


def _client(kit, collections: dict[str, Any], **extra: Any) -> QdrantClient:
    return QdrantClient(":memory:", guard=kit.config(collections, **extra), principal=kit.principal("alice", "hr"))


def _refusals(kit, method: str) -> list[dict[str, Any]]:
    return [r for r in audit_records(kit) if r["op"] == method and r["verdict"] == "UNSUPPORTED_WRITE"]


# -- 1. a sparse slot on a sensitive collection is refused when asked for --------------------------
@pytest.mark.parametrize("cls", ["PII", "CREDENTIAL", "PROPRIETARY"])
@pytest.mark.parametrize("method", ["create_collection", "recreate_collection"])
def test_a_sparse_slot_on_a_sensitive_collection_is_refused_at_creation_naming_it(kit, monkeypatch, cls, method):
    c = _client(kit, {"docs": {"class": cls, **_OWNED}})
    sent = record_sent(monkeypatch, _SENT)
    with pytest.raises(InvalidVectorError) as ei:
        getattr(c, method)("docs", vectors_config={"d": _VP}, sparse_vectors_config=_SPARSE)
    msg = str(ei.value)
    assert msg.startswith(f"{method}: collection 'docs' is {cls}, and sparse vector slot(s) ['kw', 'title-kw'] would hold")
    assert "the words themselves" in msg and "every write to them would be refused" in msg
    assert f"Call {method} without those sparse_vectors_config entries" in msg and "PUBLIC collection" in msg
    assert msg.endswith("Nothing was sent")
    assert ei.value.reason == "sparse_vector"  # the reason word of a sparse vector written there
    assert sent == [] and not RawClient.collection_exists(c, "docs")
    (entry,) = _refusals(kit, method)
    assert entry["collection"] == "docs" and entry["manifest"]["embedding_sensitivity_class"] == cls
    assert entry["details"] == {"error": "InvalidVectorError", "reason": "sparse_vector",
                                "sparse_vectors": ["kw", "title-kw"]}


def test_a_refused_recreate_keeps_the_collection_and_its_points(kit):
    # recreate_collection deletes first: refused before anything is sent, the old one stays whole.
    c = _client(kit, {"docs": {"class": "PII", **_OWNED, "raw_in_boundary": True}})
    c.create_collection("docs", vectors_config={"d": _VP})
    c.upsert("docs", [models.PointStruct(id=1, vector={"d": unit(np.random.default_rng(1))})])
    before = snapshot(c, "docs")
    with pytest.raises(InvalidVectorError, match=r"sparse vector slot\(s\) \['kw'\]"):
        c.recreate_collection("docs", vectors_config={"d": _VP}, sparse_vectors_config={"kw": models.SparseVectorParams()})
    assert snapshot(c, "docs") == before
    assert RawClient.get_collection(c, "docs").config.params.sparse_vectors is None


@pytest.mark.parametrize("sparse", [None, {}], ids=["none", "empty"])
def test_a_sensitive_collection_without_sparse_slots_is_created_as_before(kit, sparse):
    c = _client(kit, {"docs": {"class": "PII", **_OWNED}})
    assert c.create_collection("docs", vectors_config={"d": _VP}, sparse_vectors_config=sparse) is True
    assert not RawClient.get_collection(c, "docs").config.params.sparse_vectors
    assert _refusals(kit, "create_collection") == []


@pytest.mark.parametrize("policy, extra", [({"pub": {"class": "PUBLIC"}}, {}), ({}, {"unlisted": "public"})],
                         ids=["public", "unlisted-public"])
def test_a_public_collection_keeps_its_sparse_slots(kit, policy, extra):
    c = _client(kit, policy, **extra)
    assert c.create_collection("pub", vectors_config={"d": _VP}, sparse_vectors_config=_SPARSE) is True
    assert set(RawClient.get_collection(c, "pub").config.params.sparse_vectors) == {"kw", "title-kw"}
    sparse = models.SparseVector(indices=[3, 9], values=[1.0, 0.5])
    c.upsert("pub", [models.PointStruct(id=1, vector={"d": unit(np.random.default_rng(2)), "kw": sparse})])
    hits = c.query_points("pub", query=sparse, using="kw", limit=1).points
    assert [h.id for h in hits] == [1]


def test_an_unlisted_collection_follows_its_unlisted_policy(kit):
    # strict: the [default] policy (here PII with an owner, who may create) refuses the slot.
    strict = _client(kit, {}, unlisted="strict", default={"class": "PII", "owner": "hr"})
    with pytest.raises(InvalidVectorError, match=r"^create_collection: collection 'notes' is PII, and sparse"):
        strict.create_collection("notes", vectors_config={"d": _VP}, sparse_vectors_config=_SPARSE)
    assert not RawClient.collection_exists(strict, "notes")
    # refuse: refused as every call on an unlisted collection is, before its arguments are read.
    refuse = _client(kit, {}, unlisted="refuse")
    with pytest.raises(ConfigError) as ei:
        refuse.create_collection("notes", vectors_config={"d": _VP}, sparse_vectors_config=_SPARSE)
    assert not isinstance(ei.value, InvalidVectorError)
    assert not RawClient.collection_exists(refuse, "notes")


def test_who_may_not_create_the_collection_is_refused_for_that_first(kit):
    c = _client(kit, {"docs": {"class": "PII", **_OWNED}}).with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        c.create_collection("docs", vectors_config={"d": _VP}, sparse_vectors_config=_SPARSE)
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert not RawClient.collection_exists(c, "docs")


def test_a_collection_made_with_sparse_slots_before_the_guard_keeps_working(kit):
    c = _client(kit, {"docs": {"class": "PII", **_OWNED, "raw_in_boundary": True}})
    RawClient.create_collection(c, "docs", vectors_config={"d": _VP}, sparse_vectors_config=_SPARSE)
    sparse = models.SparseVector(indices=[1, 4], values=[0.5, 0.25])
    RawClient.upsert(c, "docs", [models.PointStruct(id=1, vector={"d": unit(np.random.default_rng(3)), "kw": sparse})])
    c.upsert("docs", [models.PointStruct(id=2, vector={"d": unit(np.random.default_rng(4))})])
    assert set(c.get_collection("docs").config.params.sparse_vectors) == {"kw", "title-kw"}
    assert {p.id for p in c.scroll("docs", limit=10)[0]} == {1, 2}
    assert len(c.query_points("docs", query=unit(np.random.default_rng(5)), using="d", limit=5).points) == 2
    # update_collection changes the parameters of slots the collection has; it adds none.
    assert c.update_collection("docs", sparse_vectors_config={
        "kw": models.SparseVectorParams(modifier=models.Modifier.IDF)}) is True
    assert RawClient.get_collection(c, "docs").config.params.sparse_vectors["kw"].modifier == models.Modifier.IDF
    with pytest.raises(ValueError, match="does not exist"):  # Qdrant's own refusal of a new name
        c.update_collection("docs", sparse_vectors_config={"new": models.SparseVectorParams()})
    assert set(RawClient.get_collection(c, "docs").config.params.sparse_vectors) == {"kw", "title-kw"}
    # Writes to the slots stay refused, as before.
    with pytest.raises(InvalidVectorError, match="vector 'kw' is a sparse vector"):
        c.upsert("docs", [models.PointStruct(id=3, vector={"d": unit(np.random.default_rng(6)), "kw": sparse})])


@pytest.mark.parametrize("config", [
    models.SparseVectorNameConfig(sparse=models.SparseVectorConfig()),
    {"sparse": {}},
], ids=["model", "dict"])
def test_create_vector_name_refuses_a_sparse_slot_on_a_sensitive_collection(kit, monkeypatch, config):
    c = _client(kit, {"docs": {"class": "PROPRIETARY", **_OWNED}})
    c.create_collection("docs", vectors_config={"d": _VP})
    sent = record_sent(monkeypatch, _SENT)
    with pytest.raises(InvalidVectorError) as ei:
        c.create_vector_name("docs", "kw", config)
    assert str(ei.value).startswith("create_vector_name: collection 'docs' is PROPRIETARY, and sparse vector "
                                    "slot(s) ['kw'] would hold")
    assert "Add a dense vector here instead (models.DenseVectorNameConfig)" in str(ei.value)
    assert sent == [] and not RawClient.get_collection(c, "docs").config.params.sparse_vectors
    (entry,) = _refusals(kit, "create_vector_name")
    assert entry["details"]["sparse_vectors"] == ["kw"]
    # A dense one is added as before; on a PUBLIC collection a sparse one too.
    c.create_vector_name("docs", "d2", models.DenseVectorNameConfig(
        dense=models.DenseVectorConfig(size=DIM, distance=models.Distance.COSINE)))
    assert set(RawClient.get_collection(c, "docs").config.params.vectors) == {"d", "d2"}


def test_create_vector_name_keeps_a_public_sparse_slot(kit):
    c = _client(kit, {"pub": {"class": "PUBLIC"}})
    c.create_collection("pub", vectors_config={"d": _VP})
    c.create_vector_name("pub", "kw", models.SparseVectorNameConfig(sparse=models.SparseVectorConfig()))
    assert set(RawClient.get_collection(c, "pub").config.params.sparse_vectors) == {"kw"}


class _Shifty(Mapping):
    """A mapping that answers a truth test as empty but iterates its slots (local mode asks
    ``sparse_vectors_config or {}``, pydantic iterates)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __bool__(self) -> bool:
        return False


def test_a_sparse_config_that_is_no_dict_is_read_as_it_is_sent(kit):
    c = _client(kit, {"docs": {"class": "PII", **_OWNED}})
    with pytest.raises(InvalidVectorError, match=re.escape("sparse vector slot(s) ['kw']")):
        c.create_collection("docs", vectors_config={"d": _VP}, sparse_vectors_config=_Shifty({"kw": {}}))
    with pytest.raises(GuardArgumentTypeError, match="argument 'sparse_vectors_config' must be a dict of "
                                                     "models.SparseVectorParams by vector name, not list"):
        c.create_collection("docs", vectors_config={"d": _VP}, sparse_vectors_config=[("kw", {})])
    assert not RawClient.collection_exists(c, "docs")
    # An empty one is sent as the plain dict it was read as.
    assert c.create_collection("docs", vectors_config={"d": _VP}, sparse_vectors_config=_Shifty({})) is True


def test_the_async_client_refuses_a_sparse_slot_at_creation(kit):
    cfg = kit.config({"docs": {"class": "CREDENTIAL", **_OWNED}})
    client = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))

    async def scenario() -> tuple[str, bool, bool]:
        with pytest.raises(InvalidVectorError) as ei:
            await client.create_collection("docs", vectors_config={"d": _VP}, sparse_vectors_config=_SPARSE)
        exists = await client.collection_exists("docs")
        with pytest.raises(InvalidVectorError):
            await client.create_vector_name("docs", "kw", models.SparseVectorNameConfig(sparse=models.SparseVectorConfig()))
        made = await client.create_collection("docs", vectors_config={"d": _VP})
        await client.close()
        return str(ei.value), exists, made

    msg, exists, made = asyncio.run(scenario())
    assert msg.startswith("create_collection: collection 'docs' is CREDENTIAL, and sparse vector slot(s) ['kw', 'title-kw']")
    assert not exists and made
    assert [r["details"]["reason"] for r in _refusals(kit, "create_collection")] == ["sparse_vector"]


# -- 2. a model_construct'ed point whose vector holds no numbers --------------------------------------
_NOT_NUMBERS = [
    (["a"] * DIM, "vector '<unnamed>' holds text (str) (numpy dtype <U1)"),
    ([0.5] * (DIM - 1) + ["z"], "vector '<unnamed>' holds text (str)"),
    ([None] * DIM, "vector '<unnamed>' holds values that are not all numbers (None, or a mix)"),
    ([True] * DIM, "vector '<unnamed>' holds booleans"),
    ({"": ["a"] * DIM}, "vector '<unnamed>' holds text (str)"),
    ("some text", "it is a str; give a list of floats, or a dict of them by vector name"),
    (5, "it is an int;"),
    ({"": "some text"}, "it is a dict whose '' is a str;"),
    (("x",) * DIM, "it is a list holding a str;"),
]
_IDS = ["text-list", "one-text", "nones", "bools", "named-text-list", "text", "int", "named-text", "text-tuple"]


def _pii(kit) -> QdrantClient:
    c = _client(kit, {"pii": {"class": "PII", **_OWNED, "noise_on_write": True,
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}})
    c.create_collection("pii", vectors_config=_VP)
    c.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(7)))])
    return c


@pytest.mark.parametrize("vector, found", _NOT_NUMBERS, ids=_IDS)
def test_update_vectors_with_a_vector_of_no_numbers_raises_invalid_vector_error(kit, vector, found):
    c = _pii(kit)
    before = snapshot(c, "pii")
    with pytest.raises(InvalidVectorError) as ei:
        c.update_vectors("pii", [models.PointVectors.model_construct(id=1, vector=vector)])
    assert re.search(r"point (id )?1\b", str(ei.value)) and found in str(ei.value)
    assert snapshot(c, "pii") == before
    (entry,) = _refusals(kit, "update_vectors")
    assert entry["point_ids"] == [1] and entry["details"]["error"] in ("InvalidVectorError", "NotAVector")
    assert entry["details"]["reason"] in ("bad_dtype", "not_a_vector")


@pytest.mark.parametrize("vector, found", _NOT_NUMBERS, ids=_IDS)
def test_upsert_and_a_batch_with_a_vector_of_no_numbers_raise_invalid_vector_error(kit, vector, found):
    c = _pii(kit)
    before = snapshot(c, "pii")
    with pytest.raises(InvalidVectorError, match=re.escape(found)) as ei:
        c.upsert("pii", [models.PointStruct.model_construct(id=2, vector=vector)])
    assert re.search(r"point (id )?2\b", str(ei.value))
    with pytest.raises(InvalidVectorError, match=re.escape(found)):
        c.batch_update_points("pii", [models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
            points=[models.PointVectors.model_construct(id=1, vector=vector)]))])
    assert snapshot(c, "pii") == before


def test_the_async_update_vectors_raises_invalid_vector_error(kit):
    cfg = kit.config({"pii": {"class": "PII", **_OWNED, "raw_in_boundary": True}})
    client = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))

    async def scenario() -> list[str]:
        await client.create_collection("pii", vectors_config=_VP)
        await client.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(8)))])
        out = []
        for vector in (["a"] * DIM, "some text"):
            with pytest.raises(InvalidVectorError) as ei:
                await client.update_vectors("pii", [models.PointVectors.model_construct(id=1, vector=vector)])
            out.append(str(ei.value))
        await client.close()
        return out

    listed, text = asyncio.run(scenario())
    assert listed.startswith("point 1: vector '<unnamed>' holds text (str)")
    assert "(point id 1)" in text and "it is a str" in text
