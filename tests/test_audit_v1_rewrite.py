"""A log rewritten whole in format v1 (or in v2 without checkpoints), verified with keys.

Anyone who can write the audit file can drop every entry's writer id, MAC and checkpoint (all
need the guard's key) and recompute the hashes: the chain stays intact. Under 1,000 entries no
checkpoint seq is due, so `audit verify --key` (or `--writer-key`, or `--policy` with a
signing_key) printed OK with a note and exited 0: the keys vouched for nothing, and nothing said
so in the exit status. Now, with keys, a log none of whose entries they authenticate is
``unsigned`` (exit 1) unless ``--allow-unsigned``; a signing writer's first entry in a new log is a
checkpoint, so a log it began is never without one; and ``--signed-from SEQ`` (the seq where
signing began, kept outside the file) catches the rewrite even after the guard's next checkpoint
signed over it. Real files, real Ed25519 keys, the CLI in process. Every test not marked as a
control fails on the code before (audit.py, audit_verify.py, cli_audit.py, cli.py put back).
"""
from __future__ import annotations

import json
from pathlib import Path

from qdrant_guard import keys
from qdrant_guard.audit import AuditLog, repair_audit_file, verify_audit_file
from qdrant_guard.audit_mac import writer_keys
from qdrant_guard.cli import main
from qdrant_guard.receipts import ReceiptSigner
from test_audit_sign_every_entry import _key as _key_files
from test_review55 import _as_v1


def _key(tmp_path, name="guard.key"):
    sk, path = _key_files(tmp_path, name)
    return sk, ReceiptSigner(sk), path


def _write(p, n, signer=None, start=0):
    log = AuditLog(p, signer=signer)
    for i in range(n):
        log.append({"event": "write", "i": start + i})
    log.close()


def _lines(p):
    return [json.loads(x) for x in Path(p).read_bytes().splitlines()]


def _verify(capsys, p, *opts):
    capsys.readouterr()
    rc = main(["audit", "verify", str(p), *opts])
    return rc, capsys.readouterr().out


# ------------------------------------------------------------------ the writer: a checkpoint at seq 1

def test_a_signing_writer_makes_its_first_entry_in_a_new_log_a_checkpoint(tmp_path):
    _, signer, _ = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 3, signer)
    got = _lines(p)
    assert "ckpt" in got[0] and got[0]["seq"] == 1
    assert ["ckpt" in e for e in got[1:]] == [False, False]  # only the first: the grid is unchanged
    rep = verify_audit_file(p, trusted_keys={signer.key_id: signer.public_key})
    assert (rep.ok, rep.checkpoints, rep.signed_from) == (True, 1, 1), rep.detail


def test_a_restarted_signing_writer_adds_no_second_early_checkpoint(tmp_path):
    # Control: the log already holds its v2 entries, so the reopened writer's first entry is plain.
    _, signer, _ = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 2, signer)
    _write(p, 2, signer, start=2)
    assert ["ckpt" in e for e in _lines(p)] == [True, False, False, False]


# ------------------------------------------------------------------ audit verify with keys

def test_a_signed_log_rewritten_whole_in_v1_is_unsigned_under_key_writer_key_and_policy(tmp_path, capsys):
    _, signer, key = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 6, signer)
    pol = tmp_path / "policy.toml"
    pol.write_text(f'signing_key = "{key}"\naudit_log = "{p}"\n')
    for opts in (["--key", f"{key}.pub"], ["--writer-key", str(key)], ["--policy", str(pol)]):
        assert _verify(capsys, p, *opts)[0] == 0, opts  # control: as written
    _as_v1(p)
    for opts in (["--key", f"{key}.pub"], ["--writer-key", str(key)], ["--policy", str(pol)]):
        rc, out = _verify(capsys, p, *opts)
        assert rc == 1, (opts, out)
        assert out.startswith(f"UNSIGNED: {p}: line 1 (seq 1): none of its 6 entries (all 6 in format v1"), out
        assert "--allow-unsigned" in out and "verify it without keys" in out and "OK" not in out
    rep = verify_audit_file(p, trusted_keys={signer.key_id: signer.public_key})
    assert (rep.ok, rep.problem, rep.index, rep.valid_prefix, rep.last_seq) == (False, "unsigned", 1, 0, 0)
    rep = verify_audit_file(p, writer_keys=writer_keys([keys.load_private_key(key)]))
    assert rep.problem == "unsigned" and "no writer MAC verifies" in rep.detail


