"""Review 45: diversity.charge_scores and sentmodels, attacked in real local mode.

A score is charged once per (point, vector, request digest): the same request again returns the
same scores, so it is free. A query that takes its vector from a stored point by id breaks that:
the caller rewrites the point (in a PUBLIC collection of its own, named by ``lookup_from``) and
sends the same request, whose scores now measure another vector.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.guardkit import DIM, QdrantClient, create, make_kit, models, snapshot, unit
from tests.test_score_charge import _policy


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _hr_and_mine(kit):
    cfg = kit.config({"hr": _policy(True, 1), "mine": {"class": "PUBLIC"}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(1)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i}"}) for i in range(6)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    create(bob, "mine")
    return owner, bob


_MINE = models.LookupLocation(collection="mine")
_BY_ID = {
    "id": lambda: {"query": 1, "lookup_from": _MINE},
    "nearest": lambda: {"query": models.NearestQuery(nearest=1), "lookup_from": _MINE},
    "recommend": lambda: {"query": models.RecommendQuery(recommend=models.RecommendInput(positive=[1])),
                          "lookup_from": _MINE},
    "prefetch": lambda: {"prefetch": models.Prefetch(query=1, lookup_from=_MINE, limit=6),
                         "query": models.FormulaQuery(formula="$score")},
}


@pytest.mark.parametrize("form", sorted(_BY_ID))
def test_rewritten_lookup_point_is_charged_again(kit, form):
    # Old code: the request was the same every time, so its 6 points were free after the first
    # call while each call measured another basis vector: 96 scores (all 6 vectors) under a cap
    # of 16 (max_vectors = 1 of 16-d).
    owner, bob = _hr_and_mine(kit)
    stored = {pid: np.asarray(v) / np.linalg.norm(v) for pid, _, v in snapshot(owner, "hr")}
    got: dict = {}
    for d in range(DIM):
        bob.upsert("mine", [models.PointStruct(id=1, vector=np.eye(DIM)[d].tolist())])
        for p in bob.query_points("hr", limit=6, **_BY_ID[form]()).points:
            assert abs(stored[p.id][d] - p.score) < 1e-5  # each is a true coordinate
            got.setdefault(p.id, {})[d] = p.score
    assert sum(len(c) for c in got.values()) <= DIM
    assert all(len(c) < DIM for c in got.values())


def test_a_plain_vector_request_stays_free(kit):
    # The fix names the call only for id-taking queries: a repeated plain vector is still free.
    _, bob = _hr_and_mine(kit)
    q = np.eye(DIM)[0].tolist()
    first = bob.query_points("hr", query=q, limit=6).points
    for _ in range(4):
        assert [p.id for p in bob.query_points("hr", query=q, limit=6).points] == [p.id for p in first]


class _Head(str):
    """A key whose ``__getitem__``/``startswith`` show the guard's path_head another field; pydantic,
    gRPC and REST send its characters."""

    def __getitem__(self, i):
        return "zz"

    def startswith(self, *a):
        return False


def test_a_str_subclass_order_by_is_checked_as_its_characters(kit):
    # Old code: sentmodels passed a top-level order_by str subclass through, the kept-text check
    # read "zz" as its head and bob got order_value 4111111111111111 (the redacted card number).
    from qdrant_guard.errors import GuardRefusal
    from tests.test_review40 import _kept_text

    owner, bob = _kept_text(kit)
    with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
        bob.scroll("hr", order_by=_Head("text"))
    assert [p.order_value for p in owner.scroll("hr", order_by="text")[0]] == [4111111111111111]


def test_keys_are_sent_as_their_characters():
    from qdrant_guard.sentmodels import sent_models

    for key in ("order_by", "with_payload"):
        for value in (_Head("text"), [_Head("text"), "n"], (_Head("text"),)):
            sent = sent_models("scroll", {key: value})[key]
            items = sent if isinstance(sent, list) else [sent]
            assert all(type(k) is str for k in items) and "text" in items
    plain = ["a", "b"]
    assert sent_models("scroll", {"with_payload": plain})["with_payload"] is plain
