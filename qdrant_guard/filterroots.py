"""The filters and field names a call sends to the store, as ``(where, root)`` pairs for
:meth:`~.querycheck.QueryChecks.screen_filters` (:func:`query_filter_roots`,
:func:`write_filter_roots`, :func:`field_name_roots`), and every payload key a root names
(:func:`_iter_keys`)."""
from __future__ import annotations

from typing import Any, Iterator, get_args

from pydantic import BaseModel
from qdrant_client import grpc
from qdrant_client.conversions.conversion import GrpcToRest
from qdrant_client.http import models

from . import detect as _detect
from .querymap import iter_prefetch
from .sentmodels import KEYED_QUERIES as _KEYED_QUERIES, WRITE_SELECTORS as _WRITE_SELECTORS, UncheckedForm


def as_filter(value: Any, where: str) -> Any:
    """A filter given as ``models.Filter``, its dict form or a ``grpc.Filter``, as a ``models.Filter``;
    anything else (a query, a condition) is returned as it is, to be walked.

    Raises:
        UncheckedForm: a dict that is not a valid filter, a gRPC filter that does not convert.
    """
    if isinstance(value, grpc.Filter):
        try:
            return GrpcToRest.convert_filter(value)
        except ValueError:  # a condition with no field set: qdrant-client cannot send it either
            raise UncheckedForm(where, value) from None
    if isinstance(value, dict):
        try:
            return models.Filter.model_validate(value)
        except ValueError:  # pydantic's ValidationError
            raise UncheckedForm(where, value) from None
    return value


def _expression_fields(cls: type) -> frozenset[str]:
    """The fields of model ``cls`` that hold a formula expression, where a string is a payload
    key (or a ``$score`` variable) sent to the store as it is."""
    found = _EXPRESSION_FIELDS.get(cls)
    if found is None:
        def holds(annotation: Any) -> bool:
            return annotation is models.MultExpression or any(holds(a) for a in get_args(annotation))

        found = _EXPRESSION_FIELDS[cls] = frozenset(
            name for name, info in getattr(cls, "model_fields", {}).items() if holds(info.annotation))
    return found


_EXPRESSION_FIELDS: dict[type, frozenset[str]] = {}


def _iter_keys(value: Any, where: str, prefix: str = "") -> Iterator[tuple[str, str, Any]]:
    """Every field name in ``value`` (a filter, a formula, nested to any depth) as ``(where, key,
    node)``: ``where`` is the path of the key itself (``...must[0].key``, ``...is_empty.key``,
    ``...nested.key``, ``...formula.sum[1]``), ``key`` a payload path (``people[].ssn`` inside
    ``NestedCondition`` ``people``), ``node`` the ``FieldCondition`` (whose ``match`` is screened
    too) or what named the key."""
    if isinstance(value, models.FieldCondition):
        yield f"{where}.key", prefix + value.key, value
    elif isinstance(value, FieldNames):
        yield from _iter_names(value, value.names, where)
    elif isinstance(value, models.OrderBy):
        yield f"{where}.key", value.key, value
    elif isinstance(value, models.OrderByQuery):
        if isinstance(value.order_by, str):
            yield f"{where}.order_by", value.order_by, value
        else:
            yield from _iter_keys(value.order_by, f"{where}.order_by")
    elif isinstance(value, (models.PayloadSelectorInclude, models.PayloadSelectorExclude)):
        field = "include" if isinstance(value, models.PayloadSelectorInclude) else "exclude"
        yield from _iter_names(value, getattr(value, field), f"{where}.{field}")
    elif isinstance(value, models.NestedCondition):
        nested = value.nested
        yield f"{where}.nested.key", prefix + nested.key, value
        yield from _iter_keys(nested.filter, f"{where}.nested.filter", f"{prefix}{nested.key}[].")
    elif isinstance(value, (models.IsEmptyCondition, models.IsNullCondition)):
        field = "is_empty" if isinstance(value, models.IsEmptyCondition) else "is_null"
        yield f"{where}.{field}.key", prefix + getattr(value, field).key, value
    elif isinstance(value, models.HasVectorCondition):
        yield f"{where}.has_vector", value.has_vector, value
    elif isinstance(value, models.GeoDistanceParams):
        yield f"{where}.to", value.to, value
    elif isinstance(value, models.DatetimeKeyExpression):
        yield f"{where}.datetime_key", value.datetime_key, value
    elif isinstance(value, BaseModel):
        expressions = _expression_fields(type(value))
        if isinstance(value, models.FormulaQuery):
            for key in value.defaults or ():
                if isinstance(key, str):
                    yield f"{where}.defaults", key, value
        for key, item in value.__dict__.items():
            at = f"{where}.{key.rstrip('_')}"
            if key in expressions:
                for i, one in enumerate(item if isinstance(item, list) else [item]):
                    if isinstance(one, str):
                        yield at + (f"[{i}]" if isinstance(item, list) else ""), one, value
            if isinstance(item, (BaseModel, list, tuple)):
                yield from _iter_keys(item, at, prefix)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if isinstance(item, (BaseModel, list, tuple)):
                yield from _iter_keys(item, f"{where}[{i}]", prefix)


