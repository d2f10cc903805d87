"""The whole guard configuration (:class:`GuardConfig`) and its top-level sections: trust boundaries
(``[boundaries.NAME]``) and receipt trust (``[receipts]``).
"""
from __future__ import annotations

import base64
import json
import math
import re
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from .boundary import TOKEN_PREFIX
from .budget import store_kind
from .collection_policy import CollectionPolicy, _IGNORED_ON_PUBLIC
from .errors import ConfigError
from .keys import _looks_like_key_body, key_id as _key_id, public_key_from_str as _public_key_from_str
from .names import toml_key
from .policy_base import SensitivityClass, _Strict


class BoundaryConfig(_Strict):
    """A trust boundary: the Ed25519 authority keys whose credentials prove membership."""

    authority_keys: tuple[str, ...] = Field(min_length=1)
    """Public keys as ``"ed25519:<base64>"`` strings or paths to PEM/str files. A key belongs to one
    boundary only (the same key in two is refused when the client is built), and has no other role:
    the client refuses to start when one is also the guard's ``signing_key`` or is listed in
    ``receipts.trusted_keys``, ``receipts.retired_keys``, any ``receipt_keys`` or
    ``audit_trusted_keys``, since whoever issues the boundary's credentials would then sign what the
    guard verifies. Make each role its own key (``qdrant-guard keys new``)."""
    revoked_credentials: tuple[str, ...] = ()
    """Credential ids (``jti``) that are no longer accepted."""

    @field_validator("revoked_credentials")
    @classmethod
    def _jtis(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        # A credential is revoked by its jti claim; a whole token here would match nothing.
        for i, jti in enumerate(v):
            if _JTI_RE.fullmatch(jti):
                continue
            if jti.startswith(_TOKEN_PREFIX):
                raise ValueError(
                    f"entry {i} is a whole credential token, which revokes nothing; list its credential "
                    f"id instead: {_jti_of(jti)!r}"
                )
            raise ValueError(f"entry {i} = {jti!r} is not a credential id (jti: base64url characters only)")
        return v


class ReceiptTrust(_Strict):
    """Which keys may sign receipts the guard accepts (the guard's own key is always trusted)."""

    trusted_keys: tuple[str, ...] = ()
    """Public keys (``ed25519:<base64>`` or files) of writers whose receipts are accepted, by every
    collection that sets no ``receipt_keys`` of its own (one that sets them accepts those instead).
    For outside writers' keys; the guard's own earlier ``signing_key`` goes in ``retired_keys``. A
    boundary's ``authority_keys`` key may not be listed (the client refuses to start)."""
    retired_keys: tuple[str, ...] = ()
    """The guard's own earlier signing keys (``ed25519:<base64>`` or ``.pub`` files, relative to the
    policy file), e.g. ``retired_keys = ["keys/guard-2026.key.pub"]``. A retired key is trusted
    exactly where the current ``signing_key`` is, for verification only: the receipts it signed, on
    every collection (those that set ``receipt_keys`` included), the utility records it signed, and
    the audit log's checkpoints (as if listed in ``audit_trusted_keys`` too). After rotating
    ``signing_key``, list the old key's ``.pub`` here, once: otherwise the receipts it signed stop
    verifying, and the vectors they certify are stripped from reads outside the owner. The current
    ``signing_key`` may not be listed, nor a key in ``revoked_keys`` (revocation wins: the client
    refuses to start, naming the key, rather than trust a revoked key or appear to), nor a
    boundary's ``authority_keys`` key (its credential issuer would sign for every collection); a key listed
    twice, or also in ``trusted_keys``, ``receipt_keys`` or ``audit_trusted_keys``, is harmless.
    Whoever holds a retired key's private half can still sign receipts, utility records and
    checkpoints the guard accepts: destroy it after the rotation, and revoke a key that may be
    compromised (``revoked_keys``) rather than retire it.
    ``qdrant-guard receipt verify --policy`` and ``qdrant-guard audit verify --policy`` report what
    such a key signed as ``retired``. Each key is loaded when the client is built."""
    revoked_keys: tuple[str, ...] = ()
    """Key ids (``ed25519:<hex>``) whose receipts, credentials, utility records and audit
    checkpoints are rejected. The guard's own ``signing_key`` may not be listed (the client refuses
    to start: rotate it), nor a key of ``retired_keys`` or ``audit_trusted_keys`` (remove it there)."""
    max_age_s: float | None = Field(default=None, gt=0)
    """Refuse a write whose receipts were issued longer ago than this (None: no limit). Checked when
    a write presents receipts; reads release stored vectors whatever their receipts' age."""
    max_clock_skew_s: float | None = Field(default=300.0, ge=0)
    """Refuse a write whose receipts were issued more than this many seconds after the guard's clock
    (``not_yet_valid``), whether or not ``max_age_s`` is set: a receipt dated ahead never ages out,
    and shows a signer whose clock is wrong or lies. 300 s (the tolerance utility records' dates
    get too) leaves room for a writer host whose clock runs ahead between synchronisations (a quartz
    clock left alone drifts by seconds a day), while a receipt accepted within it gains at most 300 s
    of freshness under ``max_age_s``; 0 allows no skew at all. Only a GuardConfig built in Python can turn the
    check off (``max_clock_skew_s=None``; TOML has no null), and then, under ``max_age_s``, a receipt
    dated ahead counts as fresh until that date. ``qdrant-guard receipt verify --policy`` applies it
    too; reads release stored vectors whatever their receipts' dates."""

    @field_validator("revoked_keys")
    @classmethod
    def _key_ids(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        # Revocation matches key ids exactly; anything else (a public key string, a path) would
        # revoke nothing while looking like it does.
        for k in v:
            if _KEY_ID_RE.fullmatch(k):
                continue
            try:
                hint = f"; that is a public key: list its key id {_key_id(_public_key_from_str(k))!r}"
            except Exception:
                hint = " (`qdrant-guard keys new` prints a key's key_id)"
            raise ValueError(f"{_mask_tokens(k)!r} is not a key id 'ed25519:<32 lowercase hex digits>', so it would revoke "
                             f"nothing{hint}")
        return v


_KEY_ID_RE = re.compile(r"ed25519:[0-9a-f]{32}")
_JTI_RE = re.compile(r"[A-Za-z0-9_-]+")
_TOKEN_PREFIX = TOKEN_PREFIX + "."


def _jti_of(token: str) -> str:
    """The jti claim of a credential token (unverified: only to name it in an error)."""
    try:
        body = token.split(".")[1]
        return str(json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))["jti"])
    except Exception:
        return "<the token's jti claim>"


