"""The guarded asyncio client: ``from qdrant_guard import AsyncQdrantClient``.

It drives the same :class:`~qdrant_guard.guard.Guard` pipeline as the sync client (the
pipeline's operations are sans-IO generators), so no guard logic exists twice.
"""
from __future__ import annotations

import os
from typing import Any, Awaitable, Callable

import qdrant_client
from qdrant_client.local.async_qdrant_local import AsyncQdrantLocal

from ._facade import PrincipalViews, install
from .boundary import Principal
from .async_driver import TaskLock
from .guard import Guard, build_guard, warn_if_key_dies_with_the_process
from .pipeline import Embedder
from .policy import GuardConfig


class AsyncQdrantClient(PrincipalViews, qdrant_client.AsyncQdrantClient):
    """Drop-in replacement for :class:`qdrant_client.AsyncQdrantClient` with a guard policy.

    Takes the same extra arguments as :class:`qdrant_guard.QdrantClient` (``guard=``,
    ``principal=``, ``embedder=``, and ``query_text=`` on ``query_points`` and
    ``query_points_groups``) and behaves exactly like it.
    """

    _guard: Guard | None

    def __init__(
        self,
        location: str | None = None,
        url: str | None = None,
        port: int | None = 6333,
        grpc_port: int = 6334,
        prefer_grpc: bool = False,
        https: bool | None = None,
        api_key: str | None = None,
        prefix: str | None = None,
        timeout: int | None = None,
        host: str | None = None,
        path: str | None = None,
        force_disable_check_same_thread: bool = False,
        grpc_options: dict[str, Any] | None = None,
        auth_token_provider: Callable[[], str] | Callable[[], Awaitable[str]] | None = None,
        cloud_inference: bool = False,
        local_inference_batch_size: int | None = None,
        check_compatibility: bool = True,
        pool_size: int | None = None,
        headers: dict[str, str] | None = None,
        *,
        guard: GuardConfig | str | os.PathLike[str] | None = None,
        principal: Principal | str | None = None,
        embedder: Embedder | None = None,
        **kwargs: Any,
    ) -> None:
        self._guard = build_guard(guard, principal, embedder)
        super().__init__(
            location=location, url=url, port=port, grpc_port=grpc_port, prefer_grpc=prefer_grpc,
            https=https, api_key=api_key, prefix=prefix, timeout=timeout, host=host, path=path,
            force_disable_check_same_thread=force_disable_check_same_thread, grpc_options=grpc_options,
            auth_token_provider=auth_token_provider, cloud_inference=cloud_inference,
            local_inference_batch_size=local_inference_batch_size, check_compatibility=check_compatibility,
            pool_size=pool_size, headers=headers, **kwargs,
        )
        if self._guard is not None:  # its writes drop the source sizes of every guard on this store
            self._guard.bind_store(self._client)
        warn_if_key_dies_with_the_process(self._guard, self._client)
        # A guarded operation's steps run in worker threads (qdrant_guard.async_driver), so it
        # suspends between them; in local mode one operation at a time holds this lock but for its
        # Offloads, as the sync client holds its local-mode RLock: one lock for every event loop
        # the client is used from (qdrant_guard.async_lock); views share it.
        self._alock: TaskLock | None = TaskLock() if isinstance(self._client, AsyncQdrantLocal) else None

    def _local_alock(self) -> TaskLock | None:
        return self._alock

    async def close(self, grpc_grace: float | None = None, **kwargs: Any) -> None:
        """Close the connection (a :meth:`with_principal` view leaves the shared one open)."""
        if not self._is_view:
            twin = self.__dict__.pop("_sync_twin", None)  # made by a guarded upload (_facade._complete)
            if twin is not None:
                twin.close()
            await super().close(grpc_grace=grpc_grace, **kwargs)

    @property
    def guard(self) -> Guard | None:
        """The guard pipeline of this client (None when constructed without a policy).

        The operator's handle: whoever holds it can change the live policy, sign with the guard's
        key and reset budgets. Hand agents the client's methods, not this object
        (docs/threat-model.md, *Bypassing the guard*).
        """
        return self._guard


install(AsyncQdrantClient, qdrant_client.AsyncQdrantClient, is_async=True)
