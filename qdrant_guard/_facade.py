"""Builds the guarded methods of both facades from one table (qdrant_guard.surface).

Each guarded method keeps the original's name, signature and docstring (``functools.wraps``;
type checkers see the inherited signatures), binds its arguments, and hands them to the
pipeline. With no guard policy the original method is called directly.
"""
from __future__ import annotations

import copy
import functools
import inspect
import typing
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, Callable, Self

import pydantic
import qdrant_client
from qdrant_client import grpc
from qdrant_client.conversions.conversion import GrpcToRest
from qdrant_client.http import models
from qdrant_client.local.async_qdrant_local import AsyncQdrantLocal

from .decision import Verdict
from .errors import QdrantGuardError, UnsupportedWriteError
from .async_driver import drive_async
from .pipeline import Call, drive_sync
from .surface import GUARDED
from . import warnsite

# qdrant-client's warnings count their stacklevel for a direct call; the facade's frames would take it.
warnsite.install()

_RAW_HANDLES = ("http", "grpc_points", "grpc_collections")
# The constructor options (api_key, headers, auth_token_provider) are made to be passed back to a
# constructor: ``QdrantClient(**client.init_options)`` is a client on the same server without guard=.
_OPTION_HANDLES = ("init_options",)

# qdrant-client's async client makes these two plain methods (its uploaders use their own
# synchronous connections); the guarded versions stay plain methods too.
_SYNC_IN_ASYNC = frozenset({"upload_points", "upload_collection"})

# Arguments the guarded client adds to qdrant-client's methods. Without guard= they are dropped
# before the original is called (qdrant-client refuses unknown arguments with a bare
# AssertionError), so code written for the guard also runs on a client built without a policy.
_ADDED_KWARGS: dict[str, tuple[str, ...]] = {
    "query_points": ("query_text",),
    "query_points_groups": ("query_text",),
}


