"""`qdrant-guard bench` warns before a run whose extraction budget can run out for one source, and
its advice, followed, keeps every source under its cap (a real local-mode bench run checks it).

The former forecast compared the run's reads with the budgets of all sources together, while one
spent source is enough for every later read to carry the excluding filter: the walkthrough shape
(50 sources of 20 points, coverage 0.2) with --queries 20 or 5 got no warning yet ran out.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from qdrant_guard.budget import ExtractionBudget
from qdrant_guard.budget_memory import MemoryBudgetStore
from qdrant_guard.overhead import measure_overhead
from qdrant_guard.overhead_setup import budget_runout_forecast, source_labels
from qdrant_guard.policy import CollectionPolicy

CAP_FOR = ExtractionBudget(MemoryBudgetStore()).cap_for


def _pol(**diversity: object) -> CollectionPolicy:
    return CollectionPolicy.model_validate({"class": "PROPRIETARY", "owner": "rnd", "readers": ["hr"],
                                            "diversity": diversity})


def _sizes(points: int, sources: int) -> list[int]:
    return [points // sources + int(k < points % sources) for k in range(sources)]


@pytest.mark.parametrize("queries", [20, 5])
def test_the_walkthrough_shape_is_warned_with_advice_that_keeps_every_source_under_its_cap(queries: int) -> None:
    reads = queries * 10
    warning = budget_runout_forecast(_pol(max_source_coverage=0.2), source_labels([], 50), "hr",
                                     points=1000, queries=queries, limit=10)
    assert warning is not None and "a cap of 4" in warning
    # One top-10 read can bring 10 points of one 4-point-cap source: no --queries value alone helps.
    assert not re.search(r"--queries \d+ or fewer", warning), warning
    below = int(re.search(r"Q x L below (\d+)", warning).group(1))  # type: ignore[union-attr]
    assert all(below - 1 < CAP_FOR(size, 0.2) for size in _sizes(1000, 50))
    points = int(re.search(r"--points (\d+) or more with --sources 50", warning).group(1))  # type: ignore[union-attr]
    assert min(CAP_FOR(size, 0.2) for size in _sizes(points, 50)) > reads
    assert min(CAP_FOR(size, 0.2) for size in _sizes(points - 1, 50)) <= reads  # the least that does
    assert budget_runout_forecast(_pol(max_source_coverage=0.2), source_labels([], 50), "hr",
                                  points=points, queries=queries, limit=10) is None
    if (sources := re.search(r"--sources (\d+) or fewer", warning)) is not None:
        assert min(CAP_FOR(size, 0.2) for size in _sizes(1000, int(sources.group(1)))) > reads
    for option in ("--read-credential", "--throwaway-credentials --read-boundary rnd", 'mode = "monitor"', "--url"):
        assert option in warning


def test_silent_where_no_source_can_run_out() -> None:
    # Unchanged by the fix (the old forecast was silent here too): kept so the bound never nags.
    labels = source_labels([], 50)
    shape = {"points": 1000, "queries": 20, "limit": 10}
    assert budget_runout_forecast(_pol(max_source_coverage=0.2), labels, "rnd", **shape) is None
    assert budget_runout_forecast(_pol(max_source_coverage=None), labels, "hr", **shape) is None
    assert budget_runout_forecast(_pol(max_source_coverage=0.2, mode="monitor"), labels, "hr", **shape) is None
    assert budget_runout_forecast(_pol(max_source_coverage=0.2), labels, "hr", points=1000, queries=3, limit=1) is None


POLICY = """\
audit_log = "audit.jsonl"

[collections.designs]
class = "PROPRIETARY"
owner = "rnd"
readers = ["hr"]

[collections.designs.diversity]
max_source_coverage = 0.2
"""


def _bench(policy: Path, *, points: int, queries: int, limit: int,
           sources: int | None = None) -> tuple[bool, dict[str, object]]:
    """Whether the run's budget ran out (audited reads sent with the excluding filter), and its checks."""
    report = measure_overhead(policy, "designs", throwaway_credentials=True, dim=8, points=points, sources=sources,
                              queries=queries, limit=limit, rounds=1, query_text=False, progress=True)
    ran_out = any("ran out for some sources" in note for note in report.notes)
    assert ran_out == (report.checks["audited_reads_with_budget_exclusion"] > 0)
    return ran_out, report.checks


def test_the_advice_followed_in_a_real_bench_does_not_run_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    # 5 sources (the default at 100 points) of 20 points, a cap of 4 each; 3 top-10 queries read at
    # most 30 points, 6 per source on average.
    shape = {"points": 100, "queries": 3, "limit": 10}
    ran_out, _ = _bench(policy, **shape)
    warning = capsys.readouterr().err
    assert ran_out and "run out" in warning
    # Every value the warning advises, each followed alone (the former advice, --queries 2 or
    # --points 150, still ran out: 9 and 12 reads sent with the excluding filter).
    followed = []
    for pattern, knob in ((r"--queries (\d+) or fewer", "queries"), (r"--sources (\d+) or fewer", "sources"),
                          (r"Q x L below (\d+)", "limit")):
        if (advised := re.search(pattern, warning)) is not None:
            value = int(advised.group(1))
            followed.append({**shape, **({"queries": 1, "limit": value - 1} if knob == "limit" else {knob: value})})
    if (advised := re.search(r"--points (\d+) or more(?: with --sources (\d+))?", warning)) is not None:
        more = {"points": int(advised.group(1))}
        followed.append({**shape, **more, **({"sources": int(advised.group(2))} if advised.group(2) else {})})
    assert followed, warning
    for advised_shape in followed:
        ran_out, checks = _bench(policy, **advised_shape)
        assert not ran_out and checks["stored_points"] == advised_shape["points"], advised_shape
        assert "run out" not in capsys.readouterr().err, advised_shape


def test_the_query_replays_are_recorded_under_a_progress_bar_of_their_own(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    _bench(policy, points=40, queries=2, limit=3)
    err = capsys.readouterr().err
    recording, timed = err.find("bench query: recording 2 replay(s), untimed"), err.find("bench query (1 warm-up")
    assert 0 <= recording < timed, err[-2000:]


def test_the_forecast_is_printed_before_the_run_without_a_progress_bar_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --no-progress drops the bar, not the warning: the forecast was printed only under a bar, so a
    # scripted run that could take minutes said nothing until its report.
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    measure_overhead(policy, "designs", throwaway_credentials=True, dim=8, points=100, queries=3, limit=10,
                     rounds=1, query_text=False, progress=False)
    err = capsys.readouterr().err
    assert err.startswith("qdrant-guard bench: note: the reader's extraction budget") and "can run out" in err
