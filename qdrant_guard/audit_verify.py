"""Reading and verifying an audit log: the entry format, the chain and checkpoint checks, and
:func:`verify_audit_file`, which locates the first problem and reports two chains in one file.
The writer is in :mod:`qdrant_guard.audit`, which re-exports everything here, and the repair in
:mod:`qdrant_guard.audit_repair`.
"""
from __future__ import annotations

import base64
import binascii
import errno
import fcntl
import hashlib
import hmac
import io
import json
import os
import re
from dataclasses import dataclass
from typing import IO, Any, Iterator, Mapping, Union

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .audit_mac import entry_mac
from .canonical import canonical_json
from .errors import AuditError, GuardArgumentTypeError, GuardArgumentValueError

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
    "second_genesis",  # a second chain from genesis in the same file (two logs in one, or a forged one)
    "chain_broken",    # seq is as expected but prev is not the previous hash (an earlier entry
                       # was rewritten with a recomputed hash, or entries were renumbered)
    "bad_checkpoint",  # a checkpoint signature does not verify under the trusted keys
    "unauthenticated", # with writer keys: an entry no given writer's MAC authenticates
    "unsigned",        # with keys: no entry is authenticated (no checkpoint, no MAC verified)
)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_FIELDS = {"seq", "ts", "prev", "record", "hash"}
_V2_FIELDS = {"w", "mac"}  # format v2: the writer id (hashed) and its MAC of the hash (not hashed)
_REPAIR_HINT = (
    "run `qdrant-guard audit verify {path}` to locate the problem, then "
    "`qdrant-guard audit repair {path}` to truncate it to the valid prefix (the cut bytes are "
    "kept in a side file and a hashed repair entry records the cut)"
)
PathLike = Union[str, "os.PathLike[str]"]


def entry_hash(entry: Mapping[str, Any]) -> str:
    """Return hex SHA-256 of the canonical JSON of ``entry`` without its ``hash``, ``ckpt`` and ``mac``."""
    body = {k: v for k, v in entry.items() if k not in ("hash", "ckpt", "mac")}
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
        fork: ``(line_a, line_b)`` when the file holds two different chains for the same place
            (two entries with the same seq and ``prev``; at seq 1, two chains from genesis) and
            nothing in it shows which is real: the 1-based first lines of the two chains. The
            valid prefix then ends before both, and :func:`repair_audit_file` refuses to pick one
            unless told which (``keep_chain_from``). ``None`` otherwise, also when a signed
            checkpoint settled it.
        checkpoint_keys: ``(key id, count)`` of the checkpoints counted in ``checkpoints``, by
            key id (so that a verifier can say which key, e.g. a retired one, signed what).
        writers: with ``writer_keys``: ``(writer id, count)`` of the entries whose MAC verified.
        unauthenticated: with ``writer_keys``: the seqs of the entries of the scanned chain that
            no given writer's MAC authenticates (a format-v1 entry after a v2 one, an unknown
            writer, a MAC that does not verify); the first is the reported problem.
        legacy: with ``writer_keys``: how many entries before the first v2 entry carry no MAC
            (written before format v2, or by a writer without a signing key): not authenticated.
        signed_from: seq of the log's first entry in format v2 (0: none), where a guard with a
            signing key began writing it: the value to keep outside the file and pass back as
            ``signed_from`` (``audit verify --signed-from``).
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
    fork: tuple[int, int] | None = None
    checkpoint_keys: tuple[tuple[str, int], ...] = ()
    writers: tuple[tuple[str, int], ...] = ()
    unauthenticated: tuple[int, ...] = ()
    legacy: int = 0
    signed_from: int = 0


@dataclass(frozen=True)
class _Branch:
    """One of two chains that claim the same place: its lines and bytes in the file."""

    line: int       # 1-based first line
    lines: int      # how many consecutive lines chain on from it
    start: int      # byte offsets in the file
    end: int
    last_seq: int
    last_hash: str
    signed_at: int | None  # seq of its first checkpoint that verifies under the trusted keys


