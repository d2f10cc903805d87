"""intent.timeout_s: a classifier other than the built-in one cannot hang a read.

Real local-mode Qdrant and real keys; the classifiers are loaded by ``module:attr`` from this file.
A hung classifier blocks on a threading.Event that the test sets at its end (and a safety timer
sets after a minute, so that code without the time limit ends the test by failing, not hanging).
"""
from __future__ import annotations

import asyncio
import os
import socket
import threading

import numpy as np
import pytest

from guardkit import audit_records, create, hung_calls_released, make_kit, models, unit
from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal, QdrantClient
from qdrant_guard import intent_pool
from qdrant_guard.intent import BuiltinIntentClassifier, IntentResult

RELEASE = threading.Event()
CALLS: list[str] = []
CALLS_LOCK = threading.Lock()


class Hung:
    """Blocks until RELEASE is set, then answers benign."""

    name = "hung"

    def classify(self, text, *, embedding=None):
        with CALLS_LOCK:
            CALLS.append(text)
        RELEASE.wait()
        return IntentResult("benign", 0.9, "released", self.name)


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def hung():
    """Resets the hung classifier; at the end releases every call and waits until none is left
    running, so no test leaves abandoned calls behind for the next."""
    CALLS.clear()
    with hung_calls_released(RELEASE):
        yield


def _policy(**intent):
    return {"class": "PII", "owner": "hr", "readers": ["support"],
            "intent": {"classifier": "test_intent_timeout:Hung", "timeout_s": 0.05, **intent}}


def _client(kit, **intent):
    cl = QdrantClient(":memory:", guard=kit.config({"c": _policy(**intent)}), principal=kit.principal("alice", "hr"))
    create(cl, "c")
    cl.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)))])
    return cl


def _query(cl, text="what is the leave policy?"):
    return cl.query_points("c", query=unit(np.random.default_rng(0)), query_text=text, limit=3)


def test_a_hung_classifier_is_refused_fail_closed_after_timeout_s(kit, hung):
    cl = _client(kit)
    with pytest.raises(GuardRefusal) as ei:
        _query(cl)
    assert ei.value.verdict == "FAIL_CLOSED"
    assert "did not answer within intent.timeout_s = 0.05 s" in ei.value.details["error"]
    assert not RELEASE.is_set()  # refused while the classifier was still blocked, not after it
    rec = audit_records(kit)[-1]
    assert rec["verdict"] == "FAIL_CLOSED" and "intent.timeout_s" in rec["details"]["error"]


def test_a_hung_classifier_under_fail_closed_false_goes_ahead_and_the_entry_says_why(kit, hung):
    cl = _client(kit, fail_closed=False)
    assert len(_query(cl).points) == 1
    assert not RELEASE.is_set()
    rec = audit_records(kit)[-1]
    assert rec["verdict"] == "ALLOW"
    assert "did not answer within intent.timeout_s" in rec["details"]["intent_error"]
    assert "intent" not in rec["details"]


def test_hung_calls_are_bounded_and_past_the_bound_refused_without_calling_the_classifier(kit, hung):
    cl = _client(kit)
    for i in range(intent_pool.MAX_ABANDONED_CALLS):
        with pytest.raises(GuardRefusal) as ei:
            _query(cl, f"query {i}")
        assert "did not answer within" in ei.value.details["error"]
    # A refused call's worker may not have reached the classifier yet on a loaded machine (the
    # refusal comes after timeout_s whether it started or not): wait until all of them have.
    started = threading.Event()
    for _ in range(500):
        with CALLS_LOCK:
            if len(CALLS) >= intent_pool.MAX_ABANDONED_CALLS:
                break
        started.wait(0.01)
    assert len(CALLS) == intent_pool.MAX_ABANDONED_CALLS
    assert intent_pool._POOL.abandoned() == intent_pool.MAX_ABANDONED_CALLS
    with pytest.raises(GuardRefusal) as ei:
        _query(cl, "one more")
    assert ei.value.verdict == "FAIL_CLOSED"
    assert "16 earlier calls of it timed out and are still running" in ei.value.details["error"]
    started.wait(0.2)  # time for a worker that was wrongly started to reach the classifier
    assert len(CALLS) == intent_pool.MAX_ABANDONED_CALLS  # no thread was spent on it
    # Another classifier of the process is not refused for this one's hung calls.
    other = QdrantClient(":memory:", guard=kit.config({"c": _policy(classifier="test_intent_timeout:Quick")}),
                         principal=kit.principal("alice", "hr"))
    create(other, "c")
    _query(other)
    assert audit_records(kit)[-1]["details"]["intent"]["reasoning"] == "quick"
    # Once the hung calls return, their threads serve again.
    RELEASE.set()
    waiter = threading.Event()
    for _ in range(3000):
        if intent_pool._POOL.abandoned() == 0:
            break
        waiter.wait(0.01)
    assert intent_pool._POOL.abandoned() == 0
    assert len(_query(cl, "after").points) == 1
    assert audit_records(kit)[-1]["details"]["intent"]["reasoning"] == "released"


