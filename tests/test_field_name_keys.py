"""Field names given outside a filter are screened as a filter's keys are: ``scroll``'s
``order_by``, an ``OrderByQuery``, ``group_by``, ``with_payload`` (a list, an include or exclude
selector, ``with_lookup``'s), ``set_payload``'s ``key``, ``delete_payload``'s ``keys`` (and their
``batch_update_points`` operations), a payload index's ``field_name``. Each went to the store as
given, and a credential or an e-mail address as such a key was an unscreened probe.

Real local-mode Qdrant, real keys (see guardkit); an ordinary key gives what qdrant-client gives.
"""
from __future__ import annotations

import asyncio

import pytest
from qdrant_client import QdrantClient as RawClient
from qdrant_client import grpc

from guardkit import audit_records, make_kit, models, record_scans, record_sent, snapshot
from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.receipts import RECEIPT_KEY

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
EMAIL = "alice@example.com"
V = [0.25] * 16
SENT = ("scroll", "retrieve", "query_points", "query_batch_points", "query_points_groups", "create_payload_index",
        "delete_payload_index", "set_payload", "delete_payload", "batch_update_points", "upsert")
WRITES = {"create_payload_index", "delete_payload_index", "set_payload", "delete_payload", "set_payload_op",
          "delete_payload_op"}


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def sent(monkeypatch):
    """The methods of every call that reaches the real (unguarded) client."""
    return record_sent(monkeypatch, SENT)


def _points():
    return [models.PointStruct(id=i, vector=[0.25] * 15 + [0.1 * i], payload={
        "x": i, "source": f"d{i}", "tags": ["a"] * i}) for i in (1, 2, 3)]


