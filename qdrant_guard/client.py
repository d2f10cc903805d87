"""The guarded synchronous client: ``from qdrant_guard import QdrantClient``."""
from __future__ import annotations

import os
import threading
from typing import Any, Awaitable, Callable


import qdrant_client
from qdrant_client.local.qdrant_local import QdrantLocal

from ._facade import PrincipalViews, install
from .boundary import Principal
from .guard import Guard, build_guard, warn_if_key_dies_with_the_process
from .pipeline import Embedder
from .policy import GuardConfig


class QdrantClient(PrincipalViews, qdrant_client.QdrantClient):
    """Drop-in replacement for :class:`qdrant_client.QdrantClient` with a guard policy.

    Accepts every argument of the original, plus:

    Args:
        guard: a :class:`GuardConfig`, or the path of a TOML policy file (a str or a
            ``pathlib.Path``). None (default): no policy; the client behaves exactly like
            qdrant-client.
        principal: who is calling: a :class:`Principal` carrying a boundary credential (the token
            ``qdrant-guard credential issue`` prints), or the token itself. None, or a Principal
            without a credential: unverified, which reaches PUBLIC collections only (and
            collections unlisted under ``unlisted = "public"``).
        embedder: callable ``list[str] -> array (n, d)`` used to embed ``models.Document`` texts
            after redaction on sensitive collections.

    ``query_points`` and ``query_points_groups`` also take ``query_text=``: the text a raw query
    vector was embedded from, which the guard screens, scans and classifies on sensitive
    collections as it does a ``models.Document`` query's (the policy's ``query.require_text``
    refuses a raw vector without it; a client without ``guard=`` accepts and ignores it).

    Every method keeps the original signature. Against a Qdrant server (``url=``/``host=``) the
    pipeline is the same as in local mode (``":memory:"``/``path=``): the guard runs in this
    process, in front of whichever backend qdrant-client selected, and looks at the backend in a
    few places only (docs/server.md, "Untested here").

    Raises:
        ConfigError: the policy is missing or invalid, or ``principal=``/``embedder=`` is given
            without ``guard=`` (it would be ignored); ``GuardArgumentTypeError`` (a ConfigError and a
            TypeError) when ``guard=`` or ``principal=`` is of the wrong type.
        CredentialError: the principal's credential is malformed, forged, revoked, from a key no
            ``[boundaries.NAME]`` lists, or for another agent or boundary than the Principal names.
        qdrant_guard.keys.KeyStoreError: the policy's ``signing_key`` cannot be loaded (the message
            says how to fix it).
        AuditError: the policy's ``audit_log`` cannot be opened, or does not verify back to its
            last signed checkpoint, or holds entries after it that the guard will not sign over
            (``AuditUnauthenticatedError``: docs/audit-log.md).
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
        # The guard is built first: an invalid policy or credential must fail before connecting.
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
        # qdrant-client's local mode is not thread-safe; guarded calls into it are serialised so
        # that agents sharing one embedded store from several threads cannot corrupt it. Each
        # guarded operation holds it throughout but for its Offloads (see _facade._sync_method).
        self._local_lock = threading.RLock() if isinstance(self._client, QdrantLocal) else None

    def close(self, grpc_grace: float | None = None, **kwargs: Any) -> None:
        """Close the connection (a :meth:`with_principal` view leaves the shared one open)."""
        if not self._is_view:
            super().close(grpc_grace=grpc_grace, **kwargs)

    def __del__(self) -> None:
        if not getattr(self, "_is_view", False):
            super().__del__()

    @property
    def guard(self) -> Guard | None:
        """The guard pipeline of this client (None when constructed without a policy).

        The operator's handle: whoever holds it can change the live policy, sign with the guard's
        key and reset budgets. Hand agents the client's methods, not this object
        (docs/threat-model.md, *Bypassing the guard*).
        """
        return self._guard


install(QdrantClient, qdrant_client.QdrantClient, is_async=False)
