"""collections.NAME.receipt_keys: which outside keys may sign receipts for one collection.

Before it, a key in receipts.trusted_keys signed receipts every sensitive collection of the policy
accepted (docs/threat-model.md). Real local-mode Qdrant, real Ed25519 keys, receipts signed the way
an outside writer signs them (docs/receipt-format.md, "Writing with a receipt of your own").
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient as RawAsyncClient
from qdrant_client import QdrantClient as RawClient

from guardkit import DIM, count, create, make_kit, models, unit
from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal, QdrantClient, keys
from qdrant_guard.cli import main
from qdrant_guard.noise import privatize
from qdrant_guard.policy import load_policy
from qdrant_guard.receipts import (RECEIPT_KEY, ReceiptItem, ReceiptSigner, issue_receipts_batch,
                                   receipts_for_payload, stored_form)


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def writers():
    """Two outside writers' key pairs, "a" and "b"."""
    return {n: keys.generate_keypair() for n in ("a", "b")}


def _pub(writers, n):
    return keys.public_key_to_str(writers[n][1])


def _kid(writers, n):
    return keys.key_id(writers[n][1])


def _coll(**over):
    base = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "noise_on_write": False,
            "intent": {"enabled": False}, "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}
    base.update(over)
    return base


def _cfg(kit, a=None, b=None, *, trusted=(), revoked=()):
    """Collections "a" and "b", alike but for their receipt_keys (None: unset)."""
    colls = {"a": _coll(**({} if a is None else {"receipt_keys": list(a)})),
             "b": _coll(**({} if b is None else {"receipt_keys": list(b)}))}
    return kit.config(colls, receipts={"trusted_keys": list(trusted), "revoked_keys": list(revoked)})


def _clients(kit, cfg, *, path=None):
    where = {"path": str(path)} if path else {"location": ":memory:"}
    owner = QdrantClient(**where, guard=cfg, principal=kit.principal("alice", "hr"))
    for name in ("a", "b"):
        create(owner, name)
    return owner, owner.with_principal(kit.principal("bob", "support"))


def _point(writers, n, collection, point_id, rng):
    """A point noised and receipted by outside writer ``n`` for ``collection``."""
    noised, params = privatize(np.asarray(unit(rng), dtype=np.float32), mechanism="gaussian", epsilon=1.0,
                               delta=1e-6, radius=0.01, clip_norm=1.0)
    final = stored_form(noised, distance="Cosine")
    rec = issue_receipts_batch(ReceiptSigner(writers[n][0]), [ReceiptItem(
        params=params, vector=final, collection=collection, point_id=point_id, vector_name="")])[0]
    return models.PointStruct(id=point_id, vector=final.tolist(),
                              payload={"source": "s", RECEIPT_KEY: receipts_for_payload({"": rec})})


def _refused_out_of_scope(ei, writers, n, collection):
    err = ei.value
    assert err.verdict == "INVALID_RECEIPT"
    msg = str(err)
    assert repr(collection) in msg and _kid(writers, n) in msg and "receipt_keys" in msg, msg
    assert f"[collections.{collection}]" in msg, msg  # where the fix goes
    assert all(r.startswith("unknown_key: ") for r in err.details["reasons"].values()), err.details


# -- writes ------------------------------------------------------------------------------------

def test_a_key_scoped_to_a_writes_a_and_is_refused_on_b(kit, writers):
    # Both keys are in receipts.trusted_keys; each collection names its own. Before: a's key
    # wrote b too (trusted_keys applied to every collection).
    rng = np.random.default_rng(1)
    cfg = _cfg(kit, a=[_pub(writers, "a")], b=[_pub(writers, "b")], trusted=[_pub(writers, "a"), _pub(writers, "b")])
    _, bob = _clients(kit, cfg)
    bob.upsert("a", [_point(writers, "a", "a", 1, rng)])
    bob.upsert("b", [_point(writers, "b", "b", 1, rng)])
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("b", [_point(writers, "a", "b", 2, rng)])
    _refused_out_of_scope(ei, writers, "a", "b")
    assert "receipts.trusted_keys lists it" in str(ei.value)
    assert count(bob, "a") == 1 and count(bob, "b") == 1  # nothing of the refused call was written


