"""Twentieth review (2026-12-05): the retrieval defences (per-query diversity caps, the extraction
budget, the PROPRIETARY vector budget) against qdrant-client 1.20's read API.

Each test of a fix fails on the code before it (checked, see docs/security-testing.md). Real local
Qdrant, real Ed25519 keys; no mocks."""
from __future__ import annotations

import numpy as np
from guardkit import DIM, hr_shared, make_kit, unit
from qdrant_client.http import models

from qdrant_guard.diversity import enforce_group_caps


def _memo_among_others(tmp_path, diversity):
    """alice@hr's collection: 20 memo chunks around one query vector and 40 chunks of 5 other
    sources, each point with its own ``chunk`` value; and bob@support's view of it."""
    kit = make_kit(tmp_path)
    owner = hr_shared(kit, "hr", diversity)
    rng = np.random.default_rng(0)
    q = np.asarray(unit(rng))
    pts = [models.PointStruct(id=i, vector=(q + 0.01 * rng.normal(size=DIM)).tolist(),
                              payload={"source": "memo", "chunk": i}) for i in range(20)]
    pts += [models.PointStruct(id=100 + i, vector=unit(rng), payload={"source": f"s{i % 5}", "chunk": 100 + i})
            for i in range(40)]
    owner.upsert("hr", pts)
    return owner, owner.with_principal(kit.principal("bob", "support")), q.tolist()


# ------------------------------------------------------------------ grouped response cap
# enforce_group_caps capped a source at source_cap(len(groups) * group_size, f) over the response,
# a share of the hits the caller *asked for*. Grouped by a field that is unique per point, every
# group holds one hit, so group_size=10 made the response cap 40 for a 10-hit response: one source
# filled it whole, where query_points with limit=10 returns at most 4 of it.

def test_group_size_does_not_inflate_the_response_cap_of_a_grouped_query(tmp_path):
    _, bob, q = _memo_among_others(tmp_path, {"max_source_fraction": 0.4, "min_unique_sources": 1})
    plain = bob.query_points("hr", query=q, limit=10).points
    assert sum(p.payload["source"] == "memo" for p in plain) == 4
    for group_size in (1, 10, 100):
        groups = bob.query_points_groups("hr", query=q, group_by="chunk", group_size=group_size, limit=10).groups
        hits = [h for g in groups for h in g.hits]
        memo = sum(h.payload["source"] == "memo" for h in hits)
        assert memo <= 4, (group_size, memo, len(hits))  # before the fix: 10 of 10 at group_size 10 and 100


def test_response_cap_is_a_share_of_the_hits_the_groups_can_return():
    def src(item):
        return item[1]

    one_hit = [[(i, "memo")] for i in range(10)]
    out = enforce_group_caps(one_hit, group_size=10, source_of=src, max_source_fraction=0.4)
    assert out.response_cap == 4 and out.per_source == {"memo": 4}  # before: 40, and 10 kept
    # Full groups (over-fetched past group_size) are unchanged: len(groups) * group_size slots.
    full = [[(i * 10 + j, "memo") for j in range(8)] for i in range(3)]
    assert enforce_group_caps(full, group_size=5, source_of=src, max_source_fraction=0.4).response_cap == 6


# ------------------------------------------------------------------ vector budget, named vectors
# max_vectors is "distinct vectors one principal may receive", but the budget charged point ids:
# a point's named vectors all went for one charge, so a collection of three named vectors per
# point released 3 * max_vectors stored vectors (the owner's scroll: 6 at max_vectors = 2).

