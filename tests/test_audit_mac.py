"""Per-writer MACs on audit entries (format v2): a checkpoint vouches only for its writers' entries.

Review 41 item 7: the writer chains onto whatever it finds in the file, so an entry anyone who can
write the file appends is signed by the next checkpoint and verified with `--key`. Each test here
failed on the code before the MACs (no `writer_keys`, no `--writer-key`, no `w`/`mac` fields).
"""
from __future__ import annotations

import base64
import hashlib
import json

import numpy as np
from qdrant_client.http import models

from qdrant_guard import keys
from qdrant_guard.audit import CHECKPOINT_PREFIX, AuditLog, repair_audit_file, verify_audit_file
from qdrant_guard.audit_mac import entry_mac, writer_keys
from qdrant_guard.audit_write import _make_entry
from qdrant_guard.canonical import canonical_json
from qdrant_guard.receipts import ReceiptSigner

from guardkit import make_kit, pii_writer, unit


def _forged_line(seq: int, prev: str, record: dict, **extra) -> bytes:
    # What anyone who can write the file can make: a self-consistent entry with a recomputed hash.
    entry = {"seq": seq, "ts": 1.0, "prev": prev, "record": record, **{k: v for k, v in extra.items() if k != "mac"}}
    entry["hash"] = hashlib.sha256(canonical_json(entry)).hexdigest()
    if "mac" in extra:
        entry["mac"] = extra["mac"]
    return canonical_json(entry) + b"\n"


def _key(tmp_path, name):
    sk, pk = keys.generate_keypair()
    path = tmp_path / name
    path.write_bytes(keys.private_key_to_pem(sk))
    path.chmod(0o600)
    return sk, path


class _Run:
    def __init__(self, capsys, argv):
        from qdrant_guard.cli import main

        capsys.readouterr()
        self.returncode = main(["audit", "verify", *map(str, argv)])
        got = capsys.readouterr()
        self.stdout, self.stderr = got.out, got.err


def _cli(capsys, *argv):
    return _Run(capsys, argv)


def _guarded_writes_around_a_forgery(tmp_path, forge):
    """A guard's log (checkpoint every 5) with ``forge(last entry)``'s line appended by someone
    else between two of its writes, then more of its entries past the next checkpoint, chained
    on as the writer did before it checked others' entries (it now refuses to:
    tests/test_audit_writer_macs.py), so verify sees a checkpoint signed over the forgery."""
    sk, path = _key(tmp_path, "guard.key")
    signer = ReceiptSigner(sk)
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p, signer=signer, checkpoint_every=5)
    for i in range(3):
        last = log.append({"event": "write", "i": i})
    log.close()
    with open(p, "ab") as fh:
        fh.write(forge(last, signer))
    for i in range(4):
        last = json.loads(p.read_bytes().splitlines()[-1])
        seq, rec = last["seq"] + 1, {"event": "write", "i": 3 + i}
        with open(p, "ab") as fh:
            fh.write(_make_entry(seq, last["hash"], rec, canonical_json(rec), signer, seq % 5 == 0)[1])
    return p, sk, path


def test_forged_entry_between_two_guard_writes_is_reported_not_vouched_for(tmp_path, capsys):
    p, sk, path = _guarded_writes_around_a_forgery(
        tmp_path, lambda last, _s: _forged_line(last["seq"] + 1, last["hash"], {"event": "forged", "verdict": "ALLOWED"}))
    trusted = {keys.key_id(sk.public_key()): sk.public_key()}
    # The limit review 41 pinned: the checkpoint at seq 5 signs the forged seq 4 with the chain.
    signed_only = verify_audit_file(p, trusted_keys=trusted, checkpoint_every=5)
    assert signed_only.ok and signed_only.checkpoints == 2  # seq 1 (the writer's first) and seq 5
    rep = verify_audit_file(p, trusted_keys=trusted, checkpoint_every=5, writer_keys=writer_keys([sk]))
    assert not rep.ok and rep.problem == "unauthenticated"
    assert rep.unauthenticated == (4,) and rep.index == 4 and rep.valid_prefix == 3
    assert "seq 4 carries no writer MAC" in rep.detail
    # The guard's own entries around it, the checkpoint's included, are authenticated.
    assert rep.writers == ((keys.key_id(sk.public_key()), 7),) and rep.checkpoints == 2
    out = _cli(capsys, p, "--writer-key", path, "--checkpoint-every", 5)
    assert out.returncode == 1, out.stderr
    assert "TAMPERED: unauthenticated at line 4: line 4 (seq 4)" in out.stdout
    assert "no given writer authenticates seq 4" in out.stdout


