"""Review 51: today's budget-store checks, friendlier errors and key-file listing, attacked.

Each test here but the two that pin the fix's premises (this SQLite reads file: names as URIs; a
'./file:...' path is a store) failed on the code before this review (docs/security-testing.md,
"Review 51"). Real SQLite files, real policies and credentials; no mocks.
"""
from __future__ import annotations

import os
import sqlite3

import pytest
from guardkit import make_kit

from qdrant_guard import Principal, QdrantClient, keys
from qdrant_guard.budget_stores import BudgetStoreError, SqliteBudgetStore
from qdrant_guard.errors import ConfigError
from qdrant_guard.keys import KeyStoreError
from qdrant_guard.policy import load_policy

def _uses_uris() -> bool:
    with sqlite3.connect(":memory:") as c:
        return any(r[0] == "USE_URI" for r in c.execute("PRAGMA compile_options"))


# ---------------------------------------------------------------- the budget store

@pytest.mark.parametrize("query", ["?mode=rwc", "?nolock=1", ""])
def test_a_file_uri_as_the_store_path_is_refused(tmp_path, monkeypatch, query):
    # This Python's SQLite (built with SQLITE_USE_URI) opened "file:b.db?mode=rwc" as the URI's
    # b.db, 644 under umask 022 and never checked, while the checks and the 600 creation went to
    # a file literally named "file:b.db?mode=rwc"; "file:/shared/b.db" skipped every check (its
    # "directory" file:/shared does not exist) and ?nolock=1 turns off the locking that keeps two
    # processes' admissions apart.
    monkeypatch.chdir(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    for path in (f"file:b.db{query}", f"file:{shared}/b.db{query}"):
        with pytest.raises(BudgetStoreError) as err:
            SqliteBudgetStore(path).close()
        assert f"budget store {path!r} starts with 'file:'" in str(err.value)
        assert f"'./{path}'" in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["shared"] and os.listdir(shared) == []


def test_the_uri_check_matters_on_this_sqlite():
    # Keeps the test above honest: where SQLite does not read file: names as URIs it would
    # pass without the check; here it does.
    if not _uses_uris():
        pytest.skip("this SQLite reads file: names as plain paths")
    assert _uses_uris()


def test_a_file_uri_budget_store_does_not_start_the_client(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({}, budget_store=f"sqlite:///file:{tmp_path}/b.db?mode=rwc")
    with pytest.raises(ConfigError, match="starts with 'file:'"):
        QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))


def test_a_plain_path_starting_file_is_still_a_store(tmp_path, monkeypatch):
    # The fix the message names: './file:...' is a path SQLite does not read as a URI.
    monkeypatch.chdir(tmp_path)
    store = SqliteBudgetStore("./file:b.db")
    store.close()
    assert sorted(os.listdir(tmp_path)) == ["file:b.db"]
    assert oct(os.stat(tmp_path / "file:b.db").st_mode & 0o777) == oct(0o600)


# ---------------------------------------------------------------- what errors echo

def _token_variants(token: str) -> list[str]:
    # A token copied with what preceded it: an Authorization header, a BOM from a file, a label.
    return [f"Bearer {token}", f"\ufeff{token}", f"token={token}"]


@pytest.mark.parametrize("slot", ["agent_id", "boundary"])
def test_a_token_inside_a_name_slot_is_refused_without_echoing_it(tmp_path, slot):
    # Only a name starting with the token was refused: "Bearer qgc1..." as agent_id was shown
    # whole in the credential mismatch and written to the audit log as the principal's name.
    kit = make_kit(tmp_path)
    token = kit.principal("alice", "hr").credential
    for value in _token_variants(token):
        args = (value, "hr") if slot == "agent_id" else ("alice", value)
        with pytest.raises(ConfigError) as exc:
            QdrantClient(":memory:", guard=kit.config({}), principal=Principal(*args, token))
        assert f"Principal.{slot} holds a credential token" in str(exc.value)
        assert token.split(".")[1][:16] not in str(exc.value)
    log = tmp_path / "audit.jsonl"
    assert not log.exists() or token.split(".")[1][:16] not in log.read_text()


