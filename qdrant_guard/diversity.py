"""Per-query result diversity: cap each source's share of a returned top-k.

A nearest-neighbour extraction attack sends many narrow queries, each aimed at one chunk of a
restricted document. Capping how many of a query's results may come from one source limits what
each query yields; :mod:`qdrant_guard.budget` limits what all of a principal's queries yield
together.

The cap is a hard guarantee. :func:`enforce_diversity` walks the candidates in rank order and
admits an item only while its source is under the cap. It never re-adds a withheld item to fill
the page, so when too few sources are available the result is *shorter* than ``k``
(:attr:`DiversityOutcome.short_by` says by how much). The caller should over-fetch
(:func:`overfetch_limit`) so that enough other sources are available.

Items without a source all count as one shared source, ``missing_source``. Counting each of them
as its own source would let anyone who can write points bypass the cap by leaving the source
field out. An item may name several sources (a payload list such as ``["memo", "q3"]``, which a
Qdrant filter on either value matches): it counts under each of them, and is admitted only while
every one of them is under the cap.

Pagination (``offset``):
    The cap applies to each page separately. The caller applies ``offset`` to Qdrant's ranking
    *before* the cap: it fetches ``offset + overfetch_limit(limit, ...)`` points, drops the first
    ``offset``, and calls :func:`enforce_diversity` on the rest with ``k=limit``. You can rely on:

    * every page obeys the cap on its own (at most ``source_cap(limit, fraction)`` items per source);
    * pages are deterministic for an unchanged collection and identical requests.

    You cannot rely on:

    * a cap across pages: a source may contribute up to the cap on *every* page, so paging is not
      a way to stay under a per-source limit in total (that is the job of the extraction budget);
    * pages being disjoint or complete: an item ranked inside page ``n``'s over-fetch window may be
      kept on page ``n`` and again on page ``n+1``, and an item withheld on page ``n`` whose raw
      rank is below the next offset is never shown on any page;
    * ``offset`` counting returned items: it counts positions in Qdrant's uncapped ranking.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Generic, Sequence, TypeVar, Union

from .errors import GuardArgumentTypeError, GuardArgumentValueError

__all__ = [
    "DiversityOutcome",
    "GroupCapsOutcome",
    "enforce_diversity",
    "enforce_group_caps",
    "floor_share",
    "overfetch_limit",
    "source_cap",
]

T = TypeVar("T")
#: What ``source_of`` may return: one source, several, or None (or an empty sequence) for none.
SourceNames = Union[str, Sequence[str], None]

_MISSING_DEFAULT = "__unknown__"


@dataclass(frozen=True)
class DiversityOutcome(Generic[T]):
    """The result of :func:`enforce_diversity`.

    Attributes:
        kept: the admitted items, in their original (score) order; at most ``k``.
        withheld: the items dropped by the cap (or by a diversity swap), in original order.
        short_by: ``k - len(kept)``; 0 when ``k`` items were returned.
        per_source: number of kept items per source (sources with no kept item are absent); an
            item with several sources counts under each.
        unique_sources: number of distinct sources among the kept items.
        min_unique_met: whether the kept items span the required number of sources. False when
            the candidates themselves span fewer sources (the pipeline logs it).
    """

    kept: list[T]
    withheld: list[T]
    short_by: int
    per_source: dict[str, int]
    unique_sources: int
    min_unique_met: bool


@dataclass(frozen=True)
class GroupCapsOutcome(Generic[T]):
    """The result of :func:`enforce_group_caps`.

    Attributes:
        groups: one :class:`DiversityOutcome` per input group, in input order.
        per_source: kept hits per source over the whole response.
        group_cap: the per-source cap inside each group.
        response_cap: the per-source cap over the whole response.
    """

    groups: list[DiversityOutcome[T]]
    per_source: dict[str, int]
    group_cap: int
    response_cap: int


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise GuardArgumentTypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise GuardArgumentValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_fraction(name: str, value: object, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GuardArgumentTypeError(f"{name} must be a float, not {type(value).__name__}")
    value = float(value)
    low_ok = value >= 0.0 if allow_zero else value > 0.0
    if not (math.isfinite(value) and low_ok and value <= 1.0):
        bound = "[0, 1]" if allow_zero else "(0, 1]"
        raise GuardArgumentValueError(f"{name} must be in {bound}, got {value!r}")
    return value


def floor_share(n: int, fraction: float) -> int:
    """Return ``floor(n * fraction)`` computed on the decimal value the caller wrote.

    Binary floats make ``100 * 0.57`` equal ``56.99999999999999``; flooring that would silently
    lower a cap by one. The fraction is therefore read as the shortest decimal that round-trips
    to the same float (``0.57`` is exactly 57/100), and the product is floored exactly.

    Args:
        n: a non-negative count.
        fraction: a share in ``[0, 1]``.

    Returns:
        The exact floor of ``n * fraction``.

    Raises:
        TypeError: ``n`` is not an int or ``fraction`` not a real number.
        ValueError: ``n`` is negative or ``fraction`` outside ``[0, 1]``.
    """
    _check_int("n", n, 0)
    fraction = _check_fraction("fraction", fraction, allow_zero=True)
    numerator, denominator = _decimal_ratio(fraction)
    return n * numerator // denominator


def source_cap(k: int, max_source_fraction: float) -> int:
    """Return how many of ``k`` results one source may contribute.

    The cap is ``max(1, floor(k * max_source_fraction))``: the share is rounded *down* so it is
    never exceeded, except that every source may always contribute one result (otherwise a
    small ``k`` would return nothing at all). For example ``k=10, fraction=0.4`` gives 4, and
    ``k=2, fraction=0.4`` gives 1.

    Args:
        k: the number of results requested (``limit``), at least 1.
        max_source_fraction: the largest share of ``k`` one source may hold, in ``(0, 1]``.

    Returns:
        The per-source cap, between 1 and ``k``.

    Raises:
        TypeError: ``k`` is not an int or the fraction not a real number.
        ValueError: ``k < 1`` or the fraction is outside ``(0, 1]``.
    """
    _check_int("k", k, 1)
    _check_fraction("max_source_fraction", max_source_fraction, allow_zero=False)
    return max(1, floor_share(k, max_source_fraction))


def overfetch_limit(limit: int, *, factor: float, max_limit: int = 1000) -> int:
    """Return how many candidates to ask Qdrant for so the cap can still fill ``limit``.

    The result is ``ceil(limit * factor)`` clamped to ``max_limit``, but never below ``limit``
    itself (a request larger than ``max_limit`` is passed through unchanged, not shrunk).

    Args:
        limit: the number of results the caller asked for, at least 1.
        factor: the over-fetch multiplier, a finite number ``>= 1``.
        max_limit: the largest over-fetch allowed, at least 1.

    Returns:
        The number of candidates to fetch.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``limit < 1``, ``max_limit < 1`` or ``factor`` is not a finite number ``>= 1``.
    """
    _check_int("limit", limit, 1)
    _check_int("max_limit", max_limit, 1)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise GuardArgumentTypeError(f"factor must be a float, not {type(factor).__name__}")
    if not (math.isfinite(factor) and factor >= 1.0):
        raise GuardArgumentValueError(f"factor must be a finite number >= 1, got {factor!r}")
    numerator, denominator = _decimal_ratio(float(factor))
    wanted = -(-limit * numerator // denominator)  # the exact ceiling
    return max(limit, min(max_limit, wanted))


@functools.lru_cache(maxsize=256)
def _decimal_ratio(value: float) -> tuple[int, int]:
    # The decimal the caller wrote (the shortest repr of the float), as an exact ratio: a Fraction
    # parsed on every read cost more than the cap it computes; policies hold few distinct values.
    return Fraction(repr(value)).as_integer_ratio()


def _source_names(
    items: Sequence[T], source_of: Callable[[T], SourceNames], missing_source: str
) -> list[tuple[str, ...]]:
    """Each item's sources: distinct, in the order given; ``(missing_source,)`` for none."""
    names: list[tuple[str, ...]] = []
    # map calls source_of item by item as the loop asks, so a check that raises still comes before
    # the next item's source_of; an item's index is the number of names listed before it.
    for value in map(source_of, items):
        if type(value) is tuple and len(value) == 1 and type(value[0]) is str:
            names.append(value)  # one source, as every check below would leave it
            continue
        index = len(names)
        several = value if isinstance(value, (list, tuple)) else () if value is None else (value,)
        for name in several:
            if not isinstance(name, str):
                raise GuardArgumentTypeError(
                    f"source_of(items[{index}]) must return str, a list or tuple of str, or None, "
                    f"not {type(value).__name__ if value is name else f'a sequence holding {type(name).__name__}'}; "
                    "convert the payload value to strings in source_of"
                )
        names.append(tuple(dict.fromkeys(several)) or (missing_source,))
    return names


