"""names_visible: which collection and alias names a principal is told of (h-names, 2026-12-05).

Before: get_collections, collection_exists, get_aliases and get_collection_aliases answered every
name to every principal, and get_collection every collection's configuration, so an agent of the
support boundary could enumerate what the HR boundary keeps ("hr-layoffs-2027"). Now
``names_visible = "accessible"`` answers only the names a principal may read, write or own, and a
hidden name as a missing one, without asking Qdrant. The default ("all") keeps qdrant-client's
answers.

Real local Qdrant (qdrant-client local mode), real keys and credentials.
"""
from __future__ import annotations

import asyncio

import pytest
from guardkit import DIM, audit_records, make_kit, record_sent
from qdrant_client import AsyncQdrantClient as RawAsync
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal, Principal, QdrantClient
from qdrant_guard.policy import config_from_dict

_VP = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
_OFF = {"intent": {"enabled": False}, "diversity": {"enabled": False}}
_HR = {"class": "PII", "owner": "hr", **_OFF}
POLICIES = {
    "hr-layoffs-2027": _HR,                       # hr only
    "layoffs": _HR,                               # an alias of it (same policy, as the guard requires)
    "hr-plans": _HR,                              # hr only, never created
    "kb": {"class": "PII", "owner": "support", **_OFF},                          # support only
    "shared": {"class": "PII", "owner": "hr", "readers": ["support"], **_OFF},   # support reads
    "drop": {"class": "PII", "owner": "hr", "writers": ["support"], **_OFF},     # support writes, not reads
    "pub": {"class": "PUBLIC"},
}
# Created: every listed name but the alias and hr-plans, and "scratch" (unlisted: [default] under
# unlisted = "strict", which any verified principal reads).
CREATED = ["hr-layoffs-2027", "kb", "shared", "drop", "pub", "scratch"]
HR_SEES = {"hr-layoffs-2027", "shared", "drop", "pub", "scratch"}
SUPPORT_SEES = {"kb", "shared", "drop", "pub", "scratch"}


def _store(tmp_path, **extra):
    """alice@hr's client on a store holding CREATED and alias "layoffs" -> hr-layoffs-2027, and
    bob@support's view of it."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    kit = make_kit(tmp_path)
    cfg = kit.config(POLICIES, **extra)
    alice = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    for name in CREATED:
        RawClient.create_collection(alice, name, vectors_config=_VP)
    alice.update_collection_aliases([models.CreateAliasOperation(
        create_alias=models.CreateAlias(collection_name="hr-layoffs-2027", alias_name="layoffs"))])
    return kit, alice, alice.with_principal(kit.principal("bob", "support"))


def _names(client) -> set[str]:
    return {c.name for c in client.get_collections().collections}


def _missing_error(name: str) -> Exception:
    """What qdrant-client's local mode raises for a collection that truly does not exist."""
    raw = RawClient(":memory:")
    with pytest.raises(Exception) as err:
        raw.get_collection(name)
    return err.value


def test_default_answers_every_name_as_qdrant_client_does(tmp_path):
    # Regression guard for the default (unchanged behaviour): passes on the code before as well.
    _, alice, bob = _store(tmp_path)
    assert _names(bob) == set(CREATED) == {c.name for c in RawClient.get_collections(bob).collections}
    assert bob.collection_exists("hr-layoffs-2027") and bob.collection_exists("layoffs")
    assert [(a.alias_name, a.collection_name) for a in bob.get_aliases().aliases] == [("layoffs", "hr-layoffs-2027")]
    assert [a.alias_name for a in bob.get_collection_aliases("hr-layoffs-2027").aliases] == ["layoffs"]
    assert bob.get_collection("hr-layoffs-2027").config.params.vectors.size == DIM
    assert alice.guard.config.names_visible == "all"


def test_accessible_lists_only_what_each_principal_may_read_write_or_own(tmp_path):
    kit, alice, bob = _store(tmp_path, names_visible="accessible")
    assert _names(alice) == HR_SEES
    assert _names(bob) == SUPPORT_SEES
    # No principal, or a boundary only claimed (no credential): PUBLIC collections only; the
    # unlisted "scratch" takes [default], which verified principals read.
    assert _names(alice.with_principal(None)) == {"pub"}
    assert _names(alice.with_principal(Principal("mallory", "hr"))) == {"pub"}
    # The store itself is unchanged.
    assert {c.name for c in RawClient.get_collections(bob).collections} == set(CREATED)


def test_an_expired_credential_sees_what_no_credential_sees(tmp_path):
    kit, alice, _ = _store(tmp_path, names_visible="accessible")
    import time

    stale = alice.with_principal(kit.principal("carol", "hr", ttl_s=60))
    assert "hr-layoffs-2027" in _names(stale)
    stale.guard.clock = lambda: time.time() + 3600  # an hour later: the credential has expired
    assert _names(stale) == {"pub"}
    assert not stale.collection_exists("hr-layoffs-2027")