def _named(tmp_path, max_vectors=2):
    from guardkit import create

    from qdrant_guard import QdrantClient
    kit = make_kit(tmp_path)
    pol = {"class": "PROPRIETARY", "owner": "hr", "intent": {"enabled": False},
           "diversity": {"max_vectors": max_vectors, "max_source_fraction": 1.0, "min_unique_sources": 1}}
    owner = QdrantClient(":memory:", guard=kit.config({"emb": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "emb", named=("a", "b", "c"))
    rng = np.random.default_rng(0)
    owner.upsert("emb", [models.PointStruct(id=i, vector={n: unit(rng) for n in "abc"}) for i in range(10)])
    return owner


def _vectors_received(records):
    return sum(len(r.vector) if isinstance(r.vector, dict) else r.vector is not None for r in records)


def test_the_vector_budget_counts_each_named_vector(tmp_path):
    owner = _named(tmp_path)
    recs, _ = owner.scroll("emb", limit=10, with_vectors=True)
    assert _vectors_received(recs) == 2  # before the fix: 6 (points 0 and 1, three vectors each)
    assert [sorted(r.vector) for r in recs[:1]] == [["a", "b"]] and all(not r.vector for r in recs[1:])


def test_reading_a_point_name_by_name_is_charged_per_name(tmp_path):
    owner = _named(tmp_path)
    got = 0
    for name in "abc":
        pts = owner.query_points("emb", query=[1.0] + [0.0] * (DIM - 1), using=name, limit=10,
                                 with_vectors=[name]).points
        got += _vectors_received(pts)
    assert got == 2  # before the fix: 6 (two points, each read under three names)
    # A vector received before is received again for free.
    again = owner.retrieve("emb", ids=[p.id for p in owner.scroll("emb", limit=10)[0]], with_vectors=True)
    assert _vectors_received(again) == 2


# ------------------------------------------------------------------ the default memory budget store
# budget_store = "memory" (the default) built one MemoryBudgetStore per guarded client: an
# application that builds a client per request or session (the principal is bound at construction)
# gave the same principal a fresh budget each time, so two clients read 4 points of a source whose
# cap is 2. Guarded clients of one process on the same Qdrant store now share one memory store.

def test_a_new_client_of_the_same_store_does_not_reset_the_memory_budget(tmp_path):
    from guardkit import PAYROLL_DIVERSITY, create, hr_policy

    from qdrant_guard import QdrantClient
    kit = make_kit(tmp_path)
    cfg = kit.config({"hr": hr_policy(PAYROLL_DIVERSITY)})
    path = str(tmp_path / "qdrant")
    owner = QdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"}) for i in range(10)])
    owner.close()
    seen: set = set()
    for _ in range(3):  # one client per "request", each for bob@support
        bob = QdrantClient(path=path, guard=cfg, principal=kit.principal("bob", "support"))
        seen |= {p.id for p in bob.query_points("hr", query=unit(rng), limit=10).points}
        seen |= {r.id for r in bob.scroll("hr", limit=10)[0]}
        bob.close()
    assert len(seen) == 2  # before the fix: 5 (2 per client, one of them seen twice)


# ------------------------------------------------------------------ documented limits (pinned)

def test_scroll_and_retrieve_are_not_capped_by_per_query_diversity_but_the_budget_holds(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # docs/diversity-budget.md, "What it caps": the per-source share applies to ranked queries;
    # scroll and retrieve return one source at full rate unless a budget is set.
    _, bob, q = _memo_among_others(tmp_path / "a", {"max_source_fraction": 0.4, "min_unique_sources": 1})
    memo = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value="memo"))])
    assert len(bob.scroll("hr", scroll_filter=memo, limit=10)[0]) == 10
    assert len(bob.retrieve("hr", ids=list(range(10)))) == 10
    assert len(bob.query_points("hr", query=q, query_filter=memo, limit=10).points) == 4
    _, bob, q = _memo_among_others(tmp_path / "b", {"max_source_fraction": 0.4, "min_unique_sources": 1,
                                                     "max_source_coverage": 0.25})
    assert len(bob.scroll("hr", scroll_filter=memo, limit=20)[0]) == 5  # floor(20 * 0.25)
    assert len(bob.retrieve("hr", ids=list(range(20)))) == 5
