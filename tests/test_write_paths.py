"""Every write path gets the same screening: PUBLIC text checks and redaction, receipt key paths,
vector updates with filters, batch result mapping and receipts within one batch (local Qdrant)."""
from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient

from guardkit import DIM, count, create, make_kit, models, snapshot, unit
from qdrant_guard import GuardRefusal, QdrantClient, UnsupportedWriteError
from qdrant_guard.receipts import RECEIPT_KEY
from qdrant_guard.receipts import verify as verify_stored

SSN = "Customer John Doe, SSN 123-45-6789"
CARD = "pay with card 4111 1111 1111 1111"
VEC = [0.25] * DIM


@pytest.fixture()
def public(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({
        "pub": {"class": "PUBLIC", "text_field": "text"},
        "pub_ok": {"class": "PUBLIC", "text_field": "text", "allow_redaction_on_public": True,
                   "credentials_in_text": "redact"},
    })
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    for name in ("pub", "pub_ok"):
        create(client, name)
        client.upsert(name, [models.PointStruct(id=1, vector=VEC, payload={"text": "plain words"})])
    return client


# Each form writes ``text`` to point 1 (existing) or 2 (new) of collection ``c``.
WRITE_FORMS = {
    "upsert list": lambda c, col, t: c.upsert(col, [models.PointStruct(id=2, vector=VEC, payload={"text": t})]),
    "upsert Batch": lambda c, col, t: c.upsert(col, models.Batch(ids=[2], vectors=[VEC], payloads=[{"text": t}])),
    "upsert Record": lambda c, col, t: c.upsert(col, [models.Record(id=2, vector=VEC, payload={"text": t})]),
    "upload_points": lambda c, col, t: c.upload_points(col, [models.PointStruct(id=2, vector=VEC, payload={"text": t})]),
    "upload_collection": lambda c, col, t: c.upload_collection(col, vectors=[VEC], payload=[{"text": t}], ids=[2]),
    "batch upsert list": lambda c, col, t: c.batch_update_points(col, [models.UpsertOperation(
        upsert=models.PointsList(points=[models.PointStruct(id=2, vector=VEC, payload={"text": t})]))]),
    "batch upsert batch": lambda c, col, t: c.batch_update_points(col, [models.UpsertOperation(
        upsert=models.PointsBatch(batch=models.Batch(ids=[2], vectors=[VEC], payloads=[{"text": t}])))]),
    "batch set_payload": lambda c, col, t: c.batch_update_points(col, [models.SetPayloadOperation(
        set_payload=models.SetPayload(payload={"text": t}, points=[1]))]),
    "batch overwrite_payload": lambda c, col, t: c.batch_update_points(col, [models.OverwritePayloadOperation(
        overwrite_payload=models.SetPayload(payload={"text": t}, points=[1]))]),
    "set_payload": lambda c, col, t: c.set_payload(col, payload={"text": t}, points=[1]),
    "overwrite_payload": lambda c, col, t: c.overwrite_payload(col, payload={"text": t}, points=[1]),
}


@pytest.mark.parametrize("form", list(WRITE_FORMS))
def test_public_collection_refuses_pii_on_every_write_path(public, form):
    before = snapshot(public, "pub")
    with pytest.raises(GuardRefusal) as ei:
        WRITE_FORMS[form](public, "pub", SSN)
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(public, "pub") == before


@pytest.mark.parametrize("form", list(WRITE_FORMS))
def test_public_redaction_stores_the_redacted_text_on_every_write_path(public, form):
    WRITE_FORMS[form](public, "pub_ok", f"{SSN}; {CARD}")
    texts = [p["text"] for _, p, _ in snapshot(public, "pub_ok")]
    assert "Customer John Doe, SSN [SSN]; pay with card [CREDIT_CARD]" in texts
    assert not any("123-45-6789" in t or "4111" in t for t in texts)


def test_public_redaction_reaches_document_text(public):
    doc = models.Document(text=SSN, model="m")
    pol = public.guard.policy("pub_ok")
    screened = public.guard.public_vector("upsert", "pub_ok", pol, {"a": doc, "b": VEC}, point_id=2)
    assert screened["a"].text == "Customer John Doe, SSN [SSN]" and screened["a"].model == "m"
    assert screened["b"] is VEC
    with pytest.raises(GuardRefusal):
        public.guard.public_vector("upsert", "pub", public.guard.policy("pub"), doc, point_id=2)


def test_public_clean_text_passes_unchanged(public):
    WRITE_FORMS["upsert Batch"](public, "pub", "nothing to see")
    # Below a key it is not the text field, but every payload string is screened (payload_fields).
    with pytest.raises(GuardRefusal) as ei:
        public.set_payload("pub", payload={"text": SSN}, points=[1], key="nested")
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert count(public, "pub") == 2


# -- receipt key as a JSON path -----------------------------------------------------------------

@pytest.fixture()
def sensitive(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
                              "noise_on_write": True, "raw_in_boundary": True}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    bob = owner.with_principal(kit.principal("bob", "support"))
    rng = np.random.default_rng(0)
    bob.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"n": i, "source": f"s{i}"})
                       for i in range(3)])
    return owner, bob, rng


QUOTED = f'"{RECEIPT_KEY}"'