def test_a_key_listed_only_for_a_is_trusted_for_a_alone(kit, writers):
    # Not in receipts.trusted_keys at all: the per-collection list is trust for that collection.
    rng = np.random.default_rng(2)
    cfg = _cfg(kit, a=[_pub(writers, "a")])
    _, bob = _clients(kit, cfg)
    bob.upsert("a", [_point(writers, "a", "a", 1, rng)])
    assert count(bob, "a") == 1
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("b", [_point(writers, "a", "b", 1, rng)])  # b sets no scope: trusted_keys (empty) apply
    assert ei.value.verdict == "INVALID_RECEIPT"
    assert ei.value.details["reasons"] == {"1": "unknown_key"}
    assert count(bob, "b") == 0


def test_unset_receipt_keys_keep_trusted_keys_for_every_collection(kit, writers):
    rng = np.random.default_rng(3)
    cfg = _cfg(kit, trusted=[_pub(writers, "a")])
    _, bob = _clients(kit, cfg)
    bob.upsert("a", [_point(writers, "a", "a", 1, rng)])
    bob.upsert("b", [_point(writers, "a", "b", 1, rng)])
    assert count(bob, "a") == 1 and count(bob, "b") == 1
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("b", [_point(writers, "b", "b", 2, rng)])  # never trusted
    assert ei.value.details["reasons"] == {"2": "unknown_key"}
    assert "receipts.trusted_keys" in ei.value.directive


def test_empty_receipt_keys_refuse_every_outside_key_and_keep_the_guards_own(kit, writers):
    rng = np.random.default_rng(4)
    colls = {"a": _coll(receipt_keys=[], noise_on_write=True), "b": _coll()}
    cfg = kit.config(colls, receipts={"trusted_keys": [_pub(writers, "a")]})
    owner, bob = _clients(kit, cfg)
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("a", [_point(writers, "a", "a", 1, rng)])
    _refused_out_of_scope(ei, writers, "a", "a")
    assert "(none)" in str(ei.value)
    bob.upsert("a", [models.PointStruct(id=2, vector=unit(rng), payload={"source": "s"})])  # the guard noises
    (got,) = bob.retrieve("a", [2], with_vectors=True)
    assert got.vector is not None  # its own receipt verifies on the read
    bob.upsert("b", [_point(writers, "a", "b", 1, rng)])  # b is unscoped


def test_a_revoked_key_stays_refused_when_listed_for_the_collection(kit, writers):
    rng = np.random.default_rng(5)
    cfg = _cfg(kit, a=[_pub(writers, "a")], revoked=[_kid(writers, "a")])
    _, bob = _clients(kit, cfg)
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("a", [_point(writers, "a", "a", 1, rng)])
    assert ei.value.details["reasons"] == {"1": "revoked_key"}
    assert count(bob, "a") == 0


def _upload_points(c, name, p):
    c.upload_points(name, [p])


def _upload_collection(c, name, p):
    c.upload_collection(name, vectors=[p.vector], payload=[p.payload], ids=[p.id])


def _batch_upsert(c, name, p):
    c.batch_update_points(name, [models.UpsertOperation(upsert=models.PointsList(points=[p]))])


def _batch_columns(c, name, p):
    c.upsert(name, models.Batch(ids=[p.id], vectors=[p.vector], payloads=[p.payload]))


@pytest.mark.parametrize("write", [_upload_points, _upload_collection, _batch_upsert, _batch_columns])
def test_every_write_path_applies_the_scope(kit, writers, write):
    rng = np.random.default_rng(6)
    cfg = _cfg(kit, a=[_pub(writers, "a")], b=[_pub(writers, "b")], trusted=[_pub(writers, "a")])
    _, bob = _clients(kit, cfg)
    write(bob, "a", _point(writers, "a", "a", 1, rng))
    assert count(bob, "a") == 1
    with pytest.raises(GuardRefusal) as ei:
        write(bob, "b", _point(writers, "a", "b", 1, rng))
    _refused_out_of_scope(ei, writers, "a", "b")
    assert count(bob, "b") == 0


def test_mixed_refusals_keep_the_generic_advice_for_the_other_receipts(kit, writers):
    rng = np.random.default_rng(7)
    cfg = _cfg(kit, b=[_pub(writers, "b")], trusted=[_pub(writers, "a")])
    _, bob = _clients(kit, cfg)
    flipped = _point(writers, "b", "b", 2, rng)
    flipped.vector[0] = -flipped.vector[0]
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("b", [_point(writers, "a", "b", 1, rng), flipped])
    msg = str(ei.value)
    assert _kid(writers, "a") in msg and "other receipts:" in msg and "forged, altered" in msg
    assert ei.value.details["reasons"]["2"] == "vector_mismatch"
    assert count(bob, "b") == 0


