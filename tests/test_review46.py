"""Review 46: every query form is checked as qdrant-client sends it (qdrant_guard.sentmodels).

Review h-mc rebuilt filters, formulas, prefetches and selectors from their REST dump; the other
query forms (``NearestQuery`` and its ``mmr``, recommend, discover, context, fusion and sample
queries, raw vectors, ``Document``s) and a batch request's query were read as given. A list or
ndarray subclass, or a query model subclass, then showed the guard's checks one thing while
qdrant-client sent another: pydantic (REST, and the ``NearestQuery(nearest=...)`` qdrant-client
wraps a raw vector in) reads a list's items, qdrant-client sends an ndarray's ``tolist()`` and a
model's fields, while the guard iterated, read ``np.asarray``'s data or called the model's own
``model_dump``/attributes. Now the top-level ``query`` and each batch request's are rebuilt once
per call (a plain list of floats, an exact numeric ndarray and ordinary models are passed as they
are), and that copy is checked and sent.

Real local-mode Qdrant, real keys and policies (guardkit); local mode iterates as the guard did,
so a leak local mode cannot show is shown in the REST body
(``models.QueryRequest(query=...).model_dump_json()``), as in test_model_construct_filters.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from guardkit import DIM, audit_records, create, make_kit, models, record_sent, unit
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.sentmodels import sent_models

V = [0.25] * DIM
FACE = np.full(DIM, 0.25)  # what the tricks below show the guard's score-charge digest


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _rest(query) -> str:
    """The body qdrant-client's REST transport sends for ``query`` (and gRPC converts the same model)."""
    return models.QueryRequest(query=query).model_dump_json(exclude_unset=True, exclude_none=True, warnings=False)


class _Hiding(list):
    """A list whose iteration shows only its first item; pydantic reads (and sends) every item."""

    def __iter__(self):
        return iter(list.__getitem__(self, slice(0, 1)))


class _Later(list):
    """A list whose first iteration shows only its first item and every later one all of them."""

    def __iter__(self):
        seen = self.__dict__.setdefault("seen", 0)
        self.__dict__["seen"] = seen + 1
        return iter(list.__getitem__(self, slice(0, 1) if seen == 0 else slice(None)))


# -- the distillation budget's score charge (diversity.charge_scores) -------------------------------

def _proprietary(kit, *, extra=None):
    """alice@hr's client on PROPRIETARY ``hr`` (6 unit vectors, scores charged, max_vectors 2: a cap
    of 32 scores of 16-d vectors) and bob@support's view."""
    pol = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
           "diversity": {"max_vectors": 2, "charge_scores": True, "max_source_fraction": 1.0, "min_unique_sources": 1}}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol, **(extra or {})}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(1)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i}"}) for i in range(6)])
    return owner, owner.with_principal(kit.principal("bob", "support"))


class _SameLength0(list):
    """A vector whose ``len`` is 0 and whose iteration shows FACE: the digest read it item by item."""

    def __len__(self):
        return 0

    def __iter__(self):
        return iter(FACE.tolist())


class _FaceArray(np.ndarray):
    """An array holding FACE whose ``tolist()`` (what qdrant-client sends) is another vector."""

    def tolist(self):
        return self.sent


def _face_array(v):
    a = FACE.copy().view(_FaceArray)
    a.sent = list(v)
    return a


def _faced(query):
    """``query`` as an instance of a subclass whose ``model_dump`` (the digest's reading) shows FACE."""
    face = {"nearest": FACE.tolist()}
    cls = type(f"Faced{type(query).__name__}", (type(query),), {"model_dump": lambda self, **kw: face})
    return cls.model_construct(**dict(query))


class _Hybrid(models.SampleQuery, models.NearestQuery):
    """A SampleQuery (not a measurement: never charged) that pydantic and local mode send as a NearestQuery."""


TRICKS = {
    # Old code, each: one digest for 16 different queries, so every point's 16 scores cost 1 each once.
    "list subclass": lambda v: _SameLength0(v),
    "ndarray subclass": _face_array,
    "NearestQuery subclass": lambda v: _faced(models.NearestQuery(nearest=v)),
    "RecommendQuery subclass": lambda v: _faced(models.RecommendQuery(recommend=models.RecommendInput(positive=[v]))),
    "DiscoverQuery subclass": lambda v: _faced(models.DiscoverQuery(discover=models.DiscoverInput(
        target=v, context=[models.ContextPair(positive=v, negative=(-np.asarray(v)).tolist())]))),
    "ContextQuery subclass": lambda v: _faced(models.ContextQuery(context=[models.ContextPair(
        positive=v, negative=(-np.asarray(v)).tolist())])),
    "SampleQuery hybrid": lambda v: _Hybrid.model_construct(sample=models.Sample.RANDOM, nearest=v),
}


