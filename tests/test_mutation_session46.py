"""Mutation pass 26: tests that kill the mutants of pubquery.py, decision.py, vectors.py and
replay.py that the earlier tests let survive (docs/security-testing.md, "Mutation pass 26"). Each
names the mutant it kills.

Real local-mode Qdrant, real keys and policies (guardkit), real audit files; no mocks.
"""
from __future__ import annotations

import numpy as np
import pytest
from guardkit import DIM, create, make_kit, models, record_sent, unit

from qdrant_guard import GuardRefusal, QdrantClient, QdrantGuardError

AWS = "AKIAJ2QW7XRT5LNPV3YB"


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _doc(text):
    return models.Document(text=text, model="sentence-transformers/all-MiniLM-L6-v2")


def _public(kit, **pub):
    cl = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC", **pub}}),
                      principal=kit.principal("alice", "hr"))
    create(cl, "pub")
    rng = np.random.default_rng(5)
    cl.upsert("pub", [models.PointStruct(id=i, vector=unit(rng), payload={"g": i % 2}) for i in (1, 2, 3)])
    return cl


def _sent_query(monkeypatch, call):
    """The query_points kwargs that reached qdrant-client (a call it fails itself, as a Document
    query does here without fastembed, still records them)."""
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    try:
        call()
    except QdrantGuardError:
        raise
    except Exception:  # noqa: BLE001, S110 - qdrant-client's own failure, after the call was recorded
        pass
    assert [name for name, _ in sent] == ["query_points"]
    return sent[0][1]


# -- pubquery.py: the walk over a PUBLIC query's inputs leaves everything but a credential as given

_NO_INPUTS = {
    # 26 (`if t in _LEAVES: return None`): the point id 1 in a list was sent as None;
    # 39 (a float vector returned as None), 40 (an unchanged list as None), 34 (`not items and
    # ...`: an empty list raised IndexError in the guard).
    "recommend": lambda: dict(
        prefetch=[models.Prefetch(query=[0.1] * DIM, limit=3),
                  models.Prefetch(query=models.RecommendQuery(recommend=models.RecommendInput(
                      positive=[1], negative=[[0.2] * DIM])), limit=3),
                  models.Prefetch(query=models.RecommendQuery(recommend=models.RecommendInput(
                      positive=[2], negative=[])), limit=3)],
        query=models.RecommendQuery(recommend=models.RecommendInput(positive=[1, 3]))),
    # 47 (the last `return value`): the Fusion enum, neither leaf, model, list nor dict, went as None.
    "fusion": lambda: dict(prefetch=models.Prefetch(query=[0.1] * DIM, limit=3),
                           query=models.FusionQuery(fusion=models.Fusion.RRF)),
    # 44 (an unchanged dict returned as None): the formula's defaults went as None.
    "formula": lambda: dict(prefetch=models.Prefetch(query=[0.1] * DIM, limit=3),
                            query=models.FormulaQuery(formula=models.SumExpression(sum=["$score", "x"]),
                                                      defaults={"x": 1.5})),
}


@pytest.mark.parametrize("case", sorted(_NO_INPUTS))
def test_a_public_query_without_a_credential_reaches_qdrant_client_as_given(kit, monkeypatch, case):
    cl = _public(kit)
    given = _NO_INPUTS[case]()
    sent = _sent_query(monkeypatch, lambda: cl.query_points("pub", limit=3, **given))
    assert {k: sent[k] for k in given} == given


def test_a_credential_in_a_list_of_a_public_query_is_redacted_where_it_is(kit, monkeypatch):
    # 41/42 (`not all(a is b ...)`, `a is not b`): a list whose Document was redacted was sent as
    # the original list, the credential with it.
    cl = _public(kit, credentials_in_text="redact", allow_redaction_on_public=True)
    query = models.RecommendQuery(recommend=models.RecommendInput(positive=[_doc(f"why does {AWS} fail")]))
    sent = _sent_query(monkeypatch, lambda: cl.query_points(
        "pub", prefetch=models.Prefetch(query=[0.1] * DIM, limit=3), query=query, limit=3))
    text = sent["query"].recommend.positive[0].text
    assert AWS not in text and text.startswith("why does ") and text.endswith(" fail")
    assert AWS in query.recommend.positive[0].text  # the caller's object is not changed


def test_a_public_document_credential_refusal_says_it_is_never_sent_to_inference(kit):
    # 15 (`inference=True -> False`): the refusal said credentials are never "stored".
    cl = _public(kit)
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("pub", query=_doc(f"why does {AWS} fail"), limit=3)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert "credentials are never sent to inference" in ei.value.directive
