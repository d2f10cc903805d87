"""Weighted admission for the distillation budget's score charge (``diversity.charge_scores``).

The extraction budget counts distinct ids, each worth 1. Charging scores needs ids of different
worth: a returned vector of dimension ``d`` is ``d`` coordinates, one score of it is one linear
measurement, so one coordinate. A *units key* holds distinct ids, each with an integer weight, and
admits a new id only while the weights it holds, plus the new one's, stay within its cap. Integers
keep every store exact (Redis Lua numbers are doubles: exact below 2**53, which
:func:`check_units_args` enforces for the cap).

An admission is a list of *groups* decided in order: a group is a list of ``(id, weight)`` and the
index of an earlier group it requires (-1: none). A group is admitted when the group it requires
was, and the weights of its ids the key does not hold yet fit under the cap; then all its new ids
are recorded and its held ones refreshed. A refused group changes nothing. Ids already held are
free (a repeated measurement says nothing new), as in :meth:`BudgetStore.admit`.

Each store applies one admission atomically: the memory store under its lock, SQLite in one
``BEGIN IMMEDIATE`` transaction, Redis in one Lua script. Expiry is per key, at its admissions,
with the key's time never running back (``max(now, newest timestamp)``), as for the other keys.
"""
from __future__ import annotations

import math
import sqlite3
from collections import OrderedDict
from typing import Any, Sequence

from .budget_store_base import _check_count, _check_real, _check_str
from .errors import GuardArgumentTypeError, GuardArgumentValueError

Group = tuple[list[tuple[str, int]], int]

# Lua numbers are doubles: sums below this stay exact integers.
MAX_UNITS = 2 ** 53


def check_units_args(key: object, groups: object, cap: object, window_s: object,
                     now: object) -> tuple[str, list[Group], int, float, float]:
    """The checked arguments of ``admit_units``.

    Raises:
        TypeError, ValueError: a bad key, group, weight, cap, window or time.
    """
    _check_str("key", key)
    cap = _check_count("cap", cap)
    if cap >= MAX_UNITS:
        raise GuardArgumentValueError(f"cap must be below 2**53 (Redis counts in doubles), got {cap}")
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
        raise GuardArgumentTypeError(f"groups must be a sequence of (items, requires), not {type(groups).__name__}")
    checked: list[Group] = []
    for g, group in enumerate(groups):
        if not isinstance(group, tuple) or len(group) != 2:
            raise GuardArgumentTypeError(f"groups[{g}] must be an (items, requires) tuple")
        items, requires = group
        if type(items) is list and type(requires) is int and -1 <= requires < g and all(
                type(item) is tuple and len(item) == 2 and type(item[0]) is str and type(item[1]) is int
                and 0 < item[1] < MAX_UNITS for item in items):
            checked.append((items, requires))  # plain, as the checks below would pass it (a read's case)
            continue
        if type(requires) is not int or not -1 <= requires < g:
            raise GuardArgumentValueError(f"groups[{g}] requires must be -1 or the index of an earlier group, got {requires!r}")
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
            raise GuardArgumentTypeError(f"groups[{g}] items must be a sequence of (id, weight)")
        row = []
        for i, item in enumerate(items):
            if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str) \
                    or type(item[1]) is not int or not 0 < item[1] < MAX_UNITS:
                raise GuardArgumentTypeError(f"groups[{g}] items[{i}] must be (str id, int weight >= 1)")
            row.append((str.__str__(item[0]), item[1]))
        checked.append((row, requires))
    return key, checked, cap, _check_real("window_s", window_s, positive=True), _check_real("now", now, positive=False)  # type: ignore[return-value]


