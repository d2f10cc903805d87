"""Payload changes on sensitive collections: receipts cannot be forged, altered or stripped."""
from __future__ import annotations

from typing import Any

from qdrant_client import grpc
from qdrant_client.conversions.conversion import GrpcToRest
from qdrant_client.http import models

from .decision import Verdict
from .errors import UnsupportedWriteError
from .pipeline import Call, Op
from .policy import CollectionPolicy
from .receipts import RECEIPT_KEY, normalize_point_id, receipts_for_payload, stored_receipts
from .sources import path_head
from .textguard import TextOps
from .vectors import CollectionShape

_TAMPER = (
    "the receipt payload key {key!r} is reserved: it can only be written by the guard together "
    "with the vector it certifies. Re-upsert the point (with a fresh receipt) instead"
)


def _first_segment(key: str) -> str | None:
    """The top-level payload key a Qdrant JSON path starts with (:func:`~.sources.path_head`),
    None when the rest of the path does not parse (an unquoted key must go on with ``.`` or ``[``)."""
    head = path_head(key)
    if head is None or key.startswith('"'):
        return head
    rest = key[len(head):]
    return head if not rest or rest[0] in ".[" else None


def _touches_receipt(key: str | None) -> bool:
    if key is None:
        return False
    first = _first_segment(key)
    if first is None:
        # Qdrant should reject a path it cannot parse; refuse it anyway if it mentions the receipt.
        return RECEIPT_KEY in key
    return first == RECEIPT_KEY


