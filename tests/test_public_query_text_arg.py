"""``query_text=`` on a PUBLIC collection goes nowhere: not to qdrant-client, not to the audit log.

h-args3 checked the closing note of the PUBLIC query screen ("``query_text=`` is dropped"): the
guard pops it before anything else (``ReadOps._query_prelude``) and a PUBLIC query hands
qdrant-client only its own arguments, so a credential in it reaches neither inference nor the log,
listed collection or not, next to a vector or a Document, with a lookup into a sensitive collection
(audited) or not, sync or async. Nothing changed: these tests pin it (they pass on the code before).
Real qdrant-client local mode (no fastembed here: a Document query fails inside qdrant-client,
after the guard let it through; what reached qdrant-client is recorded on the way in).
"""
from __future__ import annotations

import asyncio

import pytest
import qdrant_client
from guardkit import DIM, audit_records, create, make_kit, models, record_sent

from qdrant_guard import AsyncQdrantClient, QdrantClient, QdrantGuardError

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
SECRET_TEXT = f"refund policy, token {STRIPE}"
V = [0.25] * DIM


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _config(kit):
    # Unlisted collections ("open") are PUBLIC and pass through unscreened.
    return kit.config({"pub": {"class": "PUBLIC"},
                       "pii": {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
                               "intent": {"enabled": False}}}, unlisted="public")


def _filled(client):
    for name in ("pub", "pii", "open"):
        create(client, name)
        client.upsert(name, [models.PointStruct(id=i, vector=V, payload={"g": "a"}) for i in (1, 2)])
    return client


def _nothing_leaked(kit, sent):
    assert sent and all("query_text" not in kw and STRIPE not in repr(kw) for _, kw in sent)
    log = kit.tmp / "audit.jsonl"
    assert STRIPE not in (log.read_text(encoding="utf-8") if log.exists() else "")


@pytest.mark.parametrize("name", ["pub", "open"])  # listed; unlisted under unlisted = "public"
def test_query_text_on_a_public_collection_reaches_neither_qdrant_nor_the_log(kit, monkeypatch, name):
    client = _filled(QdrantClient(":memory:", guard=_config(kit), principal=kit.principal("alice", "hr")))
    plain = client.query_points(name, query=V, limit=2)
    sent = record_sent(monkeypatch, ("query_points", "query_points_groups"), with_kwargs=True)
    assert client.query_points(name, query=V, limit=2, query_text=SECRET_TEXT) == plain
    client.query_points_groups(name, query=V, group_by="g", limit=2, query_text=SECRET_TEXT,
                               with_lookup=models.WithLookup(collection="pii"))
    assert [r["collection"] for r in audit_records(kit)][-1] == "pii"  # the lookup, audited
    _nothing_leaked(kit, sent)


def test_query_text_next_to_a_document_on_a_public_collection_is_not_sent(kit, monkeypatch):
    client = _filled(QdrantClient(":memory:", guard=_config(kit), principal=kit.principal("alice", "hr")))
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    try:
        client.query_points("pub", query=models.Document(text="refund policy", model="m"), limit=2,
                            query_text=SECRET_TEXT)
    except QdrantGuardError:
        raise
    except Exception:  # noqa: BLE001 - qdrant-client's own (no fastembed here)
        pass
    _nothing_leaked(kit, sent)


def test_query_text_on_a_public_collection_is_not_sent_by_the_async_client(kit, monkeypatch):
    sent = []
    original = qdrant_client.AsyncQdrantClient.query_points

    async def recording(self, *a, **kw):
        sent.append(("query_points", kw))
        return await original(self, *a, **kw)

    async def main():
        client = AsyncQdrantClient(":memory:", guard=_config(kit), principal=kit.principal("alice", "hr"))
        await client.create_collection("pub", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        await client.upsert("pub", [models.PointStruct(id=1, vector=V)])
        monkeypatch.setattr(qdrant_client.AsyncQdrantClient, "query_points", recording)
        return await client.query_points("pub", query=V, limit=2, query_text=SECRET_TEXT)

    assert [p.id for p in asyncio.run(main()).points] == [1]
    _nothing_leaked(kit, sent)
