"""Deterministic embeddings for the integration tests: HashingEmbedder behind the LangChain and
LlamaIndex embedding interfaces (no model download, same vector for the same text every run).

Each adapter is defined only when its framework is importable, so importing this module never
fails; the test modules skip themselves with ``pytest.importorskip``.
"""
from __future__ import annotations

import hashlib
import re
from typing import Any

from qdrant_guard.hashing_embedder import HashingEmbedder

DIM = 32

try:
    from langchain_core.embeddings import Embeddings as _LCEmbeddings
except ImportError:  # pragma: no cover - exercised only without langchain-core
    _LCEmbeddings = None  # type: ignore[assignment,misc]

try:
    from langchain_qdrant import SparseEmbeddings as _LCSparseEmbeddings
    from langchain_qdrant import SparseVector as _LCSparseVector
except ImportError:  # pragma: no cover - exercised only without langchain-qdrant
    _LCSparseEmbeddings = None  # type: ignore[assignment,misc]

try:
    from llama_index.core.embeddings import BaseEmbedding as _LIBaseEmbedding
    from pydantic import PrivateAttr
except ImportError:  # pragma: no cover - exercised only without llama-index-core
    _LIBaseEmbedding = None  # type: ignore[assignment,misc]


def _rows(embedder: HashingEmbedder, texts: list[str]) -> list[list[float]]:
    return [[float(x) for x in row] for row in embedder(list(texts))]


def sparse_terms(text: str, buckets: int = 1 << 16) -> tuple[list[int], list[float]]:
    """Bag of words as a sparse vector: (sorted bucket indices, term counts). Deterministic."""
    counts: dict[int, float] = {}
    for word in re.findall(r"\w+", text.lower()):
        idx = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little") % buckets
        counts[idx] = counts.get(idx, 0.0) + 1.0
    indices = sorted(counts) or [0]
    return indices, [counts.get(i, 1.0) for i in indices]


def sparse_batch(texts: list[str]) -> tuple[list[list[int]], list[list[float]]]:
    """LlamaIndex ``SparseEncoderCallable``: texts -> (indices per text, values per text)."""
    pairs = [sparse_terms(t) for t in texts]
    return [i for i, _ in pairs], [v for _, v in pairs]


if _LCEmbeddings is not None:

    class LCHashingEmbeddings(_LCEmbeddings):
        """LangChain ``Embeddings`` over :class:`HashingEmbedder`."""

        def __init__(self, dim: int = DIM) -> None:
            self.embedder = HashingEmbedder(dim)

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return _rows(self.embedder, texts)

        def embed_query(self, text: str) -> list[float]:
            return _rows(self.embedder, [text])[0]


if _LCSparseEmbeddings is not None:

    class LCBagOfWordsSparse(_LCSparseEmbeddings):
        """langchain-qdrant ``SparseEmbeddings`` over :func:`sparse_terms` (for hybrid mode)."""

        def embed_documents(self, texts: list[str]) -> list[Any]:
            return [_LCSparseVector(indices=i, values=v) for i, v in map(sparse_terms, texts)]

        def embed_query(self, text: str) -> Any:
            indices, values = sparse_terms(text)
            return _LCSparseVector(indices=indices, values=values)


if _LIBaseEmbedding is not None:

    class LIHashingEmbedding(_LIBaseEmbedding):
        """LlamaIndex ``BaseEmbedding`` over :class:`HashingEmbedder`."""

        _embedder: Any = PrivateAttr()

        def __init__(self, dim: int = DIM, **kwargs: Any) -> None:
            super().__init__(model_name=f"qg-hashing-v1-{dim}", **kwargs)
            self._embedder = HashingEmbedder(dim)

        def _get_text_embedding(self, text: str) -> list[float]:
            return _rows(self._embedder, [text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return _rows(self._embedder, texts)

        def _get_query_embedding(self, query: str) -> list[float]:
            return _rows(self._embedder, [query])[0]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        async def _aget_text_embedding(self, text: str) -> list[float]:
            return self._get_text_embedding(text)


__all__ = ["DIM", "HashingEmbedder", "LCBagOfWordsSparse", "LCHashingEmbeddings", "LIHashingEmbedding",
           "sparse_batch", "sparse_terms"]


# Shared corpus of the integration tests.
TEXTS = [
    "refund policy for damaged goods",
    "warehouse lease ends in march",
    "payroll runs on fridays",
    "holiday schedule for the support team",
    "vpn setup guide for laptops",
    "laptop return process after leaving",
]
# A made-up key in AWS format (the detector rightly ignores AWS's documented "...EXAMPLE" key).
AWS_KEY_TEXT = "deploy with aws_access_key_id AKIAQ3EGRVXS4ZJPLJ7M and the usual bucket"
