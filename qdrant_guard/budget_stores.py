"""The extraction budget's stores: the :class:`BudgetStore` protocol, the argument checks and point-id
normalisation they share, and the in-process and SQLite stores. Each applies one admission
atomically (a lock, or one ``BEGIN IMMEDIATE`` transaction); the Redis store is in
:mod:`qdrant_guard.budget_redis`. :mod:`qdrant_guard.budget` re-exports the public names.
"""
from __future__ import annotations

import functools
import math
import os
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from .budget_file_access import create_private, unsafe_store_file
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
    kind = type(members)
    if kind is not list and kind is not tuple:
        return False
    for k in members:  # type: ignore[attr-defined]
        if type(k) is not int or not 0 <= k < nkeys:
            return False
    return len(members) < 2 or len(set(members)) == len(members)  # type: ignore[arg-type]


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
        return _normalize_uuid_text(point_id)  # type: ignore[arg-type]
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


# Keys an admission's sweep may examine on top of two per key the admission touched: enough that
# the sweep drops idle keys faster than admissions add new ones.
_SWEEP_STEP = 8

# Listings the memory store keeps (one per principal and collection read lately): past it, all go.
_LISTINGS_KEPT = 1024


class MemoryBudgetStore(_CountingStore):
    """In-process store: a dict of insertion-ordered maps behind one lock.

    Each key keeps its ids ordered by timestamp, so expiry pops from the front and every
    admission costs O(1) amortised per id. Not shared between processes; lost on restart.

    Keys whose every id has left the window are dropped by a sweep that each admission runs on a
    few keys (amortised O(1) per key admitted), so the store holds about the keys admitted to
    within the last window, not every key the process ever admitted. A key is dropped only when
    both clocks agree that it is idle, as a Redis TTL would: on the callers' clock (``now``), its
    newest timestamp is more than the largest ``window_s`` the store has been called with before
    the sweep's ``now``, so every call at a later ``now`` would forget all its ids anyway; and on
    ``monotonic``, that window (plus how far its newest timestamp was ahead of ``now``) has passed
    since its last admission, so a wall clock that jumps ahead drops nothing early.

    Args:
        monotonic: the clock the sweep measures idle time with (seconds); injectable for tests.
    """

    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        if not callable(monotonic):
            raise GuardArgumentTypeError(f"monotonic must be callable, not {type(monotonic).__name__}")
        self._lock = threading.Lock()
        self._keys: dict[str, OrderedDict[str, float]] = {}
        # Key -> keys by their part up to the last "|" (the budget's principal|collection| group),
        # so listing one principal's sources in a collection does not walk every key.
        self._groups: dict[str, set[str]] = {}
        # Key -> frozenset of its ids, kept while they stay the same: every budgeted read lists all
        # of the principal's sources (entries_by_prefix), and most of them did not change since.
        # Dropped wherever an id is added or removed (admissions, expiry, _drop, reset).
        self._frozen: dict[str, frozenset[str]] = {}
        # Key -> (oldest, newest timestamp, frozenset) of its entries, kept while they stay the same:
        # the listing's window check then needs no pass over them. Dropped wherever an entry is
        # added, refreshed or removed (_put after every admission, expiry, _drop, reset).
        self._spans: dict[str, tuple[float, float, frozenset[str]]] = {}
        # Prefix -> (window_s, oldest timestamp, listing) of a listing whose keys all form the group
        # that is the prefix, every id in the window: a budgeted read lists all of its principal's
        # sources, and between two reads the ids seldom change. Dropped for a key's group wherever
        # its ids change (_changed) and wholesale when a group is made; while kept, the listing
        # holds for a ``now`` with max(now, _latest) - window_s <= its oldest timestamp, since a
        # refresh without new ids only moves a key's oldest timestamp later.
        self._listings: dict[str, tuple[float, float, dict[str, frozenset[str]]]] = {}
        # No timestamp stored is later than this: a timestamp is an admission's now, or later only
        # when the key's newest already was.
        self._latest = -math.inf
        # The sweep's queue: key -> the monotonic time its newest timestamp stands for, in the
        # order of the keys' last admissions (oldest first). Holds exactly the keys of _keys.
        self._idle: OrderedDict[str, float] = OrderedDict()
        # The largest window_s any call has used: the sweep must not drop ids a caller with a longer
        # window than the admission's would still count (one store serves every collection's window).
        self._window = 0.0
        self._monotonic = monotonic
        from .budget_units import MemoryUnits

        self._units = MemoryUnits()

    def _admit_units(self, key: str, groups: list[Any], cap: int, window_s: float,
                     now: float) -> tuple[list[bool], int, int]:
        with self._lock:
            return self._units.admit(key, groups, cap, window_s, now)

    def key_count(self) -> int:
        """How many keys the store holds: those with ids in the window, and idle ones the sweep
        has not reached yet."""
        with self._lock:
            return len(self._keys)

    def _changed(self, key: str) -> None:
        # The ids of key were added to or taken from.
        self._frozen.pop(key, None)
        if self._listings:
            self._listings.pop(key[: key.rfind("|") + 1], None)

    def _put(self, key: str, entries: OrderedDict[str, float], due: float | None = None) -> None:
        # due: the monotonic time the key's newest timestamp stands for (now, without one).
        self._spans.pop(key, None)
        if key not in self._keys:
            group = key[: key.rfind("|") + 1]
            members = self._groups.get(group)
            if members is None:
                members = self._groups[group] = set()
                self._listings.clear()  # a kept listing of a shorter prefix may now miss its keys
            members.add(key)
            self._changed(key)
        self._keys[key] = entries
        idle = self._idle
        idle[key] = self._monotonic() if due is None else due
        idle.move_to_end(key)

    def _drop(self, key: str) -> None:
        self._changed(key)
        self._spans.pop(key, None)
        self._idle.pop(key, None)
        if self._keys.pop(key, None) is not None:
            group = key[: key.rfind("|") + 1]
            members = self._groups[group]
            members.discard(key)
            if not members:
                del self._groups[group]

    def _sweep(self, now: float, mono: float, budget: int) -> None:
        # Look at up to `budget` of the least recently admitted keys; drop those both clocks call idle.
        idle, keys, window = self._idle, self._keys, self._window
        for _ in range(budget):
            if not idle:
                return
            key, due = next(iter(idle.items()))
            if due + window >= mono:
                # Admitted within a window, and the keys behind it later (but for those moved to
                # the back below, which wait their turn).
                return
            if next(reversed(keys[key].values())) < now - window:
                self._drop(key)
            else:
                # The callers' clock says its ids still count (a newest timestamp ahead of now, a
                # caller whose clock is behind): look again when it next comes to the front.
                idle.move_to_end(key)

    def _expire(self, key: str, window_s: float, now: float) -> tuple[OrderedDict[str, float] | None, float]:
        entries = self._keys.get(key)
        if entries is None:
            return None, now
        # The newest entry is last (timestamps are monotonic per key), so time never runs back.
        now = max(now, next(reversed(entries.values())))
        cutoff = now - window_s
        while entries and next(iter(entries.values())) < cutoff:
            entries.popitem(last=False)
            self._changed(key)
            self._spans.pop(key, None)
        if not entries:
            self._drop(key)
            return None, now
        return entries, now

    def _expire_listed(self, key: str, window_s: float, now: float) -> tuple[OrderedDict[str, float] | None, float]:
        # _expire, answered from the key's kept span when it has one and nothing is due to expire
        # (the time _expire would use: time never runs back past the newest entry): a read's
        # admission follows its listing or an admission of the key, which keep its span.
        span = self._spans.get(key)
        if span is not None:
            stamp = now if now > span[1] else span[1]
            if span[0] >= stamp - window_s:
                return self._keys[key], stamp
        return self._expire(key, window_s, now)

    def _admit_many(
        self, requests: list[tuple[str, list[str], int]], window_s: float, now: float
    ) -> list[tuple[list[bool], int, int]]:
        with self._lock:
            self._window = max(self._window, window_s)
            if now > self._latest:
                self._latest = now
            mono = self._monotonic()
            out = [self._admit_locked(key, ids, cap, window_s, now, mono) for key, ids, cap in requests]
            self._sweep(now, mono, _SWEEP_STEP + 2 * len(requests))
            return out

    def _admit_locked(self, key: str, ids: list[str], cap: int, window_s: float, at: float,
                      mono: float) -> tuple[list[bool], int, int]:
        entries, now = self._expire(key, window_s, at)
        if entries is None:
            entries = OrderedDict()
        before = len(entries)
        flags = []
        for pid in ids:
            if pid in entries:
                entries[pid] = now
                entries.move_to_end(pid)
                flags.append(True)
            elif len(entries) < cap:
                entries[pid] = now
                flags.append(True)
            else:
                flags.append(False)
        if len(entries) != before:  # after _expire, ids are only added
            self._changed(key)
        if entries:
            self._put(key, entries, mono + (now - at))
        return flags, before, len(entries)

    def _admit_points(
        self, keys: list[tuple[str, int]], points: list[tuple[str, list[int]]], window_s: float, now: float
    ) -> tuple[list[bool], list[tuple[int, int]]]:
        with self._lock:
            self._window = max(self._window, window_s)
            if now > self._latest:
                self._latest = now
            mono = self._monotonic()
            live = [self._expire_listed(key, window_s, now) for key, _ in keys]
            sets = [entries if entries is not None else OrderedDict() for entries, _ in live]
            before = [len(entries) for entries in sets]
            released = []
            for pid, members in points:
                if len(members) == 1:  # a point of one source: the test below without a generator
                    k = members[0]
                    ok = pid in sets[k] or len(sets[k]) < keys[k][1]
                else:
                    ok = all(pid in sets[k] or len(sets[k]) < keys[k][1] for k in members)
                if ok:
                    for k in members:
                        sets[k][pid] = live[k][1]
                        sets[k].move_to_end(pid)
                released.append(ok)
            held, idle, spans, frozen_ids = self._keys, self._idle, self._spans, self._frozen
            for (key, _), entries, count, (_, stamp) in zip(keys, sets, before, live):
                if len(entries) != count:  # after _expire, ids are only added
                    self._changed(key)
                if not entries:
                    continue
                if key in held:  # _put of a key held, inline: a read admits each source it returns
                    held[key] = entries
                    idle[key] = mono + (stamp - now)
                    idle.move_to_end(key)
                else:
                    self._put(key, entries, mono + (stamp - now))
                frozen = frozen_ids.get(key)
                if frozen is not None:
                    # The key's span kept anew (as _live_ids keeps it): the next admission of the
                    # key then needs no pass over its entries to know none has expired.
                    values = entries.values()
                    spans[key] = (next(iter(values)), next(reversed(values)), frozen)
                else:
                    spans.pop(key, None)
            self._sweep(now, mono, _SWEEP_STEP + 2 * len(keys))
            return released, [(b, len(entries)) for b, entries in zip(before, sets)]

    def _seen(self, key: str, window_s: float, now: float) -> int:
        with self._lock:
            self._window = max(self._window, window_s)
            entries, _ = self._expire(key, window_s, now)
            return len(entries) if entries else 0

    def _reset(self, key: str | None) -> None:
        with self._lock:
            self._units.reset(key)
            if key is None:
                self._keys.clear()
                self._groups.clear()
                self._frozen.clear()
                self._spans.clear()
                self._listings.clear()
                self._idle.clear()
            else:
                self._drop(key)

    def _entries_by_prefix(self, prefix: str, window_s: float, now: float) -> dict[str, frozenset[str]]:
        with self._lock:
            self._window = max(self._window, window_s)
            kept = self._listings.get(prefix)
            if kept is not None and kept[0] == window_s \
                    and (now if now > self._latest else self._latest) - window_s <= kept[1]:
                return dict(kept[2])
            # A key starts with prefix only if its group does, or the prefix runs past its group.
            keys: list[str] = []
            whole = True  # every key listed is of the group that is the prefix
            for group, members in self._groups.items():
                if group.startswith(prefix):
                    keys.extend(members)  # each key starts with its group
                    whole = whole and group == prefix
                elif prefix.startswith(group):
                    keys.extend(key for key in members if key.startswith(prefix))
                    whole = False
            found = {}
            spans = self._spans
            lowest = math.inf
            for key in keys:
                # _expire_listed's span test inline: a read lists every source of its principal.
                span = spans.get(key)
                if span is None or span[0] < (now if now > span[1] else span[1]) - window_s:
                    ids = self._live_ids(key, window_s, now)
                    span = spans.get(key)  # kept by _live_ids when every id is in the window
                    if span is None or span[0] < (now if now > span[1] else span[1]) - window_s:
                        whole = False
                else:
                    ids = span[2]
                if whole and span[0] < lowest:  # type: ignore[index]
                    lowest = span[0]  # type: ignore[index]
                if ids:
                    found[key] = ids
            if whole and keys:
                if len(self._listings) >= _LISTINGS_KEPT:
                    self._listings.clear()
                self._listings[prefix] = (window_s, lowest, found)
                return dict(found)
        return found

    def _live_ids(self, key: str, window_s: float, now: float) -> frozenset[str]:
        # Entries are in timestamp order (oldest first): when the oldest is still in the window, so
        # is every id, which is the common case and needs no pass over the timestamps.
        entries = self._keys[key]
        if entries:
            values = entries.values()
            oldest, newest = next(iter(values)), next(reversed(values))
            if oldest >= max(now, newest) - window_s:
                frozen = self._frozen.get(key)
                if frozen is None:
                    frozen = self._frozen[key] = frozenset(entries)
                self._spans[key] = (oldest, newest, frozen)
                return frozen
        return _in_window(entries.items(), window_s, now)


