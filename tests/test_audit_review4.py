"""Fourth review of the audit log: what the writer checks on open and before each append,
checkpoints under rotated keys, verify's read of a live log, and the repair command's output.

Each test pins a defect found in review (it failed before the fix next to it), unless it says it
guards a fix against a false alarm.
"""
from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from pathlib import Path

import pytest

from guardkit import create, make_kit
from qdrant_guard import QdrantClient, audit, keys
from qdrant_guard.audit import AuditLog, entry_hash, verify_audit_file
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import AuditIntegrityError, ConfigError
from qdrant_guard.receipts import ReceiptSigner


def _rec(i: int) -> dict:
    return {"op": "query_points", "collection": "docs", "verdict": "ALLOW", "details": {"query_text": f"q{i}"}}


def _log(path: Path, n: int, **kw) -> list[bytes]:
    with AuditLog(path, **kw) as log:
        for i in range(n):
            log.append(_rec(i))
    return path.read_bytes().splitlines(keepends=True)


def _signer() -> ReceiptSigner:
    return ReceiptSigner(keys.generate_keypair()[0])


# --------------------------------------------------------------------------- checkpoints under other keys

def test_open_after_key_rotation_verifies_the_old_keys_checkpoint_when_it_is_trusted(tmp_path):
    # A checkpoint under another key than the writer's was skipped unverified on open; now it must
    # verify under a key given as trusted_keys (the rotated guard key).
    old, new = _signer(), _signer()
    p = tmp_path / "audit.jsonl"
    _log(p, 5, signer=old, checkpoint_every=2)
    with AuditLog(p, signer=new, checkpoint_every=2, trusted_keys={old.key_id: old.public_key}) as log:
        assert log.append(_rec(5))["seq"] == 6
    rep = verify_audit_file(p, trusted_keys={old.key_id: old.public_key, new.key_id: new.public_key},
                            checkpoint_every=2)
    assert rep.ok and rep.checkpoints == 4, rep  # seqs 1, 2, 4 (old key) and 6 (new)


def test_open_refuses_a_checkpoint_under_a_key_it_does_not_know_and_names_the_knob(tmp_path):
    # Before: a rotated guard reopened its log without checking the old key's checkpoint at all.
    old, new = _signer(), _signer()
    p = tmp_path / "audit.jsonl"
    lines = _log(p, 5, signer=old, checkpoint_every=2)
    with pytest.raises(AuditIntegrityError, match=rf"seq 4\) is signed by key {old.key_id}.*audit_trusted_keys") as ei:
        AuditLog(p, signer=new, checkpoint_every=2)
    assert f"its own key is {new.key_id}" in str(ei.value)
    assert p.read_bytes() == b"".join(lines)  # nothing written
    # Nor without a signer of its own: a guard that lost signing_key does not build on it unchecked.
    with pytest.raises(AuditIntegrityError, match="it has no signing key of its own: if that is the guard's key, set signing_key"):
        AuditLog(p, checkpoint_every=2)


def test_open_refuses_a_forged_checkpoint_under_a_trusted_old_key(tmp_path):
    # The rehashed chain keeps the old key's checkpoint the forger cannot re-sign: before, a writer
    # with another key skipped it and appended to the forged chain.
    old, new = _signer(), _signer()
    p = tmp_path / "audit.jsonl"
    lines = _log(p, 4, signer=old, checkpoint_every=2)
    e = json.loads(lines[3])
    ckpt = e.pop("ckpt")
    e["record"]["details"]["query_text"] = "forged"
    e["hash"] = entry_hash(e)
    e["ckpt"] = ckpt
    p.write_bytes(b"".join(lines[:3]) + canonical_json(e) + b"\n")
    with pytest.raises(AuditIntegrityError, match=f"checkpoint at seq 4 does not verify under trusted key {old.key_id}"):
        AuditLog(p, signer=new, checkpoint_every=2, trusted_keys={old.key_id: old.public_key})


