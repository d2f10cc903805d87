"""Filters of a batch operation that qdrant-client's local mode cannot evaluate, found before the
batch is sent.

Local mode checks a batch operation's filter only when it applies that operation, point by point
(``qdrant_client.local.payload_filters``): a key that is no JSON path raises there, after the
operations before it were applied. The check below is local mode's own rule (its
``parse_json_path`` on each key it reads, and its ``validate_filter``), walked the way local mode
walks a filter, so it refuses exactly the filters local mode would fail on once it reached a point.
A server parses every key of a request before applying any of it, by a grammar of its own
(:mod:`.serverpath`); over gRPC it converts each operation's filter only when it reaches it, so a
key it refuses fails there half applied too. Against a server the check is the server's grammar
(docs/atomicity.md).
"""
from __future__ import annotations

from typing import Any, Iterator

from qdrant_client.http import models
from qdrant_client.local.json_path_parser import parse_json_path
from qdrant_client.local.payload_filters import validate_filter

from . import detect as _detect
from .payloadops import _quotable, _quote
from .filterroots import as_filter
from .serverpath import server_reads


def unevaluable_reason(roots: list[tuple[str, Any]], *, remote: bool = False,
                       fails: str = "when it reaches the operation, after applying the ones before it",
                       server_fails: str = " (over gRPC when it reaches the operation, after applying the ones "
                                           "before it)") -> str | None:
    """Why the backend cannot evaluate one of a batch operation's filters (``roots``, as
    :func:`~.filterroots.operation_filter_roots` gives them, already screened), with the fix; or
    None. ``remote``: the backend is a server (its JSON path grammar), else local mode. ``fails``,
    ``server_fails``: when local mode, a server fails on it (the message's words). The key is named
    redacted (the message is audited)."""
    for where, root in roots:
        flt = as_filter(root, where)
        fault = unevaluable(flt, where, remote=remote) if isinstance(flt, models.Filter) else None
        if fault is None:
            continue
        at, reason, key = fault
        if key is None:
            what, fix = f"the filter at {at} is refused by Qdrant ({reason})", "Correct the filter"
        else:
            shown = _detect.redact(key)
            what = f"the filter key {shown!r} at {at} {reason}"
            fix = ("Write the key quoted, as a JSON path names a key holding other characters "
                   f"({_quote(shown)!r} for the whole key), or correct it" if _quotable(key) else
                   "Name another field (a key holding '\"' or '\\' cannot be named in a filter: "
                   "a Qdrant server reads no escapes in a quoted key)")
        if remote:
            return f"{what}; a Qdrant server refuses it{server_fails}. {fix}"
        return f"{what}; Qdrant's local mode fails on it {fails}. {fix}"
    return None


def unevaluable(flt: models.Filter, where: str, *, remote: bool = False) -> tuple[str, str, str | None] | None:
    """The first part of ``flt`` the backend fails on (a server's grammar when ``remote``, else
    local mode's), as ``(where, reason, key)`` (``key``: the key that is no JSON path, None for
    another fault), or None."""
    try:
        validate_filter(flt)
    except ValueError as exc:
        return where, str(exc), None
    for at, key in _keys(flt, where):
        if remote:
            if not server_reads(key):
                return at, "is no JSON path a Qdrant server reads", key
            continue
        try:
            parse_json_path(key)
        except ValueError:
            return at, "is no JSON path", key
    return None


def _keys(node: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every payload key local mode parses when it evaluates ``node``, as ``(where, key)``; a nested
    filter's keys relative to its array, as local mode reads them."""
    if isinstance(node, models.Filter):
        for clause in ("must", "should", "must_not"):
            conditions = getattr(node, clause)
            if conditions is not None:
                for i, c in enumerate(conditions if isinstance(conditions, list) else [conditions]):
                    yield from _keys(c, f"{where}.{clause}[{i}]")
        if node.min_should is not None:
            for i, c in enumerate(node.min_should.conditions):
                yield from _keys(c, f"{where}.min_should.conditions[{i}]")
    elif isinstance(node, models.FieldCondition):
        yield f"{where}.key", node.key
    elif isinstance(node, models.IsEmptyCondition):
        yield f"{where}.is_empty.key", node.is_empty.key
    elif isinstance(node, models.IsNullCondition):
        yield f"{where}.is_null.key", node.is_null.key
    elif isinstance(node, models.NestedCondition):
        key = node.nested.key
        # Local mode reads "people[]" as "people" (payload_filters.nested_filter_values).
        yield f"{where}.nested.key", key[:-2] if len(key) > 2 and key.endswith("[]") else key
        yield from _keys(node.nested.filter, f"{where}.nested.filter")