def test_forged_entry_claiming_the_guard_as_writer_is_reported(tmp_path):
    # A forger who writes the guard's writer id and a MAC of its own making (no key: random).
    def forge(last, signer):
        return _forged_line(last["seq"] + 1, last["hash"], {"event": "forged"}, w=signer.key_id, mac="ab" * 32)

    p, sk, path = _guarded_writes_around_a_forgery(tmp_path, forge)
    rep = verify_audit_file(p, trusted_keys={keys.key_id(sk.public_key()): sk.public_key()}, checkpoint_every=5,
                            writer_keys=writer_keys([sk]))
    assert rep.problem == "unauthenticated" and rep.unauthenticated == (4,)
    assert "MAC that does not verify" in rep.detail


def test_forged_entry_under_another_key_is_reported_and_names_the_writer(tmp_path, capsys):
    other = ReceiptSigner(keys.generate_keypair()[0])

    def forge(last, _signer):
        body = {"seq": last["seq"] + 1, "ts": 1.0, "prev": last["hash"], "record": {"event": "forged"}, "w": other.key_id}
        digest = hashlib.sha256(canonical_json(body)).digest()
        return _forged_line(**{k: v for k, v in body.items() if k != "ts"}, mac=entry_mac(other.audit_mac_key, digest))

    p, sk, path = _guarded_writes_around_a_forgery(tmp_path, forge)
    out = _cli(capsys, p, "--writer-key", path, "--checkpoint-every", 5)
    assert out.returncode == 1
    assert f"writer {other.key_id}, whose key was not given" in out.stdout


