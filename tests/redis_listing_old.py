"""The Redis store's listing as of 0fe40e1, kept as the reference for tests/test_redis_listing1.py
and bench/redis_listing_ab.py: one script per index level, then one script per 500 keys for the
ids (two round trips for a whole group). Only the listing differs from RedisBudgetStore."""
from __future__ import annotations

from typing import Any

from qdrant_guard.budget_redis import _READY, RedisBudgetStore, _group, _text

# KEYS[1]: the ready marker, then index ZSETs -> {marker exists, then per index its members}.
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


class TwoScriptRedisStore(RedisBudgetStore):
    """RedisBudgetStore with the listing of 0fe40e1 (index, then ids: two round trips)."""

    def __init__(self, client_or_url: Any, *, prefix: str = "qg:budget:") -> None:
        super().__init__(client_or_url, prefix=prefix)
        self._list_script = self.client.register_script(_REDIS_LIST)

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