@pytest.mark.parametrize("trick", list(TRICKS))
def test_one_digest_for_many_queries_no_longer_makes_their_scores_free(kit, trick):
    # Old code: 96 distinct scores (for the nearest forms every 16-d vector's coordinates) under
    # a cap of 32. Now each query is charged as sent (the ndarray's data is what is sent: FACE
    # each time, one score a point, free after the first).
    _, bob = _proprietary(kit)
    got = {}
    for d in range(DIM):
        for p in bob.query_points("hr", query=TRICKS[trick](np.eye(DIM)[d].tolist()), limit=6).points:
            got.setdefault(p.id, set()).add(round(p.score, 6))
    assert sum(map(len, got.values())) <= 2 * DIM
    assert all(len(c) < DIM for c in got.values())


def test_the_rebuilt_vector_is_what_is_sent(kit, monkeypatch):
    # The copy the digest read is the one qdrant-client gets: a plain list (its items, not its
    # iteration), an ndarray subclass's data (not its tolist()), a model of the exact type.
    _, bob = _proprietary(kit)
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    basis = np.eye(DIM)[3].tolist()
    bob.query_points("hr", query=_SameLength0(basis), limit=1)
    bob.query_points("hr", query=_face_array(basis), limit=1)
    bob.query_points("hr", query=_Hybrid.model_construct(sample=models.Sample.RANDOM, nearest=basis), limit=1)
    got = [kw["query"] for _, kw in sent]
    assert got[0] == basis and type(got[0]) is list
    assert got[1] == FACE.tolist() and type(got[1]) is list
    assert type(got[2]) is models.NearestQuery and got[2].nearest == basis


def test_a_point_id_hidden_in_a_recommend_list_is_charged_every_call(kit):
    # An id-taking query is never free (review 45); old code read recommend.positive by iteration,
    # saw only the vector, and let the same request come back free while point 1 of bob's own
    # collection (which REST sends) changed between calls.
    owner, bob = _proprietary(kit, extra={"mine": {"class": "PUBLIC"}})
    create(bob, "mine")
    got = 0
    for d in range(DIM):
        bob.upsert("mine", [models.PointStruct(id=1, vector=np.eye(DIM)[d].tolist())])
        q = models.RecommendQuery(recommend=models.RecommendInput.model_construct(positive=_Hiding([V, 1])))
        assert '"positive":[[' in _rest(q) and ",1]" in _rest(q)
        got += len(bob.query_points("hr", query=q, lookup_from=models.LookupLocation(collection="mine"), limit=6).points)
    assert got <= 2 * DIM


# -- text the guard never checked ------------------------------------------------------------------

SECRET = "my SSN is 123-45-6789"
DOC = models.Document(text=SECRET, model="sentence-transformers/all-MiniLM-L6-v2")


def _pii(kit, **policy):
    """alice@hr on PII collection ``c`` (3 points) that support reads, and bob@support."""
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False}, **policy}
    alice = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(alice, "c")
    rng = np.random.default_rng(2)
    alice.upsert("c", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "d"}) for i in (1, 2, 3)])
    return alice, alice.with_principal(kit.principal("bob", "support"))


