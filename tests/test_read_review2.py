"""Second review of the read path: blank query text under require_text, filters that carry
secrets or probe for PII, violation positions in the audit entry, and reads that fail in the store.

Real local-mode Qdrant, real keys (see guardkit).
"""
from __future__ import annotations


import numpy as np
import pytest

from guardkit import audit_records, create, make_kit, models, record_sent, unit
from qdrant_guard import GuardRefusal, QdrantClient


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _client(kit, **policy):
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text",
           "intent": {"enabled": False}}
    pol.update(policy)
    cl = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(cl, "c")
    return cl


_records = audit_records


@pytest.fixture()
def sent(monkeypatch):
    """The (method, kwargs) of every call that reaches the real (unguarded) read methods."""
    return record_sent(monkeypatch, ("query_points", "query_batch_points", "query_points_groups", "scroll", "count", "facet",
                                     "search_matrix_pairs", "search_matrix_offsets"), with_kwargs=True)


# -- 1. require_text: blank text is no text --------------------------------------------------------

@pytest.mark.parametrize("blank", ["", "   ", "\n\t", "\u200b", "...", "\u3000?!"])
@pytest.mark.parametrize("scan", [True, False])
def test_require_text_refuses_blank_query_text(kit, sent, blank, scan):
    # require_text exists so that a raw vector cannot skip the text checks; query_text="" satisfied
    # it, and an empty (or whitespace-only, or invisible) text passes every check trivially.
    cl = _client(kit, query={"require_text": True, "enabled": scan})
    v = unit(np.random.default_rng(0))
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("c", query=v, query_text=blank, limit=1)
    assert ei.value.verdict == "TEXT_REQUIRED"
    assert "no letter or digit" in str(ei.value) and "query_text=" in str(ei.value)
    assert sent == []
    assert _records(kit)[-1]["verdict"] == "TEXT_REQUIRED"
    # In a prefetch too; a real text goes ahead.
    with pytest.raises(GuardRefusal):
        cl.query_points("c", prefetch=models.Prefetch(query=v, limit=5), query=models.FusionQuery(fusion="rrf"),
                        query_text=blank, limit=1)
    assert sent == []
    cl.query_points("c", query=v, query_text="refund policy", limit=1)
    cl.query_points("c", query=v, query_text="日本", limit=1)  # letters of any script count


def test_blank_query_text_without_require_text_is_not_refused(kit):
    cl = _client(kit)
    cl.query_points("c", query=unit(np.random.default_rng(0)), query_text="", limit=1)


# -- 3. violation positions index the text the audit entry holds ------------------------------------

_LEAKY = "mail alice.smith@example.com or 123-45-6789 about %41%42%43 refund"


@pytest.mark.parametrize("mode", ["enforce", "monitor"])
def test_violation_positions_index_the_redacted_query_text_in_the_audit_entry(kit, mode):
    # The audit entry holds the query text redacted, but the scan's positions indexed the original:
    # 24 characters of e-mail and SSN became 12 of placeholders, so the position of the escape
    # pointed 12 characters past it in the logged text.
    cl = _client(kit, query={"mode": mode})
    v = unit(np.random.default_rng(0))
    if mode == "enforce":
        with pytest.raises(GuardRefusal):
            cl.query_points("c", query=v, query_text=_LEAKY, limit=1)
        details = _records(kit)[-1]["details"]
        violations = details["violations"]
    else:
        cl.query_points("c", query=v, query_text=_LEAKY, limit=1)
        details = _records(kit)[-1]["details"]
        violations = details["scan"]["would_reject"]
    logged = details["query_text"]
    assert logged == "mail [EMAIL] or [SSN] about %41%42%43 refund"
    escapes = [x for x in violations if x["kind"] != "size_cap"]
    assert escapes
    for x in escapes:
        assert logged[x["position"]:].startswith("%41"), (x, logged)


def test_size_cap_position_is_in_the_redacted_text_in_monitor_mode(kit):
    cl = _client(kit, query={"mode": "monitor", "max_chars": 40})
    cl.query_points("c", query=unit(np.random.default_rng(0)), query_text="123-45-6789 " * 5, limit=1)
    details = _records(kit)[-1]["details"]
    [cap] = details["scan"]["would_reject"]
    # Character 40 of the original is inside the fourth SSN: its placeholder in the logged text.
    assert details["query_text"][cap["position"]:].startswith("[SSN]")
    assert cap["position"] == details["query_text"].index("[SSN]", 3 * 6)