def _load(client):
    client.create_collection("c", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
    client.create_collection("lk", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
    client.upsert("c", _points())
    client.upsert("lk", [models.PointStruct(id=i, vector=V, payload={"x": 10 * i, "y": i}) for i in (1, 2, 3)])
    return client


def _owner(kit, **query):
    """alice@hr, owner of PII collections ``c`` (points 1-3) and ``lk``, which support may read and write."""
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "raw_in_boundary": True,
           "intent": {"enabled": False}, "diversity": {"enabled": False}, "query": query}
    return _load(QdrantClient(":memory:", guard=kit.config({"c": pol, "lk": pol}),
                              principal=kit.principal("alice", "hr")))


# Each call names one field outside a filter: (call(client, key), where a refusal names the key,
# an ordinary key for it).
CALLS = {
    "scroll_order_by": (lambda c, k: c.scroll("c", order_by=k, limit=5, with_payload=["x"]), "order_by", "x"),
    "scroll_order_by_model": (lambda c, k: c.scroll("c", order_by=models.OrderBy(
        key=k, direction=models.Direction.DESC), limit=5), "order_by.key", "x"),
    "scroll_order_by_grpc": (lambda c, k: c.scroll("c", order_by=grpc.OrderBy(key=k), limit=5), "order_by.key", None),
    "scroll_with_payload": (lambda c, k: c.scroll("c", limit=5, with_payload=[k]), "with_payload[0]", "x"),
    "scroll_include": (lambda c, k: c.scroll("c", limit=5, with_payload=models.PayloadSelectorInclude(
        include=["source", k])), "with_payload.include[1]", "x"),
    "scroll_exclude": (lambda c, k: c.scroll("c", limit=5, with_payload=models.PayloadSelectorExclude(
        exclude=[k])), "with_payload.exclude[0]", "tags"),
    "scroll_grpc_selector": (lambda c, k: c.scroll("c", limit=5, with_payload=grpc.WithPayloadSelector(
        include=grpc.PayloadIncludeSelector(fields=[k]))), "with_payload[0]", None),
    "retrieve_with_payload": (lambda c, k: c.retrieve("c", [1, 3], with_payload=[k]), "with_payload[0]", "x"),
    "query_with_payload": (lambda c, k: c.query_points("c", query=V, limit=5, with_payload=[k]).points,
                           "with_payload[0]", "x"),
    "query_order_by": (lambda c, k: c.query_points("c", query=models.OrderByQuery(order_by=k), limit=5).points,
                       "query.order_by", "x"),
    "query_order_by_model": (lambda c, k: c.query_points("c", query=models.OrderByQuery(
        order_by=models.OrderBy(key=k, direction=models.Direction.DESC)), limit=5).points, "query.order_by.key", "x"),
    "prefetch_order_by": (lambda c, k: c.query_points("c", prefetch=models.Prefetch(
        query=models.OrderByQuery(order_by=k), limit=2), query=V, limit=5).points, "prefetch.query.order_by", "x"),
    "batch_with_payload": (lambda c, k: [r.points for r in c.query_batch_points("c", [
        models.QueryRequest(query=V, limit=5, with_payload=[k])])], "requests[0].with_payload[0]", "x"),
    "batch_order_by": (lambda c, k: [r.points for r in c.query_batch_points("c", [
        models.QueryRequest(query=models.OrderByQuery(order_by=k), limit=5, with_payload=True)])],
        "requests[0].query.order_by", "x"),
    "groups_group_by": (lambda c, k: c.query_points_groups("c", group_by=k, query=V, limit=5, with_payload=True),
                        "group_by", "source"),
    "groups_with_payload": (lambda c, k: c.query_points_groups("c", group_by="source", query=V, limit=5,
                                                               with_payload=[k]), "with_payload[0]", "x"),
    "groups_lookup": (lambda c, k: c.query_points_groups("c", group_by="x", query=V, limit=5, with_lookup=models.WithLookup(
        collection="lk", with_payload=[k])), "with_lookup.with_payload[0]", "y"),
    "create_payload_index": (lambda c, k: c.create_payload_index("c", field_name=k, field_schema="integer"),
                             "field_name", "x"),
    "delete_payload_index": (lambda c, k: c.delete_payload_index("c", field_name=k), "field_name", "x"),
    "set_payload": (lambda c, k: c.set_payload("c", payload={"y": 1}, points=[1], key=k), "key", "meta"),
    "delete_payload": (lambda c, k: c.delete_payload("c", keys=["source", k], points=[1, 2]), "keys[1]", "tags"),
    "set_payload_op": (lambda c, k: c.batch_update_points("c", [models.SetPayloadOperation(set_payload=models.SetPayload(
        payload={"y": 1}, points=[2], key=k))]), "update_operations[0].set_payload.key", "meta"),
    "delete_payload_op": (lambda c, k: c.batch_update_points("c", [models.DeletePayloadOperation(
        delete_payload=models.DeletePayload(keys=[k], points=[3]))]), "update_operations[0].delete_payload.keys[0]",
        "tags"),
}


def _norm(result):
    """A result as comparable data, without the guard's receipt payload key."""
    if isinstance(result, (list, tuple)):
        return [_norm(r) for r in result]
    if isinstance(result, (models.Record, models.ScoredPoint)):
        payload = None if result.payload is None else {k: v for k, v in result.payload.items() if k != RECEIPT_KEY}
        return result.id, payload, getattr(result, "score", None)
    if isinstance(result, models.GroupsResult):
        return [(g.id, _norm(g.hits), _norm(g.lookup) if g.lookup is not None else None) for g in result.groups]
    if isinstance(result, models.UpdateResult):
        return result.status
    return result


def _stored(client):
    return [(pid, {k: v for k, v in payload.items() if k != RECEIPT_KEY}) for pid, payload, _ in snapshot(client, "c")]


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_credential_as_a_field_name_is_refused_and_an_ordinary_one_works_as_before(kit, sent, call):
    owner = _owner(kit, filter_pii="allow")
    run, at, plain = CALLS[call]
    before, sent[:] = snapshot(owner, "c"), []
    n = len(audit_records(kit))
    with pytest.raises(GuardRefusal) as ei:
        run(owner, f"meta.{STRIPE}")
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT", call
    assert ei.value.details["filter"] == at
    assert ei.value.details["findings"] == ["STRIPE_KEY"]
    assert ei.value.details["key"] == "meta.[STRIPE_KEY]"
    assert STRIPE not in str(ei.value)
    assert sent == [] and snapshot(owner, "c") == before
    assert [e["verdict"] for e in audit_records(kit)[n:]] == ["CREDENTIAL_IN_TEXT"]
    assert STRIPE not in (kit.tmp / "audit.jsonl").read_text()
    if plain is None:
        return  # (local mode takes no gRPC forms)
    raw = _load(RawClient(":memory:"))
    assert _norm(run(owner, plain)) == _norm(run(raw, plain))
    assert audit_records(kit)[-1]["verdict"] == "ALLOW"
    assert "filter_pii" not in audit_records(kit)[-1]["details"]
    if call in WRITES:
        assert _stored(owner) == _stored(raw)


@pytest.mark.parametrize("call", sorted(c for c in CALLS if CALLS[c][2] is not None))
def test_personal_data_as_a_field_name_follows_filter_pii(kit, sent, call):
    # A field named alice@example.com, ordered, grouped, indexed or projected by, asks about her
    # as a filter on it does: filter_pii decides both the same way.
    run, at, _ = CALLS[call]
    key = f'"{EMAIL}"'  # quoted: a key path may hold any character
    owner = _owner(kit)
    sent[:] = []
    with pytest.raises(GuardRefusal) as ei:
        run(owner, key)
    assert ei.value.verdict == "QUERY_REJECTED" and "filter_pii" in str(ei.value)
    assert ei.value.details == {"filter": at, "key": '"[EMAIL]"', "condition": ei.value.details["condition"],
                                "findings": ["EMAIL"]}
    assert sent == []
    owner = _owner(kit, filter_pii="owner")
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal):
        run(bob, key)
    run(owner, key)
    entry = audit_records(kit)[-1]
    assert entry["verdict"] == "ALLOW"
    found = entry["details"]["filter_pii"] if "filter_pii" in entry["details"] else [
        f for r in entry["details"]["requests"] for f in r.get("filter_pii", [])]
    assert found == [{"filter": at, "key": '"[EMAIL]"', "condition": ei.value.details["condition"],
                      "findings": ["EMAIL"]}]
    assert EMAIL not in (kit.tmp / "audit.jsonl").read_text()


