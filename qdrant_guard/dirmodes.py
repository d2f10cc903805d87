"""Whether anyone may replace a file the guard trusts, whatever the file's own mode.

A file's mode says who may write it; its directories' modes say who may put another file in its
place. In a directory every user may write, without the sticky bit, anyone may rename an entry
away and create their own under its name: the trusted file itself, or a directory on its path.
And a file's owner may change its mode and write it, whatever the mode is now.
"""
from __future__ import annotations

import os
import stat


def replaceable_by_anyone(path: str | os.PathLike[str]) -> tuple[str, int] | None:
    """The first directory on the way to ``path`` that every user may write and that has no
    sticky bit, with its mode; None when there is none, or off POSIX.

    Both ways to the file are checked: the path as given (made absolute, its symlinks not
    followed, since anyone could replace a symlink too) and the path its symlinks resolve to.
    """
    if os.name != "posix":
        return None
    given = os.path.abspath(path)
    for way in dict.fromkeys((given, os.path.realpath(given))):
        d = os.path.dirname(way)
        while True:
            try:
                mode = stat.S_IMODE(os.stat(d).st_mode)
            except OSError:  # a lexical '..' past a symlink names no directory; the resolved way does
                mode = 0
            if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
                return d, mode
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
    return None


def foreign_owner(st: os.stat_result) -> int | None:
    """The owner of the file ``st`` describes when that is neither this process's effective uid
    nor root (either of which could rewrite the file anyway); None otherwise, or off POSIX."""
    if os.name != "posix" or st.st_uid in (0, os.geteuid()):
        return None
    return st.st_uid
