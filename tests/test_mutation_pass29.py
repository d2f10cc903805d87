"""Mutation pass 29: review 51's key-text test (``keys.looks_like_key_text``), its survivors, and
a private key it still echoed when pasted with a space, a "\\r" or quotes around it; and the store's
absolute path, which dropped "link/.." by its letters and so opened a file it had not made.

docs/security-testing.md, "Mutation pass 29". Real key files, policies and clients; no mocks.
"""
from __future__ import annotations

import os
import sqlite3
import stat

import pytest
from groupkit import give_shared_group
from guardkit import make_kit

from qdrant_guard import Principal, QdrantClient, keys
from qdrant_guard.budget_stores import BudgetStoreError, SqliteBudgetStore
from qdrant_guard.errors import ConfigError
from qdrant_guard.keys import KeyStoreError
from qdrant_guard.policy import load_policy


def _private_key_texts() -> tuple[str, str]:
    sk, _ = keys.generate_keypair()
    pem = keys.private_key_to_pem(sk).decode()
    return pem, "".join(pem.strip().splitlines()[1:-1])


def _start_error(kit, specs: list[str]) -> str:
    cfg = kit.config({}, audit_trusted_keys=specs)
    with pytest.raises((ConfigError, KeyStoreError)) as exc:
        QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    return str(exc.value)


_EDGES = [" {}", "{} ", "{}\r", "\t{}", '"{}"', "'{}'"]


@pytest.mark.parametrize("edge", _EDGES, ids=["lead-space", "trail-space", "cr", "tab", "dquotes", "squotes"])
def test_a_key_body_with_spaces_or_quotes_around_it_is_not_echoed(tmp_path, edge):
    # A one-line private key body copied with a space or "\r" around it, or with the quotes an env
    # file keeps, was no "body" (a space or quote is not base64), so its load said "cannot read key
    # file '<the private key>'" and missing_key_files listed it whole.
    kit = make_kit(tmp_path)
    _, body = _private_key_texts()
    pasted = edge.format(body)
    assert keys.looks_like_key_text(pasted)
    with pytest.raises(KeyStoreError, match="look like base64 key material") as exc:
        keys.load_public_key(pasted)
    assert body[8:40] not in str(exc.value)
    message = _start_error(kit, [pasted, str(tmp_path / "a.pub"), str(tmp_path / "b.pub")])
    assert body[8:40] not in message
    assert "2 key files the policy names do not exist" in message


@pytest.mark.parametrize("edge", [" {}", "{} ", "'{}'"], ids=["lead-space", "trail-space", "squotes"])
def test_a_key_body_with_spaces_around_it_in_a_policy_file_is_not_echoed(tmp_path, edge):
    # The policy joins its directory to the relative "path": "<dir>/ MC4C...", whose part after
    # the "/" was no body either.
    kit = make_kit(tmp_path)
    _, body = _private_key_texts()
    conf = tmp_path / "qg.conf.d"
    conf.mkdir()
    policy = conf / "policy.toml"
    policy.write_text(
        f'signing_key = "{kit.guard_key_path}"\naudit_log = "audit.jsonl"\n'
        f'[boundaries.hr]\nauthority_keys = ["{edge.format(body)}"]\n')
    policy.chmod(0o600)
    with pytest.raises((ConfigError, KeyStoreError)) as exc:
        QdrantClient(":memory:", guard=load_policy(policy), principal=kit.principal("alice", "hr"))
    assert body[8:40] not in str(exc.value)
    assert "look like base64 key material" in str(exc.value)


def test_key_text_with_armour_or_newlines_alone_is_not_listed(tmp_path):
    # Either sign alone is key text: a PEM whose newlines became spaces (an env var) has armour and
    # no newline; a body wrapped without armour has newlines and no armour. Neither is base64 whole.
    kit = make_kit(tmp_path)
    pem, body = _private_key_texts()
    one_line_pem = " ".join(pem.split())
    wrapped = "\n".join(body[i:i + 20] for i in range(0, len(body), 20))
    for secret in (one_line_pem, wrapped):
        assert keys.looks_like_key_text(secret)
        message = _start_error(kit, [secret, str(tmp_path / "a.pub"), str(tmp_path / "b.pub")])
        assert body[8:40] not in message and body[20:40] not in message
        assert "2 key files the policy names do not exist" in message