def test_the_refusal_names_the_argument_and_the_fix(kit):
    owner = _owner(kit)
    with pytest.raises(GuardRefusal) as ei:
        owner.scroll("c", order_by=STRIPE, limit=2)
    assert ei.value.details["condition"] == "order_by"
    assert "the field name '[STRIPE_KEY]' at order_by (order_by) holds credentials" in str(ei.value)
    assert "name another field" in str(ei.value) and "filter" not in str(ei.value)
    with pytest.raises(GuardRefusal) as ei:
        owner.scroll("c", with_payload=["x", EMAIL], limit=2)
    assert "the field name '[EMAIL]' at with_payload[1] (with_payload) is personal data" in str(ei.value)
    assert 'Name fields that hold no personal data' in str(ei.value) and 'filter_pii = "owner"' in str(ei.value)
    with pytest.raises(GuardRefusal) as ei:
        owner.query_points("c", query=models.OrderByQuery(order_by=models.OrderBy(key=STRIPE)), limit=2)
    assert ei.value.details["condition"] == "OrderBy"


def test_a_key_is_scanned_once_per_call(kit, monkeypatch):
    owner = _owner(kit)
    seen = record_scans(monkeypatch)
    key = "source_of_record"
    owner.scroll("c", scroll_filter=models.Filter(must=[models.IsEmptyCondition(is_empty=models.PayloadField(key=key))]),
                 order_by=key, with_payload=[key, "x"], limit=2)
    assert seen.count(key) == 1 and seen.count("x") == 1


def test_the_async_client_screens_them_too(kit):
    from qdrant_guard import AsyncQdrantClient

    pol = {"class": "PII", "owner": "hr", "raw_in_boundary": True, "intent": {"enabled": False}}

    async def main():
        cl = AsyncQdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
        await cl.create_collection("c", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        await cl.upsert("c", _points())
        with pytest.raises(GuardRefusal) as ei:
            await cl.scroll("c", order_by=models.OrderBy(key=STRIPE), limit=2)
        assert ei.value.verdict == "CREDENTIAL_IN_TEXT" and ei.value.details["filter"] == "order_by.key"
        with pytest.raises(GuardRefusal) as ei:
            await cl.query_points_groups("c", group_by=EMAIL, query=V, limit=2)
        assert ei.value.verdict == "QUERY_REJECTED" and ei.value.details["filter"] == "group_by"
        records, _ = await cl.scroll("c", order_by="x", limit=2, with_payload=["x"])
        assert [(r.id, r.payload) for r in records] == [(1, {"x": 1}), (2, {"x": 2})]

    asyncio.run(main())
    text = (kit.tmp / "audit.jsonl").read_text()
    assert STRIPE not in text and EMAIL not in text
