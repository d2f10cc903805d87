"""A read's ``with_payload``: the caller's selector as qdrant-client would send it, and applying it
to the whole payload the guard fetched (what Qdrant would have returned).
"""
from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from qdrant_client import grpc
from qdrant_client.conversions.conversion import GrpcToRest
from qdrant_client.http import models
from qdrant_client.local.local_collection import LocalCollection

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")  # a top-level payload key, as Qdrant reads a key path


def project_payload(payload: dict[str, Any] | None, selector: Any) -> dict[str, Any] | None:
    """Apply a ``with_payload`` selector to a full payload (what Qdrant would have returned)."""
    if selector is True or payload is None:
        return payload
    if selector is False or selector is None:
        return None
    keys: Sequence[Any] | None
    if isinstance(selector, models.PayloadSelectorInclude):
        keys = selector.include
    elif isinstance(selector, models.PayloadSelectorExclude):
        keys = selector.exclude
    elif isinstance(selector, (list, tuple)):
        keys = selector
    else:
        keys = None
    if keys is None or not all(isinstance(k, str) and _PLAIN_KEY.fullmatch(k) for k in keys):
        # Another form, or a key path (``meta.source``, ``"a.b"``, ``arr[].x``) that selects inside
        # the payload: project it as Qdrant (local mode mirrors the server) does.
        return LocalCollection._process_payload(payload, selector)
    if isinstance(selector, models.PayloadSelectorExclude):
        return {k: v for k, v in payload.items() if k not in keys}
    return {k: v for k, v in payload.items() if k in keys}


# The REST request model qdrant-client validates a read's ``with_payload`` into, per guarded method
# (required fields given placeholders: only ``with_payload``'s errors can be raised).
_REST_READ_REQUESTS: dict[str, Callable[[Any], Any]] = {
    "query_points": lambda sel: models.QueryRequest(with_payload=sel),
    "query_batch_points": lambda sel: models.QueryRequest(with_payload=sel),
    "query_points_groups": lambda sel: models.QueryGroupsRequest(group_by="", with_payload=sel),
    "scroll": lambda sel: models.ScrollRequest(with_payload=sel),
    "retrieve": lambda sel: models.PointRequest(ids=[], with_payload=sel),
}


def _user_selector(selector: Any, method: str) -> Any:
    """The caller's ``with_payload`` as qdrant-client sends it to a server, for
    :func:`project_payload` to apply after the guard fetched the whole payload.

    A gRPC selector becomes its REST model. A form that is none of qdrant-client's declared types
    (a dict such as ``{"include": ["a"]}``, a set) becomes what qdrant-client's REST client
    validates it into for ``method`` (``models.PayloadSelectorInclude``, a list), and a form that
    fails that validation raises the REST client's ``ValidationError``, before anything is read.
    Local mode without the guard reads such a dict as a list of its keys instead (``{}`` for
    ``{"include": ["a"]}``); the guard projects what a server returns. A str and a list of
    non-str keys raise local mode's error, as both refuse them.
    """
    if isinstance(selector, grpc.WithPayloadSelector):
        return GrpcToRest.convert_with_payload_selector(selector)
    if selector is None or isinstance(selector, bool):
        return selector
    if isinstance(selector, (str, list, tuple, models.PayloadSelectorInclude, models.PayloadSelectorExclude)):
        # Called for its error: a str is refused here as local mode refuses it (outside its declared types).
        LocalCollection._process_payload({}, selector)  # type: ignore[arg-type]
        return selector
    return _REST_READ_REQUESTS.get(method, _REST_READ_REQUESTS["query_points"])(selector).with_payload

