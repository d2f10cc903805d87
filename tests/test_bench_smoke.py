"""CI smoke run of the benchmark programs: they run and write well-formed output (no timing checks).

One tiny `bench/run.py --tiny` into a temporary directory (the real bench/results and docs/ are not
touched); the pytest-benchmark suites are limited to those that need no bench-only package.
"""
from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


def _finite_positive(doc: Any, path: str = "$") -> list[str]:
    """Every latency percentile (p50_us, p99_us, ...) must be finite and > 0, and every difference of
    two latencies (under ``paired_*``) finite; returns the offending paths."""
    bad = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if not (k.endswith("_us") and k.startswith("p")):
                pass
            elif not (isinstance(v, (int, float)) and math.isfinite(v) and (v > 0 or ".paired_" in path)):
                bad.append(f"{path}.{k}={v!r}")
            bad += _finite_positive(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            bad += _finite_positive(v, f"{path}[{i}]")
    return bad


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("bench")
    results, docs = tmp / "results", tmp / "docs"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--tiny", "--results", str(results), "--docs", str(docs),
         "--suite", str(BENCH / "bench_scan.py"), "--suite", str(BENCH / "bench_noise.py"),
         "--suite", str(BENCH / "bench_cosine_repair.py"), "--suite", str(BENCH / "bench_update_vectors.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    return {"proc": proc, "results": results, "docs": docs}


def test_run_exits_zero(run: dict[str, Any]) -> None:
    proc = run["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_overhead_json_is_well_formed(run: dict[str, Any]) -> None:
    doc = json.loads((run["results"] / "overhead.json").read_text())
    assert doc["bench"] == "overhead" and doc["config"] == "tiny"
    assert {"cpu", "cores", "python", "numpy", "qdrant_client", "date", "backend"} <= set(doc["machine"])
    for r in doc["reads"]["by_points"].values():
        assert {"raw", "guarded", "guard_only", "paired_guarded_minus_raw"} <= set(r)
        assert r["returned"] == doc["reads"]["k"]
        assert r["guard_only"]["n"] == r["raw"]["n"] > 0
    assert doc["upserts"]["receipted"] is True
    assert doc["upserts"]["batch"] == 256
    assert {"guarded_intent_on", "guarded_intent_off", "classify_only"} <= set(doc["intent"])
    stages = doc["profile"]["read"]["stages"]
    assert stages["profiled_total"] > 0 and stages["audit append (hash chain + file write)"] > 0
    assert doc["profile"]["upsert"]["stages"]["  of which noise (privatize)"] > 0
    assert _finite_positive(doc) == []


def test_scaling_json_is_well_formed(run: dict[str, Any]) -> None:
    doc = json.loads((run["results"] / "scaling.json").read_text())
    assert set(doc["dimension"]) == {"384", "768"}
    for v in doc["dimension"].values():
        assert {"reads", "upserts"} <= set(v)
    assert set(doc["batch"]) == {"1", "8"}
    assert set(doc["query_length"]) == {"50", "600"}
    rej = doc["query_length_rejected"]
    assert rej["violations"]["600 tokens"]  # refused under the default 500-token rules, with reasons
    assert _finite_positive(doc) == []


def test_pytest_suites_wrote_their_groups(run: dict[str, Any]) -> None:
    groups = {json.loads(p.read_text()).get("group") for p in run["results"].glob("*.json")}
    assert {"scan-500-tokens", "scan-1MiB", "noise-384"} <= groups
    # The recently added paths (tiny sizes under run.py --tiny), each with its same-run baseline.
    assert {"cosine-repair-1x384", "cosine-repair-256x2", "cosine-repair-1x2-moved", "update-vectors-40x384"} <= groups
    pb = json.loads((run["results"] / "pytest-benchmark.json").read_text())
    assert pb["benchmarks"]


def test_report_has_machine_targets_and_plots(run: dict[str, Any]) -> None:
    md = (run["docs"] / "benchmarks.md").read_text()
    for heading in ("## Machine", "## Targets", "## Read overhead", "## Upsert overhead",
                    "## Intent classifier (built-in)", "## Where the guard's time goes", "## Scaling",
                    "## Kernel suites", "## Recently added paths"):
        assert heading in md
    target_rows = [line for line in md.splitlines() if "| PASS |" in line or "| GAP |" in line]
    assert len(target_rows) >= 2  # the upsert target and at least one kernel-suite target
    assert "Smoke configuration" in md
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib (the [bench] extra) is not installed: no plots to check")
    for name in ("dimension", "batch", "query_length", "k"):
        png = run["docs"] / "bench" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"](bench/{name}.png)" in md