def test_a_checkpoint_with_a_made_up_key_id_no_longer_ends_the_check_on_open(tmp_path):
    # The check on open stops at the most recent checkpoint. A forger who edited an entry put a
    # checkpoint with any key id on the last line (ckpt is outside the hash): the writer stopped
    # there, unverified, and appended to the edited log.
    p = tmp_path / "audit.jsonl"
    lines = _log(p, 4)
    edited = json.loads(lines[2])
    edited["record"]["details"]["query_text"] = "edited"
    last = json.loads(lines[3])
    last["ckpt"] = {"kid": "ed25519:" + "0" * 32, "sig": "AAAA"}
    p.write_bytes(b"".join(lines[:2]) + canonical_json(edited) + b"\n" + canonical_json(last) + b"\n")
    with pytest.raises(AuditIntegrityError, match=r"signed by key ed25519:0{32}, which this writer does not know"):
        AuditLog(p)
    # A ckpt that is not even {kid, sig} was skipped the same way.
    last["ckpt"] = "x"
    p.write_bytes(b"".join(lines[:3]) + canonical_json(last) + b"\n")
    with pytest.raises(AuditIntegrityError, match=r"checkpoint at seq 4 does not verify under any key \(checkpoint must be \{kid, sig\}\)"):
        AuditLog(p)


def test_guard_policy_audit_trusted_keys_lets_a_rotated_guard_reopen_its_log(tmp_path):
    kit = make_kit(tmp_path)
    pol = {"docs": {"class": "PII", "owner": "hr", "intent": {"enabled": False}}}
    c = QdrantClient(":memory:", guard=kit.config(pol), principal=kit.principal("alice", "hr"))
    c.close()
    # A checkpoint under the first key at the end of the log (as the 1000th entry would be).
    old = ReceiptSigner(keys.load_private_key(str(kit.guard_key_path)))
    log = tmp_path / "audit.jsonl"
    with AuditLog(log, signer=old, checkpoint_every=1) as a:
        a.append({"event": "checkpoint"})
    old_pub = tmp_path / "old.pub"
    old_pub.write_text(keys.public_key_to_str(old.public_key) + "\n")
    new_sk, _ = keys.generate_keypair()
    kit.guard_key_path.unlink()
    kit.guard_key_path.write_bytes(keys.private_key_to_pem(new_sk))
    kit.guard_key_path.chmod(0o600)
    with pytest.raises(AuditIntegrityError, match="audit_trusted_keys"):
        QdrantClient(":memory:", guard=kit.config(pol), principal=kit.principal("alice", "hr"))
    c = QdrantClient(":memory:", guard=kit.config(pol, audit_trusted_keys=[str(old_pub)]),
                     principal=kit.principal("alice", "hr"))
    create(c, "docs")
    c.close()
    # A revoked old key is not accepted as a trusted one.
    with pytest.raises(ConfigError, match="audit_trusted_keys lists key .* revokes"):
        QdrantClient(":memory:", guard=kit.config(pol, audit_trusted_keys=[str(old_pub)],
                                                  receipts={"revoked_keys": [old.key_id]}),
                     principal=kit.principal("alice", "hr"))


# --------------------------------------------------------------------------- parsing on open

def test_open_parses_each_line_it_checks_once(tmp_path, monkeypatch):
    # The last line was parsed (and hashed) twice: by the tail read and again by the recent check.
    p = tmp_path / "audit.jsonl"
    _log(p, 5)
    calls = []
    real = audit._parse_line
    monkeypatch.setattr(audit, "_parse_line", lambda raw: calls.append(raw) or real(raw))
    with AuditLog(p) as log:
        assert log.seq == 5
    assert len(calls) == 5 and len(set(calls)) == 5, calls


# --------------------------------------------------------------------------- the start of the file

