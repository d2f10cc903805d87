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


def untagged_points_warning(name: str, pol: CollectionPolicy, section: str, points: Sequence[Any]) -> str | None:
    """The warning for a write to ``name`` whose points carry no source (None when every point
    does, or the source cap does not apply): such points all count as one source, so a query
    returns at most ``max(1, floor(k * max_source_fraction))`` of them, and no read says why.
    ``section`` is the policy's ``[collections.NAME.diversity]`` (or ``[default.diversity]``)."""
    div = pol.diversity
    top10 = max(1, math.floor(10 * div.max_source_fraction))
    if not div.enabled or div.mode != "enforce" or top10 >= 10:
        return None
    untagged = sum(1 for p in points if not payload_sources(getattr(p, "payload", None), pol.source_field))
    if not untagged:
        return None
    return (f"qdrant_guard: {untagged} of the {len(points)} point(s) written to collection {name!r} carry no "
            f"{pol.source_field!r} payload field (its source_field); points without one all count as one source, "
            f"so a top-10 query returns at most {top10} of them (diversity.max_source_fraction = "
            f"{div.max_source_fraction}: fewer results than limit, with no error). Tag each point with the "
            f"document it comes from (payload[{pol.source_field!r}]), name the field your points use in "
            f"source_field, or set max_source_fraction in {section} (docs/diversity-budget.md). Said once per "
            "collection and client")
