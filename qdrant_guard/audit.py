"""Tamper-evident audit log: hash-chained JSON lines, also emitted through stdlib logging.

Each line is the canonical JSON of one entry ``{"seq", "ts", "prev", "record", "hash"}`` where
``hash = SHA-256(canonical_json(entry without "hash" and "ckpt"))`` and ``prev`` is the previous
entry's hash (64 zeros for the first). With a signer, every ``checkpoint_every``-th entry (and
every repair entry) also carries ``ckpt = {"kid", "sig"}``: an Ed25519 signature over
``b"qdrant-guard audit checkpoint v1\\0" + hash``, which covers the whole chain up to it.
See docs/audit-log.md.
"""
from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Iterator, Mapping, Union

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .canonical import canonical_json
from .errors import AuditError, AuditIntegrityError
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

GENESIS = "0" * 64
DEFAULT_CHECKPOINT_EVERY = 1000
CHECKPOINT_PREFIX = b"qdrant-guard audit checkpoint v1\x00"
AUDIT_PROBLEMS = (
    "torn_tail",       # last line has no newline: a writer died mid-entry
    "corrupt",         # a complete line that is not a JSON entry
    "edited",          # the line's content does not match its hash, or is not canonical
    "deleted",         # a seq is missing and never appears later
    "reordered",       # a seq is missing here but appears later
    "inserted",        # a seq that already appeared (an extra entry in the chain)
    "chain_broken",    # seq is as expected but prev is not the previous hash (an earlier entry
                       # was rewritten with a recomputed hash, or entries were renumbered)
    "bad_checkpoint",  # a checkpoint signature does not verify under the trusted keys
)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_FIELDS = {"seq", "ts", "prev", "record", "hash"}
_REPAIR_HINT = (
    "run `qdrant-guard audit verify {path}` to locate the problem, then "
    "`qdrant-guard audit repair {path}` to truncate it to the valid prefix (the cut bytes are "
    "kept in a side file and a hashed repair entry records the cut)"
)
PathLike = Union[str, "os.PathLike[str]"]


def entry_hash(entry: Mapping[str, Any]) -> str:
    """Return hex SHA-256 of the canonical JSON of ``entry`` without its ``hash`` and ``ckpt``."""
    body = {k: v for k, v in entry.items() if k not in ("hash", "ckpt")}
    return hashlib.sha256(canonical_json(body)).hexdigest()


@dataclass(frozen=True)
class AuditReport:
    """Result of :func:`verify_audit_file` or :func:`repair_audit_file`.

    Attributes:
        ok: True if every line verified.
        entries: number of lines in the file (a torn last line counts).
        valid_prefix: number of leading entries that verify.
        problem: ``None`` or one of :data:`AUDIT_PROBLEMS`.
        index: 1-based line number of the first bad line (``None`` when ok).
        detail: human-readable explanation (names the line and seq).
        last_seq: seq of the last valid entry (0 if none).
        last_hash: hash of the last valid entry (``GENESIS`` if none).
        checkpoints: number of checkpoint signatures verified (only with ``trusted_keys``).
        valid_bytes: byte length of the valid prefix.
    """

    ok: bool
    entries: int
    valid_prefix: int
    problem: str | None
    index: int | None
    detail: str
    last_seq: int = 0
    last_hash: str = GENESIS
    checkpoints: int = 0
    valid_bytes: int = 0


class _Bad(Exception):
    def __init__(self, problem: str, detail: str) -> None:
        super().__init__(detail)
        self.problem = problem
        self.detail = detail


