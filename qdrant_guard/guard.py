"""The assembled guard pipeline: writes, payloads, reads, utility records and multi-collection ops."""
from __future__ import annotations

import secrets
import warnings
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from qdrant_client.http import models

from . import keys as _keys
from .decision import MAX_IDS_IN_RECORD, Verdict
from .errors import ConfigError, QdrantGuardWarning, UnsupportedWriteError
from .notfound import missing_alias_error
from .pipeline import Call, Op
from .names import shell_quote, shown as _shown_name
from .policy import CollectionPolicy, toml_key as _toml_key, toml_str as _toml_str
from .reads import ReadOps
from .receipts import ISSUED_AT_LEEWAY_S
from .utility import same_model
from .withheld import sizes_withheld, telemetry_for
from .writes import WriteOps

if TYPE_CHECKING:
    from .utility import UtilityRecord


def build_guard(config: Any, principal: Any, embedder: Any) -> Guard | None:
    """The guard of a client's constructor arguments; None for a plain client (no ``guard=``).

    ``principal=`` and ``embedder=`` act only through a guard: given without one they would be
    ignored, and a caller who forgot ``guard=`` would believe the store protected.
    """
    if config is not None:
        return Guard(config, principal, embedder=embedder)
    given = [name for name, value in (("principal", principal), ("embedder", embedder)) if value is not None]
    if given:
        raise ConfigError(
            f"{' and '.join(n + '=' for n in given)} given without guard=: without a policy the client is "
            "plain qdrant-client and would ignore them; pass guard= (a policy file path or a "
            "GuardConfig), or drop " + " and ".join(n + "=" for n in given)
        )
    return None


def warn_if_key_dies_with_the_process(guard: Guard | None, backend: Any) -> None:
    """Warn when a policy without ``signing_key`` guards a store that outlives the process.

    The throwaway key's receipts stop verifying after a restart, so the vectors it noised are
    stripped from reads outside the owner boundary from then on, with no error to the caller (the
    read's audit entry counts them under ``details.stripped``, reason ``unknown_key``);
    ``":memory:"`` dies with the key and is not warned about.
    """
    if guard is None or guard.config.signing_key is not None or not getattr(backend, "persistent", True):
        return
    cfg = guard.config
    pols = list(cfg.collections.values())
    if cfg.unlisted == "strict" and (cfg.default.owner or cfg.default.writers):
        pols.append(cfg.default)
    if all(pol.is_public for pol in pols):
        return
    warnings.warn(
        f"qdrant_guard: the policy {cfg.source_path or '<GuardConfig>'} sets no signing_key, so this process "
        "signs receipts with a throwaway key: after a restart the vectors it noised into this persistent "
        "store no longer verify and are stripped (vector=None) from reads outside the owner boundary. "
        "Make a key with `qdrant-guard keys new --out keys/guard.key` and set signing_key = "
        '"keys/guard.key" in the policy',
        QdrantGuardWarning, stacklevel=3,
    )


