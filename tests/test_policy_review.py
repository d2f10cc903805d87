"""Policy values that validate but would silently weaken protection must fail loudly at load."""
from __future__ import annotations

import pytest

from guardkit import make_kit
from qdrant_guard import ConfigError, keys
from qdrant_guard.boundary import verify_credential


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def test_revoking_an_authority_by_its_public_key_string_is_refused_not_ignored(kit):
    # The public key string is what [boundaries.*].authority_keys holds; revoked_keys matches key ids
    # (``ed25519:<hex>``). Accepted as is, the entry would revoke nothing.
    pub = kit.authority_pub["support"]
    kid = keys.key_id(keys.public_key_from_str(pub))
    with pytest.raises(ConfigError) as ei:
        kit.config({"c": {"owner": "hr", "readers": ["support"]}}, receipts={"revoked_keys": [pub]})
    msg = str(ei.value)
    assert "test-policy" in msg and "receipts.revoked_keys" in msg and kid in msg, msg
    # The key id form is accepted and does revoke the authority.
    cfg = kit.config({"c": {"owner": "hr", "readers": ["support"]}}, receipts={"revoked_keys": [kid]})
    assert cfg.receipts.revoked_keys == (kid,)


@pytest.mark.parametrize("bad", ["abc", "ed25519:XYZ", "ed25519:" + "0" * 31])
def test_revoked_keys_that_can_never_match_a_key_id_are_refused(kit, bad):
    with pytest.raises(ConfigError, match=r"receipts\.revoked_keys"):
        kit.config({}, receipts={"revoked_keys": [bad]})


def test_revoking_a_credential_by_its_whole_token_is_refused_not_ignored(kit):
    token = kit.principal("bob", "support").credential
    jti = verify_credential(token, authorities={"support": keys.public_key_from_str(kit.authority_pub["support"])}).jti
    boundaries = {b: {"authority_keys": [p]} for b, p in kit.authority_pub.items()}
    boundaries["support"]["revoked_credentials"] = [token]
    with pytest.raises(ConfigError) as ei:
        kit.config({}, boundaries=boundaries)
    msg = str(ei.value)
    assert "boundaries.support.revoked_credentials" in msg and jti in msg, msg
    assert token not in msg  # a bearer token is never echoed into logs
    boundaries["support"]["revoked_credentials"] = [jti]
    assert kit.config({}, boundaries=boundaries).boundaries["support"].revoked_credentials == (jti,)


def test_a_default_section_keeps_readers_star_unless_it_sets_readers(tmp_path):
    # docs/policy.md: "The [default] section ... takes the collection keys; its readers default is ["*"]".
    from qdrant_guard import load_policy

    p = tmp_path / "policy.toml"
    p.write_text('[default]\nclass = "PROPRIETARY"\n')
    pol = load_policy(p).policy_for("unlisted_one")
    assert pol.sensitivity.value == "PROPRIETARY"
    assert pol.readers == ("*",)
    p.write_text('[default]\nreaders = []\n')
    assert load_policy(p).policy_for("unlisted_one").readers == ()


@pytest.mark.parametrize("spec", ["bultin", "Builtin", "LLM", "mymodule.Classifier", "mymodule:", ":attr", ""])
def test_an_intent_classifier_spec_of_no_accepted_form_is_refused_at_load(kit, spec):
    # Accepted, a typo fails at the first query: refused with fail_closed = true, and with
    # fail_closed = false intent classification silently never runs.
    with pytest.raises(ConfigError) as ei:
        kit.config({"c": {"owner": "hr", "intent": {"classifier": spec, "fail_closed": False}}})
    msg = str(ei.value)
    assert "collections.c.intent.classifier" in msg and "'builtin', 'llm' or 'module:attr'" in msg, msg


def test_an_intent_classifier_that_cannot_be_loaded_refuses_even_when_configured_open(kit):
    # fail_closed = false is for a classifier that fails at run time (a timeout), not for a policy
    # naming a classifier that does not exist: that would switch the layer off without a word.
    refusal = _intent_refusal(kit, {"classifier": "no_such_module_qg:Clf", "fail_closed": False})
    assert refusal.verdict == "FAIL_CLOSED"
    assert "no_such_module_qg:Clf" in refusal.directive


