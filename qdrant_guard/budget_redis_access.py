"""Whether a client that sends no credentials may rewrite the Redis budget store.

Whoever can write the store's keys deletes the sorted sets that count what each principal was
given and reads a source past its cap again. Redis lets every connection in as its ``default``
user, which has no password unless one is set (``requirepass``, ``ACL SETUSER default >...``):
then anyone who reaches the port writes every key, whatever credentials the guard itself uses.

The check asks the server rather than reading its configuration: it opens one connection with
the guard's connection settings but without its username, password or credential provider, and
sends ``DEL`` of a key under the store's prefix that no budget uses. ``NOAUTH`` or ``NOPERM``
means that such a client may not write there. The same question works on Redis before 6 (no ACL:
``NOAUTH`` exactly when ``requirepass`` is set), needs no admin rights (``ACL GETUSER`` and
``CONFIG GET`` do, and ``CONFIG`` is often renamed away), and covers a ``default`` user that has
no password but is limited to other keys. A TLS client certificate stays in the probe's settings:
a certificate is a credential the check does not tell from the network (see the opt-out).
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


def anyone_writes(client: Any, prefix: str) -> bool:
    """True when a connection made with ``client``'s settings minus its credentials may write a
    key under ``prefix``; False when the server answers that it needs authentication or that such
    a client lacks the permission.

    Raises:
        redis.RedisError: the server could not be asked (unreachable, or an answer that tells
            neither way); the caller fails closed and asks again at the next use.
        TypeError: ``client`` has no connection pool this check can copy settings from.
    """
    import redis

    pool = _pool(client)
    if pool is None or not hasattr(pool, "connection_class"):
        raise TypeError(f"cannot tell who may write through a {type(client).__name__}: it has no redis-py "
                        "connection pool whose settings the check could copy")
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k not in _CREDENTIALS}
    conn = pool.connection_class(**kwargs)
    try:
        conn.connect()
        conn.send_command("DEL", prefix + PROBE_KEY)
        conn.read_response()
    except (redis.AuthenticationError, redis.exceptions.NoPermissionError):
        return False
    except redis.ResponseError as exc:
        # Redis checks authentication and ACLs before it redirects (a cluster's MOVED/ASK) or
        # refuses a write on a replica (READONLY): those answers mean the write was allowed.
        if str(exc).split(" ", 1)[0] in ("MOVED", "ASK", "READONLY"):
            return True
        if str(exc).startswith(("NOAUTH", "NOPERM", "WRONGPASS")):
            return False
        raise
    finally:
        conn.disconnect()
    return True


def refusal(name: str, prefix: str) -> str:
    """Why the store ``name`` (as :func:`store_name` gives it) is refused, and the fixes."""
    pattern = prefix + "*" if prefix.isprintable() and " " not in prefix else "PREFIX*"
    return (f"budget_store {name!r} lets a client that sends no password write its keys (a connection without "
            f"credentials was allowed to DEL a key under prefix {prefix!r}): anyone who can reach the server can "
            "delete the keys that count what each principal was given and read past the extraction budget's caps "
            "again. Give Redis's default user a password or turn it off (`requirepass PASSWORD` in redis.conf, or "
            "`ACL SETUSER default on >PASSWORD` / `ACL SETUSER default off` after creating a user for the guard with "
            f"`ACL SETUSER guard on >PASSWORD ~{pattern} +@all`), and put the credentials in the URL "
            "(redis://guard:PASSWORD@host:6379/0, or redis://:PASSWORD@host:6379/0 for the default user); or, if "
            "nothing but the guard can reach this server (a socket or network only it can use), set "
            "budget_store_allow_unauthenticated = true next to budget_store in the policy "
            "(RedisBudgetStore(..., allow_unauthenticated=True))")
