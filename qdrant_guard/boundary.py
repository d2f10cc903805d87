"""Principals and signed trust-boundary credentials.

A credential is a compact token ``qgc1.<claims>.<sig>`` where ``<claims>`` is the unpadded
base64url of the canonical JSON claims and ``<sig>`` the unpadded base64url Ed25519 signature of
``b"qdrant-guard credential v1\\0" + canonical claims``. It is issued by the authority key of one
boundary and only that boundary's keys can vouch for it.
"""
from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Collection, Iterable, Mapping, Sequence, Union

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .canonical import canonical_json, decode_canonical
from .errors import ConfigError, CredentialError, GuardArgumentTypeError, GuardArgumentValueError
from .keys import key_id as _key_id
from .names import shell_quote, shown, toml_key, unprintable_char

__all__ = [
    "TOKEN_PREFIX",
    "CREDENTIAL_SIGNATURE_PREFIX",
    "CREDENTIAL_REASONS",
    "Principal",
    "VerifiedPrincipal",
    "CredentialRejected",
    "issue_credential",
    "verify_credential",
]

TOKEN_PREFIX = "qgc1"
CREDENTIAL_SIGNATURE_PREFIX = b"qdrant-guard credential v1\x00"
CREDENTIAL_REASONS = (
    "malformed", "non_canonical", "unknown_boundary", "unknown_key", "revoked", "expired",
    "not_yet_valid", "bad_signature", "algorithm",
)
_ALG = "Ed25519"
_JTI = re.compile(r"[A-Za-z0-9_-]+")
_CLAIMS = {"v": int, "agent_id": str, "boundary": str, "iat": int, "exp": int, "kid": str,
           "alg": str, "jti": str}