# A URL-like value (a budget_store with its scheme mistyped: "REDIS://", "redis:/") may carry a
# password before an "@" or in its query string (redis-py reads ?password=); "//" catches a lost ":".
_URLISH = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_USERINFO = re.compile(r"[^/@\s]+@")


def _mask_tokens(value: Any) -> Any:
    """``value`` with credential tokens, private key material and URL credentials (secrets)
    masked, for error messages."""
    if isinstance(value, str) and (_URLISH.match(value) or "//" in value) and ("@" in value or "?" in value):
        return _USERINFO.sub("<credentials>@", value.split("?", 1)[0]) + ("?<query not shown>" if "?" in value else "")
    if isinstance(value, str) and value.startswith(_TOKEN_PREFIX):
        return _TOKEN_PREFIX + "<credential>"
    if isinstance(value, str) and ("PRIVATE KEY" in value or _looks_like_key_body(value.strip())):
        # A private key pasted where a key id, a path or a public key belongs: never echo it.
        return f"<key material, {len(value)} characters, not shown>"
    if isinstance(value, (list, tuple)):
        return [_mask_tokens(x) for x in value]
    if isinstance(value, dict):
        return {k: _mask_tokens(x) for k, x in value.items()}
    return value


DEFAULT_CEILINGS: dict[str, float] = {"PII": 2.0, "CREDENTIAL": 1.0, "PROPRIETARY": 8.0}
_MISSING_SOURCE = "__unknown__"  # the budget's name for points without a source (budgetops.apply_budget)


