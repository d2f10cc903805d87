"""Policy knob audit 2: combinations of keys the loader accepted and the guard then ignored.

Each is refused at load, naming the key and the fix (docs/security-testing.md, "Policy knob audit 2").
Real local-mode Qdrant and real keys where a client is built.
"""
from __future__ import annotations

import json

import pytest

from qdrant_guard.errors import ConfigError
from qdrant_guard.policy import GuardConfig, config_from_dict, load_policy
from tests.test_knob_audit import _refused




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


# -- other keys that could never act where they were set -----------------------------------------

_KEY = "ed25519:" + "A" * 43 + "="
_HR = {"hr": {"authority_keys": [_KEY]}, "support": {"authority_keys": ["ed25519:" + "B" * 43 + "="]}}


@pytest.mark.parametrize("pol, needles", [
    # querycheck: noising = noise_queries and not raw_allowed(boundary); only the owner reads, raw.
    ({"owner": "hr", "raw_in_boundary": True, "noise_queries": True},
     ["noise_queries = true", "only the owner boundary 'hr' reads", "remove noise_queries"]),
    ({"owner": "hr", "readers": ["hr"], "raw_in_boundary": True, "noise_queries": True},
     ["noise_queries = true", "add the readers it was meant for"]),
    # querycheck._filter_pii_ok: "owner" needs pol.owner is not None, else it is "refuse".
    ({"readers": ["*"], "query": {"filter_pii": "owner"}},
     ['query.filter_pii = "owner"', 'act as "refuse"', 'set owner = "NAME"']),
    # writes: PII is kept only for a raw-allowed writer, and raw needs an owner.
    ({"readers": ["*"], "text_field": "text", "keep_payload_text_in_boundary": True},
     ["keep_payload_text_in_boundary = true", "no owner is set", "remove keep_payload_text_in_boundary"]),
    # textguard.screen_text: redact_pii = false keeps PII whatever payload_fields says.
    ({"owner": "hr", "payload_fields": "all", "redact_pii": False},
     ['payload_fields = "all"', "redact_pii = false", 'act as "credentials"']),
])
def test_a_key_that_could_never_act_on_a_sensitive_collection_is_refused(pol, needles):
    _refused({"boundaries": _HR, "collections": {"kb": {"class": "PII", **pol}}}, "collections.kb", *needles)


@pytest.mark.parametrize("pol, needles", [
    # A PUBLIC collection refuses any finding as mislabelled unless allow_redaction_on_public.
    ({"credentials_in_text": "redact"}, ['credentials_in_text = "redact"', "allow_redaction_on_public = true"]),
    ({"redact_pii": False}, ["redact_pii = false", "allow_redaction_on_public = true", "remove redact_pii"]),
    # PUBLIC reads pass through, and a PUBLIC collection has no owner.
    ({"text_field": "text", "keep_payload_text_in_boundary": True},
     ["keep_payload_text_in_boundary = true", "PUBLIC collection has none"]),
])
def test_a_key_that_could_never_act_on_a_public_collection_is_refused(pol, needles):
    _refused({"collections": {"kb": {"class": "PUBLIC", **pol}}}, "collections.kb", "would be ignored", *needles)


@pytest.mark.parametrize("cls, diversity", [("PII", {"window_s": 3600}),
                                            ("PROPRIETARY", {"window_s": 3600, "enabled": False})])
def test_a_budget_window_without_a_budget_is_refused(cls, diversity):
    _refused({"collections": {"kb": {"class": cls, "owner": "hr", "diversity": diversity}}},
             "collections.kb.diversity", "window_s = 3600.0", "neither is set", "remove window_s")


@pytest.mark.parametrize("data, needles", [
    ({"audit_fsync": True}, ["audit_fsync = true", 'set audit_log = "PATH"', "remove audit_fsync"]),
    ({"audit_trusted_keys": [_KEY]}, ["audit_trusted_keys", 'set audit_log = "PATH"', "remove audit_trusted_keys"]),
])
def test_an_audit_key_without_an_audit_log_is_refused(data, needles):
    # AuditLog(None, ...) writes no file: nothing to fsync, no checkpoint to check on start.
    _refused(data, "would be ignored", *needles)