def _select(
    sources: list[tuple[str, ...]],
    *,
    k: int,
    cap: int,
    min_unique: int,
    totals: dict[str, int],
    total_cap: int,
) -> tuple[list[int], bool]:
    """Pick at most ``k`` indices; each source stays <= ``cap`` here and <= ``total_cap`` in ``totals``.

    ``totals`` is updated in place so several calls can share a response-wide cap.
    """
    counts: dict[str, int] = {}
    kept: list[int] = []
    for index, names in enumerate(sources):
        if len(kept) >= k:
            break  # kept only grows: no later item is taken
        if len(names) == 1:  # one source, the loop below without its generator
            n = names[0]
            if counts.get(n, 0) < cap and totals.get(n, 0) < total_cap:
                kept.append(index)
                counts[n] = counts.get(n, 0) + 1
                totals[n] = totals.get(n, 0) + 1
        elif all(counts.get(n, 0) < cap and totals.get(n, 0) < total_cap for n in names):
            kept.append(index)
            for n in names:
                counts[n] = counts.get(n, 0) + 1
                totals[n] = totals.get(n, 0) + 1

    required = min(min_unique, k)
    if len(counts) < required:
        # Best not-yet-represented source first; each swap adds at least one source and removes
        # none, because every source of the victim keeps at least one item.
        items_of_missing: dict[str, list[int]] = {}
        for index, names in enumerate(sources):
            for n in names:
                if n not in counts:
                    items_of_missing.setdefault(n, []).append(index)

        def fits(candidate: int, freed: tuple[str, ...]) -> bool:
            return all(counts.get(n, 0) - (n in freed) < cap and totals.get(n, 0) - (n in freed) < total_cap
                       for n in sources[candidate])

        for name, candidates in sorted(items_of_missing.items(), key=lambda kv: kv[1][0]):
            if len(counts) >= required:
                break
            if name in counts:  # an earlier swap's item brought it in
                continue
            # The best item of the source that fits, against the lowest-ranked victim that lets it
            # fit: an item that also names a full source must not keep a lower-ranked item of
            # this source out.
            swap: tuple[int, int | None] | None = None
            for candidate in candidates:
                if len(kept) < k:
                    if fits(candidate, ()):
                        swap = (candidate, None)
                else:
                    victim = next((i for i in reversed(kept)
                                   if all(counts[n] > 1 for n in sources[i]) and fits(candidate, sources[i])), None)
                    if victim is not None:
                        swap = (candidate, victim)
                if swap is not None:
                    break
            if swap is None:
                continue
            candidate, victim = swap
            if victim is not None:
                kept.remove(victim)
                for n in sources[victim]:
                    counts[n] -= 1
                    totals[n] -= 1
            kept.append(candidate)
            for n in sources[candidate]:
                counts[n] = counts.get(n, 0) + 1
                totals[n] = totals.get(n, 0) + 1
        kept.sort()
    return kept, len(counts) >= required