class CredentialRejected(CredentialError):
    """A credential failed verification.

    Attributes:
        reason: one of :data:`CREDENTIAL_REASONS`.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"credential rejected ({reason}): {message}")
        self.reason = reason


# A credential file's path given where its token belongs (the library takes tokens; the CLI reads files).
PATH_IS_NOT_A_TOKEN = ("pass the token the file holds, not its path: Path(file).read_text().strip() "
                       "(`qdrant-guard credential issue ... > file` wrote it)")


@dataclass(frozen=True)
class Principal:
    """Who is calling: an agent inside a trust boundary, optionally with its credential token.

    ``Principal("agent-7", "support", token)``, ``token`` as ``qdrant-guard credential issue``
    prints it. The guard trusts the boundary only once the credential verifies against that
    boundary's ``authority_keys``; without a credential the principal is unverified, and reaches
    PUBLIC collections only (and collections the policy does not list, under
    ``unlisted = "public"``, which pass through unchecked). ``repr()`` never shows the token.

    Raises:
        GuardArgumentTypeError: (a TypeError) a field has the wrong type.
        ConfigError: (a ValueError) ``agent_id`` or ``boundary`` is empty, or holds a credential
            token (which would be shown and logged as a name).
    """

    agent_id: str
    boundary: str
    credential: str | None = None

    def __post_init__(self) -> None:
        for name in ("agent_id", "boundary"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise GuardArgumentTypeError(f"Principal.{name} must be str, not {type(value).__name__}")
            if not value:
                raise ConfigError(f"Principal.{name} must not be empty")
            if TOKEN_PREFIX + "." in value:
                # Principal("agent-7", token) puts the token in the boundary slot, where it would be
                # shown in messages and written to the audit log as the principal's name; so does
                # a token copied with what preceded it ("Bearer qgc1...", a BOM read from a file).
                raise ConfigError(
                    f"Principal.{name} holds a credential token (it contains '{TOKEN_PREFIX}.'); the token is "
                    "the third argument: Principal(agent_id, boundary, token), e.g. Principal(\"agent-7\", "
                    "\"support\", token)")
        if self.credential is not None and not isinstance(self.credential, str):
            # bytes: a token read from its file in binary mode, or subprocess output.
            hint = ": decode it (token.decode().strip())" if isinstance(self.credential, bytes) else (
                f": {PATH_IS_NOT_A_TOKEN}" if isinstance(self.credential, os.PathLike) else "")
            raise GuardArgumentTypeError(
                f"Principal.credential must be str or None, not {type(self.credential).__name__}{hint}"
            )

    def __repr__(self) -> str:
        # Never print the bearer token.
        cred = "None" if self.credential is None else "'<credential>'"
        return f"Principal(agent_id={self.agent_id!r}, boundary={self.boundary!r}, credential={cred})"


@dataclass(frozen=True)
class VerifiedPrincipal:
    """The claims of a credential that passed :func:`verify_credential`."""

    agent_id: str
    boundary: str
    expires_at: int
    key_id: str
    jti: str


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64url(raw) != text:
        raise ValueError("not canonical unpadded base64url")
    return raw


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GuardArgumentTypeError(f"{name} must be a finite number, not {value!r}")
    return float(value)


def issue_credential(
    authority_key: Ed25519PrivateKey,
    *,
    agent_id: str,
    boundary: str,
    ttl_s: float = 3600,
    now: float | None = None,
) -> str:
    """Issue a credential for ``agent_id`` in ``boundary``, signed by the boundary's authority key.

    Args:
        authority_key: the boundary authority's Ed25519 private key.
        agent_id: the agent the credential names.
        boundary: the trust boundary it admits the agent to.
        ttl_s: lifetime in seconds (> 0).
        now: issue time in seconds (default: now); ``iat``/``exp`` are whole seconds.

    Returns:
        The token ``"qgc1.<b64url claims>.<b64url signature>"``.

    Raises:
        TypeError: a wrong argument type.
        ValueError: empty ids, an id with a character ``str.isprintable`` refuses (a control
            character, U+2028, a bidirectional override; :func:`verify_credential` rejects such a
            claim as ``malformed``), or a non-positive ``ttl_s``.
    """
    if not isinstance(authority_key, Ed25519PrivateKey):
        raise GuardArgumentTypeError(
            "issue_credential() authority_key must be an Ed25519PrivateKey, not "
            f"{type(authority_key).__name__}"
        )
    Principal(agent_id, boundary)  # same validation as a principal
    for what, name in (("agent_id", agent_id), ("boundary", boundary)):
        problem = unprintable_name(name, what)
        if problem is not None:
            raise GuardArgumentValueError(f"issue_credential() {problem}")
    ttl = _number(ttl_s, "ttl_s")
    if ttl <= 0:
        raise GuardArgumentValueError(f"issue_credential() ttl_s must be positive, got {ttl_s!r}")
    iat = int(math.floor(time.time() if now is None else _number(now, "now")))
    claims = {
        "v": 1,
        "agent_id": agent_id,
        "boundary": boundary,
        "iat": iat,
        "exp": iat + max(1, int(math.ceil(ttl))),
        "kid": _key_id(authority_key.public_key()),
        "alg": _ALG,
        "jti": _b64url(os.urandom(16)),
    }
    body = canonical_json(claims)
    sig = authority_key.sign(CREDENTIAL_SIGNATURE_PREFIX + body)
    return f"{TOKEN_PREFIX}.{_b64url(body)}.{_b64url(sig)}"


AuthorityKeys = Union[Ed25519PublicKey, Sequence[Ed25519PublicKey]]


def _holds_kid(authorities: Any, boundary: str, kid: str) -> bool:
    """Whether ``boundary`` lists the authority key ``kid`` (False for a malformed entry: this only
    words an error about another boundary)."""
    try:
        return any(_key_id(k) == kid for k in _keys_of(authorities, boundary))
    except TypeError:
        return False


def _keys_of(authorities: Any, boundary: str) -> list[Ed25519PublicKey]:
    keys = authorities[boundary]
    if isinstance(keys, Ed25519PublicKey):
        keys = [keys]
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise GuardArgumentTypeError(f"authorities[{boundary!r}] must be a sequence of Ed25519PublicKey")
    out = list(keys)
    for k in out:
        if not isinstance(k, Ed25519PublicKey):
            raise GuardArgumentTypeError(
                f"authorities[{boundary!r}] holds a {type(k).__name__}; only Ed25519PublicKey is accepted"
            )
    return out


def unprintable_name(name: str, what: str) -> str | None:
    """Why ``name``, a credential's ``what`` (agent_id or boundary), cannot be one, or None.

    A credential's names are printed in messages, audit labels, policy sections and the commands
    that re-issue it: a newline, carriage return, escape sequence or bidirectional override there
    splits, overwrites, recolours or reorders the line a reader trusts.
    """
    bad = unprintable_char(name)
    if bad is None:
        return None
    return (f"{what} {name!r} holds the unprintable character {bad}; a credential's agent id and boundary are "
            "shown in messages, audit logs and policy sections, where such a character breaks, overwrites or "
            "reorders the line; use a name of printable characters (letters, digits, punctuation, spaces)")


def _utc(ts: int) -> str:
    """A claim's time as UTC ISO 8601 for a message (the raw number when it is out of range)."""
    try:
        return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return str(ts)