def _private_key_texts() -> tuple[str, str]:
    sk, _ = keys.generate_keypair()
    pem = keys.private_key_to_pem(sk).decode()
    return pem, "".join(pem.strip().splitlines()[1:-1])


def test_key_text_among_missing_key_files_is_not_listed(tmp_path):
    # missing_key_files listed every named key file that does not exist, whole: a private key
    # pasted into a public key's slot was printed in the error (and so in logs). The load that
    # follows refuses it by its length only.
    kit = make_kit(tmp_path)
    pem, body = _private_key_texts()
    for secret in (pem, body):
        cfg = kit.config({}, audit_trusted_keys=[secret, str(tmp_path / "a.pub"), str(tmp_path / "b.pub")])
        with pytest.raises((ConfigError, KeyStoreError)) as exc:
            QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        assert body[8:40] not in str(exc.value)
        assert "2 key files the policy names do not exist" in str(exc.value)
        assert str(tmp_path / "a.pub") in str(exc.value) and str(tmp_path / "b.pub") in str(exc.value)
    cfg = kit.config({}, audit_trusted_keys=[body, str(tmp_path / "a.pub")])
    with pytest.raises(ConfigError, match="look like base64 key material") as exc:
        QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    assert body[8:40] not in str(exc.value)


def test_a_key_body_in_a_policy_file_is_not_echoed(tmp_path):
    # The policy joins its directory to a relative key path, so a one-line key body pasted as
    # authority key reached the loader as "<dir>/<body>", which the loader's body test missed.
    kit = make_kit(tmp_path)
    _, body = _private_key_texts()
    conf = tmp_path / "qg.conf.d"  # a dot in the policy's directory, as in ~/.config
    conf.mkdir()
    policy = conf / "policy.toml"
    policy.write_text(
        f'signing_key = "{kit.guard_key_path}"\naudit_log = "audit.jsonl"\n'
        f'[boundaries.hr]\nauthority_keys = ["{body}"]\n')
    policy.chmod(0o600)
    with pytest.raises((ConfigError, KeyStoreError)) as exc:
        QdrantClient(":memory:", guard=load_policy(policy), principal=kit.principal("alice", "hr"))
    assert body[8:40] not in str(exc.value)
    assert "look like base64 key material" in str(exc.value)


def test_a_relative_store_path_names_the_checked_file_in_every_thread(tmp_path, monkeypatch):
    # Each thread opens its own connection when it first admits. With a relative path that was
    # the path read against the working directory of that moment: after a chdir, a new thread's
    # connection made (644, unchecked) and read another directory's budget.db. One planted there
    # with the schema and no rows would have reset every cap.
    import threading

    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(home)
    store = SqliteBudgetStore("budget.db")
    try:
        assert store.admit("bob", ["p1", "p2"], cap=2, window_s=3600.0, now=10.0)[0] == ["p1", "p2"]
        monkeypatch.chdir(elsewhere)
        out: list = []

        def admit() -> None:
            try:
                out.append(store.admit("bob", ["p3", "p4"], cap=2, window_s=3600.0, now=20.0)[0])
            except Exception as exc:  # noqa: BLE001 - the outcome compared
                out.append(exc)

        t = threading.Thread(target=admit)
        t.start()
        t.join()
    finally:
        store.close()
    assert out == [[]]  # the cap of 2 already spent, in the file the store checked
    assert os.listdir(elsewhere) == []


@pytest.mark.parametrize("key", ["owner", "readers", "writers"])
def test_a_token_in_a_collections_boundary_names_is_not_echoed(tmp_path, key):
    # Review 51 left this: a token pasted into owner/readers/writers was shown whole in the
    # "names boundary ..., which has no [boundaries...] section" error, twice (the name and the
    # section it suggested).
    kit = make_kit(tmp_path)
    token = kit.principal("alice", "hr").credential
    for value in (token, *_token_variants(token)):
        pol = {"class": "PII", "owner": "hr", "readers": ["hr"], "writers": ["hr"]}
        pol[key] = value if key == "owner" else ["hr", value]
        with pytest.raises(ConfigError) as exc:
            kit.config({"docs": pol})
        assert f"collections.docs.{key} holds a credential token" in str(exc.value)
        assert "Principal(" in str(exc.value)
        assert token.split(".")[1][:16] not in str(exc.value)
