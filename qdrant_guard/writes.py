"""Guarded writes of vectors: receipts, noise on write, in-boundary raw vectors, atomic refusal."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Collection, Iterable, Mapping

import numpy as np
from qdrant_client.http import models

from . import noise as _noise
from .decision import Decision, Verdict
from .errors import (AuditError, ConfigError, GuardArgumentTypeError, GuardRefusal, InvalidVectorError,
                     QdrantGuardError, ReceiptError)
from .batchplaces import operation_place, placed
from .builtpoints import _point, _point_vectors, _update_point
from .filterpaths import unevaluable_reason
from .filterroots import operation_filter_roots
from .payloadops import _quotable, _quote, _selector_ids
from .pipeline import Call, Op, mark_audited
from .policy import CollectionPolicy, toml_str
from .receipts import (
    PAYLOAD_CONTAINER_VERSION,
    RECEIPT_KEY,
    normalize_point_id,
    issue_receipts_rows,
    plain_receipt,
    mechanism_mismatch,
    model_mismatch,
    noise_shortfall,
    receipts_for_payload,
    receipts_from_payload,
    stored_receipts,
    stored_form_batch,
    verify_receipt,
)
from .sources import path_head, restricts_sources
from .textguard import TextOps, selection_of
from .utility import embedder_model_name, same_model
from .vectors import UNNAMED, CollectionShape, as_dense, split_vector_struct
# Its public names (points_from_any, points_from_columns, vector_updates_from_any) still import from here.
from .writepoints import _operation_points, points_from_any, points_from_columns, vector_updates_from_any
from .writereceipts import _altered_by_storage, _batch_digest, _container

_DIRECTIVES = {
    Verdict.NOISE_REQUIRED: (
        "sensitive vectors need a valid reconstruction-resistance receipt: noise them with "
        "qdrant_guard.noise.privatize and sign a receipt (docs/receipt-format.md, 'Writing with a "
        "receipt of your own'), enable noise_on_write in the policy, or write from a principal of "
        "the owner boundary with raw_in_boundary = true"
    ),
    Verdict.INVALID_RECEIPT: (
        "the receipt does not verify for this vector, collection and point (forged, altered, "
        "replayed or signed by an untrusted key); re-noise the vector and sign a fresh receipt "
        "with a key listed in receipts.trusted_keys (or in the collection's receipt_keys, when it sets them)"
    ),
    Verdict.EPSILON_ABOVE_CEILING: (
        "the receipt's epsilon is above the class ceiling; re-noise with a smaller epsilon "
        "(stronger noise) or raise epsilon_ceiling in the policy"
    ),
    Verdict.UTILITY_DEGRADED: (
        "the utility record does not show that this noise keeps the retrieval drop within the "
        "policy's max_recall_drop; use a measured passing epsilon with the record's noise "
        "parameters, or re-run `qdrant-guard calibrate` for this policy"
    ),
}


# What the guard raises when it refuses a write's input (a malformed vector, point or argument);
# raised before anything is sent, each is audited once (see WriteOps._audit_input_errors).
_INPUT_ERRORS = (QdrantGuardError, TypeError, ValueError)
_REASON = re.compile(r"[a-z0-9_]{1,40}")
_ROW = re.compile(r"\brow (\d+)")
# The commitment grid holds |v| < 2048 (receipts.commitment_bytes).
_GRID_LIMIT = 2048.0


def _located(exc: BaseException, point_id: Any, vector_name: str | None) -> BaseException:
    """``exc``, marked (once, innermost first) with the point and vector it was raised for."""
    if not hasattr(exc, "_qg_point"):
        exc._qg_point = point_id  # type: ignore[attr-defined]
        exc._qg_vector = vector_name  # type: ignore[attr-defined]
    return exc


@dataclass(slots=True)
class _Slot:
    point: int
    name: str
    vector: np.ndarray
    #: The guard embedded it (a models.Document): its receipt names the embedder's model.
    embedded: bool = False


@dataclass
class PreparedPoints:
    """Points ready for Qdrant, with what the decision needs to record."""

    points: list[models.PointStruct]
    verdict: Verdict
    epsilon: float | None = None
    receipt_digest: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    #: Vectors noised or taken under a receipt: whose utility records the manifest names.
    utility_names: frozenset[str] = frozenset()


# InvalidVectorError reasons that may come from a stale cached layout rather than from the point.
_LAYOUT_REASONS = frozenset({"unknown_vector_name", "wrong_dimension", "sparse_vector", "multivector"})


class WriteOps(TextOps):
    """The write half of the pipeline (mixed into :class:`qdrant_guard.guard.Guard`)."""

    # -- operations -------------------------------------------------------------------------
    def op_upsert(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pub = self.public_policy(args)
        if pub is not None:
            return (yield from self._public_write(method, name, pub, lambda: Call(method, {
                **args, "points": self.public_points(method, name, pub, self._upsert_points(
                    method, name, pub, args["points"]))})))
        pol = self.policy(name)
        if pol.is_public:
            return (yield Call(method, args))
        return (yield from self._audit_input_errors(method, name, pol, self._upsert(method, name, pol, args)))

    def _upsert(self, method: str, name: str, pol: CollectionPolicy, args: dict[str, Any]) -> Op:
        filters = self._screen_write(method, name, pol, args)
        self._refuse_unevaluable_update_filter(method, name, pol, args.get("update_filter"))
        points = self._upsert_points(method, name, pol, args["points"])
        prepared = yield from self.prepare_points(method, name, pol, points)
        self._record_write(method, name, pol, prepared, filters)
        return (yield from self.forward(method, name, pol, Call(method, {**args, "points": prepared.points})))

    def op_upload_points(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pub = self.public_policy(args)
        if pub is not None:
            return (yield from self._public_write(method, name, pub, lambda: Call(method, {
                **args, "points": self.public_points(method, name, pub, points_from_any(list(args["points"])))})))
        pol = self.policy(name)
        if pol.is_public:
            return (yield Call(method, args))
        return (yield from self._audit_input_errors(method, name, pol, self._upload_points(method, name, pol, args)))

    def _upload_points(self, method: str, name: str, pol: CollectionPolicy, args: dict[str, Any]) -> Op:
        # The whole iterable is checked before anything is sent: a refusal leaves Qdrant unchanged.
        filters = self._screen_write(method, name, pol, args)
        self._refuse_unevaluable_update_filter(method, name, pol, args.get("update_filter"))
        points = points_from_any(list(args["points"]))
        prepared = yield from self.prepare_points(method, name, pol, points)
        self._record_write(method, name, pol, prepared, filters)
        return (yield from self.forward(method, name, pol, Call(method, {**args, "points": prepared.points})))

    def op_upload_collection(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        forwarded = {k: args[k] for k in ("batch_size", "parallel", "method", "max_retries", "wait",
                                           "shard_key_selector", "update_filter", "update_mode") if k in args}
        pub = self.public_policy(args)
        if pub is not None:
            return (yield from self._public_write(method, name, pub, lambda: Call("upload_points", {
                "collection_name": name, "points": self.public_points(method, name, pub, points_from_columns(
                    args["vectors"], args.get("payload"), args.get("ids"))), **forwarded})))
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        return (yield from self._audit_input_errors(method, name, pol, self._upload_collection(
            method, name, pol, args, forwarded)))

    def _upload_collection(self, method: str, name: str, pol: CollectionPolicy, args: dict[str, Any],
                           forwarded: dict[str, Any]) -> Op:
        filters = self._screen_write(method, name, pol, args)
        self._refuse_unevaluable_update_filter(method, name, pol, args.get("update_filter"))
        points = points_from_columns(args["vectors"], args.get("payload"), args.get("ids"))
        prepared = yield from self.prepare_points(method, name, pol, points)
        self._record_write(method, name, pol, prepared, filters)
        return (yield from self.forward(method, name, pol, Call(
            "upload_points", {"collection_name": name, "points": prepared.points, **forwarded})))

    def op_update_vectors(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pub = self.public_policy(args)
        if pub is not None:
            return (yield from self._public_write(method, name, pub, lambda: Call(method, {
                **args, "points": self._public_vector_updates(method, name, pub, vector_updates_from_any(
                    args["points"]))})))
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        return (yield from self._audit_input_errors(method, name, pol, self._update_vectors(method, name, pol, args)))

    def _update_vectors(self, method: str, name: str, pol: CollectionPolicy, args: dict[str, Any]) -> Op:
        self._screen_write(method, name, pol, args)
        self._refuse_update_filter(method, name, pol, args.get("update_filter"))
        ops = yield from self.prepare_vector_updates(method, name, pol, vector_updates_from_any(args["points"]),
                                                     shard_key=args.get("shard_key_selector"))
        rest = {k: v for k, v in args.items() if k in ("wait", "ordering", "timeout")}
        results = yield from self.forward(method, name, pol, Call(
            "batch_update_points", {"collection_name": name, "update_operations": ops, **rest}))
        return results[0]

    def op_delete(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        filters = self._screen_write(method, name, pol, args)
        self.record(self.decision(method, name, pol, Verdict.ALLOW, "write access granted", details=filters))
        return (yield from self.forward(method, name, pol, Call(method, args)))

    def _screen_write(self, method: str, name: str, pol: CollectionPolicy, args: dict[str, Any]) -> dict[str, Any]:
        """The filter screen of a write (after its access check): the details for its allow entry."""
        self.require_access(method, name, pol, "write")
        return self.screen_write_filters(method, name, pol, args)  # type: ignore[attr-defined, no-any-return]

    def _refuse_unevaluable_update_filter(self, method: str, name: str, pol: CollectionPolicy,
                                          update_filter: Any) -> None:
        # Local mode evaluates an upsert's update_filter point by point, as it stores them: a key
        # that is no JSON path raised at the first existing point, after the new points before it
        # were stored (and the audit log said Qdrant failed, no point written).
        if update_filter is None:
            return
        unsendable = unevaluable_reason([("update_filter", update_filter)], remote=self.shared.get("remote", False),
                                        fails="at the first point that exists already, after storing the points before it",
                                        server_fails=" (the whole request)")
        if unsendable is not None:
            raise self.unsupported_write(method, name, pol, f"{method}: {unsendable}. Nothing was written")

    def op_batch_update_points(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        # The index of the operation being checked, which a refusal's message and audit entry name.
        at: list[int | None] = [None]
        pub = self.public_policy(args)
        if pub is not None:
            view = self.for_operations(at)

            def screened_call() -> Call:
                screened = []
                for j, op in enumerate(args["update_operations"]):
                    at[0] = j
                    try:
                        screened.append(view._public_operation(method, name, pub, op, f"update_operations[{j}]"))
                    except _INPUT_ERRORS as exc:
                        named = placed(exc, method, operation_place(op, j, exc), j)
                        if named is exc:
                            raise
                        raise named from exc
                at[0] = None
                return Call(method, {**args, "update_operations": screened})
            return (yield from view._public_write(method, name, pub, screened_call))
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        ops = args["update_operations"]
        view = self.for_operations(at)

        def place(exc: BaseException) -> BaseException:
            j = at[0]
            return exc if j is None else placed(exc, method, operation_place(ops[j], j, exc), j)

        return (yield from view._audit_input_errors(method, name, pol, view._batch_update(method, name, pol, args, at),
                                                    place))

    def _batch_update(self, method: str, name: str, pol: CollectionPolicy, args: dict[str, Any],
                      at: list[int | None]) -> Op:
        """The guarded batch; ``at[0]`` is the index of the operation being checked (None once all
        are), so that a refusal raised for it can name it (see :mod:`qdrant_guard.batchplaces`)."""
        out_ops: list[Any] = []
        # Index in out_ops of the result each caller operation gets (None: it expanded to nothing).
        positions: list[int | None] = []
        # Receipt containers written by earlier operations of this batch, by normalised point id:
        # later payload rewrites must carry these, not the ones stored before the batch.
        fresh: dict[str, Any] = {}
        # Points deleted earlier in the batch by id, and whether a delete by filter came earlier:
        # a later vector update must not name a point that will no longer exist (see
        # prepare_vector_updates).
        deleted: set[str] = set()
        deleted_by_filter = False
        # Points of a conditional upsert (update_filter, insert_only, update_only) earlier in the
        # batch: Qdrant may or may not apply it, so neither the stored nor the new receipts are
        # known to certify them, and a later operation that carries receipts must not name them.
        uncertain: dict[str, Any] = {}
        # The accepted operations' decisions, audited only once the whole batch is accepted: a
        # later operation's refusal sends nothing, so none of them was written. They keep the
        # batch's order ([delete 1, upsert 1] and [upsert 1, delete 1] end differently); a run of
        # payload and delete operations is one ALLOW, like the methods they stand for.
        accepted: list[Decision] = []
        others: dict[str, int] = {}
        # Top-level payload keys earlier operations may have written: a later payload rewrite
        # deletes them too (it deletes keys instead of writing the receipts back, see
        # PayloadOps._preserving_overwrite).
        written: set[str] = set()
        # Every operation's filters are screened before any is looked at (nothing is sent before a
        # refusal); what each one's screen reports goes into the entry of the run it belongs to.
        screened = []
        for i, op in enumerate(args["update_operations"]):
            at[0] = i
            found: dict[str, Any] = {}
            roots = list(operation_filter_roots(op, f"update_operations[{i}]"))
            self.screen_filters(method, name, pol, roots, found)  # type: ignore[attr-defined]
            unsendable = unevaluable_reason(roots, remote=self.shared.get("remote", False))
            if unsendable is not None:
                raise self.unsupported_write(method, name, pol, f"{method}: {unsendable}. Nothing was written")
            screened.append(found)
        run: dict[str, Any] = {}
        for j, (op, filters) in enumerate(zip(args["update_operations"], screened)):
            at[0] = j
            if others and isinstance(op, (models.UpsertOperation, models.UpdateVectorsOperation)):
                accepted.append(self._others_decision(method, name, pol, others, run))
                others, run = {}, {}
            if isinstance(op, models.UpsertOperation):
                inner = op.upsert
                pts = _operation_points(inner, f"update_operations[{j}]")
                if not pts:
                    # Qdrant fails an upsert of no point ("Empty update request") when it reaches
                    # it, after applying the batch's earlier operations.
                    raise self.unsupported_write(
                        method, name, pol,
                        f"{method}: update_operations[{j}], an Upsert in a batch on sensitive collection {name!r}, "
                        "names no point (an "
                        "empty point list); Qdrant would apply the batch up to it, then fail. Leave the "
                        "operation out, or give it its points. Nothing was written"
                    )
                prepared = yield from self.prepare_points(method, name, pol, pts)
                accepted.append(self._write_decision(method, name, pol, prepared, filters))
                conditional = inner.update_filter is not None or inner.update_mode not in (
                    None, models.UpdateMode.UPSERT)
                for p in prepared.points:
                    pid = normalize_point_id(p.id)
                    written.update(p.payload or ())
                    if conditional:
                        uncertain[pid] = p.id
                        fresh.pop(pid, None)
                    else:
                        fresh[pid] = (p.payload or {}).get(RECEIPT_KEY)
                        uncertain.pop(pid, None)
                    deleted.discard(pid)
                positions.append(len(out_ops))
                out_ops.append(models.UpsertOperation(upsert=models.PointsList(
                    points=prepared.points, shard_key=inner.shard_key,
                    update_filter=inner.update_filter, update_mode=inner.update_mode)))
            elif isinstance(op, models.UpdateVectorsOperation):
                uv = op.update_vectors
                self._refuse_update_filter(method, name, pol, uv.update_filter, f"update_operations[{j}]")
                if deleted_by_filter:
                    raise self.unsupported_write(
                        method, name, pol,
                        f"{method}: update_operations[{j}], a vector update after a delete by filter in the same "
                        "batch on sensitive "
                        f"collection {name!r}: the guard cannot tell which points will still exist, and "
                        "Qdrant would apply part of the update before failing on a deleted point, "
                        "without its receipts. Send the delete and the vector update as separate calls"
                    )
                updates = vector_updates_from_any(list(uv.points), f"update_operations[{j}].update_vectors.points")
                self._refuse_uncertain(method, name, pol, uncertain, [u.id for u in updates],
                                       f"a vector update (update_operations[{j}])")
                new = yield from self.prepare_vector_updates(method, name, pol, updates,
                                                             shard_key=uv.shard_key, fresh=fresh,
                                                             deleted=deleted, accepted=accepted)
                positions.append(len(out_ops))
                out_ops.extend(new)
            else:
                named: Any = None  # the ids a delete names, None when it selects by filter
                if isinstance(op, models.DeleteOperation) and isinstance(op.delete, models.PointIdsList):
                    named = op.delete.points
                elif isinstance(op, models.DeleteVectorsOperation):
                    named = op.delete_vectors.points
                if named is not None and not named:
                    # Qdrant fails an empty id list, after applying the batch's earlier operations.
                    raise self.unsupported_write(
                        method, name, pol,
                        f"{method}: update_operations[{j}], a {type(op).__name__.removesuffix('Operation')} in a "
                        f"batch on sensitive collection {name!r}, names no point (an empty id list); Qdrant would apply the batch "
                        "up to it, then fail. Leave the operation out, or name its points. Nothing was written"
                    )
                if isinstance(op, models.DeleteOperation):
                    if isinstance(op.delete, models.PointIdsList):
                        for pid in map(normalize_point_id, op.delete.points):
                            deleted.add(pid)
                            fresh.pop(pid, None)
                            uncertain.pop(pid, None)
                    else:
                        deleted_by_filter = True
                elif isinstance(op, (models.OverwritePayloadOperation, models.ClearPayloadOperation,
                                     models.DeleteVectorsOperation)):
                    selector: Any
                    if isinstance(op, models.OverwritePayloadOperation):
                        what = "payload overwrite"
                        selector = (op.overwrite_payload.points if op.overwrite_payload.points is not None
                                    else op.overwrite_payload.filter)
                    elif isinstance(op, models.ClearPayloadOperation):
                        what, selector = "payload clear", op.clear_payload
                    else:
                        what = "vector deletion"
                        selector = (op.delete_vectors.points if op.delete_vectors.points is not None
                                    else op.delete_vectors.filter)
                    if out_ops and isinstance(selector, (models.Filter, models.FilterSelector)):
                        # The guard resolves the filter against the store as it is before the batch
                        # (to carry each point's receipt along, or drop the deleted vectors' ones).
                        raise self.unsupported_write(
                            method, name, pol,
                            f"{method}: update_operations[{j}], a {what} by filter after other operations in "
                            "the same batch on "
                            f"sensitive collection {name!r}: the guard resolves the filter to point ids before "
                            "the batch runs, and the earlier operations change which points it matches. Send "
                            "it as its own call, or first in the batch. Nothing was written"
                        )
                    ids = _selector_ids(selector)
                    if isinstance(op, models.DeleteVectorsOperation):
                        if deleted_by_filter and ids:
                            raise self.unsupported_write(
                                method, name, pol,
                                f"{method}: update_operations[{j}], a vector deletion of point(s) {ids} after a "
                                "delete by filter in the "
                                f"same batch on sensitive collection {name!r}: the guard cannot tell which of them "
                                "will still exist, and Qdrant would delete the others' vectors, then fail on a "
                                "deleted point before their receipts are dropped. Send the delete and the vector "
                                "deletion as separate calls. Nothing was written"
                            )
                        yield from self._refuse_unknown_vector_names(method, name, pol, op.delete_vectors.vector,
                                                                     f"update_operations[{j}], a vector deletion")
                    self._refuse_uncertain(method, name, pol, uncertain, ids, f"a {what} (update_operations[{j}])")
                    gone = [pid for pid in ids if normalize_point_id(pid) in deleted]
                    if gone:  # Qdrant would fail on them after applying the earlier operations
                        raise self.unsupported_write(
                            method, name, pol,
                            f"{method}: update_operations[{j}], a {what} of point(s) {gone} deleted earlier in the "
                            "same batch "
                            f"on sensitive collection {name!r} would fail half applied. Leave their ids out. "
                            "Nothing was written"
                        )
                new = yield from self.payload_operation(method, name, pol, op, fresh, written, deleted,
                                                        where=f"update_operations[{j}]")
                written.update(_keys_written(op))
                for sent in new:  # the keys as stored (a redacted key is not the caller's)
                    written.update(_keys_written(sent))
                out_ops.extend(new)
                positions.append(len(out_ops) - 1 if new else None)
                kind = type(op).__name__.removesuffix("Operation")
                others[kind] = others.get(kind, 0) + 1
                for key, items in filters.items():
                    run.setdefault(key, []).extend(items)
        at[0] = None
        if others:
            accepted.append(self._others_decision(method, name, pol, others, run))
        for decision in accepted:
            self.record(decision)
        results = (yield from self.forward(method, name, pol, Call(method, {**args, "update_operations": out_ops}))
                   ) if out_ops else []
        # An operation that matched no point sends nothing; it shares the outcome of the request.
        nothing = results[-1] if results else self.unsent_result(args)  # type: ignore[attr-defined]
        return [self.writer_answer(pol, results[i] if i is not None else nothing)  # type: ignore[attr-defined]
                for i in positions]

    def _public_write(self, op: str, name: str, pol: CollectionPolicy, screened: Callable[[], Call]) -> Op:
        """A write to a PUBLIC collection: the call ``screened`` builds (its input read and its text
        screened), sent, with the guard's refusal of that input audited as on a sensitive
        collection (an object or a dict where a point belongs was refused unaudited there)."""
        def send() -> Op:
            return (yield screened())
        return (yield from self._audit_input_errors(op, name, pol, send()))

    def _audit_input_errors(self, op: str, name: str, pol: CollectionPolicy, inner: Op,
                            place: Callable[[BaseException], BaseException] | None = None) -> Op:
        """``inner`` (a write, up to its call to Qdrant), with a refusal of its input that no
        decision audited yet (an InvalidVectorError, a malformed point or argument: raised by the
        guard, so before anything is sent) audited as UNSUPPORTED_WRITE before it propagates,
        unchanged. An error Qdrant raised (thrown in at a :class:`Call`) is passed on as it is:
        forward() audits the ones after a sensitive collection's decision (a PUBLIC collection's
        writes have none).

        ``place`` (a batch's): the error to raise instead of one the guard raised (its embedder's
        included; not Qdrant's, thrown in at a :class:`Call`), e.g. the same naming its operation."""
        thrown: BaseException | None = None
        try:
            request = next(inner)
            while True:
                try:
                    result = yield request
                except BaseException as exc:
                    thrown = exc if isinstance(request, Call) else None
                    request = inner.throw(exc)
                else:
                    thrown = None
                    request = inner.send(result)
        except StopIteration as stop:
            return stop.value
        except _INPUT_ERRORS as exc:
            # A GuardArgumentTypeError is a ConfigError too (for guard=/principal=), but here it is
            # the write's input that is wrong, and that refusal is audited.
            if not (exc is thrown or getattr(exc, "_qg_audited", False)
                    or isinstance(exc, (GuardRefusal, AuditError))
                    or (isinstance(exc, ConfigError) and not isinstance(exc, GuardArgumentTypeError))):
                self._record_input_refusal(op, name, pol, exc)
            if place is not None and exc is not thrown:
                named = place(exc)
                if named is not exc:
                    raise named from exc
            raise

    def _record_input_refusal(self, op: str, name: str, pol: CollectionPolicy, exc: BaseException) -> None:
        """Audit the refusal of a write's input. The record names the method, the error type, a
        fixed reason word and the point and vector where known, never the message: it can quote
        vector values or payload text."""
        reason = getattr(exc, "reason", None) if isinstance(exc, InvalidVectorError) else None
        if not (isinstance(reason, str) and _REASON.fullmatch(reason)):
            reason = "invalid_input"
        pid = getattr(exc, "_qg_point", None)
        vname = getattr(exc, "_qg_vector", None)
        at = "" if pid is None else f" at point {pid!r}"
        if pid is not None and isinstance(vname, str):
            at += f", vector {vname or '<unnamed>'!r}"
        details: dict[str, Any] = {"error": type(exc).__name__, "reason": reason}
        if isinstance(vname, str):
            details["vector_name"] = vname
        self.record(self.decision(
            op, name, pol, Verdict.UNSUPPORTED_WRITE,
            f"{op}: the guard refused the call's input ({type(exc).__name__}: {reason}{at}) before sending "
            "anything; the error raised to the caller names the fix. Nothing was written",
            point_ids=[] if pid is None else [pid], details=details,
        ))
        mark_audited(exc)

    def _refuse_unknown_vector_names(self, op: str, name: str, pol: CollectionPolicy, names: Iterable[str],
                                     what: str = "a vector deletion") -> Op:
        """Refuse a vector deletion naming a vector the collection does not have (a generator: it
        may read the layout, again once when the cached one lacks a name). Qdrant checks the names
        only when it reaches the operation, after applying a batch's earlier ones, and a server may
        delete the named vectors it has before failing on the others (so says local mode's
        ``delete_vectors``), and the receipt strips sent after them never run."""
        for attempt in range(2):
            shape: CollectionShape = yield from self.shape(name, op=op, pol=pol)
            known = set(shape.dense) | shape.sparse
            unknown = [n for n in dict.fromkeys(names) if n not in known]
            if not unknown:
                return
            if attempt == 0:
                self.forget_shape(name)
        raise self.unsupported_write(
            op, name, pol,
            f"{op}: {what} on sensitive collection {name!r} names vector(s) {unknown} the "
            f"collection does not have (it has: {sorted(n or '<unnamed>' for n in known)}); Qdrant could delete "
            "the others, or apply a batch's earlier operations, then fail before the deleted vectors' receipts "
            "are dropped. Name only the collection's vectors. Nothing was written"
        )

    def _refuse_uncertain(self, op: str, name: str, pol: CollectionPolicy, uncertain: dict[str, Any],
                          ids: Iterable[Any], what: str) -> None:
        """Refuse ``what`` in a batch if it names a point of an earlier conditional upsert."""
        named = [uncertain[k] for k in dict.fromkeys(map(normalize_point_id, ids)) if k in uncertain]
        if named:
            raise self.unsupported_write(
                op, name, pol,
                f"{op}: {what} of point(s) {named} after a conditional upsert of them (update_filter, or "
                f"update_mode insert_only/update_only) in the same batch on sensitive collection {name!r}: "
                "the guard cannot tell whether the upsert applies, so not which vectors the points' receipts "
                "must certify. Send the upsert and the later operation as separate calls. Nothing was written"
            )

    def _others_decision(self, op: str, name: str, pol: CollectionPolicy, others: dict[str, int],
                         filters: dict[str, Any]) -> Decision:
        """The ALLOW of a run of payload and delete operations of a batch (``others``: count by kind;
        ``filters``: what the filter screen reported on them)."""
        return self.decision(
            op, name, pol, Verdict.ALLOW,
            "write access granted: " + ", ".join(f"{k}={v}" for k, v in sorted(others.items()))
            + "; receipts untouched or preserved",
            details={"operations": others, **filters},
        )

    def _public_vector_updates(self, op: str, name: str, pol: CollectionPolicy,
                               updates: list[models.PointVectors]) -> list[models.PointVectors]:
        out = []
        for u in updates:
            vector = self.public_vector(op, name, pol, u.vector, point_id=u.id)
            out.append(u if vector is u.vector else u.model_copy(update={"vector": vector}))
        return out

    def _public_operation(self, op: str, name: str, pol: CollectionPolicy, operation: Any, where: str) -> Any:
        """One operation of a batch (``where``: ``update_operations[j]``) on a PUBLIC collection, with
        its text screened."""
        if isinstance(operation, models.UpsertOperation):
            inner = operation.upsert
            pts = _operation_points(inner, where)
            return models.UpsertOperation(upsert=models.PointsList(
                points=self.public_points(op, name, pol, pts), shard_key=inner.shard_key,
                update_filter=inner.update_filter, update_mode=inner.update_mode))
        if isinstance(operation, models.UpdateVectorsOperation):
            uv = operation.update_vectors
            return models.UpdateVectorsOperation(update_vectors=uv.model_copy(
                update={"points": self._public_vector_updates(op, name, pol, vector_updates_from_any(
                    list(uv.points), f"{where}.update_vectors.points"))}))
        if isinstance(operation, models.SetPayloadOperation):
            sp = operation.set_payload
            return models.SetPayloadOperation(set_payload=sp.model_copy(
                update={"payload": self.public_payload(op, name, pol, sp.payload, key=sp.key, point_id=selection_of(
                    sp.points if sp.points is not None else sp.filter))}))
        if isinstance(operation, models.OverwritePayloadOperation):
            sp = operation.overwrite_payload
            return models.OverwritePayloadOperation(overwrite_payload=sp.model_copy(
                update={"payload": self.public_payload(op, name, pol, sp.payload, point_id=selection_of(
                    sp.points if sp.points is not None else sp.filter))}))
        return operation

    # -- the decision ---------------------------------------------------------------------
    def _record_write(self, op: str, name: str, pol: CollectionPolicy, prepared: PreparedPoints,
                      filters: Mapping[str, Any] | None = None) -> None:
        self.record(self._write_decision(op, name, pol, prepared, filters))

    def _write_decision(self, op: str, name: str, pol: CollectionPolicy, prepared: PreparedPoints,
                        filters: Mapping[str, Any] | None = None) -> Decision:
        """The decision on prepared points; ``filters``: what the screen of the call's filters reported."""
        return self.decision(
            op, name, pol, prepared.verdict,
            f"{len(prepared.points)} point(s) accepted: " + ", ".join(f"{k}={v}" for k, v in sorted(prepared.counts.items())),
            point_ids=[p.id for p in prepared.points],
            epsilon=prepared.epsilon,
            receipt=prepared.receipt_digest,
            utility_hash=self.utility_hash(pol, prepared.utility_names),
            details={"counts": prepared.counts, **(filters or {})},
        )

    def prepare_points(self, op: str, name: str, pol: CollectionPolicy,
                       points: list[models.PointStruct]) -> Any:
        """Check every point; noise and receipt what needs it; refuse the whole call on any fault.

        A generator (it may fetch the collection layout). Returns :class:`PreparedPoints`.

        The layout is cached per collection, and another client (an agent in another process, an
        operator) may have recreated the collection since: a point that does not fit the cached
        layout gets the layout read again, once, before it is refused, as Qdrant would accept it.
        """
        stale = self._shapes.get(name)
        try:
            return (yield from self._prepare_points(op, name, pol, points))
        except InvalidVectorError as exc:
            if stale is None or getattr(exc, "reason", None) not in _LAYOUT_REASONS:
                raise
            self.forget_shape(name)
            fresh = yield from self.shape(name, op=op, pol=pol)
            if fresh == stale:
                raise
        return (yield from self._prepare_points(op, name, pol, points))

    def _prepare_points(self, op: str, name: str, pol: CollectionPolicy,
                        points: list[models.PointStruct]) -> Any:
        self.require_access(op, name, pol, "write")
        self.check_point_ids(op, name, pol, [p.id for p in points])
        shape: CollectionShape = yield from self.shape(name, op=op, pol=pol)
        boundary = self.boundary()
        raw_ok = pol.raw_allowed(boundary)
        owner_writes = pol.owner is not None and boundary == pol.owner
        ceiling = self.ceiling(pol)
        faults: dict[Verdict, list[Any]] = {}
        reasons: dict[str, str] = {}

        def fault(verdict: Verdict, pid: Any, reason: str) -> None:
            faults.setdefault(verdict, []).append(pid)
            reasons[str(pid)] = reason

        payloads: list[dict[str, Any]] = []
        vectors: list[dict[str, Any]] = []
        to_noise: list[_Slot] = []
        counts = {"raw_in_boundary": 0, "receipted": 0, "noised": 0}
        eps_seen: list[float] = []
        accepted_receipts: list[Any] = []  # the writer's receipts kept, for the manifest
        utility_why: str | None = None
        scope_why: str | None = None  # a receipt refused by the collection's receipt_keys
        mechanism_why: str | None = None  # a receipt of another mechanism than the collection's
        model_why: str | None = None  # a receipt naming another embedding model than the policy declares
        utility_names: set[str] = set()
        # reserved_claims finds nothing on a collection without restricted sources, for any writer.
        check_sources = restricts_sources(pol)
        for i, p in enumerate(points):
            where = f"point {p.id!r}"
            payload = dict(p.payload or {})
            if check_sources:
                self.refuse_reserved_sources(op, name, pol, payload, point_id=p.id)
            payload = self.guard_payload_text(op, name, pol, payload, point_id=p.id, in_boundary=owner_writes)
            try:
                receipts = receipts_from_payload(payload) if RECEIPT_KEY in payload else _NO_RECEIPTS
            except ReceiptError as exc:
                # A forged container is a receipt that does not verify: refused and audited as such.
                fault(Verdict.INVALID_RECEIPT, p.id, f"malformed: {exc}")
                receipts = {}
            vecs = split_vector_struct(p.vector)
            embedded: Collection[str] = _NO_NAMES
            plain = True  # every vector a plain list (all(...) over a generator cost ~0.4 us a point)
            for v in vecs.values():
                if type(v) is not list:
                    plain = False
                    break
            try:
                if not plain:
                    embedded = {k for k, v in vecs.items() if isinstance(v, models.Document)}
                    if embedded:
                        self._refuse_embedder_model(op, name, pol, embedded, p.id)
                    # A plain list is never a Document, Image or InferenceObject, so embed_documents
                    # would return vecs unchanged; skipping it saves ~2 us a point.
                    vecs = yield from self.embed_documents(op, name, pol, vecs, where=where, point_id=p.id)
            except _INPUT_ERRORS as exc:
                raise _located(exc, p.id, None)
            kept_receipts: dict[str, Any] | None = None
            for vname, value in vecs.items():
                try:
                    spec = shape.spec(vname, where=where)
                    arr = as_dense(value, spec, where=where)
                except InvalidVectorError as exc:
                    raise _located(exc, p.id, vname)
                vecs[vname] = arr
                rec = receipts.get(vname)
                if spec.lossy and (rec is not None or not raw_ok):
                    raise self.unsupported_write(
                        op, name, pol,
                        f"{op}: {where}: vector {vname or '<unnamed>'!r} of sensitive collection {name!r} is "
                        f"stored as {spec.datatype}, so Qdrant would round the noised float32 vector and its "
                        "receipt would never verify against the stored one. Use datatype float32 for "
                        "receipted vectors (quantization keeps the original vectors). Nothing was written"
                    )
                if rec is not None and not isinstance(rec, Mapping):
                    # The guard stores receipts as JSON objects (receipts_for_payload); one in any
                    # other form (JSON text, a list) is malformed, although verify_receipt reads text.
                    fault(Verdict.INVALID_RECEIPT, p.id, f"malformed: the receipt of vector {vname or '<unnamed>'!r} "
                                                         f"is a {type(rec).__name__}, not a JSON object")
                    continue
                if rec is not None:
                    # Verified and stored as this plain copy: a str or float subclass in the
                    # caller's dict compared as it liked, and a dict subclass may store other entries.
                    rec = plain_receipt(rec)
                    check = verify_receipt(
                        rec, vector=arr, collection=name, point_id=p.id, vector_name=vname,
                        trusted_keys=self.receipt_keys_for(pol), revoked=self.revoked_keys,
                        now=self.clock(), max_age_s=self.config.receipts.max_age_s,
                    )
                    if not check.ok or check.params is None:
                        scoped = (self.receipt_scope_refusal(name, pol, check.key_id)
                                  if check.reason == "unknown_key" else None)
                        fault(Verdict.INVALID_RECEIPT, p.id, scoped or check.reason)
                        scope_why = scope_why or scoped
                        continue
                    if _altered_by_storage(arr, spec.distance):
                        fault(Verdict.INVALID_RECEIPT, p.id, (
                            f"vector_mismatch: Qdrant would not store vector {vname or '<unnamed>'!r} as "
                            f"signed (it keeps float32{', normalised to unit length' if spec.distance == 'Cosine' else ''}),"
                            f" so the stored vector would not match the receipt; sign "
                            f"stored_form(vector, distance={spec.distance!r}) and send exactly that vector"
                        ))
                        continue
                    prm = check.params
                    problem = _noise.check_release(prm)
                    if problem is not None:
                        # The signer's own parameters do not add up to a private release.
                        fault(Verdict.NOISE_REQUIRED, p.id, problem)
                        continue
                    if prm.epsilon > ceiling:
                        fault(Verdict.EPSILON_ABOVE_CEILING, p.id, f"epsilon {prm.epsilon} > ceiling {ceiling}")
                        continue
                    other = mechanism_mismatch(prm, pol.noise, name)
                    if other is not None:
                        fault(Verdict.NOISE_REQUIRED, p.id, f"mechanism_mismatch: vector {vname or '<unnamed>'!r}: {other}")
                        mechanism_why = mechanism_why or other
                        continue
                    other = model_mismatch(check.model_id, pol.utility, name, vname)
                    if other is not None:
                        fault(Verdict.NOISE_REQUIRED, p.id, f"model_mismatch: {other}")
                        model_why = model_why or other
                        continue
                    weaker = noise_shortfall(prm, pol.noise)
                    if weaker is not None:
                        fault(Verdict.NOISE_REQUIRED, p.id, weaker)
                        continue
                    utility_names.add(vname)
                    why = self.utility_refusal(pol, mechanism=prm.mechanism, epsilon=prm.epsilon,
                                               radius=prm.radius, delta=prm.delta, clip_norm=prm.clip_norm,
                                               dim=int(arr.shape[-1]), vector_name=vname, scale=prm.scale,
                                               distance=spec.distance, collection=name)
                    if why is not None:
                        fault(Verdict.UTILITY_DEGRADED, p.id, why)
                        utility_why = utility_why or why
                        continue
                    if kept_receipts is None:
                        kept_receipts = {}
                    kept_receipts[vname] = rec
                    accepted_receipts.append(rec)
                    eps_seen.append(prm.epsilon)
                    counts["receipted"] += 1
                elif raw_ok:
                    counts["raw_in_boundary"] += 1
                elif pol.noise_on_write:
                    to_noise.append(_Slot(i, vname, arr, vname in embedded))
                else:
                    faults.setdefault(Verdict.NOISE_REQUIRED, []).append(p.id)
            payload.pop(RECEIPT_KEY, None)
            payloads.append(payload)
            vectors.append(vecs)
            if kept_receipts:
                payload[RECEIPT_KEY] = kept_receipts  # re-encoded below
        if to_noise:
            n = pol.noise
            whys: dict[tuple[str, int], str | None] = {}
            for s in to_noise:
                slot = (s.name, int(s.vector.shape[-1]))
                if slot not in whys:
                    utility_names.add(s.name)
                    whys[slot] = self.utility_refusal(pol, mechanism=n.mechanism, epsilon=n.epsilon,
                                                      radius=n.radius, delta=n.delta, clip_norm=n.clip_norm,
                                                      dim=slot[1], vector_name=s.name,
                                                      distance=shape.spec(s.name, where=f"point {points[s.point].id!r}").distance,
                                                      collection=name)
                why = whys[slot]
                if why is not None:
                    faults.setdefault(Verdict.UTILITY_DEGRADED, []).append(points[s.point].id)
                    reasons.setdefault(str(points[s.point].id), why)
                    utility_why = utility_why or why
        if faults:
            verdict = next(iter(faults))
            ids = [pid for v in faults.values() for pid in v]
            directive = _DIRECTIVES[verdict]
            if verdict is Verdict.UTILITY_DEGRADED and utility_why is not None:
                # The specific reason carries its own fix; the generic advice ("use a measured
                # passing epsilon") is wrong for a missing record or a metric mismatch.
                directive = f"the retrieval utility guard refuses this write: {utility_why}"
            if verdict is Verdict.INVALID_RECEIPT and scope_why is not None:
                # The generic advice (a key of receipts.trusted_keys) does not fix a scoped refusal.
                others = any(not reasons.get(str(pid), "").startswith("unknown_key: collection ")
                             for pid in faults[verdict])
                directive = scope_why.removeprefix("unknown_key: ") + (f"; other receipts: {directive}" if others else "")
            if verdict is Verdict.NOISE_REQUIRED and (mechanism_why is not None or model_why is not None):
                # The generic advice (noise and sign, or noise_on_write) omits the mechanism or the
                # model, the one thing to change; the other points' own reasons are in the details.
                others = any(not reasons.get(str(pid), "").startswith(("mechanism_mismatch: ", "model_mismatch: "))
                             for pid in faults[verdict])
                directive = "; ".join(w for w in (mechanism_why, model_why) if w is not None) + (
                    f"; other points: {directive}" if others else "")
            if directive is _DIRECTIVES[verdict]:
                # The generic advice lists likely causes; the first point's own reason names the
                # actual one (an expired receipt is none of "forged, altered, replayed").
                pid = next((x for x in faults[verdict] if str(x) in reasons), None)
                if pid is not None:
                    directive = f"{directive} (point {pid!r}: {reasons[str(pid)]})"
            raise self.refuse(self.decision(
                op, name, pol, verdict, directive, point_ids=list(dict.fromkeys(ids)),
                utility_hash=self.utility_hash(pol, utility_names),
                details={"faults": {v.value: [str(x) for x in ids_] for v, ids_ in faults.items()},
                         "reasons": reasons, "points_in_call": len(points)},
            ))
        issued: list[dict[str, Any]] = []
        if to_noise:
            issued = self._noise_and_sign(name, pol, shape, points, vectors, payloads, to_noise)
            accepted_receipts += issued
            counts["noised"] = len(to_noise)
            eps_seen.append(pol.noise.epsilon)
        # The manifest names every receipt the stored vectors rest on, the writer's own included.
        digest = _batch_digest(accepted_receipts) if accepted_receipts else None
        out = []
        # The receipts issued here are new dicts no one else holds: stored as they are, where
        # receipts_for_payload copied each (the writer's own receipts are still copied).
        own = {id(r) for r in issued}
        for p, vecs, payload in zip(points, vectors, payloads):
            if RECEIPT_KEY in payload:
                payload[RECEIPT_KEY] = _container(payload[RECEIPT_KEY], own)
            if len(vecs) == 1 and UNNAMED in vecs and shape.unnamed:
                vector = _as_list(vecs[UNNAMED])  # what join_vector_struct returns for it
            else:
                # A dict even for a vector named "" of a collection of named vectors: a bare list
                # is the unnamed vector, which Qdrant refuses there.
                vector = {k: _as_list(v) for k, v in vecs.items()}
            out.append(_point(p.id, vector, payload or None))
        verdict = (Verdict.ALLOW_NOISED if counts["noised"] else Verdict.ALLOW_RECEIPTED if counts["receipted"]
                   else Verdict.ALLOW_IN_BOUNDARY_RAW)
        return PreparedPoints(points=out, verdict=verdict, epsilon=max(eps_seen) if eps_seen else None,
                              receipt_digest=digest, counts={k: v for k, v in counts.items() if v},
                              utility_names=frozenset(utility_names))

    def _noise_and_sign(self, name: str, pol: CollectionPolicy, shape: CollectionShape,
                        points: list[models.PointStruct], vectors: list[dict[str, Any]],
                        payloads: list[dict[str, Any]], slots: list[_Slot]) -> list[dict[str, Any]]:
        np_ = pol.noise
        done: list[_Slot] = []  # the slots in the order of the receipts
        groups: list[tuple[Any, ...]] = []  # issue_receipts_rows' groups, one per vector name
        by_name: dict[str, list[_Slot]] = {}
        for s in slots:
            by_name.setdefault(s.name, []).append(s)
        # The guard names a model only for the vectors it embedded: of a vector it was given, it
        # knows no model, and naming its embedder's would sign a claim about someone else's vector.
        model_id = self._embedder_model() if any(s.embedded for s in slots) else None
        # The rows of a group are 1-D float64 arrays of one length: np.array casts them to float32
        # as np.stack(...).astype(np.float32) did, without the whole float64 matrix between.
        batches = {vname: np.array([s.vector for s in group], dtype=np.float32) for vname, group in by_name.items()}
        for vname, group in by_name.items():
            self._refuse_past_grid(pol, shape.spec(vname, where=f"collection {name!r}"), points, group,
                                   batches[vname])
        for vname, group in by_name.items():
            spec = shape.spec(vname, where=f"collection {name!r}")
            batch = batches[vname]
            noised, params = _noise.privatize(
                batch, mechanism=np_.mechanism, epsilon=np_.epsilon, radius=np_.radius,
                delta=np_.delta if np_.mechanism == "gaussian" else None, clip_norm=np_.clip_norm,
                key=self.noise_key if np_.keyed else None,
            )
            try:
                finals = stored_form_batch(noised, distance=spec.distance)
            except InvalidVectorError as exc:
                # A noised coordinate beyond the commitment grid (|v| >= 2048; only without clipping).
                row = _ROW.search(str(exc))
                exc.reason = "beyond_commit_grid"  # type: ignore[attr-defined]
                raise _located(exc, points[group[int(row.group(1))].point].id if row else None, vname)
            # One tolist of the matrix (the same floats as each row's tolist, ~1.3 us a point less);
            # the receipts take the float32 rows.
            for s, row in zip(group, finals.tolist()):
                vectors[s.point][vname] = row
            groups.append((params, list(finals), name, [points[s.point].id for s in group], vname,
                           [model_id if s.embedded else None for s in group]))
            done += group
        # One batch (one Merkle tree, one signature) over every group, as issue_receipts_batch of
        # a ReceiptItem per slot signs it.
        receipts = issue_receipts_rows(self.signer, groups)
        for s, rec in zip(done, receipts):
            existing = payloads[s.point].get(RECEIPT_KEY) or {}
            existing[s.name] = rec
            payloads[s.point][RECEIPT_KEY] = existing
        return receipts

    def _embedder_model(self) -> str | None:
        """The model the guard's embedder names (its ``model_id``, else ``model_name``, as
        :func:`qdrant_guard.utility.embedder_model_name` reads it; None: it names none)."""
        named = embedder_model_name(self.embedder) if self.embedder is not None else None
        return None if named is None else str.__str__(named)

    def _refuse_embedder_model(self, op: str, name: str, pol: CollectionPolicy, vector_names: Iterable[str],
                               point_id: Any) -> None:
        """Refuse (ConfigError, audited as UNSUPPORTED_WRITE with reason ``model_mismatch``), before any
        text is embedded, ``models.Document`` vectors whose declared model (``utility.embedding_model(s)``)
        is not the one the guard's embedder names.

        An embedder that names no model passes: the guard cannot tell which model it is."""
        declared: list[tuple[str, str, str]] = []
        for vname in sorted(vector_names):
            model, key = pol.utility.declared_model(vname)
            if model is not None:
                declared.append((vname, model, key))
        have = self._embedder_model() if declared else None
        if have is None:
            return
        for vname, model, key in declared:
            if same_model(model, have):
                continue
            message = (
                f"{op}: point {point_id!r}: vector {vname or '<unnamed>'!r} of collection {name!r} is a "
                f"models.Document, which the guard would embed with its embedder's model {have!r}, but the policy "
                f"({self.config.source_path or '<GuardConfig>'}) declares {key} = {toml_str(model)} for that "
                f"vector: vectors of two models do not rank against each other, and a utility record measured on "
                f"one says nothing of the other. Pass embedder= an embedder of {model!r} (its model_id names the "
                f"model), or correct {key} if this collection's vectors come from {have!r}. Nothing was embedded "
                "or written"
            )
            # A guard decision (the policy's model against the embedder's), so it is audited like the
            # write's other refusals; _audit_input_errors passes ConfigErrors on unaudited.
            raise self.audited_model_refusal(
                op, name, pol, Verdict.UNSUPPORTED_WRITE, message,
                {"where": "write", "form": "Document", "embedded_by": "embedder", "vector_name": vname,
                 "model": have, "declared": model, "key": key},
                point_ids=[point_id])

    @staticmethod
    def _refuse_past_grid(pol: CollectionPolicy, spec: Any, points: list[models.PointStruct], group: list[_Slot],
                          batch: np.ndarray) -> None:
        """Refuse, before any noise is drawn, a vector whose noised release must land past the
        commitment grid (|v| >= 2048), which stored_form_batch would refuse after noising.

        Only a coordinate beyond 2048 by more than the noise can ever move it (the sampler's noise
        is bounded: docs/privacy.md) is refused here, so every vector the check after noising
        would accept still is, with the same output. Clipping to clip_norm <= 2048 keeps every
        coordinate within reach, and Cosine releases are normalised: neither is checked.
        """
        np_ = pol.noise
        if spec.distance == "Cosine" or (np_.clip_norm is not None and np_.clip_norm <= _GRID_LIMIT):
            return
        rows = batch.astype(np.float64)
        mags = np.abs(rows).max(axis=1)
        if np_.clip_norm is not None:
            norms = np.linalg.norm(rows, axis=1)
            mags = mags * np.minimum(1.0, np_.clip_norm / np.maximum(norms, np.finfo(np.float64).tiny))
        if not (mags > _GRID_LIMIT).any():
            return
        gaussian = np_.mechanism == "gaussian"
        params = _noise._params(np_.mechanism, np_.epsilon, np_.delta if gaussian else None, np_.radius,
                                np_.clip_norm, batch.shape[1], "float32", _noise.RNG_KEYED)
        # |z| <= 12.23 sigma a coordinate; the laplace_l2 norm <= (d - 1/3)(1 + 12.23/sqrt(9(d - 1/3)))^3
        # scale (noise._overflow_hint); 12.3, a lattice step and 1.0 are margin.
        shape_ = params.dim - 1.0 / 3.0
        reach = params.scale * (12.3 if gaussian else shape_ * (1.0 + 12.3 / math.sqrt(9.0 * shape_)) ** 3)
        reach += params.lattice_step + 1.0
        past = np.flatnonzero(mags > _GRID_LIMIT + reach)
        if past.size:
            row = int(past[0])
            pid, vname = points[group[row].point].id, group[row].name
            exc = InvalidVectorError(
                f"point {pid!r}: vector {vname or '<unnamed>'!r} has a coordinate of magnitude "
                f"{float(mags[row]):g}{' after clipping' if np_.clip_norm is not None else ''}, beyond what "
                f"noise (at most {reach:.4g} a coordinate) can bring back under the commitment grid's limit: "
                "the commitment grid 2^-20 holds |v| < 2048 in int32, rescale the vectors (on a guarded "
                "collection: noise them with a clip_norm, which keeps noised coordinates far below that). "
                "Nothing was noised or written"
            )
            exc.reason = "beyond_commit_grid"  # type: ignore[attr-defined]
            raise _located(exc, pid, vname)

    def prepare_vector_updates(self, op: str, name: str, pol: CollectionPolicy,
                               updates: list[models.PointVectors], *, shard_key: Any = None,
                               fresh: dict[str, Any] | None = None, deleted: set[str] | None = None,
                               accepted: list[Decision] | None = None) -> Any:
        """``update_vectors`` on a sensitive collection: new vectors need new receipts, so the update
        becomes one batch of [UpdateVectors, SetPayload(receipts)] per point.

        ``fresh`` holds the receipt containers written earlier in the same batch (by normalised
        point id); it is updated with the containers these operations write. ``deleted``: points
        deleted earlier in the batch (and not upserted since), which count as missing. ``accepted``:
        where a batch collects the decisions it audits once every operation has passed (without it,
        the decision is audited here).
        """
        fresh = {} if fresh is None else fresh
        deleted = set() if deleted is None else deleted
        ids = [u.id for u in updates]
        self.check_point_ids(op, name, pol, ids)
        current = yield from self.lookup(op, name, pol, Call(  # type: ignore[attr-defined]
            "retrieve", {"collection_name": name, "ids": ids, "shard_key_selector": shard_key,
                         "with_payload": [RECEIPT_KEY], "with_vectors": False}))
        # Points holding a container at the look-up (its version written): only the others need one
        # made. An earlier operation of this batch overrides it: its container (or None) is in fresh.
        existing: dict[str, Any] = {}
        contained: set[str] = set()
        for r in current:
            # The payload's receipts and whether it holds a container at all, from one read of it.
            key, held = normalize_point_id(r.id), False
            try:
                existing[key] = receipts_from_payload(r.payload)
                held = bool(r.payload) and r.payload.get(RECEIPT_KEY) is not None
            except ReceiptError:
                existing[key] = {}
            if held:
                contained.add(key)
        keys = {i: normalize_point_id(i) for i in ids}
        missing = [i for i in ids if keys[i] not in fresh and (keys[i] not in existing or keys[i] in deleted)]
        if missing:
            # Qdrant applies the other points' vectors before failing on a missing one; the
            # receipt operations after it would then never run, leaving vectors without receipts.
            raise self.unsupported_write(
                op, name, pol,
                f"{op}: point(s) {missing} do not exist in collection {name!r}; a vector update cannot "
                "create points. Upsert those points (with their vectors) instead, or leave their ids out"
            )
        for pid, container in fresh.items():
            existing[pid] = stored_receipts({RECEIPT_KEY: container})
        pts = [_update_point(u) for u in updates]
        prepared = yield from self.prepare_points(op, name, pol, pts)
        if accepted is None:
            self._record_write(op, name, pol, prepared)
        else:
            accepted.append(self._write_decision(op, name, pol, prepared))
        ops: list[Any] = []
        for p, u in zip(prepared.points, updates):
            # One vector update a point, its receipt operations right after it: a point another
            # client deletes after the look-up fails the request at its own update, every point
            # before it complete. One update of all of them stored the others' vectors, then failed
            # before any of their receipts was written.
            ops.append(models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
                points=[_point_vectors(p.id, p.vector)], shard_key=shard_key)))
            key = normalize_point_id(p.id)
            # None in fresh: an upsert without receipts replaced the payload, or a strip deleted the
            # container. (A container emptied by path deletes reads as None too: its version is then
            # written again, which changes nothing.)
            held = fresh[key] is not None if key in fresh else key in contained
            merged = dict(existing.get(key, {}))
            names = set(split_vector_struct(u.vector))
            for vname in names:
                merged.pop(vname, None)  # a raw in-boundary update must not keep a stale receipt
            new = receipts_from_payload(p.payload) if p.payload and RECEIPT_KEY in p.payload else {}
            merged.update(new)
            container = receipts_for_payload(merged) if merged else None
            fresh[key] = container
            # A later update of the same point in this call builds on this one.
            existing[key] = merged
            stale = sorted(names - new.keys())
            if not all(_quotable(n) for n in stale):
                ops.append(models.SetPayloadOperation(set_payload=models.SetPayload(
                    payload={RECEIPT_KEY: container}, points=[p.id], shard_key=shard_key)))
                continue
            # The updated vectors' receipts are written (or deleted) by their paths in the
            # container, never the others': another client's concurrent update of another vector of
            # this point keeps its new receipt (docs/atomicity.md).
            if new and not held:
                # The container's version, written first (creating the container where there is none).
                ops.append(models.SetPayloadOperation(set_payload=models.SetPayload(
                    payload={"v": PAYLOAD_CONTAINER_VERSION}, key=RECEIPT_KEY, points=[p.id], shard_key=shard_key)))
            if stale:
                ops.append(models.DeletePayloadOperation(delete_payload=models.DeletePayload(
                    keys=[f"{RECEIPT_KEY}.vectors.{_quote(n)}" for n in stale], points=[p.id], shard_key=shard_key)))
            if new:
                ops.append(models.SetPayloadOperation(set_payload=models.SetPayload(
                    payload=receipts_for_payload(new)["vectors"], key=f"{RECEIPT_KEY}.vectors", points=[p.id],
                    shard_key=shard_key)))
        return ops

    def _upsert_points(self, op: str, name: str, pol: CollectionPolicy, points: Any) -> list[models.PointStruct]:
        """:func:`points_from_any` of ``upsert``'s ``points``, which qdrant-client takes as a list
        or a ``models.Batch`` only (a tuple, generator or other iterable raises there and stores
        nothing); another type is refused, audited, before anything is sent."""
        if not isinstance(points, (list, models.Batch)):
            raise self.unsupported_write(
                op, name, pol,
                f"{op}() argument 'points' must be a list of models.PointStruct or a models.Batch, as "
                f"qdrant-client takes it, not {type(points).__name__}; pass list(points). Nothing was written"
            )
        return points_from_any(points)

    def _refuse_update_filter(self, op: str, name: str, pol: CollectionPolicy, update_filter: Any,
                              where: str = "") -> None:
        if update_filter is not None:
            raise self.unsupported_write(
                op, name, pol,
                f"{op}: {where + '.update_vectors.' if where else ''}update_filter is not supported for vector updates on sensitive collection "
                f"{name!r}: each new vector's receipt is written by point id, so the guard must know "
                "which points change. Select the points yourself (scroll with the filter) and pass "
                "their ids without update_filter"
            )


# Read-only stand-ins for a point without receipts or embedded vectors (nothing to allocate).
_NO_RECEIPTS: Mapping[str, Any] = MappingProxyType({})
_NO_NAMES: frozenset[str] = frozenset()


def _as_list(v: Any) -> Any:
    return v.tolist() if isinstance(v, np.ndarray) else v


def _keys_written(op: Any) -> Iterable[str]:
    """The top-level payload keys a payload operation of a batch may write."""
    if isinstance(op, models.OverwritePayloadOperation):
        return op.overwrite_payload.payload.keys()
    if isinstance(op, models.SetPayloadOperation):
        sp = op.set_payload
        if sp.key is None:
            return sp.payload.keys()
        head = path_head(sp.key)
        return () if head is None else (head,)
    return ()
