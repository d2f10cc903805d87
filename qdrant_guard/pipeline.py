"""The one guard pipeline: every guarded call of both facades is decided here.

Each guarded operation is a generator (sans-IO): it yields :class:`Call` requests for the
unguarded qdrant-client methods it needs (collection info, reads it must do, and finally the
call itself) and receives their results. The sync facade drives it with plain calls, the async
facade with ``await``; the logic exists once, so the two clients cannot drift apart.

Order for every call: policy -> checks -> decision -> audit -> (only then) Qdrant.

:class:`GuardPipeline` here holds the set-up (policy, keys, credential, audit log) and the
decision and audit of a call; the checks every operation draws on are in
:mod:`qdrant_guard.callchecks`, the entry point ``run`` and the collection-level calls in
:mod:`qdrant_guard.dispatch`.

What the guards of a process share per store is in :mod:`qdrant_guard.perstore`, names as they
are sent in :mod:`qdrant_guard.sentnames`, what answers withhold from non-readers in
:mod:`qdrant_guard.withheld` and qdrant-client's not-found errors in :mod:`qdrant_guard.notfound`;
their public names are importable from here too.
"""
from __future__ import annotations

import copy
import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Generator, Self

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from qdrant_client.async_qdrant_remote import AsyncQdrantRemote
from qdrant_client.qdrant_remote import QdrantRemote

from . import keys as _keys
from . import warnsite
from .canonical import canonical_json
from .audit import AuditLog
from .boundary import PATH_IS_NOT_A_TOKEN, Principal, VerifiedPrincipal, verify_credential
from .budget import store_kind
from .budget_file_access import unsafe_store_file
from .decision import Decision, Verdict
from .errors import AuditError, ConfigError, CredentialError, GuardArgumentTypeError, QdrantGuardError, UntaggedSourceWarning
from .policy import CollectionPolicy, GuardConfig, load_policy
from .names import shell_quote, shown, toml_key
from .notfound import (
    missing_alias_error as missing_alias_error,
    missing_collection_error as missing_collection_error,
)
from .perstore import (
    SOURCE_SIZE_TTL_S as SOURCE_SIZE_TTL_S,
    SourceSizeEpoch as SourceSizeEpoch,
    _SizesOf,
    memory_budget_store_for as memory_budget_store_for,
    size_epoch_for as size_epoch_for,
    store_identity as store_identity,
)
from .receipts import ReceiptSigner
from .sentnames import (
    plain_names as plain_names,
    sent_name as sent_name,
)
from .vectors import CollectionShape
from .withheld import (
    ADMIN_COUNTED as ADMIN_COUNTED,
    DESCRIBE_COUNTED as DESCRIBE_COUNTED,
    DESCRIBE_KEPT as DESCRIBE_KEPT,
    OPTIMIZER_ERROR_WITHHELD as OPTIMIZER_ERROR_WITHHELD,
    admin_answer_for as admin_answer_for,
    describe_collection as describe_collection,
    describe_hidden as describe_hidden,
    sizes_withheld as sizes_withheld,
    telemetry_for as telemetry_for,
    without_operation_ids as without_operation_ids,
)


log = logging.getLogger("qdrant_guard")

Embedder = Callable[[list[str]], Any]


@dataclass(frozen=True)
class Call:
    """A request, yielded by an operation, to run one unguarded qdrant-client method."""

    method: str
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Offload:
    """A request, yielded by an operation, to run slow blocking work (a classifier, an embedder).

    The sync driver runs it inline; the async driver runs it in a worker thread so the event loop
    is never stalled.
    """

    fn: Callable[[], Any]


@dataclass(frozen=True)
class Warn:
    """A request, yielded by an operation before it sends a write, to show ``text`` as an
    :class:`UntaggedSourceWarning` at the caller's line. The driver shows it in the caller's
    thread and frames (an async client's steps run in worker threads, where a warning would name a
    line of threading.py); raised there (``-W error``), the exception is thrown in at the request,
    so the write is not sent."""

    text: str


def show(request: Warn) -> None:
    """Show a :class:`Warn` request's warning from the driver's frame (its caller: the facade)."""
    warnsite.warn(request.text, UntaggedSourceWarning)


Op = Generator["Call | Offload | Warn", Any, Any]


