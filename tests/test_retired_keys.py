"""receipts.retired_keys: the guard's own earlier signing keys, trusted wherever its current key is.

Before it, rotating ``signing_key`` meant listing the old key's .pub in receipts.trusted_keys, in the
receipt_keys of every collection that sets them, and in audit_trusted_keys: one list forgotten, and
that collection's vectors were stripped from reads, its utility record refused, or the guard refused
to reopen its audit log. Real local-mode Qdrant on disk (the store outlives the rotation), real
Ed25519 keys, receipts and utility records signed by the guard itself.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from guardkit import DIM, create, make_kit, models, staging_record, unit
from qdrant_guard import ConfigError, QdrantClient, keys
from qdrant_guard.audit import AuditIntegrityError, AuditLog
from qdrant_guard.cli import main
from qdrant_guard.policy import load_policy
from qdrant_guard.receipts import ReceiptSigner

UDIM = 32  # the staging store's dimension, for the utility-record tests


def _coll(**over):
    base = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
            "diversity": {"enabled": False}, "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}
    base.update(over)
    return base


@pytest.fixture()
def rot(tmp_path):
    """A kit whose guard key A (kit.guard_key_path) wrote first, a second guard key B, both .pub
    files, and an outside writer's key that collection "scoped" lists as its receipt_keys."""
    kit = make_kit(tmp_path)
    a_pub = Path(str(kit.guard_key_path) + ".pub")
    a_pub.write_text(keys.public_key_to_str(keys.load_private_key(kit.guard_key_path).public_key()) + "\n")
    b_sk, b_pk = keys.generate_keypair()
    b = tmp_path / "guard-b.key"
    b.write_bytes(keys.private_key_to_pem(b_sk))
    b.chmod(0o600)
    Path(str(b) + ".pub").write_text(keys.public_key_to_str(b_pk) + "\n")
    outside = keys.public_key_to_str(keys.generate_keypair()[1])
    return {"kit": kit, "a": kit.guard_key_path, "a_pub": a_pub, "a_kid": keys.key_id(keys.load_public_key(a_pub)),
            "b": b, "b_kid": keys.key_id(b_pk), "outside": outside, "store": tmp_path / "store"}


def _colls(rot):
    # "plain" takes receipts.trusted_keys; "scoped" sets receipt_keys, which replace them for it.
    return {"plain": _coll(), "scoped": _coll(receipt_keys=[rot["outside"]])}


def _cfg(rot, key, audit_log=None, **receipts):
    extra = {} if audit_log is None else {"audit_log": str(audit_log)}
    return rot["kit"].config(_colls(rot), signing_key=str(key), receipts=receipts, **extra)


def _write_under_a(rot):
    """alice@hr writes points 1-3 to both collections through a guard signing with key A (noised,
    receipted by A), on a store on disk."""
    kit = rot["kit"]
    c = QdrantClient(path=str(rot["store"]), guard=_cfg(rot, rot["a"]), principal=kit.principal("alice", "hr"))
    rng = np.random.default_rng(0)
    for name in ("plain", "scoped"):
        create(c, name)
        c.upsert(name, [models.PointStruct(id=i, vector=unit(rng), payload={"source": "s"}) for i in (1, 2, 3)])
    c.close()


def _released(rot, cfg):
    """Which collections release point vectors to bob@support under ``cfg`` (retrieve and query)."""
    kit = rot["kit"]
    c = QdrantClient(path=str(rot["store"]), guard=cfg, principal=kit.principal("alice", "hr"))
    try:
        bob = c.with_principal(kit.principal("bob", "support"))
        out = {}
        for name in ("plain", "scoped"):
            got = [r.vector is not None for r in bob.retrieve(name, [1, 2, 3], with_vectors=True)]
            hits = bob.query_points(name, query=unit(np.random.default_rng(1)), limit=3, with_vectors=True).points
            got += [h.vector is not None for h in hits]
            assert len(got) == 6
            out[name] = all(got) if all(got) or not any(got) else got
        return out
    finally:
        c.close()


# -- reads ---------------------------------------------------------------------------------------

def test_after_rotation_a_retired_key_keeps_every_collections_vectors_readable(rot):
    _write_under_a(rot)
    cfg = _cfg(rot, rot["b"], retired_keys=[str(rot["a_pub"])])
    assert _released(rot, cfg) == {"plain": True, "scoped": True}