# -- reads -------------------------------------------------------------------------------------

def test_reads_strip_vectors_whose_receipt_the_scope_refuses(kit, writers):
    # A vector can reach the store around the guard (or before the scope was set): a read outside
    # the owner boundary releases it only under a key the collection accepts.
    rng = np.random.default_rng(8)
    cfg = _cfg(kit, b=[_pub(writers, "b")], trusted=[_pub(writers, "a"), _pub(writers, "b")])
    owner, bob = _clients(kit, cfg)
    RawClient.upsert(owner, "b", [_point(writers, "a", "b", 1, rng), _point(writers, "b", "b", 2, rng)])
    RawClient.upsert(owner, "a", [_point(writers, "a", "a", 1, rng)])
    got = {r.id: r.vector is not None for r in bob.retrieve("b", [1, 2], with_vectors=True)}
    assert got == {1: False, 2: True}
    hits = bob.query_points("b", query=unit(rng), limit=5, with_vectors=True).points
    assert {h.id: h.vector is not None for h in hits} == {1: False, 2: True}
    (a1,) = bob.retrieve("a", [1], with_vectors=True)
    assert a1.vector is not None  # a is unscoped: trusted_keys apply


# -- async -------------------------------------------------------------------------------------

def test_async_client_applies_the_scope_to_writes_and_reads(kit, writers):
    cfg = _cfg(kit, a=[_pub(writers, "a")], b=[_pub(writers, "b")], trusted=[_pub(writers, "a")])

    async def run():
        rng = np.random.default_rng(9)
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        for name in ("a", "b"):
            await owner.create_collection(name, vectors_config=models.VectorParams(
                size=DIM, distance=models.Distance.COSINE))
        bob = owner.with_principal(kit.principal("bob", "support"))
        await bob.upsert("a", [_point(writers, "a", "a", 1, rng)])
        with pytest.raises(GuardRefusal) as ei:
            await bob.upsert("b", [_point(writers, "a", "b", 1, rng)])
        _refused_out_of_scope(ei, writers, "a", "b")
        with pytest.raises(GuardRefusal) as ei:
            await bob.upload_points("b", [_point(writers, "a", "b", 1, rng)])
        _refused_out_of_scope(ei, writers, "a", "b")
        # Around the guard: the async read strips it all the same.
        await RawAsyncClient.upsert(owner, "b", [_point(writers, "a", "b", 3, rng), _point(writers, "b", "b", 4, rng)])
        got = {r.id: r.vector is not None for r in await bob.retrieve("b", [3, 4], with_vectors=True)}
        assert got == {3: False, 4: True}
        (a1,) = await bob.retrieve("a", [1], with_vectors=True)
        assert a1.vector is not None
        await owner.close()

    asyncio.run(run())


# -- the policy --------------------------------------------------------------------------------

def _policy_file(kit, tmp_path: Path, receipt_keys: str, *, cls: str = "PII") -> Path:
    guard = tmp_path / "keys" / "guard.key"
    guard.parent.mkdir(exist_ok=True)
    guard.write_bytes(kit.guard_key_path.read_bytes())
    guard.chmod(0o600)
    bounds = "".join(f'[boundaries.{b}]\nauthority_keys = ["{pub}"]\n' for b, pub in kit.authority_pub.items())
    extra = ('owner = "hr"\nreaders = ["support"]\nwriters = ["support"]\nnoise_on_write = false\n'
             '[collections.a.intent]\nenabled = false\n') if cls != "PUBLIC" else ""
    text = (f'signing_key = "keys/guard.key"\n{bounds}'
            f'[collections.a]\nclass = "{cls}"\nreceipt_keys = {receipt_keys}\n{extra}')
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def test_receipt_keys_are_files_relative_to_the_policy_file(kit, writers, tmp_path, monkeypatch):
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "a.pub").write_text(_pub(writers, "a") + "\n")
    path = _policy_file(kit, tmp_path, '["keys/a.pub"]')
    monkeypatch.chdir("/")
    cfg = load_policy(path)
    assert cfg.collections["a"].receipt_keys == (str(tmp_path / "keys" / "a.pub"),)
    rng = np.random.default_rng(10)
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "a")
    bob = owner.with_principal(kit.principal("bob", "support"))
    bob.upsert("a", [_point(writers, "a", "a", 1, rng)])
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("a", [_point(writers, "b", "a", 2, rng)])
    _refused_out_of_scope(ei, writers, "b", "a")


