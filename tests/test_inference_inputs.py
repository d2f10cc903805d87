"""What inference reads of a Document, Image or InferenceObject besides a Document's text.

qdrant-client 1.20 hands these to an inference backend (Qdrant Cloud inference, fastembed in local
mode) whole: a Document's ``options`` (a prompt or prefix option), an InferenceObject's ``object``
keys and ``options``, an Image's ``options`` and its path or URL. The guard screened a Document's
text and an InferenceObject's string values only, so a credential in any of the rest reached the
transport of a PUBLIC write and of a sensitive collection's query; a query Image on a sensitive
collection passed none of the guard's text checks.

Real qdrant-client local mode; what reaches it is recorded (it has no fastembed here, so what is
sent then fails inside qdrant-client, after the guard let it through).
"""
from __future__ import annotations

import asyncio

import pytest
from guardkit import DIM, audit_records, create, make_kit, models, record_sent

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient, QdrantGuardError
from qdrant_guard.errors import UnsupportedWriteError

SECRET = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
WRITES = ("upsert", "upload_points", "update_vectors", "batch_update_points", "upload_collection")
QUERIES = ("query_points", "query_batch_points", "query_points_groups")


def _doc(**kw):
    return models.Document(text="a plain sentence", model="m", **kw)


def _client(kit, pub=None, pii=None, **kw):
    pub_pol = {"class": "PUBLIC", "text_field": "text", **(pub or {})}
    pii_pol = {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text",
               "intent": {"enabled": False}, **(pii or {})}
    cl = QdrantClient(":memory:", guard=kit.config({"pub": pub_pol, "pii": pii_pol}),
                      principal=kit.principal("alice", "hr"), **kw)
    create(cl, "pub")
    create(cl, "pii")
    return cl


def _sent(sent):
    return repr([kw for _, kw in sent])


def _let_through(call):
    """Run ``call``, which the guard must let through: it then fails inside qdrant-client (no
    inference backend here) or succeeds; a guard error is a failure of the test."""
    try:
        call()
    except QdrantGuardError:
        raise
    except Exception:  # noqa: BLE001 - qdrant-client's own (ImportError: no fastembed)
        pass


def _write(cl, method, vector, name="pub"):
    if method == "upsert":
        return cl.upsert(name, [models.PointStruct(id=1, vector=vector)])
    if method == "upload_points":
        return cl.upload_points(name, [models.PointStruct(id=1, vector=vector)])
    if method == "update_vectors":
        return cl.update_vectors(name, [models.PointVectors(id=1, vector=vector)])
    if method == "batch_update_points":
        return cl.batch_update_points(name, [models.UpsertOperation(upsert=models.PointsList(
            points=[models.PointStruct(id=1, vector=vector)]))])
    return cl.upload_collection(name, vectors=[vector], ids=[1])


# -- PUBLIC writes: every write path ---------------------------------------------------------------

@pytest.mark.parametrize("method", WRITES)
@pytest.mark.parametrize("vector", [
    _doc(options={"prompt": f"passage: {SECRET}"}),
    _doc(options={"p": [{"x": SECRET}]}),
    _doc(options={SECRET: 1}),
    models.InferenceObject(object={SECRET: "x"}, model="m"),
    models.InferenceObject(object={"api_key": "a8f3k2j9x0q7w1e5r4t6"}, model="m"),
    models.InferenceObject(object="plain", model="m", options={"prompt": SECRET}),
    models.Image(image="https://example.org/a.png", model="m", options={"prompt": SECRET}),
    models.Image(image=f"https://example.org/a.png?token={SECRET}", model="m"),
], ids=["doc-options", "doc-options-nested", "doc-options-key", "object-key", "object-named-secret",
        "object-options", "image-options", "image-url"])
def test_public_write_refuses_a_credential_anywhere_inference_reads(tmp_path, monkeypatch, method, vector):
    kit = make_kit(tmp_path)
    cl = _client(kit)
    sent = record_sent(monkeypatch, WRITES, with_kwargs=True)
    with pytest.raises(GuardRefusal) as ei:
        _write(cl, method, vector)
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert sent == [] and SECRET not in str(ei.value)
    entry = audit_records(kit)[-1]
    assert entry["verdict"] == "SENSITIVITY_MISMATCH" and SECRET not in repr(entry)


