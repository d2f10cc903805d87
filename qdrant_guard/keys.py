"""Ed25519 key generation, identifiers and loading (fail closed, no algorithm confusion)."""
from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Iterable, Mapping, Union

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .dirmodes import foreign_owner, replacement_refusal
from .group_writers import file_writer, writer_note
from .errors import ConfigError, CredentialError, GuardArgumentTypeError, QdrantGuardError
from .names import toml_key

if TYPE_CHECKING:
    from .policy import GuardConfig

__all__ = [
    "KeyStoreError",
    "KeyAlgorithmError",
    "KEY_PREFIX",
    "generate_keypair",
    "key_id",
    "public_key_bytes",
    "public_key_to_str",
    "public_key_from_str",
    "private_key_to_pem",
    "public_key_to_pem",
    "load_private_key",
    "load_public_key",
    "load_retired_keys",
    "retired_authority_error",
    "check_authority_roles",
]

KEY_PREFIX = "ed25519:"

PathLike = Union[str, "os.PathLike[str]"]


class KeyStoreError(QdrantGuardError):
    """A key file cannot be read or parsed. The message names the path."""


class KeyAlgorithmError(KeyStoreError, CredentialError):
    """A key is not Ed25519 (algorithm confusion is refused, never converted)."""


def generate_keypair() -> tuple[Ed25519PrivateKey, Ed25519PublicKey]:
    """Generate a fresh Ed25519 key pair from the operating system's CSPRNG."""
    sk = Ed25519PrivateKey.generate()
    return sk, sk.public_key()


def _require_public(pk: object, func: str) -> Ed25519PublicKey:
    if isinstance(pk, Ed25519PrivateKey):
        return pk.public_key()
    if not isinstance(pk, Ed25519PublicKey):
        raise GuardArgumentTypeError(
            f"{func}() argument must be an Ed25519PublicKey, not {type(pk).__name__}"
        )
    return pk


def public_key_bytes(public_key: Ed25519PublicKey) -> bytes:
    """Return the raw 32-byte encoding of an Ed25519 public key (a private key gives its public half)."""
    pk = _require_public(public_key, "public_key_bytes")
    return pk.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public_key: Ed25519PublicKey) -> str:
    """Return the key identifier ``"ed25519:" + hex(SHA-256(raw public key)[:16])``.

    Args:
        public_key: an Ed25519 public key (a private key is accepted and means its public half).

    Raises:
        TypeError: ``public_key`` is not an Ed25519 key.
    """
    pk = _require_public(public_key, "key_id")
    raw = pk.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return KEY_PREFIX + hashlib.sha256(raw).digest()[:16].hex()


def public_key_to_str(pk: Ed25519PublicKey) -> str:
    """Return ``"ed25519:" + base64(raw 32 bytes)``, the text form used in policy files."""
    return KEY_PREFIX + base64.b64encode(public_key_bytes(pk)).decode("ascii")


def _shown(text: str) -> str:
    # A string that is not a valid public key may be a pasted private key: name it by its first
    # characters and length, never echo it whole into an error (and so into logs).
    body = text[len(KEY_PREFIX):] if text.startswith(KEY_PREFIX) else text
    head = text[: len(text) - len(body)] + body[:6]
    return f"{head + '...' if len(body) > 6 else text!r} ({len(text)} characters)"


