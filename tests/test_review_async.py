"""Review of the async client, the facade and the pipeline drivers (local Qdrant, real crypto).

A decided write whose Qdrant call fails must leave a QDRANT_ERROR entry after its allow entry
(docs/atomicity.md), whatever the failure: an asyncio cancellation (a timeout around a guarded
call on a server connection) or a payload/delete write, not only upserts.
"""
from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import qdrant_client

from guardkit import DIM, create, make_kit, models, snapshot, unit
from qdrant_guard import AsyncQdrantClient, QdrantClient
from qdrant_guard.audit import verify_audit_file


class Injected(RuntimeError):
    pass


def _cfg(kit):
    return kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                               "text_field": "text", "intent": {"enabled": False}}})


def _records(kit):
    return [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text().splitlines()]


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


# -- 1. a cancelled async write is audited ------------------------------------------------------
@pytest.mark.parametrize("method", ["upsert", "update_vectors", "batch_update_points", "overwrite_payload"])
def test_async_write_cancelled_after_the_decision_is_audited(kit, monkeypatch, method):
    """A server round trip can be cancelled (asyncio.wait_for) after the allow entry is written;
    the log must then say so, as it does for any other transport failure."""
    sent = "upsert" if method == "upsert" else "batch_update_points"

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_cfg(kit), principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        rng = np.random.default_rng(0)
        await owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"n": i}) for i in range(3)])
        before = await qdrant_client.AsyncQdrantClient.count(owner, "pii")  # unguarded: not audited
        original = getattr(qdrant_client.AsyncQdrantClient, sent)

        async def hung(self, *a, **kw):  # the request never comes back (a stalled connection)
            await asyncio.sleep(30)
            return await original(self, *a, **kw)

        monkeypatch.setattr(qdrant_client.AsyncQdrantClient, sent, hung)
        call = {
            "upsert": lambda: owner.upsert("pii", [models.PointStruct(id=9, vector=unit(rng))]),
            "update_vectors": lambda: owner.update_vectors("pii", [models.PointVectors(id=0, vector=unit(rng))]),
            "batch_update_points": lambda: owner.batch_update_points("pii", [models.UpsertOperation(
                upsert=models.PointsList(points=[models.PointStruct(id=9, vector=unit(rng))]))]),
            "overwrite_payload": lambda: owner.overwrite_payload("pii", {"n": 7}, [1]),
        }[method]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(call(), timeout=0.05)
        monkeypatch.undo()
        assert (await qdrant_client.AsyncQdrantClient.count(owner, "pii")) == before
        await owner.close()

    asyncio.run(main())
    records = _records(kit)
    assert records[-2]["verdict"].startswith("ALLOW") and records[-2]["op"] == method
    assert records[-1]["verdict"] == "QDRANT_ERROR" and records[-1]["op"] == method
    assert "CancelledError" in records[-1]["directive"]
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


def test_sync_write_interrupted_after_the_decision_is_audited(kit, monkeypatch):
    """KeyboardInterrupt during the Qdrant call (the process survives it): audited like a failure."""
    owner = QdrantClient(":memory:", guard=_cfg(kit), principal=kit.principal("alice", "hr"))
    create(owner, "pii")

    def interrupted(self, *a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(qdrant_client.QdrantClient, "upsert", interrupted)
    with pytest.raises(KeyboardInterrupt):
        owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)))])
    monkeypatch.undo()
    assert snapshot(owner, "pii") == []
    records = _records(kit)
    assert records[-1]["verdict"] == "QDRANT_ERROR" and "KeyboardInterrupt" in records[-1]["directive"]