def _outcome(items: Sequence[T], sources: list[tuple[str, ...]], kept: list[int], k: int,
             met: bool) -> DiversityOutcome[T]:
    kept_set = set(kept)
    per_source: dict[str, int] = {}
    for index in kept:
        for name in sources[index]:
            per_source[name] = per_source.get(name, 0) + 1
    return DiversityOutcome(
        kept=[items[i] for i in kept],
        withheld=[item for i, item in enumerate(items) if i not in kept_set],
        short_by=k - len(kept),
        per_source=per_source,
        unique_sources=len(per_source),
        min_unique_met=met,
    )


def _check_common(min_unique_sources: object, missing_source: object) -> None:
    _check_int("min_unique_sources", min_unique_sources, 0)
    if not isinstance(missing_source, str):
        raise GuardArgumentTypeError(f"missing_source must be a str, not {type(missing_source).__name__}")


def enforce_diversity(
    items: Sequence[T],
    *,
    k: int,
    source_of: Callable[[T], SourceNames],
    max_source_fraction: float = 0.4,
    min_unique_sources: int = 2,
    missing_source: str = _MISSING_DEFAULT,
) -> DiversityOutcome[T]:
    """Keep at most ``k`` items, at most ``source_cap(k, max_source_fraction)`` per source.

    Items are walked in the given (rank) order and admitted while their source is under the cap
    and fewer than ``k`` are kept. Withheld items are never re-added, so the cap holds for every
    source, always; when fewer than ``k`` items can be kept the result is short.

    ``min_unique_sources`` is then enforced: when the candidates span at least
    ``min(min_unique_sources, k)`` sources, the result does too. If needed, the lowest-ranked
    kept items of sources holding more than one kept item are replaced by the best item of each
    missing source (best-ranked missing source first). A swap never exceeds the cap or ``k``.
    When the candidates span fewer sources, ``min_unique_met`` is False; with items of several
    sources it is best effort (an item that would push another of its sources over the cap is
    passed over for the next item of the missing source, or another victim that makes room), and
    ``min_unique_met`` says whether it was met.

    Args:
        items: candidates in rank order (best first), e.g. over-fetched ``ScoredPoint``s.
        k: the number of results to return at most, at least 1.
        source_of: returns an item's source name, a list or tuple of names when it has several,
            or None (or an empty sequence) when it has none.
        max_source_fraction: the largest share of ``k`` one source may hold, in ``(0, 1]``.
        min_unique_sources: the number of distinct sources the result should span.
        missing_source: the one source that every item without a source counts under.

    Returns:
        A :class:`DiversityOutcome`.

    Raises:
        TypeError: an argument has the wrong type, or ``source_of`` returned something other than
            a string, a list or tuple of strings, or None.
        ValueError: ``k < 1``, a negative ``min_unique_sources`` or a fraction outside ``(0, 1]``.
    """
    cap = source_cap(k, max_source_fraction)
    _check_common(min_unique_sources, missing_source)
    sources = _source_names(items, source_of, missing_source)
    kept, met = _select(sources, k=k, cap=cap, min_unique=min_unique_sources, totals={}, total_cap=cap)
    return _outcome(items, sources, kept, k, met)


