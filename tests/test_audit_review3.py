"""Third review of the audit log: `audit replay` verifies first; the writer's checks on its file.

Each test pins a defect found in review (it failed before the fix next to it).
"""
from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from guardkit import make_kit, replay_policy_file, run_cli
from qdrant_guard import keys
from qdrant_guard.audit import AuditLog, entry_hash, verify_audit_file
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import AuditError, AuditIntegrityError
from qdrant_guard.receipts import ReceiptSigner
from qdrant_guard.replay import replay_log


SHORT, LONG = "short query", "a much longer query with many words in it"


def _policy(tmp_path: Path, extra: str = "") -> Path:
    return replay_policy_file(make_kit(tmp_path), extra)


def _query(text: str) -> dict:
    return {"op": "query_points", "collection": "docs", "verdict": "ALLOW", "details": {"query_text": text}}


def _log(path: Path, texts: list[str], **kw) -> list[bytes]:
    with AuditLog(path, **kw) as log:
        for t in texts:
            log.append(_query(t))
    return path.read_bytes().splitlines(keepends=True)


def _edit_text(line: bytes, text: str, rehash: bool = False, prev: str | None = None) -> tuple[bytes, str]:
    """``line`` with its query text replaced (and its hash recomputed when ``rehash``, as a forger would)."""
    e = json.loads(line)
    e.pop("ckpt", None)
    e["record"]["details"]["query_text"] = text
    if prev is not None:
        e["prev"] = prev
    if rehash:
        e["hash"] = entry_hash(e)
    return canonical_json(e) + b"\n", e["hash"]


def _strict(tmp_path: Path) -> Path:
    # Queries of more than 4 tokens are rejected under this policy: LONG is, SHORT is not.
    return _policy(tmp_path, "[collections.docs.query]\nmax_tokens = 4\n")


# --------------------------------------------------------------------------- replay verifies first

def test_replay_does_not_replay_a_log_that_does_not_verify(tmp_path):
    # Replay read every line as if logged: an entry edited after the fact (a LONG query planted
    # where a SHORT one was logged) was replayed and reported as a newly blocked logged query.
    p = tmp_path / "audit.jsonl"
    lines = _log(p, [SHORT, SHORT, SHORT])
    lines[1], _ = _edit_text(lines[1], LONG)
    p.write_bytes(b"".join(lines))
    out = io.StringIO()
    assert replay_log(str(p), str(_strict(tmp_path)), out=out) == 1
    text = out.getvalue()
    assert text.startswith(f"NOT REPLAYED: audit log {p} does not verify: edited at line 2"), text
    assert "valid prefix: 1 entries" in text and "--verified-prefix" in text, text
    assert "replayed" not in text.replace("NOT REPLAYED", "") and "newly_blocked" not in text, text


def test_replay_of_a_verified_prefix_leaves_out_what_follows_the_problem(tmp_path):
    p = tmp_path / "audit.jsonl"
    lines = _log(p, [LONG, SHORT, LONG, LONG])
    lines[1], _ = _edit_text(lines[1], LONG)
    p.write_bytes(b"".join(lines))
    out = io.StringIO()
    assert replay_log(str(p), str(_strict(tmp_path)), out=out, mode="prefix") == 1
    text = out.getvalue()
    assert "WARNING: replayed only its verified prefix, the first 1 entries; the 3 line(s) after it were NOT replayed" in text, text
    assert "replayed 1 logged queries" in text and "newly_blocked  QUERY_REJECTED        1" in text, text


def test_unverified_replay_is_labelled(tmp_path):
    p = tmp_path / "audit.jsonl"
    lines = _log(p, [SHORT, SHORT])
    lines[1], _ = _edit_text(lines[1], LONG)
    p.write_bytes(b"".join(lines))
    out = io.StringIO()
    assert replay_log(str(p), str(_strict(tmp_path)), out=out, mode="unverified") == 1
    text = out.getvalue()
    assert text.startswith(f"WARNING: UNVERIFIED REPLAY: audit log {p} does not verify: edited at line 2"), text
    assert "replayed 2 logged queries" in text and "newly_blocked" in text, text


