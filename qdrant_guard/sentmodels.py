"""The filters, queries and formulas of a call as qdrant-client sends them, rebuilt once per call
before the guard checks any of them (:func:`sent_models`).

A model built with ``model_construct()`` (or changed after it was built) is not validated. A list
subclass in it can show the guard's walks, which iterate, other items than pydantic serialises:
qdrant-client's REST transport sends ``model_dump_json(by_alias=True, exclude_unset=True,
exclude_none=True)`` of the request, every item the list holds, while its gRPC converters and
local mode iterate as the guard does. A dict can stand where a condition is expected (the walks
skip it, pydantic sends it), a str subclass can compare as another key. So each such argument is
dumped as the REST transport dumps it, through the declared model's own serializer (a subclass
cannot change it), and validated again: the guard checks that copy and sends it, so every
transport sends what was checked. A model built normally comes back equal, with the same fields
set, so one that is :func:`plain` (exact types its annotations admit, every value given) is
checked and sent as it is, without the copy (measured 32 us for a two-condition filter, more for larger ones). One that does not validate is
refused (:class:`UncheckedForm`), as qdrant-client's server would refuse what it sends.

Queries likewise (:func:`_query`): a list or ndarray subclass, or a query model subclass, showed
the score-charge digest and the query checks other inputs than qdrant-client sends (pydantic reads
a list's items, qdrant-client sends an ndarray's ``tolist()`` and a model's fields). A plain vector,
a point id, an exact numeric ndarray and a plain query model are passed as they are.
"""
from __future__ import annotations

import datetime
import enum
import types
import uuid
from typing import Annotated, Any, NamedTuple, Union, get_args, get_origin

import numpy as np
from pydantic import BaseModel, TypeAdapter
from qdrant_client.http import models

from .point_uuid import real_uuid
from .errors import QdrantGuardError


class UncheckedForm(QdrantGuardError):
    """A query, prefetch or lookup is in a form the guard cannot inspect (so it is refused)."""

    def __init__(self, where: str, value: Any, why: str = "a form the guard cannot check") -> None:
        super().__init__(f"{where} is a {type(value).__name__}, {why}")
        self.where = where
        self.form = type(value).__name__


def _field_type(model: type[BaseModel], field: str) -> Any:
    """The declared type of a qdrant-client model's field (pydantic fills ``annotation`` for every
    annotated field)."""
    annotation = model.model_fields[field].annotation
    if annotation is None:
        raise TypeError(f"qdrant-client's {model.__name__}.{field} has no type annotation; install the qdrant-client "
                        "version pyproject.toml names")
    return annotation


# The argument that holds a write's points selector, by method (a filter, a FilterSelector, ids).
WRITE_SELECTORS = {"delete": "points_selector", "clear_payload": "points_selector", "set_payload": "points",
                   "overwrite_payload": "points", "delete_payload": "points", "delete_vectors": "points"}
_FILTER_ARGS = ("query_filter", "scroll_filter", "count_filter", "facet_filter", "update_filter")
# Query forms that name payload keys (the guard walks them for keys).
KEYED_QUERIES = (models.FormulaQuery, models.OrderByQuery)
# A query as REST sends it, ``models.QueryRequest``'s field (a vector, a point id, an inference
# input or a query model; query_points_groups' request holds the same union): dumped by its
# serializer, which picks the member a subclass is sent as (a SampleQuery that is also a
# NearestQuery goes as the NearestQuery), and validated back into that member.
_QUERY = TypeAdapter(_field_type(models.QueryRequest, "query"))
_QUERY_MODELS = tuple(a for a in get_args(_field_type(models.QueryRequest, "query"))
                      if isinstance(a, type) and issubclass(a, BaseModel))
_QUERY_TYPES = frozenset(_QUERY_MODELS)
_SELECTOR_MODELS = (models.Filter, models.FilterSelector, models.PointIdsList)
# Lookups into another collection (whose name and payload selector the guard checks).
_LOOKUPS = (("lookup_from", models.LookupLocation), ("with_lookup", models.WithLookup))
_PAYLOAD_SELECTORS = (models.PayloadSelectorInclude, models.PayloadSelectorExclude)
# Batch operations rebuilt whole: none carries vectors (the upsert and vector update, which do,
# have only their update_filter rebuilt, so the write path's cost stays where it was).
_WHOLE_OPERATIONS = (models.DeleteOperation, models.SetPayloadOperation, models.OverwritePayloadOperation,
                     models.DeletePayloadOperation, models.ClearPayloadOperation, models.DeleteVectorsOperation)


