"""The three survivors mutation pass 24 left open (branch h-open24, 2026-12-06; see
docs/security-testing.md, "Mutation pass 24" and the entry after it)."""
from __future__ import annotations

import uuid

import pytest

from qdrant_guard.errors import GuardRefusal
from tests.guardkit import QdrantClient, RawClient, audit_records, make_kit, models

KEY = "vsu|p|c|16"

# --- budget_units.REDIS_ADMIT_UNITS: the TTL of a key whose clock ran ahead ----------------------


def test_redis_units_ttl_covers_the_lead_of_the_keys_clock(redis_url):
    # After an admission at 20 000, one at 10 000 runs at 20 000 (time never runs back): its
    # newest id leaves the 1 s window when the caller's clock reaches 20 001, 10 001 s of the
    # caller's time later, so both keys must live 10 001 000 ms; the lead scaled by 999 would
    # end them 10 s early, dropping ids still in the window (a caller behind is charged less).
    import redis

    from qdrant_guard.budget import RedisBudgetStore
    from qdrant_guard.budget_units import redis_names

    prefix = f"qg:test:{uuid.uuid4().hex}:"
    store = RedisBudgetStore(redis_url, prefix=prefix)
    assert store.admit_units(KEY, [([("a", 1)], -1)], cap=5, window_s=1.0, now=20_000.0) == ([True], 0, 1)
    assert store.admit_units(KEY, [([("b", 1)], -1)], cap=5, window_s=1.0, now=10_000.0) == ([True], 1, 2)
    client = redis.Redis.from_url(redis_url)
    ttls = [client.pttl(name) for name in redis_names(prefix, KEY)]
    assert all(10_000_000 < t <= 10_001_000 for t in ttls), ttls  # the window plus the lead, in ms, less the ms since


# --- score_charge: a charged collection with no dense vector -------------------------------------

POL = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
       "diversity": {"max_vectors": 1, "charge_scores": True, "max_source_fraction": 1.0, "min_unique_sources": 1}}


@pytest.fixture
def no_dense(tmp_path):
    """bob@support's view of two charged PROPRIETARY collections written before the guard (the
    guard refuses sparse vectors on them): ``sp`` sparse-only, ``none`` with no vector at all."""
    kit = make_kit(tmp_path)
    raw = RawClient(path=str(tmp_path / "db"))
    raw.create_collection("sp", vectors_config={}, sparse_vectors_config={"s": models.SparseVectorParams()})
    raw.upsert("sp", [models.PointStruct(id=i, vector={"s": models.SparseVector(indices=[i, 9], values=[1.0, 0.5])},
                                         payload={"source": f"s{i}"}) for i in range(4)])
    raw.create_collection("none", vectors_config={})
    raw.upsert("none", [models.PointStruct(id=i, vector={}, payload={"source": f"s{i}"}) for i in range(4)])
    raw.close()
    owner = QdrantClient(path=str(tmp_path / "db"), guard=kit.config({"sp": POL, "none": POL}),
                         principal=kit.principal("alice", "hr"))
    yield kit, owner.with_principal(kit.principal("bob", "support"))
    owner.close()


@pytest.mark.parametrize("with_vectors", [False, True])
def test_sparse_scores_of_a_sparse_only_charged_collection_are_refused(no_dense, with_vectors):
    # Before: four scored points returned uncharged (cap 1), while a collection with a dense
    # vector refuses the same sparse query; now both refuse it, audited.
    kit, bob = no_dense
    with pytest.raises(GuardRefusal, match="scores with vector 's' of 'sp', which is not a dense vector"):
        bob.query_points("sp", query=models.SparseVector(indices=[9], values=[1.0]), using="s", limit=4,
                         with_vectors=with_vectors)
    last = audit_records(kit)[-1]
    assert (last["op"], last["verdict"], last["details"]) == ("query_points", "QUERY_REJECTED", {"using": "s"})