def public_key_from_str(s: str) -> Ed25519PublicKey:
    """Parse the output of :func:`public_key_to_str`.

    Raises:
        TypeError: ``s`` is not a str.
        KeyAlgorithmError: the prefix is not ``ed25519:``.
        KeyStoreError: the base64 body is invalid or not 32 bytes.
    """
    if not isinstance(s, str):
        raise GuardArgumentTypeError(f"public_key_from_str() argument must be str, not {type(s).__name__}")
    text = s.strip()
    if not text.startswith(KEY_PREFIX):
        found = text.split(":", 1)[0] if ":" in text else "no algorithm prefix"
        raise KeyAlgorithmError(
            f"public key string must start with {KEY_PREFIX!r} (found {found!r}); only Ed25519 "
            "keys are accepted"
        )
    try:
        raw = base64.b64decode(text[len(KEY_PREFIX):], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise KeyStoreError(f"public key string {_shown(text)} has invalid base64: {exc}") from None
    if len(raw) != 32:
        hint = (" (64 bytes is the secret key form of other Ed25519 tools: never paste a private key "
                "here; give its public key)" if len(raw) == 64 else "")
        raise KeyStoreError(
            f"public key string {_shown(text)} decodes to {len(raw)} bytes; an Ed25519 key is 32 "
            f"bytes{hint}"
        )
    return Ed25519PublicKey.from_public_bytes(raw)


def private_key_to_pem(sk: Ed25519PrivateKey) -> bytes:
    """Serialize a private key as unencrypted PKCS#8 PEM (write it with mode 0600)."""
    if not isinstance(sk, Ed25519PrivateKey):
        raise GuardArgumentTypeError(
            f"private_key_to_pem() argument must be an Ed25519PrivateKey, not {type(sk).__name__}"
        )
    return sk.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_to_pem(pk: Ed25519PublicKey) -> bytes:
    """Serialize a public key as SubjectPublicKeyInfo PEM."""
    return _require_public(pk, "public_key_to_pem").public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _read_key_file(path: PathLike, func: str, *, private: bool) -> tuple[Path, bytes, os.stat_result]:
    if not isinstance(path, (str, os.PathLike)):
        raise GuardArgumentTypeError(f"{func}() argument must be a path, not {type(path).__name__}")
    text = os.fspath(path)
    if isinstance(text, str) and ("-----BEGIN" in text or "\n" in text):
        # Key content where a path belongs (say, from a secret store): never echo it.
        raise KeyStoreError(
            f"{func}() was given key text ({len(text)} characters), not a path; write the key to a "
            "file (mode 600 for a private key) and give its path"
        )
    p = Path(path)
    try:
        # A named pipe would block the read (and the guard's start) until some writer came; a
        # device or directory is no key either. Checked before opening, and again on the open
        # descriptor (O_NONBLOCK: opening a FIFO put in its place meanwhile returns at once).
        _require_regular(p, os.stat(p))
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            _require_regular(p, st)
            data = fh.read()
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and isinstance(text, str) and looks_like_key_text(text):
            # A PEM body on one line (no -----BEGIN, no newline), pasted where the path belongs.
            raise KeyStoreError(
                f"{func}() was given {len(text)} characters that look like base64 key material, not the path of "
                "an existing key file (not shown); write the key to a file (mode 600 for a private key) and give "
                "its path"
            ) from None
        hint = ""
        if isinstance(exc, FileNotFoundError):
            stem = Path(text[:-len(".pub")]) if not private and text.endswith(".pub") else None
            if private:
                hint = f"; create it with `qdrant-guard keys new --out {p}`, or fix the path"
            elif stem is not None and stem.is_file():
                # A new pair would orphan what the existing private key signed (credentials, receipts).
                hint = (f"; the private key {str(stem)!r} is there: `qdrant-guard keys pub --key {stem}` writes "
                        "this .pub from it (a new pair from `keys new` would not verify what that key signed)")
            else:
                hint = "; `qdrant-guard keys new --out KEY` writes the public key beside the private one, as KEY.pub"
        raise KeyStoreError(f"cannot read key file {str(p)!r}: {exc.strerror or exc}{hint}") from exc
    return p, data, st


def _refuse_replaceable(p: Path, what: str, other_fix: str) -> None:
    """Refuse a key file any user, or a directory's other owner, could put another file in place
    of (:mod:`dirmodes`): its own mode, checked by the caller, does not stop that."""
    try:
        why = replacement_refusal(p, what, "key")
    except OSError as exc:  # a directory on its path cannot be examined: not taken for safe
        raise KeyStoreError(f"{what} {str(p)!r}: {exc.strerror}") from exc
    if why is not None:
        raise KeyStoreError(why + other_fix)


def _refuse_other_writers(p: Path, st: os.stat_result, what: str, stake: str, other_fix: str) -> None:
    """Refuse a key file that every user, or a group or ACL entry someone else may be in, lets
    write (:func:`group_writers.file_writer`): whoever can write it ``stake``. A group-writable
    file in a user-private group passes."""
    try:
        writer = file_writer(p, st)
    except OSError as exc:  # an ACL it cannot read: not taken for none
        raise KeyStoreError(f"{what} {str(p)!r}: {exc.strerror}{other_fix}") from exc
    if writer is not None:
        raise KeyStoreError(
            f"{what} {str(p)!r} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}{writer.note}): "
            f"whoever can write it {stake}; run `{writer.fix}` and retry{other_fix}")


def _refuse_foreign_owner(p: Path, st: os.stat_result, what: str, other_fix: str) -> None:
    """Refuse a key file another non-root user owns: its mode does not stop its owner, who may
    change the mode and write a key of their own (OpenSSH's StrictModes refuses it too)."""
    uid = foreign_owner(st)
    if uid is not None:
        raise KeyStoreError(
            f"{what} {str(p)!r} is owned by uid {uid}, neither this process's uid ({os.geteuid()}) nor root (mode "
            f"{stat.S_IMODE(st.st_mode):o}): its owner can change its mode and write a key of their own into it; "
            f"run `chown {os.geteuid()} {p}` (as root) and retry{other_fix}")


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def _require_regular(p: Path, st: os.stat_result) -> None:
    if stat.S_ISREG(st.st_mode):
        return
    kind = next((name for test, name in _FILE_KINDS if test(st.st_mode)), "not a regular file")
    fix = (f"give the path of a key file in it (e.g. {str(p / 'guard.key')!r}), not the directory"
           if stat.S_ISDIR(st.st_mode) else
           "write the key to a regular file (mode 600 for a private key) and give its path; a key from a "
           "pipe or process substitution is not read, since the read could wait forever for a writer")
    raise KeyStoreError(f"key file {str(p)!r} is {kind}, not a regular file; {fix}")


def _looks_like_key_body(text: str) -> bool:
    """Whether ``text`` reads as base64 key material rather than a path: 40 or more characters of
    the base64 alphabets with upper case, lower case and a digit, and no dot or space (an Ed25519
    PKCS#8 body is 64 characters; a path without a dot this long and this mixed is rare, and one
    only loses its echo)."""
    return (len(text) >= 40 and "." not in text and all(c.isascii() and (c.isalnum() or c in "+/=_-") for c in text)
            and any(c.isupper() for c in text) and any(c.islower() for c in text) and any(c.isdigit() for c in text))


_PASTE_EDGES = " \t\r\f\v'\""


def looks_like_key_text(text: str) -> bool:
    """Whether ``text``, given where a key file's path belongs, is key material rather than a path:
    PEM armour, a newline, or base64 key material (:func:`_looks_like_key_body`) whole or after
    a ``/`` (a policy joins its directory to a relative path, and base64 holds ``/`` itself), with
    any spaces or quotes around it. Messages name such text by its length only: it may be a private
    key."""
    if "-----BEGIN" in text or "\n" in text:
        return True
    # A body copied with a space, a "\r" (a Windows file) or the quotes of an env file around it
    # is still a body.
    return any(_looks_like_key_body(text[i + 1:].strip(_PASTE_EDGES)) for i in range(-1, len(text))
               if i < 0 or text[i] == "/")


def _holds_public_key(data: bytes) -> bool:
    text = data.strip()
    return text.startswith(KEY_PREFIX.encode()) or b"-----BEGIN PUBLIC KEY-----" in text


def _holds_private_key(data: bytes) -> bool:
    return b"PRIVATE KEY-----" in data


def _algorithm_name(key: object) -> str:
    return type(key).__name__.lstrip("_").replace("PrivateKey", "").replace("PublicKey", "") or "unknown"


def load_private_key(path: PathLike, *, allow_group_readable: bool = False) -> Ed25519PrivateKey:
    """Load an unencrypted PKCS#8 PEM Ed25519 private key.

    Args:
        path: the key file.
        allow_group_readable: accept a file its group may read (other users neither read nor
            write; its group may write, with or without this, only when nobody but this uid and
            root can be in it).

    Raises:
        KeyStoreError: the file is unreadable, readable by other users (``chmod 600 FILE``),
            writable by every user or by a group (or named ACL entry) that someone other than this
            uid and root may be in (``chmod g-w FILE``, ``setfacl -x``), owned by a uid that is
            neither this process's nor root (``chown``), below a directory anyone may write
            without the sticky bit (``chmod o-w DIR``), that another uid owns, or that a group or
            ACL entry lets others write (``chmod g-w DIR``, ``setfacl -x``;
            :mod:`qdrant_guard.group_writers`), or not a PEM private key.
        KeyAlgorithmError: the key is valid but not Ed25519 (e.g. RSA or EC).
    """
    p, data, st = _read_key_file(path, "load_private_key", private=True)
    if _holds_public_key(data):
        # Checked before the file mode: a .pub is meant to be readable, and "chmod 600" would not help.
        stem = p.with_suffix("") if p.suffix == ".pub" else None
        raise KeyStoreError(
            f"key file {str(p)!r} holds a public key, but a private key is needed here; give the private "
            f"key file{f' ({str(stem)!r})' if stem else ''}, the --out file of `qdrant-guard keys new`"
        )
    # Reading stays as the mode says, the group only when asked for, whatever the group: only
    # writing is accepted from a user-private group (below), as for the key's directory.
    forbidden = stat.S_IROTH | stat.S_IWOTH
    if not allow_group_readable:
        forbidden |= stat.S_IRGRP
    if os.name == "posix" and st.st_mode & forbidden:
        raise KeyStoreError(
            f"private key file {str(p)!r} is accessible by other users (mode "
            f"{stat.S_IMODE(st.st_mode):o}{writer_note(p, st)}); run `chmod 600 {p}` and retry"
        )
    _refuse_other_writers(p, st, "private key file", "chooses the key the guard signs with", "")
    _refuse_foreign_owner(p, st, "private key file", "")
    _refuse_replaceable(p, "private key file", "")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyStoreError(
            f"key file {str(p)!r} is not an unencrypted PEM (PKCS#8) private key: {exc}; give the file "
            "`qdrant-guard keys new --out FILE` wrote (it starts -----BEGIN PRIVATE KEY-----); a DER or "
            f"passphrase-encrypted PKCS#8 key converts with `openssl pkey -in {p} -out NEW.key` (add -inform DER "
            "for DER), then `chmod 600 NEW.key`"
        ) from exc
    except Exception as exc:  # cryptography raises UnsupportedAlgorithm for exotic keys
        raise KeyStoreError(f"key file {str(p)!r} cannot be loaded: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyAlgorithmError(
            f"key file {str(p)!r} holds a {_algorithm_name(key)} private key; qdrant_guard signs "
            "only with Ed25519 (generate one with `qdrant-guard keys new --out FILE`)"
        )
    return key


def load_public_key(path_or_str: Union[PathLike, Ed25519PublicKey]) -> Ed25519PublicKey:
    """Load a public key from an ``"ed25519:<base64>"`` string or a PEM file.

    Args:
        path_or_str: ``"ed25519:..."`` text, a path to a SubjectPublicKeyInfo PEM file (or a file
            holding the ``ed25519:`` text), or an Ed25519PublicKey (returned unchanged).

    Raises:
        KeyStoreError: the file is unreadable, writable by every user or by a group (or named
            ACL entry) that someone other than this uid and root may be in (``chmod go-w FILE``,
            ``setfacl -x``), owned by a uid that is neither this process's nor root (``chown``) or
            below a directory anyone may write without the sticky bit (``chmod o-w DIR``), that
            another uid owns, or that a group or ACL entry lets others write (``chmod g-w DIR``,
            ``setfacl -x``), or not a public key.
        KeyAlgorithmError: the key is not Ed25519.
    """
    if isinstance(path_or_str, Ed25519PublicKey):
        return path_or_str
    if isinstance(path_or_str, str) and path_or_str.strip().startswith(KEY_PREFIX):
        return public_key_from_str(path_or_str)
    p, data, st = _read_key_file(path_or_str, "load_public_key", private=False)
    if _holds_private_key(data):
        # Never load (or echo) a private key where a public one belongs: point at the .pub instead.
        raise KeyStoreError(
            f"key file {str(p)!r} holds a private key, but a public key is needed here; give its public "
            f"key file ({str(p) + '.pub'!r}, written beside it by `qdrant-guard keys new`) or its "
            "'ed25519:...' text"
        )
    # Every public key the guard loads is one it trusts (a boundary's authority, a receipt signer,
    # an audit checkpoint key): whoever can write the file chooses whom, as for the private key.
    _refuse_other_writers(p, st, "public key file", (
        "chooses the key trusted here (an authority key issues its boundary's credentials, a receipt or audit "
        "key signs what the guard accepts)"), ", or give the key as its 'ed25519:...' text")
    _refuse_foreign_owner(p, st, "public key file", ", or give the key as its 'ed25519:...' text")
    _refuse_replaceable(p, "public key file", ", or give the key as its 'ed25519:...' text")
    text = data.strip()
    if text.startswith(KEY_PREFIX.encode()):
        return public_key_from_str(text.decode("ascii", "replace"))
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise KeyStoreError(
            f"key file {str(p)!r} is not a PEM public key: {exc}; give the .pub `qdrant-guard keys new` wrote "
            "beside the private key (its 'ed25519:...' text), `qdrant-guard keys pub --key PRIVATE` writes "
            "it again, or a SubjectPublicKeyInfo PEM (-----BEGIN PUBLIC KEY-----)") from exc
    except Exception as exc:
        raise KeyStoreError(f"key file {str(p)!r} cannot be loaded: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise KeyAlgorithmError(
            f"key file {str(p)!r} holds a {_algorithm_name(key)} public key; only Ed25519 is accepted"
        )
    return key



def retired_authority_error(kid: str, boundary: str, source: str) -> ConfigError:
    """The error for a key that is both in ``receipts.retired_keys`` and a boundary's authority key."""
    return ConfigError(
        f"{source}: receipts.retired_keys lists key {kid}, which is in boundaries.{toml_key(boundary)}.authority_keys: a "
        "retired key is an earlier signing key of the guard, trusted for every collection's receipts (receipt_keys "
        "or not), utility records and audit checkpoints, so whoever issues that boundary's credentials would sign "
        f"them all. Remove it from receipts.retired_keys; if the guard once signed with it, give boundary "
        f"{boundary!r} a key of its own (`qdrant-guard keys new`) and list the old one's .pub in retired_keys then")


def load_retired_keys(specs: Iterable[str], *, current_key_id: str | None, revoked: Collection[str],
                      source: str, authorities: Mapping[str, str] | None = None) -> dict[str, Ed25519PublicKey]:
    """Load a policy's ``receipts.retired_keys``: the guard's earlier signing keys, trusted for
    verification only wherever its current key is (key id -> public key; a key listed twice is
    one entry).

    Args:
        specs: ``ed25519:<base64>`` texts or public key files (paths already resolved).
        current_key_id: key id of the guard's current ``signing_key`` (None: not known here).
        revoked: ``receipts.revoked_keys``.
        source: the policy file, named in errors.
        authorities: key id -> boundary of every ``boundaries.*.authority_keys`` key (None: not
            checked here; the guard checks them when it loads the boundaries).

    Raises:
        ConfigError: a key cannot be loaded, is the current signing key (it signs, so it is not
            retired), is revoked (revocation wins, so listing it would promise trust the guard
            does not give), or is a boundary's authority key (a credential issuer is no earlier
            signing key of the guard).
    """
    out: dict[str, Ed25519PublicKey] = {}
    for spec in specs:
        try:
            pk = load_public_key(spec)
        except QdrantGuardError as exc:
            raise ConfigError(f"{source}: receipts.retired_keys: {exc}") from None
        kid = key_id(pk)
        if kid == current_key_id:
            raise ConfigError(
                f"{source}: receipts.retired_keys lists {spec!r} (key id {kid}), which is the guard's current "
                "signing_key: a retired key is an earlier signing key, trusted for verification only. Remove it "
                "from receipts.retired_keys; to rotate, make a new key (`qdrant-guard keys new --out FILE`), "
                "set signing_key to it and list the old key's .pub in receipts.retired_keys")
        if kid in revoked:
            raise ConfigError(
                f"{source}: receipts.retired_keys lists {spec!r} (key id {kid}), which receipts.revoked_keys "
                "revokes: revocation wins, so the receipts, utility records and audit checkpoints it signed "
                "stay refused. Remove it from receipts.retired_keys (keep it revoked); re-noise and rewrite "
                "the vectors it receipted under the current signing_key, re-run `qdrant-guard calibrate` for "
                "its utility records, and check the audit log with `qdrant-guard audit verify`")
        if authorities is not None and kid in authorities:
            raise retired_authority_error(kid, authorities[kid], source)
        out[kid] = pk
    return out


# What a key in each verifying role lets its holder do: an authority key there would let whoever
# issues a boundary's credentials also do it.
_ROLE_POWER = {
    "signing_key": "the guard signs every receipt, utility record and audit checkpoint with it (and the guard's "
                   "host, which holds its private half, could issue that boundary's credentials)",
    "receipts.trusted_keys": "receipts it signs are accepted on every collection that sets no receipt_keys",
    "receipt_keys": "receipts it signs are accepted on that collection",
    "audit_trusted_keys": "audit checkpoints it signs are accepted as the guard's",
}


def check_authority_roles(cfg: "GuardConfig", *, signing_key_id: str | None, source: str) -> None:
    """Refuse a policy in which a boundary's credential authority key has a second role: the
    guard's ``signing_key`` (compared by public key), or a key listed in ``receipts.trusted_keys``,
    any ``receipt_keys`` (``[default]`` or a collection) or ``audit_trusted_keys``. A key in
    ``receipts.retired_keys`` is checked by :func:`load_retired_keys`.

    Args:
        cfg: a loaded :class:`~qdrant_guard.policy.GuardConfig` (paths already resolved).
        signing_key_id: key id of the guard's ``signing_key`` (None: no signing_key set).
        source: the policy file, named in errors.

    Raises:
        ConfigError: a key cannot be loaded, or an authority key has another role (the message
            names the key id, both roles and the fix).
    """
    def load(spec: str, where: str) -> str:
        try:
            return key_id(load_public_key(spec))
        except QdrantGuardError as exc:
            raise ConfigError(f"{source}: {where}: {exc}") from None

    authorities: dict[str, str] = {}
    for name, b in cfg.boundaries.items():
        for spec in b.authority_keys:
            authorities.setdefault(load(spec, f"boundaries.{toml_key(name)}.authority_keys"), name)
    if not authorities:
        return
    roles: list[tuple[str, str, str]] = []  # (where, power key, key id)
    if signing_key_id is not None:
        roles.append(("signing_key", "signing_key", signing_key_id))
    roles += [("receipts.trusted_keys", "receipts.trusted_keys", load(s, "receipts.trusted_keys"))
              for s in cfg.receipts.trusted_keys]
    sections = [("default", cfg.default), *((f"collections.{toml_key(n)}", p) for n, p in cfg.collections.items())]
    for section, pol in sections:
        for spec in pol.receipt_keys or ():
            roles.append((f"{section}.receipt_keys", "receipt_keys", load(spec, f"{section}.receipt_keys")))
    roles += [("audit_trusted_keys", "audit_trusted_keys", load(s, "audit_trusted_keys"))
              for s in cfg.audit_trusted_keys]
    for where, power, kid in roles:
        boundary = authorities.get(kid)
        if boundary is None:
            continue
        fix = ("set signing_key to a key of its own (`qdrant-guard keys new --out FILE`); if the guard signed "
               "receipts with this one, re-noise and rewrite those vectors under the new key"
               if where == "signing_key" else
               f"remove it from {where} and list there the .pub of the key that really signs those "
               "(`qdrant-guard keys new` makes one)")
        role = "the guard's signing_key" if where == "signing_key" else f"listed in {where}"
        raise ConfigError(
            f"{source}: key {kid} is both a credential authority (boundaries.{toml_key(boundary)}.authority_keys) and "
            f"{role}: "
            f"{_ROLE_POWER[power]}, so whoever issues the credentials of boundary {boundary!r} would do that too. "
            f"Use separate keys per role: {fix}; or give boundary {boundary!r} a new authority key "
            "(`qdrant-guard keys new`) and reissue its credentials")