def test_a_guards_own_entries_verify_with_its_writer_key(tmp_path, capsys):
    kit = make_kit(tmp_path)
    owner, bob = pii_writer(kit)
    rng = np.random.default_rng(3)
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "a"}) for i in range(4)])
    bob.upsert("pii", [models.PointStruct(id=9, vector=unit(rng), payload={"source": "b"})])
    owner.scroll("pii", limit=5)
    owner.close()
    log = tmp_path / "audit.jsonl"
    lines = log.read_bytes().splitlines()
    assert len(lines) >= 4
    kid = keys.key_id(keys.load_private_key(kit.guard_key_path).public_key())
    assert all(json.loads(x)["w"] == kid for x in lines)
    out = _cli(capsys, log, "--writer-key", kit.guard_key_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"entries authenticated by their writer's MAC: {kid}: {len(lines)}" in out.stdout
    # Only the public key: the MACs are not checked, and the output says what that leaves open.
    pub = _cli(capsys, log, "--key", keys.public_key_to_str(keys.load_private_key(kit.guard_key_path).public_key()))
    assert pub.returncode == 0 and "writer MACs not checked (no --writer-key)" in pub.stdout


def test_two_writers_with_different_keys_share_one_log(tmp_path, capsys):
    ska, pa = _key(tmp_path, "a.key")
    skb, pb = _key(tmp_path, "b.key")
    sa, sb = ReceiptSigner(ska), ReceiptSigner(skb)
    p = tmp_path / "audit.jsonl"
    # Each trusts the other's checkpoints (audit_trusted_keys), as two guards on one log must.
    a = AuditLog(p, signer=sa, checkpoint_every=4, trusted_keys={sb.key_id: sb.public_key})
    b = AuditLog(p, signer=sb, checkpoint_every=4, trusted_keys={sa.key_id: sa.public_key})
    by = {}
    for i in range(10):
        w = (a, b)[i % 3 == 2]
        by[w.append({"event": "e", "i": i})["seq"]] = w
    a.close()
    b.close()
    trusted = {sa.key_id: sa.public_key, sb.key_id: sb.public_key}
    both = verify_audit_file(p, trusted_keys=trusted, checkpoint_every=4, writer_keys=writer_keys([ska, skb]))
    assert both.ok and dict(both.writers) == {sa.key_id: 7, sb.key_id: 3} and both.checkpoints == 3  # seq 1 too
    only_a = verify_audit_file(p, trusted_keys=trusted, checkpoint_every=4, writer_keys=writer_keys([ska]))
    assert not only_a.ok and only_a.unauthenticated == tuple(q for q, w in sorted(by.items()) if w is b) == (3, 6, 9)
    out = _cli(capsys, p, "--writer-key", pa, "--writer-key", pb, "--checkpoint-every", 4)
    assert out.returncode == 0, out.stdout
    assert f"{sa.key_id}: 7" in out.stdout and f"{sb.key_id}: 3" in out.stdout


def test_one_mac_byte_changed_is_detected(tmp_path):
    sk, path = _key(tmp_path, "guard.key")
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p, signer=ReceiptSigner(sk), checkpoint_every=5)
    for i in range(6):
        log.append({"event": "e", "i": i})
    log.close()
    lines = p.read_bytes().splitlines(keepends=True)
    entry = json.loads(lines[2])
    flipped = entry["mac"][:10] + ("0" if entry["mac"][10] != "0" else "1") + entry["mac"][11:]
    lines[2] = lines[2].replace(entry["mac"].encode(), flipped.encode())
    p.write_bytes(b"".join(lines))
    # The MAC is outside the hash (as ckpt): the chain alone does not see it.
    assert verify_audit_file(p).ok
    rep = verify_audit_file(p, writer_keys=writer_keys([sk]), trusted_keys={keys.key_id(sk.public_key()): sk.public_key()},
                            checkpoint_every=5)
    assert rep.problem == "unauthenticated" and rep.unauthenticated == (3,)
    # Repair with the writer's key cuts from there (the side file keeps the cut) and then verifies.
    fixed = repair_audit_file(p, trusted_keys={keys.key_id(sk.public_key()): sk.public_key()}, checkpoint_every=5,
                              signer=ReceiptSigner(sk), writer_keys=writer_keys([sk]))
    assert fixed.ok and fixed.last_seq == 3 and "unauthenticated" in fixed.detail
    assert len(list(tmp_path.glob("audit.jsonl.cut-2-*"))) == 1


def _old_format_log(p, sk, n, every):
    # Lines as the guard wrote them before format v2 (no "w", no "mac"), checkpoints included.
    prev, out = "0" * 64, []
    for seq in range(1, n + 1):
        entry = {"seq": seq, "ts": 1.0 + seq, "prev": prev, "record": {"event": "old", "seq": seq}}
        entry["hash"] = prev = hashlib.sha256(canonical_json(entry)).hexdigest()
        if seq % every == 0:
            sig = sk.sign(CHECKPOINT_PREFIX + bytes.fromhex(entry["hash"]))
            entry["ckpt"] = {"kid": keys.key_id(sk.public_key()), "sig": base64.b64encode(sig).decode()}
        out.append(canonical_json(entry) + b"\n")
    p.write_bytes(b"".join(out))
    p.chmod(0o600)


