"""Second review of the audit log's verifier and repair.

Each test pins a defect found in review (it failed before the fix next to it).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qdrant_guard.audit import AuditLog, repair_audit_file, verify_audit_file
from qdrant_guard.errors import AuditError

ROOT = str(Path(__file__).resolve().parents[1])


def _log(path: Path, n: int, tag: str = "real") -> list[bytes]:
    with AuditLog(path) as log:
        for i in range(n):
            log.append({"event": tag, "i": i})
    return path.read_bytes().splitlines(keepends=True)


def _side_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".cut-*"))


# --------------------------------------------------------------------------- repair: side file

def test_two_repairs_at_the_same_seq_do_not_collide_on_the_side_file(tmp_path):
    # The side file was `<log>.cut-<seq>-<unix second>` opened O_EXCL: a second repair cutting at
    # the same seq within that second (or a name squatted by anyone who can create files next to
    # the log) made repair fail with "File exists". The names of the next two minutes are taken
    # here, so the old naming fails however slowly this runs.
    p = tmp_path / "a.jsonl"
    lines = _log(p, 4)
    now = int(time.time())
    for t in range(now - 1, now + 120):
        (tmp_path / f"a.jsonl.cut-4-{t}").write_bytes(b"squatter\n")
    squatted = set(_side_files(p))
    cuts = []
    for junk in (b"junk one\n", b"junk two\n"):
        p.write_bytes(b"".join(lines) + junk)
        rep = repair_audit_file(p)
        assert rep.ok and rep.last_seq == 5, rep.detail
        (side,) = set(_side_files(p)) - squatted - set(cuts)
        assert side.read_bytes() == junk and (os.stat(side).st_mode & 0o777) == 0o600
        cuts.append(side)
    assert len(set(cuts)) == 2


_LIMITED_REPAIR = r"""
import resource, signal, sys
from qdrant_guard.audit import repair_audit_file
from qdrant_guard.errors import AuditError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    rep = repair_audit_file(sys.argv[1])
except AuditError as exc:
    print("AuditError:", exc)
else:
    print("repaired:", rep.ok, rep.detail)
"""


def test_repair_that_cannot_save_all_cut_bytes_changes_nothing(tmp_path):
    # os.write() of the cut bytes to the side file was not checked for a short write: under a file
    # size limit (or a nearly full disk) only part of the cut was saved, and the log was then
    # truncated anyway, losing the rest. A real limit (RLIMIT_FSIZE) in a child process, no mocks.
    p = tmp_path / "a.jsonl"
    _log(p, 3)
    with open(p, "ab") as fh:
        fh.write(b"x" * 200_000 + b"\n")  # a corrupt line far bigger than the limit below
    before = p.read_bytes()
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", _LIMITED_REPAIR, str(p), str(64 * 1024)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert p.read_bytes() == before, out.stdout
    assert out.stdout.startswith("AuditError:") and "nothing was changed" in out.stdout, out.stdout
    assert _side_files(p) == []
    # Without the limit the same repair goes through and keeps every cut byte.
    rep = repair_audit_file(p)
    assert rep.ok
    (side,) = _side_files(p)
    assert side.read_bytes() == before[len(b"".join(before.splitlines(keepends=True)[:3])):]


def test_repair_that_cannot_write_its_entry_does_not_leave_a_silent_clean_cut(tmp_path):
    # Repair truncated the log first and appended its entry after: when that append failed, the
    # damaged tail was gone and nothing recorded the cut, so the log verified as sound. Now the
    # entry is written over the cut bytes before truncating; when it cannot be written the log is
    # as it was (the cut is already safe in the side file) and verify still reports the damage.
    p = tmp_path / "a.jsonl"
    _log(p, 3, tag="r" * 30_000)  # a valid prefix of about 90 kB ...
    before_prefix = p.stat().st_size
    with open(p, "ab") as fh:
        fh.write(b"garbage\n")   # ... then a short corrupt line
    before = p.read_bytes()
    env = dict(os.environ, PYTHONPATH=ROOT)
    # The limit lets the small side file be written but not the log beyond its valid prefix.
    out = subprocess.run([sys.executable, "-c", _LIMITED_REPAIR, str(p), str(before_prefix - 1000)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert p.read_bytes() == before, out.stdout
    assert out.stdout.startswith("AuditError:") and "saved in" in out.stdout, out.stdout
    rep = verify_audit_file(p)
    assert (rep.ok, rep.problem, rep.index) == (False, "corrupt", 4)
    (side,) = _side_files(p)
    assert side.read_bytes() == b"garbage\n"