def query_filter_roots(args: dict[str, Any], filter_key: str, where: str = "") -> Iterator[tuple[str, Any]]:
    """The filters of a query's arguments (the one at ``filter_key`` and each prefetch's) and its
    formula queries (whose conditions are filters too), as ``(where, value)`` for
    :meth:`QueryChecks.screen_filters`. Prefetches must be ``models.Prefetch`` already.

    Raises:
        UncheckedForm: (while iterated) a prefetch that is not a ``models.Prefetch``.
    """
    yield f"{where}{filter_key}", args.get(filter_key)
    if isinstance(args.get("query"), _KEYED_QUERIES):
        yield f"{where}query", args["query"]
    for path, p in iter_prefetch(args.get("prefetch"), f"{where}prefetch"):
        yield f"{path}.filter", p.filter
        if isinstance(p.query, _KEYED_QUERIES):
            yield f"{path}.query", p.query




class FieldNames:
    """Field names a call gives outside its filters (``names``: a key, a list of keys, an
    ``OrderBy`` or a ``with_payload`` selector), as a root for :meth:`QueryChecks.screen_filters`,
    which screens them as it screens a filter's keys. ``kind`` (the argument, ``order_by``) is
    logged as the key's ``condition``."""

    __slots__ = ("kind", "names")

    def __init__(self, kind: str, names: Any) -> None:
        self.kind, self.names = kind, names


# The arguments of each method that name payload fields outside a filter (facet's ``key`` is
# screened by ReadOps.budget_oracle, with_lookup's selector by field_name_roots).
_NAME_ARGS: dict[str, tuple[str, ...]] = {
    "scroll": ("order_by", "with_payload"), "retrieve": ("with_payload",), "query_points": ("with_payload",),
    "query_points_groups": ("group_by", "with_payload"), "set_payload": ("key",), "delete_payload": ("keys",),
    "create_payload_index": ("field_name",), "delete_payload_index": ("field_name",),
}


def field_name_roots(method: str, args: dict[str, Any], where: str = "") -> Iterator[tuple[str, Any]]:
    """The field names ``method``'s arguments give outside its filters (``scroll``'s ``order_by``,
    ``group_by``, ``with_payload`` and ``with_lookup``'s, ``set_payload``'s ``key``, ``delete_payload``'s
    ``keys``, a payload index's ``field_name``), as :class:`FieldNames` roots for
    :meth:`QueryChecks.screen_filters`: like a filter's keys, each is sent to the store (an index on,
    or an order by, a field named for a person asks about that person), and a refusal logs it.

    Raises:
        UncheckedForm: (while iterated) a gRPC ``OrderBy`` or payload selector that does not convert.
    """
    for arg in _NAME_ARGS.get(method, ()):
        value = args.get(arg)
        # None and a bool (with_payload=True, the common read) name no field: not walked (~4 us a read).
        if value is not None and not isinstance(value, bool):
            yield f"{where}{arg}", FieldNames(arg, _rest_names(value, f"{where}{arg}"))
    lookup = args.get("with_lookup") if method == "query_points_groups" else None
    if isinstance(lookup, models.WithLookup) and lookup.with_payload is not None:
        at = f"{where}with_lookup.with_payload"
        yield at, FieldNames("with_lookup", _rest_names(lookup.with_payload, at))


def _rest_names(value: Any, where: str) -> Any:
    """A gRPC ``OrderBy`` or payload selector as its REST model (what qdrant-client sends); anything else as it is."""
    try:
        if isinstance(value, grpc.OrderBy):
            return GrpcToRest.convert_order_by(value)
        if isinstance(value, grpc.WithPayloadSelector):
            return GrpcToRest.convert_with_payload_selector(value)
    except ValueError:  # no field set: qdrant-client cannot send it either
        raise UncheckedForm(where, value) from None
    return value