def _check_budget_writers(where: str, pol: CollectionPolicy) -> None:
    # The coverage cap is a share of a source's size, so a boundary that reads under the budget
    # and may write could raise its own cap with junk points. With restricted_sources only the owner
    # writes those (refused otherwise); with a budget on every source nothing can keep it out, nor
    # on "__unknown__" (points without a source), which any write without the source field joins.
    restricted = pol.diversity.restricted_sources
    if pol.diversity.max_source_coverage is None or (restricted and _MISSING_SOURCE not in restricted):
        return
    writers = {b for b in pol.writers or () if b != pol.owner}
    readers = {b for b in pol.readers if b != pol.owner}
    both = sorted(writers & readers) or sorted(
        (writers if "*" in readers else set()) | (readers if "*" in writers else set()))
    if both:
        if restricted:
            covers, how, fix = (f"{_MISSING_SOURCE!r} (points without a source)", "without a source",
                                f"take {_MISSING_SOURCE!r} out of {where}.diversity.restricted_sources, or ")
        else:
            covers, how, fix = ("every source", "tagged with a source",
                                f"list the confidential sources in {where}.diversity.restricted_sources "
                                "(only the owner boundary may write those), or ")
        raise ValueError(
            f"{where}: boundary {both[0]!r} may both read and write, and the extraction budget "
            f"(diversity.max_source_coverage) covers {covers}, so it could raise its own cap by "
            f"writing points {how}; {fix}"
            f"remove {both[0]!r} from {where}.writers"
        )


