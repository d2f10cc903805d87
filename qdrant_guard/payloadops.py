"""Payload changes on sensitive collections: receipts cannot be forged, altered or stripped."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Callable, Collection

from qdrant_client import grpc
from qdrant_client.conversions.conversion import GrpcToRest
from qdrant_client.http import models

from .decision import Verdict
from .errors import GuardArgumentTypeError
from .pipeline import Call, Op, mark_audited
from .policy import CollectionPolicy
from .receipts import RECEIPT_KEY, normalize_point_id, receipts_for_payload, stored_receipts
from .sent_form import _stored_keys
from .sourcefilters import _only_names_sources
from .sources import (path_head, payload_sources, restricts_sources, source_delete_removal, source_overwrite_removal,
                      source_removed_warning, source_set_removal)
from .textguard import TextOps, selection_of
from .withheld import without_operation_ids

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


def _reaches(key: Any, head: str) -> bool:
    """Whether a payload key path can reach top-level key ``head`` (a path that does not parse:
    whether it mentions it)."""
    if not isinstance(key, str):
        return False
    first = _first_segment(key)
    return head in key if first is None else first == head


class PayloadOps(TextOps):
    """The payload half of the pipeline."""

    def _retags(self, pol: CollectionPolicy, *, payload: Any = None, key: Any = None, keys: Any = None) -> bool:
        """Whether a payload change made by this principal must not touch points of restricted
        sources: it is outside the owner boundary of a collection with ``restricted_sources``, and
        it sets (``payload``, below ``key``) or deletes (``keys``) the top-level key the source field
        is under."""
        if not restricts_sources(pol) or self.boundary() == pol.owner:
            return False
        head = pol.source_field.split(".")[0]
        if keys is not None:
            return any(_reaches(k, head) for k in keys)
        if key is not None:
            return _reaches(key, head)
        return isinstance(payload, dict) and head in payload

    def _keep_restricted(self, op: str, name: str, pol: CollectionPolicy, records: Any, what: str) -> None:
        """Refuse (REFUSED_CROSS_BOUNDARY) a change of ``what`` on ``records`` (the points it
        selects, with their source field) outside the owner boundary when one of them is in a
        restricted source: retagged to another source or none, its points would leave the
        extraction budget with their text and vectors (only the owner boundary tags points with a
        restricted source, :meth:`refuse_reserved_sources`, and only it may take them out)."""
        if not restricts_sources(pol) or self.boundary() == pol.owner:
            return
        restricted = set(pol.diversity.restricted_sources)
        hit = sorted({src for r in records for src in payload_sources(r.payload, pol.source_field) if src in restricted})
        if not hit:
            return
        # Neither the ids nor the number of the points are named: the selection can be a filter on
        # fields the budget withholds, and the refusal would list which withheld points match it.
        raise self.refuse(self.decision(
            op, name, pol, Verdict.REFUSED_CROSS_BOUNDARY,
            f"{what} would change {pol.source_field!r} of points of restricted source(s) {hit} of collection "
            f"{name!r}, and only the owner boundary ({pol.owner!r}) retags them: moved to another source, or "
            "none, their points would leave the extraction budget (diversity.max_source_coverage). Leave the "
            f"source field out of the change, select only points of other sources, or make it from boundary "
            f"{pol.owner!r}. Nothing was written"))

    def _refuse_restricted_probe(self, op: str, name: str, pol: CollectionPolicy, selector: Any, what: str) -> None:
        """Refuse (REFUSED_CROSS_BOUNDARY), before the points are read, a change :meth:`_keep_restricted`
        guards whose ``selector`` is a filter naming other fields than the source field, outside
        the owner boundary: that refusal depends on whether the filter matches a point of a
        restricted source, so it would answer for every point what a ``count`` with the filter
        answers (which a budgeted reader may not ask, and a writer who may not read cannot), and a
        filter that also names the restricted source writes nothing either way."""
        if not restricts_sources(pol) or self.boundary() == pol.owner:
            return
        sel = _rest_selector(selector)
        flt = sel.filter if isinstance(sel, models.FilterSelector) else sel
        if not isinstance(flt, models.Filter):
            return  # point ids
        if _only_names_sources(flt, pol.source_field):
            return
        raise self.refuse(self.decision(
            op, name, pol, Verdict.REFUSED_CROSS_BOUNDARY,
            f"{what} selects points of collection {name!r} by a filter on fields other than "
            f"{pol.source_field!r}, and the collection has restricted source(s): outside the owner boundary "
            f"({pol.owner!r}) such a change is refused when a point it selects is in one, so its answer would tell "
            "whether the filter matches a point there (a count with that filter, which the extraction budget "
            f"refuses). Select the points by id, or by a filter on {pol.source_field!r} alone, or make the change "
            f"from boundary {pol.owner!r}. Nothing was written"))

    def _keep_restricted_of(self, op: str, name: str, pol: CollectionPolicy, selector: Any, shard_key: Any,
                            what: str) -> Op:
        """:meth:`_keep_restricted` on the points ``selector`` names, read first (a generator)."""
        if selector is None:
            return  # a batch operation with neither points nor a filter: Qdrant refuses it
        self._refuse_restricted_probe(op, name, pol, selector, what)
        if shard_key is None:
            shard_key = getattr(_rest_selector(selector), "shard_key", None)
        records = yield from self._resolve(op, name, pol, selector, shard_key,
                                           fields=[pol.source_field.split(".")[0]])
        self._keep_restricted(op, name, pol, records, what)

    def warn_source_removed(self, call: str, name: str, pol: CollectionPolicy, selector: Any,
                            does: Callable[[], str | None]) -> Op:
        """Warn, once per collection and client (shared with the write warning) and before the
        change is sent, that it leaves the points ``selector`` names without a source (``does()``:
        what it does to their source field, None when it leaves them one): like points written
        without one, they then count as one source, and the source cap keeps a top-k short of
        ``limit`` without a word. ``does`` (a few dict look-ups) is only asked while the collection
        has not been warned of. A generator (see :meth:`warn_untagged_once`)."""
        def message() -> str | None:
            change = does()
            if change is None:
                return None
            sel = _rest_selector(selector)
            ids: int | None = None
            if not isinstance(sel, (models.Filter, models.FilterSelector)):
                ids = len(_selector_ids(sel))
                if not ids:
                    return None
            return source_removed_warning(name, pol, self.policy_section(name, pol, "diversity"),
                                          call, change, ids)
        yield from self.warn_untagged_once(call, name, pol, message)

    def _refuse_tamper(self, op: str, name: str, pol: CollectionPolicy, what: str) -> Exception:
        return self.refuse(self.decision(
            op, name, pol, Verdict.RECEIPT_TAMPERING, _TAMPER.format(key=RECEIPT_KEY) + f" ({what})"))

    def _refuse_input(self, op: str, name: str, pol: CollectionPolicy, message: str) -> BaseException:
        """A malformed argument of a payload method, audited as UNSUPPORTED_WRITE (the reason word,
        never the value) and returned for the caller to raise: read as the guard reads it, it failed
        with a bare TypeError or ValueError, unaudited, where a PUBLIC collection passes it to
        qdrant-client."""
        exc = GuardArgumentTypeError(f"{message}. Nothing was written")
        self.record(self.decision(
            op, name, pol, Verdict.UNSUPPORTED_WRITE,
            f"{op}: the guard refused the call's input ({type(exc).__name__}: invalid_input) before sending "
            "anything; the error raised to the caller names the fix. Nothing was written",
            details={"error": type(exc).__name__, "reason": "invalid_input"}))
        return mark_audited(exc)

    def _check_args(self, op: str, name: str, pol: CollectionPolicy, args: dict[str, Any], selector: str,
                    names: str | None = None) -> None:
        """Refuse a points ``selector`` argument, a ``key`` or the list of names in ``names``
        (``keys``, ``vectors``) of a type qdrant-client does not take."""
        # The type alone, not converted: a gRPC filter that does not convert is the filter
        # screen's to refuse (QUERY_REJECTED, "cannot check"), not a wrong-type argument.
        if not isinstance(args[selector], (list, tuple, models.PointIdsList, models.Filter, models.FilterSelector,
                                           grpc.Filter, grpc.PointsSelector)):
            raise self._refuse_input(
                op, name, pol, f"{op}() argument {selector!r} must be a list of point ids, a models.PointIdsList, "
                f"models.Filter or models.FilterSelector, not {type(args[selector]).__name__}")
        key = args.get("key")
        if key is not None and not isinstance(key, str):
            raise self._refuse_input(op, name, pol, f"{op}() argument 'key' must be a str (a payload key path such "
                                     f"as 'meta.tags'), not {type(key).__name__}")
        if names is not None:
            given = args[names]
            # qdrant-client's REST models take any iterable of str here (a set, dict.keys(), a
            # generator); only a str (read as its characters), bytes and a mapping are refused.
            # Read once into a list: a generator checked here would reach Qdrant empty.
            if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, Iterable):
                raise self._refuse_input(op, name, pol, f"{op}() argument {names!r} must be a list of str, "
                                         f"not {type(given).__name__}")
            items = list(given)
            odd = [k for k in items if not isinstance(k, str)]
            if odd:
                raise self._refuse_input(op, name, pol, f"{op}() argument {names!r} must be a list of str, not a "
                                         f"{type(given).__name__} holding {type(odd[0]).__name__}")
            args[names] = [str(k) for k in items]

    def _payload_dict(self, op: str, name: str, pol: CollectionPolicy, payload: Any) -> dict[str, Any]:
        """``payload`` as the dict of fields the client stores (:func:`_stored_keys`), or refused
        (audited): local mode stores a pydantic model's or a dataclass's fields as given, so on a
        PUBLIC collection the screen, which reads a dict, let their text through."""
        payload = _stored_keys(payload)
        if not isinstance(payload, dict):
            raise self._refuse_input(op, name, pol, f"{op}() argument 'payload' must be a dict of payload fields, not "
                                     f"{type(payload).__name__}; e.g. payload={{'source': 'handbook'}}")
        return payload

    def _check_set(self, op: str, name: str, pol: CollectionPolicy, payload: dict[str, Any], key: str | None,
                   points: Any) -> dict[str, Any]:
        """``payload`` checked and screened for a rewrite of the points ``points`` selects (ids or a
        filter), which its refusals name."""
        payload = self._payload_dict(op, name, pol, payload)
        targets = selection_of(points)
        if _touches_receipt(key) or (key is None and RECEIPT_KEY in payload) or (
                key is not None and key.split(".")[0] == "" and RECEIPT_KEY in payload):
            raise self._refuse_tamper(op, name, pol, "set")
        self.refuse_reserved_sources(op, name, pol, payload, key)
        if key is None:
            payload = self.guard_payload_text(op, name, pol, dict(payload), point_id=targets,
                                              in_boundary=pol.owner is not None and self.boundary() == pol.owner)
        else:
            # Set below the key: no receipt container there (the key itself is screened as a field
            # name, with the call's filters).
            payload = self.screen_payload_fields(op, name, pol, payload, point_id=targets, top=False, under=key)
            payload = self.text_below_key(op, name, pol, payload, key, point_id=targets)
        return payload

    def op_set_payload(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pub = self.public_policy(args)
        if pub is not None:
            # With a key the payload lands below it, never in the top-level text field.
            # Its keys as stored: under payload_fields = "text_field", b"text" is the text field.
            payload = self.public_payload(method, name, pub, self._payload_dict(method, name, pub, args["payload"]),
                                          key=args.get("key"), point_id=selection_of(args.get("points")))
            return (yield Call(method, {**args, "payload": payload}))
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        self._check_args(method, name, pol, args, "points")
        filters = self.screen_write_filters(method, name, pol, args)  # type: ignore[attr-defined]
        payload = self._check_set(method, name, pol, args["payload"], args.get("key"), args["points"])
        if self._retags(pol, payload=payload, key=args.get("key")):
            yield from self._keep_restricted_of(method, name, pol, args["points"], args.get("shard_key_selector"),
                                                "set_payload")
        points = yield from self._existing_only(method, name, pol, args["points"], args.get("shard_key_selector"))
        yield from self.warn_source_removed(method, name, pol, args["points"],
                                            lambda: source_set_removal(pol.source_field, payload, args.get("key")))
        self.record(self.decision(method, name, pol, Verdict.ALLOW, "payload set; receipts untouched",
                                  details=filters))
        return (yield from self.forward(method, name, pol, Call(method, {**args, "payload": payload, "points": points})))

    def op_delete_payload(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        self._check_args(method, name, pol, args, "points", "keys")
        filters = self.screen_write_filters(method, name, pol, args)  # type: ignore[attr-defined]
        if any(_touches_receipt(k) for k in args["keys"]):
            raise self._refuse_tamper(method, name, pol, "delete")
        if self._retags(pol, keys=args["keys"]):
            yield from self._keep_restricted_of(method, name, pol, args["points"], args.get("shard_key_selector"),
                                                "delete_payload")
        points = yield from self._existing_only(method, name, pol, args["points"], args.get("shard_key_selector"))
        yield from self.warn_source_removed(method, name, pol, args["points"],
                                            lambda: source_delete_removal(pol.source_field, args["keys"]))
        self.record(self.decision(method, name, pol, Verdict.ALLOW, "payload keys deleted; receipts untouched",
                                  details=filters))
        return (yield from self.forward(method, name, pol, Call(method, {**args, "points": points})))

    def _existing_only(self, op: str, name: str, pol: CollectionPolicy, selector: Any, shard_key: Any,
                       fresh: dict[str, Any] | None = None, deleted: Collection[str] = (), where: str = "") -> Any:
        """The selector to send for a ``set_payload``/``delete_payload`` naming ``selector``'s
        points (a generator): a filter is returned as it is; ids are looked up first, and the call
        refused (audited UNSUPPORTED_WRITE, nothing sent) if one names no point or is no point id,
        since Qdrant (local mode and server alike) writes the other points, then fails. The ids
        are then sent as a ``has_id`` filter: a point deleted by another client after the look-up
        is skipped, as if the deletion had come just after this call, instead of failing it half
        applied. The look-up costs one ``retrieve`` of the ids (no payload, no vectors); calls by
        filter read nothing. In a batch, ``fresh`` holds the points upserted (unconditionally)
        earlier in it and ``deleted`` those deleted earlier by id, by normalised id: the former
        count as present, the latter as missing; and an empty id list is refused too. ``where``: the
        operation's place in the batch (``update_operations[2]``), which refusals name.

        Raises:
            UnsupportedWriteError: a missing point, an invalid id, or (in a batch) no id at all.
        """
        selector = _rest_selector(selector)
        ids = _selector_ids(selector)
        if not ids and fresh is not None and not isinstance(selector, (models.Filter, models.FilterSelector)):
            # Qdrant fails an empty id list, after applying the batch's earlier operations.
            raise self.unsupported_write(op, name, pol, (
                f"{op}: {where}{', ' if where else ''}a payload change in a batch on sensitive collection {name!r}"
                f"{',' if where else ''} names no point (an "
                "empty id list); Qdrant would apply the batch up to it, then fail. Leave the operation "
                "out, or name its points. Nothing was written"))
        if not ids:
            return selector
        self.check_point_ids(op, name, pol, ids)
        gone = [pid for pid in ids if normalize_point_id(pid) in deleted]
        if gone:
            raise self.unsupported_write(op, name, pol, (
                f"{op}: {where}{', ' if where else ''}a payload change of point(s) {gone} deleted earlier in the "
                "same batch on sensitive "
                f"collection {name!r} would fail half applied. Leave their ids out. Nothing was written"))
        if shard_key is None:
            shard_key = getattr(selector, "shard_key", None)
        found = yield from self.lookup(op, name, pol, Call(
            "retrieve", {"collection_name": name, "ids": ids, "with_payload": False, "with_vectors": False,
                         "shard_key_selector": shard_key}))
        present = {normalize_point_id(r.id): (r.id, None) for r in found}
        why = "Qdrant would write the other points, then fail on them"
        if fresh is not None:
            why = ("Qdrant would apply the batch up to this operation, then fail on them (a conditional "
                   "upsert earlier in the batch does not count: whether it creates a point is not known "
                   "beforehand)")
        self._all_named(op, name, pol, selector, present, fresh or {}, None, why, where)
        by_ids = models.Filter(must=[models.HasIdCondition(has_id=ids)])
        if isinstance(selector, models.PointIdsList):
            return models.FilterSelector(filter=by_ids, shard_key=selector.shard_key)
        return by_ids

    def op_overwrite_payload(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pub = self.public_policy(args)
        if pub is not None:
            payload = self.public_payload(method, name, pub, self._payload_dict(method, name, pub, args["payload"]),
                                          point_id=selection_of(args.get("points")))
            return (yield Call(method, {**args, "payload": payload}))
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        self._check_args(method, name, pol, args, "points")
        filters = self.screen_write_filters(method, name, pol, args)  # type: ignore[attr-defined]
        payload = self._check_set(method, name, pol, args["payload"], None, args["points"])
        return (yield from self._rewrite(method, name, pol, payload, args["points"], args, "overwritten", filters))

    def op_clear_payload(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        self._check_args(method, name, pol, args, "points_selector")
        filters = self.screen_write_filters(method, name, pol, args)  # type: ignore[attr-defined]
        return (yield from self._rewrite(method, name, pol, {}, args["points_selector"], args, "cleared", filters))

    def _rewrite(self, method: str, name: str, pol: CollectionPolicy, payload: dict[str, Any], selector: Any,
                 args: dict[str, Any], done: str, filters: dict[str, Any]) -> Op:
        """A standalone receipt-preserving rewrite, sent as one request (``filters``: what the
        screen of its filter reported, for the allow entry). An empty id list goes to Qdrant as
        given, which refuses it ("Empty update request") as it does for plain qdrant-client."""
        plain = _rest_selector(selector)
        if isinstance(plain, (list, tuple, models.PointIdsList)) and not _selector_ids(plain):
            self.record(self.decision(method, name, pol, Verdict.ALLOW, f"payload {done} on no point (empty id list)",
                                      details=filters))
            return (yield from self.forward(method, name, pol, Call(method, args)))
        ops, n = yield from self._preserving_overwrite(method, name, pol, payload, selector,
                                                       shard_key=args.get("shard_key_selector"))
        if n:
            yield from self.warn_source_removed(method, name, pol, selector,
                                                lambda: source_overwrite_removal(pol.source_field, payload))
        self.record(self.decision(method, name, pol, Verdict.ALLOW,
                                  f"payload {done} on {n} point(s); receipts preserved", details=filters))
        return (yield from self._run_ops(method, name, pol, ops, args))

    def op_delete_vectors(self, method: str, args: dict[str, Any]) -> Op:
        """Delete named vectors, and the receipts that certified them: a receipt left without its
        vector would make the collection fail :func:`qdrant_guard.receipts.verify`."""
        name = args["collection_name"]
        pol = self.gate(method, args, "write")
        if pol is None:
            return (yield Call(method, args))
        self._check_args(method, name, pol, args, "points", "vectors")
        filters = self.screen_write_filters(method, name, pol, args)  # type: ignore[attr-defined]
        selector = _rest_selector(args["points"])
        shard_key = args.get("shard_key_selector")
        if shard_key is None:
            shard_key = getattr(selector, "shard_key", None)
        strip = yield from self._vector_receipt_strips(method, name, pol, selector, shard_key,
                                                       set(args["vectors"]))
        yield from self._refuse_unknown_vector_names(method, name, pol, args["vectors"])  # type: ignore[attr-defined]
        self.record(self.decision(method, name, pol, Verdict.ALLOW,
                                  f"write access granted; receipts of the deleted vectors dropped on "
                                  f"{len(strip)} point(s)", details=filters))
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
        return results[0]

    def op_delete_vector_name(self, method: str, args: dict[str, Any]) -> Op:
        """Delete a named vector from the collection (every point's), then the receipts that
        certified it: left behind, they would make the collection fail
        :func:`qdrant_guard.receipts.verify` (as for :meth:`op_delete_vectors`). The two are separate
        requests (a collection change, then a payload batch), and the points are looked up before
        the first; if the second fails, the failure is audited (QDRANT_ERROR) and the receipts stay,
        as does one another client writes between the look-up and the deletion (they commit to the
        deleted vectors, so they certify no other; docs/atomicity.md)."""
        name = args["collection_name"]
        pol = self.gate(method, args, "admin")
        self.forget_shape(name)
        if pol is None:
            return (yield Call(method, args))
        # Looked up before the deletion, so that a failed look-up has written nothing.
        strip = yield from self._vector_receipt_strips(
            method, name, pol, models.FilterSelector(filter=models.Filter()), None, {args["vector_name"]})
        self.record(self.decision(method, name, pol, Verdict.ALLOW,
                                  "admin access granted; the deleted vector's receipts are dropped from every point"))
        result = yield from self.forward(method, name, pol, Call(method, args))
        if strip:
            yield from self._run_ops(method, name, pol, strip, args)
        return result

    def _vector_receipt_strips(self, op: str, name: str, pol: CollectionPolicy, selector: Any, shard_key: Any,
                               names: set[str], fresh: dict[str, Any] | None = None, where: str = "") -> Any:
        """The payload operations that drop the receipts of vectors ``names`` from the points
        ``selector`` names (a generator). ``fresh``: receipt containers written earlier in the same
        batch, by normalised point id; updated with the containers these operations leave.

        The receipts are deleted by their key paths inside the container, so the other vectors'
        receipts are never written back: another client's update of one of them between this read
        and the write keeps its new receipt. Only when a vector name cannot be written as a Qdrant
        JSON path (it holds ``"`` or ``\\``) is each point's remaining container rewritten whole.

        Raises:
            UnsupportedWriteError: an id names no point (Qdrant would delete the other points'
                vectors, then fail before their receipts are dropped).
        """
        fresh = {} if fresh is None else fresh
        records = yield from self._resolve(op, name, pol, selector, shard_key)
        current = {normalize_point_id(r.id): (r.id, (r.payload or {}).get(RECEIPT_KEY)) for r in records}
        self._all_named(op, name, pol, selector, current, fresh, None,
                        "a vector deletion naming them would be half applied", where)
        by_path = all(_quotable(n) for n in names)
        strip: list[Any] = []
        hit: list[Any] = []
        for key, (pid, stored) in current.items():
            receipts = stored_receipts({RECEIPT_KEY: fresh[key] if key in fresh else stored})
            if not names & receipts.keys():
                continue
            kept = {k: v for k, v in receipts.items() if k not in names}
            container = receipts_for_payload(kept) if kept else None
            fresh[key] = container
            if by_path:
                hit.append(pid)
            else:
                strip.append(models.SetPayloadOperation(set_payload=models.SetPayload(
                    payload={RECEIPT_KEY: container}, points=[pid], shard_key=shard_key))
                    if container else models.DeletePayloadOperation(delete_payload=models.DeletePayload(
                        keys=[RECEIPT_KEY], points=[pid], shard_key=shard_key)))
        if hit:
            strip.append(models.DeletePayloadOperation(delete_payload=models.DeletePayload(
                keys=[f'{RECEIPT_KEY}.vectors.{_quote(n)}' for n in sorted(names)],
                filter=models.Filter(must=[models.HasIdCondition(has_id=hit)]), shard_key=shard_key)))
        return strip

    def _all_named(self, op: str, name: str, pol: CollectionPolicy, selector: Any, found: dict[Any, Any],
                   fresh: dict[str, Any], empty: Any, why: str, where: str = "") -> None:
        """Add to ``found`` (points read, by normalised id) the ids ``selector`` names that were
        upserted earlier in the batch (``fresh``), as ``(id, empty)``; refuse (audited) the call if
        it names any other point ``found`` lacks (``where``: the operation's place in a batch).

        Raises:
            UnsupportedWriteError: an id names no point.
        """
        for pid in _selector_ids(selector):
            key = normalize_point_id(pid)
            if key in fresh and key not in found:
                found[key] = (pid, empty)
        missing = [p for p in _selector_ids(selector) if normalize_point_id(p) not in found]
        if missing:
            message = (f"{op}: {where + ': ' if where else ''}point(s) {missing} do not exist in collection "
                       f"{name!r}; {why}. Leave their "
                       "ids out. Nothing was written")
            raise self.unsupported_write(op, name, pol, message)

    def unsent_result(self, args: dict[str, Any]) -> Any:
        """The answer to an update the guard did not send (its filter or ids matched no point):
        no operation id, and the status Qdrant gives an update sent with the same ``wait``
        (a server acknowledges ``wait=False``, and ``wait=None``, which qdrant-client leaves out of
        the request, the server's default being not to wait; local mode completes every update)."""
        late = not args.get("wait", True) and self.shared.get("remote", False)
        return models.UpdateResult(operation_id=None, status=models.UpdateStatus.ACKNOWLEDGED if late
                                   else models.UpdateStatus.COMPLETED)

    def writer_answer(self, pol: CollectionPolicy, result: Any) -> Any:
        """``result`` as a principal who may not read the collection gets it: without its operation
        id. An update the guard sent nothing for (its filter matched no point) has none, so a
        Qdrant id would tell such a writer that its filter matched something. (Every point update's
        answer gets the same treatment in :meth:`Pipeline.run`; see :func:`without_operation_ids`.)"""
        if pol.may_read(self.boundary()):
            return result
        return without_operation_ids(result)

    def _run_ops(self, method: str, name: str, pol: CollectionPolicy, ops: list[Any], args: dict[str, Any]) -> Op:
        if not ops:
            return self.unsent_result(args)
        rest: dict[str, Any] = {k: args[k] for k in ("wait", "ordering", "timeout") if k in args}
        results = yield from self.forward(method, name, pol, Call(
            "batch_update_points", {"collection_name": name, "update_operations": ops, **rest}))
        return self.writer_answer(pol, results[-1])

    def _preserving_overwrite(self, op: str, name: str, pol: CollectionPolicy, payload: dict[str, Any],
                              selector: Any, fresh: dict[str, Any] | None = None, *, shard_key: Any = None,
                              written: set[str] | frozenset[str] = frozenset(), where: str = "") -> Any:
        """The operations that overwrite the payload of the points ``selector`` names with
        ``payload`` and keep their receipts (a generator returning ``(operations, point count)``).

        The receipts are never written back: ``payload`` is set on the points, then every other
        top-level key they hold (read now, plus ``written``: the keys earlier operations of the
        same batch may have written) is deleted, so another client's vector update between this
        read and the write keeps its new receipt. Only when a key cannot be written as a Qdrant
        JSON path (it holds ``"`` or ``\\``) is each point's payload overwritten whole with the
        receipts read (or, from ``fresh``, the receipt containers written earlier in the same
        batch, by normalised point id).
        ``shard_key``: the call's shard key selector (default: the selector's own ``shard_key``);
        the points are looked up, and rewritten, in those shards only.

        Raises:
            UnsupportedWriteError: an id names no point (audited; nothing is sent). qdrant-client
                fails on such an id, after rewriting the ids before it.
        """
        fresh = fresh or {}
        selector = _rest_selector(selector)
        what = "a payload overwrite" if payload else "a payload clear"
        self._refuse_restricted_probe(op, name, pol, selector, what)
        if shard_key is None:
            shard_key = getattr(selector, "shard_key", None)
        records = yield from self._resolve(op, name, pol, selector, shard_key, payload=True)
        self._keep_restricted(op, name, pol, records, what)
        targets = {normalize_point_id(r.id): (r.id, r.payload or {}) for r in records}
        self._all_named(op, name, pol, selector, targets, fresh, {},
                        "qdrant-client refuses a payload rewrite naming them", where)
        if not targets:
            return [], 0
        held = set(written).union(*(p.keys() for _, p in targets.values()))
        drop = sorted(held - payload.keys() - {RECEIPT_KEY})
        if all(_quotable(k) for k in drop):
            by_ids = models.Filter(must=[models.HasIdCondition(has_id=[pid for pid, _ in targets.values()])])
            ops: list[Any] = []
            if payload:
                ops.append(models.SetPayloadOperation(set_payload=models.SetPayload(
                    payload=payload, filter=by_ids, shard_key=shard_key)))
            if drop:
                ops.append(models.DeletePayloadOperation(delete_payload=models.DeletePayload(
                    keys=[_quote(k) for k in drop], filter=by_ids, shard_key=shard_key)))
            return ops, len(targets)
        ops = []
        for key, (pid, stored) in targets.items():
            container = fresh[key] if key in fresh else stored.get(RECEIPT_KEY)
            new = dict(payload)
            if container is not None:
                new[RECEIPT_KEY] = container
            # By a has_id filter: a point deleted since the look-up (earlier in the batch, by a
            # filter, or by another client) is skipped, where its id failed the rest half applied.
            ops.append(models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(
                payload=new, filter=models.Filter(must=[models.HasIdCondition(has_id=[pid])]), shard_key=shard_key)))
        return ops, len(targets)

    def lookup(self, op: str, name: str, pol: CollectionPolicy, call: Call) -> Any:
        """Send ``call``, a read the guard makes before deciding a write (a generator). If Qdrant
        fails it, the failure is audited (QDRANT_ERROR, naming the method and the error type: the
        message can quote a filter) and re-raised: sent without the look-up, the write would have
        had an entry, and it must not fail with none now."""
        try:
            return (yield call)
        except GeneratorExit:  # abandoned, not failed
            raise
        except BaseException as exc:
            self.record(self.decision(
                op, name, pol, Verdict.QDRANT_ERROR,
                f"Qdrant failed while the guard looked up the points the call names ({call.method} raised "
                f"{type(exc).__name__}; its message is not logged); nothing was written",
                details={"method": call.method, "error": type(exc).__name__}))
            raise

    def _resolve(self, op: str, name: str, pol: CollectionPolicy, selector: Any, shard_key: Any = None, *,
                 payload: bool = False, fields: Any = None) -> Any:
        """The points a selector names (ids, PointIdsList, Filter, FilterSelector), with their
        receipts (``payload``: their whole payloads; ``fields``: those keys); a failed look-up is
        audited (:meth:`lookup`)."""
        if fields is None:
            fields = True if payload else [RECEIPT_KEY]
        selector = _rest_selector(selector)
        if isinstance(selector, models.PointIdsList):
            selector = selector.points
        if isinstance(selector, models.FilterSelector):
            selector = selector.filter
        if isinstance(selector, models.Filter):
            out: list[Any] = []
            offset = None
            while True:
                page, offset = yield from self.lookup(op, name, pol, Call(
                    "scroll", {"collection_name": name, "scroll_filter": selector, "limit": 1024, "offset": offset,
                               "with_payload": fields, "with_vectors": False, "shard_key_selector": shard_key}))
                out.extend(page)
                if offset is None:
                    return out
        return (yield from self.lookup(op, name, pol, Call(
            "retrieve", {"collection_name": name, "ids": list(selector), "with_payload": fields,
                         "with_vectors": False, "shard_key_selector": shard_key})))

    def _batch_existing(self, op: str, name: str, pol: CollectionPolicy, spec: Any, fresh: dict[str, Any] | None,
                        deleted: Collection[str], where: str = "") -> Any:
        """The ``has_id`` filter to send for a batch's SetPayload/DeletePayload ``spec`` naming
        points by (at least one) id (:meth:`_existing_only`; a generator)."""
        return (yield from self._existing_only(op, name, pol, list(spec.points), spec.shard_key,
                                               {} if fresh is None else fresh, deleted, where))

    def payload_operation(self, op: str, name: str, pol: CollectionPolicy, operation: Any,
                          fresh: dict[str, Any] | None = None, written: set[str] | frozenset[str] = frozenset(),
                          deleted: Collection[str] = (), *, where: str = "") -> Any:
        """Check one payload/delete operation of a batch; returns the operations to send (a
        generator). ``fresh``: receipt containers written earlier in the batch, by point id;
        ``written``: top-level payload keys earlier operations of the batch may have written;
        ``deleted``: points deleted earlier in the batch by id (normalised); ``where``: the
        operation's place (``update_operations[2]``), which its batch refusals name."""
        if isinstance(operation, models.SetPayloadOperation):
            sp = operation.set_payload
            payload = self._check_set(op, name, pol, sp.payload, sp.key, sp.points if sp.points is not None else sp.filter)
            if self._retags(pol, payload=payload, key=sp.key):
                yield from self._keep_restricted_of(op, name, pol, sp.points if sp.points is not None else sp.filter,
                                                    sp.shard_key, "a set_payload operation")
            update: dict[str, Any] = {"payload": payload}
            if sp.points is not None:
                update.update(points=None, filter=(yield from self._batch_existing(op, name, pol, sp, fresh, deleted, where)))
            return [models.SetPayloadOperation(set_payload=sp.model_copy(update=update))]
        if isinstance(operation, models.DeletePayloadOperation):
            dp = operation.delete_payload
            if any(_touches_receipt(k) for k in dp.keys):
                raise self._refuse_tamper(op, name, pol, "delete")
            if self._retags(pol, keys=dp.keys):
                yield from self._keep_restricted_of(op, name, pol, dp.points if dp.points is not None else dp.filter,
                                                    dp.shard_key, "a delete_payload operation")
            if dp.points is not None:
                flt = yield from self._batch_existing(op, name, pol, dp, fresh, deleted, where)
                return [models.DeletePayloadOperation(delete_payload=dp.model_copy(
                    update={"points": None, "filter": flt}))]
            return [operation]
        if isinstance(operation, models.OverwritePayloadOperation):
            sp = operation.overwrite_payload
            payload = self._check_set(op, name, pol, sp.payload, None, sp.points if sp.points is not None else sp.filter)
            sel = sp.points if sp.points is not None else sp.filter
            ops, _ = yield from self._preserving_overwrite(op, name, pol, payload, sel, fresh,
                                                           shard_key=sp.shard_key, written=written, where=where)
            return ops
        if isinstance(operation, models.ClearPayloadOperation):
            ops, _ = yield from self._preserving_overwrite(op, name, pol, {}, operation.clear_payload, fresh,
                                                           written=written, where=where)
            return ops
        if isinstance(operation, models.DeleteVectorsOperation):
            dv = operation.delete_vectors
            sel = dv.points if dv.points is not None else dv.filter
            strip = yield from self._vector_receipt_strips(op, name, pol, sel, dv.shard_key, set(dv.vector), fresh,
                                                           where)
            return [operation, *strip]
        return [operation]


def _quotable(key: str) -> bool:
    # Qdrant's JSON paths quote a key as "..." with no escapes: a key holding '"' or '\\' cannot
    # be addressed by a path.
    return '"' not in key and "\\" not in key


def _quote(key: str) -> str:
    """``key`` as one quoted JSON-path segment (dots, brackets and the empty name included)."""
    return f'"{key}"'


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
