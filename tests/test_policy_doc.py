"""docs/policy.md is generated from the models, and the full example policy validates."""
from __future__ import annotations

import tomllib
from pathlib import Path

from qdrant_guard.policy import config_from_dict
from qdrant_guard.policy_doc import render

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_policy_reference_is_up_to_date():
    assert (DOCS / "policy.md").read_text() == render(), (
        "docs/policy.md is stale: run `python -m qdrant_guard.policy_doc > docs/policy.md`")


def test_every_key_is_documented():
    text = render()
    for line in text.splitlines():
        if line.startswith("| `"):
            assert not line.rstrip().endswith("|  |"), f"undocumented key: {line}"


def test_full_example_policy_validates():
    data = tomllib.loads((DOCS / "policy.example.toml").read_text())
    # key files are resolved relative to the policy file by load_policy; here only the schema matters
    cfg = config_from_dict(data, source="docs/policy.example.toml")
    assert cfg.policy_for("employee_records").diversity.max_source_coverage == 0.25
    assert cfg.policy_for("product_docs").is_public