def test_without_the_knob_the_old_keys_vectors_are_stripped(rot):
    # The old behaviour stands when the knob is unset, and trusted_keys alone misses the collection
    # that sets receipt_keys: the trap retired_keys removes.
    _write_under_a(rot)
    # A guard under key B that does not trust A also refuses A's entries in the audit log (its
    # first checkpoint would sign them: tests/test_audit_writer_macs.py), naming the fix; the reads
    # below go to a log of their own.
    with pytest.raises(AuditIntegrityError, match=f"If {rot['a_kid']} is an earlier signing key of this guard"):
        QdrantClient(path=str(rot["store"]), guard=_cfg(rot, rot["b"]), principal=rot["kit"].principal("alice", "hr"))
    own_log = rot["kit"].tmp / "audit-b.jsonl"
    assert _released(rot, _cfg(rot, rot["b"], own_log)) == {"plain": False, "scoped": False}
    trusted_only = _cfg(rot, rot["b"], own_log, trusted_keys=[str(rot["a_pub"])])
    assert _released(rot, trusted_only) == {"plain": True, "scoped": False}


def test_writes_under_the_new_key_still_verify_beside_the_old(rot):
    _write_under_a(rot)
    cfg = _cfg(rot, rot["b"], retired_keys=[str(rot["a_pub"])])
    kit = rot["kit"]
    c = QdrantClient(path=str(rot["store"]), guard=cfg, principal=kit.principal("alice", "hr"))
    c.upsert("scoped", [models.PointStruct(id=4, vector=unit(np.random.default_rng(2)), payload={"source": "s"})])
    bob = c.with_principal(kit.principal("bob", "support"))
    assert all(r.vector is not None for r in bob.retrieve("scoped", [1, 4], with_vectors=True))
    c.close()


# -- the policy ----------------------------------------------------------------------------------

def test_retired_keys_are_files_relative_to_the_policy_file_or_text_and_duplicates_are_harmless(rot, tmp_path,
                                                                                                 monkeypatch):
    _write_under_a(rot)
    kit = rot["kit"]
    bounds = "".join(f'[boundaries.{b}]\nauthority_keys = ["{pub}"]\n' for b, pub in kit.authority_pub.items())
    a_text = rot["a_pub"].read_text().strip()
    policy = tmp_path / "policy.toml"
    policy.write_text(f'signing_key = "{rot["b"].name}"\n[receipts]\n'
                      f'retired_keys = ["{rot["a_pub"].name}", "{a_text}", "{rot["a_pub"].name}"]\n{bounds}'
                      '[collections.plain]\nclass = "PII"\nowner = "hr"\nreaders = ["support"]\n'
                      '[collections.plain.intent]\nenabled = false\n'
                      '[collections.plain.diversity]\nenabled = false\n'
                      f'[collections.scoped]\nclass = "PII"\nowner = "hr"\nreaders = ["support"]\n'
                      f'receipt_keys = ["{rot["outside"]}"]\n[collections.scoped.intent]\nenabled = false\n'
                      '[collections.scoped.diversity]\nenabled = false\n')
    monkeypatch.chdir("/")
    cfg = load_policy(policy)
    assert cfg.receipts.retired_keys[0] == str(rot["a_pub"])
    assert _released(rot, cfg) == {"plain": True, "scoped": True}


def test_a_retired_key_that_is_the_current_signing_key_is_a_policy_error(rot):
    with pytest.raises(ConfigError) as ei:
        QdrantClient(":memory:", guard=_cfg(rot, rot["a"], retired_keys=[str(rot["a_pub"])]),
                     principal=rot["kit"].principal("alice", "hr"))
    msg = str(ei.value)
    assert "receipts.retired_keys" in msg and rot["a_kid"] in msg and str(rot["a_pub"]) in msg, msg
    assert "current signing_key" in msg and "Remove it from receipts.retired_keys" in msg, msg


def test_a_retired_key_that_is_revoked_is_a_policy_error_and_never_trusted(rot):
    # Revocation wins: the guard refuses to start rather than trust a revoked key, or seem to.
    _write_under_a(rot)
    cfg = _cfg(rot, rot["b"], retired_keys=[str(rot["a_pub"])], revoked_keys=[rot["a_kid"]])
    with pytest.raises(ConfigError) as ei:
        QdrantClient(path=str(rot["store"]), guard=cfg, principal=rot["kit"].principal("alice", "hr"))
    msg = str(ei.value)
    assert "receipts.revoked_keys" in msg and rot["a_kid"] in msg and "revocation wins" in msg, msg
    assert "Remove it from receipts.retired_keys" in msg, msg
    # Kept revoked and no longer retired, its vectors stay stripped (and its audit entries are not
    # signed over: the reads go to a log of their own).
    revoked_only = _cfg(rot, rot["b"], rot["kit"].tmp / "audit-b.jsonl", revoked_keys=[rot["a_kid"]])
    assert _released(rot, revoked_only) == {"plain": False, "scoped": False}


