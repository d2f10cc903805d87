"""Tests from mutation pass 10 over the Python added on 2026-12-05 since 739f55e (h-mut10 branch).

Each test kills mutants of ``scripts/mutate.py`` that survived every older test of the module
(names_visible's answers and audit, the remote not-found errors, the left-behind count's
odd vector names, ...). docs/security-testing.md ("Mutation pass 10") lists the mutants, which
test kills each and the equivalent ones.

Real local Qdrant (qdrant-client local mode), real keys and credentials; no mocks. The remote
not-found error is produced by a real remote client whose server is never reached: the guard
answers a hidden name without asking it.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from guardkit import DIM, audit_records, create, make_kit
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models
from qdrant_client.http.exceptions import UnexpectedResponse

from qdrant_guard import QdrantClient
from qdrant_guard.pipeline import missing_alias_error, missing_collection_error

_OFF = {"intent": {"enabled": False}, "diversity": {"enabled": False}}
_VP = models.VectorParams(size=DIM, distance=models.Distance.COSINE)


# ------------------------------------------------------------------ pipeline: names_visible

def _server_answer(message: str) -> bytes:
    """The body a Qdrant server sends with a 404 (serde_json: compact, UTF-8 unescaped)."""
    return json.dumps({"status": {"error": f"Not found: {message}"}, "time": 0.0},
                      ensure_ascii=False, separators=(",", ":")).encode()


def test_a_hidden_name_on_a_remote_client_is_the_servers_404(tmp_path):
    # Kills notfound.py missing_collection_error's `return _not_found(...)` -> None, _not_found's
    # return -> None, status 404 -> 403/405 and ensure_ascii False -> True (a server sends UTF-8).
    kit = make_kit(tmp_path)
    name = "hr-données"
    cfg = kit.config({name: {"class": "PII", "owner": "hr", **_OFF}}, names_visible="accessible")
    # Port 9 (discard): nothing answers; the guard must not need it to answer a hidden name.
    bob = QdrantClient(url="http://127.0.0.1:9", guard=cfg, principal=kit.principal("bob", "support"),
                       check_compatibility=False, timeout=1)
    with pytest.raises(UnexpectedResponse) as err:
        bob.get_collection(name)
    assert err.value.status_code == 404 and err.value.reason_phrase == "Not Found"
    assert err.value.content == _server_answer(f"Collection `{name}` doesn't exist!")
    assert err.value.structured() == {"status": {"error": f"Not found: Collection `{name}` doesn't exist!"},
                                      "time": 0.0}
    assert not bob.collection_exists(name)


def test_the_remote_missing_alias_error_is_the_servers_404():
    # Kills missing_alias_error's remote `return _not_found(...)` -> None (no server here to reach
    # the rename path end to end: the guard asks get_aliases first).
    err = missing_alias_error("layoffs-é", remote=True)
    assert isinstance(err, UnexpectedResponse) and err.status_code == 404
    assert err.content == _server_answer("Alias layoffs-é does not exists!")
    local = missing_alias_error("layoffs", remote=False)
    assert type(local) is ValueError and str(local) == "Alias layoffs does not exist"
    assert str(missing_collection_error("c", remote=False)) == "Collection c not found"


def test_a_list_audit_entry_says_how_many_were_left_out_and_only_then(tmp_path):
    # Kills dispatch.py _names_listed's message `if hidden` negated.
    kit = make_kit(tmp_path)
    pols = {"hr": {"class": "PII", "owner": "hr", **_OFF}, "kb": {"class": "PII", "owner": "support", **_OFF}}
    alice = QdrantClient(":memory:", guard=kit.config(pols, names_visible="accessible"),
                         principal=kit.principal("alice", "hr"))
    for n in pols:
        RawClient.create_collection(alice, n, vectors_config=_VP)
    start = len(audit_records(kit))
    assert [c.name for c in alice.get_collections().collections] == ["hr"]
    assert alice.get_collection_aliases("hr").aliases == []
    listed, aliases = audit_records(kit)[start:]
    assert listed["directive"] == ("collection list allowed: 1 the principal may not read, write or own left out "
                                   "(names_visible = \"accessible\")")
    assert aliases["directive"] == "alias list allowed"
    assert aliases["details"] == {"names_visible": "accessible"}


# ------------------------------------------------------------------ rawstored: left_behind_filter

def test_a_vector_name_no_payload_path_can_hold_counts_every_point_having_it(tmp_path):
    # Kills rawstored.py left_behind_filter's `'"' in vname or "\\" in vname` -> `and`: a name
    # with a backslash alone would be written into a payload path (`receipt.vectors."a\b"`), which
    # a server reads as an escape. qdrant-client's local mode refuses such names at
    # create_collection, so the filter is checked as built (a server accepts them).
    from qdrant_guard.rawstored import left_behind_filter
    from qdrant_guard.vectors import CollectionShape, VectorSpec

    kit = make_kit(tmp_path)
    pol = QdrantClient(":memory:", guard=kit.config({"pii": {"class": "PII", "owner": "hr", **_OFF}}),
                       principal=kit.principal("alice", "hr")).guard.policy("pii")
    for odd in ("a\\b", 'a"b', 'a"\\b'):
        shape = CollectionShape(dense={odd: VectorSpec(odd, DIM, "Cosine", False)}, sparse=frozenset(), unnamed=False)
        assert left_behind_filter(shape, pol) == models.Filter(should=[
            models.Filter(must=[models.HasVectorCondition(has_vector=odd)])])
    plain = CollectionShape(dense={"ab": VectorSpec("ab", DIM, "Cosine", False)}, sparse=frozenset(), unnamed=False)
    (only,) = left_behind_filter(plain, pol).should
    assert only.must[0] == models.HasVectorCondition(has_vector="ab") and len(only.must) == 2
    assert 'vectors."ab"' in repr(only.must[1])


def test_a_visible_collections_alias_list_audits_the_aliases_left_out(tmp_path):
    # Kills dispatch.py op_get_collection_aliases's `self._names_listed(...)` deleted and its
    # `a not in kept` -> `a in kept`.
    kit = make_kit(tmp_path)
    pols = {"hr": {"class": "PII", "owner": "hr", **_OFF}, "pub": {"class": "PUBLIC"}}
    alice = QdrantClient(":memory:", guard=kit.config(pols, names_visible="accessible"),
                         principal=kit.principal("alice", "hr"))
    RawClient.create_collection(alice, "pub", vectors_config=_VP)
    # Made around the guard: a PUBLIC collection under an hr-only name, and under a PUBLIC one.
    RawClient.update_collection_aliases(alice, [
        models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name="pub", alias_name="hr")),
        models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name="pub", alias_name="pub-view"))])
    bob = alice.with_principal(kit.principal("bob", "support"))
    start = len(audit_records(kit))
    assert [a.alias_name for a in bob.get_collection_aliases("pub").aliases] == ["pub-view"]
    (entry,) = audit_records(kit)[start:]
    assert entry["op"] == "get_collection_aliases" and entry["verdict"] == "ALLOW"
    assert entry["details"] == {"names_visible": "accessible", "hidden": ["hr"], "hidden_count": 1}


# ------------------------------------------------------------------ reads: _release_refusal

def test_the_release_reason_cache_stays_bounded(tmp_path):
    # Kills readrelease.py _release_refusal's `cache.clear()` deleted: receipts with ever new noise
    # parameters (any writer can sign its own under a trusted key) would grow it without end.
    import dataclasses

    from qdrant_guard.noise import privatize

    kit = make_kit(tmp_path)
    pol_d = {"class": "PII", "owner": "hr", **_OFF,
             "noise": {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}
    alice = QdrantClient(":memory:", guard=kit.config({"pii": pol_d}), principal=kit.principal("alice", "hr"))
    guard, pol = alice.guard, alice.guard.policy("pii")
    _, params = privatize(np.ones((1, DIM), dtype=np.float32) / np.sqrt(DIM), mechanism="gaussian", epsilon=1.0,
                          delta=1e-6, radius=0.01, clip_norm=1.0)
    assert guard._release_refusal(pol, params) == ""
    sizes = []
    for i in range(1, 4200):
        guard._release_refusal(pol, dataclasses.replace(params, radius=0.01 + i * 1e-6))  # each a new key
        sizes.append(len(guard.shared["release_accepted"]))
    # Cleared once past 4096 entries; a cache holding one entry would not be a cache.
    assert max(sizes) == 4097 and sizes[-1] < 4096


# ------------------------------------------------------------------ guard: alias changes, calls on all

_HR = {"class": "PII", "owner": "hr", **_OFF}
_KB = {"class": "PII", "owner": "support", **_OFF}


def _alias_store(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"hr-layoffs-2027": _HR, "layoffs": _HR, "kb": _KB, "kb-view": _KB, "kb-view2": _KB},
                     names_visible="accessible")
    alice = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    for name in ("hr-layoffs-2027", "kb"):
        RawClient.create_collection(alice, name, vectors_config=_VP)
    RawClient.update_collection_aliases(alice, [models.CreateAliasOperation(
        create_alias=models.CreateAlias(collection_name="hr-layoffs-2027", alias_name="layoffs"))])
    return kit, alice, alice.with_principal(kit.principal("bob", "support"))


def _create(collection, alias):
    return models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection, alias_name=alias))


def _rename(old, new):
    return models.RenameAliasOperation(rename_alias=models.RenameAlias(old_alias_name=old, new_alias_name=new))


def test_a_hidden_aliases_rename_never_reaches_qdrant(tmp_path, monkeypatch):
    # Kills guard.py _hidden_rename's `i < first and i not in skipped` -> `or` and `i < first` ->
    # `i <= first` (the hidden alias's own rename, and later actions, would be sent: a server
    # applies a batch's actions in order, so it would rename "layoffs" before the probe fails),
    # and `if not earlier: raise missing` deleted (a probe would be sent for nothing).
    from guardkit import record_sent

    _, alice, bob = _alias_store(tmp_path)
    sent = record_sent(monkeypatch, ("update_collection_aliases",), with_kwargs=True)
    batch = [models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name="layoffs")),  # skipped
             _create("kb", "kb-view"), _rename("layoffs", "kb-view3"), _create("kb", "kb-view2")]
    with pytest.raises(ValueError, match="^Alias layoffs does not exist$"):
        bob.update_collection_aliases(batch)
    (call,) = sent
    ops = call[1]["change_aliases_operations"]
    assert ops[0] == _create("kb", "kb-view") and len(ops) == 2
    assert ops[1].rename_alias.old_alias_name.startswith("qdrant-guard-missing-alias-")
    assert "layoffs" not in repr(ops) and "kb-view2" not in repr(ops)
    sent.clear()
    with pytest.raises(ValueError, match="^Alias layoffs does not exist$"):
        bob.update_collection_aliases([_rename("layoffs", "kb-view3"), _create("kb", "kb-view")])
    assert sent == []
    assert [(a.alias_name, a.collection_name) for a in RawClient.get_aliases(alice).aliases] == [
        ("layoffs", "hr-layoffs-2027")]


def test_a_named_migration_of_a_hidden_collection_is_refused_by_name(tmp_path):
    # Kills guard.py _require_admin_of_all's `listed and self.hides_names()` -> `or`: names the
    # caller gave are the caller's, so the refusal names the collection, as without names_visible.
    kit, alice, bob = _alias_store(tmp_path)
    start = len(audit_records(kit))
    with pytest.raises(Exception) as err:
        bob.migrate(RawClient(":memory:"), collection_names=["hr-layoffs-2027"])
    assert "is not shown" not in str(err.value) and "hr-layoffs-2027" in str(err.value)
    (entry,) = audit_records(kit)[start:]
    assert entry["collection"] == "hr-layoffs-2027" and entry["verdict"] == "REFUSED_CROSS_BOUNDARY"


def test_a_hidden_rename_audits_as_granted_only_the_actions_sent(tmp_path):
    # A defect found in reading _hidden_rename: the actions after the hidden alias's rename are
    # never sent, yet each was audited "admin access granted: alias ... now names it".
    kit, _, bob = _alias_store(tmp_path)
    start = len(audit_records(kit))
    with pytest.raises(ValueError, match="^Alias layoffs does not exist$"):
        bob.update_collection_aliases([_create("kb", "kb-view"), _rename("layoffs", "x"), _create("kb", "kb-view2")])
    got = [(r["collection"], r["verdict"], r["directive"]) for r in audit_records(kit)[start:]]
    assert [g[:2] for g in got] == [("layoffs", "REFUSED_CROSS_BOUNDARY"), ("kb", "ALLOW"), ("kb", "QDRANT_ERROR")]
    assert got[1][2] == "admin access granted: alias 'kb-view' now names it"
    assert not any("kb-view2" in g[2] for g in got)


# ------------------------------------------------------------------ reads: the recorded reason

def test_a_weak_receipt_of_another_model_is_recorded_as_model_mismatch(tmp_path):
    # Kills readrelease.py releasable_vectors' `reason == "noise_shortfall"` -> `!=`: a write checks
    # the model before the noise, and so does the reason a read records.
    from test_read_strip_audit import MODEL_B, Keys, _config, _point, _vector

    kit = make_kit(tmp_path)
    ks = Keys(kit)
    owner = QdrantClient(":memory:", guard=_config(kit, ks), principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    rng = np.random.default_rng(7)
    RawClient.upsert(owner, "pii", [  # around the guard: smaller radius than the policy's
        _point(1, *_vector(rng, ks.guard, 1, radius=0.005, model=MODEL_B)),
        _point(2, *_vector(rng, ks.guard, 2, radius=0.005))])
    bob = owner.with_principal(kit.principal("bob", "support"))
    got = {p.id: p.vector for p in bob.retrieve("pii", [1, 2], with_vectors=True)}
    assert got == {1: None, 2: None}
    note = audit_records(kit)[-1]["details"]["stripped"]
    assert note["reasons"] == {"model_mismatch": 1, "noise_shortfall": 1} and note["count"] == 2


# ------------------------------------------------------------------ payloadops: unsent_result

def test_an_unsent_rewrite_answers_the_status_qdrant_gives_its_wait(tmp_path):
    # Kills payloadops.py unsent_result's `wait is False and remote` -> `or` (local mode), and
    # `wait is False` -> `is not False` / `is True` (a server acknowledges wait=False updates).
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "readers": ["hr"], "writers": ["support"], **_OFF}
    alice = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    RawClient.create_collection(alice, "c", vectors_config=_VP)
    nobody = models.FilterSelector(filter=models.Filter(must=[
        models.FieldCondition(key="team", match=models.MatchValue(value="nobody"))]))
    for wait in (False, True):
        raw = RawClient.clear_payload(alice, "c", points_selector=nobody, wait=wait)  # sent: what local mode says
        got = alice.clear_payload("c", points_selector=nobody, wait=wait)  # matches nothing: not sent
        assert got.status == raw.status == models.UpdateStatus.COMPLETED and got.operation_id is None
    # What a server answers an update sent with wait=False (and with wait=True or unset).
    alice.guard.shared["remote"] = True
    assert alice.guard.unsent_result({"wait": False}).status == models.UpdateStatus.ACKNOWLEDGED
    assert alice.guard.unsent_result({"wait": True}).status == models.UpdateStatus.COMPLETED
    assert alice.guard.unsent_result({}).status == models.UpdateStatus.COMPLETED


# ------------------------------------------------------------------ utility: the record's model name

@pytest.mark.parametrize("blank", ["", " ", "\t\n"])
def test_calibrate_refuses_a_blank_model_name_without_an_embedder(tmp_path, blank):
    # Kills utility.py _embedding_model's "is empty" raise deleted: with vector queries (no
    # embedder to contradict it) a blank name went into a signed record.
    from guardkit import staging_store

    from qdrant_guard import keys
    from qdrant_guard.errors import GuardArgumentValueError
    from qdrant_guard.utility import calibrate

    kit = make_kit(tmp_path)
    raw, _, queries = staging_store()
    with pytest.raises(GuardArgumentValueError, match="'embedding_model' is empty"):
        calibrate(raw, "staging", queries, k=10, radius=0.01, epsilons=(0.1, 2.0), threshold=0.05,
                  signer=keys.load_private_key(kit.guard_key_path), progress=False, seed=1, embedding_model=blank)


# ------------------------------------------------------------------ pipeline: receipt_scope_refusal

def test_a_scoped_collections_unknown_key_refusal_lists_only_its_receipt_keys(tmp_path):
    # Kills callchecks.py receipt_scope_refusal's `k != own and k not in self.retired_keys` -> `or`,
    # `k == own` and `k in self.retired_keys`: the guard's own key and its retired keys are named
    # apart from the listed ones ("the guard's key"), never as receipt_keys entries.
    from pathlib import Path

    from qdrant_guard import GuardRefusal, keys
    from qdrant_guard.noise import privatize
    from qdrant_guard.receipts import (RECEIPT_KEY, ReceiptItem, ReceiptSigner, issue_receipts_batch,
                                       receipts_for_payload, stored_form)

    kit = make_kit(tmp_path)
    a_pub = Path(str(kit.guard_key_path) + ".pub")  # key A: the guard's earlier key, retired
    a_pub.write_text(keys.public_key_to_str(keys.load_private_key(kit.guard_key_path).public_key()) + "\n")
    b_sk, _ = keys.generate_keypair()  # key B: the guard's current key
    b = tmp_path / "guard-b.key"
    b.write_bytes(keys.private_key_to_pem(b_sk))
    b.chmod(0o600)
    out_sk, out_pk = keys.generate_keypair()
    outside, outside_kid = keys.public_key_to_str(out_pk), keys.key_id(out_pk)
    pol = {"class": "PII", "owner": "hr", "noise_on_write": False, "receipt_keys": [outside], **_OFF,
           "noise": {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}
    cfg = kit.config({"scoped": pol}, signing_key=str(b), receipts={"retired_keys": [str(a_pub)]})
    alice = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    RawClient.create_collection(alice, "scoped", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.EUCLID))
    stranger = ReceiptSigner(keys.generate_keypair()[0])
    noised, params = privatize(np.ones((1, DIM), dtype=np.float32) / np.sqrt(DIM), mechanism="gaussian",
                               epsilon=1.0, delta=1e-6, radius=0.01, clip_norm=1.0)
    final = stored_form(noised[0], distance="Euclid")
    rec = issue_receipts_batch(stranger, [ReceiptItem(params=params, vector=final, collection="scoped", point_id=1,
                                                      vector_name="")])[0]
    with pytest.raises(GuardRefusal) as err:
        alice.upsert("scoped", [models.PointStruct(id=1, vector=final.tolist(),
                                                   payload={RECEIPT_KEY: receipts_for_payload({"": rec})})])
    assert f"the keys its receipt_keys lists ({outside_kid}), and this one is signed by" in str(err.value)


def test_a_records_bad_model_value_is_shown_whole_up_to_40_characters(tmp_path):
    # Kills utility.py UtilityRecord.from_json's `len(repr(model)) <= 40` -> `<` / negated, its 40s
    # +-1 and `+ "..."` -> `-`: the refusal shows a bad embedding_model's repr whole up to 40
    # characters and its first 40 with "..." past that (a record file can hold anything).
    from guardkit import staging_record

    from qdrant_guard.errors import GuardArgumentValueError
    from qdrant_guard.utility import UtilityRecord

    kit = make_kit(tmp_path)
    rec, _ = staging_record(kit, tmp_path / "u.json")
    data = json.loads(rec.to_json())
    assert data["version"] == 6
    for model, shown in ((" " * 38, repr(" " * 38)), (" " * 39, repr(" " * 39)[:40] + "..."),
                         (["m"] * 20, repr(["m"] * 20)[:40] + "...")):
        with pytest.raises(GuardArgumentValueError) as err:
            UtilityRecord.from_json(json.dumps({**data, "embedding_model": model}))
        assert f"; got {shown}; re-run" in str(err.value)


def test_an_alias_of_a_visible_name_on_a_hidden_collection_is_answered_as_missing(tmp_path, monkeypatch):
    # Kills guard.py op_update_collection_aliases' `name_visible(old) and name_visible(found)` ->
    # `or`: an alias whose own name the principal may see, made (around the guard) on a collection
    # it may not, would be refused by the collection's name, which names_visible hides.
    from guardkit import record_sent

    kit, alice, bob = _alias_store(tmp_path)
    RawClient.update_collection_aliases(alice, [_create("hr-layoffs-2027", "kb-view")])
    with pytest.raises(ValueError, match="^Alias kb-view does not exist$"):
        bob.update_collection_aliases([_rename("kb-view", "kb-view2")])
    sent = record_sent(monkeypatch, ("update_collection_aliases",))
    assert bob.update_collection_aliases([models.DeleteAliasOperation(
        delete_alias=models.DeleteAlias(alias_name="kb-view"))]) is True
    assert sent == []
    assert {a.alias_name for a in RawClient.get_aliases(alice).aliases} == {"layoffs", "kb-view"}


def test_a_batch_deleting_a_hidden_alias_still_sends_its_other_actions(tmp_path, monkeypatch):
    # Kills guard.py op_update_collection_aliases' `if not kept: return True` negated.
    from guardkit import record_sent

    _, alice, bob = _alias_store(tmp_path)
    sent = record_sent(monkeypatch, ("update_collection_aliases",), with_kwargs=True)
    delete = models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name="layoffs"))
    assert bob.update_collection_aliases([delete, _create("kb", "kb-view")]) is True
    assert [c[1]["change_aliases_operations"] for c in sent] == [[_create("kb", "kb-view")]]
    assert {a.alias_name for a in RawClient.get_aliases(alice).aliases} == {"layoffs", "kb-view"}
    sent.clear()
    assert bob.update_collection_aliases([delete]) is True
    assert sent == []


def test_cluster_telemetrys_audit_entry_says_when_hidden_names_are_left_out(tmp_path):
    # Kills guard.py op_cluster_telemetry's `if self.hides_names()` negated (the entry's words).
    # Server only: as test_names_visible does, the guard's operation is driven with an empty answer.
    from qdrant_guard.pipeline import drive_sync

    kit = make_kit(tmp_path)
    pols = {"hr": {"class": "PII", "owner": "hr", **_OFF}}
    said = {}
    for mode in ("accessible", "all"):
        c = QdrantClient(":memory:", guard=kit.config(pols, names_visible=mode), principal=kit.principal("bob", "support"))
        assert drive_sync(c.guard.run("cluster_telemetry", {}), lambda call: None) is None
        said[mode] = audit_records(kit)[-1]["directive"]
    base = ("cluster telemetry allowed: shards, transfers and reshardings of the collections the principal "
            "may not read are withheld")
    assert said["all"] == base
    assert said["accessible"] == base + ("; collections whose names it may not see are left out "
                                         "(names_visible = \"accessible\")")


# ------------------------------------------------------------------ writes: the refusal's directive

def test_a_refusal_for_a_bad_receipt_keeps_its_own_directive_beside_a_model_mismatch(tmp_path):
    # Kills writeprep.py _prepare_points' `verdict is Verdict.NOISE_REQUIRED and (...)` -> `or`: the
    # model (or mechanism) advice belongs to a NOISE_REQUIRED refusal, not to the INVALID_RECEIPT
    # one a batch's first point raises.
    from test_read_strip_audit import MODEL_B, Keys, _config, _point, _vector

    from qdrant_guard import GuardRefusal

    kit = make_kit(tmp_path)
    ks = Keys(kit)
    alice = QdrantClient(":memory:", guard=_config(kit, ks), principal=kit.principal("alice", "hr"))
    create(alice, "pii", distance=models.Distance.EUCLID)
    rng = np.random.default_rng(4)
    with pytest.raises(GuardRefusal) as err:
        alice.upsert("pii", [_point(1, *_vector(rng, ks.untrusted, 1)), _point(2, *_vector(rng, ks.guard, 2, model=MODEL_B))])
    entry = audit_records(kit)[-1]
    assert entry["verdict"] == "INVALID_RECEIPT" and MODEL_B not in entry["directive"], entry["directive"]
    assert entry["details"]["faults"] == {"INVALID_RECEIPT": ["1"], "NOISE_REQUIRED": ["2"]}
    assert MODEL_B not in str(err.value)


@pytest.mark.parametrize("version", [3, 4])
def test_a_well_formed_record_of_version_3_or_4_is_still_read(tmp_path, version):
    # Kills utility.py UtilityRecord.from_json's version tuple `3` +-1 (left by every older suite):
    # records calibrated before version 5 stay readable (whether they verify is the signature's).
    from guardkit import staging_record

    from qdrant_guard.utility import UtilityRecord

    kit = make_kit(tmp_path)
    rec, _ = staging_record(kit, tmp_path / "u.json")
    data = json.loads(rec.to_json())
    data.pop("embedding_model", None)
    data.pop("n_measured_queries", None)
    if version == 3:
        del data["distance"]
    data["version"] = version
    back = UtilityRecord.from_json(json.dumps(data))
    assert back.version == version and back.embedding_model is None and back.vector_name == rec.vector_name
