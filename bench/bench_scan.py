"""Structural query scan speed vs the lesson's Python validator, measured in the same run.

Run: python -m pytest bench/bench_scan.py -p no:cacheprovider --benchmark-only -q
Groups (ratio printed by bench/conftest.py = baseline median / candidate median):
  scan-500-tokens: a seeded ~500-token English query (~3.4 KB); target >= 20x.
  scan-500-tokens-varied: 64 such queries (different seeds), one per call in turn. Scanning the
                   same query thousands of times lets the CPU's branch predictor learn it, which
                   a guard never sees in service; this group is the per-query cost without that.
  scan-500-tokens-lesson-as-written(-varied): the same queries against the lesson's validator
                   doing all its work (LessonAsWritten: worded problems, the pattern looked up in
                   re's cache per call, a dataclass result), not only its core; target >= 20x.
  scan-1MiB:       a seeded 1 MiB pure-ASCII English text; throughput = bytes / median (target >= 1 GB/s).
  scan-1MiB-mixed: 1 MiB of the same English with a quarter of the tokens non-ASCII (accented Latin,
                   Cyrillic, CJK, emoji incl. ZWJ sequences, typographic punctuation): the general path.
The baseline is the lesson's validator re-done here: str.split, a set, one regex. The candidate is
the native scan_query with its default rules, which checks far more (see qdrant_guard/_scan_py.py).
"""
from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, field

import pytest

from _paired import paired_ratio
from qdrant_guard import _scan

WORDS = (
    "the retrieval pipeline should summarize quarterly revenue figures from several regional reports "
    "and compare them against forecasts while ignoring drafts that were superseded by later versions "
    "please include customer churn analysis together with support ticket volumes product adoption metrics "
    "infrastructure costs marketing spend forecasts hiring plans security incidents compliance findings "
    "for each business unit explain which assumptions changed between consecutive planning cycles and why "
    "management considered alternative scenarios before approving the final operating budget document"
).split()

ENCODED = re.compile(r"%[0-9a-fA-F]{2}|\\x[0-9a-fA-F]{2}")


def lesson_validator(query: str, max_tokens: int = 500, max_repetition: float = 0.5) -> list[str]:
    """The lesson's structural check, in our own words: split, a set, one regex."""
    problems = []
    tokens = query.split()
    if len(tokens) > max_tokens:
        problems.append("tokens")
    if tokens and 1 - len(set(tokens)) / len(tokens) > max_repetition:
        problems.append("repetition")
    if ENCODED.search(query):
        problems.append("encoded")
    return problems


ENCODED_PATTERN = r"%[0-9a-fA-F]{2}|\\x[0-9a-fA-F]{2}"


@dataclass
class Verdict:
    ok: bool
    query: str
    problems: list[str] = field(default_factory=list)


class LessonAsWritten:
    """The lesson's validator doing all the work it does, in our own words: limits kept on an
    object, each problem worded with an f-string, the pattern passed to ``re.search`` as a string
    on every call (so ``re``'s cache is consulted each time), and a dataclass result holding the
    query. ``lesson_validator`` above keeps only its core (no wording, a precompiled pattern, a
    bare list); both are reported, and the target is judged against this one, the validator the
    issue names."""

    def __init__(self, max_tokens: int = 500, max_repetition: float = 0.5) -> None:
        self.max_tokens = max_tokens
        self.max_repetition = max_repetition

    def check(self, query: str) -> Verdict:
        problems = []
        tokens = query.split()
        if len(tokens) > self.max_tokens:
            problems.append(f"exceeds {self.max_tokens}-token cap ({len(tokens)})")
        if tokens:
            repetition = 1 - (len(set(tokens)) / len(tokens))
            if repetition > self.max_repetition:
                problems.append(f"repetition ratio {repetition:.2f}")
        if re.search(ENCODED_PATTERN, query):
            problems.append("encoded-character payload")
        return Verdict(ok=not problems, query=query, problems=problems)


NON_ASCII = (
    "café naïve Größe façade résumé São Paulo Zürich привет мир данные 東京 データベース 检索 "
    "\u2014 \u201cquoted\u201d 😀 👍🏽 \U0001F469\u200d\U0001F4BB \u00a9 10\u00a0km"
).split(" ")