def rebuilt(value: Any, cls: type[BaseModel], where: str) -> Any:
    """``value`` (an instance of ``cls`` or a subclass) dumped as qdrant-client's REST transport
    dumps it, by ``cls``'s serializer, and validated again as a plain ``cls``; ``value`` itself
    when it is :func:`plain` (then that copy would equal it).

    Raises:
        UncheckedForm: what it holds does not validate as ``cls``.
    """
    if type(value) is cls and _plain_model(value):
        return value
    try:
        dumped = cls.__pydantic_serializer__.to_python(
            value, by_alias=True, exclude_unset=True, exclude_none=True, warnings=False)
        return cls.__pydantic_validator__.validate_python(_real_uuids(dumped, where))
    except ValueError as exc:  # ValidationError, PydanticSerializationError
        first = exc.errors()[0].get("msg", "") if hasattr(exc, "errors") else type(exc).__name__
        raise UncheckedForm(where, value, f"which does not validate as models.{cls.__name__} ({first}; was it "
                            "built with model_construct() or changed after it was built?)") from None


def _real_uuid(value: uuid.UUID, where: str) -> uuid.UUID:
    try:
        return real_uuid(value)
    except QdrantGuardError:
        raise UncheckedForm(where, value, "a UUID subclass without a value: pass a plain uuid.UUID, its str "
                            "or an unsigned int") from None


def _real_uuids(dumped: Any, where: str) -> Any:
    """A python-mode dump with each ``uuid.UUID`` subclass (a point id, which the dump keeps as it
    is and local mode reads by its ``str()``) a plain UUID of its value, as REST sends it."""
    t = type(dumped)
    if t is dict:
        for k, v in dumped.items():
            if type(v) in _CONTAINERS or (isinstance(v, uuid.UUID) and type(v) is not uuid.UUID):
                dumped[k] = _real_uuids(v, where)
    elif t is list:
        if dumped and type(dumped[0]) is float:
            return dumped  # a vector
        for i, v in enumerate(dumped):
            if type(v) in _CONTAINERS or (isinstance(v, uuid.UUID) and type(v) is not uuid.UUID):
                dumped[i] = _real_uuids(v, where)
    elif isinstance(dumped, uuid.UUID) and t is not uuid.UUID:
        return _real_uuid(dumped, where)
    return dumped


_CONTAINERS = (dict, list)


class _Shape(NamedTuple):
    """What a field's annotation admits, as exact types: scalars, qdrant models, list items."""

    scalars: frozenset[type]
    models: frozenset[type]
    items: "_Shape | None"


_NOTHING = _Shape(frozenset(), frozenset(), None)
_SCALARS = (str, int, float, bool, uuid.UUID, datetime.datetime, datetime.date)
_SHAPES: dict[Any, _Shape] = {}
_FIELDS: dict[type, dict[str, _Shape]] = {}


def _shape(annotation: Any) -> _Shape:
    found = _SHAPES.get(annotation)
    if found is None:
        origin, args = get_origin(annotation), get_args(annotation)
        if origin is Annotated:  # StrictStr and the like: the type, checked exactly below
            found = _shape(args[0])
        elif origin in (Union, types.UnionType):
            found = _merge([_shape(a) for a in args])
        elif origin is list:
            found = _Shape(frozenset(), frozenset(), _shape(args[0]))
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found = _Shape(frozenset(), frozenset({annotation}), None)
        elif annotation in _SCALARS or (isinstance(annotation, type) and issubclass(annotation, enum.Enum)):
            found = _Shape(frozenset({annotation}), frozenset(), None)
        else:  # a dict, Any, a Literal: nothing there is taken as plain
            found = _NOTHING
        _SHAPES[annotation] = found
    return found


def _merge(parts: list[_Shape]) -> _Shape:
    """The shape admitting what any of ``parts`` admits (a union's)."""
    lists = [p.items for p in parts if p.items is not None]
    return _Shape(frozenset().union(*(p.scalars for p in parts)), frozenset().union(*(p.models for p in parts)),
                  _merge(lists) if lists else None)


def plain(value: Any, shape: _Shape) -> bool:
    """Whether ``value`` holds nothing the rebuild would change for the guard's walks: of an
    exact type ``shape`` admits (no subclass of a list, str or model, no dict, no object
    pydantic would validate into another), a model's fields likewise and set (REST sends no
    unset field; a field left None is skipped). Ordinary filters are plain, and are checked and
    sent as they are (the rebuild costs tens of microseconds a filter); anything else is rebuilt.
    A None list item is not plain: no condition validates from it, so the rebuild refuses it."""
    t = type(value)
    if t in shape.scalars:
        return True
    if t is list:
        items = shape.items
        if items is None:
            return False
        if not items.models and (items.items is None or (value and type(value[0]) in items.scalars)):
            # A list of scalars (MatchAny, has_id, a vector where a multivector may stand too): in C.
            return set(map(type, value)) <= items.scalars
        return all(plain(v, items) for v in value)
    return t in shape.models and _plain_model(value)


