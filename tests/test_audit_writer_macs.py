"""The audit writer does not sign a checkpoint over entries it cannot vouch for.

Before, the writer chained onto whatever others appended and its next checkpoint signed it: an
entry in format v1 after its own v2 entries, one claiming its writer id with a MAC it never made,
one under a made-up writer id (tests/test_review41.py pinned that limit). Now, when others
appended since the entry it last wrote or read (and on open, for the entries after the most
recent checkpoint), it reads each of them and refuses with AuditUnauthenticatedError, naming the
seqs and the fix; entries of another guard whose checkpoints it trusts are still followed, their
MACs unchecked (it holds no key for them). All on real files; every test named ``*refused*`` or
``*found*`` appends or opens without error on the code before this check.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import qdrant_client
from qdrant_client.http import models

from qdrant_guard import AuditUnauthenticatedError, QdrantGuardError, keys
from qdrant_guard.audit import AuditLog, _make_entry, repair_audit_file, verify_audit_file
from qdrant_guard.audit_mac import entry_mac, writer_keys
from qdrant_guard.canonical import canonical_json
from qdrant_guard.cli import main
from qdrant_guard.errors import AuditIntegrityError
from qdrant_guard.receipts import ReceiptSigner

from guardkit import make_kit, pii_writer, unit

ROOT = str(Path(__file__).resolve().parents[1])


def _key(tmp_path, name):
    sk, _ = keys.generate_keypair()
    path = tmp_path / name
    path.write_bytes(keys.private_key_to_pem(sk))
    path.chmod(0o600)
    return sk, path


def _last(p) -> dict:
    return json.loads(Path(p).read_bytes().splitlines()[-1])


def _forged(seq: int, prev: str, w: str | None = None, mac: str | None = None, mac_key: bytes | None = None) -> bytes:
    # What anyone who can write the file can make: a self-consistent entry with a recomputed hash.
    entry = {"seq": seq, "ts": 1.0, "prev": prev, "record": {"event": "write", "verdict": "ALLOWED", "forged": True}}
    if w is not None:
        entry["w"] = w
    entry["hash"] = hashlib.sha256(canonical_json(entry)).hexdigest()
    if w is not None:
        entry["mac"] = mac if mac_key is None else entry_mac(mac_key, bytes.fromhex(entry["hash"]))
    return canonical_json(entry) + b"\n"


def _append_raw(p, line: bytes) -> None:
    with open(p, "ab") as fh:
        fh.write(line)


def _chained_by(signer, p, every) -> None:
    # An entry of ``signer``'s, chained onto the file's last line as a writer that does not check
    # (one before this change) would write it: a genuine MAC after a forged entry.
    last = _last(p)
    seq = last["seq"] + 1
    _, line = _make_entry(seq, last["hash"], {"event": "other-process"}, b'{"event":"other-process"}', signer,
                          seq % every == 0)
    _append_raw(p, line)


def _guard_log(tmp_path, n=3, every=5):
    sk, path = _key(tmp_path, "guard.key")
    signer = ReceiptSigner(sk)
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p, signer=signer, checkpoint_every=every)
    for i in range(n):
        log.append({"event": "write", "i": i})
    return p, sk, path, signer, log


def _refused(log, p, seqs):
    before = Path(p).read_bytes()
    with pytest.raises(AuditUnauthenticatedError) as err:
        log.append({"event": "write", "after": "forgery"})
    assert isinstance(err.value, AuditIntegrityError) and isinstance(err.value, QdrantGuardError)
    assert err.value.seqs == seqs
    msg = str(err.value)
    assert f"seq {seqs[0]} " in msg and f"qdrant-guard audit verify {p} --writer-key" in msg
    assert f"qdrant-guard audit repair {p} --writer-key GUARD.key --signing-key GUARD.key" in msg
    assert Path(p).read_bytes() == before  # nothing written, so no checkpoint signs the forgery
    # And it stays refused: a second try must not go through on the same tail.
    with pytest.raises(AuditIntegrityError):
        log.append({"event": "write", "again": True})
    assert Path(p).read_bytes() == before
    return msg


def test_v1_entry_after_the_writers_v2_entries_is_refused_not_signed(tmp_path):
    p, sk, _, signer, log = _guard_log(tmp_path)
    last = _last(p)
    _append_raw(p, _forged(last["seq"] + 1, last["hash"]))
    msg = _refused(log, p, (4,))
    assert "seq 4 carries no writer MAC (format v1) after entries in format v2" in msg
    # The checkpoint at seq 5 was never signed over it.
    assert verify_audit_file(p, trusted_keys={signer.key_id: signer.public_key}, checkpoint_every=5).last_seq == 4
    log.close()


def test_entry_claiming_the_writers_id_with_a_made_up_mac_is_refused(tmp_path):
    p, sk, _, signer, log = _guard_log(tmp_path)
    last = _last(p)
    _append_raw(p, _forged(last["seq"] + 1, last["hash"], w=signer.key_id, mac="ab" * 32))
    msg = _refused(log, p, (4,))
    assert f"claims this writer's id {signer.key_id} but its MAC does not verify" in msg
    log.close()


def test_entry_under_a_writer_id_the_writer_does_not_know_is_refused(tmp_path):
    # The forger's own key: a MAC that verifies, under a writer nobody configured.
    p, sk, _, signer, log = _guard_log(tmp_path)
    other = ReceiptSigner(keys.generate_keypair()[0])
    last = _last(p)
    _append_raw(p, _forged(last["seq"] + 1, last["hash"], w=other.key_id, mac_key=other.audit_mac_key))
    msg = _refused(log, p, (4,))
    assert f"names writer {other.key_id}, which is neither this writer ({signer.key_id})" in msg
    assert "audit_trusted_keys" in msg
    log.close()


def test_forged_entry_between_two_genuine_entries_of_others_is_found(tmp_path):
    # The writer used to read only the first and the last entry others appended.
    p, sk, _, signer, log = _guard_log(tmp_path, every=50)
    _chained_by(signer, p, 50)
    _append_raw(p, _forged(5, _last(p)["hash"]))
    _chained_by(signer, p, 50)
    _append_raw(p, _forged(7, _last(p)["hash"], w=signer.key_id, mac="cd" * 32))
    _chained_by(signer, p, 50)
    _refused(log, p, (5, 7))
    log.close()


def test_entry_between_others_entries_that_does_not_chain_is_refused(tmp_path):
    p, sk, _, signer, log = _guard_log(tmp_path, every=50)
    _chained_by(signer, p, 50)
    hash4 = _last(p)["hash"]
    line = _make_entry(6, hash4, {"event": "x"}, b'{"event":"x"}', signer, False)[1]  # seq 5 deleted
    _append_raw(p, line)
    before = p.read_bytes()
    with pytest.raises(AuditIntegrityError, match=r"seq 6 .* does not chain to the entry before it \(seq 4\)"):
        log.append({"event": "write"})
    assert p.read_bytes() == before
    log.close()


def test_open_refuses_forged_entries_after_the_last_checkpoint(tmp_path):
    # Appended while no guard ran: the next start would have signed them at its first checkpoint.
    p, sk, _, signer, log = _guard_log(tmp_path, n=7, every=5)
    log.close()
    last = _last(p)
    _append_raw(p, _forged(8, last["hash"]))
    _append_raw(p, _forged(9, _last(p)["hash"], w=signer.key_id, mac="ef" * 32))
    before = p.read_bytes()
    with pytest.raises(AuditUnauthenticatedError) as err:
        AuditLog(p, signer=signer, checkpoint_every=5)
    assert err.value.seqs == (8, 9) and "Nothing was written" in str(err.value)
    assert p.read_bytes() == before


def test_refusal_is_alerted_on_the_audit_logger(tmp_path, caplog):
    p, sk, _, signer, log = _guard_log(tmp_path)
    last = _last(p)
    _append_raw(p, _forged(last["seq"] + 1, last["hash"]))
    with caplog.at_level(logging.ERROR, logger="qdrant_guard.audit"):
        with pytest.raises(AuditUnauthenticatedError):
            log.append({"event": "write"})
    alerts = [r.qdrant_guard_alert for r in caplog.records if hasattr(r, "qdrant_guard_alert")]
    assert alerts == [{"event": "audit_unauthenticated_entry", "path": str(p), "seqs": [4], "after_seq": 3,
                       "hash": last["hash"]}]
    log.close()


def test_refused_then_verify_repair_and_reopen_go_on(tmp_path, capsys):
    p, sk, key_path, signer, log = _guard_log(tmp_path)
    last = _last(p)
    _append_raw(p, _forged(last["seq"] + 1, last["hash"]))
    _refused(log, p, (4,))
    log.close()
    capsys.readouterr()
    assert main(["audit", "verify", str(p), "--writer-key", str(key_path), "--checkpoint-every", "5"]) == 1
    assert "no given writer authenticates seq 4" in capsys.readouterr().out
    assert main(["audit", "repair", str(p), "--writer-key", str(key_path), "--signing-key", str(key_path),
                 "--checkpoint-every", "5"]) == 0
    log = AuditLog(p, signer=signer, checkpoint_every=5)
    for i in range(4):
        log.append({"event": "write", "after_repair": i})
    log.close()
    rep = verify_audit_file(p, trusted_keys={signer.key_id: signer.public_key}, checkpoint_every=5,
                            writer_keys=writer_keys([sk]))
    assert rep.ok and rep.last_seq == 8 and rep.writers == ((signer.key_id, 8),), rep.detail


def test_guarded_write_fails_closed_on_a_forged_tail(tmp_path):
    kit = make_kit(tmp_path)
    owner, _ = pii_writer(kit)
    rng = np.random.default_rng(3)
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"source": "a"})])
    log = tmp_path / "audit.jsonl"
    last = _last(log)
    _append_raw(log, _forged(last["seq"] + 1, last["hash"]))
    with pytest.raises(AuditUnauthenticatedError):
        owner.upsert("pii", [models.PointStruct(id=2, vector=unit(rng), payload={"source": "a"})])
    # The write did not run (read past the guard: its own reads are audited, and refused too).
    assert qdrant_client.QdrantClient.retrieve(owner, "pii", [1, 2]) and not qdrant_client.QdrantClient.retrieve(
        owner, "pii", [2])
    owner.close()


def test_signed_repair_over_a_forged_entry_is_refused_without_writer_keys(tmp_path, capsys):
    # Repair reads the log and appends a signed checkpoint after what it keeps: it must not vouch
    # for a forged entry the writer would refuse (here before a torn tail, the problem it cuts).
    p, sk, key_path, signer, log = _guard_log(tmp_path)
    log.close()
    last = _last(p)
    _append_raw(p, _forged(last["seq"] + 1, last["hash"]))
    _append_raw(p, b'{"seq":5,"ts":1.0,"pr')
    before = p.read_bytes()
    with pytest.raises(AuditUnauthenticatedError) as err:
        repair_audit_file(p, signer=signer, checkpoint_every=5)
    assert err.value.seqs == (4,) and "--writer-key" in str(err.value) and p.read_bytes() == before
    assert not list(tmp_path.glob("audit.jsonl.cut-*"))
    capsys.readouterr()
    assert main(["audit", "repair", str(p), "--signing-key", str(key_path), "--checkpoint-every", "5"]) == 2
    assert "would vouch for entries that key cannot (seq 4;" in capsys.readouterr().err and p.read_bytes() == before
    # With the writer's key the forged entry is cut with the torn tail, and the guard goes on.
    assert main(["audit", "repair", str(p), "--signing-key", str(key_path), "--writer-key", str(key_path),
                 "--checkpoint-every", "5"]) == 0
    AuditLog(p, signer=signer, checkpoint_every=5).append({"event": "after"})
    assert verify_audit_file(p, writer_keys=writer_keys([sk])).ok


def test_signed_repair_keeps_another_trusted_guards_entries(tmp_path):
    ska, _ = _key(tmp_path, "a.key")
    skb, _ = _key(tmp_path, "b.key")
    sa, sb = ReceiptSigner(ska), ReceiptSigner(skb)
    p = tmp_path / "audit.jsonl"
    b = AuditLog(p, signer=sb, checkpoint_every=50)
    for i in range(3):
        b.append({"event": "b", "i": i})
    b.close()
    _append_raw(p, b'{"torn')
    with pytest.raises(AuditUnauthenticatedError, match="trust its key"):
        repair_audit_file(p, signer=sa, checkpoint_every=50)
    rep = repair_audit_file(p, signer=sa, checkpoint_every=50,
                            trusted_keys={sa.key_id: sa.public_key, sb.key_id: sb.public_key})
    assert rep.ok and rep.last_seq == 4


# -- what keeps working ---------------------------------------------------------------------------

def test_two_guards_with_their_own_keys_follow_each_others_entries(tmp_path):
    ska, _ = _key(tmp_path, "a.key")
    skb, _ = _key(tmp_path, "b.key")
    sa, sb = ReceiptSigner(ska), ReceiptSigner(skb)
    p = tmp_path / "audit.jsonl"
    a = AuditLog(p, signer=sa, checkpoint_every=4, trusted_keys={sb.key_id: sb.public_key})
    b = AuditLog(p, signer=sb, checkpoint_every=4, trusted_keys={sa.key_id: sa.public_key})
    for i in range(12):
        (a, b)[i % 3 == 2].append({"event": "e", "i": i})
    a.close()
    b.close()
    again = AuditLog(p, signer=sa, checkpoint_every=4, trusted_keys={sb.key_id: sb.public_key})
    again.append({"event": "reopened"})
    again.close()
    rep = verify_audit_file(p, trusted_keys={sa.key_id: sa.public_key, sb.key_id: sb.public_key}, checkpoint_every=4,
                            writer_keys=writer_keys([ska, skb]))
    assert rep.ok and dict(rep.writers) == {sa.key_id: 9, sb.key_id: 4}, rep.detail


def test_limit_an_entry_under_a_trusted_other_writers_id_is_not_checked_by_the_writer(tmp_path):
    # The documented limit: it holds no key for another guard's MACs, so a forged entry naming
    # that guard is followed and signed; only `audit verify --writer-key` with both keys names it.
    ska, _ = _key(tmp_path, "a.key")
    skb, _ = _key(tmp_path, "b.key")
    sa, sb = ReceiptSigner(ska), ReceiptSigner(skb)
    p = tmp_path / "audit.jsonl"
    a = AuditLog(p, signer=sa, checkpoint_every=5, trusted_keys={sb.key_id: sb.public_key})
    for i in range(3):
        a.append({"event": "e", "i": i})
    last = _last(p)
    _append_raw(p, _forged(last["seq"] + 1, last["hash"], w=sb.key_id, mac="ab" * 32))
    assert a.append({"event": "e", "i": 4})["seq"] == 5
    a.close()
    rep = verify_audit_file(p, writer_keys=writer_keys([ska, skb]))
    assert rep.problem == "unauthenticated" and rep.unauthenticated == (4,)
    doc = " ".join(Path(ROOT, "docs", "audit-log.md").read_text().split())
    assert "An entry under the id of another writer whose checkpoints it trusts is followed unchecked" in doc


def test_writer_without_a_signer_still_follows_others_v1_entries(tmp_path):
    # It signs nothing, so it vouches for nothing: unchanged.
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p)
    log.append({"event": "e"})
    _append_raw(p, _forged(2, _last(p)["hash"]))
    assert log.append({"event": "e"})["seq"] == 3
    log.close()


_WRITER = r"""
import sys
from qdrant_guard import keys
from qdrant_guard.audit import AuditLog
from qdrant_guard.receipts import ReceiptSigner
path, key, name, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
log = AuditLog(path, signer=ReceiptSigner(keys.load_private_key(key)), checkpoint_every=7)
for i in range(n):
    log.append({"event": "write", "writer": name, "i": i})
"""


def test_processes_sharing_the_guards_key_append_to_one_log(tmp_path):
    # Each reads, and checks the MACs of, what the others appended since its last entry.
    sk, key_path = _key(tmp_path, "guard.key")
    p = tmp_path / "audit.jsonl"
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(p), str(key_path), name, "80"], env=env)
             for name in ("a", "b", "c")]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    kid = keys.key_id(sk.public_key())
    rep = verify_audit_file(p, trusted_keys={kid: sk.public_key()}, checkpoint_every=7, writer_keys=writer_keys([sk]))
    assert rep.ok and rep.entries == 240 and rep.writers == ((kid, 240),) and rep.checkpoints == 35, rep.detail  # 34 on the grid, and seq 1
