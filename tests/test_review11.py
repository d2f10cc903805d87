"""Eleventh review: the read path's caches across calls, and the lead's changes of 2026-12-04.
Real local mode, no mocks; each test fails on the code before its fix (docs/security-testing.md)."""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import hr_shared, make_kit, models, unit
from qdrant_guard import QdrantClient, textguard

PAYROLL = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value="payroll"))])


def test_delete_shard_key_drops_the_cached_source_sizes(tmp_path):
    # Deleting a shard key deletes the points of that shard: a source's size can shrink, so the
    # size of before must not set the cap of after (as after a delete, e4eeb19). Local mode has no
    # sharding and fails the call; the sizes go whether the write is done, failed or abandoned.
    kit = make_kit(tmp_path)
    owner = hr_shared(kit, "hr", {"max_source_coverage": 0.2, "max_source_fraction": 1.0, "min_unique_sources": 1})
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"}) for i in range(10)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert len(bob.scroll("hr", scroll_filter=PAYROLL, limit=1)[0]) == 1
    assert owner.guard.cached_source_size("hr", "payroll") == 10
    with pytest.raises(NotImplementedError):
        owner.delete_shard_key("hr", "tenant-a")
    assert owner.guard.cached_source_size("hr", "payroll") is None


def test_remembered_clean_values_stay_bounded_across_scopes(tmp_path):
    # 23d08bd gave each (collection, writer boundary) its own memory of clean payload values, each
    # bounded; the number of scopes was not. A writer naming a fresh collection per call (each
    # refused by Qdrant, after the screen ran) grew the guard's memory without bound, where the
    # process-wide memory before held at most _CLEAN_VALUES_MAX pairs.
    kit = make_kit(tmp_path)
    cfg = kit.config({}, default={"class": "PII", "owner": "hr", "intent": {"enabled": False}})
    writer = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    for n in range(100):
        with pytest.raises(ValueError):  # local mode: the collection does not exist
            writer.set_payload(f"gone{n}", payload={f"k{j}": f"v{n}-{j}" for j in range(50)}, points=[1])
    scopes = writer.guard.shared["clean_values"]
    assert sum(len(s) for s in scopes.values()) <= textguard._CLEAN_VALUES_MAX
    assert len(scopes) <= textguard._CLEAN_VALUE_SCOPES_MAX < 100
    # The memory still serves: a pair screened clean is remembered in its scope.
    with pytest.raises(ValueError):
        writer.set_payload("again", payload={"lang": "en"}, points=[1])
    assert ("lang", "en") in writer.guard.clean_values("again")


@pytest.mark.parametrize("write", ["delete", "upload_points"])
def test_a_count_after_an_unwaited_write_is_not_kept(tmp_path, write):
    # wait=False (upload_points' default): Qdrant acknowledges the write before applying it, so a
    # read that counts right after the guard dropped the sizes may count the points of before (a
    # server applies it later; local mode at once). That count served the read and, kept, set the
    # cap for 30 s after the write applied: after a delete or a retag, a share above the coverage.
    kit = make_kit(tmp_path)
    owner = hr_shared(kit, "hr", {"max_source_coverage": 0.2, "max_source_fraction": 1.0, "min_unique_sources": 1})
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"}) for i in range(10)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    if write == "delete":
        owner.delete("hr", points_selector=models.PointIdsList(points=[0, 1, 2, 3, 4]), wait=False)
    else:  # retag five points by upsert, sent unwaited as upload_points sends by default
        owner.upload_points("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "archive"})
                                   for i in range(5)])
    assert len(bob.scroll("hr", scroll_filter=PAYROLL, limit=100)[0]) == 1  # 5 left: cap 1
    assert owner.guard.cached_source_size("hr", "payroll") is None
    # A waited write after it does not shorten the unwaited one's horizon.
    owner.delete("hr", points_selector=models.PointIdsList(points=[5]))
    bob.scroll("hr", scroll_filter=PAYROLL, limit=100)
    assert owner.guard.cached_source_size("hr", "payroll") is None