def _issue_command(agent_id: str, boundary: str) -> str:
    """The ``credential issue`` command for a message, its names quoted for a POSIX shell (an
    agent id or boundary may hold spaces, quotes or ``;``, which the copied command would split
    or run, or a newline or escape sequence, which would break the message's line), with the
    ``--authority`` the command requires (pasted without it, argparse refused it) as a placeholder
    that :func:`_authority_placeholder` explains: the verifier holds public keys only."""
    return (f"qdrant-guard credential issue --authority AUTHORITY_KEY --agent {shell_quote(agent_id)} "
            f"--boundary {shell_quote(boundary)}")


_PASS_IT_WHOLE = ("; the token was cut short or altered: pass it whole, exactly as `qdrant-guard credential issue` "
                  "printed it")


def _authority_placeholder(boundary: str) -> str:
    return f"AUTHORITY_KEY: the private key file whose .pub [boundaries.{toml_key(boundary)}] authority_keys lists"


def reissue_hint(agent_id: str, boundary: str) -> str:
    """The command that issues ``agent_id`` a new credential of ``boundary``, in backticks, and
    what its placeholder stands for: the fix a rejected or expired credential's message names."""
    return f"`{_issue_command(agent_id, boundary)}` ({_authority_placeholder(boundary)})"


def _cut_or_altered(agent_id: str, boundary: str) -> str:
    # A signature that fails is most often a token cut short or edited in copying.
    return f"{_PASS_IT_WHOLE}, or issue a new one with {reissue_hint(agent_id, boundary)}"


