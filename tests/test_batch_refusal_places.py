"""A refusal of ``batch_update_points`` names the operation (and the point, the vector) it came from.

The checks a batch shares with the single-operation methods (vectors, text and payload screens,
receipts, restricted sources, the embedder) word their refusals for those methods; in a batch the
message now starts with ``update_operations[j]...``. The class, verdict, point ids, details,
manifest digest and audit entry are the ones the check raised (the original is ``__cause__``), and
Qdrant's own errors pass as they are. Real qdrant-client local mode, sync and async clients.
"""
from __future__ import annotations

import asyncio

import pytest
from guardkit import DIM, audit_records, create, make_kit, models, record_sent

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient
from qdrant_guard.batchplaces import placed
from qdrant_guard.errors import InvalidVectorError, UnsupportedWriteError
from qdrant_guard.receipts import RECEIPT_KEY
from qdrant_guard.textguard import EmbedderError

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
V = [0.25] * DIM
NAN = [float("nan")] * DIM
P = models.PointStruct
PAYROLL = {"source": "payroll"}


def _boom(texts):
    raise ValueError("embedder unavailable")


def _policy(kit):
    pii = {"class": "PII", "owner": "hr", "writers": ["support"], "raw_in_boundary": True, "text_field": "text",
           "intent": {"enabled": False},
           "diversity": {"max_source_coverage": 0.5, "restricted_sources": ["payroll"], "max_source_fraction": 1.0,
                         "min_unique_sources": 1}}
    return kit.config({"c": pii, "n": pii, "pub": {"class": "PUBLIC", "text_field": "text"}})


def _set(payload, points):
    return models.SetPayloadOperation(set_payload=models.SetPayload(payload=payload, points=points))


def _upsert(*points):
    return models.UpsertOperation(upsert=models.PointsList(points=list(points)))


def _vectors(*points):
    return models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(points=list(points)))