HIDDEN_TEXT = {
    "recommend": lambda: models.RecommendQuery(recommend=models.RecommendInput.model_construct(
        positive=_Hiding([V, DOC]))),
    "discover": lambda: models.DiscoverQuery(discover=models.DiscoverInput.model_construct(
        target=V, context=_Hiding([models.ContextPair(positive=V, negative=[0.0] * DIM),
                                   models.ContextPair(positive=DOC, negative=V)]))),
    "context": lambda: models.ContextQuery.model_construct(context=_Hiding([
        models.ContextPair(positive=V, negative=[0.0] * DIM), models.ContextPair(positive=V, negative=DOC)])),
    "relevance feedback": lambda: models.RelevanceFeedbackQuery(relevance_feedback=models.RelevanceFeedbackInput(
        target=V, feedback=[], strategy=models.NaiveFeedbackStrategy(naive=models.NaiveFeedbackStrategyParams(
            a=1.0, b=1.0, c=1.0)))).model_copy(update={"relevance_feedback": models.RelevanceFeedbackInput.model_construct(
                target=V, strategy=models.NaiveFeedbackStrategy(naive=models.NaiveFeedbackStrategyParams(a=1.0, b=1.0, c=1.0)),
                feedback=_Hiding([models.FeedbackItem(example=V, score=1.0), models.FeedbackItem(example=DOC, score=0.5)]))}),
}
CALLS = {
    "query_points": lambda c, q: c.query_points("c", query=q, limit=3),
    "query_points_groups": lambda c, q: c.query_points_groups("c", query=q, group_by="source", limit=3),
    "query_batch_points": lambda c, q: c.query_batch_points("c", [models.QueryRequest(query=V, limit=1),
                                                                models.QueryRequest(query=q, limit=3)]),
}


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("form", list(HIDDEN_TEXT))
def test_a_document_hidden_in_a_query_list_is_refused(kit, monkeypatch, form, call):
    # A Document anywhere but the top level would be embedded without the guard's checks and is
    # refused; old code iterated the list, did not see it, and sent it (REST body: the SSN).
    _, bob = _pii(kit)
    q = HIDDEN_TEXT[form]()
    assert "123-45-6789" in _rest(q)
    sent = record_sent(monkeypatch, ("query_points", "query_points_groups", "query_batch_points"))
    with pytest.raises(GuardRefusal) as ei:
        CALLS[call](bob, q)
    assert ei.value.verdict == "QUERY_REJECTED" and "would be embedded or matched without the guard's checks" in str(ei.value)
    assert sent == []


def test_a_raw_vector_hidden_behind_a_point_id_still_needs_its_text(kit):
    # query.require_text: a raw vector needs query_text=; old code saw only the id.
    _, bob = _pii(kit, query={"require_text": True})
    q = models.RecommendQuery(recommend=models.RecommendInput.model_construct(positive=_Hiding([1, V])))
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("c", query=q, limit=3)
    assert ei.value.verdict == "TEXT_REQUIRED"


# -- query noise (noise_queries) -------------------------------------------------------------------

_NOISED = {"class": "PII", "owner": "hr", "readers": ["support"], "noise_queries": True,
           "diversity": {"enabled": False}, "intent": {"enabled": False}}


def test_a_point_id_shown_only_to_the_noise_walk_is_refused_while_raw_vectors_remain(kit, monkeypatch):
    # The query checks walk the query twice (what is in it, then noise): old code saw no id the
    # first time, so did not ask whether raw vectors remain, and let the id through the second:
    # Qdrant searched with point 1's raw stored vector against the raw others (exact cosines).
    alice = QdrantClient(":memory:", guard=kit.config({"c": _NOISED}), principal=kit.principal("alice", "hr"))
    create(alice, "c")
    rng = np.random.default_rng(3)
    RawClient.upsert(alice, "c", [models.PointStruct(id=i, vector=unit(rng)) for i in (1, 2, 3)])  # around the guard
    bob = alice.with_principal(kit.principal("bob", "support"))
    sent = record_sent(monkeypatch, ("query_points",))
    q = models.RecommendQuery(recommend=models.RecommendInput.model_construct(positive=_Later([V, 1])))
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("c", query=q, limit=3)
    assert ei.value.verdict == "QUERY_REJECTED" and "is a point id" in str(ei.value)
    assert sent == []


class _NoMmr(models.NearestQuery):
    """A NearestQuery whose ``mmr`` attribute reads None; pydantic sends the field it holds."""

    def __getattribute__(self, name):
        return None if name == "mmr" else super().__getattribute__(name)


def test_mmr_hidden_behind_an_attribute_is_refused(kit):
    # MMR compares stored raw vectors with one another, which query noise never reaches: refused
    # for bob. Old code read q.mmr (None) and sent the subclass, whose REST body holds the mmr.
    alice = QdrantClient(":memory:", guard=kit.config({"c": {**_NOISED, "raw_in_boundary": True}}),
                         principal=kit.principal("alice", "hr"))
    create(alice, "c")
    rng = np.random.default_rng(4)
    alice.upsert("c", [models.PointStruct(id=i, vector=unit(rng)) for i in (1, 2, 3)])
    bob = alice.with_principal(kit.principal("bob", "support"))
    q = _NoMmr(nearest=V, mmr=models.Mmr(diversity=0.5, candidates_limit=3))
    assert q.mmr is None and '"mmr"' in _rest(q)
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("c", query=q, limit=3)
    assert ei.value.verdict == "QUERY_REJECTED" and "maximal marginal relevance" in str(ei.value)


# -- fail closed, and the fast path -----------------------------------------------------------------

