"""Suspected defects an earlier review left open: upsert's accepted point containers, payload
rewrites naming missing points, the missing source's size, audit-record key escaping and ties in
the eval's re-identification (real local-mode Qdrant, real crypto)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import QdrantClient, UnsupportedWriteError
from qdrant_guard.audit import verify_audit_file
from qdrant_guard.receipts import verify as verify_stored
from tests.guardkit import create, hr_shared, make_kit, models, snapshot, unit


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _records(kit):
    lines = (kit.tmp / "audit.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["record"] for line in lines]


def _points():
    return [models.PointStruct(id=i, vector=unit(np.random.default_rng(i)), payload={"text": "note", "n": i})
            for i in range(3)]


# -- 1. upsert's points: a list or a models.Batch, as qdrant-client takes them -------------------

POLICIES = {
    "public": {"class": "PUBLIC", "text_field": "text"},
    "sensitive": {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "raw_in_boundary": True},
}

NOT_A_LIST = {
    "tuple": lambda: tuple(_points()),
    "generator": lambda: (p for p in _points()),
    "iterator": lambda: iter(_points()),
    "PointsList": lambda: models.PointsList(points=_points()),
}


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("form", sorted(NOT_A_LIST))
def test_upsert_refuses_the_point_containers_qdrant_client_refuses(kit, policy, form):
    # qdrant-client raises on a tuple, generator or other iterable and stores nothing; the guard
    # iterated any of them and stored the points (old code), and named a PointsList "tuple".
    raw = RawClient(":memory:")
    create(raw, "c")
    with pytest.raises((TypeError, ValueError)):
        raw.upsert("c", NOT_A_LIST[form]())
    assert snapshot(raw, "c") == []

    guarded = QdrantClient(":memory:", guard=kit.config({"c": POLICIES[policy]}), principal=kit.principal("alice", "hr"))
    create(guarded, "c")
    with pytest.raises(UnsupportedWriteError, match=type(NOT_A_LIST[form]()).__name__):
        guarded.upsert("c", NOT_A_LIST[form]())
    assert _records(kit)[-1]["verdict"] == "UNSUPPORTED_WRITE"
    assert guarded.count("c").count == 0


@pytest.mark.parametrize("form", ["list", "batch"])
def test_a_public_upsert_of_a_list_or_batch_stores_what_qdrant_client_stores(kit, form):
    def points():
        if form == "list":
            return _points()
        ps = _points()
        return models.Batch(ids=[p.id for p in ps], vectors=[p.vector for p in ps], payloads=[p.payload for p in ps])

    raw = RawClient(":memory:")
    create(raw, "c")
    raw.upsert("c", points())
    guarded = QdrantClient(":memory:", guard=kit.config({"c": POLICIES["public"]}), principal=kit.principal("alice", "hr"))
    create(guarded, "c")
    guarded.upsert("c", points())
    assert snapshot(guarded, "c") == snapshot(raw, "c")


# -- 2. payload rewrites naming a missing point ---------------------------------------------------

def _rewrite(client, how, ids):
    if how == "overwrite_payload":
        client.overwrite_payload("c", payload={"x": 1}, points=ids)
    elif how == "clear_payload":
        client.clear_payload("c", points_selector=ids)
    elif how == "batch_overwrite":
        client.batch_update_points("c", [models.OverwritePayloadOperation(
            overwrite_payload=models.SetPayload(payload={"x": 1}, points=ids))])
    else:
        client.batch_update_points("c", [models.ClearPayloadOperation(clear_payload=models.PointIdsList(points=ids))])


def _payloads(client):
    return {p.id: {k: v for k, v in (p.payload or {}).items() if not k.startswith("_")}
            for p in client.scroll("c", limit=10, with_payload=True)[0]}


@pytest.mark.parametrize("how", ["overwrite_payload", "clear_payload", "batch_overwrite", "batch_clear"])
@pytest.mark.parametrize("ids", [[99], [1, 99], [99, 1]])
def test_a_payload_rewrite_naming_a_missing_point_fails_like_qdrant_client_and_writes_nothing(kit, how, ids):
    # qdrant-client raises on the missing id (after rewriting the ids before it); on a sensitive
    # collection the guard's per-point, receipt-preserving rewrite skipped it and reported success
    # (old code), so a caller never learned the point was missing.
    originals = [models.PointStruct(id=i, vector=unit(np.random.default_rng(i)), payload={"a": i}) for i in (1, 2)]
    raw = RawClient(":memory:")
    create(raw, "c")
    raw.upsert("c", originals)
    with pytest.raises(KeyError):
        _rewrite(raw, how, ids)

    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "raw_in_boundary": False}
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "c")
    owner.upsert("c", originals)
    before = _payloads(owner)
    with pytest.raises(UnsupportedWriteError, match=r"\[99\]"):
        _rewrite(owner, how, ids)
    assert _records(kit)[-1]["verdict"] == "UNSUPPORTED_WRITE"
    assert _payloads(owner) == before  # nothing half applied
    assert [r.check.ok for r in verify_stored(owner, "c", trusted_keys=owner.guard.trusted_receipt_keys)] == [True, True]
    _rewrite(owner, how, [1])  # an existing point alone is rewritten as before
    assert _payloads(owner)[1] == ({"x": 1} if "overwrite" in how else {})


@pytest.mark.parametrize("rewrite", [
    models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"x": 1}, points=[1])),
    models.ClearPayloadOperation(clear_payload=models.PointIdsList(points=[1])),
])
def test_a_batch_rewrite_of_a_point_deleted_earlier_in_the_batch_is_refused_whole(kit, rewrite):
    # The guard resolves a rewrite's points before the batch runs, so it found point 1 and sent
    # [upsert 3, delete 1, rewrite 1]; Qdrant applied the upsert and the delete, then failed on the
    # rewrite (old code).
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "raw_in_boundary": False}
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "c")
    owner.upsert("c", [models.PointStruct(id=i, vector=unit(np.random.default_rng(i)), payload={"a": i}) for i in (1, 2)])
    before = snapshot(owner, "c")
    ops = [models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=3, vector=unit(np.random.default_rng(3)))])),
           models.DeleteOperation(delete=models.PointIdsList(points=[1])), rewrite]
    with pytest.raises(UnsupportedWriteError, match=r"\[1\].*deleted earlier"):
        owner.batch_update_points("c", ops)
    assert snapshot(owner, "c") == before


# -- 3. the missing source's size -----------------------------------------------------------------

def test_points_tagged_with_an_empty_source_count_in_the_missing_sources_size(kit):
    # The budget names no source for "" (it counts under "__unknown__"), but sized "__unknown__" by
    # IsEmpty, which does not match "": the size fell back to the points just returned, so a read of
    # 4 of 10 such points got a cap of floor(4 * 0.5) = 2 instead of 5 (old code).
    owner = hr_shared(kit, "hr", {"max_source_coverage": 0.5, "max_source_fraction": 1.0, "min_unique_sources": 1})
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": ""}) for i in range(10)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert len(bob.query_points("hr", query=unit(rng), limit=4).points) == 4
    assert len(bob.query_points("hr", query=unit(rng), limit=10).points) == 5  # cap of 10 points at 0.5


def test_the_missing_sources_size_counts_the_points_the_budget_charges_to_it():
    from qdrant_guard.sourcefilters import _missing_source_count_filter, _source_condition
    from qdrant_guard.sources import payload_sources

    values = ["absent", None, "", [], [None], ["", ""], [""], [None, ""], ["", "a"], "a", 7, 1.5, True, False,
              [1.5, ""], "__unknown__", ["__unknown__", "a"], ["a", None]]
    raw = RawClient(":memory:")
    create(raw, "c")
    raw.upsert("c", [models.PointStruct(id=i, vector=unit(np.random.default_rng(i)),
                                        payload={} if v == "absent" else {"meta": {"src": v}})
                     for i, v in enumerate(values)])
    flt = _missing_source_count_filter("meta.src")
    counted = {p.id for p in raw.scroll("c", scroll_filter=flt, limit=100)[0]}
    charged = {i for i, v in enumerate(values)
               if (lambda s: not s or "__unknown__" in s)(payload_sources({} if v == "absent" else {"meta": {"src": v}}, "meta.src"))}
    assert counted == charged
    assert raw.count("c", count_filter=flt, exact=True).count == len(charged)
    # The read's exclusion of the missing source matches those points too ([null] was missed, old
    # code), and over-matches only the documented ["", "a"] (a "" next to another source).
    excl = models.Filter(must=[_source_condition("meta.src", "__unknown__")])
    excluded = {p.id for p in raw.scroll("c", scroll_filter=excl, limit=100)[0]}
    assert excluded == charged | {values.index(["", "a"]), values.index([1.5, ""])}


# -- 4. audit-record keys -------------------------------------------------------------------------

def test_audit_keys_of_a_lone_surrogate_and_of_its_escape_text_stay_distinct():
    from qdrant_guard.decision import _jsonable

    keys = ["m\ud800", "m\\ud800", "\\escaped:m\\ud800", "\\escaped:m\\\\ud800", "plain", "é", "C:\\docs"]
    out = _jsonable({k: i for i, k in enumerate(keys)})
    assert len(out) == len(keys)  # injective: no two sources share an entry
    assert sorted(out.values()) == list(range(len(keys)))
    json.dumps(out).encode("utf-8")  # UTF-8 safe
    # Keys that encode stay as they were (a marker-prefixed one aside).
    assert {k: out[k] for k in ("plain", "é", "C:\\docs", "m\\ud800")} == {"plain": 4, "é": 5, "C:\\docs": 6, "m\\ud800": 1}


def test_a_budget_report_keeps_a_surrogate_source_and_its_escape_text_apart(kit):
    # Both sources were withheld, and both reports went under the key "m\\ud800": the audit entry
    # kept one of them (old code).
    owner = hr_shared(kit, "hr", {"max_source_coverage": 0.2, "max_source_fraction": 1.0, "min_unique_sources": 1})
    rng = np.random.default_rng(1)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "m\ud800" if i < 10 else "m\\ud800"})
                        for i in range(20)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert len(bob.query_points("hr", query=unit(rng), limit=20).points) == 4  # 2 of each
    reports = [r["details"]["budget"] for r in _records(kit) if "budget" in r.get("details", {})]
    assert reports and all(len(rep) == 2 for rep in reports)
    assert sum(v["withheld"] for v in reports[0].values()) >= 2
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


# -- 5. ties in the eval's re-identification ------------------------------------------------------

def test_reidentify_counts_a_tie_with_a_wrong_candidate_as_no_hit():
    from qdrant_guard.evaluation.attacks import reidentify

    pool = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # rows 0 and 1 are the same
    released = pool.copy()
    out = reidentify(pool, released)
    # Rows 0 and 1 tie with each other: neither is a confident top-1 hit (both were, old code).
    assert out["top1"] == pytest.approx(2 / 4)
    assert out["top10"] == 1.0
    # An all-zero released vector is equally similar to every row: no hit (old code: every row).
    zeros = reidentify(pool[2:], np.zeros((2, 2)))
    assert zeros["top1"] == 0.0
    nan = reidentify(pool[2:], np.array([[np.nan, 0.0], [0.0, np.nan]]))
    assert nan == {"top1": 0.0, "top10": 0.0, "chance": 0.5}
    # top-10 counts the candidates at least as similar as the truth: 12 copies of one row.
    many = np.tile([[1.0, 0.0]], (12, 1))
    assert reidentify(many, many)["top10"] == 0.0
    assert reidentify(pool, released) == out  # deterministic


def test_reidentify_without_ties_is_unchanged():
    from qdrant_guard.evaluation.attacks import reidentify

    rng = np.random.default_rng(7)
    pool = rng.normal(size=(30, 8))
    released = pool + rng.normal(scale=0.8, size=pool.shape)
    sims = (released / np.linalg.norm(released, axis=1, keepdims=True)) @ (pool / np.linalg.norm(pool, axis=1, keepdims=True)).T
    ranks = [int((row > row[i]).sum()) for i, row in enumerate(sims)]
    out = reidentify(pool, released)
    assert out["top1"] == pytest.approx(np.mean([r == 0 for r in ranks]))
    assert out["top10"] == pytest.approx(np.mean([r < 10 for r in ranks]))


def test_a_log_with_entries_of_the_old_and_the_new_key_escaping_still_verifies(tmp_path):
    from qdrant_guard.audit import AuditLog
    from qdrant_guard.decision import _jsonable

    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.append({"op": "query_points", "details": {"budget": {"m\\ud800": {"withheld": 8, "seen": 2, "cap": 2}}}})
    log.append({"op": "query_points", "details": _jsonable({"budget": {"m\ud800": {"withheld": 8},
                                                                       "m\\ud800": {"withheld": 8}}})})
    log.close()
    report = verify_audit_file(path)
    assert report.ok
    last = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])["record"]
    assert sorted(last["details"]["budget"]) == ["\\escaped:m\\ud800", "m\\ud800"]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_re_upserting_records_read_without_vectors_keeps_the_stored_vectors(kit, policy):
    # qdrant-client fails on a Record whose vector is None and keeps the point; the guard turned it
    # into vector={} and stored the point without its vectors (old code): scroll() then upsert()
    # wiped every vector on PUBLIC and sensitive collections alike.
    raw = RawClient(":memory:")
    create(raw, "c")
    raw.upsert("c", _points())
    with pytest.raises(AttributeError):
        raw.upsert("c", raw.scroll("c", limit=10)[0])
    assert all(p.vector for p in raw.scroll("c", limit=10, with_vectors=True)[0])

    guarded = QdrantClient(":memory:", guard=kit.config({"c": POLICIES[policy]}), principal=kit.principal("alice", "hr"))
    create(guarded, "c")
    guarded.upsert("c", _points())
    before = snapshot(guarded, "c")
    records = guarded.scroll("c", limit=10, with_vectors=False)[0]
    with pytest.raises(UnsupportedWriteError, match=r"models\.Record 0 has no vector"):
        guarded.upsert("c", records)
    assert snapshot(guarded, "c") == before
    # Records read with their vectors are still accepted, as qdrant-client's local mode takes them.
    guarded.upsert("c", guarded.scroll("c", limit=10, with_vectors=True)[0])
    after = snapshot(guarded, "c")
    assert [(i, p) for i, p, _ in after] == [(i, p) for i, p, _ in before]
    assert all(np.allclose(v, w, atol=1e-6) for (_, _, v), (_, _, w) in zip(after, before))