def test_collection_exists_is_false_for_a_hidden_name_whether_or_not_it_exists(tmp_path, monkeypatch):
    _, alice, bob = _store(tmp_path, names_visible="accessible")
    assert alice.collection_exists("hr-layoffs-2027") and alice.collection_exists("layoffs")
    assert not alice.collection_exists("hr-plans")  # visible, truly missing: Qdrant says so
    sent = record_sent(monkeypatch, ("collection_exists", "get_collection", "get_collection_aliases"))
    assert bob.collection_exists("hr-layoffs-2027") is False
    assert bob.collection_exists("layoffs") is False
    assert bob.collection_exists("hr-plans") is False
    assert sent == []  # answered from the policy: nothing about the store reached the answer
    assert bob.collection_exists("shared") and bob.collection_exists("drop") and bob.collection_exists("pub")
    assert not alice.with_principal(None).collection_exists("scratch")


def test_hidden_and_missing_collections_get_the_same_error(tmp_path, monkeypatch):
    _, alice, bob = _store(tmp_path, names_visible="accessible")
    names = ("hr-layoffs-2027", "layoffs", "hr-plans")
    # What a store without the name answers (asked before the recording starts).
    missing = {n: (_missing_error(n), RawClient(":memory:").get_collection_aliases(n)) for n in names}
    sent = record_sent(monkeypatch, ("get_collection", "get_collection_aliases"))
    for name in names:
        with pytest.raises(Exception) as hidden:
            bob.get_collection(name)
        error, aliases = missing[name]
        assert type(hidden.value) is type(error) and str(hidden.value) == str(error) == f"Collection {name} not found"
        assert not isinstance(hidden.value, GuardRefusal)
        assert bob.get_collection_aliases(name) == aliases
        assert aliases.aliases == []
    assert sent == []  # nothing about the store reached the answers
    # The principals who may see it still get its configuration.
    assert alice.get_collection("hr-layoffs-2027").config.params.vectors.size == DIM
    assert [a.alias_name for a in alice.get_collection_aliases("hr-layoffs-2027").aliases] == ["layoffs"]


def test_readers_writers_and_owners_keep_their_answers(tmp_path):
    _, alice, bob = _store(tmp_path, names_visible="accessible")
    assert bob.get_collection("shared").config.params.vectors.size == DIM  # reader
    drop = bob.get_collection("drop")  # writer who may not read: the configuration without counts
    assert drop.config.params.vectors.size == DIM and drop.points_count is None
    assert bob.get_collection("kb").points_count == 0  # owner
    assert alice.get_collection("drop").points_count == 0
    assert bob.get_collection("pub").points_count == 0


def test_aliases_are_listed_only_when_both_names_are_visible(tmp_path):
    _, alice, bob = _store(tmp_path, names_visible="accessible")
    # Aliases made around the guard: a PUBLIC collection under an hr-only name, and hr's
    # collection under an unlisted name (both are what the guard's alias rule would refuse).
    RawClient.update_collection_aliases(alice, [
        models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name="pub", alias_name="hr-plans")),
        models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name="hr-layoffs-2027",
                                                                    alias_name="scratch-view")),
        models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name="pub", alias_name="pub-view")),
    ])
    pairs = lambda c: {(a.alias_name, a.collection_name) for a in c.get_aliases().aliases}  # noqa: E731
    assert pairs(alice) == {("layoffs", "hr-layoffs-2027"), ("hr-plans", "pub"), ("scratch-view", "hr-layoffs-2027"),
                            ("pub-view", "pub")}
    assert pairs(bob) == {("pub-view", "pub")}
    assert pairs(alice.with_principal(None)) == set()  # "pub-view" is an unlisted ([default]) name
    assert [a.alias_name for a in bob.get_collection_aliases("pub").aliases] == ["pub-view"]
    assert {a.alias_name for a in alice.get_collection_aliases("pub").aliases} == {"hr-plans", "pub-view"}


