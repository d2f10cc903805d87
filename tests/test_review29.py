"""Twenty-ninth review (h-rev29, 2026-12-05): retired signing keys, utility records naming the
embedding model (v5), and ``names_visible = "accessible"``.

Real qdrant-client local mode, real keys and credentials (tests/guardkit.py, and the store of
tests/test_names_visible.py).
"""
from __future__ import annotations

import asyncio

import pytest
from guardkit import audit_records, make_kit
from qdrant_client import AsyncQdrantClient as RawAsync
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models
from test_names_visible import _VP, CREATED, POLICIES, _store

from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal
from qdrant_guard.policy import config_from_dict


def _create(collection: str, alias: str) -> models.CreateAliasOperation:
    return models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection, alias_name=alias))


def _rename(old: str, new: str) -> models.RenameAliasOperation:
    return models.RenameAliasOperation(rename_alias=models.RenameAlias(old_alias_name=old, new_alias_name=new))


def _outcome(call, name: str) -> tuple[str, str]:
    """The exception type and message of ``call()`` with ``name`` written NAME (or what it returned)."""
    try:
        return ("returned", repr(call()))
    except Exception as exc:  # noqa: BLE001 - compared by the caller
        return (type(exc).__name__, str(exc).replace(name, "NAME"))


# -- names_visible: a hidden alias's rename in a batch ---------------------------------------------
# Before: the guard raised "Alias NAME does not exist" as soon as it met the rename of a hidden
# alias, while a truly missing alias's rename went to Qdrant with the rest of the batch. A batch
# whose earlier operation Qdrant refuses (an alias named as an existing collection), or whose later
# operation the guard refuses, then answered differently for "layoffs" (hidden, exists) and "ghost"
# (missing): the first error of the batch told them apart.

def _batches(hidden_or_missing: str) -> list[list]:
    return [
        # Qdrant refuses the first operation ("pub" is a collection): a missing alias's batch fails there.
        [_create("pub", "pub"), _rename(hidden_or_missing, "pub-view-2")],
        # The guard refuses the second operation (the alias name's policy differs from kb's).
        [_rename(hidden_or_missing, "pub-view-2"), _create("kb", "hr-plans")],
        # Both pass: the rename's own error.
        [_create("pub", "pub-view"), _rename(hidden_or_missing, "pub-view-2")],
    ]


def test_a_hidden_alias_rename_in_a_batch_is_answered_as_a_missing_one(tmp_path):
    kit, alice, bob = _store(tmp_path, names_visible="accessible")
    before = RawClient.get_aliases(alice).aliases
    for hidden, missing in zip(_batches("layoffs"), _batches("ghost")):
        got = _outcome(lambda: bob.update_collection_aliases(hidden), "layoffs")
        want = _outcome(lambda: bob.update_collection_aliases(missing), "ghost")
        assert got == want
        assert "hr-layoffs-2027" not in got[1]
        # Local mode applies a batch as a unit: nothing of the failed batch was applied, the
        # hidden alias is untouched.
        assert RawClient.get_aliases(alice).aliases == before
    # The guard's own check of a later operation still comes first, as for a missing alias.
    assert _outcome(lambda: bob.update_collection_aliases(_batches("layoffs")[1]), "layoffs")[0] == "GuardRefusal"
    # The alias's owner renames it.
    alice.update_collection_aliases([_rename("layoffs", "hr-plans")])
    assert {a.alias_name for a in RawClient.get_aliases(alice).aliases} == {"hr-plans"}