def test_an_audit_key_without_an_audit_log_is_refused_in_a_policy_file(tmp_path):
    policy = tmp_path / "p.toml"
    policy.write_text("audit_fsync = true\n")
    with pytest.raises(ConfigError, match="audit_fsync = true fsyncs the audit log file"):
        load_policy(policy)
    policy.write_text('audit_fsync = true\naudit_log = "audit.jsonl"\n')
    assert load_policy(policy).audit_fsync is True


def test_the_neighbours_of_each_refused_combination_still_load_and_their_dumps_reload():
    # Each refusal looks at values, not at which keys were written: a dump writes every key.
    cfg = config_from_dict({
        "audit_log": "/tmp/a.jsonl", "audit_fsync": True, "audit_trusted_keys": [_KEY], "boundaries": _HR,
        "collections": {
            "q": {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
                  "noise_queries": True},
            "q2": {"class": "PII", "owner": "hr", "noise_queries": True},  # the owner's queries are noised
            "f": {"class": "PII", "owner": "hr", "query": {"filter_pii": "owner"}},
            "k": {"class": "PII", "owner": "hr", "raw_in_boundary": True, "text_field": "text",
                  "keep_payload_text_in_boundary": True},
            "a": {"class": "PII", "owner": "hr", "payload_fields": "all"},
            "a2": {"class": "PII", "owner": "hr", "payload_fields": "credentials", "redact_pii": False},
            "w": {"class": "PII", "owner": "hr", "diversity": {"window_s": 3600, "max_source_coverage": 0.2}},
            "w2": {"class": "PROPRIETARY", "owner": "hr", "diversity": {"window_s": 3600, "max_vectors": 10}},
            "w3": {"class": "PII", "owner": "hr", "diversity": {"window_s": 86400}},  # the default, written out
            "p": {"class": "PUBLIC", "credentials_in_text": "redact", "allow_redaction_on_public": True},
            "p2": {"class": "PUBLIC", "redact_pii": False, "allow_redaction_on_public": True},  # PII kept
        }})
    _reloads(cfg)


@pytest.mark.parametrize("data", [
    {"collections": {"kb": {"class": "PUBLIC", "text_field": "text"}}},
    {"default": {"class": "PUBLIC"}},
])
def test_a_policy_with_a_public_collection_reloads_from_its_dumps(data):
    # A dump writes every key, owner, readers, noise, query ... among them, and the loader refuses
    # those on a PUBLIC collection when written: such a policy's dump did not load again.
    _reloads(config_from_dict(data))


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("op", ["upsert", "set_payload"])
def test_keep_payload_text_keeps_the_owners_pii_with_or_without_raw_in_boundary(tmp_path, raw, op):
    # As its name and docstring say: the owner boundary's writes keep PII in the text field.
    # Before, writes passed in_boundary=raw_allowed, so without raw_in_boundary the owner's text
    # was redacted too and the key did nothing. A writer of another boundary is still redacted.
    from guardkit import create, make_kit, models
    from qdrant_guard import QdrantClient

    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "text_field": "text", "keep_payload_text_in_boundary": True,
           "raw_in_boundary": raw, "intent": {"enabled": False}}
    pol["writers"] = ["support"]
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "c")
    other = owner.with_principal(kit.principal("bob", "support"))
    for pid, writer in ((1, owner), (2, other)):
        writer.upsert("c", [models.PointStruct(id=pid, vector=[0.1] * 16, payload={"text": "no text"})])
        if op == "upsert":
            writer.upsert("c", [models.PointStruct(id=pid, vector=[0.1] * 16, payload={"text": "SSN 123-45-6789"})])
        else:
            writer.set_payload("c", payload={"text": "SSN 123-45-6789"}, points=[pid])
    stored = {p.id: p.payload["text"] for p in owner.retrieve("c", [1, 2])}
    assert stored == {1: "SSN 123-45-6789", 2: "SSN [SSN]"}