def _intent_refusal(kit, intent):
    """The refusal of a reader's query on a collection with intent policy ``intent``."""
    import extraction_scenario as sc
    from qdrant_guard import GuardRefusal, QdrantClient

    cfg = kit.config({sc.COLLECTION: {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"],
                                      "raw_in_boundary": True, "text_field": None, "intent": intent}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    sc.build_collection(owner)
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points(sc.COLLECTION, query=sc.embed("x"), query_text="what is the leave policy?", limit=5)
    return ei.value


class ShoutingClassifier:
    """A user classifier outside the contract: upper-case labels (here: a blocked label, shouted)."""

    name = "shouting"

    def classify(self, text, *, embedding=None):
        from qdrant_guard.intent import IntentResult
        return IntentResult(label="ADVERSARIAL", confidence=0.99, reasoning="caps", classifier=self.name)


class NoneClassifier:
    name = "none"

    def classify(self, text, *, embedding=None):
        return None


@pytest.mark.parametrize("clf", ["ShoutingClassifier", "NoneClassifier"])
def test_a_classifier_result_outside_the_contract_is_a_classifier_failure(kit, clf):
    # A label outside INTENT_LABELS (wrong case, a made-up name) is never in `block`, so it would
    # pass as if benign; the pipeline treats an invalid result like a failing classifier.
    assert _intent_refusal(kit, {"classifier": f"test_policy_review:{clf}"}).verdict == "FAIL_CLOSED"


def test_one_authority_key_in_two_boundaries_is_refused(kit):
    # With the key in both, the hr authority could issue credentials for support (and back): the
    # boundaries would no longer be separated by their keys. Usually a copy-paste slip.
    from qdrant_guard import QdrantClient
    from qdrant_guard.boundary import issue_credential
    from qdrant_guard.policy import config_from_dict

    cfg = config_from_dict({
        "signing_key": str(kit.guard_key_path),
        "boundaries": {"hr": {"authority_keys": [kit.authority_pub["hr"]]},
                       "support": {"authority_keys": [kit.authority_pub["support"], kit.authority_pub["hr"]]}},
        "collections": {"c": {"owner": "hr", "readers": ["support"]}}}, source="shared.toml")
    forged = issue_credential(kit.authority["hr"], agent_id="mallory", boundary="support")
    with pytest.raises(ConfigError) as ei:
        QdrantClient(":memory:", guard=cfg, principal=forged)
    msg = str(ei.value)
    assert "shared.toml" in msg and "boundaries.hr" in msg and "boundaries.support" in msg, msg
    assert keys.key_id(keys.public_key_from_str(kit.authority_pub["hr"])) in msg


def test_relative_utility_record_of_the_default_section_is_resolved_against_the_policy_file(tmp_path, monkeypatch):
    from qdrant_guard import load_policy

    d = tmp_path / "conf"
    d.mkdir()
    (d / "policy.toml").write_text('[default.utility]\nrecord = "records/u.json"\n'
                                   '[collections.c.utility]\nrecord = "records/c.json"\n')
    monkeypatch.chdir(tmp_path)
    cfg = load_policy("conf/policy.toml")
    assert cfg.policy_for("c").utility.record == str(d.resolve() / "records/c.json")
    assert cfg.policy_for("unlisted").utility.record == str(d.resolve() / "records/u.json")


def test_relative_sqlite_budget_store_is_resolved_against_the_policy_file(tmp_path, monkeypatch):
    # docs/policy.example.toml writes budget_store = "sqlite:///budgets.db" next to relative key and
    # audit paths. Resolved against the working directory, a process started elsewhere would count
    # in a fresh, empty budget database: every extraction budget silently reset.
    from qdrant_guard import load_policy
    from qdrant_guard.budget import SqliteBudgetStore, make_store

    d = tmp_path / "conf"
    d.mkdir()
    (d / "policy.toml").write_text('budget_store = "sqlite:///budgets.db"\n')
    monkeypatch.chdir(tmp_path)
    cfg = load_policy("conf/policy.toml")
    assert cfg.budget_store == "sqlite:///" + str(d.resolve() / "budgets.db")
    assert isinstance(make_store(cfg.budget_store), SqliteBudgetStore)
    (d / "policy.toml").write_text(f'budget_store = "sqlite:///{tmp_path}/abs.db"\n')
    assert load_policy(d / "policy.toml").budget_store == f"sqlite:///{tmp_path}/abs.db"


@pytest.mark.parametrize("extra,key", [
    ({"owner": "hr"}, "owner"),
    ({"readers": ["support"]}, "readers"),
    ({"writers": ["support"]}, "writers"),
    ({"noise": {"epsilon": 0.5}}, "noise"),
    ({"diversity": {"max_source_coverage": 0.25}}, "diversity"),
    ({"intent": {"enabled": True}}, "intent"),
])
def test_public_collection_with_protection_keys_is_refused(kit, extra, key):
    # PUBLIC is pass-through: anyone, even without a credential, reads and writes it, and no noise,
    # query check, intent check or budget runs. Settings that say otherwise would be ignored.
    with pytest.raises(ConfigError) as ei:
        kit.config({"docs": {"class": "PUBLIC", **extra}})
    msg = str(ei.value)
    assert "collections.docs" in msg and key in msg and "PUBLIC" in msg, msg
    # What the refusal prevents: on PUBLIC, owner/readers/writers are not enforced at all.
    from qdrant_guard.policy import CollectionPolicy

    ignored = CollectionPolicy(**{"class": "PUBLIC", "owner": "hr", "readers": ["support"]})
    assert ignored.may_read(None) and ignored.may_write(None)


def test_public_collection_keeps_the_keys_it_uses(kit):
    cfg = kit.config({"pub": {"class": "PUBLIC", "text_field": "text", "allow_redaction_on_public": True,
                              "source_field": "src"}},
                     default={"class": "PUBLIC"})
    assert cfg.policy_for("pub").is_public and cfg.policy_for("other").is_public


def test_an_infinite_clip_norm_is_refused_at_load_not_at_the_first_write(kit):
    # The noise kernel needs a finite clip_norm; accepted here, every noised write failed later.
    with pytest.raises(ConfigError) as ei:
        kit.config({"c": {"owner": "hr", "noise": {"clip_norm": float("inf")}}})
    assert "collections.c.noise.clip_norm = inf" in str(ei.value) and "finite" in str(ei.value)
    assert kit.config({"c": {"owner": "hr", "noise": {"clip_norm": None}}}).collections["c"].noise.clip_norm is None


@pytest.mark.parametrize("spec", ["sqlite://budgets.db", "sqlite:///", "redis:/localhost", "mem", ""])
def test_an_unknown_budget_store_spec_is_refused_at_load(kit, spec):
    with pytest.raises(ConfigError, match="budget_store"):
        kit.config({}, budget_store=spec)


@pytest.mark.parametrize("spec", ["memory", "sqlite:///b.db", "sqlite:////tmp/b.db", "redis://localhost:6379/0",
                                  "rediss://h:1/0", "unix:///tmp/r.sock"])
def test_every_documented_budget_store_spec_loads(kit, spec):
    assert kit.config({}, budget_store=spec).budget_store == spec


def test_restricted_sources_without_a_coverage_budget_is_refused(kit):
    with pytest.raises(ConfigError, match="max_source_coverage"):
        kit.config({"c": {"owner": "hr", "diversity": {"restricted_sources": ["memo"]}}})
    cfg = kit.config({"c": {"owner": "hr", "diversity": {"restricted_sources": ["memo"], "max_source_coverage": 0.25}}})
    assert cfg.collections["c"].diversity.restricted_sources == ("memo",)


@pytest.mark.parametrize("cls", ["PII", "CREDENTIAL"])
def test_a_vector_budget_on_a_class_it_does_not_apply_to_is_refused(kit, cls):
    with pytest.raises(ConfigError, match="max_vectors"):
        kit.config({"c": {"class": cls, "owner": "hr", "diversity": {"max_vectors": 3}}})
    cfg = kit.config({"c": {"class": "PROPRIETARY", "owner": "hr", "diversity": {"max_vectors": 3}}})
    assert cfg.collections["c"].diversity.max_vectors == 3
