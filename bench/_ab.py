"""The driver the A/B scripts (read_ab.py, write_ab.py, score_charge_ab.py) share.

Each side of an A/B runs in its own worker process, which prints ``ready`` once set up and then
answers each request line with one line of measurements. Rounds alternate which side goes first,
so a slow phase of the shared machine slows both sides of a round alike.
"""
from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

_ROOT = Path(__file__).resolve().parent.parent


def start(argv: list[str], **popen: Any) -> subprocess.Popen[str]:
    """A worker started with ``argv``, once it has said ``ready``."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **popen)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "ready":
        raise RuntimeError(f"worker {argv!r} did not start (said {line!r}); run it alone to see its error")
    return proc


def alternate(procs: dict[str, subprocess.Popen[str]], rounds: int, request: str) -> dict[str, list[list[float]]]:
    """Each side's measurements per round (``request`` sent to both, order flipped each round).

    The two workers are closed afterwards.
    """
    first, second = procs
    got: dict[str, list[list[float]]] = {k: [] for k in procs}
    for r in range(rounds):
        for k in ((first, second) if r % 2 == 0 else (second, first)):
            p = procs[k]
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write(request + "\n")
            p.stdin.flush()
            got[k].append([float(x) for x in p.stdout.readline().split()])
    for p in procs.values():
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
    return got


def summary(label: str, xs: list[float], unit: str = "", width: int = 8) -> str:
    """One line: the median, quartiles, least and most of ``xs``."""
    q = statistics.quantiles(xs, n=4)
    return (f"{label:{width}s} median {statistics.median(xs):8.3f}  quartiles {q[0]:.3f}-{q[2]:.3f}  "
            f"min {min(xs):.3f}  max {max(xs):.3f}" + (f" {unit}" if unit else ""))


def serve(step: Callable[[int], object]) -> None:
    """The worker's side: say ``ready``, then for each request line ``n`` time ``step(0..n-1)``
    call by call and answer the median in microseconds."""
    print("ready", flush=True)
    for line in sys.stdin:
        ts = []
        for j in range(int(line)):
            t = time.perf_counter()
            step(j)
            ts.append(time.perf_counter() - t)
        print(f"{statistics.median(ts) * 1e6:.2f}", flush=True)


def serve_replayed_reads(H: Any, bed: Any, name: str, **extra: Any) -> None:
    """The read workers' side: 20 realistic top-10 reads of ``name`` by ``bed.reader``, Qdrant's
    answers recorded once and replayed (the guard's own work only), warmed, then :func:`serve`d.

    ``H`` is the worker's tree's ``_harness`` (an old tree times its own set-up); ``extra`` joins
    every read's arguments."""
    texts = H.realistic_queries(20)
    qv = [row.tolist() for row in H.unit_rows(len(texts), 384, H.SEED + 1)]
    reps = [H.Replay(bed.reader, "query_points", (name,), {"query": qv[i], "query_text": texts[i], "limit": 10, **extra})
            for i in range(len(texts))]
    for r in reps:
        r.record()
        r.check()
    for j in range(200):
        reps[j % 20].run()
    serve(lambda j: reps[j % 20].run())


def module_at(commit: str, relpath: str, name: str) -> ModuleType:
    """``relpath`` (a module of this repository) as it was at ``commit``, imported under ``name``
    beside the current one, so one process can time both (its relative imports resolve in the
    current package: ``name`` must sit inside it, e.g. ``qdrant_guard._audit_baseline``)."""
    text = subprocess.run(["git", "show", f"{commit}:{relpath}"], cwd=_ROOT,
                          check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / (name.rpartition(".")[2] + ".py")
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A typical guard write record, as the audit benches append it.
AUDIT_RECORD = {"event": "write", "op": "upsert", "collection": "hr", "principal": "alice@hr", "verdict": "ALLOWED",
                "point_ids": [17], "details": {"noised": 1, "receipts": 1, "epsilon": 1.0, "mechanism": "gaussian"}}


def ratio_quartiles(xs: list[float]) -> str:
    """``median [lower quartile, upper quartile]`` of per-round ratios."""
    q = statistics.quantiles(xs, n=4)
    return f"{statistics.median(xs):.3f} [{q[0]:.3f}, {q[2]:.3f}]"
