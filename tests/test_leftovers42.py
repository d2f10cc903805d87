"""Leftovers of review 41: the guard refuses an audit log file that others than its uid can write
(they could forge entries that the next signed checkpoint signs) unless the policy opts out, and
key loading refuses a path that is not a regular file (a named pipe hung ``load_private_key``).
Real files, real FIFOs, real local-mode Qdrant."""
from __future__ import annotations

import os
import stat
import threading

import pytest

from qdrant_guard import AuditError, QdrantClient, QdrantGuardError, keys
from qdrant_guard.audit import AuditLog
from qdrant_guard.errors import ConfigError
from qdrant_guard.keys import KeyStoreError
from qdrant_guard.policy import config_from_dict
from tests.groupkit import give_shared_group
from tests.guardkit import make_kit

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes, owners and FIFOs are POSIX")


def _load_in_thread(func, path):
    """Run func(path) in a thread; if it is still blocked after 5 s, unblock it (open the FIFO for
    writing and close it, so the reader sees end of file) and report that it blocked."""
    out: dict = {}

    def run():
        try:
            out["value"] = func(path)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(5)
        out["blocked"] = True
    return out


@pytest.mark.parametrize("func", [keys.load_private_key, keys.load_public_key], ids=["private", "public"])
def test_a_key_path_that_is_a_fifo_is_refused_without_blocking(tmp_path, func):
    fifo = tmp_path / "guard.key"
    os.mkfifo(fifo, 0o600)
    out = _load_in_thread(func, fifo)
    assert "blocked" not in out, "loading a key from a FIFO blocked waiting for a writer"
    err = out.get("error")
    assert isinstance(err, KeyStoreError), out
    msg = str(err)
    assert str(fifo) in msg and "named pipe (FIFO)" in msg and "not a regular file" in msg
    assert "write the key to a regular file" in msg


def test_a_fifo_put_in_place_after_the_stat_is_refused_on_the_open_descriptor(tmp_path, monkeypatch):
    # The race the pre-open stat alone would lose: the path was a regular file when checked and is
    # a FIFO when opened. The open must not block and the descriptor's fstat must refuse it.
    regular = tmp_path / "real.key"
    regular.write_bytes(b"x")
    fifo = tmp_path / "swapped.key"
    os.mkfifo(fifo, 0o600)
    real_stat = os.stat

    def stat_as_if_regular(path, *a, **kw):
        return real_stat(regular) if os.fspath(path) == str(fifo) else real_stat(path, *a, **kw)

    monkeypatch.setattr(keys.os, "stat", stat_as_if_regular)
    out = _load_in_thread(keys.load_private_key, fifo)
    assert "blocked" not in out, "opening a FIFO swapped in after the check blocked"
    assert isinstance(out.get("error"), KeyStoreError) and "named pipe (FIFO)" in str(out["error"]), out


def test_a_character_device_is_refused_as_a_key_file():
    if not os.path.exists("/dev/null"):
        pytest.skip("needs /dev/null")
    for func in (keys.load_private_key, keys.load_public_key):
        with pytest.raises(KeyStoreError, match=r"'/dev/null' is a character device, not a regular file"):
            func("/dev/null")


def test_a_directory_is_refused_as_a_key_file_and_the_fix_names_a_file_in_it(tmp_path):
    for func in (keys.load_private_key, keys.load_public_key):
        with pytest.raises(KeyStoreError) as ei:
            func(tmp_path)
        msg = str(ei.value)
        assert f"{str(tmp_path)!r} is a directory, not a regular file" in msg
        assert str(tmp_path / "guard.key") in msg


@pytest.mark.parametrize("mode,who", [(0o620, "group-writable"), (0o602, "world-writable"),
                                      (0o666, "group- and world-writable")])
def test_an_existing_log_others_can_write_is_refused_naming_path_mode_and_fix(tmp_path, mode, who):
    p = tmp_path / "audit.jsonl"
    AuditLog(p).close()
    os.chmod(p, mode)
    world = mode & 0o002
    gid = None if world else give_shared_group(p)  # a group only this uid and root are in may write it
    with pytest.raises(AuditError) as ei:
        AuditLog(p)
    msg = str(ei.value)
    assert isinstance(ei.value, QdrantGuardError)
    assert repr(str(p)) in msg and f"is {who} (mode {mode:o}" in msg
    assert world or f"(gid {gid}) may write it" in msg
    assert f"`chmod {'600' if world else 'g-w'} {p}`" in msg and "audit_allow_shared_file = true" in msg


def test_a_new_log_is_created_0600_under_umask_0_and_a_later_chmod_is_refused_on_reopen(tmp_path):
    p = tmp_path / "audit.jsonl"
    old = os.umask(0)
    try:
        log = AuditLog(p)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    log.append({"event": "a"})
    log.close()
    os.chmod(p, 0o660)
    give_shared_group(p)
    # The next append reopens the file (as a forked child does) and checks it again.
    with pytest.raises(AuditError, match=r"group-writable \(mode 660: its group"):
        log.append({"event": "b"})
    assert len(p.read_text().splitlines()) == 1


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_log_owned_by_another_uid_is_refused(tmp_path):
    p = tmp_path / "audit.jsonl"
    AuditLog(p).close()
    os.chown(p, 54321, -1)
    with pytest.raises(AuditError) as ei:
        AuditLog(p)
    msg = str(ei.value)
    assert "owned by uid 54321" in msg and f"not the guard's uid {os.geteuid()}" in msg and "(mode 600)" in msg
    assert f"chmod 600 {p}" in msg


def test_a_log_in_a_world_writable_directory_without_sticky_bit_is_refused(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(AuditError) as ei:
        AuditLog(d / "audit.jsonl")
    msg = str(ei.value)
    assert f"directory {str(d)!r}, which is world-writable without the sticky bit (mode 777)" in msg
    assert f"chmod o-w {d}" in msg
    # The sticky bit (as on /tmp) stops others renaming or deleting the guard's file: accepted.
    os.chmod(d, 0o1777)
    log = AuditLog(d / "audit.jsonl")
    log.append({"event": "ok"})
    log.close()


def test_the_opt_out_accepts_a_shared_log(tmp_path):
    p = tmp_path / "audit.jsonl"
    AuditLog(p).close()
    os.chmod(p, 0o664)
    with AuditLog(p, allow_shared_file=True) as log:
        log.append({"event": "shared"})
    with pytest.raises(TypeError, match="allow_shared_file must be bool"):
        AuditLog(p, allow_shared_file="yes")


def test_the_policy_knob_reaches_the_guarded_client(tmp_path):
    kit = make_kit(tmp_path)
    log = tmp_path / "audit.jsonl"
    log.write_text("")
    os.chmod(log, 0o664)
    give_shared_group(log)
    with pytest.raises(AuditError, match=r"group-writable \(mode 664: its group"):
        QdrantClient(":memory:", guard=kit.config({}), principal=kit.principal("alice", "hr"))
    client = QdrantClient(":memory:", guard=kit.config({}, audit_allow_shared_file=True),
                          principal=kit.principal("alice", "hr"))
    try:
        assert client.get_collections().collections == []
    finally:
        client.close()


def test_the_policy_knob_without_an_audit_log_is_refused():
    with pytest.raises(ConfigError, match="audit_allow_shared_file = true .* audit_log is not set"):
        config_from_dict({"audit_allow_shared_file": True}, source="p.toml")