def _iter_names(node: Any, names: Any, where: str) -> Iterator[tuple[str, str, Any]]:
    """The keys of ``names`` (a key, a list of keys, a model, or a dict a client would validate into
    one: every string it holds) as :func:`_iter_keys` yields them, each with ``node``."""
    if isinstance(names, str):
        yield where, names, node
    elif isinstance(names, (list, tuple)):
        for i, item in enumerate(names):
            yield from _iter_names(node, item, f"{where}[{i}]")
    elif isinstance(names, dict):
        for k, item in names.items():
            # The key is the caller's string too: screened as a name, and only redacted in the path
            # (the path is logged; a secret as a dict key was logged as it was).
            at = f"{where}.{_detect.redact(k) if isinstance(k, str) else k}"
            if isinstance(k, str):
                yield at, k, node
            yield from _iter_names(node, item, at)
    elif isinstance(names, BaseModel):
        yield from _iter_keys(names, where)


# What names a key without reading its value back: presence tests, a nested condition's path
# (its own conditions are screened by their keys), payload selectors (the payload is redacted).
_NAMES_ONLY = (models.IsEmptyCondition, models.IsNullCondition, models.NestedCondition, models.HasVectorCondition,
               models.PayloadSelectorInclude, models.PayloadSelectorExclude)


def _reads_value(node: Any) -> bool:
    """Whether what named a key reads back its value some other way than a match (which
    :meth:`QueryChecks.screen_filters` refuses on its own): a range condition (a binary search), an
    order (each point's ``order_value``), a formula (its score). Matches, payload selectors,
    ``group_by`` and presence tests are not."""
    if isinstance(node, models.FieldCondition):
        return node.range is not None
    if isinstance(node, FieldNames):
        return node.kind == "order_by"
    return isinstance(node, BaseModel) and not isinstance(node, _NAMES_ONLY)


def _kind(node: Any) -> str:
    """What named a key, as its audit entry's ``condition``: the argument for :class:`FieldNames`,
    else the model's type (``FieldCondition``, ``OrderBy``)."""
    return node.kind if isinstance(node, FieldNames) else type(node).__name__


def write_filter_roots(method: str, args: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The filters of a write call (its points selector when that is a filter, and its
    ``update_filter``), as ``(where, filter)`` for :meth:`QueryChecks.screen_filters`; for
    ``batch_update_points`` those of every operation (``update_operations[i]...``).

    Raises:
        UncheckedForm: (while iterated) a gRPC points selector that does not convert.
    """
    if method == "batch_update_points":
        for i, operation in enumerate(args.get("update_operations") or ()):
            yield from operation_filter_roots(operation, f"update_operations[{i}]")
        return
    if method in _WRITE_SELECTORS:
        yield from _selector_filter_roots(args.get(_WRITE_SELECTORS[method]), _WRITE_SELECTORS[method])
    if args.get("update_filter") is not None:
        yield "update_filter", args["update_filter"]
    yield from field_name_roots(method, args)


def operation_filter_roots(operation: Any, where: str) -> Iterator[tuple[str, Any]]:
    """The filters of one ``batch_update_points`` operation (a ``models.*Operation``): its
    ``FilterSelector``, ``filter`` or ``update_filter``; and the field names of a ``SetPayload``'s
    ``key`` and a ``DeletePayload``'s ``keys`` (:func:`field_name_roots`)."""
    if not isinstance(operation, BaseModel):
        return
    if isinstance(operation, models.SetPayloadOperation) and operation.set_payload.key is not None:
        yield f"{where}.set_payload.key", FieldNames("key", operation.set_payload.key)
    if isinstance(operation, models.DeletePayloadOperation):
        yield f"{where}.delete_payload.keys", FieldNames("keys", operation.delete_payload.keys)
    for field_name in type(operation).model_fields:
        inner, path = getattr(operation, field_name), f"{where}.{field_name}"
        yield from _selector_filter_roots(inner, path)
        for attr in ("filter", "update_filter"):
            if not isinstance(inner, models.FilterSelector) and getattr(inner, attr, None) is not None:
                yield f"{path}.{attr}", getattr(inner, attr)


def _selector_filter_roots(selector: Any, where: str) -> Iterator[tuple[str, Any]]:
    """The filter of a points selector (``models.Filter``/``FilterSelector``, their gRPC forms), if any."""
    if isinstance(selector, grpc.PointsSelector):
        try:
            selector = GrpcToRest.convert_points_selector(selector)
        except ValueError:  # neither ids nor a filter set: qdrant-client cannot send it either
            raise UncheckedForm(where, selector) from None
    if isinstance(selector, models.FilterSelector):
        yield f"{where}.filter", selector.filter
    elif isinstance(selector, (models.Filter, grpc.Filter)):
        yield where, selector
