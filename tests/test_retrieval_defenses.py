"""Retrieval defences through the guarded client, on real local-mode Qdrant."""
from __future__ import annotations

import json
import time
from collections import Counter

import pytest
import qdrant_client

import extraction_scenario as sc
from guardkit import make_kit, models
from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.audit import verify_audit_file


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


class Broken:
    """An intent classifier that always fails (to prove the pipeline fails closed)."""

    name = "broken"

    def classify(self, text, *, embedding=None):
        raise TimeoutError("classifier did not answer")


def _corpus_client(kit, **policy):
    base = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
            "source_field": "source", "text_field": None}
    base.update(policy)
    cfg = kit.config({sc.COLLECTION: base})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    corpus = sc.build_collection(owner)
    return owner, corpus


def _audit_records(kit):
    return [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text().splitlines()]


@pytest.fixture()
def spy(monkeypatch):
    """Counts how often the real (unguarded) query_points reaches local Qdrant."""
    calls = Counter()
    original = qdrant_client.QdrantClient.query_points

    def counting(self, *a, **kw):
        calls["query_points"] += 1
        return original(self, *a, **kw)

    monkeypatch.setattr(qdrant_client.QdrantClient, "query_points", counting)
    return calls


@pytest.mark.parametrize("text,kind", [
    ("refund " * 200, "repetition"),
    ("word " + " ".join(f"w{i}" for i in range(600)), "token_cap"),
    ("show me %2e%2e%2f%2e%2e%2fetc%2fpasswd", "percent_encoding"),
    ("summarize the memo\u202eexe.txt", "bidi_control"),
    ("find doc \\x41\\x42\\x43 now", "hex_escape"),
])
def test_structural_validation_rejects_before_qdrant(kit, spy, text, kind):
    owner, _ = _corpus_client(kit)
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points(sc.COLLECTION, query=sc.embed("memo"), query_text=text, limit=5)
    assert ei.value.verdict == "QUERY_REJECTED"
    assert kind in {v["kind"] for v in ei.value.details["violations"]}
    assert all(isinstance(v["position"], int) for v in ei.value.details["violations"])
    assert spy["query_points"] == 0


def test_family_emoji_and_ordinary_queries_pass(kit):
    owner, _ = _corpus_client(kit)
    bob = owner.with_principal(kit.principal("bob", "support"))
    res = bob.query_points(sc.COLLECTION, query=sc.embed("warehouse lease"),
                           query_text="which warehouse lease ends first? 👨‍👩‍👧‍👦", limit=5)
    assert len(res.points) == 5


def test_raw_vector_without_text_is_refused_when_text_is_required(kit, spy):
    owner, _ = _corpus_client(kit, query={"require_text": True})
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points(sc.COLLECTION, query=sc.embed("memo"), limit=5)
    assert ei.value.verdict == "TEXT_REQUIRED"
    assert "query_text=" in ei.value.directive
    assert spy["query_points"] == 0
    assert bob.query_points(sc.COLLECTION, query=sc.embed("memo"), query_text="memo", limit=5).points


def test_document_queries_are_redacted_then_embedded_by_the_guard(kit):
    cfg = kit.config({sc.COLLECTION: {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
                                      "intent": {"enabled": False}}})
    seen = []

    def embedder(texts):
        seen.extend(texts)
        return [sc.embed(t) for t in texts]

    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=embedder)
    sc.build_collection(owner)
    bob = owner.with_principal(kit.principal("bob", "support"))
    bob.query_points(sc.COLLECTION, query=models.Document(text="refund for SSN 123-45-6789 please", model="x"), limit=3)
    # Redacted, then generalised (the default policy): the acronym reads as a code.
    assert seen == ["refund for [CODE] [SSN] please"]
    rec = _audit_records(kit)[-1]
    assert "123-45-6789" not in json.dumps(rec)
    assert rec["details"]["query_text"] == "refund for SSN [SSN] please"


def test_intent_blocks_targeted_queries_and_allows_benign_ones(kit, spy):
    owner, _ = _corpus_client(kit, intent={"enabled": True})
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points(sc.COLLECTION, query=sc.embed("ssn"),
                         query_text="list every employee SSN and salary in the payroll export", limit=5)
    assert ei.value.verdict == "INTENT_BLOCKED"
    assert ei.value.details["intent"]["label"] in ("suspicious", "adversarial")
    assert ei.value.details["intent"]["reasoning"]
    assert spy["query_points"] == 0
    ok = bob.query_points(sc.COLLECTION, query=sc.embed("password"), query_text="how do I reset my own password?", limit=5)
    assert len(ok.points) == 5


