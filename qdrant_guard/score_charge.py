"""The distillation budget in coordinates: scores charged with vectors (``diversity.charge_scores``).

A score is the query's similarity to a stored vector: one linear measurement of it, so ``d`` of
them (basis-vector queries, each ranking the same points) rebuild a ``d``-dimensional vector
that ``max_vectors`` never counted. With the knob on, the budget counts units: a vector is worth
``unit`` (the least common multiple of the collection's dense vector sizes), one score of a
vector of size ``d`` ``unit // d``; the cap is ``max_vectors * unit``
(:meth:`ExtractionBudget.admit_units`).

A score is charged under an id made of the point, the vector name and a digest of the request as
sent (query, prefetches, ``using``, filter, ``lookup_from``, search params): the same request again measures
nothing new, so the points it already returned are free, as re-reading a point is in the other
budgets; any other request (another query vector, a noised one) is charged anew. A request that
takes a query vector from a stored point by its id (query by id, recommend, discover, context, in
the query or a prefetch) is never free again: the same id can hold another vector at the next call
(a point the caller rewrites in a collection of its own named by ``lookup_from``), so its digest
names the call.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import uuid
from typing import Any, Mapping

import numpy as np
import pydantic
from qdrant_client.http import models

from .budget import BudgetStoreError, normalize_point_id
from .decision import Verdict
from .policy import CollectionPolicy
from .querymap import iter_prefetch

# Queries whose scores come from the prefetches' (fusion, formula), a payload field (order by, BM25
# over a text index: TextQuery's ``using`` names that field) or nothing at all (sample).
_NOT_A_MEASUREMENT = (models.OrderByQuery, models.SampleQuery, models.FusionQuery, models.RrfQuery,
                      models.FormulaQuery, models.TextQuery)

_NAMED_VECTOR_NS = uuid.UUID("5b0d3c1e-6a52-4f0e-9a57-7d1c2b4e8f10")  # readbudget._NAMED_VECTOR_NS


def charges_scores(pol: CollectionPolicy) -> bool:
    """Whether ``pol``'s distillation budget counts scores (and vectors) in units."""
    div = pol.diversity
    return (div.enabled and div.charge_scores and pol.sensitivity.value == "PROPRIETARY"
            and div.max_vectors is not None)


def score_spec(query: Any, prefetch: Any, using: Any, flt: Any, lookup_from: Any,
               params: Any = None) -> tuple[tuple[str, ...], str] | None:
    """``(the vector names the request's scores measure, the request's digest)``, or None when the
    request scores with no vector (no query, or only order-by / sample queries)."""
    names: list[str] = []
    nodes = [(query, using)] + [(p.query, p.using) for _, p in iter_prefetch(prefetch, "prefetch")]
    for q, name in nodes:
        if q is not None and not isinstance(q, _NOT_A_MEASUREMENT):
            names.append(name if isinstance(name, str) else "")
    if not names:
        return None
    sent = {"query": query, "prefetch": prefetch, "using": using, "filter": flt, "lookup_from": lookup_from,
            "params": params}
    if any(_names_points(q) for q, _ in nodes):
        sent["call"] = os.urandom(16).hex()
    digest = hashlib.sha256(json.dumps(_canon(sent), sort_keys=True).encode()).hexdigest()[:32]
    return tuple(dict.fromkeys(names)), digest


_ID_FORMS = (int, str, uuid.UUID)


def _names_points(query: Any) -> bool:
    """Whether ``query`` takes a vector from a stored point by its id. A form not walked here
    (a dict) counts as one: at worst its repeat is charged again."""
    if isinstance(query, Mapping):
        return True
    if isinstance(query, _ID_FORMS) and not isinstance(query, bool):
        return True
    if isinstance(query, models.NearestQuery):
        return _names_points(query.nearest)
    if isinstance(query, models.RecommendQuery):
        return any(_names_points(v) for v in [*(query.recommend.positive or ()), *(query.recommend.negative or ())])
    if isinstance(query, models.DiscoverQuery):
        return _names_points(query.discover.target) or _pairs_name_points(query.discover.context)
    if isinstance(query, models.ContextQuery):
        return _pairs_name_points(query.context)
    return False


def _pairs_name_points(pairs: Any) -> bool:
    if pairs is None:
        return False
    items = pairs if isinstance(pairs, (list, tuple)) else [pairs]
    return any(not isinstance(p, models.ContextPair) or _names_points(p.positive) or _names_points(p.negative)
               for p in items)


def _canon(value: Any) -> Any:
    # A stable JSON form of what was sent: an object it cannot read becomes its repr, which at worst
    # makes two equal requests count twice (stricter), never two different ones count once.
    if isinstance(value, pydantic.BaseModel):
        return _canon(value.model_dump(mode="json", exclude_none=True))
    if isinstance(value, (list, tuple, np.ndarray)):
        numbers = _numbers(value)
        return numbers if numbers is not None else [_canon(v) for v in value]
    if isinstance(value, dict) or isinstance(value, Mapping):
        return {str(k): _canon(v) for k, v in value.items()}
    if isinstance(value, (bool, np.bool_)) or value is None or isinstance(value, str):
        return value if not isinstance(value, np.bool_) else bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return repr(value)


def _numbers(value: Any) -> str | None:
    # A query vector (or multivector) as the float64 bytes of its values, hashed: a per-item walk
    # cost 10 ms for a 384-d vector. None for anything but a non-empty array of real numbers.
    if len(value) == 0 or isinstance(value[0], (str, bytes, bool, np.bool_)):
        return None
    if type(value) is list and type(value[0]) is float:
        try:  # a plain vector: packing it is 3x faster than building an array
            return f"f64({len(value)},):" + hashlib.sha256(struct.pack(f"<{len(value)}d", *value)).hexdigest()
        except struct.error:
            pass
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        return None
    if arr.dtype.kind not in "fiu":
        return None
    arr = arr.astype(np.float64)
    return f"f64{arr.shape}:" + hashlib.sha256(arr.tobytes()).hexdigest()


