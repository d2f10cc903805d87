"""Policy loading: TOML, validation, clear errors naming file, key, value and allowed values."""
from __future__ import annotations

import textwrap

import pytest

from qdrant_guard import ConfigError, GuardConfig, SensitivityClass, load_policy
from qdrant_guard.policy import config_from_dict

GOOD = """
audit_log = "audit.jsonl"
unlisted = "strict"

[epsilon_ceiling]
PII = 3.0

[collections.patients]
class = "PII"
owner = "clinic"
readers = ["research"]
text_field = "note"

[collections.patients.noise]
mechanism = "laplace_l2"
epsilon = 2.5
delta = 0.0
radius = 0.05

[collections.patients.diversity]
max_source_fraction = 0.3
max_source_coverage = 0.2

[collections.docs]
class = "PUBLIC"
"""


def write(tmp_path, text):
    p = tmp_path / "policy.toml"
    p.write_text(textwrap.dedent(text))
    return p


def test_good_policy_loads_with_defaults(tmp_path):
    cfg = load_policy(write(tmp_path, GOOD))
    pol = cfg.policy_for("patients")
    assert pol.sensitivity is SensitivityClass.PII
    assert pol.noise.mechanism == "laplace_l2" and pol.noise.epsilon == 2.5
    assert pol.query.max_tokens == 500 and pol.query.max_repetition == 0.5  # documented defaults
    assert pol.diversity.max_source_fraction == 0.3
    assert cfg.epsilon_ceiling[SensitivityClass.PII] == 3.0
    assert cfg.epsilon_ceiling[SensitivityClass.CREDENTIAL] == 1.0
    assert cfg.audit_log == str((tmp_path / "audit.jsonl").resolve())
    assert cfg.policy_for("docs").is_public


def test_unlisted_collections_are_strict_by_default(tmp_path):
    cfg = load_policy(write(tmp_path, GOOD))
    pol = cfg.policy_for("something_else")
    assert pol.sensitivity is SensitivityClass.PII and not pol.raw_in_boundary and pol.noise_on_write


def test_unlisted_refuse_mode(tmp_path):
    cfg = load_policy(write(tmp_path, GOOD.replace('unlisted = "strict"', 'unlisted = "refuse"')))
    with pytest.raises(ConfigError, match=r"not listed.*\[collections.other\]"):
        cfg.policy_for("other")


@pytest.mark.parametrize("edit,needles", [
    (("epsilon = 2.5", "epsilon = 9.0"), ["collections.patients.noise.epsilon = 9.0", "ceiling 3.0"]),
    (("class = \"PII\"", "class = \"SECRET\""), ["collections.patients.class", "'SECRET'", "'PUBLIC', 'PII', 'CREDENTIAL' or 'PROPRIETARY'"]),
    (("radius = 0.05", "radius = 0.05\nradios = 1"), ["unknown key 'collections.patients.noise.radios'"]),
    (("max_source_fraction = 0.3", "max_source_fraction = 1.5"), ["collections.patients.diversity.max_source_fraction = 1.5", "less than or equal to 1"]),
    (("delta = 0.0", "delta = 1e-6"), ["laplace_l2 is pure metric DP"]),
    (("unlisted = \"strict\"", "unlisted = \"loose\""), ["unlisted = 'loose'", "'strict', 'public' or 'refuse'"]),
])
def test_invalid_policies_name_file_key_value_and_fix(tmp_path, edit, needles):
    path = write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(ConfigError) as ei:
        load_policy(path)
    msg = str(ei.value)
    assert str(path) in msg
    for n in needles:
        assert n in msg, msg


def test_not_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_policy(write(tmp_path, "this is = = not toml"))
    with pytest.raises(ConfigError, match="cannot read policy file"):
        load_policy(tmp_path / "nope.toml")


def test_boundary_names_must_be_declared_when_boundaries_exist():
    with pytest.raises(ConfigError, match="boundary 'nowhere'"):
        config_from_dict({"boundaries": {"hr": {"authority_keys": ["ed25519:" + "A" * 43 + "="]}},
                          "collections": {"x": {"class": "PII", "owner": "nowhere"}}})


def test_policy_built_in_code_matches_toml(tmp_path):
    from_file = load_policy(write(tmp_path, GOOD))
    in_code = GuardConfig.model_validate({
        "audit_log": str((tmp_path / "audit.jsonl").resolve()), "epsilon_ceiling": {"PII": 3.0},
        "collections": {
            "patients": {"class": "PII", "owner": "clinic", "readers": ["research"], "text_field": "note",
                         "noise": {"mechanism": "laplace_l2", "epsilon": 2.5, "delta": 0.0, "radius": 0.05},
                         "diversity": {"max_source_fraction": 0.3, "max_source_coverage": 0.2}},
            "docs": {"class": "PUBLIC"}}})
    assert in_code.collections == from_file.collections


def test_guard_config_objects_are_immutable():
    cfg = GuardConfig()
    with pytest.raises(Exception):
        cfg.unlisted = "public"  # type: ignore[misc]
