"""Secret/PII detection speed and recall vs detect-secrets, measured in the same run.

Run: python -m pytest bench/bench_detect.py -p no:cacheprovider --benchmark-only -q -s
Groups (ratio printed by bench/conftest.py = baseline median / candidate median):
  detect-3.4KB: ~3.4 KB of code, configs and chat from the planted-secrets corpus (seeded pick).
    baseline  = detect-secrets 1.5 scanning the same text in-process: default plugins and filters
                (``default_settings()``), ``scan_line`` on every line, as its ad-hoc API does.
    contender = ``qdrant_guard.detect.find_sensitive`` (native). Target >= 100x.
    The pure-Python reference is timed too, for information.
  detect-3.4KB-file: the same text, baseline = detect-secrets' normal file scan
                (``SecretsCollection().scan_file`` on a temp file written once, default settings).
Recall (``test_recall_vs_detect_secrets``, not a timing): over every credential planted in
tests/data/planted_secrets.jsonl, a plant counts as found by detect-secrets when a reported secret
value on one of its lines is a substring of it or contains it, and as found by us when any finding
overlaps its span (type-agnostic for both, since the two tools name types differently). Both
detect-secrets modes are scored: ``scan_line`` (ad hoc, "eager": it reports nearly every word of a
line as a high-entropy string, so its recall is high and its precision very low) and
``scan_file`` (its normal mode). False positives are counted on the corpus negatives. Written to
bench/results/detect-recall.json; the assertion is that our recall is no lower than detect-secrets'
normal mode (scan_file) and that we report fewer false positives than either mode.
detect-secrets is a bench-only dependency (pip install detect-secrets).
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from detect_secrets import SecretsCollection
from detect_secrets.core.scan import scan_line
from detect_secrets.settings import default_settings

from qdrant_guard import _detect_py
from qdrant_guard.detect import find_sensitive

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "planted_secrets.jsonl"
RESULTS = ROOT / "bench" / "results"
ROWS = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
CREDENTIAL_TYPES = set(_detect_py.FINDING_TYPES) - set(_detect_py.PII_TYPES)


def sample_text(target: int = 3400, seed: int = 3) -> str:
    rng = random.Random(seed)
    pool = [r["text"] for r in ROWS if r["kind"] in ("code", "config", "chat", "email", "negative")]
    parts: list[str] = []
    size = 0
    while size < target:
        t = rng.choice(pool)
        parts.append(t)
        size += len(t) + 1
    return "\n".join(parts)[:target]


TEXT = sample_text()


def detect_secrets_scan(text: str) -> list:
    return [secret for line in text.splitlines() for secret in scan_line(line)]


@pytest.fixture(scope="module")
def ds_settings():
    with default_settings():
        yield


def detect_secrets_file(path: str) -> list:
    collection = SecretsCollection()
    collection.scan_file(path)
    return [secret for name in collection.files for secret in collection[name]]


def test_baseline_detect_secrets_file(benchmark, ds_settings, tmp_path):
    path = tmp_path / "sample.txt"
    path.write_text(TEXT, encoding="utf-8")
    benchmark.group = "detect-3.4KB-file"
    benchmark.extra_info["bytes"] = len(TEXT.encode())
    assert benchmark(detect_secrets_file, str(path))


def test_find_sensitive_native_file_group(benchmark):
    benchmark.group = "detect-3.4KB-file"
    benchmark.extra_info["bytes"] = len(TEXT.encode())
    assert benchmark(find_sensitive, TEXT)


def test_baseline_detect_secrets(benchmark, ds_settings):
    benchmark.group = "detect-3.4KB"
    benchmark.extra_info["bytes"] = len(TEXT.encode())
    found = benchmark(detect_secrets_scan, TEXT)
    assert found  # the sample holds secrets detect-secrets knows


def test_find_sensitive_native(benchmark):
    benchmark.group = "detect-3.4KB"
    benchmark.extra_info["bytes"] = len(TEXT.encode())
    assert benchmark(find_sensitive, TEXT)


def test_find_spans_python_reference(benchmark):
    benchmark.group = "detect-3.4KB"
    benchmark.extra_info["bytes"] = len(TEXT.encode())
    assert benchmark(_detect_py.find_spans, TEXT)


def _line_spans(text: str) -> list[tuple[int, int]]:
    spans, pos = [], 0
    for line in text.split("\n"):
        spans.append((pos, pos + len(line)))
        pos += len(line) + 1
    return spans


def _ds_line_found(text: str, plant: dict) -> bool:
    value = plant["value"]
    for start, end in _line_spans(text):
        if end < plant["start"] or start > plant["end"]:
            continue
        for secret in scan_line(text[start:end]):
            v = secret.secret_value or ""
            if v and (v in value or value in v):
                return True
    return False


def _ds_file_secrets(text: str, tmp: Path) -> list:
    path = tmp / "doc.txt"
    path.write_text(text, encoding="utf-8")
    return detect_secrets_file(str(path))


def _ds_file_found(secrets: list, text: str, plant: dict) -> bool:
    first = text.count("\n", 0, plant["start"]) + 1
    last = first + plant["value"].count("\n")
    value = plant["value"]
    return any(
        first <= s.line_number <= last and s.secret_value and (s.secret_value in value or value in s.secret_value)
        for s in secrets
    )


def _ours_found(findings, plant: dict) -> bool:
    return any(f.start < plant["end"] and plant["start"] < f.end for f in findings)


def test_recall_vs_detect_secrets(ds_settings, tmp_path):
    total = 0
    found = {"qdrant_guard": 0, "detect_secrets_scan_file": 0, "detect_secrets_scan_line": 0}
    false_pos = dict.fromkeys(found, 0)
    by_type: dict[str, dict[str, int]] = {}
    for row in ROWS:
        text = row["text"]
        findings = find_sensitive(text)
        file_secrets = _ds_file_secrets(text, tmp_path)
        if row["kind"] == "negative":
            false_pos["qdrant_guard"] += len(findings)
            false_pos["detect_secrets_scan_file"] += len(file_secrets)
            false_pos["detect_secrets_scan_line"] += len(detect_secrets_scan(text))
            continue
        for plant in row["expected"]:
            if plant["type"] not in CREDENTIAL_TYPES:
                continue
            total += 1
            hits = {
                "qdrant_guard": _ours_found(findings, plant),
                "detect_secrets_scan_file": _ds_file_found(file_secrets, text, plant),
                "detect_secrets_scan_line": _ds_line_found(text, plant),
            }
            counts = by_type.setdefault(plant["type"], {"planted": 0, **dict.fromkeys(found, 0)})
            counts["planted"] += 1
            for k, hit in hits.items():
                found[k] += hit
                counts[k] += hit
    report = {
        "planted_credentials": total,
        "recall": {k: v / total for k, v in found.items()},
        "false_positives_on_negatives": false_pos,
        "negative_texts": sum(r["kind"] == "negative" for r in ROWS),
        "by_type": dict(sorted(by_type.items())),
    }
    os.makedirs(RESULTS, exist_ok=True)
    (RESULTS / "detect-recall.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    print("\n" + json.dumps(report, indent=2))
    assert found["qdrant_guard"] >= found["detect_secrets_scan_file"], report
    assert false_pos["qdrant_guard"] < min(false_pos["detect_secrets_scan_file"], false_pos["detect_secrets_scan_line"]), report
