"""Inversion attacks on (noised) embeddings, measured against their chance baselines.

1. :func:`candidate_ranking` — secret recovery: the attacker knows the text around a planted secret
   and a candidate set containing the true value, embeds every candidate completion and ranks the
   candidates by cosine similarity to the released embedding.
2. :func:`bow_inversion` — bag-of-words inversion (Song & Raghunathan, CCS 2020): a multi-label
   linear probe (closed-form ridge regression, regularisation chosen on a held-out part of the
   training split) maps an embedding to the set of words of its text. Compared with the prior-only
   baseline that predicts the most frequent words for every text, and optionally with a reference
   attacker's scores (:func:`probe_scores`), such as the probe on texts without identifiers.
3. :func:`reidentify` — nearest-neighbour re-identification of the source text in a candidate pool.

Only numpy is used; the attack models are trained deterministically (no randomness at all). The
bootstrap interval of the bag-of-words advantage resamples the test texts with a fixed seed.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .corpus import identifiers_by_case, is_identifier_token, is_topic_token, tokenize

__all__ = [
    "candidate_ranking", "BowVocab", "build_vocab", "probe_scores", "bow_inversion", "reidentify",
    "micro_f1_topk",
]


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n == 0, 1.0, n)


def candidate_ranking(candidates: np.ndarray, released: np.ndarray) -> dict[str, float]:
    """Rank candidates against released embeddings; row j of ``released`` has truth j.

    Args:
        candidates: ``(m, d)`` the attacker's embeddings of every candidate completion.
        released: ``(m, d)`` the released (noised) embedding when candidate j is the truth.

    Returns:
        ``top1`` (fraction of truths ranked first), ``mean_rank_pct`` (mean normalised rank of the
        truth, 0 = first, 0.5 = chance) and ``chance`` (1/m).
    """
    sims = _unit(released) @ _unit(candidates).T
    m = len(candidates)
    truth = sims[np.arange(m), np.arange(m)]
    # Ties count against the attacker: the truth must beat every other candidate strictly.
    better = (sims > truth[:, None]).sum(axis=1)
    ties = (sims == truth[:, None]).sum(axis=1) - 1
    top1 = float(np.mean((better == 0) & (ties == 0)))
    rank_pct = float(np.mean((better + 0.5 * ties) / max(m - 1, 1)))
    return {"top1": top1, "mean_rank_pct": rank_pct, "chance": 1.0 / m}


@dataclass(frozen=True)
class BowVocab:
    """The attacker's label space: frequent words split into identifier tokens and topic words."""

    words: tuple[str, ...]
    identifier: np.ndarray
    topic: np.ndarray

    def labels(self, texts: Sequence[str]) -> np.ndarray:
        """Binary word-presence matrix ``(len(texts), len(words))``."""
        index = {w: i for i, w in enumerate(self.words)}
        y = np.zeros((len(texts), len(self.words)), dtype=np.float64)
        for r, text in enumerate(texts):
            for tok in set(tokenize(text)):
                j = index.get(tok)
                if j is not None:
                    y[r, j] = 1.0
        return y


def build_vocab(train_texts: Sequence[str], *, min_df: int = 4) -> BowVocab:
    """Words present in at least ``min_df`` training texts (identifier tokens or topic words).

    Identifiers are numbers and code names (:func:`~.corpus.is_identifier_token`) plus the codes
    and rare proper tokens the training texts' case reveals (:func:`~.corpus.identifiers_by_case`).
    """
    df: Counter[str] = Counter()
    for text in train_texts:
        df.update(set(tokenize(text)))
    by_case = identifiers_by_case(train_texts)

    def identifier(w: str) -> bool:
        return is_identifier_token(w) or w in by_case

    words = sorted(w for w, c in df.items() if c >= min_df and (identifier(w) or is_topic_token(w)))
    ident = np.array([identifier(w) for w in words], dtype=bool)
    return BowVocab(tuple(words), ident, ~ident)