def _parse_line(raw: bytes) -> dict[str, Any]:
    """Parse one complete line (without newline) into a self-consistent entry."""
    try:
        entry = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _Bad("corrupt", f"not valid JSON ({exc})") from None
    except RecursionError:
        # json raises this, not ValueError, on deep nesting: still just a corrupt line.
        raise _Bad("corrupt", "not valid JSON (nested too deeply to decode)") from None
    if not isinstance(entry, dict) or not _FIELDS <= set(entry) or not set(entry) <= _FIELDS | {"ckpt"}:
        raise _Bad("corrupt", "not an audit entry object {seq, ts, prev, record, hash}")
    seq, prev, digest = entry["seq"], entry["prev"], entry["hash"]
    if (isinstance(seq, bool) or not isinstance(seq, int) or seq < 1
            or not isinstance(prev, str) or not _HEX64.fullmatch(prev)
            or not isinstance(digest, str) or not _HEX64.fullmatch(digest)
            or not isinstance(entry["record"], dict)
            or isinstance(entry["ts"], bool) or not isinstance(entry["ts"], (int, float))):
        raise _Bad("edited", "a field has the wrong type or form")
    try:
        canonical = canonical_json(entry)
    except (TypeError, ValueError) as exc:
        raise _Bad("edited", f"entry cannot be canonically encoded ({exc})") from None
    if canonical != raw:
        raise _Bad("edited", "line is not the canonical encoding of its entry")
    if entry_hash(entry) != digest:
        raise _Bad("edited", "content does not match its hash")
    return entry


def _check_ckpt(entry: Mapping[str, Any], trusted_keys: Mapping[str, Ed25519PublicKey]) -> None:
    ck = entry["ckpt"]
    if not isinstance(ck, dict) or set(ck) != {"kid", "sig"} or not all(isinstance(v, str) for v in ck.values()):
        raise _Bad("bad_checkpoint", "checkpoint must be {kid, sig}")
    pk = trusted_keys.get(ck["kid"])
    if pk is None:
        raise _Bad("bad_checkpoint", f"checkpoint key {ck['kid']} is not trusted")
    try:
        sig = base64.b64decode(ck["sig"], validate=True)
        pk.verify(sig, CHECKPOINT_PREFIX + bytes.fromhex(entry["hash"]))
    except (binascii.Error, ValueError, InvalidSignature):
        raise _Bad("bad_checkpoint", "checkpoint signature does not verify") from None


def _iter_lines(fh: IO[bytes]) -> Iterator[tuple[bytes, bool]]:
    for line in fh:
        if line.endswith(b"\n"):
            yield line[:-1], True
        else:
            yield line, False


def _run_length(parsed: list[dict[str, Any] | None], start: int) -> int:
    """How many consecutive lines from ``start`` chain on from each other (seq + 1, prev = hash)."""
    n, cur = 0, parsed[start]
    while cur is not None:
        n += 1
        nxt = parsed[start + n] if start + n < len(parsed) else None
        if nxt is None or nxt["prev"] != cur["hash"] or nxt["seq"] != cur["seq"] + 1:
            break
        cur = nxt
    return n