@pytest.mark.parametrize("spec, needles", [
    ("missing.pub", ["receipts.retired_keys:", "missing.pub"]),
    ("ed25519:not-a-key", ["receipts.retired_keys:", "ed25519"]),
])
def test_a_retired_key_that_does_not_load_fails_the_client_naming_the_knob(rot, spec, needles):
    with pytest.raises(ConfigError) as ei:
        QdrantClient(":memory:", guard=_cfg(rot, rot["b"], retired_keys=[spec]),
                     principal=rot["kit"].principal("alice", "hr"))
    assert all(n in str(ei.value) for n in needles), str(ei.value)


# -- utility records -----------------------------------------------------------------------------

def _utility_write(rot, rec_path, rec, docs, **receipts):
    """alice@hr's noised write to "plain" and to "scoped" (receipt_keys set) under guard key B,
    both with the utility record at ``rec_path``."""
    kit = rot["kit"]
    util = {"noise": {"epsilon": rec.epsilon, "delta": 1e-6, "radius": 0.01}, "utility": {"record": str(rec_path)}}
    cfg = kit.config({"plain": _coll(**util), "scoped": _coll(receipt_keys=[rot["outside"]], **util)},
                     signing_key=str(rot["b"]), receipts=receipts, epsilon_ceiling={"PII": 5.0})
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    out = {}
    for name in ("plain", "scoped"):
        create(c, name, dim=UDIM)
        try:
            c.upsert(name, [models.PointStruct(id=1, vector=docs[0].tolist(), payload={"source": "s"})])
            out[name] = "ok"
        except ConfigError as exc:
            out[name] = str(exc)
    c.close()
    return out


def test_a_utility_record_signed_by_a_retired_key_is_accepted(rot, tmp_path):
    rec_path = tmp_path / "utility.json"
    rec, docs = staging_record(rot["kit"], rec_path, dim=UDIM)  # signed by key A
    assert rec.signer_key_id == rot["a_kid"]
    assert _utility_write(rot, rec_path, rec, docs, retired_keys=[str(rot["a_pub"])]) == {"plain": "ok", "scoped": "ok"}
    # Before (no knob): refused on both, and the message now names the knob.
    before = _utility_write(rot, rec_path, rec, docs)
    assert "does not verify against the trusted keys" in before["plain"], before
    assert "receipts.retired_keys" in before["plain"] and rot["a_kid"] in before["plain"], before
    assert "is signed by" in before["scoped"] and "receipts.retired_keys" in before["scoped"], before


# -- the audit log -------------------------------------------------------------------------------

def _old_checkpoint(rot):
    """A checkpoint signed by key A at the end of the kit's audit log (as the 1000th entry is)."""
    log = rot["kit"].tmp / "audit.jsonl"
    with AuditLog(log, signer=ReceiptSigner(keys.load_private_key(rot["a"])), checkpoint_every=1) as a:
        a.append({"event": "checkpoint"})
    return log


def test_an_audit_log_with_a_retired_keys_checkpoint_opens(rot):
    log = _old_checkpoint(rot)
    kit = rot["kit"]
    with pytest.raises(AuditIntegrityError, match="receipts.retired_keys"):
        QdrantClient(":memory:", guard=_cfg(rot, rot["b"]), principal=kit.principal("alice", "hr"))
    c = QdrantClient(":memory:", guard=_cfg(rot, rot["b"], retired_keys=[str(rot["a_pub"])]),
                     principal=kit.principal("alice", "hr"))
    create(c, "plain")
    c.close()
    assert json.loads(log.read_text().splitlines()[-1])["seq"] > 1  # it appended to the old chain


# -- the offline verifiers -----------------------------------------------------------------------