def test_replay_of_a_sound_log_says_what_was_verified(tmp_path):
    p = tmp_path / "audit.jsonl"
    _log(p, [SHORT, LONG])
    out = io.StringIO()
    assert replay_log(str(p), str(_strict(tmp_path)), out=out) == 0
    text = out.getvalue()
    assert text.startswith(f"log: 2 entries verified, hash chain intact, checkpoint signatures not "
                           f"checked (no trusted keys) ({p})\n"), text
    assert "replayed 2 logged queries" in text and "newly_blocked  QUERY_REJECTED        1" in text, text


def test_replay_with_trusted_keys_refuses_a_rehashed_chain(tmp_path):
    # A forger who rewrites an entry and recomputes every hash after it gets a chain that verifies
    # without keys; the checkpoints they cannot re-sign give it away when replay is given the key.
    sk, pk = keys.generate_keypair()
    p = tmp_path / "audit.jsonl"
    lines = _log(p, [SHORT, SHORT, SHORT, SHORT], signer=ReceiptSigner(sk), checkpoint_every=2)
    prev = None
    forged = []
    for i, line in enumerate(lines):
        new, prev = _edit_text(line, LONG if i == 0 else json.loads(line)["record"]["details"]["query_text"],
                               rehash=True, prev=prev)
        forged.append(new)
    p.write_bytes(b"".join(forged))
    assert verify_audit_file(p).ok  # the chain alone cannot tell
    policy = str(_strict(tmp_path))
    trusted = {keys.key_id(pk): pk}
    out = io.StringIO()
    assert replay_log(str(p), policy, out=out, trusted_keys=trusted, checkpoint_every=2) == 1
    assert out.getvalue().startswith(f"NOT REPLAYED: audit log {p} does not verify: bad_checkpoint at line 2"), out.getvalue()
    # The genuine log replays with its checkpoints verified.
    p.write_bytes(b"".join(lines))
    out = io.StringIO()
    assert replay_log(str(p), policy, out=out, trusted_keys=trusted, checkpoint_every=2) == 0
    assert "3 signed checkpoint(s) verified" in out.getvalue(), out.getvalue()  # seqs 1 (the first), 2, 4


def test_replay_of_a_missing_log_raises_audit_error(tmp_path):
    with pytest.raises(AuditError, match=r"cannot read audit log '.*missing\.jsonl': No such file or directory"):
        replay_log(str(tmp_path / "missing.jsonl"), str(_policy(tmp_path)), out=io.StringIO())


def test_replay_rejects_an_unknown_mode(tmp_path):
    p = tmp_path / "audit.jsonl"
    _log(p, [SHORT])
    with pytest.raises(ValueError, match="mode must be one of verified, prefix, unverified"):
        replay_log(str(p), str(_policy(tmp_path)), out=io.StringIO(), mode="lenient")


def _cli(*args: str) -> subprocess.CompletedProcess:
    # In process: what the audit commands say; tests/test_cli.py runs them as real subprocesses.
    return run_cli(*args)


def test_cli_replay_of_a_missing_log_says_cannot_read_audit_log(tmp_path):
    # `audit replay` printed the raw "[Errno 2] No such file or directory: ..." where the other
    # audit commands say "cannot read audit log ...".
    missing = str(tmp_path / "missing.jsonl")
    proc = _cli("audit", "replay", missing, "--policy", str(_policy(tmp_path)))
    assert proc.returncode == 2
    assert proc.stderr == f"error: cannot read audit log {missing!r}: No such file or directory\n", proc.stderr
    verify = _cli("audit", "verify", missing)
    assert verify.stderr == proc.stderr