def test_open_refuses_a_log_whose_first_entries_were_cut_off(tmp_path):
    # When the check on open reached the file's first line it took any entry there as the start:
    # a log with its head cut off (entries 1 and 2 deleted) was appended to; verify says "deleted".
    p = tmp_path / "audit.jsonl"
    lines = _log(p, 5)
    p.write_bytes(b"".join(lines[2:]))
    assert verify_audit_file(p).problem == "deleted"
    with pytest.raises(AuditIntegrityError, match="its first line is seq 3 .* the entries before it were cut off"):
        AuditLog(p)
    assert p.read_bytes() == b"".join(lines[2:])
    # Also when that first line is a checkpoint that verifies (it signs seq 4 and what it chains to,
    # not that the file starts at seq 1).
    signer = _signer()
    q = tmp_path / "signed.jsonl"
    signed = _log(q, 5, signer=signer, checkpoint_every=4)
    q.write_bytes(b"".join(signed[3:]))
    with pytest.raises(AuditIntegrityError, match="its first line is seq 4"):
        AuditLog(q, signer=signer, checkpoint_every=4)
    # A whole log still opens, and one whose first line is beyond the window is left to verify.
    with AuditLog(tmp_path / "fresh.jsonl") as log:
        log.append(_rec(0))
    with AuditLog(tmp_path / "fresh.jsonl") as log:
        assert log.seq == 1
    with AuditLog(p, checkpoint_every=1) as log:  # reads seq 5 and 4
        assert log.seq == 5


# --------------------------------------------------------------------------- verify and a live writer

def _someone_waits_for_a_lock_on(path: Path) -> bool:
    # /proc/locks lists a blocked request as "N: -> FLOCK ... maj:min:inode ..."
    ino = os.stat(path).st_ino
    with open("/proc/locks") as fh:
        return any("->" in line and line.split()[6].split(":")[-1] == str(ino) for line in fh)


def test_verify_does_not_read_an_append_half_written(tmp_path):
    # `audit verify` read the file without the lock the writer appends under (replay and repair
    # take it), so a verify run while the guard appended could report a half-written line as a
    # torn tail: TAMPERED on a sound log.
    p = tmp_path / "audit.jsonl"
    lines = _log(p, 3)
    p.write_bytes(b"".join(lines[:2]))
    entry = lines[2]
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as AuditLog.append holds it while it writes
        os.write(fd, entry[:40])
        got = {}
        t = threading.Thread(target=lambda: got.update(rep=verify_audit_file(p)))
        t.start()
        # Until verify has either finished (it read without the lock) or waits for ours.
        for _ in range(100_000):  # a bound only so that a broken /proc/locks cannot hang the suite
            if not t.is_alive() or _someone_waits_for_a_lock_on(p):
                break
            time.sleep(0.001)
        else:
            pytest.fail("verify neither finished nor was seen waiting for the writer's lock in /proc/locks")
        os.write(fd, entry[40:])
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    t.join()
    assert got["rep"].ok and got["rep"].entries == 3, got["rep"]


def test_verify_of_a_rotated_log_with_only_the_new_key_says_to_pass_the_old_one(tmp_path):
    # It said only "checkpoint key ... is not trusted", not what to do about it.
    old, new = _signer(), _signer()
    p = tmp_path / "audit.jsonl"
    _log(p, 2, signer=old, checkpoint_every=2)
    with AuditLog(p, signer=new, checkpoint_every=2, trusted_keys={old.key_id: old.public_key}) as log:
        log.append(_rec(2))
        log.append(_rec(3))
    rep = verify_audit_file(p, trusted_keys={new.key_id: new.public_key}, checkpoint_every=2)
    assert rep.problem == "bad_checkpoint" and rep.index == 1, rep  # the old key's first entry is one
    assert f"checkpoint key {old.key_id} is not trusted" in rep.detail and "pass its public key too: --key" in rep.detail


# --------------------------------------------------------------------------- the path

