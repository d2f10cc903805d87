"""Policy knob audit: each knob's documented behaviour, at its edges, where no other test pins it,
and bad values refused at load naming the key, the value and the fix.

Real local-mode Qdrant, real keys; the intent classifier is loaded by ``module:attr`` from this file.
"""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import Recorder, audit_records, count, create, hr_policy, make_kit, models, record_sent, unit
from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.errors import ConfigError
from qdrant_guard.intent import IntentResult
from qdrant_guard.policy import config_from_dict, load_policy
import test_noise_review_fixes as _calibrated


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _refused(data, *needles):
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data, source="p.toml")
    msg = str(ei.value)
    for needle in needles:
        assert needle in msg, msg
    return msg


# -- bad values are refused at load -------------------------------------------------------------

def test_an_infinite_window_is_refused_when_the_policy_loads(kit):
    # It was accepted, and then every budgeted read raised a bare ValueError from the budget store.
    policy = kit.tmp / "p.toml"
    policy.write_text("[collections.c.diversity]\nmax_source_coverage = 0.2\nwindow_s = inf\n")
    with pytest.raises(ConfigError) as ei:
        load_policy(policy)
    assert "collections.c.diversity.window_s = inf" in str(ei.value)
    assert "finite number" in str(ei.value)


@pytest.mark.parametrize("section, key", [
    ("noise", "epsilon"), ("noise", "delta"), ("noise", "radius"), ("query", "max_repetition"),
    ("diversity", "max_source_fraction"), ("diversity", "overfetch_factor"), ("intent", "min_confidence"),
    ("utility", "max_recall_drop"),
])
def test_nan_is_refused_as_not_finite_not_as_out_of_range(section, key):
    # nan failed the upper bound, so the message said e.g. "should be less than or equal to 1000".
    _refused({"collections": {"c": {section: {key: float("nan")}}}}, f"collections.c.{section}.{key} = nan",
             "expected a finite number")


def test_infinite_receipt_age_is_refused():
    _refused({"receipts": {"max_age_s": float("inf")}}, "receipts.max_age_s = inf", "leave the key out")


@pytest.mark.parametrize("value", ["2", float("inf"), True])
def test_an_epsilon_ceiling_must_be_a_finite_number(value):
    # A table's values escaped the per-key type check: "2" was read as 2.0, inf as no ceiling at
    # all for the receipts of other writers (whose epsilon the noise key's 1000 bound does not cap).
    _refused({"epsilon_ceiling": {"PII": value}}, "epsilon_ceiling", "ceiling for PII must be a finite number",
             repr(value))


@pytest.mark.parametrize("data, where", [
    ({"signing_key": ""}, "signing_key = ''"),
    ({"audit_log": ""}, "audit_log = ''"),
    ({"audit_trusted_keys": [""]}, "audit_trusted_keys = ['']"),
    ({"receipts": {"trusted_keys": [""]}}, "receipts.trusted_keys = ['']"),
    ({"boundaries": {"hr": {"authority_keys": [""]}}}, "boundaries.hr.authority_keys = ['']"),
    ({"collections": {"c": {"utility": {"record": ""}}}}, "collections.c.utility.record = ''"),
    ({"collections": {"c": {"owner": ""}}}, "collections.c.owner = ''"),
    ({"collections": {"c": {"readers": ["support", ""]}}}, "collections.c.readers = ['support', '']"),
    ({"collections": {"c": {"writers": [""]}}}, "collections.c.writers = ['']"),
    ({"collections": {"c": {"diversity": {"max_source_coverage": 0.2, "restricted_sources": [""]}}}},
     "collections.c.diversity.restricted_sources = ['']"),
])
def test_an_empty_string_is_refused_where_it_would_name_nothing(data, where):
    # A relative path "" was resolved to the policy's own directory (then "Is a directory" when the
    # client was built, or, for a utility record, at the first write); an empty boundary name was
    # skipped by the check that boundary names exist, and a source "" counts as no source.
    _refused(data, where)


def test_empty_path_in_a_policy_file_is_refused_at_load_not_at_first_write(kit):
    policy = kit.tmp / "p.toml"
    policy.write_text('[collections.c.utility]\nrecord = ""\n')
    with pytest.raises(ConfigError, match="empty path names no file"):
        load_policy(policy)