def enforce_group_caps(
    groups: Sequence[Sequence[T]],
    *,
    group_size: int,
    source_of: Callable[[T], SourceNames],
    max_source_fraction: float = 0.4,
    min_unique_sources: int = 2,
    missing_source: str = _MISSING_DEFAULT,
) -> GroupCapsOutcome[T]:
    """Cap sources in a grouped response (``query_points_groups``). Grouped by the source field,
    each group is one source, so the caps leave each at most ``source_cap(group_size, fraction)``.

    Two caps hold at once, both hard:

    * inside each group: at most ``source_cap(group_size, fraction)`` hits per source;
    * across the whole response: at most ``source_cap(n, fraction)`` hits per source, counted over
      all groups, where ``n`` is the number of hits the groups can return (each group's hits, at
      most ``group_size`` of them; ``len(groups) * group_size`` when every group is full). Groups
      are processed in the given order (Qdrant orders them best first), so earlier groups use a
      source's response-wide share first. (A share of ``len(groups) * group_size`` whatever the
      groups held let a large ``group_size`` over one-hit groups hand one source the whole response.)

    A point that appears in several groups (grouping by a multi-valued field) counts once per
    appearance, which errs on the strict side. ``min_unique_sources`` is applied inside each group
    as in :func:`enforce_diversity`, but it is best effort here: a missing source whose
    response-wide share is used up cannot be swapped in, and ``min_unique_met`` says so.

    Args:
        groups: the hits of each group, each in rank order (e.g. ``[g.hits for g in result.groups]``).
        group_size: the ``group_size`` that was requested, at least 1.
        source_of: returns a hit's source name, a list or tuple of names, or None, as in
            :func:`enforce_diversity`.
        max_source_fraction: the largest share one source may hold, in ``(0, 1]``.
        min_unique_sources: the number of distinct sources each group should span.
        missing_source: the one source that every hit without a source counts under.

    Returns:
        A :class:`GroupCapsOutcome`.

    Raises:
        TypeError: an argument has the wrong type, or ``source_of`` returned something other than
            a string, a list or tuple of strings, or None.
        ValueError: ``group_size < 1``, a negative ``min_unique_sources`` or a bad fraction.
    """
    group_cap = source_cap(group_size, max_source_fraction)
    _check_common(min_unique_sources, missing_source)
    # The response's share is of the hits the groups can return, not of len(groups) * group_size:
    # grouped by a field unique per point, each group holds one hit, and a large group_size made
    # the cap exceed the whole response.
    slots = sum(min(len(hits), group_size) for hits in groups) if groups else group_size
    response_cap = source_cap(max(1, slots), max_source_fraction)
    totals: dict[str, int] = {}
    outcomes = []
    for hits in groups:
        sources = _source_names(hits, source_of, missing_source)
        kept, met = _select(
            sources,
            k=group_size,
            cap=group_cap,
            min_unique=min_unique_sources,
            totals=totals,
            total_cap=response_cap,
        )
        outcomes.append(_outcome(hits, sources, kept, group_size, met))
    return GroupCapsOutcome(
        groups=outcomes,
        per_source={name: n for name, n in totals.items() if n},
        group_cap=group_cap,
        response_cap=response_cap,
    )
