"""Whose files the guard trusts is decided by the process's *effective* uid (2026-12-07).

A set-uid or ``seteuid`` process acts as its effective uid: the kernel lets it rewrite the files
that uid owns, and only those. The owner checks (``dirmodes.foreign_owner`` and the directory walk
``replaceable_by_anyone``) compare with ``os.geteuid()``; with ``os.getuid()`` instead, a guard
running as root with effective uid 65534 would refuse its own 65534-owned keys and accept keys
that uid 0's real identity owns but it cannot protect. No test ran with the two uids different
before this one. Needs root (``seteuid``), in a forked child so the test process keeps its uid.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from qdrant_guard import keys
from qdrant_guard.dirmodes import foreign_owner, replaceable_by_anyone

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="seteuid to another uid needs root")
EUID = 65534  # nobody
OTHER = 1  # daemon


def _in_child_as(euid: int, check) -> None:
    """Run ``check()`` in a forked child whose effective uid is ``euid`` (real uid stays 0); fail
    with its exception text when it raises."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(r)
        try:
            os.seteuid(euid)
            assert os.getuid() == 0 and os.geteuid() == euid
            check()
            os.write(w, b"ok")
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            os.write(w, f"{type(exc).__name__}: {exc}".encode()[:4000])
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        got = fh.read().decode()
    os.waitpid(pid, 0)
    assert got == "ok", got


@pytest.fixture()
def home():
    # Not below pytest's tmp_path: its root-owned 0700 parent is closed to uid 65534.
    d = tempfile.mkdtemp(prefix="qg-euid-", dir="/tmp")
    os.chown(d, EUID, -1)
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d)


def _pub(d: str, owner: int) -> tuple[str, object]:
    _, pk = keys.generate_keypair()
    path = os.path.join(d, f"k{owner}.pub")
    with open(path, "w") as fh:
        fh.write(keys.public_key_to_str(pk) + "\n")
    os.chmod(path, 0o644)
    os.chown(path, owner, -1)
    return path, pk


def test_a_file_the_effective_uid_owns_is_its_own_and_another_uids_is_not(home):
    own, pk = _pub(home, EUID)
    other, _ = _pub(home, OTHER)

    def check():
        assert foreign_owner(os.stat(own)) is None
        assert foreign_owner(os.stat(other)) == OTHER
        assert replaceable_by_anyone(own) is None  # its directory is the effective uid's
        assert keys.load_public_key(own) == pk
        try:
            keys.load_public_key(other)
        except keys.KeyStoreError as exc:
            assert f"owned by uid {OTHER}" in str(exc) and f"process's uid ({EUID})" in str(exc), str(exc)
        else:
            raise AssertionError("a key another uid owns was accepted")

    _in_child_as(EUID, check)


def test_a_directory_the_real_uid_owns_is_not_the_effective_uids(home):
    # A directory owned by uid 0 is root's: trusted whatever the effective uid (root may replace
    # anything). One owned by the effective uid is trusted; one owned by another is not, even when
    # the real uid is root.
    sub = os.path.join(home, "sub")
    os.mkdir(sub)
    os.chmod(sub, 0o755)
    os.chown(sub, OTHER, -1)
    path, _ = _pub(sub, EUID)

    def check():
        found = replaceable_by_anyone(path)
        assert found is not None and found.directory == sub and found.owner == OTHER, found

    _in_child_as(EUID, check)