# -- documented behaviour at the edges ----------------------------------------------------------

@pytest.mark.parametrize("factor, limit, fetched", [(2.5, 4, 10), (1.0, 4, 4)])
def test_overfetch_factor_sets_how_many_candidates_are_fetched(kit, monkeypatch, factor, limit, fetched):
    owner = QdrantClient(":memory:", guard=kit.config({"c": hr_policy({"overfetch_factor": factor})}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "c")
    rng = np.random.default_rng(0)
    owner.upsert("c", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i}"}) for i in range(20)])
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    got = owner.query_points("c", query=unit(rng), limit=limit)
    assert [kw["limit"] for _, kw in sent] == [fetched]
    assert len(got.points) == limit


utility_setup = _calibrated.utility_setup  # the calibrated record fixture (module scope)

QUERY = "what is the status of the claim for jane.doe@example.com"


@pytest.mark.parametrize("redact, redact_pii, seen", [
    (True, True, "what is the status of the claim for [EMAIL]"),
    (False, True, QUERY),
    (True, False, QUERY),  # redact_pii covers query text too
])
def test_redact_query_text_decides_what_the_embedder_sees(kit, redact, redact_pii, seen):
    pol = {**hr_policy({}), "generalize_identifiers": False, "redact_pii": redact_pii,
           "query": {"redact_query_text": redact}}
    emb = Recorder()
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"), embedder=emb)
    create(owner, "c")
    owner.query_points("c", query=models.Document(text=QUERY, model="m"), limit=3)
    assert emb.seen == [seen]


def test_redact_query_text_false_keeps_pii_but_never_a_credential(kit):
    # Credentials are never embedded: redact_query_text = false governs PII only (before, it let
    # the key below reach the embedder and the intent classifier).
    key = 'deploy with aws_access_key_id = "AKIAZ7QP3LMNB4XKDT2Q"'
    pol = {**hr_policy({}), "generalize_identifiers": False}
    for redact in (True, False):
        emb = Recorder()
        cfg = kit.config({"c": {**pol, "query": {"redact_query_text": redact}}})
        owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=emb)
        create(owner, "c")
        with pytest.raises(GuardRefusal) as ei:
            owner.query_points("c", query=models.Document(text=key, model="m"), limit=3)
        assert ei.value.verdict == "CREDENTIAL_IN_TEXT" and emb.seen == []
    emb = Recorder()
    cfg = kit.config({"c": {**pol, "credentials_in_text": "redact", "query": {"redact_query_text": False}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=emb)
    create(owner, "c")
    owner.query_points("c", query=models.Document(text=key + " for bob@example.com", model="m"), limit=3)
    assert "AKIA" not in emb.seen[0] and "bob@example.com" in emb.seen[0]


class HalfSure:
    """An intent classifier that calls everything adversarial at confidence 0.5."""

    name = "half-sure"

    def classify(self, text, *, embedding=None):
        return IntentResult("adversarial", 0.5, "r", self.name)


def _query_refused_or_not(client, ask, verdict):
    """Query collection "c" with ``ask``: refused with ``verdict``, or answered when it is None."""
    if verdict is None:
        client.query_points("c", **ask)
        return
    with pytest.raises(GuardRefusal) as ei:
        client.query_points("c", **ask)
    assert ei.value.verdict == verdict


@pytest.mark.parametrize("min_confidence, blocked", [(0.6, False), (0.5, True), (0.0, True), (1.0, False)])
def test_min_confidence_is_the_lowest_confidence_at_which_a_blocked_label_is_enforced(kit, min_confidence, blocked):
    pol = {"class": "PII", "owner": "hr",
           "intent": {"classifier": "test_knob_audit:HalfSure", "min_confidence": min_confidence}}
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "c")
    ask = dict(query=unit(np.random.default_rng(0)), query_text="list every record", limit=3)
    _query_refused_or_not(owner, ask, "INTENT_BLOCKED" if blocked else None)
    if not blocked:
        last = audit_records(kit)[-1]
        assert last["verdict"] == "ALLOW" and last["details"]["intent"]["below_min_confidence"] is True


def test_max_vectors_zero_returns_points_without_their_vectors(kit):
    pol = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
           "diversity": {"max_vectors": 0}}
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "c")
    rng = np.random.default_rng(0)
    owner.upsert("c", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "s"}) for i in range(3)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    got = bob.retrieve("c", [0, 1, 2], with_vectors=True)
    assert sorted(p.id for p in got) == [0, 1, 2]
    assert [p.vector for p in got] == [None, None, None]
    assert [p.vector for p in owner.retrieve("c", [0], with_vectors=True)] == [None]  # the owner too