def test_intent_classifier_failure_fails_closed(kit, spy):
    owner, _ = _corpus_client(kit, intent={"enabled": True, "classifier": "test_retrieval_defenses:Broken"})
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points(sc.COLLECTION, query=sc.embed("x"), query_text="what is the leave policy?", limit=5)
    assert ei.value.verdict == "FAIL_CLOSED"
    assert spy["query_points"] == 0


def test_intent_failure_can_be_configured_open(kit):
    owner, _ = _corpus_client(kit, intent={"enabled": True, "classifier": "test_retrieval_defenses:Broken",
                                           "fail_closed": False})
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert bob.query_points(sc.COLLECTION, query=sc.embed("x"), query_text="leave policy", limit=5).points


def test_monitor_mode_logs_but_does_not_block(kit):
    owner, _ = _corpus_client(kit, intent={"enabled": True, "mode": "monitor"}, query={"mode": "monitor"})
    bob = owner.with_principal(kit.principal("bob", "support"))
    res = bob.query_points(sc.COLLECTION, query=sc.embed("ssn"),
                           query_text="list every employee SSN and salary in the payroll export", limit=5)
    assert len(res.points) == 5
    rec = _audit_records(kit)[-1]
    assert rec["details"]["intent"]["would_block"] is True
    res = bob.query_points(sc.COLLECTION, query=sc.embed("x"), query_text="memo " * 100, limit=5)
    assert _audit_records(kit)[-1]["details"]["scan"]["would_reject"]


def test_diversity_caps_every_source_without_backfill(kit):
    owner, corpus = _corpus_client(kit, diversity={"max_source_fraction": 0.4, "min_unique_sources": 2})
    bob = owner.with_principal(kit.principal("bob", "support"))
    for q in sc.ATTACK_QUERIES[:5]:
        res = bob.query_points(sc.COLLECTION, query=sc.embed(q), limit=10)
        per = Counter(p.payload["source"] for p in res.points)
        assert max(per.values()) <= 4
        assert len(per) >= 2
    # the raw client on the same store gives the memo far more than the cap for these queries
    raw = qdrant_client.QdrantClient.query_points(owner, sc.COLLECTION, query=sc.embed(sc.ATTACK_QUERIES[0]), limit=10)
    assert Counter(p.payload["source"] for p in raw.points)[sc.RESTRICTED_SOURCE] > 4


def test_offset_pagination_pages_obey_the_cap(kit):
    owner, _ = _corpus_client(kit)
    bob = owner.with_principal(kit.principal("bob", "support"))
    for offset in (0, 5, 10):
        res = bob.query_points(sc.COLLECTION, query=sc.embed(sc.ATTACK_QUERIES[1]), limit=5, offset=offset)
        assert len(res.points) <= 5
        assert max(Counter(p.payload["source"] for p in res.points).values()) <= 2


def test_group_queries_are_capped_per_source(kit):
    owner, _ = _corpus_client(kit)
    bob = owner.with_principal(kit.principal("bob", "support"))
    res = bob.query_points_groups(sc.COLLECTION, group_by="chunk", query=sc.embed(sc.ATTACK_QUERIES[2]),
                                  limit=5, group_size=5)
    total = Counter(h.payload["source"] for g in res.groups for h in g.hits)
    n = sum(total.values())
    assert n > 0
    assert max(total.values()) <= max(1, int(len(res.groups) * 5 * 0.4))


def test_extraction_attack_through_the_guard_stays_under_coverage(kit):
    coverage = 0.25
    owner, corpus = _corpus_client(kit, diversity={"max_source_coverage": coverage,
                                                   "restricted_sources": [sc.RESTRICTED_SOURCE]})
    views = {}

    refused = Counter()

    def search(principal, text):
        if principal not in views:
            views[principal] = owner.with_principal(kit.principal(principal, "support"))
        try:
            return views[principal].query_points(sc.COLLECTION, query=sc.embed(text), query_text=text, limit=10).points
        except GuardRefusal as exc:  # a refused query returns nothing to its sender
            refused[(principal == "mallory", exc.verdict)] += 1
            return []

    recovered = sc.run_attack(search, corpus)
    assert len(recovered) <= int(20 * coverage)
    assert sc.benign_recall(search, corpus) >= 0.9
    print("refusals (attacker?, verdict):", dict(refused))
    # undefended on the same store, the attacker gets (almost) the whole memo
    raw = sc.run_attack(lambda p, t: qdrant_client.QdrantClient.query_points(
        owner, sc.COLLECTION, query=sc.embed(t), limit=10).points, corpus)
    assert len(raw) >= 18
    recs = _audit_records(kit)
    assert any(r["verdict"] == "BUDGET_EXCEEDED" for r in recs)
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


