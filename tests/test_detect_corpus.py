"""Recall and precision on the planted-secrets corpus (tests/data/planted_secrets.jsonl).

The expected spans come from tests/data/planted_secrets_gen.py, which records where it planted
each generated value; they are never produced by the detector. A finding counts only when type,
start and end all match.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from qdrant_guard.detect import FINDING_TYPES, find_sensitive, redact

CORPUS = Path(__file__).parent / "data" / "planted_secrets.jsonl"
ROWS = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]


def _score(rows: list[dict]) -> tuple[Counter, Counter, Counter]:
    tp: Counter = Counter()
    fp: Counter = Counter()
    fn: Counter = Counter()
    for row in rows:
        expected = {(e["type"], e["start"], e["end"]) for e in row["expected"]}
        got = {(f.type, f.start, f.end) for f in find_sensitive(row["text"])}
        for t, *_ in expected & got:
            tp[t] += 1
        for t, *_ in got - expected:
            fp[t] += 1
        for t, *_ in expected - got:
            fn[t] += 1
    return tp, fp, fn


def test_corpus_shape() -> None:
    kinds = Counter(r["kind"] for r in ROWS)
    assert len(ROWS) >= 150
    assert {"code", "config", "chat", "email", "negative", "hard"} <= set(kinds)
    assert kinds["negative"] >= 30
    planted = {e["type"] for r in ROWS for e in r["expected"]}
    assert planted == set(FINDING_TYPES)
    for r in ROWS:
        for e in r["expected"]:
            assert r["text"][e["start"] : e["end"]] == e["value"]


def test_recall_and_precision() -> None:
    tp, fp, fn = _score(ROWS)
    recall = sum(tp.values()) / (sum(tp.values()) + sum(fn.values()))
    precision = sum(tp.values()) / (sum(tp.values()) + sum(fp.values()))
    assert recall >= 0.97, f"recall {recall:.3f}; misses by type {dict(fn)}"
    assert precision >= 0.98, f"precision {precision:.3f}; false positives by type {dict(fp)}"


@pytest.mark.parametrize("kind", ["code", "config", "chat", "email"])
def test_every_ordinary_plant_is_found_per_kind(kind: str) -> None:
    rows = [r for r in ROWS if r["kind"] == kind]
    _, _, fn = _score(rows)
    assert not fn, f"misses in {kind}: {dict(fn)}"


def test_known_hard_misses() -> None:
    # Documented limits: a passphrase with spaces after "password:", a password in prose with no
    # assignment ("the root pw is ..."), a bare 9-digit SSN after "social:" (no "ssn" keyword).
    _, _, fn = _score([r for r in ROWS if r["kind"] == "hard"])
    assert fn == Counter({"GENERIC_SECRET": 2, "SSN": 1})


def test_negatives_have_no_findings() -> None:
    for row in ROWS:
        if row["kind"] == "negative":
            assert find_sensitive(row["text"]) == [], row["text"]


def test_redaction_removes_every_found_plant() -> None:
    for row in ROWS:
        out = redact(row["text"])
        found = {(f.start, f.end) for f in find_sensitive(row["text"])}
        for e in row["expected"]:
            if (e["start"], e["end"]) in found:
                assert e["value"] not in out
