"""Refusals name the place they came from, in the message and in the audit entry.

- A refusal inside ``batch_update_points`` names its operation in its audit entry
  (``details["operation"]``), for every kind of operation (tests/test_batch_refusal_places.py
  checks it for each renamed refusal; here a batch's own refusal, a filter screen's and a PUBLIC
  batch's input refusal).
- A text refusal of a payload rewrite (``set_payload``, ``overwrite_payload``, in a batch too)
  names the points the call selects (its ids, or "the points a filter selects"), never ``None``.
- A credential in a ``models.Document`` vector names the point and the vector.
- PUBLIC ``delete``/``delete_payload``/``clear_payload``/``delete_vectors``: qdrant-client's own
  error for a malformed selector, unaudited, nothing deleted (pinned; see docs/security-testing.md).

Real qdrant-client local mode, sync and async clients.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import DIM, audit_records, create, make_kit, models

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient
from qdrant_guard.errors import UnsupportedWriteError

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
V = [0.25] * DIM
P = models.PointStruct
BY_FILTER = models.Filter(must=[models.HasIdCondition(has_id=[1])])


def _embed(texts):
    return np.full((len(texts), DIM), 0.25)


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _config(kit):
    pii = {"class": "PII", "owner": "hr", "raw_in_boundary": True, "text_field": "text", "intent": {"enabled": False}}
    return kit.config({"c": pii, "n": pii, "pub": {"class": "PUBLIC", "text_field": "text"}})


def _configs(named):
    size = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
    return {n: size for n in named} if named else size


COLLECTIONS = (("c", ()), ("n", ("a",)), ("pub", ()))


def _client(kit):
    client = QdrantClient(":memory:", guard=_config(kit), principal=kit.principal("alice", "hr"), embedder=_embed)
    for name, named in COLLECTIONS:
        create(client, name, named=named)
        client.upsert(name, [P(id=i, vector={"a": V} if named else V) for i in (1, 2)])
    return client


def _async_run(kit, call):
    """``call(client)`` on a new async guarded client with the same collections; its error."""
    async def main():
        client = AsyncQdrantClient(":memory:", guard=_config(kit), principal=kit.principal("alice", "hr"),
                                   embedder=_embed)
        for name, named in COLLECTIONS:
            await client.create_collection(name, vectors_config=_configs(named))
            await client.upsert(name, [P(id=i, vector={"a": V} if named else V) for i in (1, 2)])
        with pytest.raises(GuardRefusal) as ei:
            await call(client)
        return ei.value

    return asyncio.run(main())


def _set(payload, points=None, flt=None):
    return models.SetPayloadOperation(set_payload=models.SetPayload(payload=payload, points=points, filter=flt))


def _overwrite(payload, points=None, flt=None):
    return models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload=payload, points=points,
                                                                                 filter=flt))


# -- 2. payload rewrites name their points ------------------------------------------------------
# (call, the point ids the refusal lists, whether its directive says the points are by filter)
REWRITES = {
    "set_payload ids": (lambda c: c.set_payload("c", {"text": STRIPE}, points=[1, 2]), [1, 2], False),
    "set_payload key": (lambda c: c.set_payload("c", {"body": STRIPE}, points=[2], key="text"), [2], False),
    "set_payload PointIdsList": (lambda c: c.set_payload("c", {"text": STRIPE}, points=models.PointIdsList(
        points=[1])), [1], False),
    "set_payload filter": (lambda c: c.set_payload("c", {"text": STRIPE}, points=BY_FILTER), [], True),
    "overwrite_payload ids": (lambda c: c.overwrite_payload("c", {"text": STRIPE}, points=[2]), [2], False),
    "overwrite_payload filter": (lambda c: c.overwrite_payload("c", {"text": STRIPE}, points=models.FilterSelector(
        filter=BY_FILTER)), [], True),
    "batch set_payload": (lambda c: c.batch_update_points("c", [_set({"text": STRIPE}, points=[2])]), [2], False),
    "batch set_payload filter": (lambda c: c.batch_update_points("c", [_set({"text": STRIPE}, flt=BY_FILTER)]),
                                 [], True),
    "batch overwrite_payload": (lambda c: c.batch_update_points("c", [_overwrite({"text": STRIPE}, points=[1])]),
                                [1], False),
    "PUBLIC set_payload": (lambda c: c.set_payload("pub", {"text": STRIPE}, points=[1]), [1], False),
    "PUBLIC overwrite_payload filter": (lambda c: c.overwrite_payload("pub", {"text": STRIPE}, points=BY_FILTER),
                                        [], True),
    "PUBLIC batch set_payload": (lambda c: c.batch_update_points("pub", [_set({"text": STRIPE}, points=[2])]),
                                 [2], False),
}


def _check_rewrite(kit, exc, ids, by_filter):
    assert exc.verdict in ("CREDENTIAL_IN_TEXT", "SENSITIVITY_MISMATCH")
    assert exc.point_ids == ids and "None" not in str(exc)
    assert ("the points a filter selects: " in exc.directive) is by_filter
    assert str(exc).endswith(f"[points: {', '.join(map(str, ids))}]" if ids else '"redact" in [collections.c]' if
                             exc.verdict == "CREDENTIAL_IN_TEXT" else "to redact it")
    record = audit_records(kit)[-1]
    assert record["verdict"] == exc.verdict and record["point_ids"] == ids
    assert ("the points a filter selects: " in record["directive"]) is by_filter
    assert STRIPE not in str(record)


@pytest.mark.parametrize("case", list(REWRITES))
def test_a_payload_rewrite_refusal_names_its_points(kit, case):
    call, ids, by_filter = REWRITES[case]
    client = _client(kit)
    with pytest.raises(GuardRefusal) as ei:
        call(client)
    _check_rewrite(kit, ei.value, ids, by_filter)


@pytest.mark.parametrize("case", ["set_payload ids", "overwrite_payload filter", "batch set_payload",
                                  "PUBLIC overwrite_payload filter"])
def test_an_async_payload_rewrite_refusal_names_its_points(kit, case):
    call, ids, by_filter = REWRITES[case]

    async def acall(client):
        return await call(client)

    _check_rewrite(kit, _async_run(kit, acall), ids, by_filter)


# -- 3. a Document's credential names the point and the vector -----------------------------------
def _doc():
    return models.Document(text=STRIPE, model="m")


# (call, verdict, point id, what the message starts with)
DOCUMENTS = {
    "upsert": (lambda c: c.upsert("c", [P(id=5, vector=_doc())]), "CREDENTIAL_IN_TEXT", 5,
               "point 5: vector '<unnamed>' (Document): text contains credentials"),
    "upsert named": (lambda c: c.upsert("n", [P(id=6, vector={"a": _doc()})]), "CREDENTIAL_IN_TEXT", 6,
                     "point 6: vector 'a' (Document): text contains credentials"),
    "update_vectors": (lambda c: c.update_vectors("c", [models.PointVectors(id=1, vector=_doc())]),
                       "CREDENTIAL_IN_TEXT", 1, "point 1: vector '<unnamed>' (Document): text contains"),
    "batch upsert named": (lambda c: c.batch_update_points("n", [_set({"y": 1}, points=[1]), models.UpsertOperation(
        upsert=models.PointsList(points=[P(id=2, vector={"a": V}), P(id=7, vector={"a": _doc()})]))]),
        "CREDENTIAL_IN_TEXT", 7, "update_operations[1].upsert.points[1].vector['a']: point 7: vector 'a' (Document)"),
    "PUBLIC upsert": (lambda c: c.upsert("pub", [P(id=5, vector=_doc())]), "SENSITIVITY_MISMATCH", 5,
                      "point 5: vector '<unnamed>' (Document): text sent to PUBLIC"),
    "PUBLIC batch upsert": (lambda c: c.batch_update_points("pub", [models.UpsertOperation(upsert=models.PointsList(
        points=[P(id=8, vector=_doc())]))]), "SENSITIVITY_MISMATCH", 8,
        "update_operations[0].upsert.points[0].vector: point 8: vector '<unnamed>' (Document): text sent"),
}


def _check_document(kit, exc, verdict, pid, lead):
    assert exc.verdict == verdict and exc.point_ids == [pid] and exc.directive.startswith(lead)
    record = audit_records(kit)[-1]
    assert record["verdict"] == verdict and record["point_ids"] == [pid]
    # The entry has the check's wording: the point and vector, not the batch's place.
    assert record["directive"].startswith(lead[lead.find("point "):] if "update_operations" in lead else lead)
    assert STRIPE not in str(record)


@pytest.mark.parametrize("case", list(DOCUMENTS))
def test_a_document_credential_names_its_point_and_vector(kit, case):
    call, verdict, pid, lead = DOCUMENTS[case]
    with pytest.raises(GuardRefusal) as ei:
        call(_client(kit))
    _check_document(kit, ei.value, verdict, pid, lead)


@pytest.mark.parametrize("case", ["upsert named", "batch upsert named", "PUBLIC upsert"])
def test_an_async_document_credential_names_its_point_and_vector(kit, case):
    call, verdict, pid, lead = DOCUMENTS[case]

    async def acall(client):
        return await call(client)

    _check_document(kit, _async_run(kit, acall), verdict, pid, lead)


# -- 1. a batch refusal's audit entry names its operation --------------------------------------
def test_a_batch_refusal_entry_names_its_operation_for_every_kind(kit):
    client = _client(kit)
    delete = models.DeleteOperation(delete=models.PointIdsList(points=[1]))
    batches = [
        # the batch's own refusals (already naming update_operations[j] in their wording)
        ([_set({"y": 1}, points=[1]), models.DeleteOperation(delete=models.PointIdsList(points=[]))], 1),
        ([delete, _set({"y": 1}, points=[1])], 1),
        ([delete, models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
            points=[models.PointVectors(id=1, vector=V)]))], 1),
        ([_set({"y": 1}, points=[1]), _set({"y": 2}, points=[1]), models.ClearPayloadOperation(
            clear_payload=models.PointIdsList(points=[9]))], 2),
        ([_set({"y": 1}, points=[1]), models.DeleteVectorsOperation(delete_vectors=models.DeleteVectors(
            vector=["zz"], points=[1]))], 1),
        # a filter screen's (a key no JSON path), before any operation is looked at
        ([_set({"y": 1}, points=[1]), _set({"y": 1}, flt=models.Filter(must=[models.FieldCondition(
            key="a..b", match=models.MatchValue(value=1))]))], 1),
    ]
    for ops, j in batches:
        before = len(audit_records(kit))
        with pytest.raises((UnsupportedWriteError, GuardRefusal, ValueError)):
            client.batch_update_points("c", ops)
        records = audit_records(kit)[before:]
        assert len(records) == 1 and records[0]["details"]["operation"] == j, (ops, records)
    # A refused PUBLIC batch's input (audited by the input-refusal path) names it too.
    before = len(audit_records(kit))
    with pytest.raises(Exception):
        client.batch_update_points("pub", [_set({"y": 1}, points=[1]), models.UpsertOperation(
            upsert=models.PointsList.model_construct(points=[object()]))])
    records = audit_records(kit)[before:]
    assert len(records) == 1 and records[0]["details"]["operation"] == 1
    # Entries outside a batch, and a batch's accepted ones, carry no operation.
    client.batch_update_points("c", [_set({"y": 1}, points=[1]), delete])
    client.set_payload("c", {"y": 3}, points=[2])
    assert all("operation" not in r["details"] for r in audit_records(kit)[before + 1:])


# -- 4. PUBLIC deletions: qdrant-client's own error, unaudited (pinned) -------------------------
PUBLIC_DELETIONS = {
    "delete": lambda c: c.delete("pub", points_selector=object()),
    "delete_payload": lambda c: c.delete_payload("pub", keys=["y"], points=object()),
    "clear_payload": lambda c: c.clear_payload("pub", points_selector=5),
    "delete_vectors": lambda c: c.delete_vectors("pub", vectors=[""], points=object()),
}


@pytest.mark.parametrize("case", list(PUBLIC_DELETIONS))
def test_a_public_deletion_with_a_malformed_selector_fails_in_qdrant_client(kit, case):
    client = _client(kit)
    before = len(audit_records(kit))
    with pytest.raises(ValueError, match="Unsupported selector type"):
        PUBLIC_DELETIONS[case](client)
    assert len(audit_records(kit)) == before
    assert client.count("pub").count == 2
