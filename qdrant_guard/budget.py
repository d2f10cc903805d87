"""Cross-query extraction budget: how many distinct points of a source a principal may ever see.

Per-query diversity (:mod:`qdrant_guard.diversity`) limits one query. An attacker who sends many
queries can still collect a restricted document chunk by chunk. The extraction budget counts,
per principal x collection x source, the *distinct* point ids returned within a sliding window
and withholds new ids once the count reaches the cap. Ids already seen in the window are always
admitted again (re-reading them reveals nothing new), and seeing them refreshes their timestamp.

The count is exact: each store applies one admission atomically (a lock, one SQLite
``BEGIN IMMEDIATE`` transaction, or one Redis Lua script), so concurrent threads or processes
sharing a store can never admit more than ``cap`` distinct ids for one key within the window.

A point of several sources is admitted under all of them or none (``admit_points``): a point one
source withholds is not charged to the others, so what a source still releases says nothing
about withheld points.

Time per key never runs backwards: each admission uses ``max(now, newest timestamp stored for the
key)``. A clock that steps back (NTP, clocks of different hosts) therefore never shortens a window;
it can only keep entries slightly longer, which errs on the strict side.

Point ids are normalised before they are counted: an int ``5`` becomes ``"i:5"`` and a UUID in any
form Qdrant accepts becomes ``"u:"`` plus its lowercase hyphenated form, so the same point always
counts once.
"""
from __future__ import annotations

import functools
import heapq
import math
import os
import re
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from .diversity import _check_fraction, _check_int
from .errors import QdrantGuardError

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


class BudgetStoreError(QdrantGuardError, RuntimeError):
    """A budget store cannot be reached or used. Callers should fail closed (withhold)."""


# --- argument checks -------------------------------------------------------------------------