def _scan(path: PathLike, trusted_keys: Mapping[str, Ed25519PublicKey] | None,
          checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY) -> AuditReport:
    p = os.fspath(path)
    try:
        fh = open(p, "rb")
    except OSError as exc:
        raise AuditError(f"cannot read audit log {p!r}: {exc.strerror or exc}") from exc
    with fh:
        lines = list(_iter_lines(fh))
    seqs_after: dict[int, int] = {}
    bad: _Bad | None = None
    bad_line = None
    last_seq, last_hash, nbytes, ckpts = 0, GENESIS, 0, 0
    parsed: list[dict[str, Any] | None] = []
    for raw, complete in lines:
        try:
            parsed.append(_parse_line(raw) if complete else None)
        except _Bad:
            parsed.append(None)
    for i, e in enumerate(parsed):
        if e is not None:
            seqs_after.setdefault(e["seq"], i)
    seen: dict[int, int] = {}
    # Per valid line: (seq, hash, cumulative bytes), so the prefix can be cut back on "inserted".
    good: list[tuple[int, str, int]] = []
    for i, (raw, complete) in enumerate(lines):
        lineno = i + 1
        try:
            if not complete:
                raise _Bad("torn_tail", "last line is incomplete (no newline): a writer stopped mid-entry")
            entry = parsed[i] or _parse_line(raw)  # re-parse only to raise the line's error
            seq = entry["seq"]
            expected = last_seq + 1
            if seq in seen:
                first = seen[seq]
                earlier = parsed[first - 1]
                # The earlier line is the extra one only if this one is a different entry for the
                # same place in the chain (same prev) and the chain runs on longer from this one
                # (a forged line, or forged lines, in front of the real ones). A replayed copy, a
                # line that chains to nothing before it, or a shorter second log appended whole,
                # is itself the extra line.
                if (earlier is not None and entry["prev"] == earlier["prev"]
                        and entry["hash"] != earlier["hash"]
                        and _run_length(parsed, i) > _run_length(parsed, first - 1)):
                    # This line is the one the chain continues from: the earlier one is extra.
                    bad_line = first
                    del good[first - 1:]
                    raise _Bad("inserted", f"seq {seq} appears again on line {lineno} and the chain "
                                           f"continues from line {lineno}; line {first} is extra")
                raise _Bad("inserted", f"seq {seq} already appeared on line {first}")
            if seq > expected:
                later = seqs_after.get(expected)
                if later is not None and later > i:
                    raise _Bad("reordered", f"expected seq {expected}, found seq {seq}; seq {expected} "
                                            f"appears later on line {later + 1}")
                missing = f"{expected}" if seq == expected + 1 else f"{expected}..{seq - 1}"
                raise _Bad("deleted", f"expected seq {expected}, found seq {seq}: entr"
                                      f"{'y' if seq == expected + 1 else 'ies'} {missing} missing")
            if seq < expected:
                raise _Bad("reordered", f"expected seq {expected}, found earlier seq {seq}")
            if entry["prev"] != last_hash:
                raise _Bad("chain_broken", f"prev does not match the hash of the entry before it "
                                           f"(line {lineno - 1} was rewritten, or lines were renumbered)")
            if trusted_keys is not None and "ckpt" in entry:
                _check_ckpt(entry, trusted_keys)
                ckpts += 1
            elif trusted_keys is not None and seq % checkpoint_every == 0:
                # ckpt is outside the hash: whoever rewrites the chain drops the checkpoints
                # they cannot re-sign, so a missing one is as bad as a forged one.
                raise _Bad("bad_checkpoint", f"seq {seq} carries no checkpoint; a log written with a "
                                             f"signer has one every {checkpoint_every} entries "
                                             "(stripped, or written without the signing key?)")
        except _Bad as exc:
            bad = exc
            if bad_line is None:
                bad_line = lineno
            break
        seen[seq] = lineno
        last_seq, last_hash = seq, entry["hash"]
        nbytes += len(raw) + 1
        good.append((seq, last_hash, nbytes))
    valid = len(good)
    last_seq, last_hash, nbytes = good[-1] if good else (0, GENESIS, 0)
    if bad is None:
        return AuditReport(True, len(lines), valid, None, None,
                           f"{valid} entries verified" + (f", {ckpts} checkpoints" if trusted_keys is not None else ""),
                           last_seq, last_hash, ckpts, nbytes)
    where = f"line {bad_line}"
    got = parsed[bad_line - 1] if bad_line is not None else None
    if got is not None:
        where += f" (seq {got['seq']})"
    return AuditReport(False, len(lines), valid, bad.problem, bad_line, f"{where}: {bad.detail}",
                       last_seq, last_hash, ckpts, nbytes)


