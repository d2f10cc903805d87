"""Scalar arguments and point ids given as subclasses are checked, charged and sent as their plain
values (qdrant_guard.sentargs, point_uuid.real_uuid).

pydantic (qdrant-client's REST body) sends a str/int/float subclass as its value and a
``uuid.UUID`` subclass as its 128-bit value; the guard read them through their own methods
(``__hash__``/``__eq__``/``__format__``, ``__int__``, ``__str__``), and local mode stores and looks
up a UUID id by its ``str()``. Each case below made the guard's check, charge or audit (and local
mode) name another vector, count or point than the server would be sent.

Real local-mode Qdrant, real keys and policies (guardkit).
"""
from __future__ import annotations

import uuid

import numpy as np
import pytest
from guardkit import DIM, charged_named, create, make_kit, models, record_sent, unit

from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.budget_stores import normalize_point_id

REAL = uuid.UUID(int=0x1234)
FAKE = uuid.UUID(int=0x5678)


class _Lying(uuid.UUID):
    """A UUID whose text (what local mode and an f-string read) is another point's id."""

    def __str__(self):
        return str(FAKE)

    def __format__(self, spec):
        return str(FAKE)


class _LooksBig(str):
    """A vector name whose look-ups and formatting show ``big``; pydantic sends its characters."""

    def __hash__(self):
        return hash("big")

    def __eq__(self, other):
        return other == "big"

    def __format__(self, spec):
        return "big"

    def __str__(self):
        return "big"


class _Small(int):
    def __int__(self):
        return 1


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


_OWNED = {"class": "PROPRIETARY", "owner": "hr", "intent": {"enabled": False},
          "diversity": {"max_source_fraction": 1.0, "min_unique_sources": 1}}


def _owned(kit):
    c = QdrantClient(":memory:", guard=kit.config({"docs": _OWNED}), principal=kit.principal("alice", "hr"))
    create(c, "docs")
    rng = np.random.default_rng(3)
    c.upsert("docs", [models.PointStruct(id=str(REAL), vector=unit(rng), payload={"who": "real"}),
                      models.PointStruct(id=str(FAKE), vector=unit(rng), payload={"who": "fake"})])
    return c


def test_normalize_point_id_names_a_uuid_subclass_by_its_value():
    assert normalize_point_id(_Lying(int=REAL.int)) == f"u:{REAL}"
    assert normalize_point_id(REAL) == f"u:{REAL}"


def test_retrieve_reads_the_point_the_server_is_sent(kit):
    c = _owned(kit)
    got = c.retrieve("docs", ids=[_Lying(int=REAL.int)], with_payload=True)
    assert [(p.id, p.payload["who"]) for p in got] == [(str(REAL), "real")]


def test_delete_by_id_deletes_the_point_the_server_is_sent(kit):
    c = _owned(kit)
    c.delete("docs", points_selector=models.PointIdsList(points=[_Lying(int=REAL.int)]))
    assert [p.payload["who"] for p in c.scroll("docs", with_payload=True)[0]] == ["fake"]
    (kit.tmp / "k2").mkdir()
    c2 = _owned(make_kit(kit.tmp / "k2"))
    c2.delete("docs", points_selector=[_Lying(int=FAKE.int)])  # a plain list of ids too
    assert [p.payload["who"] for p in c2.scroll("docs", with_payload=True)[0]] == ["real"]


def test_query_by_id_and_in_a_recommend_list_send_the_real_id(kit, monkeypatch):
    c = _owned(kit)
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    c.query_points("docs", query=_Lying(int=REAL.int), limit=1)
    c.query_points("docs", query=models.RecommendQuery(recommend=models.RecommendInput(positive=[_Lying(int=REAL.int)])),
                   limit=1)
    assert sent[0][1]["query"] == REAL and type(sent[0][1]["query"]) is uuid.UUID
    assert sent[1][1]["query"].recommend.positive == [REAL] and type(sent[1][1]["query"].recommend.positive[0]) is uuid.UUID


def test_a_uuid_subclass_without_a_value_is_refused(kit):
    c = _owned(kit)
    empty = object.__new__(_Lying)
    with pytest.raises(GuardRefusal, match=r"ids\[0\] is a _Lying, a UUID subclass without a value: pass a plain uuid.UUID"):
        c.retrieve("docs", ids=[empty])


def _two_vectors(kit):
    """PROPRIETARY ``hr`` with dense vectors ``big`` (16-d) and ``small`` (4-d), scores charged:
    a cap of 2 * 16 units, a ``small`` score costs 4 units (8 scores) and a ``big`` one 1."""
    return charged_named(kit, {"big": 16, "small": 4}, max_vectors=2, points=12)


def test_using_is_charged_as_the_vector_it_names(kit, monkeypatch):
    owner = _two_vectors(kit)
    q = [0.5, 0.5, 0.5, 0.5]
    plain = owner.with_principal(kit.principal("carol", "support")).query_points("hr", query=q, using="small", limit=10)
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    tricked = owner.with_principal(kit.principal("bob", "support")).query_points(
        "hr", query=q, using=_LooksBig("small"), limit=10)
    assert type(sent[0][1]["using"]) is str and sent[0][1]["using"] == "small"
    assert len(tricked.points) == len(plain.points) == 8


def test_limit_is_read_as_the_value_sent(kit, monkeypatch):
    c = QdrantClient(":memory:", guard=kit.config({"docs": _OWNED}), principal=kit.principal("alice", "hr"))
    create(c, "docs")
    rng = np.random.default_rng(4)
    c.upsert("docs", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i}"}) for i in range(8)])
    got = c.query_points("docs", query=unit(rng), limit=_Small(5))
    assert len(got.points) == 5


def test_search_params_subclass_is_sent_as_the_model(kit, monkeypatch):
    class Params(models.SearchParams):
        def model_dump(self, *a, **kw):
            return {}

    c = _owned(kit)
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    c.query_points("docs", query=[0.5] * DIM, limit=1, search_params=Params(hnsw_ef=7))
    assert type(sent[0][1]["search_params"]) is models.SearchParams and sent[0][1]["search_params"].hnsw_ef == 7




def test_scroll_offset_names_the_real_point(kit):
    c = _owned(kit)
    page, _ = c.scroll("docs", offset=_Lying(int=REAL.int), with_payload=True)
    assert [p.payload["who"] for p in page] == ["real", "fake"]


def test_plain_arguments_are_passed_as_they_are():
    from qdrant_guard.sentargs import plain_args

    ids = [1, str(REAL), REAL]
    for method, args in (("retrieve", {"collection_name": "docs", "ids": ids}),
                         ("query_points", {"collection_name": "docs", "using": "v", "limit": 10, "offset": 2,
                                           "search_params": models.SearchParams(hnsw_ef=64)}),
                         ("delete", {"collection_name": "docs", "points_selector": ids})):
        assert plain_args(method, args) is args
