"""The guard's own signing keys as a policy names them (current, retired, revoked, trusted), for the
commands that check signatures: ``keys pub``, ``receipt verify``, ``audit verify`` and ``calibrate``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import ConfigError, QdrantGuardError
from .names import toml_key


def _signing_public_key(path: str) -> Any:
    """The public key of the guard's ``signing_key``: from ``<path>.pub`` (written beside it by
    ``keys new``) when that exists, so an auditor needs no read access to the private key; if the
    private key is readable too, the two must match."""
    from . import keys

    pub = Path(str(path) + ".pub")
    if not pub.exists():
        return keys.load_private_key(path).public_key()
    pk = keys.load_public_key(pub)
    try:
        own = keys.load_private_key(path).public_key()
    except QdrantGuardError as exc:
        if isinstance(exc.__cause__, OSError):  # unreadable (or absent) to this user: the .pub decides
            return pk
        raise
    if keys.key_id(own) != keys.key_id(pk):
        raise ConfigError(f"{pub} holds {keys.key_id(pk)}, not the public key of {path} ({keys.key_id(own)}); "
                          "rewrite it from the private key or remove it")
    return pk


def _policy_signing_keys(cfg: Any, policy: str) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """The guard's own keys per ``cfg``: (current key id or None, {kid: its public key} (empty
    without signing_key), {kid: public key} of receipts.retired_keys), checked as the guard checks
    them (a retired key that is the current one, revoked, or a boundary's authority key is an error, as
    is an authority key that is the signing_key or listed in trusted_keys, receipt_keys or
    audit_trusted_keys)."""
    from . import keys

    own: dict[str, Any] = {}
    if cfg.signing_key:
        try:
            pk = _signing_public_key(cfg.signing_key)
        except (QdrantGuardError, OSError, ValueError) as exc:
            raise ConfigError(f"--policy: signing_key: {exc}") from None
        own[keys.key_id(pk)] = pk
    own_kid = next(iter(own), None)
    authorities: dict[str, str] = {}
    for name, b in cfg.boundaries.items():
        for spec in b.authority_keys:
            try:
                authorities[keys.key_id(keys.load_public_key(spec))] = name
            except QdrantGuardError as exc:
                raise ConfigError(f"--policy: boundaries.{toml_key(name)}.authority_keys: {exc}") from None
    retired = keys.load_retired_keys(cfg.receipts.retired_keys, current_key_id=own_kid,
                                     revoked=cfg.receipts.revoked_keys, source=cfg.source_path or policy,
                                     authorities=authorities)
    # The guard refuses to start with an authority key in a second role; so does this check of its policy.
    keys.check_authority_roles(cfg, signing_key_id=own_kid, source=cfg.source_path or policy)
    return own_kid, own, retired


def _key_status(kid: str, *, own_kid: str | None, retired: Any, revoked: Any, trusted: Any) -> str:
    """What a key is to the policy: revoked, current (its signing_key), retired (an earlier
    signing key, receipts.retired_keys), trusted (another listed key) or unknown."""
    if kid in revoked:
        return "revoked"
    if kid == own_kid:
        return "current"
    if kid in retired:
        return "retired"
    return "trusted" if kid in trusted else "unknown"