def test_redacted_position_maps_through_placeholders():
    from qdrant_guard.detect import redact_with_findings
    from qdrant_guard.querycheck import redacted_position

    text = "ab 123-45-6789 cd alice@example.com ef"
    red, found = redact_with_findings(text)
    for original, marker in ((0, "ab"), (text.index("cd"), "cd"), (text.index("ef"), "ef"),
                             (text.index("45"), "[SSN]"), (text.index("example"), "[EMAIL]")):
        assert red[redacted_position(original, found):].startswith(marker)
    assert redacted_position(len(text), found) == len(red)


# -- 4. a read that fails in the store is audited --------------------------------------------------

_SECRET_MSG = "server says: no match for 123-45-6789 / sk_live_4eC39HqLyjWDarjtT1zdp7dc"

READS = {
    "query_points": lambda c, n: c.query_points(n, query=[0.1] * 16, query_text="refund 123-45-6789 policy", limit=2),
    "query_batch_points": lambda c, n: c.query_batch_points(n, [models.QueryRequest(query=[0.1] * 16, limit=2)]),
    "query_points_groups": lambda c, n: c.query_points_groups(n, group_by="source", query=[0.1] * 16, limit=2),
    "scroll": lambda c, n: c.scroll(n, limit=2),
    "retrieve": lambda c, n: c.retrieve(n, [1, 2]),
}


def _seeded(kit, **policy):
    cl = _client(kit, **policy)
    rng = np.random.default_rng(3)
    cl.upsert("c", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"d{i % 3}", "text": "t"})
                    for i in range(12)])
    return cl


@pytest.mark.parametrize("method", sorted(READS))
def test_read_of_a_missing_collection_is_audited(kit, method):
    # The read's entry was written after its result: when local Qdrant raised (no such collection)
    # after the guard admitted the read, the log had nothing.
    cl = _client(kit)
    before = len(_records(kit))
    with pytest.raises(ValueError, match="not found"):
        READS[method](cl, "nowhere")
    new = _records(kit)[before:]
    assert [r["verdict"] for r in new] == ["QDRANT_ERROR"]
    assert new[0]["op"] == method and new[0]["collection"] == "nowhere"
    assert new[0]["details"]["error"] == "ValueError"
    assert new[0]["details"]["method"] in (method, "get_aliases")
    assert "not found" not in new[0]["directive"]  # the type, not the message
    if method == "query_points":
        assert new[0]["details"]["query_text"] == "refund [SSN] policy"  # what was decided, redacted
    from qdrant_guard.audit import verify_audit_file
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


class Down(RuntimeError):
    pass


@pytest.mark.parametrize("method", sorted(READS))
def test_read_failing_in_the_store_is_audited_without_its_message(kit, monkeypatch, method):
    import qdrant_client

    cl = _seeded(kit)

    def fail(self, *a, **kw):
        raise Down(_SECRET_MSG)

    monkeypatch.setattr(qdrant_client.QdrantClient, method, fail)
    before = len(_records(kit))
    with pytest.raises(Down):
        READS[method](cl, "c")
    new = _records(kit)[before:]
    assert [r["verdict"] for r in new] == ["QDRANT_ERROR"]
    assert new[0]["details"]["method"] == method and new[0]["details"]["error"] == "Down"
    raw = (kit.tmp / "audit.jsonl").read_text()
    assert "123-45-6789" not in raw and "sk_live" not in raw


@pytest.mark.parametrize("method", sorted(READS))
def test_async_read_failing_in_the_store_is_audited(kit, monkeypatch, method):
    import asyncio

    import qdrant_client

    from qdrant_guard import AsyncQdrantClient

    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text", "intent": {"enabled": False}}

    async def main():
        cl = AsyncQdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
        await cl.create_collection("c", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))

        async def fail(self, *a, **kw):
            raise Down(_SECRET_MSG)

        monkeypatch.setattr(qdrant_client.AsyncQdrantClient, method, fail)
        before = len(_records(kit))
        with pytest.raises(Down):
            await READS[method](cl, "c")
        monkeypatch.undo()
        with pytest.raises(ValueError, match="not found"):
            await READS[method](cl, "nowhere")
        await cl.close()
        return before

    before = asyncio.run(main())
    new = _records(kit)[before:]
    assert [(r["verdict"], r["collection"], r["details"]["error"]) for r in new] == [
        ("QDRANT_ERROR", "c", "Down"), ("QDRANT_ERROR", "nowhere", "ValueError")]
    assert "123-45-6789" not in (kit.tmp / "audit.jsonl").read_text()