def _check_str(name: str, value: object, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value and not empty_ok:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def _check_count(name: str, value: object) -> int:
    return _check_int(name, value, 0)


def _check_real(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, not {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0.0):
        want = "a finite number > 0" if positive else "a finite number"
        raise ValueError(f"{name} must be {want}, got {value!r}")
    return value


def _check_request(key: object, point_ids: object, cap: object) -> tuple[str, list[str], int]:
    _check_str("key", key)
    if isinstance(point_ids, (str, bytes)) or not isinstance(point_ids, Sequence):
        raise TypeError(f"point_ids must be a sequence of str, not {type(point_ids).__name__}")
    ids = list(point_ids)
    for index, pid in enumerate(ids):
        if not isinstance(pid, str):
            raise TypeError(f"point_ids[{index}] must be a str, not {type(pid).__name__}")
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
        raise TypeError(f"keys must be a sequence of (key, cap), not {type(keys).__name__}")
    checked_keys = []
    for index, pair in enumerate(keys):
        if type(pair) is tuple and len(pair) == 2 and type(pair[0]) is str and pair[0] \
                and type(pair[1]) is int and pair[1] >= 0:
            checked_keys.append(pair)  # a plain (key, cap), as the checks below would pass it
            continue
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(f"keys[{index}] must be a (key, cap) tuple")
        checked_keys.append((_check_str("key", pair[0]), _check_count("cap", pair[1])))
    if len({key for key, _ in checked_keys}) != len(checked_keys):
        raise ValueError("keys must be distinct")
    if isinstance(points, (str, bytes)) or not isinstance(points, Sequence):
        raise TypeError(f"points must be a sequence of (point_id, key_indices), not {type(points).__name__}")
    checked_points = []
    nkeys = len(checked_keys)
    for index, pair in enumerate(points):
        if type(pair) is tuple and len(pair) == 2 and type(pair[0]) is str:
            members = pair[1]
            if type(members) is list and len(members) == 1 and type(members[0]) is int and 0 <= members[0] < nkeys:
                checked_points.append((pair[0], [members[0]]))  # one plain key index: _plain_members' case
                continue
        if not isinstance(pair, tuple) or len(pair) != 2 or not isinstance(pair[0], str):
            raise TypeError(f"points[{index}] must be a (str point_id, key_indices) tuple")
        members = pair[1]
        if _plain_members(members, nkeys):
            checked_points.append((pair[0], list(members)))
            continue
        if isinstance(members, (str, bytes)) or not isinstance(members, Sequence):
            raise TypeError(f"points[{index}] key_indices must be a sequence of int")
        members = [_check_int(f"points[{index}] key index", k, 0) for k in members]
        if any(k >= len(checked_keys) for k in members) or len(set(members)) != len(members):
            raise ValueError(f"points[{index}] key_indices must be distinct indices into keys")
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
        raise TypeError(f"point id must be an int, a UUID or a UUID string, not {type(point_id).__name__}")
    if isinstance(point_id, int):
        if point_id < 0:
            raise ValueError(f"point id must be an unsigned int, got {point_id}")
        return f"i:{point_id}"
    if isinstance(point_id, uuid.UUID):
        return f"u:{point_id}"
    return _normalize_uuid_text(str.__str__(point_id))  # a str subclass: read as its plain text


@functools.lru_cache(maxsize=4096)
def _normalize_uuid_text(point_id: str) -> str:
    # normalize_point_id of a plain str: parsing a UUID costs more than the rest of a read's
    # bookkeeping per point, and the same ids come back read after read. A ValueError is not cached.
    try:
        return f"u:{uuid.UUID(point_id)}"
    except ValueError:
        raise ValueError(
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
    raise ValueError(f"{normalised!r} is not a normalised point id ('i:<n>' or 'u:<uuid>')")


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
            raise TypeError(f"requests must be a sequence of (key, point_ids, cap), not {type(requests).__name__}")
        window_s = _check_real("window_s", window_s, positive=True)
        now = _check_real("now", now, positive=False)
        checked = []
        for index, request in enumerate(requests):
            if not isinstance(request, tuple) or len(request) != 3:
                raise TypeError(f"requests[{index}] must be a (key, point_ids, cap) tuple")
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


class MemoryBudgetStore(_CountingStore):
    """In-process store: a dict of insertion-ordered maps behind one lock.

    Each key keeps its ids ordered by timestamp, so expiry pops from the front and every
    admission costs O(1) amortised per id. Not shared between processes; lost on restart.
    """

    def __init__(self) -> None:
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

    def _put(self, key: str, entries: OrderedDict[str, float]) -> None:
        self._spans.pop(key, None)
        if key not in self._keys:
            self._groups.setdefault(key[: key.rfind("|") + 1], set()).add(key)
        self._keys[key] = entries

    def _drop(self, key: str) -> None:
        self._frozen.pop(key, None)
        self._spans.pop(key, None)
        if self._keys.pop(key, None) is not None:
            group = key[: key.rfind("|") + 1]
            members = self._groups[group]
            members.discard(key)
            if not members:
                del self._groups[group]

    def _expire(self, key: str, window_s: float, now: float) -> tuple[OrderedDict[str, float] | None, float]:
        entries = self._keys.get(key)
        if entries is None:
            return None, now
        # The newest entry is last (timestamps are monotonic per key), so time never runs back.
        now = max(now, next(reversed(entries.values())))
        cutoff = now - window_s
        while entries and next(iter(entries.values())) < cutoff:
            entries.popitem(last=False)
            self._frozen.pop(key, None)
            self._spans.pop(key, None)
        if not entries:
            self._drop(key)
            return None, now
        return entries, now

    def _kept_span(self, key: str, window_s: float, now: float) -> tuple[float, frozenset[str]] | None:
        # The key's kept span while every entry is still in the window: the time _expire would use
        # (time never runs back past the newest entry) and the ids. None: read the entries.
        span = self._spans.get(key)
        if span is None:
            return None
        oldest, newest, ids = span
        stamp = now if now > newest else newest
        return (stamp, ids) if oldest >= stamp - window_s else None

    def _expire_listed(self, key: str, window_s: float, now: float) -> tuple[OrderedDict[str, float] | None, float]:
        # _expire, answered from the key's kept span when it has one and nothing is due to expire:
        # a read's admission follows its listing, which keeps the span of every key it lists.
        kept = self._kept_span(key, window_s, now)
        if kept is not None:
            return self._keys[key], kept[0]
        return self._expire(key, window_s, now)

    def _admit_many(
        self, requests: list[tuple[str, list[str], int]], window_s: float, now: float
    ) -> list[tuple[list[bool], int, int]]:
        with self._lock:
            return [self._admit_locked(key, ids, cap, window_s, now) for key, ids, cap in requests]

    def _admit_locked(self, key: str, ids: list[str], cap: int, window_s: float, now: float) -> tuple[list[bool], int, int]:
        entries, now = self._expire(key, window_s, now)
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
            self._frozen.pop(key, None)
        if entries:
            self._put(key, entries)
        return flags, before, len(entries)

    def _admit_points(
        self, keys: list[tuple[str, int]], points: list[tuple[str, list[int]]], window_s: float, now: float
    ) -> tuple[list[bool], list[tuple[int, int]]]:
        with self._lock:
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
            for (key, _), entries, count in zip(keys, sets, before):
                if len(entries) != count:  # after _expire, ids are only added
                    self._frozen.pop(key, None)
                if entries:
                    self._put(key, entries)
            return released, [(b, len(entries)) for b, entries in zip(before, sets)]

    def _seen(self, key: str, window_s: float, now: float) -> int:
        with self._lock:
            entries, _ = self._expire(key, window_s, now)
            return len(entries) if entries else 0

    def _reset(self, key: str | None) -> None:
        with self._lock:
            if key is None:
                self._keys.clear()
                self._groups.clear()
                self._frozen.clear()
                self._spans.clear()
            else:
                self._drop(key)

    def _entries_by_prefix(self, prefix: str, window_s: float, now: float) -> dict[str, frozenset[str]]:
        with self._lock:
            # A key starts with prefix only if its group does, or the prefix runs past its group.
            keys: list[str] = []
            for group, members in self._groups.items():
                if group.startswith(prefix):
                    keys.extend(members)  # each key starts with its group
                elif prefix.startswith(group):
                    keys.extend(key for key in members if key.startswith(prefix))
            found = {}
            spans = self._spans
            for key in keys:
                # _kept_span inline: a read lists every source of its principal.
                span = spans.get(key)
                if span is not None:
                    oldest, newest, ids = span
                    if oldest >= (now if now > newest else newest) - window_s:
                        if ids:
                            found[key] = ids
                        continue
                ids = self._live_ids(key, window_s, now)
                if ids:
                    found[key] = ids
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
"""


class SqliteBudgetStore(_CountingStore):
    """SQLite store: survives restarts and is exact across threads and processes.

    Each admission is one ``BEGIN IMMEDIATE`` transaction, which takes the database's write lock
    before reading, so two admissions to the same file never interleave. The database runs in WAL
    mode. Every thread (and every process after a fork) uses its own connection.

    Args:
        path: the database file; created if missing. ``":memory:"`` is refused because each
            connection would see a different database (use :class:`MemoryBudgetStore`).
        timeout_s: how long an admission waits for another writer before failing.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 30.0) -> None:
        path = os.fspath(path)
        if not isinstance(path, str):
            raise TypeError(f"path must be a str or os.PathLike[str], not {type(path).__name__}")
        if path in ("", ":memory:") or path.startswith("file::memory:"):
            raise ValueError(
                f"SqliteBudgetStore needs a file path, got {path!r}; use MemoryBudgetStore for an in-process budget"
            )
        self.path = path
        self._timeout_s = _check_real("timeout_s", timeout_s, positive=True)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        try:
            self._connection().executescript(_SQLITE_SCHEMA)
        except sqlite3.Error as exc:
            raise BudgetStoreError(f"cannot create the budget table in {path!r}: {exc}") from exc

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            try:
                conn = sqlite3.connect(self.path, timeout=self._timeout_s, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise BudgetStoreError(f"cannot open budget database {self.path!r}: {exc}") from exc
            self._local.conn, self._local.pid = conn, os.getpid()
            with self._all_lock:
                self._all.append(conn)
        return conn

    def _transaction(self) -> "_SqliteTransaction":
        return _SqliteTransaction(self._connection(), self.path)

    @staticmethod
    def _expire(db: sqlite3.Connection, key: str, window_s: float, now: float) -> float:
        (newest,) = db.execute("SELECT MAX(ts) FROM qg_budget WHERE key = ?", (key,)).fetchone()
        if newest is not None and newest > now:
            now = newest
        db.execute("DELETE FROM qg_budget WHERE key = ? AND ts < ?", (key, now - window_s))
        return now

    @staticmethod
    def _count(db: sqlite3.Connection, key: str) -> int:
        return int(db.execute("SELECT COUNT(*) FROM qg_budget WHERE key = ?", (key,)).fetchone()[0])

    def _admit_many(
        self, requests: list[tuple[str, list[str], int]], window_s: float, now: float
    ) -> list[tuple[list[bool], int, int]]:
        with self._transaction() as db:
            return [self._admit_in(db, key, ids, cap, window_s, now) for key, ids, cap in requests]

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
        return flags, before, count

    def _admit_points(
        self, keys: list[tuple[str, int]], points: list[tuple[str, list[int]]], window_s: float, now: float
    ) -> tuple[list[bool], list[tuple[int, int]]]:
        with self._transaction() as db:
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
            return released, list(zip(before, counts))

    def _seen(self, key: str, window_s: float, now: float) -> int:
        with self._transaction() as db:
            self._expire(db, key, window_s, now)
            return self._count(db, key)

    def _entries_by_prefix(self, prefix: str, window_s: float, now: float) -> dict[str, frozenset[str]]:
        # One SELECT reads one snapshot (WAL) and walks the primary key from the prefix on, so it
        # needs no write lock; rows come ordered by key, and the first key past the prefix ends it.
        rows: dict[str, list[tuple[str, float]]] = {}
        try:
            for key, pid, ts in self._connection().execute(
                    "SELECT key, pid, ts FROM qg_budget WHERE key >= ? ORDER BY key", (prefix,)):
                if not key.startswith(prefix):
                    break
                rows.setdefault(key, []).append((pid, ts))
        except sqlite3.Error as exc:
            raise BudgetStoreError(f"budget database {self.path!r}: {exc}") from exc
        found = {key: _in_window(entries, window_s, now) for key, entries in rows.items()}
        return {key: ids for key, ids in found.items() if ids}

    def _reset(self, key: str | None) -> None:
        with self._transaction() as db:
            if key is None:
                db.execute("DELETE FROM qg_budget")
            else:
                db.execute("DELETE FROM qg_budget WHERE key = ?", (key,))

    def close(self) -> None:
        """Close every connection this store opened (in this process)."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


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


# The listing index. A Redis key name is the store's prefix plus the budget key. Next to them, under
# the same prefix (so in the same hash slot when the prefix carries a hash tag), the store keeps:
#   prefix + _INDEX + group: a ZSET per group, the part of a key up to and including its last "|"
#     ("" for keys without one). Its members are "=" + key for the group's keys and "/" + child
#     group for every group one "|" deeper, each scored with a time (Unix ms) at or after which
#     the member's key, or every key under the child group, has expired on the server.
#   prefix + _READY: present once every budget key of the prefix is in the index.
# Budget keys starting with _RESERVED are refused, so these names never meet a budget key.
_RESERVED = "\x00qg-"
_INDEX = "\x00qg-index\x00"
_READY = "\x00qg-index-ready"
# An upper bound for the expiry of a key the index meets without a TTL (ten years).
_NO_TTL_MS = 315_360_000_000

# Shared by the scripts that write budget keys. ARGV[4] = q, the number of index ZSETs, which are
# KEYS[m+1..m+q] after the m budget keys, deepest group first (children before parents). With
# q > 0, ARGV[5..] holds per budget key (its group's index position in 1..q, "=" .. key), then per
# index (its parent's position, 0 for the root group, "/" .. group). The script's own arguments
# start at ARGV[args_from(m)].
# index_update(m, ttls): ttls[k] is the TTL (ms) the script just gave KEYS[k], or false when the
# key is gone. A live key's member is raised to now + ttl (never lowered, so a score is always at
# or after its key's expiry), each group's marker in its parent likewise, every touched index
# drops the members whose time has passed and keeps a TTL past its newest member's; a gone key
# leaves its group's index.
_REDIS_INDEX_LUA = """
-- TIME before writes: Redis 5+ replicates a script's effects anyway; 3.2 and 4 need asking.
if redis.replicate_commands then redis.replicate_commands() end
local function args_from(m)
  local q = tonumber(ARGV[4])
  if q == 0 then return 5 end
  return 5 + 2 * m + 2 * q
end
local function index_update(m, ttls)
  local q = tonumber(ARGV[4])
  if q == 0 then return end
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local need = {}
  local function raise(ix, member, deadline)
    local cur = redis.call('ZSCORE', ix, member)
    if not cur or tonumber(cur) < deadline then
      redis.call('ZADD', ix, string.format('%.0f', deadline), member)
    end
  end
  for k = 1, m do
    local i = tonumber(ARGV[3 + 2 * k])
    if ttls[k] then
      local deadline = ms + ttls[k]
      raise(KEYS[m + i], ARGV[4 + 2 * k], deadline)
      if not need[i] or need[i] < deadline then need[i] = deadline end
    else
      redis.call('ZREM', KEYS[m + i], ARGV[4 + 2 * k])
    end
  end
  local base = 3 + 2 * m
  for i = 1, q do
    local ix = KEYS[m + i]
    redis.call('ZREMRANGEBYSCORE', ix, '-inf', '(' .. string.format('%.0f', ms))
    local deadline = need[i]
    if deadline then
      -- A second of slack: PEXPIRE counts from the server's clock as it reads it, not from ms.
      local left = deadline - ms + 1000
      if redis.call('PTTL', ix) < left then redis.call('PEXPIRE', ix, string.format('%.0f', left)) end
      local parent = tonumber(ARGV[base + 2 * i])
      if parent > 0 then
        raise(KEYS[m + parent], ARGV[base + 2 * i + 1], deadline)
        if not need[parent] or need[parent] < deadline then need[parent] = deadline end
      end
    end
  end
end
"""

# KEYS[1..m]: the ZSETs (member = point id, score = timestamp), one per admission, then the index.
# ARGV: now, window_s, ttl_ms, the index arguments, then per key: cap, n, id1, ..., idn
#   -> per key: {flags..., before, after}, concatenated
_REDIS_ADMIT = _REDIS_INDEX_LUA + """
local window = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local m = #KEYS - tonumber(ARGV[4])
local pos = args_from(m)
local out = {}
local ttls = {}
for k = 1, m do
  local key = KEYS[k]
  local cap = tonumber(ARGV[pos])
  local n = tonumber(ARGV[pos + 1])
  pos = pos + 2
  local now = tonumber(ARGV[1])
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > now then now = tonumber(newest[2]) end
  local stamp = string.format('%.17g', now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. string.format('%.17g', now - window))
  local count = redis.call('ZCARD', key)
  local before = count
  for i = pos, pos + n - 1 do
    local pid = ARGV[i]
    if redis.call('ZSCORE', key, pid) then
      redis.call('ZADD', key, stamp, pid)
      out[#out + 1] = 1
    elseif count < cap then
      redis.call('ZADD', key, stamp, pid)
      count = count + 1
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  end
  pos = pos + n
  -- Entries count until the newest one is a window old on the key's clock, which a clock that
  -- stepped back puts further away than one window.
  if count > 0 then
    ttls[k] = ttl + math.ceil((now - tonumber(ARGV[1])) * 1000)
    redis.call('PEXPIRE', key, string.format('%.0f', ttls[k]))
  else
    ttls[k] = false
  end
  out[#out + 1] = before
  out[#out + 1] = count
end
index_update(m, ttls)
return out
"""

# KEYS[1..m]: the ZSETs, one per source, then the index. ARGV: now, window_s, ttl_ms, the index
# arguments, cap1, ..., capm, then per point in rank order: id, n, k1, ..., kn (1-based indices
# into KEYS) -> {released flag per point..., then before, after per key}
_REDIS_ADMIT_POINTS = _REDIS_INDEX_LUA + """
local base = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local m = #KEYS - tonumber(ARGV[4])
local first = args_from(m)
local nows, stamps, caps, counts, before = {}, {}, {}, {}, {}
for k = 1, m do
  local now = base
  local newest = redis.call('ZRANGE', KEYS[k], -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > now then now = tonumber(newest[2]) end
  nows[k] = now
  stamps[k] = string.format('%.17g', now)
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', '(' .. string.format('%.17g', now - window))
  caps[k] = tonumber(ARGV[first + k - 1])
  counts[k] = redis.call('ZCARD', KEYS[k])
  before[k] = counts[k]
end
local out = {}
local pos = first + m
while pos <= #ARGV do
  local pid = ARGV[pos]
  local last = pos + 1 + tonumber(ARGV[pos + 1])
  local held, ok = {}, true
  for i = pos + 2, last do
    local k = tonumber(ARGV[i])
    held[k] = redis.call('ZSCORE', KEYS[k], pid) ~= false
    if not held[k] and counts[k] >= caps[k] then ok = false end
  end
  if ok then
    for i = pos + 2, last do
      local k = tonumber(ARGV[i])
      redis.call('ZADD', KEYS[k], stamps[k], pid)
      if not held[k] then counts[k] = counts[k] + 1 end
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
  pos = last + 1
end
local ttls = {}
for k = 1, m do
  if counts[k] > 0 then
    ttls[k] = ttl + math.ceil((nows[k] - base) * 1000)
    redis.call('PEXPIRE', KEYS[k], string.format('%.0f', ttls[k]))
  else
    ttls[k] = false
  end
  out[#out + 1] = before[k]
  out[#out + 1] = counts[k]
end
index_update(m, ttls)
return out
"""

# KEYS[1..m]: keys met by a SCAN, then the index. ARGV: 0, 0, 0, the index arguments. Puts every
# ZSET among them into the index with its current TTL (an upgrade from a store without index, and
# the second pass of reset()); writes nothing else.
_REDIS_REINDEX = _REDIS_INDEX_LUA + """
local m = #KEYS - tonumber(ARGV[4])
local ttls = {}
for k = 1, m do
  ttls[k] = false
  if redis.call('TYPE', KEYS[k]).ok == 'zset' then
    local left = redis.call('PTTL', KEYS[k])
    if left == -1 then left = tonumber(ARGV[5 + 2 * m + 2 * tonumber(ARGV[4])]) end
    if left >= 0 then ttls[k] = left end
  end
end
index_update(m, ttls)
return m
"""

_REDIS_SEEN = """
local key = KEYS[1]
local now = tonumber(ARGV[1])
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if newest[2] and tonumber(newest[2]) > now then now = tonumber(newest[2]) end
redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. string.format('%.17g', now - tonumber(ARGV[2])))
return redis.call('ZCARD', key)
"""

# KEYS[1]: the ready marker, then index ZSETs -> {marker exists, then per index its members}.
# Members whose time has passed are dropped first (their keys have expired).
_REDIS_LIST = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local ms = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local out = {redis.call('EXISTS', KEYS[1])}
for i = 2, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. ms)
  out[i] = redis.call('ZRANGE', KEYS[i], 0, -1)
end
return out
"""

# KEYS: q index ZSETs, then the budget ZSETs. ARGV: now, window_s, q, then per budget key (its
# index's position in 1..q, its member there) -> per budget key, the ids an admission at now
# would still count. Budget entries are only read; a key that no longer exists leaves its index.
_REDIS_INDEXED_ENTRIES = """
local q = tonumber(ARGV[3])
local out = {}
for k = q + 1, #KEYS do
  local now = tonumber(ARGV[1])
  local newest = redis.call('ZRANGE', KEYS[k], -1, -1, 'WITHSCORES')
  if newest[2] then
    if tonumber(newest[2]) > now then now = tonumber(newest[2]) end
    out[k - q] = redis.call('ZRANGEBYSCORE', KEYS[k], string.format('%.17g', now - tonumber(ARGV[2])), '+inf')
  else
    local j = k - q
    redis.call('ZREM', KEYS[tonumber(ARGV[2 + 2 * j])], ARGV[3 + 2 * j])
    out[j] = {}
  end
end
return out
"""

# KEYS: ZSETs; ARGV: now, window_s -> per key, the ids an admission at now would still count
# (read-only: nothing is removed). The listing without index (Redis Cluster, untagged prefix).
_REDIS_ENTRIES = """
local out = {}
for k = 1, #KEYS do
  local now = tonumber(ARGV[1])
  local newest = redis.call('ZRANGE', KEYS[k], -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > now then now = tonumber(newest[2]) end
  out[k] = redis.call('ZRANGEBYSCORE', KEYS[k], string.format('%.17g', now - tonumber(ARGV[2])), '+inf')
end
return out
"""

# KEYS: a budget ZSET, its group's index; ARGV: its member there.
_REDIS_RESET_KEY = """
redis.call('DEL', KEYS[1])
if KEYS[2] then redis.call('ZREM', KEYS[2], ARGV[1]) end
return 1
"""


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _group(key: str) -> str:
    # The part of a key up to and including its last "|": "src|p|c|" for "src|p|c|s".
    return key[: key.rfind("|") + 1]


def _parent(group: str) -> str:
    # The group one "|" up: "src|p|" for "src|p|c|"; "" for a group with one "|".
    return group[: group.rfind("|", 0, len(group) - 1) + 1]


def _one_slot(prefix: str) -> bool:
    # True when the prefix holds a whole hash tag ("{qg}:"), so every key under it, budget and
    # index alike, hashes to one slot.
    start = prefix.find("{")
    return start >= 0 and prefix.find("}", start + 1) > start + 1


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _name_text(value: Any) -> str | None:
    # A key name met by SCAN as text; None for a name that is not UTF-8, which no budget key has
    # (they are str): another writer's key under the prefix, passed over rather than failing.
    try:
        return _text(value)
    except UnicodeDecodeError:
        return None


class RedisBudgetStore(_CountingStore):
    """Redis store: one sorted set per key, one Lua script (EVALSHA) per admission.

    The script runs atomically on the server, so every client of the same Redis shares one exact
    budget. Each key also gets a TTL after every admission, so idle keys disappear server-side: the
    window plus how far the key's newest timestamp is ahead of ``now`` (a clock that stepped back),
    so the TTL never ends a window early; the window itself is enforced from the timestamps passed
    in ``now``.

    :meth:`entries_by_prefix` reads an index the admission scripts keep in the same atomic step:
    a sorted set per group (a key's part up to its last ``|``, the budget's
    ``src|principal|collection|``) naming the group's keys and its child groups. Listing the
    budget's prefix costs O(keys of that group), whatever else the Redis database holds: one
    script reads the group's index, one read-only script per 500 keys reads their ids. A prefix
    that is not a whole group reads its enclosing group's index (keys are then filtered by
    prefix) and descends into child groups that start with it, one round trip per level. Index
    members carry a time past their key's expiry: admissions and listings drop members whose time
    has passed, a listing also drops members whose key no longer exists, and an index's TTL
    outlasts its newest member, so the index holds about the live keys and no more. Each admission
    writes one index entry per ``|`` in its keys (four for a budget key). The index lives under the
    prefix, in keys starting with ``prefix + "\\x00qg-"``; budget keys starting with ``"\\x00qg-"``
    are refused (``ValueError``). Run Redis with a ``noeviction`` policy: an evicted index hides
    keys from listings until their next admission (as an evicted budget key loses its budget).

    Upgrading a store written by a version without the index: the first listing finds no
    ``prefix + "\\x00qg-index-ready"`` marker and indexes every key under the prefix with one
    ``SCAN`` of the database (once per prefix; the threads of a process wait for one run), then sets the
    marker (call :meth:`rebuild_index` at deployment so that no read waits for it). Keys that
    processes still running the old version create after that are not listed until a new version
    admits to them; call :meth:`rebuild_index` again once the rollout is complete.
    Listing never decides an admission: an unlisted key still counts in full when its source is
    read, so no principal gains budget; that read only excludes the source in a re-run instead of
    up front, and its admission indexes the key (docs/diversity-budget.md). :meth:`reset` without
    a key runs ``SCAN`` over the database twice (delete, then index what admissions wrote
    meanwhile).

    :meth:`admit_points` (several keys, all-or-none) is one script over all its keys. A Redis
    Cluster runs a script only over keys of one hash slot: there, keys of different slots are
    admitted one script per key and a point is released only where every key admitted it, which
    never lets a key count past its cap but leaves a point one key withheld charged to the others.
    Give a cluster a prefix with a hash tag (``prefix="{qg}:"``) to keep every key in one slot and
    admissions all-or-none, at the cost of one node holding the whole budget. Without a hash tag,
    a cluster keeps no index either (an index shares no slot with its keys): listing then runs
    ``SCAN`` over every key of every node, O(keys in the cluster) per budgeted read.

    Args:
        client_or_url: a ``redis.Redis`` client, or a URL for ``redis.Redis.from_url``.
        prefix: prepended to every budget key in Redis.

    Raises:
        BudgetStoreError: the ``redis`` package is not installed.
    """

    def __init__(self, client_or_url: Any, *, prefix: str = "qg:budget:") -> None:
        _check_str("prefix", prefix, empty_ok=True)
        try:
            import redis
            from redis.crc import key_slot
        except ImportError as exc:
            raise BudgetStoreError(
                "RedisBudgetStore needs the redis package: pip install 'redis>=5'"
            ) from exc
        self._redis_error = redis.RedisError
        if isinstance(client_or_url, str):
            client_or_url = redis.Redis.from_url(client_or_url)
        self.client = client_or_url
        self.prefix = prefix
        cluster = getattr(getattr(redis, "cluster", None), "RedisCluster", None)
        self._cluster = cluster is not None and isinstance(client_or_url, cluster)
        self._one_slot = _one_slot(prefix)
        self._key_slot = key_slot
        self._migrate_lock = threading.Lock()
        self._admit_script = self.client.register_script(_REDIS_ADMIT)
        self._points_script = self.client.register_script(_REDIS_ADMIT_POINTS)
        self._reindex_script = self.client.register_script(_REDIS_REINDEX)
        self._seen_script = self.client.register_script(_REDIS_SEEN)
        self._list_script = self.client.register_script(_REDIS_LIST)
        self._indexed_entries_script = self.client.register_script(_REDIS_INDEXED_ENTRIES)
        self._entries_script = self.client.register_script(_REDIS_ENTRIES)
        self._reset_script = self.client.register_script(_REDIS_RESET_KEY)

    @property
    def _indexed(self) -> bool:
        # A cluster runs a script over keys of one slot only: the index needs a hash-tag prefix.
        return not self._cluster or self._one_slot

    def _index_name(self, group: str) -> str:
        return self.prefix + _INDEX + group

    def _name(self, key: str) -> str:
        if key.startswith(_RESERVED):
            raise ValueError(f"key {key!r} is reserved: RedisBudgetStore keeps its index under keys starting with "
                             f"{_RESERVED!r}")
        return self.prefix + key

    def _run(self, script: Any, names: list[str], args: list[Any], what: Any) -> Any:
        try:
            return script(keys=names, args=args)
        except self._redis_error as exc:
            raise BudgetStoreError(f"redis budget store failed for {what}: {exc}") from exc

    def _call(self, script: Any, keys: list[str], args: list[Any],
              index_args: tuple[list[str], list[Any]] | None = None) -> Any:
        # Runs a script over budget keys. index_args, from _index_args: the index keys, which
        # follow the budget keys in KEYS, and the index's ARGV part, which follows ARGV[3].
        names = [self._name(key) for key in keys]
        what = f"key {keys[0]!r}" if len(keys) == 1 else f"key {keys!r}"
        if index_args is None:
            return self._run(script, names, args, what)
        index_names, index_argv = index_args
        return self._run(script, names + index_names, args[:3] + index_argv + args[3:], what)

    def _index_args(self, keys: list[str]) -> tuple[list[str], list[Any]]:
        # The index ZSETs the keys' groups and their ancestors need, deepest first, and the ARGV
        # part _REDIS_INDEX_LUA reads. Without an index (a cluster, untagged prefix): none.
        if not self._indexed:
            return [], [0]
        groups: set[str] = set()
        for key in keys:
            group = _group(key)
            while group not in groups:
                groups.add(group)
                if not group:
                    break
                group = _parent(group)
        order = sorted(groups, key=lambda g: (-g.count("|"), g))
        position = {group: i + 1 for i, group in enumerate(order)}
        argv: list[Any] = [len(order)]
        for key in keys:
            argv += (position[_group(key)], "=" + key)
        for group in order:
            argv += (position[_parent(group)], "/" + group) if group else (0, "")
        return [self._index_name(group) for group in order], argv

    def _admit_many(
        self, requests: list[tuple[str, list[str], int]], window_s: float, now: float
    ) -> list[tuple[list[bool], int, int]]:
        if self._cluster and len(requests) > 1:
            # A cluster runs a script only over keys of one hash slot; keys are independent, so
            # one script per key gives the same result.
            return [r for request in requests for r in self._admit_many([request], window_s, now)]
        keys = [key for key, _, _ in requests]
        args: list[Any] = [repr(now), repr(window_s), max(1, math.ceil(window_s * 1000))]
        for _, ids, cap in requests:
            args += (cap, len(ids), *ids)
        reply = self._call(self._admit_script, keys, args, self._index_args(keys))
        out, pos = [], 0
        for _, ids, _ in requests:
            end = pos + len(ids)
            out.append(([bool(int(v)) for v in reply[pos:end]], int(reply[end]), int(reply[end + 1])))
            pos = end + 2
        return out

    def _admit_points(
        self, keys: list[tuple[str, int]], points: list[tuple[str, list[int]]], window_s: float, now: float
    ) -> tuple[list[bool], list[tuple[int, int]]]:
        if self._cluster and len({self._key_slot((self.prefix + key).encode()) for key, _ in keys}) > 1:
            return self._admit_points_per_key(keys, points, window_s, now)
        names = [key for key, _ in keys]
        args: list[Any] = [repr(now), repr(window_s), max(1, math.ceil(window_s * 1000)), *(cap for _, cap in keys)]
        for pid, members in points:
            args += (pid, len(members), *(k + 1 for k in members))
        reply = self._call(self._points_script, names, args, self._index_args(names))
        counts = reply[len(points):]
        return ([bool(int(v)) for v in reply[:len(points)]],
                [(int(counts[2 * k]), int(counts[2 * k + 1])) for k in range(len(keys))])

    def _admit_points_per_key(
        self, keys: list[tuple[str, int]], points: list[tuple[str, list[int]]], window_s: float, now: float
    ) -> tuple[list[bool], list[tuple[int, int]]]:
        # A cluster runs a script only over keys of one slot. Each key then decides on its own and
        # a point is released only where every key admitted it: no key ever counts more than its
        # cap, but a point one key withheld stays charged to the keys that admitted it. A prefix
        # with a hash tag ("{qg}:") puts every key in one slot and keeps admissions all-or-none.
        lists = _ids_by_key(len(keys), points)
        results = self._admit_many([(key, ids, cap) for (key, cap), ids in zip(keys, lists)], window_s, now)
        admitted = [{pid for pid, ok in zip(ids, flags) if ok} for ids, (flags, _, _) in zip(lists, results)]
        return _released_where_all_admit(points, admitted), [(before, after) for _, before, after in results]

    def _seen(self, key: str, window_s: float, now: float) -> int:
        return int(self._call(self._seen_script, [key], [repr(now), repr(window_s)]))

    def _entries_by_prefix(self, prefix: str, window_s: float, now: float) -> dict[str, frozenset[str]]:
        if not self._indexed:
            return self._entries_by_scan(prefix, window_s, now)
        keys = self._indexed_keys(prefix)
        found: dict[str, frozenset[str]] = {}
        for start in range(0, len(keys), 500):
            batch = keys[start:start + 500]
            groups = list(dict.fromkeys(_group(key) for key in batch))
            position = {group: i + 1 for i, group in enumerate(groups)}
            args: list[Any] = [repr(now), repr(window_s), len(groups)]
            for key in batch:
                args += (position[_group(key)], "=" + key)
            names = [self._index_name(group) for group in groups] + [self.prefix + key for key in batch]
            reply = self._run(self._indexed_entries_script, names, args, f"prefix {prefix!r}")
            for key, ids in zip(batch, reply):
                if ids:
                    found[key] = frozenset(_text(i) for i in ids)
        return found

    def _indexed_keys(self, prefix: str) -> list[str]:
        # The keys the index holds under prefix: the enclosing group's keys that start with it,
        # then every key of the child groups that start with it, level by level.
        keys: list[str] = []
        level, seen, migrated = [_group(prefix)], set(), False
        while level:
            seen.update(level)
            names = [self.prefix + _READY] + [self._index_name(group) for group in level]
            reply = self._run(self._list_script, names, [], f"prefix {prefix!r}")
            if not int(reply[0]) and not migrated:
                self._migrate()
                migrated = True
                reply = self._run(self._list_script, names, [], f"prefix {prefix!r}")
            below = []
            for group, members in zip(level, reply[1:]):
                for member in map(_text, members):
                    name = member[1:]
                    if member[0] == "=":
                        if name.startswith(prefix):
                            keys.append(name)
                    elif (member[0] == "/" and name.startswith(prefix) and name.startswith(group)
                          and len(name) > len(group) and name not in seen):
                        below.append(name)
            level = list(dict.fromkeys(below))
        return keys

    def _migrate(self) -> None:
        # One process indexes a store written without index at a time (threads wait for it).
        with self._migrate_lock:
            try:
                if self.client.exists(self.prefix + _READY):
                    return
            except self._redis_error as exc:
                raise BudgetStoreError(f"redis budget store index check failed: {exc}") from exc
            self.rebuild_index()

    def rebuild_index(self) -> None:
        """Index every budget key under the prefix, then mark the index complete.

        One ``SCAN`` of the whole database (O(keys in it)), plus one script per 200 keys found.
        The first listing runs it by itself on a store written by a version without the index;
        run it again once no process of such a version writes to the store. Idempotent, and safe
        while other clients admit.

        Raises:
            BudgetStoreError: Redis failed.
        """
        if not self._indexed:
            return
        try:
            batch: list[str] = []
            for name in self.client.scan_iter(match=_glob_escape(self.prefix) + "*", count=500):
                name = _name_text(name)
                key = name[len(self.prefix):] if name is not None else None
                if key and not key.startswith(_RESERVED):
                    batch.append(key)
                if len(batch) >= 200:
                    self._reindex(batch)
                    batch = []
            if batch:
                self._reindex(batch)
            self.client.set(self.prefix + _READY, "1")
        except self._redis_error as exc:
            raise BudgetStoreError(f"redis budget store index rebuild failed: {exc}") from exc

    def _reindex(self, keys: list[str]) -> None:
        index_names, index_argv = self._index_args(keys)
        self._run(self._reindex_script, [self.prefix + key for key in keys] + index_names,
                  [0, 0, 0, *index_argv, _NO_TTL_MS], "the index rebuild")

    def _entries_by_scan(self, prefix: str, window_s: float, now: float) -> dict[str, frozenset[str]]:
        # Without an index (a cluster, untagged prefix): SCAN visits every key of the database
        # (O(keys), in batches), then one read-only script per key found (a cluster's scripts
        # span one slot).
        try:
            names = [name for name in map(_name_text, self.client.scan_iter(
                match=_glob_escape(self.prefix + prefix) + "*", count=500)) if name is not None]
        except self._redis_error as exc:
            raise BudgetStoreError(f"redis budget store scan failed for prefix {prefix!r}: {exc}") from exc
        keys = [key for key in (name[len(self.prefix):] for name in names) if not key.startswith(_RESERVED)]
        step = 1 if self._cluster else 500
        found: dict[str, frozenset[str]] = {}
        for start in range(0, len(keys), step):
            batch = keys[start:start + step]
            reply = self._call(self._entries_script, batch, [repr(now), repr(window_s)])
            for key, ids in zip(batch, reply):
                if ids:
                    found[key] = frozenset(_text(i) for i in ids)
        return found

    def _reset(self, key: str | None) -> None:
        if key is not None:
            name = self._name(key)
            if not self._indexed:
                try:
                    self.client.delete(name)
                except self._redis_error as exc:
                    raise BudgetStoreError(f"redis budget store reset failed: {exc}") from exc
                return
            self._run(self._reset_script, [name, self._index_name(_group(key))], ["=" + key], f"key {key!r}")
            return
        try:
            batch = []
            for name in self.client.scan_iter(match=_glob_escape(self.prefix) + "*", count=500):
                batch.append(name)
                if len(batch) >= 500:
                    self.client.delete(*batch)
                    batch = []
            if batch:
                self.client.delete(*batch)
        except self._redis_error as exc:
            raise BudgetStoreError(f"redis budget store reset failed: {exc}") from exc
        # An admission that ran during the deletion may have lost its index entries to it while
        # its key survived: index whatever is left (and mark the, now empty, index complete).
        self.rebuild_index()


def make_store(spec: str | None) -> BudgetStore:
    """Build a store from a spec string.

    Args:
        spec: ``None`` or ``"memory"``; ``"sqlite:///relative/path.db"`` or
            ``"sqlite:////absolute/path.db"``; ``"redis://host:port/db"`` (also ``rediss://``
            and ``unix://``).

    Returns:
        The store.

    Raises:
        TypeError: ``spec`` is not a str or None.
        ValueError: the spec has none of the forms above.
    """
    if spec is not None and not isinstance(spec, str):
        raise TypeError(f"spec must be a str or None, not {type(spec).__name__}")
    kind = store_kind(spec)
    if kind == "memory":
        return MemoryBudgetStore()
    if kind == "sqlite":
        return SqliteBudgetStore(str(spec)[len("sqlite:///"):])
    if kind == "redis":
        return RedisBudgetStore(str(spec))
    raise ValueError(
        f"unknown budget store spec {spec!r}; use 'memory', 'sqlite:///path.db' or 'redis://host:port/db'"
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
            raise TypeError(f"point_ids must be a sequence of point ids, not {type(point_ids).__name__}")
        normalised.append([normalize_point_id(pid) for pid in point_ids])
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
            raise TypeError(f"store must implement BudgetStore (admit, seen, reset), not {type(store).__name__}")
        if not callable(clock):
            raise TypeError(f"clock must be callable, not {type(clock).__name__}")
        self.store = store
        self.window_s = _check_real("window_s", window_s, positive=True)
        self.clock = clock

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
        cut = len(prefix)
        # A read lists every source of its principal: one comprehension, the escapes undone after.
        out = {key[cut:]: ids if type(ids) is frozenset else frozenset(ids) for key, ids in found.items()}
        if "%" in "".join(out):  # in one of the names (a "%" cannot span two)
            out = {_unescape_part(source) if "%" in source else source: ids for source, ids in out.items()}
        return out

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
        members: dict[str, list[int]] = {}
        for index, ids in enumerate(normalised):
            for pid in dict.fromkeys(ids):
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
        if not isinstance(requests, Mapping):
            raise TypeError(f"requests must be a mapping of source to (point_ids, source_size), not {type(requests).__name__}")
        coverage = _check_fraction("max_source_coverage", max_source_coverage, allow_zero=True)
        charges = []
        for source, request in requests.items():
            if not isinstance(request, tuple) or len(request) != 2:
                raise TypeError(f"requests[{source!r}] must be a (point_ids, source_size) tuple")
            point_ids, source_size = request
            if not (type(source_size) is int and source_size >= 0):
                _check_count("source_size", source_size)
            charges.append((self.budget_key(principal, collection, source), point_ids,
                            _floor_share(source_size, coverage)))
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
            point_ids: the ids whose vectors are about to be returned.
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
