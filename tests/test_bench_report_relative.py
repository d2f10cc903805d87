"""bench/report.py's table of the recently added paths (cost relative to a same-run baseline)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("bench_report_under_test", ROOT / "bench" / "report.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _group(name, base_s, results):
    return {"group": name, "baseline": "test_baseline_x", "baseline_median_s": base_s, "results": results}


def test_cost_is_median_over_baseline_and_paired_is_inverted_with_swapped_quartiles(report):
    rows = report.relative_rows([_group("update-vectors-1000x384", 0.1, [
        {"name": "test_guarded", "median_s": 1.2, "ratio": 0.1 / 1.2,
         "paired_ratio": 0.08, "paired_q1": 0.05, "paired_q3": 0.1}])])
    assert rows == [["update-vectors-1000x384", "`test_guarded`", report._us(1.2e6),
                     "`test_baseline_x`", report._us(1e5), "12×", "12.5× (10–20×)"]]


def test_rows_without_paired_figure_and_cheaper_candidates(report):
    rows = report.relative_rows([_group("cosine-repair-256x384", 2e-3, [
        {"name": "test_repair", "median_s": 1e-4, "ratio": 20.0}])])
    assert rows[0][5] == "0.05×" and rows[0][6] == "-"


def test_only_the_relative_groups_sorted_by_group(report):
    groups = [_group("noise-384", 1e-5, [{"name": "a", "median_s": 1e-6, "ratio": 10.0}]),
              _group("detect-card-floor-3.4KB", 1e-4, [{"name": "b", "median_s": 2e-4, "ratio": 0.5}]),
              _group("cosine-repair-1x2", 5e-6, [{"name": "c", "median_s": 5e-6, "ratio": 1.0}])]
    assert [r[0] for r in report.relative_rows(groups)] == ["cosine-repair-1x2", "detect-card-floor-3.4KB"]


def test_report_section_has_no_target_status(report, tmp_path):
    import json

    res = tmp_path / "results"
    res.mkdir()
    (res / "cosine-repair-1x384.json").write_text(json.dumps(_group("cosine-repair-1x384", 1e-5, [
        {"name": "test_repair[1x384]", "median_s": 2e-6, "ratio": 5.0}])))
    md = report.build(res, tmp_path / "docs", plots=False)
    section = md.split("## Recently added paths", 1)[1].split("\n## ", 1)[0]
    assert "| cosine-repair-1x384 | `test_repair[1x384]` |" in section and "0.2×" in section
    assert "PASS" not in section and "GAP" not in section
    targets = md.split("## Targets", 1)[1].split("\n## ", 1)[0]
    assert "cosine-repair" not in targets
