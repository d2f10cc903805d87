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
