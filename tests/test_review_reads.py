"""Review of the read path: defects found by a fresh look at reads, diversity and budget, each
reproduced on real local-mode Qdrant with real policies and credentials."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from tests.guardkit import hr_shared, make_kit, models, unit


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _grouped(kit, diversity):
    """(owner, bob) on ``docs``: 60 points over sources s0..s5 and topics g0/g1."""
    owner = hr_shared(kit, "docs", diversity)
    rng = np.random.default_rng(1)
    owner.upsert("docs", [models.PointStruct(id=i, vector=unit(rng),
                                             payload={"text": "t", "source": f"s{i % 6}", "topic": f"g{i % 2}"})
                          for i in range(60)])
    return owner, owner.with_principal(kit.principal(f"b-{uuid.uuid4().hex[:8]}", "support"))


@pytest.mark.parametrize("with_payload", [False, ["text"], models.PayloadSelectorExclude(exclude=["source"])])
def test_group_caps_read_sources_even_when_the_caller_asks_for_no_payload(kit, with_payload):
    # Each topic holds 30 points over 3 sources: a group of 5 fits under the per-source cap of 2.
    # Without the payload in Qdrant's answer every hit counted as the one missing source, and each
    # group was cut to 2 hits (old code: [2, 2]).
    owner, bob = _grouped(kit, {"max_source_fraction": 0.4, "min_unique_sources": 1})
    q = unit(np.random.default_rng(7))
    for client in (owner, bob):
        full = client.query_points_groups("docs", query=q, group_by="topic", limit=2, group_size=5)
        res = client.query_points_groups("docs", query=q, group_by="topic", limit=2, group_size=5,
                                         with_payload=with_payload)
        assert [len(g.hits) for g in res.groups] == [5, 5]
        assert [[h.id for h in g.hits] for g in res.groups] == [[h.id for h in g.hits] for g in full.groups]
        for g in res.groups:
            for h in g.hits:
                if with_payload is False:
                    assert h.payload is None
                elif isinstance(with_payload, list):
                    assert set(h.payload) == {"text"}
                else:
                    assert "source" not in h.payload


def test_a_source_name_with_a_lone_surrogate_is_audited_not_refused(kit):
    # The budget report keys the audit record by source name; a lone surrogate in a key failed the
    # UTF-8 audit write, so the whole read was refused as AuditError (old code). Values were already
    # kept as escapes (decision._utf8_safe); keys now are too.
    from qdrant_guard.audit import verify_audit_file

    owner = hr_shared(kit, "hr", {"max_source_coverage": 0.2, "max_source_fraction": 1.0, "min_unique_sources": 1})
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "m\ud800"}) for i in range(10)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    res = bob.query_points("hr", query=unit(rng), limit=5)
    assert len(res.points) == 2  # the cap: 20 % of 10
    text = (kit.tmp / "audit.jsonl").read_text(encoding="utf-8")
    assert "m\\\\ud800" in text and '"BUDGET_EXCEEDED"' in text
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


SSN_TEXT = "her SSN is 123-45-6780"


def test_kept_pii_is_redacted_for_a_quoted_facet_key_or_group_by(kit):
    # Qdrant reads the key path '"text"' (a quoted segment) as the field text. The guard compared
    # the key with the text field as strings, so bob got the owner's kept SSN unredacted through
    # facet(key='"text"') and query_points_groups(group_by='"text"') (old code).
    from tests.guardkit import QdrantClient, create

    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False}, "raw_in_boundary": True,
           "text_field": "text", "keep_payload_text_in_boundary": True, "diversity": {"enabled": False}}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    owner.upsert("hr", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)), payload={"text": SSN_TEXT})])
    bob = owner.with_principal(kit.principal("bob", "support"))
    redacted = "her SSN is [SSN]"
    for key in ("text", '"text"'):
        assert [h.value for h in bob.facet("hr", key=key).hits] == [redacted]
        groups = bob.query_points_groups("hr", query=[1.0] * 16, group_by=key, limit=3, group_size=1).groups
        assert [g.id for g in groups] == [redacted]
        assert owner.facet("hr", key=key).hits[0].value == SSN_TEXT  # the owner boundary keeps it


@pytest.mark.parametrize("key, head", [("text", "text"), ('"text"', "text"), ("text[0]", "text"),
                                       ("meta.source", "meta"), ('"a.b".c', "a.b"), ("", None), ('"x', None),
                                       ("[0]", None), (None, None)])
def test_path_head_names_the_top_level_key_qdrant_reads(key, head):
    from qdrant_guard.sources import path_head

    assert path_head(key) == head


@pytest.mark.parametrize("selector", [
    ["meta.source"], models.PayloadSelectorInclude(include=["meta.source", "text"]),
    models.PayloadSelectorExclude(exclude=["meta.page"]), ["arr[].x"], ['"a.b"'], ["meta"],
    models.PayloadSelectorExclude(exclude=["meta"]), ["text"], [],
])
@pytest.mark.parametrize("method", ["query_points", "scroll", "retrieve", "query_points_groups"])
def test_payload_selectors_with_key_paths_project_as_qdrant_does(kit, selector, method):
    # The guard fetches the whole payload (diversity and the budget read the source) and projects
    # the caller's selector itself; it read every key as a top-level name, so include=["meta.source"]
    # returned {} and exclude=["meta.page"] returned meta.page (old code).
    from qdrant_client import QdrantClient as Raw

    owner = hr_shared(kit, "hr", {"max_source_coverage": 1.0, "max_source_fraction": 1.0, "min_unique_sources": 1})
    payload = {"meta": {"source": "a", "page": 3}, "text": "t", "arr": [{"x": 1, "y": 2}], "a.b": 5, "source": "s"}
    owner.upsert("hr", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)), payload=payload)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    want = Raw.retrieve(owner, "hr", [1], with_payload=selector)[0].payload
    calls = {
        "query_points": lambda c: c.query_points("hr", query=[1.0] * 16, with_payload=selector).points,
        "scroll": lambda c: c.scroll("hr", with_payload=selector)[0],
        "retrieve": lambda c: c.retrieve("hr", [1], with_payload=selector),
        "query_points_groups": lambda c: c.query_points_groups("hr", query=[1.0] * 16, group_by="source",
                                                               with_payload=selector).groups[0].hits,
    }
    for client in (owner, bob):
        (point,) = calls[method](client)
        got = dict(point.payload)
        got.pop("_qdrant_guard_receipt", None)
        expected = dict(want)
        expected.pop("_qdrant_guard_receipt", None)
        assert got == expected


def _memo_groups(kit, mode):
    owner = hr_shared(kit, "hr", {"max_source_coverage": 0.2, "max_source_fraction": 1.0, "min_unique_sources": 1,
                                  "mode": mode})
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "memo", "g": i % 3})
                        for i in range(30)])
    return owner, owner.with_principal(kit.principal(f"b-{uuid.uuid4().hex[:8]}", "support")), unit(rng)


def _last_record(kit):
    import json

    return json.loads((kit.tmp / "audit.jsonl").read_text().splitlines()[-1])["record"]


def test_monitor_mode_groups_hold_no_more_hits_than_group_size(kit):
    # The guard over-fetches group_size for the group caps; in monitor mode the caps did not run and
    # the over-fetched groups came back whole: 10 hits per group for group_size=5 (old code).
    owner, bob, q = _memo_groups(kit, "monitor")
    for client in (owner, bob):
        res = client.query_points_groups("hr", query=q, group_by="g", limit=3, group_size=5)
        assert [len(g.hits) for g in res.groups] == [5, 5, 5]


@pytest.mark.parametrize("mode", ["monitor", "enforce"])
def test_a_grouped_read_audits_what_every_group_withheld(kit, mode):
    # Each group is charged on its own; the audit record kept only the last group's report, so a
    # read that withheld (or in monitor mode would have withheld) 9 points was audited as 3 (old code).
    _, bob, q = _memo_groups(kit, mode)
    res = bob.query_points_groups("hr", query=q, group_by="g", limit=3, group_size=5)
    returned = sum(len(g.hits) for g in res.groups)
    report = _last_record(kit)["details"]["budget"]["memo"]
    assert report["cap"] == 6
    if mode == "monitor":
        assert returned == 15 and report["withheld"] == 15 - 6
    else:
        assert returned == 6 and report["withheld"] == 15 - 6  # of the first run, before the re-run


def test_a_grouped_read_audits_the_vectors_every_group_withheld(kit):
    # The distillation budget is charged group by group; the audit kept only the last group's count.
    from tests.guardkit import QdrantClient, create

    pol = {"class": "PROPRIETARY", "owner": "hr", "raw_in_boundary": True, "intent": {"enabled": False},
           "diversity": {"max_vectors": 3, "max_source_fraction": 1.0, "min_unique_sources": 1}}
    owner = QdrantClient(":memory:", guard=kit.config({"m": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "m")
    rng = np.random.default_rng(0)
    owner.upsert("m", [models.PointStruct(id=i, vector=unit(rng), payload={"g": i % 3}) for i in range(30)])
    res = owner.query_points_groups("m", query=unit(rng), group_by="g", limit=3, group_size=4, with_vectors=True)
    hits = [h for g in res.groups for h in g.hits]
    assert len(hits) == 12 and sum(h.vector is not None for h in hits) == 3
    assert _last_record(kit)["details"]["vector_budget"] == {"withheld": 9, "cap": 3}


def test_the_async_client_gets_the_same_grouped_and_projected_reads(kit):
    # The async client drives the same pipeline: groups without payload are capped by their real
    # sources, monitor groups hold group_size hits, key-path selectors project as Qdrant does.
    import asyncio

    from qdrant_guard import AsyncQdrantClient

    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
           "diversity": {"max_source_fraction": 0.4, "min_unique_sources": 1, "mode": "enforce"}}

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=kit.config({"docs": pol}), principal=kit.principal("alice", "hr"))
        await owner.create_collection("docs", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        rng = np.random.default_rng(1)
        await owner.upsert("docs", [models.PointStruct(id=i, vector=unit(rng), payload={
            "source": f"s{i % 6}", "topic": f"g{i % 2}", "meta": {"page": i, "lang": "en"}}) for i in range(60)])
        bob = owner.with_principal(kit.principal("bob", "support"))
        res = await bob.query_points_groups("docs", query=unit(rng), group_by="topic", limit=2, group_size=5,
                                            with_payload=["meta.page"])
        assert [len(g.hits) for g in res.groups] == [5, 5]
        assert all(set(h.payload) == {"meta"} and set(h.payload["meta"]) == {"page"} for g in res.groups for h in g.hits)
        await owner.close()

    asyncio.run(main())


@pytest.mark.parametrize("seed", range(3))
def test_random_reads_through_every_read_api_stay_under_both_caps(kit, seed):
    # Randomised: sources of every shape (missing, lists, numbers, booleans, ""), int and UUID ids,
    # random filters and every point-returning read. Each query page obeys the per-source cap, and
    # bob never receives more distinct points of a budgeted source than floor(size * coverage).
    import random

    from qdrant_guard.diversity import source_cap
    from qdrant_guard.sources import point_sources

    rnd = random.Random(seed)
    cov, frac = rnd.choice([0.2, 0.3, 0.5]), rnd.choice([0.3, 0.5, 1.0])
    div = {"max_source_coverage": cov, "max_source_fraction": frac, "min_unique_sources": rnd.choice([1, 2, 3])}
    if seed == 1:
        div["restricted_sources"] = ["s0", "s1"]
    owner = hr_shared(kit, "hr", div)
    rng = np.random.default_rng(seed)
    pts = []
    for i in range(60):
        r = rnd.random()
        source = (None if r < 0.1 else [f"s{rnd.randrange(4)}", f"s{rnd.randrange(4)}"] if r < 0.2
                  else rnd.choice([7, "7", True, ""]) if r < 0.25 else f"s{rnd.randrange(4)}")
        pid = i if rnd.random() < 0.7 else str(uuid.UUID(int=i + 1000))
        pts.append(models.PointStruct(id=pid, vector=unit(rng), payload={"n": i} if source is None
                                      else {"source": source, "n": i}))
    owner.upsert("hr", pts)
    sources_of = {str(p.id): point_sources(p, "source") or ("__unknown__",) for p in pts}
    size: dict[str, int] = {}
    for names in sources_of.values():
        for s in names:
            size[s] = size.get(s, 0) + 1
    bob = owner.with_principal(kit.principal("bob", "support"))
    seen: dict[str, set[str]] = {}

    def got(points, k=None):
        per: dict[str, int] = {}
        for p in points:
            for s in sources_of[str(p.id)]:
                per[s] = per.get(s, 0) + 1
                seen.setdefault(s, set()).add(str(p.id))
        if k is not None:
            assert all(v <= source_cap(k, frac) for v in per.values())

    int_ids = [p.id for p in pts if isinstance(p.id, int)]
    for _ in range(15):
        flt = (models.Filter(must=[models.FieldCondition(key="n", range=models.Range(gte=rnd.randrange(60)))])
               if rnd.random() < 0.4 else None)
        lim = rnd.randint(1, 12)
        kind = rnd.choice(["q", "pid", "fusion", "batch", "groups", "scroll", "retrieve"])
        if kind == "q":
            got(bob.query_points("hr", query=unit(rng), query_filter=flt, limit=lim, offset=rnd.choice([None, 3])).points, lim)
        elif kind == "pid":
            got(bob.query_points("hr", query=rnd.choice(int_ids), query_filter=flt, limit=lim).points, lim)
        elif kind == "fusion":
            got(bob.query_points("hr", prefetch=[models.Prefetch(query=unit(rng), limit=20), models.Prefetch(query=unit(rng), limit=20)],
                                 query=models.FusionQuery(fusion=models.Fusion.RRF), query_filter=flt, limit=lim).points, lim)
        elif kind == "batch":
            for r in bob.query_batch_points("hr", [models.QueryRequest(query=unit(rng), limit=lim, filter=flt,
                                                                      with_payload=rnd.choice([True, False]))
                                                   for _ in range(rnd.randint(1, 3))]):
                got(r.points, lim)
        elif kind == "groups":
            for g in bob.query_points_groups("hr", query=unit(rng), group_by=rnd.choice(["source", "n"]), limit=rnd.randint(1, 5),
                                             group_size=rnd.randint(1, 4), query_filter=flt).groups:
                got(g.hits)
        elif kind == "scroll":
            got(bob.scroll("hr", scroll_filter=flt, limit=lim)[0])
        else:
            got(bob.retrieve("hr", [rnd.choice(pts).id for _ in range(lim)]))
    for s, ids in seen.items():
        if "restricted_sources" not in div or s in div["restricted_sources"]:
            assert len(ids) <= size[s] * cov + 1e-9, (s, len(ids), size[s])
