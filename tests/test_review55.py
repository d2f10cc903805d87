"""Review 55 (2026-12-07): receipts and the audit log, attacked again.

A log whose guards sign every entry (``audit_sign_every_entry``) holds no entry without a writer
id: every entry is format v2 and signed. An entry in format v1 before any v2 one was let through
as a "legacy" entry by `audit verify --every-entry-signed` (exit 0, "every entry signed by its
writer: 0 signatures verified") and by a signing writer on open, whose first entry then signed
over them: a whole log replaced by v1 lines with recomputed hashes passed both. Real files, real
Ed25519 keys, the CLI in process; each ``*refused*``/``*named*`` test fails on the code before the
fix (audit_mac.py and audit_verify.py put back).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from qdrant_guard import AuditUnauthenticatedError, keys
from qdrant_guard.audit import AuditLog, repair_audit_file, verify_audit_file
from qdrant_guard.audit_mac import writer_keys
from qdrant_guard.canonical import canonical_json
from qdrant_guard.cli import main
from qdrant_guard.receipts import ReceiptSigner
from test_audit_sign_every_entry import _key as _key_files

GENESIS = "0" * 64


def _key(tmp_path, name):
    sk, _ = _key_files(tmp_path, name)
    return sk, ReceiptSigner(sk)


def _signed_log(tmp_path, signer, n=4):
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p, signer=signer, checkpoint_every=5, sign_every_entry=True)
    for i in range(n):
        log.append({"event": "write", "i": i})
    log.close()
    return p


def _as_v1(p):
    """What anyone who can write the file makes of it: every entry rewritten in format v1 (no
    ``w``, ``mac`` or ``ckpt``, which need the guard's key), hashes recomputed, the chain intact."""
    out, prev = [], GENESIS
    for raw in Path(p).read_bytes().splitlines():
        e = json.loads(raw)
        for k in ("ckpt", "mac", "w", "hash"):
            e.pop(k, None)
        e["prev"], e["record"] = prev, {**e["record"], "forged": True}
        e["hash"] = prev = hashlib.sha256(canonical_json(e)).hexdigest()
        out.append(canonical_json(e) + b"\n")
    Path(p).write_bytes(b"".join(out))


def test_every_entry_signed_names_a_log_rewritten_in_format_v1(tmp_path, capsys):
    _, sa = _key(tmp_path, "a.key")
    p = _signed_log(tmp_path, sa)
    pub = ["--key", str(tmp_path / "a.key.pub"), "--checkpoint-every", "5"]
    assert main(["audit", "verify", str(p), *pub, "--every-entry-signed"]) == 0  # control: as written
    assert "4 signatures verified" in capsys.readouterr().out
    _as_v1(p)
    rep = verify_audit_file(p, trusted_keys={sa.key_id: sa.public_key}, checkpoint_every=5, signed_entries=True)
    assert (rep.ok, rep.problem, rep.unauthenticated, rep.valid_prefix) == (False, "unauthenticated", (1, 2, 3, 4), 0)
    assert rep.legacy == 0
    assert main(["audit", "verify", str(p), *pub, "--every-entry-signed"]) == 1
    out = capsys.readouterr().out
    assert "TAMPERED" in out and "seq 1 carries no writer id and no signature (format v1)" in out
    assert "every entry signed by its writer" not in out


def test_without_the_flag_a_v1_log_stays_a_legacy_one(tmp_path):
    # Control: a log begun before format v2 verifies with --writer-key, its v1 entries counted as
    # legacy (docs/audit-log.md, "What --writer-key proves"); only --every-entry-signed refuses them.
    # One with no authenticated entry at all is unsigned unless allowed (tests/test_audit_v1_rewrite.py).
    ska, sa = _key(tmp_path, "a.key")
    p = _signed_log(tmp_path, sa)
    _as_v1(p)
    rep = verify_audit_file(p, trusted_keys={sa.key_id: sa.public_key}, checkpoint_every=5,
                            writer_keys=writer_keys([ska]), allow_unsigned=True)
    assert rep.ok and rep.legacy == 4, rep.detail


def test_a_writer_signing_every_entry_refuses_to_open_on_v1_entries(tmp_path):
    _, sa = _key(tmp_path, "a.key")
    p = _signed_log(tmp_path, sa)
    _as_v1(p)
    before = p.read_bytes()
    with pytest.raises(AuditUnauthenticatedError) as err:
        AuditLog(p, signer=sa, checkpoint_every=5, sign_every_entry=True).append({"event": "after"})
    assert err.value.seqs == (1, 2, 3, 4)
    assert "format v1" in str(err.value) and "audit_sign_every_entry" in str(err.value)
    assert p.read_bytes() == before  # no checkpoint of the guard's signs the forged lines


def test_a_writer_without_the_knob_still_follows_a_legacy_log(tmp_path):
    # Control: the default writer follows v1 entries before any v2 one (a log begun before v2)
    # and its first entry there is a checkpoint, as documented.
    _, sa = _key(tmp_path, "a.key")
    p = _signed_log(tmp_path, sa)
    _as_v1(p)
    log = AuditLog(p, signer=sa, checkpoint_every=5)
    entry = log.append({"event": "after"})
    log.close()
    assert entry["seq"] == 5 and "ckpt" in entry
    # The documented limit (docs/audit-log.md, "Not checked on open"): that checkpoint now signs the
    # rewritten lines, so --key verifies them and --writer-key counts them as legacy (exit 0).
    ska = keys.load_private_key(tmp_path / "a.key")
    rep = verify_audit_file(p, trusted_keys={sa.key_id: sa.public_key}, checkpoint_every=5,
                            writer_keys=writer_keys([ska]))
    assert (rep.ok, rep.checkpoints, rep.legacy) == (True, 1, 4), rep.detail


def test_a_signed_repair_under_the_knob_refuses_to_sign_over_v1_entries(tmp_path):
    _, sa = _key(tmp_path, "a.key")
    p = _signed_log(tmp_path, sa)
    _as_v1(p)
    with open(p, "ab") as fh:
        fh.write(b'{"seq":5,"torn')
    before = p.read_bytes()
    with pytest.raises(AuditUnauthenticatedError) as err:
        repair_audit_file(p, signer=sa, trusted_keys={sa.key_id: sa.public_key}, checkpoint_every=5,
                          sign_every_entry=True)
    assert err.value.seqs == (1, 2, 3, 4) and p.read_bytes() == before


# ------------------------------------------------------------------ receipts: an old pair written back
# docs/receipt-format.md said a replaced vector and its receipt verify again if written back "by
# anyone who can write the store around the guard"; any writer of the collection can do it through
# the guard too (pinned here, the doc now says so), and receipts.max_age_s is what bounds it there.

def _replay_clients(tmp_path, **receipts):
    import numpy as np
    from guardkit import create, make_kit, models, unit

    from qdrant_guard import QdrantClient

    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
                              "noise_on_write": True, "intent": {"enabled": False}, "diversity": {"enabled": False},
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}},
                     **({"receipts": receipts} if receipts else {}))
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    bob = owner.with_principal(kit.principal("bob", "support"))
    rng = np.random.default_rng(55)
    bob.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"t": "a"})])
    old = _stored(owner)
    bob.update_vectors("pii", [models.PointVectors(id=1, vector=unit(rng))])  # noised and receipted anew
    assert _stored(owner).vector != old.vector
    return owner, bob, old