def test_cli_replay_modes_and_keys(tmp_path):
    sk, pk = keys.generate_keypair()
    pub = tmp_path / "guard.pub"
    pub.write_text(keys.public_key_to_str(pk) + "\n")
    p = tmp_path / "audit.jsonl"
    lines = _log(p, [SHORT, LONG], signer=ReceiptSigner(sk), checkpoint_every=2)
    policy = str(_strict(tmp_path))
    ok = _cli("audit", "replay", str(p), "--policy", policy, "--key", str(pub), "--checkpoint-every", "2")
    assert ok.returncode == 0 and "2 signed checkpoint(s) verified" in ok.stdout, ok.stdout + ok.stderr  # seqs 1, 2
    p.write_bytes(lines[0] + b'{"torn')
    refused = _cli("audit", "replay", str(p), "--policy", policy)
    assert refused.returncode == 1 and refused.stdout.startswith("NOT REPLAYED:"), refused.stdout
    assert "torn_tail at line 2" in refused.stdout, refused.stdout
    prefix = _cli("audit", "replay", str(p), "--policy", policy, "--verified-prefix")
    assert prefix.returncode == 1 and "replayed 1 logged queries" in prefix.stdout, prefix.stdout
    assert "the first 1 entries; the 1 line(s) after it were NOT replayed" in prefix.stdout, prefix.stdout
    loose = _cli("audit", "replay", str(p), "--policy", policy, "--unverified")
    assert loose.returncode == 1 and "UNVERIFIED REPLAY" in loose.stdout, loose.stdout
    both = _cli("audit", "replay", str(p), "--policy", policy, "--unverified", "--verified-prefix")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr, both.stderr


# --------------------------------------------------------------------------- the writer's own tail

def _entry_line(seq: int, prev: str, record: dict) -> bytes:
    e = {"seq": seq, "ts": 1.0, "prev": prev, "record": record}
    e["hash"] = entry_hash(e)
    return canonical_json(e) + b"\n"


def test_writer_refuses_to_append_after_its_last_entry_was_rewritten_in_place(tmp_path, caplog):
    # The writer noticed other writers only by the file's size: a same-size rewrite of its last
    # entry (hash recomputed, so the file still verifies) went unnoticed and it went on appending.
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p)
    for i in range(3):
        log.append({"event": "real", "i": i})
    lines = p.read_bytes().splitlines(keepends=True)
    e = json.loads(lines[-1])
    real_hash = e["hash"]
    e["record"]["i"] = 7  # same length
    e["hash"] = entry_hash(e)
    lines[-1] = canonical_json(e) + b"\n"
    p.write_bytes(b"".join(lines))  # same inode, same size
    assert verify_audit_file(p).ok
    with caplog.at_level("ERROR", logger="qdrant_guard.audit"):
        with pytest.raises(AuditIntegrityError, match=f"seq 3, hash {real_hash}"):
            log.append({"event": "after"})
    (alert,) = [r for r in caplog.records if hasattr(r, "qdrant_guard_alert")]
    assert alert.qdrant_guard_alert == {"event": "audit_tail_changed", "path": str(p), "seq": 3, "hash": real_hash}
    with pytest.raises(AuditIntegrityError, match="refuses to append until it is reopened"):
        log.append({"event": "again"})
    assert p.read_bytes() == b"".join(lines)
    log.close()


def test_writer_refuses_to_append_after_its_last_entry_was_cut_off(tmp_path):
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p)
    for i in range(3):
        log.append({"event": "real", "i": i})
    lines = p.read_bytes().splitlines(keepends=True)
    p.write_bytes(b"".join(lines[:2]))  # whole entries cut off the end: the file still verifies
    with pytest.raises(AuditIntegrityError, match="was cut off"):
        log.append({"event": "after"})
    log.close()
    # Reopening is the operator's decision to go on from the file as it is.
    with AuditLog(p) as again:
        assert again.append({"event": "resumed"})["seq"] == 3
    assert verify_audit_file(p).ok


def test_writer_refuses_a_tail_that_does_not_chain_to_its_last_entry(tmp_path):
    # A self-consistent line appended by someone else was adopted as the tail whatever it chained to.
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p)
    log.append({"event": "real"})
    with open(p, "ab") as fh:
        fh.write(_entry_line(2, "ab" * 32, {"event": "forged"}))
    with pytest.raises(AuditIntegrityError, match=r"followed by an entry that does not chain to it \(seq 2"):
        log.append({"event": "after"})
    log.close()


def test_writer_follows_other_writers_and_a_repair_that_keeps_its_entry(tmp_path):
    # What the writer accepts: entries appended by another writer, and a repair that cut only
    # lines after its own entry.
    p = tmp_path / "audit.jsonl"
    a, b = AuditLog(p), AuditLog(p)
    a.append({"w": "a"})
    b.append({"w": "b"})
    b.append({"w": "b"})
    assert a.append({"w": "a"})["seq"] == 4
    with open(p, "ab") as fh:
        fh.write(b"junk\n")
    with pytest.raises(AuditIntegrityError, match="the entry after seq 4"):
        a.append({"w": "a"})
    from qdrant_guard.audit import repair_audit_file
    assert repair_audit_file(p).ok
    assert a.append({"w": "a"})["seq"] == 6
    assert b.append({"w": "b"})["seq"] == 7
    rep = verify_audit_file(p)
    assert rep.ok and rep.entries == 7, rep.detail
    a.close()
    b.close()


