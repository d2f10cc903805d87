"""Whether an audit log file may be written: refusing a log others can write or replace, and a
path that names no regular file. The writer (:class:`qdrant_guard.audit.AuditLog`) checks on open,
the repair (:mod:`qdrant_guard.audit_repair`) before it changes anything; each error names the fix.
"""
from __future__ import annotations

import os
import stat

from .dirmodes import replaceable_by_anyone
from .group_writers import file_writer
from .errors import AuditError

_OPT_OUT = ("or, if other users must write it, set audit_allow_shared_file = true in the policy "
            "(AuditLog(..., allow_shared_file=True))")
_REPAIR_OPT_OUT = ("then repair again; or, if other users must write it, repair with `qdrant-guard audit repair "
                   "FILE --allow-shared-file` (or audit_allow_shared_file = true in the --trust-policy policy; "
                   "repair_audit_file(..., allow_shared_file=True)). Nothing was changed")


def _refuse_shared(fd: int, path: str | None, abspath: str, opt_out: str = _OPT_OUT) -> None:
    """Refuse a log file others can write: what they append, the next checkpoint signs.

    The checks see the file's mode, owner and directory, not who holds it open: a process that
    runs as the guard's uid still writes it (docs/audit-log.md).
    """
    if os.name != "posix":
        return
    st = os.fstat(fd)
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid():
        raise AuditError(
            f"audit log {path!r} is owned by uid {st.st_uid}, not the guard's uid {os.geteuid()} (mode {mode:o}): its "
            f"owner can change its mode and write entries that the next signed checkpoint would sign; run "
            f"`chown {os.geteuid()} {abspath} && chmod 600 {abspath}`, {opt_out}")
    try:
        writer = file_writer(abspath, st)
    except OSError as exc:  # an ACL it cannot read: not taken for none
        raise AuditError(f"audit log {path!r}: {exc.strerror}; {opt_out}") from exc
    if writer is not None:
        who = "group- and world-writable" if mode & stat.S_IWGRP and mode & stat.S_IWOTH else (
            "group-writable" if mode & stat.S_IWGRP else "world-writable")
        # World write: 600, since its entries say who read what; group write: only the write goes.
        fix = f"chmod 600 {abspath}" if mode & stat.S_IWOTH else writer.fix
        raise AuditError(
            f"audit log {path!r} is {who} (mode {mode:o}{writer.note}): anyone who can write it can append "
            f"entries that the next signed checkpoint would sign; run `{fix}`, {opt_out}")
    # A directory anyone (or a group others are in) may write without the sticky bit lets them
    # rename the log (or a directory on its path) away and put one of their own in its place (the
    # writer notices only at its next append).
    try:
        found = replaceable_by_anyone(path if path is not None else abspath)  # abspath drops "link/.."
    except OSError as exc:  # a directory on its path cannot be examined: not taken for safe
        raise AuditError(f"audit log {path!r}: {exc.strerror}") from exc
    if found is None:
        return
    d = found.directory
    where = "in" if d == os.path.dirname(abspath) else "below"
    if found.writer is not None:
        raise AuditError(
            f"audit log {path!r} is {where} directory {d!r} (mode {found.mode:o}), which others may write: "
            f"{found.writer.who}; any of them can replace the log there; run `{found.writer.fix}` (or `chmod +t {d}`), "
            f"move the log to a directory only the guard's uid writes, {opt_out}")
    if found.owner is not None:
        raise AuditError(
            f"audit log {path!r} is {where} directory {d!r}, owned by uid {found.owner}, neither the guard's uid "
            f"({os.geteuid()}) nor root (mode {found.mode:o}): its owner can replace the log there; run "
            f"`chown {os.geteuid()} {d}` (as root), move the log to a directory the guard's uid owns, {opt_out}")
    raise AuditError(
        f"audit log {path!r} is {where} directory {d!r}, which is world-writable without the sticky bit "
        f"(mode {found.mode:o}): anyone can replace the log there; run `chmod o-w {d}` (or `chmod +t {d}`), "
        f"move the log to a directory only the guard's uid writes, {opt_out}")

def _refuse_not_regular(st: os.stat_result, path: str | None, *, repair: bool = False) -> None:
    """Refuse a log path that names no regular file: the writer re-reads what it appended (the
    chain check before each append), which a device or pipe does not give back, so its second
    append failed as a log "cut off" by someone else."""
    if stat.S_ISREG(st.st_mode):
        return
    kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode)
            else "a character device" if stat.S_ISCHR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode)
            else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
    if repair:
        raise AuditError(f"audit log {path!r} is {kind}, not a regular file, so it is no log the guard wrote and "
                         "was not repaired (nothing was changed): name the audit_log file itself")
    raise AuditError(
        f"audit log {path!r} is {kind}, not a regular file: the guard re-reads its log to check the hash "
        "chain before each append, which only a regular file gives back; set audit_log to the path of a "
        "regular file (created if missing), or leave audit_log unset to log entries to the "
        "qdrant_guard.audit logger only")

