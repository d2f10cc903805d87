"""Review 40: the read path, adversarially. Each test reproduces a finding on real local-mode
Qdrant with real policies and credentials, and fails on the code before its fix."""
from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import QdrantClient as Raw

from tests.guardkit import hr_shared, make_kit, models, snapshot, unit


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


class _FalsyNames(list):
    """Vector names that say False to bool() (a list subclass; qdrant-client sends its items)."""

    def __bool__(self) -> bool:
        return False


_FALSY_SELECTORS = [pytest.param(lambda: np.array([""]), id="ndarray"),
                    pytest.param(lambda: _FalsyNames([""]), id="falsy-list")]


def _reads(bob, q, wv):
    return {
        "query_points": lambda: bob.query_points("hr", query=q, with_vectors=wv, limit=5).points,
        "scroll": lambda: bob.scroll("hr", with_vectors=wv)[0],
        "retrieve": lambda: bob.retrieve("hr", [1, 2], with_vectors=wv),
        "query_points_groups": lambda: [h for g in bob.query_points_groups(
            "hr", query=q, group_by="source", with_vectors=wv).groups for h in g.hits],
        "query_batch_points": lambda: bob.query_batch_points(
            "hr", [models.QueryRequest.model_construct(query=q, with_vector=wv, limit=5)])[0].points,
    }


@pytest.mark.parametrize("selector", _FALSY_SELECTORS)
@pytest.mark.parametrize("method", ["query_points", "scroll", "retrieve", "query_points_groups", "query_batch_points"])
def test_a_falsy_vector_selector_does_not_release_raw_vectors(kit, selector, method):
    # with_vectors=np.array([""]) is falsy in Python but names the unnamed vector; local mode tests
    # `is False` and a client sends the list's items. The guard read bool(with_vectors), skipped
    # vector release, and bob got a raw vector stored around the guard (old code).
    owner = hr_shared(kit, "hr", {"enabled": False})
    rng = np.random.default_rng(0)
    Raw.upsert(owner, "hr", [models.PointStruct(id=1, vector=unit(rng), payload={"source": "s"})])  # no receipt
    owner.upsert("hr", [models.PointStruct(id=2, vector=unit(rng), payload={"source": "s"})])  # noised
    stored = {pid: vec for pid, _, vec in snapshot(owner, "hr")}
    bob = owner.with_principal(kit.principal("bob", "support"))
    points = {p.id: p for p in _reads(bob, unit(rng), selector())[method]()}
    assert set(points) == {1, 2}
    assert points[1].vector in (None, {})  # the raw one: stripped
    kept = points[2].vector
    kept = kept[""] if isinstance(kept, dict) else kept
    assert np.allclose(kept, stored[2])  # the receipted one: released


@pytest.mark.parametrize("selector", _FALSY_SELECTORS)
def test_a_falsy_vector_selector_is_charged_to_the_vector_budget(kit, selector):
    # The distillation budget of a PROPRIETARY collection was skipped the same way: bob read every
    # stored vector past max_vectors = 2 (old code: 6).
    from tests.guardkit import QdrantClient, create

    pol = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
           "diversity": {"max_vectors": 2, "max_source_fraction": 1.0, "min_unique_sources": 1}}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(1)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i}"}) for i in range(6)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    got = bob.scroll("hr", limit=10, with_vectors=selector())[0]
    assert len(got) == 6
    assert sum(p.vector not in (None, {}) for p in got) == 2


def _kept_text(kit):
    """alice@hr's client on ``hr`` (keep_payload_text_in_boundary) holding a card number stored as a
    JSON number around the guard, which reads redact for other boundaries, and bob@support's view."""
    from tests.guardkit import QdrantClient, create

    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "intent": {"enabled": False},
           "raw_in_boundary": True, "text_field": "text", "keep_payload_text_in_boundary": True,
           "diversity": {"enabled": False}}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(0)
    Raw.upsert(owner, "hr", [models.PointStruct(id=1, vector=unit(rng), payload={"text": 4111111111111111, "n": 5})])
    return owner, owner.with_principal(kit.principal("bob", "support"))


CARD = 4111111111111111
_TEXT_READERS = {
    "scroll_order_by": lambda c: [p.order_value for p in c.scroll("hr", order_by="text")[0]],
    "scroll_order_by_model": lambda c: [p.order_value for p in c.scroll("hr", order_by=models.OrderBy(key="text"))[0]],
    "order_by_query": lambda c: [p.order_value for p in c.query_points("hr", query=models.OrderByQuery(order_by="text")).points],
    "order_by_prefetch": lambda c: [p.id for p in c.query_points(
        "hr", prefetch=[models.Prefetch(query=models.OrderByQuery(order_by="text"), limit=5),
                        models.Prefetch(query=[1.0] * 16, limit=5)],
        query=models.FusionQuery(fusion=models.Fusion.RRF)).points],
    "range_scroll": lambda c: [p.id for p in c.scroll("hr", scroll_filter=models.Filter(must=[models.FieldCondition(
        key="text", range=models.Range(gte=CARD - 1, lte=CARD + 1))]))[0]],
    "range_count": lambda c: [c.count("hr", count_filter=models.Filter(must=[models.FieldCondition(
        key="text", range=models.Range(gte=CARD - 1, lte=CARD + 1))])).count],
    "formula": lambda c: [int(p.score) for p in c.query_points(
        "hr", prefetch=models.Prefetch(query=[1.0] * 16, limit=5),
        query=models.FormulaQuery(formula=models.SumExpression(sum=["text"]))).points],
    "write_range": lambda c: [c.set_payload("hr", {"tag": "x"}, points=models.Filter(must=[models.FieldCondition(
        key="text", range=models.Range(gte=CARD - 1, lte=CARD + 1))]))],
}


