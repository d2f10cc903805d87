"""The one guard pipeline: every guarded call of both facades is decided here.

Each guarded operation is a generator (sans-IO): it yields :class:`Call` requests for the
unguarded qdrant-client methods it needs (collection info, reads it must do, and finally the
call itself) and receives their results. The sync facade drives it with plain calls, the async
facade with ``await``; the logic exists once, so the two clients cannot drift apart.

Order for every call: policy -> checks -> decision -> audit -> (only then) Qdrant.

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
from .canonical import canonical_json
from .audit import AuditLog
from .boundary import PATH_IS_NOT_A_TOKEN, Principal, VerifiedPrincipal, reissue_hint, verify_credential
from .budget import store_kind
from .budget_file_access import unsafe_store_file
from .decision import MAX_IDS_IN_RECORD, Decision, Verdict
from .errors import (AuditError, ConfigError, CredentialError, GuardArgumentTypeError, QdrantGuardError,
                     UnsupportedWriteError)
from .policy import CollectionPolicy, GuardConfig, load_policy
from .names import folded_name, path_segment_name, shell_quote, shown, toml_key
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
from .receipts import ReceiptSigner, normalize_point_id
from .sentargs import plain_args
from .sentmodels import UncheckedForm, sent_models
from .sentnames import (
    plain_names as plain_names,
    sent_name as sent_name,
)
from .sources import reserved_claims
from .surface import ADMIN, OPERATOR_ONLY, PAYLOAD, READ_COLLECTION, SNAPSHOT_RECOVERY, WRITE_COLLECTION, WRITE_VECTORS
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

# Methods that may add, retag or delete points of a source (see _forget_source_sizes_after).
# delete_shard_key deletes the points of its shard; cluster_collection_update can too
# (DropShardingKey), or copy points into another shard key (ReplicatePoints).
# The point updates, whose answers carry Qdrant's operation id (one list of them for a batch).
_POINT_UPDATES = WRITE_VECTORS | PAYLOAD | WRITE_COLLECTION


_CHANGES_SOURCES = frozenset({
    "upsert", "upload_points", "upload_collection", "batch_update_points", "set_payload",
    "overwrite_payload", "delete_payload", "clear_payload", "delete", "delete_collection",
    "recreate_collection", "update_collection_aliases", "migrate", "delete_shard_key",
    "cluster_collection_update",
})
# The reads such a method's operation may make before its write. Any other call it sends counts
# as the write: once it is sent, the store may have changed, whether or not the call then fails.
_READS_BEFORE_WRITE = frozenset({
    "get_collection", "get_collections", "get_aliases", "get_collection_aliases", "collection_exists",
    "retrieve", "scroll", "count",
})
# Methods that store a collection's metadata (qdrant-client 1.20), which get_collection returns.
_TAKES_METADATA = frozenset({"create_collection", "recreate_collection", "update_collection"})
from .vectors import CollectionShape, shape_from_info


# The calls that make or remove a collection's storage directory, named after the collection.
_MAKES_OR_REMOVES_STORAGE = frozenset({"create_collection", "recreate_collection", "delete_collection"})


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


Op = Generator["Call | Offload", Any, Any]


def _admin_boundaries(pol: CollectionPolicy) -> list[str | None]:
    # Without an owner, the writers administer the collection: someone must be able to create,
    # recreate and index it, and they are the ones trusted with its contents.
    return [pol.owner] if pol.owner else list(pol.writers or ())


def _administers(pol: CollectionPolicy, boundary: str) -> bool:
    admins = _admin_boundaries(pol)
    return boundary in admins or (pol.owner is None and "*" in admins)


def mark_audited(exc: BaseException) -> BaseException:
    """Mark ``exc`` as already audited, so the write path's catch-all does not audit it again."""
    exc._qg_audited = True  # type: ignore[attr-defined]
    return exc