def _stored(owner):
    from qdrant_client import QdrantClient as RawClient

    return RawClient.retrieve(owner, "pii", [1], with_payload=True, with_vectors=True)[0]


def test_limit_a_writer_writes_a_replaced_vector_and_its_receipt_back_through_the_guard(tmp_path):
    from guardkit import models

    owner, bob, old = _replay_clients(tmp_path)
    bob.upsert("pii", [models.PointStruct(id=1, vector=old.vector, payload=old.payload)])
    now = _stored(owner)
    assert (now.vector, now.payload) == (old.vector, old.payload)


def test_receipts_max_age_refuses_writing_back_an_old_pair(tmp_path):
    import time

    from guardkit import models

    from qdrant_guard import GuardRefusal

    owner, bob, old = _replay_clients(tmp_path, max_age_s=60)
    bob.guard.clock = lambda: time.time() + 120  # the pair's receipt is now two minutes old
    with pytest.raises(GuardRefusal) as err:
        bob.upsert("pii", [models.PointStruct(id=1, vector=old.vector, payload=old.payload)])
    assert err.value.verdict == "INVALID_RECEIPT" and "expired" in str(err.value)
    assert _stored(owner).vector != old.vector


# ------------------------------------------------------------------ replay --writer-key and v1 entries
# `audit verify --writer-key` notes a log's leading v1 entries as unauthenticated; `audit replay
# --writer-key` verified the same bytes and replayed them as logged, saying only "N entries
# verified": a whole log rewritten in format v1, forged queries included, replayed as the record.

