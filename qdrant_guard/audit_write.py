"""Writing audit log entries: an entry's line (hashed, with its writer's MAC and, at a checkpoint,
its signature, as :mod:`qdrant_guard.audit` describes the format), the file lock, and a write at an
offset that finishes or raises. The writer (:class:`qdrant_guard.audit.AuditLog`) and the repair
(:mod:`qdrant_guard.audit_repair`) both write entries with these.
"""
from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import time
from typing import Any

from .audit_verify import CHECKPOINT_PREFIX
from .canonical import canonical_json
from .receipts import ReceiptSigner


def _lock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_EX)


def _unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)


def _make_entry(seq: int, prev: str, record: dict[str, Any], record_bytes: bytes,
                signer: ReceiptSigner | None, checkpoint: bool) -> tuple[dict[str, Any], bytes]:
    # The canonical encodings of the entry (keys prev < record < seq < ts, and ckpt < hash in
    # front of them on the line), spliced around the record's canonical bytes so the record is
    # encoded once; equal to canonical_json(entry) and to what entry_hash() recomputes.
    # With a signer the entry is format v2: its writer id "w" (last of the hashed keys) and a MAC
    # of its hash (between "hash" and "prev" on the line) under that writer's secret.
    ts = time.time()
    macs = signer.audit_mac if signer is not None else None
    tail = b"".join((b'"prev":"', prev.encode("ascii"), b'","record":', record_bytes, b',"seq":',
                     int.__repr__(seq).encode("ascii"), b',"ts":', float.__repr__(ts).encode("ascii"),
                     b"}" if macs is None else b',"w":' + macs.w_json + b"}"))
    raw = hashlib.sha256(b"{" + tail).digest()
    digest = raw.hex()
    entry: dict[str, Any] = {"seq": seq, "ts": ts, "prev": prev, "record": record, "hash": digest}
    head = b'{"hash":"' + digest.encode("ascii") + b'",'
    if macs is not None:
        entry["w"] = macs.writer
        entry["mac"] = mac = macs.mac(raw)
        head += b'"mac":"' + mac.encode("ascii") + b'",'
    if signer is not None and checkpoint:
        sig = signer.sign(CHECKPOINT_PREFIX + bytes.fromhex(digest))
        entry["ckpt"] = {"kid": signer.key_id, "sig": base64.b64encode(sig).decode("ascii")}
        head = b'{"ckpt":' + canonical_json(entry["ckpt"]) + b"," + head[1:]
    return entry, head + tail + b"\n"


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view, done = memoryview(data), 0
    while done < len(data):
        # os.pwrite may write less than asked (a file size limit, a full disk): go on or raise.
        done += os.pwrite(fd, view[done:], offset + done)

