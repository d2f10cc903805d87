"""Review of the query-side defences: structural scan, intent classification and how reads apply them.

Real local-mode Qdrant, real keys; custom classifiers are loaded by ``module:attr`` from this file.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from guardkit import audit_records, create, make_kit, models, unit
from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.intent import IntentResult


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _client(kit, **policy):
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text"}
    pol.update(policy)
    cl = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(cl, "c")
    return cl


_records = audit_records


# -- intent: results outside the classifier contract --------------------------------------------

class _Fixed:
    """A classifier that returns one fixed (possibly out-of-contract) result."""

    name = "fixed"
    label = "adversarial"
    confidence: object = 0.9
    reasoning: object = "r"

    def classify(self, text, *, embedding=None):
        return IntentResult(self.label, self.confidence, self.reasoning, self.name)


class NoneConfidence(_Fixed):
    confidence = None


class TextConfidence(_Fixed):
    confidence = "0.99"


class NegativeConfidence(_Fixed):
    confidence = -1.0


class NanConfidence(_Fixed):
    label = "benign"
    confidence = math.nan


class AboveOneConfidence(_Fixed):
    label = "benign"
    confidence = 7.0


BROKEN_RESULTS = ["NoneConfidence", "TextConfidence", "NegativeConfidence", "NanConfidence", "AboveOneConfidence"]


@pytest.mark.parametrize("cls", BROKEN_RESULTS)
def test_out_of_contract_confidence_fails_closed(kit, cls):
    # IntentResult.confidence is a probability in [0, 1]; a classifier that returns anything else is
    # broken, and a broken classifier must be refused as FAIL_CLOSED (audited), never crash the call
    # with a TypeError nor pass an adversarial label as "below min_confidence".
    cl = _client(kit, intent={"classifier": f"test_review_query:{cls}"})
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("c", query=unit(np.random.default_rng(0)), query_text="hello there", limit=3)
    assert ei.value.verdict == "FAIL_CLOSED"
    assert "confidence" in ei.value.details["error"]
    last = _records(kit)[-1]
    assert last["op"] == "query_points" and last["verdict"] == "FAIL_CLOSED"


@pytest.mark.parametrize("cls", BROKEN_RESULTS)
def test_out_of_contract_confidence_with_fail_open_goes_on_audited(kit, cls):
    cl = _client(kit, intent={"classifier": f"test_review_query:{cls}", "fail_closed": False})
    cl.query_points("c", query=unit(np.random.default_rng(0)), query_text="hello there", limit=3)
    last = _records(kit)[-1]
    assert last["op"] == "query_points" and last["verdict"] == "ALLOW"
    assert "confidence" in last["details"]["intent_error"]


# -- noise_queries and a models.Document query without embedder= ---------------------------------

@pytest.fixture()
def sent_queries(monkeypatch):
    """The ``query`` argument of every call that reaches the real (unguarded) query_points."""
    import qdrant_client

    sent = []
    original = qdrant_client.QdrantClient.query_points

    def recording(self, *a, **kw):
        sent.append(kw.get("query"))
        return original(self, *a, **kw)

    monkeypatch.setattr(qdrant_client.QdrantClient, "query_points", recording)
    return sent


def test_document_query_is_not_sent_unnoised_when_noise_queries_applies(kit, sent_queries):
    # noise_queries: "Noise query vectors before they reach Qdrant, for every principal not allowed
    # raw vectors". Without embedder= the guard handed the Document to qdrant-client, whose
    # inference (fastembed locally, Qdrant's on a server) computed an exact, un-noised query vector.
    cl = _client(kit, noise_queries=True, intent={"enabled": False})
    bob = cl.with_principal(kit.principal("bob", "support"))
    v = unit(np.random.default_rng(0))
    bob.query_points("c", query=v, limit=3)
    assert not np.allclose(sent_queries[-1], v)  # a raw vector is noised
    before = len(sent_queries)
    with pytest.raises(Exception) as ei:
        bob.query_points("c", query=models.Document(text="refund policy", model="m"), limit=3)
    assert "embedder=" in str(ei.value)
    assert len(sent_queries) == before  # nothing reached qdrant-client


# -- LLM classifier: every malformed reply is an IntentClassifierError ----------------------------

@pytest.fixture()
def llm_server():
    from test_intent_llm import ScriptedServer

    srv = ScriptedServer()
    yield srv
    srv.close()


@pytest.mark.parametrize("confidence", ["1" + "0" * 400, "-" + "9" * 400])
def test_llm_reply_with_a_huge_integer_confidence_is_a_classifier_error(llm_server, confidence):
    # docs/intent.md: "Every deviation raises IntentClassifierError"; a JSON integer too large for a
    # float made math.isfinite raise OverflowError instead.
    from qdrant_guard.intent import IntentClassifierError, LLMIntentClassifier

    llm_server.queue('{"intent": "benign", "confidence": ' + confidence + ', "reasoning": "r"}')
    clf = LLMIntentClassifier(base_url=llm_server.base_url, model="m", timeout_s=5)
    with pytest.raises(IntentClassifierError, match="confidence"):
        clf.classify("hello")


@pytest.mark.parametrize("where", ["query", "nearest", "prefetch"])
def test_image_query_is_not_sent_unnoised_when_noise_queries_applies(kit, sent_queries, where):
    # An image is embedded into a dense vector by inference, exactly like a Document's text: under
    # noise_queries it would reach Qdrant as an exact query vector. The guard cannot embed images.
    cl = _client(kit, noise_queries=True, intent={"enabled": False})
    bob = cl.with_principal(kit.principal("bob", "support"))
    image = models.Image(image="https://example.org/x.png", model="m")
    args = {"query": dict(query=image), "nearest": dict(query=models.NearestQuery(nearest=image)),
            "prefetch": dict(prefetch=models.Prefetch(query=image), query=models.FusionQuery(fusion="rrf"))}[where]
    with pytest.raises(Exception) as ei:
        bob.query_points("c", limit=3, **args)
    assert "Image" in str(ei.value) and "noise_queries" in str(ei.value)
    assert sent_queries == []
    # Inside the owner boundary (raw_in_boundary) queries are not noised: nothing to refuse where
    # the policy lets image queries through (query.allow_images).
    cl2 = _client(kit, noise_queries=True, raw_in_boundary=True, intent={"enabled": False},
                  query={"allow_images": True})
    with pytest.raises(ImportError):  # qdrant-client's own inference (fastembed is not installed)
        cl2.query_points("c", limit=3, **args)


# -- require_text and query_text next to a top-level models.Document -----------------------------

class _Embedder:
    def __call__(self, texts):
        rng = np.random.default_rng(len(texts))
        return [unit(rng) for _ in texts]


def _document_client(kit, **extra):
    """An owner client of a PII collection "c" with an embedder (for Document queries), and a raw
    query vector."""
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text",
           "intent": {"enabled": False}, **extra}
    cl = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"),
                      embedder=_Embedder())
    create(cl, "c")
    return cl, unit(np.random.default_rng(1))


def test_require_text_refuses_a_raw_prefetch_vector_behind_a_document(kit, sent_queries):
    # README: TEXT_REQUIRED is "a raw query vector anywhere in the query (prefetches, ...) without
    # query_text= where the policy requires text". A benign top-level Document carried a raw prefetch
    # vector (which picks the candidates) past the rule.
    cl, raw = _document_client(kit, query={"require_text": True})
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("c", query=models.Document(text="refund policy", model="m"),
                        prefetch=models.Prefetch(query=raw, limit=20), limit=3)
    assert ei.value.verdict == "TEXT_REQUIRED"
    assert "prefetch.query" in str(ei.value)
    assert sent_queries == []
    # With the text of the raw vector given, the query goes ahead; a Document alone needs none.
    cl.query_points("c", query=models.Document(text="refund policy", model="m"),
                    prefetch=models.Prefetch(query=raw, limit=20), query_text="refund policy", limit=3)
    cl.query_points("c", query=models.Document(text="refund policy", model="m"), limit=3)


def test_query_text_next_to_a_document_is_checked_too(kit, sent_queries):
    # query_text= is the text of the raw vectors next to the Document: it must pass the same checks,
    # not be dropped because the Document's text was checked instead.
    cl, raw = _document_client(kit)
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("c", query=models.Document(text="refund policy", model="m"),
                        prefetch=models.Prefetch(query=raw, limit=20),
                        query_text="salary " * 40, limit=3)
    assert ei.value.verdict == "QUERY_REJECTED"
    assert "repetition" in {v["kind"] for v in ei.value.details["violations"]}
    assert sent_queries == []


# -- max_chars is checked first -------------------------------------------------------------------

def test_max_chars_is_checked_before_the_text_is_scanned_or_logged(kit, sent_queries):
    # README: "65,536-character cap checked first". The whole oversized text was run through the
    # PII detector (about 1.5 s per MB of base64-like text) and its redaction written into the
    # refusal's audit entry before the cap refused it.
    cl = _client(kit, intent={"enabled": False}, query={"max_chars": 1000})
    text = "MTIzLTQ1LTY3ODk " * 20_000  # 320,000 characters
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("c", query=unit(np.random.default_rng(0)), query_text=text, limit=3)
    assert ei.value.verdict == "QUERY_REJECTED"
    assert [v["kind"] for v in ei.value.details["violations"]] == ["size_cap"]
    assert "max_chars 1000" in str(ei.value)
    raw = (kit.tmp / "audit.jsonl").read_text().splitlines()[-1]
    assert len(raw) < 10_000
    assert sent_queries == []


def _trickled_call_is_abandoned(head: bytes, trickled: bytes, delay: float) -> None:
    """A local server sends ``head`` at once, then ``trickled`` one byte per ``delay`` seconds; a
    classifier with timeout_s=0.5 must give up within 3 x timeout_s."""
    import socket
    import threading
    import time

    from qdrant_guard.intent import IntentClassifierError, LLMIntentClassifier

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    stop = threading.Event()

    def serve():
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            if head:
                conn.sendall(head)
            for i in range(len(trickled)):
                if stop.wait(delay):
                    return
                try:
                    conn.sendall(trickled[i:i + 1])
                except OSError:
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    clf = LLMIntentClassifier(base_url=f"http://127.0.0.1:{srv.getsockname()[1]}/v1", model="m", timeout_s=0.5)
    t0 = time.monotonic()
    try:
        with pytest.raises(IntentClassifierError, match="no complete response within"):
            clf.classify("hello")
        # A functional bound (the trickle would last 10 s or more), not a speed measurement.
        assert time.monotonic() - t0 < 3 * 0.5
    finally:
        stop.set()
        thread.join(10)
        srv.close()


def test_llm_trickling_server_is_abandoned_after_about_twice_the_timeout():
    # docs/intent.md: "a server that trickles bytes holds it for at most about twice timeout_s".
    # resp.read(65536) waited for the whole Content-Length, one byte per socket timeout: a
    # 110-byte reply at one byte per 0.3 s held a timeout_s=1 call for 33 s.
    content = json.dumps({"intent": "benign", "confidence": 0.9, "reasoning": "r"})
    body = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    _trickled_call_is_abandoned(head, body, 0.2)


def test_llm_server_trickling_its_headers_is_abandoned_after_about_twice_the_timeout():
    # urlopen reads the status line and headers with the per-read socket timeout only: a server
    # trickling them held the call for (header bytes x delay), far past 2 x timeout_s.
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 30 + b"\r\n"
    _trickled_call_is_abandoned(b"", head, 0.1)


def test_require_text_holds_with_structural_validation_off(kit, sent_queries):
    # query.require_text: "Refuse a raw query vector that comes without query_text= (so text checks
    # cannot be skipped)"; query.enabled only switches the structural scan. With enabled = false the
    # rule was silently dropped, and a raw vector skipped intent classification and redaction.
    cl = _client(kit, query={"enabled": False, "require_text": True})
    v = unit(np.random.default_rng(0))
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("c", query=v, limit=1)
    assert ei.value.verdict == "TEXT_REQUIRED"
    assert sent_queries == []
    cl.query_points("c", query=v, query_text="refund policy", limit=1)


def test_encoded_payloads_off_keeps_character_checks_as_documented(kit):
    # The policy reference said encoded_payloads covered "control, invisible and bidi characters,
    # invalid UTF-8 and lone surrogates" too; the scan always checks those (scan_query's
    # encoded_payloads: "check escapes, character references and blobs"). The reference now says so.
    cl = _client(kit, query={"encoded_payloads": False}, intent={"enabled": False})
    v = unit(np.random.default_rng(0))
    cl.query_points("c", query=v, query_text="%41%42 x", limit=1)  # escapes: off
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("c", query=v, query_text="hello\u200bworld", limit=1)
    assert [x["kind"] for x in ei.value.details["violations"]] == ["invisible_char"]


# -- load_classifier: a module that fails while importing ------------------------------------------

@pytest.mark.parametrize("body", ["raise RuntimeError('no model server configured')", "def broken(:\n"])
def test_load_classifier_reports_a_module_failing_at_import_as_valueerror(tmp_path, monkeypatch, body):
    # load_classifier documents ValueError when the spec "cannot be imported"; only ImportError and
    # AttributeError were turned into it, so a module raising anything else (or a SyntaxError)
    # escaped as that type, without naming the spec.
    from qdrant_guard.intent import load_classifier

    (tmp_path / "qg_review_broken_clf.py").write_text(body + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="qg_review_broken_clf:Clf"):
        load_classifier("qg_review_broken_clf:Clf")
