"""Third review of the read path's audit trail: a query the guard's embedder fails on, a query that
carries two texts (query_text= and a models.Document), and read failures that left no entry.

Real local-mode Qdrant, real keys (see guardkit); a failing embedder is a plain callable.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from guardkit import audit_records, create, make_kit, models, record_sent, unit
from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient
from qdrant_guard.errors import AuditError
from qdrant_guard.textguard import EmbedderError

SSN = "123-45-6789"
POLICY = {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text", "intent": {"enabled": False}}


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


_records = audit_records


def _raw_log(kit):
    return (kit.tmp / "audit.jsonl").read_text()


@pytest.fixture()
def sent(monkeypatch):
    """The method of every call that reaches the real (unguarded) query methods."""
    return record_sent(monkeypatch, ("query_points", "query_batch_points", "query_points_groups"))


class Unreachable(ConnectionError):
    pass


def failing_embedder(texts):
    # Its message quotes the text it was given, as real clients' errors often do.
    raise Unreachable(f"embedding service refused {texts!r}")


def wrong_shape_embedder(texts):
    return [[0.1, 0.2]] * (len(texts) + 1)


def working_embedder(texts):
    rng = np.random.default_rng(len(texts))
    return [unit(rng) for _ in texts]


def _client(kit, embedder, **policy):
    cl = QdrantClient(":memory:", guard=kit.config({"c": {**POLICY, **policy}}),
                      principal=kit.principal("alice", "hr"), embedder=embedder)
    create(cl, "c")
    return cl


def _document(text=f"refund for {SSN} please"):
    return models.Document(text=text, model="m")


# -- 1. an embedder failing on a query is audited -------------------------------------------------

QUERIES = {
    "query_points": lambda c: c.query_points("c", query=_document(), limit=2),
    "query_points_groups": lambda c: c.query_points_groups("c", group_by="source", query=_document(), limit=2),
    "query_batch_points": lambda c: c.query_batch_points("c", [models.QueryRequest(query=_document(), limit=2)]),
}


@pytest.mark.parametrize("method", sorted(QUERIES))
@pytest.mark.parametrize("noised", [False, True])
def test_embedder_failing_on_a_query_is_audited(kit, sent, method, noised):
    # The guard embeds a Document query itself (embedder=, or noise_queries for a principal not
    # allowed raw vectors); when the embedder raised, EmbedderError reached the caller and the log
    # had no entry for the refused query.
    cl = _client(kit, failing_embedder, noise_queries=noised)
    who = cl.with_principal(kit.principal("bob", "support")) if noised else cl
    before = len(_records(kit))
    with pytest.raises(EmbedderError) as ei:
        QUERIES[method](who)
    assert isinstance(ei.value.__cause__, Unreachable)  # the caller still gets the embedder's error
    new = _records(kit)[before:]
    assert [r["verdict"] for r in new] == ["FAIL_CLOSED"]  # exactly one entry
    entry = new[0]
    assert entry["op"] == method and entry["collection"] == "c"
    assert entry["details"]["error"] == "EmbedderError" and entry["details"]["cause"] == "Unreachable"
    assert entry["details"]["query_text"] == "refund for [SSN] please"  # what was checked, redacted
    assert "Unreachable" in entry["directive"] and "embedder=" in entry["directive"]
    raw = _raw_log(kit)
    assert SSN not in raw and "embedding service refused" not in raw  # the type, not the message
    assert sent == []


def test_embedder_returning_the_wrong_shape_is_audited(kit, sent):
    cl = _client(kit, wrong_shape_embedder)
    with pytest.raises(EmbedderError, match="shape"):
        cl.query_points("c", query=_document(), limit=2)
    entry = _records(kit)[-1]
    assert entry["verdict"] == "FAIL_CLOSED"
    assert entry["details"]["error"] == "EmbedderError" and entry["details"]["cause"] is None
    assert "(n_texts, dim)" in entry["directive"]
    assert sent == []


def nan_embedder(texts):
    return [[float("nan")] * 16 for _ in texts]


@pytest.mark.parametrize("noised", [False, True])
def test_embedder_returning_nan_is_an_audited_embedder_failure(kit, sent, noised):
    # NaN reached the store as the query vector (which refused it), or, under noise_queries, the
    # noise raised an unaudited InvalidVectorError: either way the embedder had failed.
    cl = _client(kit, nan_embedder, noise_queries=noised)
    bob = cl.with_principal(kit.principal("bob", "support"))
    before = len(_records(kit))
    with pytest.raises(EmbedderError, match="NaN or Inf"):
        bob.query_points("c", query=_document(), limit=2)
    new = _records(kit)[before:]
    assert [(r["verdict"], r["details"]["error"], r["details"]["cause"]) for r in new] == [
        ("FAIL_CLOSED", "EmbedderError", None)]
    assert sent == []


def test_embedder_failure_entry_keeps_what_the_query_checks_decided(kit):
    # Monitor-mode findings are part of the decision: the entry keeps them next to the error.
    cl = _client(kit, failing_embedder, query={"mode": "monitor"})
    with pytest.raises(EmbedderError):
        cl.query_points("c", query=_document("refund %41%42%43 policy"), limit=2)
    entry = _records(kit)[-1]
    assert entry["verdict"] == "FAIL_CLOSED"
    assert entry["details"]["scan"]["would_reject"]


def test_async_embedder_failing_on_a_query_is_audited(kit):
    async def main():
        cl = AsyncQdrantClient(":memory:", guard=kit.config({"c": POLICY}), principal=kit.principal("alice", "hr"),
                               embedder=failing_embedder)
        await cl.create_collection("c", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        before = len(_records(kit))
        with pytest.raises(EmbedderError):
            await cl.query_points("c", query=_document(), limit=2)
        with pytest.raises(EmbedderError):
            await cl.query_batch_points("c", [models.QueryRequest(query=_document(), limit=2)])
        await cl.close()
        return before

    before = asyncio.run(main())
    new = _records(kit)[before:]
    assert [(r["op"], r["verdict"], r["details"]["cause"]) for r in new] == [
        ("query_points", "FAIL_CLOSED", "Unreachable"), ("query_batch_points", "FAIL_CLOSED", "Unreachable")]
    assert SSN not in _raw_log(kit)


def test_embedder_failure_whose_entry_cannot_be_written_fails_closed(kit, sent, monkeypatch):
    cl = _client(kit, failing_embedder)

    def broken(record):
        raise OSError("disk full")

    monkeypatch.setattr(cl.guard.audit, "append", broken)
    with pytest.raises(AuditError, match="disk full"):
        cl.query_points("c", query=_document(), limit=2)
    assert sent == []


def test_embedder_failure_with_fail_closed_false_and_a_broken_log_still_refuses(kit, sent, monkeypatch):
    # fail_closed = false lets the call go on without its entry; an embedder failure still has no
    # vector to go on with, so the embedder's error is raised.
    cl = _client(kit, failing_embedder, fail_closed=False)

    def broken(record):
        raise OSError("disk full")

    monkeypatch.setattr(cl.guard.audit, "append", broken)
    with pytest.raises(EmbedderError):
        cl.query_points("c", query=_document(), limit=2)
    assert sent == []


def test_document_query_without_embedder_under_noise_queries_is_an_audited_refusal(kit, sent):
    # Under noise_queries the guard must embed a Document itself; without embedder= it raised an
    # InvalidVectorError from inside the pipeline, and the refused query left no entry.
    cl = _client(kit, None, noise_queries=True)
    bob = cl.with_principal(kit.principal("bob", "support"))
    before = len(_records(kit))
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("c", query=_document(), limit=2)
    assert ei.value.verdict == "QUERY_REJECTED"
    assert "embedder=" in str(ei.value) and "noise_queries" in str(ei.value)
    new = _records(kit)[before:]
    assert [r["verdict"] for r in new] == ["QUERY_REJECTED"]
    assert new[0]["details"]["form"] == "Document"
    assert new[0]["details"]["query_text"] == "refund for [SSN] please"
    assert ei.value.manifest_digest
    assert sent == []


# -- 2. a query with two texts records both -------------------------------------------------------

_QT = f"refund {SSN} status"                       # query_text=: the raw prefetch vector's text
_DOC = "mail alice.smith@example.com about %41%42%43 refund"   # the Document's text
_QT_RED = "refund [SSN] status"
_DOC_RED = "mail [EMAIL] about %41%42%43 refund"


def _two_texts(cl, qt=_QT, doc=_DOC):
    return cl.query_points("c", query=_document(doc), prefetch=models.Prefetch(query=unit(np.random.default_rng(1)),
                                                                                 limit=5), query_text=qt, limit=2)


def test_query_with_two_texts_records_both_redacted(kit):
    # Both texts are checked, but details["query_text"] was overwritten in the loop: the entry kept
    # the Document's text only, and its scan results replaced those of query_text=.
    cl = _client(kit, working_embedder, query={"mode": "monitor"})
    _two_texts(cl)
    details = _records(kit)[-1]["details"]
    assert details["query_text"] == _QT_RED and details["query_text_from"] == "query_text"
    assert [(t["from"], t["query_text"]) for t in details["query_texts"]] == [("query_text", _QT_RED),
                                                                             ("query", _DOC_RED)]
    # Each text's own scan: the Document's would-be rejection is not lost behind query_text='s clean scan.
    first, second = details["query_texts"]
    assert "would_reject" not in first["scan"] and details["scan"] == first["scan"]
    [escape] = second["scan"]["would_reject"]
    assert second["query_text"][escape["position"]:].startswith("%41")
    raw = _raw_log(kit)
    assert SSN not in raw and "alice.smith" not in raw


def test_monitor_findings_of_the_first_text_are_not_overwritten_by_the_second(kit):
    cl = _client(kit, working_embedder, query={"mode": "monitor"})
    _two_texts(cl, qt="refund %41%42%43 status", doc="refund policy")
    details = _records(kit)[-1]["details"]
    # The top level is the first text's, positions into its text, as for a query of one text.
    [escape] = details["scan"]["would_reject"]
    assert details["query_text"][escape["position"]:].startswith("%41")
    assert "would_reject" not in details["query_texts"][1]["scan"]


@pytest.mark.parametrize("refused", ["query_text", "query"])
def test_refusal_of_either_text_names_it_with_positions_into_it(kit, sent, refused):
    cl = _client(kit, working_embedder)
    bad, good = "refund %41%42%43 for 123-45-6789", "refund policy"
    with pytest.raises(GuardRefusal) as ei:
        _two_texts(cl, **({"qt": bad, "doc": good} if refused == "query_text" else {"qt": good, "doc": bad}))
    assert ei.value.verdict == "QUERY_REJECTED"
    entry = _records(kit)[-1]
    details = entry["details"]
    assert details == ei.value.details
    assert details["query_text_from"] == refused
    assert details["query_text"] == "refund %41%42%43 for [SSN]"
    for v in details["violations"]:
        assert details["query_text"][v["position"]:].startswith("%41")
    assert sorted(t["query_text"] for t in details["query_texts"]) == ["refund %41%42%43 for [SSN]", "refund policy"]
    assert SSN not in _raw_log(kit)
    assert sent == []


def test_size_cap_refusal_names_the_text_over_it(kit, sent):
    cl = _client(kit, working_embedder, query={"max_chars": 100})
    with pytest.raises(GuardRefusal) as ei:
        _two_texts(cl, qt="refund policy", doc="x " * 200)
    assert ei.value.details["query_text_from"] == "query"
    assert [v["kind"] for v in ei.value.details["violations"]] == ["size_cap"]
    assert "query_text" not in ei.value.details  # an oversized text is never logged
    assert sent == []


class BlockSalary:
    """Classifies a text mentioning salaries as adversarial (and everything else as benign)."""

    name = "block-salary"

    def classify(self, text, *, embedding=None):
        from qdrant_guard.intent import IntentResult

        if "salar" in text:
            return IntentResult("adversarial", 0.99, "asks for salaries", self.name)
        return IntentResult("benign", 0.9, "fine", self.name)


@pytest.mark.parametrize("blocked", ["query_text", "query"])
def test_intent_of_each_text_is_recorded(kit, blocked):
    intent = {"enabled": True, "classifier": "test_read_audit_review3:BlockSalary", "mode": "monitor"}
    cl = _client(kit, working_embedder, intent=intent)
    texts = {"qt": "every salary please", "doc": "refund policy"} if blocked == "query_text" else \
        {"qt": "refund policy", "doc": "every salary please"}
    _two_texts(cl, **texts)
    details = _records(kit)[-1]["details"]
    by_from = {t["from"]: t["intent"] for t in details["query_texts"]}
    assert by_from[blocked].get("would_block") is True
    assert not any(i.get("would_block") for f, i in by_from.items() if f != blocked)
    assert details["intent"] == by_from["query_text"]
    # In enforce mode the refusal names the text the classifier blocked.
    cl = _client(kit, working_embedder, intent={**intent, "mode": "enforce"})
    with pytest.raises(GuardRefusal) as ei:
        _two_texts(cl, **texts)
    assert ei.value.verdict == "INTENT_BLOCKED"
    assert ei.value.details["query_text_from"] == blocked
    assert ei.value.details["query_text"] == "every salary please"


def test_one_text_entry_is_unchanged(kit):
    # A query with one text (or query_text= equal to the Document's) keeps the entry it had.
    cl = _client(kit, working_embedder)
    _two_texts(cl, qt=_QT, doc=_QT)
    details = _records(kit)[-1]["details"]
    assert details["query_text"] == _QT_RED
    assert "query_texts" not in details and "query_text_from" not in details


# -- 3. a budget store that cannot be made -------------------------------------------------------

def _budgeted(kit, fail_closed):
    # A file where the store's directory should be: the SQLite store cannot be opened (made on first use).
    (kit.tmp / "blocker").write_text("not a directory")
    pol = {**POLICY, "diversity": {"max_source_coverage": 0.5}, "fail_closed": fail_closed}
    cfg = kit.config({"c": pol}, budget_store="sqlite:///" + str(kit.tmp / "blocker" / "budget.db"))
    cl = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(cl, "c")
    cl.upsert("c", [models.PointStruct(id=i, vector=unit(np.random.default_rng(i)), payload={"source": f"d{i % 2}"})
                    for i in range(4)])
    return cl.with_principal(kit.principal("bob", "support"))


BUDGETED_READS = {
    "retrieve": lambda c: c.retrieve("c", [1, 2]),
    "scroll": lambda c: c.scroll("c", limit=2),
    "query_points": lambda c: c.query_points("c", query=unit(np.random.default_rng(9)), limit=2),
    "query_points_groups": lambda c: c.query_points_groups("c", group_by="source", query=[0.1] * 16, limit=2),
}


@pytest.mark.parametrize("method", sorted(BUDGETED_READS))
def test_budget_store_that_cannot_be_made_is_an_audited_fail_closed_refusal(kit, method):
    # The store is made on a read's first use of the budget, outside the try that turns a store
    # failure into FAIL_CLOSED: retrieve (which reads before it charges) got a bare BudgetStoreError
    # after the read had reached Qdrant, and no entry.
    bob = _budgeted(kit, fail_closed=True)
    before = len(_records(kit))
    with pytest.raises(GuardRefusal) as ei:
        BUDGETED_READS[method](bob)
    assert ei.value.verdict == "FAIL_CLOSED" and "budget" in str(ei.value)
    assert [(r["op"], r["verdict"]) for r in _records(kit)[before:]] == [(method, "FAIL_CLOSED")]


@pytest.mark.parametrize("method", sorted(BUDGETED_READS))
def test_budget_store_that_cannot_be_made_with_fail_closed_false_goes_on_audited(kit, method):
    # fail_closed = false: "log it and return so nothing is withheld"; every budgeted read crashed
    # with BudgetStoreError instead (the store was made again outside the try), leaving no entry.
    bob = _budgeted(kit, fail_closed=False)
    before = len(_records(kit))
    BUDGETED_READS[method](bob)
    new = _records(kit)[before:]
    assert [(r["op"], r["verdict"]) for r in new] == [(method, "ALLOW")]
    # The entry says the budget was not applied (it read like a budgeted read that withheld nothing).
    assert "BudgetStoreError" in new[0]["details"]["budget_error"]


def test_async_budget_store_that_cannot_be_made_is_audited(kit):
    (kit.tmp / "blocker").write_text("not a directory")
    pol = {**POLICY, "diversity": {"max_source_coverage": 0.5}}
    cfg = kit.config({"c": pol}, budget_store="sqlite:///" + str(kit.tmp / "blocker" / "budget.db"))

    async def main():
        cl = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await cl.create_collection("c", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        await cl.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"source": "d"})])
        bob = cl.with_principal(kit.principal("bob", "support"))
        before = len(_records(kit))
        with pytest.raises(GuardRefusal) as ei:
            await bob.retrieve("c", [1])
        await cl.close()
        return before, ei.value.verdict

    before, verdict = asyncio.run(main())
    assert verdict == "FAIL_CLOSED"
    assert [(r["op"], r["verdict"]) for r in _records(kit)[before:]] == [("retrieve", "FAIL_CLOSED")]


def test_vector_budget_store_failure_with_fail_closed_false_is_in_the_entry(kit):
    (kit.tmp / "blocker").write_text("not a directory")
    pol = {**POLICY, "class": "PROPRIETARY", "diversity": {"max_vectors": 10}, "fail_closed": False}
    cfg = kit.config({"c": pol}, budget_store="sqlite:///" + str(kit.tmp / "blocker" / "budget.db"))
    cl = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(cl, "c")
    cl.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"source": "d"})])
    bob = cl.with_principal(kit.principal("bob", "support"))
    bob.retrieve("c", [1], with_vectors=True)
    entry = _records(kit)[-1]
    assert entry["verdict"] == "ALLOW" and "BudgetStoreError" in entry["details"]["budget_error"]
    # fail_closed = true refuses, audited.
    pol["fail_closed"] = True
    cl = QdrantClient(":memory:", guard=kit.config({"c": pol}, budget_store=cfg.budget_store),
                      principal=kit.principal("alice", "hr"))
    create(cl, "c")
    cl.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"source": "d"})])
    with pytest.raises(GuardRefusal) as ei:
        cl.with_principal(kit.principal("bob", "support")).retrieve("c", [1], with_vectors=True)
    assert ei.value.verdict == "FAIL_CLOSED" and _records(kit)[-1]["verdict"] == "FAIL_CLOSED"


def test_budget_listing_failure_with_fail_closed_false_is_in_the_entry(kit):
    # The exclusion of used-up sources reads the store before the read is sent; with fail_closed =
    # false its failure was only logged, and a read that returned nothing (so charged nothing) got an
    # entry saying nothing of the exclusion it went without.
    import sqlite3

    db = kit.tmp / "budget.db"
    pol = {**POLICY, "diversity": {"max_source_coverage": 0.5}, "fail_closed": False}
    cl = QdrantClient(":memory:", guard=kit.config({"c": pol}, budget_store="sqlite:///" + str(db)),
                      principal=kit.principal("alice", "hr"))
    create(cl, "c")
    cl.upsert("c", [models.PointStruct(id=i, vector=unit(np.random.default_rng(i)), payload={"source": f"d{i % 2}"})
                    for i in range(4)])
    bob = cl.with_principal(kit.principal("bob", "support"))
    bob.scroll("c", limit=2)  # the store is made, and works
    assert "budget_error" not in _records(kit)[-1]["details"]
    con = sqlite3.connect(db)  # then breaks under the guard
    for (table,) in con.execute("select name from sqlite_master where type = 'table'").fetchall():
        con.execute(f"drop table {table}")
    con.commit()
    con.close()
    none = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value="nowhere"))])
    got, _ = bob.scroll("c", scroll_filter=none, limit=2)
    assert got == []
    entry = _records(kit)[-1]
    assert entry["verdict"] == "ALLOW" and "BudgetStoreError" in entry["details"]["budget_error"]
