"""Tamper-evident audit log: hash-chained JSON lines, also emitted through stdlib logging.

Each line is the canonical JSON of one entry ``{"seq", "ts", "prev", "record", "hash"}`` where
``hash = SHA-256(canonical_json(entry without "hash", "ckpt" and "mac"))`` and ``prev`` is the previous
entry's hash (64 zeros for the first). With a signer, every ``checkpoint_every``-th entry (and
every repair entry, and a writer's first v2 entry in a log without one, its first entry in a
new log included) also carries
``ckpt = {"kid", "sig"}``: an Ed25519 signature over
``b"qdrant-guard audit checkpoint v1\\0" + hash``, which covers the whole chain up to it, entries
others appended included. With a signer each entry is also in format v2: its writer id ``"w"``
(hashed) and ``"mac"``, the writer's HMAC of the hash (:mod:`qdrant_guard.audit_mac`), which is
what shows which entries that writer made (``verify_audit_file(writer_keys=...)``).
A file holding two chains for the same place (a second genesis, or a fork) is reported with both
chains; repair keeps one only on a signed checkpoint or the operator's word. See docs/audit-log.md.

This module holds the writer; entries are made in :mod:`qdrant_guard.audit_write`, the log file
checks in :mod:`qdrant_guard.audit_file_access`, verification in :mod:`qdrant_guard.audit_verify` and
repair in :mod:`qdrant_guard.audit_repair` (their public names are importable from here too).
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .audit_file_access import _refuse_not_regular, _refuse_shared
from .audit_mac import EntryMac, unvouched as _unvouched
from .audit_repair import repair_audit_file as repair_audit_file
from .audit_verify import (
    AUDIT_PROBLEMS,
    CHECKPOINT_PREFIX,
    DEFAULT_CHECKPOINT_EVERY,
    GENESIS,
    AuditReport,
    PathLike,
    _Bad,
    _REPAIR_HINT,
    _check_ckpt,
    _parse_line,
    _read_all,
    _show_kid,
    entry_hash,
    verify_audit_file,
)
from .audit_write import _lock, _make_entry, _unlock
from .canonical import canonical_json
from .errors import (
    AuditError,
    AuditIntegrityError,
    AuditUnauthenticatedError,
    GuardArgumentTypeError,
    GuardArgumentValueError,
)
from .receipts import ReceiptSigner

__all__ = [
    "GENESIS",
    "CHECKPOINT_PREFIX",
    "DEFAULT_CHECKPOINT_EVERY",
    "AUDIT_PROBLEMS",
    "AuditLog",
    "AuditReport",
    "entry_hash",
    "verify_audit_file",
    "repair_audit_file",
]


def _check_record_bytes(record_bytes: Any) -> bytes:
    if not isinstance(record_bytes, bytes):
        raise GuardArgumentTypeError(f"AuditLog.append_encoded() record_bytes must be bytes, not {type(record_bytes).__name__}")
    # Cheap structural checks only (the caller vouches for the rest): an object, one line, UTF-8.
    if not (record_bytes.startswith(b"{") and record_bytes.endswith(b"}")) or b"\n" in record_bytes:
        raise GuardArgumentValueError("AuditLog.append_encoded() record_bytes must be canonical_json(record): one "
                                      "JSON object on one line")
    try:
        record_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GuardArgumentValueError(f"AuditLog.append_encoded() record_bytes is not UTF-8 ({exc})") from None
    return record_bytes


def _last_v2_before(fd: int, end: int) -> dict[str, Any] | None:
    """The last entry in format v2 among the file's lines before byte ``end`` (a line start), or None.

    Canonical JSON puts ``"w"``, the last key, at the end of a v2 line, so only lines ending in
    ``"}`` are parsed (a v1 line ends in its ``ts`` number): the rest are searched, not decoded.
    """
    pos, buf = end, b""  # buf: the bytes [pos, ...) still to search, ending at a line start
    while True:
        i = buf.rfind(b'"}\n')
        if i >= 0:
            start = buf.rfind(b"\n", 0, i) + 1
            if start > 0 or pos == 0:
                try:
                    entry = _parse_line(buf[start:i + 2])
                except _Bad:
                    entry = None  # not an entry: no evidence either way
                if entry is not None and "w" in entry:
                    return entry
                buf = buf[:start]
                continue
        elif pos == 0:
            return None
        else:
            # Nothing here; only the partial line at the front can still end in a match.
            buf = buf[:buf.find(b"\n") + 1]
        step = min(1 << 20, pos)
        pos -= step
        buf = _read_all(fd, pos, step) + buf


# Why a v1 entry at or after signed_from is refused (what tells it apart in _refuse_unvouched).
_BEFORE_SIGNING = "carries no writer id (format v1) at or after seq {s}, where signing began (signed_from)"


# Entries in format v1 where signing had begun verify as a legacy prefix without signed_from,
# so repair keeps them: the log can only be set aside.
_MOVE_ASIDE_HINT = (
    "Someone without the guard's key rewrote the log from there (hashes recomputed) or cut it; `qdrant-guard "
    "audit repair` cannot cut such entries (without --signed-from they verify): keep a copy of the file, check "
    "it with `qdrant-guard audit verify {path} --key GUARD.pub --signed-from {s}`, and, with the guards "
    "stopped, move it aside so that the guard starts a new log (then set audit_signed_from = 1)")


def _trust_hint(found: list[tuple[int, str, Any]], own: str) -> str:
    """For entries under writer ids the writer does not know: the fix when they are genuine."""
    others = sorted({w for _, _, w in found if isinstance(w, str) and w != own})
    if not others:
        return ""
    names = ", ".join(_show_kid(w) for w in others[:5])
    return (f"If {names} is an earlier signing key of this guard (a rotated key) or the key of another guard "
            "writing this log, add its public key to receipts.retired_keys or audit_trusted_keys in the policy "
            "(AuditLog(trusted_keys=...)) after checking the log with `qdrant-guard audit verify` and that key; "
            "otherwise the log was tampered with. ")


def _signature_hint(found: list[tuple[int, str, Any]]) -> str:
    """For entries refused under sign_every_entry for want of their writer's signature: the fix
    when that writer is genuine."""
    if not any("signature" in why for _, why, _ in found):
        return ""
    return ("Under audit_sign_every_entry every guard writing this log must set it too (a guard without it "
            "writes unsigned entries, which read like forged ones); entries a guard wrote before it was set "
            "are refused as well: start the guards on a new audit_log file, keeping this one (check it first "
            "with one --writer-key per guard). ")


class AuditLog:
    """Append-only, hash-chained audit log (thread- and multi-process-safe), mirrored to logging.

    Args:
        path: JSONL file (created 0600 if missing), or ``None`` for logging only with the chain
            kept in memory.
        logger_name: every entry is logged at INFO with ``extra={"qdrant_guard": entry}``.
        fsync: fsync after each append (durable across power loss, slower).
        signer: sign a checkpoint every ``checkpoint_every`` entries.
        checkpoint_every: checkpoint period in entries (with a signer).
        verify_existing: verify the whole existing file on open (default: only the entries
            back to the most recent checkpoint, at most ``checkpoint_every``, and that checkpoint).
        trusted_keys: key id -> public key of earlier signing keys of this log (a rotated guard
            key): the most recent checkpoint on open must verify under ``signer``'s key or one
            of these; one under any other key is refused, since nothing could check it.
        allow_shared_file: accept a log file that is world-writable, writable by a group (or ACL
            entry) that someone other than this uid and root may be in, or owned by another uid,
            or whose directory (or one above) is world-writable or writable by a group
            or ACL entry others are in, without the sticky bit, or another uid's (refused by
            default: whoever can write the file can forge entries the next checkpoint signs).
        sign_every_entry: every entry is a checkpoint (signed with ``signer``, which it needs),
            and an entry under the writer id of a key in ``trusted_keys`` must carry a checkpoint
            under that id which verifies, or the writer refuses it as below: for writers sharing
            one file, whose MACs it cannot check (holding the key to check them would let it
            forge them). Every writer of the file must sign so. Costs a signature per append.
        signed_from: the seq from which writers with a signing key wrote this log (1 for a log
            such a writer began; ``audit verify``'s ``signed from: seq S``), kept outside the file:
            an entry in format v1 at or after it, or one at a checkpoint seq after it without a
            checkpoint, among those read on open or appended by others, is refused
            (:class:`AuditUnauthenticatedError`, the ``audit_unauthenticated_entry`` alert), and so
            is the entry at S, found by bisection when it lies before the most recent checkpoint,
            unless it carries a checkpoint that verifies or is this writer's own (its MAC verifies),
            and a log that ends before it (:class:`AuditIntegrityError`, an
            ``audit_signed_entries_missing`` alert; an empty log when it is above 1). Needs ``signer``.

    Before each append the writer also checks that the entry it last wrote or read is still in
    place and that what others appended after it chains to it; if not, it raises
    :class:`AuditIntegrityError`, logs an ``audit_tail_changed`` alert at ERROR, and refuses to
    append until reopened. With a signer it also refuses to sign over entries it cannot vouch for
    (its own writer id with a MAC that does not verify, a writer id neither its own nor in
    ``trusted_keys``, no MAC after format-v2 entries), among those others appended and, on open,
    those after the most recent checkpoint: :class:`AuditUnauthenticatedError`, an
    ``audit_unauthenticated_entry`` alert. A window on open that ends on its length at a v1 entry
    is followed by a search of the bytes before it for a v2 entry (whole-file on a log with none;
    the writer's first v2 entry there is a checkpoint, which later opens stop at; so is its first
    entry in a new log). On open, about to sign over v1 entries no checkpoint covers, it logs an
    ``audit_unsigned_entries_adopted`` alert at WARNING: the file cannot tell a log begun without a
    signing key from one rewritten whole in format v1. docs/audit-log.md says exactly what is and is not checked.

    Raises:
        AuditIntegrityError: the existing file does not verify (torn or altered recent entries,
            a checkpoint that does not verify, or one under a key that is neither ``signer``'s nor
            in ``trusted_keys``, or any problem when ``verify_existing``); the message says how to
            verify and repair, or which key to trust. :class:`AuditUnauthenticatedError` (a
            subclass) when entries after the most recent checkpoint are ones this writer would
            not sign over (see above).
        AuditError: the file cannot be opened, or others than the guard's uid can write it
            (the message names the mode or owner found and the fix).
    """

    def __init__(
        self,
        path: PathLike | None,
        *,
        logger_name: str = "qdrant_guard.audit",
        fsync: bool = False,
        signer: ReceiptSigner | None = None,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
        verify_existing: bool = False,
        trusted_keys: Mapping[str, Ed25519PublicKey] | None = None,
        allow_shared_file: bool = False,
        sign_every_entry: bool = False,
        signed_from: int | None = None,
    ) -> None:
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise GuardArgumentTypeError(f"AuditLog() path must be str, os.PathLike or None, not {type(path).__name__}")
        if not isinstance(logger_name, str):
            raise GuardArgumentTypeError(f"AuditLog() logger_name must be str, not {type(logger_name).__name__}")
        if signer is not None and not isinstance(signer, ReceiptSigner):
            raise GuardArgumentTypeError(f"AuditLog() signer must be a ReceiptSigner or None, not {type(signer).__name__}")
        if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 1:
            raise GuardArgumentValueError(f"AuditLog() checkpoint_every must be a positive int, got {checkpoint_every!r}")
        if trusted_keys is not None and (not isinstance(trusted_keys, Mapping) or not all(
                isinstance(k, str) and isinstance(v, Ed25519PublicKey) for k, v in trusted_keys.items())):
            raise GuardArgumentTypeError("AuditLog() trusted_keys must be a mapping of key id to Ed25519PublicKey or None")
        if not isinstance(allow_shared_file, bool):
            raise GuardArgumentTypeError(
                f"AuditLog() allow_shared_file must be bool, not {type(allow_shared_file).__name__}")
        if not isinstance(sign_every_entry, bool):
            raise GuardArgumentTypeError(
                f"AuditLog() sign_every_entry must be bool, not {type(sign_every_entry).__name__}")
        if sign_every_entry and signer is None:
            raise GuardArgumentValueError("AuditLog() sign_every_entry=True signs every entry with the writer's key, "
                                          "and signer is None: pass signer (the policy's signing_key)")
        if signed_from is not None and (isinstance(signed_from, bool) or not isinstance(signed_from, int)):
            raise GuardArgumentTypeError(f"AuditLog() signed_from must be int or None, not {type(signed_from).__name__}")
        if signed_from is not None and signed_from < 1:
            raise GuardArgumentValueError(f"AuditLog() signed_from must be a seq (1 or more), got {signed_from!r}")
        if signed_from is not None and signer is None:
            raise GuardArgumentValueError("AuditLog() signed_from says entries from that seq on are signed, and signer "
                                          "is None (this writer's own entries would be unsigned): pass signer (the "
                                          "policy's signing_key)")
        self._signed_from = signed_from
        self._allow_shared = allow_shared_file
        self._trusted: dict[str, Ed25519PublicKey] = dict(trusted_keys or {})
        self.path = None if path is None else os.fspath(path)
        # What the path names now: a relative one must not follow a later chdir of the process.
        self._abs = None if self.path is None else os.path.abspath(self.path)
        self._logger = logging.getLogger(logger_name)
        self._fsync = bool(fsync)
        self._signer = signer
        self._every = checkpoint_every
        self._lock = threading.Lock()
        self._seq = 0
        self._prev = GENESIS
        # Where this object's last known entry is: the file's bytes [_size - len(_line), _size)
        # are _line (its line as written or read). -1: unknown, re-read the tail.
        self._size = -1
        self._line: bytes | None = None
        self._broken: str | None = None  # set once that entry was found changed: every append refuses
        # Its own writer MACs, to check entries that claim its writer id (None: no signer, no
        # checkpoints, nothing vouched for); _v2: an entry in format v2 is in the chain it knows.
        self._macs: EntryMac | None = signer.audit_mac if signer is not None else None
        self._v2 = False
        # sign_every_entry: the public keys that must have signed each entry under another trusted
        # writer's id, since this writer holds no key to check that writer's MACs (None: unchecked).
        self._sign_all = sign_every_entry
        self._signed_by: dict[str, Ed25519PublicKey] | None = self._trusted if sign_every_entry else None
        self._fd: int | None = None
        self._pid = os.getpid()
        if self.path is not None:
            if verify_existing and os.path.exists(self.path):
                _refuse_not_regular(os.stat(self.path), self.path)  # reading a FIFO waited for a writer
                report = verify_audit_file(self.path)
                if not report.ok:
                    raise AuditIntegrityError(
                        f"audit log {self.path!r} failed verification: {report.problem} at "
                        f"{report.detail}; " + _REPAIR_HINT.format(path=self.path))
            self._open()
            fd = self._fd
            assert fd is not None
            try:
                _lock(fd)
                try:
                    last = self._read_tail(fd)
                    if last is not None:
                        self._check_recent(fd, last)
                    elif self._signed_from is not None and self._signed_from > 1:
                        raise self._signed_entries_missing()
                finally:
                    _unlock(fd)
            except BaseException:
                self.close()
                raise

    def _open(self) -> None:
        assert self._abs is not None
        try:
            self._fd = os.open(self._abs, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            # The log file is created, its directory is not (a typo there must not grow a tree).
            hint = (f"; create the directory {os.path.dirname(self._abs)!r}, or set audit_log to a path in "
                    "an existing one" if isinstance(exc, FileNotFoundError) else "")
            raise AuditError(f"cannot open audit log {self.path!r}: {exc.strerror or exc}{hint}") from exc
        try:
            _refuse_not_regular(os.fstat(self._fd), self.path)
        except BaseException:
            os.close(self._fd)
            self._fd = None
            raise
        if not self._allow_shared:
            try:
                _refuse_shared(self._fd, self.path, self._abs)
            except BaseException:
                os.close(self._fd)
                self._fd = None
                raise
        # The entry this object knows of (_size, _line) stays known across a reopen (a forked
        # child, an append after close()): the next append checks it is still where it was.
        self._pid = os.getpid()

    def _tail_changed(self, what: str) -> AuditIntegrityError:
        msg = (f"audit log {self.path!r}: the entry this writer last wrote or read (seq {self._seq}, hash "
               f"{self._prev}) {what}: someone else rewrote or cut the log. This AuditLog refuses to "
               "append until it is reopened; keep this message (the hash is evidence even if the file "
               "still verifies, since hashes can be recomputed), then "
               + _REPAIR_HINT.format(path=self.path))
        self._broken = msg
        # The logging stream is the copy kept outside the file; the alert must reach it.
        self._logger.error("qdrant_guard audit tail changed: %s", msg, extra={"qdrant_guard_alert": {
            "event": "audit_tail_changed", "path": self.path, "seq": self._seq, "hash": self._prev}})
        return AuditIntegrityError(msg)

    def _check_path(self, held: os.stat_result) -> None:
        # A file put in its place (or the log renamed away) leaves this descriptor on the old one:
        # the checks below would pass while every later entry went to a file nobody reads.
        assert self._abs is not None
        try:
            st = os.stat(self._abs)
        except OSError as exc:
            raise self._tail_changed(f"is in a file its path no longer names ({exc.strerror or exc}: the log "
                                     "was renamed or deleted)") from None
        if (st.st_dev, st.st_ino) != (held.st_dev, held.st_ino):
            raise self._tail_changed("is in a file its path no longer names (another file was put in its "
                                     "place, or the log was renamed: rotate the log only with the guard stopped)")

    def _check_known(self, fd: int, size: int) -> bool:
        """Check the entry this object knows of is still in place.

        True when nothing was appended since (nothing more to read).
        """
        line = self._line or b""  # b"": the log was empty, the chain starts at seq 0's GENESIS
        start = self._size - len(line)
        if size < self._size:
            raise self._tail_changed(f"was cut off (the file shrank from {self._size} to {size} bytes)")
        # One pread, of bytes already in the page cache: the only extra cost of an append.
        if _read_all(fd, start, len(line)) != line:
            raise self._tail_changed(f"is no longer on the bytes {start}..{self._size} where it was")
        return size == self._size

    def _read_appended(self, fd: int, size: int) -> dict[str, Any]:
        """Read every entry others appended after the known one: each must verify and chain on,
        and none may be one this writer's next checkpoint would vouch for unchecked
        (:func:`qdrant_guard.audit_mac.unvouched`). Read only when others appended, so an append of a lone writer
        reads nothing more. Returns the last entry, with the object moved on to it."""
        seq, prev, pos, buf = self._seq, self._prev, self._size, b""
        entry: dict[str, Any] | None = None
        raw = b""
        v2 = self._v2
        found: list[tuple[int, str, Any]] = []
        while pos < size:
            chunk = _read_all(fd, pos, min(1 << 20, size - pos))
            if not chunk:
                break
            pos += len(chunk)
            lines = (buf + chunk).split(b"\n")
            buf = lines.pop()
            for raw in lines:
                try:
                    entry = _parse_line(raw)
                except _Bad as exc:
                    raise AuditIntegrityError(
                        f"the entry after seq {seq} in audit log {self.path!r} does not verify "
                        f"({exc.problem}: {exc.detail}); " + _REPAIR_HINT.format(path=self.path)) from None
                if entry["seq"] != seq + 1 or entry["prev"] != prev:
                    what = (f"is followed by an entry that does not chain to it (seq {entry['seq']}, "
                            f"prev {entry['prev']})")
                    if seq == self._seq:
                        raise self._tail_changed(what)
                    raise AuditIntegrityError(
                        f"audit log {self.path!r}: seq {entry['seq']} (prev {entry['prev']}), appended by another "
                        f"writer after seq {self._seq}, does not chain to the entry before it (seq {seq}); "
                        + _REPAIR_HINT.format(path=self.path))
                if self._macs is not None:
                    why = _unvouched(entry, self._macs, self._trusted, v2, self._signed_by) or self._before_signing(entry)
                    if why is not None:
                        found.append((entry["seq"], why, entry.get("w")))
                v2 = v2 or "w" in entry
                seq, prev = entry["seq"], entry["hash"]
        if buf or entry is None:
            raise AuditIntegrityError(
                f"audit log {self.path!r} ends with a torn line (a writer stopped mid-entry); "
                + _REPAIR_HINT.format(path=self.path))
        if found:
            raise self._refuse_unvouched(found, after=self._seq)
        self._seq, self._prev, self._size, self._line, self._v2 = seq, prev, size, raw + b"\n", v2
        return entry

    def _before_signing(self, entry: dict[str, Any]) -> str | None:
        """Why ``entry`` is refused under signed_from, or None: what ``audit verify --signed-from``
        requires of it with this writer's keys. From seq S on every entry is in format v2, every
        ``checkpoint_every``-th carries a checkpoint, and the entry at S carries one that verifies
        or is this writer's own (its MAC checked by :func:`_unvouched`, as ``--writer-key`` would)."""
        s = self._signed_from
        if s is None or entry["seq"] < s:
            return None
        if "w" not in entry:
            return _BEFORE_SIGNING.format(s=s)
        if "ckpt" not in entry and entry["seq"] % self._every == 0:
            # A signing writer puts one there: a missing one was stripped (ckpt is outside the
            # hash), which is how a rewrite under a trusted writer's id makes the window reach past it.
            return (f"carries no checkpoint, which a signing writer puts on every {self._every}th entry, at or after "
                    f"seq {s}, where signing began (signed_from)")
        if entry["seq"] == s:
            return self._signed_from_problem(entry)
        return None

    def _signed_from_problem(self, entry: dict[str, Any]) -> str | None:
        """Why the entry at seq signed_from does not show that a signing writer wrote it, or None.

        A signing writer's first entry in a log is a checkpoint, which nobody without a trusted key
        can make; one this writer wrote before 2026-12-07 carries none, and its MAC shows it is its own.
        """
        s = self._signed_from
        if "w" not in entry:
            return _BEFORE_SIGNING.format(s=s)
        if "ckpt" in entry:
            known = dict(self._trusted)
            if self._signer is not None:
                known[self._signer.key_id] = self._signer.public_key
            try:
                _check_ckpt(entry, known)
            except _Bad as exc:
                return f"carries a checkpoint that does not verify ({exc.detail}), where signing began (signed_from)"
            return None
        assert self._macs is not None
        if entry["w"] == self._macs.writer and _unvouched(entry, self._macs, (), True) is None:
            return None
        return (f"names writer {_show_kid(entry['w'])} but carries no checkpoint, and a signing guard makes its first "
                f"entry in a log one: seq {s} is where signing began (signed_from)")

    def _signed_entries_missing(self) -> AuditIntegrityError:
        """On open: the log ends before signed_from, so the entries a signing writer made were cut."""
        assert self._signed_from is not None
        msg = (f"audit log {self.path!r} ends at seq {self._seq}, before seq {self._signed_from}, where signing "
               f"began (audit_signed_from = {self._signed_from}): the entries from there on were cut off its "
               "end (or the file emptied), or audit_signed_from is wrong. Nothing was written. "
               + _MOVE_ASIDE_HINT.format(path=self.path, s=self._signed_from))
        self._logger.error("qdrant_guard audit signed entries missing: %s", msg, extra={"qdrant_guard_alert": {
            "event": "audit_signed_entries_missing", "path": self.path, "last_seq": self._seq,
            "signed_from": self._signed_from, "hash": self._prev}})
        return AuditIntegrityError(msg)

    def _refuse_unvouched(self, found: list[tuple[int, str, Any]], after: int | None) -> AuditUnauthenticatedError:
        """The error (and the alert on the audit logger) for entries this writer will not sign."""
        seqs = tuple(q for q, _, _ in found)
        shown = ", ".join(str(q) for q in seqs[:20]) + (f", ... ({len(seqs)} in all)" if len(seqs) > 20 else "")
        assert self._macs is not None
        where = (f"after seq {after}, the entry this writer last wrote or read" if after is not None
                 else "after the log's most recent checkpoint (or in a log without one), where it opened it")
        msg = (f"audit log {self.path!r}: seq {found[0][0]} {found[0][1]}: an entry this writer did not write, "
               f"appended {where}; its next checkpoint would sign it. Entries this writer cannot vouch for: "
               f"seq {shown}. "
               + ("This AuditLog refuses to append until it is reopened (restart the guard after the repair). "
                  if after is not None else "Nothing was written. ")
               + _trust_hint(found, self._macs.writer)
               + _signature_hint(found)
               + (_MOVE_ASIDE_HINT.format(path=self.path, s=self._signed_from)
                  if any(why.endswith("(signed_from)") for _, why, _ in found) else
                  f"Run `qdrant-guard audit verify {self.path} --writer-key GUARD.key` (the guard's signing key; one "
                  "--writer-key per guard writing the log) to list every entry no writer authenticates, then "
                  f"`qdrant-guard audit repair {self.path} --writer-key GUARD.key --signing-key GUARD.key` to cut the "
                  "log from the first of them (the cut bytes are kept in a side file, a repair entry records the cut)"))
        if after is not None:
            self._broken = msg
        self._logger.error("qdrant_guard audit unauthenticated entries: %s", msg, extra={"qdrant_guard_alert": {
            "event": "audit_unauthenticated_entry", "path": self.path, "seqs": list(seqs),
            "after_seq": after, "hash": self._prev if after is not None else None}})
        return AuditUnauthenticatedError(msg, seqs)

    def _read_tail(self, fd: int) -> dict[str, Any] | None:
        """Bring this object up to the file's last entry; that entry when it was (re-)read."""
        if self._broken is not None:
            raise AuditIntegrityError(self._broken)
        held = os.fstat(fd)
        size = held.st_size
        if self._size >= 0:
            # Also for a log that was empty (no entry known yet): its first entry must reach the
            # file the path names, and a first line others wrote must start the chain.
            self._check_path(held)
            if self._check_known(fd, size):
                return None
            return self._read_appended(fd, size)
        if size == 0:
            self._seq, self._prev, self._size, self._line = 0, GENESIS, 0, None
            return None
        # On open: read backwards in blocks until the start of the last line is found.
        block, pos, tail = 65536, size, b""
        while pos > 0:
            step = min(block, pos)
            pos -= step
            tail = os.pread(fd, step, pos) + tail
            if tail.count(b"\n") >= 2 or (pos == 0):
                break
        if not tail.endswith(b"\n"):
            raise AuditIntegrityError(
                f"audit log {self.path!r} ends with a torn line (a writer stopped mid-entry); "
                + _REPAIR_HINT.format(path=self.path))
        last = tail[:-1].rsplit(b"\n", 1)[-1]
        try:
            entry = _parse_line(last)
        except _Bad as exc:
            raise AuditIntegrityError(
                f"the last entry of audit log {self.path!r} does not verify ({exc.problem}: "
                f"{exc.detail}); " + _REPAIR_HINT.format(path=self.path)) from None
        self._seq, self._prev, self._size, self._line = entry["seq"], entry["hash"], size, last + b"\n"
        return entry

    def _check_recent(self, fd: int, last: dict[str, Any]) -> None:
        """On open: the entries back to the most recent checkpoint (at most ``checkpoint_every``)
        verify and chain, a first line among them starts the chain, and that checkpoint verifies
        under a key the writer knows.

        Bounded so opening a large log stays cheap; the whole file is ``verify_existing``'s and
        ``audit verify``'s job. ``last`` is the last entry, already parsed by :meth:`_read_tail`.
        """
        assert self._line is not None
        later = last
        window = [last]  # newest first
        # Lines before the last one, newest first, read backwards in blocks: buf holds the bytes
        # [pos, start of ``later``'s line).
        pos, buf = self._size - len(self._line), b""
        for _ in range(self._every):
            if "ckpt" in later or (pos == 0 and not buf):  # a checkpoint, or the file's first line
                break
            while pos > 0 and buf.rfind(b"\n", 0, len(buf) - 1) < 0:
                step = min(65536, pos)
                pos -= step
                buf = _read_all(fd, pos, step) + buf
            body = buf[:-1]
            cut = body.rfind(b"\n")
            raw = body[cut + 1:]
            buf = body[:cut + 1] if cut >= 0 else b""
            try:
                entry = _parse_line(raw)
            except _Bad as exc:
                raise AuditIntegrityError(
                    f"audit log {self.path!r}: the entry before seq {later['seq']} does not "
                    f"verify ({exc.problem}: {exc.detail}); " + _REPAIR_HINT.format(path=self.path)) from None
            if later["prev"] != entry["hash"] or later["seq"] != entry["seq"] + 1:
                raise AuditIntegrityError(
                    f"audit log {self.path!r}: seq {later['seq']} does not chain to the entry before it "
                    f"(seq {entry['seq']}); " + _REPAIR_HINT.format(path=self.path))
            later = entry
            window.append(entry)
        if pos == 0 and not buf and (later["seq"] != 1 or later["prev"] != GENESIS):
            # The chain must start at the file's start: else entries were cut off its head.
            raise AuditIntegrityError(
                f"audit log {self.path!r}: its first line is seq {later['seq']} with prev {later['prev']}, "
                f"not the start of a chain (seq 1 after {GENESIS[:8]}...): the entries before it were "
                "cut off; " + _REPAIR_HINT.format(path=self.path))
        if "ckpt" in later:
            self._check_open_checkpoint(later)
        found: list[tuple[int, str, Any]] = []
        after_v2: str | None = None
        if self._macs is not None and "w" not in later and "ckpt" not in later and (pos > 0 or buf):
            # The window ended on its length, at an entry in format v1: whether the log already
            # holds a v2 entry (then every v1 entry after it is forged: a signing writer writes v2)
            # is in the bytes before it. A legacy log is scanned whole, once before the writer's
            # first entry on it, which is a checkpoint (_next) that later opens stop at.
            earlier = _last_v2_before(fd, pos + len(buf))
            if earlier is not None:
                after_v2 = f"carries no writer MAC (format v1) after entries in format v2 (seq {earlier['seq']} is one)"
                found = [(q, after_v2, None) for q in range(earlier["seq"] + 1, later["seq"])]
        if self._signed_from is not None and last["seq"] < self._signed_from:
            raise self._signed_entries_missing()
        self._check_window_writers(window[::-1], after_v2, found)
        if self._signed_from is not None and later["seq"] > self._signed_from:
            # The window ends at a checkpoint after S (one ending on its length past S lacks the
            # checkpoint due in it, refused above): what verify --signed-from requires of S is
            # checked where S is, before it.
            self._check_signed_from_before(fd, pos + len(buf), later["seq"])
        if self._macs is not None and not self._v2:
            self._warn_unsigned(window[:-1] if "ckpt" in later else window)

    def _check_signed_from_before(self, fd: int, end: int, checkpoint: int) -> None:
        """On open, the entry at seq signed_from, before the window's checkpoint (at ``checkpoint``,
        its line starting at byte ``end``), must show that a signing writer wrote it.

        That checkpoint signs the chain up to it, S included, and any later change to the lines
        before it breaks the chain, which ``audit verify`` reports; but a rewrite from S that some
        writer without the setting (or a qdrant-guard before it) took in and signed over keeps the
        chain, and its entry at S is in format v1 or carries no checkpoint. Finding S takes a
        bisection of the bytes (seqs rise by one a line in a log that verifies), not a read of them.
        """
        s = self._signed_from
        assert s is not None
        lo, hi = 0, end  # the lines starting in [lo, hi) may hold seq s; lo is a line start
        while lo < hi:
            mid = (lo + hi) // 2
            start = mid if mid == lo else self._next_line_start(fd, mid - 1, hi)
            if start >= hi:
                hi = mid
                continue
            raw = self._line_at(fd, start, end)
            try:
                entry = _parse_line(raw)
            except _Bad as exc:
                raise AuditIntegrityError(
                    f"audit log {self.path!r}: the line at byte {start}, before the most recent checkpoint (seq "
                    f"{checkpoint}), read to find seq {s} (audit_signed_from), does not verify ({exc.problem}: "
                    f"{exc.detail}); nothing was written. " + _MOVE_ASIDE_HINT.format(path=self.path, s=s)) from None
            if entry["seq"] == s:
                why = self._signed_from_problem(entry)
                if why is not None:
                    raise self._refuse_signed_from(why, checkpoint, s)
                return
            if entry["seq"] < s:
                lo = start + len(raw) + 1
            else:
                hi = start
        raise AuditIntegrityError(
            f"audit log {self.path!r}: no line before the most recent checkpoint (seq {checkpoint}) holds seq {s}, "
            f"where signing began (audit_signed_from = {s}): its lines are out of order, or entries were cut or "
            "inserted; nothing was written. " + _MOVE_ASIDE_HINT.format(path=self.path, s=s))

    @staticmethod
    def _next_line_start(fd: int, pos: int, end: int) -> int:
        """The byte after the first newline at or after byte ``pos`` (``end`` if none is before it)."""
        while pos < end:
            chunk = _read_all(fd, pos, min(4096, end - pos))
            if not chunk:
                return end
            i = chunk.find(b"\n")
            if i >= 0:
                return pos + i + 1
            pos += len(chunk)
        return end

    @staticmethod
    def _line_at(fd: int, start: int, end: int) -> bytes:
        """The line starting at byte ``start``, without its newline (every line before ``end`` has one)."""
        stop = AuditLog._next_line_start(fd, start, end)
        return _read_all(fd, start, stop - start - 1)

    def _refuse_signed_from(self, why: str, checkpoint: int, s: int) -> AuditUnauthenticatedError:
        """The error (and alert) for the entry at seq ``s`` (signed_from), before the window's
        checkpoint, that does not show a signing writer wrote it."""
        msg = (f"audit log {self.path!r}: seq {s} {why}, and the checkpoint at seq {checkpoint} signs over it: the log "
               f"was rewritten from seq {s} (hashes recomputed) and a writer without audit_signed_from, or one before "
               f"it, signed over the rewrite, or audit_signed_from = {s} is not this log's. Nothing was written. "
               "(A log a guard began before 2026-12-07 under an earlier key carries no checkpoint there: check it "
               f"with `qdrant-guard audit verify {self.path} --writer-key OLD.key --signed-from {s}`.) "
               + _MOVE_ASIDE_HINT.format(path=self.path, s=s))
        self._logger.error("qdrant_guard audit unauthenticated entries: %s", msg, extra={"qdrant_guard_alert": {
            "event": "audit_unauthenticated_entry", "path": self.path, "seqs": [s], "after_seq": None,
            "hash": None}})
        return AuditUnauthenticatedError(msg, (s,))

    def _warn_unsigned(self, unsigned: list[dict[str, Any]]) -> None:
        """On open, a signing writer about to sign over v1 entries no checkpoint covers (``unsigned``,
        newest first) says so on the audit logger: a log begun without signing_key does this once,
        and the file cannot tell it from one rewritten whole in format v1, which does it again."""
        if not unsigned:
            return
        first, last = unsigned[-1]["seq"], unsigned[0]["seq"]
        msg = (f"audit log {self.path!r}: seq {first}..{last} carry no writer MAC and no checkpoint covers them "
               "(format v1: a log begun before format v2 or by a guard without signing_key, or one rewritten by "
               "someone who could write the file, hashes recomputed); this writer's next entry is a checkpoint that "
               "signs them. If a guard with signing_key wrote this log before, it was rewritten: stop the guard, keep a "
               f"copy, and check it with `qdrant-guard audit verify {self.path} --key GUARD.pub --signed-from SEQ` "
               "(SEQ: where signing began, 1 for a log the guard began)")
        # A record outside the file: the one thing that shows this happening twice for one log.
        self._logger.warning("qdrant_guard audit unsigned entries adopted: %s", msg, extra={"qdrant_guard_alert": {
            "event": "audit_unsigned_entries_adopted", "path": self.path, "first_seq": first, "last_seq": last,
            "hash": self._prev}})

    def _check_window_writers(self, window: list[dict[str, Any]], before: str | None,
                              found: list[tuple[int, str, Any]]) -> None:
        """On open, refuse entries in the window (what the next checkpoint signs along with the
        checkpoint that ends it) that this writer cannot vouch for, as an append does. ``before``:
        the log holds a v2 entry before the window (why a v1 entry is refused); ``found``: entries
        already refused before the window."""
        v2 = before is not None
        for entry in window:
            if self._macs is not None:
                why = _unvouched(entry, self._macs, self._trusted, v2, self._signed_by) or self._before_signing(entry)
                if why is not None:
                    found.append((entry["seq"], before if before is not None and "w" not in entry else why,
                                  entry.get("w")))
            v2 = v2 or "w" in entry
        self._v2 = v2
        if found:
            raise self._refuse_unvouched(found, after=None)

    def _check_open_checkpoint(self, entry: dict[str, Any]) -> None:
        """The most recent checkpoint on open must verify under a key this writer knows.

        It is what the bounded check on open stops at, so one under a key nobody checks (a
        rotated key not configured, or any key id a forger writes) would make the writer build
        on a chain nobody verified.
        """
        ck, seq = entry["ckpt"], entry["seq"]
        known = dict(self._trusted)
        signer = self._signer
        if signer is not None:
            known[signer.key_id] = signer.public_key
        kid = ck.get("kid") if isinstance(ck, dict) else None
        shown = _show_kid(kid) if isinstance(kid, str) else None
        if isinstance(kid, str) and kid not in known:
            own = (f"its own key is {signer.key_id}" if signer is not None
                   else "it has no signing key of its own: if that is the guard's key, set signing_key to it")
            others = f", trusted: {', '.join(sorted(self._trusted))}" if self._trusted else ", and no trusted keys"
            raise AuditIntegrityError(
                f"audit log {self.path!r}: the most recent checkpoint (seq {seq}) is signed by key {shown}, "
                f"which this writer does not know ({own}{others}), so it cannot verify it and will not "
                f"append to a chain it cannot check. If {shown} is an earlier signing key of this guard "
                "(a rotated key), add its public key (the .pub `qdrant-guard keys new` wrote next to it, "
                "or its ed25519:... text) to receipts.retired_keys in the policy (which trusts it for receipts "
                "and utility records too; audit_trusted_keys for this log alone; AuditLog(trusted_keys=...)), "
                f"after checking the log with `qdrant-guard audit verify {self.path} --key OLD.pub --key "
                "NEW.pub`. If it is not a key of yours, the log was tampered with: "
                + _REPAIR_HINT.format(path=self.path))
        try:
            _check_ckpt(entry, known)
        except _Bad as exc:
            whose = ("this writer's key" if signer is not None and kid == signer.key_id
                     else "trusted key" if isinstance(kid, str) else "any key")
            raise AuditIntegrityError(
                f"audit log {self.path!r}: the checkpoint at seq {seq} does not verify under {whose}"
                f"{' ' + shown if shown is not None else ''} ({exc.detail}): the log was tampered with; "
                + _REPAIR_HINT.format(path=self.path)) from None

    @property
    def seq(self) -> int:
        """Seq of the last entry this object knows of (0 before any)."""
        return self._seq

    @property
    def last_hash(self) -> str:
        """Hash of the last entry this object knows of (``GENESIS`` before any)."""
        return self._prev

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Append one record and return the written entry.

        Args:
            record: a JSON-able dict (canonical JSON rules: str keys, finite floats).

        Returns:
            ``{"seq", "ts", "prev", "record", "hash"}`` (plus ``"ckpt"`` on checkpoints).

        Raises:
            TypeError: ``record`` is not a dict or holds a non-JSON value.
            ValueError: ``record`` holds NaN/Inf.
            AuditIntegrityError: the file's tail was damaged, or the writer's last entry
                rewritten or cut, by someone else (then every later append refuses too);
                :class:`AuditUnauthenticatedError` when others appended entries this writer will
                not sign over (named by seq; every later append refuses too).
            AuditError: the write failed (the caller must fail closed).
        """
        if not isinstance(record, dict):
            raise GuardArgumentTypeError(f"AuditLog.append() record must be dict, not {type(record).__name__}")
        # Encoded once, before touching the file: raises TypeError/ValueError for a bad record.
        return self._append(record, canonical_json(record))

    def append_encoded(self, record: dict[str, Any], record_bytes: bytes) -> dict[str, Any]:
        """Like :meth:`append`, for a caller that already holds ``canonical_json(record)``.

        The bytes are written into the entry as they are instead of encoding ``record`` again,
        so the line and its hash are byte-identical to what :meth:`append` would write. The
        bytes are checked only for shape (bytes, one JSON object on one line, UTF-8): bytes that
        are not exactly ``canonical_json(record)`` produce a line that
        :func:`verify_audit_file` reports as ``edited``, and a returned entry whose ``record``
        differs from the file.

        Args:
            record: the record (returned in the entry and given to logging).
            record_bytes: ``canonical_json(record)``.

        Returns:
            The written entry, as :meth:`append` returns it.

        Raises:
            TypeError: ``record`` is not a dict or ``record_bytes`` not bytes.
            ValueError: ``record_bytes`` is not one JSON object on one line in UTF-8.
            AuditIntegrityError: the file's tail was damaged, or the writer's last entry
                rewritten or cut, by someone else (then every later append refuses too).
            AuditError: the write failed (the caller must fail closed).
        """
        if not isinstance(record, dict):
            raise GuardArgumentTypeError(f"AuditLog.append_encoded() record must be dict, not {type(record).__name__}")
        return self._append(record, _check_record_bytes(record_bytes))

    def _append(self, record: dict[str, Any], record_bytes: bytes) -> dict[str, Any]:
        with self._lock:
            if self.path is None:
                entry, _ = self._next(record, record_bytes)
            else:
                entry = self._append_file(record, record_bytes)
        logger = self._logger
        if logger.isEnabledFor(logging.INFO):
            logger.info("qdrant_guard audit seq=%d event=%s", entry["seq"], record.get("event", ""),
                        extra={"qdrant_guard": entry})
        return entry

    def _next(self, record: dict[str, Any], record_bytes: bytes) -> tuple[dict[str, Any], bytes]:
        seq = self._seq + 1
        # A writer's first v2 entry in a log that held none is a checkpoint too: an open then finds
        # the log's change to v2 within its window instead of scanning the v1 entries before it,
        # and a log a signing writer began (seq 1) is never without one, so that `audit verify`
        # with its key can refuse a log none of whose entries is signed (one rewritten whole).
        first_v2 = self._macs is not None and not self._v2
        entry, line = _make_entry(seq, self._prev, record, record_bytes, self._signer,
                                  self._sign_all or first_v2 or seq % self._every == 0)
        self._seq, self._prev = seq, entry["hash"]
        self._v2 = self._v2 or self._macs is not None
        return entry, line

    def _append_file(self, record: dict[str, Any], record_bytes: bytes) -> dict[str, Any]:
        if self._fd is None or self._pid != os.getpid():
            # A forked child must not share the parent's open file description: flock would
            # then be shared too and stop serialising the two processes.
            self._open()
        fd = self._fd
        assert fd is not None
        try:
            _lock(fd)
        except OSError as exc:
            raise AuditError(f"cannot lock audit log {self.path!r}: {exc}") from exc
        try:
            self._read_tail(fd)
            saved = (self._seq, self._prev, self._v2)
            entry, line = self._next(record, record_bytes)
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(f"short write ({written} of {len(line)} bytes)")
                if self._fsync:
                    os.fsync(fd)
            except OSError as exc:
                # Keep where the last known entry is: the next append checks it is still there and
                # that whatever this write left after it (nothing, a torn line, or the whole entry
                # when only fsync failed) chains to it. Forgetting it skipped those checks once.
                self._seq, self._prev, self._v2 = saved
                raise AuditError(f"cannot write audit log {self.path!r}: {exc}") from exc
            # O_APPEND under the lock: the line went right after the size _read_tail just checked.
            self._size += len(line)
            self._line = line
            return entry
        finally:
            _unlock(fd)

    def close(self) -> None:
        """Close the file (idempotent); waits for an append in progress in another thread."""
        # Under the append lock: closed mid-append, the descriptor number could be reused by a
        # file opened meanwhile, and the entry written into that file.
        with self._lock:
            if self._fd is not None:
                try:
                    os.close(self._fd)
                finally:
                    self._fd = None

    def __enter__(self) -> "AuditLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

