"""The read path's extraction budget: charging what a read returns, withholding used-up sources.

A mixin of :class:`qdrant_guard.reads.ReadOps`: charging returned points and vectors
(``apply_budget``, ``apply_vector_budget``), the exclusion filter that keeps used-up sources out
of a read before it is sent (``budget_exclusion``, ``read_excluding_withheld``), the counted and
cached source sizes, the store a collection's budget lives in, a failing store's handling, and the
count-like reads that answer about sources without returning points (``budget_oracle``).
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable, Sequence

from qdrant_client.http import models

from .budget import BudgetStoreError, ExtractionBudget, make_store, normalize_point_id, store_kind
from .decision import Verdict
from .payloadops import PayloadOps
from .perstore import SOURCE_SIZE_TTL_S as _SOURCE_SIZE_TTL_S
from .perstore import memory_budget_store_for
from .pipeline import Call, Op
from .policy import CollectionPolicy
from .querycheck import QueryChecks
from .rawstored import left_details, raw_stored_clause, raw_stored_way_out
from .readbudget import _named_vector_id, _source_budgeted, _vector_budgeted
from .readplan import ReadPlan
from .score_charge import ScoreCharge, charges_scores
from .sentmodels import UncheckedForm
from .sourcefilters import Exclusion, _missing_source_count_filter, _only_names_sources, _stored_forms


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


def _sent(call: Call) -> Op:
    """An operation that only sends ``call`` (for :meth:`ReadOps.store_failures`)."""
    return (yield call)


class BudgetOps(PayloadOps, QueryChecks, ScoreCharge):
    """The extraction budget of the read path (a mixin of :class:`qdrant_guard.reads.ReadOps`)."""

    def budget_principal(self) -> str:
        """Whom the budget charges: the verified credential's agent id and boundary, joined so
        that no two principals share a name. The audit label ``agent@boundary`` does not tell
        agent ``m@x`` of boundary ``support`` from agent ``m`` of boundary ``x@support``; here a
        ``%`` or ``@`` in the agent id is percent-escaped, so the first ``@`` ends the agent id
        (an id without either, the usual case, keys the budget as it always has)."""
        verified = self.verified
        if verified is None:
            return self.principal_label or "anonymous"  # reaches no budgeted collection
        agent = verified.agent_id
        if "@" in agent or "%" in agent:
            agent = agent.replace("%", "%25").replace("@", "%40")
        return f"{agent}@{verified.boundary}"

    def source_budgeted(self, pol: CollectionPolicy | None) -> bool:
        """Whether the caller's reads of ``pol``'s collection draw on a source extraction budget."""
        return (pol is not None and pol.diversity.enabled and pol.diversity.max_source_coverage is not None
                and self.boundary() != pol.owner)

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
        principal = self.budget_principal()
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
            dec = self.extraction_budget(pol).admit_vectors(principal=self.budget_principal(),
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
        then the read's audit ``details`` (when given) say so in ``budget_error``. A refusal's entry
        carries the read's ``budget`` and ``vector_budget`` reports so far (those charges stay)."""
        if not pol.fail_closed:
            log.error("budget store failed (fail_closed = false, not withholding): %r", exc)
            if details is not None:
                # The read's entry would otherwise say ALLOW as if the budget had been applied.
                details["budget_error"] = repr(exc)
            return
        # What this read was charged before the failure stays charged: the entry says so.
        charged = {k: details[k] for k in ("budget", "vector_budget") if details and details.get(k)}
        raise self.refuse(self.decision(
            op, name, pol, Verdict.FAIL_CLOSED,
            f"the extraction-budget store failed ({exc}); {outcome}. Check the store in budget_store",
            details={**charged, "error": repr(exc)},
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
        slot = (account, self.budget_principal(), coverage, restricted)
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
                oldest = min(oldest, hit[0])
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
                principal=self.budget_principal(), collection=account)
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
                            if store_kind(spec) == "memory" else make_store(
                                spec, allow_unauthenticated=self.config.budget_store_allow_unauthenticated))
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
