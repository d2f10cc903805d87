"""Opening the Qdrant store a command names (``--path`` of a local store, or ``--url``), and what the
commands report about its collections.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from .errors import ConfigError


def _require_local_store(path: str) -> None:
    """Refuse a ``--path`` that is not a qdrant-client local store: local mode would create an empty
    one there, and a mistyped path would then report "collection not found" and leave a directory."""
    if not (Path(path) / "meta.json").is_file():
        what = "does not exist" if not Path(path).exists() else "holds no qdrant-client local store (no meta.json)"
        raise ConfigError(f"--path {path!r} {what}; give the directory the client was opened with "
                          "(QdrantClient(path=...)), or --url for a server")


def _client_from(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    import qdrant_client

    if args.url:
        return qdrant_client.QdrantClient(url=args.url, api_key=os.environ.get("QDRANT_API_KEY"))
    _require_local_store(args.path)
    return qdrant_client.QdrantClient(path=args.path)


def _receipted_points(client: Any, collection: str) -> int:
    """How many points of ``collection`` hold a receipt: vectors a guard (or a writer) noised."""
    from qdrant_client import models

    from .receipts import RECEIPT_KEY

    has_receipt = models.Filter(must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key=RECEIPT_KEY))])
    return int(client.count(collection, count_filter=has_receipt, exact=True).count)


def _print_missing_collection(client: Any, args: argparse.Namespace) -> None:
    names = sorted(c.name for c in client.get_collections().collections)
    print(f"error: --collection {args.collection!r} is not in the store at "
          f"{'--path ' + repr(args.path) if args.path else '--url ' + args.url} (its collections: "
          f"{', '.join(names) or 'none'}); check the name and the store", file=sys.stderr)
