"""The inputs of a query and of its (nested) prefetches, walked: :func:`map_query` and
:func:`map_prefetch` rebuild them with each input (a vector, a text, an image, a point id) visited;
:func:`iter_prefetch` lists the prefetches. A form the walk does not know raises
:class:`~.sentmodels.UncheckedForm`, refused rather than passed on unchecked."""
from __future__ import annotations

import uuid
from typing import Any, Callable, Iterator

import numpy as np
from qdrant_client.http import models

from .sentmodels import UncheckedForm

# Inputs that carry text the guard did not check (a top-level models.Document is checked).
_TEXT_INPUTS = (models.Document, models.InferenceObject, models.TextQuery)
# Vector inputs given by value (as opposed to a point id, text or an image).
_RAW_INPUTS = (list, tuple, np.ndarray, models.SparseVector)
# Query forms that hold no vector input.
_NO_INPUTS = (models.FusionQuery, models.RrfQuery, models.OrderByQuery, models.SampleQuery, models.FormulaQuery)

Visit = Callable[[Any, str], Any]


def map_query(query: Any, visit: Visit, where: str) -> Any:
    """``query`` rebuilt with each of its inputs (vectors, texts, images and point ids) replaced by
    ``visit(input, where)``.

    Raises:
        UncheckedForm: a form this walk does not know (refused rather than passed on unchecked).
    """
    q = query
    if type(q) is list:
        # A plain vector, the common query: none of the query models below (each isinstance check
        # against one costs about as much as the rest of the walk).
        return _map_input(q, visit, where)
    if isinstance(q, models.NearestQuery):
        return q.model_copy(update={"nearest": _map_input(q.nearest, visit, f"{where}.nearest")})
    if isinstance(q, models.RecommendQuery):
        r = q.recommend
        return q.model_copy(update={"recommend": r.model_copy(update={
            "positive": _map_list(r.positive, visit, f"{where}.recommend.positive"),
            "negative": _map_list(r.negative, visit, f"{where}.recommend.negative"),
        })})
    if isinstance(q, models.DiscoverQuery):
        d = q.discover
        return q.model_copy(update={"discover": d.model_copy(update={
            "target": _map_input(d.target, visit, f"{where}.discover.target"),
            "context": _map_pairs(d.context, visit, f"{where}.discover.context"),
        })})
    if isinstance(q, models.ContextQuery):
        return q.model_copy(update={"context": _map_pairs(q.context, visit, f"{where}.context")})
    if isinstance(q, models.RelevanceFeedbackQuery):
        f = q.relevance_feedback
        feedback = [item.model_copy(update={"example": _map_input(item.example, visit, f"{where}.feedback[{i}]")})
                    for i, item in enumerate(f.feedback)]
        return q.model_copy(update={"relevance_feedback": f.model_copy(update={
            "target": _map_input(f.target, visit, f"{where}.relevance_feedback.target"), "feedback": feedback,
        })})
    if isinstance(q, models.TextQuery):
        return visit(q, where)
    if isinstance(q, _NO_INPUTS):
        return q
    return _map_input(q, visit, where)


def mmr_paths(args: dict[str, Any], at: str = "") -> list[str]:
    """Where the ``query`` of ``args`` or of any (nested) ``prefetch`` asks for MMR re-ranking
    (``models.NearestQuery(mmr=...)``); the forms were checked by :func:`map_query` before."""
    found: list[str] = []
    queries: list[tuple[str, Any]] = [(f"{at}query", args.get("query"))]
    queries += [(f"{path}.query", p.query) for path, p in iter_prefetch(args.get("prefetch"), f"{at}prefetch")]
    for where, q in queries:
        if isinstance(q, models.NearestQuery) and q.mmr is not None:
            found.append(f"{where}.mmr")
    return found


def map_prefetch(prefetch: Any, visit: Visit, where: str) -> Any:
    """``prefetch`` (one or a list, nested to any depth) with every query input visited."""
    if prefetch is None:
        return None
    if isinstance(prefetch, (list, tuple)):
        return [_map_one_prefetch(p, visit, f"{where}[{i}]") for i, p in enumerate(prefetch)]
    return _map_one_prefetch(prefetch, visit, where)


def iter_prefetch(prefetch: Any, where: str) -> Iterator[tuple[str, models.Prefetch]]:
    """Every prefetch of a (nested) prefetch tree with its path, depth first."""
    if prefetch is None:
        return
    items = list(enumerate(prefetch)) if isinstance(prefetch, (list, tuple)) else [(None, prefetch)]
    for i, p in items:
        path = where if i is None else f"{where}[{i}]"
        if not isinstance(p, models.Prefetch):
            raise UncheckedForm(path, p)
        yield path, p
        yield from iter_prefetch(p.prefetch, f"{path}.prefetch")


def rest_prefetch(prefetch: Any, where: str) -> Any:
    """``prefetch`` with plain dicts turned into ``models.Prefetch`` (Qdrant accepts both)."""
    if isinstance(prefetch, (list, tuple)):
        return [rest_prefetch(p, f"{where}[{i}]") for i, p in enumerate(prefetch)]
    if isinstance(prefetch, dict):
        try:
            return models.Prefetch.model_validate(prefetch)
        except ValueError:  # pydantic's ValidationError
            raise UncheckedForm(where, prefetch) from None
    return prefetch


def _map_one_prefetch(p: Any, visit: Visit, where: str) -> models.Prefetch:
    if not isinstance(p, models.Prefetch):
        raise UncheckedForm(where, p)
    return p.model_copy(update={"query": map_query(p.query, visit, f"{where}.query"),
                                "prefetch": map_prefetch(p.prefetch, visit, f"{where}.prefetch")})


def _map_input(value: Any, visit: Visit, where: str) -> Any:
    if value is None:
        return value
    if isinstance(value, (int, str, uuid.UUID)) and not isinstance(value, bool):
        return visit(value, where)  # a point id: its stored vector, in a collection the lookup check allowed
    if isinstance(value, _RAW_INPUTS + _TEXT_INPUTS + (models.Image,)):
        return visit(value, where)
    raise UncheckedForm(where, value)


def _map_list(values: list[Any] | None, visit: Visit, where: str) -> list[Any] | None:
    if values is None:
        return None
    return [_map_input(v, visit, f"{where}[{i}]") for i, v in enumerate(values)]


def _map_pairs(pairs: Any, visit: Visit, where: str) -> Any:
    def one(pair: Any, path: str) -> Any:
        if not isinstance(pair, models.ContextPair):
            raise UncheckedForm(path, pair)
        return pair.model_copy(update={"positive": _map_input(pair.positive, visit, f"{path}.positive"),
                                       "negative": _map_input(pair.negative, visit, f"{path}.negative")})
    if isinstance(pairs, list):
        return [one(p, f"{where}[{i}]") for i, p in enumerate(pairs)]
    return one(pairs, where)