def test_append_refuses_when_the_path_names_another_file(tmp_path):
    # The writer checked its own descriptor only: with the log renamed away and a forged log put
    # in its place, appends went on into the renamed file (or an unlinked one), every check passed,
    # and the path showed only the forged log.
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p)
    log.append(_rec(0))
    log.append(_rec(1))
    os.rename(p, tmp_path / "audit.jsonl.old")
    _log(p, 3)  # the forged log at the path
    forged = p.read_bytes()
    with pytest.raises(AuditIntegrityError, match="is in a file its path no longer names"):
        log.append(_rec(2))
    with pytest.raises(AuditIntegrityError, match="refuses to append until it is reopened"):
        log.append(_rec(3))
    assert p.read_bytes() == forged and len((tmp_path / "audit.jsonl.old").read_bytes().splitlines()) == 2
    log.close()
    # Deleted: the same.
    q = tmp_path / "deleted.jsonl"
    with AuditLog(q) as gone:
        gone.append(_rec(0))
        q.unlink()
        with pytest.raises(AuditIntegrityError, match="renamed or deleted"):
            gone.append(_rec(1))


def test_a_relative_path_stays_the_same_file_after_a_chdir(tmp_path, monkeypatch):
    # Guards the path check above against a false alarm: the path is resolved when the log opens.
    monkeypatch.chdir(tmp_path)
    log = AuditLog("audit.jsonl")
    log.append(_rec(0))
    sub = tmp_path / "elsewhere"
    sub.mkdir()
    monkeypatch.chdir(sub)
    log.append(_rec(1))
    log.close()
    assert len((tmp_path / "audit.jsonl").read_bytes().splitlines()) == 2 and not (sub / "audit.jsonl").exists()


# --------------------------------------------------------------------------- close during an append

