"""Whether anyone may replace a file the guard trusts, whatever the file's own mode.

A file's mode says who may write it; its directories' modes say who may put another file in its
place. In a directory every user may write, without the sticky bit, anyone may rename an entry
away and create their own under its name: the trusted file itself, or a directory on its path.
A directory's owner may do the same whatever its mode (he may chmod it), and a file's owner may
change its mode and write it, whatever the mode is now. OpenSSH's StrictModes refuses both. A
directory its group (or a named entry of its POSIX ACL) lets write, without the sticky bit, gives
every member the same power, unless only this process's uid and root can be in that group
(:mod:`group_writers`, as Debian's OpenSSH accepts user-private groups).
"""
from __future__ import annotations

import errno
import os
import stat
from typing import NamedTuple

from .group_writers import Writer, other_writer


class Replaceable(NamedTuple):
    """A directory on a trusted file's path that lets someone else replace what is below it."""

    directory: str
    mode: int
    owner: int | None  # its owner's uid when that owner is the hazard; None when every user may write it
    writer: Writer | None = None  # a group or ACL entry with others in it that may write it (owner is None then)


def replaceable_by_anyone(path: str | os.PathLike[str]) -> Replaceable | None:
    """The first directory on the way to ``path`` (from the file up to /) that every user may
    write and that has no sticky bit, that a uid other than this process's effective uid and
    root owns, or that a group or ACL entry others may be in lets write, without the sticky bit
    (:func:`group_writers.other_writer`); None when there is none, or off POSIX. Raises OSError,
    naming the directory, when one on the path cannot be examined (too long a path, no search
    permission, a symlink loop, an ACL it cannot read).

    Both ways to the file are checked: the path its symlinks resolve to, and the path as given
    (joined to the working directory, its symlinks not followed, since anyone could replace a
    symlink too, and a symlink's own owner counts).
    """
    if os.name != "posix":
        return None
    euid = os.geteuid()
    verdicts: dict[int, str | None] = {}  # gid -> why others may be in it: the user database read once a walk
    # Not abspath(): it drops "link/.." by its letters, where the kernel goes up from wherever the
    # link points; realpath() of the joined path follows the kernel.
    given = os.path.join(os.getcwd(), os.fspath(path))
    for way in dict.fromkeys((os.path.realpath(given), given)):
        d = os.path.dirname(way)
        while True:
            mode = owner = 0
            try:
                st = os.lstat(d)
                owner = st.st_uid
                if stat.S_ISLNK(st.st_mode):
                    st = os.stat(d)
                mode = stat.S_IMODE(st.st_mode)
            except OSError as exc:
                st = None
                # Nothing there (or a file, not a directory): nothing below it can be opened. Any
                # other failure (a path too long to stat, a directory this uid cannot search, a
                # loop) says nothing of who may write it, and must not pass for "nobody".
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                    raise OSError(exc.errno, (
                        f"cannot tell who may replace it: directory {d!r} on its path cannot be "
                        f"examined ({exc.strerror}); name the file by a shorter path that this uid can search, "
                        "through no symlink loop")) from exc
            if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
                return Replaceable(d, mode, None)
            if owner not in (0, euid):
                return Replaceable(d, mode, owner)
            # With the sticky bit a member may add entries but not rename others' (as for world write).
            if st is not None and mode & stat.S_IWGRP and not mode & stat.S_ISVTX:
                writer = other_writer(d, st, euid, verdicts)
                if writer is not None:
                    return Replaceable(d, mode, None, writer)
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


def replacement_refusal(path: str | os.PathLike[str], what: str, noun: str) -> str | None:
    """Why someone else could put another file in place of the trusted file at ``path`` through a
    directory on its path (:func:`replaceable_by_anyone`), worded for its loader's error (``what``
    names the file, ``noun`` what it holds: ``"key"``, ``"policy"``), with the fix; None when
    nobody could. Raises OSError as :func:`replaceable_by_anyone` does."""
    found = replaceable_by_anyone(path)
    if found is None:
        return None
    d, mode, uid, writer = found
    if writer is not None:
        return (f"{what} {str(path)!r} is below directory {d!r} (mode {mode:o}), which others may write: {writer.who}; "
                f"any of them can put a {noun} of their own in its place; run `{writer.fix}` (or `chmod +t {d}`), or "
                f"move the {noun} to a directory only its owner writes")
    if uid is not None:
        return (f"{what} {str(path)!r} is below directory {d!r}, owned by uid {uid}, neither this process's uid "
                f"({os.geteuid()}) nor root (mode {mode:o}): its owner can put a {noun} of their own in its place; "
                f"run `chown {os.geteuid()} {d}` (as root), or move the {noun} to a directory the guard's uid owns")
    return (f"{what} {str(path)!r} is below directory {d!r}, which every user may write and which has no sticky "
            f"bit (mode {mode:o}): anyone can put a {noun} of their own in its place; run `chmod o-w {d}` (or "
            f"`chmod +t {d}`), or move the {noun} to a directory only its owner writes")
