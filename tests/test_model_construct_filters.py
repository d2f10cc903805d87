"""A ``model_construct()``ed filter, formula or prefetch cannot hide a condition from the guard's
checks: each is rebuilt from its pydantic dump once per call, checked, and that copy is sent
(qdrant_guard.sentmodels). Before, a list subclass whose ``__iter__`` shows only a harmless
condition passed the PII screen of read and write filters, formulas and prefetches and the
restricted-source filter check, while qdrant-client's REST transport sends every item; a dict in
place of a condition was skipped the same way.

Real local-mode Qdrant, real keys (see guardkit). Local mode iterates as the old walks did, so the
leak itself shows in the REST body (``models.*Request(...).model_dump_json(warnings=False)``); what the guard
sends now is asserted on what reaches the unguarded client and on local mode's answers.
"""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import audit_records, make_kit, models, record_sent, snapshot, unit
from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.receipts import RECEIPT_KEY

EMAIL = "alice@example.com"
V = [0.25] * 16


class _Hiding(list):
    """A list whose iteration shows only its first item; pydantic serialises every item."""

    def __iter__(self):
        return iter(list.__getitem__(self, slice(0, 1)))


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _clients(kit, **policy):
    """alice@hr, owner of PII collection ``c`` (support reads and writes it), points 1-3; and bob@support."""
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "raw_in_boundary": True,
           "intent": {"enabled": False}, **policy}
    alice = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    alice.create_collection("c", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
    alice.upsert("c", [models.PointStruct(id=i, vector=V, payload={"x": i, "source": "d1", "note": "n"})
                       for i in (1, 2, 3)])
    return alice, alice.with_principal(kit.principal("bob", "support"))


HARMLESS = models.FieldCondition(key="x", range=models.Range(gte=1))
PII = models.FieldCondition(key="email", match=models.MatchValue(value=EMAIL))


def _hiding_filter() -> models.Filter:
    return models.Filter.model_construct(must=_Hiding([HARMLESS, PII]))


def test_the_rest_body_carries_the_hidden_condition():
    # What a server is sent (the leak the fix closes): every item, though iteration shows one.
    flt = _hiding_filter()
    assert list(flt.must) == [HARMLESS]
    assert EMAIL in models.ScrollRequest(filter=flt).model_dump_json(warnings=False)


READS = {
    "scroll": lambda c, f: c.scroll("c", scroll_filter=f),
    "count": lambda c, f: c.count("c", count_filter=f),
    "query_points": lambda c, f: c.query_points("c", query=V, query_filter=f),
    "query_batch_points": lambda c, f: c.query_batch_points("c", [models.QueryRequest(query=V, filter=f)]),
    "facet": lambda c, f: c.facet("c", key="source", facet_filter=f),
}


@pytest.mark.parametrize("read", list(READS))
def test_a_read_filter_hiding_a_pii_match_is_refused(kit, monkeypatch, read):
    # Old code: allowed (the screen walked must by iteration and saw only x >= 1).
    _, bob = _clients(kit)
    sent = record_sent(monkeypatch, ("scroll", "count", "query_points", "query_batch_points", "facet"))
    with pytest.raises(GuardRefusal) as ei:
        READS[read](bob, _hiding_filter())
    assert ei.value.verdict == "QUERY_REJECTED" and ei.value.details["filter"].endswith("must[1].match.value")
    assert sent == []
    assert EMAIL not in (kit.tmp / "audit.jsonl").read_text()


def test_a_dict_standing_for_a_condition_is_screened(kit):
    # The walk skipped a dict where a condition belongs; pydantic sends it as that condition.
    _, bob = _clients(kit)
    flt = models.Filter.model_construct(must=[{"key": "email", "match": {"value": EMAIL}}])
    assert EMAIL in models.ScrollRequest(filter=flt).model_dump_json(warnings=False)
    with pytest.raises(GuardRefusal) as ei:
        bob.scroll("c", scroll_filter=flt)
    assert ei.value.verdict == "QUERY_REJECTED"


WRITES = {
    "set_payload": lambda c, f: c.set_payload("c", payload={"note": "m"}, points=f),
    "delete": lambda c, f: c.delete("c", points_selector=models.FilterSelector(filter=f)),
    "delete_payload": lambda c, f: c.delete_payload("c", keys=["note"], points=f),
    "batch": lambda c, f: c.batch_update_points("c", [models.SetPayloadOperation(
        set_payload=models.SetPayload(payload={"note": "m"}, filter=f))]),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_filter_hiding_a_pii_match_is_refused_and_nothing_is_written(kit, write):
    # Old code: written (local mode matched x >= 1, a server would have matched on the e-mail too).
    alice, bob = _clients(kit)
    before = snapshot(alice, "c")
    with pytest.raises(GuardRefusal) as ei:
        WRITES[write](bob, _hiding_filter())
    assert ei.value.verdict == "QUERY_REJECTED"
    assert snapshot(alice, "c") == before


def test_a_formula_hiding_a_pii_condition_is_refused(kit):
    # A formula's conditions are filters too; old code: allowed.
    _, bob = _clients(kit)
    formula = models.FormulaQuery(formula=models.SumExpression.model_construct(sum=_Hiding(["$score", PII])))
    assert EMAIL in models.QueryRequest(query=formula).model_dump_json(warnings=False)
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("c", prefetch=models.Prefetch(query=V, limit=3), query=formula)
    assert ei.value.verdict == "QUERY_REJECTED"


@pytest.mark.parametrize("nested", [False, True])
def test_a_prefetch_filter_hiding_a_pii_match_is_refused(kit, nested):
    _, bob = _clients(kit)
    inner = models.Prefetch(query=V, filter=_hiding_filter(), limit=3)
    prefetch = models.Prefetch(prefetch=[inner], query=V, limit=3) if nested else inner
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("c", prefetch=prefetch, query=V)
    assert ei.value.verdict == "QUERY_REJECTED"
    # A prefetch list that hides a prefetch: pydantic sends it, so it is checked.
    with pytest.raises(GuardRefusal):
        bob.query_points("c", prefetch=_Hiding([models.Prefetch(query=V, limit=3), inner]), query=V)


def test_the_restricted_source_filter_check_sees_the_hidden_condition(kit):
    # Outside the owner boundary a retagging change may select points by the source field only
    # (any other filter makes its refusal a count oracle). Old code: the hidden x range passed.
    alice, bob = _clients(kit, diversity={"max_source_coverage": 0.5, "restricted_sources": ["memo"],
                                          "max_source_fraction": 1.0})
    d1 = models.FieldCondition(key="source", match=models.MatchValue(value="d1"))
    hidden = models.Filter.model_construct(must=_Hiding([d1, HARMLESS]))
    before = snapshot(alice, "c")
    for change in (lambda: bob.clear_payload("c", points_selector=models.FilterSelector(filter=hidden)),
                   lambda: bob.set_payload("c", payload={"source": "d2"}, points=hidden),
                   lambda: bob.batch_update_points("c", [models.ClearPayloadOperation(
                       clear_payload=models.FilterSelector(filter=hidden))])):
        with pytest.raises(GuardRefusal, match="filter on fields other than 'source'"):
            change()
    assert snapshot(alice, "c") == before
    bob.set_payload("c", payload={"source": "d2"}, points=models.Filter(must=[d1]))  # the source alone still passes


def test_a_batch_delete_payload_hiding_the_receipt_key_is_refused(kit):
    # A DeletePayload whose keys list hides the receipt container passed the tamper check; a
    # server would have deleted every receipt the filter matched.
    alice, bob = _clients(kit)
    op = models.DeletePayloadOperation(delete_payload=models.DeletePayload.model_construct(
        keys=_Hiding(["note", RECEIPT_KEY]), filter=models.Filter(must=[HARMLESS])))
    assert RECEIPT_KEY in models.UpdateOperations(operations=[op]).model_dump_json(warnings=False)
    before = snapshot(alice, "c")
    with pytest.raises(Exception, match="receipt"):
        bob.batch_update_points("c", [op])
    assert snapshot(alice, "c") == before


def test_the_filter_sent_is_the_checked_copy_with_every_condition(kit, monkeypatch):
    # What reaches qdrant-client is a plain Filter holding the hidden condition too, so local mode
    # (which iterates) answers as a server given the REST body would: x >= 1 and x >= 3.
    alice, _ = _clients(kit)
    sent = record_sent(monkeypatch, ("scroll", "count"), with_kwargs=True)
    flt = models.Filter.model_construct(must=_Hiding([HARMLESS, models.FieldCondition(key="x", range=models.Range(gte=3))]))
    assert alice.count("c", count_filter=flt).count == 1
    assert [p.id for p in alice.scroll("c", scroll_filter=flt)[0]] == [3]
    got = [kw.get("count_filter", kw.get("scroll_filter")) for _, kw in sent]
    assert [type(f.must) for f in got] == [list, list] and all(len(f.must) == 2 for f in got)
    # A plain filter is sent equal to itself, with the same fields set (ordinary models unchanged).
    plain = models.Filter(must=[HARMLESS], should=[models.Filter(must_not=[models.HasIdCondition(has_id=[2])])])
    sent.clear()
    assert alice.count("c", count_filter=plain).count == 2
    assert sent[0][1]["count_filter"] == plain
    assert sent[0][1]["count_filter"].model_fields_set == plain.model_fields_set


def test_a_model_that_does_not_validate_is_refused_and_audited(kit, monkeypatch):
    # Fail closed: a model_construct()ed filter holding what no condition is cannot be checked.
    _, bob = _clients(kit)
    sent = record_sent(monkeypatch, ("scroll",))
    with pytest.raises(GuardRefusal) as ei:
        bob.scroll("c", scroll_filter=models.Filter.model_construct(must=[42]))
    assert ei.value.verdict == "QUERY_REJECTED" and "model_construct" in str(ei.value)
    assert sent == [] and audit_records(kit)[-1]["verdict"] == "QUERY_REJECTED"


def test_a_model_construct_prefetch_with_a_numpy_vector_still_runs(kit):
    # The rebuild validates as qdrant-client's models do: a numpy query vector becomes a list.
    alice, _ = _clients(kit)
    rng = np.random.default_rng(0)
    q = np.asarray(unit(rng))
    got = alice.query_points("c", prefetch=models.Prefetch.model_construct(query=q, limit=3), query=V).points
    assert sorted(p.id for p in got) == [1, 2, 3]


# -- the fast path: an ordinary model is sent as it is, anything the rebuild would change is rebuilt --

def _ordinary():
    from test_filter_keys import FORMS

    filters = [build("x") for build, _ in FORMS.values()] + [
        models.Filter(must=[PII, HARMLESS], must_not=[models.HasIdCondition(has_id=[1, "5c56c793-69f3-4fbf-87e6-c4bf54c28c26"])],
                      should=models.FieldCondition(key="t", match=models.MatchText(text="a b"))),
        models.Filter(must=[models.FieldCondition(key="s", match=models.MatchAny(any=[1, 2])),
                            models.FieldCondition(key="s", match=models.MatchExcept(**{"except": ["a"]}))])]
    return [(f, models.Filter) for f in filters] + [
        (models.FormulaQuery(formula=models.SumExpression(sum=["$score", models.MultExpression(mult=[2.0, "x"]), PII]),
                             defaults={"x": 1}), models.FormulaQuery),
        (models.Prefetch(query=V, filter=models.Filter(must=[HARMLESS]), limit=3,
                         prefetch=[models.Prefetch(query=models.OrderByQuery(order_by="x"))]), models.Prefetch),
        (models.PayloadSelectorInclude(include=["a", "b"]), models.PayloadSelectorInclude),
    ]


@pytest.mark.parametrize("value,cls", _ordinary())
def test_an_ordinary_model_is_sent_as_it_is_and_equals_its_rebuilt_copy(value, cls):
    from qdrant_guard.sentmodels import rebuilt

    slow = cls.__pydantic_validator__.validate_python(cls.__pydantic_serializer__.to_python(
        value, by_alias=True, exclude_unset=True, exclude_none=True))
    assert slow == value and slow.model_fields_set == value.model_fields_set
    got = rebuilt(value, cls, "x")
    # A formula's defaults (a dict) is not taken as plain: that one is rebuilt, equal.
    assert got is value or (cls is models.FormulaQuery and got == value)


class _Lying(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


class _Sub(models.FieldCondition):
    pass


TRICKS = {
    "list subclass": lambda: _hiding_filter(),
    "str subclass key": lambda: models.Filter(must=[models.FieldCondition.model_construct(
        key=_Lying("email"), match=models.MatchValue(value=EMAIL))]),
    "dict for a condition": lambda: models.Filter.model_construct(must=[{"key": "email", "match": {"value": EMAIL}}]),
    "model subclass": lambda: models.Filter(must=[_Sub(key="email", match=models.MatchValue(value=EMAIL))]),
    "tuple": lambda: models.Filter.model_construct(must=(HARMLESS, PII)),
    "set but not given": lambda: _set_unseen(models.Filter(must=[HARMLESS]), "must_not", [PII]),
}


def _set_unseen(flt, field, value):
    flt.__dict__[field] = value  # not in model_fields_set: REST leaves it out, local mode and gRPC send it
    return flt


@pytest.mark.parametrize("trick", list(TRICKS))
def test_a_model_the_rebuild_would_change_is_not_taken_as_plain(trick):
    from qdrant_guard.sentmodels import rebuilt

    value = TRICKS[trick]()
    got = rebuilt(value, models.Filter, "query_filter")
    assert got is not value and type(got) is models.Filter
    assert got == models.Filter.model_validate(models.Filter.__pydantic_serializer__.to_python(
        value, by_alias=True, exclude_unset=True, exclude_none=True, warnings=False))
    assert type(got.must) in (list, type(None)) and got.must_not is None


def test_a_model_of_another_type_in_a_condition_slot_is_refused(kit):
    # A FacetValueHit where a match belongs: the walk did not screen it (not a match type), and
    # its JSON ({"value": ..., "count": 1}) reads as a MatchValue to a lenient parser.
    _, bob = _clients(kit)
    flt = models.Filter(must=[models.FieldCondition.model_construct(
        key="email", match=models.FacetValueHit(value=EMAIL, count=1))])
    with pytest.raises(GuardRefusal) as ei:
        bob.scroll("c", scroll_filter=flt)
    assert ei.value.verdict == "QUERY_REJECTED" and "model_construct" in str(ei.value)


def test_the_async_client_rebuilds_too(kit):
    # One pipeline for both facades: the async client's filters are rebuilt before the screen.
    import asyncio

    from qdrant_guard import AsyncQdrantClient

    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}}

    async def main():
        cl = AsyncQdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
        await cl.create_collection("c", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        for call in (lambda: cl.scroll("c", scroll_filter=_hiding_filter()),
                     lambda: cl.delete("c", points_selector=_hiding_filter())):
            with pytest.raises(GuardRefusal) as ei:
                await call()
            assert ei.value.verdict == "QUERY_REJECTED"

    asyncio.run(main())
