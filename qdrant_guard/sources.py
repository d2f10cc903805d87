"""Which sources a point names, read the way Qdrant's filters read its payload, and which of them a
writer may not claim."""
from __future__ import annotations

import json
import math
import re
from typing import Any, Sequence

from pydantic_core import to_jsonable_python

from .policy import CollectionPolicy

_KEY_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")


def field_value(payload: Any, field_name: str) -> Any:
    """The payload value at ``field_name``, read like Qdrant reads a filter key (dotted paths reach
    nested payload, e.g. langchain's ``metadata.source``); None when absent."""
    if type(payload) is dict and "." not in field_name:  # one key of a plain dict: read it directly
        return payload.get(field_name)
    node: Any = payload or {}
    for part in field_name.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def path_head(key: Any) -> str | None:
    """The top-level payload key a Qdrant key path (``facet`` key, ``group_by``) starts at: ``text``
    for ``text``, ``"text"`` (quoted) or ``text[0].x``; None when ``key`` is not such a path."""
    if not isinstance(key, str):
        return None
    if key.startswith('"'):
        end = key.find('"', 1)
        return key[1:end] if end > 0 else None
    n = 0
    while n < len(key) and (key[n].isalnum() or key[n] in "_-"):
        n += 1
    return key[:n] or None


def payload_sources(payload: Any, field_name: str) -> tuple[str, ...]:
    """Every source a payload names, as a filter on the source field sees them: a list value names
    several (Qdrant matches ``MatchValue("memo")`` against ``["memo", "q3"]``, and counts the point
    in memo's size)."""
    node = field_value(payload, field_name)
    if type(node) is str:  # one plain string, what a source field holds most of the time
        return (node,) if node else ()
    values = node if isinstance(node, list) else [node]
    # An empty string names no source (a budget key needs a name): it counts as missing.
    return tuple(dict.fromkeys(str(v) for v in values
                               if v is not None and v != "" and not isinstance(v, (dict, list))))


def point_sources(p: Any, field_name: str) -> tuple[str, ...]:
    """:func:`payload_sources` of a point (anything with a ``payload`` attribute)."""
    payload = getattr(p, "payload", None)
    if type(payload) is dict and "." not in field_name:
        # One plain string under a top-level key, as payload_sources reads it: a read asks this of
        # every point Qdrant returns, and the two calls below it cost more than the lookup.
        node = payload.get(field_name)
        if type(node) is str:
            return (node,) if node else ()
    return payload_sources(payload, field_name)


def _as_sent(payload: Any) -> Any:
    # The client sends the payload as JSON (as qdrant_client's local mode stores it): a tuple or set
    # becomes a list and a str enum or str subclass its characters, whatever str() says of them.
    return json.loads(json.dumps(payload, allow_nan=True, default=to_jsonable_python))


def restricts_sources(pol: CollectionPolicy) -> bool:
    """Whether :func:`reserved_claims` can name anything on collection ``pol`` (for any writer)."""
    div = pol.diversity
    return div.max_source_coverage is not None and bool(div.restricted_sources)


def reserved_claims(pol: CollectionPolicy, boundary: str | None, payload: Any, key: str | None = None) -> list[str]:
    """The restricted sources that writing ``payload`` (below ``key``, as ``set_payload`` places it)
    would tag a point with, when ``boundary`` may not: on a collection with an extraction budget and
    ``restricted_sources``, only the owner boundary writes those. Otherwise a writer that also reads
    could add points to a restricted source and so raise its own cap, a share of the source's size.
    """
    div = pol.diversity
    if not restricts_sources(pol) or boundary == pol.owner:
        return []
    payload = _as_sent(payload)
    if key is not None:
        parts = key.split(".")
        if not all(_KEY_SEGMENT.fullmatch(part) for part in parts):
            # A path Qdrant may read differently (quotes, [] indexing): refuse it if it could reach
            # the source field.
            return list(div.restricted_sources) if pol.source_field.split(".")[0] in key else []
        for part in reversed(parts):
            payload = {part: payload}
    return [s for s in payload_sources(payload, pol.source_field) if s in div.restricted_sources]


def _cap_shown(pol: CollectionPolicy) -> int | None:
    """How many points without a source a top-10 query of ``pol``'s collection returns at most,
    None when the source cap does not apply (diversity off or monitored, or a fraction of 1)."""
    div = pol.diversity
    top10 = max(1, math.floor(10 * div.max_source_fraction))
    if not div.enabled or div.mode != "enforce" or top10 >= 10:
        return None
    return top10


def warns_untagged(pol: CollectionPolicy) -> bool:
    """Whether points left without a source on ``pol``'s collection are warned of (the source cap
    applies to them)."""
    return _cap_shown(pol) is not None


