"""Calibration: :func:`calibrate` measures the retrieval quality noise costs on a collection at each
candidate epsilon and signs the frontier into a :class:`~qdrant_guard.utility_record.UtilityRecord`
(the :mod:`qdrant_guard.utility` docstring tells how), with the embedding model names a record
carries (:func:`same_model`, :func:`embedder_model_name`). :mod:`qdrant_guard.utility` re-exports the
public names.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import math
import numbers
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .errors import GuardArgumentTypeError, GuardArgumentValueError, QdrantGuardError
from .progress import progress_iter
from .ranking_metrics import _as_grades, retrieval_metrics
from .utility_record import UTILITY_DOMAIN, UtilityRecord, _within

__all__ = [
    "DEFAULT_EPSILONS",
    "DEFAULT_MIN_QUERIES",
    "UtilityCalibrationError",
    "calibrate",
    "embedder_model_name",
    "same_model",
]

_QUERY_DOMAIN = b"qdrant-guard utility queries v1\0"
_SEED_KEY_DOMAIN = b"qdrant-guard calibration seed v1\0"

#: Candidate ladder, strongest noise first. At the policy default radius 0.01 and delta 1e-6 the
#: analytic Gaussian sigma per coordinate runs from about 0.44 (0.125; 0.29 without the lattice
#: margin, see docs/privacy.md) down to about 0.002 (32), for 384-d vectors.
DEFAULT_EPSILONS: tuple[float, ...] = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)

_METRICS = ("recall", "ndcg", "overlap")

#: Fewest queries :func:`calibrate` signs a record on, and the default of the policy's
#: ``utility.min_queries`` (see ``UtilityPolicy.min_queries`` for the arithmetic).
DEFAULT_MIN_QUERIES = 20


class UtilityCalibrationError(QdrantGuardError):
    """No candidate noise level satisfies the utility threshold and the epsilon ceiling.

    Attributes:
        frontier: the measured levels (one dict per candidate epsilon).
    """

    def __init__(self, message: str, frontier: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(message)
        self.frontier = [dict(level) for level in frontier]


def _measured_count(used: list[Any], used_qrels: Mapping[int, Any] | None, metric: str) -> int:
    """How many of ``used`` the metric averages over: with qrels, recall and nDCG skip the queries
    without a relevant label (:func:`retrieval_metrics`); overlap and known-item recall take all."""
    if used_qrels is None or metric == "overlap":
        return len(used)
    return sum(1 for j in range(len(used)) if j in used_qrels and _as_grades(used_qrels[j]))


def _check_query_count(used: list[Any], used_qrels: Mapping[int, Any] | None, metric: str, min_queries: int,
                       allow_few_queries: bool, given: int) -> None:
    counted = _measured_count(used, used_qrels, metric)
    if counted >= min_queries or allow_few_queries:
        return
    labelled = " with relevance labels in qrels" if counted != len(used) else ""
    raise GuardArgumentValueError(
        f"{metric} would be measured on {counted} quer{'y' if counted == 1 else 'ies'}{labelled} (of {given} given), "
        f"fewer than min_queries={min_queries}: one query's {metric} moves in large steps, so the drop would be "
        f"mostly chance; nothing was measured or signed. Give at least {min_queries} queries (more --queries"
        f"{', labelled in --qrels' if labelled else ''}, or a larger --sample-limit), or lower min_queries "
        f"(`--min-queries`, and the policy's utility.min_queries); allow_few_queries=True (`--allow-few-queries`) "
        "signs such a record anyway, for tests and demos")


def _read_collection(
    client: Any, collection: str, vector_name: str | None
) -> tuple[list[Any], np.ndarray, Any]:
    from qdrant_client import models

    info = client.get_collection(collection)
    params = info.config.params.vectors
    if isinstance(params, Mapping):
        if vector_name is None:
            if len(params) != 1:
                raise GuardArgumentValueError(
                    f"collection {collection!r} has named vectors {sorted(params)}; pass "
                    "vector_name= (`qdrant-guard calibrate --vector-name`) to choose one"
                )
            vector_name = next(iter(params))
        if vector_name not in params:
            raise GuardArgumentValueError(
                f"collection {collection!r} has no vector named {vector_name!r}; "
                f"it has {sorted(params)}"
            )
        vparams = params[vector_name]
    else:
        if vector_name not in (None, ""):
            raise GuardArgumentValueError(
                f"collection {collection!r} has one unnamed vector; drop vector_name={vector_name!r}"
            )
        vector_name = None
        vparams = params
    ids: list[Any] = []
    rows: list[list[float]] = []
    offset = None
    while True:
        points, offset = client.scroll(
            collection, limit=512, offset=offset, with_payload=False, with_vectors=True
        )
        for p in points:
            vec = p.vector
            if isinstance(vec, Mapping):
                if vector_name not in vec:
                    # Qdrant lets a point lack a named vector; searches of that vector never
                    # return it, so it is no document of this calibration.
                    continue
                vec = vec[vector_name]
            ids.append(p.id)
            rows.append(list(vec))
        if offset is None:
            break
    if not rows:
        what = f"has no point with vector {vector_name!r}" if vector_name else "is empty"
        raise GuardArgumentValueError(f"collection {collection!r} {what}; calibrate needs its clean vectors")
    distance = vparams.distance
    if not isinstance(distance, models.Distance):
        distance = models.Distance(distance)
    return ids, np.asarray(rows, dtype=np.float32), (vector_name, distance)


def _search(
    client: Any, collection: str, queries: np.ndarray, k: int, using: str | None
) -> list[list[Any]]:
    from qdrant_client import models

    out: list[list[Any]] = []
    step = 64
    for start in range(0, len(queries), step):
        requests = [
            models.QueryRequest(query=q.tolist(), limit=k, using=using)
            for q in queries[start : start + step]
        ]
        for resp in client.query_batch_points(collection, requests=requests):
            out.append([p.id for p in resp.points])
    return out


def _seed_key(seed: int, purpose: bytes) -> bytes:
    return hashlib.sha256(_SEED_KEY_DOMAIN + purpose + str(int(seed)).encode()).digest()


def noise_pair(
    docs: np.ndarray,
    queries: np.ndarray,
    *,
    mechanism: str,
    epsilon: float,
    radius: float,
    delta: float | None,
    clip_norm: float | None,
    seed: int | None,
) -> tuple[np.ndarray, np.ndarray, Any]:
    """Noise documents and queries at one level with :func:`qdrant_guard.noise.privatize`.

    With ``seed`` the noise is the production mechanism in *keyed* mode under a key derived from
    the seed (reproducible measurements); without it, fresh CSPRNG noise.

    Returns:
        ``(noised_docs, noised_queries, NoiseParams)``.
    """
    from . import noise

    kd = _seed_key(seed, b"docs") if seed is not None else None
    kq = _seed_key(seed, b"queries") if seed is not None else None
    d = None if mechanism == "laplace_l2" else delta
    nd, params = noise.privatize(
        docs, mechanism=mechanism, epsilon=epsilon, radius=radius, delta=d, clip_norm=clip_norm, key=kd
    )
    nq, _ = noise.privatize(
        queries, mechanism=mechanism, epsilon=epsilon, radius=radius, delta=d, clip_norm=clip_norm, key=kq
    )
    return nd, nq, params


def _drop(clean: float, noisy: float) -> float:
    if clean <= 0.0:
        return 0.0
    return float(1.0 - noisy / clean)


def _canonical_queries(queries: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for q in queries:
        if isinstance(q, str):
            out.append(q)
        else:
            out.append([float(x) for x in np.asarray(q, dtype=np.float64).ravel()])
    return out


def query_sample_digest(queries: Sequence[Any]) -> str:
    """SHA-256 hex over the canonical encoding of the query texts or vectors."""
    from .canonical import canonical_json

    return hashlib.sha256(_QUERY_DOMAIN + canonical_json(_canonical_queries(queries))).hexdigest()


def _check_positive(name: str, value: Any, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GuardArgumentTypeError(f"calibrate() argument '{name}' must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise GuardArgumentValueError(f"calibrate() argument '{name}' must be a finite number > 0, got {value!r}")


def _frontier_table(levels: Sequence[Mapping[str, Any]], metric: str) -> str:
    lines = [f"  {'epsilon':>9} {'sigma':>10} {metric:>8} {'drop':>8}"]
    for lv in levels:
        lines.append(
            f"  {lv['epsilon']:>9.4g} {lv['scale']:>10.4g} {lv[metric]:>8.4f} {lv['drop']:>8.4f}"
        )
    return "\n".join(lines)


def _round_up_4(value: float) -> str:
    """``value`` to 4 decimals, rounded up: advice to raise a bound to it must then be enough."""
    # Less the rounding _within forgives: a drop of 0.075 computed as 0.07500000000000007 needs 0.0750.
    text = f"{math.ceil((value - 1e-12) * 10_000) / 10_000:.4f}"
    if not _within(value, float(text)):  # value * 10_000 itself rounded down
        text = f"{float(text) + 0.0001:.4f}"
    return text


def same_model(a: str, b: str) -> bool:
    """Whether embedding model names ``a`` and ``b`` name the same model, as qdrant-client's
    inference resolves them: case-insensitively (``str.lower``; qdrant_client/fastembed_common.py's
    ``is_supported_*_model`` and fastembed's ``TextEmbedding`` both look a name up lowercased), so
    ``BAAI/bge-small-en-v1.5`` and ``baai/bge-small-en-v1.5`` load one model. Otherwise exact:
    no whitespace or Unicode folding, which no resolver does either."""
    return str.__str__(a).lower() == str.__str__(b).lower()


def embedder_model_name(embedder: Any) -> str | None:
    """The model name an embedder exposes, on itself or on the object whose bound method it is:
    its ``model_id`` (what the guard records in receipts, as :class:`HashingEmbedder` has) or
    ``model_name`` (fastembed's ``TextEmbedding``); None when it has no non-empty string one."""
    for owner in (embedder, getattr(embedder, "__self__", None)):
        for attr in ("model_id", "model_name"):
            name = getattr(owner, attr, None) if owner is not None else None
            if isinstance(name, str) and name.strip():
                return name
    return None


def _embedding_model(embedding_model: Any, embedder: Any) -> str | None:
    """The model name a record is to carry: the one given, else the embedder's (see calibrate)."""
    named = embedder_model_name(embedder) if embedder is not None else None
    if embedding_model is None:
        return named
    if not isinstance(embedding_model, str):
        raise GuardArgumentTypeError(f"calibrate() argument 'embedding_model' must be a str or None, not "
                                     f"{type(embedding_model).__name__}")
    if not embedding_model.strip():
        raise GuardArgumentValueError("calibrate() argument 'embedding_model' is empty; name the model the "
                                      "collection's vectors came from, e.g. 'sentence-transformers/all-MiniLM-L6-v2', "
                                      "or pass None")
    if named is not None and not same_model(named, embedding_model):
        # The queries would be embedded by one model and the record would name another.
        raise GuardArgumentValueError(f"calibrate() argument 'embedding_model' is {embedding_model!r}, but the "
                                      f"embedder embeds with {named!r}; name the embedder's model (names are compared "
                                      "as qdrant-client resolves them: exactly but for case), or pass an embedder of the model the collection was embedded with")
    return embedding_model


def calibrate(
    client: Any,
    collection: str,
    queries: Sequence[Any],
    qrels: Mapping[int, Any] | None = None,
    k: int = 10,
    *,
    mechanism: str = "gaussian",
    radius: float,
    delta: float = 1e-6,
    clip_norm: float | None = 1.0,
    epsilons: Sequence[float] = DEFAULT_EPSILONS,
    threshold: float = 0.05,
    epsilon_ceiling: float | None = None,
    signer: Any = None,
    embedder: Callable[[list[str]], np.ndarray] | None = None,
    progress: bool = True,
    sample_limit: int | None = None,
    seed: int | None = None,
    metric: str = "recall",
    vector_name: str | None = None,
    embedding_model: str | None = None,
    allow_small_collection: bool = False,
    min_queries: int = DEFAULT_MIN_QUERIES,
    allow_few_queries: bool = False,
) -> UtilityRecord:
    """Choose the strongest noise level whose retrieval-quality drop stays within ``threshold``.

    A level qualifies when its drop and the drop of every level with a larger epsilon (less noise)
    are within ``threshold``, and its epsilon within ``epsilon_ceiling``: the guard refuses a level
    when a weaker measured one fails (:meth:`UtilityRecord.level_refusal`), and with few queries
    the measured drops need not grow monotonically with the noise.

    Args:
        client: a raw ``qdrant_client.QdrantClient`` that can read the clean vectors.
        collection: the (clean, staging or in-boundary) collection to calibrate.
        queries: query vectors, or query texts together with ``embedder``.
        qrels: query index -> set of relevant point ids, or dict id -> graded relevance. Without
            it, query i's known item is its clean top-1 (known-item recall).
        k: the cut-off of recall@k, nDCG@k and overlap@k.
        mechanism: ``"gaussian"`` or ``"laplace_l2"``.
        radius: protected L2 radius of the guarantee.
        delta: Gaussian delta (ignored for ``laplace_l2``).
        clip_norm: clip vectors to this L2 norm before noising (``None``: no clipping).
        epsilons: candidate privacy levels; measured from the smallest (strongest noise) up.
        threshold: largest accepted relative drop ``1 - noisy/clean`` of ``metric``.
        epsilon_ceiling: levels above it are measured and recorded but never chosen.
        signer: Ed25519 private key that signs the record (``None``: unsigned record).
        embedder: callable ``list[str] -> ndarray`` for text queries. For vectors the guard
            embedded itself, give it the guard's text path so queries match the documents:
            ``lambda ts: model([generalize_identifiers(redact(t)) for t in ts])`` under the
            default policy (``qdrant_guard.identifiers``, ``qdrant_guard.detect``).
        progress: draw a progress bar on stderr.
        sample_limit: measure at most this many queries (a random sample; seeded by ``seed``).
        seed: makes the measurement reproducible on the same stored vectors: noise from the keyed
            mechanism under a key derived from the seed, which depends on each vector's exact
            bytes. qdrant-client's local mode rewrites a Cosine collection's stored vectors in their
            last bits on every search (it renormalises them), and ``calibrate`` searches the
            collection itself, so a second seeded run on such a collection draws other noise.
            Never use it for production writes.
        metric: ``"recall"`` (default), ``"ndcg"`` (needs qrels) or ``"overlap"``.
        vector_name: which named vector to calibrate (needed when the collection has several).
            The record carries the measured vector's name (``""`` for an unnamed vector), and a
            guard applies a record of a named vector only to writes of a vector of that name.
        embedding_model: the embedding model the collection's vectors (and the queries) came from,
            e.g. ``"sentence-transformers/all-MiniLM-L6-v2"``, signed into the record; a policy
            that sets ``utility.embedding_model`` accepts only records naming its model. ``None``:
            the ``model_id`` or ``model_name`` of ``embedder`` (or of the object whose bound method
            it is) when it has a non-empty string one (:func:`embedder_model_name`), else not
            named. It is what the caller asserts: calibrate cannot tell which model made the
            collection's vectors.
        allow_small_collection: sign a record measured on a collection of no more than ``k``
            points (default False: refused). Every top-k of such a collection holds all of its
            points, so no noise lowers recall@k or overlap@k there and the record would vouch for
            the strongest level tried; for tests and demos only.
        min_queries: fewest queries the metric may average over (after ``sample_limit``; with
            ``qrels`` and metric ``recall`` or ``ndcg``, the queries with labels) for the record to
            be signed; default :data:`DEFAULT_MIN_QUERIES`, the policy's default
            ``utility.min_queries``. Fewer raise, nothing measured, unless ``allow_few_queries``.
        allow_few_queries: sign a record measured on fewer than ``min_queries`` queries anyway
            (default False); a guard then refuses it unless its policy's ``utility.min_queries``
            is as low or it sets ``utility.allow_small_records``. For tests and demos only.

    Returns:
        The (signed) :class:`UtilityRecord`.

    Raises:
        UtilityCalibrationError: no level meets both the threshold and the ceiling; the message
            shows the measured frontier and which constraint to relax.
        TypeError, ValueError: a bad argument, or a clean ``metric`` of 0 (qrels naming no point
            the clean search returns: there is no quality to lose), an ``embedding_model`` other
            than the model ``embedder`` names, a collection of no more than ``k`` points without
            ``allow_small_collection``, or fewer than ``min_queries`` queries without
            ``allow_few_queries`` (nothing is measured).
    """
    if not isinstance(collection, str) or not collection:
        raise GuardArgumentTypeError("calibrate() argument 'collection' must be a non-empty str")
    if mechanism not in ("gaussian", "laplace_l2"):
        raise GuardArgumentValueError(f"mechanism must be 'gaussian' or 'laplace_l2', got {mechanism!r}")
    if metric not in _METRICS:
        raise GuardArgumentValueError(f"metric must be one of {_METRICS}, got {metric!r}")
    embedding_model = _embedding_model(embedding_model, embedder)
    if metric == "ndcg" and qrels is None:
        raise GuardArgumentValueError("metric='ndcg' needs qrels (graded or binary relevance labels)")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise GuardArgumentValueError(f"calibrate() argument 'k' must be an int >= 1, got {k!r}")
    for flag, given in (("allow_small_collection", allow_small_collection), ("allow_few_queries", allow_few_queries)):
        if not isinstance(given, bool):
            raise GuardArgumentTypeError(f"calibrate() argument '{flag}' must be a bool, not {type(given).__name__}")
    if isinstance(min_queries, bool) or not isinstance(min_queries, numbers.Integral) or min_queries < 1:
        raise GuardArgumentValueError(f"calibrate() argument 'min_queries' must be an int >= 1, got {min_queries!r}")
    _check_positive("radius", radius)
    _check_positive("clip_norm", clip_norm, allow_none=True)
    _check_positive("epsilon_ceiling", epsilon_ceiling, allow_none=True)
    if mechanism == "gaussian":
        if isinstance(delta, bool) or not isinstance(delta, numbers.Real):
            raise GuardArgumentTypeError(f"calibrate() argument 'delta' must be a number, not {type(delta).__name__}")
        if not (1e-300 <= delta < 1):
            raise GuardArgumentValueError(f"gaussian needs 1e-300 <= delta < 1, got delta={delta!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not (
        0 <= threshold < 1
    ):
        raise GuardArgumentValueError(f"threshold must be a number in [0, 1), got {threshold!r}")
    if isinstance(epsilons, (str, bytes)) or not isinstance(epsilons, Iterable):
        # A string would be read one character at a time ("124" as 1, 2 and 4).
        raise GuardArgumentTypeError(f"calibrate() argument 'epsilons' must be a sequence of numbers such as "
                                     f"(0.5, 1.0, 2.0), not {type(epsilons).__name__}")
    epsilons = list(epsilons)
    for e in epsilons:
        if isinstance(e, bool) or not isinstance(e, numbers.Real):
            raise GuardArgumentTypeError(f"calibrate() argument 'epsilons' holds a {type(e).__name__}; give "
                                         "numbers such as (0.5, 1.0, 2.0)")
        _check_positive("epsilons[]", float(e))
    eps_list = sorted({float(e) for e in epsilons})
    if not eps_list:
        raise GuardArgumentValueError("epsilons is empty; pass at least one candidate epsilon")
    for name, value in (("sample_limit", sample_limit), ("seed", seed)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise GuardArgumentTypeError(f"calibrate() argument '{name}' must be an int or None, not "
                                         f"{type(value).__name__}")
    queries = list(queries)
    if not queries:
        raise GuardArgumentValueError("queries is empty; pass query vectors or texts")
    if qrels is not None and not isinstance(qrels, Mapping):
        raise GuardArgumentTypeError(f"qrels must be a mapping query index -> relevant ids, not {type(qrels).__name__}")

    index = list(range(len(queries)))
    if sample_limit is not None and sample_limit < len(queries):
        if sample_limit < 1:
            raise GuardArgumentValueError(f"sample_limit must be >= 1, got {sample_limit!r}")
        rng = np.random.default_rng(seed)
        index = sorted(rng.choice(len(queries), size=sample_limit, replace=False).tolist())
    used = [queries[i] for i in index]
    used_qrels = {j: qrels[i] for j, i in enumerate(index) if i in qrels} if qrels is not None else None

    if all(isinstance(q, str) for q in used):
        if embedder is None:
            raise GuardArgumentValueError("queries are texts: pass embedder= (a callable list[str] -> ndarray)")
        qvecs = np.asarray(embedder(list(used)), dtype=np.float32)
    elif any(isinstance(q, str) for q in used):
        raise GuardArgumentTypeError("queries mixes texts and vectors; pass only one kind")
    else:
        qvecs = np.asarray([np.asarray(q, dtype=np.float32).ravel() for q in used], dtype=np.float32)
    if qvecs.ndim != 2 or not np.all(np.isfinite(qvecs)):
        raise GuardArgumentValueError("query vectors must form a finite 2-D array (n_queries, dim)")

    ids, docs, (using, distance) = _read_collection(client, collection, vector_name)
    if len(ids) <= k and not allow_small_collection:
        # Every top-k then holds the whole collection: no noise moves a point out of it, so recall
        # and overlap lose nothing at any level (nDCG only reorders), and the record would vouch for
        # the strongest level on evidence that says nothing about a collection of real size.
        shown = f"vector {using!r} of collection {collection!r}" if using else f"collection {collection!r}"
        raise GuardArgumentValueError(
            f"{shown} holds {len(ids)} point(s), no more than k={k}: every top-{k} returns all of them, so "
            f"noise cannot move a point out of it and the measured {metric}@{k} drop says nothing about real "
            f"data; nothing was measured or signed. Calibrate on a collection much larger than k (a staging "
            f"copy of the real one: add points), or lower k (`--k`, and the policy's utility.k) below "
            f"{len(ids)}; allow_small_collection=True (`--allow-small-collection`) signs such a record anyway, "
            "for tests and demos")
    if qvecs.shape[1] != docs.shape[1]:
        raise GuardArgumentValueError(
            f"query dimension {qvecs.shape[1]} does not match collection dimension {docs.shape[1]}"
        )

    clean_results = _search(client, collection, qvecs, k, using)
    known = [r[0] if r else None for r in clean_results]
    clean = retrieval_metrics(
        clean_results, k=k, qrels=used_qrels, known_items=known, reference=clean_results
    )
    if metric not in clean:
        raise GuardArgumentValueError(f"no query has relevance labels in qrels; cannot measure {metric!r}")
    if clean[metric] <= 0.0:
        # Nothing to lose: every level would show a drop of 0 and the strongest would be signed.
        raise GuardArgumentValueError(
            f"clean {metric}@{k} is 0 on collection {collection!r}: no relevant id in qrels is among "
            "the clean results; check that qrels name the collection's point ids"
        )
    _check_query_count(used, used_qrels, metric, min_queries, allow_few_queries, len(queries))

    from qdrant_client import QdrantClient, models

    measured: list[dict[str, Any]] = []
    for eps in progress_iter(eps_list, total=len(eps_list), desc="calibrate", enabled=progress):
        nd, nq, params = noise_pair(
            docs, qvecs, mechanism=mechanism, epsilon=eps, radius=radius, delta=delta,
            clip_norm=clip_norm, seed=seed,
        )
        tmp = QdrantClient(":memory:")
        try:
            tmp.create_collection(
                "calibration", vectors_config=models.VectorParams(size=docs.shape[1], distance=distance)
            )
            tmp.upload_points(
                "calibration",
                points=[models.PointStruct(id=pid, vector=v.tolist()) for pid, v in zip(ids, nd)],
                batch_size=512,
                wait=True,
            )
            noisy_results = _search(tmp, "calibration", nq, k, None)
        finally:
            tmp.close()
        noisy = retrieval_metrics(
            noisy_results, k=k, qrels=used_qrels, known_items=known, reference=clean_results
        )
        drops = {m: _drop(clean[m], noisy[m]) for m in noisy}
        level: dict[str, Any] = {"epsilon": eps, "scale": float(params.scale)}
        level.update(noisy)
        level["drops"] = drops
        level["drop"] = drops[metric]
        measured.append(level)

    # A level qualifies only when no level with less noise (a larger epsilon) fails as well: the
    # guard refuses writes at a level with a failing weaker one (UtilityRecord.level_refusal), and
    # measured drops need not grow monotonically with the noise.
    worst_from = [0.0] * len(measured)  # worst_from[i]: the largest drop at epsilons >= level i's
    worst = -math.inf
    for i in range(len(measured) - 1, -1, -1):
        worst = max(worst, measured[i]["drop"])
        worst_from[i] = worst
    for i, lv in enumerate(measured):
        lv["feasible"] = bool(
            _within(worst_from[i], threshold)
            and (epsilon_ceiling is None or lv["epsilon"] <= epsilon_ceiling)
        )

    chosen = next((i for i, lv in enumerate(measured) if lv["feasible"]), None)
    if chosen is None:
        table = _frontier_table(measured, metric)
        under = [i for i, lv in enumerate(measured)
                 if epsilon_ceiling is None or lv["epsilon"] <= epsilon_ceiling]
        meeting = [lv for i, lv in enumerate(measured) if _within(worst_from[i], threshold)]
        hints = []
        if under:
            best = _round_up_4(min(worst_from[i] for i in under))
            # A threshold is a drop below 1: advice to raise it to 1 (every level under the
            # ceiling lost everything) could not be followed.
            if float(best) < 1.0:
                hints.append(
                    f"raise threshold to >= {best} (smallest drop under the ceiling "
                    "with no weaker level dropping more)"
                )
        if meeting:
            hints.append(
                f"raise epsilon_ceiling to >= {meeting[0]['epsilon']!r} (smallest epsilon within "
                "the threshold)"
            )
        elif epsilon_ceiling is None or eps_list[-1] < epsilon_ceiling:
            # A level above the ceiling is measured but never chosen.
            hints.append("add larger epsilons to the ladder (weaker noise"
                         + ("" if epsilon_ceiling is None else f", up to the ceiling {epsilon_ceiling:g}") + ")")
        else:
            hints.append(f"add epsilons above {eps_list[-1]:g} to the ladder and raise epsilon_ceiling to "
                         "them (weaker noise than any level measured)")
        if not under:
            hints.append(f"add epsilons <= {epsilon_ceiling:g} to the ladder (every level measured is above "
                         "the ceiling)")
        ceiling = ("" if epsilon_ceiling is None else f" with epsilon <= {epsilon_ceiling:g}")
        raise UtilityCalibrationError(
            f"no noise level keeps the {metric}@{k} drop <= {threshold:g} (at it and at every "
            f"weaker level measured){ceiling} on collection {collection!r}; "
            "relax a constraint: "
            + "; or ".join(hints)
            + f". Measured frontier ({mechanism}, radius {radius:g}, clean {metric} "
            f"{clean[metric]:.4f}):\n{table}",
            measured,
        )

    key_id_str = None
    if signer is not None:
        from .keys import key_id

        key_id_str = key_id(signer.public_key())
    record = UtilityRecord(
        collection=collection,
        mechanism=mechanism,
        epsilon=measured[chosen]["epsilon"],
        delta=0.0 if mechanism == "laplace_l2" else float(delta),
        radius=float(radius),
        clip_norm=None if clip_norm is None else float(clip_norm),
        scale=measured[chosen]["scale"],
        k=k,
        threshold=float(threshold),
        metric=metric,
        mode="qrels" if used_qrels is not None else "known_item",
        epsilon_ceiling=None if epsilon_ceiling is None else float(epsilon_ceiling),
        clean=clean,
        measured=measured,
        chosen_level=chosen,
        query_sample_digest=query_sample_digest(used),
        n_queries=len(used),
        n_measured_queries=_measured_count(used, used_qrels, metric),
        n_documents=len(ids),
        created_at=int(time.time() * 1000),
        dim=int(docs.shape[1]),
        vector_name=using or "",
        distance=distance.value,
        embedding_model=embedding_model,
        signer_key_id=key_id_str,
    )
    if signer is not None:
        sig = signer.sign(UTILITY_DOMAIN + record.signed_bytes())
        record = dataclasses.replace(record, signature=base64.b64encode(sig).decode("ascii"))
    return record
