"""What a principal who may write a collection but not read it learns from the answer to a
payload rewrite by filter.

`clear_payload` and `overwrite_payload` on a sensitive collection are resolved by the guard to the
points they match (to keep each point's receipt), and nothing is sent when the filter matches no
point. The answer then carried no operation id, where a rewrite that matched something carried
Qdrant's: a write-only principal learned whether a filter matched anything in a collection it may
not read. Such a principal now gets no operation id in either case; readers keep Qdrant's.

Real qdrant-client local mode, real keys; no mocks.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from qdrant_guard import AsyncQdrantClient
from tests.guardkit import QdrantClient, make_kit, models, unit

_VP = models.VectorParams(size=16, distance=models.Distance.COSINE)
_PRIVATE = {"class": "PII", "owner": "hr", "readers": ["hr"], "writers": ["support"], "intent": {"enabled": False}}


def _points() -> list[models.PointStruct]:
    rng = np.random.default_rng(0)
    return [models.PointStruct(id=i, vector=unit(rng), payload={"source": "s", "team": "a" if i < 2 else "b"})
            for i in range(4)]


def _team(value: str) -> models.FilterSelector:
    return models.FilterSelector(filter=models.Filter(must=[
        models.FieldCondition(key="team", match=models.MatchValue(value=value))]))


def _rewrites(client):
    return {
        "clear": lambda team: client.clear_payload("c", points_selector=_team(team)),
        "overwrite": lambda team: client.overwrite_payload("c", payload={"note": "x"}, points=_team(team).filter),
        "batch": lambda team: client.batch_update_points("c", [models.ClearPayloadOperation(
            clear_payload=_team(team))])[0],
    }


def _clients(tmp_path):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"c": _PRIVATE}), principal=kit.principal("alice", "hr"))
    alice.create_collection("c", vectors_config=_VP)
    alice.upsert("c", _points())
    return alice, alice.with_principal(kit.principal("bob", "support"))


@pytest.mark.parametrize("how", ["clear", "overwrite", "batch"])
def test_a_write_only_principal_gets_the_same_answer_whether_its_filter_matched(tmp_path, how):
    _, bob = _clients(tmp_path)
    run = _rewrites(bob)[how]
    missed, matched = run("nobody"), run("a")
    assert missed == matched
    assert matched.operation_id is None and matched.status == models.UpdateStatus.COMPLETED


@pytest.mark.parametrize("how", ["clear", "overwrite", "batch"])
def test_the_write_only_rewrite_still_happens(tmp_path, how):
    alice, bob = _clients(tmp_path)
    _rewrites(bob)[how]("a")
    payloads = {r.id: r.payload for r in alice.retrieve("c", [0, 1, 2], with_payload=True)}
    assert "team" not in payloads[0] and "team" not in payloads[1]
    assert payloads[2]["team"] == "b"


@pytest.mark.parametrize("how", ["clear", "overwrite", "batch"])
def test_a_reader_keeps_qdrants_operation_id(tmp_path, how):
    alice, _ = _clients(tmp_path)
    matched = _rewrites(alice)[how]("a")
    # local mode numbers every update 0; the guard passes Qdrant's answer through to readers
    assert matched.operation_id == 0


def test_async_write_only_answers_alike(tmp_path):
    kit = make_kit(tmp_path)

    async def main():
        alice = AsyncQdrantClient(":memory:", guard=kit.config({"c": _PRIVATE}),
                                  principal=kit.principal("alice", "hr"))
        await alice.create_collection("c", vectors_config=_VP)
        await alice.upsert("c", _points())
        bob = alice.with_principal(kit.principal("bob", "support"))
        missed = await bob.clear_payload("c", points_selector=_team("nobody"))
        matched = await bob.clear_payload("c", points_selector=_team("a"))
        mine = await alice.clear_payload("c", points_selector=_team("b"))
        return missed, matched, mine

    missed, matched, mine = asyncio.run(main())
    assert missed == matched and matched.operation_id is None
    assert mine.operation_id == 0