def test_the_async_client_applies_the_same_limit(kit, hung):
    async def main():
        cl = AsyncQdrantClient(":memory:", guard=kit.config({"c": _policy()}), principal=kit.principal("alice", "hr"))
        await cl.create_collection("c", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        try:
            with pytest.raises(GuardRefusal) as ei:
                await cl.query_points("c", query=unit(np.random.default_rng(0)), query_text="leave policy", limit=3)
            return ei.value
        finally:
            await cl.close()

    refusal = asyncio.run(main())
    assert refusal.verdict == "FAIL_CLOSED" and "intent.timeout_s" in refusal.details["error"]
    assert not RELEASE.is_set()


class Raising:
    name = "raising"

    def classify(self, text, *, embedding=None):
        raise TimeoutError("the classifier's own timeout")


def test_a_classifier_raising_timeouterror_itself_is_reported_as_its_own_error(kit):
    # The wait for the worker raises TimeoutError too; the classifier's own must not be taken for it.
    cl = _client(kit, classifier="test_intent_timeout:Raising", timeout_s=5.0)
    with pytest.raises(GuardRefusal) as ei:
        _query(cl)
    assert ei.value.verdict == "FAIL_CLOSED"
    assert "the classifier's own timeout" in ei.value.details["error"]


def test_the_builtin_classifier_runs_inline_on_the_callers_thread(kit, monkeypatch):
    # Not a fix: it guards the fast path (no thread hop for a ~300 us classification).
    seen: list[int] = []
    original = BuiltinIntentClassifier.classify

    def recording(self, text, *, embedding=None):
        seen.append(threading.get_ident())
        return original(self, text, embedding=embedding)

    monkeypatch.setattr(BuiltinIntentClassifier, "classify", recording)
    cl = QdrantClient(":memory:", guard=kit.config({"c": {"class": "PII", "owner": "hr", "intent": {"timeout_s": 0.001}}}),
                      principal=kit.principal("alice", "hr"))
    create(cl, "c")
    _query(cl)
    assert seen == [threading.get_ident()]


def test_the_llm_classifier_takes_its_timeout_from_the_policy(kit, monkeypatch):
    # A listening socket nobody accepts on: the connection succeeds, no reply ever comes.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        monkeypatch.setenv("QDRANT_GUARD_INTENT_BASE_URL", f"http://127.0.0.1:{silent.getsockname()[1]}/v1")
        monkeypatch.setenv("QDRANT_GUARD_INTENT_MODEL", "m")
        cl = QdrantClient(":memory:", guard=kit.config({"c": {"class": "PII", "owner": "hr", "intent": {
            "classifier": "llm", "timeout_s": 0.2}}}), principal=kit.principal("alice", "hr"))
        create(cl, "c")
        with pytest.raises(GuardRefusal) as ei:
            _query(cl)
    finally:
        silent.close()
    assert ei.value.verdict == "FAIL_CLOSED"
    # Whichever bound fired first (the wait for the worker, or the client's own socket timeout),
    # it is the policy's 0.2 s and not the client's default of 5 s.
    assert "0.2 s" in ei.value.details["error"], ei.value.details["error"]


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), 7200, "5", True])
def test_timeout_s_out_of_range_is_refused_at_load(kit, bad):
    with pytest.raises(ConfigError) as ei:
        kit.config({"c": {"class": "PII", "owner": "hr", "intent": {"timeout_s": bad}}})
    assert "collections.c.intent.timeout_s" in str(ei.value)


class Quick:
    name = "quick"

    def classify(self, text, *, embedding=None):
        return IntentResult("benign", 0.9, "quick", self.name)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_runs_classifier_calls_on_workers_of_its_own():
    # The parent's pool has an idle worker after this; a child inherits the count but not the
    # thread, and without a reset at fork its calls waited for a worker that does not exist.
    assert intent_pool.classify_with_timeout(Quick(), "warm", 5.0).label == "benign"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (child)
        try:
            out = intent_pool.classify_with_timeout(Quick(), "child", 5.0).label
        except BaseException as exc:
            out = repr(exc)
        os.write(w, out.encode()[:1000])
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        got = fh.read().decode()
    os.waitpid(pid, 0)
    assert got == "benign"
