"""Evaluation: how much of a restricted document a nearest-neighbour attacker can reassemble.

Runs the scenario of tests/extraction_scenario.py on a real ``QdrantClient(":memory:")`` under
(a) no defence, (b) per-query diversity only, (c) diversity + extraction budget, and prints the
table that goes in the README (``pytest -s tests/test_extraction_eval.py``).
"""
from __future__ import annotations

import pytest
from qdrant_client import QdrantClient

from extraction_scenario import (
    ATTACK_QUERIES,
    BENIGN_QUERIES,
    MEMO_CHUNKS,
    RESTRICTED_SOURCE,
    benign_recall,
    build_collection,
    embed,
    run_attack,
)
from qdrant_guard.budget import ExtractionBudget, MemoryBudgetStore
from qdrant_guard.diversity import enforce_diversity, overfetch_limit

LIMIT = 10
FRACTION = 0.4
COVERAGE = 0.25
FACTOR = 3.0


def _source(point):
    return (point.payload or {}).get("source")


@pytest.fixture(scope="module")
def scenario():
    client = QdrantClient(":memory:")
    corpus = build_collection(client)
    yield client, corpus
    client.close()


def _defences(client, corpus):
    def raw(principal, query, limit=LIMIT):
        return client.query_points(corpus.collection, query=embed(query), limit=limit, with_payload=True).points

    def diversity_only(principal, query):
        hits = raw(principal, query, overfetch_limit(LIMIT, factor=FACTOR))
        return enforce_diversity(hits, k=LIMIT, source_of=_source, max_source_fraction=FRACTION).kept

    def with_budget(budget, sources):
        def search(principal, query):
            kept = diversity_only(principal, query)
            allowed = set()
            for source in {_source(p) for p in kept}:
                ids = [p.id for p in kept if _source(p) == source]
                if sources is not None and source not in sources:
                    allowed.update(ids)
                    continue
                allowed.update(
                    budget.admit(
                        principal=principal, collection=corpus.collection, source=source, point_ids=ids,
                        source_size=corpus.source_sizes[source], max_source_coverage=COVERAGE,
                    ).admitted
                )
            return [p for p in kept if p.id in allowed]

        return search

    return raw, diversity_only, with_budget


def test_extraction_attack_and_benign_recall(scenario):
    client, corpus = scenario
    raw, diversity_only, with_budget = _defences(client, corpus)
    clock = lambda: 1_700_000_000.0  # noqa: E731  (one instant: every query falls in one window)

    rows = []
    for name, make in [
        ("(a) no defence", lambda: raw),
        ("(b) diversity 0.4 only", lambda: diversity_only),
        ("(c) diversity + budget on the restricted source",
         lambda: with_budget(ExtractionBudget(MemoryBudgetStore(), clock=clock), {RESTRICTED_SOURCE})),
        ("(c') diversity + budget on every source",
         lambda: with_budget(ExtractionBudget(MemoryBudgetStore(), clock=clock), None)),
    ]:
        # A fresh search (and budget store) per measurement: attacker and users share no budget.
        recovered = len(run_attack(make(), corpus))
        recall_two = benign_recall(make(), corpus, queries_per_user=2)
        recall_one = benign_recall(make(), corpus, queries_per_user=1)
        rows.append((name, recovered, recall_two, recall_one))

    cap = ExtractionBudget(MemoryBudgetStore()).cap_for(len(MEMO_CHUNKS), COVERAGE)
    print()
    print(f"Nearest-neighbour extraction of a {len(MEMO_CHUNKS)}-chunk restricted document among "
          f"{sum(corpus.source_sizes.values()) - len(MEMO_CHUNKS)} other chunks: {len(ATTACK_QUERIES)} attack "
          f"queries, limit={LIMIT}, over-fetch x{FACTOR:g}, source fraction {FRACTION}, coverage {COVERAGE} "
          f"(budget cap {cap}); benign recall over {len(BENIGN_QUERIES)} questions")
    print("| defence | restricted chunks recovered | benign recall, 2 questions/user | 1 question/user |")
    print("|---|---|---|---|")
    for name, recovered, recall_two, recall_one in rows:
        print(f"| {name} | {recovered}/{len(MEMO_CHUNKS)} | {recall_two:.2f} | {recall_one:.2f} |")

    (none, div, restricted, every) = rows
    # The attack works without a defence (so this test can fail), and per-query diversity alone
    # does not stop it: each query yields at most 4 memo chunks, but 20 queries add up.
    assert none[1] >= 0.8 * len(MEMO_CHUNKS)
    assert div[1] >= 0.8 * len(MEMO_CHUNKS)
    # The budget bounds what the attacker reassembles within a window, and the bound is reached.
    assert restricted[1] == cap and every[1] == cap
    # Benign users asking about other sources lose nothing to a budget on the restricted source.
    assert none[2] >= 0.9 and none[3] >= 0.9
    assert restricted[2] == none[2] and restricted[3] == none[3]
    # A coverage budget on every source still answers each user's first question (the relevant
    # chunk ranks first and is charged first); it is the follow-up questions that suffer.
    assert every[3] == none[3]
