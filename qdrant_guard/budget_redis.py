"""The extraction budget's Redis store: each admission is one Lua script, so processes on several
hosts sharing one Redis never admit more than the cap; keys of one principal and collection share
a hash tag, and a per-prefix index lists them without ``SCAN``.
"""
from __future__ import annotations

import math
import threading
from typing import Any

from .budget_store_base import BudgetStoreError, _check_str, _CountingStore, _ids_by_key, _released_where_all_admit
from .budget_redis_access import anyone_writes, refusal, store_name
from .budget_units import REDIS_ADMIT_UNITS, redis_args, redis_names
from .errors import GuardArgumentTypeError, GuardArgumentValueError



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
# The most budget keys one listing script reads ids of.
_LISTING_BATCH = 500

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

# One round trip for a listing. KEYS[1]: the ready marker, KEYS[2]: the index of the prefix's group.
# ARGV: now, window_s, the prefix, the prefix's group, the store's prefix, its index names' prefix
# (store prefix + _INDEX), the most keys to read, 1 to check the marker (0 after a migration).
# -> {0} when the marker is missing, else {1, {key, ids, ...}, {key, ...}}: the keys with ids an
# admission at now would still count and those ids, then the keys past the most to read (the
# caller reads them in batches). Walks the index from the group down through child groups that
# start with the prefix, dropping members whose time has passed and keys that no longer exist.
# The child indexes and budget keys are named here, not in KEYS: the store lists with an index
# only where every name under its prefix is in one hash slot (no cluster, or a hash-tag prefix).
_REDIS_LISTING = """
if redis.replicate_commands then redis.replicate_commands() end
if ARGV[8] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
local t = redis.call('TIME')
local ms = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local prefix, store, index = ARGV[3], ARGV[5], ARGV[6]
local function starts(s, p) return string.sub(s, 1, #p) == p end
local keys, where = {}, {}
local level, seen = {ARGV[4]}, {[ARGV[4]] = true}
while #level > 0 do
  local below = {}
  for _, group in ipairs(level) do
    local ix = index .. group
    redis.call('ZREMRANGEBYSCORE', ix, '-inf', '(' .. ms)
    for _, member in ipairs(redis.call('ZRANGE', ix, 0, -1)) do
      local kind, name = string.sub(member, 1, 1), string.sub(member, 2)
      if kind == '=' then
        if starts(name, prefix) then
          keys[#keys + 1] = name
          where[#keys] = ix
        end
      elseif kind == '/' and starts(name, prefix) and starts(name, group) and #name > #group
          and not seen[name] then
        below[#below + 1] = name
      end
    end
  end
  level = {}
  for _, name in ipairs(below) do
    if not seen[name] then
      seen[name] = true
      level[#level + 1] = name
    end
  end
end
local window = tonumber(ARGV[2])
local found, rest = {}, {}
for k = 1, #keys do
  if k > tonumber(ARGV[7]) then
    rest[#rest + 1] = keys[k]
  else
    local key = store .. keys[k]
    local now = tonumber(ARGV[1])
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if newest[2] then
      if tonumber(newest[2]) > now then now = tonumber(newest[2]) end
      local ids = redis.call('ZRANGEBYSCORE', key, string.format('%.17g', now - window), '+inf')
      if #ids > 0 then
        found[#found + 1] = keys[k]
        found[#found + 1] = ids
      end
    else
      redis.call('ZREM', where[k], '=' .. keys[k])
    end
  end
end
return {1, found, rest}
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
    script reads the group's index and the ids of its first 500 keys (one round trip, one atomic
    read), then one read-only script per 500 further keys. A prefix that is not a whole group
    reads its enclosing group's index (keys are then filtered by prefix) and, in the same script,
    descends into child groups that start with it. Index
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

    Whoever can write the keys resets budgets, so before its first command the store asks the
    server, once, whether a client that sends no credentials may write a key under the prefix or
    empty, swap or replace the database (:mod:`~qdrant_guard.budget_redis_access`); if so, every use raises :class:`BudgetStoreError`
    until Redis requires a password (``requirepass``, or ACL users and ``ACL SETUSER default
    off``) and the URL carries it (``redis://user:password@host:6379/0``), unless
    ``allow_unauthenticated``. An unreachable server fails the use, and the next use asks again.
    Plain ``redis://`` sends the password and the budget traffic in the clear: use ``rediss://``
    where the path to Redis crosses a network others can read.

    Args:
        client_or_url: a ``redis.Redis`` client, or a URL for ``redis.Redis.from_url``.
        prefix: prepended to every budget key in Redis.
        allow_unauthenticated: use the store even when clients without credentials may write it,
            for a server nothing but the guard can reach (a socket only its uid may open, a
            network only it is on). Policy: ``budget_store_allow_unauthenticated``.

    Raises:
        BudgetStoreError: the ``redis`` package is not installed.
        TypeError: ``allow_unauthenticated`` is not a bool.
    """

    def __init__(self, client_or_url: Any, *, prefix: str = "qg:budget:",
                 allow_unauthenticated: bool = False) -> None:
        _check_str("prefix", prefix, empty_ok=True)
        if not isinstance(allow_unauthenticated, bool):
            raise GuardArgumentTypeError(f"RedisBudgetStore() allow_unauthenticated must be bool, "
                                         f"not {type(allow_unauthenticated).__name__}")
        try:
            import redis
            from redis.crc import key_slot
        except ImportError as exc:
            raise BudgetStoreError(
                "RedisBudgetStore needs the redis package: pip install 'redis>=5'"
            ) from exc
        self._redis_error = redis.RedisError
        self._shown = store_name(client_or_url)
        # True once the server refused a write without credentials (or the caller opted out);
        # the refusal once it allowed one.
        self._access_checked = allow_unauthenticated
        self._refused: str | None = None
        self._access_lock = threading.Lock()
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
        self._listing_script = self.client.register_script(_REDIS_LISTING)
        self._indexed_entries_script = self.client.register_script(_REDIS_INDEXED_ENTRIES)
        self._entries_script = self.client.register_script(_REDIS_ENTRIES)
        self._reset_script = self.client.register_script(_REDIS_RESET_KEY)
        self._units_script = self.client.register_script(REDIS_ADMIT_UNITS)

    @property
    def _indexed(self) -> bool:
        # A cluster runs a script over keys of one slot only: the index needs a hash-tag prefix.
        return not self._cluster or self._one_slot

    def _index_name(self, group: str) -> str:
        return self.prefix + _INDEX + group

    def _name(self, key: str) -> str:
        if key.startswith(_RESERVED):
            raise GuardArgumentValueError(f"key {key!r} is reserved: RedisBudgetStore keeps its index under keys starting with "
                                          f"{_RESERVED!r}; use a key that does not start with it")
        return self.prefix + key

    def _check_access(self) -> None:
        # Once per store, before its first command: a refused store stays refused (each use
        # raises, without asking again), a server that could not be asked is asked at the next use.
        if self._access_checked:
            return
        with self._access_lock:
            if self._access_checked:
                return
            if self._refused is not None:
                raise BudgetStoreError(self._refused)
            try:
                writable = anyone_writes(self.client, self.prefix)
            except self._redis_error as exc:
                raise BudgetStoreError(f"redis budget store {self._shown!r}: cannot tell whether clients without "
                                       f"credentials may write it ({exc}); nothing was counted") from exc
            except TypeError as exc:
                raise BudgetStoreError(f"redis budget store {self._shown!r}: {exc}; pass "
                                       "allow_unauthenticated=True if only the guard can reach it") from exc
            if writable is not None:
                self._refused = refusal(self._shown, self.prefix, writable)
                raise BudgetStoreError(self._refused)
            self._access_checked = True

    def _run(self, script: Any, names: list[str], args: list[Any], what: Any) -> Any:
        self._check_access()
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

    def _admit_units(self, key: str, groups: list[Any], cap: int, window_s: float,
                     now: float) -> tuple[list[bool], int, int]:
        self._name(key)  # refuses a reserved key
        reply = self._run(self._units_script, redis_names(self.prefix, key), redis_args(groups, cap, window_s, now),
                          f"key {key!r}")
        return [bool(int(v)) for v in reply[:-2]], int(reply[-2]), int(reply[-1])

    def _seen(self, key: str, window_s: float, now: float) -> int:
        return int(self._call(self._seen_script, [key], [repr(now), repr(window_s)]))

    def _entries_by_prefix(self, prefix: str, window_s: float, now: float) -> dict[str, frozenset[str]]:
        if not self._indexed:
            return self._entries_by_scan(prefix, window_s, now)
        group = _group(prefix)
        names = [self.prefix + _READY, self._index_name(group)]
        args: list[Any] = [repr(now), repr(window_s), prefix, group, self.prefix, self.prefix + _INDEX,
                           _LISTING_BATCH, 1]
        reply = self._run(self._listing_script, names, args, f"prefix {prefix!r}")
        if not int(reply[0]):
            self._migrate()
            args[-1] = 0
            reply = self._run(self._listing_script, names, args, f"prefix {prefix!r}")
        pairs, rest = reply[1], [_text(key) for key in reply[2]]
        found = {_text(pairs[i]): frozenset(_text(v) for v in pairs[i + 1]) for i in range(0, len(pairs), 2)}
        # Past the first batch (a group of more than _LISTING_BATCH keys), one read-only script per
        # batch, as the walk's own reads would hold the server longer than one batch's worth.
        for start in range(0, len(rest), _LISTING_BATCH):
            batch = rest[start:start + _LISTING_BATCH]
            groups = list(dict.fromkeys(_group(key) for key in batch))
            position = {group: i + 1 for i, group in enumerate(groups)}
            args = [repr(now), repr(window_s), len(groups)]
            for key in batch:
                args += (position[_group(key)], "=" + key)
            names = [self._index_name(group) for group in groups] + [self.prefix + key for key in batch]
            for key, ids in zip(batch, self._run(self._indexed_entries_script, names, args, f"prefix {prefix!r}")):
                if ids:
                    found[key] = frozenset(_text(i) for i in ids)
        return found

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
        self._check_access()
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
        self._check_access()
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
        self._check_access()
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
