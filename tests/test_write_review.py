"""Write-path review: ways a write could land outside the policy of the name it was made under
(real local-mode Qdrant)."""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import create, make_kit, models, snapshot, unit
from qdrant_guard import GuardRefusal, QdrantClient


def _alias(client, collection, alias):
    client.update_collection_aliases(change_aliases_operations=[models.CreateAliasOperation(
        create_alias=models.CreateAlias(collection_name=collection, alias_name=alias))])


def _rename(client, old, new):
    client.update_collection_aliases(change_aliases_operations=[models.RenameAliasOperation(
        rename_alias=models.RenameAlias(old_alias_name=old, new_alias_name=new))])


@pytest.mark.parametrize("how", ["create", "rename"])
def test_a_sensitive_name_cannot_be_made_an_alias_of_a_public_collection(tmp_path, how):
    # Anyone may alias a PUBLIC collection. Under a sensitive collection's name (not created yet)
    # the alias would take the owner's raw in-boundary writes into a collection anyone reads.
    kit = make_kit(tmp_path)
    cfg = kit.config({
        "hr_records": {"class": "PII", "owner": "hr", "raw_in_boundary": True, "text_field": "text",
                       "keep_payload_text_in_boundary": True},
        "kb": {"class": "PUBLIC"},
    })
    alice = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    anon = alice.with_principal(None)
    create(anon, "kb")
    with pytest.raises(GuardRefusal) as ei:
        if how == "create":
            _alias(anon, "kb", "hr_records")
        else:
            _alias(anon, "kb", "kb_alias")
            _rename(anon, "kb_alias", "hr_records")
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert "hr_records" not in [a.alias_name for a in alice.get_aliases().aliases]
    # The owner's usual "create unless it exists" now creates the real collection.
    assert not alice.collection_exists("hr_records")
    create(alice, "hr_records")
    alice.upsert("hr_records", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)),
                                                   payload={"text": "Jane Roe, SSN 123-45-6789"})])
    assert snapshot(alice, "kb") == []


SSN = "Customer John Doe, SSN 123-45-6789"


@pytest.fixture()
def public(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({
        "pub": {"class": "PUBLIC"},
        "pub_ok": {"class": "PUBLIC", "allow_redaction_on_public": True},
    })
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    for name in ("pub", "pub_ok"):
        create(client, name)
    return client


@pytest.mark.parametrize("write", [
    lambda c, v: c.upsert("pub", [models.PointStruct(id=1, vector=v)]),
    lambda c, v: c.upsert("pub", models.Batch(ids=[1], vectors=[v])),
    lambda c, v: c.upload_points("pub", [models.PointStruct(id=1, vector=v)]),
    lambda c, v: c.batch_update_points("pub", [models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
        points=[models.PointVectors(id=1, vector=v)]))]),
], ids=["upsert", "upsert_batch", "upload_points", "batch_update_vectors"])
def test_text_in_an_inference_object_is_screened_on_public_collections(public, write):
    # An InferenceObject's string is text Qdrant's inference embeds, like a Document's.
    obj = models.InferenceObject(object=SSN, model="sentence-transformers/all-minilm-l6-v2")
    with pytest.raises(GuardRefusal) as ei:
        write(public, obj)
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(public, "pub") == []


def test_inference_object_text_is_redacted_where_the_public_policy_allows_it(public):
    pol = public.guard.policy("pub_ok")
    obj = models.InferenceObject(object=SSN, model="m", options={"k": 1})
    screened = public.guard.public_vector("upsert", "pub_ok", pol, {"a": obj, "b": [0.5] * 4}, point_id=1)
    assert screened["a"].object == "Customer John Doe, SSN [SSN]"
    assert screened["a"].model == "m" and screened["a"].options == {"k": 1}
    image = models.InferenceObject(object={"url": "https://example.com/x.png"}, model="m")
    assert public.guard.public_vector("upsert", "pub_ok", pol, image, point_id=1) is image


@pytest.fixture()
def noised(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    bob = owner.with_principal(kit.principal("bob", "support"))
    rng = np.random.default_rng(3)
    bob.upsert("pii", [models.PointStruct(id=i, vector=unit(rng)) for i in (1, 2)])
    return owner, bob, rng


def _receipts_ok(owner):
    from qdrant_guard.receipts import verify
    return [(r.point_id, r.reason) for r in verify(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys)]


@pytest.mark.parametrize("call", [
    lambda c, vs: c.update_vectors("pii", [models.PointVectors(id=1, vector=vs[0]),
                                           models.PointVectors(id=99, vector=vs[1])]),
    lambda c, vs: c.batch_update_points("pii", [models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
        points=[models.PointVectors(id=1, vector=vs[0]), models.PointVectors(id=99, vector=vs[1])]))]),
], ids=["update_vectors", "batch_update_vectors"])
def test_a_vector_update_naming_a_missing_point_changes_nothing(noised, call):
    # Qdrant applies the other points' new vectors before failing on the missing one, and the
    # receipts (set by later operations of the same request) were then never written.
    from qdrant_guard import UnsupportedWriteError
    owner, bob, rng = noised
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match="99"):
        call(bob, [unit(rng), unit(rng)])
    assert snapshot(owner, "pii") == before
    assert _receipts_ok(owner) == [(1, "ok"), (2, "ok")]


def test_a_vector_update_of_a_point_upserted_earlier_in_the_batch_is_allowed(noised):
    owner, bob, rng = noised
    bob.batch_update_points("pii", [
        models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=5, vector=unit(rng))])),
        models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
            points=[models.PointVectors(id=5, vector=unit(rng))])),
    ])
    assert _receipts_ok(owner) == [(1, "ok"), (2, "ok"), (5, "ok")]


@pytest.mark.parametrize("delete", [
    models.DeleteOperation(delete=models.PointIdsList(points=[2])),
    models.DeleteOperation(delete=models.FilterSelector(filter=models.Filter(must=[models.HasIdCondition(has_id=[2])]))),
], ids=["by_id", "by_filter"])
def test_a_vector_update_after_a_delete_in_the_same_batch_changes_nothing(noised, delete):
    # Point 2 is gone by the time the update runs: Qdrant would apply point 1's new vector and
    # then fail on 2, and point 1's receipt, set by a later operation, would never be written.
    from qdrant_guard import UnsupportedWriteError
    owner, bob, rng = noised
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError, match="delete|do not exist"):
        bob.batch_update_points("pii", [delete, models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
            points=[models.PointVectors(id=1, vector=unit(rng)), models.PointVectors(id=2, vector=unit(rng))]))])
    assert snapshot(owner, "pii") == before
    assert _receipts_ok(owner) == [(1, "ok"), (2, "ok")]


def test_a_point_deleted_then_upserted_in_the_batch_may_have_its_vector_updated(noised):
    owner, bob, rng = noised
    bob.batch_update_points("pii", [
        models.DeleteOperation(delete=models.PointIdsList(points=[2])),
        models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=2, vector=unit(rng))])),
        models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
            points=[models.PointVectors(id=1, vector=unit(rng)), models.PointVectors(id=2, vector=unit(rng))])),
    ])
    assert _receipts_ok(owner) == [(1, "ok"), (2, "ok")]