@dataclass(frozen=True)
class _Fork:
    a: _Branch     # the chain that came first in the file
    b: _Branch
    winner: str | None  # "a", "b" (settled by a signed checkpoint) or None (undecidable)


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
    if not isinstance(entry, dict) or not _FIELDS <= set(entry) or not set(entry) <= _FIELDS | {"ckpt"} | _V2_FIELDS:
        raise _Bad("corrupt", "not an audit entry object {seq, ts, prev, record, hash}")
    seq, prev, digest = entry["seq"], entry["prev"], entry["hash"]
    if (isinstance(seq, bool) or not isinstance(seq, int) or seq < 1
            or not isinstance(prev, str) or not _HEX64.fullmatch(prev)
            or not isinstance(digest, str) or not _HEX64.fullmatch(digest)
            or not isinstance(entry["record"], dict)
            or isinstance(entry["ts"], bool) or not isinstance(entry["ts"], (int, float))
            or ("w" in entry) != ("mac" in entry)
            or ("w" in entry and not (isinstance(entry["w"], str) and isinstance(entry["mac"], str)
                                      and _HEX64.fullmatch(entry["mac"])))):
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


_PLAIN_KID = re.compile(r"[\x21-\x7e]{1,128}")


def _show_kid(kid: str) -> str:
    """A checkpoint's key id as it may be printed: ``kid`` is text from the file, outside the
    hash, so anyone can set it; raw, a newline or a terminal escape in it forged an ``OK:`` line
    in `audit verify`'s output or the guard's error. Printable ASCII is shown as is, the rest as
    its ``ascii()`` escape, cut at 200 characters."""
    if _PLAIN_KID.fullmatch(kid):
        return kid
    shown = ascii(kid)
    return shown if len(shown) <= 200 else shown[:200] + "...(cut)"


def _check_ckpt(entry: Mapping[str, Any], trusted_keys: Mapping[str, Ed25519PublicKey]) -> None:
    ck = entry["ckpt"]
    if not isinstance(ck, dict) or set(ck) != {"kid", "sig"} or not all(isinstance(v, str) for v in ck.values()):
        raise _Bad("bad_checkpoint", "checkpoint must be {kid, sig}")
    pk = trusted_keys.get(ck["kid"])
    if pk is None:
        raise _Bad("bad_checkpoint", f"checkpoint key {_show_kid(ck['kid'])} is not trusted (if it is a signing key of this "
                                     "log, e.g. the one before a rotation, pass its public key too: --key; `audit verify --policy` "
                                     "trusts the policy's signing_key, receipts.retired_keys and audit_trusted_keys, as `audit repair` and "
                                     "`audit replay` do with --trust-policy)")
    try:
        sig = base64.b64decode(ck["sig"], validate=True)
        pk.verify(sig, CHECKPOINT_PREFIX + bytes.fromhex(entry["hash"]))
    except (binascii.Error, ValueError, InvalidSignature):
        raise _Bad("bad_checkpoint", "checkpoint signature does not verify") from None


def _mac_problem(entry: Mapping[str, Any], writer_keys: Mapping[str, bytes]) -> str | None:
    """Why no given writer authenticates the v2 ``entry`` (None: its writer's MAC verifies)."""
    w = entry["w"]
    key = writer_keys.get(w)
    if key is None:
        return (f"was written (it says) by writer {_show_kid(w)}, whose key was not given: pass the signing key "
                "of every guard that writes this log (--writer-key)")
    if not hmac.compare_digest(entry_mac(key, bytes.fromhex(entry["hash"])), entry["mac"]):
        return f"carries a MAC that does not verify under writer {_show_kid(w)}'s key"
    return None


def legacy_note(count: int) -> str:
    """What ``audit verify`` and ``audit replay`` say, with writer keys, of a log's first ``count``
    entries in format v1 (``AuditReport.legacy``): no MAC vouches for them, and nothing tells a log
    begun before v2 from one rewritten in format v1 by whoever could write the file."""
    return (f"note: the first {count} entr{'y' if count == 1 else 'ies'} (before the first with a writer MAC) "
            "are unauthenticated (pre-v2: written before entries carried MACs, or by a guard without "
            "signing_key): anyone who could write the file then may have written them, and a checkpoint "
            "after them signs them as its writer found them")