def test_replay_with_writer_keys_names_the_unauthenticated_v1_entries_it_replays(tmp_path, capsys):
    from guardkit import one_logged_query, replay_policy_file

    kit, log = one_logged_query(tmp_path)
    policy = replay_policy_file(kit)
    writer = ["--writer-key", str(kit.guard_key_path)]
    capsys.readouterr()
    assert main(["audit", "replay", str(log), "--policy", str(policy), *writer]) == 0  # control: as written
    assert "unauthenticated" not in capsys.readouterr().out
    _as_v1(log)
    # Nothing in it authenticated: not replayed (tests/test_audit_v1_rewrite.py). Once the guard has
    # signed over it, its v1 entries read as a legacy prefix, named as such.
    assert main(["audit", "replay", str(log), "--policy", str(policy), *writer]) == 1
    assert "unsigned at line 1" in capsys.readouterr().out
    AuditLog(log, signer=ReceiptSigner(keys.load_private_key(kit.guard_key_path))).append({"event": "after"})
    assert main(["audit", "replay", str(log), "--policy", str(policy), *writer]) == 0
    out = capsys.readouterr().out
    n = len(log.read_bytes().splitlines()) - 1  # all but the guard's entry after them
    assert f"note: the first {n} entries (before the first with a writer MAC) are unauthenticated" in out
    assert "they are replayed as logged" in out and "replayed 1 logged queries" in out


# ------------------------------------------------------------------ audit verify --policy and the knob
# `audit repair --trust-policy` takes audit_sign_every_entry from the policy; `audit verify
# --policy` did not: an entry forged after the guard's last one, without a signature (here a v1
# line, hash recomputed), verified (exit 0) under the policy of guards that refuse it.

def test_verify_with_the_policy_of_guards_signing_every_entry_names_an_unsigned_entry(tmp_path, capsys):
    _, sa = _key(tmp_path, "a.key")
    p = _signed_log(tmp_path, sa, n=3)
    pol = tmp_path / "policy.toml"
    pol.write_text(f'signing_key = "{tmp_path / "a.key"}"\naudit_log = "{p}"\naudit_sign_every_entry = true\n')
    args = ["audit", "verify", str(p), "--policy", str(pol), "--checkpoint-every", "5"]
    assert main(args) == 0  # control: as written
    assert f"every entry signed by its writer (audit_sign_every_entry in {pol}): 3 signatures verified" in \
        capsys.readouterr().out
    last = json.loads(p.read_bytes().splitlines()[-1])
    forged = {"seq": 4, "ts": 1.0, "prev": last["hash"], "record": {"event": "write", "forged": True}}
    forged["hash"] = hashlib.sha256(canonical_json(forged)).hexdigest()
    with open(p, "ab") as fh:
        fh.write(canonical_json(forged) + b"\n")
    assert main(args) == 1
    assert "unauthenticated" in capsys.readouterr().out
    # Without the knob in the policy, as before: the entry verifies (the guard would follow it).
    pol.write_text(f'signing_key = "{tmp_path / "a.key"}"\naudit_log = "{p}"\n')
    assert main(args) == 0


def test_replay_with_the_trust_policy_of_guards_signing_every_entry_refuses_an_unsigned_query(tmp_path, capsys):
    from guardkit import one_logged_query, replay_policy_file

    kit, log = one_logged_query(tmp_path, audit_sign_every_entry=True)
    policy = replay_policy_file(kit)
    trust = tmp_path / "trust.toml"
    trust.write_text(f'signing_key = "{kit.guard_key_path}"\naudit_log = "{log}"\naudit_sign_every_entry = true\n')
    args = ["audit", "replay", str(log), "--policy", str(policy), "--trust-policy", str(trust)]
    capsys.readouterr()
    assert main(args) == 0 and "replayed 1 logged queries" in capsys.readouterr().out  # control
    # A copy of the query entry, chained on without a signature: what anyone who can write the file adds.
    real = json.loads(log.read_bytes().splitlines()[-1])
    forged = {k: v for k, v in real.items() if k not in ("ckpt", "mac", "hash")}
    forged.update(seq=real["seq"] + 1, prev=real["hash"])
    forged["hash"] = hashlib.sha256(canonical_json(forged)).hexdigest()
    forged["mac"] = "ab" * 32
    with open(log, "ab") as fh:
        fh.write(canonical_json(forged) + b"\n")
    assert main(args) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"NOT REPLAYED: audit log {log} does not verify: unauthenticated")
