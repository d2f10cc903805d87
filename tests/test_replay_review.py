"""Review of `audit replay`: every query text an audit entry holds is replayed, or the entry is
reported as not replayed, with the texts that could not be.

Each test pins a defect found in review (it failed before the fix next to it), unless it says
it guards behaviour that already held.
"""
from __future__ import annotations

import io
import json

import pytest
from qdrant_client.http import models

from guardkit import Recorder, audit_records, create, make_kit, replay_policy_file
from qdrant_guard import QdrantClient
from qdrant_guard.errors import GuardRefusal
from qdrant_guard.replay import replay_log

SHORT = "short query"
LONG = "a much longer query with many words in it"
STRICT = "[collections.docs.query]\nmax_tokens = 4\n"  # LONG is rejected under it, SHORT is not


def _client(kit, query: dict | None = None) -> QdrantClient:
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}, **({"query": query} if query else {})}
    c = QdrantClient(":memory:", guard=kit.config({"docs": pol}), principal=kit.principal("alice", "hr"),
                     embedder=Recorder())
    create(c, "docs")
    return c


def _doc(text: str) -> models.Document:
    return models.Document(text=text, model="hashing")


def _replay(kit, extra: str = "") -> str:
    out = io.StringIO()
    assert replay_log(str(kit.tmp / "audit.jsonl"), str(replay_policy_file(kit, extra)), out=out) == 0, out.getvalue()
    return out.getvalue()


def test_replay_covers_the_document_text_next_to_query_text(tmp_path):
    # Only the top-level query_text (the query_text= one) was replayed; the Document's text in
    # query_texts was not, so a Document text the new policy rejects showed as "no change".
    kit = make_kit(tmp_path)
    c = _client(kit)
    c.query_points("docs", query=_doc(LONG), query_text=SHORT)
    c.close()
    (rec,) = [r for r in audit_records(kit) if r["op"] == "query_points"]
    assert [t["from"] for t in rec["details"]["query_texts"]] == ["query_text", "query"]
    text = _replay(kit, STRICT)
    assert "replayed 1 logged queries (2 texts)" in text, text
    assert f"newly_blocked  QUERY_REJECTED        1   e.g. {LONG!r}" in text, text


def test_replay_covers_every_request_of_a_batch(tmp_path):
    # A query_batch_points entry keeps its texts per request (details.requests[i].query_text): it
    # was counted "without text" and never replayed.
    kit = make_kit(tmp_path)
    c = _client(kit)
    c.query_batch_points("docs", requests=[models.QueryRequest(query=_doc(SHORT)),
                                           models.QueryRequest(query=_doc(LONG))])
    c.close()
    text = _replay(kit, STRICT)
    assert "replayed 1 logged queries (2 texts)" in text and "0 without text" in text, text
    assert f"newly_blocked  QUERY_REJECTED        1   e.g. {LONG!r}" in text, text


def test_an_entry_with_only_some_texts_replayable_is_listed_not_counted(tmp_path):
    # A batch whose first request's text was redacted in the log and whose second was not: it was
    # counted "without text"; replaying only the second would count it as replayed. It is listed
    # as not replayed, naming the text that could not be and why.
    kit = make_kit(tmp_path)
    c = _client(kit)
    c.query_batch_points("docs", requests=[models.QueryRequest(query=_doc("write to alice@example.com now")),
                                           models.QueryRequest(query=_doc(LONG))])
    c.query_points("docs", query=_doc(SHORT))
    c.close()
    lines = (kit.tmp / "audit.jsonl").read_text().splitlines()
    line, seq = next((i, json.loads(x)["seq"]) for i, x in enumerate(lines, 1)
                     if json.loads(x)["record"]["op"] == "query_batch_points")
    text = _replay(kit, STRICT)
    assert "replayed 1 logged queries (1 texts)" in text, text
    assert "1 with only some texts replayable" in text and "NOT REPLAYED: 1 entries" in text, text
    assert (f"  line {line} (seq {seq}) query_batch_points: not replayed: requests[0].query_text (redacted); "
            "replayable alone: requests[1].query_text\n") in text, text
    assert "newly_blocked" not in text, text


