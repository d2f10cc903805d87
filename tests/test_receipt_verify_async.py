"""``receipts.averify()``: :func:`~qdrant_guard.receipts.verify` for an ``AsyncQdrantClient``.

Before, an owner who runs the async client could not verify a collection's receipts from async
code: verify() refused the client as asynchronous, and a second, synchronous client cannot open a
local store the async one holds. averify() takes the same arguments and gives the same reports
(both drive one sans-IO core, collection_verify._verify_op). Each case is checked against verify()
on the same storage, raw qdrant-client local mode throughout.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import audit_records, create, make_kit, receipted_point, unit
from qdrant_client import AsyncQdrantClient as RawAsyncClient
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models
from test_receipt_verify_client import WANT, _pii, _store, _trusted

from qdrant_guard import AsyncQdrantClient, QdrantClient
from qdrant_guard.async_lock import TaskLock
from qdrant_guard.errors import GuardArgumentTypeError, GuardArgumentValueError, QdrantGuardError
from qdrant_guard.receipts import averify, verify

# Point 10's vector is overwritten past the guard after it was receipted (_tamper).
TAMPERED = {**WANT, (10, ""): "vector_mismatch"}


def _tamper(path: str) -> None:
    raw = RawClient(path=path)
    (p,) = raw.retrieve("pii", [10], with_payload=True, with_vectors=True)
    moved = np.asarray(p.vector) + 0.05
    raw.upsert("pii", [models.PointStruct(id=10, vector=moved.tolist(), payload=p.payload)])
    raw.close()


@pytest.fixture()
def store(tmp_path):
    kit = make_kit(tmp_path)
    path = str(tmp_path / "store")
    _store(kit, path)
    _tamper(path)
    return kit, path


def _sync_reports(path: str, **kw) -> list:
    raw = RawClient(path=path)
    try:
        return verify(raw, "pii", **kw)
    finally:
        raw.close()


def _async_reports(path: str, client_type: type = RawAsyncClient, **kw) -> list:
    async def run() -> list:
        client = client_type(path=path)
        try:
            return await averify(client, "pii", **kw)
        finally:
            await client.close()

    return asyncio.run(run())


def _reasons(reports: list) -> dict:
    return {(r.point_id, r.vector_name): r.reason for r in reports}


@pytest.mark.parametrize("kw", [
    {},
    {"batch_size": 2},
    {"ids": [21, 0, "00000000-0000-0000-0000-000000000063", 10, 20, 0], "batch_size": 2},
    {"max_age_s": 60.0, "now": 4e9},
    {"max_clock_skew_s": 0.0, "now": 1e9},
    {"check_noise": True, "revoked": ["no-such-key"]},
], ids=["all", "paged", "ids", "expired", "ahead", "noise"])
def test_averify_gives_the_reports_verify_gives_on_the_same_store(store, kw):
    kit, path = store
    args = dict(trusted_keys=_trusted(kit), **kw)
    want = _sync_reports(path, **args)
    got = _async_reports(path, **args)
    assert got == want  # every field of every report, in the same order
    if not kw:
        assert _reasons(got) == TAMPERED
    if "ids" in kw:  # the missing id first (as verify() gives it), 0 once though named twice
        assert [(r.point_id, r.reason) for r in got] == [
            ("00000000-0000-0000-0000-000000000063", "missing_point"), (21, "unknown_key"),
            (0, "missing_receipt"), (10, "vector_mismatch"), (20, "bad_merkle_proof")]
    if "max_age_s" in kw:
        assert {r.reason for r in got if r.check.key_id is not None} >= {"expired"}
    if "max_clock_skew_s" in kw:
        assert _reasons(got)[(11, "")] == "not_yet_valid"


def test_averify_reads_page_by_page(store):
    kit, path = store
    pages: list[int] = []

    class Counting(RawAsyncClient):  # a real local-mode client that counts its scroll pages
        async def scroll(self, *args, **kwargs):
            points, offset = await super().scroll(*args, **kwargs)
            pages.append(len(points))
            return points, offset

    got = _async_reports(path, Counting, trusted_keys=_trusted(kit), batch_size=3)
    assert pages == [3, 3, 2] and _reasons(got) == TAMPERED


def test_a_policy_and_a_noise_policy_judge_alike(tmp_path):
    kit = make_kit(tmp_path)
    path = str(tmp_path / "store")
    rng = np.random.default_rng(5)
    raw = RawClient(path=path)
    create(raw, "pii", distance=models.Distance.EUCLID)
    raw.upsert("pii", [receipted_point(kit, 1, rng), receipted_point(kit, 2, rng, epsilon=8.0),
                       receipted_point(kit, 3, rng, model_id="other-model"),
                       models.PointStruct(id=4, vector=unit(rng))])
    raw.close()
    cfg = kit.config({"pii": _pii(utility={"embedding_model": "mini"})})
    args = dict(trusted_keys=_trusted(kit), policy=cfg, noise_policy=cfg.policy_for("pii").noise)
    got = _async_reports(path, **args)
    assert got == _sync_reports(path, **args)
    assert _reasons(got) == {(1, ""): "ok", (2, ""): "insufficient_noise", (3, ""): "model_mismatch",
                             (4, ""): "missing_receipt"}


def test_the_owner_guarded_async_client_is_read_past_its_guard_under_one_audit_entry(store):
    kit, path = store
    want = _sync_reports(path, trusted_keys=_trusted(kit))
    cfg = kit.config({"pii": _pii()})

    async def run() -> None:
        owner = AsyncQdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
        # The owner's own reads strip the raw and the badly receipted vectors.
        assert (await owner.retrieve("pii", [0, 20], with_vectors=True))[0].vector is None
        taken: list[str] = []

        class Counting(TaskLock):  # the client's real local-mode lock, its acquisitions counted
            async def acquire(self):
                taken.append("acquire")
                return await super().acquire()

        owner._alock = Counting()
        before = audit_records(kit)
        assert await averify(owner, "pii", trusted_keys=_trusted(kit), batch_size=2) == want
        after = audit_records(kit)
        assert len(after) == len(before) + 1  # four scroll pages, one entry
        # Each read (get_aliases, four pages) waited its turn for the client, as a guarded call does.
        assert len(taken) == 5 and owner._alock.owner is None
        assert after[-1]["op"] == "receipts.verify" and after[-1]["collection"] == "pii"
        assert after[-1]["verdict"] == "ALLOW" and "alice" in after[-1]["principal"]
        assert "receipts.averify()" in after[-1]["directive"]
        assert _reasons(await averify(owner, "pii", [0, 20, 99], trusted_keys=_trusted(kit))) == {
            (0, ""): "missing_receipt", (20, ""): "bad_merkle_proof", (99, ""): "missing_point"}
        # Refused for its arguments, before anything is read: no entry.
        n = len(audit_records(kit))
        with pytest.raises(ValueError, match="batch_size"):
            await averify(owner, "pii", trusted_keys=_trusted(kit), batch_size=0)
        with pytest.raises(GuardArgumentValueError, match=r"averify\(ids=...\): 'x' is not a Qdrant point id"):
            await averify(owner, "pii", ["x"], trusted_keys=_trusted(kit))
        assert len(audit_records(kit)) == n
        await owner.close()

    asyncio.run(run())


def test_a_guarded_verify_refused_for_a_bad_id_leaves_no_audit_entry(store):
    # Before, verify() checked ids after its first read past the guard: the owner's refused call
    # left an ALLOW entry for reads it never made.
    kit, path = store
    owner = QdrantClient(path=path, guard=kit.config({"pii": _pii()}), principal=kit.principal("alice", "hr"))
    before = audit_records(kit)
    with pytest.raises(GuardArgumentValueError, match=r"verify\(ids=...\): -1 is not a Qdrant point id"):
        verify(owner, "pii", [1, -1], trusted_keys=_trusted(kit))
    assert audit_records(kit) == before
    owner.close()


def test_another_principals_guarded_async_client_is_refused_naming_the_fix(store):
    kit, path = store
    cfg = kit.config({"pii": _pii()})

    async def run() -> None:
        owner = AsyncQdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
        bob = owner.with_principal(kit.principal("bob", "support"))
        before = audit_records(kit)
        with pytest.raises(GuardArgumentTypeError) as exc:
            await averify(bob, "pii", trusted_keys=_trusted(kit))
        text = str(exc.value)
        assert isinstance(exc.value, QdrantGuardError) and isinstance(exc.value, TypeError)
        assert text.startswith("averify() client is a guarded AsyncQdrantClient acting for a principal of boundary "
                               "'support'")
        assert "owned by 'hr'" in text and "unguarded qdrant_client.AsyncQdrantClient" in text
        assert "close this one first" in text and audit_records(kit) == before
        assert "(AsyncQdrantClient(path=...) or url=...; a local store" in text  # the CLI opens a sync one
        await owner.close()
        anonymous = AsyncQdrantClient(":memory:", guard=cfg)
        with pytest.raises(GuardArgumentTypeError, match="an unverified principal"):
            await averify(anonymous, "pii", trusted_keys=_trusted(kit))
        await anonymous.close()
        # A collection the policy does not list (unlisted = "refuse"): no one's guard reads it.
        unlisting = AsyncQdrantClient(":memory:", guard=kit.config({"other": _pii()}, unlisted="refuse"),
                                      principal=kit.principal("alice", "hr"))
        with pytest.raises(GuardArgumentTypeError, match=r"a collection its policy does not list \(unlisted = "):
            await averify(unlisting, "pii", trusted_keys=_trusted(kit))
        await unlisting.close()

    asyncio.run(run())


def test_a_public_collection_is_read_through_the_guarded_async_client(tmp_path):
    kit = make_kit(tmp_path)
    rng = np.random.default_rng(3)
    cfg = kit.config({"pii": {"class": "PUBLIC"}})
    points = [receipted_point(kit, 1, rng), models.PointStruct(id=2, vector=unit(rng))]

    async def run() -> dict:
        client = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("bob", "support"))
        await client.create_collection("pii", vectors_config=models.VectorParams(
            size=len(points[1].vector), distance=models.Distance.EUCLID))
        await client.upsert("pii", points)
        out = {"plain": _reasons(await averify(client, "pii", trusted_keys=_trusted(kit))),
               "policy": _reasons(await averify(client, "pii", trusted_keys=_trusted(kit), policy=cfg))}
        await client.close()
        return out

    got = asyncio.run(run())
    assert got == {"plain": {(1, ""): "ok", (2, ""): "missing_receipt"},
                   "policy": {(1, ""): "ok", (2, ""): "not_required"}}
    # verify() on a sync client holding the same points reports alike.
    sync = QdrantClient(":memory:", guard=cfg, principal=kit.principal("bob", "support"))
    create(sync, "pii", distance=models.Distance.EUCLID)
    sync.upsert("pii", points)
    assert _reasons(verify(sync, "pii", trusted_keys=_trusted(kit), policy=cfg)) == got["policy"]
    sync.close()


def test_each_function_refuses_the_other_kind_of_client_naming_the_other(tmp_path):
    kit = make_kit(tmp_path)
    sync = RawClient(":memory:")
    with pytest.raises(GuardArgumentTypeError, match=r"^averify\(\) awaits the client's reads and client is a "
                                                     r"QdrantClient.*qdrant_guard\.receipts\.verify\(\)"):
        asyncio.run(averify(sync, "pii", trusted_keys=_trusted(kit)))
    sync.close()
    with pytest.raises(GuardArgumentTypeError, match=r"^averify\(\) client must be a qdrant_client.AsyncQdrantClient"):
        asyncio.run(averify(object(), "pii", trusted_keys=_trusted(kit)))
    client = RawAsyncClient(":memory:")
    with pytest.raises(GuardArgumentTypeError,
                       match=r"^verify\(\) is synchronous .*`await qdrant_guard\.receipts\.averify\(\.\.\.\)`"):
        verify(client, "pii", trusted_keys=_trusted(kit))
    asyncio.run(client.close())