def _policy_file(rot, tmp_path, *, retired=True):
    kit = rot["kit"]
    bounds = "".join(f'[boundaries.{b}]\nauthority_keys = ["{pub}"]\n' for b, pub in kit.authority_pub.items())
    knob = f'[receipts]\nretired_keys = ["{rot["a_pub"]}"]\n' if retired else ""
    text = (f'signing_key = "{rot["b"]}"\naudit_log = "{kit.tmp / "audit.jsonl"}"\n{knob}{bounds}'
            f'[collections.scoped]\nclass = "PII"\nowner = "hr"\nreaders = ["support"]\n'
            f'receipt_keys = ["{rot["outside"]}"]\n[collections.scoped.intent]\nenabled = false\n'
            '[collections.scoped.diversity]\nenabled = false\n')
    path = tmp_path / ("policy.toml" if retired else "policy-before.toml")
    path.write_text(text)
    return path


def _verify_lines(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr().out
    return rc, out, [json.loads(x) for x in out.splitlines() if x.startswith("{")]


def test_cli_receipt_verify_reports_the_retired_key(rot, tmp_path, capsys):
    _write_under_a(rot)
    # One point under the new key too, so both statuses show.
    c = QdrantClient(path=str(rot["store"]), guard=_cfg(rot, rot["b"], retired_keys=[str(rot["a_pub"])]),
                     principal=rot["kit"].principal("alice", "hr"))
    c.upsert("scoped", [models.PointStruct(id=4, vector=unit(np.random.default_rng(3)), payload={"source": "s"})])
    c.close()
    argv = ["receipt", "verify", "--path", str(rot["store"]), "--collection", "scoped", "--verbose", "--policy"]
    rc, out, lines = _verify_lines(capsys, argv + [str(_policy_file(rot, tmp_path))])
    assert rc == 0, out
    got = {x["id"]: (x["ok"], x["key"], x["key_status"]) for x in lines}
    assert got == {"1": (True, rot["a_kid"], "retired"), "2": (True, rot["a_kid"], "retired"),
                   "3": (True, rot["a_kid"], "retired"), "4": (True, rot["b_kid"], "current")}, out
    assert f"3 of them signed by a retired key of the guard (receipts.retired_keys): {rot['a_kid']} (3)" in out
    # Before (no knob): the old key is unknown.
    rc, out, lines = _verify_lines(capsys, argv + [str(_policy_file(rot, tmp_path, retired=False))])
    assert rc == 1 and {x["id"]: (x["reason"], x["key_status"]) for x in lines if not x["ok"]} == {
        str(i): ("unknown_key", "unknown") for i in (1, 2, 3)}, out


def test_cli_receipt_verify_refuses_a_retired_key_that_is_current_or_revoked(rot, tmp_path, capsys):
    _write_under_a(rot)
    path = _policy_file(rot, tmp_path)
    base = ["receipt", "verify", "--path", str(rot["store"]), "--collection", "scoped", "--policy", str(path)]
    path.write_text(path.read_text().replace(f'signing_key = "{rot["b"]}"', f'signing_key = "{rot["a"]}"'))
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "current signing_key" in err and rot["a_kid"] in err, err
    path.write_text(path.read_text().replace(f'signing_key = "{rot["a"]}"', f'signing_key = "{rot["b"]}"')
                    .replace("[receipts]\n", f'[receipts]\nrevoked_keys = ["{rot["a_kid"]}"]\n'))
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "revocation wins" in err and rot["a_kid"] in err, err


def test_cli_audit_verify_with_the_policy_reports_the_retired_checkpoint_key(rot, tmp_path, capsys):
    log = _old_checkpoint(rot)
    # The rotated guard appends under key B (a checkpoint on every entry here, to show both keys).
    with AuditLog(log, signer=ReceiptSigner(keys.load_private_key(rot["b"])), checkpoint_every=1,
                  trusted_keys={rot["a_kid"]: keys.load_public_key(rot["a_pub"])}) as a:
        a.append({"event": "after rotation"})
    argv = ["audit", "verify", str(log), "--checkpoint-every", "1", "--policy"]
    rc = main(argv + [str(_policy_file(rot, tmp_path))])
    out = capsys.readouterr().out
    assert rc == 0 and "2 signed checkpoint(s) verified" in out, out
    assert f"checkpoint keys: {rot['a_kid']} retired: 1, {rot['b_kid']} current: 1" in out or \
        f"checkpoint keys: {rot['b_kid']} current: 1, {rot['a_kid']} retired: 1" in out, out
    # Without the knob the old key's checkpoint is not trusted.
    rc = main(argv + [str(_policy_file(rot, tmp_path, retired=False))])
    out = capsys.readouterr().out
    assert rc == 1 and "bad_checkpoint" in out and "retired_keys" in out, out
