"""Whether a client that sends no credentials may rewrite the Redis budget store.

Whoever can write the store's keys deletes the sorted sets that count what each principal was
given and reads a source past its cap again. Redis lets every connection in as its ``default``
user, which has no password unless one is set (``requirepass``, ``ACL SETUSER default >...``):
then anyone who reaches the port writes every key, whatever credentials the guard itself uses.

The check asks the server rather than reading its configuration: it opens one connection with
the guard's connection settings but without its username, password or credential provider, opens
a transaction (``MULTI``) and queues every command in :data:`PROBES`, then drops the connection,
which discards the transaction: nothing queued runs. Redis checks authentication and ACLs when it
queues a command, so ``QUEUED`` means such a client may run it, ``NOAUTH`` or ``NOPERM`` that it
may not. A ``DEL`` alone is not enough: a default user kept off the prefix (``~other:*``) may still
``FLUSHALL``, ``SWAPDB`` or ``REPLICAOF`` (keyless, so key patterns do not limit them), ``CONFIG
SET`` an eviction policy, or ``ACL SETUSER`` itself wider, and one denied ``DEL`` may still
``ZREMRANGEBYSCORE``, ``EXPIRE`` or overwrite the set. The same question works on Redis before 6
(no ACL: ``NOAUTH`` exactly when ``requirepass`` is set), needs no admin rights (``ACL GETUSER``,
``ACL DRYRUN`` and ``CONFIG GET`` do, and ``CONFIG`` is often renamed away). A TLS client
certificate stays in the probe's settings: a certificate is a credential the check does not tell
from the network (see the opt-out).

Not probed: ``SHUTDOWN`` (Redis refuses it inside a transaction, and outside one it would run; on
a server without persistence it empties every budget), scripts and functions (Redis checks each
command a script calls against the caller's ACL, so they add nothing), and commands a module adds.
"""
from __future__ import annotations

from typing import Any

from .names import shown_url

# A key under the store's prefix that no budget key or index key is (budget keys may not start
# with "\x00qg-"); deleting it changes nothing.
PROBE_KEY = "\x00qg-access-probe"

_CREDENTIALS = ("username", "password", "credential_provider")


def store_name(client_or_url: Any) -> str:
    """The store as messages name it: its URL without password or query, else the client's host
    and port (or socket path), never a credential."""
    if isinstance(client_or_url, str):
        return shown_url(client_or_url)
    pool = _pool(client_or_url)
    kwargs = getattr(pool, "connection_kwargs", {})
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}"
    if kwargs.get("host") is not None:
        return f"{kwargs['host']}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"
    return type(client_or_url).__name__


def _pool(client: Any) -> Any:
    # redis.Redis has a pool; a RedisCluster reaches its nodes through per-node clients.
    pool = getattr(client, "connection_pool", None)
    if pool is None and callable(getattr(client, "get_default_node", None)):
        pool = getattr(getattr(client.get_default_node(), "redis_connection", None), "connection_pool", None)
    return pool


def _pools(client: Any) -> list[Any]:
    # Each node of a cluster keeps its own users and passwords (ACLs are not shared): every
    # node that holds budget keys, or may be made to, is asked, not only the default node.
    if getattr(client, "connection_pool", None) is None and callable(getattr(client, "get_nodes", None)):
        return [getattr(getattr(node, "redis_connection", None), "connection_pool", None)
                for node in client.get_nodes()]
    return [_pool(client)]


# What could empty or rewrite the budget's sorted sets, with the probe key as every key (Redis
# checks only the arity, the command and its keys when it queues): removing or expiring the key,
# removing, re-scoring or popping its entries, overwriting it (SET, RESTORE, a *STORE command,
# COPY, RENAME), moving it to another database or server, or, keyless, emptying or swapping the
# database, replacing it from another server, evicting it, or widening the user's own rights.
PROBES: tuple[tuple[str, ...], ...] = tuple(tuple(c.split()) for c in (
    "DEL K", "UNLINK K", "GETDEL K", "ZREM K m", "ZREMRANGEBYSCORE K -inf +inf", "ZREMRANGEBYRANK K 0 -1",
    "ZREMRANGEBYLEX K - +", "ZPOPMIN K", "ZPOPMAX K", "ZMPOP 1 K MIN", "BZPOPMIN K 1", "ZADD K 0 m",
    "ZINCRBY K 1 m", "EXPIRE K 1", "PEXPIRE K 1", "EXPIREAT K 1", "PEXPIREAT K 1", "GETEX K PX 1",
    "SET K v", "GETSET K v", "MSET K v", "SETEX K 1 v", "PSETEX K 1 v", "RESTORE K 0 v REPLACE",
    "COPY K K REPLACE", "RENAME K K", "RENAMENX K K", "MOVE K 1", "MIGRATE 127.0.0.1 1 K 0 1",
    "ZUNIONSTORE K 1 K", "ZINTERSTORE K 1 K", "ZDIFFSTORE K 1 K", "ZRANGESTORE K K 0 -1", "SORT K STORE K",
    "SUNIONSTORE K K", "SINTERSTORE K K", "SDIFFSTORE K K", "BITOP OR K K", "GEOSEARCHSTORE K K FROMLONLAT 0 0 "
    "BYRADIUS 1 m", "GEORADIUS K 0 0 1 m STORE K", "LMOVE K K LEFT LEFT", "RPOPLPUSH K K", "SMOVE K K m",
    "FLUSHALL", "FLUSHDB", "SWAPDB 0 1", "REPLICAOF 127.0.0.1 1", "SLAVEOF 127.0.0.1 1",
    "CONFIG SET maxmemory-policy allkeys-random", "ACL SETUSER default ~*", "DEBUG RELOAD", "MODULE LOAD m",
))