class _CountingLock:
    """A lock that counts the threads waiting for it (so a test can see one block, no timing)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waiting = 0

    def __enter__(self) -> "_CountingLock":
        if not self._lock.acquire(blocking=False):
            self.waiting += 1
            self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_close_waits_for_an_append_in_progress(tmp_path, monkeypatch):
    # close() did not take the append lock: another thread's close in the middle of an append
    # closed the descriptor under it (the append then failed, or, with the number reused by a
    # file opened meanwhile, wrote the entry into that file).
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p)
    log.append(_rec(0))
    lock = _CountingLock()
    log._lock = lock
    inside, go = threading.Event(), threading.Event()
    real = audit._lock

    def held(fd: int) -> None:  # the append has its descriptor and takes the file lock
        real(fd)
        inside.set()
        go.wait()

    monkeypatch.setattr(audit, "_lock", held)
    got = {}

    def append() -> None:
        try:
            got["entry"] = log.append(_rec(1))
        except Exception as exc:
            got["error"] = exc

    a = threading.Thread(target=append)
    a.start()
    inside.wait()
    c = threading.Thread(target=log.close)
    c.start()
    for _ in range(100_000):  # until close has finished (old) or waits for the append (fixed)
        if not c.is_alive() or lock.waiting:
            break
        time.sleep(0.001)
    go.set()
    a.join()
    c.join()
    assert "error" not in got, got
    assert got["entry"]["seq"] == 2 and len(p.read_bytes().splitlines()) == 2
    assert log._fd is None


# --------------------------------------------------------------------------- reopening

def _rewrite_last(p: Path) -> None:
    # The last entry rewritten with a recomputed hash, same size: the file still verifies.
    lines = p.read_bytes().splitlines(keepends=True)
    e = json.loads(lines[-1])
    e["record"]["details"]["query_text"] = "q" + "x" * (len(e["record"]["details"]["query_text"]) - 1)
    e["hash"] = entry_hash(e)
    new = canonical_json(e) + b"\n"
    assert len(new) == len(lines[-1]) and new != lines[-1]
    p.write_bytes(b"".join(lines[:-1]) + new)
    assert verify_audit_file(p).ok


def test_an_append_after_close_still_checks_the_entry_it_knew(tmp_path):
    # A reopen (after close(), or in a forked child) forgot the entry the writer last wrote, so
    # the next append did not check it: a rewrite made meanwhile went unnoticed, and a deleted log
    # was silently started afresh from seq 1.
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p)
    log.append(_rec(0))
    log.append(_rec(1))
    log.close()
    _rewrite_last(p)
    with pytest.raises(AuditIntegrityError, match=r"seq 2, hash .* is no longer on the bytes"):
        log.append(_rec(2))
    q = tmp_path / "gone.jsonl"
    log = AuditLog(q)
    log.append(_rec(0))
    log.close()
    q.unlink()
    with pytest.raises(AuditIntegrityError, match="was cut off"):
        log.append(_rec(1))
    # Nothing changed meanwhile: the append goes on from where it was.
    r = tmp_path / "fine.jsonl"
    log = AuditLog(r)
    log.append(_rec(0))
    log.close()
    assert log.append(_rec(1))["seq"] == 2
    log.close()
    assert verify_audit_file(r).ok


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_checks_the_entry_its_parent_wrote(tmp_path):
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p)
    log.append(_rec(0))
    log.append(_rec(1))
    _rewrite_last(p)
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its first append refuses
        code = 1
        try:
            log.append(_rec(2))
        except AuditIntegrityError:
            code = 0
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(p.read_bytes().splitlines()) == 2
    log.close()


# --------------------------------------------------------------------------- the command

def test_cli_repair_of_a_sound_log_does_not_say_repaired(tmp_path, capsys):
    # It printed "repaired: 3 entries verified" about a file it had not touched (and "repaired:
    # repaired: ..." about one it had).
    from qdrant_guard.cli import main

    p = tmp_path / "audit.jsonl"
    lines = _log(p, 3)
    assert main(["audit", "repair", str(p)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nothing to repair: 3 entries verified;") and "was not changed" in out, out
    assert p.read_bytes() == b"".join(lines)
    p.write_bytes(b"".join(lines) + b"junk\n")
    assert main(["audit", "repair", str(p)]) == 0
    assert capsys.readouterr().out.startswith("repaired: corrupt at line 4")


def test_verify_reads_a_log_on_a_file_system_without_flock(tmp_path, monkeypatch):
    # Guards the shared lock verify now takes: where flock is not supported (no writer can append
    # there either), verify reads the file as before instead of failing to read it.
    import errno

    p = tmp_path / "audit.jsonl"
    _log(p, 3)

    def unsupported(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", unsupported)
    assert verify_audit_file(p).ok


def test_policy_file_resolves_audit_trusted_keys_next_to_it(tmp_path):
    from qdrant_guard.policy import load_policy

    sub = tmp_path / "conf"
    sub.mkdir()
    # audit_log too: the trusted keys act on its file, and are refused without one.
    (sub / "policy.toml").write_text('audit_log = "audit.jsonl"\naudit_trusted_keys = ["old.pub", "ed25519:AAAA"]\n')
    cfg = load_policy(sub / "policy.toml")
    assert cfg.audit_trusted_keys == (str(sub / "old.pub"), "ed25519:AAAA")


def test_cli_verify_does_not_call_a_torn_tail_tampering(tmp_path, capsys):
    # A writer killed mid-append leaves a torn last line; `audit verify` said TAMPERED.
    from qdrant_guard.cli import main

    p = tmp_path / "audit.jsonl"
    lines = _log(p, 3)
    p.write_bytes(b"".join(lines) + lines[0][:20])
    assert main(["audit", "verify", str(p)]) == 1
    assert capsys.readouterr().out.startswith("INCOMPLETE: torn_tail at line 4:")
    p.write_bytes(b"".join(lines[:2]) + b"junk\n")
    assert main(["audit", "verify", str(p)]) == 1
    assert capsys.readouterr().out.startswith("TAMPERED: corrupt at line 3:")
