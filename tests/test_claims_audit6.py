"""Claims audit 6 (2026-12-05, branch h-claims6): the statements this session added to the README,
docs/ and the policy docstrings (receipts.retired_keys, names_visible, utility.embedding_model(s)
and record v5, receipt model_id checks, the left-behind count, details.stripped, write-only
operation ids, detector forms and the lookalike fold, the intent corpora), run against real
qdrant-client local mode and the native build. docs/security-testing.md lists every claim checked.

Fixed: docs/eval.md said the model strip on reads "is silent: the read's audit entry does not
count stripped vectors", written before h-stripaudit made every read record ``details.stripped``;
the threat model said hidden-name answers take one path whether the name exists, which alias
changes did not; and, found on the way, an alias rename or deletion of a name get_aliases had not
listed was sent unchecked. The other pins hold security promises that were true but untested.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from guardkit import audit_records, create, make_kit, models, record_sent, staging_record, unit
from qdrant_client import QdrantClient as RawClient
from test_read_strip_audit import MODEL_B, Keys, _config, _point, _vector
from test_names_visible import _store as names_store
from test_retired_keys import _coll, _colls, _old_checkpoint, _released, _write_under_a, rot  # noqa: F401

from qdrant_guard import ConfigError, GuardRefusal, QdrantClient

ROOT = Path(__file__).resolve().parent.parent


def _flat(path: str) -> str:
    return " ".join((ROOT / path).read_text().split())


def _store(tmp_path, points):
    """A PII collection declaring MODEL_A whose ``points`` were written around the guard; the owner's
    client and bob@support's (a reader and writer not allowed raw vectors)."""
    kit = make_kit(tmp_path)
    ks = Keys(kit)
    owner = QdrantClient(":memory:", guard=_config(kit, ks), principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    rng = np.random.default_rng(7)
    pts = [_point(pid, *_vector(rng, ks.guard, pid, **kw)) for pid, kw in points.items()]
    RawClient.upsert(owner, "pii", pts)
    return kit, owner.with_principal(kit.principal("bob", "support")), pts


# ---------------------------------------------------------------- eval.md: the model strip is audited
# eval.md said the read strip of a vector of another model "is silent: the read's audit entry does
# not count stripped vectors". Since h-stripaudit every read that strips says so in details.stripped,
# with the reason: an operator reading the log after declaring a model sees what was withheld.

@pytest.mark.parametrize("read", ["retrieve", "query_points"])
def test_a_vector_stripped_for_its_model_is_counted_in_the_reads_entry(tmp_path, read):
    kit, bob, _ = _store(tmp_path, {1: {}, 2: {"model": MODEL_B}})
    if read == "retrieve":
        got = {p.id: p.vector for p in bob.retrieve("pii", [1, 2], with_vectors=True)}
    else:
        got = {p.id: p.vector for p in bob.query_points("pii", query=unit(np.random.default_rng(1)), limit=5,
                                                        with_vectors=True).points}
    assert got[1] is not None and got[2] is None
    record = audit_records(kit)[-1]
    assert record["op"] == read
    assert record["details"]["stripped"] == {"count": 1, "points": 1, "reasons": {"model_mismatch": 1}, "ids": [2]}
    text = _flat("docs/eval.md")
    assert "is silent: the read's audit entry does not count stripped vectors" not in text
    assert "counts them under `details.stripped`, reason `model_mismatch`" in text


# ---------------------------------------------------------------- audit-log.md: "in the write's order"
# A receipt with several faults is refused on a write and stripped on a read for the same first
# reason (unsound noise, epsilon above the ceiling, mechanism, model, noise shortfall), so the
# write's refusal and the read's details.stripped name one cause for one receipt.

def test_a_receipt_with_several_faults_gets_the_same_reason_on_writes_and_reads(tmp_path):
    faults = {1: {"model": MODEL_B, "radius": 0.005},            # model before shortfall
              2: {"model": MODEL_B, "mechanism": "laplace_l2"},  # mechanism before model
              3: {"model": MODEL_B, "epsilon": 2.0},             # ceiling before model
              4: {"model": MODEL_B, "seeded": True}}             # unsound before everything
    want = {1: "model_mismatch", 2: "mechanism_mismatch", 3: "epsilon_above_ceiling", 4: "unsound_noise"}
    kit, bob, pts = _store(tmp_path, faults)
    for pid, point in zip(faults, pts):
        bob.retrieve("pii", [pid], with_vectors=True)
        assert audit_records(kit)[-1]["details"]["stripped"]["reasons"] == {want[pid]: 1}, pid
        with pytest.raises(GuardRefusal) as err:
            bob.upsert("pii", [point])
        why = err.value.details["reasons"][str(pid)]
        # The write's reason text: the reason word first, or the check's own words for the first two.
        expected_start = {"model_mismatch": "model_mismatch:", "mechanism_mismatch": "mechanism_mismatch:",
                          "epsilon_above_ceiling": "epsilon 2.0 > ceiling", "unsound_noise": "rng_id "}[want[pid]]
        assert why.startswith(expected_start), (pid, why)


# ---------------------------------------------------------------- audit_trusted_keys: the log alone
# audit-log.md: `audit_trusted_keys = ["old-guard.key.pub"]` "trusts it for the log alone"; only
# receipts.retired_keys also keeps the old key's receipts and utility records verifying. A key
# trusted for checkpoints must not quietly vouch for vectors or records.

def test_audit_trusted_keys_open_the_log_but_vouch_for_no_receipt_or_record(rot, tmp_path):  # noqa: F811
    kit = rot["kit"]
    _write_under_a(rot)
    _old_checkpoint(rot)
    log_only = kit.config(_colls(rot), signing_key=str(rot["b"]), audit_trusted_keys=[str(rot["a_pub"])])
    # The log (last checkpoint under key A) opens, and A's receipts are still stripped everywhere.
    assert _released(rot, log_only) == {"plain": False, "scoped": False}
    rec_path = tmp_path / "utility.json"
    rec, docs = staging_record(kit, rec_path, dim=32)  # signed by key A
    util = {"noise": {"epsilon": rec.epsilon, "delta": 1e-6, "radius": 0.01}, "utility": {"record": str(rec_path)}}
    cfg = kit.config({"plain": _coll(**util)}, signing_key=str(rot["b"]), audit_trusted_keys=[str(rot["a_pub"])],
                     epsilon_ceiling={"PII": 5.0})
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(c, "plain", dim=32)
    with pytest.raises(ConfigError, match="does not verify against the trusted keys"):
        c.upsert("plain", [models.PointStruct(id=1, vector=docs[0].tolist(), payload={"source": "s"})])
    c.close()
    # Listed as retired instead, the same key vouches for both.
    retired = kit.config(_colls(rot), signing_key=str(rot["b"]), receipts={"retired_keys": [str(rot["a_pub"])]})
    assert _released(rot, retired) == {"plain": True, "scoped": True}


# ---------------------------------------------------------------- names_visible: alias changes
# threat-model.md: the hidden-name answers "come from the policy and the credential alone, before
# Qdrant is asked, so a hidden name that exists and one that does not get the same answer by the
# same path". For alias changes they did not: the guard asked Qdrant for the aliases first, then
# left a hidden alias's deletion out (nothing sent) but sent the deletion of a hidden name no alias
# had (an extra round trip, and a deletion of a name the principal may not administer, which would
# remove an alias of that name made meanwhile); a hidden alias's rename was answered locally and a
# missing one's sent to Qdrant.

def _alias_calls(client, name, new="kb-view"):
    return {
        "delete": lambda: client.update_collection_aliases([models.DeleteAliasOperation(
            delete_alias=models.DeleteAlias(alias_name=name))]),
        "rename": lambda: client.update_collection_aliases([models.RenameAliasOperation(
            rename_alias=models.RenameAlias(old_alias_name=name, new_alias_name=new))]),
    }


def test_a_hidden_alias_name_gets_one_answer_by_one_path_whether_or_not_it_exists(tmp_path, monkeypatch):
    kit, alice, bob = names_store(tmp_path, names_visible="accessible")
    sent = record_sent(monkeypatch, ("get_aliases", "update_collection_aliases"))
    seen = {}
    # "layoffs" is an alias of hr's collection; "hr-plans" is a name of hr's policy no alias has.
    for name in ("layoffs", "hr-plans"):
        for action, call in _alias_calls(bob, name).items():
            sent.clear()
            try:
                answer = repr(call())
            except Exception as exc:  # noqa: BLE001 - compared below
                answer = f"{type(exc).__name__}: {exc}".replace(name, "NAME")
            record = audit_records(kit)[-1]
            seen[action, name] = (answer, list(sent), record["verdict"], record["details"].get("answered"))
    for action in ("delete", "rename"):
        assert seen[action, "layoffs"] == seen[action, "hr-plans"], action
        # Decided from the policy alone: Qdrant is not asked at all.
        assert seen[action, "hr-plans"][1] == [], seen[action, "hr-plans"]
        assert seen[action, "hr-plans"][2:] == ("REFUSED_CROSS_BOUNDARY", "as a missing alias")
    assert seen["delete", "hr-plans"][0] == "True"
    assert seen["rename", "hr-plans"][0] == "ValueError: Alias NAME does not exist"
    # The alias is untouched, and its owner still manages it; a visible name is still sent.
    assert ("layoffs", "hr-layoffs-2027") in {(a.alias_name, a.collection_name)
                                              for a in RawClient.get_aliases(bob).aliases}
    assert _alias_calls(alice, "layoffs")["delete"]() is True


# ---------------------------------------------------------------- alias changes: check then act
# An alias rename or deletion is checked against the aliases get_aliases lists; one of a name it did
# not list was sent on unchecked, so an alias of that name made between the two calls (an owner's
# alias flip: delete, then create) was renamed or deleted by whoever asked, whatever its policy. A
# rename onto a name of another policy then opened the collection under that policy.

def test_an_alias_made_after_the_guard_looked_is_not_renamed_or_deleted_unchecked(tmp_path, monkeypatch):
    kit, alice, bob = names_store(tmp_path)  # names_visible = "all"
    original = RawClient.get_aliases

    def concurrent_owner(self, *a, **kw):
        answer = original(self, *a, **kw)
        # hr's owner makes alias "hr-plans" right after the guard listed the aliases.
        RawClient.update_collection_aliases(alice, [models.CreateAliasOperation(create_alias=models.CreateAlias(
            collection_name="hr-layoffs-2027", alias_name="hr-plans"))])
        return answer

    monkeypatch.setattr(RawClient, "get_aliases", concurrent_owner)
    with pytest.raises(ValueError, match="Alias hr-plans does not exist"):  # as for a missing alias
        _alias_calls(bob, "hr-plans")["rename"]()
    monkeypatch.setattr(RawClient, "get_aliases", original)
    aliases = {a.alias_name: a.collection_name for a in RawClient.get_aliases(bob).aliases}
    assert aliases.get("hr-plans") == "hr-layoffs-2027" and "kb-view" not in aliases
    with pytest.raises(GuardRefusal):  # hr's collection stays out of support's reach
        bob.count("hr-plans")
    RawClient.update_collection_aliases(alice, [models.DeleteAliasOperation(
        delete_alias=models.DeleteAlias(alias_name="hr-plans"))])
    monkeypatch.setattr(RawClient, "get_aliases", concurrent_owner)
    assert _alias_calls(bob, "hr-plans")["delete"]() is True  # as Qdrant answers a missing alias
    monkeypatch.setattr(RawClient, "get_aliases", original)
    assert {a.alias_name for a in RawClient.get_aliases(bob).aliases} >= {"hr-plans"}


def test_alias_changes_of_listed_aliases_are_sent_as_before(tmp_path, monkeypatch):
    kit, alice, bob = names_store(tmp_path)
    sent = record_sent(monkeypatch, ("get_aliases", "update_collection_aliases"))
    assert _alias_calls(alice, "layoffs", "hr-plans")["rename"]() is True  # hr's owner renames hr's alias
    assert sent == ["get_aliases", "update_collection_aliases"]
    sent.clear()
    assert _alias_calls(alice, "ghost")["delete"]() is True  # none listed: nothing sent
    assert sent == ["get_aliases"]