def test_a_hidden_alias_rename_in_a_batch_is_answered_as_a_missing_one_async(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config(POLICIES, names_visible="accessible")

    async def outcome(coro, name):
        try:
            return ("returned", repr(await coro))
        except Exception as exc:  # noqa: BLE001 - compared below
            return (type(exc).__name__, str(exc).replace(name, "NAME"))

    async def main():
        alice = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        for name in CREATED:
            await RawAsync.create_collection(alice, name, vectors_config=_VP)
        await alice.update_collection_aliases([_create("hr-layoffs-2027", "layoffs")])
        bob = alice.with_principal(kit.principal("bob", "support"))
        out = []
        for hidden, missing in zip(_batches("layoffs"), _batches("ghost")):
            out.append((await outcome(bob.update_collection_aliases(hidden), "layoffs"),
                        await outcome(bob.update_collection_aliases(missing), "ghost")))
        aliases = [(a.alias_name, a.collection_name) for a in (await RawAsync.get_aliases(alice)).aliases]
        await alice.close()
        return out, aliases

    out, aliases = asyncio.run(main())
    for got, want in out:
        assert got == want
    assert aliases == [("layoffs", "hr-layoffs-2027")]


def test_the_owners_batches_with_a_rename_are_unchanged(tmp_path):
    # Regression guard: a rename the principal may see goes to Qdrant with its batch.
    _, alice, _ = _store(tmp_path, names_visible="accessible")
    alice.update_collection_aliases([_create("pub", "pub-view"), _rename("layoffs", "hr-plans")])
    assert {(a.alias_name, a.collection_name) for a in RawClient.get_aliases(alice).aliases} == {
        ("pub-view", "pub"), ("hr-plans", "hr-layoffs-2027")}
    with pytest.raises(ValueError, match="^Collection pub already exists$"):
        alice.update_collection_aliases([_create("pub", "pub"), _rename("hr-plans", "layoffs")])


# -- names_visible: a call on every collection counted the hidden ones ----------------------------
# Before: create_full_snapshot and migrate of every collection were refused with "the principal may
# not administer N of them": N is how many collections of the store the principal may not see, a
# number of the store's (one more when the HR boundary makes a collection).

@pytest.mark.parametrize("method", ["create_full_snapshot", "migrate"])
def test_a_call_on_every_collection_does_not_count_hidden_ones(tmp_path, method):
    kit, alice, bob = _store(tmp_path, names_visible="accessible")
    call = (lambda: bob.create_full_snapshot()) if method == "create_full_snapshot" else \
        (lambda: bob.migrate(RawClient(":memory:")))
    with pytest.raises(GuardRefusal) as one:
        call()
    RawClient.create_collection(alice, "hr-plans", vectors_config=_VP)  # a second hidden collection
    with pytest.raises(GuardRefusal) as two:
        call()
    assert str(one.value) == str(two.value)
    assert "names_visible" in str(two.value) and "hr-plans" not in str(two.value)
    entry = audit_records(kit)[-1]  # the operator's log keeps the names and their number
    assert entry["details"]["hidden"] == ["hr-layoffs-2027", "hr-plans"] and entry["details"]["hidden_count"] == 2


# -- policy values that name nothing ------------------------------------------------------------------
# Before: utility.embedding_model = " " was accepted (utility.embedding_models refused a blank name);
# no record can carry a blank model name, so every write under an enforced record was refused
# model_mismatch, naming a model "declared" as " ". And receipts.retired_keys = [""] was read as the
# policy's directory: "cannot read key file '.' ... give the path of a key file in it (e.g.
# 'guard.key')", which points at a private key, where receipts.trusted_keys = [""] says the entry is
# empty.

@pytest.mark.parametrize("blank", [" ", "\t", "  \n"])
def test_a_blank_embedding_model_is_refused_as_an_empty_one(blank):
    with pytest.raises(ConfigError) as err:
        config_from_dict({"default": {"class": "PII", "utility": {"embedding_model": blank}}}, source="p.toml")
    msg = str(err.value)
    assert "default.utility.embedding_model" in msg and "names no model" in msg and "p.toml" in msg
    # A name with letters is kept as written (names compare exactly).
    cfg = config_from_dict({"default": {"class": "PII", "utility": {"embedding_model": "m-1"}}}, source="p.toml")
    assert cfg.default.utility.embedding_model == "m-1"


def test_an_empty_retired_key_is_refused_as_an_empty_trusted_key_is(tmp_path):
    from qdrant_guard.policy import load_policy

    p = tmp_path / "policy.toml"
    p.write_text('[receipts]\nretired_keys = ["ed25519:AAAA", ""]\n')
    with pytest.raises(ConfigError) as err:
        load_policy(p)
    msg = str(err.value)
    assert "receipts.retired_keys" in msg and "entry 1 is empty" in msg and ".pub" in msg
    assert "guard.key" not in msg


# -- retired_keys: audit verify --policy and revoked keys ------------------------------------------
# Before: `audit verify LOG --key OLD.pub --policy P`, where P's receipts.revoked_keys revokes OLD,
# printed "OK ... 1 signed checkpoint(s) verified" and exited 0, listing the key as "revoked" beside
# it: the policy's revocation lost to --key, where the guard (audit_trusted_keys, retired_keys) and
# `receipt verify --trusted-key ... --policy` let revocation win.

from test_retired_keys import _old_checkpoint, _policy_file, rot  # noqa: E402,F401 - the fixture

from qdrant_guard.cli import main  # noqa: E402


def test_cli_audit_verify_with_the_policy_refuses_a_revoked_key_given_with_key(rot, tmp_path, capsys):  # noqa: F811
    log = _old_checkpoint(rot)  # a checkpoint signed by key A
    path = _policy_file(rot, tmp_path, retired=False)  # signing_key B, A not retired
    argv = ["audit", "verify", str(log), "--checkpoint-every", "1", "--key", str(rot["a_pub"]), "--policy", str(path)]
    assert main(argv) == 0  # A not revoked: its checkpoint verifies (unchanged)
    capsys.readouterr()
    path.write_text(path.read_text().replace("[boundaries.", f'[receipts]\nrevoked_keys = ["{rot["a_kid"]}"]\n'
                                                               "[boundaries.", 1))
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc != 0 and "OK" not in captured.out, captured.out
    assert rot["a_kid"] in captured.err and "revoked_keys" in captured.err and "--key" in captured.err, captured.err
    # Without --policy the caller's --key is all there is to go by (unchanged).
    assert main(argv[:-2]) == 0


# -- retired_keys: a boundary's authority key listed as a retired guard key ------------------------
# Before: accepted. A retired key is trusted on every collection's receipts (receipt_keys included),
# for utility records and audit checkpoints; a boundary's authority key listed there made whoever
# issues that boundary's credentials a signer of all of those, on collections whose receipt_keys
# name no such key too.

def test_a_retired_key_that_is_a_boundary_authority_key_is_a_policy_error(rot, tmp_path, capsys):  # noqa: F811
    from qdrant_guard import QdrantClient as GuardClient
    from qdrant_guard import keys as _keys

    from test_retired_keys import _cfg

    kit = rot["kit"]
    support_pub = kit.authority_pub["support"]
    support_kid = _keys.key_id(_keys.load_public_key(support_pub))
    with pytest.raises(ConfigError) as err:
        GuardClient(":memory:", guard=_cfg(rot, rot["b"], retired_keys=[str(rot["a_pub"]), support_pub]),
                    principal=kit.principal("alice", "hr"))
    msg = str(err.value)
    assert support_kid in msg and "boundaries.support.authority_keys" in msg and "receipts.retired_keys" in msg
    # The offline verifiers check the policy as the guard does.
    path = _policy_file(rot, tmp_path)
    path.write_text(path.read_text().replace(f'retired_keys = ["{rot["a_pub"]}"]',
                                             f'retired_keys = ["{rot["a_pub"]}", "{support_pub}"]'))
    log = _old_checkpoint(rot)
    assert main(["audit", "verify", str(log), "--checkpoint-every", "1", "--policy", str(path)]) == 2
    assert "boundaries.support.authority_keys" in capsys.readouterr().err
    # The guard's own earlier key alone is accepted (unchanged).
    GuardClient(":memory:", guard=_cfg(rot, rot["b"], retired_keys=[str(rot["a_pub"])]),
                principal=kit.principal("alice", "hr")).close()