def test_failed_read_whose_audit_entry_cannot_be_written_fails_closed(kit, monkeypatch):
    from qdrant_guard.errors import AuditError

    cl = _client(kit)

    def broken(record):
        raise OSError("disk full")

    monkeypatch.setattr(cl.guard.audit, "append", broken)
    with pytest.raises(AuditError):
        cl.scroll("nowhere", limit=2)


def test_failed_read_is_not_logged_twice_when_the_guard_refuses_it(kit, monkeypatch):
    # Alias resolution failing on a budgeted read is the guard's own FAIL_CLOSED refusal (audited):
    # no second, QDRANT_ERROR entry for the same failure.
    import qdrant_client

    cl = _seeded(kit, diversity={"max_source_coverage": 0.5})
    bob = cl.with_principal(kit.principal("bob", "support"))

    def fail(self, *a, **kw):
        raise Down("aliases unavailable")

    monkeypatch.setattr(qdrant_client.QdrantClient, "get_aliases", fail)
    before = len(_records(kit))
    with pytest.raises(GuardRefusal) as ei:
        bob.scroll("c", limit=2)
    assert ei.value.verdict == "FAIL_CLOSED"
    assert [r["verdict"] for r in _records(kit)[before:]] == ["FAIL_CLOSED"]


def test_failed_rerun_of_a_budgeted_read_records_the_budget_already_charged(kit, monkeypatch):
    # A budgeted read runs again when the budget withheld points of its first run; the first run
    # has charged the budget by then, so the entry of a failing re-run says what was charged.
    import qdrant_client

    cl = _seeded(kit, diversity={"max_source_coverage": 0.5, "enabled": True})
    bob = cl.with_principal(kit.principal("bob", "support"))
    original = qdrant_client.QdrantClient.scroll
    calls = []

    def second_fails(self, *a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise Down("connection reset")
        return original(self, *a, **kw)

    monkeypatch.setattr(qdrant_client.QdrantClient, "scroll", second_fails)
    before = len(_records(kit))
    with pytest.raises(Down):
        bob.scroll("c", limit=12)
    [entry] = _records(kit)[before:]
    assert entry["verdict"] == "QDRANT_ERROR" and entry["details"]["budget_reruns"] == 1
    assert entry["details"]["budget"]  # the sources the first run charged and withheld
    assert len(calls) == 2


def test_count_allowed_in_budget_monitor_mode_failing_in_the_store_is_audited(kit, monkeypatch):
    # budget_oracle's monitor branch sent the call without forward(): its failure left no entry.
    import qdrant_client

    cl = _seeded(kit, diversity={"max_source_coverage": 0.5, "mode": "monitor"})
    bob = cl.with_principal(kit.principal("bob", "support"))

    def fail(self, *a, **kw):
        raise Down("connection reset")

    monkeypatch.setattr(qdrant_client.QdrantClient, "count", fail)
    flt = models.Filter(must=[models.FieldCondition(key="n", range=models.Range(gte=1))])
    with pytest.raises(Down):
        bob.count("c", count_filter=flt)
    assert [r["verdict"] for r in _records(kit)[-2:]] == ["ALLOW", "QDRANT_ERROR"]


# -- 2. filters are screened: credentials always, PII per query.filter_pii ---------------------------

SSN = "123-45-6789"
STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
V = [0.1] * 16


def _fc(key, match):
    return models.FieldCondition(key=key, match=match)


def _f(cond):
    return models.Filter(must=[cond])


PII_FILTERS = {
    "match_text": _f(_fc("text", models.MatchText(text=SSN))),
    "match_phrase": _f(_fc("text", models.MatchPhrase(phrase=f"ssn {SSN}"))),
    "match_text_any": _f(_fc("text", models.MatchTextAny(text_any="refund alice@example.com"))),
    "match_value": _f(_fc("email", models.MatchValue(value="alice@example.com"))),
    "match_value_int_with_key_context": _f(_fc("ssn", models.MatchValue(value=123456789))),
    "match_any": _f(_fc("email", models.MatchAny(any=["x", "alice@example.com"]))),
    "match_except": _f(_fc("email", models.MatchExcept(**{"except": ["alice@example.com"]}))),
    "match_prefix": _f(_fc("text", models.MatchPrefix(prefix=SSN))),
    "match_substring": _f(_fc("text", models.MatchSubstring(substring=SSN))),
    "nested_should": models.Filter(must=[models.Filter(should=[_fc("n", models.MatchValue(value=1)),
                                                               _fc("text", models.MatchText(text=SSN))])]),
    "must_not": models.Filter(must_not=[_fc("text", models.MatchText(text=SSN))]),
    "min_should": models.Filter(min_should=models.MinShould(
        conditions=[_fc("text", models.MatchText(text=SSN))], min_count=1)),
    "nested_condition": _f(models.NestedCondition(nested=models.Nested(
        key="people", filter=_f(_fc("ssn", models.MatchValue(value=SSN)))))),
    "dict_form": {"must": [{"key": "text", "match": {"text": SSN}}]},
}


@pytest.mark.parametrize("form", sorted(PII_FILTERS))
def test_query_filter_matching_on_pii_is_refused(kit, sent, form):
    # A filter went to Qdrant unscreened: MatchText("123-45-6789") on a payload field answers
    # whether a stored point holds that SSN, one guess at a time, whatever the read returns.
    cl = _seeded(kit)
    bob = cl.with_principal(kit.principal("bob", "support"))
    before = len(_records(kit))
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("c", query=V, query_filter=PII_FILTERS[form], limit=2)
    assert ei.value.verdict == "QUERY_REJECTED"
    assert "personal data" in str(ei.value) and "filter_pii" in str(ei.value)
    assert "query_filter" in ei.value.details["filter"]
    assert sent == []
    [entry] = _records(kit)[before:]
    assert entry["verdict"] == "QUERY_REJECTED" and entry["details"]["findings"]
    raw = (kit.tmp / "audit.jsonl").read_text()
    assert SSN not in raw and "alice@example.com" not in raw and "123456789" not in raw


def test_grpc_filter_matching_on_pii_is_refused(kit, sent):
    from qdrant_client import grpc

    cl = _seeded(kit)
    flt = grpc.Filter(must=[grpc.Condition(field=grpc.FieldCondition(key="text", match=grpc.Match(text=SSN)))])
    with pytest.raises(GuardRefusal) as ei:
        cl.scroll("c", scroll_filter=flt, limit=2)
    assert ei.value.verdict == "QUERY_REJECTED"
    assert sent == []


def _formula_with(cond):
    return models.FormulaQuery(formula=models.SumExpression(sum=["$score", models.MultExpression(mult=[0.5, cond])]))


CALLS = {
    "query_points.prefetch": lambda c, f: c.query_points(
        "c", prefetch=models.Prefetch(query=V, filter=f, limit=5), query=models.FusionQuery(fusion="rrf"), limit=2),
    "query_points.nested_prefetch": lambda c, f: c.query_points(
        "c", prefetch=models.Prefetch(prefetch=[models.Prefetch(query=V, filter=f, limit=5)], query=V, limit=5),
        query=models.FusionQuery(fusion="rrf"), limit=2),
    "query_points.formula": lambda c, f: c.query_points(
        "c", prefetch=models.Prefetch(query=V, limit=5), query=_formula_with(f.must[0]), limit=2),
    "query_batch_points.filter": lambda c, f: c.query_batch_points(
        "c", [models.QueryRequest(query=V, limit=2), models.QueryRequest(query=V, filter=f, limit=2)]),
    "query_batch_points.prefetch": lambda c, f: c.query_batch_points(
        "c", [models.QueryRequest(prefetch=models.Prefetch(query=V, filter=f), query=V, limit=2)]),
    "query_points_groups": lambda c, f: c.query_points_groups("c", group_by="source", query=V, query_filter=f),
    "scroll": lambda c, f: c.scroll("c", scroll_filter=f, limit=2),
    "count": lambda c, f: c.count("c", count_filter=f),
    "facet": lambda c, f: c.facet("c", key="source", facet_filter=f),
    "search_matrix_pairs": lambda c, f: c.search_matrix_pairs("c", query_filter=f),
    "search_matrix_offsets": lambda c, f: c.search_matrix_offsets("c", query_filter=f),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_every_read_filter_is_screened(kit, sent, call):
    cl = _seeded(kit)
    bob = cl.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        CALLS[call](bob, PII_FILTERS["match_text"])
    assert ei.value.verdict == "QUERY_REJECTED", call
    assert sent == []
    with pytest.raises(GuardRefusal) as ei:
        CALLS[call](bob, _f(_fc("token", models.MatchValue(value=STRIPE))))
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert sent == []
    assert STRIPE not in (kit.tmp / "audit.jsonl").read_text()
    # A filter on non-personal values goes ahead.
    CALLS[call](bob, _f(_fc("source", models.MatchValue(value="d1"))))
    CALLS[call](bob, _f(_fc("text", models.MatchText(text="refund policy"))))
    assert sent


@pytest.mark.parametrize("setting", ["refuse", "owner", "allow"])
def test_filter_pii_setting(kit, sent, setting):
    cl = _seeded(kit, query={"filter_pii": setting})
    bob = cl.with_principal(kit.principal("bob", "support"))
    flt = PII_FILTERS["match_value"]
    for who, may in ((cl, setting != "refuse"), (bob, setting == "allow")):
        if may:
            who.scroll("c", scroll_filter=flt, limit=2)
            entry = _records(kit)[-1]
            assert entry["verdict"] == "ALLOW"
            assert entry["details"]["filter_pii"] == [{"filter": "scroll_filter.must[0].match.value", "key": "email",
                                                       "match": "MatchValue", "findings": ["EMAIL"]}]
        else:
            with pytest.raises(GuardRefusal) as ei:
                who.scroll("c", scroll_filter=flt, limit=2)
            assert ei.value.verdict == "QUERY_REJECTED"
        # Credentials are refused whatever filter_pii says.
        with pytest.raises(GuardRefusal) as ei:
            who.scroll("c", scroll_filter=_f(_fc("text", models.MatchText(text=f"key {STRIPE}"))), limit=2)
        assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert "alice@example.com" not in (kit.tmp / "audit.jsonl").read_text()


def test_public_collection_filters_pass_through(kit, sent):
    cl = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}))
    create(cl, "pub")
    cl.scroll("pub", scroll_filter=PII_FILTERS["match_value"], limit=2)
    assert sent


