"""Guarded reads: boundary, query checks, diversity, extraction budget, vector release.

The read plan is in :mod:`qdrant_guard.readplan`, which budgets a read draws on in
:mod:`qdrant_guard.readbudget`, ``with_payload`` in :mod:`qdrant_guard.payloadselect`, redacted
text-field values in :mod:`qdrant_guard.redacted` and the budget's sources in Qdrant filters in
:mod:`qdrant_guard.sourcefilters`; their public names are importable from here too.
"""
from __future__ import annotations

import logging
import math
import time
import uuid
from itertools import chain
from typing import Any, Callable, Collection, Mapping, Sequence

import numpy as np
from qdrant_client import grpc
from qdrant_client.conversions.conversion import GrpcToRest
from qdrant_client.http import models

from . import detect as _detect
from . import noise as _noise
from .budget import BudgetStoreError, ExtractionBudget, make_store, normalize_point_id, store_kind
from .decision import MAX_IDS_IN_RECORD, Verdict
from .diversity import enforce_diversity, enforce_group_caps, overfetch_limit
from .filterroots import field_name_roots, query_filter_roots
from .payloadops import PayloadOps
from .payloadselect import _user_selector, project_payload as project_payload
from .perstore import SOURCE_SIZE_TTL_S as _SOURCE_SIZE_TTL_S
from .perstore import memory_budget_store_for
from .pipeline import Call, Op
from .policy import CollectionPolicy
from .pubquery import carries_inputs, public_query_text
from .querycheck import QueryChecks
from .querymap import iter_prefetch, rest_prefetch
from .rawstored import left_details, raw_stored_clause, raw_stored_way_out
from .readbudget import _named_vector_id, _source_budgeted, _vector_budgeted, _vector_budgeted_policy
from .readplan import ReadPlan as ReadPlan, _given_count, asks_vectors as asks_vectors
from .redacted import _redacted_text
from .score_charge import ScoreCharge, charges_scores, score_spec
from .receipts import mechanism_mismatch, model_mismatch, noise_shortfall, stored_receipts, verify_receipt
from .sentmodels import UncheckedForm
from .sentnames import sent_name
from .sourcefilters import (Exclusion as Exclusion, _missing_source_count_filter, _only_names_sources,
                            _sources_of_points, _stored_forms)
from .sources import path_head
from .sources import point_sources as _sources
from .vectors import split_vector_struct

log = logging.getLogger("qdrant_guard")


# Cached source sizes are swept of stale ones from this many on (see ReadOps.source_size).
_SIZES_SWEPT_FROM = 1024


# Exclusions kept (one per principal, collection and policy read lately): past it, all go.
_EXCLUSIONS_KEPT = 1024


def _fresh_size(hit: tuple[float, int] | None) -> int | None:
    """The size in a source-size cache entry ``(counted at, size)`` while it is fresh, else None."""
    if hit is not None and time.monotonic() - hit[0] < _SOURCE_SIZE_TTL_S:
        return hit[1]
    return None


