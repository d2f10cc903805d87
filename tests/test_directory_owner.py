"""Trust files and the budget store below a directory another user owns (2026-12-07, h-left11).

Review 51: /tmp/x owned by uid 65534, the budget store in /tmp/x/store owned by root, was
accepted; uid 65534 may rename ``store`` away (x is his) and put a directory of his own with his
own database in its place. The same holds for a key or policy file and the audit log. Like
OpenSSH's StrictModes, the guard now refuses a file when any directory on its path (up to /) is
owned by a uid that is neither the process's effective uid nor root; chowning it back is
accepted again.

Chowning to another uid needs root: these tests are skipped elsewhere. Real Ed25519 keys, real
SQLite, real local Qdrant; no mocks."""
from __future__ import annotations

import os
import sqlite3

import pytest
from guardkit import make_kit, run_cli

from qdrant_guard import QdrantClient, keys
from qdrant_guard.audit import AuditLog
from qdrant_guard.budget_stores import BudgetStoreError, SqliteBudgetStore
from qdrant_guard.dirmodes import Replaceable, replaceable_by_anyone
from qdrant_guard.errors import AuditError, ConfigError
from qdrant_guard.keys import KeyStoreError
from qdrant_guard.policy import load_policy
from qdrant_guard.receipts import ReceiptSigner

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="chown to another uid needs root")
OTHER = 65534  # nobody


def _theirs(tmp_path):
    """tmp_path/x owned by uid 65534 (mode 755), with x/sub owned by root: the file goes in sub."""
    x = tmp_path / "x"
    (x / "sub").mkdir(parents=True)
    x.chmod(0o755)
    os.chown(x, OTHER, -1)
    return x, x / "sub"


def _pub(d, name="k.pub"):
    _, pk = keys.generate_keypair()
    pub = d / name
    pub.write_text(keys.public_key_to_str(pk) + "\n")
    pub.chmod(0o644)
    return pk, pub


def test_the_walk_names_the_first_directory_another_user_owns(tmp_path):
    x, sub = _theirs(tmp_path)
    assert replaceable_by_anyone(sub / "f") == Replaceable(str(x), 0o755, OTHER)
    os.chown(x, 0, -1)
    assert replaceable_by_anyone(sub / "f") is None
    # A world-writable directory nearer the file is named first, as before.
    os.chown(x, OTHER, -1)
    sub.chmod(0o777)
    assert replaceable_by_anyone(sub / "f") == Replaceable(str(sub), 0o777, None)


def test_a_symlink_another_user_owns_in_a_sticky_directory_is_named(tmp_path):
    # In a sticky directory a link's owner may still replace his link: where it points is his.
    sticky = tmp_path / "shared"
    sticky.mkdir()
    sticky.chmod(0o1777)
    real = tmp_path / "real"
    real.mkdir()
    link = sticky / "keys"
    link.symlink_to(real, target_is_directory=True)
    os.lchown(link, OTHER, -1)
    assert replaceable_by_anyone(link / "k.pub") == Replaceable(str(link), 0o755, OTHER)
    os.lchown(link, 0, -1)
    assert replaceable_by_anyone(link / "k.pub") is None


def test_a_public_key_below_a_directory_another_user_owns_is_refused(tmp_path):
    x, sub = _theirs(tmp_path)
    pk, pub = _pub(sub)
    with pytest.raises(KeyStoreError) as err:
        keys.load_public_key(str(pub))
    assert str(err.value) == (
        f"public key file {str(pub)!r} is below directory {str(x)!r}, owned by uid {OTHER}, neither this process's "
        f"uid (0) nor root (mode 755): its owner can put a key of their own in its place; run `chown 0 {x}` (as "
        "root), or move the key to a directory the guard's uid owns, or give the key as its 'ed25519:...' text")
    os.chown(x, 0, -1)
    assert keys.load_public_key(str(pub)) == pk


def test_a_private_key_below_a_directory_another_user_owns_is_refused(tmp_path):
    kit = make_kit(tmp_path)
    x, sub = _theirs(tmp_path)
    key = sub / "guard.key"
    os.rename(kit.guard_key_path, key)
    with pytest.raises(KeyStoreError, match=f"private key file .* is below directory '{x}', owned by uid {OTHER}"):
        keys.load_private_key(str(key))
    os.chown(x, 0, -1)
    keys.load_private_key(str(key))