@pytest.mark.parametrize("read", ["scroll", "retrieve"])
def test_vectorless_charged_collection_read_with_vectors_returns_its_points(no_dense, read):
    # Nothing to charge (no scores, no dense vector): every point returned, nothing withheld.
    kit, bob = no_dense
    pts = (bob.scroll("none", limit=10, with_vectors=True)[0] if read == "scroll"
           else bob.retrieve("none", [0, 1, 2, 3], with_vectors=True))
    assert [(p.id, p.payload, p.vector) for p in pts] == [(i, {"source": f"s{i}"}, {}) for i in range(4)]
    last = audit_records(kit)[-1]
    assert (last["op"], last["verdict"], last["details"]) == (read, "ALLOW", {})


# --- sentmodels: batch operations given as a tuple ------------------------------------------------
# sent_models rebuilds ``update_operations`` only when it is a list; the facade (_facade._normalise,
# sync and async alike) has already made any iterable of operations a plain list of the items it
# iterated, so a tuple never reaches it and the mutant that also rebuilds a tuple is equivalent.
# These pin that path end to end: a tuple is checked and sent as a list does.


def _pii_clients(kit):
    from tests.test_model_construct_filters import _clients

    return _clients(kit)


def _hiding_ops():
    from qdrant_guard.receipts import RECEIPT_KEY
    from tests.test_model_construct_filters import HARMLESS, _Hiding, _hiding_filter

    return {
        "receipt": (models.DeletePayloadOperation(delete_payload=models.DeletePayload.model_construct(
            keys=_Hiding(["note", RECEIPT_KEY]), filter=models.Filter(must=[HARMLESS]))), "RECEIPT_TAMPERING"),
        "filter": (models.SetPayloadOperation(set_payload=models.SetPayload(
            payload={"note": "m"}, filter=_hiding_filter())), "QUERY_REJECTED"),
        "constructed-filter": (models.ClearPayloadOperation.model_construct(
            clear_payload=models.FilterSelector.model_construct(filter=_hiding_filter())), "QUERY_REJECTED"),
    }


@pytest.mark.parametrize("wrap", [list, tuple])
@pytest.mark.parametrize("case", ["receipt", "filter", "constructed-filter"])
def test_a_tuple_of_batch_operations_hiding_a_key_or_condition_is_refused(tmp_path, monkeypatch, wrap, case):
    from tests.guardkit import record_sent, snapshot

    kit = make_kit(tmp_path)
    alice, bob = _pii_clients(kit)
    op, verdict = _hiding_ops()[case]
    before = snapshot(alice, "c")
    sent = record_sent(monkeypatch, ("batch_update_points",))
    with pytest.raises(GuardRefusal) as ei:
        bob.batch_update_points("c", wrap([models.SetPayloadOperation(set_payload=models.SetPayload(
            payload={"note": "ok"}, points=[2])), op]))
    assert ei.value.verdict == verdict
    assert sent == [] and snapshot(alice, "c") == before
    assert audit_records(kit)[-1]["verdict"] == verdict


def test_a_tuple_of_batch_operations_is_sent_as_the_list_checked(tmp_path, monkeypatch):
    from tests.guardkit import record_sent, snapshot

    kit = make_kit(tmp_path)
    alice, bob = _pii_clients(kit)
    sent = record_sent(monkeypatch, ("batch_update_points",), with_kwargs=True)
    ops = (models.SetPayloadOperation(set_payload=models.SetPayload(payload={"note": "t1"}, points=[1])),
           models.SetPayloadOperation.model_construct(set_payload=models.SetPayload.model_construct(
               payload={"note": "t2"}, points=[2])))
    bob.batch_update_points("c", ops)
    [(_, kwargs)] = sent
    assert type(kwargs["update_operations"]) is list and len(kwargs["update_operations"]) == 2
    assert {pid: payload["note"] for pid, payload, _ in snapshot(alice, "c")} == {1: "t1", 2: "t2", 3: "n"}
