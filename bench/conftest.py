"""Print `name: ratio` for every benchmark pair and write bench/results/<group>.json.

Convention: in each pytest-benchmark group, the test whose name contains "baseline" is the
reference; every other test in the group gets ratio = baseline median / its median (>1: faster).
A test that also measured a paired ratio against its baseline (bench/_paired.py: alternating
rounds, robust to the machine's speed changing between tests) gets a second line with it.
"""
from __future__ import annotations

import json
import os
import platform
from collections import defaultdict

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def pytest_collection_modifyitems(session, config, items):
    """Run each group's tests back to back. Parametrised suites define the baseline for every size
    first and the candidates after (bench_noise: all baselines, then all privatize), so a ratio
    of medians compared timings taken a minute or more apart, and the shared VM's speed moves on
    that scale. Items with the same ``label``/``group`` parameter are moved together, at the
    place of the first one; nothing else changes order."""
    first: dict[tuple, int] = {}
    keys = []
    for index, item in enumerate(items):
        params = getattr(getattr(item, "callspec", None), "params", {})
        label = params.get("label", params.get("group"))
        tag = (item.fspath, label) if label is not None else (item.fspath, "#", index)
        keys.append(first.setdefault(tag, index))
    order = sorted(range(len(items)), key=lambda i: (keys[i], i))
    items[:] = [items[i] for i in order]


def _median(bench) -> float:
    stats = getattr(bench, "stats", None)
    stats = getattr(stats, "stats", stats)
    return float(stats.median)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    session = getattr(config, "_benchmarksession", None)
    if session is None or not getattr(session, "benchmarks", None):
        return
    groups = defaultdict(list)
    for bench in session.benchmarks:
        groups[bench.group or "default"].append(bench)
    terminalreporter.section("benchmark ratios (baseline median / median)")
    os.makedirs(RESULTS, exist_ok=True)
    for group, benches in sorted(groups.items()):
        base = [b for b in benches if "baseline" in b.name]
        if len(base) != 1:
            continue
        base_median = _median(base[0])
        rows = []
        for bench in benches:
            if bench is base[0]:
                continue
            ratio = base_median / _median(bench)
            terminalreporter.write_line(f"{group}/{bench.name}: {ratio:.2f}x "
                                        f"({_median(bench) * 1e6:.2f} us vs {base_median * 1e6:.2f} us)")
            row = {"name": bench.name, "median_s": _median(bench), "ratio": ratio}
            paired = {k: v for k, v in (bench.extra_info or {}).items() if k.startswith("paired_")}
            if paired:
                terminalreporter.write_line(
                    f"{group}/{bench.name}: paired {paired['paired_ratio']:.2f}x (quartiles "
                    f"{paired['paired_q1']:.2f}-{paired['paired_q3']:.2f}x over {paired['paired_rounds']} "
                    "alternating rounds, bench/_paired.py)")
                row.update(paired)
            rows.append(row)
        with open(os.path.join(RESULTS, f"{group}.json"), "w", encoding="utf-8") as fh:
            json.dump({"group": group, "baseline": base[0].name, "baseline_median_s": base_median,
                       "machine": platform.machine(), "python": platform.python_version(),
                       "results": rows}, fh, indent=2)
