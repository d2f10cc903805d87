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