@pytest.mark.parametrize("cap, refused", [(0.5, True), (1.0, False), (0.0, True)])
def test_max_repetition_one_is_no_cap_and_zero_refuses_any_repeat(kit, cap, refused):
    # TOML has no null: 1 is how a file turns the cap off (the ratio is never above 1).
    owner = QdrantClient(":memory:", guard=kit.config({"c": {**hr_policy({}), "query": {"max_repetition": cap}}}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "c")
    text = "payroll payroll payroll payroll report" if cap else "payroll report payroll"
    ask = dict(query=unit(np.random.default_rng(0)), query_text=text, limit=3)
    _query_refused_or_not(owner, ask, "QUERY_REJECTED" if refused else None)


def test_writers_empty_list_is_the_default_only_the_owner_writes(kit):
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": [], "intent": {"enabled": False}}
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "c")
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)))])
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"


def test_the_policy_reference_gives_each_number_its_range():
    # The bounds the loader enforces were in the code only: the reference gave epsilon as "number".
    from qdrant_guard.policy_doc import render

    text = render()
    assert "| `collections.NAME.noise.epsilon` | `number` | `1.0` | `> 0, <= 1000` |" in text
    assert "| `collections.NAME.diversity.overfetch_factor` | `number` | `3.0` | `>= 1, <= 50` |" in text
    assert "| `boundaries.NAME.authority_keys` | `list of strings` | `required` | `at least 1 item` |" in text
    assert "TOML's `inf` and `nan` are refused" in text


@pytest.mark.parametrize("max_drop, epsilon, refused", [(0.05, 0.1, True), (0.9, 0.1, False), (0.05, 0.5, False)])
def test_max_recall_drop_of_the_policy_not_the_records_threshold_decides(utility_setup, max_drop, epsilon, refused):
    # The record was calibrated at threshold 0.05: epsilon 0.1 fails it, 0.5 passes. The policy's
    # own limit is what a write is held to.
    kit, docs, paths, _, _ = utility_setup
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise": {"epsilon": epsilon},
                              "utility": {"record": str(paths[0.01][1]), "max_recall_drop": max_drop}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii", dim=_calibrated.UDIM)
    write = lambda: owner.upsert("pii", [models.PointStruct(id=1, vector=docs[1].tolist())])  # noqa: E731
    if refused:
        with pytest.raises(GuardRefusal) as ei:
            write()
        assert ei.value.verdict == "UTILITY_DEGRADED"
    else:
        write()
        assert count(owner, "pii") == 1


def test_the_class_key_has_one_spelling():
    # populate_by_name let a policy file say `sensitivity = "PUBLIC"`, a key no page documents.
    _refused({"collections": {"c": {"sensitivity": "PUBLIC"}}}, "unknown key 'collections.c.sensitivity'",
             "spelled 'class'")


def test_a_public_epsilon_ceiling_is_refused_as_ignored():
    # PUBLIC collections are never noised: the ceiling was accepted and applied to nothing.
    _refused({"epsilon_ceiling": {"PUBLIC": 1.0}}, "epsilon_ceiling", "would be ignored")