def _plain_model(value: Any) -> bool:
    cls = type(value)
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = {name: _shape(info.annotation) for name, info in cls.model_fields.items()}
    state = value.__dict__
    if len(state) != len(fields) or getattr(value, "__pydantic_extra__", None):
        return False
    given = getattr(value, "__pydantic_fields_set__", ())
    for name, v in state.items():
        if v is not None and (name not in given or name not in fields or not plain(v, fields[name])):
            return False
    return True


def _items(value: Any) -> list[Any]:
    """Every item of a list or tuple, as pydantic reads it (not by a subclass's ``__iter__``)."""
    return list.__getitem__(value, slice(None)) if isinstance(value, list) else list(tuple.__getitem__(value, slice(None)))


# The common arguments, which hold no model (a plain vector, with_payload=True, a key).
_NOT_MODELS = frozenset({list, tuple, bool, str, int, float})


def _of(value: Any, classes: tuple[type[BaseModel], ...]) -> type[BaseModel] | None:
    """The first of ``classes`` that ``value`` is an instance of."""
    for cls in classes:
        if isinstance(value, cls):
            return cls
    return None


def _query(value: Any, where: str) -> Any:
    """A query (``query=`` or a batch request's) as REST sends it: a plain vector, an exact numeric
    ndarray, a point id and a :func:`plain` query model as they are; a list, str or int subclass,
    another ndarray, a query model subclass or one that is not plain dumped and validated again
    (:data:`_QUERY`). Anything else (a dict, a gRPC form) is left to ``querymap.map_query``,
    which refuses it."""
    t = type(value)
    if t is list:
        if not value or type(value[0]) is float:
            return value  # a vector: what follows a float must be one for it to validate
        if type(value[0]) is list and all(type(row) is list for row in value):
            return value  # a multivector of plain rows (pydantic and numpy read their items)
    elif t is str or t is int or t is uuid.UUID or value is None:
        return value
    elif isinstance(value, uuid.UUID):
        return _real_uuid(value, where)
    elif t is np.ndarray:
        if value.dtype.kind in "fiu":
            return value  # qdrant-client sends its tolist(), the guard reads its data: the same numbers
        value = value.tolist()
    elif t in _QUERY_TYPES:
        if _plain_model(value):
            return value
    elif isinstance(value, np.ndarray):
        # A subclass: its data, as the guard's checks read it (not its own tolist(), which
        # qdrant-client would send, nor its iteration, which pydantic would read).
        value = np.ndarray.tolist(value)
    elif not isinstance(value, (list, str, int) + _QUERY_MODELS):
        return value
    try:
        return _QUERY.validate_python(_real_uuids(_QUERY.serializer.to_python(
            value, by_alias=True, exclude_unset=True, exclude_none=True, warnings=False), where))
    except ValueError as exc:  # ValidationError, PydanticSerializationError
        first = exc.errors()[0].get("msg", "") if hasattr(exc, "errors") else type(exc).__name__
        raise UncheckedForm(where, value, f"which does not validate as a query ({first}): pass a plain list of "
                            "floats, a point id or a qdrant_client.models query built normally (not with "
                            "model_construct() nor changed after it was built)") from None


def _prefetch(value: Any, where: str) -> Any:
    """A prefetch (one or a list, nested ones with it) rebuilt; a dict is left to
    ``querymap.rest_prefetch``, which validates it."""
    if isinstance(value, models.Prefetch):
        return rebuilt(value, models.Prefetch, where)
    if isinstance(value, (list, tuple)):
        return [_prefetch(p, f"{where}[{i}]") for i, p in enumerate(_items(value))]
    return value


def _names(value: Any, where: str) -> Any:
    """A payload selector or ``order_by`` model rebuilt; a key, and each of a list of keys, as its
    characters: a str subclass's ``__getitem__``/``startswith`` showed the key checks another key
    (``scroll(order_by=...)`` on the kept text field), while every transport sends its characters."""
    t = type(value)
    if t is str or t is bool:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (list, tuple)):
        if t in (list, tuple) and all(type(v) is str for v in value):
            return value
        return [str.__str__(v) if isinstance(v, str) else v for v in _items(value)]
    if t in _NOT_MODELS:
        return value
    cls = _of(value, _PAYLOAD_SELECTORS + (models.OrderBy,))
    if cls is not None:
        return rebuilt(value, cls, where)
    if isinstance(value, dict):
        # A dict is validated into a selector or OrderBy by qdrant-client, through its own reads of
        # it (a dict subclass's get(), a list subclass's items), while the key screen iterated it.
        return _dict_names(value, where)
    return value