# Answers that say the server has not this command for such a client, before any ACL check:
# renamed away or unknown to its version, DEBUG and MODULE off (enable-debug-command/enable-module-command).
_ABSENT = ("unknown command", "ERR unknown command", "unknown subcommand", "ERR unknown subcommand",
           "DEBUG command not allowed", "MODULE command not allowed")


def anyone_writes(client: Any, prefix: str) -> str | None:
    """The first command of :data:`PROBES` (as sent, the probe key shown as ``KEY``) that a
    connection made with ``client``'s settings minus its credentials may run on a key under
    ``prefix``, queued in a transaction that never runs; None when the server answers that every
    one needs authentication or a permission such a client lacks, or has no such command.

    Raises:
        redis.RedisError: the server could not be asked (unreachable, a client without
            credentials may not open a transaction (``MULTI``), or an answer that tells neither
            way); the caller fails closed and asks again at the next use.
        TypeError: ``client`` has no connection pool this check can copy settings from.
    """
    import redis

    pools = _pools(client)
    if not pools or any(pool is None or not hasattr(pool, "connection_class") for pool in pools):
        raise TypeError(f"cannot tell who may write through a {type(client).__name__}: it has no redis-py "
                        "connection pool whose settings the check could copy")
    for pool in pools:
        allowed = _allowed(redis, pool, prefix + PROBE_KEY)
        if allowed is not None:
            if len(pools) > 1:
                kwargs = pool.connection_kwargs
                return f"{allowed}` on node `{kwargs.get('host')}:{kwargs.get('port')}"
            return allowed
    return None


def _allowed(redis: Any, pool: Any, key: str) -> str | None:
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k not in _CREDENTIALS}
    conn = pool.connection_class(**kwargs)
    try:
        try:
            conn.connect()
            # MULTI's answer first: were it refused, the commands sent after it would run.
            conn.send_command("MULTI")
            conn.read_response()
        except (redis.AuthenticationError, redis.exceptions.NoPermissionError) as exc:
            if isinstance(exc, redis.exceptions.NoPermissionError):
                raise redis.ResponseError(
                    f"a client without credentials was refused a command the check needs ({exc}): MULTI, to ask "
                    "what such a client may write without running it, or the SELECT of the URL's database; allow "
                    "them with `ACL SETUSER default +multi +select`") from exc
            return None
        except redis.ResponseError as exc:
            if str(exc).startswith(("NOAUTH", "WRONGPASS")):
                return None
            raise
        commands = [tuple(key if a == "K" else a for a in probe) for probe in PROBES]
        conn.send_packed_command(conn.pack_commands(commands))
        allowed = None
        for probe in PROBES:
            try:
                conn.read_response()
            except (redis.AuthenticationError, redis.exceptions.NoPermissionError):
                continue
            except (redis.exceptions.AskError, redis.exceptions.ReadOnlyError):
                # Redis checks authentication and ACLs before it redirects (a cluster's MOVED/ASK)
                # or refuses a write on a replica (READONLY): those answers mean it was allowed.
                # A cluster node's parser raises them without the word (MovedError: "SLOT HOST:PORT").
                pass
            except redis.ResponseError as exc:
                text = str(exc)
                if text.startswith(_ABSENT):
                    continue
                if text.startswith(("NOAUTH", "NOPERM", "WRONGPASS")):
                    continue
                if text.split(" ", 1)[0] not in ("MOVED", "ASK", "READONLY"):
                    raise
            allowed = allowed or " ".join("KEY" if a == "K" else a for a in probe)
        return allowed
    finally:
        conn.disconnect()


def refusal(name: str, prefix: str, allowed: str = "DEL KEY") -> str:
    """Why the store ``name`` (as :func:`store_name` gives it) is refused, and the fixes;
    ``allowed``: the command such a client may run, as :func:`anyone_writes` gives it."""
    pattern = prefix + "*" if prefix.isprintable() and " " not in prefix else "PREFIX*"
    where = f", KEY a key under prefix {prefix!r}" if "KEY" in allowed.split() else ""
    return (f"budget_store {name!r} lets a client that sends no password write its keys (a connection without "
            f"credentials may queue `{allowed}`{where}): anyone who can reach the server can delete or rewrite "
            "the keys that count what each principal was given and read past the extraction budget's caps again. "
            "Give Redis's default user a password or turn it off (`requirepass PASSWORD` in redis.conf, or "
            "`ACL SETUSER default on >PASSWORD` / `ACL SETUSER default off` after creating a user for the guard with "
            f"`ACL SETUSER guard on >PASSWORD ~{pattern} +@all`; a default user kept on must also be denied that "
            "command, and key patterns do not limit keyless ones such as FLUSHALL), and put the credentials in the URL "
            "(redis://guard:PASSWORD@host:6379/0, or redis://:PASSWORD@host:6379/0 for the default user); or, if "
            "nothing but the guard can reach this server (a socket or network only it can use), set "
            "budget_store_allow_unauthenticated = true next to budget_store in the policy "
            "(RedisBudgetStore(..., allow_unauthenticated=True))")