def decide(held: Any, total: int, groups: list[Group], cap: int) -> tuple[list[bool], list[tuple[str, int]], list[str]]:
    """The decision over the ids ``held`` (a container, after expiry) whose weights add up to ``total``.

    Returns ``(flags, added, refreshed)``: the ids to record with their weights and the held ids to
    refresh, each once, in order. The reference the Lua script follows line by line.
    """
    flags: list[bool] = []
    added: dict[str, int] = {}
    refreshed: dict[str, None] = {}
    for items, requires in groups:
        if requires >= 0 and not flags[requires]:
            flags.append(False)
            continue
        if len(items) == 1:  # the loop below for one id (a read's common case)
            pid, weight = items[0]
            if pid in held:
                refreshed[pid] = None
            elif pid not in added:
                if total + weight > cap:
                    flags.append(False)
                    continue
                total += weight
                added[pid] = weight
            flags.append(True)
            continue
        new: dict[str, int] = {}
        for pid, weight in items:
            if pid not in held and pid not in added and pid not in new:
                new[pid] = weight
        need = sum(new.values())
        if total + need > cap:
            flags.append(False)
            continue
        total += need
        added.update(new)
        refreshed.update((pid, None) for pid, _ in items if pid in held)
        flags.append(True)
    return flags, list(added.items()), list(refreshed)