# -- 2. payload and delete writes failing in Qdrant are audited ---------------------------------
@pytest.mark.parametrize("method,sent,call", [
    ("set_payload", "set_payload", lambda c: c.set_payload("pii", {"k": 1}, [0])),
    ("delete_payload", "delete_payload", lambda c: c.delete_payload("pii", ["n"], [0])),
    ("overwrite_payload", "batch_update_points", lambda c: c.overwrite_payload("pii", {"k": 1}, [0])),
    ("clear_payload", "batch_update_points", lambda c: c.clear_payload("pii", [0])),
    ("delete", "delete", lambda c: c.delete("pii", [0])),
    # The point carries a receipt: the vector and the receipt go out as one batch.
    ("delete_vectors", "batch_update_points", lambda c: c.delete_vectors("pii", [""], [0])),
])
def test_payload_and_delete_writes_failing_in_qdrant_are_audited(kit, monkeypatch, method, sent, call):
    owner = QdrantClient(":memory:", guard=_cfg(kit), principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    owner.upsert("pii", [models.PointStruct(id=0, vector=unit(np.random.default_rng(0)), payload={"n": 0})])
    before = snapshot(owner, "pii")

    def fail(self, *a, **kw):
        raise Injected("transport down")

    monkeypatch.setattr(qdrant_client.QdrantClient, sent, fail)
    with pytest.raises(Injected):
        call(owner)
    monkeypatch.undo()
    assert snapshot(owner, "pii") == before
    records = _records(kit)
    assert records[-2]["verdict"] == "ALLOW" and records[-2]["op"] == method
    assert records[-1]["verdict"] == "QDRANT_ERROR" and records[-1]["op"] == method
    assert records[-1]["details"]["error"] == "Injected" and "transport down" not in json.dumps(records[-1])
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


# -- 3. allowed multi-collection calls are audited ----------------------------------------------
def _alias_client(kit, cls=QdrantClient):
    pol = {"class": "PII", "owner": "hr", "readers": ["support"]}
    return cls(":memory:", guard=kit.config({"pii": pol, "pii2": pol, "pub": {"class": "PUBLIC"}}),
               principal=kit.principal("alice", "hr"))


def _create_alias(collection, alias):
    return models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection, alias_name=alias))


def test_allowed_alias_changes_on_a_sensitive_collection_are_audited(kit):
    owner = _alias_client(kit)
    create(owner, "pii")
    create(owner, "pub")
    n = len(_records(kit))
    owner.update_collection_aliases([_create_alias("pii", "pii2"), _create_alias("pub", "pub2")])
    assert sorted(a.alias_name for a in owner.get_aliases().aliases) == ["pii2", "pub2"]
    new = _records(kit)[n:]
    # One entry for the sensitive collection's alias; the PUBLIC one passes unrecorded, as PUBLIC calls do.
    assert [(r["op"], r["verdict"], r["collection"]) for r in new] == [("update_collection_aliases", "ALLOW", "pii")]
    assert "pii2" in new[0]["directive"]
    owner.update_collection_aliases([models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name="pii2"))])
    new = _records(kit)[n + 1:]
    assert [(r["op"], r["verdict"], r["collection"]) for r in new] == [("update_collection_aliases", "ALLOW", "pii")]
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


def test_alias_batch_refused_late_audits_no_earlier_acceptance(kit):
    owner = _alias_client(kit)
    create(owner, "pii")
    n = len(_records(kit))
    with pytest.raises(Exception):
        owner.update_collection_aliases([_create_alias("pii", "pii2"), _create_alias("pii", "elsewhere")])
    new = _records(kit)[n:]
    assert [r["verdict"] for r in new] == ["REFUSED_CROSS_BOUNDARY"]
    assert owner.get_aliases().aliases == []


def test_allowed_migrate_is_audited_with_the_collections_moved(kit):
    owner = _alias_client(kit)
    create(owner, "pii")
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)))])
    dest = qdrant_client.QdrantClient(":memory:")
    n = len(_records(kit))
    owner.migrate(dest, collection_names=["pii"])
    assert dest.count("pii").count == 1
    new = [r for r in _records(kit)[n:] if r["op"] == "migrate"]
    assert len(new) == 1 and new[0]["verdict"] == "ALLOW" and new[0]["details"]["collections"] == ["pii"]


