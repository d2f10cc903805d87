"""Guarded reads: boundary, query checks, diversity, extraction budget, vector release.

:class:`ReadOps` is the read half of the pipeline, put together from mixins: the extraction budget
in :mod:`qdrant_guard.budgetops`, a read's plan and released results in
:mod:`qdrant_guard.readrelease`, the query operations in :mod:`qdrant_guard.queryops`; the record
reads (``scroll``, ``retrieve``) and the count-like ones (``facet``, ``count``, the distance
matrix) are here.

The read plan is in :mod:`qdrant_guard.readplan`, which budgets a read draws on in
:mod:`qdrant_guard.readbudget`, ``with_payload`` in :mod:`qdrant_guard.payloadselect`, redacted
text-field values in :mod:`qdrant_guard.redacted` and the budget's sources in Qdrant filters in
:mod:`qdrant_guard.sourcefilters`; their public names are importable from here too.
"""
from __future__ import annotations

import uuid
from itertools import chain
from typing import Any


from .filterroots import field_name_roots
from .payloadselect import project_payload as project_payload
from .pipeline import Call, Op
from .policy import CollectionPolicy
from .queryops import QueryOps
from .readplan import ReadPlan as ReadPlan, asks_vectors as asks_vectors
from .redacted import _redacted_text
from .sourcefilters import Exclusion as Exclusion
from .sources import path_head
from .sources import point_sources as _sources


class ReadOps(QueryOps):
    """The read half of the pipeline."""

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


def _successor(point_id: Any) -> Any:
    """The smallest point id after ``point_id`` in scroll order (integers, then UUIDs); None after
    the last UUID."""
    if isinstance(point_id, int):
        return point_id + 1 if point_id < 2**64 - 1 else str(uuid.UUID(int=0))
    value = uuid.UUID(str(point_id)).int
    return str(uuid.UUID(int=value + 1)) if value < 2**128 - 1 else None