class MemoryUnits:
    """The memory store's units keys: key -> (id -> (timestamp, weight)) in timestamp order, and
    the key's total. A key holds at most ``cap`` units, so at most ``cap`` ids; a key whose ids
    have all expired is dropped at its next admission. Called under the store's lock."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[OrderedDict[str, tuple[float, int]], list[int]]] = {}

    def admit(self, key: str, groups: list[Group], cap: int, window_s: float,
              now: float) -> tuple[list[bool], int, int]:
        entries, total = self.keys.get(key, (OrderedDict(), [0]))
        if entries:
            now = max(now, next(reversed(entries.values()))[0])
            cutoff = now - window_s
            while entries and next(iter(entries.values()))[0] < cutoff:
                total[0] -= entries.popitem(last=False)[1][1]
        before = total[0]
        flags, added, refreshed = decide(entries, before, groups, cap)
        for pid in refreshed:
            entries[pid] = (now, entries[pid][1])
            entries.move_to_end(pid)
        for pid, weight in added:
            entries[pid] = (now, weight)
            total[0] += weight
        if entries:
            self.keys[key] = (entries, total)
        else:
            self.keys.pop(key, None)
        return flags, before, total[0]

    def reset(self, key: str | None) -> None:
        if key is None:
            self.keys.clear()
        else:
            self.keys.pop(key, None)


SQLITE_UNITS_SCHEMA = """
CREATE TABLE IF NOT EXISTS qg_budget_units (
    key TEXT NOT NULL,
    pid TEXT NOT NULL,
    ts  REAL NOT NULL,
    w   INTEGER NOT NULL,
    PRIMARY KEY (key, pid)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS qg_budget_units_key_ts ON qg_budget_units (key, ts);
"""


def sqlite_admit(db: sqlite3.Connection, key: str, groups: list[Group], cap: int, window_s: float,
                 now: float) -> tuple[list[bool], int, int]:
    """One admission inside the caller's ``BEGIN IMMEDIATE`` transaction."""
    (newest,) = db.execute("SELECT MAX(ts) FROM qg_budget_units WHERE key = ?", (key,)).fetchone()
    if newest is not None and newest > now:
        now = newest
    db.execute("DELETE FROM qg_budget_units WHERE key = ? AND ts < ?", (key, now - window_s))
    names = {pid for items, _ in groups for pid, _ in items}
    held: dict[str, int] = {}
    listed = sorted(names)
    for start in range(0, len(listed), 500):
        part = listed[start:start + 500]
        held.update(db.execute(f"SELECT pid, w FROM qg_budget_units WHERE key = ? AND pid IN ({','.join('?' * len(part))})",
                               (key, *part)).fetchall())
    (total,) = db.execute("SELECT COALESCE(SUM(w), 0) FROM qg_budget_units WHERE key = ?", (key,)).fetchone()
    flags, added, refreshed = decide(held, int(total), groups, cap)
    db.executemany("UPDATE qg_budget_units SET ts = ? WHERE key = ? AND pid = ?", [(now, key, pid) for pid in refreshed])
    db.executemany("INSERT INTO qg_budget_units (key, pid, ts, w) VALUES (?, ?, ?, ?)",
                   [(key, pid, now, w) for pid, w in added])
    return flags, int(total), int(total) + sum(w for _, w in added)


# KEYS[1]: the ZSET of ids by timestamp; KEYS[2]: the HASH id -> weight, with field "\0total".
# ARGV: now, window_s, ttl_ms, cap, number of groups, then per group: requires (0-based, -1 none),
# n, id1, w1, ..., idn, wn  ->  {flags..., before, after}. The steps of decide(), in order.
REDIS_ADMIT_UNITS = """
if redis.replicate_commands then redis.replicate_commands() end
local zkey, hkey = KEYS[1], KEYS[2]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local cap = tonumber(ARGV[4])
local ngroups = tonumber(ARGV[5])
local newest = redis.call('ZRANGE', zkey, -1, -1, 'WITHSCORES')
if newest[2] and tonumber(newest[2]) > now then now = tonumber(newest[2]) end
local stamp = string.format('%.17g', now)
local total = tonumber(redis.call('HGET', hkey, '\\0total') or '0')
local expired = redis.call('ZRANGEBYSCORE', zkey, '-inf', '(' .. string.format('%.17g', now - window))
for _, pid in ipairs(expired) do
  total = total - tonumber(redis.call('HGET', hkey, pid) or '0')
  redis.call('HDEL', hkey, pid)
  redis.call('ZREM', zkey, pid)
end
local before = total
local flags = {}
local pos = 6
for g = 1, ngroups do
  local requires = tonumber(ARGV[pos])
  local n = tonumber(ARGV[pos + 1])
  local first = pos + 2
  pos = first + 2 * n
  local ok = requires < 0 or flags[requires + 1] == 1
  if ok then
    local need, seen = 0, {}
    for i = first, first + 2 * n - 2, 2 do
      local pid = ARGV[i]
      if not seen[pid] and redis.call('ZSCORE', zkey, pid) == false then
        seen[pid] = true
        need = need + tonumber(ARGV[i + 1])
      end
    end
    ok = total + need <= cap
    if ok then
      total = total + need
      for i = first, first + 2 * n - 2, 2 do
        local pid = ARGV[i]
        if redis.call('ZSCORE', zkey, pid) == false then
          redis.call('HSET', hkey, pid, ARGV[i + 1])
        end
        redis.call('ZADD', zkey, stamp, pid)
      end
    end
  end
  flags[g] = ok and 1 or 0
end
if total > 0 then
  redis.call('HSET', hkey, '\\0total', string.format('%.0f', total))
  local keep = ttl + math.ceil((now - tonumber(ARGV[1])) * 1000)
  redis.call('PEXPIRE', zkey, string.format('%.0f', keep))
  redis.call('PEXPIRE', hkey, string.format('%.0f', keep))
else
  redis.call('DEL', zkey, hkey)
end
flags[#flags + 1] = string.format('%.0f', before)
flags[#flags + 1] = string.format('%.0f', total)
return flags
"""


def redis_args(groups: list[Group], cap: int, window_s: float, now: float) -> list[Any]:
    """The ARGV of :data:`REDIS_ADMIT_UNITS`."""
    args: list[Any] = [repr(now), repr(window_s), max(1, math.ceil(window_s * 1000)), cap, len(groups)]
    for items, requires in groups:
        args += (requires, len(items))
        for pid, weight in items:
            args += (pid, weight)
    return args


def redis_names(prefix: str, key: str) -> list[str]:
    """The ZSET and HASH of a units key: under the store's reserved names (no listing or index
    sees them), with a hash tag of their own that makes both one slot, whatever the key holds."""
    base = f"{prefix}\x00qg-units{{{key}}}"
    return [base + "t", base + "w"]
