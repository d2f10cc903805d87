"""Cross-query extraction budget: how many distinct points of a source a principal may see per window.

Per-query diversity (:mod:`qdrant_guard.diversity`) limits one query. An attacker who sends many
queries can still collect a restricted document chunk by chunk. The extraction budget counts,
per principal x collection x source, the *distinct* point ids returned within a sliding window
and withholds new ids once the count reaches the cap. Ids already seen in the window are always
admitted again (re-reading them reveals nothing new), and seeing them refreshes their timestamp.

The count is exact: each store applies one admission atomically (a lock, one SQLite
``BEGIN IMMEDIATE`` transaction, or one Redis Lua script), so concurrent threads or processes
sharing a store can never admit more than ``cap`` distinct ids for one key within the window
(on a callers' clock that does not step back past a key the store has dropped as idle: below).

A point of several sources is admitted under all of them or none (``admit_points``): a point one
source withholds is not charged to the others, so what a source still releases says nothing
about withheld points.

Time per key never runs backwards: each admission uses ``max(now, newest timestamp stored for the
key)``. A clock that steps back (NTP, clocks of different hosts) therefore does not shorten a
window while the key is held; it can only keep entries slightly longer, which errs on the strict
side. Keys (memory store) and rows (SQLite) that every window has left are dropped by a sweep, and
Redis keys expire by TTL: a clock that steps back, after that, to within a window of the dropped
entries finds the key empty, so its ids count afresh (docs/diversity-budget.md, each store).

Point ids are normalised before they are counted: an int ``5`` becomes ``"i:5"`` and a UUID in any
form Qdrant accepts becomes ``"u:"`` plus its lowercase hyphenated form, so the same point always
counts once.

The stores live in :mod:`qdrant_guard.budget_stores` (the protocol, in-process and SQLite, defined
in :mod:`~qdrant_guard.budget_store_base`, :mod:`~qdrant_guard.budget_memory` and
:mod:`~qdrant_guard.budget_sqlite`) and :mod:`qdrant_guard.budget_redis`; this module is the budget
itself and re-exports them.
"""
from __future__ import annotations

import functools
import heapq
import math
import re
import time
import uuid
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

from .budget_redis import RedisBudgetStore
from .budget_store_base import _check_count, _check_real, _check_str, _CountingStore, _released_where_all_admit
from .budget_stores import (
    BudgetStore,
    BudgetStoreError,
    MemoryBudgetStore,
    SqliteBudgetStore,
    denormalize_point_id,
    normalize_point_id,
)
from .diversity import _check_fraction
from .errors import ConfigError, GuardArgumentTypeError, GuardArgumentValueError

__all__ = [
    "BudgetDecision",
    "BudgetStore",
    "BudgetStoreError",
    "ExtractionBudget",
    "MemoryBudgetStore",
    "RedisBudgetStore",
    "SqliteBudgetStore",
    "make_store",
    "store_kind",
    "normalize_point_id",
    "denormalize_point_id",
]


def make_store(spec: str | None, *, allow_unauthenticated: bool = False) -> BudgetStore:
    """Build a store from a spec string.

    Args:
        spec: ``None`` or ``"memory"``; ``"sqlite:///relative/path.db"`` or
            ``"sqlite:////absolute/path.db"``; ``"redis://host:port/db"`` (also ``rediss://``
            and ``unix://``).
        allow_unauthenticated: for a Redis spec, use the server even when clients without
            credentials may write it (see :class:`RedisBudgetStore`); the policy's
            ``budget_store_allow_unauthenticated``.

    Returns:
        The store.

    Raises:
        TypeError: ``spec`` is not a str or None.
        ValueError: the spec has none of the forms above.
    """
    if spec is not None and not isinstance(spec, str):
        raise GuardArgumentTypeError(f"spec must be a str or None, not {type(spec).__name__}")
    kind = store_kind(spec)
    if kind == "memory":
        return MemoryBudgetStore()
    if kind == "sqlite":
        return SqliteBudgetStore(str(spec)[len("sqlite:///"):])
    if kind == "redis":
        return RedisBudgetStore(str(spec), allow_unauthenticated=allow_unauthenticated)
    from .guard_config import _mask_tokens  # here: guard_config imports this module

    raise ConfigError(
        f"unknown budget store spec {_mask_tokens(spec)!r}; use 'memory', 'sqlite:///path.db' or "
        "'redis://host:port/db'"
    )


