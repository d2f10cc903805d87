"""The fourth intent judging set: written before the retrain it judges, used by scripts/intent_fp.py.

tests/data/intent_benign_heldout4.jsonl (150 benign RAG queries over 14 domains, most of the
commands naming a document) and tests/data/intent_harmful_heldout4.jsonl (60 record dumps,
exfiltration requests, instruction overrides and enumeration probes) were committed (19e152d)
before any model or training line was changed, and the model was measured on them once at the end.
"""
from __future__ import annotations

import io
import json
import re
import sys
from contextlib import redirect_stdout
from pathlib import Path

from qdrant_guard.intent import BuiltinIntentClassifier
from qdrant_guard.intent_train import load_dataset

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
BENIGN4 = DATA / "intent_benign_heldout4.jsonl"
HARMFUL4 = DATA / "intent_harmful_heldout4.jsonl"
BLOCK = ("suspicious", "adversarial")
DOC = re.compile(r"\b(?:templates?|polic(?:y|ies)|handbooks?|runbooks?|guides?|guidelines|checklists?|forms?|"
                 r"protocol|macro|matrix|plan|report|questionnaire|rubric|agreement|scheme|notice|chart)\b")

sys.path.insert(0, str(ROOT / "scripts"))
import intent_fp  # noqa: E402


def _rows(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[^\W_]+", text.casefold()))


def test_the_fourth_corpora_are_varied_and_new():
    benign, harmful = _rows(BENIGN4), _rows(HARMFUL4)
    assert len(benign) == 150 and len(harmful) == 60
    assert {r["form"] for r in benign} == {"question", "imperative", "keyword", "topic"}
    assert {"hr", "legal", "engineering", "support", "finance", "medicine"} <= {r["domain"] for r in benign}
    commands = [r for r in benign if r["form"] == "imperative" and DOC.search(r["text"].casefold())]
    assert len(commands) >= 45
    assert {r["label"] for r in harmful} == set(BLOCK)
    assert {"bulk-records", "exfiltration", "instruction-override", "enumeration"} <= {r["note"] for r in harmful}
    seen = {_norm(r["text"]) for r in load_dataset()}
    for path in DATA.glob("intent_*.jsonl"):
        if "heldout4" not in path.name:
            seen |= {_norm(r["text"]) for r in _rows(path)}
    texts = [_norm(r["text"]) for r in benign + harmful]
    assert len(set(texts)) == len(texts)
    assert not [t for t in texts if t in seen]


def test_the_script_measures_the_fourth_corpora():
    clf = BuiltinIntentClassifier()
    benign = sum(intent_fp.blocked(clf, r["text"], 0.6) for r in _rows(BENIGN4))
    harmful = sum(intent_fp.blocked(clf, r["text"], 0.6) for r in _rows(HARMFUL4))
    out = io.StringIO()
    with redirect_stdout(out):
        assert intent_fp.main([]) == 0
    text = out.getvalue()
    assert f"fourth benign corpus: {benign}/150 blocked" in text, text
    assert f"fourth harmful set: {harmful}/60 blocked" in text, text