@pytest.mark.parametrize("how", sorted(_TEXT_READERS))
def test_the_kept_text_field_is_not_read_back_by_order_range_or_formula(kit, how):
    # Reads give bob the text field redacted ("[CREDIT_CARD]") and refuse a match on it, but a scroll
    # ordered by it returned order_value 4111111111111111, a range filter binary-searched it and a
    # formula scored it (old code: each returned the number, or the point it brackets).
    from qdrant_guard.errors import GuardRefusal

    owner, bob = _kept_text(kit)
    assert bob.scroll("hr")[0][0].payload["text"] == "[CREDIT_CARD]"
    with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
        _TEXT_READERS[how](bob)
    if how != "write_range":
        got = _TEXT_READERS[how](owner)  # the owner boundary still may (a formula scores in float32)
        assert got and all(v == 1 or abs(v - CARD) < 1e9 for v in got)


def test_other_fields_and_presence_tests_on_the_kept_text_field_still_pass(kit):
    owner, bob = _kept_text(kit)
    assert [p.order_value for p in bob.scroll("hr", order_by="n")[0]] == [5]
    empty = models.Filter(must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key="text"))])
    assert bob.count("hr", count_filter=empty).count == 1
    assert [g.id for g in bob.query_points_groups("hr", query=[1.0] * 16, group_by="text").groups] == ["[CREDIT_CARD]"]


@pytest.mark.parametrize("noise_queries", [False, True])
def test_scores_rebuild_proprietary_vectors_the_vector_budget_does_not_count(kit, noise_queries):
    # The default, as documented (docs/threat-model.md, "What the budget cannot see"): max_vectors
    # counts vectors returned, not scores. 16 basis-vector queries rebuild all 6 stored vectors
    # exactly; noise_queries noises them. diversity.charge_scores = true charges scores too
    # (tests/test_score_charge.py); this pins that it stays off unless set.
    from tests.guardkit import QdrantClient, create

    pol = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
           "noise_queries": noise_queries,
           "diversity": {"max_vectors": 2, "max_source_fraction": 1.0, "min_unique_sources": 1}}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(1)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i}"}) for i in range(6)])
    stored = {pid: np.asarray(v) / np.linalg.norm(v) for pid, _, v in snapshot(owner, "hr")}
    bob = owner.with_principal(kit.principal("bob", "support"))
    rebuilt = {i: np.zeros(16) for i in range(6)}
    for d in range(16):
        for p in bob.query_points("hr", query=np.eye(16)[d].tolist(), limit=6).points:
            rebuilt[p.id][d] = p.score
    error = max(np.abs(rebuilt[i] - stored[i]).max() for i in range(6))
    assert (error > 0.01) if noise_queries else (error < 1e-6)
    assert sum(p.vector is not None for p in bob.scroll("hr", with_vectors=True)[0]) == 2


class _HidingList(list):
    """A list whose iteration shows only its first item; pydantic serialises every item."""

    def __iter__(self):
        return iter(list.__getitem__(self, slice(0, 1)))


@pytest.mark.parametrize("method", ["count", "facet", "search_matrix_pairs"])
def test_a_filter_hiding_a_condition_from_iteration_is_refused_by_the_budget_oracle(kit, method):
    # On a budgeted collection bob's count/facet/search_matrix filters may only name sources. A
    # model_construct()ed filter whose must list iterates as [source condition] passed that check,
    # while qdrant-client sends every item: a server counted the salary range too (old code: allowed).
    from qdrant_guard.errors import GuardRefusal
    from tests.guardkit import PAYROLL_DIVERSITY

    owner = hr_shared(kit, "hr", PAYROLL_DIVERSITY)
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll", "salary": i})
                        for i in range(10)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    named = models.FieldCondition(key="source", match=models.MatchValue(value="payroll"))
    salary = models.FieldCondition(key="salary", range=models.Range(gte=5))
    hidden = models.Filter.model_construct(must=_HidingList([named, salary]))
    assert '"salary"' in models.CountRequest(filter=hidden).model_dump_json()  # what a server is sent
    key = {"count": "count_filter", "facet": "facet_filter"}.get(method, "query_filter")
    extra = {"key": "source"} if method == "facet" else {}
    with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
        getattr(bob, method)("hr", **{key: hidden}, **extra)
    plain = models.Filter(must=[named], should=[models.Filter(must=[named])],
                          min_should=models.MinShould(conditions=[named], min_count=1))
    if method == "count":
        assert bob.count("hr", count_filter=plain).count == 10
        assert bob.count("hr", count_filter=models.Filter.model_construct(must=_HidingList([named]))).count == 10
    else:
        getattr(bob, method)("hr", **{key: plain}, **extra)  # a filter naming only sources still passes