def test_scroll_is_charged_to_the_budget_too(kit):
    owner, corpus = _corpus_client(kit, diversity={"max_source_coverage": 0.25,
                                                   "restricted_sources": [sc.RESTRICTED_SOURCE]})
    bob = owner.with_principal(kit.principal("bob", "support"))
    flt = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value=sc.RESTRICTED_SOURCE))])
    got = set()
    offset = None
    while True:
        page, offset = bob.scroll(sc.COLLECTION, scroll_filter=flt, limit=7, offset=offset)
        got.update(p.id for p in page)
        if offset is None:
            break
    assert len(got) == 5


def test_repeated_ids_in_one_retrieve_do_not_raise_the_cap(kit):
    # Qdrant returns a record once per requested id, repeats included. Counted as the source's
    # size, 20 memo ids asked four times made it an 80-point source: cap 20, the whole memo.
    owner, corpus = _corpus_client(kit, diversity={"max_source_coverage": 0.25,
                                                   "restricted_sources": [sc.RESTRICTED_SOURCE]})
    bob = owner.with_principal(kit.principal("bob", "support"))
    got = bob.retrieve(sc.COLLECTION, corpus.memo_ids * 4)
    assert len({p.id for p in got}) == 5
    assert _audit_records(kit)[-1]["details"]["budget"][sc.RESTRICTED_SOURCE]["cap"] == 5


def test_distillation_budget_counts_returned_vectors(kit):
    owner, corpus = _corpus_client(kit, raw_in_boundary=False, noise_on_write=True,
                                   diversity={"enabled": True, "max_vectors": 7})
    bob = owner.with_principal(kit.principal("bob", "support"))
    got_vectors = 0
    for i in range(6):
        recs = bob.retrieve(sc.COLLECTION, corpus.memo_ids[i * 3:(i + 1) * 3], with_vectors=True)
        got_vectors += sum(r.vector is not None for r in recs)
    assert got_vectors == 7


def test_each_collection_counts_its_budget_over_its_own_window(kit):
    # One pipeline used to build a single budget with the window of whichever collection was read
    # first; b's one-minute window then silently became a's day.
    base = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "raw_in_boundary": False,
            "noise_on_write": True, "source_field": "source", "text_field": None}
    cfg = kit.config({"a": {**base, "diversity": {"max_vectors": 2, "window_s": 86400.0}},
                      "b": {**base, "diversity": {"max_vectors": 2, "window_s": 60.0}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    now = [time.time()]
    owner.guard.clock = lambda: now[0]
    ids = {name: sc.build_collection(owner, name).memo_ids for name in ("a", "b")}
    bob = owner.with_principal(kit.principal("bob", "support"))

    def vectors(name, first):
        got = bob.retrieve(name, ids[name][first:first + 2], with_vectors=True)
        return sum(r.vector is not None for r in got)

    assert (vectors("a", 0), vectors("b", 0)) == (2, 2)
    assert (vectors("a", 2), vectors("b", 2)) == (0, 0)
    now[0] += 61.0
    assert (vectors("a", 4), vectors("b", 4)) == (0, 2)


def test_query_vectors_from_outside_the_owner_boundary_are_noised(kit, monkeypatch):
    owner, _ = _corpus_client(kit, noise_queries=True, intent={"enabled": False})
    sent = []
    original = qdrant_client.QdrantClient.query_points

    def spy(self, *a, **kw):
        sent.append(kw.get("query"))
        return original(self, *a, **kw)

    monkeypatch.setattr(qdrant_client.QdrantClient, "query_points", spy)
    clean = sc.embed("warehouse lease")
    owner.query_points(sc.COLLECTION, query=clean, limit=3)
    bob = owner.with_principal(kit.principal("bob", "support"))
    res = bob.query_points(sc.COLLECTION, query=clean, limit=3)
    assert sent[0] == clean  # the owner (raw_in_boundary) queries raw
    assert sent[1] != clean and len(sent[1]) == len(clean)  # bob's query vector was noised
    assert len(res.points) == 3
    assert _audit_records(kit)[-1]["details"]["query_noised"] is True


def test_sqlite_budget_survives_a_restart(kit, tmp_path):
    coverage = {"max_source_coverage": 0.25, "restricted_sources": [sc.RESTRICTED_SOURCE]}
    db = f"sqlite:///{tmp_path / 'budget.db'}"
    cfg = kit.config({sc.COLLECTION: {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"],
                                      "raw_in_boundary": True, "intent": {"enabled": False},
                                      "diversity": coverage}}, budget_store=db)
    seen = set()
    for _ in range(2):  # two "processes": the second starts with the first one's budget
        owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        corpus = sc.build_collection(owner)
        bob = owner.with_principal(kit.principal("bob", "support"))
        for q in sc.ATTACK_QUERIES:
            seen.update(p.id for p in bob.query_points(sc.COLLECTION, query=sc.embed(q), limit=10).points
                        if p.id in set(corpus.memo_ids))
        owner.close()
    assert len(seen) == 5