def test_a_client_does_not_start_on_an_authority_key_below_another_users_directory(tmp_path):
    kit = make_kit(tmp_path)
    x, sub = _theirs(tmp_path)
    _, pub = _pub(sub)
    os.chown(x, 0, -1)
    cfg = kit.config({"c": {"class": "PII"}}, boundaries={"hr": {"authority_keys": [str(pub)]}})
    QdrantClient(":memory:", guard=cfg).close()
    os.chown(x, OTHER, -1)
    with pytest.raises((ConfigError, KeyStoreError)) as err:
        QdrantClient(":memory:", guard=cfg)
    assert "boundaries.hr.authority_keys: " in str(err.value) and f"owned by uid {OTHER}" in str(err.value)
    assert f"chown 0 {x}" in str(err.value)


def test_a_policy_below_a_directory_another_user_owns_is_refused(tmp_path):
    kit = make_kit(tmp_path)
    x, sub = _theirs(tmp_path)
    policy = sub / "policy.toml"
    policy.write_text(f'signing_key = "{kit.guard_key_path}"\n[collections.pub]\nclass = "PUBLIC"\n')
    policy.chmod(0o644)
    with pytest.raises(ConfigError) as err:
        load_policy(policy)
    assert str(err.value) == (
        f"policy file {str(policy)!r} is below directory {str(x)!r}, owned by uid {OTHER}, neither this process's "
        f"uid (0) nor root (mode 755): its owner can put a policy of their own in its place; run `chown 0 {x}` (as "
        "root), or move the policy to a directory the guard's uid owns")
    os.chown(x, 0, -1)
    QdrantClient(":memory:", guard=str(policy)).close()


def test_the_review51_store_below_another_users_directory_is_refused(tmp_path):
    # Review 51's case: x is 65534's, store (root's) in it; he renames store away and puts his own.
    x, store = _theirs(tmp_path)
    db = store / "budget.db"
    with pytest.raises(BudgetStoreError) as err:
        SqliteBudgetStore(str(db))
    assert str(err.value).startswith(
        f"budget store {str(db)!r} is below directory {str(x)!r}, owned by uid {OTHER}, neither this process's uid "
        f"(0) nor root (mode 755): its owner can put a directory of their own on its path")
    assert f"run `chown 0 {x}` (as root)" in str(err.value)
    assert not db.exists()  # refused before anything was created
    os.chown(x, 0, -1)
    store_ok = SqliteBudgetStore(str(db))
    store_ok.close()
    sqlite3.connect(db).close()


def test_an_audit_log_in_or_below_a_directory_another_user_owns_is_refused(tmp_path):
    sk, _ = keys.generate_keypair()
    x, sub = _theirs(tmp_path)
    for log, where in ((x / "audit.jsonl", "in"), (sub / "audit.jsonl", "below")):
        with pytest.raises(AuditError) as err:
            AuditLog(log, signer=ReceiptSigner(sk), checkpoint_every=1)
        assert f"is {where} directory {str(x)!r}, owned by uid {OTHER}, neither the guard's uid (0)" in str(err.value)
        assert f"run `chown 0 {x}` (as root)" in str(err.value)
    os.chown(x, 0, -1)
    AuditLog(sub / "audit.jsonl", signer=ReceiptSigner(sk), checkpoint_every=1).close()


def test_a_cli_key_option_below_a_directory_another_user_owns_is_refused(tmp_path):
    sk, _ = keys.generate_keypair()
    log = tmp_path / "audit.jsonl"
    AuditLog(log, signer=ReceiptSigner(sk), checkpoint_every=1).close()
    x, sub = _theirs(tmp_path)
    pub = sub / "k.pub"
    pub.write_text(keys.public_key_to_str(sk.public_key()) + "\n")
    done = run_cli("audit", "verify", str(log), "--key", str(pub))
    assert done.returncode != 0 and f"owned by uid {OTHER}" in done.stderr and f"chown 0 {x}" in done.stderr
    os.chown(x, 0, -1)
    assert run_cli("audit", "verify", str(log), "--key", str(pub)).returncode == 0