def _record_age_refusal(rec: Any, path: str | None, max_age_s: float | None, now: float) -> str | None:
    """Why ``rec`` is too old (or dated too far ahead) for ``utility.max_age_s``, or None."""
    if max_age_s is None:
        return None
    created_s = rec.created_at / 1000.0
    try:
        shown = datetime.fromtimestamp(created_s, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        shown = f"created_at {rec.created_at} ms"
    age = now - created_s
    if age < -ISSUED_AT_LEEWAY_S:
        # A record dated ahead would count as fresh until that date, whatever max_age_s says.
        return (f"utility record {path!r} is dated {shown}, {-age:.0f} s after the guard's clock (more than "
                f"the {ISSUED_AT_LEEWAY_S:g} s clock-skew leeway), so utility.max_age_s = {max_age_s:g} cannot "
                "be checked; check the clock of the machine that ran `qdrant-guard calibrate` and re-run it")
    if age > max_age_s:
        return (f"utility record {path!r} was calibrated at {shown}, {age:.0f} s ago ({age / 86400:.1f} days), "
                f"more than utility.max_age_s = {max_age_s:g} s: the collection's data or embedding model may "
                "have moved since it was measured; re-run `qdrant-guard calibrate` on a staging collection of "
                "current data and point the policy at the new record, or raise utility.max_age_s")
    return None


def _record_model_refusal(rec: Any, path: str | None, model: str | None, key: str,
                          collection: str | None) -> str | None:
    """Why ``rec`` cannot vouch for a vector whose model the policy's ``key`` declares ``model``, or None.

    The record's model name is its signer's word (a raw vector does not say which model made it);
    this refuses a record whose word is another model, or none."""
    if model is None or (rec.embedding_model is not None and same_model(rec.embedding_model, model)):
        return None
    where = "this collection" if collection is None else f"collection {collection!r}"
    fix = (f"re-run `qdrant-guard calibrate --embedding-model {shell_quote(model)} ...` on a staging collection "
           f"embedded with {model!r} and point the policy at the new record")
    if rec.embedding_model is None:
        named = ("it predates record version 5, which added the model" if rec.version < 5
                 else "it was calibrated without --embedding-model")
        return (f"model_unnamed: utility record {path!r} names no embedding model ({named}), but {where} "
                f"declares {key} = {_toml_str(model)}, and a record that names no model "
                f"cannot show it measured that one; {fix}, or remove {key} to accept "
                "records without a model name")
    return (f"model_mismatch: utility record {path!r} was calibrated on vectors of embedding model "
            f"{rec.embedding_model!r}, but {where} declares {key} = {_toml_str(model)}: the "
            f"same noise costs another model's vectors a different retrieval drop; {fix}, or correct "
            f"{key} if those vectors come from {rec.embedding_model!r}")


class Guard(WriteOps, ReadOps):
    """The one guard pipeline that both facades drive (see :mod:`qdrant_guard.pipeline`)."""

    # -- retrieval utility guard ----------------------------------------------------------
    def _load_utility_record(self, path: str, key: str, pol: CollectionPolicy) -> UtilityRecord:
        """The verified record at ``path`` (the policy's ``key``), read once per guard and key scope.

        Verified against the keys ``pol``'s collection accepts receipts from
        (:meth:`receipt_keys_for`): the guard's own (current and ``receipts.retired_keys``) and
        ``receipts.trusted_keys``, or, when the collection sets ``receipt_keys``, the guard's own and
        those. A record vouches for the
        noise a writer's receipts claim, so a key the collection does not trust with its receipts
        does not vouch for them either.

        Kept in ``shared["utility_records"]`` without a lock (a lock would be held over the file's
        read): the key holds everything the check depends on (the path and the collection's
        ``receipt_keys``; the guard's own keys are the pipeline's), and a record is stored whole,
        once verified, so two threads' first calls at once cost one more read and verification of
        a small file, each keeping a record verified under the same keys."""
        cache = self.shared.setdefault("utility_records", {})
        slot = (path, pol.receipt_keys)
        if slot not in cache:
            from .utility import UtilityRecord, verify_utility_record

            try:
                with open(path, "rb") as fh:
                    rec = UtilityRecord.from_json(fh.read())
            except OSError as exc:
                raise ConfigError(
                    f"utility record {path!r} (the policy's {key}) cannot be read: {exc.strerror}; "
                    f"write it with `qdrant-guard calibrate ... --out {path}` (docs/eval.md), or fix the path"
                ) from None
            except ValueError as exc:  # not UTF-8 JSON of a record (UnicodeDecodeError included)
                raise ConfigError(
                    f"utility record {path!r} is not a record written by `qdrant-guard calibrate`: "
                    f"{exc}"
                ) from None
            if rec.signer_key_id in self.revoked_keys:
                raise ConfigError(
                    f"utility record {path!r} is signed by revoked key {_shown_name(rec.signer_key_id)}; re-run "
                    "`qdrant-guard calibrate` with the guard's current signing key"
                )
            accepted = self.receipt_keys_for(pol)
            kid = rec.signer_key_id
            if pol.receipt_keys is not None and isinstance(kid, str) and kid not in accepted:
                names = [n for n, p in self.config.collections.items() if p is pol]
                where = (f"collection {', '.join(map(repr, names))}" if names
                         else "the unlisted collections ([default])")
                section = " and ".join(f"[collections.{_toml_key(n)}]" for n in names) or "[default]"
                own = _keys.key_id(self._signing_key.public_key())
                listed = sorted(k for k in accepted if k != own and k not in self.retired_keys)
                elsewhere = (" (receipts.trusted_keys lists it, which does not apply to a collection that sets "
                             "receipt_keys)" if kid in self.trusted_receipt_keys else "")
                raise ConfigError(
                    f"utility record {path!r} (the policy's {key} of {where}) is signed by {_shown_name(kid)}{elsewhere}, "
                    f"and {where} accepts utility records, as receipts, only from the guard's key and the keys "
                    f"its receipt_keys lists ({', '.join(listed) or 'none'}); re-run `qdrant-guard calibrate` "
                    f"with the guard's signing key or a listed key, or add the signer's .pub to receipt_keys "
                    f"in {section} (the guard's own earlier signing key goes in receipts.retired_keys instead)"
                )
            if not verify_utility_record(rec, accepted):
                trusted = ("the guard's keys and receipts.trusted_keys" if pol.receipt_keys is None
                           else "the guard's keys and the collection's receipt_keys")
                signer = (f"signed by {_shown_name(kid)}" if isinstance(kid, str) and kid
                          else "unsigned: it names no signer key")
                raise ConfigError(
                    f"utility record {path!r} ({signer}) does not verify against the trusted keys "
                    f"({trusted}; the guard's keys are its signing_key and receipts.retired_keys); re-run "
                    "`qdrant-guard calibrate` with the guard's signing key, or, if the record was signed by the "
                    "guard's earlier signing key, list that key's .pub in receipts.retired_keys"
                )
            cache[slot] = rec
        found: UtilityRecord = cache[slot]
        return found

    def utility_record(self, pol: CollectionPolicy) -> UtilityRecord | None:
        """The verified record of the policy's ``utility.record``, or None when it is unset."""
        path = pol.utility.record
        return None if path is None else self._load_utility_record(path, "utility.record", pol)

    def utility_records(self, pol: CollectionPolicy) -> dict[str, UtilityRecord]:
        """The verified records of the policy's ``utility.records``, by vector name ({} when unset).

        Every record is read and checked at once, so that a wrong one fails the first write to
        the collection rather than the first write of its vector.

        Raises:
            ConfigError: a record cannot be read, does not verify, or was calibrated for another
                named vector than the one it is listed under.
        """
        out: dict[str, UtilityRecord] = {}
        for name, path in pol.utility.records.items():
            rec = self._load_utility_record(path, f"utility.records.{name}", pol)
            why = rec.vector_name_mismatch(name)
            if why is not None:
                assert rec.vector_name is not None  # only a record naming a vector mismatches
                raise ConfigError(
                    f"utility record {path!r}, listed as utility.records.{name}, cannot vouch for vector "
                    f"{name!r}: {why}, so it measured another vector's embeddings; list it under "
                    f"the vector it measured ({_toml_key(rec.vector_name)} = {_toml_str(path)}), or calibrate vector "
                    f"{name!r} (`qdrant-guard calibrate ... --vector-name {shell_quote(name)} --out FILE`) and list "
                    f"that record as {_toml_key(name)} = \"FILE\""
                )
            out[name] = rec
        return out

    def utility_hash(self, pol: CollectionPolicy, vector_names: Any = ()) -> Any:
        """The ``retrieval_utility_guard_hash`` recorded in a write's manifest.

        ``utility.record``: its record's hash (None without one). ``utility.records``: a dict of
        each name in ``vector_names`` (the vectors the write noised or took a receipt for) to
        the hash of its record (None: it has none), or None when ``vector_names`` is empty.
        """
        if pol.utility.records:
            recs = self.utility_records(pol)
            if not vector_names:
                return None
            return {n: (recs[n].digest if n in recs else None) for n in sorted(vector_names)}
        rec = self.utility_record(pol)
        return None if rec is None else rec.digest

    def utility_refusal(self, pol: CollectionPolicy, *, mechanism: str, epsilon: float, radius: float,
                        delta: float, clip_norm: float | None, dim: int, vector_name: str,
                        scale: float | None = None, distance: str | None = None,
                        collection: str | None = None) -> str | None:
        """Why the utility record does not allow writes of ``vector_name`` with this noise, or None.

        None as well when the policy has no record or ``enforce`` is false. The record must be
        one for this vector (``utility.records`` names it; a ``utility.record`` calibrated on a
        named vector vouches for that name only), calibrated for the policy's own mechanism,
        radius, delta and clip_norm, on the policy's metric at its k, on vectors of this ``dim``
        (records of version 2 on) compared by this ``distance`` (version 4 on), naming the model the policy
        declares for this vector (``utility.embedding_models``, else ``utility.embedding_model``)
        when it declares one, and must cover this level
        (:meth:`qdrant_guard.utility.UtilityRecord.level_refusal`). ``scale``: a receipt's noise
        scale, which must be its epsilon's calibrated one (the guard's own noise always is).
        ``collection``: the written collection's name, for the messages.
        """
        if not pol.utility.enforce:
            return None
        u = pol.utility
        shown = vector_name or "<unnamed>"
        if u.records:
            rec = self.utility_records(pol).get(vector_name)
            if rec is None:
                if not vector_name:
                    return (f"the collection's unnamed vector has no utility record: utility.records lists "
                            f"named vectors only ({', '.join(sorted(u.records))}); the unnamed vector's record is "
                            "utility.record, set instead of utility.records")
                return (f"vector {vector_name!r} has no utility record: utility.records lists "
                        f"{', '.join(repr(n) for n in sorted(u.records))}; calibrate it (`qdrant-guard calibrate "
                        f"--collection STAGING --queries FILE --key GUARD_KEY --vector-name {shell_quote(vector_name)} "
                        f"--out FILE` with --path or --url and this policy's noise parameters) and add "
                        f"{_toml_key(vector_name)} = \"FILE\" to utility.records")
            path: str | None = u.records[vector_name]
        else:
            rec = self.utility_record(pol)
            if rec is None:
                return None
            path = u.record
            why = rec.vector_name_mismatch(vector_name)
            if why is not None:
                if not vector_name:
                    return (f"utility record {path!r} (utility.record) cannot vouch for the collection's unnamed "
                            f"vector: {why}; calibrate the unnamed vector (`qdrant-guard calibrate ... --out FILE` "
                            "without --vector-name) and set utility.record to that record")
                return (f"utility record {path!r} (utility.record) cannot vouch for vector {shown!r}: {why}; "
                        f"calibrate vector {shown!r} (`qdrant-guard calibrate ... --vector-name "
                        f"{shell_quote(vector_name)} --out FILE`) and give each named vector its record in "
                        "utility.records instead of utility.record")
        unmodelled = _record_model_refusal(rec, path, *u.declared_model(vector_name), collection)
        if unmodelled is not None:
            return unmodelled
        stale = _record_age_refusal(rec, path, u.max_age_s, self.clock())
        if stale is not None:
            return stale
        small = None if u.allow_small_records else (
            rec.small_collection_refusal(path) or rec.few_queries_refusal(path, u.min_queries))
        if small is not None:
            return small
        if rec.metric != u.metric or rec.k != u.k:
            # A record of nDCG@10 or recall@50 can show a smaller drop than the recall@10 the
            # policy limits, so it cannot vouch for it.
            return (f"utility record {path!r} measured {rec.metric}@{rec.k}, but the policy limits "
                    f"the drop of {u.metric}@{u.k}; re-run `qdrant-guard calibrate` with --metric "
                    f"{u.metric} --k {u.k}, or set utility.metric = {rec.metric!r} and utility.k = "
                    f"{rec.k} if that is the metric to hold. {rec.frontier(u.max_recall_drop)}")
        if rec.dim is not None and rec.dim != dim:
            return (f"utility record {path!r} was calibrated on {rec.dim}-d vectors, but this write's "
                    f"vectors have {dim} dimensions: the same noise costs them a different drop; re-run "
                    "`qdrant-guard calibrate` on a collection embedded with this collection's model")
        if rec.distance is not None and distance is not None and rec.distance != distance:
            # Noise moves a Dot or Euclid ranking (norms count) otherwise than a Cosine one.
            return (f"utility record {path!r} was calibrated on a vector compared by {rec.distance}, but vector "
                    f"{shown!r} of this collection is compared by {distance}: the same noise costs it a different "
                    f"drop; re-run `qdrant-guard calibrate` on a staging collection whose vector has distance "
                    f"{distance}")
        n = pol.noise
        mismatch = rec.parameter_mismatch(mechanism=n.mechanism, radius=n.radius, delta=n.delta,
                                          clip_norm=n.clip_norm)
        if mismatch is not None:
            clip = f" --clip-norm {'none' if n.clip_norm is None else repr(n.clip_norm)}"
            return (f"utility record {path!r} was not calibrated for this policy's noise: "
                    f"policy {mismatch}; re-run `qdrant-guard calibrate` for this policy (--mechanism "
                    f"{n.mechanism} --radius {n.radius!r} --delta {n.delta!r}{clip} --metric {u.metric} "
                    f"--k {u.k} --epsilons including {n.epsilon!r}). {rec.frontier(u.max_recall_drop)}")
        return rec.level_refusal(mechanism=mechanism, epsilon=epsilon, radius=radius, delta=delta,
                                 clip_norm=clip_norm, max_drop=pol.utility.max_recall_drop,
                                 scale=scale, dim=dim)

    # -- operations spanning collections --------------------------------------------------
    def op_update_collection_aliases(self, method: str, args: dict[str, Any]) -> Op:
        """An alias names a collection under another name: it must carry the same policy.

        Creating and renaming are checked alike (a renamed alias takes the policy of its new name).
        Deleting an alias of a sensitive collection exposes nothing but cuts off everyone who
        reaches the collection by that name, so it needs the access deleting the collection needs.
        Any other operation type is refused.
        """
        if self.transparent:
            return (yield Call(method, args))
        aliases: dict[str, str] | None = None
        # What the earlier actions of this call made of each alias name (None: deleted or renamed
        # away): Qdrant applies them in order, so a rename or deletion acts on the aliases as they
        # stand then, not as get_aliases listed them before the call.
        changed: dict[str, str | None] = {}
        # Written only once every action has passed (like a batch's acceptances); PUBLIC targets
        # pass unrecorded, as other calls on PUBLIC collections do.
        accepted: list[tuple[str, str]] = []
        # Deletions of aliases the principal may not see (names_visible), or that get_aliases did
        # not list, left out of the call.
        skipped: set[int] = set()
        # The first rename of an alias the principal may not see, or that get_aliases did not list:
        # (its index, its name, how many acceptances the actions before it made: only those
        # actions are sent, so only they are audited).
        hidden_rename: tuple[int, str, int] | None = None
        for i, action in enumerate(args["change_aliases_operations"]):
            if isinstance(action, models.CreateAliasOperation):
                collection, alias = action.create_alias.collection_name, action.create_alias.alias_name
            elif isinstance(action, (models.RenameAliasOperation, models.DeleteAliasOperation)):
                old = (action.rename_alias.old_alias_name if isinstance(action, models.RenameAliasOperation)
                       else action.delete_alias.alias_name)
                # A name the principal may not see is answered as a missing alias from the policy
                # alone, before Qdrant is asked: looking it up first made a hidden alias and a
                # hidden name no alias has take two paths (a deletion sent for one only).
                hidden = old not in changed and not self.name_visible(old)
                if not hidden and aliases is None and old not in changed:
                    try:
                        resp = yield Call("get_aliases", {})
                    except Exception as exc:
                        # Nothing is changed, but an attempted alias change is an admin act worth a trace.
                        self.record(self.decision(
                            method, None, None, Verdict.QDRANT_ERROR,
                            f"Qdrant failed before the guard could decide: get_aliases raised "
                            f"{type(exc).__name__} (raised to the caller; its message is not logged); "
                            "no alias was changed",
                            details={"method": "get_aliases", "error": type(exc).__name__}))
                        raise
                    aliases = {a.alias_name: a.collection_name for a in resp.aliases}
                found = None if hidden else changed[old] if old in changed else (aliases or {}).get(old)
                if found is None and not hidden:
                    if old in changed:
                        continue  # deleted or renamed away earlier in this call: Qdrant reports it
                    # Not an alias when the guard looked, so nothing above checked it: sent on, the
                    # action would apply to an alias of that name made since (a rename moving it,
                    # unchecked, under another name's policy). Answered as Qdrant answers a missing
                    # alias, without sending it.
                    if isinstance(action, models.RenameAliasOperation):
                        hidden_rename = hidden_rename or (i, old, len(accepted))
                    else:
                        skipped.add(i)
                    continue
                if found is None or (old not in changed and not self.name_visible(found)):
                    # names_visible = "accessible": answered as for an alias that does not exist.
                    # Refusing would say that it exists, and name the collection it points to.
                    self._hidden_name(method, old, "as a missing alias")
                    if isinstance(action, models.RenameAliasOperation):
                        # Checked on, as a missing alias's rename is: raising here would let a
                        # later operation's refusal, or Qdrant's error for an earlier one, tell
                        # the two apart.
                        hidden_rename = hidden_rename or (i, old, len(accepted))
                    else:
                        skipped.add(i)  # deleting a missing alias changes nothing
                    continue
                collection = found
                changed[old] = None
                if isinstance(action, models.DeleteAliasOperation):
                    target = self.policy(collection)
                    if not target.is_public:
                        self.require_access(method, collection, target, "admin")
                        accepted.append((collection, f"alias {old!r} deleted"))
                    continue
                alias = action.rename_alias.new_alias_name
            else:
                raise UnsupportedWriteError(
                    f"{method}: change_aliases_operations[{i}] is a {type(action).__name__}; pass "
                    "models.CreateAliasOperation, RenameAliasOperation or DeleteAliasOperation")
            self._check_alias(method, collection, alias)
            changed[alias] = collection
            if not self.policy(collection).is_public:
                accepted.append((collection, f"alias {alias!r} now names it"))
        self.forget_shape()
        ops = args["change_aliases_operations"]
        if hidden_rename is not None:
            first, hidden_old, before = hidden_rename
            return (yield from self._hidden_rename(method, args, ops, skipped, accepted[:before], first, hidden_old))
        if skipped:
            kept = [a for i, a in enumerate(ops) if i not in skipped]
            if not kept:
                return True  # what Qdrant answers for deleting aliases that do not exist
            args = {**args, "change_aliases_operations": kept}
        return (yield from self._send_alias_changes(method, args, accepted))

    def _send_alias_changes(self, method: str, args: dict[str, Any], accepted: list[tuple[str, str]]) -> Op:
        """Send an alias change whose actions passed, auditing those on sensitive collections."""
        if not accepted:
            return (yield Call(method, args))
        for collection, what in accepted:
            self.record(self.decision(method, collection, self.policy(collection), Verdict.ALLOW,
                                      f"admin access granted: {what}"))
        return (yield from self.forward(method, accepted[-1][0], self.policy(accepted[-1][0]), Call(method, args)))

    def _hidden_rename(self, method: str, args: dict[str, Any], ops: list[Any], skipped: set[int],
                       accepted: list[tuple[str, str]], first: int, old: str) -> Op:
        """Answer a change whose action ``first`` renames hidden alias ``old`` as Qdrant answers one
        renaming a missing alias: it applies the actions in order and stops at the first that
        fails, which is an earlier one or that rename. So the earlier actions are sent, followed
        by the rename of an alias that cannot exist; its error is answered as ``old``'s.
        ``accepted``: the acceptances of the actions before ``first`` (the later ones are never sent,
        so they are not audited as granted)."""
        missing = missing_alias_error(old, remote=self.shared.get("remote", False))
        earlier = [a for i, a in enumerate(ops) if i < first and i not in skipped]
        if not earlier:
            raise missing
        probe = f"qdrant-guard-missing-alias-{secrets.token_hex(16)}"
        sent = {**args, "change_aliases_operations": [*earlier, models.RenameAliasOperation(
            rename_alias=models.RenameAlias(old_alias_name=probe, new_alias_name=probe + "-renamed"))]}
        try:
            yield from self._send_alias_changes(method, sent, accepted)
        except Exception as exc:
            if probe in str(exc):
                raise missing from None
            raise
        raise missing  # Qdrant renamed an alias no one made: answered as the rename it stands for

    def _check_alias(self, method: str, collection: str, alias: str) -> None:
        target = self.policy(collection)
        if target.is_public:
            try:
                named = self.policy(alias)
            except ConfigError:
                return  # unlisted = "refuse": nothing can be written under that name
            if not named.is_public and (named.owner is not None or named.writers):
                # Writes under the alias name are decided by its (sensitive) policy, raw in-boundary
                # vectors and unredacted text included, but would land where anyone reads them.
                raise self.refuse(self.decision(
                    method, alias, named, Verdict.REFUSED_CROSS_BOUNDARY,
                    f"alias {alias!r} would put {named.sensitivity.value} collection name {alias!r} on "
                    f"PUBLIC collection {collection!r}, so writes made under {alias!r}'s policy would be "
                    f"readable by anyone; give the alias a name whose policy is PUBLIC, or create "
                    f"{alias!r} as its own collection",
                ))
            return
        self.require_access(method, collection, target, "admin")
        if self.config.collections.get(alias) != target:
            raise self.refuse(self.decision(
                method, collection, target, Verdict.REFUSED_CROSS_BOUNDARY,
                f"alias {alias!r} would expose {target.sensitivity.value} collection "
                f"{collection!r} under a name whose policy differs; add "
                f"[collections.{_toml_key(alias)}] with the same policy first",
            ))

    def op_migrate(self, method: str, args: dict[str, Any]) -> Op:
        """Migration copies raw vectors out: the caller must own every sensitive collection moved."""
        names = args.get("collection_names")
        if self.transparent:
            return (yield Call(method, args))
        listed = names is None
        if names is None:
            resp = yield Call("get_collections", {})
            names = [c.name for c in resp.collections]
        self._require_admin_of_all(method, list(names), listed)
        return (yield from self._audited_multi(method, list(names), "migration", args))

    def _audited_multi(self, method: str, names: list[str], what: str, args: dict[str, Any]) -> Op:
        """Record an allowed call over several collections (when any is sensitive), then send it."""
        sensitive = [n for n in names if not self.policy(n).is_public]
        if not sensitive:
            return (yield Call(method, args))
        self.record(self.decision(method, None, None, Verdict.ALLOW,
                                  f"{what} of {len(names)} collection(s) allowed: owner of every sensitive one",
                                  details={"collections": sensitive}))
        return (yield from self.forward(method, None, None, Call(method, args)))

    def op_create_full_snapshot(self, method: str, args: dict[str, Any]) -> Op:
        """A full snapshot holds every collection's raw vectors: owner of all sensitive ones only."""
        if self.transparent:
            return (yield Call(method, args))
        resp = yield Call("get_collections", {})
        names = [c.name for c in resp.collections]
        self._require_admin_of_all(method, names, True)
        if all(self.readable(n) for n in names):
            return (yield from self._audited_multi(method, names, "full snapshot", args))
        # An administrator of every sensitive collection who may not read one (a writer of a
        # collection without an owner): its size is all collections' storage, withheld as
        # list_full_snapshots withholds it.
        self.record(self.decision(method, None, None, Verdict.ALLOW,
                                  f"full snapshot of {len(names)} collection(s) allowed: owner of every sensitive "
                                  "one; its size is withheld, as the principal may not read every collection",
                                  details={"collections": [n for n in names if not self.policy(n).is_public],
                                           "hidden": ["size"]}))
        snap = yield from self.forward(method, None, None, Call(method, args))
        return sizes_withheld(snap)

    def readable(self, name: str) -> bool:
        """Whether the principal may read collection ``name`` (False for one unlisted under
        ``unlisted = "refuse"``, which no principal reads)."""
        try:
            pol = self.policy(name)
        except ConfigError:
            return False
        return pol.is_public or pol.may_read(self.boundary())

    def op_list_full_snapshots(self, method: str, args: dict[str, Any]) -> Op:
        """Full snapshots' names, times and checksums for any principal; their ``size`` only for
        one who may read every collection.

        A full snapshot's size is the storage of all collections: with the sizes of the collections
        a principal reads, it measures the others', whose counts get_collection withholds. To
        anyone else each ``size`` is 0 (the model requires a number)."""
        if self.transparent:
            return (yield Call(method, args))
        resp = yield Call("get_collections", {})
        whole = all(self.readable(c.name) for c in resp.collections)
        self.record(self.decision(
            method, None, None, Verdict.ALLOW,
            "full snapshot list allowed" + ("" if whole else ": their sizes are withheld, as the principal may not "
                                            "read every collection they hold"),
            details={} if whole else {"hidden": ["size"]}))
        data = yield from self.forward(method, None, None, Call(method, args))
        if whole or not data:
            return data
        return sizes_withheld(data)

    def op_cluster_telemetry(self, method: str, args: dict[str, Any]) -> Op:
        """Cluster telemetry (server only) with the shard details of readable collections only.

        Each collection's shards list its replicas' point and vector counts, payload and vector
        sizes and shard keys: what get_collection withholds from a principal who may not read
        the collection. Their entries keep only the name (get_collections lists it anyway)."""
        if self.transparent:
            return (yield Call(method, args))
        hidden = ("; collections whose names it may not see are left out (names_visible = \"accessible\")"
                  if self.hides_names() else "")
        self.record(self.decision(method, None, None, Verdict.ALLOW,
                                  "cluster telemetry allowed: shards, transfers and reshardings of the collections "
                                  "the principal may not read are withheld" + hidden))
        data = yield from self.forward(method, None, None, Call(method, args))
        return telemetry_for(data, self.readable, self.name_visible)

    def _require_admin_of_all(self, method: str, names: list[str], listed: bool) -> None:
        """Refuse ``method`` unless the principal administers every collection of ``names``.
        ``listed``: the names come from the store (get_collections), not from the caller; under
        ``names_visible = "accessible"`` the refusal then names none the principal may not see."""
        if listed and self.hides_names():
            hidden = [n for n in names if not self.name_visible(n)]
            if hidden:  # never administered: visible names include every one the principal administers
                # Neither named nor counted: how many there are is the store's, not the policy's.
                raise self.refuse(self.decision(
                    method, None, None, Verdict.REFUSED_CROSS_BOUNDARY,
                    f"{method} acts on every collection in the store, and the principal may not administer "
                    "some of them (which, and how many, is not shown: names_visible = \"accessible\"); "
                    "run it as the operator, with a client constructed without guard=",
                    details={"names_visible": "accessible", "hidden": hidden[:MAX_IDS_IN_RECORD],
                             "hidden_count": len(hidden)}))
        for n in names:
            self.require_access(method, n, self.policy(n), "admin")


__all__ = ["Guard"]
