"""The errors qdrant-client raises for a collection or alias that does not exist, in local mode
and from a server, so a refusal the guard answers for Qdrant looks like Qdrant's own.
"""
from __future__ import annotations

import json


def missing_collection_error(name: str, *, remote: bool) -> Exception:
    """The error ``get_collection`` raises for a collection that does not exist: qdrant-client's
    local mode raises ``ValueError("Collection NAME not found")``; a server's REST API answers 404
    with ``Not found: Collection `NAME` doesn't exist!`` (qdrant-client raises UnexpectedResponse)."""
    if not remote:
        return ValueError(f"Collection {name} not found")
    return _not_found(f"Collection `{name}` doesn't exist!")


def missing_alias_error(name: str, *, remote: bool) -> Exception:
    """The error renaming an alias that does not exist raises: qdrant-client's local mode raises
    ``ValueError("Alias NAME does not exist")``; a server answers 404 (``Not found: Alias NAME does
    not exists!``)."""
    if not remote:
        return ValueError(f"Alias {name} does not exist")
    return _not_found(f"Alias {name} does not exists!")


def _not_found(message: str) -> Exception:
    """qdrant-client's error for a server's 404 answer carrying ``message``."""
    import httpx
    from qdrant_client.http.exceptions import UnexpectedResponse

    body = json.dumps({"status": {"error": f"Not found: {message}"}, "time": 0.0},
                      ensure_ascii=False, separators=(",", ":")).encode()
    return UnexpectedResponse(404, "Not Found", body, httpx.Headers({"content-type": "application/json"}))