class PayloadOps(TextOps):
    """The payload half of the pipeline."""

    def _refuse_tamper(self, op: str, name: str, pol: CollectionPolicy, what: str) -> Exception:
        return self.refuse(self.decision(
            op, name, pol, Verdict.RECEIPT_TAMPERING, _TAMPER.format(key=RECEIPT_KEY) + f" ({what})"))

    def _check_set(self, op: str, name: str, pol: CollectionPolicy, payload: dict[str, Any], key: str | None) -> dict[str, Any]:
        if _touches_receipt(key) or (key is None and RECEIPT_KEY in payload) or (
                key is not None and key.split(".")[0] == "" and RECEIPT_KEY in payload):
            raise self._refuse_tamper(op, name, pol, "set")
        self.refuse_reserved_sources(op, name, pol, payload, key)
        if key is None:
            payload = self.guard_payload_text(op, name, pol, dict(payload), point_id=None,
                                              in_boundary=pol.raw_allowed(self.boundary()))
        return payload

    def op_set_payload(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pub = self.public_policy(args)
        if pub is not None:
            # With a key the payload lands below it, never in the top-level text field.
            if args.get("key") is None:
                args = {**args, "payload": self.public_payload(method, name, pub, args["payload"])}
            return (yield Call(method, args))
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        payload = self._check_set(method, name, pol, args["payload"], args.get("key"))
        self.record(self.decision(method, name, pol, Verdict.ALLOW, "payload set; receipts untouched"))
        return (yield from self.forward(method, name, pol, Call(method, {**args, "payload": payload})))

    def op_delete_payload(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        if any(_touches_receipt(k) for k in args["keys"]):
            raise self._refuse_tamper(method, name, pol, "delete")
        self.record(self.decision(method, name, pol, Verdict.ALLOW, "payload keys deleted; receipts untouched"))
        return (yield from self.forward(method, name, pol, Call(method, args)))

    def op_overwrite_payload(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pub = self.public_policy(args)
        if pub is not None:
            return (yield Call(method, {**args, "payload": self.public_payload(method, name, pub, args["payload"])}))
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        payload = self._check_set(method, name, pol, args["payload"], None)
        return (yield from self._rewrite(method, name, pol, payload, args["points"], args, "overwritten"))

    def op_clear_payload(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        return (yield from self._rewrite(method, name, pol, {}, args["points_selector"], args, "cleared"))

    def _rewrite(self, method: str, name: str, pol: CollectionPolicy, payload: dict[str, Any], selector: Any,
                 args: dict[str, Any], done: str) -> Op:
        """A standalone receipt-preserving rewrite: the per-point operations in one request, then
        :meth:`_settle_overwrite` for points whose receipts changed meanwhile."""
        shard_key = args.get("shard_key_selector")
        pending: dict[Any, Any] = {}
        ops = yield from self._preserving_overwrite(name, payload, selector, shard_key=shard_key, pending=pending)
        self.record(self.decision(method, name, pol, Verdict.ALLOW,
                                  f"payload {done} on {len(ops)} point(s); receipts preserved"))
        result = yield from self._run_ops(method, name, pol, ops, args)
        if shard_key is None:
            shard_key = getattr(_rest_selector(selector), "shard_key", None)
        rest: dict[str, Any] = {k: args[k] for k in ("wait", "ordering", "timeout") if k in args}
        yield from self._settle_overwrite(method, name, pol, payload, pending, shard_key, rest)
        return result

    def op_delete_vectors(self, method: str, args: dict[str, Any]) -> Op:
        """Delete named vectors, and the receipts that certified them: a receipt left without its
        vector would make the collection fail :func:`qdrant_guard.receipts.verify`."""
        name = args["collection_name"]
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        selector = _rest_selector(args["points"])
        shard_key = args.get("shard_key_selector")
        if shard_key is None:
            shard_key = getattr(selector, "shard_key", None)
        pending: dict[Any, Any] = {}
        strip = yield from self._vector_receipt_strips(method, name, pol, selector, shard_key,
                                                       set(args["vectors"]), pending=pending)
        self.record(self.decision(method, name, pol, Verdict.ALLOW,
                                  f"write access granted; receipts of the deleted vectors dropped on "
                                  f"{len(strip)} point(s)"))
        if not strip:
            return (yield from self.forward(method, name, pol, Call(method, args)))
        if isinstance(selector, (models.Filter, models.FilterSelector)):
            where: dict[str, Any] = {"filter": getattr(selector, "filter", selector)}
        else:
            where = {"points": list(getattr(selector, "points", selector))}
        delete = models.DeleteVectorsOperation(delete_vectors=models.DeleteVectors(
            vector=list(args["vectors"]), shard_key=shard_key, **where))
        rest: dict[str, Any] = {k: args[k] for k in ("wait", "ordering", "timeout") if k in args}
        results = yield from self.forward(method, name, pol, Call(
            "batch_update_points", {"collection_name": name, "update_operations": [delete, *strip], **rest}))
        yield from self._settle_strips(method, name, pol, set(args["vectors"]), pending, shard_key, rest)
        return results[0]

    def _settle_strips(self, method: str, name: str, pol: CollectionPolicy, names: set[str],
                       pending: dict[Any, Any], shard_key: Any, rest: dict[str, Any]) -> Any:
        """:meth:`_settle_overwrite` for ``delete_vectors``: where a point's receipts changed
        between the read and the strip, drop the deleted vectors' receipts from the current ones."""
        for _ in range(3):
            if not pending:
                return
            shape = yield from self.shape(name)
            records = yield from self._resolve(name, [pid for pid, _ in pending.values()], shard_key)
            ops, moved = [], {}
            for r in records:
                key = normalize_point_id(r.id)
                now = (r.payload or {}).get(RECEIPT_KEY)
                if key in pending and now != pending[key][1]:
                    one = _strip_op(r.id, now, names, shape, shard_key)
                    if one is not None:
                        ops.append(one[0])
                        moved[key] = (r.id, now)
            pending = moved
            if ops:
                yield from self.forward(method, name, pol, Call(
                    "batch_update_points", {"collection_name": name, "update_operations": ops, **rest}))
        if pending:
            message = (f"{method}: the receipts of point(s) {[pid for pid, _ in pending.values()]} in "
                       f"collection {name!r} kept changing (another client is updating their vectors); "
                       "their deleted vectors' receipts may remain. Retry the call")
            self.record(self.decision(method, name, pol, Verdict.UNSUPPORTED_WRITE, message))
            raise UnsupportedWriteError(message)

    def _vector_receipt_strips(self, op: str, name: str, pol: CollectionPolicy, selector: Any, shard_key: Any,
                               names: set[str], fresh: dict[str, Any] | None = None,
                               pending: dict[Any, Any] | None = None) -> Any:
        """The payload operations that drop the receipts of vectors ``names`` from the points
        ``selector`` names (a generator). ``fresh``: receipt containers written earlier in the same
        batch, by normalised point id; updated with the containers these operations leave.
        Like :meth:`_preserving_overwrite`, each strip of a stored point applies only while the
        receipts read are still stored; ``pending`` collects those, for :meth:`_settle_strips`.

        Raises:
            UnsupportedWriteError: an id names no point (Qdrant would delete the other points'
                vectors, then fail before their receipts are dropped).
        """
        fresh = {} if fresh is None else fresh
        records = yield from self._resolve(name, selector, shard_key)
        current = {normalize_point_id(r.id): (r.id, (r.payload or {}).get(RECEIPT_KEY)) for r in records}
        for pid in _selector_ids(selector):
            key = normalize_point_id(pid)
            if key in fresh and key not in current:  # upserted earlier in this batch
                current[key] = (pid, None)
        missing = [p for p in _selector_ids(selector) if normalize_point_id(p) not in current]
        if missing:
            message = (f"{op}: point(s) {missing} do not exist in collection {name!r}; a vector deletion "
                       "naming them would be half applied. Leave their ids out. Nothing was written")
            self.record(self.decision(op, name, pol, Verdict.UNSUPPORTED_WRITE, message))
            raise UnsupportedWriteError(message)
        shape = (yield from self.shape(name)) if any(k not in fresh for k in current) else None
        strip: list[Any] = []
        for key, (pid, stored) in current.items():
            from_batch = key in fresh
            container = fresh[key] if from_batch else stored
            one = _strip_op(pid, container, names, None if from_batch else shape, shard_key)
            if one is None:
                continue
            strip.append(one[0])
            fresh[key] = one[1]
            if pending is not None and not from_batch and _where(one[0]) is not None:
                pending[key] = (pid, stored)
        return strip

    def _run_ops(self, method: str, name: str, pol: CollectionPolicy, ops: list[Any], args: dict[str, Any]) -> Op:
        if not ops:
            return models.UpdateResult(operation_id=None, status=models.UpdateStatus.COMPLETED)
        rest: dict[str, Any] = {k: args[k] for k in ("wait", "ordering", "timeout") if k in args}
        results = yield from self.forward(method, name, pol, Call(
            "batch_update_points", {"collection_name": name, "update_operations": ops, **rest}))
        return results[-1]

    def _preserving_overwrite(self, name: str, payload: dict[str, Any], selector: Any,
                              fresh: dict[str, Any] | None = None, *, shard_key: Any = None,
                              pending: dict[Any, Any] | None = None) -> Any:
        """Per-point overwrite operations that carry each point's own receipt along.

        ``fresh`` holds receipt containers written earlier in the same batch (by normalised point
        id); they replace the stored ones, which no longer certify the points' vectors.
        ``shard_key``: the call's shard key selector (default: the selector's own ``shard_key``);
        the points are looked up, and rewritten, in those shards only.

        A point's stored receipts are read before the write, so another client may change them in
        between (a concurrent ``update_vectors``). Each rewrite of a stored point therefore applies
        only while its receipts are still the ones read (:func:`_receipts_unchanged`); writing the
        old receipts back would leave the new vectors uncertified. ``pending`` (optional) collects
        ``{normalised id: (id, receipts read)}`` of those conditional rewrites, for
        :meth:`_settle_overwrite`.
        """
        fresh = fresh or {}
        selector = _rest_selector(selector)
        if shard_key is None:
            shard_key = getattr(selector, "shard_key", None)
        records = yield from self._resolve(name, selector, shard_key)
        targets = {normalize_point_id(r.id): (r.id, (r.payload or {}).get(RECEIPT_KEY)) for r in records}
        for pid in _selector_ids(selector):
            key = normalize_point_id(pid)
            if key in fresh and key not in targets:  # upserted earlier in this batch
                targets[key] = (pid, None)
        shape = (yield from self.shape(name)) if any(k not in fresh for k in targets) else None
        ops = []
        for key, (pid, stored) in targets.items():
            ops.append(_overwrite_op(payload, pid, fresh[key] if key in fresh else stored,
                                     None if key in fresh else shape, shard_key))
            if pending is not None and key not in fresh and ops[-1].overwrite_payload.filter is not None:
                pending[key] = (pid, stored)
        return ops

    def _settle_overwrite(self, method: str, name: str, pol: CollectionPolicy, payload: dict[str, Any],
                          pending: dict[Any, Any], shard_key: Any, rest: dict[str, Any]) -> Any:
        """Re-apply a standalone receipt-preserving rewrite where it may have been skipped (a generator).

        A conditional rewrite is skipped on a point whose receipts changed after they were read.
        Points whose receipts still are the ones the rewrite was conditioned on got it; the others
        (unless deleted since) get it again over their current receipts, as if the call had come
        after the concurrent write, up to three times.

        Raises:
            UnsupportedWriteError: the receipts kept changing under the rewrite.
        """
        for _ in range(3):
            if not pending:
                return
            shape = yield from self.shape(name)
            records = yield from self._resolve(name, [pid for pid, _ in pending.values()], shard_key)
            moved = {}
            for r in records:
                key = normalize_point_id(r.id)
                now = (r.payload or {}).get(RECEIPT_KEY)
                if key in pending and now != pending[key][1]:
                    moved[key] = (r.id, now)
            pending = moved
            if moved:
                ops = [_overwrite_op(payload, pid, now, shape, shard_key) for pid, now in moved.values()]
                yield from self.forward(method, name, pol, Call(
                    "batch_update_points", {"collection_name": name, "update_operations": ops, **rest}))
        if pending:
            message = (f"{method}: the receipts of point(s) {[pid for pid, _ in pending.values()]} in "
                       f"collection {name!r} kept changing (another client is updating their vectors); "
                       "the payload rewrite may not have reached them. Retry the call")
            self.record(self.decision(method, name, pol, Verdict.UNSUPPORTED_WRITE, message))
            raise UnsupportedWriteError(message)

    def _resolve(self, name: str, selector: Any, shard_key: Any = None) -> Any:
        """The points a selector names, with their receipts (ids, PointIdsList, Filter, FilterSelector)."""
        selector = _rest_selector(selector)
        if isinstance(selector, models.PointIdsList):
            selector = selector.points
        if isinstance(selector, models.FilterSelector):
            selector = selector.filter
        if isinstance(selector, models.Filter):
            out: list[Any] = []
            offset = None
            while True:
                page, offset = yield Call("scroll", {"collection_name": name, "scroll_filter": selector,
                                                     "limit": 1024, "offset": offset,
                                                     "with_payload": [RECEIPT_KEY], "with_vectors": False,
                                                     "shard_key_selector": shard_key})
                out.extend(page)
                if offset is None:
                    return out
        return (yield Call("retrieve", {"collection_name": name, "ids": list(selector),
                                         "with_payload": [RECEIPT_KEY], "with_vectors": False,
                                         "shard_key_selector": shard_key}))

    def payload_operation(self, op: str, name: str, pol: CollectionPolicy, operation: Any,
                          fresh: dict[str, Any] | None = None) -> Any:
        """Check one payload/delete operation of a batch; returns the operations to send (a
        generator). ``fresh``: receipt containers written earlier in the batch, by point id."""
        if isinstance(operation, models.SetPayloadOperation):
            sp = operation.set_payload
            payload = self._check_set(op, name, pol, sp.payload, sp.key)
            return [models.SetPayloadOperation(set_payload=sp.model_copy(update={"payload": payload}))]
        if isinstance(operation, models.DeletePayloadOperation):
            if any(_touches_receipt(k) for k in operation.delete_payload.keys):
                raise self._refuse_tamper(op, name, pol, "delete")
            return [operation]
        if isinstance(operation, models.OverwritePayloadOperation):
            sp = operation.overwrite_payload
            payload = self._check_set(op, name, pol, sp.payload, None)
            sel = sp.points if sp.points is not None else sp.filter
            return (yield from self._preserving_overwrite(name, payload, sel, fresh, shard_key=sp.shard_key))
        if isinstance(operation, models.ClearPayloadOperation):
            return (yield from self._preserving_overwrite(name, {}, operation.clear_payload, fresh))
        if isinstance(operation, models.DeleteVectorsOperation):
            dv = operation.delete_vectors
            sel = dv.points if dv.points is not None else dv.filter
            strip = yield from self._vector_receipt_strips(op, name, pol, sel, dv.shard_key, set(dv.vector), fresh)
            return [operation, *strip]
        return [operation]


def _quotable(name: str) -> bool:
    # Qdrant's JSON paths quote a key as "..." with no escapes: a name holding '"' or '\\' cannot
    # be addressed in a filter.
    return '"' not in name and "\\" not in name


def _receipts_unchanged(pid: Any, stored: Any, shape: CollectionShape) -> models.Filter | None:
    """A filter matching point ``pid`` only while its receipt container is still ``stored`` (None:
    no container), or None when ``stored`` cannot be pinned down by a filter (a malformed
    container written around the guard, or a vector name a JSON path cannot quote).

    Each receipt carries a salted commitment, unique per issuance: matching every stored
    receipt's commitment, and no receipt for the collection's other dense vectors, pins the
    container without comparing it whole (Qdrant matches scalars only)."""
    must: list[Any] = [models.HasIdCondition(has_id=[pid])]
    if stored is None:
        must.append(models.IsEmptyCondition(is_empty=models.PayloadField(key=RECEIPT_KEY)))
        return models.Filter(must=must)
    vectors = stored.get("vectors") if isinstance(stored, dict) else None
    if not isinstance(vectors, dict) or not all(
            isinstance(n, str) and _quotable(n) and isinstance(r, dict) and isinstance(r.get("commitment"), str)
            for n, r in vectors.items()):
        return None
    if not all(_quotable(n) for n in shape.dense):
        return None
    for n, r in vectors.items():
        must.append(models.FieldCondition(key=f'{RECEIPT_KEY}.vectors."{n}".commitment',
                                          match=models.MatchValue(value=r["commitment"])))
    for n in shape.dense:
        if n not in vectors:
            must.append(models.IsEmptyCondition(is_empty=models.PayloadField(key=f'{RECEIPT_KEY}.vectors."{n}"')))
    return models.Filter(must=must)


def _overwrite_op(payload: dict[str, Any], pid: Any, container: Any, shape: CollectionShape | None,
                  shard_key: Any) -> models.OverwritePayloadOperation:
    """Overwrite point ``pid``'s payload with ``payload`` plus the receipt ``container``; with a
    ``shape``, only while the stored container is still ``container`` (:func:`_receipts_unchanged`)."""
    new = dict(payload)
    if container is not None:
        new[RECEIPT_KEY] = container
    where = _receipts_unchanged(pid, container, shape) if shape is not None else None
    return models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(
        payload=new, shard_key=shard_key, **({"filter": where} if where is not None else {"points": [pid]})))


def _where(op: Any) -> Any:
    """The filter of a Set/DeletePayload operation (None when it names point ids)."""
    inner = op.set_payload if isinstance(op, models.SetPayloadOperation) else op.delete_payload
    return inner.filter


def _strip_op(pid: Any, container: Any, names: set[str], shape: CollectionShape | None,
              shard_key: Any) -> tuple[Any, Any] | None:
    """The operation dropping the receipts of vectors ``names`` from point ``pid``'s receipt
    ``container``, and the container it leaves (None: no receipts left); None when there is
    nothing to drop. With a ``shape`` it applies only while ``container`` is still stored."""
    receipts = stored_receipts({RECEIPT_KEY: container})
    if not names & receipts.keys():
        return None
    kept = {k: v for k, v in receipts.items() if k not in names}
    left = receipts_for_payload(kept) if kept else None
    cond = _receipts_unchanged(pid, container, shape) if shape is not None else None
    where: dict[str, Any] = {"filter": cond} if cond is not None else {"points": [pid]}
    if left:
        return models.SetPayloadOperation(set_payload=models.SetPayload(
            payload={RECEIPT_KEY: left}, shard_key=shard_key, **where)), left
    return models.DeletePayloadOperation(delete_payload=models.DeletePayload(
        keys=[RECEIPT_KEY], shard_key=shard_key, **where)), None


def _rest_selector(selector: Any) -> Any:
    """``selector`` with gRPC filters, selectors and point ids converted to their REST models (as
    qdrant-client's REST path does), so the guard can resolve them."""
    if isinstance(selector, grpc.Filter):
        return GrpcToRest.convert_filter(selector)
    if isinstance(selector, grpc.PointsSelector):
        return GrpcToRest.convert_points_selector(selector)
    if isinstance(selector, (list, tuple)) and any(isinstance(p, grpc.PointId) for p in selector):
        return [GrpcToRest.convert_point_id(p) if isinstance(p, grpc.PointId) else p for p in selector]
    return selector


def _selector_ids(selector: Any) -> list[Any]:
    """The point ids a selector names explicitly ([] for filters)."""
    selector = _rest_selector(selector)
    if isinstance(selector, models.PointIdsList):
        return list(selector.points)
    if isinstance(selector, (models.Filter, models.FilterSelector)) or selector is None:
        return []
    return list(selector)
