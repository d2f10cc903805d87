"""What the extraction budget's stores share: :class:`BudgetStoreError`, the :class:`BudgetStore`
protocol, the argument checks, point-id normalisation and :class:`_CountingStore`, the base that
checks a call's arguments once and counts admissions for every store.
"""
from __future__ import annotations

import functools
import math
import uuid
from typing import Any, Protocol, Sequence, runtime_checkable

from .diversity import _check_int
from .errors import GuardArgumentTypeError, GuardArgumentValueError, QdrantGuardError
from .point_uuid import real_uuid


class BudgetStoreError(QdrantGuardError, RuntimeError):
    """A budget store cannot be reached or used. Callers should fail closed (withhold)."""


# --- argument checks -------------------------------------------------------------------------


def _check_str(name: str, value: object, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise GuardArgumentTypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value and not empty_ok:
        raise GuardArgumentValueError(f"{name} must be a non-empty string")
    return value


def _check_count(name: str, value: object) -> int:
    return _check_int(name, value, 0)


def _check_real(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GuardArgumentTypeError(f"{name} must be a float, not {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0.0):
        want = "a finite number > 0" if positive else "a finite number"
        raise GuardArgumentValueError(f"{name} must be {want}, got {value!r}")
    return value


def _check_request(key: object, point_ids: object, cap: object) -> tuple[str, list[str], int]:
    _check_str("key", key)
    if isinstance(point_ids, (str, bytes)) or not isinstance(point_ids, Sequence):
        raise GuardArgumentTypeError(f"point_ids must be a sequence of str, not {type(point_ids).__name__}")
    ids = list(point_ids)
    for index, pid in enumerate(ids):
        if not isinstance(pid, str):
            raise GuardArgumentTypeError(f"point_ids[{index}] must be a str, not {type(pid).__name__}")
    return key, ids, _check_count("cap", cap)  # type: ignore[return-value]


def _check_admit_args(
    key: object, point_ids: object, cap: object, window_s: object, now: object
) -> tuple[str, list[str], int, float, float]:
    return (
        *_check_request(key, point_ids, cap),
        _check_real("window_s", window_s, positive=True),
        _check_real("now", now, positive=False),
    )


def _check_points(keys: object, points: object) -> tuple[list[tuple[str, int]], list[tuple[str, list[int]]]]:
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise GuardArgumentTypeError(f"keys must be a sequence of (key, cap), not {type(keys).__name__}")
    checked_keys = []
    for index, pair in enumerate(keys):
        if type(pair) is tuple and len(pair) == 2 and type(pair[0]) is str and pair[0] \
                and type(pair[1]) is int and pair[1] >= 0:
            checked_keys.append(pair)  # a plain (key, cap), as the checks below would pass it
            continue
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise GuardArgumentTypeError(f"keys[{index}] must be a (key, cap) tuple")
        checked_keys.append((_check_str("key", pair[0]), _check_count("cap", pair[1])))
    if len({key for key, _ in checked_keys}) != len(checked_keys):
        raise GuardArgumentValueError("keys must be distinct")
    if isinstance(points, (str, bytes)) or not isinstance(points, Sequence):
        raise GuardArgumentTypeError(f"points must be a sequence of (point_id, key_indices), not {type(points).__name__}")
    checked_points = []
    nkeys = len(checked_keys)
    for index, pair in enumerate(points):
        if type(pair) is tuple and len(pair) == 2 and type(pair[0]) is str:
            members = pair[1]
            if type(members) is list and len(members) == 1 and type(members[0]) is int and 0 <= members[0] < nkeys:
                checked_points.append((pair[0], [members[0]]))  # one plain key index: _plain_members' case
                continue
        if not isinstance(pair, tuple) or len(pair) != 2 or not isinstance(pair[0], str):
            raise GuardArgumentTypeError(f"points[{index}] must be a (str point_id, key_indices) tuple")
        members = pair[1]
        if _plain_members(members, nkeys):
            checked_points.append((pair[0], list(members)))
            continue
        if isinstance(members, (str, bytes)) or not isinstance(members, Sequence):
            raise GuardArgumentTypeError(f"points[{index}] key_indices must be a sequence of int")
        members = [_check_int(f"points[{index}] key index", k, 0) for k in members]
        if any(k >= len(checked_keys) for k in members) or len(set(members)) != len(members):
            raise GuardArgumentValueError(f"points[{index}] key_indices must be distinct indices into keys")
        checked_points.append((pair[0], members))
    return checked_keys, checked_points


def _plain_members(members: object, nkeys: int) -> bool:
    """Whether ``members`` is a list or tuple of distinct plain ints in ``range(nkeys)``: what the
    full checks of :func:`_check_points` accept unchanged, tested without them (the common case)."""
    if type(members) is not list and type(members) is not tuple:
        return False
    for k in members:
        if type(k) is not int or not 0 <= k < nkeys:
            return False
    return len(members) < 2 or len(set(members)) == len(members)


def _ids_by_key(nkeys: int, points: Sequence[tuple[str, Sequence[int]]]) -> list[list[str]]:
    lists: list[list[str]] = [[] for _ in range(nkeys)]
    for pid, members in points:
        for k in members:
            lists[k].append(pid)
    return lists


def _released_where_all_admit(points: Sequence[tuple[str, Sequence[int]]], admitted: Sequence[set[str]]) -> list[bool]:
    return [all(pid in admitted[k] for k in members) for pid, members in points]


def normalize_point_id(point_id: int | str | uuid.UUID) -> str:
    """Return the one string form under which a Qdrant point id is counted.

    Args:
        point_id: an unsigned int, a ``uuid.UUID``, or a UUID string in any form Qdrant accepts
            (hyphenated, 32 hex digits, braced, ``urn:uuid:``), in any case.

    Returns:
        ``"i:<decimal>"`` for ints, ``"u:<lowercase hyphenated uuid>"`` for UUIDs.

    Raises:
        TypeError: the id is neither an int, a str nor a UUID (``bool`` is rejected).
        ValueError: a negative int or a string that is not a UUID.
    """
    kind = type(point_id)
    if kind is int and point_id >= 0:  # type: ignore[operator]
        return f"i:{point_id}"
    if kind is str:
        return _normalize_uuid_text(point_id)
    if isinstance(point_id, bool) or not isinstance(point_id, (int, str, uuid.UUID)):
        raise GuardArgumentTypeError(f"point id must be an int, a UUID or a UUID string, not {type(point_id).__name__}")
    if isinstance(point_id, int):
        value = int.__int__(point_id)  # an int subclass by its value: its __str__, __format__ or __lt__ may lie
        if value < 0:
            raise GuardArgumentValueError(f"point id must be an unsigned int, got {value}")
        return f"i:{value}"
    if isinstance(point_id, uuid.UUID):
        return f"u:{point_id if type(point_id) is uuid.UUID else real_uuid(point_id)}"
    return _normalize_uuid_text(str.__str__(point_id))  # a str subclass: read as its plain text


@functools.lru_cache(maxsize=4096)
def _normalize_uuid_text(point_id: str) -> str:
    # normalize_point_id of a plain str: parsing a UUID costs more than the rest of a read's
    # bookkeeping per point, and the same ids come back read after read. A ValueError is not cached.
    try:
        return f"u:{uuid.UUID(point_id)}"
    except ValueError:
        raise GuardArgumentValueError(
            f"point id {point_id!r} is not a UUID string; Qdrant ids are unsigned ints or UUIDs"
        ) from None


def _in_window(entries: Any, window_s: float, now: float) -> frozenset[str]:
    """The ids of ``(id, timestamp)`` pairs an admission at ``now`` would still count: the window
    ends at ``max(now, newest timestamp)``, as every store's admission reads it."""
    pairs = list(entries)
    if not pairs:
        return frozenset()
    cutoff = max(now, max(ts for _, ts in pairs)) - window_s
    return frozenset(pid for pid, ts in pairs if ts >= cutoff)


def denormalize_point_id(normalised: str) -> int | str:
    """Return the Qdrant point id a :func:`normalize_point_id` string names (an int, or a UUID str).

    Raises:
        ValueError: not a string :func:`normalize_point_id` returns.
    """
    kind, _, value = str(normalised).partition(":")
    if kind == "i" and value.isdigit():
        return int(value)
    if kind == "u":
        return str(uuid.UUID(value))
    raise GuardArgumentValueError(f"{normalised!r} is not a normalised point id ('i:<n>' or 'u:<uuid>')")


# --- stores ----------------------------------------------------------------------------------


@runtime_checkable
class BudgetStore(Protocol):
    """Where budget entries live. Every method is safe to call from many threads at once.

    The built-in stores also offer ``admit_points`` (all-or-none admission of points of several
    keys), which :meth:`ExtractionBudget.admit_many` uses. A store without it still works: each
    key is then charged on its own, and a point is released only if every key admitted it.
    """

    def admit(
        self, key: str, point_ids: Sequence[str], *, cap: int, window_s: float, now: float
    ) -> tuple[list[str], list[str]]:
        """Atomically apply one admission to ``key``.

        Entries older than ``now - window_s`` are forgotten; every id already seen in the window is
        admitted (its timestamp refreshed); each new id is admitted while the distinct count is
        below ``cap``, the rest are withheld.

        Returns:
            ``(admitted_ids, withheld_ids)``, each in input order.
        """
        ...

    def seen(self, key: str, *, window_s: float, now: float) -> int:
        """Return how many distinct ids ``key`` holds within the window ending at ``now``."""
        ...

    def reset(self, key: str | None = None) -> None:
        """Forget ``key``, or every key when ``key`` is None."""
        ...


class _CountingStore:
    """Shared front of the built-in stores: checks arguments, splits the atomic result."""

    def admit(
        self, key: str, point_ids: Sequence[str], *, cap: int, window_s: float, now: float
    ) -> tuple[list[str], list[str]]:
        """See :meth:`BudgetStore.admit`."""
        admitted, withheld, _, _ = self.admit_counted(key, point_ids, cap=cap, window_s=window_s, now=now)
        return admitted, withheld

    def admit_counted(
        self, key: str, point_ids: Sequence[str], *, cap: int, window_s: float, now: float
    ) -> tuple[list[str], list[str], int, int]:
        """Like :meth:`admit`, plus the distinct counts before and after, from the same atomic step."""
        key, ids, cap, window_s, now = _check_admit_args(key, point_ids, cap, window_s, now)
        ((flags, before, after),) = self._admit_many([(key, ids, cap)], window_s, now)
        return (
            [pid for pid, ok in zip(ids, flags) if ok],
            [pid for pid, ok in zip(ids, flags) if not ok],
            before,
            after,
        )

    def admit_many_counted(
        self, requests: Sequence[tuple[str, Sequence[str], int]], *, window_s: float, now: float
    ) -> list[tuple[list[bool], int, int]]:
        """Apply several admissions ``(key, point_ids, cap)`` in one store transaction.

        Each key gets exactly what :meth:`admit_counted` with the same ``window_s`` and ``now``
        would give it, applied in order (keys are independent, so the order only matters for a
        key given twice). The whole call is one lock acquisition, one SQLite transaction or one
        Redis script.

        Returns:
            Per request, ``(flags, seen_before, seen_after)``: ``flags[i]`` is True where
            ``point_ids[i]`` was admitted.
        """
        if isinstance(requests, (str, bytes)) or not isinstance(requests, Sequence):
            raise GuardArgumentTypeError(f"requests must be a sequence of (key, point_ids, cap), not {type(requests).__name__}")
        window_s = _check_real("window_s", window_s, positive=True)
        now = _check_real("now", now, positive=False)
        checked = []
        for index, request in enumerate(requests):
            if not isinstance(request, tuple) or len(request) != 3:
                raise GuardArgumentTypeError(f"requests[{index}] must be a (key, point_ids, cap) tuple")
            checked.append(_check_request(*request))
        if not checked:
            return []
        return self._admit_many(checked, window_s, now)

    def admit_points(
        self, keys: Sequence[tuple[str, int]], points: Sequence[tuple[str, Sequence[int]]], *,
        window_s: float, now: float,
    ) -> tuple[list[bool], list[tuple[int, int]]]:
        """Admit points of several keys in rank order, each under all of its keys or none, atomically.

        Every key first forgets entries older than its window. Then, point by point in the order
        given, a point is released when each of its keys either holds it already (a re-read, free)
        or holds fewer than its cap; a released point is then recorded (or refreshed) under every
        one of its keys. A point any key refuses changes nothing anywhere: it is neither charged
        to the keys that had room nor refreshed under the keys that held it. A point with no keys
        is released. The whole call is one lock acquisition, one SQLite transaction or one Redis
        script (on Redis Cluster see :class:`RedisBudgetStore`).

        Args:
            keys: ``(key, cap)`` pairs, distinct keys.
            points: ``(point_id, key_indices)`` in rank order; ``key_indices`` index ``keys``.
            window_s: the window length in seconds.
            now: the current time in seconds.

        Returns:
            ``(released, counts)``: ``released[i]`` is True where ``points[i]`` may be returned;
            ``counts[k]`` is ``(seen_before, seen_after)`` for ``keys[k]``.
        """
        window_s = _check_real("window_s", window_s, positive=True)
        now = _check_real("now", now, positive=False)
        checked_keys, checked_points = _check_points(keys, points)
        if not checked_keys:
            return [True] * len(checked_points), []
        return self._admit_points(checked_keys, checked_points, window_s, now)

    def admit_units(self, key: str, groups: Sequence[tuple[Sequence[tuple[str, int]], int]], *, cap: int,
                    window_s: float, now: float) -> tuple[list[bool], int, int]:
        """Admit weighted groups of ids under a units key, atomically (:mod:`qdrant_guard.budget_units`).

        Args:
            key: the units key (never one :meth:`admit` uses: its entries carry weights).
            groups: ``(items, requires)`` in order: ``items`` are ``(id, weight >= 1)``,
                ``requires`` the index of an earlier group that must have been admitted, or -1.
            cap: the most units the key may hold within the window (below 2**53).
            window_s: the window length in seconds.
            now: the current time in seconds.

        Returns:
            ``(flags, units_before, units_after)``: ``flags[g]`` is True where group ``g`` was
            admitted (and charged).
        """
        from .budget_units import check_units_args

        key, checked, cap, window_s, now = check_units_args(key, groups, cap, window_s, now)
        return self._admit_units(key, checked, cap, window_s, now)

    def _admit_units(self, key: str, groups: list[Any], cap: int, window_s: float,
                     now: float) -> tuple[list[bool], int, int]:
        raise NotImplementedError

    def seen(self, key: str, *, window_s: float, now: float) -> int:
        """See :meth:`BudgetStore.seen`."""
        _check_str("key", key)
        return self._seen(
            key, _check_real("window_s", window_s, positive=True), _check_real("now", now, positive=False)
        )

    def reset(self, key: str | None = None) -> None:
        """See :meth:`BudgetStore.reset`."""
        if key is not None:
            _check_str("key", key)
        self._reset(key)

    def entries_by_prefix(self, prefix: str, *, window_s: float, now: float) -> dict[str, frozenset[str]]:
        """Return every key starting with ``prefix`` that holds ids within the window, with its ids.

        Read-only: nothing expires, nothing is refreshed (the Redis store only drops its listing
        index's entries for keys already gone). A key's window ends at ``max(now, its
        newest timestamp)``, as in :meth:`BudgetStore.admit`, so the ids returned are exactly those
        an admission at ``now`` would admit again. Keys whose ids all fall outside are left out.
        """
        _check_str("prefix", prefix, empty_ok=True)
        return self._entries_by_prefix(
            prefix, _check_real("window_s", window_s, positive=True), _check_real("now", now, positive=False)
        )

    def _entries_by_prefix(self, prefix: str, window_s: float, now: float) -> dict[str, frozenset[str]]:
        raise NotImplementedError

    def _admit_many(
        self, requests: list[tuple[str, list[str], int]], window_s: float, now: float
    ) -> list[tuple[list[bool], int, int]]:
        raise NotImplementedError

    def _admit_points(
        self, keys: list[tuple[str, int]], points: list[tuple[str, list[int]]], window_s: float, now: float
    ) -> tuple[list[bool], list[tuple[int, int]]]:
        raise NotImplementedError

    def _seen(self, key: str, window_s: float, now: float) -> int:
        raise NotImplementedError

    def _reset(self, key: str | None) -> None:
        raise NotImplementedError


# Listings the memory store keeps (one per principal and collection read lately): past it, all go.
_LISTINGS_KEPT = 1024