def test_async_alias_changes_are_audited_like_sync(kit):
    async def main():
        owner = _alias_client(kit, AsyncQdrantClient)
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        n = len(_records(kit))
        await owner.update_collection_aliases([_create_alias("pii", "pii2")])
        await owner.close()
        return _records(kit)[n:]

    new = asyncio.run(main())
    assert [(r["op"], r["verdict"], r["collection"]) for r in new] == [("update_collection_aliases", "ALLOW", "pii")]


# -- 4. many tasks on one async client, cancelled mid-call --------------------------------------
class SlowClassifier:
    """Blocks its worker thread a little, so timeouts land while a query is being classified."""

    name = "slow-review"

    def classify(self, text, *, embedding=None):
        import time

        from qdrant_guard.intent import IntentResult

        time.sleep(0.004)
        return IntentResult(label="benign", confidence=0.9, reasoning="fine", classifier="slow-review")


def test_cancelled_tasks_leave_budgets_exact_writes_whole_and_the_audit_chain_intact(kit):
    from qdrant_guard.hashing_embedder import HashingEmbedder

    base = HashingEmbedder(DIM)

    def slow_embed(texts):
        import time

        time.sleep(0.004)
        return base(texts)

    cfg = kit.config({"pii": {
        "class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "noise_on_write": True,
        "text_field": "text", "intent": {"enabled": True, "classifier": "test_review_async:SlowClassifier"},
        "diversity": {"max_source_coverage": 0.25, "restricted_sources": ["memo"], "max_source_fraction": 1.0}}})
    memo = 40

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=slow_embed)
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        rng = np.random.default_rng(0)
        await owner.upsert("pii", [models.PointStruct(id=10_000 + i, vector=unit(rng), payload={"source": "memo"})
                                   for i in range(memo)])
        bob = owner.with_principal(kit.principal("bob", "support"))
        received: set = set()
        memo_only = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value="memo"))])

        async def write(i):
            await bob.upsert("pii", [models.PointStruct(
                id=i, vector=models.Document(text=f"note {i}: call John Doe at 555-123-4567", model="m"),
                payload={"text": f"note {i} for 555-123-4567", "source": "notes"})])

        async def read(i):
            res = await bob.query_points("pii", query=unit(np.random.default_rng(i)), query_text="what does the memo say",
                                         limit=5, query_filter=memo_only)
            received.update(p.id for p in res.points)

        async def bounded(i):
            try:
                await asyncio.wait_for(write(i) if i % 2 else read(i), timeout=0.002 + 0.0004 * (i % 25))
                return "done"
            except asyncio.TimeoutError:
                return "timed out"

        outcomes = await asyncio.gather(*(bounded(i) for i in range(120)))
        stored, _ = await qdrant_client.AsyncQdrantClient.scroll(owner, "pii", limit=1000, with_payload=True)
        await owner.close()
        return outcomes, received, stored

    outcomes, received, stored = asyncio.run(main())
    assert set(outcomes) <= {"done", "timed out"}
    assert "timed out" in outcomes  # the timeouts really landed mid-call
    assert len(received) <= memo // 4  # budget exact: floor(40 * 0.25)
    written = {r.id for r in stored if r.id < 10_000}
    for r in stored:
        if r.id < 10_000:
            assert r.payload["text"] == f"note {r.id} for [PHONE]"  # redacted, never half-written
    records = _records(kit)
    accepted = {pid for r in records if r["op"] == "upsert" and r["verdict"] == "ALLOW_NOISED"
                and r["principal"] == "bob@support" for pid in r["point_ids"]}
    assert accepted == written  # every stored point has its decision, and every decision its point
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