def mark_audited(exc: BaseException) -> BaseException:
    """Mark ``exc`` as already audited, so the write path's catch-all does not audit it again."""
    exc._qg_audited = True  # type: ignore[attr-defined]
    return exc


def missing_key_files(cfg: GuardConfig) -> ConfigError | None:
    """One error naming every key file the policy lists that does not exist (``signing_key`` and
    the public keys), when there are several: loading stops at the first, so a policy copied from
    docs/policy.example.toml took a run per missing file to set up. It also names a missing
    ``audit_log`` directory, the next start's error. None when no key file is missing, or one is
    and the directory exists (its load names it)."""
    specs = [("receipts.trusted_keys", k) for k in cfg.receipts.trusted_keys]
    specs += [("receipts.retired_keys", k) for k in cfg.receipts.retired_keys]
    specs += [("audit_trusted_keys", k) for k in cfg.audit_trusted_keys]
    specs += [(f"boundaries.{toml_key(n)}.authority_keys", k)
              for n, b in cfg.boundaries.items() for k in b.authority_keys]
    sections = [("default", cfg.default), *((f"collections.{toml_key(n)}", p) for n, p in cfg.collections.items())]
    specs += [(f"{where}.receipt_keys", k) for where, pol in sections for k in (pol.receipt_keys or ())]
    missing: dict[str, list[str]] = {}
    signing = cfg.signing_key
    if signing is not None and not _keys.looks_like_key_text(signing) and not os.path.lexists(signing):
        missing[signing] = ["signing_key"]
    for where, spec in specs:
        # Key text (a private key pasted in) is left to its load, which refuses it unechoed.
        if not spec.strip().startswith(_keys.KEY_PREFIX) and not _keys.looks_like_key_text(spec) \
                and not os.path.lexists(spec):
            missing.setdefault(spec, []).append(where)
    log_dir = os.path.dirname(cfg.audit_log) if cfg.audit_log else ""
    no_log_dir = (f"\nalso, audit_log's directory {log_dir} does not exist (the guard creates the file, not the "
                  f"directory): `mkdir -p {shell_quote(log_dir)}`") if log_dir and not os.path.isdir(log_dir) else ""
    # One missing key file alone is left to its load's error, unless the directory is missing too:
    # that took a second start.
    if len(missing) < 2 and not (missing and no_log_dir):
        return None
    lines = []
    for path, wheres in missing.items():
        private = path if path == signing else path[:-len(".pub")] if path.endswith(".pub") else None
        if path != signing and private == signing and signing in missing:
            # A second `keys new --out` of the signing key would refuse to overwrite the first's.
            lines.append(f"  {path} ({', '.join(wheres)}): written beside {signing} by its command above")
            continue
        if private and private != signing and os.path.exists(private):
            make = f"qdrant-guard keys pub --key {shell_quote(private)}"
        elif private:
            make = f"qdrant-guard keys new --out {shell_quote(private)}"
        else:
            make = "qdrant-guard keys new --out KEY, then name KEY.pub here"
        lines.append(f"  {path} ({', '.join(wheres)}): `{make}`")
    files = "1 key file the policy names does not exist" if len(missing) == 1 else \
        f"{len(missing)} key files the policy names do not exist"
    return ConfigError(
        f"{cfg.source_path or '<config>'}: {files}:\n"
        + "\n".join(lines)
        + "\nmake each with the command shown (where the key's holder keeps the private key elsewhere, copy its "
        ".pub here instead), or remove the entry from the policy" + no_log_dir)


