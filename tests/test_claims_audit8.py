"""Claims audit 8 (branch h-claims8, 2026-12-06): the statements a user acts on that changed this
session (the retrained intent classifier's figures, docs/atomicity.md's batch wording, the Cosine
stored form, the card rules, the async lock), checked against the code and a real local-mode
qdrant-client.

Wrong and corrected, pinned here:

1. docs/intent.md's reasoning example ("list every employee's salary") gave the old model's
   confidence and cue order.
2. The ``intent.skip_owner`` docstring (and so docs/policy.md) named as refused two commands the
   retrained model lets through (``list all contract templates``, ``show me the NDA template``).
3. docs/intent.md: the fourth benign judging set spans 13 domains, not 14.
4. ``Pipeline.forward``'s docstring said Qdrant applies a batch as a unit (docs/atomicity.md now
   says it does not; the test below shows local mode applying a batch's first operation and then
   failing).

The rest are pinned as stated.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient
from qdrant_client import models

from qdrant_guard.detect import redact
from qdrant_guard.intent_builtin import BuiltinIntentClassifier
from qdrant_guard.receipts import COMMIT_GRID, stored_form_batch

ROOT = Path(__file__).resolve().parent.parent
BLOCK = ("suspicious", "adversarial")


def _flat(path: str) -> str:
    return " ".join((ROOT / path).read_text().split())


@pytest.fixture(scope="module")
def clf() -> BuiltinIntentClassifier:
    return BuiltinIntentClassifier()


def test_the_reasoning_example_of_docs_intent_is_what_the_model_gives(clf: BuiltinIntentClassifier) -> None:
    doc = _flat("docs/intent.md")
    shown = re.search(r"\"list every employee's salary\" gives `([^`]+)`", doc)
    assert shown is not None
    assert clf.classify("list every employee's salary").reasoning == shown.group(1)


def _skip_owner_examples() -> list[str]:
    src = " ".join((ROOT / "qdrant_guard/policy_sections.py").read_text().split())
    part = re.search(r"refuses ordinary requests \(([^)]*)\)", src)
    assert part is not None
    return re.findall(r"``([^`]+)``", part.group(1))


def test_the_requests_skip_owner_names_as_refused_are_refused(clf: BuiltinIntentClassifier) -> None:
    examples = _skip_owner_examples()
    assert len(examples) == 2
    for text in examples:
        res = clf.classify(text)
        assert res.label in BLOCK and res.confidence >= 0.6, (text, res.label, res.confidence)
    # the same sentence reaches docs/policy.md through the generator
    for text in examples:
        assert f"``{text}``" in _flat("docs/policy.md")


def test_the_fourth_benign_set_spans_the_domains_docs_intent_counts() -> None:
    rows = [json.loads(line) for line in (ROOT / "tests/data/intent_benign_heldout4.jsonl").read_text().splitlines()
            if line.strip()]
    domains = {r["domain"] for r in rows}
    assert len(rows) == 150
    assert f"150 benign queries in {len(domains)} domains" in _flat("docs/intent.md")


def test_the_train_only_lines_are_counted_as_the_docs_state() -> None:
    rows = [json.loads(line) for line in (ROOT / "qdrant_guard/data/intent_train_only.jsonl").read_text().splitlines()
            if line.strip()]
    labels = [r["label"] for r in rows]
    assert (len(rows), labels.count("benign"), labels.count("suspicious"), labels.count("adversarial")) == (1790, 1642, 109, 39)
    assert sum(1 for r in rows if r.get("weight") == 0.05) == 1522
    assert "holds 1,790 more that only ever train: 268 hand-written (120 benign, 109 suspicious, 39 adversarial" in _flat("docs/intent.md")
    assert "on 1,790 train-only lines, 1,522 of them documentation openings weighted 0.05" in _flat("docs/retrieval-defences.md")


# -- docs/atomicity.md: what Qdrant (local mode) does with a failing request ----------------------


def _raw() -> RawClient:
    c = RawClient(":memory:")
    c.create_collection("t", vectors_config=models.VectorParams(size=2, distance=models.Distance.DOT))
    c.upsert("t", [models.PointStruct(id=1, vector=[1.0, 0.0], payload={"a": 1})])
    return c


def test_qdrant_applies_a_batch_in_order_and_keeps_what_ran_before_a_failing_operation() -> None:
    c = _raw()
    with pytest.raises(Exception):
        c.batch_update_points("t", [
            models.SetPayloadOperation(set_payload=models.SetPayload(payload={"b": 2}, points=[1])),
            models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
                points=[models.PointVectors(id=99, vector=[0.0, 1.0])])),
        ])
    assert c.retrieve("t", [1])[0].payload == {"a": 1, "b": 2}  # not a unit
    assert "is not applied as a unit" in _flat("docs/atomicity.md")
    for module in ("pipeline", "callchecks", "dispatch"):  # pipeline.py's text, split into three
        assert "as a unit" not in " ".join((ROOT / f"qdrant_guard/{module}.py").read_text().split()).replace(
            "is not applied as a unit", "")


@pytest.mark.parametrize("bad", [[1.0, 0.0, 0.0], [float("nan"), 0.0]], ids=["size", "nan"])
def test_qdrant_checks_an_upserts_points_before_applying_any(bad: list[float]) -> None:
    c = _raw()
    with pytest.raises(Exception):
        c.upsert("t", [models.PointStruct(id=2, vector=[1.0, 0.0]), models.PointStruct(id=3, vector=bad)])
    assert c.count("t").count == 1


# -- docs/receipt-format.md: the Cosine stored form ------------------------------------------------


@pytest.mark.parametrize("d", [2, 3])
def test_the_cosine_stored_form_is_within_the_steps_the_docs_state(d: int) -> None:
    rows = np.random.default_rng(80 + d).standard_normal((50_000, d))
    s = stored_form_batch(rows, distance="Cosine").astype(np.float64)
    k = s / COMMIT_GRID
    assert np.array_equal(k, np.round(k))
    exact = s / np.linalg.norm(s, axis=1, keepdims=True)
    assert np.abs(exact / COMMIT_GRID - k).max() <= 0.25  # "none was left beyond 1/4 step"
    s32 = s.astype(np.float32)
    f32 = (s32 / np.linalg.norm(s32, axis=1, keepdims=True).astype(np.float32)).astype(np.float64)
    assert np.abs(f32 / COMMIT_GRID - k).max() <= 0.25 + 1 / 16  # "at most about 1/4 + 1/16"


# -- docs/threat-model.md: the card rules written today --------------------------------------------


@pytest.mark.parametrize("text, redacted", [
    ("0.4111111111111111", "0.4111111111111111"),
    ("4111111111111111.5", "4111111111111111.5"),
    ("12:4111111111111111.5", "12:4111111111111111.5"),
    ("555.123.4111111111111111", "[CREDIT_CARD]"),
    ("555 123.4111111111111111", "[CREDIT_CARD]"),
    ("4111111111111111:5", "[CREDIT_CARD]:5"),
    ("12:4111111111111111", "12:[CREDIT_CARD]"),
    ("1/4111111111111111/5", "1/[CREDIT_CARD]/5"),
    ("36287999999999999/36288000000000000", "[CREDIT_CARD]/36288000000000000"),
    ("4111 1111 1111 1111  555.1234", "[CREDIT_CARD]  555.1234"),
    ("4111 1111 1111 1111  555-1234", "[CREDIT_CARD]  555-1234"),
    ("4111 1111 1111 1111 555:1234", "[CREDIT_CARD] 555:1234"),
    ("4111 1111 1111 1111 555/1234", "[CREDIT_CARD] 555/1234"),
    ("4111 1111 1111 1111:555.1234", "[CREDIT_CARD]:555.1234"),
    ("4111111111111111:555.1234", "[CREDIT_CARD]:555.1234"),
    ("4111 1111 1111 1111 12:30", "[CREDIT_CARD] 12:30"),
    ("4111 1111 1111 1111 1/2", "[CREDIT_CARD] 1/2"),
])
def test_the_card_rules_examples_of_the_threat_model(text: str, redacted: str) -> None:
    assert redact(text) == redacted
    if not text.startswith("4111 1111 1111 1111 "):  # the doc writes those with "..." for the card
        assert f"`{text}`" in _flat("docs/threat-model.md")
