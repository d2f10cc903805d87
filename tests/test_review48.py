"""Review 48 (2026-12-07): surfaces earlier reviews did not cover, attacked.

Operations the facade cannot read as models: ``batch_update_points`` and
``update_collection_aliases`` turn dict operations into models before the pipeline sees them, and
refused what they could not turn (a dict of the wrong shape, an object, a gRPC message) before
the guard decided anything, so the refusal left no audit entry while the same input given to
``upsert`` is audited ``UNSUPPORTED_WRITE``; and a dict operation pydantic refused was named with
pydantic's error, which quotes the values (a payload's SSN and password included).

Real local Qdrant, real Ed25519 keys; no mocks. The tests fail on the code before the fix
(checked by restoring qdrant_guard/_facade.py)."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from groupkit import give_shared_group
from guardkit import audit_records, create, make_kit, snapshot, unit
from qdrant_client import grpc
from qdrant_client.http import models

from qdrant_guard import AsyncQdrantClient, QdrantClient
from qdrant_guard.errors import UnsupportedWriteError

SSN = "123-45-6789"
PASSWORD = "Hunter2Hunter2!"

_BAD_OPERATIONS = {
    "wrong_key": [{"bogus": 1}],
    "object": [object()],
    "grpc_message": [grpc.PointsUpdateOperation()],
    "not_a_sequence": "upsert",
    "invalid_dict": [{"upsert": {"points": [{"id": 1, "vector": "x",
                                              "payload": {"ssn": SSN, "db_password": PASSWORD}}]}}],
}


def _pii(tmp_path, cls=QdrantClient):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True},
                      "pub": {"class": "PUBLIC"}}, unlisted="refuse")
    client = cls(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    return kit, client


def _fill(client):
    create(client, "pii")
    create(client, "pub")
    client.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)), payload={"n": 1})])


@pytest.mark.parametrize("case", sorted(_BAD_OPERATIONS))
@pytest.mark.parametrize("collection", ["pii", "pub"])
def test_a_batch_the_facade_cannot_read_is_refused_audited_and_names_no_value(tmp_path, case, collection):
    kit, client = _pii(tmp_path)
    _fill(client)
    before = snapshot(client, collection)
    entries = len(audit_records(kit))
    with pytest.raises(UnsupportedWriteError) as err:
        client.batch_update_points(collection, _BAD_OPERATIONS[case])
    assert SSN not in str(err.value) and PASSWORD not in str(err.value)
    new = audit_records(kit)[entries:]
    # Before the fix: no entry at all (upsert's own malformed input is audited UNSUPPORTED_WRITE).
    assert [(r["op"], r["collection"], r["verdict"], r["details"]["reason"]) for r in new] == [
        ("batch_update_points", collection, "UNSUPPORTED_WRITE", "invalid_input")]
    assert new[0]["principal"] == "alice@hr"
    assert SSN not in str(new) and PASSWORD not in str(new)
    assert snapshot(client, collection) == before


def test_the_invalid_dict_is_named_by_place_and_reason(tmp_path):
    kit, client = _pii(tmp_path)
    _fill(client)
    with pytest.raises(UnsupportedWriteError) as err:
        client.batch_update_points("pii", _BAD_OPERATIONS["invalid_dict"])
    message = str(err.value)
    assert "update_operations[0] is not a valid models.UpsertOperation" in message
    assert "points.0.vector" in message and "Input should be a valid list" in message
    assert "input_value" not in message and "'x'" not in message


def test_an_alias_operation_the_facade_cannot_read_is_refused_and_audited(tmp_path):
    kit, client = _pii(tmp_path)
    _fill(client)
    entries = len(audit_records(kit))
    for bad in ([{"x": 1}], [object()],
                [{"create_alias": {"collection_name": "pii", "alias_name": SSN, "extra": PASSWORD}}]):
        with pytest.raises(UnsupportedWriteError) as err:
            client.update_collection_aliases(bad)
        assert PASSWORD not in str(err.value)
    new = audit_records(kit)[entries:]
    assert [(r["op"], r["collection"], r["verdict"], r["details"]["reason"]) for r in new] == [
        ("update_collection_aliases", None, "UNSUPPORTED_WRITE", "invalid_input")] * 3
    assert PASSWORD not in str(new)
    assert client.get_aliases().aliases == []


def test_the_async_client_audits_the_same_refusal(tmp_path):
    async def attempt():
        kit, client = _pii(tmp_path, AsyncQdrantClient)
        await client.create_collection("pii", vectors_config=models.VectorParams(
            size=16, distance=models.Distance.COSINE))
        entries = len(audit_records(kit))
        with pytest.raises(UnsupportedWriteError):
            await client.batch_update_points("pii", _BAD_OPERATIONS["invalid_dict"])
        new = audit_records(kit)[entries:]
        assert [(r["op"], r["verdict"]) for r in new] == [("batch_update_points", "UNSUPPORTED_WRITE")]
        assert SSN not in str(new)
        await client.close()

    asyncio.run(attempt())


def test_a_valid_dict_batch_still_runs_and_a_client_without_guard_is_unchanged(tmp_path):
    kit, client = _pii(tmp_path)
    _fill(client)
    client.batch_update_points("pii", [{"set_payload": {"payload": {"tag": "x"}, "points": [1]}}])
    assert client.retrieve("pii", [1])[0].payload["tag"] == "x"
    plain = QdrantClient(":memory:")
    create(plain, "c")
    with pytest.raises(Exception) as err:  # qdrant-client's own error, not the guard's
        plain.batch_update_points("c", [object()])
    assert not isinstance(err.value, UnsupportedWriteError)


# -- a trust anchor others can write ---------------------------------------------------------

def _policy_file(kit, tmp_path, pub_mode):
    """A policy file whose hr authority key is a .pub file of mode ``pub_mode``, and that file."""
    from qdrant_guard import keys

    pub = tmp_path / "hr-authority.key.pub"
    pub.write_text(kit.authority_pub["hr"] + "\n")
    pub.chmod(pub_mode)
    policy = tmp_path / "policy.toml"
    policy.write_text(f"""