def _without_added(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    added = _ADDED_KWARGS.get(name)
    if not added or not any(k in kwargs for k in added):
        return kwargs
    return {k: v for k, v in kwargs.items() if k not in added}


def _by_key(union: Any) -> dict[str, type[pydantic.BaseModel]]:
    """Each operation model of ``union`` by its one field (``{"upsert": models.UpsertOperation}``)."""
    return {next(iter(cls.model_fields)): cls for cls in typing.get_args(union)}


_UPDATE_OPERATIONS = _by_key(models.UpdateOperation)
_ALIAS_OPERATIONS = _by_key(models.AliasOperations)


def _as_models(method: str, param: str, operations: Any,
               kinds: dict[str, type[pydantic.BaseModel]]) -> list[pydantic.BaseModel]:
    """``operations`` as qdrant_client.http.models operations.

    qdrant-client itself accepts operations given as dicts (its REST path validates them); the
    pipeline checks models only, so a dict is validated here and anything else is refused rather
    than passed through unchecked.
    """
    expected = " | ".join(f"models.{cls.__name__}" for cls in kinds.values())
    if isinstance(operations, (Mapping, str, bytes)) or not isinstance(operations, Iterable):
        raise UnsupportedWriteError(
            f"{method}() argument {param!r} must be a sequence of operations ({expected}), "
            f"not {type(operations).__name__}"
        )
    out: list[pydantic.BaseModel] = []
    for i, op in enumerate(operations):
        if isinstance(op, grpc.AliasOperations) and kinds is _ALIAS_OPERATIONS:
            op = GrpcToRest.convert_alias_operations(op)  # as qdrant-client's REST path does
        if isinstance(op, pydantic.BaseModel) and isinstance(op, tuple(kinds.values())):
            if kinds is _ALIAS_OPERATIONS:
                # Validated again (a few names): one built with model_construct() can hold a str
                # subclass whose __hash__/__eq__ miss the policy of the collection it names,
                # while pydantic sends its characters.
                op = type(op).model_validate(op.model_dump())
            out.append(op)
            continue
        if isinstance(op, Mapping):
            cls = kinds.get(next(iter(op))) if len(op) == 1 else None
            if cls is not None:
                try:
                    out.append(cls.model_validate(op))
                    continue
                except pydantic.ValidationError as exc:
                    raise UnsupportedWriteError(
                        f"{method}() {param}[{i}] is not a valid models.{cls.__name__}: {_problems(exc)}. "
                        f"Pass the operation as a models.{cls.__name__}"
                    ) from None
            raise UnsupportedWriteError(
                f"{method}() {param}[{i}] is a dict with keys {sorted(map(str, op))}; expected exactly "
                f"one of {sorted(kinds)}. Pass the operation as one of {expected}"
            )
        raise UnsupportedWriteError(
            f"{method}() {param}[{i}] is a {type(op).__module__}.{type(op).__name__}, which the guard "
            f"cannot check; pass one of {expected}"
        )
    return out


def _problems(exc: pydantic.ValidationError) -> str:
    """Where pydantic found ``exc``'s first errors and what it says of each, without the input
    values its own message quotes (a payload's SSN or password)."""
    errors = exc.errors(include_input=False, include_url=False, include_context=False)
    named = [f"{'.'.join(map(str, e['loc'])) or '<operation>'} ({e['msg']})" for e in errors[:3]]
    more = f" and {len(errors) - 3} more" if len(errors) > 3 else ""
    return "; ".join(named) + more


def _normalise(method: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Operation arguments in the one form the pipeline checks (see :func:`_as_models`)."""
    if method == "batch_update_points":
        arguments["update_operations"] = _as_models(
            method, "update_operations", arguments["update_operations"], _UPDATE_OPERATIONS)
    elif method == "update_collection_aliases":
        arguments["change_aliases_operations"] = _as_models(
            method, "change_aliases_operations", arguments["change_aliases_operations"], _ALIAS_OPERATIONS)
    return arguments


def _binder(original: Callable[..., Any]) -> Callable[..., dict[str, Any]]:
    """A fast equivalent of ``inspect.signature(original).bind`` + ``apply_defaults`` (a guarded
    call binds its arguments on every call, so the generic binder's cost matters)."""
    sig = inspect.signature(original)
    params = list(sig.parameters.values())[1:]  # without self
    P = inspect.Parameter
    positional = [p.name for p in params if p.kind is P.POSITIONAL_OR_KEYWORD]
    known = {p.name for p in params if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)}
    defaults = {p.name: p.default for p in params if p.name in known and p.default is not P.empty}
    required = [p.name for p in params if p.name in known and p.default is P.empty]
    var_kw = any(p.kind is P.VAR_KEYWORD for p in params)
    fname = original.__name__

    def bind(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if len(args) > len(positional):
            raise TypeError(f"{fname}() takes {len(positional) + 1} positional arguments but {len(args) + 1} were given")
        arguments = dict(defaults)
        for name, value in zip(positional, args):
            arguments[name] = value
        for name, value in kwargs.items():
            if name in known:
                if name in positional[: len(args)]:
                    raise TypeError(f"{fname}() got multiple values for argument '{name}'")
            elif not var_kw:
                raise TypeError(f"{fname}() got an unexpected keyword argument '{name}'")
            arguments[name] = value
        for name in required:
            if name not in arguments:
                raise TypeError(f"{fname}() missing 1 required argument: '{name}'")
        return arguments

    return bind


def _sync_method(name: str, original: Callable[..., Any], base: type,
                 make_invoke: Callable[[Any, type], Callable[[Call], Any]] | None = None) -> Callable[..., Any]:
    """A guarded plain method: the pipeline's requests run through ``make_invoke(client, base)``
    (default: the base class's methods, the whole operation under the local-mode lock)."""
    bind = _binder(original)

    locked = make_invoke is None
    make_invoke = make_invoke or _plain_invoke

    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        guard = self._guard
        if guard is None:
            return original(self, *args, **_without_added(name, kwargs))
        op = guard.run(name, _bound(guard, name, bind(self, args, kwargs)))
        lock = self._local_lock if locked else None
        if lock is None:
            return drive_sync(op, make_invoke(self, base))
        # The whole operation holds the local-mode lock but for its Offloads (embedder,
        # classifier), as the async client runs it without suspending: a read-then-write (the
        # receipts an overwrite_payload carries along) is not interleaved by another thread's write.
        with lock:
            return drive_sync(op, make_invoke(self, base), offload=functools.partial(_unlocked, lock))

    return method


def _plain_invoke(client: Any, base: type) -> Callable[[Call], Any]:
    def invoke(call: Call) -> Any:
        return getattr(base, call.method)(client, **call.kwargs)

    return invoke


def _unlocked(lock: Any, fn: Callable[[], Any]) -> Any:
    """``fn()`` with ``lock`` (held once more by this thread) released meanwhile."""
    lock.release()
    try:
        return fn()
    finally:
        lock.acquire()


def _bound(guard: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    # A transparent client forwards its arguments exactly as given, like qdrant-client.
    if guard.transparent:
        return arguments
    try:
        return _normalise(name, arguments)
    except UnsupportedWriteError as exc:
        # Refused before the pipeline decides anything: audited here, as a write's other input is.
        raise guard.refused_operations(name, arguments, exc) from None


def _async_method(name: str, original: Callable[..., Any], base: type) -> Callable[..., Any]:
    bind = _binder(original)

    @functools.wraps(original)
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        guard = self._guard
        if guard is None:
            return await original(self, *args, **_without_added(name, kwargs))

        async def invoke(call: Call) -> Any:
            return await getattr(base, call.method)(self, **call.kwargs)

        return await drive_async(guard.run(name, _bound(guard, name, bind(self, args, kwargs))), invoke,
                                 lock=self._local_alock())

    return method


def _async_upload_method(name: str, original: Callable[..., Any], base: type) -> Callable[..., Any]:
    """A guarded plain method of the async client (``upload_points``/``upload_collection``).

    The pipeline's other requests (the collection layout) are coroutine methods of the async
    client; this method cannot await them, so it completes them synchronously (see
    :func:`_complete`). In local mode it holds the client's lock throughout
    (:meth:`~qdrant_guard.async_lock.TaskLock.acquire_plain`).
    """
    plain = _sync_method(name, original, base, make_invoke=_completing_invoke)

    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        lock = self._alock if self._guard is not None else None
        if lock is None:  # no policy, or a server connection (the server orders the requests)
            return plain(self, *args, **kwargs)
        lock.acquire_plain(functools.partial(_inside_another_operation, name),
                           reentry=functools.partial(_inside_own_operation, name))
        try:
            return plain(self, *args, **kwargs)
        finally:
            lock.release()

    return method


def _inside_another_operation(name: str) -> QdrantGuardError:
    """The refusal of a plain upload made on an event loop's thread while another task's guarded
    local-mode operation of the client holds its lock (suspended while a worker thread runs its
    next step; on this loop or another). The upload cannot wait for it (the loop would stop with
    the holder, or the task it passes the lock to, not done), and run then it lands between the
    holder's read and its write: an ``overwrite_payload`` that writes the receipts it read back
    onto the points stored a new vector with the old one's receipt."""
    return QdrantGuardError(
        f"{name}() was called on an event loop while another guarded operation of this local-mode client is in "
        "progress; run between that operation's steps, the upload would land between its read and its write. "
        "Nothing was sent. Await the other call first, use `await client.upsert(...)`, which waits its turn, or "
        "call the upload from a thread without an event loop (`await asyncio.to_thread(client.upload_points, "
        "...)`), where it waits for the lock")


def _inside_own_operation(name: str) -> QdrantGuardError:
    """The refusal of a plain upload from a thread without a loop that a guarded operation holding
    the client's lock started (its embedder or classifier, in a call nested in another's Qdrant
    request: the nested call's Offload releases only its own hold): that operation's task awaits
    the thread, so waiting for the lock would wait for good."""
    return QdrantGuardError(
        f"{name}() was called from a thread started by a guarded call of this local-mode client that still holds "
        "the client (an embedder or classifier of a guarded call nested in another's Qdrant request); that call "
        "waits for this thread, so the upload would wait for it for good. Nothing was sent. Make the upload "
        "after that call returns (return the points from the embedder's caller and upload them then), or use "
        "a client without that nesting")


def _completing_invoke(client: Any, base: type) -> Callable[[Call], Any]:
    def invoke(call: Call) -> Any:
        fn = getattr(base, call.method)
        if not inspect.iscoroutinefunction(fn):
            return fn(client, **call.kwargs)
        return _complete(client, call, fn)

    return invoke


def _complete(client: Any, call: Call, fn: Callable[..., Coroutine[Any, Any, Any]]) -> Any:
    """The result of coroutine method ``fn`` of the async client, from plain code.

    Local mode never suspends, so its coroutine finishes on the first step. A server connection
    belongs to the running event loop and cannot be used from here: the call goes through a
    synchronous client with the same constructor options (qdrant-client's own async uploaders open
    synchronous connections the same way).
    """
    if isinstance(client._client, AsyncQdrantLocal):
        coro = fn(client, **call.kwargs)
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        coro.close()
        raise QdrantGuardError(f"local-mode {call.method} suspended; qdrant_guard cannot complete it here (a bug)")
    # Kept on the original client (shared by its with_principal views), which closes it.
    origin = getattr(client, "_origin", client)
    sync = getattr(origin, "_sync_twin", None)
    if sync is None:
        sync = qdrant_client.QdrantClient(**origin._init_options)  # init_options is refused under a policy
        origin._sync_twin = sync
    return getattr(qdrant_client.QdrantClient, call.method)(sync, **call.kwargs)


def _unimplemented(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{original.__qualname__} is not implemented by qdrant-client")

    return method


def _raw_handle(name: str, base: type, what: str = "a raw API handle") -> property:
    original = getattr(base, name)

    def getter(self: Any) -> Any:
        guard = self._guard
        if guard is not None and not guard.transparent:
            raise guard.refuse(guard.decision(
                name, None, None, Verdict.REFUSED_CROSS_BOUNDARY,
                f"client.{name} is {what} that would bypass the guard policy; use the "
                "client's methods, or a plain qdrant_client client outside the guard",
            ))
        return original.fget(self)

    return property(getter, doc=original.__doc__)


def install(cls: type, base: type, *, is_async: bool) -> None:
    """Install the guarded methods of ``base`` on ``cls``."""
    for name in sorted(GUARDED):
        original = getattr(base, name, None)
        if original is None or not callable(original):
            continue
        if is_async and name in _SYNC_IN_ASYNC:
            setattr(cls, name, _async_upload_method(name, original, base))
            continue
        if is_async and not inspect.iscoroutinefunction(original):
            # AsyncQdrantClient.migrate is a plain method that raises NotImplementedError; keep that.
            setattr(cls, name, _unimplemented(original))
            continue
        make = _async_method if is_async else _sync_method
        setattr(cls, name, make(name, original, base))
    for name in _RAW_HANDLES:
        if isinstance(getattr(base, name, None), property):
            setattr(cls, name, _raw_handle(name, base))
    for name in _OPTION_HANDLES:
        if isinstance(getattr(base, name, None), property):
            setattr(cls, name, _raw_handle(
                name, base, "the connection's options and credentials (a client built from them has no guard)"))


class PrincipalViews:
    """Mixin: ``with_principal`` gives another agent its own guarded view of the same store."""

    _guard: Any
    _is_view: bool = False
    _origin: PrincipalViews  # a view's: the client it was made from (set on views only)

    def with_principal(self, principal: Any) -> Self:
        """Return a client that shares this one's connection (and, in local mode, its store), policy,
        keys, audit log and budgets, but acts as ``principal``.

        Closing a view does not close the shared connection; close the original client.

        Raises:
            QdrantGuardError: the client has no guard policy.
            CredentialError: the principal's credential does not verify.
            GuardArgumentTypeError: ``principal`` is neither a Principal nor a token.
        """
        if self._guard is None:
            raise QdrantGuardError("with_principal needs a client constructed with guard=")
        # Verified before the copy: a view that failed half-built would be collected as an origin,
        # and an origin's __del__ closes the connection this client still uses.
        guard = self._guard.for_principal(principal)
        view = copy.copy(self)
        view._guard = guard
        view._is_view = True
        # The view keeps its origin alive: the origin's __del__ closes the shared connection.
        view._origin = getattr(self, "_origin", self)
        return view
