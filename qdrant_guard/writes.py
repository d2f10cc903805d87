"""Guarded writes of vectors: receipts, noise on write, in-boundary raw vectors, atomic refusal.

:class:`WriteOps` is the write half of the pipeline, put together from mixins: noise and receipts
in :mod:`qdrant_guard.writesign`, a write's points prepared, decided and audited in
:mod:`qdrant_guard.writeprep`, ``batch_update_points`` in :mod:`qdrant_guard.batchupdate`; the
point writes (``upsert``, ``upload_points``, ``upload_collection``, ``update_vectors``, ``delete``)
are here.
"""
from __future__ import annotations

from typing import Any

from .batchupdate import BatchUpdate
from .decision import Verdict
from .pipeline import Call, Op
from .policy import CollectionPolicy
# Its public names (points_from_any, points_from_columns, vector_updates_from_any) still import from here.
from .writepoints import points_from_any, points_from_columns, vector_updates_from_any


class WriteOps(BatchUpdate):
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
        yield from self._warn_untagged(method, name, pol, prepared.points)
        self._record_write(method, name, pol, prepared, filters)
        result = yield from self.forward(method, name, pol, Call(method, {**args, "points": prepared.points}))
        return result

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
        yield from self._warn_untagged(method, name, pol, prepared.points)
        self._record_write(method, name, pol, prepared, filters)
        result = yield from self.forward(method, name, pol, Call(method, {**args, "points": prepared.points}))
        return result

    def op_upload_collection(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        forwarded: dict[str, Any] = {k: args[k] for k in ("batch_size", "parallel", "method", "max_retries", "wait",
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
        yield from self._warn_untagged(method, name, pol, prepared.points)
        self._record_write(method, name, pol, prepared, filters)
        result = yield from self.forward(method, name, pol, Call(
            "upload_points", {"collection_name": name, "points": prepared.points, **forwarded}))
        return result

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