def verify_credential(
    token: str,
    *,
    authorities: Mapping[str, AuthorityKeys],
    revoked_keys: Collection[str] = (),
    revoked_credentials: Collection[str] = (),
    now: float | None = None,
    leeway_s: float = 30,
) -> VerifiedPrincipal:
    """Verify a credential token and return its claims.

    Args:
        token: the ``qgc1.`` token.
        authorities: boundary name -> the public keys allowed to issue credentials for it.
        revoked_keys: revoked authority key ids.
        revoked_credentials: revoked credential ids (``jti``).
        now: current time in seconds (default: now).
        leeway_s: clock-skew tolerance for ``iat``/``exp``.

    Returns:
        :class:`VerifiedPrincipal`.

    Raises:
        TypeError: an argument has the wrong type.
        CredentialRejected: (a :class:`CredentialError`) with ``reason`` one of
            :data:`CREDENTIAL_REASONS` (``malformed`` too for an agent id or boundary holding a
            character ``str.isprintable`` refuses, which :func:`issue_credential` no longer issues).
    """
    if not isinstance(token, str):
        raise GuardArgumentTypeError(f"verify_credential() token must be str, not {type(token).__name__}")
    if not isinstance(authorities, Mapping):
        raise GuardArgumentTypeError(
            "verify_credential() authorities must be a mapping of boundary name to Ed25519 public keys, not "
            f"{type(authorities).__name__}"
        )
    for label, coll in (("revoked_keys", revoked_keys), ("revoked_credentials", revoked_credentials)):
        if isinstance(coll, (str, bytes)) or not isinstance(coll, Iterable):
            raise GuardArgumentTypeError(f"{label} must be a collection of str, not {type(coll).__name__}")
    current = time.time() if now is None else _number(now, "now")
    leeway = _number(leeway_s, "leeway_s")

    if token != token.strip():
        raise CredentialRejected(
            "malformed", "token has leading or trailing whitespace (a newline read from a file?); strip it")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        raise CredentialRejected(
            "malformed", f"token must be '{TOKEN_PREFIX}.<claims>.<signature>', the text `qdrant-guard credential "
            "issue` printed (from a file, pass its contents: open(path).read().strip(), not the path)")
    try:
        body = _unb64url(parts[1])
    except (binascii.Error, ValueError) as exc:
        raise CredentialRejected("malformed", f"claims are not base64url: {exc}{_PASS_IT_WHOLE}") from None
    try:
        claims = decode_canonical(body)
    except ValueError as exc:
        try:
            json.loads(body)
        except (ValueError, RecursionError):
            raise CredentialRejected("malformed", f"claims are not JSON{_PASS_IT_WHOLE}") from None
        raise CredentialRejected("non_canonical", str(exc)) from None
    if not isinstance(claims, dict):
        raise CredentialRejected("malformed", f"claims are not a JSON object{_PASS_IT_WHOLE}")
    if claims.get("alg") != _ALG:
        raise CredentialRejected("algorithm", f"alg is {claims.get('alg')!r}; only {_ALG!r} is accepted")
    if set(claims) != set(_CLAIMS):
        raise CredentialRejected("malformed", f"claims must be exactly {sorted(_CLAIMS)}")
    for name, typ in _CLAIMS.items():
        if isinstance(claims[name], bool) or not isinstance(claims[name], typ):
            raise CredentialRejected("malformed", f"claim {name!r} must be {typ.__name__}")
    if claims["v"] != 1:
        raise CredentialRejected("malformed", f"credential version {claims['v']} is not supported")
    for name in ("agent_id", "boundary"):
        if not claims[name]:
            raise CredentialRejected("malformed", f"claim {name!r} is empty")
        problem = unprintable_name(claims[name], name)
        if problem is not None:
            # Issued before issue_credential refused such names, or by another issuer.
            raise CredentialRejected("malformed", f"claim {problem}")
    if not _JTI.fullmatch(claims["jti"]):
        # boundaries.*.revoked_credentials accepts only base64url ids: any other jti could
        # never be revoked.
        raise CredentialRejected("malformed", "claim 'jti' must be a non-empty base64url id")
    if claims["exp"] <= claims["iat"]:
        raise CredentialRejected("malformed", "exp is not after iat")
    boundary = claims["boundary"]
    if boundary not in authorities:
        raise CredentialRejected(
            "unknown_boundary", f"no authority is configured for boundary {boundary!r} (the policy's boundaries: "
            f"{sorted(authorities)}); issue the credential for one of those (`credential issue --boundary`), or "
            f"add a [boundaries.{toml_key(boundary)}] section listing its authority's .pub")
    kid = claims["kid"]
    if kid in set(revoked_keys):
        raise CredentialRejected("revoked", f"authority key {kid} is revoked")
    pk = next((k for k in _keys_of(authorities, boundary) if _key_id(k) == kid), None)
    if pk is None:
        # The claims are not verified yet: the other boundary is named only to explain the mix-up.
        other = [b for b in authorities if b != boundary and _holds_kid(authorities, b, kid)]
        mixed = f" (it is an authority of {sorted(other)[0]!r})" if other else ""
        raise CredentialRejected(
            "unknown_key", f"key {shown(kid)} is not an authority of boundary {boundary!r}{mixed}; issue the credential "
            f"with the private key whose .pub [boundaries.{toml_key(boundary)}] authority_keys lists"
        )
    cut = _cut_or_altered(claims["agent_id"], boundary)
    try:
        sig = _unb64url(parts[2])
    except (binascii.Error, ValueError):
        raise CredentialRejected("bad_signature", f"signature is not canonical base64url{cut}") from None
    if len(sig) != 64:
        raise CredentialRejected("bad_signature", f"signature has {len(sig)} bytes; Ed25519 has 64{cut}")
    try:
        pk.verify(sig, CREDENTIAL_SIGNATURE_PREFIX + body)
    except InvalidSignature:
        raise CredentialRejected("bad_signature", f"Ed25519 signature does not verify{cut}") from None
    if claims["jti"] in set(revoked_credentials):
        raise CredentialRejected(
            "revoked", f"credential {claims['jti']} of {shown(claims['agent_id'])}@{shown(boundary)} is revoked (listed in "
            f"[boundaries.{toml_key(boundary)}] revoked_credentials); issue a new one with "
            f"{reissue_hint(claims['agent_id'], boundary)}")
    # The claims are unbounded JSON ints: compare them with floats, never add floats to them
    # (int + float overflows beyond 1e308).
    if current - leeway > claims["exp"]:
        raise CredentialRejected(
            "expired", f"credential of {shown(claims['agent_id'])}@{shown(boundary)} expired at {_utc(claims['exp'])} "
            f"(exp {claims['exp']}); issue a new one with {reissue_hint(claims['agent_id'], boundary)}; --ttl sets "
            "its lifetime")
    if current + leeway < claims["iat"]:
        raise CredentialRejected(
            "not_yet_valid", f"credential is valid from {_utc(claims['iat'])} (iat {claims['iat']}), later "
            "than this host's clock: the issuing host's clock is ahead of this one; check both clocks")
    return VerifiedPrincipal(claims["agent_id"], boundary, claims["exp"], kid, claims["jti"])