@pytest.mark.parametrize("call", [
    lambda c: c.delete_payload("pii", keys=[QUOTED], points=[0]),
    lambda c: c.delete_payload("pii", keys=[f"{QUOTED}.vectors"], points=[0]),
    lambda c: c.delete_payload("pii", keys=[f"{RECEIPT_KEY}[0]"], points=[0]),
    lambda c: c.set_payload("pii", payload={"v": 1, "vectors": {"": {"forged": True}}}, key=QUOTED, points=[1]),
    lambda c: c.set_payload("pii", payload={"x": 1}, key=f"{QUOTED}.vectors", points=[1]),
    lambda c: c.batch_update_points("pii", [models.DeletePayloadOperation(
        delete_payload=models.DeletePayload(keys=[f"{QUOTED}.vectors"], points=[2]))]),
    lambda c: c.batch_update_points("pii", [models.SetPayloadOperation(
        set_payload=models.SetPayload(payload={"x": 1}, key=QUOTED, points=[2]))]),
], ids=["delete", "delete_nested", "delete_index", "set", "set_nested", "batch_delete", "batch_set"])
def test_quoted_receipt_key_paths_are_refused(sensitive, call):
    owner, bob, _ = sensitive
    before = snapshot(owner, "pii")
    for client in (owner, bob):
        with pytest.raises(GuardRefusal) as ei:
            call(client)
        assert ei.value.verdict == "RECEIPT_TAMPERING"
    assert snapshot(owner, "pii") == before


def test_other_quoted_and_nested_keys_are_still_allowed(sensitive):
    owner, bob, _ = sensitive
    bob.set_payload("pii", payload={"k": 1}, key=f"meta.{RECEIPT_KEY}", points=[0])
    bob.delete_payload("pii", keys=['"n"', f"meta.{RECEIPT_KEY}"], points=[0])
    _, payload, _ = snapshot(owner, "pii")[0]
    assert "n" not in payload and payload["meta"] == {}
    assert all(r.ok for r in verify_stored(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys))


def test_update_vectors_replaces_a_malformed_receipt_container(sensitive):
    owner, bob, rng = sensitive
    RawClient.set_payload(owner, "pii", payload={RECEIPT_KEY: {"v": 1}}, points=[2])
    bob.update_vectors("pii", [models.PointVectors(id=2, vector=unit(rng))])
    assert all(r.ok for r in verify_stored(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys))


def test_malformed_receipt_container_strips_that_point_only(sensitive):
    owner, bob, _ = sensitive
    RawClient.set_payload(owner, "pii", payload={RECEIPT_KEY: {"v": 1}}, points=[2])
    got = {r.id: r.vector is not None for r in bob.scroll("pii", with_vectors=True)[0]}
    assert got == {0: True, 1: True, 2: False}


# -- update_vectors with a filter ---------------------------------------------------------------

LOCKED = models.Filter(must=[models.FieldCondition(key="n", match=models.MatchValue(value=99))])


@pytest.mark.parametrize("call", [
    lambda c, v: c.update_vectors("pii", [models.PointVectors(id=0, vector=v)], update_filter=LOCKED),
    lambda c, v: c.batch_update_points("pii", [models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
        points=[models.PointVectors(id=0, vector=v)], update_filter=LOCKED))]),
], ids=["update_vectors", "batch"])
def test_update_vectors_with_update_filter_is_refused_and_nothing_changes(sensitive, call):
    owner, bob, rng = sensitive
    before = snapshot(owner, "pii")
    for client in (owner, bob):
        with pytest.raises(UnsupportedWriteError, match="update_filter"):
            call(client, unit(rng))
    assert snapshot(owner, "pii") == before


# -- batch results and receipts within one batch ------------------------------------------------

@pytest.mark.parametrize("op", [
    models.ClearPayloadOperation(clear_payload=models.FilterSelector(filter=LOCKED)),
    models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"a": 1}, filter=LOCKED)),
], ids=["clear", "overwrite"])
def test_batch_payload_rewrite_matching_nothing_returns_like_qdrant(sensitive, op):
    owner, _, _ = sensitive
    plain = RawClient(":memory:")
    create(plain, "pii")
    expected = plain.batch_update_points("pii", [op])
    before = snapshot(owner, "pii")
    got = owner.batch_update_points("pii", [op])
    assert len(got) == len(expected) == 1 and got[0].status == expected[0].status
    mixed = owner.batch_update_points("pii", [op, models.SetPayloadOperation(
        set_payload=models.SetPayload(payload={"m": 1}, points=[0]))])
    assert len(mixed) == 2
    assert snapshot(owner, "pii")[1:] == before[1:]


def test_payload_rewrite_after_a_vector_change_in_the_same_batch_keeps_the_new_receipt(sensitive):
    owner, bob, rng = sensitive
    raw = unit(rng)
    owner.batch_update_points("pii", [
        models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(points=[models.PointVectors(id=1, vector=raw)])),
        models.ClearPayloadOperation(clear_payload=models.PointIdsList(points=[1])),
    ])
    bob.batch_update_points("pii", [
        models.UpsertOperation(upsert=models.PointsList(points=[
            models.PointStruct(id=2, vector=unit(rng), payload={"source": "s2"}),
            models.PointStruct(id=7, vector=unit(rng), payload={"source": "s7"})])),
        models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"source": "new"}, points=[2, 7])),
    ])
    stored = {pid: p for pid, p, _ in snapshot(owner, "pii")}
    # A raw in-boundary vector keeps no stale receipt (its receipt is deleted by path; the empty
    # container stays).
    assert stored[1][RECEIPT_KEY] == {"v": 1, "vectors": {}}
    assert stored[2]["source"] == stored[7]["source"] == "new"
    reports = {r.point_id: r for r in verify_stored(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys)}
    assert reports[1].reason == "missing_receipt"
    assert all(reports[i].ok for i in (0, 2, 7))
    got = {r.id: r.vector is not None for r in bob.retrieve("pii", [1, 2, 7], with_vectors=True)}
    assert got == {1: False, 2: True, 7: True}
