"""Policy knob audit 2: combinations of keys the loader accepted and the guard then ignored.

Each is refused at load, naming the key and the fix (docs/security-testing.md, "Policy knob audit 2").
Real local-mode Qdrant and real keys where a client is built.
"""
from __future__ import annotations

import json

import pytest

from qdrant_guard.errors import ConfigError
from qdrant_guard.policy import GuardConfig, config_from_dict, load_policy


def _refused(data, *needles):
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data, source="p.toml")
    msg = str(ei.value)
    for needle in needles:
        assert needle in msg, msg
    return msg


def _reloads(cfg: GuardConfig) -> None:
    """A policy's own dumps load again, to the same policy."""
    assert config_from_dict(json.loads(cfg.model_dump_json(by_alias=True))).model_dump() == cfg.model_dump()
    assert GuardConfig.model_validate(cfg.model_dump()).model_dump() == cfg.model_dump()


# -- raw_in_boundary needs an owner -------------------------------------------------------------

@pytest.mark.parametrize("section", ["collections.kb", "default"])
def test_raw_in_boundary_without_an_owner_is_refused_naming_the_section_and_the_fix(tmp_path, section):
    # raw_allowed needs boundary == owner: with no owner no principal ever got raw vectors, while
    # the policy said the owner's were stored raw.
    header = section if section == "default" else f"collections.{section.split('.')[1]}"
    policy = tmp_path / "p.toml"
    policy.write_text(f'[{header}]\nclass = "PII"\nreaders = ["*"]\nraw_in_boundary = true\n')
    with pytest.raises(ConfigError) as ei:
        load_policy(policy)
    msg = str(ei.value)
    assert f"{section} = " in msg and "raw_in_boundary = true" in msg
    assert 'set owner = "NAME"' in msg and "remove raw_in_boundary" in msg and "would be ignored" in msg


def test_raw_in_boundary_with_an_owner_or_off_still_loads_and_its_dump_reloads():
    key = "ed25519:" + "A" * 43 + "="
    cfg = config_from_dict({"boundaries": {"hr": {"authority_keys": [key]}},
                            "collections": {"kb": {"class": "PII", "owner": "hr", "raw_in_boundary": True},
                                            "open": {"class": "PII", "readers": ["*"], "raw_in_boundary": False}}})
    assert cfg.collections["kb"].raw_allowed("hr")
    _reloads(cfg)


def test_raw_in_boundary_on_a_public_collection_keeps_the_public_message():
    _refused({"collections": {"kb": {"class": "PUBLIC", "raw_in_boundary": True}}}, "collections.kb is PUBLIC",
             "raw_in_boundary would be ignored")


@pytest.mark.parametrize("data", [
    {"collections": {"kb": {"class": "PUBLIC", "text_field": "text"}}},
    {"default": {"class": "PUBLIC"}},
])
def test_a_policy_with_a_public_collection_reloads_from_its_dumps(data):
    # A dump writes every key, owner, readers, noise, query ... among them, and the loader refuses
    # those on a PUBLIC collection when written: such a policy's dump did not load again.
    _reloads(config_from_dict(data))