@pytest.mark.parametrize("listed, needles", [
    ('["keys/missing.pub"]', ["collections.a.receipt_keys:", "missing.pub"]),
    ('["ed25519:not-a-key"]', ["collections.a.receipt_keys:", "ed25519"]),
])
def test_a_receipt_key_that_does_not_load_fails_the_client_naming_the_key(kit, tmp_path, listed, needles):
    cfg = load_policy(_policy_file(kit, tmp_path, listed))
    with pytest.raises(ConfigError) as ei:
        QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    msg = str(ei.value)
    assert all(n in msg for n in needles) and "unknown key" not in msg, msg


@pytest.mark.parametrize("listed, cls, needles", [
    ('[""]', "PII", ["collections.a.receipt_keys", "entry 0 is empty", "ed25519:<base64>"]),
    ('"keys/a.pub"', "PII", ["collections.a.receipt_keys", "expected a list", 'receipt_keys = ["keys/a.pub"]']),
    ("[]", "PUBLIC", ["PUBLIC", "receipt_keys", "would be ignored"]),
])
def test_policy_load_errors_name_the_key_and_the_fix(kit, tmp_path, listed, cls, needles):
    with pytest.raises(ConfigError) as ei:
        load_policy(_policy_file(kit, tmp_path, listed, cls=cls))
    msg = str(ei.value)
    assert all(n in msg for n in needles) and "unknown key" not in msg, msg


# -- the offline verifier ----------------------------------------------------------------------

def test_cli_receipt_verify_with_the_policy_applies_the_scope(kit, writers, tmp_path, capsys):
    (tmp_path / "keys").mkdir()
    for n in ("a", "b"):
        (tmp_path / "keys" / f"{n}.pub").write_text(_pub(writers, n) + "\n")
    path = _policy_file(kit, tmp_path, '["keys/b.pub"]')
    path.write_text(path.read_text().replace('signing_key = "keys/guard.key"\n',
                                             'signing_key = "keys/guard.key"\n[receipts]\n'
                                             'trusted_keys = ["keys/a.pub", "keys/b.pub"]\n'))
    store = tmp_path / "store"
    raw = RawClient(path=str(store))
    raw.create_collection("a", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    rng = np.random.default_rng(11)
    raw.upsert("a", [_point(writers, "a", "a", 1, rng), _point(writers, "b", "a", 2, rng)])
    raw.close()
    rc = main(["receipt", "verify", "--path", str(store), "--collection", "a", "--policy", str(path)])
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert rc == 1
    assert [(x["id"], x["reason"]) for x in lines] == [("1", "unknown_key")], out


def test_the_default_section_scopes_unlisted_collections(kit, writers):
    rng = np.random.default_rng(12)
    cfg = kit.config({}, unlisted="strict", default=_coll(readers=["*"], receipt_keys=[_pub(writers, "a")]),
                     receipts={"trusted_keys": [_pub(writers, "b")]})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "c")
    bob = owner.with_principal(kit.principal("bob", "support"))
    bob.upsert("c", [_point(writers, "a", "c", 1, rng)])
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("c", [_point(writers, "b", "c", 2, rng)])
    msg = str(ei.value)
    assert "'c'" in msg and _kid(writers, "b") in msg and "receipt_keys in [default]" in msg, msg
    assert count(bob, "c") == 1


def test_an_alias_cannot_carry_a_scoped_collection_under_an_unscoped_policy(kit, writers):
    # An alias must carry its collection's policy; receipt_keys are part of it, so no alias name
    # reaches a scoped collection under trusted_keys.
    rng = np.random.default_rng(13)
    colls = {"a": _coll(receipt_keys=[_pub(writers, "a")]), "al": _coll(), "same": _coll(receipt_keys=[_pub(writers, "a")])}
    cfg = kit.config(colls, receipts={"trusted_keys": [_pub(writers, "b")]})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "a")
    with pytest.raises(GuardRefusal) as ei:
        owner.update_collection_aliases([models.CreateAliasOperation(
            create_alias=models.CreateAlias(collection_name="a", alias_name="al"))])
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    owner.update_collection_aliases([models.CreateAliasOperation(
        create_alias=models.CreateAlias(collection_name="a", alias_name="same"))])
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("same", [_point(writers, "b", "same", 1, rng)])
    _refused_out_of_scope(ei, writers, "b", "same")
    bob.upsert("same", [_point(writers, "a", "same", 1, rng)])
    assert count(bob, "a") == 1