class GuardConfig(_Strict):
    """The whole guard configuration (one policy file)."""

    signing_key: str | None = None
    """Path of the guard's Ed25519 private key (PEM), made by ``qdrant-guard keys new``. It signs the
    receipts of the vectors the guard noises and the audit log's checkpoints, and keys the keyed
    noise and the audit entries' writer MACs (``qdrant-guard audit verify --writer-key`` checks
    them with this file). Unset (None): a fresh key for each process, fit for ``":memory:"`` only: after a restart
    the receipts it signed no longer verify, so the vectors it noised are stripped (``vector=None``)
    from reads outside the owner boundary, and the same vector gets other noise. A client on a store
    that outlives the process (``path=``, a server) warns of it (``UserWarning``) when the policy has a
    sensitive collection. It may not be a boundary's ``authority_keys`` key (compared by public key:
    the client refuses to start), or the guard's host could issue that boundary's credentials and
    the credential issuer could sign receipts, utility records and checkpoints."""
    audit_log: str | None = None
    """Path of the hash-chained JSONL audit log, created (mode 600) if missing; its directory must
    exist. Every entry is also logged at INFO to the ``qdrant_guard.audit`` logger. Unset (None):
    that logger only, and no file for ``qdrant-guard audit verify``."""
    audit_fsync: bool = False
    """fsync the audit log after every entry (slower; survives power loss, not only crashes).
    ``true`` needs ``audit_log``: without a file there is nothing to fsync."""
    audit_allow_shared_file: bool = False
    """Accept an ``audit_log`` file that others can write: world-writable, writable by a group (or
    ACL entry) that someone other than the guard's uid and root may be in (a user-private group is
    not), owned by another uid, or below a directory that anyone (or a group or ACL entry others
    are in) may write without the sticky bit, or that another uid owns. Refused by default (the
    guard does not start; the message names the mode, the group or ACL entry, and ``chmod 600
    FILE``, ``chmod g-w FILE`` or ``setfacl -x``): whoever can append to the
    file can forge entries that the next signed checkpoint signs. Set ``true`` only where another
    uid must write the log and is trusted as much as the guard. The check does not stop a process
    running as the guard's own uid (docs/audit-log.md). ``qdrant-guard audit repair`` runs the same
    check, and this setting in the policy given to its ``--trust-policy`` opts out there too. Needs
    ``audit_log``."""
    audit_trusted_keys: tuple[str, ...] = ()
    """Public keys (``ed25519:<base64>`` or files) of earlier signing keys of this audit log. On
    start the guard checks the log back to its most recent signed checkpoint, which must verify
    under ``signing_key`` or one of these; one under any other key (after rotating
    ``signing_key``, the old key's) refuses to start, since nothing could check it. The keys of
    ``receipts.retired_keys`` are trusted here too: after a rotation, list the old key's ``.pub``
    there (it then covers receipts and utility records as well), or here for the log alone (a key
    in ``receipts.revoked_keys`` may not be, nor a boundary's ``authority_keys`` key). Needs
    ``audit_log``: without a file nothing is checked. ``qdrant-guard audit verify --policy`` and
    ``qdrant-guard audit repair`` / ``audit replay`` with ``--trust-policy`` trust these keys,
    ``signing_key``'s public key and ``receipts.retired_keys`` for the log's checkpoints."""
    audit_sign_every_entry: bool = False
    """Sign every audit entry this guard writes (an Ed25519 checkpoint, ``ckpt``, on each, not only
    every 1000th) and refuse to append after an entry under the writer id of another guard whose key
    it trusts (``audit_trusted_keys``, ``receipts.retired_keys``) unless that entry carries a
    signature by that key which verifies (``AuditUnauthenticatedError``, nothing written). For guards
    that share one ``audit_log`` file: without it, such an entry is followed unchecked (the guard
    holds no key for the other guard's MACs) and its next checkpoint signs it, so whoever can write
    the file can forge entries under the other guard's id. Every guard writing the log must set it
    (a guard without it writes unsigned entries, which are then refused), and a log that already
    holds another guard's unsigned entries, or entries in format v1 (no writer id: written before format
    v2, by a guard without ``signing_key``, or by anyone who rewrote the file), after its most
    recent checkpoint is refused on start: begin a new ``audit_log`` file when turning it on. Cost:
    a signature per entry and a signature check per other guard's entry read (measured at load 6 on
    2 cores: a lone writer's append 48 to 152 us, two guards appending in turn 126 to 638 us per
    append). ``qdrant-guard audit verify --key`` then checks every entry's signature, and with
    ``--every-entry-signed`` (implied by ``--policy`` with this policy) names each entry without its
    writer's; ``qdrant-guard audit repair --trust-policy`` with this policy refuses to sign over
    such an entry as the guard does. Needs ``audit_log`` and ``signing_key`` (docs/audit-log.md)."""
    audit_signed_from: int | None = None
    """The seq from which guards with ``signing_key`` wrote ``audit_log``: ``1`` for a log such a
    guard began, otherwise the ``signed from: seq S`` that ``qdrant-guard audit verify`` with a key
    prints on a run you trust (the log's first entry with a writer id). It never changes, so it can
    be kept once. Unset (default), a signing guard that opens a log whose entries in format v1 (no
    writer id, no MAC) no checkpoint covers takes them for a log begun without a signing key, logs
    an ``audit_unsigned_entries_adopted`` alert, and its next checkpoint signs them: the file alone
    cannot tell that from one rewritten by someone who could write it (hashes recomputed). Set, the
    guard refuses to start (and, before an append, to go on) on a v1 entry at or after this seq
    among the entries it reads on open (back to the most recent checkpoint, at most 1000) and those
    others appended, on one from this seq on without the checkpoint due every 1000th entry, and on
    the entry at this seq, wherever it is, unless it carries a checkpoint that verifies or is the
    guard's own (its MAC verifies), as ``audit verify --signed-from`` requires
    (``AuditUnauthenticatedError``, the ``audit_unauthenticated_entry`` alert), and
    on a log that ends before it (entries cut, or the file emptied: ``AuditIntegrityError``, an
    ``audit_signed_entries_missing`` alert), nothing written. ``audit repair`` cannot cut such
    entries: keep a copy and move the log aside, then set ``1``. ``qdrant-guard audit verify --policy``,
    ``audit repair --trust-policy`` and ``audit replay --trust-policy`` take it as ``--signed-from``.
    Needs ``audit_log`` and ``signing_key`` (docs/audit-log.md, "A log with nothing signed")."""
    unlisted: Literal["strict", "public", "refuse"] = "strict"
    """Collections not listed: ``strict`` = PII with the ``default`` policy (readable by any verified
    principal, vectors never returned raw; created and written by no one unless ``[default]`` sets
    ``owner`` or ``writers``, and then noised); ``public`` = pass-through; ``refuse`` (a call that
    reads, writes, creates or deletes one raises ``ConfigError``, audited as ``REFUSED_CROSS_BOUNDARY``;
    ``collection_exists`` and ``get_collections`` still answer, and ``get_collection`` answers the
    configuration without counts, payload index schema or metadata, unless ``names_visible =
    "accessible"`` hides them)."""
    names_visible: Literal["all", "accessible"] = "all"
    """Which collection and alias names a principal is told of. ``all`` (qdrant-client's answers):
    ``get_collections``, ``get_aliases``, ``get_collection_aliases`` and ``collection_exists``
    answer every name, and ``get_collection`` every collection's configuration. ``accessible``: only
    the names the principal may read, write or own under the policy (PUBLIC collections, and
    unlisted ones under ``unlisted = "public"``, for everyone; unlisted ones under ``"strict"`` as
    ``[default]`` allows, which by default is any verified principal and no client without a
    valid credential; unlisted ones under ``"refuse"`` to no one). The lists leave the other names out (an alias when either its own name or its
    collection's is hidden), ``collection_exists`` answers ``False``, ``get_collection`` and ``get_collection_aliases``
    answer as for a collection that does not exist, without asking Qdrant, and
    ``update_collection_aliases`` answers deleting or renaming an alias of a hidden name (whether
    or not one exists: decided without asking Qdrant) or of a hidden collection as for an alias that
    does not exist (the deletion is left out of the call; the rename is sent as that of an alias no
    one made, after the call's earlier actions, so the call fails where a missing alias's would);
    each such answer is audited (``REFUSED_CROSS_BOUNDARY``, ``details.names_visible``).
    Every other call on a hidden name keeps its refusal, decided from the policy alone before
    Qdrant is asked (docs/threat-model.md, *What any principal learns about a collection*)."""
    epsilon_ceiling: dict[SensitivityClass, float] = Field(
        default_factory=lambda: {SensitivityClass(k): v for k, v in DEFAULT_CEILINGS.items()})
    """Largest epsilon accepted per class (defaults: PII 2.0, CREDENTIAL 1.0, PROPRIETARY 8.0), for
    the policy's ``noise.epsilon`` and for the receipts of writers that noise their own vectors.
    Each a finite number > 0; a class left out keeps its default (PUBLIC has none: it is not noised)."""
    boundaries: dict[str, BoundaryConfig] = Field(default_factory=dict)
    """Trust boundaries and their authority keys."""
    receipts: ReceiptTrust = ReceiptTrust()
    """Which receipt signers are trusted or revoked."""
    budget_store: str = "memory"
    """``memory``, ``sqlite:///path.db`` or ``redis://host:port/db`` for the extraction budget (a
    relative sqlite path is relative to the policy file). ``memory`` is one store per Qdrant store
    for the life of the process, shared by every guarded client on it (a ``":memory:"`` client has
    its own); it holds about the keys (principal x collection x source) admitted within the last
    window, as each admission sweeps away a few keys whose every id has left it; it is not shared
    across processes, which need SQLite or Redis. A SQLite file likewise holds about the rows of the
    last window (each admission deletes a few rows older than the longest window used on the file,
    which the file records); Redis keys expire by TTL. A SQLite file and its side files must be the guard's
    uid's (or root's) and writable by no one else, and its directory neither writable by others
    nor another uid's (else the client does not start: whoever can write the file resets budgets;
    docs/diversity-budget.md); a missing file is created mode 600. A Redis server must refuse
    writes from clients that send no credentials (see ``budget_store_allow_unauthenticated``); put
    the password in the URL: ``redis://user:password@host:6379/0`` (messages never show it)."""
    budget_store_allow_unauthenticated: bool = False
    """Use a Redis ``budget_store`` that lets clients without credentials write its keys. Refused by
    default: before its first command the store asks the server (each node of a cluster), once,
    whether a connection without the URL's username and password may write a key under its prefix
    or empty, swap or replace the database (``FLUSHALL``, ``SWAPDB``, ``REPLICAOF``, ``CONFIG SET``,
    ``ACL SETUSER``: key patterns do not limit them), and if so every budgeted read
    fails closed (results withheld, the audit names the fix): anyone who reaches the server could
    delete what each principal was given and read past the caps again. Set ``true`` only where
    nothing but the guard can reach the server (a unix socket only its uid may open, a network only
    it is on); otherwise give Redis a password (``requirepass``, or an ACL user and ``ACL SETUSER
    default off``) and put it in the URL. Needs a ``redis://``, ``rediss://`` or ``unix://``
    ``budget_store``. Plain ``redis://`` sends the password in the clear either way: use
    ``rediss://`` where others can read the network between the guard and Redis."""
    default: CollectionPolicy = CollectionPolicy(readers=("*",))
    """The policy of unlisted collections when ``unlisted = "strict"`` (refused under the other
    values, which would ignore it)."""
    collections: dict[str, CollectionPolicy] = Field(default_factory=dict)
    """Per-collection policies, keyed by collection name."""
    source_path: str | None = Field(default=None, exclude=True)

    @field_validator("budget_store")
    @classmethod
    def _store_spec(cls, v: str) -> str:
        # The store is built at the first budgeted read; a typo must fail here, not there.
        if store_kind(v) is not None:
            return v
        raise ValueError(f"{_mask_tokens(v)!r} is not 'memory', 'sqlite:///path.db' or 'redis://host:port/db' "
                         "(also rediss:// and unix://)")

    @field_validator("boundaries")
    @classmethod
    def _boundary_names(cls, v: dict[str, "BoundaryConfig"]) -> dict[str, "BoundaryConfig"]:
        # A principal's boundary may not be empty, and "*" in readers/writers means any principal:
        # a boundary of either name could never be told apart from those meanings.
        for name in v:
            if name in ("", "*"):
                raise ValueError(f"a boundary may not be named {name!r} ("
                                 + ("a principal's boundary is never empty" if not name else
                                    "\"*\" in readers and writers means any verified principal")
                                 + "); rename the [boundaries] section")
        return v

    @field_validator("default", mode="before")
    @classmethod
    def _default_readers(cls, v: Any) -> Any:
        # A [default] section replaces the whole default policy; keep its documented readers = ["*"]
        # unless the section sets readers itself.
        if isinstance(v, dict) and "readers" not in v:
            return {**v, "readers": ("*",)}
        return v

    @field_validator("epsilon_ceiling", mode="before")
    @classmethod
    def _ceilings_numbers(cls, v: Any) -> Any:
        # The per-field type check does not reach a table's values: pydantic's lax mode read
        # PII = "2" as 2.0, and inf passed as "no ceiling" to the receipts of other writers.
        if isinstance(v, dict):
            for k, val in v.items():
                if isinstance(val, (bool, str)) or not isinstance(val, (int, float)) or not math.isfinite(val):
                    raise ValueError(f"ceiling for {k} must be a finite number > 0, got {val!r} "
                                     f"({type(val).__name__}); e.g. {k} = {DEFAULT_CEILINGS.get(str(k), 2.0)}")
        return v

    @field_validator("epsilon_ceiling")
    @classmethod
    def _ceilings_positive(cls, v: dict[SensitivityClass, float]) -> dict[SensitivityClass, float]:
        merged = {SensitivityClass(k): val for k, val in DEFAULT_CEILINGS.items()}
        for k, val in v.items():
            if k is SensitivityClass.PUBLIC:
                raise ValueError(f"PUBLIC collections are passed through, never noised, so a PUBLIC ceiling ({val!r}) "
                                 "would be ignored; remove it (classes with a ceiling: PII, CREDENTIAL, PROPRIETARY)")
            if not val > 0:
                raise ValueError(f"ceiling for {k.value} must be > 0, got {val!r}")
            merged[k] = val
        return merged

    @model_serializer(mode="wrap")
    def _dump_without_ignored_default(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Every model holds a default, but _default_applies refuses a [default] outside "strict":
        # a dump leaves the ignored one out, so that it loads again.
        out = handler(self)
        if self.unlisted != "strict" and isinstance(out, dict):
            out.pop("default", None)
        return out

    @model_validator(mode="after")
    def _store_opt_out_applies(self) -> "GuardConfig":
        if self.budget_store_allow_unauthenticated and store_kind(self.budget_store) != "redis":
            raise ValueError("budget_store_allow_unauthenticated = true accepts a Redis budget store that clients "
                             f"without credentials may write, and budget_store is {_mask_tokens(self.budget_store)!r}, "
                             "not a redis://, rediss:// or unix:// URL, so it would be ignored; remove "
                             "budget_store_allow_unauthenticated")
        return self

    @field_validator("audit_signed_from")
    @classmethod
    def _signed_from_is_a_seq(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"must be a seq of the audit log (1 or more), got {v}: 1 for a log a guard with "
                             "signing_key began, otherwise the seq `qdrant-guard audit verify FILE --key GUARD.pub` "
                             "prints as `signed from: seq S`; or remove audit_signed_from")
        return v

    @model_validator(mode="after")
    def _audit_keys_that_apply(self) -> "GuardConfig":
        # Both act on the audit log file; without one, entries go to `logging` only.
        if self.audit_log is None:
            if self.audit_fsync:
                raise ValueError("audit_fsync = true fsyncs the audit log file after every entry, and audit_log is "
                                 "not set (entries go to the qdrant_guard.audit logger only), so it would be "
                                 "ignored; set audit_log = \"PATH\" to the log file, or remove audit_fsync")
            if self.audit_allow_shared_file:
                raise ValueError("audit_allow_shared_file = true accepts an audit log file others can write, and "
                                 "audit_log is not set (entries go to the qdrant_guard.audit logger only), so it "
                                 "would be ignored; set audit_log = \"PATH\" to the log file, or remove "
                                 "audit_allow_shared_file")
            if self.audit_trusted_keys:
                raise ValueError("audit_trusted_keys lists earlier signing keys of the audit log file, and "
                                 "audit_log is not set (no file is checked on start), so they would be ignored; set "
                                 "audit_log = \"PATH\" to the log file, or remove audit_trusted_keys")
            if self.audit_sign_every_entry:
                raise ValueError("audit_sign_every_entry = true signs every entry of the audit log file and checks "
                                 "other guards' signatures in it, and audit_log is not set (entries go to the "
                                 "qdrant_guard.audit logger only), so it would be ignored; set audit_log = \"PATH\" "
                                 "to the log file, or remove audit_sign_every_entry")
            if self.audit_signed_from is not None:
                raise ValueError(f"audit_signed_from = {self.audit_signed_from} says where signing began in the audit "
                                 "log file, and audit_log is not set (entries go to the qdrant_guard.audit logger "
                                 "only), so it would be ignored; set audit_log = \"PATH\" to the log file, or remove "
                                 "audit_signed_from")
        elif self.audit_signed_from is not None and self.signing_key is None:
            raise ValueError(f"audit_signed_from = {self.audit_signed_from} refuses unsigned audit entries from that "
                             "seq on, and signing_key is not set, so this guard's own entries would be unsigned; set "
                             "signing_key = \"PATH\" (the key of the guard that signed the log), or remove "
                             "audit_signed_from")
        elif self.audit_sign_every_entry and self.signing_key is None:
            raise ValueError("audit_sign_every_entry = true signs every audit entry with the guard's signing_key, and "
                             "signing_key is not set (the process's fresh key signs nothing anyone can check later); "
                             "set signing_key = \"PATH\" (qdrant-guard keys new --out PATH), or remove "
                             "audit_sign_every_entry")
        return self

    @model_validator(mode="after")
    def _default_applies(self) -> "GuardConfig":
        # policy_for reads [default] only under "strict": otherwise the section promised a policy
        # for unlisted collections that none of them would get.
        if "default" in self.model_fields_set and self.unlisted != "strict":
            raise ValueError(
                f"the [default] section is the policy of unlisted collections under unlisted = \"strict\", but "
                f"unlisted = {self.unlisted!r}, so it would be ignored; remove [default], or set "
                "unlisted = \"strict\" (or list the collections it was meant for)"
            )
        return self

    @model_validator(mode="after")
    def _noise_under_ceiling(self) -> "GuardConfig":
        items = [("default", self.default)] + [(f"collections.{toml_key(n)}", p) for n, p in self.collections.items()]
        for where, pol in items:
            if pol.is_public:
                ignored = sorted(k for k in pol.model_fields_set & _IGNORED_ON_PUBLIC
                                 if not (where == "default" and k == "readers" and pol.readers == ("*",)))
                if ignored:
                    raise ValueError(
                        f"{where} is PUBLIC (pass-through: anyone, even without a credential, reads and "
                        f"writes it; no noise, query, intent or budget checks), so its {', '.join(ignored)} "
                        f"would be ignored; remove {'them' if len(ignored) > 1 else 'it'}, or give it class "
                        "PII, CREDENTIAL or PROPRIETARY"
                    )
                continue
            if pol.diversity.max_vectors is not None and pol.sensitivity is not SensitivityClass.PROPRIETARY:
                raise ValueError(
                    f"{where}.diversity.max_vectors is the PROPRIETARY distillation budget, but {where} is "
                    f"{pol.sensitivity.value}, so it would be ignored; remove it or give the collection "
                    "class PROPRIETARY"
                )
            ceiling = self.epsilon_ceiling[pol.sensitivity]
            if pol.noise.epsilon > ceiling:
                raise ValueError(
                    f"{where}.noise.epsilon = {pol.noise.epsilon} is above the "
                    f"{pol.sensitivity.value} ceiling {ceiling}; allowed: 0 < epsilon <= {ceiling}, or raise the "
                    f"ceiling of every {pol.sensitivity.value} collection with {pol.sensitivity.value} = "
                    f"{pol.noise.epsilon} in the policy's [epsilon_ceiling] section (weaker noise: docs/privacy.md)"
                )
            _check_budget_writers(where, pol)
            named = [("owner", pol.owner), *(("readers", r) for r in pol.readers),
                     *(("writers", w) for w in (pol.writers or ()))]
            for key, b in named:
                if b and _TOKEN_PREFIX in b:
                    # Never shown: it would land in logs and tracebacks wherever the policy loads.
                    raise ValueError(
                        f"{where}.{key} holds a credential token (it contains '{_TOKEN_PREFIX}'): a policy names "
                        "boundaries here, such as \"hr\"; the token belongs in Principal(agent_id, boundary, "
                        "token), and one pasted into a policy file is leaked: revoke it (its credential id "
                        "under revoked_credentials in its boundary's section) and issue a new one"
                    )
                if b and b != "*" and self.boundaries and b not in self.boundaries:
                    raise ValueError(
                        f"{where}.{key} names boundary {b!r}, which has no [boundaries.{toml_key(b)}] section; "
                        f"known boundaries: {sorted(self.boundaries)}{_boundary_hint(b, self.boundaries)}"
                    )
        return self

    def policy_for(self, collection: str) -> CollectionPolicy:
        """The policy of ``collection`` (the ``default`` for unlisted ones when strict).

        Raises:
            ConfigError: when the collection is unlisted and ``unlisted = "refuse"``.
        """
        pol = self.collections.get(collection)
        if pol is not None:
            return pol
        if self.unlisted == "public":
            return _PUBLIC
        if self.unlisted == "refuse":
            err = ConfigError(
                f"collection {collection!r} is not listed in the policy"
                f"{' ' + self.source_path if self.source_path else ''} and unlisted = \"refuse\"; "
                f"add a [collections.{toml_key(collection)}] section"
            )
            err.unlisted = collection  # type: ignore[attr-defined]  # the pipeline audits the refusal
            raise err
        return self.default

    @classmethod
    def transparent(cls) -> "GuardConfig":
        """A config under which every collection is PUBLIC: the guard changes nothing."""
        return cls(unlisted="public")


# unlisted = "public" promises pass-through: its payloads are not screened (it has no text field).
_PUBLIC = CollectionPolicy.model_validate({"class": SensitivityClass.PUBLIC, "payload_fields": "text_field"})


def _boundary_hint(name: str, boundaries: dict[str, Any]) -> str:
    """The fix for a collection naming a boundary the policy lacks: the one it probably means, or
    the section to add (a typo such as 'suport' or 'HR' is the likely cause)."""
    import difflib

    folded = [b for b in boundaries if b.casefold() == name.casefold()]
    close = folded or difflib.get_close_matches(name, list(boundaries), n=1, cutoff=0.75)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; fix the name, or add a [boundaries.{toml_key(name)}] section listing its authority's .pub"