def store_kind(spec: str | None) -> str | None:
    """``"memory"``, ``"sqlite"`` or ``"redis"`` for a spec :func:`make_store` accepts, else None."""
    if spec is None or spec == "memory":
        return "memory"
    if spec.startswith("sqlite:///") and len(spec) > len("sqlite:///"):
        return "sqlite"
    if spec.startswith(("redis://", "rediss://", "unix://")):
        return "redis"
    return None


# --- the budget ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetDecision:
    """The outcome of one budget admission.

    Attributes:
        admitted: the point ids that may be returned, as passed in and in input order; each is
            counted under ``key``.
        withheld: the point ids that must not be returned, as passed in and in input order
            (from :meth:`ExtractionBudget.admit_many`, also those another source of the point
            refused); the built-in stores count none of them anew under ``key``.
        seen_before: distinct ids in the window before this admission.
        seen_after: distinct ids in the window after it (never more than ``cap``).
        cap: the distinct-id cap that applied.
        key: the store key that was charged.
    """

    admitted: list[Any]
    withheld: list[Any]
    seen_before: int
    seen_after: int
    cap: int
    key: str


def _normalised_ids(charges: Sequence[tuple[str, Any, int]]) -> list[list[str]]:
    normalised = []
    for _, point_ids, _ in charges:
        if type(point_ids) is not list and (isinstance(point_ids, (str, bytes))
                                            or not isinstance(point_ids, Sequence)):
            raise GuardArgumentTypeError(f"point_ids must be a sequence of point ids, not {type(point_ids).__name__}")
        # normalize_point_id's first case inline: a read normalises every id it returns.
        normalised.append([f"i:{pid}" if type(pid) is int and pid >= 0 else normalize_point_id(pid)
                           for pid in point_ids])
    return normalised


def _decision(charge: tuple[str, Sequence[Any], int], normalised: list[str], released: set[str],
              before: int, after: int) -> BudgetDecision:
    key, originals, cap = charge
    if type(originals) is list and released.issuperset(normalised):  # the common case: all released
        return _new_decision(list(originals), [], before, after, cap, key)
    return _new_decision([o for o, n in zip(originals, normalised) if n in released],
                         [o for o, n in zip(originals, normalised) if n not in released], before, after, cap, key)


def _new_decision(admitted: list[Any], withheld: list[Any], before: int, after: int, cap: int,
                  key: str) -> BudgetDecision:
    # BudgetDecision(...) without the frozen dataclass's __init__, which sets each field with its
    # own object.__setattr__ (a read makes one per source it returns): the same fields, in the
    # same order, in the instance's __dict__.
    decision = object.__new__(BudgetDecision)
    decision.__dict__.update(admitted=admitted, withheld=withheld, seen_before=before, seen_after=after,
                             cap=cap, key=key)
    return decision


def _rank_order(lists: Sequence[Sequence[str]]) -> list[str]:
    """Every distinct id of ``lists``, in an order that keeps each list's order of first appearance.

    Lists cut from one ranked result (each source's points, in rank order) admit the ranking
    itself as such an order, and every such order decides an all-or-none admission the same way:
    two ids that share a key appear in that key's list, so their order is fixed; ids that share no
    key touch disjoint keys and commute. Ties go to the id read first (list by list). Lists that
    contradict each other (``[a, b]`` and ``[b, a]``) have no such order: the earliest unplaced
    id read first is then taken.
    """
    # Lists that share no id (points of one source each, the common case) have no order between
    # them: the walk below then places them one after the other, as this does without it.
    joined = [pid for ids in lists for pid in dict.fromkeys(ids)]
    if len(set(joined)) == len(joined):
        return joined
    return _rank_walk(lists)