def english(n_tokens: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_tokens))


def mixed(n_tokens: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(NON_ASCII) if rng.random() < 0.25 else rng.choice(WORDS)
                    for _ in range(n_tokens))


def first_mib(text: str) -> str:
    """The longest prefix of ``text`` whose UTF-8 form fits in 1 MiB."""
    data = text.encode()[: 1 << 20]
    return data.decode("utf-8", "ignore")


QUERY = english(500, seed=1)
MIB = (english(160_000, seed=2) + " ")[: 1 << 20]
MIB_MIXED = first_mib(mixed(200_000, seed=3))
TEXTS = {"scan-500-tokens": QUERY, "scan-1MiB": MIB, "scan-1MiB-mixed": MIB_MIXED}
VARIED = [english(500, seed=100 + i) for i in range(64)]


def test_baseline_lesson_validator_varied(benchmark):
    benchmark.group = "scan-500-tokens-varied"
    texts = itertools.cycle(VARIED)
    benchmark(lambda: lesson_validator(next(texts)))


def test_scan_query_native_varied(benchmark):
    benchmark.group = "scan-500-tokens-varied"
    texts = itertools.cycle(VARIED)
    scan = _scan.scan_query
    result = benchmark(lambda: scan(next(texts)))
    assert result.token_count == 500
    base_texts, cand_texts = itertools.cycle(VARIED), itertools.cycle(VARIED)
    benchmark.extra_info.update(paired_ratio(lambda: lesson_validator(next(base_texts)),
                                             lambda: scan(next(cand_texts))))


@pytest.mark.parametrize("group", list(TEXTS))
def test_baseline_lesson_validator(benchmark, group):
    text = TEXTS[group]
    benchmark.group = group
    benchmark.extra_info["bytes"] = len(text.encode())
    benchmark(lesson_validator, text)


@pytest.mark.parametrize("group", list(TEXTS))
def test_scan_query_native(benchmark, group):
    text = TEXTS[group]
    benchmark.group = group
    benchmark.extra_info["bytes"] = len(text.encode())
    benchmark.extra_info["tokens"] = len(text.split())
    max_tokens = None if group.startswith("scan-1MiB") else 500
    result = benchmark(_scan.scan_query, text, max_tokens=max_tokens)
    assert result.token_count == len(text.split())
    benchmark.extra_info.update(paired_ratio(lambda: lesson_validator(text),
                                             lambda: _scan.scan_query(text, max_tokens=max_tokens)))
    benchmark.extra_info["GB_per_s"] = round(len(text.encode()) / benchmark.stats.stats.median / 1e9, 3)


AS_WRITTEN = "scan-500-tokens-lesson-as-written"


def test_baseline_lesson_as_written(benchmark):
    benchmark.group = AS_WRITTEN
    benchmark(LessonAsWritten().check, QUERY)


def test_scan_query_native_vs_as_written(benchmark):
    benchmark.group = AS_WRITTEN
    result = benchmark(_scan.scan_query, QUERY)
    assert result.token_count == 500
    lesson = LessonAsWritten()
    benchmark.extra_info.update(paired_ratio(lambda: lesson.check(QUERY), lambda: _scan.scan_query(QUERY)))


def test_baseline_lesson_as_written_varied(benchmark):
    benchmark.group = AS_WRITTEN + "-varied"
    texts = itertools.cycle(VARIED)
    lesson = LessonAsWritten()
    benchmark(lambda: lesson.check(next(texts)))


def test_scan_query_native_vs_as_written_varied(benchmark):
    benchmark.group = AS_WRITTEN + "-varied"
    texts = itertools.cycle(VARIED)
    scan = _scan.scan_query
    result = benchmark(lambda: scan(next(texts)))
    assert result.token_count == 500
    lesson = LessonAsWritten()
    base_texts, cand_texts = itertools.cycle(VARIED), itertools.cycle(VARIED)
    benchmark.extra_info.update(paired_ratio(lambda: lesson.check(next(base_texts)),
                                             lambda: scan(next(cand_texts))))