def _ridge(x: np.ndarray, y: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    mu = x.mean(axis=0)
    xc = x - mu
    ym = y.mean(axis=0)
    w = np.linalg.solve(xc.T @ xc + lam * np.eye(x.shape[1]), xc.T @ (y - ym))
    return w, ym - mu @ w


def _row_counts(scores: np.ndarray, truth: np.ndarray, k: int) -> np.ndarray:
    """Per-row ``(tp, fp, fn)`` of predicting the ``k`` highest-scoring labels of each row."""
    if k <= 0 or truth.shape[1] == 0:
        return np.column_stack([np.zeros(len(truth)), np.zeros(len(truth)), (truth > 0).sum(axis=1)])
    k = min(k, scores.shape[1])
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    pred = np.zeros_like(truth, dtype=bool)
    np.put_along_axis(pred, top, True, axis=1)
    pos = truth > 0
    return np.column_stack([(pred & pos).sum(axis=1), (pred & ~pos).sum(axis=1), (~pred & pos).sum(axis=1)]).astype(np.float64)


def _f1(counts: np.ndarray) -> np.ndarray:
    """Micro-F1 from summed ``(..., 3)`` counts (0 where there is no true positive)."""
    tp, fp, fn = counts[..., 0], counts[..., 1], counts[..., 2]
    denom = 2 * tp + fp + fn
    return np.where(tp > 0, 2 * tp / np.where(denom == 0, 1.0, denom), 0.0)


def micro_f1_topk(scores: np.ndarray, truth: np.ndarray, k: int) -> float:
    """Micro-F1 of predicting the ``k`` highest-scoring labels of each row."""
    return float(_f1(_row_counts(scores, truth, k).sum(axis=0)))


def advantage_interval(
    scores: np.ndarray, prior: np.ndarray, truth: np.ndarray, k: int, prior_k: int,
    *, resamples: int = 1000, seed: int = 0,
) -> tuple[float, float]:
    """95 % bootstrap interval of ``F1(scores, k) - F1(prior, prior_k)`` over the test rows.

    Rows are resampled with replacement; ``k`` and ``prior_k`` stay as chosen on the full test set.
    The interval says how much of a measured advantage is the luck of the test sample.
    """
    a, p = _row_counts(scores, truth, k), _row_counts(prior, truth, prior_k)
    idx = np.random.default_rng(seed).integers(0, len(truth), size=(resamples, len(truth)))
    diff = _f1(a[idx].sum(axis=1)) - _f1(p[idx].sum(axis=1))
    lo, hi = np.percentile(diff, [2.5, 97.5])
    return float(lo), float(hi)


def _best_f1(scores: np.ndarray, truth: np.ndarray, max_k: int = 30) -> tuple[float, int]:
    best = (0.0, 0)
    for k in range(1, min(max_k, scores.shape[1]) + 1):
        f1 = micro_f1_topk(scores, truth, k)
        if f1 > best[0]:
            best = (f1, k)
    return best


def probe_scores(
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    *,
    lambdas: Sequence[float] = (0.1, 1.0, 10.0, 100.0),
) -> tuple[np.ndarray, float]:
    """Train the bag-of-words probe on ``(train_x, train_y)`` and score ``test_x``.

    The ridge regularisation is the one of ``lambdas`` with the best F1 on the last 20 % of the
    training split, refitted on all of it.

    Returns:
        ``(scores, lambda)``: one score per test text and label, and the chosen regularisation.
    """
    n_fit = int(len(train_x) * 0.8)
    best_lam, best_score = lambdas[0], -1.0
    for lam in lambdas:
        w, b = _ridge(train_x[:n_fit], train_y[:n_fit], lam)
        score = _best_f1(train_x[n_fit:] @ w + b, train_y[n_fit:])[0]
        if score > best_score:
            best_lam, best_score = lam, score
    w, b = _ridge(train_x, train_y, best_lam)
    return test_x @ w + b, best_lam


def bow_inversion(
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    vocab: BowVocab,
    *,
    lambdas: Sequence[float] = (0.1, 1.0, 10.0, 100.0),
    reference: np.ndarray | None = None,
) -> dict[str, dict[str, float | tuple[float, float]]]:
    """Train the probe on ``(train_x, train_y)`` and score it on ``test_x`` against the prior.

    For each word class (``identifier``, ``topic``) the prediction is the top-k words of that class
    per text; k is the best for the test set, for the attacker and for the prior-only baseline
    alike (an optimistic choice for both sides).

    Args:
        reference: optional scores of a second attacker on the same test texts
            (:func:`probe_scores`), for example one that reads the vectors of the texts with their
            identifiers deleted. The attacker is then also compared with it, like with the prior.

    Returns:
        ``{"identifier": {...}, "topic": {...}}`` with ``f1``, ``k``, ``prior_f1``, ``prior_k``,
        ``advantage`` (``f1 - prior_f1``), ``advantage_ci`` (its 95 % bootstrap interval over the
        test texts, see :func:`advantage_interval`) and ``labels`` (vocabulary size of the class);
        with ``reference``, also ``reference_f1``, ``reference_k``, ``over_reference``
        (``f1 - reference_f1``) and ``over_reference_ci``.
    """
    scores, best_lam = probe_scores(train_x, train_y, test_x, lambdas=lambdas)
    prior = np.broadcast_to(train_y.mean(axis=0), test_y.shape)
    out: dict[str, dict[str, float | tuple[float, float]]] = {}
    for name, mask in (("identifier", vocab.identifier), ("topic", vocab.topic)):
        truth = test_y[:, mask]
        f1, k = _best_f1(scores[:, mask], truth)
        pf1, pk = _best_f1(np.array(prior[:, mask]), truth)
        ci = advantage_interval(scores[:, mask], np.array(prior[:, mask]), truth, k, pk)
        out[name] = {
            "f1": f1,
            "k": k,
            "prior_f1": pf1,
            "prior_k": pk,
            "advantage": f1 - pf1,
            "advantage_ci": ci,
            "labels": int(mask.sum()),
            "lambda": best_lam,
        }
        if reference is not None:
            rf1, rk = _best_f1(reference[:, mask], truth)
            out[name].update(
                reference_f1=rf1,
                reference_k=rk,
                over_reference=f1 - rf1,
                over_reference_ci=advantage_interval(scores[:, mask], reference[:, mask], truth, k, rk),
            )
    return out


def reidentify(pool: np.ndarray, released: np.ndarray) -> dict[str, float]:
    """Top-1 re-identification: row i of ``released`` comes from row i of ``pool``.

    Ties count against the attacker, as in :func:`candidate_ranking`: a candidate as similar as the
    truth is ranked before it, so a truth tied with a wrong candidate is not a top-1 hit, and is a
    top-10 hit only if fewer than 10 candidates are at least as similar (an all-zero released
    vector, equally similar to every row, is no top-1 hit); a NaN similarity is a miss. Exact
    float comparison and no randomness, so the result is the same on every run.

    Returns:
        ``top1`` (fraction re-identified), ``top10`` and ``chance`` (1/len(pool)).
    """
    sims = _unit(released) @ _unit(pool).T
    n = len(pool)
    truth = sims[np.arange(n), np.arange(n)]
    ahead = (sims >= truth[:, None]).sum(axis=1) - 1  # other candidates at least as similar
    ranked = ~np.isnan(truth)  # a NaN similarity ranks nothing
    return {
        "top1": float(np.mean(ranked & (ahead == 0))),
        "top10": float(np.mean(ranked & (ahead < 10))),
        "chance": 1.0 / n,
    }