# What a dict given as with_payload or order_by is validated into (QueryRequest's, ScrollRequest's).
_DICT_NAMES = {"with_payload": TypeAdapter(_field_type(models.QueryRequest, "with_payload")),
               "order_by": TypeAdapter(_field_type(models.ScrollRequest, "order_by"))}


def _dict_names(value: dict[Any, Any], where: str) -> Any:
    """A dict given as ``with_payload``/``order_by`` as the model qdrant-client validates it into;
    one that does not validate as it is (its keys are screened, then the REST client's validation
    error is raised: ``payloadselect._user_selector``, or qdrant-client's own)."""
    kind = "order_by" if where.endswith("order_by") else "with_payload"
    try:
        found = _DICT_NAMES[kind].validate_python(value)
    except ValueError:  # ValidationError
        return value
    # Validated through the dict's own methods: a model it holds is rebuilt as its fields send.
    return _names(found, where) if isinstance(found, BaseModel) else found


def _selector(value: Any, where: str) -> Any:
    cls = _of(value, _SELECTOR_MODELS)
    if cls is not None:
        return rebuilt(value, cls, where)
    if isinstance(value, (list, tuple)) and type(value) not in (list, tuple):
        return _items(value)  # point ids
    return value


def _operation(op: Any, where: str) -> Any:
    cls = _of(op, _WHOLE_OPERATIONS)
    if cls is not None:
        return rebuilt(op, cls, where)
    field = ("upsert" if isinstance(op, models.UpsertOperation) else
             "update_vectors" if isinstance(op, models.UpdateVectorsOperation) else None)
    inner = getattr(op, field) if field is not None else None
    flt = getattr(inner, "update_filter", None)
    if inner is not None and isinstance(flt, models.Filter):
        sent = rebuilt(flt, models.Filter, f"{where}.{field}.update_filter")
        return op.model_copy(update={field: inner.model_copy(update={"update_filter": sent})})
    return op


def _request(req: Any, where: str) -> Any:
    """One request of ``query_batch_points``: its filter, prefetch, query, payload selector and lookup."""
    if not isinstance(req, models.QueryRequest):
        return req  # a dict: validated whole by ReadOps._rest_request
    if type(req) is not models.QueryRequest:
        # A subclass's attributes may show the checks other fields than pydantic sends: whole.
        return rebuilt(req, models.QueryRequest, where)
    update = {k: v for k, v in (
        ("filter", rebuilt(req.filter, models.Filter, f"{where}.filter") if isinstance(req.filter, models.Filter)
         else req.filter),
        ("prefetch", _prefetch(req.prefetch, f"{where}.prefetch")),
        ("query", _query(req.query, f"{where}.query")),
        ("with_payload", _names(req.with_payload, f"{where}.with_payload")),
        ("lookup_from", rebuilt(req.lookup_from, models.LookupLocation, f"{where}.lookup_from")
         if isinstance(req.lookup_from, models.LookupLocation) else req.lookup_from),
    ) if v is not getattr(req, k)}
    return req.model_copy(update=update) if update else req


def sent_models(method: str, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with every filter, query (:func:`_query`), prefetch, payload selector,
    ``order_by``, lookup, points selector, batch request and batch operation rebuilt as sent
    (:func:`rebuilt`); everything else as it is.

    Raises:
        UncheckedForm: one of them does not validate.
    """
    changed: dict[str, Any] = {}
    # (Each isinstance against a pydantic model costs ~0.5 us, so None is passed over first.)
    for key in _FILTER_ARGS:
        value = args.get(key)
        if value is not None and isinstance(value, models.Filter):
            changed[key] = rebuilt(value, models.Filter, key)
    if args.get("query") is not None:
        changed["query"] = _query(args["query"], "query")
    if args.get("prefetch") is not None:
        changed["prefetch"] = _prefetch(args["prefetch"], "prefetch")
    for key in ("with_payload", "order_by"):
        if args.get(key) is not None:
            changed[key] = _names(args[key], key)
    for key, cls in _LOOKUPS:
        if args.get(key) is not None and isinstance(args[key], cls):
            changed[key] = rebuilt(args[key], cls, key)
    selector = WRITE_SELECTORS.get(method)
    if selector is not None and args.get(selector) is not None:
        changed[selector] = _selector(args[selector], selector)
    if method == "query_batch_points" and isinstance(args.get("requests"), (list, tuple)):
        changed["requests"] = [_request(r, f"requests[{i}]") for i, r in enumerate(_items(args["requests"]))]
    if method == "batch_update_points" and isinstance(args.get("update_operations"), list):
        changed["update_operations"] = [_operation(op, f"update_operations[{i}]")
                                        for i, op in enumerate(args["update_operations"])]
    changed = {k: v for k, v in changed.items() if v is not args.get(k)}
    return {**args, **changed} if changed else args