def test_a_refused_second_text_is_newly_allowed_under_a_looser_policy(tmp_path):
    # Guards behaviour that already held (the refusal's top-level query_text is the refused one).
    kit = make_kit(tmp_path)
    c = _client(kit, {"max_tokens": 4})
    with pytest.raises(GuardRefusal, match="QUERY_REJECTED"):
        c.query_points("docs", query=_doc(LONG), query_text=SHORT)
    c.close()
    text = _replay(kit)
    assert "replayed 1 logged queries (2 texts)" in text, text
    assert f"newly_allowed  QUERY_REJECTED        1   e.g. {LONG!r}" in text, text


def test_a_refusal_for_another_reason_than_the_text_is_not_newly_allowed(tmp_path):
    # A Document query without an embedder under noise_queries is refused QUERY_REJECTED after its
    # text passed the checks, and the entry holds that text: replay took the verdict for the text's,
    # so the very same policy reported it "newly_allowed".
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "noise_queries": True}
    c = QdrantClient(":memory:", guard=kit.config({"docs": pol}), principal=kit.principal("alice", "hr"))
    create(c, "docs")
    with pytest.raises(GuardRefusal, match="noise_queries"):
        c.query_points("docs", query=_doc(SHORT))
    c.close()
    (rec,) = [r for r in audit_records(kit) if r["op"] == "query_points"]
    assert rec["verdict"] == "QUERY_REJECTED" and rec["details"]["query_text"] == SHORT
    # The same text checks (replay re-runs only those, so noise_queries does not matter to it).
    text = _replay(kit)
    assert "replayed 1 logged queries" in text and "no change" in text, text
    # Under a policy whose text checks reject it, the text is newly blocked (checked before the embed).
    text = _replay(kit, STRICT.replace("max_tokens = 4", "max_tokens = 1"))
    assert f"newly_blocked  QUERY_REJECTED        1   e.g. {SHORT!r}" in text, text


def test_a_bracketed_word_of_the_query_itself_is_not_taken_for_a_redaction(tmp_path):
    # Any "[WORD]" counted as a redaction placeholder, so "[TODO]" in a query skipped it as
    # redacted; only the placeholders redaction writes ([EMAIL], [SSN], ...) are.
    kit = make_kit(tmp_path)
    c = _client(kit)
    c.query_points("docs", query=_doc("[TODO] list every open item"))
    c.query_points("docs", query=_doc("write to alice@example.com now"))
    c.close()
    text = _replay(kit, STRICT)
    assert "replayed 1 logged queries (1 texts)" in text and "skipped: 1 with redacted text" in text, text
    assert "newly_blocked  QUERY_REJECTED        1   e.g. '[TODO] list every open item'" in text, text


def test_the_text_fields_are_checked_only_on_query_records(tmp_path):
    # Guards the shape checks added with the texts above: a record of another operation is not
    # read for texts, so its fields of those names are not held against it as "unreadable".
    kit = make_kit(tmp_path)
    log = kit.tmp / "audit.jsonl"
    rows = [{"record": {"op": "upsert", "collection": "docs", "details": {"requests": 3, "query_text": 1}}},
            {"record": {"op": "query_batch_points", "collection": "docs", "details": {"requests": [{"query_text": 1}]}}},
            {"record": {"op": "query_points", "collection": "docs", "details": {"query_texts": [{"query_text": SHORT}]}}}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = io.StringIO()
    assert replay_log(str(log), str(replay_policy_file(kit)), out=out, mode="unverified") == 1
    assert "replayed 1 logged queries (1 texts)" in out.getvalue() and "1 unreadable" in out.getvalue(), out.getvalue()