@pytest.mark.parametrize("query", [
    models.NearestQuery.model_construct(nearest=[0.5, "x"]),
    _Hiding(["a", "b"]),
    np.array(["a", "b"], dtype=object),
])
def test_a_query_that_does_not_validate_is_refused_and_audited(kit, monkeypatch, query):
    _, bob = _pii(kit)
    sent = record_sent(monkeypatch, ("query_points",))
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("c", query=query, limit=3)
    assert ei.value.verdict == "QUERY_REJECTED" and "query is a" in str(ei.value)
    assert sent == [] and audit_records(kit)[-1]["verdict"] == "QUERY_REJECTED"


ORDINARY = [
    V, np.asarray(V), np.asarray([V, V], dtype=np.float32), 7, "5c56c793-69f3-4fbf-87e6-c4bf54c28c26", [V, V], [],
    models.NearestQuery(nearest=V), models.NearestQuery(nearest=V, mmr=models.Mmr(diversity=0.5)),
    models.RecommendQuery(recommend=models.RecommendInput(positive=[V, 1], negative=[[0.0] * DIM])),
    models.DiscoverQuery(discover=models.DiscoverInput(target=1, context=[models.ContextPair(positive=2, negative=V)])),
    models.ContextQuery(context=[models.ContextPair(positive=2, negative=V)]),
    models.FusionQuery(fusion=models.Fusion.RRF), models.SampleQuery(sample=models.Sample.RANDOM),
    models.OrderByQuery(order_by="x"), models.RrfQuery(rrf=models.Rrf(k=2)),
    models.Document(text="hello", model="m"), models.SparseVector(indices=[1, 4], values=[0.5, 0.25]),
]


# (A FormulaQuery's defaults is a dict, never taken as plain: rebuilt, equal; see
# test_model_construct_filters.py.)
@pytest.mark.parametrize("query", ORDINARY, ids=lambda q: type(q).__name__)
def test_an_ordinary_query_is_passed_as_it_is(query):
    # The fast path: nothing to rebuild, so the very object is checked and sent (no copy, no cost).
    assert sent_models("query_points", {"query": query})["query"] is query
    req = models.QueryRequest(query=query) if not isinstance(query, np.ndarray) else models.QueryRequest(query=V)
    assert sent_models("query_batch_points", {"requests": [req]})["requests"][0] is req


def test_each_batch_request_query_is_rebuilt_and_a_request_subclass_whole():
    # A batch request's query is rebuilt like the top-level one; a QueryRequest subclass whole.
    class Req(models.QueryRequest):
        pass

    got = sent_models("query_batch_points", {"requests": [
        models.QueryRequest.model_construct(query=_SameLength0(V)), Req(query=V, limit=2)]})["requests"]
    assert type(got[0].query) is list and got[0].query == V
    assert type(got[1]) is models.QueryRequest and got[1].limit == 2 and got[1].query == V


class _SaysDeclared(models.Document):
    """A Document whose ``model`` attribute reads the declared model; pydantic sends the one it holds."""

    def __getattribute__(self, name):
        if name == "model":
            from test_utility_model_reads import MODEL_A
            return MODEL_A
        return super().__getattribute__(name)


def test_a_document_cannot_show_the_model_check_another_model(tmp_path, monkeypatch):
    # Under a declared utility.embedding_model a Document naming another model is refused before
    # inference; old code read the subclass's attribute and sent MODEL_B to qdrant-client.
    from qdrant_guard import ConfigError
    from test_utility_model_inference import _setup
    from test_utility_model_reads import MODEL_B

    bob = _setup(tmp_path)
    doc = _SaysDeclared(text="the quarterly plan", model=MODEL_B)
    assert MODEL_B in _rest(doc)
    sent = record_sent(monkeypatch, ("query_points",))
    with pytest.raises(ConfigError) as ei:
        bob.query_points("pii", query=doc, limit=3)
    assert f"naming model {MODEL_B!r}" in str(ei.value) and sent == []


def test_the_async_client_rebuilds_the_query_too(kit):
    # One pipeline for both facades.
    import asyncio

    from qdrant_guard import AsyncQdrantClient

    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False}}

    async def main():
        alice = AsyncQdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
        await alice.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        bob = alice.with_principal(kit.principal("bob", "support"))
        with pytest.raises(GuardRefusal) as ei:
            await bob.query_points("c", query=HIDDEN_TEXT["recommend"](), limit=3)
        assert ei.value.verdict == "QUERY_REJECTED"
        with pytest.raises(GuardRefusal) as ei:
            await bob.query_points("c", query=_Hiding(["a"]), limit=3)
        return str(ei.value)

    message = asyncio.run(main())
    assert "query is a _Hiding, which does not validate as a query" in message and "plain list of floats" in message