class ReadOps(PayloadOps, QueryChecks, ScoreCharge):
    """The read half of the pipeline."""

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

    def source_budgeted(self, pol: CollectionPolicy | None) -> bool:
        """Whether the caller's reads of ``pol``'s collection draw on a source extraction budget."""
        return (pol is not None and pol.diversity.enabled and pol.diversity.max_source_coverage is not None
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
            check = verify_receipt(rec, vector=np.asarray(value, dtype=np.float64), collection=where,
                                   point_id=point.id, vector_name=vname, trusted_keys=self.receipt_keys_for(pol),
                                   revoked=self.revoked_keys)
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

    def _release_accepted(self, pol: CollectionPolicy, params: _noise.NoiseParams) -> bool:
        """Whether a guarded write would accept a receipt of ``params`` into ``pol``'s collection now."""
        return not self._release_refusal(pol, params)

    def _release_refusal(self, pol: CollectionPolicy, params: _noise.NoiseParams) -> str:
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

    def apply_budget(self, op: str, name: str, pol: CollectionPolicy, pts: list[Any], details: dict[str, Any],
                     sources_of: Callable[[Any], Sequence[str]], *, account: str | None = None,
                     plan: ReadPlan | None = None) -> Any:
        """The cross-query extraction budget: withhold points past a principal's coverage of a source.

        A point of several sources (``sources_of``) is released, and charged to each, only if all
        of them admit it; one any of them withholds is charged to none (``admit_many``). Points are
        charged, and sources counted, under collection ``account`` (``name`` when None). What is
        withheld is recorded in ``plan`` (when given), for :meth:`read_excluding_withheld`.
        """
        account = name if account is None else account
        principal = self.principal_label or "anonymous"
        by_source: dict[str, list[Any]] = {}
        for p in pts:
            for source in sources_of(p) or ("__unknown__",):
                by_source.setdefault(source, []).append(p)
        restricted = pol.diversity.restricted_sources
        requests: dict[str, tuple[list[Any], int]] = {}
        # cached_source_size inline, with one clock read until a count is awaited.
        sizes = self.shared.get("source_sizes", {})
        now = time.monotonic()
        for source, group in by_source.items():
            if restricted and source not in restricted:
                continue
            # A source holds at least the distinct points just returned from it, whatever the count
            # said (retrieve returns a record once per requested id, so the same point can repeat).
            if len(group) == 1:
                ids = [group[0].id]
                if not (type(ids[0]) is int and ids[0] >= 0):  # normalize_point_id's first case
                    normalize_point_id(ids[0])  # raises for a bad id, as the set below would
                distinct = 1
            else:
                distinct = len({normalize_point_id(p.id) for p in group})
                ids = [p.id for p in group]
            hit = sizes.get((account, source))
            if hit is not None and now - hit[0] < _SOURCE_SIZE_TTL_S:
                size = hit[1]
            else:
                size = yield from self.source_size(account, pol, source)
                sizes = self.shared.get("source_sizes", {})
                now = time.monotonic()
            requests[source] = (ids, size if size >= distinct else distinct)
        withheld: set[str] = set()
        report: dict[str, Any] = {}
        if requests:
            try:  # one store transaction for every source of this result (the store made on first use)
                decisions = self.extraction_budget(pol).admit_many(
                    principal=principal, collection=account, requests=requests,
                    max_source_coverage=pol.diversity.max_source_coverage)
            except BudgetStoreError as exc:
                self.budget_store_failed(op, name, pol, exc, "results were withheld", details)
                return pts
            admitted = plan.admitted if plan is not None else None
            for source, dec in decisions.items():
                if admitted is not None:
                    held = admitted.get(source)
                    if held is None:
                        # normalize_point_id's first case inline: every id returned is listed here.
                        admitted[source] = {f"i:{x}" if type(x) is int and x >= 0 else normalize_point_id(x)
                                            for x in dec.admitted}
                    else:
                        held.update([normalize_point_id(x) for x in dec.admitted])
                if dec.withheld:
                    withheld.update(normalize_point_id(x) for x in dec.withheld)
                    report[source] = {"withheld": len(dec.withheld), "seen": dec.seen_after, "cap": dec.cap}
        if report:
            # A grouped read charges each group in turn: add this group's report to the earlier ones.
            for source, earlier in (details.get("budget") or {}).items():
                if source in report:
                    report[source]["withheld"] += earlier["withheld"]
            details["budget"] = {**details.get("budget", {}), **report}
            if pol.diversity.mode == "monitor":
                details["budget_monitor"] = True
                return pts
            details["verdict"] = Verdict.BUDGET_EXCEEDED.value
            if plan is not None:
                plan.withheld_sources.update(report)
                plan.withheld_ids.update(withheld)
        if not withheld and not restricted:
            return list(pts)  # every id was normalised above (into a request), and none is withheld
        return [p for p in pts if normalize_point_id(p.id) not in withheld]

    def apply_vector_budget(self, op: str, name: str, pol: CollectionPolicy, pts: list[Any], details: dict[str, Any],
                            *, account: str | None = None) -> list[Any]:
        """PROPRIETARY distillation budget: vectors one principal may receive within the window.

        Each stored vector is one charge: a point's single vector under its id, each named vector
        of a point under an id of its own (:func:`_named_vector_id`), so a point of three named
        vectors costs three. Past the cap a vector is left out (``vector=None`` when none of the
        point's is left). Vectors are charged to collection ``account`` (``name`` when None).
        """
        charges: list[Any] = []
        for p in pts:
            vector = getattr(p, "vector", None)
            if isinstance(vector, dict):
                charges.extend(_named_vector_id(p.id, vname) for vname, v in vector.items() if v is not None)
            elif vector is not None:
                charges.append(p.id)
        try:
            dec = self.extraction_budget(pol).admit_vectors(principal=self.principal_label or "anonymous",
                                       collection=name if account is None else account,
                                       point_ids=charges, max_vectors=int(pol.diversity.max_vectors or 0))
        except BudgetStoreError as exc:
            self.budget_store_failed(op, name, pol, exc, "the vector budget could not be applied, so nothing was returned",
                                     details)
            return pts
        if not dec.withheld:
            return pts
        earlier = details.get("vector_budget")  # a grouped read charges each group in turn
        details["vector_budget"] = {"withheld": len(dec.withheld) + (earlier["withheld"] if earlier else 0),
                                    "cap": dec.cap}
        if pol.diversity.mode == "monitor":  # nothing withheld: logged as what would have been
            details["vector_budget_monitor"] = True
            return pts
        details["verdict"] = Verdict.BUDGET_EXCEEDED.value
        held = {normalize_point_id(x) for x in dec.withheld}
        out = []
        for p in pts:
            vector = getattr(p, "vector", None)
            if isinstance(vector, dict):
                kept = {vname: v for vname, v in vector.items()
                        if v is None or normalize_point_id(_named_vector_id(p.id, vname)) not in held}
                if len(kept) < len(vector):
                    p = p.model_copy(update={"vector": kept or None})
            elif vector is not None and normalize_point_id(p.id) in held:
                p = p.model_copy(update={"vector": None})
            out.append(p)
        return out

    def budget_store_failed(self, op: str, name: str, pol: CollectionPolicy, exc: BudgetStoreError,
                            outcome: str, details: dict[str, Any] | None = None) -> None:
        """An unreachable budget store must not mean "no budget": refuse (``FAIL_CLOSED``, saying
        ``outcome``), or, with ``fail_closed = false``, log it and return so nothing is withheld;
        then the read's audit ``details`` (when given) say so in ``budget_error``."""
        if not pol.fail_closed:
            log.error("budget store failed (fail_closed = false, not withholding): %r", exc)
            if details is not None:
                # The read's entry would otherwise say ALLOW as if the budget had been applied.
                details["budget_error"] = repr(exc)
            return
        raise self.refuse(self.decision(
            op, name, pol, Verdict.FAIL_CLOSED,
            f"the extraction-budget store failed ({exc}); {outcome}. Check the store in budget_store",
            details={"error": repr(exc)},
        )) from exc

    def budget_exclusion(self, op: str, name: str, pol: CollectionPolicy, account: str,
                         details: dict[str, Any] | None = None) -> Any:
        """What a budgeted read of ``account`` must exclude before it is sent: every source this
        principal has used up in the window, but for the ids already admitted under it (those stay
        readable: reading them again is free).

        A generator (a source's cap needs its size). Returns None where no budget withholds
        (the owner boundary, an unbudgeted collection, monitor mode), else an :class:`Exclusion`.
        A store that cannot list what it admitted (a third-party store with only the
        :class:`~qdrant_guard.budget.BudgetStore` methods) starts every read with nothing listed;
        a source the read then finds used up is excluded but for what this read admitted, so
        points admitted only by earlier reads are hidden from its re-run (fail closed, see
        :meth:`widen_exclusion`). A store failure with ``fail_closed = false`` is noted in
        ``details`` (see :meth:`budget_store_failed`).

        The exclusion is kept in ``shared["exclusions"]`` without a lock: each entry is one tuple,
        built whole and stored with one assignment, keyed by the principal, collection and policy
        values it depends on, and given again only while the listing and sizes it was made from
        are unchanged. Two threads' reads that make one at once each store a correct one (the last
        is kept): a repeated computation, never a wrong or half-built exclusion; threads racing
        past ``_EXCLUSIONS_KEPT`` add at most one entry each before the next emptying.
        """
        if not self.source_budgeted(pol) or pol.diversity.mode == "monitor":
            return None
        try:  # the store is made on first use: one that cannot be is a failed store, not a crash
            budget = self.extraction_budget(pol)
        except BudgetStoreError as exc:
            self.budget_store_failed(op, name, pol, exc, "nothing was read", details)
            return None
        exclusion = Exclusion(pol.source_field)
        listed = self._admitted_by_source(op, name, pol, account, details)
        restricted = pol.diversity.restricted_sources
        coverage = pol.diversity.max_source_coverage
        cap_for = budget.cap_for
        sizes = self.shared.get("source_sizes", {})
        # The exclusion is a function of the listing, the cached sizes (while fresh) and the policy:
        # kept per principal, it is given again while both are the same, in the same order, and
        # every size it read is still fresh (a read lists every source its principal read).
        listed_items = None if listed is None else list(listed.items())
        sized_items = list(sizes.items())
        slot = (account, self.principal_label, coverage, restricted)
        # cached_source_size inline, with one clock read until a count is awaited.
        now = time.monotonic()
        kept = self.shared.get("exclusions", {}).get(slot)
        if kept is not None and now - kept[0] < _SOURCE_SIZE_TTL_S and kept[1] == listed_items \
                and kept[2] == sized_items:
            exclusion.sources.update(kept[3])
            return exclusion
        counted = False
        oldest = math.inf  # when the oldest size read was counted
        caps: dict[int, int] = {}  # size -> cap: the listing holds every source the principal read
        for source, ids in listed_items or ():
            if restricted and source not in restricted:
                continue
            hit = sizes.get((account, source))
            if hit is not None and now - hit[0] < _SOURCE_SIZE_TTL_S:
                size = hit[1]
                oldest = min(oldest, hit[0])
            else:
                size = yield from self.source_size(account, pol, source)
                now = time.monotonic()
                counted = True
            cap = caps.get(size)
            if cap is None:
                cap = caps[size] = cap_for(size, coverage)
            if len(ids) >= cap:
                exclusion.sources[source] = ids
        # A source too small for a single point (cap 0) admits nothing, so the store lists no key
        # for it; those this client has sized are excluded up front rather than found mid-read.
        sized = [source for (where, source), (_, size) in list(self.shared.get("source_sizes", {}).items())
                 if where == account and size * coverage < 1.000001 and source not in exclusion.sources
                 and (not restricted or source in restricted) and cap_for(size, coverage) == 0]
        for source in sized:
            hit = self.shared.get("source_sizes", {}).get((account, source))
            size = _fresh_size(hit)  # cached_source_size, the time it was counted kept
            if size is None:
                size = yield from self.source_size(account, pol, source)
                counted = True
            else:
                oldest = min(oldest, hit[0])  # type: ignore[index]
            if cap_for(size, coverage) == 0:
                exclusion.sources[source] = frozenset()
        if not counted and list(self.shared.get("source_sizes", {}).items()) == sized_items:
            kept_all = self.shared.setdefault("exclusions", {})
            if len(kept_all) >= _EXCLUSIONS_KEPT:
                kept_all.clear()
            kept_all[slot] = (oldest, listed_items, sized_items, dict(exclusion.sources))
        return exclusion

    def widen_exclusion(self, op: str, name: str, pol: CollectionPolicy, account: str, exclusion: Exclusion,
                        plans: Sequence[ReadPlan], details: dict[str, Any] | None = None) -> None:
        """Add to ``exclusion`` what the budget withheld under ``plans``: the sources it found used
        up (with the ids they admitted, this read's included) and the withheld ids themselves (a
        point whose source value no filter names, or whose admission expired meanwhile)."""
        for plan in plans:
            for source, ids in plan.admitted.items():
                exclusion.admitted_here.setdefault(source, set()).update(ids)
        sources = set().union(*(p.withheld_sources for p in plans)) - set(exclusion.sources)
        if sources:
            listed = self._admitted_by_source(op, name, pol, account, details)
            for source in sources:
                # A store that cannot list keeps readable only what this read admitted.
                exclusion.sources[source] = (frozenset(exclusion.admitted_here.get(source, ())) if listed is None
                                             else listed.get(source, frozenset()))
        exclusion.ids.update(*(p.withheld_ids for p in plans))

    def _admitted_by_source(self, op: str, name: str, pol: CollectionPolicy, account: str,
                            details: dict[str, Any] | None = None) -> Any:
        try:
            return self.extraction_budget(pol).admitted_by_source(
                principal=self.principal_label or "anonymous", collection=account)
        except BudgetStoreError as exc:
            self.budget_store_failed(op, name, pol, exc, "nothing was read", details)
            return None

    def read_excluding_withheld(self, op: str, name: str, pol: CollectionPolicy, account: str,
                                run: Callable[[Exclusion | None], Any], progress: dict[str, Any] | None = None) -> Any:
        """Run a budgeted read so that withheld points take no place in Qdrant's page or ranking.

        ``run(exclusion)`` is a generator that sends the read with ``exclusion`` added to its
        filter and returns ``(result, details, plans)``. When the budget still withholds points
        of that run (a source used up by this very read, another reader's concurrent admission,
        a source value no filter names), the read runs again with those excluded too, so the
        page is filled as if they did not exist.

        Bounded: a re-run happens only when the run before it withheld a point, and each withheld
        point is then excluded (by its source, and by its id), so every re-run excludes at least
        one point more than the one before: at most as many re-runs as points, and in practice one
        per source used up during the read, since the source's condition removes all its other
        withheld points at once. Nothing readable is lost: the exclusion only removes points the
        budget withholds, never one it admitted (the admitted ids of a used-up source are kept
        out of its condition), so every point admitted by a run stays in the next run's top-L
        and is returned by it, re-admitted for free. (Per-query diversity and groups re-rank,
        so there a point admitted by an earlier run can drop out of the last page; it then stays
        charged without being returned.)

        A generator. Returns ``(result, details)`` of the last run, its audit details carrying the
        budget report of every run. ``progress`` (when given) gets the budget reports of the runs
        done so far, for the entry of a read that fails in a later run (:meth:`store_failures`).
        """
        noted: dict[str, Any] = {}  # a store failure passed over (fail_closed = false), for the entry
        exclusion = yield from self.budget_exclusion(op, name, pol, account, noted)
        earlier: dict[str, Any] = {}
        reruns = 0
        while True:
            result, details, plans = yield from run(exclusion)
            if exclusion is None or not any(p.withheld_ids for p in plans):
                break
            earlier.update(details.get("budget", {}))
            self.widen_exclusion(op, name, pol, account, exclusion, plans, noted)
            reruns += 1
            if progress is not None:
                progress.update(budget=dict(earlier), reruns=reruns)
        if reruns:
            merged = {**earlier, **details.get("budget", {})}
            if merged:
                details["budget"] = merged
            details["budget_reruns"] = reruns
            details["verdict"] = Verdict.BUDGET_EXCEEDED.value
        if exclusion:
            details["budget_excluded"] = {"sources": len(exclusion.sources), "ids": len(exclusion.ids)}
        for key, value in noted.items():
            details.setdefault(key, value)
        return result, details

    def excluding(self, op: str, name: str, pol: CollectionPolicy, args: dict[str, Any], key: str,
                  exclusion: Exclusion | None) -> dict[str, Any]:
        """``args`` with ``exclusion`` added around the filter at ``key`` (unchanged without one)."""
        if not exclusion:
            return args
        try:
            return {**args, key: exclusion.wrap(args.get(key), key)}
        except UncheckedForm as exc:
            raise self.refuse_form(op, name, pol, exc) from None

    def budget_collection(self, op: str, name: str, pol: CollectionPolicy, plans: Sequence[ReadPlan],
                          details: dict[str, Any]) -> Any:
        """The collection a read of ``name`` is charged to and sent to: the one alias ``name`` names.

        Budgets belong to the stored points, not to the name that reached them: keyed by the
        caller's name, every alias of a collection would be a fresh budget. Receipts name the
        collection or the alias their vector was written through; the alias list is kept on
        ``plans`` (``ReadPlan.aliases``) so vector release accepts every name of the collection
        without a second call. Only a read that draws on a budget or releases
        receipted vectors (under one of ``plans``) pays the ``get_aliases`` call. It is resolved on
        every read, before it, and the read goes to the resolved collection, so the points counted
        are the points of the collection charged even if another client moves the alias meanwhile.

        A generator. Returns ``name`` when it is not an alias or nothing above applies. A failed
        ``get_aliases`` that the read goes on past (vectors stripped, or ``fail_closed = false``)
        is noted in the read's audit ``details`` as ``alias_error``.
        """
        budgeted = any(_source_budgeted(pol) or _vector_budgeted(pol, plan) for plan in plans)
        if not budgeted and not any(plan.strip_vectors for plan in plans):
            return name
        try:
            resp = yield Call("get_aliases", {})
        except Exception as exc:  # unresolved, the read could be charged to a fresh budget
            if not budgeted:  # then receipts bound to the collection fail, and vectors are stripped
                log.error("alias resolution failed (vectors of %r not released): %r", name, exc)
                details["alias_error"] = repr(exc)
                return name
            if not pol.fail_closed:
                log.error("alias resolution failed (fail_closed = false, charging the budget to %r): %r", name, exc)
                # The entry would otherwise read as a read charged to the collection the alias names.
                details["alias_error"] = repr(exc)
                return name
            raise self.refuse(self.decision(
                op, name, pol, Verdict.FAIL_CLOSED,
                f"resolving aliases (get_aliases) failed ({exc}); a budgeted read of {name!r} is charged "
                "to the collection an alias names, so nothing was read. Check that Qdrant is reachable",
                details={"error": repr(exc)},
            )) from exc
        aliases = {a.alias_name: a.collection_name for a in resp.aliases}
        for plan in plans:
            plan.aliases = aliases
        return aliases.get(name, name)

    def cached_source_size(self, name: str, source: str) -> int | None:
        """:meth:`source_size` while it is cached, else None. Not a generator: a read looks up the
        size of every source it lists, and a generator per cached answer cost more than the lookup."""
        return _fresh_size(self.shared.get("source_sizes", {}).get((name, source)))

    def source_size(self, name: str, pol: CollectionPolicy, source: str) -> Any:
        """Number of points of ``source`` in the collection (counted exactly, cached briefly)."""
        hit = self.cached_source_size(name, source)
        if hit is not None:
            return hit
        # The dict the size goes to is taken before the count is sent: a write that ends after
        # that (however the threads switch) replaces it (perstore.SourceSizeEpoch), so a count the
        # write overlapped serves this read and no other.
        sizes = self.shared.setdefault("source_sizes", {})
        now = time.monotonic()
        flt = models.Filter(should=[models.FieldCondition(key=pol.source_field, match=models.MatchValue(value=v))
                                    for v in _stored_forms(source)]) \
            if source != "__unknown__" else _missing_source_count_filter(pol.source_field)
        res = yield Call("count", {"collection_name": name, "count_filter": flt, "exact": True})
        size = int(res.count)
        if self.shared["size_epoch"].quiet_until < now:  # else Qdrant may not have applied a write yet
            sizes[(name, source)] = (now, size)
            if len(sizes) >= self.shared.get("source_sizes_sweep_at", _SIZES_SWEPT_FROM):
                # Without a write to replace it, the cache would keep every source ever counted,
                # and each budgeted read walks it (its cap-0 sources): the stale entries go,
                # once per doubling, so the cache stays within twice what 30 s of counts hold.
                for key, (at, _) in list(sizes.items()):
                    if now - at >= _SOURCE_SIZE_TTL_S:
                        sizes.pop(key, None)
                self.shared["source_sizes_sweep_at"] = max(_SIZES_SWEPT_FROM, 2 * len(sizes))
        return size

    def extraction_budget(self, pol: CollectionPolicy) -> Any:
        """The :class:`ExtractionBudget` for this collection's window (created on first use).

        One store serves every window (its keys name the collection); each distinct ``window_s``
        gets its own budget, so every collection is counted over the window its policy sets.
        """
        budgets = self.shared.setdefault("budgets", {})
        window = pol.diversity.window_s
        b = budgets.get(window)
        if b is None:
            # Two racing first reads must not each count into a store of their own.
            with self.shared["lock"]:
                b = budgets.get(window)
                if b is None:
                    store = self.shared.get("budget_store")
                    if store is None:
                        spec = self.config.budget_store
                        store = self.shared["budget_store"] = (
                            memory_budget_store_for(self.shared.get("store_identity"))
                            if store_kind(spec) == "memory" else make_store(spec))
                    b = budgets[window] = ExtractionBudget(store, window_s=window, clock=self.clock)
        return b

    def store_failures(self, op: str, name: str, pol: CollectionPolicy, read: Op, progress: dict[str, Any]) -> Op:
        """Run admitted read ``read``; when a qdrant-client call it makes fails and the failure ends
        the read, audit QDRANT_ERROR before it propagates.

        The read's entry is written only once it has its result, so without this a read that
        failed in the store (a missing collection, a bad filter, a server error) left no trace,
        though the guard had admitted it and may have charged a budget in an earlier run.
        ``progress["details"]`` is what the read had decided when it failed (its audit details
        so far), ``progress["budget"]``/``["reruns"]`` the budget reports of its completed runs.
        The entry names the failed method and the error's type, never its message (which can
        quote the request). A failure the read handles itself (and audits, if it refuses) is not
        logged again. If the entry cannot be written, :meth:`record` fails closed as for any entry.
        """
        try:
            request = next(read)
        except StopIteration as stop:
            return stop.value
        while True:
            try:
                result = yield request
            except GeneratorExit:
                read.close()
                raise
            except BaseException as exc:
                try:
                    request = read.throw(exc)
                except StopIteration as stop:
                    return stop.value
                except BaseException as out:
                    if out is exc and isinstance(request, Call):
                        self._audit_failed_read(op, name, pol, request.method, exc, progress)
                    raise
            else:
                try:
                    request = read.send(result)
                except StopIteration as stop:
                    return stop.value

    def _audit_failed_read(self, op: str, name: str, pol: CollectionPolicy, method: str, exc: BaseException,
                           progress: dict[str, Any]) -> None:
        details = dict(progress.get("details") or {})
        details.pop("verdict", None)  # what the budget decided is in its report
        if progress.get("budget"):
            details["budget"] = {**progress["budget"], **details.get("budget", {})}
        if progress.get("reruns"):
            details["budget_reruns"] = progress["reruns"]
        details.update(method=method, error=type(exc).__name__)
        self.record(self.decision(
            op, name, pol, Verdict.QDRANT_ERROR,
            f"Qdrant failed after the guard admitted the read: {method} raised {type(exc).__name__} "
            "(raised to the caller; its message is not logged); nothing was returned",
            details=details,
        ))

    def _audit_read(self, op: str, name: str, pol: CollectionPolicy, returned: int, details: dict[str, Any]) -> None:
        verdict = Verdict(details.pop("verdict", Verdict.ALLOW.value))
        self.record(self.decision(op, name, pol, verdict, f"{returned} point(s) returned", details=details))

    # -- operations -----------------------------------------------------------------------
    def _query_prelude(self, method: str, args: dict[str, Any]) -> Any:
        """Policy, boundary, lookup and query-text checks shared by the point queries.

        Returns ``(policy or None for pass-through, arguments, audit details)``.
        """
        query_text = args.pop("query_text", None)
        pol = self.gate(method, args, "read")
        if self.transparent:
            return None, args, {}
        # Lookups read other collections, so they are checked even when this one is PUBLIC.
        args = self.check_lookups(method, args["collection_name"], args)
        if pol is None:  # PUBLIC: credentials are never sent to inference, whatever the class
            if carries_inputs(args):
                args = public_query_text(self, method, args["collection_name"], args)
            return None, args, {}
        details: dict[str, Any] = {}
        self.screen_filters(method, args["collection_name"], pol, chain(
            query_filter_roots(args, "query_filter"), field_name_roots(method, args)), details)
        args = yield from self.prepare_query(method, args["collection_name"], pol, args, query_text, details)
        return pol, args, details

    def op_query_points(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pol, args, details = yield from self._query_prelude(method, args)
        if pol is None:
            return (yield Call(method, args))
        progress: dict[str, Any] = {"details": details}

        def read() -> Op:
            new, plan = self.plan_read(method, pol, args)
            if charges_scores(pol):
                plan.scored = self.score_plan(method, name, pol, new.get("query"), new.get("prefetch"), new.get("using"),
                                              new.get("query_filter"), new.get("lookup_from"), new.get("search_params"))
            account = yield from self.budget_collection(method, name, pol, [plan], details)

            def run(exclusion: Exclusion | None) -> Any:
                run_plan, run_details = plan.fresh(), dict(details)
                progress["details"] = run_details
                resp = yield Call(method, {**self.excluding(method, name, pol, new, "query_filter", exclusion),
                                           "collection_name": account})
                pts = yield from self.finish(method, name, pol, run_plan, resp.points, run_details, account=account)
                return pts, run_details, [run_plan]

            pts, done = yield from self.read_excluding_withheld(method, name, pol, account, run, progress)
            self._audit_read(method, name, pol, len(pts), done)
            return models.QueryResponse(points=pts)

        return (yield from self.store_failures(method, name, pol, read(), progress))

    def op_query_batch_points(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pol = self.gate(method, args, "read")
        if self.transparent:
            return (yield Call(method, args))
        checked = []
        for i, req in enumerate(args["requests"]):
            req = self._rest_request(method, name, req, f"requests[{i}]")
            fields = self.check_lookups(method, name, {"prefetch": req.prefetch, "lookup_from": req.lookup_from})
            checked.append(req.model_copy(update=fields))
        if pol is None:
            checked = [_public_request(self, method, name, req, f"requests[{i}].") for i, req in enumerate(checked)]
            return (yield Call(method, {**args, "requests": checked}))
        plans, reqs, all_details = [], [], []
        for i, req in enumerate(checked):
            details: dict[str, Any] = {}
            self.screen_filters(method, name, pol, chain(query_filter_roots(
                {"filter": req.filter, "query": req.query, "prefetch": req.prefetch}, "filter", f"requests[{i}]."),
                field_name_roots("query_points", {"with_payload": req.with_payload}, f"requests[{i}].")), details)
            fields = {"query": req.query, "prefetch": req.prefetch, "using": req.using, "limit": req.limit,
                      "offset": req.offset,
                      "with_payload": req.with_payload if req.with_payload is not None else False,
                      "with_vectors": req.with_vector if req.with_vector is not None else False}
            fields = yield from self.prepare_query(method, name, pol, fields, None, details, f"requests[{i}].")
            new, plan = self.plan_read(method, pol, fields)
            reqs.append(req.model_copy(update={"query": new["query"], "prefetch": new["prefetch"],
                                               "limit": new["limit"], "offset": new.get("offset"),
                                               "with_payload": new["with_payload"],
                                               "with_vector": new["with_vectors"]}))
            if charges_scores(pol):
                sent = reqs[-1]
                plan.scored = self.score_plan(method, name, pol, sent.query, sent.prefetch, sent.using, sent.filter,
                                              sent.lookup_from, sent.params)
            plans.append(plan)
            all_details.append(details)
        batch: dict[str, Any] = {}  # notes on the whole batch (alias_error)
        progress: dict[str, Any] = {"details": {"requests": all_details}}

        def read() -> Op:
            account = yield from self.budget_collection(method, name, pol, plans, batch)
            progress["details"] = {"requests": all_details, **batch}

            def run(exclusion: Exclusion | None) -> Any:
                run_plans = [p.fresh() for p in plans]
                run_details = [dict(d) for d in all_details]
                progress["details"] = {"requests": run_details, **batch}
                sent = [req.model_copy(update=self.excluding(method, name, pol, {"filter": req.filter}, "filter",
                                                              exclusion)) for req in reqs]
                resps = yield Call(method, {**args, "collection_name": account, "requests": sent})
                out = []
                for resp, plan, details in zip(resps, run_plans, run_details):
                    pts = yield from self.finish(method, name, pol, plan, resp.points, details, account=account)
                    out.append(models.QueryResponse(points=pts))
                return out, {"requests": run_details, **batch}, run_plans

            # One exclusion for the whole batch: a source one request used up is excluded from all.
            out, done = yield from self.read_excluding_withheld(method, name, pol, account, run, progress)
            if any("budget" in d for d in done["requests"]):
                done["verdict"] = Verdict.BUDGET_EXCEEDED.value
            self._audit_read(method, name, pol, sum(len(r.points) for r in out), done)
            return out

        return (yield from self.store_failures(method, name, pol, read(), progress))

    def op_query_points_groups(self, method: str, args: dict[str, Any]) -> Op:
        name = args["collection_name"]
        pol, args, details = yield from self._query_prelude(method, args)
        if pol is None:
            return (yield Call(method, args))
        progress: dict[str, Any] = {"details": details}
        read = self._groups_read(method, name, pol, args, details, progress)
        return (yield from self.store_failures(method, name, pol, read, progress))

    def _groups_read(self, method: str, name: str, pol: CollectionPolicy, args: dict[str, Any],
                     details: dict[str, Any], progress: dict[str, Any]) -> Op:
        new, plan = self.plan_read(method, pol, args, limit_key=None, diversify=False)
        if charges_scores(pol):
            plan.scored = self.score_plan(method, name, pol, new.get("query"), new.get("prefetch"), new.get("using"),
                                          new.get("query_filter"), new.get("lookup_from"), new.get("search_params"))
        group_size = int(args.get("group_size") or 3)
        if pol.diversity.enabled and _given_count(args.get("group_size")):
            new["group_size"] = overfetch_limit(group_size, factor=pol.diversity.overfetch_factor)
            # The group caps read each hit's source: without payload every hit is one missing source.
            if plan.user_with_payload is not True:
                plan.user_with_payload = _user_selector(plan.user_with_payload, method)
            new["with_payload"] = True
        account = yield from self.budget_collection(method, name, pol, [plan], details)
        # Qdrant reads a quoted key ('"text"') as the plain one: compare the field the path starts at.
        redact_ids = self.redacts_kept_text(pol) and path_head(args.get("group_by")) == pol.text_field

        def run(exclusion: Exclusion | None) -> Any:
            run_plan, run_details = plan.fresh(), dict(details)
            progress["details"] = run_details
            resp = yield Call(method, {**self.excluding(method, name, pol, new, "query_filter", exclusion),
                                       "collection_name": account})
            groups = list(resp.groups)
            if pol.diversity.enabled and pol.diversity.mode == "enforce":
                outcome = enforce_group_caps(
                    [g.hits for g in groups], group_size=group_size,
                    source_of=lambda p: _sources(p, pol.source_field),
                    max_source_fraction=pol.diversity.max_source_fraction,
                    min_unique_sources=pol.diversity.min_unique_sources,
                )
                groups = [g.model_copy(update={"hits": list(o.kept)}) for g, o in zip(groups, outcome.groups)]
                run_details["group_caps"] = {"group_cap": outcome.group_cap, "response_cap": outcome.response_cap}
            elif pol.diversity.enabled:  # monitor: uncapped, but no more hits than asked for (not the over-fetch)
                groups = [g.model_copy(update={"hits": g.hits[:group_size]}) for g in groups]
            out_groups = []
            for g in groups:
                hits = yield from self.finish(method, name, pol, run_plan, g.hits, run_details, account=account)
                # A group's id is its hits' payload value: a group whose every hit was capped or
                # withheld must not come back empty, or its id leaks what the budget withheld.
                if hits:
                    update: dict[str, Any] = {"hits": hits}
                    if redact_ids:
                        update["id"] = _redacted_text(g.id)
                    out_groups.append(g.model_copy(update=update))
            return out_groups, run_details, [run_plan]

        out_groups, details = yield from self.read_excluding_withheld(method, name, pol, account, run, progress)
        self._audit_read(method, name, pol, sum(len(g.hits) for g in out_groups), details)
        return models.GroupsResult(groups=out_groups)

    def score_plan(self, op: str, name: str, pol: CollectionPolicy, *fields: Any) -> Any:
        """:func:`score_spec` of a request's sent fields; a prefetch form it cannot walk is refused
        (its scores would otherwise go uncharged)."""
        try:
            return score_spec(*fields)
        except UncheckedForm as exc:
            raise self.refuse_form(op, name, pol, exc) from None

    def _records_read(self, method: str, args: dict[str, Any], scrolled: bool) -> Op:
        """``scroll`` and ``retrieve``: boundary, budget, vector release, payload projection."""
        name = args["collection_name"]
        pol = self.gate(method, args, "read")
        if pol is None:
            return (yield Call(method, args))
        details: dict[str, Any] = {}
        self.screen_filters(method, name, pol, chain([("scroll_filter", args.get("scroll_filter"))],
                                                     field_name_roots(method, args)), details)
        progress: dict[str, Any] = {"details": details}
        read = self._records_read_admitted(method, name, pol, args, scrolled, details, progress)
        return (yield from self.store_failures(method, name, pol, read, progress))

    def _records_read_admitted(self, method: str, name: str, pol: CollectionPolicy, args: dict[str, Any],
                               scrolled: bool, base: dict[str, Any], progress: dict[str, Any]) -> Op:
        new, plan = self.plan_read(method, pol, args, limit_key=None, diversify=False)
        account = yield from self.budget_collection(method, name, pol, [plan], base)

        def run(exclusion: Exclusion | None) -> Any:
            run_plan = plan.fresh()
            run_details = dict(base)
            progress["details"] = run_details
            result = yield Call(method, {**self.excluding(method, name, pol, new, "scroll_filter", exclusion),
                                         "collection_name": account})
            records, next_offset = result if scrolled else (result, None)
            pts = yield from self.finish(method, name, pol, run_plan, records, run_details, account=account)
            return (pts, records, next_offset), run_details, [run_plan]

        if scrolled:
            (pts, records, next_offset), details = yield from self.read_excluding_withheld(
                method, name, pol, account, run, progress)
        else:
            # retrieve names its points: none takes the place of another, so nothing to exclude.
            (pts, records, next_offset), details, _ = yield from run(None)
        if scrolled and self.source_budgeted(pol):
            # Qdrant's offset is the id of the next matching point, returned without the point: past
            # the budget it would tell whether (and which) points match a filter. The guard's own
            # offset depends only on what the caller received: just past the last point of a full
            # page of released points, else none.
            # (With order_by, Qdrant pages by start_from and gives no offset.)
            full = (bool(pts) and len(pts) == len(records) == (new.get("limit") or 10)
                    and new.get("order_by") is None)
            next_offset = _successor(pts[-1].id) if full else None
        self._audit_read(method, name, pol, len(pts), details)
        return (pts, next_offset) if scrolled else pts

    def op_scroll(self, method: str, args: dict[str, Any]) -> Op:
        return (yield from self._records_read(method, args, scrolled=True))

    def op_retrieve(self, method: str, args: dict[str, Any]) -> Op:
        return (yield from self._records_read(method, args, scrolled=False))

    def op_facet(self, method: str, args: dict[str, Any]) -> Op:
        """``facet`` returns payload values of every source; where an extraction budget guards the
        sources, outside the owner boundary only the source field may be faceted, and the filter
        may only name sources (see :meth:`budget_oracle`)."""
        res = yield from self.budget_oracle(method, args, args.get("facet_filter"), facet_key=args.get("key"))
        pol = None if self.transparent else self.policy(args["collection_name"])
        if pol is not None and self.redacts_kept_text(pol) and path_head(args.get("key")) == pol.text_field:
            res = res.model_copy(update={"hits": [h.model_copy(update={"value": _redacted_text(h.value)})
                                                  if isinstance(h.value, (str, int)) else h for h in res.hits]})
        return res

    def op_count(self, method: str, args: dict[str, Any]) -> Op:
        """``count`` with a filter answers whether matching points exist; under an extraction budget
        outside the owner boundary the filter may only name sources (see :meth:`budget_oracle`)."""
        return (yield from self.budget_oracle(method, args, args.get("count_filter")))

    def op_search_matrix_pairs(self, method: str, args: dict[str, Any]) -> Op:
        """The distance matrix returns the ids of the points its filter matches without returning
        them to the budget; under an extraction budget outside the owner boundary the filter may
        only name sources (see :meth:`budget_oracle`)."""
        return (yield from self.budget_oracle(method, args, args.get("query_filter")))

    def op_search_matrix_offsets(self, method: str, args: dict[str, Any]) -> Op:
        """As :meth:`op_search_matrix_pairs`."""
        return (yield from self.budget_oracle(method, args, args.get("query_filter")))

    def budget_oracle(self, method: str, args: dict[str, Any], flt: Any, *, facet_key: str | None = None) -> Op:
        """Refuse a call that would read payload values past the extraction budget.

        ``count`` and ``facet`` return no points, so the budget cannot count them; a filter on any
        other field (a salary range, a point id) would let a reader binary-search the values of
        points the budget withholds. So on a budgeted collection, outside the owner boundary, the
        filter may only hold conditions on the source field, and ``facet`` may only facet it.
        """
        name = args["collection_name"]
        pol = self.gate(method, args, "read")
        if pol is None:
            return (yield from self.op_collection_access(method, args, "read"))
        if method.startswith("search_matrix") and pol.noise_queries and not pol.raw_allowed(self.boundary()):
            left, capped = (0, 0) if pol.raw_in_boundary else (yield from self.raw_vectors_left(method, name, pol))
            if pol.raw_in_boundary or left:
                # The matrix compares the stored raw vectors with one another: exact similarities
                # between vectors the caller may never see, with no query vector to noise.
                raise self.refuse(self.decision(
                    method, name, pol, Verdict.QUERY_REJECTED,
                    f"{method} compares the stored vectors of {pol.sensitivity.value} collection {name!r}, which "
                    f"{raw_stored_clause(pol, left, capped)}, with one another, with no query vector to noise, and "
                    "noise_queries needs every comparison a principal without raw access gets to go through a "
                    f"noised query vector; use query_points with a vector, "
                    f"{raw_stored_way_out(pol, name, left, capped, action=f'call {method}')}",
                    details=left_details(pol, left, capped),
                ))
        if method.startswith("search_matrix") and charges_scores(pol) and self.boundary() != pol.owner:
            # Each entry is the similarity of two stored vectors: a bilinear measurement of both
            # with no query in between, whose pairs Qdrant samples, so no per-point charge in rank
            # order (or withholding part of a matrix) would bound what the matrix rebuilds.
            monitor = pol.diversity.mode == "monitor"
            d = self.decision(
                method, name, pol, Verdict.ALLOW if monitor else Verdict.REFUSED_CROSS_BOUNDARY,
                f"{method} returns similarities of the stored vectors of PROPRIETARY collection {name!r} with one "
                "another, which diversity.charge_scores cannot charge to the distillation budget (max_vectors) "
                f"point by point; outside the owner boundary {pol.owner!r} use query_points, whose scores the "
                "budget counts, or set charge_scores = false",
                details={"charge_scores": True}, monitor=monitor)
            if not monitor:
                raise self.refuse(d)
            self.record(d)
        filter_key = {"count": "count_filter", "facet": "facet_filter"}.get(method, "query_filter")
        details: dict[str, Any] = {}
        self.screen_filters(method, name, pol, [(filter_key, flt)], details)
        # The faceted field name reaches the store and the audit entry like a filter's keys do.
        shown_key = self.screen_key(method, name, pol, facet_key, "key", details) if method == "facet" else None
        if self.source_budgeted(pol):
            problem = None
            if method == "facet" and facet_key != pol.source_field:
                problem = f"facet on key {shown_key!r} returns payload values of every source"
            elif flt is not None and not _only_names_sources(flt, pol.source_field):
                problem = f"{method} with a filter on fields other than {pol.source_field!r} answers for every point"
            if problem is not None:
                monitor = pol.diversity.mode == "monitor"
                d = self.decision(
                    method, name, pol, Verdict.ALLOW if monitor else Verdict.REFUSED_CROSS_BOUNDARY,
                    f"{problem} of {name!r}, past its extraction budget (diversity.max_source_coverage); "
                    f"outside the owner boundary {pol.owner!r} only the source field {pol.source_field!r} "
                    "may be faceted or filtered on. Read the points with query_points or scroll, which "
                    "the budget counts",
                    details={**details, "key": shown_key, "filtered": flt is not None}, monitor=monitor,
                )
                if not monitor:
                    raise self.refuse(d)
                self.record(d)
                return (yield from self.store_failures(method, name, pol, _sent(Call(method, args)), {}))
        self.record(self.decision(method, name, pol, Verdict.ALLOW, "read access granted", details=details))
        return (yield from self.store_failures(method, name, pol, _sent(Call(method, args)), {"details": details}))

    def check_lookups(self, op: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Refuse lookups (``lookup_from``, ``with_lookup``, at the top level and in every nested
        prefetch) into collections the principal may not read, or may not get raw vectors from.

        Returns ``args`` with lookups and prefetches in their ``models`` form.
        """
        new = dict(args)
        try:
            for param in ("lookup_from", "with_lookup"):
                if args.get(param) is not None:
                    new[param], other = _lookup_target(args[param], param, param)
                    self._require_lookup(op, other, param)
            if args.get("with_lookup") is not None:
                self._require_unbudgeted_lookup(op, new["with_lookup"])
            if args.get("prefetch") is not None:
                new["prefetch"] = rest_prefetch(args["prefetch"], "prefetch")
                for where, p in iter_prefetch(new["prefetch"], "prefetch"):
                    if p.lookup_from is not None:
                        _, other = _lookup_target(p.lookup_from, "lookup_from", f"{where}.lookup_from")
                        self._require_lookup(op, other, f"{where}.lookup_from")
        except UncheckedForm as exc:
            raise self.refuse_form(op, name, self.policy(name), exc) from None
        return new

    def _require_lookup(self, op: str, other: str, where: str) -> None:
        pol = self.policy(other)
        self.require_access(op, other, pol, "read")
        boundary = self.boundary()
        if pol.raw_allowed(boundary):
            return
        # Qdrant resolves a lookup itself: the other collection's stored vectors steer the
        # search (or come back in with_lookup) without passing vector release, diversity or budget.
        raise self.refuse(self.decision(
            op, other, pol, Verdict.REFUSED_CROSS_BOUNDARY,
            f"{where} makes Qdrant use the stored vectors and payloads of {pol.sensitivity.value} "
            f"collection {other!r} outside the guard's release path, and boundary {boundary!r} may not "
            f"receive raw vectors from it; query {other!r} directly (e.g. query_points({other!r}, ...)) "
            "so its results pass the guard",
            details={"lookup": where},
        ))

    def _require_unbudgeted_lookup(self, op: str, lookup: Any) -> None:
        """Refuse ``with_lookup`` into a collection whose points or vectors a budget counts."""
        other = sent_name(lookup if isinstance(lookup, str) else lookup.collection)
        pol = self.policy(other)
        with_vectors = not isinstance(lookup, str) and asks_vectors(lookup.with_vectors)
        if pol.is_public or not (_source_budgeted(pol) or (with_vectors and _vector_budgeted_policy(pol))):
            return
        # Qdrant attaches the looked-up records itself: they would reach the caller without
        # passing the extraction or distillation budget that every direct read of them draws on.
        raise self.refuse(self.decision(
            op, other, pol, Verdict.REFUSED_CROSS_BOUNDARY,
            f"with_lookup returns points{' and vectors' if with_vectors else ''} of {other!r} past its "
            "extraction budget (diversity.max_source_coverage / max_vectors); read them with "
            f"query_points({other!r}, ...) or retrieve({other!r}, ids), which the budget counts",
            details={"lookup": "with_lookup"},
        ))

    def _rest_request(self, op: str, name: str, req: Any, where: str) -> models.QueryRequest:
        if isinstance(req, models.QueryRequest):
            return req
        if isinstance(req, dict):
            try:
                return models.QueryRequest.model_validate(req)
            except ValueError:  # pydantic's ValidationError
                pass
        raise self.refuse_form(op, name, self.policy(name), UncheckedForm(where, req))

    # -- query vectors --------------------------------------------------------------------
    def noise_query(self, pol: CollectionPolicy, vector: Any) -> Any:
        """Noise a raw query vector from outside the owner boundary (``noise_queries``)."""
        arr = np.asarray(vector, dtype=np.float32)
        if arr.ndim == 2:  # a multivector: every row is a dense vector of its own
            return [self.noise_query(pol, row) for row in arr]
        if arr.ndim != 1:
            return vector
        n = pol.noise
        # A key of their own: under the documents' key a query equal to a stored clean vector would
        # get exactly the stored noise and confirm the guess with score 1.0.
        key = _noise.query_noise_key(self.noise_key) if n.keyed else None
        noised, _ = _noise.privatize(arr, mechanism=n.mechanism, epsilon=n.epsilon, radius=n.radius,
                                     delta=n.delta if n.mechanism == "gaussian" else None,
                                     clip_norm=n.clip_norm, key=key)
        return noised.tolist()


def _public_request(ops: Any, op: str, name: str, req: models.QueryRequest, at: str) -> models.QueryRequest:
    """A PUBLIC batch request with the credentials of its inference inputs screened
    (:func:`~qdrant_guard.pubquery.public_query_text`)."""
    fields = {"query": req.query, "prefetch": req.prefetch}
    new = public_query_text(ops, op, name, fields, at)
    return req if new is fields else req.model_copy(update={k: new[k] for k in fields})


def _sent(call: Call) -> Op:
    """An operation that only sends ``call`` (for :meth:`ReadOps.store_failures`)."""
    return (yield call)


def _lookup_target(value: Any, param: str, where: str) -> tuple[Any, str]:
    """A lookup in the form to send on, and the collection it reads.

    Raises:
        UncheckedForm: not a form of ``param`` that the guard knows.
    """
    rest: Any = models.LookupLocation if param == "lookup_from" else models.WithLookup
    if param == "with_lookup" and isinstance(value, str):
        return value, value  # a plain str: GuardPipeline.run made it one (sentnames.plain_names)
    if isinstance(value, rest):
        # A model built with model_construct() keeps a str subclass, which pydantic serialises
        # as its characters.
        return value, sent_name(value.collection)
    if isinstance(value, grpc.LookupLocation) and param == "lookup_from":
        location = GrpcToRest.convert_lookup_location(value)
        return location, location.collection
    if isinstance(value, grpc.WithLookup) and param == "with_lookup":
        with_lookup = GrpcToRest.convert_with_lookup(value)
        return with_lookup, with_lookup.collection
    if isinstance(value, dict):
        try:
            found = rest.model_validate(value)
        except ValueError:  # pydantic's ValidationError
            raise UncheckedForm(where, value) from None
        return found, found.collection
    raise UncheckedForm(where, value)


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


def _successor(point_id: Any) -> Any:
    """The smallest point id after ``point_id`` in scroll order (integers, then UUIDs); None after
    the last UUID."""
    if isinstance(point_id, int):
        return point_id + 1 if point_id < 2**64 - 1 else str(uuid.UUID(int=0))
    value = uuid.UUID(str(point_id)).int
    return str(uuid.UUID(int=value + 1)) if value < 2**128 - 1 else None


