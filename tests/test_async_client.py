"""The async twin drives the same pipeline: same verdicts, same stored results, loop not stalled."""
from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from guardkit import DIM, make_kit, models, unit
from qdrant_guard import AsyncQdrantClient, GuardRefusal
from qdrant_guard.receipts import RECEIPT_KEY, receipts_from_payload

CLASSIFY_STARTED = threading.Event()


class SlowClassifier:
    """Blocks its thread for a while, like a remote model would."""

    name = "slow"

    def classify(self, text, *, embedding=None):
        from qdrant_guard.intent import IntentResult

        CLASSIFY_STARTED.set()
        threading.Event().wait(0.3)
        return IntentResult(label="benign", confidence=0.9, reasoning="slow but fine", classifier="slow")


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _cfg(kit, **extra):
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "noise_on_write": True}
    pol.update(extra)
    return kit.config({"pii": pol, "secret": {"class": "CREDENTIAL", "owner": "hr"}})


def test_async_writes_reads_and_refusals(kit):
    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_cfg(kit), principal=kit.principal("alice", "hr"))
        for name in ("pii", "secret"):
            await owner.create_collection(name, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        bob = owner.with_principal(kit.principal("bob", "support"))
        rng = np.random.default_rng(0)
        await bob.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i}"}) for i in range(5)])
        recs = await owner.retrieve("pii", list(range(5)), with_vectors=True)
        assert all(set(receipts_from_payload(r.payload)) == {""} for r in recs)
        with pytest.raises(GuardRefusal) as ei:
            await bob.query_points("secret", query=unit(rng))
        assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
        with pytest.raises(GuardRefusal) as ei:
            await bob.set_payload("pii", payload={RECEIPT_KEY: {}}, points=[0])
        assert ei.value.verdict == "RECEIPT_TAMPERING"
        with pytest.raises(GuardRefusal) as ei:
            await bob.query_points("pii", query=unit(rng), query_text="x " * 600)
        assert ei.value.verdict == "QUERY_REJECTED"
        res = await bob.query_points("pii", query=unit(rng), limit=3, with_vectors=True)
        assert len(res.points) == 3
        await owner.close()

    asyncio.run(main())


def test_slow_classifier_runs_off_the_event_loop(kit):
    async def main():
        cfg = _cfg(kit, intent={"enabled": True, "classifier": "test_async_client:SlowClassifier"},
                   diversity={"enabled": False})
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        ticks = 0
        ticks_during = None

        async def ticker():
            nonlocal ticks
            while ticks_during is None:
                await asyncio.sleep(0.01)
                if CLASSIFY_STARTED.is_set():
                    ticks += 1

        t = asyncio.create_task(ticker())
        await owner.query_points("pii", query=[0.1] * DIM, query_text="what is the leave policy?")
        ticks_during = ticks
        await t
        await owner.close()
        return ticks_during

    during = asyncio.run(main())
    assert during >= 5  # the loop kept running while the classifier blocked its worker thread


def test_async_documents_are_redacted_and_generalised_like_sync(kit):
    from qdrant_guard.hashing_embedder import HashingEmbedder

    seen: list[str] = []
    base = HashingEmbedder(DIM)

    def embedder(texts):
        seen.extend(texts)
        return base(texts)

    text = "Refund order 48213 for Alice Moreau, SSN 123-45-6789."

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_cfg(kit, generalize_identifiers=True, intent={"enabled": False},
                                                         raw_in_boundary=True),
                                  principal=kit.principal("alice", "hr"), embedder=embedder)
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        await owner.upsert("pii", [models.PointStruct(id=1, vector=models.Document(text=text, model="m"))])
        await owner.query_points("pii", query=models.Document(text="who refunded order 48213?", model="m"), limit=1)
        await owner.close()

    asyncio.run(main())
    assert seen == ["Refund order [NUMBER] for [NAME] [NAME], [CODE] [SSN].", "who refunded order [NUMBER]?"]