def _rank_walk(lists: Sequence[Sequence[str]]) -> list[str]:
    # _rank_order's general case: a topological walk that places the earliest-read ready id first.
    position: dict[str, int] = {}
    after: dict[str, set[str]] = {}
    waiting: dict[str, int] = {}
    for ids in lists:
        previous = None
        for pid in dict.fromkeys(ids):
            position.setdefault(pid, len(position))
            waiting.setdefault(pid, 0)
            if previous is not None and pid not in after.setdefault(previous, set()):
                after[previous].add(pid)
                waiting[pid] += 1
            previous = pid
    by_position = list(position)
    ready = [position[pid] for pid, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    placed: set[str] = set()
    unplaced = iter(range(len(by_position)))
    while len(order) < len(by_position):
        if ready:
            pid = by_position[heapq.heappop(ready)]
        else:
            pid = next(by_position[i] for i in unplaced if by_position[i] not in placed)
        if pid in placed:
            continue
        placed.add(pid)
        order.append(pid)
        for nxt in after.get(pid, ()):
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                heapq.heappush(ready, position[nxt])
    return order


@functools.lru_cache(maxsize=256)
def _decimal_ratio(fraction: float) -> tuple[int, int]:
    # The decimal the caller wrote, as floor_share reads it: the shortest repr of the float.
    return Fraction(repr(fraction)).as_integer_ratio()


def _floor_share(n: int, fraction: float) -> int:
    # floor_share(n, fraction) for checked arguments, with the exact ratio cached per fraction.
    numerator, denominator = _decimal_ratio(fraction)
    return n * numerator // denominator


@functools.lru_cache(maxsize=4096)
def _source_key(principal: str, collection: str, source: str) -> str:
    # ExtractionBudget.budget_key of checked plain strings: a read builds one per source it returns.
    return "src|" + "|".join(_escape_part(p) for p in (principal, collection, source))


def _escape_part(text: str) -> str:
    return text.replace("%", "%25").replace("|", "%7C")


def _unescape_part(text: str) -> str:
    # One pass, so an escaped "%" never joins the text after it into another escape.
    if "%" not in text:
        return text
    return re.sub("%(25|7C)", lambda m: "%" if m.group(1) == "25" else "|", text)


class ExtractionBudget:
    """Caps the distinct points of each source a principal can see within a sliding window.

    Args:
        store: where the counts live (see :func:`make_store`).
        window_s: the window length in seconds (default one day).
        clock: returns the current time in seconds; injectable for tests.
    """

    def __init__(self, store: BudgetStore, *, window_s: float = 86400.0, clock: Callable[[], float] = time.time) -> None:
        if not isinstance(store, BudgetStore):
            raise GuardArgumentTypeError(f"store must implement BudgetStore (admit, seen, reset), not {type(store).__name__}")
        if not callable(clock):
            raise GuardArgumentTypeError(f"clock must be callable, not {type(clock).__name__}")
        self.store = store
        self.window_s = _check_real("window_s", window_s, positive=True)
        self.clock = clock
        # Prefix -> (the store's listing as items, by source): every read lists, and the listing
        # seldom changes between two reads.
        self._by_source: dict[str, tuple[list[Any], dict[str, frozenset[str]]]] = {}

    @staticmethod
    def budget_key(principal: str, collection: str, source: str) -> str:
        """Return the store key for one principal x collection x source.

        Parts are joined with ``|`` after escaping ``%`` and ``|``, so distinct triples never
        share a key (``("a|b", "c", "d")`` and ``("a", "b|c", "d")`` differ).

        Raises:
            TypeError: a part is not a str.
            ValueError: a part is empty.
        """
        if type(principal) is str and type(collection) is str and type(source) is str \
                and principal and collection and source:
            return _source_key(principal, collection, source)
        return _source_key(_check_str("principal", principal), _check_str("collection", collection),
                           _check_str("source", source))

    def admitted_by_source(self, *, principal: str, collection: str) -> dict[str, frozenset[str]] | None:
        """Return source -> the point ids (normalised) the principal holds within the window.

        Only sources with at least one id in the window appear. Read-only: nothing is charged,
        refreshed or forgotten. An id listed here is admitted again for free.

        Returns:
            The mapping, or None when the store cannot list its keys (a third-party store that
            implements only :class:`BudgetStore`, without ``entries_by_prefix``).

        Raises:
            TypeError, ValueError: an empty or non-str principal or collection.
            BudgetStoreError: the store is unavailable.
        """
        listing = getattr(self.store, "entries_by_prefix", None)
        if listing is None:
            return None
        if not (type(principal) is str and type(collection) is str and principal and collection):
            principal, collection = _check_str("principal", principal), _check_str("collection", collection)
        prefix = _source_key(principal, collection, "")  # every read lists: the cached key builder
        now = _check_real("clock()", self.clock(), positive=False)
        found = listing(prefix, window_s=self.window_s, now=now)
        items = list(found.items())
        kept = self._by_source.get(prefix)
        if kept is not None and kept[0] == items:
            return dict(kept[1])
        cut = len(prefix)
        # A read lists every source of its principal: one comprehension, the escapes undone after.
        out = {key[cut:]: ids if type(ids) is frozenset else frozenset(ids) for key, ids in items}
        if "%" in "".join(out):  # in one of the names (a "%" cannot span two)
            out = {_unescape_part(source) if "%" in source else source: ids for source, ids in out.items()}
        if all(type(ids) is frozenset for _, ids in items):  # a listing equal to these ids is this one
            if len(self._by_source) >= 1024:
                self._by_source.clear()
            self._by_source[prefix] = (items, out)
        return dict(out)

    @staticmethod
    def _vector_key(principal: str, collection: str) -> str:
        parts = (_check_str("principal", principal), _check_str("collection", collection))
        return "vec|" + "|".join(_escape_part(p) for p in parts)

    def cap_for(self, source_size: int, max_source_coverage: float) -> int:
        """Return ``floor(source_size * max_source_coverage)``.

        Rounding is down, so a principal never sees more than the stated share of a source. A
        consequence: when ``source_size * max_source_coverage < 1`` the cap is 0 and the source is
        withheld entirely (e.g. a 3-chunk source at coverage 0.25).

        Raises:
            TypeError: wrong argument types.
            ValueError: a negative size or a coverage outside ``[0, 1]``.
        """
        # Reads call this once per listed source: skip the full checks for plain valid arguments.
        if not (type(source_size) is int and source_size >= 0):
            _check_count("source_size", source_size)
        coverage = max_source_coverage
        if not (type(coverage) is float and 0.0 <= coverage <= 1.0):
            coverage = _check_fraction("max_source_coverage", max_source_coverage, allow_zero=True)
        return _floor_share(source_size, coverage)

    def _decide(self, charges: list[tuple[str, Sequence[Any], int]]) -> list[BudgetDecision]:
        # charges: (key, original point ids, cap) -> one decision each, every key on its own.
        normalised = _normalised_ids(charges)
        results = self._admit_per_key(charges, normalised, self._now())
        return [_decision(charge, norm, admitted, before, after)
                for charge, norm, (admitted, before, after) in zip(charges, normalised, results)]

    def _decide_points(self, charges: list[tuple[str, Sequence[Any], int]]) -> list[BudgetDecision]:
        # One point per distinct id, under every key that lists it, decided in rank order: released
        # (and charged to every key) only if all its keys admit it.
        normalised = _normalised_ids(charges)
        # Lists that share no id (a point of one source each, the common case) are placed one after
        # the other, each point under its one key: what _rank_order and the members below give then.
        points = [(pid, [index]) for index, ids in enumerate(normalised)
                  for pid in (dict.fromkeys(ids) if len(ids) > 1 else ids)]
        if len({pid for pid, _ in points}) != len(points):
            members: dict[str, list[int]] = {}
            for pid, (index,) in points:
                members.setdefault(pid, []).append(index)
            points = [(pid, members[pid]) for pid in _rank_order(normalised)]
        now = self._now()
        store = self.store
        admit_points = getattr(store, "admit_points", None)
        window = self.window_s  # a public attribute: checked again as admit_points would
        # The bound method's function, not the class attribute: an admit_points set on the instance
        # (a wrapper) is the one to call, as the checked path below does.
        if getattr(admit_points, "__func__", None) is _CountingStore.admit_points \
                and getattr(admit_points, "__self__", None) is store \
                and type(window) is float and 0.0 < window < math.inf \
                and len({key for key, _, _ in charges}) == len(charges):
            # A built-in store's admit_points only checks its arguments before _admit_points, and
            # these passed the same checks here: non-empty str keys (distinct, as tested above: two
            # str subclasses can be distinct sources of one key), caps from _floor_share, one entry
            # per distinct id with distinct key indices, window_s and now finite floats.
            flags, counts = store._admit_points([(key, cap) for key, _, cap in charges], points, window, now)
        elif admit_points is not None:
            flags, counts = admit_points([(key, cap) for key, _, cap in charges], points,
                                         window_s=self.window_s, now=now)
        else:
            # A store without admit_points can only charge each key on its own: never release a
            # point any key withheld, though the keys that admitted it stay charged for it.
            results = self._admit_per_key(charges, normalised, now)
            flags = _released_where_all_admit(points, [admitted for admitted, _, _ in results])
            counts = [(before, after) for _, before, after in results]
        if type(flags) is not list:
            flags = list(flags)  # read twice below: an iterator's would be used up by all()
        # Every point released (the common case): what _decision gives each then. Only a flag per
        # point says so: a short answer leaves the points past it withheld, as the zip below does.
        if len(flags) == len(points) and all(flags):
            return [_new_decision(list(originals), [], before, after, cap, key)
                    for (key, originals, cap), (before, after) in zip(charges, counts)]
        released = {pid for (pid, _), ok in zip(points, flags) if ok}
        return [_decision(charge, norm, released, before, after)
                for charge, norm, (before, after) in zip(charges, normalised, counts)]

    def _now(self) -> float:
        return _check_real("clock()", self.clock(), positive=False)

    def _admit_per_key(self, charges: list[tuple[str, Sequence[Any], int]], normalised: list[list[str]],
                       now: float) -> list[tuple[set[str], int, int]]:
        # Per charge: (normalised ids admitted, seen_before, seen_after), in one store call when
        # the store can take several keys together.
        store = self.store
        many = getattr(store, "admit_many_counted", None)
        if many is not None:
            results = many([(key, norm, cap) for (key, _, cap), norm in zip(charges, normalised)],
                           window_s=self.window_s, now=now)
            return [({n for n, ok in zip(norm, flags) if ok}, before, after)
                    for norm, (flags, before, after) in zip(normalised, results)]
        out = []
        counted = getattr(store, "admit_counted", None)
        for (key, _, cap), norm in zip(charges, normalised):
            if counted is not None:
                admitted, _, before, after = counted(key, norm, cap=cap, window_s=self.window_s, now=now)
            else:
                # Third-party stores only promise admit(); the counts around it are then not atomic.
                before = store.seen(key, window_s=self.window_s, now=now)
                admitted, _ = store.admit(key, norm, cap=cap, window_s=self.window_s, now=now)
                after = store.seen(key, window_s=self.window_s, now=now)
            out.append((set(admitted), before, after))
        return out

    def admit(
        self,
        *,
        principal: str,
        collection: str,
        source: str,
        point_ids: Sequence[int | str | uuid.UUID],
        source_size: int,
        max_source_coverage: float,
    ) -> BudgetDecision:
        """Charge ``point_ids`` (all from ``source``) to the principal's budget for that source.

        Args:
            principal: who is reading.
            collection: the collection read.
            source: the source the points belong to.
            point_ids: the ids about to be returned, in rank order.
            source_size: how many points the source has in the collection.
            max_source_coverage: the largest share of the source one principal may see per window.

        Returns:
            A :class:`BudgetDecision`; return only ``admitted``.

        Raises:
            TypeError, ValueError: bad arguments or point ids.
            BudgetStoreError: the store is unavailable (fail closed).
        """
        key = self.budget_key(principal, collection, source)
        (decision,) = self._decide([(key, point_ids, self.cap_for(source_size, max_source_coverage))])
        return decision

    def admit_many(
        self,
        *,
        principal: str,
        collection: str,
        requests: Mapping[str, tuple[Sequence[int | str | uuid.UUID], int]],
        max_source_coverage: float,
    ) -> dict[str, BudgetDecision]:
        """Charge several sources of one read at once, each point under all its sources or none.

        A point id listed under several sources is one point of each of them. Points are decided
        in rank order (an order that keeps every source's list order, so the ranking itself when
        the lists come from one ranked result): a point is released only if every one of its
        sources admits it, as :meth:`admit` would (already seen in the window, or the source
        below its cap), and it is then charged to all of them. A point any source withholds is
        charged to none and refreshed under none. Sources that share no point get exactly what
        :meth:`admit` would give each. The built-in stores decide everything in one step
        (:meth:`MemoryBudgetStore.admit_points`: one lock, one SQLite ``BEGIN IMMEDIATE``
        transaction, or one Redis script; see :class:`RedisBudgetStore` for Redis Cluster).

        A third-party store without ``admit_points`` is charged source by source with its
        ``admit``: a point is still released only if every source admitted it, but the sources
        that admitted a point another one withheld stay charged for it.

        Args:
            principal: who is reading.
            collection: the collection read.
            requests: source -> (the point ids about to be returned from it, in rank order; the
                number of points the source has in the collection).
            max_source_coverage: the largest share of each source one principal may see per window.

        Returns:
            source -> :class:`BudgetDecision`, in the order of ``requests``: ``admitted`` are the
            source's points released (and charged), ``withheld`` the others, whichever of the
            point's sources refused them; the counts are the source's own.

        Raises:
            TypeError, ValueError: bad arguments or point ids (nothing is charged then).
            BudgetStoreError: the store is unavailable (fail closed).
        """
        if type(requests) is not dict and not isinstance(requests, Mapping):
            raise GuardArgumentTypeError(f"requests must be a mapping of source to (point_ids, source_size), not {type(requests).__name__}")
        coverage = _check_fraction("max_source_coverage", max_source_coverage, allow_zero=True)
        # budget_key and _floor_share inline for plain parts: a read charges every source it returns.
        plain = type(principal) is str and type(collection) is str and principal and collection \
            and type(self).budget_key is _BUDGET_KEY and "budget_key" not in self.__dict__  # any other is called
        numerator, denominator = _decimal_ratio(coverage)
        charges = []
        for source, request in requests.items():
            if not isinstance(request, tuple) or len(request) != 2:
                raise GuardArgumentTypeError(f"requests[{source!r}] must be a (point_ids, source_size) tuple")
            point_ids, source_size = request
            if not (type(source_size) is int and source_size >= 0):
                _check_count("source_size", source_size)
            key = _source_key(principal, collection, source) if plain and type(source) is str and source \
                else self.budget_key(principal, collection, source)
            charges.append((key, point_ids, source_size * numerator // denominator))
        return dict(zip(requests, self._decide_points(charges))) if charges else {}

    def admit_vectors(
        self,
        *,
        principal: str,
        collection: str,
        point_ids: Sequence[int | str | uuid.UUID],
        max_vectors: int,
    ) -> BudgetDecision:
        """Charge returned *vectors* to a per-principal, per-collection distillation budget.

        For PROPRIETARY collections: caps how many distinct stored vectors one principal can
        receive per window, whatever their source, so the embedding model cannot be distilled
        from a bulk of returned vectors. Uses a key space separate from :meth:`admit`.

        Args:
            principal: who is reading.
            collection: the collection read.
            point_ids: one id per vector about to be returned (the guard charges a named
                vector under a UUID of its point and name, so each counts apart).
            max_vectors: the distinct-vector cap per window.

        Returns:
            A :class:`BudgetDecision`.

        Raises:
            TypeError, ValueError: bad arguments or point ids.
            BudgetStoreError: the store is unavailable (fail closed).
        """
        key = self._vector_key(principal, collection)
        (decision,) = self._decide([(key, point_ids, _check_count("max_vectors", max_vectors))])
        return decision

    def admit_units(
        self,
        *,
        principal: str,
        collection: str,
        unit: int,
        groups: Sequence[tuple[Sequence[tuple[str, int]], int]],
        max_vectors: int,
    ) -> tuple[list[bool], int, int, int, str]:
        """Charge vectors and scores to the distillation budget in units (``diversity.charge_scores``).

        ``unit`` is what one vector is worth: the least common multiple of the collection's dense
        vector sizes, so a vector of size ``d`` costs ``unit`` and one score of it ``unit // d``,
        both integers. The cap is ``max_vectors * unit``. The key names ``unit``, so a collection
        whose vector sizes change (and with them what a unit is) counts afresh rather than mixing
        units. Groups are decided as :meth:`BudgetStore.admit_units` decides them.

        Returns:
            ``(flags, units_before, units_after, cap, key)``.

        Raises:
            TypeError, ValueError: bad arguments.
            BudgetStoreError: the store is unavailable, or has no ``admit_units`` (fail closed).
        """
        unit = _check_count("unit", unit)
        if unit < 1:
            raise GuardArgumentValueError(f"unit must be at least 1 (what one vector is worth in units), got {unit}")
        cap = _check_count("max_vectors", max_vectors) * unit
        key = self._vector_key(principal, collection).replace("vec|", "vsu|", 1) + f"|{unit}"
        admit = getattr(self.store, "admit_units", None)
        if admit is None:
            raise BudgetStoreError(
                f"budget store {type(self.store).__name__} has no admit_units, which diversity.charge_scores needs; "
                "use budget_store = 'memory', 'sqlite:///...' or 'redis://...', or set charge_scores = false")
        flags, before, after = admit(key, [(list(items), requires) for items, requires in groups], cap=cap,
                                     window_s=self.window_s, now=self._now())
        return list(flags), int(before), int(after), cap, key


_BUDGET_KEY = ExtractionBudget.budget_key
