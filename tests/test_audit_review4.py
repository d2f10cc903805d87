"""Fourth review of the audit log: what the writer checks when it opens an existing log.

Each test pins a defect found in review (it failed before the fix next to it).
"""
from __future__ import annotations

from pathlib import Path

from qdrant_guard import audit
from qdrant_guard.audit import AuditLog


def _rec(i: int) -> dict:
    return {"op": "query_points", "collection": "docs", "verdict": "ALLOW", "details": {"query_text": f"q{i}"}}


def _log(path: Path, n: int, **kw) -> list[bytes]:
    with AuditLog(path, **kw) as log:
        for i in range(n):
            log.append(_rec(i))
    return path.read_bytes().splitlines(keepends=True)


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
