"""A write's points prepared for storing, and the decision and audit entry for them.

A mixin of :class:`qdrant_guard.writes.WriteOps`: ``prepare_points`` runs every check on a
write's points (layout, text screening, receipts kept or issued, noise) and returns
:class:`PreparedPoints`; ``prepare_vector_updates`` does the same for ``update_vectors``. Also
here: screening a write's filters, the audit of a write refused for its input, and the write's
decision.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping

import numpy as np
from qdrant_client.http import models

from . import noise as _noise
from .decision import Decision, Verdict
from .errors import (AuditError, ConfigError, GuardArgumentTypeError, GuardRefusal, InvalidVectorError,
                     QdrantGuardError, ReceiptError)
from .builtpoints import _point, _point_vectors, _update_point
from .filterpaths import unevaluable_reason
from .payloadops import _quotable, _quote
from .pipeline import Call, Op, mark_audited
from .policy import CollectionPolicy
from .receipts import (
    PAYLOAD_CONTAINER_VERSION,
    RECEIPT_KEY,
    normalize_point_id,
    plain_receipt,
    mechanism_mismatch,
    model_mismatch,
    noise_shortfall,
    receipts_for_payload,
    receipts_from_payload,
    stored_receipts,
    verify_receipt,
)
from .sources import restricts_sources
from .vectors import UNNAMED, CollectionShape, as_dense, split_vector_struct
from .writepoints import points_from_any
from .writereceipts import _altered_by_storage, _batch_digest, _container, _receipt_refusal
from .writesign import WriteSigning, _Slot, _located


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
        "the receipt's epsilon is above the class ceiling; re-noise with an epsilon no larger than "
        "the collection's noise.epsilon (stronger noise), or raise the class's epsilon_ceiling and "
        "the collection's noise.epsilon together in the policy (weaker noise: docs/privacy.md; a "
        "higher ceiling alone refuses the receipt as NOISE_REQUIRED)"
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
_INFERENCE_INPUTS = (models.Document, models.Image, models.InferenceObject)


_REASON = re.compile(r"[a-z0-9_]{1,40}")


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

# How long (seconds) a write trusts a collection layout the guard read: an older one is read again
# before the points are checked. Another client may recreate the collection with the same names and
# sizes but another distance or a lossy datatype, which no misfit would show; reading it for every
# write costs a round trip each (local mode's get_collection counts the points: about 0.3 ms at
# 10,000), so a burst of writes shares one read and the window is this long.
LAYOUT_FRESH_S = 1.0

# Read-only stand-ins for a point without receipts or embedded vectors (nothing to allocate).
_NO_RECEIPTS: Mapping[str, Any] = MappingProxyType({})


_NO_NAMES: frozenset[str] = frozenset()


def _as_list(v: Any) -> Any:
    return v.tolist() if isinstance(v, np.ndarray) else v


class WritePrep(WriteSigning):
    """Preparing, deciding and auditing writes (a mixin of :class:`qdrant_guard.writes.WriteOps`)."""

    if TYPE_CHECKING:  # Guard's (qdrant_guard.guard), which mixes this class in
        def utility_hash(self, pol: CollectionPolicy, vector_names: Any = ()) -> Any: ...

        def utility_refusal(self, pol: CollectionPolicy, *, mechanism: str, epsilon: float, radius: float,
                            delta: float, clip_norm: float | None, dim: int, vector_name: str,
                            scale: float | None = None, distance: str | None = None,
                            collection: str | None = None) -> str | None: ...

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

    def _public_vector_updates(self, op: str, name: str, pol: CollectionPolicy,
                               updates: list[models.PointVectors]) -> list[models.PointVectors]:
        out = []
        for u in updates:
            vector = self.public_vector(op, name, pol, u.vector, point_id=u.id)
            out.append(u if vector is u.vector else u.model_copy(update={"vector": vector}))
        return out

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

        The layout is cached per collection for ``LAYOUT_FRESH_S`` and read again (one
        ``get_collection``) by the first write after that: another client (an agent in another
        process, an operator) may have recreated the collection since, with the same names and
        sizes but Cosine distance or a lossy datatype, and a point checked against the old layout
        fits it, so no misfit would show that it is stale; Qdrant would then normalise or round the
        stored vectors, and their receipts would never verify. A point that does not fit a cached
        layout gets it read again, once, before it is refused, as Qdrant would accept it.
        """
        read_at = self._shape_read_at.get(name)
        if read_at is None or time.monotonic() - read_at >= LAYOUT_FRESH_S:
            self._shapes.pop(name, None)
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
                    for k, v in vecs.items():
                        if isinstance(v, _INFERENCE_INPUTS):
                            # Before the embedder is asked for (or called): a Document for a sparse
                            # or unknown slot was told to pass embedder=, which only led to this.
                            try:
                                shape.spec(k, where=where)
                            except InvalidVectorError as exc:
                                raise _located(exc, p.id, k)
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
                        max_clock_skew_s=self.config.receipts.max_clock_skew_s,
                    )
                    if not check.ok or check.params is None:
                        scoped = (self.receipt_scope_refusal(name, pol, check.key_id)
                                  if check.reason == "unknown_key" else None)
                        fault(Verdict.INVALID_RECEIPT, p.id, scoped or _receipt_refusal(check))
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
                if pid is not None and all(reasons.get(str(x), "").startswith("not_yet_valid: ")
                                           for x in faults[verdict]):
                    # A clock, not a forgery: lead with the date and the knob, then the rest.
                    directive = f"point {pid!r}: {reasons[str(pid)]}; otherwise {directive}"
                elif pid is not None:
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
