"""Credentials and PII in what a query on a listed PUBLIC collection sends to inference.

PUBLIC queries passed through unscreened, their Documents too, and qdrant-client's inference
(fastembed in local mode, Qdrant Cloud inference, which sends the text to the model's provider)
embedded whatever credential a question carried. Now every inference input of a query on a PUBLIC
collection the policy lists is screened for credentials before qdrant-client is called: refused
(CREDENTIAL_IN_TEXT, audited) or redacted under ``credentials_in_text = "redact"``; PII is refused
(SENSITIVITY_MISMATCH, issue 5: text with PII sent to a PUBLIC collection is refused unless the
policy allows redaction there) or redacted under ``allow_redaction_on_public``; collections
unlisted under ``unlisted = "public"`` stay pass-through.

Real qdrant-client local mode. It has no fastembed here, so a query the guard lets through fails
inside qdrant-client (its own ImportError); what reaches qdrant-client is recorded on the way in.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import DIM, RawClient, audit_records, create, make_kit, models, record_sent

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient, QdrantGuardError

AWS = "AKIAJ2QW7XRT5LNPV3YB"
STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
QUERIES = ("query_points", "query_batch_points", "query_points_groups")


def _doc(text="a plain question", **kw):
    return models.Document(text=text, model="sentence-transformers/all-MiniLM-L6-v2", **kw)


def _client(kit, pub=None, **extra):
    cl = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC", **(pub or {})}}, **extra),
                      principal=kit.principal("alice", "hr"))
    create(cl, "pub")
    return cl


def _query(cl, method, name="pub", **kw):
    if method == "query_points":
        return cl.query_points(name, limit=3, **kw)
    if method == "query_points_groups":
        return cl.query_points_groups(name, group_by="g", limit=3, **kw)
    return cl.query_batch_points(name, [models.QueryRequest(query=[0.1] * DIM, limit=3),
                                        models.QueryRequest(limit=3, **kw)])


def _let_through(call):
    """Run ``call``, which the guard must let through: it fails inside qdrant-client (no fastembed
    here) or succeeds; a guard error fails the test."""
    try:
        return call()
    except QdrantGuardError:
        raise
    except Exception as exc:  # noqa: BLE001 - qdrant-client's own
        return exc


PII = ("alice@example.com", "123-45-6789")


def _refused(kit, cl, monkeypatch, call, verdict="CREDENTIAL_IN_TEXT"):
    sent = record_sent(monkeypatch, QUERIES)
    before = len(audit_records(kit))
    with pytest.raises(GuardRefusal) as ei:
        call()
    assert sent == []  # refused before qdrant-client (and its inference) saw the query
    entries = audit_records(kit)[before:]
    assert [e["verdict"] for e in entries] == [verdict]
    assert entries[0]["collection"] == "pub" and entries[0]["op"] in QUERIES
    for secret in (AWS, STRIPE, *PII):
        assert secret not in str(entries) and secret not in str(ei.value)
    assert ei.value.verdict == verdict
    return ei.value.directive


@pytest.mark.parametrize("method", QUERIES)
def test_a_credential_in_a_document_query_is_refused_before_qdrant_client(tmp_path, monkeypatch, method):
    kit = make_kit(tmp_path)
    cl = _client(kit)
    msg = _refused(kit, cl, monkeypatch, lambda: _query(cl, method, query=_doc(f"why does {AWS} fail")))
    place = "requests[1].query" if method == "query_batch_points" else "query"
    assert msg.startswith(f"{place} (Document) text contains credentials ['AWS_ACCESS_KEY']")
    assert 'credentials_in_text = "redact" with allow_redaction_on_public = true' in msg


NESTED = [
    (lambda d: models.NearestQuery(nearest=d), "query.nearest"),
    (lambda d: models.RecommendQuery(recommend=models.RecommendInput(positive=[[0.1] * DIM, d])),
     "query.recommend.positive[1]"),
    (lambda d: models.RecommendQuery(recommend=models.RecommendInput(positive=[1], negative=[2, d])),
     "query.recommend.negative[1]"),  # after a point id: a list of ints is no vector
    (lambda d: models.DiscoverQuery(discover=models.DiscoverInput(
        target=[0.1] * DIM, context=[models.ContextPair(positive=1, negative=d)])), "query.discover.context[0].negative"),
    (lambda d: models.ContextQuery(context=[models.ContextPair(positive=d, negative=2)]), "query.context[0].positive"),
]


@pytest.mark.parametrize("build,place", NESTED)
def test_documents_nested_in_query_models_are_screened(tmp_path, monkeypatch, build, place):
    kit = make_kit(tmp_path)
    cl = _client(kit)
    msg = _refused(kit, cl, monkeypatch, lambda: cl.query_points("pub", query=build(_doc(STRIPE)), limit=3))
    assert msg.startswith(f"{place} (Document) text contains credentials ['STRIPE_KEY']")


def test_prefetches_and_batch_requests_are_screened_at_any_depth(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    cl = _client(kit)
    deep = models.Prefetch(prefetch=[models.Prefetch(query=[0.1] * DIM),
                                     models.Prefetch(query=models.NearestQuery(nearest=_doc(AWS)))])
    msg = _refused(kit, cl, monkeypatch, lambda: cl.query_points(
        "pub", query=models.FusionQuery(fusion=models.Fusion.RRF), prefetch=[models.Prefetch(query=[0.1] * DIM), deep]))
    assert msg.startswith("prefetch[1].prefetch[1].query.nearest (Document) text contains")
    msg = _refused(kit, cl, monkeypatch, lambda: cl.query_batch_points("pub", [
        models.QueryRequest(query=[0.1] * DIM), models.QueryRequest(prefetch=models.Prefetch(query=_doc(AWS)))]))
    assert msg.startswith("requests[1].prefetch.query (Document) text contains")


def test_options_object_and_locators_are_screened_but_a_provider_key_passes(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    cl = _client(kit)
    msg = _refused(kit, cl, monkeypatch, lambda: cl.query_points("pub", query=_doc(options={"prompt": STRIPE}), limit=3))
    assert msg.startswith("query (Document) options field 'prompt' contains credentials ['STRIPE_KEY']")
    obj = models.InferenceObject(object={"question": f"use {AWS}"}, model="m")
    msg = _refused(kit, cl, monkeypatch, lambda: cl.query_points("pub", query=obj, limit=3))
    assert "query (InferenceObject)" in msg
    img = models.Image(image=f"https://x.example/a.png?key={AWS}", model="m")
    msg = _refused(kit, cl, monkeypatch, lambda: cl.query_points(
        "pub", query=models.RecommendQuery(recommend=models.RecommendInput(positive=[img])), limit=3))
    assert msg.startswith("query.recommend.positive[0] is a models.Image whose path or URL")
    # The provider's key authenticates Qdrant Cloud inference's call and is never embedded.
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    doc = _doc(options={"openai-api-key": STRIPE})
    _let_through(lambda: cl.query_points("pub", query=doc, limit=3))
    assert sent[0][1]["query"] == doc
    # PII in a locator is refused too: inference would fetch it as given (it cannot be redacted).
    img = models.Image(image="https://x.example/123-45-6789.png", model="m")
    msg = _refused(kit, cl, monkeypatch, lambda: cl.query_points("pub", query=img, limit=3), "SENSITIVITY_MISMATCH")
    assert msg.startswith("query is a models.Image whose path or URL") and "['SSN']" in msg


def test_pii_and_credentials_are_redacted_under_redact(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    cl = _client(kit, {"allow_redaction_on_public": True, "credentials_in_text": "redact"})
    sent = record_sent(monkeypatch, ("query_points", "query_batch_points"), with_kwargs=True)
    text = f"mail alice@example.com: why does {AWS} fail for 123-45-6789"
    _let_through(lambda: cl.query_points("pub", query=models.NearestQuery(nearest=_doc(text, options={
        "prompt": f"{STRIPE} alice@example.com"})), limit=3))
    nearest = sent[-1][1]["query"].nearest
    assert nearest.text == "mail [EMAIL]: why does [AWS_ACCESS_KEY] fail for [SSN]"
    assert nearest.options == {"prompt": "[STRIPE_KEY] [EMAIL]"}
    _let_through(lambda: cl.query_batch_points("pub", [models.QueryRequest(query=_doc(AWS))]))
    assert sent[-1][1]["requests"][0].query.text == "[AWS_ACCESS_KEY]"
    # PII alone is sent redacted under allow_redaction_on_public, and as given under redact_pii = false.
    _let_through(lambda: cl.query_points("pub", query=_doc("mail alice@example.com about 123-45-6789"), limit=3))
    assert sent[-1][1]["query"].text == "mail [EMAIL] about [SSN]"
    (tmp_path / "k").mkdir()
    keep = _client(make_kit(tmp_path / "k"), {"allow_redaction_on_public": True, "redact_pii": False})
    _let_through(lambda: keep.query_points("pub", query=_doc("mail alice@example.com"), limit=3))
    assert sent[-1][1]["query"].text == "mail alice@example.com"


@pytest.mark.parametrize("method", QUERIES)
def test_pii_in_a_public_query_is_refused_without_allow_redaction_on_public(tmp_path, monkeypatch, method):
    # Issue 5: text with PII sent to a PUBLIC collection is refused unless the policy allows
    # redaction there; a query's Document text goes to inference (a remote provider under Qdrant
    # Cloud inference) as given.
    kit = make_kit(tmp_path)
    cl = _client(kit)
    for query in (_doc("why was 123-45-6789 rejected"),
                  models.NearestQuery(nearest=_doc("mail alice@example.com")),
                  _doc(options={"prompt": "alice@example.com"})):
        msg = _refused(kit, cl, monkeypatch, lambda: _query(cl, method, query=query), "SENSITIVITY_MISMATCH")
        assert "PUBLIC collection 'pub'" in msg and "allow_redaction_on_public = true" in msg
    # A question naming a person carries no finding of the detector and passes.
    sent = record_sent(monkeypatch, QUERIES, with_kwargs=True)
    _let_through(lambda: _query(cl, method, query=_doc("what did Alice Smith write about tides")))
    assert sent


def test_unlisted_public_collections_pass_through_and_listed_ones_do_not(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    cl = _client(kit, unlisted="public")
    create(cl, "elsewhere")
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    doc = _doc(f"why does {AWS} fail")
    _let_through(lambda: cl.query_points("elsewhere", query=doc, limit=3))
    assert sent[-1][1]["query"] is doc
    with pytest.raises(GuardRefusal):
        cl.query_points("pub", query=doc, limit=3)


def test_only_a_credential_changes_what_a_public_query_does(tmp_path):
    kit = make_kit(tmp_path)
    cl = _client(kit)
    raw = RawClient(":memory:")
    create(raw, "pub")
    rng = np.random.default_rng(7)
    pts = [models.PointStruct(id=i, vector=rng.normal(size=DIM).tolist(), payload={"g": i % 2}) for i in range(8)]
    cl.upsert("pub", pts)
    raw.upsert("pub", pts)
    q = rng.normal(size=DIM).tolist()
    assert cl.query_points("pub", query=q, limit=3) == raw.query_points("pub", query=q, limit=3)
    assert cl.query_points("pub", query=3, limit=3) == raw.query_points("pub", query=3, limit=3)
    for query in (_doc(), _doc(options={"prompt": "query: "}), models.NearestQuery(nearest=_doc("mail Bob"))):
        ours, theirs = _let_through(lambda: cl.query_points("pub", query=query, limit=3)), None
        try:
            raw.query_points("pub", query=query, limit=3)
        except Exception as exc:  # noqa: BLE001 - qdrant-client's own, as the guarded call's
            theirs = exc
        assert type(ours) is type(theirs) and str(ours) == str(theirs)
    for text in (f"why does {AWS} fail", "mail bob@example.com"):
        with pytest.raises(GuardRefusal):
            cl.query_points("pub", query=_doc(text), limit=3)


def test_the_async_client_refuses_alike(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)

    async def main():
        cl = AsyncQdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}),
                               principal=kit.principal("a", "hr"))
        await cl.create_collection("pub", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        with pytest.raises(GuardRefusal) as ei:
            await cl.query_batch_points("pub", [models.QueryRequest(query=[0.1] * DIM),
                                                models.QueryRequest(query=_doc(AWS))])
        return ei.value

    err = asyncio.run(main())
    assert err.verdict == "CREDENTIAL_IN_TEXT" and err.directive.startswith("requests[1].query (Document) text")
    assert audit_records(kit)[-1]["verdict"] == "CREDENTIAL_IN_TEXT"


def test_a_public_query_refuses_any_finding_in_model_names_and_locators(tmp_path, monkeypatch):
    # Neither can be redacted, so PII in either is refused whatever allow_redaction_on_public says,
    # as in a write; a credential stays CREDENTIAL_IN_TEXT.
    for allow in (False, True):
        (tmp_path / str(allow)).mkdir()
        kit = make_kit(tmp_path / str(allow))
        cl = _client(kit, {"allow_redaction_on_public": allow})
        for value in (models.Document(text="plain", model="m-alice@example.com"),
                      models.Image(image="https://x.example/123-45-6789.png", model="m")):
            msg = _refused(kit, cl, monkeypatch, lambda: cl.query_points("pub", query=value, limit=3),
                           "SENSITIVITY_MISMATCH")
            assert ("['EMAIL']" in msg or "['SSN']" in msg) and "cannot be redacted" in msg
    msg = _refused(kit, cl, monkeypatch, lambda: cl.query_points(
        "pub", query=models.Document(text="plain", model=f"m-{AWS}"), limit=3))
    assert msg.startswith("query.model is a models.Document whose model name")
    with pytest.raises(GuardRefusal) as ei:
        cl.upsert("pub", [models.PointStruct(id=1, vector=models.Document(text="plain", model="m-alice@example.com"))])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