def _what_to_do(pol: CollectionPolicy, section: str, top10: int) -> str:
    return (f"points without one all count as one source, so a top-10 query returns at most {top10} of them "
            f"(diversity.max_source_fraction = {pol.diversity.max_source_fraction}: fewer results than limit, "
            f"with no error). Tag each point with the document it comes from (payload[{pol.source_field!r}]), "
            f"name the field your points use in source_field, or set max_source_fraction in {section} "
            "(docs/diversity-budget.md). Said once per collection and client")


def untagged_points_warning(name: str, pol: CollectionPolicy, section: str, points: Sequence[Any]) -> str | None:
    """The warning for a write to ``name`` whose points carry no source (None when every point
    does, or the source cap does not apply): such points all count as one source, so a query
    returns at most ``max(1, floor(k * max_source_fraction))`` of them, and no read says why.
    ``section`` is the policy's ``[collections.NAME.diversity]`` (or ``[default.diversity]``)."""
    if _cap_shown(pol) is None:
        return None
    untagged = sum(1 for p in points if not payload_sources(getattr(p, "payload", None), pol.source_field))
    return untagged_count_warning(name, pol, section, untagged, len(points))


def untagged_count_warning(name: str, pol: CollectionPolicy, section: str, untagged: int, written: int) -> str | None:
    """:func:`untagged_points_warning` of a write of ``written`` points, ``untagged`` of which
    carry no source."""
    top10 = _cap_shown(pol)
    if top10 is None or not untagged:
        return None
    return (f"qdrant_guard: {untagged} of the {written} point(s) written to collection {name!r} carry no "
            f"{pol.source_field!r} payload field (its source_field); " + _what_to_do(pol, section, top10))


_BRACKETS = re.compile(r"(?:\[[0-9]*\])*")


def _path_items(path: str) -> list[tuple[str, str]] | None:
    """A Qdrant payload key path as its keys, each with the ``[]``/``[N]`` indexing written after
    it (``""`` for none): ``metadata.source[0]`` is ``[("metadata", ""), ("source", "[0]")]``,
    quoted keys (``"metadata".source``) included; None for a path Qdrant does not parse."""
    out: list[tuple[str, str]] = []
    rest = path
    while True:
        if rest.startswith('"'):
            end = rest.find('"', 1)
            if end < 0:
                return None
            key, rest = rest[1:end], rest[end + 1:]
        else:
            m = _KEY_SEGMENT.match(rest)
            if m is None:
                return None
            key, rest = m.group(), rest[m.end():]
        brackets = _BRACKETS.match(rest)
        indexing = brackets.group() if brackets else ""
        out.append((key, indexing))
        rest = rest[len(indexing):]
        if not rest:
            return out
        if not rest.startswith(".") or len(rest) == 1:
            return None
        rest = rest[1:]


def _segments(path: str) -> list[str] | None:
    """The keys of a Qdrant payload path made of plain or quoted keys (``metadata.source``,
    ``"metadata".source``); None for any other path (``[]`` indexing, a stray quote)."""
    items = _path_items(path)
    if items is None or any(brackets for _, brackets in items):
        return None
    return [key for key, _ in items]


# What every removal's description ends with (a [] path that may leave a list source some of its
# items says "may").
_GONE = ": they now carry no source"


def _named(value: Any) -> str:
    if value is None:
        return "null"
    if value == "":
        return '""'
    if isinstance(value, list):
        return "[]" if not value else "a list naming no source"
    if isinstance(value, dict):
        return "{}" if not value else "an object"
    return "a value naming no source"


def source_set_removal(source_field: str, payload: dict[str, Any], key: str | None) -> str | None:
    """What a ``set_payload`` of ``payload`` (below ``key``) does to the source field of the points
    it changes, when it leaves them with no source (``sets the 'source' payload field (its
    source_field) of <who> to null: they now carry no source``, ``<who>`` standing for the points);
    None when it writes a source or leaves the field alone.

    A ``key`` with ``[]``/``[N]`` indexing is read as Qdrant applies it (qdrant-client's local mode,
    tests/test_source_warning_gaps.py): indexing a value that is not a list replaces it with
    ``[]``, and indexing a list rewrites the items it names as objects. So indexing the source
    field, or a key above it on its path, can take the source away; a path that leaves the source
    field's path before its first indexing cannot touch it."""
    field = source_field.split(".")
    if key is None:
        under: list[str] = []
    else:
        items = _path_items(key)
        if items is None:
            return None  # Qdrant refuses a path it cannot parse
        under = [k for k, _ in items]
        first = next((i for i, (_, brackets) in enumerate(items) if brackets), None)
        if first is not None and first < len(field):
            if under[:first + 1] != field[:first + 1]:
                return None  # the path leaves the source field's before its first indexing
            if first == len(field) - 1:
                return (f"sets {key!r} of <who>: Qdrant replaces their {source_field!r} payload field (its "
                        "source_field) with [] where it is not a list, and rewrites the items the key indexes as "
                        "objects where it is: they may now carry no source")
            top = ".".join(field[:first + 1])
            return (f"sets {key!r} of <who>: Qdrant replaces {top!r}, which holds the {source_field!r} payload "
                    f"field (its source_field), with []{_GONE}")
        # Indexing only below the source field: a key there has already made the field an object.
    if under[:len(field)] == field:
        # The key is the source field or below it: the field becomes an object.
        return f"sets the {source_field!r} payload field (its source_field) of <who> to an object{_GONE}"
    if field[:len(under)] != under:
        return None  # the key is beside the source field
    below = ".".join(field[len(under):])
    if field[len(under)] not in payload or payload_sources(payload, below):
        return None
    if "." in below and not _holds(payload, below):
        top = ".".join(field[:len(under) + 1])
        return (f"replaces {top!r} of <who> with a value without the {source_field!r} payload field "
                f"(its source_field){_GONE}")
    return (f"sets the {source_field!r} payload field (its source_field) of <who> to "
            f"{_named(field_value(payload, below))}{_GONE}")