def verify_audit_file(
    path: PathLike, *, trusted_keys: Mapping[str, Ed25519PublicKey] | None = None,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
) -> AuditReport:
    """Verify an audit log file from its first line.

    Detects edited, deleted, inserted and reordered entries, corrupt lines and a torn tail, and
    locates the first problem by 1-based line number and seq. Appending forged entries at the end
    and truncating whole entries from the end are detectable only against an external anchor
    (a trusted checkpoint or a copy of the last hash); see docs/audit-log.md.

    Args:
        path: the JSONL file.
        trusted_keys: key id -> public key; when given, checkpoint signatures are verified too,
            and every ``checkpoint_every``-th entry must carry one (``bad_checkpoint`` otherwise).
        checkpoint_every: the writer's checkpoint period (:class:`AuditLog`'s, default 1000).

    Raises:
        TypeError: ``path`` is not a path.
        AuditError: the file cannot be read.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"verify_audit_file() path must be str or os.PathLike, not {type(path).__name__}")
    if trusted_keys is not None and not isinstance(trusted_keys, Mapping):
        raise TypeError("trusted_keys must be a mapping of key id to Ed25519PublicKey or None")
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ValueError(f"verify_audit_file() checkpoint_every must be a positive int, got {checkpoint_every!r}")
    return _scan(path, trusted_keys, checkpoint_every)


def _lock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_EX)


def _unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)


def _make_entry(seq: int, prev: str, record: dict[str, Any], record_bytes: bytes,
                signer: ReceiptSigner | None, checkpoint: bool) -> tuple[dict[str, Any], bytes]:
    # The canonical encodings of the entry (keys prev < record < seq < ts, and ckpt < hash in
    # front of them on the line), spliced around the record's canonical bytes so the record is
    # encoded once; equal to canonical_json(entry) and to what entry_hash() recomputes.
    ts = time.time()
    tail = b"".join((b'"prev":"', prev.encode("ascii"), b'","record":', record_bytes, b',"seq":',
                     int.__repr__(seq).encode("ascii"), b',"ts":', float.__repr__(ts).encode("ascii"),
                     b"}"))
    digest = hashlib.sha256(b"{" + tail).hexdigest()
    entry: dict[str, Any] = {"seq": seq, "ts": ts, "prev": prev, "record": record, "hash": digest}
    head = b'{"hash":"' + digest.encode("ascii") + b'",'
    if signer is not None and checkpoint:
        sig = signer.sign(CHECKPOINT_PREFIX + bytes.fromhex(digest))
        entry["ckpt"] = {"kid": signer.key_id, "sig": base64.b64encode(sig).decode("ascii")}
        head = b'{"ckpt":' + canonical_json(entry["ckpt"]) + b"," + head[1:]
    return entry, head + tail + b"\n"


def _check_record_bytes(record_bytes: Any) -> bytes:
    if not isinstance(record_bytes, bytes):
        raise TypeError(f"AuditLog.append_encoded() record_bytes must be bytes, not {type(record_bytes).__name__}")
    # Cheap structural checks only (the caller vouches for the rest): an object, one line, UTF-8.
    if not (record_bytes.startswith(b"{") and record_bytes.endswith(b"}")) or b"\n" in record_bytes:
        raise ValueError("AuditLog.append_encoded() record_bytes must be canonical_json(record): one "
                         "JSON object on one line")
    try:
        record_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"AuditLog.append_encoded() record_bytes is not UTF-8 ({exc})") from None
    return record_bytes


def _read_all(fd: int, offset: int, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = os.pread(fd, n - got, offset + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view, done = memoryview(data), 0
    while done < len(data):
        # os.pwrite may write less than asked (a file size limit, a full disk): go on or raise.
        done += os.pwrite(fd, view[done:], offset + done)


def _save_cut(p: str, last_seq: int, cut: bytes) -> str:
    """Write ``cut`` to a new side file next to ``p`` (0600, never an existing one); its path."""
    for _ in range(16):
        # A random part, not only the second: two repairs of one log at the same seq within a
        # second (or a squatter who can create files in the directory) must not collide.
        side = f"{p}.cut-{last_seq}-{int(time.time())}-{secrets.token_hex(4)}"
        try:
            sfd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        except OSError as exc:
            raise AuditError(f"cannot create the side file {side!r} for the cut bytes of audit log "
                             f"{p!r} ({exc.strerror or exc}); nothing was changed") from exc
        try:
            try:
                _pwrite_all(sfd, cut, 0)
                os.fsync(sfd)
            finally:
                os.close(sfd)
            dfd = os.open(os.path.dirname(os.path.abspath(side)), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            try:
                os.unlink(side)
            except OSError:
                pass
            raise AuditError(f"cannot save the cut bytes of audit log {p!r} to {side!r} "
                             f"({exc.strerror or exc}); nothing was changed") from exc
        return side
    raise AuditError(f"cannot create a new side file {p!r}.cut-{last_seq}-*: 16 random names "
                     "were all taken; nothing was changed")


def repair_audit_file(path: PathLike, *, signer: ReceiptSigner | None = None) -> AuditReport:
    """Truncate a damaged log to its valid prefix and append a ``audit_repair`` entry.

    The removed bytes are saved to a new ``<path>.cut-<seq>-<unix time>-<8 random hex>`` (mode
    0600, fsynced with its directory) before the log is changed, so nothing is destroyed; the
    repair entry records the problem, the line, the number of lines and bytes cut and the SHA-256
    of the cut bytes. It is written over the cut bytes before the file is truncated behind it. A
    log that already verifies is left untouched; if the cut bytes cannot all be saved, the side
    file is removed and the log is not changed.

    Args:
        path: the JSONL file.
        signer: if given, the repair entry is a signed checkpoint.

    Returns:
        The report of the repaired file; ``detail`` says what was cut.

    Raises:
        AuditError: the file cannot be read, the cut bytes cannot be saved (nothing changed), or
            the log cannot be rewritten (the message names the side file holding the cut).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"repair_audit_file() path must be str or os.PathLike, not {type(path).__name__}")
    p = os.fspath(path)
    try:
        fd = os.open(p, os.O_RDWR)
    except OSError as exc:
        raise AuditError(f"cannot open audit log {p!r}: {exc.strerror or exc}") from exc
    try:
        _lock(fd)
        before = _scan(p, None)
        if before.ok:
            return before
        size = os.fstat(fd).st_size
        cut = _read_all(fd, before.valid_bytes, size - before.valid_bytes)
        # The cut bytes are durable in the side file (and its name in the directory) before the
        # log is changed; if saving them fails, the side file is removed and the log untouched.
        side = _save_cut(p, before.last_seq, cut)
        record = {
            "event": "audit_repair",
            "problem": before.problem,
            "line": before.index,
            "detail": before.detail,
            "cut_lines": before.entries - before.valid_prefix,
            "cut_bytes": len(cut),
            "cut_sha256": hashlib.sha256(cut).hexdigest(),
            "cut_file": os.path.basename(side),
        }
        _, line = _make_entry(before.last_seq + 1, before.last_hash, record, canonical_json(record),
                              signer, True)
        # Repair entry first, over the cut bytes, then the truncation: a crash in between leaves
        # the repair entry followed by leftovers that verify reports, never a silent clean cut.
        try:
            _pwrite_all(fd, line, before.valid_bytes)
            os.ftruncate(fd, before.valid_bytes + len(line))
            os.fsync(fd)
        except OSError as exc:
            raise AuditError(f"repair of audit log {p!r} failed while rewriting it ({exc.strerror or exc}); "
                             f"the cut bytes are saved in {side!r}: run `qdrant-guard audit verify "
                             f"{p}` and repair again") from exc
    except OSError as exc:
        raise AuditError(f"cannot repair audit log {p!r}: {exc.strerror or exc}") from exc
    finally:
        try:
            _unlock(fd)
        finally:
            os.close(fd)
    after = _scan(p, None)
    detail = (f"repaired: {before.problem} at {before.detail}; cut {record['cut_lines']} line(s), "
              f"{len(cut)} bytes, saved to {side}; {after.detail}")
    return AuditReport(after.ok, after.entries, after.valid_prefix, after.problem, after.index,
                       detail, after.last_seq, after.last_hash, after.checkpoints, after.valid_bytes)


