"""Tests from mutation pass 20 (h-mut20 branch, 2026-12-06): open hand mutants of mutation pass
19 in qdrant_guard/payloadops.py and writes.py. docs/security-testing.md ("Mutation pass 20")
lists which are killed, and by which test.
"""
from __future__ import annotations

import numpy as np
import pytest
from guardkit import create, make_kit, models, snapshot, unit

from qdrant_guard import QdrantClient, UnsupportedWriteError
from qdrant_guard.receipts import RECEIPT_KEY
from qdrant_guard.receipts import verify as verify_stored


def _owner(tmp_path):
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"c": {"class": "PII", "owner": "hr"}}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "c")
    return owner


def test_an_overwrite_of_several_points_holding_an_unquotable_key_rewrites_every_point(tmp_path):
    """Kills the ``has_id`` filter of ``_preserving_overwrite``'s per-point overwrites (the path
    for a key holding ``"``) cut to the first point (P4): the other points kept their old payload,
    the unquotable key included, and the call still reported them overwritten."""
    owner = _owner(tmp_path)
    rng = np.random.default_rng(40)
    owner.upsert("c", [models.PointStruct(id=i, vector=unit(rng), payload={'a"b': i, "k": i}) for i in (1, 2, 3)])
    owner.overwrite_payload("c", payload={"n": 7}, points=[1, 2, 3])
    stored = snapshot(owner, "c")
    assert [p for p, _, _ in stored] == [1, 2, 3]
    for _, payload, _ in stored:
        assert {k: v for k, v in payload.items() if k != RECEIPT_KEY} == {"n": 7}
        assert RECEIPT_KEY in payload
    bad = [r for r in verify_stored(owner, "c", trusted_keys=owner.guard.trusted_receipt_keys) if r.reason != "ok"]
    assert bad == []
    owner.close()


@pytest.mark.parametrize("call", [
    lambda c: c.set_payload("c", payload={"x": 1}, points=[]),
    lambda c: c.delete_payload("c", keys=["a"], points=[]),
], ids=["set_payload", "delete_payload"])
def test_a_payload_change_naming_no_point_outside_a_batch_fails_as_in_qdrant_client(tmp_path, call):
    """Kills ``_existing``'s empty-id-list refusal made to apply outside batches too (P5, the
    ``fresh is not None`` test dropped): a standalone call naming no point goes to Qdrant, which
    fails it as it fails plain qdrant-client's ("Empty update request"), not as a guard refusal."""
    owner = _owner(tmp_path)
    owner.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"a": 1})])
    before = snapshot(owner, "c")
    with pytest.raises(ValueError, match="Empty update request") as ei:
        call(owner)
    assert not isinstance(ei.value, UnsupportedWriteError)
    assert snapshot(owner, "c") == before
    owner.close()