_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS qg_budget (
    key TEXT NOT NULL,
    pid TEXT NOT NULL,
    ts  REAL NOT NULL,
    PRIMARY KEY (key, pid)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS qg_budget_key_ts ON qg_budget (key, ts);
CREATE INDEX IF NOT EXISTS qg_budget_ts ON qg_budget (ts);
CREATE TABLE IF NOT EXISTS qg_budget_meta (
    name  TEXT PRIMARY KEY,
    value NOT NULL
) WITHOUT ROWID;
"""

# Rows an admission's sweep may delete on top of two per id the admission names: more than the
# admission can add, so the sweep keeps pace with the rows admissions write.
_SQLITE_SWEEP_STEP = 16


class SqliteBudgetStore(_CountingStore):
    """SQLite store: survives restarts and is exact across threads and processes.

    Each admission is one ``BEGIN IMMEDIATE`` transaction, which takes the database's write lock
    before reading, so two admissions to the same file never interleave. The database runs in WAL
    mode. Every thread (and every process after a fork) uses its own connection.

    Rows whose timestamp has left every window are deleted by a sweep that each admission runs in
    its own transaction, a bounded number of the oldest rows at a time (an index on the timestamp),
    so the file holds about the rows of the last window, not every row ever written. A row is
    deleted only when it is older than the sweep's time minus the longest ``window_s`` any store
    has used on the file (kept in the file, ``qg_budget_meta``, and raised in the same transaction
    that writes rows under a longer window, so a process with a longer window never loses ids it
    counts). The sweep's time is the smaller of ``now`` and a clock kept in the file that advances
    no faster than a monotonic clock runs (the process's own since it last saw the clock; with the
    default ``time.monotonic`` on Linux, also the system's since the file's clock last advanced on
    the same boot, so a stop of every process does not hold the sweep back), so a wall clock that
    jumps ahead deletes nothing early; and every call at a ``now`` no earlier, with a window no
    longer, would have forgotten the rows it deletes.

    Each thread's connection keeps the listings it read (:meth:`entries_by_prefix`, one per prefix
    ending in ``|``, such as a principal's sources in a collection) while nothing can have changed
    them: another connection's commit, in this process or another, changes ``PRAGMA data_version``
    (read before each listing; all of the connection's kept listings then go); the connection's own
    admissions drop the listings of a key's prefixes when they add or expire one of its ids, and
    resets drop them too; and a listing is given again only while every id in it is still in the
    window (the rule of :class:`MemoryBudgetStore`'s kept listings). docs/security-testing.md has
    the argument. Writes made through :meth:`_connection` itself, outside the store, are not seen.

    Args:
        path: the database file; created if missing, mode 600. ``":memory:"`` is refused because
            each connection would see a different database (use :class:`MemoryBudgetStore`).
        timeout_s: how long an admission waits for another writer before failing.
        monotonic: the clock the sweep measures elapsed time with (seconds); injectable for tests.

    Raises:
        BudgetStoreError: the database cannot be opened, or other users could rewrite it: it or a
            side file (``-journal``, ``-wal``, ``-shm``) is writable by group or others (``chmod
            go-w``) or owned by a uid that is neither this process's nor root (``chown``), or its
            directory is writable by others or owned by such a uid, or lies below a directory
            anyone may write without the sticky bit (:mod:`qdrant_guard.budget_file_access`).
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 30.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        path = os.fspath(path)
        if not isinstance(path, str):
            raise GuardArgumentTypeError(f"path must be a str or os.PathLike[str], not {type(path).__name__}")
        if path in ("", ":memory:") or path.startswith("file::memory:"):
            raise GuardArgumentValueError(
                f"SqliteBudgetStore needs a file path, got {path!r}; use MemoryBudgetStore for an in-process budget"
            )
        self.path = path
        # Each thread and forked child opens its own connection later: a relative path would then
        # name a file in whatever the working directory has become, unchecked.
        self._file = os.path.abspath(path)
        self._timeout_s = _check_real("timeout_s", timeout_s, positive=True)
        unsafe = unsafe_store_file(path)
        if unsafe is not None:
            raise BudgetStoreError(unsafe)
        create_private(path)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        if not callable(monotonic):
            raise GuardArgumentTypeError(f"monotonic must be callable, not {type(monotonic).__name__}")
        self._monotonic = monotonic
        # The longest window_s this object has recorded in the file (committed), so an admission
        # writes the meta row only when its window is longer.
        self._window = 0.0
        # (the file's sweep clock, the monotonic time it was read or set): this process may advance
        # the clock by as much as its monotonic clock has run since. None until the first sweep.
        self._anchor: tuple[float, float] | None = None
        # With the system's monotonic clock (shared by the processes of one boot), the file also
        # keeps the monotonic time of its clock's last advance and the boot's id, so a process
        # started after every other had stopped advances the clock by the time they were down
        # (otherwise each such gap would hold the sweep back for good).
        self._boot = _boot_id() if monotonic is time.monotonic else None
        try:
            from .budget_units import SQLITE_UNITS_SCHEMA

            self._connection().executescript(_SQLITE_SCHEMA + SQLITE_UNITS_SCHEMA)
        except sqlite3.Error as exc:
            raise BudgetStoreError(f"cannot create the budget table in {path!r}: {exc}") from exc

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            try:
                conn = sqlite3.connect(self._file, timeout=self._timeout_s, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise BudgetStoreError(f"cannot open budget database {self.path!r}: {exc}") from exc
            self._local.conn, self._local.pid = conn, os.getpid()
            self._local.kept = _KeptListings()  # a new connection has seen no data_version yet
            with self._all_lock:
                self._all.append(conn)
        return conn

    def _transaction(self) -> "_SqliteTransaction":
        return _SqliteTransaction(self._connection(), self.path)

    def _expire(self, db: sqlite3.Connection, key: str, window_s: float, now: float) -> float:
        (newest,) = db.execute("SELECT MAX(ts) FROM qg_budget WHERE key = ?", (key,)).fetchone()
        if newest is not None and newest > now:
            now = newest
        if db.execute("DELETE FROM qg_budget WHERE key = ? AND ts < ?", (key, now - window_s)).rowcount:
            self._local.kept.changed(key)  # in the transaction: a failed commit only drops a listing early
        return now

    @staticmethod
    def _count(db: sqlite3.Connection, key: str) -> int:
        return int(db.execute("SELECT COUNT(*) FROM qg_budget WHERE key = ?", (key,)).fetchone()[0])

    def _admit_many(
        self, requests: list[tuple[str, list[str], int]], window_s: float, now: float
    ) -> list[tuple[list[bool], int, int]]:
        with self._transaction() as db:
            self._local.kept.admitting(now)
            self._note_window(db, window_s)
            out = [self._admit_in(db, key, ids, cap, window_s, now) for key, ids, cap in requests]
            self._sweep(db, now, _SQLITE_SWEEP_STEP + 2 * sum(len(ids) for _, ids, _ in requests))
        self._noted(window_s)
        return out

    def _admit_units(self, key: str, groups: list[Any], cap: int, window_s: float,
                     now: float) -> tuple[list[bool], int, int]:
        from .budget_units import sqlite_admit

        with self._transaction() as db:
            return sqlite_admit(db, key, groups, cap, window_s, now)

    def key_count(self) -> int:
        """How many keys the file holds: those with ids in the window, and idle ones the sweep has
        not reached yet. Reads every row's key (a diagnostic, not for each request)."""
        try:
            return int(self._connection().execute(
                "SELECT COUNT(*) FROM (SELECT DISTINCT key FROM qg_budget)").fetchone()[0])
        except sqlite3.Error as exc:
            raise BudgetStoreError(f"budget database {self.path!r}: {exc}") from exc

    def _note_window(self, db: sqlite3.Connection, window_s: float) -> None:
        # In the transaction that writes rows under window_s: no sweep, in any process, can then
        # delete a row this window still counts.
        if window_s > self._window:  # no upsert: SQLite before 3.24 has none
            db.execute("INSERT OR IGNORE INTO qg_budget_meta (name, value) VALUES ('window', ?)", (window_s,))
            db.execute("UPDATE qg_budget_meta SET value = ? WHERE name = 'window' AND value < ?", (window_s, window_s))

    def _noted(self, window_s: float) -> None:
        # After the commit: a rolled-back transaction must not leave the window counted as recorded.
        self._window = max(self._window, window_s)

    def _sweep(self, db: sqlite3.Connection, now: float, limit: int) -> None:
        meta = dict(db.execute("SELECT name, value FROM qg_budget_meta").fetchall())
        window = meta.get("window")
        if window is None:
            return
        mono = self._monotonic()
        clock = meta.get("clock")
        if not isinstance(clock, float):
            # The first sweep of this file: start at the newest row's timestamp (an existing file's
            # last admission), or now on an empty one, whichever is earlier.
            (newest,) = db.execute("SELECT MAX(ts) FROM qg_budget").fetchone()
            clock = now if newest is None or newest > now else float(newest)
            self._set_clock(db, clock, mono)
            self._anchor = (clock, mono)
        else:
            # Advance no further than a monotonic clock has run since the clock was seen (this
            # process's, or the file's own on the same boot), so a jump ahead of now does not carry
            # it; nor past now; never back.
            ahead = None
            if self._anchor is not None:
                seen, at = self._anchor
                ahead = seen + (mono - at)
            advanced_at = meta.get("mono")
            if self._boot is not None and meta.get("boot") == self._boot and isinstance(advanced_at, float):
                if ahead is None or clock + (mono - advanced_at) > ahead:
                    ahead = clock + (mono - advanced_at)
            if ahead is None or ahead <= clock:
                self._anchor = (clock, mono)  # the file's clock is as far as this process could take it
            else:
                if ahead > now:
                    ahead = now
                # Written only once it has moved a thousandth of the window (the sweep then lags
                # by at most that): most admissions then write nothing to the meta table.
                if ahead >= clock + window / 1000:
                    clock = ahead
                    self._set_clock(db, clock, mono)
                    self._anchor = (clock, mono)
                # else keep the anchor: the time it has measured still counts at the next sweep.
        if self._anchor is None:
            self._anchor = (clock, mono)
        # A caller whose now is behind the clock (a step back) deletes only what its own
        # admissions would.
        cutoff = (now if now < clock else clock) - window
        db.execute("DELETE FROM qg_budget WHERE (key, pid) IN "
                   "(SELECT key, pid FROM qg_budget WHERE ts < ? ORDER BY ts LIMIT ?)", (cutoff, limit))

    def _set_clock(self, db: sqlite3.Connection, clock: float, mono: float) -> None:
        db.execute("INSERT OR REPLACE INTO qg_budget_meta (name, value) VALUES ('clock', ?)", (clock,))
        if self._boot is not None:
            db.execute("INSERT OR REPLACE INTO qg_budget_meta (name, value) VALUES ('mono', ?)", (mono,))
            db.execute("INSERT OR REPLACE INTO qg_budget_meta (name, value) VALUES ('boot', ?)", (self._boot,))
        else:  # a monotonic time of another clock would not mean anything to the next process
            db.execute("DELETE FROM qg_budget_meta WHERE name IN ('mono', 'boot')")

    def _admit_in(self, db: sqlite3.Connection, key: str, ids: list[str], cap: int, window_s: float,
                  now: float) -> tuple[list[bool], int, int]:
        now = self._expire(db, key, window_s, now)
        count = before = self._count(db, key)
        flags = []
        for pid in ids:
            if db.execute("UPDATE qg_budget SET ts = ? WHERE key = ? AND pid = ?", (now, key, pid)).rowcount:
                flags.append(True)
            elif count < cap:
                db.execute("INSERT INTO qg_budget (key, pid, ts) VALUES (?, ?, ?)", (key, pid, now))
                count += 1
                flags.append(True)
            else:
                flags.append(False)
        if count != before:
            self._local.kept.changed(key)
        return flags, before, count

    def _admit_points(
        self, keys: list[tuple[str, int]], points: list[tuple[str, list[int]]], window_s: float, now: float
    ) -> tuple[list[bool], list[tuple[int, int]]]:
        with self._transaction() as db:
            kept = self._local.kept
            kept.admitting(now)
            self._note_window(db, window_s)
            stamps = [self._expire(db, key, window_s, now) for key, _ in keys]
            counts = [self._count(db, key) for key, _ in keys]
            before = list(counts)
            released = []
            for pid, members in points:
                held = {k for k in members if db.execute(
                    "SELECT 1 FROM qg_budget WHERE key = ? AND pid = ?", (keys[k][0], pid)).fetchone()}
                ok = all(k in held or counts[k] < keys[k][1] for k in members)
                if ok:
                    for k in members:
                        if k in held:
                            db.execute("UPDATE qg_budget SET ts = ? WHERE key = ? AND pid = ?", (stamps[k], keys[k][0], pid))
                        else:
                            db.execute("INSERT INTO qg_budget (key, pid, ts) VALUES (?, ?, ?)", (keys[k][0], pid, stamps[k]))
                            counts[k] += 1
                released.append(ok)
            for (key, _), count, was in zip(keys, counts, before):
                if count != was:
                    kept.changed(key)
            # The sweep's deletions need no drop: a row it deletes is older than this admission's
            # now minus the file's longest window, and no kept listing holding it can be given again.
            self._sweep(db, now, _SQLITE_SWEEP_STEP + 2 * sum(len(members) for _, members in points))
        self._noted(window_s)
        return released, list(zip(before, counts))

    def _seen(self, key: str, window_s: float, now: float) -> int:
        with self._transaction() as db:
            self._note_window(db, window_s)
            self._expire(db, key, window_s, now)
            count = self._count(db, key)
        self._noted(window_s)
        return count

    def _entries_by_prefix(self, prefix: str, window_s: float, now: float) -> dict[str, frozenset[str]]:
        # One SELECT reads one snapshot (WAL) and walks the primary key from the prefix on, so it
        # needs no write lock; rows come ordered by key, and the first key past the prefix ends it.
        if window_s > self._window:  # once per longer window: a listing then reads no row swept under a shorter one
            with self._transaction() as db:
                self._note_window(db, window_s)
            self._noted(window_s)
        conn = self._connection()
        kept = self._local.kept
        rows: dict[str, list[tuple[str, float]]] = {}
        oldest, newest = math.inf, -math.inf
        try:
            # Read before the listing: a commit between the two then makes the version read later differ.
            (version,) = conn.execute("PRAGMA data_version").fetchone()
            found = kept.get(version, prefix, window_s, now)
            if found is not None:
                return dict(found)
            for key, pid, ts in conn.execute(
                    "SELECT key, pid, ts FROM qg_budget WHERE key >= ? ORDER BY key", (prefix,)):
                if not key.startswith(prefix):
                    break
                rows.setdefault(key, []).append((pid, ts))
                if ts < oldest:
                    oldest = ts
                if ts > newest:
                    newest = ts
        except sqlite3.Error as exc:
            raise BudgetStoreError(f"budget database {self.path!r}: {exc}") from exc
        found = {key: _in_window(entries, window_s, now) for key, entries in rows.items()}
        found = {key: ids for key, ids in found.items() if ids}
        if oldest >= (now if now > newest else newest) - window_s:  # every id listed: none left out
            kept.keep(prefix, window_s, oldest, found)
            return dict(found)
        return found

    def _reset(self, key: str | None) -> None:
        with self._transaction() as db:
            if key is None:
                self._local.kept.by_prefix.clear()
                db.execute("DELETE FROM qg_budget")
                db.execute("DELETE FROM qg_budget_units")
            else:
                self._local.kept.changed(key)
                db.execute("DELETE FROM qg_budget WHERE key = ?", (key,))
                db.execute("DELETE FROM qg_budget_units WHERE key = ?", (key,))

    def close(self) -> None:
        """Close every connection this store opened (in this process)."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


class _KeptListings:
    """One SQLite connection's kept listings: prefix -> (window_s, oldest timestamp listed, the
    listing), each holding every id its keys had, all in the window (so its newest timestamp
    minus window_s was at most its oldest), as of ``PRAGMA data_version`` ``version`` on this
    connection (which other connections' commits change, and this one's do not)."""

    __slots__ = ("version", "latest", "by_prefix")

    def __init__(self) -> None:
        self.version: int | None = None
        # The latest now of this connection's admissions: a refresh of an id of a kept listing
        # stamps it with max(that now, its key's newest), so its key's window ends at most at
        # max(latest, the listing's newest).
        self.latest = -math.inf
        self.by_prefix: dict[str, tuple[float, float, dict[str, frozenset[str]]]] = {}

    def get(self, version: int, prefix: str, window_s: float, now: float) -> dict[str, frozenset[str]] | None:
        """The kept listing of ``prefix`` if it is still exact at ``now``, else None."""
        if version != self.version:
            self.by_prefix.clear()
            self.version = version
            return None
        kept = self.by_prefix.get(prefix)
        if kept is None or kept[0] != window_s:
            return None
        window, oldest, found = kept
        # Since it was listed, ids were only refreshed (a later timestamp): every id listed is at
        # least as recent as oldest, and each key's window ends at most at max(now, latest, the
        # listing's newest), whose last term is within the window of oldest already.
        end = now if now > self.latest else self.latest
        return found if end - window <= oldest else None

    def keep(self, prefix: str, window_s: float, oldest: float, found: dict[str, frozenset[str]]) -> None:
        if not prefix.endswith("|"):
            return  # changed() finds the prefixes of a key at its "|"s
        if len(self.by_prefix) >= _LISTINGS_KEPT:
            self.by_prefix.clear()
        self.by_prefix[prefix] = (window_s, oldest, found)

    def admitting(self, now: float) -> None:
        if now > self.latest:
            self.latest = now

    def changed(self, key: str) -> None:
        """Drop the listings that hold ``key``: an id of it was added or removed."""
        if self.by_prefix:
            end = key.find("|")
            while end >= 0:
                self.by_prefix.pop(key[: end + 1], None)
                end = key.find("|", end + 1)


def _boot_id() -> str | None:
    # Linux names each boot; elsewhere None, and only a process's own monotonic clock is used.
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except (OSError, ValueError):
        return None


class _SqliteTransaction:
    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self._conn, self._path = conn, path

    def __enter__(self) -> sqlite3.Connection:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise BudgetStoreError(f"budget database {self._path!r} is unavailable: {exc}") from exc
        return self._conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            try:
                self._conn.execute("COMMIT")
                return
            except sqlite3.Error as commit_exc:
                self._rollback()
                raise BudgetStoreError(f"budget database {self._path!r}: commit failed: {commit_exc}") from commit_exc
        self._rollback()
        if isinstance(exc, sqlite3.Error):
            raise BudgetStoreError(f"budget database {self._path!r}: {exc}") from exc

    def _rollback(self) -> None:
        # SQLite rolls a transaction back by itself on some errors (a full disk, an I/O error, an
        # interrupt); a ROLLBACK then fails and must not replace the error that caused it.
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