def _seq_list(seqs: list[int]) -> str:
    shown = ", ".join(str(q) for q in seqs[:20])
    return shown + (f", ... ({len(seqs)} in all)" if len(seqs) > 20 else "")


_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


def _read_locked(path: PathLike) -> bytes:
    """The whole file, read under a shared ``flock``: a writer's append (made under its exclusive
    lock) is never read half-written, which would look like a torn tail.

    Raises:
        AuditError: the file cannot be read.
    """
    p = os.fspath(path)
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError as exc:
        raise AuditError(f"cannot read audit log {p!r}: {exc.strerror or exc}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError as exc:
            # A file system without flock (some network or FUSE mounts, an archive copy): no
            # writer can append there (appends need the lock), so there is nothing to wait for.
            if exc.errno not in _NO_FLOCK:
                raise
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise AuditError(f"cannot read audit log {p!r}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _read_all(fd: int, offset: int, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = os.pread(fd, n - got, offset + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


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


def _branch(lines: list[tuple[bytes, bool]], offsets: list[int], parsed: list[dict[str, Any] | None],
            start: int, trusted_keys: Mapping[str, Ed25519PublicKey] | None, every: int) -> _Branch:
    # The lines that chain on from ``start`` and, with trusted keys, pass the checkpoint rules
    # verify applies (for the first branch the main scan already did).
    n, signed_at = 0, None
    for k in range(start, start + _run_length(parsed, start)):
        e = parsed[k]
        assert e is not None
        if trusted_keys is not None:
            if "ckpt" in e:
                try:
                    _check_ckpt(e, trusted_keys)
                except _Bad:
                    break
                if signed_at is None:
                    signed_at = e["seq"]
            elif e["seq"] % every == 0:
                break
        n += 1
    if n == 0:
        # Its first line already breaks the checkpoint rules: a one-line branch that is not signed.
        n = 1
    last = parsed[start + n - 1]
    assert last is not None
    return _Branch(start + 1, n, offsets[start], offsets[start + n], last["seq"], last["hash"], signed_at)


def _fork_detail(seq: int, fork: _Fork, keyed: bool) -> str:
    a, b = fork.a, fork.b
    chains = (f"the chain from line {a.line} (seq {seq}..{a.last_seq}, {a.lines} line(s)) and the "
              f"one from line {b.line} (seq {seq}..{b.last_seq}, {b.lines} line(s))")
    if seq == 1:
        what = (f"line {b.line} starts a second chain from genesis: two logs in one file, or a "
                f"forged one; {chains}")
    else:
        what = (f"seq {seq} appears on line {a.line} and again on line {b.line}, both chained to "
                f"the entry before line {a.line}: the chain forks and one branch is inserted; {chains}")
    if fork.winner == "a":
        return (f"{what}; only the chain from line {a.line} carries a verified checkpoint (seq "
                f"{a.signed_at}), so line {b.line} on is extra")
    if fork.winner == "b":
        return (f"{what}; only the chain from line {b.line} carries a verified checkpoint (seq "
                f"{b.signed_at}), so lines {a.line}..{b.line - 1} are extra")
    if not keyed:
        why = "pass the trusted keys to decide by signed checkpoints"
    elif a.signed_at is not None:
        why = "both carry verified checkpoints: the signing key wrote both"
    else:
        why = "neither carries a checkpoint that verifies"
    return (f"{what}; nothing in the file shows which is real ({why}), and length proves nothing: "
            "whoever can write the file can make either longer")


def _scan(path: PathLike, trusted_keys: Mapping[str, Ed25519PublicKey] | None,
          checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
          writer_keys: Mapping[str, bytes] | None = None, signed_entries: bool = False,
          allow_unsigned: bool = False, signed_from: int | None = None) -> AuditReport:
    return _scan_fork(path, trusted_keys, checkpoint_every, writer_keys=writer_keys, signed_entries=signed_entries,
                      allow_unsigned=allow_unsigned, signed_from=signed_from)[0]


def _scan_fork(path: PathLike, trusted_keys: Mapping[str, Ed25519PublicKey] | None,
               checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
               fd: int | None = None, data: bytes | None = None,
               writer_keys: Mapping[str, bytes] | None = None,
               signed_entries: bool = False, allow_unsigned: bool = False,
               signed_from: int | None = None) -> tuple[AuditReport, _Fork | None]:
    p = os.fspath(path)
    if data is not None:
        # Replay verifies exactly the bytes it then replays, not a second read of the path.
        lines = list(_iter_lines(io.BytesIO(data)))
    elif fd is not None:
        # Repair reads the file it holds locked and will cut, not whatever the path names now.
        lines = list(_iter_lines(io.BytesIO(_read_all(fd, 0, os.fstat(fd).st_size))))
    else:
        lines = list(_iter_lines(io.BytesIO(_read_locked(p))))
    seqs_after: dict[int, int] = {}
    bad: _Bad | None = None
    bad_line = None
    last_seq, last_hash, nbytes, ckpts = 0, GENESIS, 0, 0
    by_key: dict[str, int] = {}
    # With writer keys: entries authenticated per writer, the seqs none authenticates (the first's
    # line, prefix length and reason), and the format-v1 entries before the first v2 one.
    by_writer: dict[str, int] = {}
    unauth: list[int] = []
    first_unauth: tuple[int, int, str] | None = None
    legacy, v2_seen, first_v2, v1 = 0, False, 0, 0
    parsed: list[dict[str, Any] | None] = []
    for raw, complete in lines:
        try:
            parsed.append(_parse_line(raw) if complete else None)
        except _Bad:
            parsed.append(None)
    offsets = [0]
    for raw, complete in lines:
        offsets.append(offsets[-1] + len(raw) + complete)
    for i, e in enumerate(parsed):
        if e is not None:
            seqs_after.setdefault(e["seq"], i)
    fork: _Fork | None = None
    seen: dict[int, int] = {}
    # Per valid line: (seq, hash, cumulative bytes), so the prefix can be cut back to a fork point.
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
                # A replayed copy or a line that chains to nothing before it is the extra line; a
                # different entry for the same place (a second chain) is judged after the loop.
                # Every seq below `expected` is in `seen` (seqs start at 1 and the prefix so far
                # is contiguous), so an earlier seq always lands here.
                raise _Bad("inserted", f"seq {seq} already appeared on line {seen[seq]}")
            if seq > expected:
                later = seqs_after.get(expected)
                if later is not None and later > i:
                    raise _Bad("reordered", f"expected seq {expected}, found seq {seq}; seq {expected} "
                                            f"appears later on line {later + 1}")
                missing = f"{expected}" if seq == expected + 1 else f"{expected}..{seq - 1}"
                raise _Bad("deleted", f"expected seq {expected}, found seq {seq}: entr"
                                      f"{'y' if seq == expected + 1 else 'ies'} {missing} missing")
            if entry["prev"] != last_hash:
                raise _Bad("chain_broken", f"prev does not match the hash of the entry before it "
                                           f"(line {lineno - 1} was rewritten, or lines were renumbered)")
            if trusted_keys is not None and "ckpt" in entry:
                _check_ckpt(entry, trusted_keys)
                ckpts += 1
                by_key[entry["ckpt"]["kid"]] = by_key.get(entry["ckpt"]["kid"], 0) + 1
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
        if "w" not in entry:
            v1 += 1
        elif not first_v2:
            first_v2 = seq
        if writer_keys is not None or signed_entries or signed_from is not None:
            # Reported, not a break: every such entry is named, and the chain after it still checked.
            why = None
            if "w" in entry:
                v2_seen = True
                if writer_keys is not None:
                    why = _mac_problem(entry, writer_keys)
                if why is None and signed_entries and entry.get("ckpt", {}).get("kid") != entry["w"]:
                    # Its ckpt, if any, verified above under the trusted keys: only whose it is is left.
                    why = (f"carries no signature by its writer {_show_kid(entry['w'])} (a checkpoint under its id), "
                           "which every entry of a guard with audit_sign_every_entry carries")
                if (why is None and seq == signed_from and writer_keys is None and not signed_entries
                        and "ckpt" not in entry):
                    # Public keys cannot check its MAC; a signing guard's first entry in a log is a
                    # checkpoint, which a forger without the key cannot make.
                    why = (f"carries no checkpoint, and a guard with signing_key makes its first entry in a log one "
                           f"(signed_from {signed_from} says signing began here)")
            elif v2_seen and (writer_keys is not None or signed_entries):
                why = "carries no writer MAC (format v1) after entries in format v2"
            elif signed_from is not None and seq >= signed_from:
                # Outside the file, the operator's word that a signing guard wrote every entry from
                # here on: a v1 one here is a rewrite, not a log begun before v2.
                why = (f"is in format v1 (no writer id, no MAC) at or after seq {signed_from}, where signing began "
                       "(signed_from): written by someone without the guard's key")
            elif signed_entries:
                # A v1 entry names no writer whose signature could be required: a log written by
                # guards that sign every entry holds none, so it is not a legacy entry here.
                why = ("carries no writer id and no signature (format v1), which every entry of a guard with "
                       "audit_sign_every_entry carries")
            elif not v2_seen and writer_keys is not None:
                legacy += 1
            if why is not None:
                unauth.append(seq)
                if first_unauth is None:
                    first_unauth = (lineno, len(good), f"seq {seq} {why}")
            elif "w" in entry and writer_keys is not None:
                by_writer[entry["w"]] = by_writer.get(entry["w"], 0) + 1
        seen[seq] = lineno
        last_seq, last_hash = seq, entry["hash"]
        nbytes += len(raw) + 1
        good.append((seq, last_hash, nbytes))
    if bad is not None and bad_line is not None:
        # Any line from the first problem on that is a different entry for a place the sound
        # chain already filled (same seq, same prev) starts a second chain, whatever lies between:
        # otherwise a forged chain from genesis put first, then a junk line, then the real log
        # would verify as the valid prefix and repair would keep it. The earliest fork point wins.
        found: tuple[int, int, int] | None = None
        for m in range(bad_line - 1, len(lines)):
            e = parsed[m]
            first = seen.get(e["seq"]) if e is not None else None
            if e is None or first is None:
                continue
            earlier = parsed[first - 1]
            assert earlier is not None
            if e["prev"] == earlier["prev"] and e["hash"] != earlier["hash"]:
                if found is None or e["seq"] < found[0]:
                    found = (e["seq"], first - 1, m)
        if found is not None:
            fseq, ia, ib = found
            # Which chain the writer wrote cannot be told from the file (whoever can write it can
            # make either one longer or put it first), only from a checkpoint signed by a trusted
            # key on one of them and not the other.
            fa = _branch(lines, offsets, parsed, ia, trusted_keys, checkpoint_every)
            fb = _branch(lines, offsets, parsed, ib, trusted_keys, checkpoint_every)
            winner = None
            if (fa.signed_at is None) != (fb.signed_at is None):
                winner = "a" if fa.signed_at is not None else "b"
            fork = _Fork(fa, fb, winner)
            problem = "second_genesis" if fseq == 1 else "inserted"
            detail = _fork_detail(fseq, fork, trusted_keys is not None)
            if winner != "a":
                bad, bad_line = _Bad(problem, detail), ia + 1
                del good[ia:]
            elif ib == bad_line - 1:
                bad = _Bad(problem, detail)
            else:
                # The signed chain breaks before the other one starts: that break is the first
                # problem, and everything after it, the other chain included, is cut.
                bad = _Bad(bad.problem, f"{bad.detail}; after it, {detail}")
    if first_unauth is not None and (bad_line is None or first_unauth[0] < bad_line):
        # A checkpoint after such an entry signs it with the chain; it vouches only for what its
        # writer's MACs authenticate, so the valid prefix ends before the first one.
        uline, ugood, why = first_unauth
        after_it = f"; after it, line {bad_line}: {bad.problem}: {bad.detail}" if bad is not None else ""
        bad, bad_line = _Bad("unauthenticated", f"{why}; no given writer authenticates seq "
                                                f"{_seq_list(unauth)}{after_it}"), uline
        del good[ugood:]
    if bad is None and signed_from is not None and good and good[-1][0] < signed_from:
        # The operator's word is that a signing guard wrote seq signed_from: a log ending before it
        # lost its end (or was rewritten shorter), which the chain alone never shows.
        bad, bad_line = _Bad("deleted", f"the log ends at seq {good[-1][0]}, before seq {signed_from}, where "
                                        "signing began (signed_from): entries were cut off its end, or signed_from "
                                        "is not this log's"), len(good)
    if (bad is None and not allow_unsigned and good and ckpts == 0 and not by_writer
            and (trusted_keys is not None or writer_keys is not None)):
        # Keys were given to show who wrote the log, and nothing in it is theirs: whoever can write
        # the file can rewrite it whole, hashes recomputed, with no checkpoint and no MAC.
        what = (f"all {len(good)} in format v1, with no writer id or MAC" if v1 == len(good)
                else f"{v1} in format v1, {len(good) - v1} in format v2" if v1 else f"all {len(good)} in format v2")
        macs = "" if writer_keys is None else " and no writer MAC verifies under the writer keys given"
        bad, bad_line = _Bad("unsigned", f"none of its {len(good)} entries ({what}) is authenticated: it carries no "
                                         f"checkpoint that verifies under the keys given{macs}. A log written by a "
                                         "guard without signing_key, or by a qdrant-guard before 2026-12-07 that had "
                                         "not reached a checkpoint seq, reads the same as one rewritten whole, hashes "
                                         "recomputed, by anyone who could write the file"), 1
        del good[:]
    valid = len(good)
    last_seq, last_hash, nbytes = good[-1] if good else (0, GENESIS, 0)
    auth: dict[str, Any] = {"writers": tuple(sorted(by_writer.items())), "unauthenticated": tuple(unauth),
                            "legacy": legacy, "signed_from": first_v2}
    if bad is None:
        detail = f"{valid} entries verified" + (f", {ckpts} checkpoints" if trusted_keys is not None else "")
        if writer_keys is not None:
            detail += f", {sum(by_writer.values())} authenticated by their writers' MACs" + (
                f", {legacy} before format v2 not authenticated" if legacy else "")
        return AuditReport(True, len(lines), valid, None, None, detail,
                           last_seq, last_hash, ckpts, nbytes, checkpoint_keys=tuple(sorted(by_key.items())),
                           **auth), None
    where = f"line {bad_line}"
    got = parsed[bad_line - 1] if bad_line is not None else None
    if got is not None:
        where += f" (seq {got['seq']})"
    unresolved = (fork.a.line, fork.b.line) if fork is not None and fork.winner is None else None
    return AuditReport(False, len(lines), valid, bad.problem, bad_line, f"{where}: {bad.detail}",
                       last_seq, last_hash, ckpts, nbytes, unresolved, tuple(sorted(by_key.items())), **auth), fork


def verify_audit_file(
    path: PathLike, *, trusted_keys: Mapping[str, Ed25519PublicKey] | None = None,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY, writer_keys: Mapping[str, bytes] | None = None,
    signed_entries: bool = False, allow_unsigned: bool = False, signed_from: int | None = None,
) -> AuditReport:
    """Verify an audit log file from its first line.

    Detects edited, deleted, inserted and reordered entries, corrupt lines, a torn tail and two
    chains in one file (a second genesis or a fork, anywhere after the first problem), and
    locates the first problem by 1-based line number and seq. Which of two chains is real is
    decided only by a checkpoint verified under ``trusted_keys`` on exactly one of them, never by
    length or order; otherwise ``report.fork`` names both and the valid prefix ends before them. Appending forged entries at the end
    and truncating whole entries from the end are detectable only against an external anchor
    (a trusted checkpoint or a copy of the last hash); see docs/audit-log.md.

    Args:
        path: the JSONL file.
        trusted_keys: key id -> public key; when given, checkpoint signatures are verified too,
            and every ``checkpoint_every``-th entry must carry one (``bad_checkpoint`` otherwise).
        checkpoint_every: the writer's checkpoint period (:class:`AuditLog`'s, default 1000).
        writer_keys: writer id -> MAC key (:func:`qdrant_guard.audit_mac.writer_keys` of the
            signing keys of every guard that writes the log); when given, every entry must carry
            a MAC one of them verifies (``unauthenticated`` otherwise, naming every such seq), but
            for the format-v1 entries before the first v2 one, which are counted in
            ``report.legacy``. A checkpoint signs the whole chain before it, entries others
            appended included: only the MACs show which entries a writer made.
        signed_entries: every entry must be in format v2 and carry a checkpoint under its own
            writer id (``AuditLog(sign_every_entry=True)``, the policy's ``audit_sign_every_entry``,
            on every guard writing the log), verified under ``trusted_keys`` (which it needs):
            ``unauthenticated`` otherwise, as with ``writer_keys``; a format-v1 entry is
            ``unauthenticated`` wherever it is (no legacy prefix). Public keys alone then show which
            guard wrote each entry.
        allow_unsigned: with ``trusted_keys`` or ``writer_keys``, a log of one or more entries
            none of which is authenticated (no checkpoint verifies, no writer MAC verifies) is
            ``unsigned`` (``ok`` False, valid prefix 0) unless this is True: the keys then vouch
            for nothing, and anyone who can write the file can rewrite it whole in format v1, or
            in v2 without checkpoints, with recomputed hashes. Set it for a log written by guards
            without ``signing_key``, or by a signing guard before its first entry in a log was a
            checkpoint (or verify that one with ``writer_keys``). An empty log is not ``unsigned``.
        signed_from: the seq from which a guard with a signing key wrote the log (1 for a log it
            began; ``report.signed_from`` of a run you trust), kept outside the file: every entry
            from it on must be in format v2 (a v1 one is ``unauthenticated``), the entry at it must
            carry a verifying checkpoint (or, with ``writer_keys``, its writer's MAC), and a log
            ending before it is ``deleted``. Needs ``trusted_keys`` or ``writer_keys``. This is
            what tells a log begun by a guard without ``signing_key`` from one rewritten in format
            v1 and then signed over by the guard's next checkpoint.

    Raises:
        TypeError: ``path`` is not a path.
        AuditError: the file cannot be read.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise GuardArgumentTypeError(f"verify_audit_file() path must be str or os.PathLike, not {type(path).__name__}")
    if trusted_keys is not None and not isinstance(trusted_keys, Mapping):
        raise GuardArgumentTypeError("verify_audit_file() trusted_keys must be a mapping of key id to Ed25519PublicKey or None")
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise GuardArgumentValueError(f"verify_audit_file() checkpoint_every must be a positive int, got {checkpoint_every!r}")
    if writer_keys is not None and (not isinstance(writer_keys, Mapping) or not all(
            isinstance(k, str) and isinstance(v, bytes) for k, v in writer_keys.items())):
        raise GuardArgumentTypeError("verify_audit_file() writer_keys must be a mapping of writer id to MAC key bytes "
                                     "(qdrant_guard.audit_mac.writer_keys([signing keys])) or None")
    if not isinstance(signed_entries, bool):
        raise GuardArgumentTypeError(f"verify_audit_file() signed_entries must be bool, not {type(signed_entries).__name__}")
    if signed_entries and trusted_keys is None:
        raise GuardArgumentValueError("verify_audit_file() signed_entries=True checks each entry's signature by its "
                                      "writer, and trusted_keys is None: pass the public key of every guard writing "
                                      "the log")
    if not isinstance(allow_unsigned, bool):
        raise GuardArgumentTypeError(f"verify_audit_file() allow_unsigned must be bool, not {type(allow_unsigned).__name__}")
    if signed_from is not None and (isinstance(signed_from, bool) or not isinstance(signed_from, int) or signed_from < 1):
        raise GuardArgumentValueError(f"verify_audit_file() signed_from must be a seq (a positive int) or None, "
                                      f"got {signed_from!r}")
    if signed_from is not None and trusted_keys is None and writer_keys is None:
        raise GuardArgumentValueError("verify_audit_file() signed_from checks that the entries from that seq on are "
                                      "signed, and no keys were given: pass trusted_keys (the guard's public key) or "
                                      "writer_keys")
    return _scan(path, trusted_keys, checkpoint_every, writer_keys, signed_entries, allow_unsigned, signed_from)