def test_allow_unsigned_and_no_keys_still_accept_a_log_of_a_guard_without_signing_key(tmp_path, capsys):
    # A guard without signing_key writes v1 entries and no checkpoint: the file cannot tell it from
    # a rewrite, so with keys it needs the explicit flag; without keys it verifies as before.
    _, signer, key = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 4)
    rc, out = _verify(capsys, p)
    assert rc == 0 and "no key given" in out  # control
    rc, out = _verify(capsys, p, "--key", f"{key}.pub")
    assert rc == 1 and "UNSIGNED" in out and "all 4 in format v1" in out
    rc, out = _verify(capsys, p, "--key", f"{key}.pub", "--allow-unsigned")
    assert rc == 0 and "--key checked no signature" in out
    rep = verify_audit_file(p, trusted_keys={signer.key_id: signer.public_key}, allow_unsigned=True)
    assert rep.ok and rep.checkpoints == 0


def test_a_v2_log_with_no_checkpoint_is_unsigned_under_public_keys_but_verifies_by_its_macs(tmp_path, capsys):
    # What a signing guard before this change wrote to a new log (< 1000 entries: no checkpoint),
    # and what anyone can make of a signed one: ckpt is outside the hash, so stripping it keeps the
    # chain. Public keys cannot check a MAC, so nothing there is authenticated; the MACs are.
    _, signer, key = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 3, signer)
    stripped = []
    for raw in p.read_bytes().splitlines():
        e = json.loads(raw)
        e.pop("ckpt", None)
        stripped.append(json.dumps(e, separators=(",", ":"), sort_keys=True).encode() + b"\n")
    p.write_bytes(b"".join(stripped))
    rc, out = _verify(capsys, p, "--key", f"{key}.pub")
    assert rc == 1 and "none of its 3 entries (all 3 in format v2)" in out and "--writer-key" in out
    rc, out = _verify(capsys, p, "--writer-key", str(key))
    assert rc == 0 and "entries authenticated by their writer's MAC" in out  # control: MACs verify


def test_a_log_begun_unsigned_and_continued_by_a_signing_guard_still_verifies(tmp_path, capsys):
    # Control: the legitimate mixed log (v1 prefix, then the signing guard's checkpointed v2 entries).
    _, signer, key = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 3)
    _write(p, 3, signer, start=3)
    rc, out = _verify(capsys, p, "--key", f"{key}.pub")
    assert rc == 0 and "1 signed checkpoint(s) verified" in out
    assert "signed from: seq 4" in out and "--signed-from 4" in out
    rc, out = _verify(capsys, p, "--writer-key", str(key))
    assert rc == 0 and "the first 3 entries (before the first with a writer MAC) are unauthenticated" in out
    rc, out = _verify(capsys, p, "--writer-key", str(key), "--signed-from", "4")
    assert rc == 0 and "signed from:" not in out


def test_an_empty_log_with_keys_is_not_unsigned(tmp_path, capsys):
    # Control: no entry, nothing claimed (a guard that opened its log and wrote nothing yet).
    _, _, key = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    p.write_bytes(b"")
    assert _verify(capsys, p, "--key", f"{key}.pub")[0] == 0


# ------------------------------------------------------------------ --signed-from: after the guard signed over it

def test_signed_from_names_a_v1_rewrite_the_guards_next_checkpoint_signed_over(tmp_path, capsys):
    _, signer, key = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 4, signer)
    _as_v1(p)
    # The guard restarts on it: it reads as a log begun without signing_key, so its first entry is
    # a checkpoint over the forged lines (the left-over gap, docs/audit-log.md). Without the
    # anchor, verify now passes.
    entry = AuditLog(p, signer=signer).append({"event": "after"})
    assert entry["seq"] == 5 and "ckpt" in entry
    assert _verify(capsys, p, "--key", f"{key}.pub")[0] == 0
    for opts in (["--key", f"{key}.pub"], ["--writer-key", str(key)]):
        rc, out = _verify(capsys, p, *opts, "--signed-from", "1")
        assert rc == 1, (opts, out)
        assert "TAMPERED: unauthenticated at line 1" in out, out
        assert "seq 1 is in format v1 (no writer id, no MAC) at or after seq 1, where signing began" in out
        assert "seq 1, 2, 3, 4" in out
        assert "repair cannot cut them" in out and "audit repair" not in out
    rep = verify_audit_file(p, trusted_keys={signer.key_id: signer.public_key}, signed_from=1)
    assert (rep.problem, rep.unauthenticated, rep.valid_prefix) == ("unauthenticated", (1, 2, 3, 4), 0)


