"""Per-writer authentication of audit entries (entry format v2, docs/audit-log.md).

A writer with a signing key puts its key id in each entry (``"w"``, inside the hash) and an
HMAC-SHA256 of the entry's hash (``"mac"``, outside it) under a key derived from its private key.
A checkpoint signs the chain as its writer found it, entries others appended included; the MAC
shows which entries a writer made, so verification can name every entry no given writer made.
Checking a MAC needs the writer's secret (its private key): whoever can check can also forge
that writer's entries, as whoever holds the key can sign its checkpoints.
"""
from __future__ import annotations

import hashlib
import hmac
from typing import Any, Container, Iterable, Mapping

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .canonical import canonical_json
from .errors import GuardArgumentTypeError
from .keys import key_id

__all__ = ["MAC_PREFIX", "mac_key", "writer_keys", "entry_mac", "EntryMac", "unvouched"]

MAC_PREFIX = b"qdrant-guard audit entry mac v1\x00"
# Another purpose than the key's signatures: a MAC key leaked from a verifier signs nothing.
_KEY_INFO = b"qdrant-guard audit entry mac key v1"


def mac_key(private_key: Ed25519PrivateKey) -> bytes:
    """The 32-byte MAC key of the writer holding ``private_key`` (HKDF-SHA256 of its seed)."""
    if not isinstance(private_key, Ed25519PrivateKey):
        raise GuardArgumentTypeError(f"mac_key() private_key must be an Ed25519PrivateKey, not "
                                     f"{type(private_key).__name__}")
    seed = private_key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                     serialization.NoEncryption())
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_KEY_INFO).derive(seed)


def writer_keys(private_keys: Iterable[Ed25519PrivateKey]) -> dict[str, bytes]:
    """``{writer id: MAC key}`` for ``verify_audit_file(writer_keys=...)``: the writers' signing keys."""
    return {key_id(sk.public_key()): mac_key(sk) for sk in private_keys}


def entry_mac(key: bytes, digest: bytes) -> str:
    """Hex HMAC-SHA256 of an entry whose hash is ``digest`` (32 bytes; it covers the writer id)."""
    return hmac.digest(key, MAC_PREFIX + digest, "sha256").hex()


class EntryMac:
    """One writer's entry MACs, as the writer appends them: ``entry_mac(key, digest)`` with the
    HMAC's padded key blocks hashed once (RFC 2104), since ``hmac.digest`` re-derives them per call
    and took half of an append's time."""

    def __init__(self, writer: str, key: bytes) -> None:
        block = key.ljust(64, b"\0")  # a 32-byte key: no pre-hash
        self.writer, self.key = writer, key
        self.w_json = canonical_json(writer)
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block) + MAC_PREFIX)
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    def mac(self, digest: bytes) -> str:
        inner = self._inner.copy()
        inner.update(digest)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()


def unvouched(entry: Mapping[str, Any], own: EntryMac, others: Container[str], v2_seen: bool,
              signed_by: Mapping[str, Ed25519PublicKey] | None = None) -> str | None:
    """Why the writer ``own`` must not sign a checkpoint over ``entry``, another's entry it found
    in its log (None: it may). It can check only its own MACs: an entry under the id of a writer
    in ``others`` (whose checkpoints it trusts) passes unchecked, as it holds no key to check it,
    unless ``signed_by`` is given (``AuditLog(sign_every_entry=True)``): then such an entry must
    carry a checkpoint under its own writer id that verifies under ``signed_by[w]``, a public key
    that checks it without being able to make it. ``v2_seen``: an entry in format v2 comes before
    ``entry`` in the log."""
    w = entry.get("w")
    if w is None:
        if signed_by is not None:
            # No writer id, so no writer's signature can vouch for it: under sign_every_entry a v1
            # entry is what anyone who can write the file makes, even in a log with no v2 entry yet
            # (a whole log replaced by v1 lines with recomputed hashes).
            return ("carries no writer id and no signature (format v1), which every entry a writer signs under "
                    "sign_every_entry (audit_sign_every_entry) carries")
        return "carries no writer MAC (format v1) after entries in format v2" if v2_seen else None
    if w == own.writer:
        if hmac.compare_digest(own.mac(bytes.fromhex(entry["hash"])), entry["mac"]):
            return None
        return f"claims this writer's id {own.writer} but its MAC does not verify under this writer's key"
    from .audit_verify import _Bad, _check_ckpt, _show_kid  # audit_verify imports this module

    if w in others:
        if signed_by is None:
            return None
        ck = entry.get("ckpt")
        if not isinstance(ck, dict) or ck.get("kid") != w:
            return (f"names writer {_show_kid(w)} but carries no signature by that writer's key (a checkpoint under "
                    "its id), which every entry of a writer must carry under sign_every_entry (audit_sign_every_entry)")
        try:
            _check_ckpt(entry, {w: signed_by[w]})
        except _Bad:
            return f"names writer {_show_kid(w)} but its signature does not verify under that writer's public key"
        return None
    return (f"names writer {_show_kid(w)}, which is neither this writer ({own.writer}) nor a key whose "
            "checkpoints it trusts (trusted_keys; the policy's receipts.retired_keys and audit_trusted_keys)")