def test_hidden_answers_are_audited(tmp_path):
    kit, _, bob = _store(tmp_path, names_visible="accessible")
    start = len(audit_records(kit))
    bob.get_collections()
    bob.collection_exists("hr-layoffs-2027")
    with pytest.raises(ValueError):
        bob.get_collection("hr-plans")
    bob.get_collection_aliases("layoffs")
    bob.get_aliases()
    recs = audit_records(kit)[start:]
    listed = recs[0]
    assert listed["op"] == "get_collections" and listed["verdict"] == "ALLOW"
    assert listed["details"]["hidden"] == ["hr-layoffs-2027"] and listed["details"]["hidden_count"] == 1
    hidden = [(r["op"], r["collection"], r["verdict"], r["details"]["answered"]) for r in recs[1:4]]
    assert hidden == [("collection_exists", "hr-layoffs-2027", "REFUSED_CROSS_BOUNDARY", "False"),
                      ("get_collection", "hr-plans", "REFUSED_CROSS_BOUNDARY", "as not found"),
                      ("get_collection_aliases", "layoffs", "REFUSED_CROSS_BOUNDARY", "with no aliases")]
    assert recs[4]["op"] == "get_aliases" and recs[4]["details"]["hidden"] == ["layoffs"]


def test_unlisted_under_refuse_is_hidden_from_everyone(tmp_path):
    _, alice, bob = _store(tmp_path, names_visible="accessible", unlisted="refuse")
    assert "scratch" not in _names(alice) and "scratch" not in _names(bob)
    assert not alice.collection_exists("scratch")
    with pytest.raises(ValueError, match=r"^Collection scratch not found$"):
        alice.get_collection("scratch")
    with pytest.raises(ConfigError, match="unlisted"):  # every other call keeps its refusal
        alice.count("scratch")


def test_create_of_a_hidden_name_is_refused_alike_whether_it_exists_or_not(tmp_path):
    # The refusal is decided from the policy before Qdrant is asked, so it is the same for the
    # existing hr-layoffs-2027 and the never-created hr-plans (both hr-only): it says nothing of
    # the store. (Regression guard: holds on the code before as well.)
    _, alice, bob = _store(tmp_path, names_visible="accessible")
    for method in ("create_collection", "recreate_collection"):
        msgs = []
        for name in ("hr-layoffs-2027", "hr-plans"):
            with pytest.raises(GuardRefusal) as err:
                getattr(bob, method)(name, vectors_config=_VP)
            msgs.append(str(err.value).replace(name, "NAME"))
        assert msgs[0] == msgs[1]
    assert not RawClient.collection_exists(bob, "hr-plans")


def test_async_client_answers_alike(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config(POLICIES, names_visible="accessible")

    async def main():
        alice = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        for name in CREATED:
            await RawAsync.create_collection(alice, name, vectors_config=_VP)
        await alice.update_collection_aliases([models.CreateAliasOperation(
            create_alias=models.CreateAlias(collection_name="hr-layoffs-2027", alias_name="layoffs"))])
        bob = alice.with_principal(kit.principal("bob", "support"))
        out = {
            "alice": {c.name for c in (await alice.get_collections()).collections},
            "bob": {c.name for c in (await bob.get_collections()).collections},
            "exists": (await bob.collection_exists("hr-layoffs-2027"), await alice.collection_exists("layoffs")),
            "aliases": ([a.alias_name for a in (await bob.get_aliases()).aliases],
                        [a.alias_name for a in (await alice.get_aliases()).aliases]),
            "coll_aliases": (await bob.get_collection_aliases("hr-layoffs-2027")).aliases,
        }
        try:
            await bob.get_collection("hr-layoffs-2027")
        except Exception as exc:  # noqa: BLE001 - compared below
            out["error"] = exc
        await alice.close()
        return out

    out = asyncio.run(main())
    assert out["alice"] == HR_SEES and out["bob"] == SUPPORT_SEES
    assert out["exists"] == (False, True)
    assert out["aliases"] == ([], ["layoffs"]) and out["coll_aliases"] == []
    missing = _missing_error("hr-layoffs-2027")
    assert type(out["error"]) is type(missing) and str(out["error"]) == str(missing)


@pytest.mark.parametrize("bad", ["none", "ALL", True, ["all"]])
def test_a_bad_value_names_the_knob_and_its_values(bad):
    with pytest.raises(ConfigError) as err:
        config_from_dict({"names_visible": bad}, source="p.toml")
    msg = str(err.value)
    assert "names_visible" in msg and "'all'" in msg and "'accessible'" in msg and "p.toml" in msg


def test_the_policy_file_takes_the_knob(tmp_path):
    from qdrant_guard.policy import load_policy

    p = tmp_path / "policy.toml"
    p.write_text('names_visible = "accessible"\n')
    assert load_policy(p).names_visible == "accessible"
    p.write_text('names_visible = "some"\n')
    with pytest.raises(ConfigError, match=r"names_visible = 'some'.*'all' or 'accessible'"):
        load_policy(p)


def test_alias_changes_answer_a_hidden_alias_as_a_missing_one(tmp_path):
    # Before: deleting or renaming "layoffs" was refused, naming the hidden collection it points
    # to ("may not administer PII collection 'hr-layoffs-2027'"), while a missing alias passed:
    # the refusal said that the alias existed and what it named.
    kit, alice, bob = _store(tmp_path, names_visible="accessible")

    def delete(client, name):
        return client.update_collection_aliases([models.DeleteAliasOperation(
            delete_alias=models.DeleteAlias(alias_name=name))])

    def rename(client, old):
        return client.update_collection_aliases([models.RenameAliasOperation(
            rename_alias=models.RenameAlias(old_alias_name=old, new_alias_name="kb-view"))])

    assert delete(bob, "layoffs") is True and delete(bob, "ghost") is True
    assert ("layoffs", "hr-layoffs-2027") in {(a.alias_name, a.collection_name)
                                              for a in RawClient.get_aliases(bob).aliases}  # untouched
    raw = RawClient(":memory:")
    with pytest.raises(Exception) as absent:
        raw.update_collection_aliases([models.RenameAliasOperation(
            rename_alias=models.RenameAlias(old_alias_name="layoffs", new_alias_name="kb-view"))])
    with pytest.raises(Exception) as hidden:
        rename(bob, "layoffs")
    assert type(hidden.value) is type(absent.value) and str(hidden.value) == str(absent.value)
    assert "hr-layoffs-2027" not in str(hidden.value)
    entry = [r for r in audit_records(kit) if r["op"] == "update_collection_aliases"][-1]
    assert entry["verdict"] == "REFUSED_CROSS_BOUNDARY" and entry["details"]["answered"] == "as a missing alias"
    # Its owner still manages it.
    assert delete(alice, "layoffs") is True
    assert RawClient.get_aliases(bob).aliases == []


def test_alias_changes_are_unchanged_by_default(tmp_path):
    # Regression guard for the default: the refusal names the collection, as before.
    _, _, bob = _store(tmp_path)
    with pytest.raises(GuardRefusal, match="hr-layoffs-2027"):
        bob.update_collection_aliases([models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name="layoffs"))])