def test_signed_from_needs_the_checkpoint_at_that_seq_under_public_keys(tmp_path, capsys):
    # A whole log forged in format v2 under the guard's writer id (MACs made up, no checkpoint: it
    # cannot sign one), then signed over by the guard's next checkpoint: public keys cannot check
    # the MACs, the missing checkpoint at seq 1 shows it.
    _, signer, key = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 2, signer)
    lines = p.read_bytes().splitlines()
    first = json.loads(lines[0])
    first.pop("ckpt")
    lines[0] = json.dumps(first, separators=(",", ":"), sort_keys=True).encode()
    p.write_bytes(b"\n".join(lines) + b"\n")
    rc, out = _verify(capsys, p, "--key", f"{key}.pub", "--signed-from", "1")
    assert rc == 1 and "seq 1 carries no checkpoint, and a guard with signing_key makes its first entry" in out
    assert _verify(capsys, p, "--writer-key", str(key), "--signed-from", "1")[0] == 0  # control: its MAC


def test_signed_from_past_the_end_is_a_cut_log(tmp_path, capsys):
    _, signer, key = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 3)
    _write(p, 2, signer, start=3)
    data = p.read_bytes().splitlines(keepends=True)
    p.write_bytes(b"".join(data[:3]))  # the signed entries cut off: what is left is a v1 log
    rep = verify_audit_file(p, trusted_keys={signer.key_id: signer.public_key}, signed_from=4, allow_unsigned=True)
    assert rep.problem == "deleted" and "ends at seq 3, before seq 4, where signing began" in rep.detail
    rc, out = _verify(capsys, p, "--key", f"{key}.pub", "--signed-from", "4")
    assert rc == 1 and "deleted" in out and "repair cannot cut them" in out
    rc, err = main(["audit", "verify", str(p), "--signed-from", "4"]), capsys.readouterr().err
    assert rc == 2 and "--signed-from checks" in err


# ------------------------------------------------------------------ replay and repair

def test_replay_with_keys_does_not_replay_a_log_rewritten_in_v1(tmp_path, capsys):
    from guardkit import one_logged_query, replay_policy_file

    kit, log = one_logged_query(tmp_path)
    policy = replay_policy_file(kit)
    writer = ["--writer-key", str(kit.guard_key_path)]
    capsys.readouterr()
    assert main(["audit", "replay", str(log), "--policy", str(policy), *writer]) == 0  # control: as written
    _as_v1(log)
    capsys.readouterr()
    assert main(["audit", "replay", str(log), "--policy", str(policy), *writer]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"NOT REPLAYED: audit log {log} does not verify: unsigned at line 1"), out
    assert main(["audit", "replay", str(log), "--policy", str(policy)]) == 0  # control: no keys, as before


def test_repair_leaves_an_unsigned_but_sound_log_alone(tmp_path, capsys):
    # Control: nothing in it is damaged, so repair with keys must not cut it all (valid prefix 0).
    _, signer, key = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 3)
    before = p.read_bytes()
    rep = repair_audit_file(p, trusted_keys={signer.key_id: signer.public_key})
    assert rep.ok and p.read_bytes() == before
    capsys.readouterr()
    assert main(["audit", "repair", str(p), "--key", f"{key}.pub"]) == 0
    assert "nothing to repair" in capsys.readouterr().out and p.read_bytes() == before


# ------------------------------------------------------------------ the writer's alert outside the file

def _adopted(caplog):
    return [r.qdrant_guard_alert for r in caplog.records
            if getattr(r, "qdrant_guard_alert", {}).get("event") == "audit_unsigned_entries_adopted"]


def test_a_signing_writer_about_to_sign_over_unsigned_entries_says_so_on_the_audit_logger(tmp_path, caplog):
    # The file cannot tell a v1 log begun without signing_key from a rewrite; the logging stream,
    # kept outside it, can: the adoption happens once for a genuine log and again after a rewrite.
    _, signer, _ = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 3)  # a guard without signing_key
    caplog.set_level("WARNING", logger="qdrant_guard.audit")
    log = AuditLog(p, signer=signer)
    (alert,) = _adopted(caplog)
    assert (alert["path"], alert["first_seq"], alert["last_seq"]) == (str(p), 1, 3)
    assert alert["hash"] == _lines(p)[-1]["hash"]
    assert "--signed-from" in caplog.records[-1].getMessage()
    log.append({"event": "signed"})
    log.close()
    caplog.clear()
    AuditLog(p, signer=signer).close()  # control: its own checkpointed v2 entry is in the window now
    assert _adopted(caplog) == []
    _as_v1(p)  # the rewrite: every entry v1 again, its checkpoint gone
    AuditLog(p, signer=signer).close()
    (again,) = _adopted(caplog)
    assert (again["first_seq"], again["last_seq"]) == (1, 4)


def test_no_alert_for_a_writer_without_a_key_or_a_log_with_nothing_unsigned(tmp_path, caplog):
    # Control: a writer without signing_key signs nothing; an empty log has nothing to adopt.
    _, signer, _ = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    caplog.set_level("WARNING", logger="qdrant_guard.audit")
    AuditLog(p, signer=signer).close()
    _write(p, 2)
    AuditLog(p).close()
    assert _adopted(caplog) == []
