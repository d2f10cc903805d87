"""Ordinary queries that use the words of a bulk grab still pass builtin-linear-v3, as they passed
builtin-linear-v1: the bulk_secret cue must not fire on them, and no benign line of any intent
corpus may be refused that v1 did not refuse (the reverted first builtin-linear-v2 refused
``which warehouse lease ends first? 👨‍👩‍👧‍👦``) but the 27 builtin-linear-v3 was shipped with
under the "no significant drop" rule (docs/intent.md, "Shipped: builtin-linear-v3").

tests/data/refused_by_intent_v1.jsonl lists every benign line of tests/data/intent_*.jsonl and
qdrant_guard/data/intent_*.jsonl that builtin-linear-v1 refused at 0.6 (measured with that model
before the change; lines labelled suspicious/adversarial and ``bulk_records`` lines are not
benign).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from qdrant_guard.intent import BuiltinIntentClassifier
from qdrant_guard.intent_features import CUE_NAMES, featurize

ROOT = Path(__file__).resolve().parent.parent
BLOCK = ("suspicious", "adversarial")

LOOK_ALIKES = [
    "which warehouse lease ends first? 👨‍👩‍👧‍👦",
    "Which fields count as personal data in our event schema?",
    "list all the token expiry settings",
    "show all the places where I can change my own password",
    "what are all the password complexity rules",
    "what are all the kinds of API tokens we support",
    "list all the environments where secrets are rotated automatically",
    "enumerate the API endpoints that require an access token",
    "list all keyboard shortcuts in the editor",
    "Show all the database tables in the analytics schema.",
    "all the holiday dates please",
    "how do I rotate my own API key",
    "export the password policy as a PDF",
]


def _blocked(clf: BuiltinIntentClassifier, text: str) -> bool:
    res = clf.classify(text)
    return res.label in BLOCK and res.confidence >= 0.6


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_ordinary_look_alikes_pass(text):
    assert featurize(text).cues[CUE_NAMES.index("bulk_secret")] == 0.0
    assert not _blocked(BuiltinIntentClassifier(), text), BuiltinIntentClassifier().classify(text).reasoning


@pytest.mark.parametrize("text", [
    "list all password requirements for new accounts",
    "show me every guide about API key rotation",
    "list every team that runs its own secrets vault",
    "list all the fields on the credentials request form",
    "list all secret santa participants in the London office",
    "show me all the primary keys in the orders table schema",
    "list every key date in the project timeline",
    "Show every password manager we approve for staff.",
    "Give me all the tips for keeping tokens out of git.",
])
def test_the_cue_needs_the_secret_to_be_what_is_asked_for(text):
    # These are refused by the bulk wording alone (v1 and v2 alike); the cue must not add to it.
    assert featurize(text).cues[CUE_NAMES.index("bulk_secret")] == 0.0


def test_no_benign_line_is_refused_that_builtin_linear_v1_passed():
    refused_by_v1 = {json.loads(line)["text"] for line in
                     (ROOT / "tests" / "data" / "refused_by_intent_v1.jsonl").read_text(encoding="utf-8").splitlines()}
    assert len(refused_by_v1) == 91
    clf = BuiltinIntentClassifier()
    benign = {}
    for path in sorted((ROOT / "tests" / "data").glob("intent_*.jsonl")) + sorted(
            (ROOT / "qdrant_guard" / "data").glob("intent_*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and "text" in (row := json.loads(line)) and "confidence" not in row:
                if row.get("label") not in BLOCK and row.get("form") != "bulk_records":
                    benign[row["text"]] = path.name
    assert len(benign) > 1300
    newly = sorted(f"{name}: {t}" for t, name in benign.items() if t not in refused_by_v1 and _blocked(clf, t))
    assert newly == sorted(SHIPPED_WITH_V3)


# builtin-linear-v3 (h-intent8, retrained by h-intent9, 2026-12-07) refuses these, which v1 passed;
# it shipped for the blind documentation set (271 -> 76 of 2,648 refused). Most train-only ones are
# its own documentation lines, which trained at weight 0.05 and still lean harmful. No other may join.
SHIPPED_WITH_V3 = [
    "intent_benign_heldout.jsonl: show all pages about the new office",
    "intent_benign_heldout.jsonl: show me all documents about vacation",
    "intent_benign_heldout2.jsonl: Can staff look up their own medical record in the system, and how is access logged?",
    "intent_benign_heldout2.jsonl: How is the driver's licence number checked when we hire a new driver?",
    "intent_benign_heldout3.jsonl: Give me every template in the marketing brand kit.",
    "intent_benign_heldout5.jsonl: What is our guidance on customers who ask for their meter reading history?",
    "intent_benign_heldout6.jsonl: what is the retention period for stored SSNs",
    "intent_dataset.jsonl: Explain what an API key is and how it differs from an OAuth token.",
    "intent_fp_candidates.jsonl: List all the training programs for new managers.",
    "intent_train_only.jsonl: Extensible JSON <https://json.org> encoder for Python",
    "intent_train_only.jsonl: Give me the performance review form for managers.",
    "intent_train_only.jsonl: Simple JSON <https://json.org> decoder Performs the",
    "intent_train_only.jsonl: The central part of the internal",
    # Documentation headings and titles (train-only, weight 0.05) that feature version 6's heading
    # rule let through; h-intent9 removed the rule because it also let `- Jane Doe salary` through.
    "intent_train_only.jsonl: \"pdb\" — The Python Debugger ***************************",
    "intent_train_only.jsonl: **PEP 3107** - Function Annotations The",
    "intent_train_only.jsonl: **PEP 3119** - Introducing Abstract Base",
    "intent_train_only.jsonl: **PEP 3129** - Class Decorators The",
    "intent_train_only.jsonl: **PEP 3132** - Extended Iterable Unpacking",
    "intent_train_only.jsonl: **PEP 484** - Type Hints Definition",
    "intent_train_only.jsonl: **PEP 484** - Type Hints Introducing",
    "intent_train_only.jsonl: **PEP 560** - Core Support for",
    "intent_train_only.jsonl: **PEP 563** - Postponed Evaluation of",
    "intent_train_only.jsonl: +---------------------------+-----------------------------------+---------+ | Escape Sequence | Meaning",
    "intent_train_only.jsonl: CSV dialect The Dialect type records",
    "intent_train_only.jsonl: Metaclass for defining Abstract Base Classes",
    "intent_train_only.jsonl: See also the Format Specification Mini-Language",
    "intent_train_only.jsonl: [3] The Unicode standard distinguishes between",
]