def _telemetry(names):
    """A server's cluster telemetry listing ``names`` (one shard each), built of qdrant-client models."""
    def coll(name):
        replica = models.DistributedReplicaTelemetry(peer_id=1, state=models.ReplicaState.ACTIVE, num_points=3,
                                                     num_vectors=3, payloads_size_bytes=300)
        return models.DistributedCollectionTelemetry(
            id=name, shards=[models.DistributedShardTelemetry(id=0, key=None, replicas=[replica])], shard_transfers=[])
    return models.DistributedTelemetryData(collections={n: coll(n) for n in names})


def test_cluster_telemetry_leaves_hidden_collections_out(tmp_path):
    # Server only: local mode has no telemetry, so the guard's operation (the one a url= client
    # runs) is driven with a server's answer. Before, a collection the principal may not read kept
    # its name there.
    from qdrant_guard.pipeline import drive_sync

    _, alice, bob = _store(tmp_path, names_visible="accessible")
    answer = _telemetry(CREATED)
    shown = drive_sync(bob.guard.run("cluster_telemetry", {}), lambda call: answer).collections
    assert set(shown) == SUPPORT_SEES
    assert shown["drop"].shards is None and shown["shared"].shards[0].replicas[0].num_points == 3
    assert set(drive_sync(alice.guard.run("cluster_telemetry", {}), lambda call: answer).collections) == HR_SEES
    # Default: every name, counts only of readable ones (unchanged).
    _, _, bob_all = _store(tmp_path / "all")
    shown = drive_sync(bob_all.guard.run("cluster_telemetry", {}), lambda call: answer).collections
    assert set(shown) == set(CREATED) and shown["hr-layoffs-2027"].shards is None


@pytest.mark.parametrize("method", ["create_full_snapshot", "migrate"])
def test_a_call_on_every_collection_is_refused_without_naming_hidden_ones(tmp_path, method):
    # Before, the refusal named the first collection of the store the principal could not
    # administer ("may not administer PII collection 'hr-layoffs-2027'").
    kit, _, bob = _store(tmp_path, names_visible="accessible")
    call = (lambda: bob.create_full_snapshot()) if method == "create_full_snapshot" else \
        (lambda: bob.migrate(RawClient(":memory:")))
    with pytest.raises(GuardRefusal) as err:
        call()
    assert "hr-layoffs-2027" not in str(err.value) and "names_visible" in str(err.value)
    entry = audit_records(kit)[-1]
    assert entry["op"] == method and entry["verdict"] == "REFUSED_CROSS_BOUNDARY"
    assert entry["details"]["hidden"] == ["hr-layoffs-2027"]
    _, _, bob_all = _store(tmp_path / "all")  # default: unchanged, the refusal names it
    with pytest.raises(GuardRefusal, match="hr-layoffs-2027"):
        (bob_all.create_full_snapshot() if method == "create_full_snapshot" else bob_all.migrate(RawClient(":memory:")))