def source_set_tags(source_field: str, payload: dict[str, Any], key: str | None) -> bool:
    """Whether a ``set_payload`` of ``payload`` (below ``key``) leaves every point it changes with
    a source: it writes one at the source field (never through ``[]`` indexing, which writes
    objects)."""
    if key is None and "." not in source_field and type(payload) is dict:
        node = payload.get(source_field)
        if node is None or type(node) is str:  # the common cases, without the JSON round trip
            return bool(node)
    field = source_field.split(".")
    under = [] if key is None else _segments(key)
    if under is None or len(under) >= len(field) or field[:len(under)] != under:
        return False
    return bool(payload_sources(_as_sent(payload), ".".join(field[len(under):])))


def _holds(payload: Any, path: str) -> bool:
    """Whether ``payload`` has a value (null included) at dotted ``path``."""
    *parents, last = path.split(".")
    node = field_value(payload, ".".join(parents)) if parents else payload
    return isinstance(node, dict) and last in node


def source_overwrite_removal(source_field: str, payload: dict[str, Any]) -> str | None:
    """What an ``overwrite_payload`` with ``payload`` (``{}``: a clear) does to the source field,
    when the points are left without a source; None when ``payload`` names one."""
    if not payload:
        return f"clears the payload of <who>, its {source_field!r} field (the source_field) with it{_GONE}"
    if payload_sources(payload, source_field):
        return None
    return f"overwrites the payload of <who> with one without a {source_field!r} field (its source_field){_GONE}"


def source_delete_removal(source_field: str, keys: Sequence[str]) -> str | None:
    """What a ``delete_payload`` of ``keys`` does to the source field: deleted when a key is the
    field or holds it, emptied when a key is the field with ``[]`` (Qdrant empties a list there);
    None otherwise (a key below it deletes nothing from a string; Qdrant deletes nothing for a key
    ending in ``[N]``, and a key indexing a key above the field reaches no source)."""
    field = source_field.split(".")
    for k in keys:
        items = _path_items(k)
        if items is None:
            continue
        parts = [key for key, _ in items]
        brackets = [b for _, b in items]
        if not any(brackets) and field[:len(parts)] == parts:
            if len(parts) == len(field):
                return f"deletes the {source_field!r} payload field (its source_field) of <who>{_GONE}"
            return (f"deletes {k!r} of <who>, which holds the {source_field!r} payload field (its "
                    f"source_field){_GONE}")
        if parts == field and brackets[-1] == "[]" and not any(brackets[:-1]):
            return (f"deletes {k!r} of <who>, which empties their {source_field!r} payload field (its source_field) "
                    "where it is a list: such points now carry no source")
    return None


def source_removed_warning(name: str, pol: CollectionPolicy, section: str, call: str, does: str,
                           ids: int | None) -> str | None:
    """The warning for a payload change ``call`` (``set_payload``, or a batch's operation named by
    its place) on collection ``name`` that ``does`` (its ``<who>``: the points) what leaves points
    with no source (a ``source_*_removal`` description, which says so): they join the
    points without one, which all count as one source (:func:`untagged_points_warning`). ``ids``:
    how many points it names by id, None when it selects them by a filter (they are not read back
    to be counted). None when the source cap does not apply."""
    top10 = _cap_shown(pol)
    if top10 is None:
        return None
    who = "the points the filter selects" if ids is None else f"the {ids} point(s) named by id"
    return f"qdrant_guard: {call} on collection {name!r} {does.replace('<who>', who)}; " + _what_to_do(pol, section, top10)
