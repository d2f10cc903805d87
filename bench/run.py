"""Run every benchmark and write bench/results/*.json and docs/benchmarks.md (+ docs/bench/*.png).

Run: python bench/run.py             (`make bench`; about 6-8 minutes on 2 cores)
     python bench/run.py --tiny --results DIR --docs DIR   (smoke: under a minute, numbers meaningless)

Steps, each in a fresh interpreter so one cannot warm or pollute another:
  1. the pytest-benchmark suites (bench/bench_*.py that define tests) with --benchmark-json;
     bench/conftest.py writes one <group>.json per baseline/candidate group (among them the
     recently added paths: bench_cosine_repair.py, bench_update_vectors.py, bench_detect.py's
     detect-card-floor groups);
  2. bench/bench_overhead.py (guard vs raw qdrant-client);
  3. bench/bench_scaling.py (dimension, batch, query length, k);
  4. bench/report.py (the Markdown report and the plots).
With QDRANT_URL set, steps 2-3 use a Qdrant server instead of local mode (see bench/README.md).
Exit status: non-zero when any step failed (the report is still written from what exists).
"""
from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
SCRIPTS = ("bench_overhead.py", "bench_scaling.py")


def pytest_suites() -> list[Path]:
    """bench/bench_*.py files that define pytest tests (the programs above define none)."""
    out = []
    for p in sorted(BENCH_DIR.glob("bench_*.py")):
        if p.name in SCRIPTS:
            continue
        tree = ast.parse(p.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.FunctionDef) and n.name.startswith("test_") for n in tree.body):
            out.append(p)
    return out


def _env() -> dict[str, str]:
    # A bench started from a pytest-xdist worker (tests/test_bench_smoke.py under `make test`)
    # inherits PYTEST_XDIST_WORKER, and pytest-benchmark then disables itself and refuses
    # --benchmark-only.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("PYTHONHASHSEED", "0")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # see bench/_harness.py
        env.setdefault(var, "1")
    return env


def _step(name: str, cmd: list[str], cwd: Path, log: list[dict[str, object]]) -> bool:
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd, cwd=cwd, env=_env())
    dt = time.monotonic() - t0
    log.append({"step": name, "rc": rc, "seconds": round(dt, 1)})
    print(f"== {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {dt:.0f} s", flush=True)
    return rc == 0


def run_pytest_suites(suites: list[Path], results: Path, tiny: bool, log: list[dict[str, object]]) -> bool:
    """Run the suites; their conftest writes <group>.json to results/ next to itself, so for a results
    directory other than bench/results the suites run through a staging directory of symlinks whose
    results/ links to it (the suites resolve their own paths through the links, the conftest does not)."""
    if not suites:
        return True
    opts = ["-p", "no:cacheprovider", "-q", "--benchmark-only", f"--benchmark-json={results / 'pytest-benchmark.json'}"]
    if tiny:
        os.environ["QG_BENCH_PAIRED_S"] = "0.05"  # bench/_paired.py: a few short rounds
        os.environ["QG_BENCH_TINY"] = "1"  # suites that size their data themselves (bench_update_vectors.py)
        opts += ["--benchmark-min-rounds=1", "--benchmark-max-time=0.001", "--benchmark-warmup=off",
                 "--benchmark-calibration-precision=1", "--benchmark-min-time=0"]
    if results.resolve() == (BENCH_DIR / "results").resolve():
        return _step("pytest-benchmark suites", [sys.executable, "-m", "pytest", *opts, *map(str, suites)],
                     ROOT, log)
    with tempfile.TemporaryDirectory(prefix="qg-bench-stage-") as tmp:
        stage = Path(tmp) / "bench"
        stage.mkdir()
        for p in (BENCH_DIR / "conftest.py", BENCH_DIR / "_paired.py", *suites):
            (stage / p.name).symlink_to(p.resolve())
        (stage / "results").symlink_to(results.resolve(), target_is_directory=True)
        return _step("pytest-benchmark suites",
                     [sys.executable, "-m", "pytest", "--rootdir", str(stage), *opts, *(str(stage / p.name) for p in suites)],
                     ROOT, log)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="smoke configuration (numbers meaningless)")
    ap.add_argument("--results", type=Path, default=BENCH_DIR / "results")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs")
    ap.add_argument("--suite", action="append", type=Path, default=None,
                    help="run only these pytest-benchmark files (repeatable; default: every bench/bench_*.py suite)")
    ap.add_argument("--skip-pytest", action="store_true", help="skip the pytest-benchmark suites")
    ap.add_argument("--no-plots", action="store_true")
    a = ap.parse_args(argv)
    results = a.results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    log: list[dict[str, object]] = []
    t0 = time.monotonic()
    ok = True
    if not a.skip_pytest:
        suites = [p.resolve() for p in a.suite] if a.suite else pytest_suites()
        ok &= run_pytest_suites(suites, results, a.tiny, log)
    size = ["--tiny"] if a.tiny else []
    for script in SCRIPTS:
        ok &= _step(script, [sys.executable, str(BENCH_DIR / script), *size, "--out", str(results)], ROOT, log)
    command = "python bench/run.py" + (" --tiny" if a.tiny else "")
    rep = [sys.executable, str(BENCH_DIR / "report.py"), "--results", str(results), "--docs", str(a.docs.resolve()),
           "--command", command] + (["--no-plots"] if a.no_plots else [])
    ok &= _step("report", rep, ROOT, log)
    print(f"== total {time.monotonic() - t0:.0f} s; " + ", ".join(f"{s['step']} {s['seconds']} s" for s in log))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
