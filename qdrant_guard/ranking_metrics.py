"""Retrieval quality of ranked results: mean recall@k, nDCG@k and overlap@k with a reference
ranking (:func:`retrieval_metrics`), as calibration and the evaluation measure it.
:mod:`qdrant_guard.utility` re-exports :func:`retrieval_metrics`.
"""
from __future__ import annotations

import math
import uuid
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["retrieval_metrics"]


def _norm_id(point_id: Any) -> str:
    # Qdrant accepts a UUID in any form (upper case, no hyphens, braces) and returns it canonical.
    if isinstance(point_id, str):
        try:
            return str(uuid.UUID(point_id))
        except ValueError:
            return point_id
    return str(point_id)


def _as_grades(relevant: Any) -> dict[str, float]:
    if isinstance(relevant, Mapping):
        return {_norm_id(k): float(v) for k, v in relevant.items() if float(v) > 0}
    return {_norm_id(k): 1.0 for k in relevant}


def retrieval_metrics(
    results: Sequence[Sequence[Any]],
    *,
    k: int,
    qrels: Mapping[int, Any] | None = None,
    known_items: Sequence[Any] | None = None,
    reference: Sequence[Sequence[Any]] | None = None,
) -> dict[str, float]:
    """Compute mean recall@k, nDCG@k (with qrels) and overlap@k with a reference ranking.

    Args:
        results: per query, the ranked retrieved point ids.
        k: the cut-off.
        qrels: query index -> set of relevant ids, or dict id -> graded relevance (gain = grade).
        known_items: per query, its one known relevant id (used when ``qrels`` is None).
        reference: per query, the clean top-k ids, for ``overlap`` = |top-k ∩ reference| / k.

    Returns:
        A dict with ``recall``, ``overlap`` (when ``reference``) and ``ndcg`` (when ``qrels``).
    """
    out: dict[str, float] = {}
    recalls: list[float] = []
    ndcgs: list[float] = []
    for i, ranked in enumerate(results):
        top = [_norm_id(p) for p in list(ranked)[:k]]
        if qrels is not None:
            if i not in qrels:
                continue
            grades = _as_grades(qrels[i])
            if not grades:
                continue
            hits = sum(1 for p in top if p in grades)
            recalls.append(hits / len(grades))
            dcg = sum(grades.get(p, 0.0) / math.log2(r + 2) for r, p in enumerate(top))
            ideal = sorted(grades.values(), reverse=True)[:k]
            idcg = sum(g / math.log2(r + 2) for r, g in enumerate(ideal))
            ndcgs.append(dcg / idcg)
        elif known_items is not None:
            recalls.append(1.0 if _norm_id(known_items[i]) in top else 0.0)
    if recalls:
        out["recall"] = float(np.mean(recalls))
    if ndcgs:
        out["ndcg"] = float(np.mean(ndcgs))
    if reference is not None:
        overlaps = [
            len({_norm_id(p) for p in list(r)[:k]} & {_norm_id(p) for p in list(ref)[:k]}) / k
            for r, ref in zip(results, reference)
        ]
        out["overlap"] = float(np.mean(overlaps)) if overlaps else 0.0
    return out
