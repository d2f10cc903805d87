"""The rank order a multi-source admission decides in (budget._rank_order, _rank_walk and
ExtractionBudget._decide_points, which the diversity read path calls through admit_many) where
the third mutation pass (scripts/mutate.py) found no test: each test here fails with one
surviving mutant applied."""
from __future__ import annotations

from qdrant_guard import budget as _budget
from qdrant_guard.budget import ExtractionBudget, MemoryBudgetStore


def test_lists_that_contradict_each_other_still_give_every_id_once():
    # [a, b, c] and [b, a] have no common order. Once a is taken as the earliest unplaced id, b
    # frees both c and a again; a placed a second time ended the walk before c.
    assert _budget._rank_order([["a", "b", "c"], ["b", "a"]]) == ["a", "b", "c"]


def test_an_admission_of_contradicting_lists_decides_every_point():
    # Through the public API: a point the walk dropped was withheld from a source far below its
    # cap, and one it listed twice was decided twice.
    budget = ExtractionBudget(MemoryBudgetStore(), window_s=60.0, clock=lambda: 0.0)
    out = budget.admit_many(principal="p", collection="c", max_source_coverage=1.0,
                            requests={"memo": ([1, 2, 3], 10), "q3": ([2, 1], 10)})
    assert (out["memo"].admitted, out["memo"].withheld, out["memo"].seen_after) == ([1, 2, 3], [], 3)
    assert (out["q3"].admitted, out["q3"].withheld, out["q3"].seen_after) == ([2, 1], [], 2)
