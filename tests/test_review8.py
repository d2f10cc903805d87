"""Review 8 of the changes merged on 2026-12-04: the intent classifier pool's per-classifier bound,
batch operations naming an empty id list, and the audit of a failed read of a collection's layout.

Real local-mode Qdrant and real keys; classifiers are loaded by ``module:attr`` from this file. A
hung classifier blocks on a threading.Event that the test sets at its end (a safety timer sets it
after a minute, so that code without the bound ends the test by failing, not hanging).
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from guardkit import audit_records, create, hung_calls_released, make_kit, models, snapshot, unit
from qdrant_guard import GuardRefusal, QdrantClient, UnsupportedWriteError
from qdrant_guard import intent_pool
from qdrant_guard.intent import IntentResult

RELEASE = threading.Event()


class Hung:
    """A classifier class (each client that loads it makes its own instance) that blocks until
    RELEASE is set."""

    name = "review8-hung"

    def classify(self, text, *, embedding=None):
        RELEASE.wait()
        return IntentResult("benign", 0.9, "released", self.name)


class Quick:
    name = "review8-quick"

    def classify(self, text, *, embedding=None):
        return IntentResult("benign", 0.9, "quick", self.name)


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def hung():
    with hung_calls_released(RELEASE):
        yield


def _client(kit, classifier, timeout_s):
    pol = {"class": "PII", "owner": "hr", "intent": {"classifier": classifier, "timeout_s": timeout_s}}
    cl = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(cl, "c")
    cl.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)))])
    return cl


def _query(cl, text="what is the leave policy?"):
    return cl.query_points("c", query=unit(np.random.default_rng(0)), query_text=text, limit=3)


def test_a_hung_classifier_loaded_by_two_clients_leaves_workers_to_other_classifiers(kit, hung):
    # The bound on hung calls was kept per classifier *instance* (id(clf)). A "module:Class" spec
    # gives each client its own instance, so two clients of the same hung classifier held all 32
    # workers (16 each) and every other classifier of the process then failed ("all 32 classifier
    # workers were busy"), against the documented "a hung one leaves at least 16 to the others".
    for _ in range(2):
        cl = _client(kit, "test_review8:Hung", 0.02)
        for i in range(intent_pool.MAX_ABANDONED_CALLS):
            with pytest.raises(GuardRefusal) as ei:
                _query(cl, f"query {i}")
            assert ei.value.verdict == "FAIL_CLOSED"
    assert intent_pool._POOL.abandoned() <= intent_pool.MAX_ABANDONED_CALLS
    other = _client(kit, "test_review8:Quick", 30.0)
    assert len(_query(other).points) == 1
    rec = audit_records(kit)[-1]
    assert rec["verdict"] == "ALLOW" and rec["details"]["intent"]["reasoning"] == "quick"


def _owner(kit):
    pol = {"class": "PII", "owner": "hr", "raw_in_boundary": True, "intent": {"enabled": False}}
    cl = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(cl, "c")
    cl.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"a": 1})])
    return cl


@pytest.mark.parametrize("operation", [
    models.SetPayloadOperation(set_payload=models.SetPayload(payload={"z": 1}, points=[])),
    models.DeletePayloadOperation(delete_payload=models.DeletePayload(keys=["a"], points=[])),
    models.DeleteOperation(delete=models.PointIdsList(points=[])),
    models.DeleteVectorsOperation(delete_vectors=models.DeleteVectors(points=[], vector=[""])),
], ids=["SetPayload", "DeletePayload", "Delete", "DeleteVectors"])
def test_a_batch_operation_naming_an_empty_id_list_is_refused_before_anything_is_written(kit, operation):
    # The id check passed an empty id list through unchanged: Qdrant (local mode as the server)
    # applies the operations before it, then fails on it ("Empty update request"), so the
    # upsert below was stored and the call raised: half applied.
    owner = _owner(kit)
    before = snapshot(owner, "c")
    n = len(audit_records(kit))
    upsert = models.UpsertOperation(upsert=models.PointsList(points=[
        models.PointStruct(id=2, vector=unit(np.random.default_rng(2)))]))
    with pytest.raises(UnsupportedWriteError, match="names no point"):
        owner.batch_update_points("c", [upsert, operation])
    assert snapshot(owner, "c") == before
    assert [e["verdict"] for e in audit_records(kit)[n:]] == ["UNSUPPORTED_WRITE"]


@pytest.mark.parametrize("call, at", [
    (lambda c, p: c.upsert("gone", [p]), {}),
    (lambda c, p: c.upload_points("gone", [p]), {}),
    # A batch's entry also names the operation being checked (update_operations[0]).
    (lambda c, p: c.batch_update_points("gone", [models.UpsertOperation(upsert=models.PointsList(points=[p]))]),
     {"operation": 0}),
], ids=["upsert", "upload_points", "batch_update_points"])
def test_a_write_whose_collection_layout_cannot_be_read_is_audited(kit, call, at):
    # update_vectors, delete_vectors and the payload methods audit a failed look-up before their
    # decision (QDRANT_ERROR); an upsert's look-up of the collection's layout failed with no
    # entry at all, so a write attempt on a sensitive collection left no trace.
    pol = {"class": "PII", "owner": "hr", "raw_in_boundary": True, "intent": {"enabled": False}}
    cl = QdrantClient(":memory:", guard=kit.config({"gone": pol}), principal=kit.principal("alice", "hr"))
    point = models.PointStruct(id=1, vector=unit(np.random.default_rng(1)))
    with pytest.raises(ValueError, match="not found"):
        call(cl, point)
    (entry,) = audit_records(kit)
    assert entry["verdict"] == "QDRANT_ERROR" and entry["collection"] == "gone"
    assert entry["details"] == {"method": "get_collection", "error": "ValueError", **at}


def test_a_worker_that_could_not_start_leaves_no_phantom_idle_worker(monkeypatch):
    # A call whose worker thread could not start left its (cancelled) task queued; the next worker
    # skipped it and counted itself idle once more, so the pool believed a worker idle that was
    # busy: a later call waited for it instead of starting one, and failed ("all workers busy")
    # with a worker slot unused. A private pool: 2 workers, at most 2 calls per classifier.
    pool = intent_pool._ClassifierPool(2, 2)
    release = threading.Event()
    safety = threading.Timer(60.0, release.set)
    safety.daemon = True
    safety.start()

    def refuse_to_start(self):
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as m:
        m.setattr(threading.Thread, "start", refuse_to_start)
        with pytest.raises(intent_pool.IntentClassifierError, match="no worker thread could be started"):
            pool.call("a", lambda: "never", 5.0, "a")
    assert pool.call("a", lambda: "ok", 30.0, "a") == "ok"
    idle = threading.Event()
    for _ in range(3000):  # the worker counts itself idle just after handing back the result
        with pool._lock:
            if pool._idle >= pool._threads:
                break
        idle.wait(0.01)
    try:
        with pytest.raises(intent_pool.IntentClassifierError, match="did not answer"):
            pool.call("hung", release.wait, 0.05, "hung")  # takes the one worker, for good
        assert pool.call("quick", lambda: "quick", 10.0, "quick") == "quick"
    finally:
        safety.cancel()
        release.set()
