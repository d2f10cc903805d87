"""Shared checks of the detector-forms tests (test_detect_forms*.py).

Each runs the whole detector (plain, folded and decoded views) with the native kernel and the
pure-Python twin, which must agree; :func:`python_process` runs the public functions again in a
process with QDRANT_GUARD_IMPLEMENTATION=python; :func:`embedded_query` sends a query through the
guarded client and returns what its embedder saw.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from guardkit import Recorder, create, hr_policy, make_kit
from qdrant_client.http import models

from qdrant_guard import QdrantClient, detect
from qdrant_guard.detect import find_sensitive, redact
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")


def spans(text: str) -> list[tuple[int, int, str, str]]:
    """The spans of the whole detector, native and twin alike."""
    return assert_same(lambda t: detect._find_spans(t, NATIVE.find_spans),
                       lambda t: detect._find_spans(t, PYTHON.find_spans), text)


def assert_linear(unit: str) -> None:
    """10x ``unit`` repeated must not cost ~100x (quadratic) in the native detector.

    A complexity check, not a speed target: each size's best of 5 runs, up to three rounds, since
    a quadratic scan costs ~100x in every round while a loaded shared machine (CI beside other
    jobs) can stretch one round past the bound. CPU time of this process, not wall time: time
    spent waiting for a core is not the scan's.
    """
    small, big = unit * 2000, unit * 20000

    def best(text: str) -> float:
        times = []
        for _ in range(5):
            t0 = time.process_time()
            NATIVE.find_spans(text)
            times.append(time.process_time() - t0)
        return min(times)

    rounds = []
    for _ in range(3):
        t_small, t_big = best(small), best(big)
        rounds.append((t_small, t_big))
        if t_big < max(30 * t_small, 0.05):
            return
    raise AssertionError(f"10x the input cost more than 30x in every round (small, big seconds): {rounds}")


def found(text: str) -> list[tuple[str, str]]:
    """(value, type) of each finding, the same from :func:`spans` and from ``find_sensitive``."""
    got = spans(text)
    assert [(text[f.start:f.end], f.type) for f in find_sensitive(text)] == [(text[s:e], t) for s, e, t, _ in got]
    return [(text[s:e], t) for s, e, t, _ in got]


_PYTHON_RUN = (
    "import json, sys\n"
    "from qdrant_guard import detect\n"
    "assert detect._kernel.__name__ == 'qdrant_guard._detect_py', detect._kernel.__name__\n"
    "texts = json.loads(sys.stdin.read())\n"
    "print(json.dumps([[detect.redact(t), [[f.start, f.end, f.type] for f in detect.find_sensitive(t)]]"
    " for t in texts]))\n"
)


def python_process(texts: list[str]) -> list[str]:
    """``redact`` of each text in a process that runs the Python implementation, after checking
    that its findings and redactions equal this process's."""
    env = {k: v for k, v in os.environ.items() if k != "QDRANT_GUARD_REQUIRE_NATIVE"}
    env["QDRANT_GUARD_IMPLEMENTATION"] = "python"
    proc = subprocess.run([sys.executable, "-c", _PYTHON_RUN], input=json.dumps(texts), capture_output=True,
                          text=True, env=env, check=True)
    got: list[Any] = json.loads(proc.stdout)
    assert got == [[redact(t), [[f.start, f.end, f.type] for f in find_sensitive(t)]] for t in texts]
    return [r for r, _ in got]


def embedded_query(tmp_path: Path, text: str) -> list[str]:
    """What the embedder of an HR collection's owner sees of a ``models.Document`` query ``text``
    (identifier generalisation off, so only the detector's redaction shows)."""
    kit = make_kit(tmp_path)
    pol = {**hr_policy({}), "generalize_identifiers": False}
    emb = Recorder()
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"),
                         embedder=emb)
    create(owner, "c")
    owner.query_points("c", query=models.Document(text=text, model="m"), limit=3)
    return list(emb.seen)
