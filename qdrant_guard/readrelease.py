"""A read's plan and what it releases: over-fetch, post-processing, vectors outside the boundary.

A mixin of :class:`qdrant_guard.reads.ReadOps`: ``plan_read`` rewrites a read's arguments,
``finish`` takes what Qdrant returned through diversity, the extraction budget and the payload
projection, and ``releasable_vectors`` decides which stored vectors may leave (their receipts
and noise checked).
"""
from __future__ import annotations

from typing import Any, Collection, Mapping, Sequence

import numpy as np
from qdrant_client.http import models

from . import detect as _detect
from . import noise as _noise
from .decision import MAX_IDS_IN_RECORD, Verdict
from .noise_params import NoiseParams
from .diversity import enforce_diversity, overfetch_limit
from .payloadselect import _user_selector, project_payload
from .policy import CollectionPolicy
from .readbudget import _source_budgeted, _vector_budgeted
from .readplan import ReadPlan, _given_count, asks_vectors
from .redacted import _redacted_text
from .score_charge import charges_scores, score_spec
from .receipts import mechanism_mismatch, model_mismatch, noise_shortfall, stored_receipts, verify_receipt
from .sentmodels import UncheckedForm
from .sourcefilters import _sources_of_points
from .vectors import split_vector_struct
from .budgetops import BudgetOps


def _note_stripped(details: dict[str, Any], point_id: Any, why: Mapping[str, int]) -> None:
    """Add one point's stripped vectors (``why``: reason -> count) to the read's audit ``details``.

    ``count`` is vectors (a point can lose several named ones), ``points`` the points that lost
    any; ``ids`` lists the first :data:`MAX_IDS_IN_RECORD` of those points, so the entry stays
    bounded however large the page."""
    note = details.get("stripped")
    if note is None:
        note = details["stripped"] = {"count": 0, "points": 0, "reasons": {}, "ids": []}
    reasons = note["reasons"]
    for reason, n in why.items():
        reasons[reason] = reasons.get(reason, 0) + n
        note["count"] += n
    note["points"] += 1
    if len(note["ids"]) < MAX_IDS_IN_RECORD:
        note["ids"].append(point_id)


