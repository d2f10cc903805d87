"""Groups for the tests of trust files that their group may write.

A group-writable trust file is refused only when someone other than the guard's uid and root may
be in its group (qdrant_guard.group_writers); in a group only they are in (root's own, a
user-private group) it is accepted. A test that means "others may write it through its group"
gives the file such a group first.
"""
from __future__ import annotations

import os
import pwd

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
