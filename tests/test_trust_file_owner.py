"""Trust files another user owns (2026-12-07, h-left10).

A key or policy file at mode 644 owned by another non-root user is his to rewrite: he owns it, so
he may chmod it and write a key or rule of his own. OpenSSH's StrictModes refuses such files. The
guard now refuses a key file (public or private: authority, trusted, retired, receipt and audit
keys, the CLI's key options) and a policy file owned by a uid that is neither the process's
effective uid nor root. (The audit log already had to be the process's own; the budget store is
tests/test_budget_store_access.py.)

Chowning a file to another uid needs root: those tests are skipped elsewhere. Real Ed25519 keys,
real local Qdrant; no mocks."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from guardkit import make_kit, run_cli

from qdrant_guard import QdrantClient, keys
from qdrant_guard.audit import AuditLog
from qdrant_guard.errors import ConfigError
from qdrant_guard.keys import KeyStoreError
from qdrant_guard.policy import load_policy
from qdrant_guard.receipts import ReceiptSigner

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="chown to another uid needs root")
OTHER = 65534  # nobody


def _pub(tmp_path, name="k.pub"):
    sk, pk = keys.generate_keypair()
    pub = tmp_path / name
    pub.write_text(keys.public_key_to_str(pk) + "\n")
    pub.chmod(0o644)
    return sk, pk, pub


def _owned_by_other(path):
    os.chown(path, OTHER, -1)
    return path


def test_a_public_key_file_another_user_owns_is_refused(tmp_path):
    _, pk, pub = _pub(tmp_path)
    assert keys.load_public_key(str(pub)) == pk
    _owned_by_other(pub)  # mode 644 still: but its owner may chmod and write it
    with pytest.raises(KeyStoreError) as err:
        keys.load_public_key(str(pub))
    assert str(err.value) == (
        f"public key file {str(pub)!r} is owned by uid {OTHER}, neither this process's uid (0) nor root (mode 644): "
        f"its owner can change its mode and write a key of their own into it; run `chown 0 {pub}` (as root) and "
        "retry, or give the key as its 'ed25519:...' text")
    os.chown(pub, 0, -1)
    assert keys.load_public_key(str(pub)) == pk


def test_a_private_key_file_another_user_owns_is_refused(tmp_path):
    kit = make_kit(tmp_path)
    keys.load_private_key(kit.guard_key_path)
    _owned_by_other(kit.guard_key_path)
    with pytest.raises(KeyStoreError, match=f"private key file .* is owned by uid {OTHER}, neither") as err:
        keys.load_private_key(kit.guard_key_path)
    assert f"chown 0 {kit.guard_key_path}" in str(err.value)


@pytest.mark.parametrize("where", ["boundaries.hr.authority_keys", "receipts.trusted_keys", "audit_trusted_keys",
                                   "receipts.retired_keys", "collections.c.receipt_keys", "signing_key"])
def test_a_client_does_not_start_on_a_trust_file_another_user_owns(tmp_path, where):
    # The owner of hr's authority .pub writes his own key into it and issues himself hr credentials;
    # the owner of the guard's key file puts his own key there and signs receipts the guard trusts.
    kit = make_kit(tmp_path)
    _, _, pub = _pub(tmp_path)
    extra = {"boundaries.hr.authority_keys": {"boundaries": {"hr": {"authority_keys": [str(pub)]}}},
             "receipts.trusted_keys": {"receipts": {"trusted_keys": [str(pub)]}},
             "audit_trusted_keys": {"audit_trusted_keys": [str(pub)]},
             "receipts.retired_keys": {"receipts": {"retired_keys": [str(pub)]}},
             "collections.c.receipt_keys": {},
             "signing_key": {}}[where]
    collections = {"c": {"class": "PII", **({"receipt_keys": [str(pub)]} if where.startswith("collections") else {})}}
    cfg = kit.config(collections, **extra)
    QdrantClient(":memory:", guard=cfg).close()
    _owned_by_other(kit.guard_key_path if where == "signing_key" else pub)
    with pytest.raises((ConfigError, KeyStoreError)) as err:
        QdrantClient(":memory:", guard=cfg)
    assert f"{where}: " in str(err.value) and f"is owned by uid {OTHER}" in str(err.value)


def test_a_policy_file_another_user_owns_is_refused(tmp_path):
    kit = make_kit(tmp_path)
    policy = tmp_path / "policy.toml"
    policy.write_text(f'signing_key = "{kit.guard_key_path}"\n[collections.pub]\nclass = "PUBLIC"\n')
    policy.chmod(0o644)
    QdrantClient(":memory:", guard=str(policy)).close()
    _owned_by_other(policy)
    with pytest.raises(ConfigError) as err:
        QdrantClient(":memory:", guard=str(policy))
    assert str(err.value) == (
        f"policy file {str(policy)!r} is owned by uid {OTHER}, neither this process's uid (0) nor root (mode 644): "
        f"its owner can change its mode and write every rule the guard enforces; run `chown 0 {policy}` (as root) "
        "and retry")
    with pytest.raises(ConfigError, match="owned by uid"):
        load_policy(policy)


def test_a_cli_key_option_naming_a_file_another_user_owns_is_refused(tmp_path):
    sk, _, pub = _pub(tmp_path)
    log = tmp_path / "audit.jsonl"
    AuditLog(log, signer=ReceiptSigner(sk), checkpoint_every=1).close()
    assert run_cli("audit", "verify", str(log), "--key", str(pub)).returncode == 0
    _owned_by_other(pub)
    done = run_cli("audit", "verify", str(log), "--key", str(pub))
    assert done.returncode != 0 and f"is owned by uid {OTHER}" in done.stderr and f"chown 0 {pub}" in done.stderr


def test_a_non_root_process_takes_its_own_and_roots_files_and_refuses_anothers(request):
    # A child forked from this process (the interpreter lives where uid 65534 may not exec it)
    # drops to uid 65534: a .pub root owns and one it owns load; one uid 65533 owns is refused.
    d = Path(tempfile.mkdtemp(prefix="qg-owner-"))  # pytest's tmp_path is mode 700: out of its reach
    d.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(d))
    for up in d.parents:
        if up.stat().st_mode & 0o001 == 0:
            pytest.skip(f"{up} is not searchable by other users")
    paths = []
    for name, uid in (("root.pub", 0), ("own.pub", OTHER), ("other.pub", OTHER - 1)):
        _, _, pub = _pub(d, name)
        os.chown(pub, uid, -1)
        paths.append(str(pub))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(OTHER)
            os.setuid(OTHER)
            out = []
            for p in paths:
                try:
                    keys.load_public_key(p)
                    out.append("ok")
                except KeyStoreError as exc:
                    out.append(f"refused {exc}")
            os.write(w, "\n".join(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        lines = fh.read().decode().splitlines()
    os.waitpid(pid, 0)
    assert lines[:2] == ["ok", "ok"], lines
    assert lines[2].startswith(f"refused public key file {paths[2]!r} is owned by uid {OTHER - 1}, "
                               f"neither this process's uid ({OTHER}) nor root"), lines