@pytest.mark.parametrize("run_cap, refused", [(None, False), (0.5, True)])
def test_max_ngram_run_is_off_unless_set(kit, run_cap, refused):
    query = {"max_repetition": 1.0, **({} if run_cap is None else {"max_ngram_run": run_cap})}
    owner = QdrantClient(":memory:", guard=kit.config({"c": {**hr_policy({}), "query": query}}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "c")
    ask = dict(query=unit(np.random.default_rng(0)), query_text="show me salary " * 4 + "report", limit=3)
    if refused:
        with pytest.raises(GuardRefusal) as ei:
            owner.query_points("c", **ask)
        assert [v["kind"] for v in ei.value.details["violations"]] == ["ngram_run"]
    else:
        owner.query_points("c", **ask)


@pytest.mark.parametrize("data, where", [
    ({"collections": {"c": {"owner": "*"}}}, "collections.c.owner = '*'"),
    ({"boundaries": {"*": {"authority_keys": ["ed25519:AAAA"]}}}, "boundaries"),
    ({"boundaries": {"": {"authority_keys": ["ed25519:AAAA"]}}}, "boundaries"),
])
def test_star_and_empty_are_not_boundary_names(data, where):
    # owner = "*" was accepted and matched no principal (the collection had no owner, silently); a
    # boundary named "" could hold no principal, one named "*" collided with the readers wildcard.
    _refused(data, where, "boundar")


def test_query_monitor_mode_covers_the_structural_checks_only(kit):
    pol = {**hr_policy({}), "query": {"mode": "monitor", "max_tokens": 3, "require_text": True}}
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "c")
    vec = unit(np.random.default_rng(0))
    owner.query_points("c", query=vec, query_text="one two three four five", limit=3)  # over max_tokens: logged
    assert audit_records(kit)[-1]["details"]["scan"]["would_reject"][0]["kind"] == "token_cap"
    with pytest.raises(GuardRefusal) as ei:
        owner.query_points("c", query=vec, limit=3)  # require_text is not relaxed by monitor
    assert ei.value.verdict == "TEXT_REQUIRED"


def test_diversity_disabled_lifts_the_budget_but_not_the_owner_only_write_rule(kit):
    div = {"enabled": False, "max_source_coverage": 0.2, "restricted_sources": ["payroll"],
           "max_source_fraction": 1.0, "min_unique_sources": 1}
    pol = {**hr_policy(div), "writers": ["support"]}
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "c")
    rng = np.random.default_rng(0)
    owner.upsert("c", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"}) for i in range(10)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert len(bob.query_points("c", query=unit(rng), limit=10).points) == 10  # a 20 % budget would give 2
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("c", [models.PointStruct(id=99, vector=unit(rng), payload={"source": "payroll"})])
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"


def test_an_authority_key_in_two_boundaries_is_refused_when_the_client_is_built(kit):
    shared = kit.authority_pub["hr"]
    cfg = kit.config({"c": {"class": "PII", "owner": "hr"}},
                     boundaries={"hr": {"authority_keys": [shared]}, "support": {"authority_keys": [shared]}})
    with pytest.raises(ConfigError, match="is in both boundaries.hr.authority_keys and boundaries.support"):
        QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))


@pytest.mark.parametrize("data, where", [
    ({"collections": {"c": {"diversity": {"window_s": -60}}}}, "collections.c.diversity.window_s = -60"),
    ({"collections": {"c": {"intent": {"timeout_s": -1.0}}}}, "collections.c.intent.timeout_s = -1.0"),
    ({"receipts": {"max_age_s": -3600}}, "receipts.max_age_s = -3600"),
])
def test_a_negative_duration_is_refused_naming_the_key_and_the_bound(data, where):
    _refused(data, where, "greater than 0")


@pytest.mark.parametrize("unlisted", ["public", "refuse"])
def test_a_default_section_is_refused_where_unlisted_would_ignore_it(unlisted):
    # policy_for reads [default] only under "strict": this CREDENTIAL default protected nothing.
    _refused({"unlisted": unlisted, "default": {"class": "CREDENTIAL", "owner": "hr"}}, "[default]",
             f"unlisted = '{unlisted}'", "would be ignored")


@pytest.mark.parametrize("pol, key", [
    ({"keep_payload_text_in_boundary": True}, "keep_payload_text_in_boundary"),
    ({"class": "PII", "allow_redaction_on_public": True}, "allow_redaction_on_public"),
])
def test_a_switch_that_could_never_act_is_refused(pol, key):
    # Accepted before, and ignored: the first keeps PII in a text_field the policy does not name,
    # the second acts on PUBLIC collections only.
    _refused({"collections": {"c": pol}}, key, "would be ignored")
