"""Review of the cryptographic core: receipts, credentials, keys, the audit chain and replay.

Each test pins a defect found in review (it failed before the fix next to it).
"""
from __future__ import annotations

from pathlib import Path

from qdrant_guard.audit import AuditLog, repair_audit_file, verify_audit_file


def _log(path: Path, n: int, tag: str = "a") -> list[bytes]:
    with AuditLog(path) as log:
        for i in range(n):
            log.append({"event": tag, "i": i})
    return path.read_bytes().splitlines(keepends=True)


# --------------------------------------------------------------------------- audit: inserted lines

def test_replayed_tail_blames_the_replay_not_the_original(tmp_path):
    # Lines 3..6 copied again after line 6: the originals are sound; the copies are the problem.
    lines = _log(tmp_path / "a.jsonl", 6)
    p = tmp_path / "replayed.jsonl"
    p.write_bytes(b"".join(lines + lines[2:]))
    rep = verify_audit_file(p)
    assert (rep.problem, rep.index, rep.valid_prefix, rep.last_seq) == ("inserted", 7, 6, 6), rep.detail
    # Repair keeps all six sound entries and cuts only the replayed copies.
    fixed = repair_audit_file(p)
    assert fixed.ok and fixed.last_seq == 7
    assert p.read_bytes().splitlines(keepends=True)[:6] == lines


def test_spliced_middle_of_another_log_blames_the_splice(tmp_path):
    # Entries 3..5 of another log appended: they chain to nothing in this file.
    own = _log(tmp_path / "a.jsonl", 5)
    other = _log(tmp_path / "b.jsonl", 5, tag="b")
    p = tmp_path / "spliced.jsonl"
    p.write_bytes(b"".join(own + other[2:]))
    rep = verify_audit_file(p)
    assert (rep.problem, rep.index, rep.valid_prefix) == ("inserted", 6, 5), rep.detail
