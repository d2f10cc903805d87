"""The query reads: ``query_points``, ``query_batch_points``, ``query_points_groups``.

A mixin of :class:`qdrant_guard.reads.ReadOps`: each query's checks, the collections its lookups
(``lookup_from``, ``with_lookup``) read and the budget those must not bypass, batch requests in
their REST form, and the noise on a raw query vector sent from outside the owner boundary.
"""
from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np
from qdrant_client import grpc
from qdrant_client.conversions.conversion import GrpcToRest
from qdrant_client.http import models

from . import noise as _noise
from .decision import Verdict
from .diversity import enforce_group_caps, overfetch_limit
from .filterroots import field_name_roots, query_filter_roots
from .payloadselect import _user_selector
from .pipeline import Call, Op
from .policy import CollectionPolicy
from .pubquery import carries_inputs, public_query_text
from .querymap import iter_prefetch, rest_prefetch
from .readbudget import _source_budgeted, _vector_budgeted_policy
from .readplan import _given_count, asks_vectors
from .redacted import _redacted_text
from .score_charge import charges_scores
from .sentmodels import UncheckedForm
from .sentnames import sent_name
from .sourcefilters import Exclusion
from .sources import path_head
from .sources import point_sources as _sources
from .readrelease import ReadRelease


def _public_request(ops: Any, op: str, name: str, req: models.QueryRequest, at: str) -> models.QueryRequest:
    """A PUBLIC batch request with its inference inputs screened
    (:func:`~qdrant_guard.pubquery.public_query_text`)."""
    fields = {"query": req.query, "prefetch": req.prefetch}
    new = public_query_text(ops, op, name, fields, at)
    return req if new is fields else req.model_copy(update={k: new[k] for k in fields})


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


class QueryOps(ReadRelease):
    """The guarded query operations (a mixin of :class:`qdrant_guard.reads.ReadOps`)."""

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
        if pol is None:  # PUBLIC: neither credentials nor PII are sent to inference as given
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
                # What the caps took from the hits uncapped groups would have returned: without it an
                # operator sees the caps but not that a grouped read came back short.
                short_by = sum(min(len(g.hits), group_size) - len(o.kept) for g, o in zip(groups, outcome.groups))
                groups = [g.model_copy(update={"hits": list(o.kept)}) for g, o in zip(groups, outcome.groups)]
                run_details["group_caps"] = {"group_cap": outcome.group_cap, "response_cap": outcome.response_cap,
                                             "short_by": short_by}
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
