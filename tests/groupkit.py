"""Groups and users for the tests of trust files and directories that their group may write.

A group-writable trust file is refused only when someone other than the guard's uid and root may
be in its group (qdrant_guard.group_writers); in a group only they are in (root's own, a
user-private group) it is accepted. A test that means "others may write it through its group"
gives the file such a group first. Tests that need a group of their own make real users with
useradd (as root) and run the guard's checks as one of them.
"""
from __future__ import annotations

import grp
import itertools
import os
import pwd
import shutil
import subprocess
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import pytest

from qdrant_guard.group_writers import outsider


def give_shared_group(path: str | os.PathLike[str]) -> int:
    """Give ``path`` a group that someone other than this uid and root is in, and return its gid.
    Root may give any group (a primary group of another user is taken); other users only one they
    are in. Skips the test where there is none."""
    euid = os.geteuid()
    if euid == 0:
        gids = [pw.pw_gid for pw in pwd.getpwall() if pw.pw_uid not in (0, euid)]
    else:
        gids = [os.getegid(), *os.getgroups()]
    for gid in dict.fromkeys(gids):
        if outsider(gid, euid) is None:
            continue
        try:
            os.chown(path, -1, gid)
        except PermissionError:
            continue
        return gid
    pytest.skip("this uid can give no group with another user in it: its group write would let nobody else write")


def as_user(pw: pwd.struct_passwd, fn: Callable[[], str]) -> str:
    """What ``fn()`` returns, run in a forked child that has become user ``pw`` (and its primary
    group, no other), or ``"error TYPE: MESSAGE"`` for what it raised. Needs root."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
            os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
            os.write(w, fn().encode())
            status = 0
        except BaseException as exc:  # reported to the parent, whatever it was
            os.write(w, f"error {type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(status)
    os.close(w)
    with os.fdopen(r) as fh:
        said = fh.read()
    os.waitpid(pid, 0)
    return said


_serial = itertools.count()


def account_tool(*argv: str) -> None:
    """Run useradd, userdel, gpasswd or groupdel; retried while another process holds the lock
    of /etc/passwd or /etc/group (other test runs on this machine make users too)."""
    for _ in range(50):
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode == 0:
            return
        if "lock" not in done.stderr:
            break
        time.sleep(0.1)
    raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")


@contextmanager
def made_user(*options: str) -> Iterator[pwd.struct_passwd]:
    """A user made with ``useradd OPTIONS`` (no home, no login shell), deleted afterwards with the
    group of its name if useradd made one (``-U``). Skips where useradd is missing."""
    if shutil.which("useradd") is None:
        pytest.skip("useradd (package passwd) is not installed")
    name = f"qgt{os.getpid()}x{next(_serial)}"
    account_tool("useradd", "-M", "-s", "/usr/sbin/nologin", *options, name)
    try:
        yield pwd.getpwnam(name)
    finally:
        account_tool("userdel", name)
        try:
            grp.getgrnam(name)
        except KeyError:
            pass
        else:  # userdel keeps a user group that still had other members
            account_tool("groupdel", name)
