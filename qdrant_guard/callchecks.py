"""The checks a guarded call draws on: access, point ids, reserved sources, receipt-key scope.

A mixin over :class:`qdrant_guard.pipeline.GuardPipeline`: who may read, write or administer a
collection (``require_access``, ``gate``), refusals of unsupported writes and of operations the
guard cannot check, the receipt keys a collection trusts, and the cache of collection shapes
(``shape``, ``forget_shape``).
"""
from __future__ import annotations

import time

from typing import Any, Generator

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import keys as _keys
from .boundary import reissue_hint
from .decision import Verdict
from .errors import ConfigError, UnsupportedWriteError
from .policy import CollectionPolicy
from .names import shown, toml_key
from .receipts import normalize_point_id
from .sources import reserved_claims
from .vectors import CollectionShape, shape_from_info
from .pipeline import Call, GuardPipeline, mark_audited


def _admin_boundaries(pol: CollectionPolicy) -> list[str | None]:
    # Without an owner, the writers administer the collection: someone must be able to create,
    # recreate and index it, and they are the ones trusted with its contents.
    return [pol.owner] if pol.owner else list(pol.writers or ())


def _administers(pol: CollectionPolicy, boundary: str) -> bool:
    admins = _admin_boundaries(pol)
    return boundary in admins or (pol.owner is None and "*" in admins)


class CallChecks(GuardPipeline):
    """Access and argument checks shared by every guarded operation."""

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

    def policy_section(self, name: str, pol: CollectionPolicy, table: str = "") -> str:
        """The policy file's section that sets ``pol`` for collection ``name``: its
        ``[collections.NAME]``, or ``[default]`` for an unlisted one; ``table`` names a subtable
        (``"query"``: ``[collections.NAME.query]``)."""
        head = f"collections.{toml_key(name)}" if self.config.collections.get(name) is pol else "default"
        return f"[{head}.{table}]" if table else f"[{head}]"

    def receipt_scope_refusal(self, name: str, pol: CollectionPolicy, kid: str | None) -> str | None:
        """Why a receipt by ``kid`` is refused on ``name`` when its ``receipt_keys`` leave the key
        out (None when the collection sets no scope, or the key is not refused by it)."""
        if pol.receipt_keys is None or not isinstance(kid, str) or kid in self.receipt_keys_for(pol):
            return None
        # kid is the unverified receipt's text (the key is not trusted): escaped unless printable.
        section = self.policy_section(name, pol)
        own = _keys.key_id(self._signing_key.public_key())
        listed = sorted(k for k in self.receipt_keys_for(pol) if k != own and k not in self.retired_keys)
        elsewhere = (" (receipts.trusted_keys lists it, which does not apply to a collection that sets "
                     "receipt_keys)" if kid in self.trusted_receipt_keys else "")
        return (f"unknown_key: collection {name!r} accepts receipts only from the guard's key and the keys its "
                f"receipt_keys lists ({', '.join(listed) or 'none'}), and this one is signed by {shown(kid)}{elsewhere}; "
                f"sign it with a listed key, or add the signer's .pub to receipt_keys in {section} (the guard's "
                "own earlier signing key goes in receipts.retired_keys instead)")

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
            self._shape_read_at[collection] = time.monotonic()
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