# (collection, who, the operation put at update_operations[2], error class, verdict, the place named)
CASES = {
    "upsert NaN": ("c", "alice", _upsert(P(id=3, vector=V), P(id=4, vector=NAN)), InvalidVectorError, None,
                   "update_operations[2].upsert.points[1].vector: point 4: vector '<unnamed>' has a non-finite"),
    "upsert named dim": ("n", "alice", _upsert(P(id=5, vector={"a": V, "b": [0.1] * 3})), InvalidVectorError, None,
                         "update_operations[2].upsert.points[0].vector['b']: point 5: vector 'b' has dimension 3"),
    "upsert batch": ("c", "alice", models.UpsertOperation(upsert=models.PointsBatch(
        batch=models.Batch(ids=[5, 6], vectors=[V, [float("inf")] * DIM]))), InvalidVectorError, None,
        "update_operations[2].upsert.batch[1].vector: point 6:"),
    "upsert named batch": ("n", "alice", models.UpsertOperation(upsert=models.PointsBatch(
        batch=models.Batch(ids=[5, 6], vectors={"a": [V, V], "b": [V, [0.1] * 3]}))), InvalidVectorError, None,
        "update_operations[2].upsert.batch[1].vector['b']: point 6:"),
    "upsert payload credential": ("c", "alice", _upsert(P(id=3, vector=V), P(id=4, vector=V, payload={"text": STRIPE})),
                                  GuardRefusal, "CREDENTIAL_IN_TEXT",
                                  "update_operations[2].upsert.points[1]: text contains credentials"),
    "upsert forged receipt": ("c", "alice", _upsert(P(id=4, vector=V, payload={RECEIPT_KEY: "x"})), GuardRefusal,
                              "INVALID_RECEIPT", "update_operations[2].upsert.points[0]: the receipt does not verify"),
    "upsert restricted source": ("c", "bob", _upsert(P(id=7, vector=V, payload=PAYROLL)), GuardRefusal,
                                 "REFUSED_CROSS_BOUNDARY", "update_operations[2].upsert.points[0]: point 7 names"),
    "upsert out-of-range id": ("c", "alice", _upsert(P.model_construct(id=-1, vector=V)), UnsupportedWriteError,
                               None, "batch_update_points: update_operations[2].upsert: point_id -1 is outside"),
    "upsert embedder failure": ("c", "alice", _upsert(P(id=8, vector=models.Document(text="hello", model="m"))),
                                EmbedderError, None,
                                "update_operations[2].upsert.points[0]: point 8: the embedder failed"),
    "set_payload credential": ("c", "alice", _set({"text": STRIPE}, [1]), GuardRefusal, "CREDENTIAL_IN_TEXT",
                               "update_operations[2].set_payload: text contains credentials"),
    "set_payload receipt key": ("c", "alice", _set({RECEIPT_KEY: "x"}, [1]), GuardRefusal, "RECEIPT_TAMPERING",
                                "update_operations[2].set_payload: the receipt payload key"),
    "set_payload restricted source": ("c", "bob", _set(PAYROLL, [1]), GuardRefusal, "REFUSED_CROSS_BOUNDARY",
                                      "update_operations[2].set_payload: the payload names restricted source(s)"),
    "overwrite_payload credential": ("c", "alice", models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(
        payload={"text": STRIPE}, points=[1])), GuardRefusal, "CREDENTIAL_IN_TEXT",
        "update_operations[2].overwrite_payload: text contains credentials"),
    "delete_payload receipt key": ("c", "alice", models.DeletePayloadOperation(delete_payload=models.DeletePayload(
        keys=[RECEIPT_KEY], points=[1])), GuardRefusal, "RECEIPT_TAMPERING",
        "update_operations[2].delete_payload: the receipt payload key"),
    "update_vectors NaN": ("n", "alice", _vectors(models.PointVectors(id=1, vector={"a": V}),
                                                  models.PointVectors(id=2, vector={"b": NAN})),
                           InvalidVectorError, None, "update_operations[2].update_vectors.points[1].vector['b']: point 2"),
    "update_vectors unknown name": ("n", "alice", _vectors(models.PointVectors(id=2, vector={"zz": V})),
                                    InvalidVectorError, None,
                                    "update_operations[2].update_vectors.points[0].vector['zz']: point 2: unknown vector"),
    "update_vectors missing point": ("c", "alice", _vectors(models.PointVectors(id=99, vector=V)), UnsupportedWriteError,
                                     None, "batch_update_points: update_operations[2].update_vectors: point(s) [99] do not"),
    "PUBLIC upsert credential": ("pub", "alice", _upsert(P(id=4, vector=V, payload={"text": STRIPE})), GuardRefusal,
                                 "SENSITIVITY_MISMATCH", "update_operations[2].upsert.points[0]: text sent to PUBLIC"),
    "PUBLIC set_payload credential": ("pub", "alice", _set({"text": STRIPE}, [1]), GuardRefusal,
                                      "SENSITIVITY_MISMATCH", "update_operations[2].set_payload: text sent to PUBLIC"),
    "PUBLIC overwrite_payload credential": ("pub", "alice", models.OverwritePayloadOperation(
        overwrite_payload=models.SetPayload(payload={"text": STRIPE}, points=[1])), GuardRefusal,
        "SENSITIVITY_MISMATCH", "update_operations[2].overwrite_payload: text sent to PUBLIC"),
}


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _batch(op):
    return [_set({"y": 1}, [1]), _set({"y": 2}, [2]), op]


def _check(kit, exc, cls, verdict, place, sent, audited_before):
    assert type(exc) is cls and place in str(exc) and sent == []
    cause = exc.__cause__
    assert type(cause) is cls and "update_operations[" not in str(cause)
    # The message is the check's own with the place first; every other field is the check's.
    assert {k: v for k, v in vars(exc).items() if k != "directive"} == {
        k: v for k, v in vars(cause).items() if k != "directive"}
    records = audit_records(kit)
    assert len(records) == audited_before + 1  # one entry, the check's, as before
    # ... which names the operation (its wording is the check's own).
    assert records[-1]["details"]["operation"] == 2
    if isinstance(exc, GuardRefusal):
        assert exc.verdict == verdict and exc.directive.startswith("update_operations[2]")
        assert exc.directive.endswith(": " + cause.directive)
        assert str(exc) == str(GuardRefusal(exc.verdict, exc.directive, point_ids=exc.point_ids))
        assert records[-1]["verdict"] == verdict and records[-1]["directive"] == cause.directive
    else:
        lead = "batch_update_points: " if str(cause).startswith("batch_update_points: ") else ""
        assert str(exc).startswith(lead + "update_operations[2]")
        assert str(exc).endswith(": " + str(cause)[len(lead):])
        assert records[-1]["verdict"] == "UNSUPPORTED_WRITE"


def _sync_client(kit):
    alice = QdrantClient(":memory:", guard=_policy(kit), principal=kit.principal("alice", "hr"), embedder=_boom)
    for name, named in (("c", ()), ("n", ("a", "b")), ("pub", ())):
        create(alice, name, named=named)
        vector = {"a": V, "b": V} if named else V
        alice.upsert(name, [P(id=i, vector=vector) for i in (1, 2)])
    return {"alice": alice, "bob": alice.with_principal(kit.principal("bob", "support"))}


