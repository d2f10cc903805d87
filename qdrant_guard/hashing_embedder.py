"""A tiny deterministic text embedder for demos and tests (no model download).

It hashes word unigrams and character trigrams into a fixed number of dimensions and
L2-normalises the result, so texts that share words land close together. It is *not* a semantic
model: use a real sentence-embedding model in production (see the ``[eval]`` extra).
"""
from __future__ import annotations

import hashlib
import re
from typing import Sequence

import numpy as np

from .errors import GuardArgumentTypeError, GuardArgumentValueError

_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """Callable ``list[str] -> float32 array (n, dim)``.

    Args:
        dim: output dimension.
    """

    def __init__(self, dim: int = 384) -> None:
        if not isinstance(dim, int) or dim < 8:
            raise GuardArgumentValueError(f"dim must be an int >= 8, got {dim!r}")
        self.dim = dim
        self.model_id = f"qg-hashing-v1-{dim}"

    def _bucket(self, feature: str) -> tuple[int, float]:
        h = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        v = int.from_bytes(h, "little")
        return v % self.dim, (1.0 if (v >> 63) & 1 else -1.0)

    def embed_one(self, text: str) -> np.ndarray:
        """Embed one text."""
        vec = np.zeros(self.dim, dtype=np.float64)
        words = [w.lower() for w in _WORD.findall(text)]
        for w in words:
            i, s = self._bucket("w:" + w)
            vec[i] += 2.0 * s
            padded = f"#{w}#"
            for j in range(len(padded) - 2):
                i, s = self._bucket("c:" + padded[j:j + 3])
                vec[i] += 0.5 * s
        norm = float(np.linalg.norm(vec))
        if norm == 0:
            vec[0] = 1.0
            norm = 1.0
        return (vec / norm).astype(np.float32)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise GuardArgumentTypeError("HashingEmbedder takes a list of texts, not a single str")
        return np.stack([self.embed_one(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)