def test_public_named_vectors_name_the_vector_and_the_option(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    cl = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}), principal=kit.principal("a", "hr"))
    create(cl, "pub", named=("a", "b"))
    sent = record_sent(monkeypatch, ("upsert",))
    with pytest.raises(GuardRefusal) as ei:
        cl.upsert("pub", [models.PointStruct(id=7, vector={"a": [0.1] * DIM, "b": _doc(options={"prefix": SECRET})})])
    assert "point 7 vector 'b' (Document) options field 'prefix'" in str(ei.value)
    assert sent == []


def test_public_provider_key_option_passes_and_a_prompt_option_does_not(tmp_path, monkeypatch):
    # Qdrant Cloud inference takes an external provider's key as options={"openai-api-key": ...}:
    # it authenticates the call and is neither embedded nor stored. Any other option is screened.
    kit = make_kit(tmp_path)
    cl = _client(kit)
    sent = record_sent(monkeypatch, ("upsert",), with_kwargs=True)
    _let_through(lambda: _write(cl, "upsert", _doc(options={"openai-api-key": SECRET, "dimensions": DIM})))
    assert SECRET in _sent(sent)
    sent.clear()
    with pytest.raises(GuardRefusal):
        _write(cl, "upsert", _doc(options={"openai-api-key": SECRET, "instruction": SECRET}))
    with pytest.raises(GuardRefusal):  # only a provider's key, and only as a string
        _write(cl, "upsert", _doc(options={"openai-api-key": {"k": SECRET}}))
    assert sent == []


