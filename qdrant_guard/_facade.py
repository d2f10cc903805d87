"""Builds the guarded methods of both facades from one table (qdrant_guard.surface).

Each guarded method keeps the original's name, signature and docstring (``functools.wraps``;
type checkers see the inherited signatures), binds its arguments, and hands them to the
pipeline. With no guard policy the original method is called directly.
"""
from __future__ import annotations

import copy
import functools
import inspect
from typing import Any, Callable, Self

from .errors import QdrantGuardError
from .pipeline import Call, drive_async, drive_sync
from .surface import GUARDED

_RAW_HANDLES = ("http", "grpc_points", "grpc_collections")


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


def _sync_method(name: str, original: Callable[..., Any], base: type) -> Callable[..., Any]:
    bind = _binder(original)

    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        guard = self._guard
        if guard is None:
            return original(self, *args, **kwargs)

        lock = self._local_lock

        def invoke(call: Call) -> Any:
            if lock is None:
                return getattr(base, call.method)(self, **call.kwargs)
            with lock:
                return getattr(base, call.method)(self, **call.kwargs)

        return drive_sync(guard.run(name, bind(self, args, kwargs)), invoke)

    return method


def _async_method(name: str, original: Callable[..., Any], base: type) -> Callable[..., Any]:
    bind = _binder(original)

    @functools.wraps(original)
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        guard = self._guard
        if guard is None:
            return await original(self, *args, **kwargs)

        async def invoke(call: Call) -> Any:
            return await getattr(base, call.method)(self, **call.kwargs)

        return await drive_async(guard.run(name, bind(self, args, kwargs)), invoke)

    return method


def _unimplemented(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{original.__qualname__} is not implemented by qdrant-client")

    return method


def _raw_handle(name: str, base: type) -> property:
    original = getattr(base, name)

    def getter(self: Any) -> Any:
        if self._guard is not None and not self._guard.transparent:
            raise QdrantGuardError(
                f"client.{name} is a raw API handle that would bypass the guard policy; use the "
                "client's methods, or a plain qdrant_client client outside the guard"
            )
        return original.fget(self)

    return property(getter, doc=original.__doc__)


def install(cls: type, base: type, *, is_async: bool) -> None:
    """Install the guarded methods of ``base`` on ``cls``."""
    for name in sorted(GUARDED):
        original = getattr(base, name, None)
        if original is None or not callable(original):
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


class PrincipalViews:
    """Mixin: ``with_principal`` gives another agent its own guarded view of the same store."""

    _guard: Any
    _is_view: bool = False

    def with_principal(self, principal: Any) -> Self:
        """Return a client that shares this one's connection (and, in local mode, its store), policy,
        keys, audit log and budgets, but acts as ``principal``.

        Closing a view does not close the shared connection; close the original client.

        Raises:
            QdrantGuardError: the client has no guard policy.
            CredentialError: the principal's credential does not verify.
        """
        if self._guard is None:
            raise QdrantGuardError("with_principal needs a client constructed with guard=")
        view = copy.copy(self)
        view._guard = self._guard.for_principal(principal)
        view._is_view = True
        # The view keeps its origin alive: the origin's __del__ closes the shared connection.
        view._origin = getattr(self, "_origin", self)
        return view