# --------------------------------------------------------------------------- the writer on open

def test_open_refuses_an_edited_entry_before_the_last_line(tmp_path):
    # On open only the last line was checked: an entry edited just before it, or a last line that
    # chains to nothing, was taken as the tail and appended to.
    p = tmp_path / "audit.jsonl"
    lines = _log(p, [SHORT, SHORT, SHORT, SHORT])
    edited, _ = _edit_text(lines[2], LONG)
    p.write_bytes(b"".join(lines[:2] + [edited] + lines[3:]))
    with pytest.raises(AuditIntegrityError, match=r"the entry before seq 4 does not verify \(edited"):
        AuditLog(p)
    unchained = _entry_line(5, "cd" * 32, _query(LONG))
    p.write_bytes(b"".join(lines) + unchained)
    with pytest.raises(AuditIntegrityError, match="seq 5 does not chain to the entry before it"):
        AuditLog(p)


def test_open_with_a_signer_refuses_a_recent_checkpoint_that_does_not_verify(tmp_path):
    sk, _ = keys.generate_keypair()
    signer = ReceiptSigner(sk)
    p = tmp_path / "audit.jsonl"
    lines = _log(p, [SHORT, SHORT, SHORT], signer=signer, checkpoint_every=2)
    e = json.loads(lines[1])
    assert "ckpt" in e
    ckpt = e.pop("ckpt")
    e["record"]["details"]["query_text"] = LONG
    e["hash"] = entry_hash(e)
    e["ckpt"] = ckpt  # the forger cannot re-sign it
    third = json.loads(lines[2])
    third["prev"] = e["hash"]
    third["hash"] = entry_hash(third)
    p.write_bytes(lines[0] + canonical_json(e) + b"\n" + canonical_json(third) + b"\n")
    with pytest.raises(AuditIntegrityError, match=f"checkpoint at seq 2 does not verify under this writer's key {signer.key_id}"):
        AuditLog(p, signer=signer, checkpoint_every=2)


def test_open_checks_back_to_the_last_checkpoint_only(tmp_path):
    # The bound that keeps opening a large log cheap, as docs/audit-log.md states it: damage older
    # than the last checkpoint (or than checkpoint_every entries) is left to `audit verify`.
    sk, _ = keys.generate_keypair()
    signer = ReceiptSigner(sk)
    p = tmp_path / "audit.jsonl"
    lines = _log(p, [SHORT] * 5, signer=signer, checkpoint_every=2)
    edited, _ = _edit_text(lines[0], LONG)
    p.write_bytes(edited + b"".join(lines[1:]))
    with AuditLog(p, signer=signer, checkpoint_every=2) as log:
        assert log.seq == 5
    with pytest.raises(AuditIntegrityError, match="failed verification: edited"):
        AuditLog(p, signer=signer, checkpoint_every=2, verify_existing=True)
    # A checkpoint under another key (a rotated guard key) verifies under that key given as
    # trusted (test_audit_review4: under an unknown key the writer refuses to open).
    other = ReceiptSigner(keys.generate_keypair()[0])
    p.write_bytes(b"".join(lines))
    with AuditLog(p, signer=other, checkpoint_every=2, trusted_keys={signer.key_id: signer.public_key}) as log:
        assert log.append({"event": "rotated"})["seq"] == 6
    # Without checkpoints the window is checkpoint_every entries: an edit further back is not read.
    q = tmp_path / "plain.jsonl"
    plain = _log(q, [SHORT] * 6, checkpoint_every=3)
    q.write_bytes(_edit_text(plain[1], LONG)[0].join([plain[0], b"".join(plain[2:])]))
    with AuditLog(q, checkpoint_every=3) as log:
        assert log.seq == 6
    with pytest.raises(AuditIntegrityError, match="the entry before seq 3 does not verify"):
        AuditLog(q, checkpoint_every=4)
