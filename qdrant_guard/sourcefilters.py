"""The budget's sources in Qdrant filters: each point's sources, the stored forms a source name
stands for, the conditions that match a source's points (the missing source's too), the
:class:`Exclusion` a budgeted read wraps around its filter to keep withheld points out of Qdrant's
page, and whether a filter names nothing but sources.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from qdrant_client import grpc
from qdrant_client.conversions.conversion import GrpcToRest
from qdrant_client.http import models

from .budget import denormalize_point_id
from .sentmodels import UncheckedForm
from .sentnames import sent_name
from .sources import point_sources as _sources


@dataclass
class Exclusion:
    """Points a budgeted read keeps out of Qdrant's page and ranking, in Qdrant's own filter.

    A point the budget withholds would otherwise still take its place: a filter that also matches
    a released point ranked after it returns that point only when no withheld point matches, which
    reads withheld payload values one filter at a time.
    """

    source_field: str
    sources: dict[str, frozenset[str]] = field(default_factory=dict)
    """Exhausted source -> the normalised ids still admitted under it (with a store that cannot
    list them, only those this read admitted)."""
    ids: set[str] = field(default_factory=set)
    """Normalised ids withheld by an earlier run of this read."""
    admitted_here: dict[str, set[str]] = field(default_factory=dict)
    """Source -> normalised ids admitted by the earlier runs of this read."""

    def __bool__(self) -> bool:
        return bool(self.sources or self.ids)

    def conditions(self) -> list[Any]:
        """The ``must_not`` conditions: a point of an exhausted source that it did not admit, and
        every id withheld earlier. A point of several sources matches if any of them excludes it,
        as the budget withholds it if any of them withholds it.

        Written as the same test regrouped by the ids admitted (``U``, the union of the exhausted
        sources' admitted ids): a point outside ``U`` is excluded iff it is of any exhausted
        source (one condition for all of them); a point inside ``U`` iff it is of an exhausted
        source among those that did not admit it, and the points of ``U`` admitted by the same
        sources share one such condition. Per source ``must [source] must_not [its ids]`` said
        the same, but qdrant-client's local mode tests each condition of a filter point by point
        in Python, so every point paid one source test per exhausted source (a top-10 read at
        1,000 points and ten spent sources took over 150 times the raw one); this form tests a
        point's source once, and once more for the few points of ``U``. Every id is sent at
        most three times (``U`` once, its chunk of groups once, its group once).
        """
        out: list[Any] = []
        if self.sources:
            every = _sources_condition(self.source_field, sorted(self.sources))
            admitted_by: dict[str, set[str]] = {}  # normalised id -> the exhausted sources that admitted it
            for source, admitted in self.sources.items():
                for nid in admitted:
                    admitted_by.setdefault(nid, set()).add(source)
            if not admitted_by:
                out.append(every)
            else:
                everywhere = models.HasIdCondition(has_id=_point_ids(admitted_by))
                out.append(models.Filter(must=[every], must_not=[everywhere]))
                groups: dict[frozenset[str], list[str]] = {}
                for nid, sources in admitted_by.items():
                    groups.setdefault(frozenset(sources), []).append(nid)
                inside: list[tuple[list[Any], models.Condition]] = []  # each group's ids and condition
                for by, nids in sorted(groups.items(), key=lambda g: sorted(g[0])):
                    others = sorted(set(self.sources) - by)
                    if others:
                        ids = _point_ids(nids)
                        inside.append((ids, models.Filter(must=[models.HasIdCondition(has_id=ids),
                                                                _sources_condition(self.source_field, others)])))
                # Local mode keeps the id sets of the last 32 id lists it tested: one list per group
                # and point would evict U's (rebuilt for every point at fifty sources), so a point
                # tests the lists of about sqrt(groups) chunks, then only its chunk's groups.
                size = max(8, math.isqrt(max(len(inside) - 1, 0)) + 1)
                chunks = [inside[k:k + size] for k in range(0, len(inside), size)]
                out.extend(models.Filter(must=[models.HasIdCondition(has_id=sorted(
                    {i for ids, _ in chunk for i in ids}, key=lambda i: (isinstance(i, str), i)))],
                    should=[group for _, group in chunk]) for chunk in chunks)
        if self.ids:
            out.append(models.HasIdCondition(has_id=_point_ids(self.ids)))
        return out

    def wrap(self, flt: Any, where: str) -> Any:
        """``flt`` with the exclusion added around it (``flt`` itself when there is nothing to exclude).

        Raises:
            UncheckedForm: ``flt`` is not a filter form the guard can combine.
        """
        if not self:
            return flt
        user = _rest_filter(flt, where)
        return models.Filter(must=None if user is None else [user], must_not=self.conditions())


def _sources_of_points(pts: Sequence[Any], field_name: str) -> list[tuple[str, ...]]:
    """``point_sources(p, field_name)`` of each point, in order."""
    if "." in field_name:
        return [_sources(p, field_name) for p in pts]
    # point_sources' own first case (a dict payload whose top-level value is a non-empty str)
    # without the call: a read asks this of every point Qdrant returns.
    return [(node,) if type(payload := getattr(p, "payload", None)) is dict
            and type(node := payload.get(field_name)) is str and node else _sources(p, field_name)
            for p in pts]


def _stored_forms(source: str) -> list[str | int | bool]:
    """The payload values :func:`_sources` names ``source`` that a ``MatchValue`` can match.

    ``_sources`` names a value by ``str(value)``, so integer 7 and string "7" are one source; a
    filter matches each type apart, and sizing by the string alone counted no integer source.
    (A float source cannot be matched exactly; it stays sized by the points returned.)
    """
    forms: list[str | int | bool] = [source]
    if source in ("True", "False"):
        forms.append(source == "True")
    else:
        try:
            number = int(source)
        except ValueError:
            return forms
        if str(number) == source and -2**63 <= number < 2**63:
            forms.append(number)
    return forms


def _source_condition(field_name: str, source: str) -> models.Filter:
    """A condition matching the points :func:`_sources` names ``source`` (the budget's key).

    The missing source ``"__unknown__"`` (see :meth:`ReadOps.apply_budget`) matches the points
    its size counts (:func:`_missing_source_count_filter`: an absent, null or empty field, ``""``,
    ``[null]``), and also a point tagged ``["", "memo"]``, which the budget counts under memo only:
    such a point is excluded with the missing source too (hidden from the reader, never released).
    A float source matches by a range, which an equal integer matches too (``7.0`` and ``7`` name
    two sources; the integer's points are excluded with it). Object values name no source but
    match no condition: a point withheld under them is excluded by its id instead
    (:meth:`ReadOps.widen_exclusion`).
    """
    if source == "__unknown__":
        return models.Filter(should=[_missing_source_count_filter(field_name),
                                     models.FieldCondition(key=field_name, match=models.MatchValue(value=""))])
    conds: list[models.Condition] = [models.FieldCondition(key=field_name, match=models.MatchValue(value=v))
                                     for v in _stored_forms(source)]
    number = _float_form(source)
    if number is not None:
        conds.append(models.FieldCondition(key=field_name, range=models.Range(gte=number, lte=number)))
    return models.Filter(should=conds)


def _sources_condition(field_name: str, sources: Sequence[str]) -> Any:
    """A condition matching the points of any of ``sources``: the ``should`` of their
    :func:`_source_condition` parts, the exact string and integer values each in one
    ``MatchAny`` (which matches a value equal to any of its list, as one ``MatchValue`` per
    value would; it takes no booleans, which keep theirs)."""
    strings: list[str] = []
    integers: list[int] = []
    rest: list[Any] = []
    for source in sources:
        if source == "__unknown__":
            rest.append(_source_condition(field_name, source))
            continue
        for form in _stored_forms(source):
            if type(form) is str:
                strings.append(form)
            elif type(form) is int:
                integers.append(form)
            else:
                rest.append(models.FieldCondition(key=field_name, match=models.MatchValue(value=form)))
        number = _float_form(source)
        if number is not None:
            rest.append(models.FieldCondition(key=field_name, range=models.Range(gte=number, lte=number)))
    conds = [models.FieldCondition(key=field_name, match=models.MatchAny(any=values))
             for values in (strings, integers) if values] + rest
    return conds[0] if len(conds) == 1 else models.Filter(should=conds)


def _missing_source_count_filter(field_name: str) -> models.Filter:
    """The points the budget counts under the missing source ``"__unknown__"`` (see
    :func:`~.sources.payload_sources`): those whose field holds no value other than null and ``""``
    (absent, null, ``""``, ``[]``, ``[null, ""]``), and those holding the literal name. Unlike
    :func:`_source_condition` it leaves out ``["", "memo"]``, which the budget counts under memo
    only. Object and nested-list values match no condition, so they are not counted (the
    source's size then only errs low, which lowers its cap)."""
    only_empty = models.Filter(must_not=[models.FieldCondition(
        key=field_name, match=models.MatchExcept(**{"except": ["", "__unknown__"]}))])
    return models.Filter(must=[models.Filter(should=[
        models.IsEmptyCondition(is_empty=models.PayloadField(key=field_name)),
        only_empty,
        models.FieldCondition(key=field_name, match=models.MatchValue(value="__unknown__")),
    ])])


def _float_form(source: str) -> float | None:
    """The float whose ``str`` is ``source`` (the source's name for a float payload value), if any."""
    try:
        number = float(source)
    except ValueError:
        return None
    return number if math.isfinite(number) and str(number) == source else None


def _point_ids(normalised: Any) -> list[Any]:
    """Qdrant point ids from normalised ones, in a stable order (integers, then UUIDs)."""
    ids = [denormalize_point_id(n) for n in normalised]
    return sorted(ids, key=lambda i: (isinstance(i, str), i))


def _rest_filter(flt: Any, where: str) -> models.Filter | None:
    """A user's filter as a ``models.Filter`` (None stays None), to wrap without editing it.

    Raises:
        UncheckedForm: not a ``models.Filter``, its dict form or a ``grpc.Filter``.
    """
    if flt is None or isinstance(flt, models.Filter):
        return flt
    if isinstance(flt, grpc.Filter):
        return GrpcToRest.convert_filter(flt)
    if isinstance(flt, dict):
        try:
            return models.Filter.model_validate(flt)
        except ValueError:  # pydantic's ValidationError
            pass
    raise UncheckedForm(where, flt)


def _only_names_sources(flt: Any, source_field: str) -> bool:
    """Whether every condition of filter ``flt`` (nested filters included) is a field condition on
    ``source_field``; anything else, or a form that is not a ``models.Filter``, is not."""
    if isinstance(flt, dict):
        try:
            flt = models.Filter.model_validate(flt)
        except ValueError:
            return False
    if not isinstance(flt, models.Filter):
        return False
    for part in (flt.must, flt.should, flt.must_not):
        for cond in ([] if part is None else part if isinstance(part, list) else [part]):
            if isinstance(cond, models.Filter):
                if not _only_names_sources(cond, source_field):
                    return False
            # The key as sent: a model_construct()ed condition can hold a str subclass (or any
            # object) whose __eq__ says it is the source field.
            elif not (isinstance(cond, models.FieldCondition) and isinstance(cond.key, str)
                      and sent_name(cond.key) == source_field):
                return False
    if flt.min_should is not None:
        return all(_only_names_sources(models.Filter(must=[c]), source_field) for c in flt.min_should.conditions)
    return True