@pytest.mark.parametrize("case", list(CASES))
def test_a_batch_refusal_names_its_operation(kit, monkeypatch, case):
    name, who, op, cls, verdict, place = CASES[case]
    client = _sync_client(kit)[who]
    sent = record_sent(monkeypatch, ("batch_update_points",))
    before = len(audit_records(kit))
    with pytest.raises(cls) as ei:
        client.batch_update_points(name, _batch(op))
    _check(kit, ei.value, cls, verdict, place, sent, before)


@pytest.mark.parametrize("case", ["upsert NaN", "upsert named batch", "upsert payload credential",
                                  "upsert embedder failure", "set_payload restricted source",
                                  "delete_payload receipt key", "update_vectors NaN", "update_vectors missing point",
                                  "PUBLIC set_payload credential"])
def test_an_async_batch_refusal_names_its_operation(kit, monkeypatch, case):
    name, who, op, cls, verdict, place = CASES[case]
    import qdrant_client

    sent = []
    original = qdrant_client.AsyncQdrantClient.batch_update_points

    async def recording(self, *a, **kw):
        sent.append("batch_update_points")
        return await original(self, *a, **kw)

    async def main():
        alice = AsyncQdrantClient(":memory:", guard=_policy(kit), principal=kit.principal("alice", "hr"), embedder=_boom)
        for coll, named in (("c", ()), ("n", ("a", "b")), ("pub", ())):
            config = ({n: models.VectorParams(size=DIM, distance=models.Distance.COSINE) for n in named} if named
                      else models.VectorParams(size=DIM, distance=models.Distance.COSINE))
            await alice.create_collection(coll, vectors_config=config)
            await alice.upsert(coll, [P(id=i, vector={"a": V, "b": V} if named else V) for i in (1, 2)])
        client = alice if who == "alice" else alice.with_principal(kit.principal("bob", "support"))
        monkeypatch.setattr(qdrant_client.AsyncQdrantClient, "batch_update_points", recording)
        before = len(audit_records(kit))
        with pytest.raises(cls) as ei:
            await client.batch_update_points(name, _batch(op))
        return ei.value, before

    exc, before = asyncio.run(main())
    _check(kit, exc, cls, verdict, place, sent, before)


def test_the_single_operation_messages_are_unchanged(kit):
    client = _sync_client(kit)["alice"]
    with pytest.raises(InvalidVectorError) as ei:
        client.upsert("c", [P(id=3, vector=V), P(id=4, vector=NAN)])
    assert str(ei.value).startswith("point 4: vector '<unnamed>' has a non-finite") and ei.value.__cause__ is None
    with pytest.raises(GuardRefusal) as gi:
        client.set_payload("c", {"text": STRIPE}, points=[1])
    assert gi.value.directive.startswith("text contains credentials") and gi.value.__cause__ is None


def test_qdrant_errors_and_already_placed_refusals_pass_as_they_are(kit):
    client = _sync_client(kit)["alice"]
    # The look-up of a listed collection that does not exist fails in qdrant-client: its error.
    config = _policy(kit)
    lonely = QdrantClient(":memory:", guard=config, principal=kit.principal("alice", "hr"))
    with pytest.raises(ValueError) as qi:
        lonely.batch_update_points("c", _batch(_set({"y": 3}, [1])))
    assert str(qi.value) == "Collection c not found" and qi.value.__cause__ is None
    # A refusal the batch words itself names its operation once.
    with pytest.raises(UnsupportedWriteError) as ui:
        client.batch_update_points("c", _batch(models.DeleteOperation(delete=models.PointIdsList(points=[]))))
    assert str(ui.value).count("update_operations[2]") == 1 and ui.value.__cause__ is None


def test_placed_keeps_what_it_cannot_rename():
    key_error = KeyError(99)
    assert placed(key_error, "batch_update_points", "update_operations[1]", 1) is key_error
    two_args = ValueError("a", "b")
    assert placed(two_args, "batch_update_points", "update_operations[1]", 1) is two_args
    named = ValueError("update_operations[1]: already named")
    assert placed(named, "batch_update_points", "update_operations[1].upsert", 1) is named
    other = ValueError("update_operations[10]: another operation's place")
    assert str(placed(other, "batch_update_points", "update_operations[1]", 1)).startswith("update_operations[1]: ")
