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
