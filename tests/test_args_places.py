"""Arguments left sent as given by h-args, a Document's model name, and the places batch errors name.

1. ``group_size`` (an int subclass), a ``with_payload``/``order_by`` given as a dict and a ``wait``
   that is no bool were read by the guard through their own methods (``__int__``/``__ge__``; a dict
   subclass's ``items()`` or a list subclass's ``__iter__``; ``__bool__``) while qdrant-client sends
   what pydantic reads (or, for ``wait``, ``str(wait)``): the group caps, the field-name screen and
   the write's size epoch judged another value than was sent.
2. A Document's (Image's, InferenceObject's) ``model`` goes to inference as given, unscreened.
3. A ``models.Batch`` whose columns do not validate raised pydantic's error with no place; batch
   refusals named the operation's kind, not its index in ``update_operations``.

Real qdrant-client local mode (no inference backend here: what the guard lets through then fails
inside qdrant-client), real keys and policies (guardkit).
"""
from __future__ import annotations

import numpy as np
import pytest
from guardkit import DIM, audit_records, create, make_kit, models, record_sent, unit

from qdrant_guard import GuardRefusal, QdrantClient, QdrantGuardError
from qdrant_guard.errors import GuardArgumentValueError, UnsupportedWriteError

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
V = [0.25] * DIM


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


# -- 1. arguments read once, sent plain ------------------------------------------------------------

class _LooksLarge(int):
    """A group size that tells the guard's reads (``int()``, ``>= 1``) 100 and "not a count";
    pydantic (and local mode's own ``<``) read its value, 2."""

    def __int__(self):
        return 100

    def __ge__(self, other):
        return False


def _grouped(kit):
    """PROPRIETARY ``docs`` owned by hr, at most half of each group's hits from one source; groups
    ``a`` and ``b`` each hold four points of a single source."""
    pol = {"class": "PROPRIETARY", "owner": "hr", "intent": {"enabled": False},
           "diversity": {"max_source_fraction": 0.5, "min_unique_sources": 1}}
    c = QdrantClient(":memory:", guard=kit.config({"docs": pol}), principal=kit.principal("alice", "hr"))
    create(c, "docs")
    rng = np.random.default_rng(1)
    c.upsert("docs", [models.PointStruct(id=i, vector=unit(rng), payload={"g": "ab"[i % 2], "source": "s" + "ab"[i % 2]})
                      for i in range(8)])
    return c, unit(rng)


def test_group_size_caps_the_groups_by_the_value_sent(kit, monkeypatch):
    c, q = _grouped(kit)
    plain = c.query_points_groups("docs", query=q, group_by="g", limit=2, group_size=2)
    sent = record_sent(monkeypatch, ("query_points_groups",), with_kwargs=True)
    tricked = c.query_points_groups("docs", query=q, group_by="g", limit=2, group_size=_LooksLarge(2))
    # Capped as group_size=2 (one hit a source a group), and over-fetched from the plain 2.
    assert [len(g.hits) for g in tricked.groups] == [len(g.hits) for g in plain.groups] == [1, 1]
    assert type(sent[0][1]["group_size"]) is int and sent[0][1]["group_size"] >= 2


class _HidingItems(dict):
    """A with_payload/order_by dict whose ``items()`` shows the key screen a harmless key; pydantic
    validates the dict's own entries."""

    def items(self):
        return iter([(k, ["x"] if isinstance(v, list) else "x") for k, v in dict.items(self)])


class _HidingIter(list):
    def __iter__(self):
        return iter(["x"])


def _pii(kit):
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
           "intent": {"enabled": False}, "diversity": {"enabled": False}}
    c = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(c, "c")
    c.upsert("c", [models.PointStruct(id=i, vector=V, payload={"x": i}) for i in (1, 2)])
    return c


@pytest.mark.parametrize("selector", [_HidingItems({"include": [STRIPE]}), {"include": _HidingIter([STRIPE])},
                                      {"exclude": [STRIPE]}])
def test_a_with_payload_dict_is_screened_as_it_is_sent(kit, selector):
    c = _pii(kit)
    with pytest.raises(GuardRefusal) as ei:
        c.scroll("c", with_payload=selector, limit=2)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT" and "with_payload" in str(ei.value)
    assert STRIPE not in str(ei.value)