def test_public_bm25_options_are_read_as_sent(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    cl = _client(kit)
    sent = record_sent(monkeypatch, ("upsert",))
    opts = models.Bm25Config(stopwords=models.StopwordsSet(custom=["the", SECRET]))
    with pytest.raises(GuardRefusal, match=r"stopwords\.custom\[1\]"):
        _write(cl, "upsert", _doc(options=opts))
    assert sent == []


def test_public_redaction_redacts_options_and_object_keys_in_what_is_sent(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    cl = _client(kit, pub={"allow_redaction_on_public": True})
    sent = record_sent(monkeypatch, ("upsert",), with_kwargs=True)
    _let_through(lambda: _write(cl, "upsert", _doc(options={"prompt": "ask bob@example.com"})))
    _let_through(lambda: _write(cl, "upsert", models.InferenceObject(object={"bob@example.com": "x"}, model="m")))
    shown = _sent(sent)
    assert "bob@example.com" not in shown and shown.count("[EMAIL]") == 2


def test_public_image_locator_is_refused_even_where_redaction_is_allowed(tmp_path, monkeypatch):
    # A redacted URL would name another image (or none): refused, never redacted. An image given
    # as data is pixels, which no detector reads.
    kit = make_kit(tmp_path)
    cl = _client(kit, pub={"allow_redaction_on_public": True, "credentials_in_text": "redact"})
    sent = record_sent(monkeypatch, ("upsert",), with_kwargs=True)
    with pytest.raises(GuardRefusal, match="locator cannot be redacted"):
        _write(cl, "upsert", models.Image(image=f"/srv/img/{SECRET}.png", model="m"))
    assert sent == []
    _let_through(lambda: _write(cl, "upsert", models.Image(image="iVBORw0KGgoAAAANSUhEUgAA" * 4, model="m")))
    assert len(sent) == 1


@pytest.mark.parametrize("where", ["options", "object"])
def test_inference_inputs_nested_past_64_levels_are_refused(tmp_path, monkeypatch, where):
    kit = make_kit(tmp_path)
    cl = _client(kit)
    deep: object = "x"
    for _ in range(70):
        deep = [deep]
    vector = (_doc(options={"a": deep}) if where == "options"
              else models.InferenceObject(object=deep, model="m"))
    sent = record_sent(monkeypatch, ("upsert",))
    with pytest.raises(UnsupportedWriteError, match="more than 64 deep"):
        _write(cl, "upsert", vector)
    assert sent == []


def test_the_async_client_screens_options_alike(tmp_path):
    kit = make_kit(tmp_path)

    async def main():
        cl = AsyncQdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}),
                               principal=kit.principal("a", "hr"))
        await cl.create_collection("pub", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        with pytest.raises(GuardRefusal) as ei:
            await cl.upsert("pub", [models.PointStruct(id=1, vector=_doc(options={"prompt": SECRET}))])
        return ei.value

    assert asyncio.run(main()).verdict == "SENSITIVITY_MISMATCH"


# -- sensitive collections: queries ----------------------------------------------------------------

def _query(cl, method, query, name="pii"):
    if method == "query_points":
        return cl.query_points(name, query=query, limit=3)
    if method == "query_points_groups":
        return cl.query_points_groups(name, query=query, group_by="g", limit=3)
    return cl.query_batch_points(name, [models.QueryRequest(query=query, limit=3)])


@pytest.mark.parametrize("method", QUERIES)
def test_sensitive_query_document_options_credential_is_refused(tmp_path, monkeypatch, method):
    # No embedder: qdrant-client's inference gets the Document, options and all.
    kit = make_kit(tmp_path)
    cl = _client(kit)
    sent = record_sent(monkeypatch, QUERIES, with_kwargs=True)
    with pytest.raises(GuardRefusal) as ei:
        _query(cl, method, _doc(options={"prompt": SECRET}))
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT" and "options field 'prompt'" in str(ei.value)
    assert sent == []


def test_sensitive_query_document_options_are_redacted_per_the_text_rules(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    cl = _client(kit, pii={"credentials_in_text": "redact"})
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    _let_through(lambda: _query(cl, "query_points", _doc(options={"prompt": f"{SECRET} for 123-45-6789"})))
    shown = _sent(sent)
    assert SECRET not in shown and "123-45-6789" not in shown and "[SSN]" in shown
    # redact_query_text = false keeps PII in query text, and in the Document's options alike.
    cl2 = _client(kit, pii={"query": {"redact_query_text": False}})
    sent.clear()
    _let_through(lambda: _query(cl2, "query_points", _doc(options={"prompt": "for 123-45-6789"})))
    assert "123-45-6789" in _sent(sent)


IMAGE = models.Image(image="https://example.org/a.png", model="m")


@pytest.mark.parametrize("form", ["query", "nearest", "recommend", "discover", "context", "prefetch", "groups",
                                  "batch"])
def test_sensitive_query_image_is_refused_unless_the_policy_allows_images(tmp_path, monkeypatch, form):
    # The guard cannot read an image: such a query passed none of its text checks.
    kit = make_kit(tmp_path)
    cl = _client(kit)
    kw = {"query": dict(query=IMAGE), "nearest": dict(query=models.NearestQuery(nearest=IMAGE)),
          "recommend": dict(query=models.RecommendQuery(recommend=models.RecommendInput(positive=[IMAGE]))),
          "discover": dict(query=models.DiscoverQuery(discover=models.DiscoverInput(
              target=[0.1] * DIM, context=[models.ContextPair(positive=IMAGE, negative=[0.2] * DIM)]))),
          "context": dict(query=models.ContextQuery(context=[models.ContextPair(positive=[0.1] * DIM, negative=IMAGE)])),
          "prefetch": dict(prefetch=[models.Prefetch(query=IMAGE)], query=models.FusionQuery(fusion="rrf")),
          "groups": "groups", "batch": None}[form]
    sent = record_sent(monkeypatch, QUERIES)

    def call(c):
        if kw is None:
            return c.query_batch_points("pii", [models.QueryRequest(query=IMAGE, limit=3)])
        if kw == "groups":
            return c.query_points_groups("pii", query=IMAGE, group_by="g", limit=3)
        return c.query_points("pii", limit=3, **kw)

    with pytest.raises(GuardRefusal, match="query.allow_images = true") as ei:
        call(cl)
    assert ei.value.verdict == "QUERY_REJECTED" and sent == []
    assert audit_records(kit)[-1]["details"]["form"] == "Image"
    _let_through(lambda: call(_client(kit, pii={"query": {"allow_images": True}})))
    assert len(sent) == 1


def test_allowed_image_queries_have_their_options_and_locator_screened(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    cl = _client(kit, pii={"query": {"allow_images": True}, "credentials_in_text": "redact"})
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    _let_through(lambda: cl.query_points("pii", query=models.Image(
        image="https://example.org/a.png", model="m", options={"prompt": SECRET}), limit=3))
    assert sent and SECRET not in _sent(sent)
    sent.clear()
    # A locator cannot be redacted: a credential in it is refused whatever credentials_in_text says.
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("pii", query=models.NearestQuery(nearest=models.Image(
            image=f"https://example.org/a.png?token={SECRET}", model="m")), limit=3)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT" and sent == []
