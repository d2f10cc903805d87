"""Whether other users could rewrite the SQLite budget store, and creating it so they cannot.

Whoever can write the database deletes the rows that count what each principal was given, and
reads a source past its cap again. SQLite also reads files beside the database by name: a hot
``-journal`` is played back into it when it is opened, a ``-wal`` holds pages newer than the
file's own, the ``-shm`` indexes them. Whoever may create a file in the database's directory can
plant one while it is absent (SQLite deletes the ``-wal`` and ``-shm`` when its last connection
closes), so that directory must not be writable by others even with the sticky bit, which stops
only the renaming and deleting of files others own; nor by a group (or POSIX ACL entry) that
anyone but the guard's uid and root may be in (:mod:`group_writers`).
"""
from __future__ import annotations

import errno
import os
import stat

from .dirmodes import foreign_owner, replaceable_by_anyone
from .group_writers import file_writer, other_writer

SIDE_FILES = ("-journal", "-wal", "-shm")

_STAKE = ("can delete the rows that count what each principal was given and read past the extraction "
          "budget's caps again")


def unsafe_store_file(path: str) -> str | None:
    """Why other users could rewrite the SQLite budget store at ``path`` (a message naming the
    file, its mode or owner, and the fix), or None. Files that do not exist yet are not checked
    (the store creates the database mode 600; SQLite gives its side files the database's mode and
    owner); nor is a directory that does not exist (opening the store then fails). A path starting
    ``file:`` is refused: SQLite may read it as a URI naming another file."""
    if path.startswith("file:"):
        # SQLite built with SQLITE_USE_URI (as Python's often is) reads such a name as a URI even
        # without uri=True: it opens the file the URI names, unchecked, created 644 minus the umask,
        # and its query can turn locking off (nolock=1) or the file read-only.
        return (f"budget store {path!r} starts with 'file:', which SQLite may read as a URI naming another file "
                "(its query can also turn off locking), so the checks made on this path would not be on the file "
                f"opened; give the database's plain path, or './{path}' for a file of that name")
    if os.name != "posix":
        return None
    # Not abspath(): it drops "link/.." by its letters, and its realpath then misses the directory
    # the kernel (and SQLite) goes up to from where the link points.
    given = os.path.join(os.getcwd(), path)
    # SQLite opens a symlinked database where it resolves to and puts the side files there.
    for db in dict.fromkeys((given, os.path.realpath(given))):
        why = _unsafe_beside(path, db, given)
        if why is not None:
            return why
    return None


def _unsafe_beside(path: str, db: str, given: str) -> str | None:
    d = os.path.dirname(db)
    try:
        dst = os.stat(d)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        # Too long a path, or one this uid cannot search: who may write there is unknown, not "nobody".
        return (f"budget store {path!r}: cannot tell who may write its directory {d!r} ({exc.strerror}); give the "
                "store a shorter path that this uid can search")
    try:
        found = replaceable_by_anyone(db)
    except OSError as exc:
        return f"budget store {path!r}: {exc.strerror}"
    dmode = stat.S_IMODE(dst.st_mode)
    if dmode & stat.S_IWOTH:
        return (f"budget store {path!r} is in directory {d!r}, which every user may create files in (mode {dmode:o}): "
                f"anyone can put a -journal or -wal file of their own beside the database, which SQLite plays "
                f"into it, and so {_STAKE}; run `chmod o-w {d}`, or move the store to a directory only the "
                "guard's uid writes")
    uid = foreign_owner(dst)
    if uid is not None:
        return (f"budget store {path!r} is in directory {d!r}, owned by uid {uid}, neither this process's uid "
                f"({os.geteuid()}) nor root (mode {dmode:o}): its owner can replace the database and {_STAKE}; run "
                f"`chown {os.geteuid()} {d}` (as root), or move the store to a directory the guard's uid owns")
    try:
        writer = other_writer(d, dst)
    except OSError as exc:
        return f"budget store {path!r}: {exc.strerror}"
    if writer is not None:
        return (f"budget store {path!r} is in directory {d!r} (mode {dmode:o}), which others may create files in: "
                f"{writer.who}; any of them can put a -journal or -wal file of their own beside the database, which "
                f"SQLite plays into it, and so {_STAKE}; run `{writer.fix}`, or move the store to a directory only "
                "the guard's uid writes")
    writer = found.writer if found is not None else None
    if found is not None and writer is not None:
        up = found.directory
        return (f"budget store {path!r} is below directory {up!r} (mode {found.mode:o}), which others may write: "
                f"{writer.who}; any of them can put a directory of their own on its path and so {_STAKE}; run "
                f"`{writer.fix}` (or `chmod +t {up}`), or move the store to a directory only its owner writes")
    if found is not None and found.owner is not None:
        up, upmode, upuid, _ = found
        return (f"budget store {path!r} is below directory {up!r}, owned by uid {upuid}, neither this process's uid "
                f"({os.geteuid()}) nor root (mode {upmode:o}): its owner can put a directory of their own on its path "
                f"and so {_STAKE}; run `chown {os.geteuid()} {up}` (as root), or move the store to a directory the "
                "guard's uid owns")
    if found is not None:
        up, upmode, _, _ = found
        return (f"budget store {path!r} is below directory {up!r}, which every user may write and which has no "
                f"sticky bit (mode {upmode:o}): anyone can put a directory of their own on its path and so {_STAKE}; "
                f"run `chmod o-w {up}` (or `chmod +t {up}`), or move the store to a directory only its owner writes")
    for name in (db, *(db + side for side in SIDE_FILES)):
        shown = path if name == given else name
        try:
            st = os.stat(name)
        except OSError:
            continue  # missing, or metadata this uid cannot read: opening the store reports it
        mode = stat.S_IMODE(st.st_mode)
        try:
            writer = file_writer(shown, st)
        except OSError as exc:  # an ACL it cannot read: not taken for none
            return f"budget store file {shown!r}: {exc.strerror}"
        if writer is not None:
            return (f"budget store file {shown!r} is writable by other users (mode {mode:o}{writer.note}): "
                    f"whoever can write it {_STAKE}; run `{writer.fix}` and retry")
        uid = foreign_owner(st)
        if uid is not None:
            return (f"budget store file {shown!r} is owned by uid {uid}, neither this process's uid ({os.geteuid()}) "
                    f"nor root (mode {mode:o}): its owner can change its mode, write it and so {_STAKE}; run "
                    f"`chown {os.geteuid()} {shown}` (as root) and retry")
    return None


def create_private(path: str) -> None:
    """Create the database file ``path`` empty, mode 600 whatever the umask, unless it exists
    (SQLite reads an empty file as an empty database and would create it 644 minus the umask).
    Mode 600 since its rows name principals, collections, sources and point ids: who read what.
    A failure is left to SQLite's open, which reports it."""
    try:
        # Where a symlink points: SQLite follows a dangling one and would create its target itself.
        fd = os.open(os.path.realpath(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
                     | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        return
    try:
        if os.name == "posix":
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