def test_an_order_by_dict_is_screened_as_it_is_sent(kit):
    c = _pii(kit)
    with pytest.raises(GuardRefusal) as ei:
        c.scroll("c", order_by=_HidingItems({"key": STRIPE}), limit=2)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT" and "order_by" in str(ei.value)


def test_a_plain_with_payload_dict_is_sent_as_its_selector(kit, monkeypatch):
    c = _pii(kit)
    sent = record_sent(monkeypatch, ("scroll",), with_kwargs=True)
    records, _ = c.scroll("c", with_payload={"include": ["x"]}, limit=2)
    assert [r.payload for r in records] == [{"x": 1}, {"x": 2}]
    assert sent[0][1]["with_payload"] == models.PayloadSelectorInclude(include=["x"])
    # One the REST client refuses is screened as a dict and passed on as it is (docs/server.md).
    invalid = {"nope": ["x"]}
    c.scroll("c", with_payload=invalid, limit=2)
    assert sent[1][1]["with_payload"] is invalid


class _SaysWait:
    """A ``wait`` that is true to the guard's ``not wait`` while REST sends ``str(wait).lower()``."""

    def __bool__(self):
        return True

    def __str__(self):
        return "false"


def test_wait_is_sent_as_the_bool_the_guard_read(kit, monkeypatch):
    c = _pii(kit)
    sent = record_sent(monkeypatch, ("upsert", "delete"), with_kwargs=True)
    c.upsert("c", [models.PointStruct(id=3, vector=V)], wait=_SaysWait())
    c.delete("c", points_selector=[3], wait=np.bool_(True))
    assert [(kw["wait"], type(kw["wait"])) for _, kw in sent] == [(True, bool), (True, bool)]


def test_plain_new_arguments_are_passed_as_they_are():
    from qdrant_guard.sentargs import plain_args

    args = {"collection_name": "c", "group_size": 3, "limit": 2, "wait": True, "with_payload": True}
    assert plain_args("query_points_groups", args) is args


# -- 2. a Document's model name --------------------------------------------------------------------

def _inference(kit):
    pol = {"pub": {"class": "PUBLIC", "text_field": "text"},
           "pii": {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text",
                   "intent": {"enabled": False}}}
    cl = QdrantClient(":memory:", guard=kit.config(pol), principal=kit.principal("alice", "hr"))
    create(cl, "pub")
    create(cl, "pii")
    return cl


def _let_through(call):
    try:
        call()
    except QdrantGuardError:
        raise
    except Exception:  # noqa: BLE001 - qdrant-client's own (no fastembed here)
        pass


@pytest.mark.parametrize("value", [
    models.Document(text="a plain sentence", model=f"m-{STRIPE}"),
    models.Image(image="aGVsbG8=" * 10, model=f"m-{STRIPE}"),
    models.InferenceObject(object="plain", model=f"m-{STRIPE}"),
])
def test_a_credential_in_a_model_name_is_refused_before_inference(kit, monkeypatch, value):
    cl = _inference(kit)
    sent = record_sent(monkeypatch, ("upsert",))
    with pytest.raises(GuardRefusal) as ei:
        cl.upsert("pub", [models.PointStruct(id=1, vector=value)])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH" and sent == []
    assert "point 1 vector '<unnamed>'.model" in str(ei.value) and STRIPE not in str(ei.value)
    assert audit_records(kit)[-1]["details"]["form"] == type(value).__name__


def test_a_query_document_model_name_is_screened_on_a_sensitive_collection(kit, monkeypatch):
    cl = _inference(kit)
    sent = record_sent(monkeypatch, ("query_points",))
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("pii", query=models.Document(text="plain words", model=f"m-{STRIPE}"), limit=1)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT" and "query.model" in str(ei.value) and sent == []
    # A plain model name goes on to qdrant-client's inference (which fails here: no fastembed).
    _let_through(lambda: cl.query_points("pii", query=models.Document(text="plain words", model="m"), limit=1))
    assert sent == ["query_points"]


def test_a_model_name_given_as_bytes_is_screened_as_the_str_sent(kit, monkeypatch):
    # model_construct() keeps bytes; the write's snapshot makes them the str pydantic sends.
    cl = _inference(kit)
    sent = record_sent(monkeypatch, ("upsert",))
    doc = models.Document.model_construct(text="a plain sentence", model=STRIPE.encode())
    with pytest.raises(GuardRefusal, match=r"model name '\[STRIPE_KEY\]'"):
        cl.upsert("pub", [models.PointStruct.model_construct(id=1, vector=doc)])
    assert sent == []


