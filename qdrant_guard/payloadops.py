"""Payload changes on sensitive collections: receipts cannot be forged, altered or stripped."""
from __future__ import annotations

from typing import Any

from qdrant_client.http import models

from .decision import Verdict
from .pipeline import Call, Op
from .policy import CollectionPolicy
from .receipts import RECEIPT_KEY
from .textguard import TextOps

_TAMPER = (
    "the receipt payload key {key!r} is reserved: it can only be written by the guard together "
    "with the vector it certifies. Re-upsert the point (with a fresh receipt) instead"
)


def _touches_receipt(key: str | None) -> bool:
    return key is not None and (key == RECEIPT_KEY or key.startswith(RECEIPT_KEY + ".") or key.startswith(RECEIPT_KEY + "["))


class PayloadOps(TextOps):
    """The payload half of the pipeline."""

    def _refuse_tamper(self, op: str, name: str, pol: CollectionPolicy, what: str) -> Exception:
        return self.refuse(self.decision(
            op, name, pol, Verdict.RECEIPT_TAMPERING, _TAMPER.format(key=RECEIPT_KEY) + f" ({what})"))

    def _check_set(self, op: str, name: str, pol: CollectionPolicy, payload: dict[str, Any], key: str | None) -> dict[str, Any]:
        if _touches_receipt(key) or (key is None and RECEIPT_KEY in payload) or (
                key is not None and key.split(".")[0] == "" and RECEIPT_KEY in payload):
            raise self._refuse_tamper(op, name, pol, "set")
        if key is None:
            payload = self.guard_payload_text(op, name, pol, dict(payload), point_id=None,
                                              in_boundary=pol.raw_allowed(self.boundary()))
        return payload

    def op_set_payload(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        payload = self._check_set(method, name, pol, args["payload"], args.get("key"))
        self.record(self.decision(method, name, pol, Verdict.ALLOW, "payload set; receipts untouched"))
        return (yield Call(method, {**args, "payload": payload}))

    def op_delete_payload(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        if any(_touches_receipt(k) for k in args["keys"]):
            raise self._refuse_tamper(method, name, pol, "delete")
        self.record(self.decision(method, name, pol, Verdict.ALLOW, "payload keys deleted; receipts untouched"))
        return (yield Call(method, args))

    def op_overwrite_payload(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        payload = self._check_set(method, name, pol, args["payload"], None)
        ops = yield from self._preserving_overwrite(name, payload, args["points"])
        self.record(self.decision(method, name, pol, Verdict.ALLOW,
                                  f"payload overwritten on {len(ops)} point(s); receipts preserved"))
        return (yield from self._run_ops(name, ops, args))

    def op_clear_payload(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        ops = yield from self._preserving_overwrite(name, {}, args["points_selector"])
        self.record(self.decision(method, name, pol, Verdict.ALLOW,
                                  f"payload cleared on {len(ops)} point(s); receipts preserved"))
        return (yield from self._run_ops(name, ops, args))

    def _run_ops(self, name: str, ops: list[Any], args: dict[str, Any]) -> Op:
        if not ops:
            return models.UpdateResult(operation_id=None, status=models.UpdateStatus.COMPLETED)
        rest = {k: args[k] for k in ("wait", "ordering") if k in args}
        results = yield Call("batch_update_points", {"collection_name": name, "update_operations": ops, **rest})
        return results[-1]

    def _preserving_overwrite(self, name: str, payload: dict[str, Any], selector: Any) -> Any:
        """Per-point overwrite operations that carry each point's own receipt along."""
        records = yield from self._resolve(name, selector)
        ops = []
        for r in records:
            new = dict(payload)
            if r.payload and RECEIPT_KEY in r.payload:
                new[RECEIPT_KEY] = r.payload[RECEIPT_KEY]
            ops.append(models.OverwritePayloadOperation(
                overwrite_payload=models.SetPayload(payload=new, points=[r.id])))
        return ops

    def _resolve(self, name: str, selector: Any) -> Any:
        """The points a selector names, with their receipts (ids, PointIdsList, Filter, FilterSelector)."""
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
                                                     "with_payload": [RECEIPT_KEY], "with_vectors": False})
                out.extend(page)
                if offset is None:
                    return out
        return (yield Call("retrieve", {"collection_name": name, "ids": list(selector),
                                         "with_payload": [RECEIPT_KEY], "with_vectors": False}))

    def payload_operation(self, op: str, name: str, pol: CollectionPolicy, operation: Any) -> Any:
        """Check one payload/delete operation of a batch; returns the operations to send."""
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
            return (yield from self._preserving_overwrite(name, payload, sel))
        if isinstance(operation, models.ClearPayloadOperation):
            return (yield from self._preserving_overwrite(name, {}, operation.clear_payload))
        return [operation]
