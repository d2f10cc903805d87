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
The card_floor path (native/detect.c ``card_floor``, ``_detect_py._card_floor``) runs at every digit
run's start, so digit-dense text pays for it most. Two groups time that against ordinary text:
  detect-card-floor-3.4KB: baseline = ``find_sensitive`` (native) on the 3.4 KB sample above;
    candidates = the same on 3.4 KB of seeded digit-dense text (:func:`digit_text`): ``digits``
    (times, dates, ratios, ports, versions, decimals, space-joined digit groups: no card) and
    ``glued`` (the same with Luhn-valid cards glued to ':' '/' '.' '-' and digits, as in
    tests/test_glued_card8.py); ratio < 1: the digit text costs 1 / ratio times the ordinary one.
  detect-card-floor-3.4KB-python: the same texts through the pure-Python twin
    (``_detect_py.find_spans``), plus the glued text with ``_card_floor`` replaced by a function
    that reads no card, for information only: the twin's share that is card_floor itself.
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

from _paired import paired_ratio
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

CARDS = ("4111111111111111", "5500005555555559", "340000000000009", "6011000990139424", "4012888888881881")


def digit_text(target: int = 3400, seed: int = 5, *, cards: bool) -> str:
    """Seeded digit-dense text of ``target`` characters: many short digit runs next to ':' '/' '.'
    '-' and spaces, and with ``cards`` Luhn-valid cards glued to them ("12:4111111111111111")."""
    rng = random.Random(seed)

    def n(lo: int, hi: int) -> str:
        return str(rng.randint(lo, hi))

    plain = [
        lambda: f"{n(0, 23):0>2}:{n(0, 59):0>2}:{n(0, 59):0>2}",
        lambda: f"{n(1990, 2030)}/{n(1, 12):0>2}/{n(1, 28):0>2}",
        lambda: f"{n(1, 9)}/{n(1, 9)}",
        lambda: f"{n(1, 99)}:{n(1, 99)}",
        lambda: f"10.{n(0, 255)}.{n(0, 255)}.{n(0, 255)}:{n(1, 65535)}",
        lambda: f"v{n(0, 9)}.{n(0, 20)}.{n(0, 99)}",
        lambda: f"{n(0, 999)}.{n(0, 9999)}",
        lambda: " ".join(f"{rng.randint(0, 9999):0>4}" for _ in range(rng.randint(2, 5))),
        lambda: f"{n(100, 999)}-{n(100, 999)}-{n(1000, 9999)}",
        lambda: f"id {n(1, 10 ** 9)}/{n(1, 10 ** 6)}",
    ]
    glued = [
        lambda: f"{n(1, 99)}:{rng.choice(CARDS)}",
        lambda: f"{rng.choice(CARDS)}:{n(1, 9)}",
        lambda: f"{rng.choice(CARDS)}/{n(1, 12)}",
        lambda: f"{n(100, 999)} {n(100, 999)}.{rng.choice(CARDS)}",
        lambda: f"0.{rng.choice(CARDS)}",
        lambda: "-".join((lambda c: [c[i:i + 4] for i in range(0, len(c), 4)])(rng.choice(CARDS))) + f"-{n(1, 9)}",
    ]
    parts: list[str] = []
    size = 0
    while size < target:
        t = rng.choice(glued)() if cards and rng.random() < 0.3 else rng.choice(plain)()
        parts.append(t)
        size += len(t) + 1
    return " ".join(parts)[:target]


DIGITS = digit_text(cards=False)
GLUED = digit_text(cards=True)
CARD_TEXTS = {"ordinary": TEXT, "digits": DIGITS, "glued": GLUED}


def digit_run_starts(text: str) -> int:
    """How many digit runs start in ``text``: the positions card_floor (and the number chain) run at."""
    return sum(1 for _ in _detect_py._word_starts(text, _detect_py._DIGITS))


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


def _card_floor_bench(benchmark, fn, label: str, group: str):
    text = CARD_TEXTS[label]
    benchmark.group = group
    benchmark.extra_info.update(bytes=len(text.encode()), digit_run_starts=digit_run_starts(text))
    return benchmark(fn, text)


def test_baseline_card_floor_native_ordinary(benchmark):
    _card_floor_bench(benchmark, find_sensitive, "ordinary", "detect-card-floor-3.4KB")


@pytest.mark.parametrize("label", ["digits", "glued"])
def test_card_floor_native(benchmark, label):
    found = _card_floor_bench(benchmark, find_sensitive, label, "detect-card-floor-3.4KB")
    benchmark.extra_info.update(paired_ratio(lambda: find_sensitive(TEXT), lambda: find_sensitive(CARD_TEXTS[label])))
    assert (label == "glued") == any(f.type == "CREDIT_CARD" for f in found)


def test_baseline_card_floor_python_ordinary(benchmark):
    _card_floor_bench(benchmark, _detect_py.find_spans, "ordinary", "detect-card-floor-3.4KB-python")


@pytest.mark.parametrize("label", ["digits", "glued"])
def test_card_floor_python(benchmark, label):
    _card_floor_bench(benchmark, _detect_py.find_spans, label, "detect-card-floor-3.4KB-python")
    benchmark.extra_info.update(paired_ratio(lambda: _detect_py.find_spans(TEXT),
                                             lambda: _detect_py.find_spans(CARD_TEXTS[label]),
                                             budget_s=min(2.0, float(os.environ.get("QG_BENCH_PAIRED_S", "6")))))


def _spans_without_card_floor(text: str) -> list:
    # find_spans reads the module's _card_floor at each call: swapped for the call only.
    saved = _detect_py._card_floor
    _detect_py._card_floor = lambda text, i: []
    try:
        return _detect_py.find_spans(text)
    finally:
        _detect_py._card_floor = saved


def test_card_floor_python_without_card_floor_for_information(benchmark):
    benchmark.group = "detect-card-floor-3.4KB-python"
    benchmark(_spans_without_card_floor, GLUED)
    # The twin's card_floor share on the glued text: without / with, in alternating rounds (stored
    # in the results only: conftest prints paired_* figures against the group's baseline).
    share = paired_ratio(lambda: _spans_without_card_floor(GLUED), lambda: _detect_py.find_spans(GLUED),
                         budget_s=min(2.0, float(os.environ.get("QG_BENCH_PAIRED_S", "6"))))
    benchmark.extra_info.update({f"without_over_with_{k}": v for k, v in share.items()})


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