class GuardPipeline:
    """Decides every guarded call for one client.

    Args:
        config: a :class:`GuardConfig`, a path to a TOML policy, or None (transparent: the client
            behaves exactly like qdrant-client).
        principal: who is calling: a :class:`Principal` with a credential, a credential token
            string, or None (anonymous: may use PUBLIC collections only).
        embedder: callable ``list[str] -> array (n, d)`` used to embed ``models.Document`` texts
            after redaction. The model it names (its optional ``model_id`` attribute, a str, else a
            ``model_name``, on it or on the object whose bound method it is) is signed into the
            receipts of the vectors it embedded, and a Document written or queried for a vector whose policy
            declares another model (``utility.embedding_model(s)``) is refused (ConfigError,
            audited first: a query's as QUERY_REJECTED, a write's as UNSUPPORTED_WRITE, reason
            ``model_mismatch``) before it is embedded; an embedder that names no model is not checked.

    Raises:
        TypeError: ``embedder`` is not callable, or its ``model_id`` is not a str.
    """

    #: In a view running one ``batch_update_points`` call, a one-item list holding the index of
    #: the operation being checked (None once all are): what :meth:`record` writes as ``operation``.
    _operation_at: list[int | None] | None = None

    def __init__(
        self,
        config: GuardConfig | str | Any | None = None,
        principal: Principal | str | None = None,
        *,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if config is None:
            cfg = GuardConfig.transparent()
            self.transparent = True
        elif isinstance(config, GuardConfig):
            cfg = config
            self.transparent = False
        elif isinstance(config, (str, bytes)) or hasattr(config, "__fspath__"):
            cfg = load_policy(config)
            self.transparent = False
        else:
            hint = ("; a dict is read by qdrant_guard.policy.config_from_dict(...), whose GuardConfig guard= "
                    "takes" if isinstance(config, dict) else "")
            raise GuardArgumentTypeError(
                f"guard= must be a GuardConfig, a path to a TOML policy, or None, not {type(config).__name__}{hint}"
            )
        self.config = cfg
        if embedder is not None:
            if not callable(embedder):
                raise GuardArgumentTypeError(
                    f"embedder= must be a callable list[str] -> array (n, d), not {type(embedder).__name__}")
            model_id = getattr(embedder, "model_id", None)
            if model_id is not None and not isinstance(model_id, str):
                # Receipts record it; a wrong type would fail every noised write, unaudited.
                raise GuardArgumentTypeError(f"embedder.model_id must be a str or None (receipts record it), not "
                                             f"{type(model_id).__name__}")
        self.embedder = embedder
        self.clock = clock
        self._shapes: dict[str, CollectionShape] = {}
        self._warned_untagged: set[str] = set()  # collections told that points without a source count as one
        self._warn_lock = threading.Lock()  # the client's threads and views share the set
        self._shape_read_at: dict[str, float] = {}  # time.monotonic() of each layout's get_collection
        missing = missing_key_files(cfg)
        if missing is not None:
            raise missing
        self._signing_key = self._load_signing_key(cfg)
        self.signer = ReceiptSigner(self._signing_key)
        raw = self._signing_key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        # The keyed-noise PRF key is derived from, never equal to, the signing key.
        self.noise_key = hashlib.sha256(b"qdrant-guard noise key v1\0" + raw).digest()
        self.trusted_receipt_keys: dict[str, Ed25519PublicKey] = {
            _keys.key_id(self._signing_key.public_key()): self._signing_key.public_key()
        }
        for spec in cfg.receipts.trusted_keys:
            pk = self._load_public(spec, where="receipts.trusted_keys")
            self.trusted_receipt_keys[_keys.key_id(pk)] = pk
        self.revoked_keys = frozenset(cfg.receipts.revoked_keys)
        own_kid = _keys.key_id(self._signing_key.public_key())
        # The guard's earlier signing keys: trusted wherever its current key is (each scope below,
        # the audit log), so one knob covers a rotation that used to need every list edited.
        self.retired_keys = _keys.load_retired_keys(cfg.receipts.retired_keys, current_key_id=own_kid,
                                                    revoked=self.revoked_keys, source=cfg.source_path or "<config>")
        self.trusted_receipt_keys.update(self.retired_keys)
        # receipt_keys of each collection that sets it (keyed by the list, which policies may share):
        # loaded now, so that a bad key file fails the client's start as trusted_keys does.
        self._scoped_receipt_keys: dict[tuple[str, ...], dict[str, Ed25519PublicKey]] = {}
        sections = [("default", cfg.default), *((f"collections.{toml_key(n)}", p) for n, p in cfg.collections.items())]
        for where, pol in sections:
            if pol.receipt_keys is not None and pol.receipt_keys not in self._scoped_receipt_keys:
                scoped = {own_kid: self._signing_key.public_key(), **self.retired_keys}
                for spec in pol.receipt_keys:
                    pk = self._load_public(spec, where=f"{where}.receipt_keys")
                    scoped[_keys.key_id(pk)] = pk
                self._scoped_receipt_keys[pol.receipt_keys] = scoped
        if own_kid in self.revoked_keys:
            # Every receipt and audit checkpoint the guard signs would be rejected as revoked.
            raise ConfigError(
                f"{cfg.source_path or '<config>'}: the guard's signing_key {cfg.signing_key!r} has key id "
                f"{own_kid}, which receipts.revoked_keys revokes; the guard would go on signing receipts "
                "and audit checkpoints with a revoked key. Make a new key (`qdrant-guard keys new`) and "
                "set signing_key to it"
            )
        self.authorities: dict[str, list[Ed25519PublicKey]] = {
            name: [self._load_public(k, where=f"boundaries.{toml_key(name)}.authority_keys") for k in b.authority_keys]
            for name, b in cfg.boundaries.items()
        }
        first_boundary: dict[str, str] = {}
        for name, pks in self.authorities.items():
            for pk in pks:
                kid = _keys.key_id(pk)
                if kid in self.retired_keys:
                    raise _keys.retired_authority_error(kid, name, cfg.source_path or "<config>")
                other = first_boundary.setdefault(kid, name)
                if other != name:
                    raise ConfigError(
                        f"{cfg.source_path or '<config>'}: authority key {kid} is in both "
                        f"boundaries.{toml_key(other)}.authority_keys and boundaries.{toml_key(name)}.authority_keys, so "
                        f"either authority could issue credentials for the other boundary; give each "
                        f"boundary its own key (`qdrant-guard keys new`)"
                    )
        self.revoked_credentials = frozenset(
            c for b in cfg.boundaries.values() for c in b.revoked_credentials
        )
        # Every 1000th entry carries a checkpoint signed with the guard's key: with that key's
        # public half, `qdrant-guard audit verify --key` proves the chain up to it came from here.
        # An ephemeral key (no signing_key) signs nothing: its public half is gone with the process.
        audit_signer = self.signer if cfg.signing_key else None
        audit_keys: dict[str, Ed25519PublicKey] = dict(self.retired_keys)
        for spec in cfg.audit_trusted_keys:
            pk = self._load_public(spec, where="audit_trusted_keys")
            kid = _keys.key_id(pk)
            if kid in self.revoked_keys:
                # A revoked (compromised) key's checkpoint proves nothing about who wrote the log.
                raise ConfigError(
                    f"{cfg.source_path or '<config>'}: audit_trusted_keys lists key {kid}, which "
                    "receipts.revoked_keys revokes: a checkpoint it signed proves nothing. Remove it from "
                    "audit_trusted_keys; if the audit log's most recent checkpoint is under it, check the "
                    "log with `qdrant-guard audit verify` and start a new audit_log file")
            audit_keys[kid] = pk
        # A credential issuer that also signs or verifies for the guard could forge what it verifies.
        _keys.check_authority_roles(cfg, signing_key_id=own_kid if cfg.signing_key else None,
                                    source=cfg.source_path or "<config>")
        if not self.transparent and store_kind(cfg.budget_store) == "sqlite":
            # The store is opened at the first budgeted read; one that other users could rewrite
            # stops the start, as a key file they could does (the open checks again, fail closed).
            unsafe = unsafe_store_file(cfg.budget_store[len("sqlite:///"):])
            if unsafe is not None:
                raise ConfigError(f"{cfg.source_path or '<config>'}: budget_store: {unsafe}")
        self.audit = (AuditLog(cfg.audit_log, fsync=cfg.audit_fsync, signer=audit_signer,
                               trusted_keys=audit_keys, allow_shared_file=cfg.audit_allow_shared_file,
                               sign_every_entry=cfg.audit_sign_every_entry,
                               signed_from=cfg.audit_signed_from)
                      if not self.transparent else None)
        self.principal_label, self.verified = self._verify_audited("client", principal)
        # State shared by every principal view of this pipeline (budgets, classifiers, caches);
        # "lock" guards the first creation of shared objects against racing threads; "clean_lock"
        # the payload screen's clean memory and its counts (TextOps.remember_clean_value);
        # "receipt_params_lock" the learnt receipt parameter sets (QueryChecks.raw_vectors_left).
        self.shared: dict[str, Any] = {"lock": threading.Lock(), "clean_lock": threading.Lock(),
                                       "receipt_params_lock": threading.Lock()}
        # Held by this pipeline and its views, not by shared: no cycle keeps shared alive.
        self._sizes_of = _SizesOf(self.shared)
        self._join_epoch(SourceSizeEpoch())  # a store of its own until bind_store names one

    def bind_store(self, backend: Any) -> None:
        """Read and write ``backend``'s store (the client's qdrant-client backend): join the
        :class:`SourceSizeEpoch` of every other guard of this process on the same store, so a
        write through any of them drops the source sizes all of them cached."""
        self._join_epoch(size_epoch_for(backend))
        self.shared["store_identity"] = store_identity(backend)
        # A hidden name is answered as the backend answers a missing one (name_visible).
        self.shared["remote"] = isinstance(backend, (QdrantRemote, AsyncQdrantRemote))

    def _join_epoch(self, epoch: SourceSizeEpoch) -> None:
        epoch.join(self._sizes_of)
        self.shared["size_epoch"] = epoch
        self.shared.pop("source_sizes", None)

    def for_operations(self, at: list[int | None]) -> Self:
        """A view of this pipeline for one batch call whose audit entries name ``at[0]``, the index
        of the operation being checked, as ``details["operation"]`` while it is not None."""
        view = copy.copy(self)
        view._operation_at = at
        return view

    def for_principal(self, principal: Principal | str | None) -> "GuardPipeline":
        """A view of this pipeline for another principal: same policy, keys, audit log and budgets."""
        view = copy.copy(self)
        view.principal_label, view.verified = self._verify_audited("with_principal", principal)
        return view

    def _verify_audited(self, op: str, principal: Principal | str | None) -> tuple[str | None, VerifiedPrincipal | None]:
        """:meth:`_verify_principal`, with a rejected credential audited (INVALID_CREDENTIAL) first:
        a forged, revoked or mismatched credential is an attempt worth a trace."""
        try:
            return self._verify_principal(principal)
        except CredentialError as exc:
            if self.audit is not None:
                claimed = (f"{shown(principal.agent_id)}@{shown(principal.boundary)}" if isinstance(principal, Principal)
                           else "<bare credential>")
                self.record(Decision(
                    op=op, collection=None, verdict=Verdict.INVALID_CREDENTIAL,
                    directive=f"credential rejected: {exc}", principal=f"{claimed} (rejected)",
                    details={"reason": getattr(exc, "reason", "mismatch")},
                ))
            raise

    # -- set-up ---------------------------------------------------------------------------
    def _load_signing_key(self, cfg: GuardConfig) -> Ed25519PrivateKey:
        if cfg.signing_key is None:
            return Ed25519PrivateKey.generate()
        try:
            return _keys.load_private_key(cfg.signing_key)
        except _keys.KeyStoreError as exc:
            # The key module names the file; a user with several key files also needs the policy key.
            raise type(exc)(f"{cfg.source_path or '<config>'}: signing_key: {exc}") from None

    def _load_public(self, spec: str, *, where: str) -> Ed25519PublicKey:
        try:
            return _keys.load_public_key(spec)
        except QdrantGuardError as exc:
            raise ConfigError(f"{self.config.source_path or '<config>'}: {where}: {exc}") from None

    def _verify_principal(self, principal: Principal | str | None) -> tuple[str | None, VerifiedPrincipal | None]:
        if principal is None:
            return None, None
        credential: str | None
        if isinstance(principal, str):
            # A bare token: the agent id and boundary are the verified credential's own claims.
            claimed_agent, claimed_boundary, credential = "", "", principal
        elif isinstance(principal, Principal):
            claimed_agent, claimed_boundary, credential = principal.agent_id, principal.boundary, principal.credential
        else:
            raise GuardArgumentTypeError(
                f"principal= must be a qdrant_guard.Principal or a credential string, not "
                f"{type(principal).__name__}: pass Principal(agent_id, boundary, token), with the token "
                "`qdrant-guard credential issue` printed"
                + (f"; {PATH_IS_NOT_A_TOKEN}" if isinstance(principal, os.PathLike) else "")
            )
        if credential is None:
            # A boundary without a credential is self-asserted: it is recorded, never trusted.
            return f"{claimed_agent}@unverified", None
        verified = verify_credential(
            credential,
            authorities=self.authorities,
            revoked_keys=self.revoked_keys,
            revoked_credentials=self.revoked_credentials,
            now=self.clock(),
        )
        if claimed_agent and claimed_agent != verified.agent_id:
            raise CredentialError(
                f"principal agent_id {claimed_agent!r} does not match the credential's "
                f"agent_id {verified.agent_id!r}; pass Principal({verified.agent_id!r}, "
                f"{verified.boundary!r}, token), or issue {claimed_agent!r} a credential of its own "
                "(`qdrant-guard credential issue --agent`)"
            )
        if claimed_boundary and claimed_boundary != verified.boundary:
            if claimed_boundary in self.authorities:
                other = (f"issue a credential for {claimed_boundary!r} with that boundary's authority key "
                         "(`qdrant-guard credential issue --boundary`)")
            else:
                # No credential could ever admit a boundary the policy does not name.
                other = (f"to act in {claimed_boundary!r}, which is no boundary of the policy (its boundaries: "
                         f"{sorted(self.authorities)}), add a [boundaries.{toml_key(claimed_boundary)}] section "
                         "listing an authority's .pub, then issue a credential with that authority's key")
            raise CredentialError(
                f"principal boundary {claimed_boundary!r} does not match the credential's "
                f"boundary {verified.boundary!r}; pass Principal({verified.agent_id!r}, "
                f"{verified.boundary!r}, token), or {other}"
            )
        return f"{verified.agent_id}@{verified.boundary}", verified

    # -- principal / policy ---------------------------------------------------------------
    def boundary(self) -> str | None:
        """The verified boundary of the caller right now (None when anonymous or expired)."""
        v = self.verified
        if v is None:
            return None
        if v.expires_at <= self.clock():
            return None
        return v.boundary

    def policy(self, collection: str) -> CollectionPolicy:
        """The policy of ``collection``."""
        return self.config.policy_for(collection)

    def ceiling(self, pol: CollectionPolicy) -> float:
        """The epsilon ceiling of the collection's class."""
        return self.config.epsilon_ceiling[pol.sensitivity]

    # -- decisions ------------------------------------------------------------------------
    def decision(self, op: str, collection: str | None, pol: CollectionPolicy | None, verdict: Verdict,
                 directive: str, **kw: Any) -> Decision:
        """Build a decision for the current principal."""
        return Decision(
            op=op,
            collection=collection,
            verdict=verdict,
            directive=directive,
            principal=self.principal_label,
            sensitivity=pol.sensitivity.value if pol is not None else None,
            fail_closed=pol.fail_closed if pol is not None else True,
            **kw,
        )

    def record(self, d: Decision) -> str:
        """Audit ``d`` and return its manifest digest (the SHA-256 hash of its audit entry).

        Raises:
            AuditError: the log could not be written and the collection fails closed (default).
        """
        at = self._operation_at
        if at is not None and at[0] is not None:
            # The check that refused wrote its own wording; the entry must still say which of the
            # batch's operations it was (the raised error's message names it, the entry cannot).
            d = replace(d, details={**d.details, "operation": at[0]})
        rec = d.record()
        if self.audit is not None:
            try:
                # The manifest digest is the hash of the audit entry: it covers the record and,
                # through the chain, every decision before it.
                return str(self.audit.append(rec)["hash"])
            except Exception as exc:  # any failure of the log is a refusal, unless configured open
                if d.fail_closed:
                    if isinstance(exc, AuditError):
                        raise
                    raise AuditError(f"audit log could not be written ({exc}); the call was refused") from exc
                log.error("audit log could not be written (fail_closed = false, going on): %r", exc)
        return hashlib.sha256(canonical_json(rec)).hexdigest()

    def audited_model_refusal(self, op: str, name: str, pol: CollectionPolicy, verdict: Verdict, message: str,
                              details: dict[str, Any], **kw: Any) -> ConfigError:
        """The ConfigError of a call refused for its embedding model (the policy's
        ``utility.embedding_model(s)`` names another for the vector), audited first: ``verdict``,
        the message as its directive, ``details`` with ``reason = "model_mismatch"`` (``kw``: more
        decision fields, such as ``point_ids``). Still a ConfigError (the fix is the caller's model
        or the policy's); its ``manifest_digest`` is the entry's hash."""
        digest = self.record(self.decision(op, name, pol, verdict, message,
                                           details={"reason": "model_mismatch", **details}, **kw))
        err = ConfigError(message)
        err.manifest_digest = digest  # type: ignore[attr-defined]
        mark_audited(err)
        return err

    def forward(self, op: str, name: str | None, pol: CollectionPolicy | None, call: Call) -> Op:
        """Send a decided call to Qdrant; if it fails, audit QDRANT_ERROR and re-raise.

        Any failure counts, a cancellation (``asyncio.wait_for`` around a server round trip) or a
        ``KeyboardInterrupt`` included: the allow entry is already written, so the log must say
        the call may not have happened. ``upsert`` and ``batch_update_points`` are one request
        each; Qdrant checks an upsert's points before applying any, but applies a batch's
        operations in order and stops at a failing one, so the guard refuses beforehand every
        failure it can foresee (docs/atomicity.md). ``upload_points``/``upload_collection`` are split by
        qdrant-client into ``batch_size`` requests: a failure after some of them leaves those
        batches written (docs/atomicity.md).
        """
        try:
            return (yield call)
        except GeneratorExit:  # the operation was abandoned, not failed
            raise
        except BaseException as exc:
            # The type only, as for a failed read or look-up: the message (a server's response
            # body) can quote the filter or payload values the call carried.
            self.record(self.decision(
                op, name, pol, Verdict.QDRANT_ERROR,
                f"Qdrant failed after the guard allowed the call: {call.method} raised {type(exc).__name__} "
                "(raised to the caller; its message is not logged)",
                details={"method": call.method, "error": type(exc).__name__},
            ))
            raise

    def warned_untagged(self, name: str) -> bool:
        """Whether collection ``name`` was warned of points without a source by this client."""
        return name in self._warned_untagged

    def warn_untagged_once(self, op: str, name: str, pol: CollectionPolicy, message: Callable[[], str | None]) -> Op:
        """Show ``message()`` (None: nothing to say) at the caller's line, unless collection
        ``name`` was warned of already by this client or one of its views (a generator: yielded
        to the driver as a :class:`Warn`). Called before the write is sent: a warning raised as an
        error (``-W error``) refuses the write with nothing stored, is audited (UNSUPPORTED_WRITE,
        reason ``warning_raised``) and leaves the collection unwarned, so its next such write
        raises too."""
        if name in self._warned_untagged:
            return
        text = message()
        if text is None:
            return
        with self._warn_lock:
            if name in self._warned_untagged:  # another thread's write said it meanwhile
                return
            self._warned_untagged.add(name)
        try:
            yield Warn(text)
        except GeneratorExit:
            raise
        except BaseException as exc:
            with self._warn_lock:
                self._warned_untagged.discard(name)
            if isinstance(exc, Warning):  # the caller's warning filter turned it into an error
                self.record(self.decision(
                    op, name, pol, Verdict.UNSUPPORTED_WRITE,
                    f"{op}: the caller's warning filter raised the guard's {type(exc).__name__} (points left "
                    "without a source) before the write was sent. Nothing was written",
                    details={"error": type(exc).__name__, "reason": "warning_raised"}))
                mark_audited(exc)
            raise

    def refuse(self, d: Decision) -> QdrantGuardError:
        """Audit a refusing decision and return the exception to raise."""
        return d.refusal(self.record(d))


def drive_sync(op: Op, invoke: Callable[[Call], Any] | None,
               offload: Callable[[Callable[[], Any]], Any] | None = None) -> Any:
    """Run an operation to completion with a synchronous ``invoke``; ``offload(fn)`` runs its
    :class:`Offload` requests (default: ``fn()``); its :class:`Warn` requests are shown here, in
    the caller's thread."""
    try:
        call = next(op)
        while True:
            try:
                if isinstance(call, Offload):
                    result = call.fn() if offload is None else offload(call.fn)
                elif isinstance(call, Warn):
                    show(call)
                    result = None
                elif invoke is None:
                    raise RuntimeError(f"operation requested {call.method!r} but no backend was given")
                else:
                    result = invoke(call)
            except BaseException as exc:  # give the operation a chance to audit the failure
                call = op.throw(exc)
            else:
                call = op.send(result)
    except StopIteration as stop:
        return stop.value