def test_old_format_log_still_verifies_with_its_entries_named_unauthenticated(tmp_path, capsys):
    sk, path = _key(tmp_path, "guard.key")
    p = tmp_path / "audit.jsonl"
    _old_format_log(p, sk, 6, 5)
    log = AuditLog(p, signer=ReceiptSigner(sk), checkpoint_every=5)
    for i in range(3):
        log.append({"event": "new", "i": i})
    log.close()
    rep = verify_audit_file(p, trusted_keys={keys.key_id(sk.public_key()): sk.public_key()}, checkpoint_every=5,
                            writer_keys=writer_keys([sk]))
    assert rep.ok and rep.legacy == 6 and rep.writers == ((keys.key_id(sk.public_key()), 3),)
    assert "6 before format v2 not authenticated" in rep.detail
    out = _cli(capsys, p, "--writer-key", path, "--checkpoint-every", 5)
    assert out.returncode == 0, out.stdout
    assert "the first 6 entries (before the first with a writer MAC) are unauthenticated (pre-v2" in out.stdout
    # An old-format line after the new ones is no longer "old": it is reported.
    last = json.loads(p.read_bytes().splitlines()[-1])
    with open(p, "ab") as fh:
        fh.write(_forged_line(last["seq"] + 1, last["hash"], {"event": "old-looking"}))
    rep = verify_audit_file(p, writer_keys=writer_keys([sk]))
    assert rep.problem == "unauthenticated" and rep.unauthenticated == (10,) and rep.legacy == 6


def test_writer_id_cannot_be_stripped_to_pass_as_old_format(tmp_path):
    # "w" is inside the hash: dropping it (and "mac") to make an entry look pre-v2 breaks the chain.
    sk, _ = _key(tmp_path, "guard.key")
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p, signer=ReceiptSigner(sk))
    for i in range(3):
        log.append({"event": "e", "i": i})
    log.close()
    lines = p.read_bytes().splitlines(keepends=True)
    e = json.loads(lines[0])
    lines[0] = _forged_line(e["seq"], e["prev"], e["record"])
    p.write_bytes(b"".join(lines))
    rep = verify_audit_file(p, writer_keys=writer_keys([sk]))
    assert rep.problem == "chain_broken" and rep.index == 2


def test_repair_and_replay_take_the_writer_keys_too(tmp_path, capsys):
    from qdrant_guard.cli import main

    from guardkit import one_logged_query, replay_policy_file

    kit, log = one_logged_query(tmp_path)
    lines = log.read_bytes().splitlines()
    real = json.loads(lines[-1])
    assert real["record"]["op"] == "query_points"
    # A forged copy of the query entry, chained on: counted by replay as a logged query.
    with open(log, "ab") as fh:
        fh.write(_forged_line(real["seq"] + 1, real["hash"], real["record"]))
    policy = replay_policy_file(kit)
    capsys.readouterr()
    assert main(["audit", "replay", str(log), "--policy", str(policy)]) == 0
    assert "replayed 2 logged queries" in capsys.readouterr().out
    assert main(["audit", "replay", str(log), "--policy", str(policy), "--writer-key", str(kit.guard_key_path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"NOT REPLAYED: audit log {log} does not verify: unauthenticated at line {len(lines) + 1}")
    # The repair entry must carry a MAC too: without the guard's key it is refused, nothing changed.
    before = log.read_bytes()
    assert main(["audit", "repair", str(log), "--writer-key", str(kit.guard_key_path)]) == 2
    assert "repair entry must carry one too" in capsys.readouterr().err and log.read_bytes() == before
    assert main(["audit", "repair", str(log), "--writer-key", str(kit.guard_key_path),
                 "--signing-key", str(kit.guard_key_path)]) == 0
    assert "repaired: unauthenticated" in capsys.readouterr().out
    assert main(["audit", "verify", str(log), "--writer-key", str(kit.guard_key_path)]) == 0
    assert len(log.read_bytes().splitlines()) == len(lines) + 1  # the forged line cut, the repair entry added
