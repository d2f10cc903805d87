"""What the guards of one process share per store: which backends are one store
(:func:`store_identity`), the epoch that ends cached source sizes when any of them writes
(:class:`SourceSizeEpoch`, :func:`size_epoch_for`) and the ``"memory"`` extraction budget store
(:func:`memory_budget_store_for`).
"""
from __future__ import annotations

import math
import os
import threading
import time
import weakref
from typing import Any, Callable, MutableMapping, TypeVar

from qdrant_client.async_qdrant_remote import AsyncQdrantRemote
from qdrant_client.local.async_qdrant_local import AsyncQdrantLocal
from qdrant_client.local.qdrant_local import QdrantLocal
from qdrant_client.qdrant_remote import QdrantRemote

# How long a budgeted read keeps a source's counted size (budgetops.BudgetOps.source_size).
SOURCE_SIZE_TTL_S = 30.0


class _SizesOf:
    """A guard's ``shared`` state, held weakly by the epochs it reads (a dict cannot be)."""

    __slots__ = ("shared", "__weakref__")

    def __init__(self, shared: dict[str, Any]) -> None:
        self.shared = shared


class SourceSizeEpoch:
    """The writes to one store that the guards of this process send, and whose cached source
    sizes they end.

    Every guard reading the same store (see :func:`store_identity`) joins the same epoch; a write
    through any of them that may have changed the store drops the cached sizes of all of them.
    Each guard's cached sizes are one dict (``shared["source_sizes"]``), which a write replaces
    rather than empties: a count stores its size in the dict it found before it was sent, so a
    count that a write overlapped lands in a dict no read sees any more, wherever a thread switch
    falls. ``quiet_until``: a count begun before this (monotonic) time may be of before a write
    Qdrant has acknowledged but not yet applied, and is not kept.
    """

    __slots__ = ("quiet_until", "_members", "_lock", "__weakref__")

    def __init__(self) -> None:
        self.quiet_until = -math.inf
        self._members: "weakref.WeakSet[_SizesOf]" = weakref.WeakSet()
        # Re-entrant: the collector can finalise an abandoned write (which ends here) while this
        # thread holds it.
        self._lock = threading.RLock()

    def join(self, member: _SizesOf) -> None:
        with self._lock:
            self._members.add(member)

    def wrote(self, *, unwaited: bool) -> None:
        """A write that may have changed the store has ended (done, failed or abandoned)."""
        with self._lock:  # two writers ending at once must not lose the later horizon
            if unwaited:
                self.quiet_until = max(self.quiet_until, time.monotonic() + SOURCE_SIZE_TTL_S)
            members = list(self._members)
        for member in members:
            member.shared.pop("source_sizes", None)


# One epoch per store identity while a guard holds it.
_EPOCHS: "weakref.WeakValueDictionary[tuple[str, str], SourceSizeEpoch]" = weakref.WeakValueDictionary()


_EPOCHS_LOCK = threading.Lock()


def store_identity(backend: Any) -> tuple[str, str] | None:
    """What makes two qdrant-client backends one store, or None for a store no other client
    reaches (``":memory:"``, or a backend of unknown type).

    A server is its REST address as qdrant-client builds it (scheme, host, port, prefix; also for
    a gRPC client, whose REST address names the same server), the host's case and a trailing
    ``/`` aside; the same server reached under another name is another identity, and its guards
    see each other's writes as another process's. A local-mode directory is its real path
    (qdrant-client lets one client at a time open it, in or out of this process).
    """
    if isinstance(backend, (QdrantRemote, AsyncQdrantRemote)):
        # Taking two spellings for one server costs only extra drops; taking one server for two
        # lets a guard keep a size the other's write made stale.
        scheme, _, rest = str(backend.rest_uri).partition("://")
        address, slash, path = rest.partition("/")
        return ("server", f"{scheme.lower()}://{address.lower()}{(slash + path).rstrip('/')}")
    if isinstance(backend, (QdrantLocal, AsyncQdrantLocal)) and backend.persistent:
        return ("local", os.path.realpath(backend.location))
    return None


# The "memory" extraction budget of each store identity, for the life of the process: a store per
# guarded client gave a principal a fresh budget with every client an application built for it.
_MEMORY_BUDGETS: dict[tuple[str, str], Any] = {}


_T = TypeVar("_T")


def memory_budget_store_for(identity: tuple[str, str] | None) -> Any:
    """The ``"memory"`` budget store every guard of this process on store ``identity``
    (:func:`store_identity`) shares; a store of its own for None (``":memory:"``, whose points no
    other client reaches)."""
    from .budget import MemoryBudgetStore
    return _per_store(_MEMORY_BUDGETS, identity, MemoryBudgetStore)


def size_epoch_for(backend: Any) -> SourceSizeEpoch:
    """The epoch every guard of this process reading ``backend``'s store shares."""
    return _per_store(_EPOCHS, store_identity(backend), SourceSizeEpoch)


def _per_store(registry: MutableMapping[tuple[str, str], _T], identity: tuple[str, str] | None,
               make: Callable[[], _T]) -> _T:
    """``registry``'s object for store ``identity``, made on first use; a new one for None."""
    if identity is None:
        return make()
    with _EPOCHS_LOCK:
        obj = registry.get(identity)
        if obj is None:
            obj = registry[identity] = make()
        return obj

