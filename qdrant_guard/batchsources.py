"""Which points a ``batch_update_points`` leaves without a source, judged by the state the whole
batch leaves: a source taken away by one operation and set again by a later one for the same
points does not warn; taken away and never set again, it does.

Only what the batch proves counts as setting a source again: a later operation of the same
shard key that writes a source (an unconditional Upsert of the point with one, a SetPayload or
OverwritePayload naming one) or deletes the points, selecting them by id, by a filter of
``has_id`` conditions only, or by an empty filter (every point). A later operation by any other
filter is not read as reaching the same points (the points a filter matches can change within
the batch), so the removal still warns.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qdrant_client.http import models

from .payloadops import _rest_selector
from .policy import CollectionPolicy
from .receipts import normalize_point_id
from .sources import (_as_sent, payload_sources, source_delete_removal, source_overwrite_removal,
                      source_removed_warning, source_set_removal, source_set_tags, untagged_count_warning)

@dataclass
class _Left:
    """Points an operation of the batch leaves without a source, until a later one tags them."""

    place: str  # ``update_operations[2], a SetPayload``; "" for an Upsert's points
    does: str  # what the operation does to the source field (sources.py); "" for an Upsert's points
    ids: set[str] | None  # normalised ids still without a source; None: a filter's points, not known
    by_filter: bool
    shard_key: Any


def _key(pid: Any) -> Any:
    """One key per point: an int id as itself (most ids, and the quickest), any other as
    :func:`normalize_point_id`'s ``"uuid:..."`` text."""
    return pid if type(pid) is int else normalize_point_id(pid)


def _names_source(payload: Any, path: str) -> bool:
    """Whether ``payload``, as sent, names a source at ``path``."""
    node = payload.get(path) if type(payload) is dict and "." not in path else None
    if type(node) is str:  # the common case, without the JSON round trip
        return node != ""
    return bool(payload_sources(_as_sent(payload), path))


def _filter_ids(flt: models.Filter) -> set[str] | bool:
    """The normalised ids ``flt`` can match: a set when it is ``has_id`` conditions only, True
    when it has no condition (every point), False when it is any other filter."""
    must = flt.must if isinstance(flt.must, list) or flt.must is None else [flt.must]
    if flt.should is not None or flt.min_should is not None or flt.must_not:
        return False
    if not must:
        return True
    if not all(isinstance(c, models.HasIdCondition) for c in must):
        return False
    sets = [{_key(p) for p in c.has_id} for c in must]  # type: ignore[union-attr]
    return set.intersection(*sets)


def _selection(selector: Any, shard_key: Any = None) -> tuple[set[str] | bool, bool, Any]:
    """``(ids, by_filter, shard_key)`` of an operation's selector: ``ids`` as :func:`_filter_ids`
    reads a filter (a list of ids: their set)."""
    sel = _rest_selector(selector)
    if isinstance(sel, models.FilterSelector):
        return _filter_ids(sel.filter), True, sel.shard_key if shard_key is None else shard_key
    if isinstance(sel, models.Filter):
        return _filter_ids(sel), True, shard_key
    if isinstance(sel, models.PointIdsList):
        return {_key(p) for p in sel.points}, False, sel.shard_key if shard_key is None else shard_key
    return {_key(p) for p in sel or ()}, False, shard_key


class SourceLedger:
    """The points a batch's operations, taken in order, leave without a source (see the module)."""

    def __init__(self, source_field: str) -> None:
        self.source_field = source_field
        self.left: list[_Left] = []
        self.written = 0  # points the batch's Upserts write

    def _tagged(self, ids: set[str] | bool, shard_key: Any) -> None:
        """The points ``ids`` selects (True: every point) carry a source now, or no longer exist."""
        if ids is False:
            return
        for left in self.left:
            if left.shard_key != shard_key:
                continue
            if ids is True:
                left.ids = set()
            elif left.ids is not None:
                left.ids -= ids

    def upsert(self, points: list[Any], shard_key: Any, conditional: bool) -> None:
        """An Upsert's ``points`` (as sent), ``conditional`` when Qdrant may not apply it
        (``update_filter``, ``update_mode``): then its sources prove nothing."""
        self.written += len(points)
        tagged = {_key(p.id) for p in points if payload_sources(p.payload, self.source_field)}
        untagged = {_key(p.id) for p in points} - tagged
        if not conditional:
            # A point upserted replaces its payload whole: what earlier operations did to it is gone.
            self._tagged(tagged | untagged, shard_key)
        if untagged:
            self.left.append(_Left("", "", untagged, False, shard_key))

    def operation(self, j: int, op: Any) -> None:
        """A payload or delete operation, ``update_operations[j]``."""
        field = self.source_field
        if isinstance(op, models.DeleteOperation):
            ids, _, shard_key = _selection(op.delete)
            self._tagged(ids, shard_key)
            return
        does: str | None
        sp: Any
        if isinstance(op, models.SetPayloadOperation):
            sp = op.set_payload
            if source_set_tags(field, sp.payload, sp.key):
                self._tagged(*self._of(sp))
                return
            does = source_set_removal(field, sp.payload, sp.key)
        elif isinstance(op, models.OverwritePayloadOperation):
            sp = op.overwrite_payload
            if _names_source(sp.payload, field):
                self._tagged(*self._of(sp))
                return
            does = source_overwrite_removal(field, sp.payload)
        elif isinstance(op, models.DeletePayloadOperation):
            sp = op.delete_payload
            does = source_delete_removal(field, sp.keys)
        elif isinstance(op, models.ClearPayloadOperation):
            sp = None
            does = source_overwrite_removal(field, {})
        else:
            return
        if does is None:
            return
        ids, by_filter, shard_key = (_selection(op.clear_payload) if sp is None else
                                     _selection(sp.points if sp.points is not None else sp.filter, sp.shard_key))
        place = f"update_operations[{j}], a {type(op).__name__.removesuffix('Operation')}"
        self.left.append(_Left(place, does, ids if isinstance(ids, set) else None, by_filter, shard_key))

    @staticmethod
    def _of(sp: Any) -> tuple[set[str] | bool, Any]:
        ids, _, shard_key = _selection(sp.points if sp.points is not None else sp.filter, sp.shard_key)
        return ids, shard_key

    def message(self, name: str, pol: CollectionPolicy, section: str) -> str | None:
        """The warning for what the batch leaves: its Upserts' points without a source first, else
        the first operation whose points it leaves without one; None when it leaves none."""
        upserted = [left.ids for left in self.left if not left.does and left.ids]
        if upserted:
            return untagged_count_warning(name, pol, section, len(set().union(*upserted)), self.written)
        for left in self.left:
            if left.does and (left.ids is None or left.ids):
                shown = None if left.by_filter else len(left.ids)  # type: ignore[arg-type]
                return source_removed_warning(name, pol, section, f"batch_update_points ({left.place})", left.does,
                                              shown)
        return None
