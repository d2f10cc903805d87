"""``batch_update_points``: every operation of a batch checked before any is sent.

A mixin of :class:`qdrant_guard.writes.WriteOps`: each operation is screened and prepared as the
method it stands for would be, in the batch's order (points deleted or conditionally upserted
earlier constrain later operations), and the accepted operations are audited only once the whole
batch is accepted.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Collection, Iterable

from qdrant_client.http import models

from .decision import Decision, Verdict
from .batchplaces import operation_place, placed
from .filterpaths import unevaluable_reason
from .filterroots import operation_filter_roots
from .payloadops import _selector_ids
from .pipeline import Call, Op
from .policy import CollectionPolicy
from .receipts import RECEIPT_KEY, normalize_point_id
from .batchsources import SourceLedger
from .sources import path_head, untagged_points_warning, warns_untagged
from .textguard import selection_of
from .vectors import CollectionShape
from .writepoints import _operation_points, vector_updates_from_any
from .writeprep import WritePrep, _INPUT_ERRORS


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


class BatchUpdate(WritePrep):
    """The guarded ``batch_update_points`` (a mixin of :class:`qdrant_guard.writes.WriteOps`)."""

    if TYPE_CHECKING:  # PayloadOps's, which Guard inherits beside this class (through ReadOps)
        def payload_operation(self, op: str, name: str, pol: CollectionPolicy, operation: Any,
                              fresh: dict[str, Any] | None = None, written: set[str] | frozenset[str] = frozenset(),
                              deleted: Collection[str] = (), *, where: str = "") -> Any: ...

    def _warn_untagged(self, op: str, name: str, pol: CollectionPolicy, points: list[Any]) -> Op:
        """Warn, once per collection and client, before the write is sent, of the written
        ``points`` without a source: the source cap then keeps a top-k short of ``limit`` without a
        word (docs/policy.md, source_field). A generator (see :meth:`warn_untagged_once`)."""
        yield from self.warn_untagged_once(op, name, pol, lambda: untagged_points_warning(
            name, pol, self.policy_section(name, pol, "diversity"), points))

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
        # What the batch leaves without a source, for the untagged-source warning (unless said).
        ledger = SourceLedger(pol.source_field) if warns_untagged(pol) and not self.warned_untagged(name) else None
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
                if ledger is not None:
                    ledger.upsert(prepared.points, inner.shard_key, conditional)
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
                if ledger is not None:
                    ledger.operation(j, op)
                kind = type(op).__name__.removesuffix("Operation")
                others[kind] = others.get(kind, 0) + 1
                for key, items in filters.items():
                    run.setdefault(key, []).extend(items)
        at[0] = None
        if others:
            accepted.append(self._others_decision(method, name, pol, others, run))
        if ledger is not None:
            # Before anything is sent or audited as allowed: raised as an error, it refuses the batch.
            yield from self.warn_untagged_once(method, name, pol, lambda: ledger.message(
                name, pol, self.policy_section(name, pol, "diversity")))
        for decision in accepted:
            self.record(decision)
        results = (yield from self.forward(method, name, pol, Call(method, {**args, "update_operations": out_ops}))
                   ) if out_ops else []
        # An operation that matched no point sends nothing; it shares the outcome of the request.
        nothing = results[-1] if results else self.unsent_result(args)  # type: ignore[attr-defined]
        return [self.writer_answer(pol, results[i] if i is not None else nothing)  # type: ignore[attr-defined]
                for i in positions]

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
