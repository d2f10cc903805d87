"""Leftovers of h-left5/h-left6: `audit repair` checks the log's mode and owner as opening it for
writing does. Real files, the real CLI."""
from __future__ import annotations

import os

import pytest

from qdrant_guard import AuditError, QdrantGuardError, keys
from qdrant_guard.audit import AuditLog, repair_audit_file
from qdrant_guard.cli import main

posix = pytest.mark.skipif(os.name != "posix", reason="file modes and owners are POSIX")


def _torn_log(path) -> bytes:
    """A log of three entries with a torn fourth line: what repair cuts."""
    with AuditLog(path) as log:
        for i in range(3):
            log.append({"event": "e", "i": i})
    with open(path, "ab") as f:
        f.write(b'{"seq": 4, "torn')
    return path.read_bytes()


def _cli(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


@posix
@pytest.mark.parametrize("mode,who", [(0o620, "group-writable"), (0o602, "world-writable"),
                                      (0o666, "group- and world-writable")], ids=["620", "602", "666"])
def test_repair_refuses_a_log_others_can_write_and_changes_nothing(tmp_path, mode, who):
    p = tmp_path / "audit.jsonl"
    before = _torn_log(p)
    os.chmod(p, mode)
    with pytest.raises(AuditError) as ei:
        repair_audit_file(p)
    msg = str(ei.value)
    assert isinstance(ei.value, QdrantGuardError)
    assert repr(str(p)) in msg and f"is {who} (mode {mode:o})" in msg
    assert f"`chmod 600 {p}`" in msg and "qdrant-guard audit repair --allow-shared-file" in msg
    assert "Nothing was changed" in msg
    assert p.read_bytes() == before and not list(tmp_path.glob("audit.jsonl.cut-*"))


@posix
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another uid needs root")
def test_repair_refuses_a_log_owned_by_another_uid(tmp_path):
    p = tmp_path / "audit.jsonl"
    before = _torn_log(p)
    os.chown(p, 54321, -1)
    with pytest.raises(AuditError) as ei:
        repair_audit_file(p)
    msg = str(ei.value)
    assert "owned by uid 54321" in msg and f"chown {os.geteuid()} {p}" in msg
    assert p.read_bytes() == before


@posix
def test_repair_refuses_a_log_in_a_world_writable_directory_without_sticky_bit(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    p = d / "audit.jsonl"
    before = _torn_log(p)
    os.chmod(d, 0o777)
    with pytest.raises(AuditError, match=r"world-writable without the sticky bit \(mode 777\)") as ei:
        repair_audit_file(p)
    assert f"chmod o-w {d}" in str(ei.value) and p.read_bytes() == before
    os.chmod(d, 0o1777)
    assert repair_audit_file(p).ok


@posix
def test_repair_opt_out_repairs_a_shared_log(tmp_path):
    p = tmp_path / "audit.jsonl"
    _torn_log(p)
    os.chmod(p, 0o664)
    with pytest.raises(TypeError, match="allow_shared_file must be bool"):
        repair_audit_file(p, allow_shared_file=1)
    rep = repair_audit_file(p, allow_shared_file=True)
    assert rep.ok and rep.detail.startswith("repaired: torn_tail")


@posix
def test_repair_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "audit.jsonl"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(AuditError, match=r"is a named pipe \(FIFO\), not a regular file"):
        repair_audit_file(fifo)


@posix
def test_cli_repair_refuses_a_shared_log_and_the_flag_or_policy_knob_opts_out(tmp_path, capsys):
    p = tmp_path / "audit.jsonl"
    before = _torn_log(p)
    os.chmod(p, 0o660)
    rc, out, err = _cli(["audit", "repair", str(p)], capsys)
    assert rc == 2 and "group-writable (mode 660)" in err and "--allow-shared-file" in err, (rc, out, err)
    assert "Traceback" not in err and p.read_bytes() == before
    # The same opt-out as the guard's: audit_allow_shared_file in the policy given to --trust-policy.
    key = tmp_path / "guard.key"
    key.write_bytes(keys.private_key_to_pem(keys.generate_keypair()[0]))
    os.chmod(key, 0o600)
    pol = tmp_path / "policy.toml"
    pol.write_text(f'signing_key = "{key}"\naudit_log = "{p}"\naudit_allow_shared_file = false\n')
    rc, out, err = _cli(["audit", "repair", str(p), "--trust-policy", str(pol)], capsys)
    assert rc == 2 and "group-writable" in err and p.read_bytes() == before, (rc, out, err)
    pol.write_text(f'signing_key = "{key}"\naudit_log = "{p}"\naudit_allow_shared_file = true\n')
    rc, out, err = _cli(["audit", "repair", str(p), "--trust-policy", str(pol)], capsys)
    assert rc == 0 and out.startswith("repaired: torn_tail"), (rc, out, err)
    _torn_again = p.read_bytes() + b'{"torn'
    p.write_bytes(_torn_again)
    rc, out, err = _cli(["audit", "repair", str(p), "--allow-shared-file"], capsys)
    assert rc == 0 and out.startswith("repaired: torn_tail"), (rc, out, err)
