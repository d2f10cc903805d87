"""Groups and users for the tests of trust files and directories that their group may write.

A group-writable trust file is refused only when someone other than the guard's uid and root may
be in its group (qdrant_guard.group_writers); in a group only they are in (root's own, a
user-private group) it is accepted. A test that means "others may write it through its group"
gives the file such a group first. Tests that need a group of their own make real users with
useradd (as root) in a private copy of /etc, and run the guard's checks as one of them.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from typing import Callable

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


def _in_child(fn: Callable[[], str]) -> str:
    """What ``fn()`` returns in a forked child, or ``"error TYPE: MESSAGE"`` for what it raised."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
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


def as_user(pw: pwd.struct_passwd, fn: Callable[[], str]) -> str:
    """What ``fn()`` returns, run in a forked child that has become user ``pw`` (and its primary
    group, no other), or ``"error TYPE: MESSAGE"`` for what it raised. Needs root."""
    def become() -> str:
        os.setgroups([])
        os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
        os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
        return fn()
    return _in_child(become)


def in_private_etc(fn: Callable[[], str]) -> str:
    """What ``fn()`` returns (or ``"error TYPE: MESSAGE"``), run as root in a forked child whose
    /etc is a copy-on-write overlay of the machine's, in a mount namespace of its own: the users
    and groups it makes with useradd (:func:`add_user`) are real to it and its children, and
    never reach the machine's files, nor other tests reading them meanwhile. Skips where no such
    namespace or overlay can be made."""
    if shutil.which("useradd") is None:
        pytest.skip("useradd (package passwd) is not installed")
    scratch = tempfile.mkdtemp(dir="/tmp")
    upper, work = os.path.join(scratch, "upper"), os.path.join(scratch, "work")
    os.mkdir(upper)
    os.mkdir(work)

    def inside() -> str:
        why = _private_etc(upper, work)
        return f"skip {why}" if why else fn()
    try:
        said = _in_child(inside)
    finally:
        shutil.rmtree(scratch)
    if said.startswith("skip "):
        pytest.skip(f"no private /etc here ({said[len('skip '):]})")
    return said


_CLONE_NEWNS = 0x00020000


def _private_etc(upper: str, work: str) -> str | None:
    """Put this process in a mount namespace of its own with /etc an overlay writing to ``upper``;
    why not, or None."""
    if ctypes.CDLL(None, use_errno=True).unshare(_CLONE_NEWNS) != 0:
        return f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}"
    for argv in (["mount", "--make-rprivate", "/"],
                 ["mount", "-t", "overlay", "overlay", "-o", f"lowerdir=/etc,upperdir={upper},workdir={work}", "/etc"]):
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode:
            return f"{' '.join(argv)}: {done.stderr.strip()}"
    return None


_serial = itertools.count()


def add_user(*options: str) -> pwd.struct_passwd:
    """A user made with ``useradd OPTIONS`` (no home, no login shell): only inside
    :func:`in_private_etc`, whose /etc goes when it returns."""
    if not os.path.ismount("/etc"):
        raise RuntimeError("add_user() outside in_private_etc() would change the machine's user database")
    name = f"qgt{next(_serial)}"
    subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", *options, name], check=True, capture_output=True)
    return pwd.getpwnam(name)
