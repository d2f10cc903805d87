"""The in-process budget store, :class:`MemoryBudgetStore`: a dict of insertion-ordered maps behind one
lock (``budget_store = "memory"``).
"""
from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from typing import Any, Callable

from .budget_store_base import _CountingStore, _in_window, _LISTINGS_KEPT
from .errors import GuardArgumentTypeError


# Keys an admission's sweep may examine on top of two per key the admission touched: enough that
# the sweep drops idle keys faster than admissions add new ones.
_SWEEP_STEP = 8


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