def test_a_missing_key_path_with_a_dot_or_space_before_a_long_name_is_named(tmp_path, monkeypatch):
    # Only a body whole or after a "/" is key text: a name with a dot or a space in it is a path,
    # and the operator needs it named to fix it, however long and mixed the rest of it is.
    monkeypatch.chdir(tmp_path)
    kit = make_kit(tmp_path)
    tail = "Ed25519AuditKeyForTenantAlphaProduction2025"
    paths = ["." + tail, "alpha " + tail, str(tmp_path / ("alpha " + tail))]
    for p in paths:
        assert not keys.looks_like_key_text(p)
    message = _start_error(kit, paths)
    assert "3 key files the policy names do not exist" in message
    for p in paths:
        assert f"  {p} (audit_trusted_keys)" in message


def test_a_store_path_through_a_symlink_and_dotdot_opens_the_file_it_made(tmp_path, monkeypatch):
    # Review 51 made each connection open os.path.abspath(path), which drops "link/.." by its
    # letters; the kernel (and so the 600 creation and the realpath check) goes up from where the
    # link points. The store made other/budget.db 600 and then opened work/budget.db, created by
    # SQLite 644 (its -wal and -shm too) and never checked.
    work, sub = tmp_path / "work", tmp_path / "other" / "sub"
    work.mkdir()
    sub.mkdir(parents=True)
    (work / "link").symlink_to(sub)
    monkeypatch.chdir(work)
    old = os.umask(0o022)
    try:
        store = SqliteBudgetStore("link/../budget.db")
        try:
            assert store.admit("bob", ["p1"], cap=1, window_s=3600.0, now=10.0)[0] == ["p1"]
        finally:
            store.close()
    finally:
        os.umask(old)
    assert sorted(p.name for p in work.iterdir()) == ["link"]
    made = tmp_path / "other" / "budget.db"
    assert stat.S_IMODE(made.stat().st_mode) == 0o600
    with sqlite3.connect(made) as c:  # the admission is in the file the store made
        assert c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0


def test_a_store_path_through_a_symlink_and_dotdot_is_checked_where_it_lands(tmp_path, monkeypatch):
    # The check took os.path.abspath(path) too, and its realpath: both the lexical work/budget.db.
    # The database is other/budget.db, in a directory every user may write: unchecked, accepted.
    work, other = tmp_path / "work", tmp_path / "other"
    work.mkdir()
    (other / "sub").mkdir(parents=True)
    other.chmod(0o777)
    (work / "link").symlink_to(other / "sub")
    monkeypatch.chdir(work)
    with pytest.raises(BudgetStoreError, match="which every user may create files in") as exc:
        SqliteBudgetStore("link/../budget.db")
    assert f"'{work / 'link' / '..'}'" in str(exc.value)  # the directory os.stat found mode 777
    assert not (other / "budget.db").exists()


def test_a_name_holding_the_token_prefix_without_its_dot_is_a_name(tmp_path):
    # Only "qgc1." marks a token: an agent, boundary or policy name that merely holds "qgc1" (a
    # team or a migration named so) is a name, not refused as a pasted credential.
    kit = make_kit(tmp_path)
    p = Principal("qgc1-migrator", "qgc1-ops")
    assert (p.agent_id, p.boundary) == ("qgc1-migrator", "qgc1-ops")
    pub = kit.authority_pub["hr"]
    pol = {"class": "PII", "owner": "qgc1-ops", "readers": ["qgc1-ops"], "writers": ["qgc1-ops"]}
    cfg = kit.config({"docs": pol}, boundaries={"hr": {"authority_keys": [pub]},
                                               "qgc1-ops": {"authority_keys": [pub]}})
    assert cfg.collections["docs"].owner == "qgc1-ops"


def test_a_store_file_others_may_write_is_named_as_given(tmp_path, monkeypatch):
    # Messages show the store path as the caller gave it ("./sub/budget.db"), not as joined to
    # the working directory for the checks.
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "sub" / "budget.db"
    db.touch()
    db.chmod(0o664)
    give_shared_group(db)  # a group only this uid and root are in may write it
    with pytest.raises(BudgetStoreError) as exc:
        SqliteBudgetStore("./sub/budget.db")
    assert "budget store file './sub/budget.db' is writable by other users" in str(exc.value)
    assert "`chmod g-w ./sub/budget.db`" in str(exc.value)