# -- 5. a sync client's read-modify-write is not interleaved by another thread ------------------
def test_overwrite_payload_racing_an_upsert_from_another_thread_keeps_a_valid_receipt(kit, monkeypatch):
    """overwrite_payload reads each point's receipt, then writes the new payload with it. In local
    mode another thread's upsert (a new vector, a new receipt) must not land in between, or the
    point keeps the stale receipt of a vector it no longer holds. (The async client never
    suspends between the two in local mode.)"""
    import threading

    from qdrant_guard.audit import AuditLog
    from qdrant_guard.receipts import verify as verify_stored

    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                              "intent": {"enabled": False}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    rng = np.random.default_rng(0)
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"n": 1})])
    bob = owner.with_principal(kit.principal("bob", "support"))
    paused, resume = threading.Event(), threading.Event()
    append = AuditLog.append

    def slow_append(self, record):  # A's decision is written after the receipt read, before the write
        if record.get("op") == "overwrite_payload":
            paused.set()
            resume.wait(5)
        return append(self, record)

    monkeypatch.setattr(AuditLog, "append", slow_append)
    errors: list[BaseException] = []

    def run(fn):
        try:
            fn()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    a = threading.Thread(target=run, args=(lambda: owner.overwrite_payload("pii", {"n": 2}, [1]),))
    b = threading.Thread(target=run, args=(lambda: bob.upsert("pii", [models.PointStruct(
        id=1, vector=unit(rng), payload={"n": 3})]),))
    a.start()
    assert paused.wait(5)
    b.start()
    b.join(0.3)  # unserialised, B's upsert completes here
    resume.set()
    a.join(5)
    b.join(5)
    monkeypatch.undo()
    assert not errors, errors
    reports = verify_stored(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys)
    assert [(r.point_id, r.ok) for r in reports] == [(1, True)], reports


# -- 6. llama-index's async store: reader paths go through the guard -------------------------------
def test_llamaindex_async_reader_paths_are_guarded(kit):
    pytest.importorskip("llama_index.vector_stores.qdrant")
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters
    from llama_index.vector_stores.qdrant import QdrantVectorStore

    from integration_embeddings import TEXTS, LIHashingEmbedding
    from qdrant_guard import GuardRefusal

    emb = LIHashingEmbedding()
    cfg = kit.config({"kb": {"class": "PII", "owner": "hr", "readers": ["support"], "noise_on_write": False,
                             "raw_in_boundary": True, "text_field": "_node_content", "diversity": {"enabled": False}}})
    nodes = [TextNode(text=f"{t}, call 555-123-4567", metadata={"source": f"d{i}"}, embedding=emb.get_text_embedding(t))
             for i, t in enumerate(TEXTS)]

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await QdrantVectorStore(collection_name="kb", aclient=owner).async_add(nodes)
        reader = QdrantVectorStore(collection_name="kb", aclient=owner.with_principal(kit.principal("bob", "support")))
        anon = QdrantVectorStore(collection_name="kb", aclient=owner.with_principal(None))
        got = await reader.aget_nodes(node_ids=[nodes[0].node_id])
        raw = await qdrant_client.AsyncQdrantClient.retrieve(owner, "kb", [nodes[0].node_id], with_vectors=True)
        refusals = []
        for call in (lambda: reader.adelete_nodes(node_ids=[nodes[1].node_id]),
                     lambda: reader.adelete_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="source", value="d2")])),
                     lambda: reader.aclear(),
                     lambda: anon.aget_nodes(node_ids=[nodes[0].node_id])):
            with pytest.raises(GuardRefusal) as ei:
                await call()
            refusals.append(ei.value.verdict)
        n = (await qdrant_client.AsyncQdrantClient.count(owner, "kb")).count
        await owner.close()
        return got, raw, refusals, n

    got, raw, refusals, n = asyncio.run(main())
    assert [g.text for g in got] == [f"{TEXTS[0]}, call [PHONE]"]  # redacted inside _node_content
    assert raw[0].vector is not None and "_qdrant_guard_receipt" not in raw[0].payload  # raw in-boundary vector
    assert refusals == ["REFUSED_CROSS_BOUNDARY"] * 4
    assert n == len(nodes)