class ReadRelease(BudgetOps):
    """Planning a read and releasing its results (a mixin of :class:`qdrant_guard.reads.ReadOps`)."""

    # -- planning -------------------------------------------------------------------------
    def plan_read(self, method: str, pol: CollectionPolicy, args: dict[str, Any], *, limit_key: str | None = "limit",
                  diversify: bool = True, vectors_key: str = "with_vectors") -> tuple[dict[str, Any], ReadPlan]:
        """Rewrite a read's arguments: over-fetch for diversity, fetch what post-processing needs."""
        plan = ReadPlan(user_with_payload=args.get("with_payload", True),
                        user_with_vectors=args.get(vectors_key, False))
        new = dict(args)
        div = pol.diversity
        needs_source = div.enabled and (diversify or div.max_source_coverage is not None)
        plan.strip_vectors = asks_vectors(plan.user_with_vectors) and not pol.raw_allowed(self.boundary())
        if limit_key is not None and diversify and div.enabled and _given_count(args.get(limit_key)):
            limit = int(args.get(limit_key) or 10)
            offset = int(args.get("offset") or 0)
            plan.limit, plan.offset, plan.diversify = limit, offset, True
            new[limit_key] = offset + overfetch_limit(limit, factor=div.overfetch_factor)
            if "offset" in args:
                new["offset"] = None
        if (needs_source or plan.strip_vectors) and plan.user_with_payload is not True:
            plan.user_with_payload = _user_selector(plan.user_with_payload, method)
            new["with_payload"] = True
        return new, plan

    # -- post-processing ------------------------------------------------------------------
    def finish(self, op: str, name: str, pol: CollectionPolicy, plan: ReadPlan, points: Sequence[Any],
               details: dict[str, Any], *, account: str | None = None) -> Any:
        """Diversity, budget, vector release and payload projection over returned points.

        ``account`` is the collection the budgets are charged to (``name`` when None); reads pass
        what :meth:`budget_collection` resolved. A generator (the budget may count a source's
        size). Returns the list to give back.
        """
        account = name if account is None else account
        if account != name:
            details["alias_of"] = account
        pts = list(points)
        div = pol.diversity
        monitor = div.mode == "monitor"
        srcs = _sources_of_points(pts, pol.source_field)
        source_of = dict(zip(map(id, pts), srcs)).__getitem__
        if plan.diversify:
            ranked = pts[plan.offset:]
            # Diversity picks among the ranked points' indices, whose sources are listed: the same
            # picks as over the points, without a Python call per point to look its sources up.
            outcome = enforce_diversity(
                range(len(ranked)), k=plan.limit or 10, source_of=srcs[plan.offset:].__getitem__,
                max_source_fraction=div.max_source_fraction, min_unique_sources=div.min_unique_sources,
            )
            details["diversity"] = {"kept": len(outcome.kept), "withheld": len(outcome.withheld),
                                    "short_by": outcome.short_by, "unique_sources": outcome.unique_sources,
                                    "min_unique_met": outcome.min_unique_met}
            if monitor:
                pts = ranked[: plan.limit]
                details["diversity"]["monitor"] = True
            else:
                pts = [ranked[i] for i in outcome.kept]
        if _source_budgeted(pol):
            # pts are points of the list source_of was built from (kept or sliced, never copied).
            pts = yield from self.apply_budget(op, name, pol, pts, details, lambda p: source_of(id(p)),
                                               account=account, plan=plan)
        if charges_scores(pol):
            pts = yield from self.apply_units_budget(op, name, pol, pts, details, account=account, scored=plan.scored,
                                                     with_vectors=asks_vectors(plan.user_with_vectors))
        elif _vector_budgeted(pol, plan):
            pts = self.apply_vector_budget(op, name, pol, pts, details, account=account)
        redact_text = self.redacts_kept_text(pol)
        names = plan.names_of(account) if plan.strip_vectors else frozenset()
        why: dict[str, int] = {}
        out = []
        for p in pts:
            updates: dict[str, Any] = {}
            if plan.strip_vectors and getattr(p, "vector", None) is not None:
                updates["vector"] = self.releasable_vectors(account, pol, p, names=names, why=why)
                if why:
                    _note_stripped(details, p.id, why)
                    why.clear()
            if plan.user_with_payload is not True:
                updates["payload"] = project_payload(p.payload, plan.user_with_payload)
            if redact_text:
                payload = updates.get("payload", p.payload)
                if isinstance(payload, dict):
                    text = payload.get(pol.text_field)
                    if isinstance(text, str):
                        updates["payload"] = {**payload, pol.text_field: _detect.redact(text)}
                    elif text is not None:
                        shown = _redacted_text(text)
                        if shown is not text:
                            updates["payload"] = {**payload, pol.text_field: shown}
            out.append(p.model_copy(update=updates) if updates else p)
        return out

    def redacts_kept_text(self, pol: CollectionPolicy | None) -> bool:
        """Whether the caller gets the text field redacted: PII that ``keep_payload_text_in_boundary``
        kept in stored text is for the owner boundary only."""
        return (pol is not None and pol.keep_payload_text_in_boundary and bool(pol.text_field)
                and self.boundary() != pol.owner)

    def releasable_vectors(self, name: str, pol: CollectionPolicy, point: Any, *,
                           names: Collection[str] = (), why: dict[str, int] | None = None) -> Any:
        """Only vectors with a valid receipt whose noise a guarded write would accept now leave
        the boundary; raw ones, and those of weaker or unsound noise, are stripped.

        ``name`` is the collection the point is stored in. A write through an alias binds its
        receipt to the alias, so a receipt bound to any of ``names`` (the names that denote
        ``name`` as of this read: :meth:`ReadPlan.names_of`) is accepted too, as
        ``receipts.verify`` accepts it; one bound to a name that denotes another collection now
        (an alias since moved, an unrelated collection) is not.
        A signature only proves what its signer asserted, and a vector can reach the store around
        the guard, so the receipt's parameters face the write path's checks again: a private
        generator and a consistent calibration (``noise.check_release``), epsilon within the class
        ceiling, the collection's ``[noise] mechanism`` (``mechanism_mismatch``) and noise no weaker
        than its ``[noise]`` policy (``noise_shortfall``; after a policy is tightened or its
        mechanism changed, vectors released under the old one are stripped). A receipt whose signed
        ``model_id`` names another embedding model than the policy declares for the vector
        (``utility.embedding_model(s)``; ``model_mismatch``) is stripped as a guarded write refuses
        it; one naming no model is released (its signer named none), and no model declared: not
        compared. The name is the signer's word: nothing in a vector shows its model.

        ``why`` (when given) gets, per vector stripped, one count under its reason: the receipt
        check's reason (``receipts.REASONS``: ``missing_receipt``, ``bad_signature``,
        ``unknown_key``, ``revoked_key``, ``collection_mismatch``, ...), ``unsupported_vector`` (a
        sparse vector), ``unsound_noise`` (``noise.check_release``), ``epsilon_above_ceiling``,
        ``mechanism_mismatch``, ``model_mismatch`` or ``noise_shortfall``, in the order a guarded
        write checks them. A read's audit entry records them (``details["stripped"]``).
        """
        vecs = split_vector_struct(point.vector)
        receipts = stored_receipts(point.payload)
        keep: dict[str, Any] = {}
        for vname, value in vecs.items():
            rec = receipts.get(vname)
            if rec is None or isinstance(value, (models.SparseVector,)):
                if why is not None:
                    reason = "unsupported_vector" if isinstance(value, models.SparseVector) else "missing_receipt"
                    why[reason] = why.get(reason, 0) + 1
                continue
            bound = rec.get("collection") if isinstance(rec, Mapping) else None
            # The signature covers the bound name, so verifying against it proves only that the
            # receipt names it: whether it denotes this collection now is the membership test.
            where = bound if isinstance(bound, str) and bound in names else name
            # No date check: reads release stored vectors whatever their receipts' dates (the write
            # refused one dated ahead), so a reader's slow clock strips nothing written in time.
            check = verify_receipt(rec, vector=np.asarray(value, dtype=np.float64), collection=where,
                                   point_id=point.id, vector_name=vname, trusted_keys=self.receipt_keys_for(pol),
                                   revoked=self.revoked_keys, max_clock_skew_s=None)
            if not check.ok or check.params is None:
                reason = check.reason if not check.ok else "malformed"
            else:
                reason = self._release_refusal(pol, check.params)
                if reason == "noise_shortfall" or not reason:
                    # A write checks the model before the shortfall: so does the reason recorded.
                    if check.model_id is not None and model_mismatch(check.model_id, pol.utility, name, vname) is not None:
                        reason = "model_mismatch"
            if not reason:
                keep[vname] = value
            elif why is not None:
                why[reason] = why.get(reason, 0) + 1
        if not keep:
            # As Qdrant shapes it: a point read as named vectors stays a dict (its stripped names
            # absent, as when some are kept; ``{}`` is also what Qdrant returns for a point without
            # vectors); a single unnamed vector stripped is None.
            return {} if isinstance(point.vector, dict) else None
        if set(keep) == {""}:
            return keep[""]
        return keep

    def _release_accepted(self, pol: CollectionPolicy, params: NoiseParams) -> bool:
        """Whether a guarded write would accept a receipt of ``params`` into ``pol``'s collection now."""
        return not self._release_refusal(pol, params)

    def _release_refusal(self, pol: CollectionPolicy, params: NoiseParams) -> str:
        """Why a guarded write would refuse a receipt of ``params`` into ``pol``'s collection now
        (the noise checks of ``WriteOps.prepare_points``, in its order; cached per parameters and
        policy values): ``unsound_noise``, ``epsilon_above_ceiling``, ``mechanism_mismatch`` or
        ``noise_shortfall``; ``""`` when it would accept it.

        The cache (``shared["release_accepted"]``) takes no lock: its key holds every value the
        answer depends on, so threads that miss at once compute the same answer and store it with
        one assignment each (a repeated check, nothing else); past 4096 entries it is emptied, and
        threads racing past that bound add one entry each."""
        cache = self.shared.setdefault("release_accepted", {})
        n = pol.noise
        key = (params, n.mechanism, n.epsilon, n.radius, n.delta, n.clip_norm, self.ceiling(pol))
        reason = cache.get(key)
        if reason is None:
            if _noise.check_release(params) is not None:
                reason = "unsound_noise"
            elif params.epsilon > self.ceiling(pol):
                reason = "epsilon_above_ceiling"
            elif mechanism_mismatch(params, n, "") is not None:
                reason = "mechanism_mismatch"
            elif noise_shortfall(params, n) is not None:
                reason = "noise_shortfall"
            else:
                reason = ""
            if len(cache) > 4096:
                cache.clear()
            cache[key] = reason
        return str(reason)

    def _audit_read(self, op: str, name: str, pol: CollectionPolicy, returned: int, details: dict[str, Any]) -> None:
        verdict = Verdict(details.pop("verdict", Verdict.ALLOW.value))
        self.record(self.decision(op, name, pol, verdict, f"{returned} point(s) returned", details=details))

    def score_plan(self, op: str, name: str, pol: CollectionPolicy, *fields: Any) -> Any:
        """:func:`score_spec` of a request's sent fields; a prefetch form it cannot walk is refused
        (its scores would otherwise go uncharged)."""
        try:
            return score_spec(*fields)
        except UncheckedForm as exc:
            raise self.refuse_form(op, name, pol, exc) from None
