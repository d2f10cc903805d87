"""Tests from mutation pass 19 (h-mut19 branch, 2026-12-06): hand and scripts/mutate.py mutants of
qdrant_guard/_cosine_repair.py and of ``raw_vectors_left`` (querycheck.py) / ``forget_shape``
(pipeline.py). docs/security-testing.md ("Mutation pass 19") lists the mutants, the equivalent
ones and those left open.
"""
from __future__ import annotations

from guardkit import make_kit, record_sent
from qdrant_client.http import models
from test_raw_left_behind import _MMR, raw_store

from qdrant_guard import QdrantClient
from qdrant_guard.receipts import RECEIPT_KEY


def test_a_store_with_no_raw_vector_left_is_asked_one_count_and_no_scroll(tmp_path, monkeypatch):
    """Kills ``raw_vectors_left``'s ``unseen_params_filter(...) if left else None`` mutated to
    ``unseen_params_filter(...)`` (Q8): with no point left, the mutant still scrolled for receipts
    of unknown parameter sets, a read per query where the docstring promises one count."""
    owner, bob = raw_store(tmp_path)
    calls = record_sent(monkeypatch, ("count", "scroll"), with_kwargs=True)
    assert len(bob.query_points("emp", query=_MMR, limit=4).points) == 4
    guard_reads = [m for m, kw in calls if RECEIPT_KEY in repr(kw.get("count_filter", kw.get("scroll_filter")))]
    assert guard_reads == ["count"]
    owner.close()


def test_rows_near_an_axis_that_need_more_than_sixteen_steps_match_the_reference_search():
    """Rows near an axis, k = (~2^20, s), whose repair takes 23 to 240 steps, match the frozen
    reference search of tests/test_stored_form.py: random rows there almost never take more than
    the first (16-step) window. Pass 19 wrote it for ``| (window == _SMALL)`` mutated to
    ``!= _SMALL`` in ``_repair_rows``; that mutant survives it too (open, docs/security-testing.md)."""
    import numpy as np
    from test_stored_form import _ref_cosine_repair

    from qdrant_guard import _cosine_repair

    g = 2.0 ** 20
    # Each needs from 23 to 240 steps (found by repairing rows (round(sqrt(2^40 - s^2)) +- 1, s)).
    rows = [[g - 3, 2314.0], [g - 1, 897.0], [-g, 964.0], [g - 3, -2633.0], [1073.0, g - 1], [g - 1, 1073.0, 2.0]]
    for row in rows:
        k = np.array([row])
        assert _cosine_repair.drift(k)[0] > 0.25
        want = _ref_cosine_repair(k[0].copy())
        _cosine_repair.repair(k)
        assert k[0].tolist() == want.tolist(), row
        assert _cosine_repair.drift(k)[0] <= 0.25
        assert np.abs(k[0] - row).sum() > 16


def test_a_payload_change_naming_only_missing_points_is_refused(tmp_path):
    """Kills ``_existing_only``'s look-up result taken as every id when it found none (P8,
    ``present = {...found...} or {...ids...}``): a set_payload naming only points that do not exist
    must be refused like one naming some (tests/test_payload_missing_ids.py names 1, 2 and 3, of
    which 1 and 3 exist)."""
    import numpy as np
    import pytest
    from guardkit import create, unit

    from qdrant_guard import UnsupportedWriteError

    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"c": {"class": "PII", "owner": "hr"}}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "c")
    owner.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)), payload={"a": 1})])
    with pytest.raises(UnsupportedWriteError, match=r"point\(s\) \[2, 5\] do not exist"):
        owner.set_payload("c", payload={"x": 1}, points=[2, 5])
    owner.close()


def test_a_point_deleted_then_upserted_again_in_a_batch_takes_a_payload_change(tmp_path):
    """Kills ``batch_update_points`` keeping a point in ``deleted`` after a later upsert of it
    (W20, ``deleted.discard(pid)`` dropped): the set_payload after the upsert was refused as a
    change of a deleted point, though the point exists again when it runs."""
    import numpy as np
    from guardkit import create, unit

    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"c": {"class": "PII", "owner": "hr"}}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "c")
    rng = np.random.default_rng(0)
    owner.upsert("c", [models.PointStruct(id=1, vector=unit(rng), payload={"a": 1})])
    owner.batch_update_points("c", [
        models.DeleteOperation(delete=models.PointIdsList(points=[1])),
        models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=1, vector=unit(rng))])),
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={"x": 2}, points=[1])),
    ])
    (p,) = owner.retrieve("c", [1], with_payload=True)
    assert p.payload.get("x") == 2
    owner.close()
