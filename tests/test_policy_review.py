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