class AuditLog:
    """Append-only, hash-chained audit log (thread- and multi-process-safe), mirrored to logging.

    Args:
        path: JSONL file (created 0600 if missing), or ``None`` for logging only with the chain
            kept in memory.
        logger_name: every entry is logged at INFO with ``extra={"qdrant_guard": entry}``.
        fsync: fsync after each append (durable across power loss, slower).
        signer: sign a checkpoint every ``checkpoint_every`` entries.
        checkpoint_every: checkpoint period in entries (with a signer).
        verify_existing: verify the whole existing file on open (default: only its last line).

    Raises:
        AuditIntegrityError: the existing file does not verify (torn or altered last line, or
            any problem when ``verify_existing``); the message says how to verify and repair.
        AuditError: the file cannot be opened.
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
    ) -> None:
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"AuditLog() path must be str, os.PathLike or None, not {type(path).__name__}")
        if not isinstance(logger_name, str):
            raise TypeError(f"AuditLog() logger_name must be str, not {type(logger_name).__name__}")
        if signer is not None and not isinstance(signer, ReceiptSigner):
            raise TypeError(f"AuditLog() signer must be a ReceiptSigner or None, not {type(signer).__name__}")
        if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 1:
            raise ValueError(f"AuditLog() checkpoint_every must be a positive int, got {checkpoint_every!r}")
        self.path = None if path is None else os.fspath(path)
        self._logger = logging.getLogger(logger_name)
        self._fsync = bool(fsync)
        self._signer = signer
        self._every = checkpoint_every
        self._lock = threading.Lock()
        self._seq = 0
        self._prev = GENESIS
        self._size = -1  # file size after our last append; another writer changes it
        self._fd: int | None = None
        self._pid = os.getpid()
        if self.path is not None:
            if verify_existing and os.path.exists(self.path):
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
                    self._read_tail(fd)
                finally:
                    _unlock(fd)
            except BaseException:
                self.close()
                raise

    def _open(self) -> None:
        assert self.path is not None
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            raise AuditError(f"cannot open audit log {self.path!r}: {exc.strerror or exc}") from exc
        self._pid = os.getpid()
        self._size = -1

    def _read_tail(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        if size == self._size:
            return
        if size == 0:
            self._seq, self._prev, self._size = 0, GENESIS, 0
            return
        # Read backwards in blocks until the start of the last line is found.
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
        self._seq, self._prev, self._size = entry["seq"], entry["hash"], size

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
            AuditIntegrityError: the file's tail was damaged by someone else.
            AuditError: the write failed (the caller must fail closed).
        """
        if not isinstance(record, dict):
            raise TypeError(f"AuditLog.append() record must be dict, not {type(record).__name__}")
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
            AuditIntegrityError: the file's tail was damaged by someone else.
            AuditError: the write failed (the caller must fail closed).
        """
        if not isinstance(record, dict):
            raise TypeError(f"AuditLog.append_encoded() record must be dict, not {type(record).__name__}")
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
        entry, line = _make_entry(seq, self._prev, record, record_bytes, self._signer, seq % self._every == 0)
        self._seq, self._prev = seq, entry["hash"]
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
            saved = (self._seq, self._prev)
            entry, line = self._next(record, record_bytes)
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(f"short write ({written} of {len(line)} bytes)")
                if self._fsync:
                    os.fsync(fd)
            except OSError as exc:
                self._seq, self._prev = saved
                self._size = -1
                raise AuditError(f"cannot write audit log {self.path!r}: {exc}") from exc
            self._size = os.fstat(fd).st_size
            return entry
        finally:
            _unlock(fd)

    def close(self) -> None:
        """Close the file (idempotent)."""
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