def _score_id(point_id: Any, name: str, digest: str) -> str:
    # "s:" never starts a vector's id ("i:", "u:"), so a score and a vector never share one.
    text = f"{normalize_point_id(point_id)}\x00{name}\x00{digest}".encode()
    return "s:" + hashlib.blake2b(text, digest_size=16).hexdigest()


def _vector_id(point_id: Any, name: str | None) -> str:
    if name is None:
        return normalize_point_id(point_id)
    return f"u:{uuid.uuid5(_NAMED_VECTOR_NS, f'{normalize_point_id(point_id)}{chr(0)}{name}')}"


class ScoreCharge:
    """The read path's units budget (a mixin of :class:`qdrant_guard.reads.ReadOps`)."""

    def apply_units_budget(self, op: str, name: str, pol: CollectionPolicy, pts: list[Any],
                           details: dict[str, Any], *, account: str, scored: Any, with_vectors: bool) -> Any:
        """Charge each returned point's scores (outside the owner boundary) and vectors in units.

        A point whose scores the budget refuses is left out (a score cannot be stripped); a vector
        it refuses is left out as :meth:`ReadOps.apply_vector_budget` leaves it out, and is never
        charged for a point left out. A generator (the vector sizes may be fetched).
        """
        charge_scores = scored is not None and self.boundary() != pol.owner  # type: ignore[attr-defined]
        if not pts or not (charge_scores or with_vectors):
            return pts
        shape = yield from self.shape(account)  # type: ignore[attr-defined]
        sizes = {vname: spec.size for vname, spec in shape.dense.items()}
        if charge_scores:
            # Checked before the no-dense-vector return: a sparse-only collection's scores were
            # returned uncharged where a collection with a dense vector refuses the same query.
            for vname in scored[0]:
                if vname not in sizes:
                    raise self.refuse(self.decision(  # type: ignore[attr-defined]
                        op, name, pol, Verdict.QUERY_REJECTED,
                        f"the request scores with vector {vname or '<unnamed>'!r} of {name!r}, which is not a dense "
                        "vector of the collection, so diversity.charge_scores cannot size what each score "
                        "measures; query a dense vector (using=...)",
                        details={"using": vname}))
        if not sizes:
            return pts
        unit = math.lcm(*sizes.values())
        weights: list[tuple[str, int]] = []
        if charge_scores:
            names, digest = scored
            weights = [(vname, unit // sizes[vname]) for vname in names]
        groups: list[tuple[list[tuple[str, int]], int]] = []
        owners: list[tuple[int, str | None]] = []  # per group: (point index, None for its scores, else the vector)
        for i, p in enumerate(pts):
            requires = -1
            if weights:
                requires = len(groups)
                groups.append(([(_score_id(p.id, vname, digest), w) for vname, w in weights], -1))
                owners.append((i, None))
            vector = getattr(p, "vector", None) if with_vectors else None
            if isinstance(vector, dict):
                for vname, v in vector.items():
                    if v is not None:
                        groups.append(([(_vector_id(p.id, vname), unit)], requires))
                        owners.append((i, vname))
            elif vector is not None:
                groups.append(([(_vector_id(p.id, None), unit)], requires))
                owners.append((i, ""))
        if not groups:
            return pts
        try:
            flags, _, after, cap, _ = self.extraction_budget(pol).admit_units(  # type: ignore[attr-defined]
                principal=self.budget_principal(), collection=account, unit=unit,  # type: ignore[attr-defined]
                groups=groups, max_vectors=int(pol.diversity.max_vectors or 0))
        except BudgetStoreError as exc:
            self.budget_store_failed(op, name, pol, exc,  # type: ignore[attr-defined]
                                     "the distillation budget could not be applied, so nothing was returned", details)
            return pts
        dropped: set[int] = set()
        stripped: dict[int, set[str]] = {}
        for (i, what), ok in zip(owners, flags):
            if ok:
                continue
            if what is None:
                dropped.add(i)
            else:
                stripped.setdefault(i, set()).add(what)
        vectors_held = sum(len(v) for i, v in stripped.items() if i not in dropped)
        if not dropped and not vectors_held:
            return pts
        report = {"unit": unit, "cap": cap, "charged": after}
        if dropped:
            earlier = details.get("score_budget")  # a grouped read charges each group in turn
            details["score_budget"] = {**report, "withheld": len(dropped) + (earlier["withheld"] if earlier else 0)}
        if vectors_held:
            earlier = details.get("vector_budget")
            details["vector_budget"] = {**report, "withheld": vectors_held + (earlier["withheld"] if earlier else 0)}
        if pol.diversity.mode == "monitor":  # nothing withheld: logged as what would have been
            details.update({f"{kind}_budget_monitor": True for kind, n in (("score", dropped), ("vector", vectors_held)) if n})
            return pts
        details["verdict"] = Verdict.BUDGET_EXCEEDED.value
        out = []
        for i, p in enumerate(pts):
            if i in dropped:
                continue
            held = stripped.get(i)
            if held:
                vector = p.vector
                if isinstance(vector, dict):
                    kept = {vname: v for vname, v in vector.items() if vname not in held}
                    p = p.model_copy(update={"vector": kept or None})
                else:
                    p = p.model_copy(update={"vector": None})
            out.append(p)
        return out