def missing_key_files(cfg: GuardConfig) -> ConfigError | None:
    """One error naming every public key file the policy lists that does not exist, when there are
    several: loading stops at the first, so a policy copied from docs/policy.example.toml took a
    run per missing file to set up. None when at most one is missing (its load names it)."""
    specs = [("receipts.trusted_keys", k) for k in cfg.receipts.trusted_keys]
    specs += [("receipts.retired_keys", k) for k in cfg.receipts.retired_keys]
    specs += [("audit_trusted_keys", k) for k in cfg.audit_trusted_keys]
    specs += [(f"boundaries.{toml_key(n)}.authority_keys", k)
              for n, b in cfg.boundaries.items() for k in b.authority_keys]
    sections = [("default", cfg.default), *((f"collections.{toml_key(n)}", p) for n, p in cfg.collections.items())]
    specs += [(f"{where}.receipt_keys", k) for where, pol in sections for k in (pol.receipt_keys or ())]
    missing: dict[str, list[str]] = {}
    for where, spec in specs:
        # Key text (a private key pasted in) is left to its load, which refuses it unechoed.
        if not spec.strip().startswith(_keys.KEY_PREFIX) and not _keys.looks_like_key_text(spec) \
                and not os.path.lexists(spec):
            missing.setdefault(spec, []).append(where)
    if len(missing) < 2:
        return None
    lines = []
    for path, wheres in missing.items():
        private = path[:-len(".pub")] if path.endswith(".pub") else None
        if private and os.path.exists(private):
            make = f"qdrant-guard keys pub --key {shell_quote(private)}"
        elif private:
            make = f"qdrant-guard keys new --out {shell_quote(private)}"
        else:
            make = "qdrant-guard keys new --out KEY, then name KEY.pub here"
        lines.append(f"  {path} ({', '.join(wheres)}): `{make}`")
    return ConfigError(
        f"{cfg.source_path or '<config>'}: {len(missing)} key files the policy names do not exist:\n"
        + "\n".join(lines)
        + "\nmake each with the command shown (where the key's holder keeps the private key elsewhere, copy its "
        ".pub here instead), or remove the entry from the policy")


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
            cfg = load_policy(config)  # type: ignore[arg-type]
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
        self._signing_key = self._load_signing_key(cfg)
        missing = missing_key_files(cfg)
        if missing is not None:
            raise missing
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
                               sign_every_entry=cfg.audit_sign_every_entry)
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

    def receipt_keys_for(self, pol: CollectionPolicy) -> dict[str, Ed25519PublicKey]:
        """The keys whose receipts ``pol``'s collection accepts (key id -> public key): the guard's
        own (its current and ``receipts.retired_keys``) and those of its ``receipt_keys`` when set,
        else the guard's and ``receipts.trusted_keys``."""
        if pol.receipt_keys is None:
            return self.trusted_receipt_keys
        scoped = self._scoped_receipt_keys.get(pol.receipt_keys)
        if scoped is None:
            raise ConfigError(f"receipt_keys {list(pol.receipt_keys)!r} belong to a collection policy that is not "
                              "part of this guard's policy; give the policy to the client (guard=)")
        return scoped

    def receipt_scope_refusal(self, name: str, pol: CollectionPolicy, kid: str | None) -> str | None:
        """Why a receipt by ``kid`` is refused on ``name`` when its ``receipt_keys`` leave the key
        out (None when the collection sets no scope, or the key is not refused by it)."""
        if pol.receipt_keys is None or not isinstance(kid, str) or kid in self.receipt_keys_for(pol):
            return None
        # kid is the unverified receipt's text (the key is not trusted): escaped unless printable.
        section = f"[collections.{toml_key(name)}]" if self.config.collections.get(name) is pol else "[default]"
        own = _keys.key_id(self._signing_key.public_key())
        listed = sorted(k for k in self.receipt_keys_for(pol) if k != own and k not in self.retired_keys)
        elsewhere = (" (receipts.trusted_keys lists it, which does not apply to a collection that sets "
                     "receipt_keys)" if kid in self.trusted_receipt_keys else "")
        return (f"unknown_key: collection {name!r} accepts receipts only from the guard's key and the keys its "
                f"receipt_keys lists ({', '.join(listed) or 'none'}), and this one is signed by {shown(kid)}{elsewhere}; "
                f"sign it with a listed key, or add the signer's .pub to receipt_keys in {section} (the guard's "
                "own earlier signing key goes in receipts.retired_keys instead)")

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

    def refuse(self, d: Decision) -> QdrantGuardError:
        """Audit a refusing decision and return the exception to raise."""
        return d.refusal(self.record(d))

    def unsupported_write(self, op: str, name: str, pol: CollectionPolicy, message: str) -> UnsupportedWriteError:
        """The error for a write the guard cannot enforce, audited (UNSUPPORTED_WRITE) first."""
        self.record(self.decision(op, name, pol, Verdict.UNSUPPORTED_WRITE, message))
        err = UnsupportedWriteError(message)
        mark_audited(err)
        return err

    def refused_operations(self, op: str, args: dict[str, Any], exc: UnsupportedWriteError) -> UnsupportedWriteError:
        """``exc``, the facade's refusal of operations it cannot read as models
        (``batch_update_points``, ``update_collection_aliases``), audited first as UNSUPPORTED_WRITE
        with reason ``invalid_input``, as a write's other refused input is (the error type and the
        reason word, never the message)."""
        name = args.get("collection_name")
        name = str.__str__(name) if isinstance(name, str) else None  # its characters, as sent
        try:
            pol = self.policy(name) if name is not None else None
        except ConfigError:  # unlisted under unlisted = "refuse": recorded without a policy
            pol = None
        self.record(self.decision(
            op, name, pol, Verdict.UNSUPPORTED_WRITE,
            f"{op}: the guard refused the call's input ({type(exc).__name__}: invalid_input) before sending "
            "anything; the error raised to the caller names the fix. Nothing was written",
            details={"error": type(exc).__name__, "reason": "invalid_input"}))
        mark_audited(exc)
        return exc

    def check_point_ids(self, op: str, name: str, pol: CollectionPolicy, ids: list[Any]) -> None:
        """Refuse the call (audited) if an id is not one Qdrant accepts: every write path to a
        sensitive collection, raw in-boundary ones included, since local mode would store an id a
        server refuses, and receipts and budgets are keyed by the normalised id. PUBLIC writes keep
        qdrant-client's own behaviour (local mode stores ``id=-1``, a server refuses it)."""
        for pid in ids:
            try:
                normalize_point_id(pid)
            except (TypeError, ValueError) as exc:
                raise self.unsupported_write(
                    op, name, pol,
                    f"{op}: {exc} (collection {name!r}); Qdrant point ids are integers 0 <= id < 2**64 "
                    "or UUID strings. Nothing was written"
                ) from None

    def refuse_reserved_sources(self, op: str, collection: str, pol: CollectionPolicy, payload: Any,
                                key: str | None = None, point_id: Any = None) -> None:
        """Refuse (REFUSED_CROSS_BOUNDARY) a payload that tags a point with a restricted source of a
        budgeted collection when the caller is not in the owner boundary (see
        :func:`~qdrant_guard.sources.reserved_claims`)."""
        claims = reserved_claims(pol, self.boundary(), payload, key)
        if not claims:
            return
        where = f"point {point_id!r}" if point_id is not None else "the payload"
        fix = (f"write it from boundary {pol.owner!r}" if pol.owner is not None
               else "set the collection's owner and write it from there")
        raise self.refuse(self.decision(
            op, collection, pol, Verdict.REFUSED_CROSS_BOUNDARY,
            f"{where} names restricted source(s) {claims} of collection {collection!r} in "
            f"{pol.source_field!r}, and only the owner boundary ({pol.owner!r}) writes restricted sources "
            f"(the extraction budget is a share of each source's size, so a writer could raise it); "
            f"{fix}, or tag the point with another source",
            **({"point_ids": [point_id]} if point_id is not None else {}),
        ))

    def require_access(self, op: str, collection: str, pol: CollectionPolicy, need: str) -> None:
        """Refuse (REFUSED_CROSS_BOUNDARY / INVALID_CREDENTIAL) unless the caller may ``need``."""
        if pol.is_public:
            return
        boundary = self.boundary()
        if need == "read":
            ok = pol.may_read(boundary)
        elif need == "write":
            ok = pol.may_write(boundary)
        else:
            ok = boundary is not None and _administers(pol, boundary)
        if ok:
            return
        if self.verified is not None and boundary is None:
            raise self.refuse(self.decision(
                op, collection, pol, Verdict.INVALID_CREDENTIAL,
                f"the principal's credential ({shown(self.principal_label or '')}) has expired; issue a new one with "
                f"{reissue_hint(self.verified.agent_id, self.verified.boundary)} and act with it through "
                "client.with_principal(token), "
                "which keeps this client's connection (a second local-mode client on the same path= "
                "store is refused while this one is open)",
            ))
        if boundary:
            who = f"boundary {boundary!r}"
        elif self.principal_label is None:
            who = "a client without principal="
        else:
            # A Principal without a credential: its boundary is only claimed, so it counts for nothing.
            who = f"unverified principal {self.principal_label!r} (no credential was given)"
        allowed = {"read": [pol.owner, *pol.readers], "write": [pol.owner, *(pol.writers or ())],
                   "admin": _admin_boundaries(pol)}[need]
        allowed = [b for b in allowed if b]
        if allowed:
            fix = (f"allowed boundaries: {allowed}. Pass principal= with a credential issued by one of "
                   "those boundaries' authority keys")
        else:
            # Naming an empty list of boundaries to get a credential from is a dead end: say what
            # to change in the policy instead.
            keys = {"read": "owner or readers", "write": "owner or writers", "admin": "owner or writers"}[need]
            section = (f"[collections.{toml_key(collection)}]" if collection in self.config.collections else
                       f"a [collections.{toml_key(collection)}] section (unlisted collections take [default], "
                       "which sets none)")
            fix = (f"no boundary may: its policy names no {keys}. Set owner = \"<boundary>\" in {section} "
                   "and pass principal= with a credential from that boundary's authority")
        raise self.refuse(self.decision(
            op, collection, pol, Verdict.REFUSED_CROSS_BOUNDARY,
            f"{who} may not {'administer' if need == 'admin' else need} {pol.sensitivity.value} collection "
            f"{collection!r}; {fix}",
        ))

    def gate(self, method: str, args: dict[str, Any], need: str) -> CollectionPolicy | None:
        """The policy to enforce on this call, after the boundary check for ``need``.

        Returns None when the call passes through unchanged (no policy, or a PUBLIC collection).
        """
        if self.transparent:
            return None
        name = args["collection_name"]
        pol = self.policy(name)
        if pol.is_public:
            return None
        self.require_access(method, name, pol, need)
        return pol

    # -- collection shape -----------------------------------------------------------------
    def shape(self, collection: str, *, op: str | None = None,
              pol: CollectionPolicy | None = None) -> Generator[Call, Any, CollectionShape]:
        """The vector layout of ``collection`` (cached; fetched with ``get_collection``). With
        ``op`` (the write it is read for), a failed fetch is audited (QDRANT_ERROR, the method and
        the error type: the write fails before its decision, and must not fail with no entry)."""
        found = self._shapes.get(collection)
        if found is None:
            try:
                info = yield Call("get_collection", {"collection_name": collection})
            except GeneratorExit:  # abandoned, not failed
                raise
            except BaseException as exc:
                if op is not None:
                    self.record(self.decision(
                        op, collection, pol, Verdict.QDRANT_ERROR,
                        f"Qdrant failed while the guard read the collection's vector layout (get_collection "
                        f"raised {type(exc).__name__}; its message is not logged); nothing was written",
                        details={"method": "get_collection", "error": type(exc).__name__}))
                raise
            found = shape_from_info(info)
            self._shapes[collection] = found
        return found

    def forget_shape(self, collection: str | None = None) -> None:
        """Drop cached collection layouts (after create/recreate/delete/update), and every
        collection's "no raw vector left" and learnt receipt parameter sets (see
        ``QueryChecks.raw_vectors_left``): a name may now be another collection, or an alias
        another collection's, whose receipts the old sets would fill the cap ahead of."""
        self.shared.pop("noised_only", None)
        self.shared.pop("receipt_params", None)
        if collection is None:
            self._shapes.clear()
        else:
            self._shapes.pop(collection, None)

    # -- entry point ----------------------------------------------------------------------
    def run(self, method: str, args: dict[str, Any]) -> Op:
        """The operation for ``method`` with its bound arguments (without ``self``).

        Raises:
            TypeError: ``collection_name`` is not a str (the policy is looked up by it).
        """
        name = args.get("collection_name", "")
        if not isinstance(name, str):
            raise GuardArgumentTypeError(f"{method}() argument 'collection_name' must be str, not {type(name).__name__}")
        if not self.transparent:
            args = plain_names(method, args)
            name = args.get("collection_name", "")
            if path_segment_name(name):
                raise self.refuse_path_name(method, name)
            if method in _MAKES_OR_REMOVES_STORAGE:
                self.refuse_folded_name(method, name)
            try:
                # Checked as sent: every check below walks these copies, and they are what is sent.
                args = plain_args(method, sent_models(method, args))
            except UncheckedForm as exc:
                raise self.refuse_form(method, name, self.policy(name), exc) from None  # type: ignore[attr-defined]
        handler = getattr(self, f"op_{method}", None)
        if handler is not None:
            op = handler(method, args)
        elif method in READ_COLLECTION:
            op = self.op_collection_access(method, args, "read")
        elif method in WRITE_COLLECTION:
            op = self.op_collection_access(method, args, "write")
        elif method in ADMIN:
            op = self.op_collection_access(method, args, "admin")
        elif method in OPERATOR_ONLY:
            op = self.op_operator_only(method, args)
        else:
            raise QdrantGuardError(f"qdrant_guard has no guard for method {method!r}; this is a bug")
        if method in _CHANGES_SOURCES:
            op = self._forget_source_sizes_after(op, unwaited=not args.get("wait", True))
        if method in _POINT_UPDATES and not self.transparent:
            op = self._writer_answers(name, op)
        return op if self.transparent else self._audit_unlisted(method, op)

    def refuse_path_name(self, method: str, name: str) -> QdrantGuardError:
        """The audited refusal of a collection name that, read as a path, leads to another
        directory than its own (:func:`~qdrant_guard.names.path_segment_name`): the guard decides
        by the name's policy, and local mode would act on the collection whose directory it reaches."""
        return self.refuse(self.decision(
            method, name, None, Verdict.REFUSED_CROSS_BOUNDARY,
            f"collection name {shown(name)} holds a '.', '..' or empty path segment: local mode keeps each "
            "collection in a directory named after it, so this name reaches another collection's storage "
            "(delete_collection('pub/../payroll') deleted payroll's points) while the guard decides by "
            "this name's policy. No collection can be created under such a name; use the collection's "
            "own name",
            details={"reason": "path_segment"},
        ))

    def refuse_folded_name(self, method: str, name: str) -> None:
        """Refuse (audited) creating or deleting collection ``name`` when a collection the policy
        lists under another policy has a name that differs only by case or Unicode normalisation
        (:func:`~qdrant_guard.names.folded_name`): on a file system that ignores those, local mode
        (and a server's storage) keeps both in one directory, so the call would open or remove the
        listed collection's points under this name's policy."""
        listed = self.config.collections
        try:
            mine = self.policy(name)
        except ConfigError:  # unlisted = "refuse": refused by its own path
            return
        key = folded_name(name)
        for other, pol in listed.items():
            if other == name or pol == mine or folded_name(other) != key:
                continue
            # Under names_visible = "accessible" a hidden listed name is not told (the audit has it).
            said = repr(other) if self.name_visible(other) else "a collection the policy lists"
            raise self.refuse(self.decision(
                method, name, mine, Verdict.REFUSED_CROSS_BOUNDARY,
                f"collection name {shown(name)} differs from {said} only by case or Unicode normalisation, "
                "and its policy differs: on a file system that ignores those (macOS, Windows) both names "
                f"are one directory, so {method} would act on that collection's points under this name's "
                f"policy; use another name, or list {shown(name)} in the policy with the same policy",
                details={"reason": "folded_name", "same_folded_as": other},
            ))

    def _writer_answers(self, name: str, op: Op) -> Op:
        """``op``, whose answer a principal who may not read collection ``name`` gets without
        operation ids (:func:`without_operation_ids`)."""
        result = yield from op
        try:
            pol = self.policy(name)
        except ConfigError:  # unlisted = "refuse": the call was refused before it could answer
            return result
        if pol.is_public or pol.may_read(self.boundary()):
            return result
        return without_operation_ids(result)

    def _forget_source_sizes_after(self, op: Op, *, unwaited: bool = False) -> Op:
        """``op``, after which (done, failed or abandoned), if it sent its write, every guard of
        this process on the same store drops its cached source sizes.

        The extraction budget's cap is a share of a source's size, cached for reads. A write may
        add, retag or delete points of a source: kept, the size of before would set the cap of
        after (after the owner deletes points, a reader's share of what is left could exceed
        ``max_source_coverage``). All collections' sizes go, as the write may name an alias.
        ``unwaited``: sent with ``wait=False`` (upload_points' default), so Qdrant acknowledged it
        before applying it, and a count made meanwhile is of before it: no count begun within
        ``SOURCE_SIZE_TTL_S`` of the acknowledgement is kept. A write that failed or was abandoned
        once sent is taken as unwaited: a server may still apply it (a request the client timed
        out, an async write cancelled in flight). A write refused before it was sent (by the
        guard, or by a read of its operation failing) changed nothing, and keeps the sizes.
        """
        sent = ended = False
        try:
            request = next(op)
            while True:
                if not sent and isinstance(request, Call) and request.method not in _READS_BEFORE_WRITE:
                    sent = True
                try:
                    result = yield request
                except GeneratorExit:
                    op.close()
                    raise
                except BaseException as exc:
                    request = op.throw(exc)
                else:
                    request = op.send(result)
        except StopIteration as stop:
            ended = True
            return stop.value
        finally:
            if sent:
                self.shared.pop("source_sizes", None)
                self.shared["size_epoch"].wrote(unwaited=unwaited or not ended)

    def _audit_unlisted(self, method: str, op: Op) -> Op:
        """``op``, with the refusal of a collection unlisted under ``unlisted = "refuse"`` (raised
        as ConfigError wherever the operation looks a policy up) audited before it propagates."""
        try:
            return (yield from op)
        except ConfigError as exc:
            name = getattr(exc, "unlisted", None)
            if name is not None:
                self.record(self.decision(method, name, None, Verdict.REFUSED_CROSS_BOUNDARY, str(exc),
                                          details={"unlisted": "refuse"}))
            raise

    def op_collection_access(self, method: str, args: dict[str, Any], need: str) -> Op:
        """Boundary check for calls that touch one collection without returning its vectors."""
        name = args.get("collection_name")
        pol = self.gate(method, args, need) if name is not None else None
        if (args.get("metadata") is not None and method in _TAKES_METADATA and not self.transparent
                and name is not None):
            # get_collection hands the metadata to every reader: screened as a payload's fields are.
            screen_pol = pol if pol is not None else self.policy(name)
            args = {**args, "metadata": self.screen_collection_metadata(  # type: ignore[attr-defined]
                method, name, screen_pol, args["metadata"])}
        counted = False
        if pol is not None:
            # A payload index's field_name is sent to the store like a filter's keys: screened as they are.
            details = (self.screen_write_filters(method, name, pol, args)  # type: ignore[attr-defined]
                       if method in ("create_payload_index", "delete_payload_index") else {})
            directive = f"{need} access granted"
            if method in ADMIN_COUNTED and not pol.may_read(self.boundary()):
                # An administrator who may not read (a writer of a collection without an owner).
                counted = True
                details = {**details, "hidden": ADMIN_COUNTED[method]}
                directive += ("; the point counts and sizes in the answer are withheld, as get_collection "
                              "withholds them from a principal who may not read the collection")
            self.record(self.decision(method, name, pol, Verdict.ALLOW, directive, details=details))
        if method in ("create_collection", "recreate_collection", "delete_collection", "update_collection",
                      "create_vector_name", "delete_vector_name"):
            self.forget_shape(name)
        if pol is None:
            return (yield Call(method, args))
        answer = yield from self.forward(method, name, pol, Call(method, args))
        return admin_answer_for(method, answer) if counted else answer

    # -- names (names_visible) ---------------------------------------------------------------
    def hides_names(self) -> bool:
        """Whether this guard answers only the names its principal may see (``names_visible``)."""
        return not self.transparent and self.config.names_visible == "accessible"

    def name_visible(self, name: str) -> bool:
        """Whether the principal is told that collection or alias ``name`` exists: always under
        ``names_visible = "all"``; under ``"accessible"`` when the principal may read, write or
        own it under the policy (administrators own or write it). The answer depends on the
        policy and the credential only, never on the store: a hidden name that exists and one
        that does not are answered alike."""
        if not self.hides_names():
            return True
        try:
            pol = self.policy(name)
        except ConfigError:  # unlisted = "refuse": no principal reads, writes or owns it
            return False
        boundary = self.boundary()
        return pol.may_read(boundary) or pol.may_write(boundary)

    def _hidden_name(self, method: str, name: str, answer: str) -> None:
        """Audit a name answered as missing because the principal may not see it."""
        try:
            pol: CollectionPolicy | None = self.policy(name)
        except ConfigError:
            pol = None
        self.record(self.decision(
            method, name, pol, Verdict.REFUSED_CROSS_BOUNDARY,
            f"names_visible = \"accessible\": the principal may not read, write or own collection {name!r}, so "
            f"it is answered {answer}, as a collection that does not exist is (Qdrant was not asked)",
            details={"names_visible": "accessible", "answered": answer}))

    def _names_listed(self, method: str, hidden: list[str], what: str) -> None:
        """Audit a list answered without the names the principal may not see."""
        self.record(self.decision(
            method, None, None, Verdict.ALLOW,
            f"{what} allowed" + (f": {len(hidden)} the principal may not read, write or own left out "
                                 "(names_visible = \"accessible\")" if hidden else ""),
            details={"names_visible": "accessible", "hidden": hidden[:MAX_IDS_IN_RECORD],
                     "hidden_count": len(hidden)} if hidden else {"names_visible": "accessible"}))

    def op_get_collections(self, method: str, args: dict[str, Any]) -> Op:
        """Every collection's name, or under ``names_visible = "accessible"`` those the principal
        may see (:meth:`name_visible`)."""
        if not self.hides_names():
            return (yield Call(method, args))
        resp = yield from self.forward(method, None, None, Call(method, args))
        kept = [c for c in resp.collections if self.name_visible(c.name)]
        self._names_listed(method, [c.name for c in resp.collections if c not in kept], "collection list")
        return resp.model_copy(update={"collections": kept})

    def op_get_aliases(self, method: str, args: dict[str, Any]) -> Op:
        """Every alias, or under ``names_visible = "accessible"`` those whose own name and
        collection the principal may both see (the entry names both)."""
        if not self.hides_names():
            return (yield Call(method, args))
        resp = yield from self.forward(method, None, None, Call(method, args))
        kept = [a for a in resp.aliases if self.name_visible(a.alias_name) and self.name_visible(a.collection_name)]
        self._names_listed(method, [a.alias_name for a in resp.aliases if a not in kept], "alias list")
        return resp.model_copy(update={"aliases": kept})

    def op_get_collection_aliases(self, method: str, args: dict[str, Any]) -> Op:
        """A collection's aliases; under ``names_visible = "accessible"``, none for a collection the
        principal may not see (what a missing collection answers), and those it may see of a
        visible one."""
        if not self.hides_names():
            return (yield Call(method, args))
        name = args["collection_name"]
        if not self.name_visible(name):
            from qdrant_client.http import models

            self._hidden_name(method, name, "with no aliases")
            return models.CollectionsAliasesResponse(aliases=[])
        resp = yield from self.forward(method, name, None, Call(method, args))
        kept = [a for a in resp.aliases if self.name_visible(a.alias_name)]
        self._names_listed(method, [a.alias_name for a in resp.aliases if a not in kept], "alias list")
        return resp.model_copy(update={"aliases": kept})

    def op_collection_exists(self, method: str, args: dict[str, Any]) -> Op:
        """Whether the name exists; under ``names_visible = "accessible"``, False for a name the
        principal may not see, whether it exists or not."""
        name = args["collection_name"]
        if self.name_visible(name):
            return (yield Call(method, args))
        self._hidden_name(method, name, "False")
        return False

    def op_get_collection(self, method: str, args: dict[str, Any]) -> Op:
        """The collection's configuration for any principal who may see its name (surface.DESCRIBE;
        under ``names_visible = "accessible"`` a hidden name raises what a missing one raises); what is counted
        from its points, its payload index schema and its ``metadata`` (which the owner writes)
        only for principals who may read it (see :func:`describe_collection`). Outside the owner
        boundary of a budgeted collection, the index schema without its per-field point counts,
        unless the budget only monitors."""
        if self.transparent:
            return (yield Call(method, args))
        name = args["collection_name"]
        if not self.name_visible(name):
            self._hidden_name(method, name, "as not found")
            raise missing_collection_error(name, remote=self.shared.get("remote", False))
        boundary = self.boundary()
        pol: CollectionPolicy | None
        try:
            pol = self.policy(name)
        except ConfigError:  # unlisted = "refuse": the call answers, but no one reads the collection
            pol, reader = None, False
        else:
            if pol.is_public:
                return (yield Call(method, args))
            reader = pol.may_read(boundary)
        budgeted = (reader and pol is not None and pol.diversity.enabled
                    and pol.diversity.max_source_coverage is not None and boundary != pol.owner)
        monitor = budgeted and pol is not None and pol.diversity.mode == "monitor"
        if not reader:
            why = ("a principal who may not read the collection gets its configuration only: what is counted "
                   "from its points, its payload index schema, its metadata and the text of an optimizer error "
                   "are withheld, as count() is refused")
        elif budgeted:
            why = ("read access granted; the payload index schema's per-field point counts are "
                   f"{'shown (the budget only monitors)' if monitor else 'withheld'}: outside the owner "
                   "boundary a count filter may only name the source field (diversity.max_source_coverage)")
        else:
            why = "read access granted"
        hidden = describe_hidden(reader=reader, budgeted=budgeted)
        # Decided and audited before the call: what is hidden depends on the policy, not on the answer.
        self.record(self.decision(method, name, pol, Verdict.ALLOW, why, monitor=monitor,
                                  details={"would_hide" if monitor else "hidden": hidden} if hidden else {}))
        info = yield from self.forward(method, name, pol, Call(method, args))
        if info is None:
            return info
        return describe_collection(info, reader=reader, budgeted=budgeted and not monitor)

    def op_operator_only(self, method: str, args: dict[str, Any]) -> Op:
        """Refuse, under a policy, a call only an operator may make (see surface.OPERATOR_ONLY)."""
        if self.transparent:
            return (yield Call(method, args))
        name = args.get("collection_name")
        pol = self.policy(name) if isinstance(name, str) else None
        why = ("the guard cannot tell what a snapshot holds, so a copy of a sensitive collection could be "
               "restored under a name with a weaker policy. Restore snapshots"
               if method in SNAPSHOT_RECOVERY else
               "it acts on the whole cluster (replicas or the full snapshots of every collection, whichever "
               "boundary owns them). Do cluster maintenance")
        raise self.refuse(self.decision(
            method, name, pol, Verdict.REFUSED_CROSS_BOUNDARY,
            f"{method} is refused under a guard policy: {why} as the operator, with a client constructed "
            "without guard=",
        ))


def drive_sync(op: Op, invoke: Callable[[Call], Any] | None,
               offload: Callable[[Callable[[], Any]], Any] | None = None) -> Any:
    """Run an operation to completion with a synchronous ``invoke``; ``offload(fn)`` runs its
    :class:`Offload` requests (default: ``fn()``)."""
    try:
        call = next(op)
        while True:
            try:
                if isinstance(call, Offload):
                    result = call.fn() if offload is None else offload(call.fn)
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
