"""The async client's plain ``upload_points``/``upload_collection`` against a local-mode operation
suspended between its steps (h-async3; item (b) of review 36's list).

A receipt-preserving ``overwrite_payload`` whose stored keys cannot be written as a Qdrant key path
(one holds ``"``) reads each point's receipts, then overwrites the whole payload with them. An
upload of the same point run by another task between that read and that write (the operation is
suspended while a worker thread runs its next step) stored a new vector, whose receipt the
overwrite then replaced with the old vector's.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import make_kit, models, stored_receipt_reasons, unit
from qdrant_guard import AsyncQdrantClient, QdrantGuardError


def _cfg(kit):
    return kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True,
                               "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}})


async def _race(kit, monkeypatch, upload):
    rng = np.random.default_rng(11)
    owner = AsyncQdrantClient(":memory:", guard=_cfg(kit), principal=kit.principal("alice", "hr"))
    await owner.create_collection("pii", vectors_config=models.VectorParams(
        size=len(unit(rng)), distance=models.Distance.COSINE))
    await owner.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={'a"b': 1, "k": "orig"})])
    store = owner._client
    real = store.retrieve
    read = asyncio.Event()

    async def retrieve(*a, **kw):
        out = await real(*a, **kw)
        read.set()
        return out

    monkeypatch.setattr(store, "retrieve", retrieve)
    outcome = []

    async def uploader():
        await read.wait()  # the overwrite has read the receipt and awaits its next step
        try:
            upload(owner, rng)
            outcome.append("uploaded")
        except QdrantGuardError as exc:
            outcome.append(str(exc))

    await asyncio.gather(owner.overwrite_payload("pii", payload={"k": "new"}, points=[1]), uploader())
    monkeypatch.undo()
    reasons = await stored_receipt_reasons(owner, "pii", 1)
    await owner.close()
    return outcome, reasons


def _points(owner, rng):
    owner.upload_points("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"k": "up"})], wait=True)


def _collection(owner, rng):
    owner.upload_collection("pii", vectors=[unit(rng)], payload=[{"k": "up"}], ids=[1], wait=True)


@pytest.mark.parametrize("upload", [_points, _collection], ids=["upload_points", "upload_collection"])
def test_an_upload_between_an_overwrites_read_and_write_is_refused(tmp_path, monkeypatch, upload):
    outcome, reasons = asyncio.run(_race(make_kit(tmp_path), monkeypatch, upload))
    assert reasons == ["ok"]  # the stored vector's own receipt
    assert len(outcome) == 1 and "another guarded operation" in outcome[0], outcome


def test_an_upload_with_no_operation_in_progress_runs(tmp_path):
    # Control: the refusal is only for an upload made while another task's operation holds the lock.
    kit = make_kit(tmp_path)

    async def main():
        rng = np.random.default_rng(12)
        owner = AsyncQdrantClient(":memory:", guard=_cfg(kit), principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(
            size=len(unit(rng)), distance=models.Distance.COSINE))
        _points(owner, rng)
        await owner.query_points("pii", query=unit(rng), limit=1)  # the lock taken and given back
        _collection(owner, rng)
        reasons = await stored_receipt_reasons(owner, "pii", 1)
        await owner.close()
        return reasons

    assert asyncio.run(main()) == ["ok"]
