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
