"""Repairing a damaged audit log (:func:`repair_audit_file`, ``qdrant-guard audit repair``): cut it
to its valid prefix, save the cut bytes to a side file first, and append a repair entry; refuse a
repair entry no writer would authenticate or whose checkpoint would vouch for entries its key
cannot. Also importable from :mod:`qdrant_guard.audit`. See docs/audit-log.md.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import time
from typing import Any, Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .audit_file_access import _REPAIR_OPT_OUT, _refuse_not_regular, _refuse_shared
from .audit_mac import unvouched as _unvouched
from .audit_verify import (
    DEFAULT_CHECKPOINT_EVERY,
    AuditReport,
    PathLike,
    _Bad,
    _Branch,
    _parse_line,
    _read_all,
    _scan_fork,
)
from .audit_write import _lock, _make_entry, _pwrite_all, _unlock
from .canonical import canonical_json
from .errors import (
    AuditError,
    AuditIntegrityError,
    AuditUnauthenticatedError,
    GuardArgumentTypeError,
    GuardArgumentValueError,
)
from .receipts import ReceiptSigner


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


def _last_line(data: bytes) -> bytes:
    """The last line of ``data`` (which ends with a newline), without its newline."""
    return data[:-1].rsplit(b"\n", 1)[-1]


def _last_line_before(fd: int, end: int) -> bytes:
    """The line of the file that ends (with its newline) at byte ``end``; b"" when ``end`` is 0."""
    pos, buf = max(end - 1, 0), b""
    while pos > 0:
        step = min(65536, pos)
        pos -= step
        buf = _read_all(fd, pos, step) + buf
        cut = buf.rfind(b"\n")
        if cut >= 0:
            return buf[cut + 1:]
    return buf


def _check_repair_writer(p: str, last: bytes, signer: ReceiptSigner | None,
                         writer_keys: Mapping[str, bytes] | None) -> None:
    """Refuse a repair entry no writer would authenticate after an entry that carries a MAC."""
    if not last or b'"w":' not in last:
        return
    try:
        kept = _parse_line(last)
    except _Bad:
        return
    if "w" not in kept:
        return
    if signer is None:
        raise GuardArgumentValueError(
            f"repair_audit_file(): the log {p!r} is in format v2 (its entries carry their writer's MAC), so its "
            "repair entry must carry one too, or `qdrant-guard audit verify --writer-key` would report it as an "
            "entry no writer made: pass signer (--signing-key, the key of the guard writing the log). Nothing "
            "was changed")
    if writer_keys is not None and signer.key_id not in writer_keys:
        raise GuardArgumentValueError(
            f"repair_audit_file(): the repair entry of {p!r} would carry the MAC of writer {signer.key_id}, which is "
            "not among the writer keys given (writer_keys, --writer-key), so verifying with them would report it: "
            "give the signing key's writer key too. Nothing was changed")


def _check_repair_vouches(p: str, kept: bytes, signer: ReceiptSigner, trusted: Mapping[str, Any],
                          sign_every_entry: bool = False) -> None:
    """Refuse a signed repair entry over kept entries its signer would not sign over as a writer
    (:meth:`AuditLog._read_appended`): its checkpoint would vouch for them. With ``writer_keys``
    the scan already cut them."""
    v2 = False
    found: list[tuple[int, str, Any]] = []  # (seq, why, the entry's writer field)
    for raw in kept.split(b"\n")[:-1]:
        entry = _parse_line(raw)  # the kept lines verified: no _Bad here
        if sign_every_entry and found and "ckpt" in entry and "w" in entry:
            # A writer's checkpoint already vouches for the v1 entries before it (a log begun
            # before format v2, then signed), as the writer, which reads only after the most
            # recent checkpoint, takes them; only v1 entries no checkpoint covers are refused.
            # The entry carrying it is checked below (its writer's MAC, or signature under
            # sign_every_entry): a 'ckpt' copied onto a line covers nothing.
            found = [f for f in found if f[2] is not None]
        why = _unvouched(entry, signer.audit_mac, trusted, v2, trusted if sign_every_entry else None)
        if why is not None:
            found.append((entry["seq"], why, entry.get("w")))
        v2 = v2 or "w" in entry
    if found:
        seqs = tuple(q for q, _, _ in found)
        shown = ", ".join(str(q) for q in seqs[:20]) + (f", ... ({len(seqs)} in all)" if len(seqs) > 20 else "")
        raise AuditUnauthenticatedError(
            f"repair_audit_file(): the repair entry of {p!r}, a checkpoint signed with {signer.key_id}, would vouch "
            f"for entries that key cannot (seq {shown}; seq {found[0][0]} {found[0][1]}): repair with writer_keys "
            "(--writer-key GUARD.key, one per guard writing the log) to cut the log from the first entry no writer "
            "authenticates, or, for another guard's entries, trust its key (trusted_keys, --key, --trust-policy). "
            "Nothing was changed", seqs)


def repair_audit_file(
    path: PathLike, *, signer: ReceiptSigner | None = None,
    trusted_keys: Mapping[str, Ed25519PublicKey] | None = None,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY, keep_chain_from: int | None = None,
    allow_shared_file: bool = False, writer_keys: Mapping[str, bytes] | None = None,
    sign_every_entry: bool = False,
) -> AuditReport:
    """Truncate a damaged log to its valid prefix and append a ``audit_repair`` entry.

    The removed bytes are saved to a new ``<path>.cut-<seq>-<unix time>-<8 random hex>`` (mode
    0600, fsynced with its directory) before the log is changed, so nothing is destroyed; the
    repair entry records the problem, the line, the number of lines and bytes cut and the SHA-256
    of the cut bytes. It is written over the cut bytes before the file is truncated behind it. A
    log that already verifies is left untouched (so is one that is only ``unsigned``: nothing in it
    is damaged); if the cut bytes cannot all be saved, the side
    file is removed and the log is not changed.

    A file holding two chains for the same place (``report.fork``: two chains from genesis, or a
    fork) is not repaired by guessing: unless a checkpoint verified under ``trusted_keys`` is on
    exactly one of them, the operator must say which chain is real (``keep_chain_from``). When the
    kept chain is the later one, its lines are written back right after the prefix. The repair
    entry then also records ``fork``, ``kept_chain_from``, ``decided_by`` and ``kept_lines``.

    Args:
        path: the JSONL file.
        signer: if given, the repair entry is a signed checkpoint.
        trusted_keys: verify as ``verify_audit_file(path, trusted_keys=...)`` does (checkpoint
            problems are cut too) and settle forks by signed checkpoints.
        checkpoint_every: the writer's checkpoint period (with ``trusted_keys``).
        keep_chain_from: for a log whose report has ``fork == (a, b)``: ``a`` or ``b``, the first
            line of the chain the operator has established as the real one.
        allow_shared_file: repair a log file that is world-writable, writable by a group (or ACL
            entry) that someone other than this uid and root may be in, owned by another uid, or
            below a directory that is world-writable, or writable by a group or ACL entry
            others are in, without the sticky bit, or another uid's. Refused by default, as
            ``AuditLog`` refuses to open one: the repair entry (a signed checkpoint with
            ``signer``) would vouch for what others appended.
        writer_keys: verify as ``verify_audit_file(path, writer_keys=...)`` does: the first entry
            no given writer's MAC authenticates is cut too, with everything after it.
        sign_every_entry: the log's guards sign every entry (``audit_sign_every_entry``): with
            ``signer`` and no ``writer_keys``, a kept entry under another trusted writer's id
            without that writer's verifying signature is refused too, as the writer refuses it.

    Returns:
        The report of the repaired file; ``detail`` says what was cut.

    Raises:
        AuditIntegrityError: the log holds two chains nothing in it tells apart and
            ``keep_chain_from`` is not given; the message says how to decide. Nothing changed.
        ValueError: ``keep_chain_from`` is not one of the two chains' first lines, or the log
            has no such fork; or, with ``trusted_keys`` and no ``signer``, the repair entry
            would fall on a checkpoint seq (verify with the keys would then fail on it); or the
            last kept entry carries a writer MAC (format v2) and ``signer`` is not given, or its
            key is not among ``writer_keys`` (the repair entry would be reported as no writer's).
        AuditUnauthenticatedError: ``signer`` is given, ``writer_keys`` is not, and a kept entry
            is one the signer's writer would not sign over (its id with a MAC that does not
            verify, a writer id neither its own nor in ``trusted_keys``, no MAC after v2 entries):
            the repair entry, a checkpoint, would vouch for it. Nothing changed.
        AuditError: the file cannot be read, is no regular file, or others than this uid can
            write it (the message names the mode or owner and the fix; nothing changed), the cut
            bytes cannot be saved (nothing changed), or the log cannot be rewritten (the message
            names the side file holding the cut).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise GuardArgumentTypeError(f"repair_audit_file() path must be str or os.PathLike, not {type(path).__name__}")
    if signer is not None and not isinstance(signer, ReceiptSigner):
        raise GuardArgumentTypeError(f"repair_audit_file() signer must be a ReceiptSigner or None, not {type(signer).__name__}")
    if trusted_keys is not None and not isinstance(trusted_keys, Mapping):
        raise GuardArgumentTypeError("repair_audit_file() trusted_keys must be a mapping of key id to Ed25519PublicKey or None")
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise GuardArgumentValueError(f"repair_audit_file() checkpoint_every must be a positive int, got {checkpoint_every!r}")
    if keep_chain_from is not None and (isinstance(keep_chain_from, bool) or not isinstance(keep_chain_from, int)):
        raise GuardArgumentTypeError(f"repair_audit_file() keep_chain_from must be a line number (int) or None, "
                                     f"not {type(keep_chain_from).__name__}")
    if not isinstance(allow_shared_file, bool):
        raise GuardArgumentTypeError(
            f"repair_audit_file() allow_shared_file must be bool, not {type(allow_shared_file).__name__}")
    if not isinstance(sign_every_entry, bool):
        raise GuardArgumentTypeError(
            f"repair_audit_file() sign_every_entry must be bool, not {type(sign_every_entry).__name__}")
    if writer_keys is not None and (not isinstance(writer_keys, Mapping) or not all(
            isinstance(k, str) and isinstance(v, bytes) for k, v in writer_keys.items())):
        raise GuardArgumentTypeError("repair_audit_file() writer_keys must be a mapping of writer id to MAC key bytes "
                                     "(qdrant_guard.audit_mac.writer_keys([signing keys])) or None")
    p = os.fspath(path)
    try:
        # O_NONBLOCK: a FIFO named here is refused below, not waited on.
        fd = os.open(p, os.O_RDWR | os.O_NONBLOCK)
    except OSError as exc:
        raise AuditError(f"cannot open audit log {p!r}: {exc.strerror or exc}") from exc
    try:
        _refuse_not_regular(os.fstat(fd), p, repair=True)
        if not allow_shared_file:
            _refuse_shared(fd, p, os.path.abspath(p), _REPAIR_OPT_OUT)
        os.set_blocking(fd, True)
        _lock(fd)
        st, held = os.stat(p), os.fstat(fd)
        if (st.st_dev, st.st_ino) != (held.st_dev, held.st_ino):
            raise AuditError(f"audit log {p!r} was replaced (rotated or moved) while repair waited for its "
                             "lock; nothing was changed: run the repair again on the file you mean")
        # A log none of whose entries is signed is not damaged: nothing to cut (verify names it).
        before, fork = _scan_fork(p, trusted_keys, checkpoint_every, fd, writer_keys=writer_keys, allow_unsigned=True)
        if keep_chain_from is not None and before.fork is None:
            raise GuardArgumentValueError(
                f"repair_audit_file() keep_chain_from={keep_chain_from} applies only to a log holding two "
                f"chains that verify cannot tell apart (report.fork); {p!r} "
                + ("verifies" if before.ok else f"has {before.problem} at {before.detail}")
                + ": repair it without keep_chain_from")
        if before.ok:
            return before
        valid_bytes, last_seq, last_hash = before.valid_bytes, before.last_seq, before.last_hash
        kept_lines = before.valid_prefix
        keep: _Branch | None = None  # a chain after the cut point to write back after the prefix
        extra: dict[str, Any] = {}
        if fork is not None:
            decided_by, chosen = "checkpoint", fork.winner
            if chosen is None:
                a, b = fork.a.line, fork.b.line
                if keep_chain_from is None:
                    raise AuditIntegrityError(
                        f"audit log {p!r} was not repaired: {before.problem} at {before.detail}. Decide which "
                        f"chain is the real one: a checkpoint signed by the guard's key (repair with "
                        f"trusted_keys / --key GUARD.pub keeps the chain that alone carries one); a copy "
                        f"of the log kept elsewhere (the logging handler's stream, a backup) or a "
                        f"last_hash/last_seq recorded outside the file; the records and timestamps of "
                        f"each chain against what you know. Then repair with keep_chain_from={a} or "
                        f"{b} (--keep-chain-from); the other chain is saved in the side file and the "
                        f"choice is recorded in the repair entry. Nothing was changed.")
                if keep_chain_from not in (a, b):
                    raise GuardArgumentValueError(f"repair_audit_file() keep_chain_from must be {a} or {b}, the first "
                                                  f"lines of the two chains in {p!r}, got {keep_chain_from}")
                decided_by, chosen = "operator", ("a" if keep_chain_from == a else "b")
            branch = fork.a if chosen == "a" else fork.b
            if branch is fork.a:
                valid_bytes, last_seq, last_hash = branch.end, branch.last_seq, branch.last_hash
                kept_lines = branch.line - 1 + branch.lines
            else:
                keep = branch
            extra = {"fork": [fork.a.line, fork.b.line], "kept_chain_from": branch.line,
                     "decided_by": decided_by, "kept_lines": [branch.line, branch.line + branch.lines - 1]}
        size = os.fstat(fd).st_size
        cut = _read_all(fd, valid_bytes, size - valid_bytes)
        rewrite = b""
        cut_at_seq = last_seq
        if keep is not None:
            rewrite = cut[keep.start - valid_bytes:keep.end - valid_bytes]
            last_seq, last_hash = keep.last_seq, keep.last_hash
            kept_lines += keep.lines
        if trusted_keys is not None and signer is None and (last_seq + 1) % checkpoint_every == 0:
            # Verified with the keys, an unsigned entry at a checkpoint seq is itself a problem.
            raise GuardArgumentValueError(f"repair_audit_file(): the repair entry of {p!r} would be seq {last_seq + 1}, a "
                                          f"checkpoint seq (every {checkpoint_every}), and must be signed: pass signer "
                                          "(--signing-key, the guard's key). Nothing was changed")
        _check_repair_writer(p, _last_line(rewrite) if rewrite else _last_line_before(fd, valid_bytes),
                             signer, writer_keys)
        if signer is not None and writer_keys is None:
            _check_repair_vouches(p, _read_all(fd, 0, valid_bytes) + rewrite, signer, trusted_keys or {},
                                  sign_every_entry)
        # The cut bytes are durable in the side file (and its name in the directory) before the
        # log is changed; if saving them fails, the side file is removed and the log untouched.
        side = _save_cut(p, cut_at_seq, cut)
        record = {
            "event": "audit_repair",
            "problem": before.problem,
            "line": before.index,
            "detail": before.detail,
            "cut_lines": before.entries - kept_lines,
            "cut_bytes": len(cut) - len(rewrite),
            "cut_sha256": hashlib.sha256(cut).hexdigest(),
            "cut_file": os.path.basename(side),
            **extra,
        }
        _, line = _make_entry(last_seq + 1, last_hash, record, canonical_json(record), signer, True)
        # Repair entry first, over the cut bytes, then the truncation: a crash in between leaves
        # the repair entry followed by leftovers that verify reports, never a silent clean cut.
        try:
            _pwrite_all(fd, rewrite + line, valid_bytes)
            os.ftruncate(fd, valid_bytes + len(rewrite) + len(line))
            os.fsync(fd)
        except OSError as exc:
            raise AuditError(f"repair of audit log {p!r} failed while rewriting it ({exc.strerror or exc}); "
                             f"the cut bytes are saved in {side!r}: run `qdrant-guard audit verify "
                             f"{p}` and repair again") from exc
        after = _scan_fork(p, trusted_keys, checkpoint_every, fd, writer_keys=writer_keys, allow_unsigned=True)[0]
    except OSError as exc:
        raise AuditError(f"cannot repair audit log {p!r}: {exc.strerror or exc}") from exc
    finally:
        try:
            _unlock(fd)
        finally:
            os.close(fd)
    kept = f"; kept the chain from line {extra['kept_chain_from']} ({extra['decided_by']})" if extra else ""
    detail = (f"repaired: {before.problem} at {before.detail}{kept}; cut {record['cut_lines']} line(s), "
              f"{record['cut_bytes']} bytes, saved to {side}; {after.detail}")
    # The repaired log's report whole (writers, signed_from, ...), with what the repair did.
    return dataclasses.replace(after, detail=detail)