# -- 3. batch places -------------------------------------------------------------------------------

def _bad_batch():
    # Built with model_construct(): row 1's vector is no vector, and its payload no dict.
    return models.Batch.model_construct(ids=[1, 2], vectors=[V, ["x"] * DIM], payloads=[{}, STRIPE])


def test_a_batch_column_that_does_not_validate_is_named(kit):
    cl = _pii(kit)
    with pytest.raises(GuardArgumentValueError) as ei:
        cl.upsert("c", _bad_batch())
    assert str(ei.value).startswith("points.vectors[1], points.payloads[1] of the models.Batch do not validate")
    assert "model_construct()" in str(ei.value) and STRIPE not in str(ei.value)
    assert audit_records(kit)[-1]["verdict"] == "UNSUPPORTED_WRITE"
    named = models.Batch.model_construct(ids=[1, 2], vectors={"": [V, "nope"]})
    with pytest.raises(GuardArgumentValueError, match=r"^points\.vectors\[''\]\[1\] of the models\.Batch"):
        cl.upsert("c", named)
    with pytest.raises(GuardArgumentValueError,
                       match=r"^update_operations\[1\]\.upsert\.batch\.vectors\[1\], update_operations\[1\]"):
        cl.batch_update_points("c", [models.DeleteOperation(delete=models.PointIdsList(points=[1])),
                                     models.UpsertOperation.model_construct(
                                         upsert=models.PointsBatch.model_construct(batch=_bad_batch()))])


def test_a_public_batch_and_upload_collection_columns_are_named(kit):
    cl = _inference(kit)
    with pytest.raises(GuardArgumentValueError, match=r"^points\.vectors\[1\], points\.payloads\[1\]"):
        cl.upsert("pub", _bad_batch())
    with pytest.raises(GuardArgumentValueError, match=r"^payload\[1\] of upload_collection's columns"):
        cl.upload_collection("pub", vectors=[V, V], payload=[{}, STRIPE], ids=[1, 2])


@pytest.mark.parametrize("ops, place", [
    ([models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=9, vector=V)])),
      models.UpsertOperation(upsert=models.PointsList(points=[]))], "update_operations[1], an Upsert"),
    ([models.DeleteOperation(delete=models.FilterSelector(filter=models.Filter(must=[models.HasIdCondition(has_id=[1])]))),
      models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(points=[models.PointVectors(id=2, vector=V)]))],
     "update_operations[1], a vector update after a delete by filter"),
    ([models.DeleteOperation(delete=models.PointIdsList(points=[2])),
      models.DeleteOperation(delete=models.PointIdsList(points=[]))], "update_operations[1], a Delete"),
    ([models.DeleteOperation(delete=models.PointIdsList(points=[2])),
      models.SetPayloadOperation(set_payload=models.SetPayload(payload={"y": 1}, points=[1])),
      models.SetPayloadOperation(set_payload=models.SetPayload(payload={"y": 1}, points=[2]))],
     "update_operations[2], a payload change of point(s) [2] deleted earlier"),
    ([models.SetPayloadOperation(set_payload=models.SetPayload(payload={"y": 1}, points=[1])),
      models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"y": 1}, points=[77]))],
     "update_operations[1]: point(s) [77] do not exist"),
    ([models.SetPayloadOperation(set_payload=models.SetPayload(payload={"y": 1}, points=[1])),
      models.DeleteVectorsOperation(delete_vectors=models.DeleteVectors(vector=["nope"], points=[1]))],
     "update_operations[1], a vector deletion on sensitive collection"),
    ([models.SetPayloadOperation(set_payload=models.SetPayload(payload={"y": 1}, points=[1])),
      models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
          points=[models.PointVectors(id=2, vector=V)], update_filter=models.Filter()))],
     "update_operations[1].update_vectors.update_filter is not supported"),
])
def test_batch_refusals_name_the_operation_index(kit, monkeypatch, ops, place):
    cl = _pii(kit)
    sent = record_sent(monkeypatch, ("batch_update_points",))
    with pytest.raises(UnsupportedWriteError) as ei:
        cl.batch_update_points("c", ops)
    assert place in str(ei.value) and sent == []
    assert place in audit_records(kit)[-1]["directive"]