@pytest.mark.parametrize("mode", ["enforce", "monitor"])
def test_full_text_match_is_structurally_validated(kit, sent, mode):
    cl = _seeded(kit, query={"mode": mode})
    flt = _f(_fc("text", models.MatchText(text="refund %41%42%43 policy")))
    if mode == "enforce":
        with pytest.raises(GuardRefusal) as ei:
            cl.scroll("c", scroll_filter=flt, limit=2)
        assert ei.value.verdict == "QUERY_REJECTED"
        assert ei.value.details["filter"] == "scroll_filter.must[0].match.text"
        assert ei.value.details["violations"] == [{"kind": "percent_encoding", "position": 7,
                                                   "detail": ei.value.details["violations"][0]["detail"]}]
        assert sent == []
    else:
        cl.scroll("c", scroll_filter=flt, limit=2)
        [scan] = _records(kit)[-1]["details"]["filter_scan"]
        assert scan["filter"] == "scroll_filter.must[0].match.text" and scan["would_reject"]
    # Keyword values are compared, not tokenised like a query: a hex id is a legitimate value.
    cl.scroll("c", scroll_filter=_f(_fc("sha", models.MatchValue(value="9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"))),
              limit=2)
    # query.enabled = false switches the structural checks off, for filters too.
    off = _client(kit, query={"enabled": False})
    off.scroll("c", scroll_filter=flt, limit=2)


