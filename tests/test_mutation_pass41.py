"""Mutation pass 41: the survivors, among the mutants of the previous session's changes and the
functions around them, that no test reached. Real qdrant-client local mode where a collection is
written.
"""
from __future__ import annotations

import numpy as np
import pytest
from guardkit import create, guard_signer, make_kit, models, receipted_vector, staging_record, unit

from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.receipts import RECEIPT_KEY, receipts_for_payload

# ------------------------------------------------------------------ writeprep: the refusal's directive


@pytest.fixture
def bob(tmp_path):
    """bob@support's client of a PII collection "pii" (Euclid, 32-d, gaussian noise) whose
    utility.records vouch for a vector named "image" only, so a receipted write to the unnamed
    vector is refused UTILITY_DEGRADED once its receipt passes every earlier check."""
    kit = make_kit(tmp_path)
    staging_record(kit, tmp_path / "image.json")
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False,
           "intent": {"enabled": False}, "diversity": {"enabled": False},
           "noise": {"epsilon": 1.0, "radius": 0.01},
           "utility": {"records": {"image": str(tmp_path / "image.json")}}}
    owner = QdrantClient(":memory:", guard=kit.config({"pii": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "pii", dim=32, distance=models.Distance.EUCLID)
    rng = np.random.default_rng(1)

    def point(pid: int, **kw) -> models.PointStruct:
        vec, rec = receipted_vector(guard_signer(kit), pid, unit(rng, 32), **kw)
        return models.PointStruct(id=pid, vector=vec, payload={RECEIPT_KEY: receipts_for_payload({"": rec})})

    yield owner.with_principal(kit.principal("bob", "support")), point
    owner.close()


@pytest.mark.parametrize("second, its_reason, its_fix", [
    ({}, "the collection's unnamed vector has no utility record", "the retrieval utility guard refuses this write"),
    ({"mechanism": "laplace_l2"}, "mechanism_mismatch: ", "the receipt's noise mechanism is 'laplace_l2'"),
])
def test_a_refusal_led_by_a_bad_receipt_keeps_its_advice_when_a_later_point_has_its_own_fix(bob, second, its_reason,
                                                                                            its_fix):
    # The first point's fault (a receipt that does not verify) is the verdict; a later point's
    # utility or mechanism reason is in the details, and does not replace the verdict's directive
    # (mutants read utility_why or mechanism_why whatever the verdict).
    client, point = bob
    altered = point(1)
    altered.vector[0] += 0.5
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pii", [altered, point(2, **second)])
    err = ei.value
    assert err.verdict == "INVALID_RECEIPT" and err.point_ids == [1, 2]
    assert err.directive.startswith("the receipt does not verify for this vector, collection and point")
    assert err.directive.endswith("(point 1: vector_mismatch)")
    assert err.details["reasons"]["2"].startswith(its_reason)
    # Control: the second point alone is refused for its own reason, with its own fix.
    with pytest.raises(GuardRefusal) as alone:
        client.upsert("pii", [point(2, **second)])
    assert alone.value.directive.startswith(its_fix)