signing_key = "{kit.guard_key_path}"
audit_log = "{tmp_path / 'audit.jsonl'}"
[boundaries.hr]
authority_keys = ["{pub}"]
[boundaries.support]
authority_keys = ["{kit.authority_pub['support']}"]
[collections.payroll]
class = "PII"
owner = "hr"
raw_in_boundary = true
[collections.payroll.intent]
enabled = false
[collections.payroll.diversity]
enabled = false
""")
    assert keys.load_public_key(kit.authority_pub["hr"])  # the inline form needs no file
    return policy, pub


@pytest.mark.parametrize("mode", [0o666, 0o646, 0o664])
def test_an_authority_key_file_others_can_write_is_refused(tmp_path, mode):
    # Before: the guard loaded any readable .pub. bob (another uid who can write the file) put his
    # own key in it, issued himself an hr credential and read hr's raw payroll vectors and payloads.
    from qdrant_guard import Principal, issue_credential, keys
    from qdrant_guard.errors import ConfigError

    kit = make_kit(tmp_path)
    policy, pub = _policy_file(kit, tmp_path, 0o644)
    store = str(tmp_path / "store")
    alice = QdrantClient(path=store, guard=str(policy), principal=kit.principal("alice", "hr"))
    create(alice, "payroll")
    alice.upsert("payroll", [models.PointStruct(id=1, vector=unit(np.random.default_rng(3)),
                                                payload={"salary": 91000})])
    alice.close()
    pub.chmod(mode)
    if not mode & 0o002:
        give_shared_group(pub)  # bob is in it (a group only alice's uid and root are in may write it)
    bob_sk, bob_pk = keys.generate_keypair()
    pub.write_text(keys.public_key_to_str(bob_pk) + "\n")  # what a writer of the file can do
    forged = Principal("bob", "hr", issue_credential(bob_sk, agent_id="bob", boundary="hr", ttl_s=600))
    with pytest.raises(ConfigError) as err:
        QdrantClient(path=store, guard=str(policy), principal=forged)
    assert str(pub) in str(err.value) and "writable by other users" in str(err.value)
    assert f"chmod {'go' if mode & 0o002 else 'g'}-w" in str(err.value) and "authority_keys" in str(err.value)


def test_load_public_key_refuses_a_file_others_can_write_and_takes_the_other_modes(tmp_path):
    from qdrant_guard import keys
    from qdrant_guard.keys import KeyStoreError

    kit = make_kit(tmp_path)
    pub = tmp_path / "k.pub"
    pub.write_text(kit.authority_pub["hr"] + "\n")
    for mode in (0o644, 0o600, 0o444, 0o640):
        pub.chmod(mode)
        assert keys.public_key_to_str(keys.load_public_key(pub)) == kit.authority_pub["hr"]
    pub.chmod(0o620)
    give_shared_group(pub)
    with pytest.raises(KeyStoreError, match="writable by other users"):
        keys.load_public_key(pub)


def test_the_demo_writes_its_public_keys_0644_under_umask_002(tmp_path):
    import os

    from qdrant_guard.demo import _setup

    old = os.umask(0o002)
    try:
        _setup(tmp_path)
    finally:
        os.umask(old)
    pubs = sorted(tmp_path.glob("*.pub"))
    assert len(pubs) == 4 and {oct(p.stat().st_mode & 0o777) for p in pubs} == {"0o644"}


@pytest.mark.parametrize("mode", [0o666, 0o620])
def test_a_policy_file_others_can_write_is_refused(tmp_path, mode):
    # Before: loaded as it was; a writer of the file lists its own authority key for hr (or makes
    # payroll readable by its boundary) and the next client trusts it.
    from qdrant_guard.errors import ConfigError
    from qdrant_guard.policy import load_policy

    kit = make_kit(tmp_path)
    policy, _ = _policy_file(kit, tmp_path, 0o644)
    assert "payroll" in load_policy(policy).collections
    policy.chmod(mode)
    if not mode & 0o002:
        give_shared_group(policy)  # a group only this uid and root are in may write it
    with pytest.raises(ConfigError, match="writable by other users") as err:
        QdrantClient(":memory:", guard=str(policy), principal=kit.principal("alice", "hr"))
    assert str(policy) in str(err.value) and f"chmod {'go' if mode & 0o002 else 'g'}-w" in str(err.value)
    policy.chmod(0o640)
    assert "payroll" in load_policy(policy).collections
