"""Sixteenth review (2026-12-05): regressions found in the day's changes (ae21b51..e49e3f1).

Each test fails on the code before its fix (checked, see docs/security-testing.md)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from qdrant_guard.policy import GuardConfig, config_from_dict

_KEY = "ed25519:" + "A" * 43 + "="


def _policy(unlisted: str) -> GuardConfig:
    return config_from_dict({
        "unlisted": unlisted,
        "boundaries": {"hr": {"authority_keys": [_KEY]}},
        "collections": {"kb": {"class": "PII", "owner": "hr", "text_field": "text"}},
    })


@pytest.mark.parametrize("unlisted", ["strict", "public", "refuse"])
def test_a_loaded_policy_reloads_from_its_own_json_dump(unlisted):
    # ddfbe8b refused any [default] under unlisted = "public"/"refuse", and a dump always holds
    # the built-in default: a policy serialised with model_dump_json no longer loaded.
    cfg = _policy(unlisted)
    back = config_from_dict(json.loads(cfg.model_dump_json(by_alias=True)))
    assert back.model_dump() == cfg.model_dump()
    assert GuardConfig.model_validate_json(cfg.model_dump_json(by_alias=True)).model_dump() == cfg.model_dump()


def test_a_default_section_that_sets_something_is_still_refused_outside_strict():
    with pytest.raises(ValueError, match="would be ignored"):
        config_from_dict({"unlisted": "public", "default": {"class": "CREDENTIAL"}})


@pytest.mark.parametrize("unlisted", ["strict", "public", "refuse"])
def test_a_loaded_policy_reloads_from_its_own_model_dump(unlisted):
    # c7910da dropped populate_by_name (no 'sensitivity' spelling in policy files), but
    # model_dump() still wrote 'sensitivity', so its output was refused as an unknown key.
    cfg = _policy(unlisted)
    dumped = cfg.model_dump()
    assert dumped["collections"]["kb"]["class"] == "PII"
    assert GuardConfig.model_validate(dumped).model_dump() == dumped


def test_the_intent_module_keeps_the_public_names_it_had_before_the_split():
    # 143e1fc split intent.py; docs/intent.md's timing command imports featurize from
    # qdrant_guard.intent, and it raised ImportError after the split. Fresh interpreter: no
    # other test's imports can make the names appear.
    names = ["CUE_NAMES", "FEATURE_VERSION", "Featurized", "SYSTEM_PROMPT", "feature_rows", "featurize",
             "hash_key", "model_from_dict", *__import__("qdrant_guard.intent", fromlist=["x"]).__all__]
    code = ("import qdrant_guard.intent as m; import sys; missing = [n for n in sys.argv[1:] if not hasattr(m, n)]; "
            "print(missing); sys.exit(1 if missing else 0)")
    out = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    from qdrant_guard import intent
    from qdrant_guard import intent_features as features
    assert intent.featurize is features.featurize  # one function, not a copy


@pytest.mark.parametrize("module", ["intent", "intent_types", "intent_features", "intent_builtin", "intent_llm",
                                    "intent_pool", "intent_train", "audit", "audit_verify"])
def test_each_split_module_imports_alone_in_a_fresh_interpreter(module):
    out = subprocess.run([sys.executable, "-c", f"import qdrant_guard.{module}"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