def test_async_read_filter_is_screened(kit):
    import asyncio

    from qdrant_guard import AsyncQdrantClient

    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text", "intent": {"enabled": False}}

    async def main():
        cl = AsyncQdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
        await cl.create_collection("c", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        with pytest.raises(GuardRefusal) as ei:
            await cl.query_points("c", query=V, query_filter=PII_FILTERS["match_text"], limit=2)
        assert ei.value.verdict == "QUERY_REJECTED"
        with pytest.raises(GuardRefusal) as ei:
            await cl.count("c", count_filter=_f(_fc("k", models.MatchValue(value=STRIPE))))
        assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
        await cl.close()

    asyncio.run(main())


@pytest.mark.parametrize("method", ["count", "facet", "search_matrix_pairs"])
def test_count_facet_matrix_failing_in_the_store_are_audited_without_the_message(kit, monkeypatch, method):
    import qdrant_client

    cl = _seeded(kit)

    def fail(self, *a, **kw):
        raise Down(_SECRET_MSG)

    monkeypatch.setattr(qdrant_client.QdrantClient, method, fail)
    call = {"count": lambda: cl.count("c"), "facet": lambda: cl.facet("c", key="source"),
            "search_matrix_pairs": lambda: cl.search_matrix_pairs("c")}[method]
    with pytest.raises(Down):
        call()
    first, last = _records(kit)[-2:]
    assert first["verdict"] == "ALLOW" and last["verdict"] == "QDRANT_ERROR"
    assert last["details"]["error"] == "Down"
    assert "123-45-6789" not in (kit.tmp / "audit.jsonl").read_text()


def test_max_chars_caps_every_match_string_before_the_detector_reads_it(kit, sent):
    cl = _seeded(kit, query={"max_chars": 1000})
    with pytest.raises(GuardRefusal) as ei:
        cl.scroll("c", scroll_filter=_f(_fc("id", models.MatchAny(any=["ok", "x" * 5000]))), limit=2)
    assert ei.value.verdict == "QUERY_REJECTED"
    assert ei.value.details == {"filter": "scroll_filter.must[0].match.any[1]", "violations": [
        {"kind": "size_cap", "position": 1000, "detail": "5000 characters > max_chars 1000"}]}
    assert sent == []


@pytest.mark.parametrize("setting", ["refuse", "owner", "allow"])
def test_other_boundaries_may_not_match_on_kept_text(kit, sent, setting):
    # keep_payload_text_in_boundary keeps PII in the stored text for the owner; readers of other
    # boundaries get it redacted, but a match on the field read the kept text: MatchPrefix("123-45-")
    # is no PII to the detector, and answered whether a stored SSN starts so.
    cl = _client(kit, keep_payload_text_in_boundary=True, raw_in_boundary=True, query={"filter_pii": setting})
    cl.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)),
                                       payload={"text": f"employee ssn {SSN}", "source": "d"})])
    bob = cl.with_principal(kit.principal("bob", "support"))
    probes = [_f(_fc("text", models.MatchPrefix(prefix="employee ssn 123-45"))),
              _f(_fc("text", models.MatchSubstring(substring="45-67"))),
              _f(_fc("text", models.MatchText(text="employee"))),
              models.Filter(should=[_fc('"text"', models.MatchValue(value="x"))])]
    for flt in probes:
        if setting == "allow":
            bob.scroll("c", scroll_filter=flt, limit=2)
            continue
        with pytest.raises(GuardRefusal) as ei:
            bob.scroll("c", scroll_filter=flt, limit=2)
        assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
        assert "keep_payload_text_in_boundary" in str(ei.value)
    bob.scroll("c", scroll_filter=_f(_fc("source", models.MatchValue(value="d"))), limit=2)
    got, _ = cl.scroll("c", scroll_filter=probes[0], limit=2)  # the owner reads its own text
    assert [p.id for p in got] == [1]


def test_a_secret_in_a_filter_key_is_refused_and_not_logged(kit, sent):
    cl = _seeded(kit)
    with pytest.raises(GuardRefusal) as ei:
        cl.scroll("c", scroll_filter=_f(_fc(STRIPE, models.MatchValue(value="x"))), limit=2)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert STRIPE not in str(ei.value)
    assert STRIPE not in (kit.tmp / "audit.jsonl").read_text()
    assert sent == []


def test_failed_read_with_fail_closed_false_raises_the_store_error_when_the_log_fails(kit, monkeypatch):
    cl = _client(kit, fail_closed=False)

    def broken(record):
        raise OSError("disk full")

    def fail(self, *a, **kw):
        raise Down("connection reset")

    import qdrant_client

    monkeypatch.setattr(qdrant_client.QdrantClient, "scroll", fail)
    monkeypatch.setattr(cl.guard.audit, "append", broken)
    with pytest.raises(Down):
        cl.scroll("c", limit=2)
