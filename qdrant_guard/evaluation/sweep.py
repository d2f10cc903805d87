"""The evaluation sweep: utility and attacks at each noise level, with and without redaction.

Noise comes from the production mechanism, :func:`qdrant_guard.noise.privatize`, in *keyed* mode
(what the guard does by default: the same vector always gets the same noise) under keys derived
from ``--seed`` with SHA-256, so a run is reproducible. The seed never reaches production noise: it
only derives the keys of this sweep, samples the queries/carriers/splits with numpy, and nothing
else. The attack models themselves are deterministic (closed-form).
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import GuardArgumentValueError
from ..identifiers import drop_identifiers, generalize_identifiers
from ..progress import progress_iter
from ..ranking_metrics import retrieval_metrics
from . import attacks
from .corpus import load_paragraphs, make_carriers, make_queries
from .planted import plant_identifiers

__all__ = ["EvalConfig", "Level", "make_levels", "epsilon_for_sigma", "run_sweep", "DEFAULT_SIGMAS"]

#: Noise levels swept by default: sigma per coordinate of a unit-norm 384-d embedding.
DEFAULT_SIGMAS: tuple[float, ...] = (0.0, 0.01, 0.02, 0.03, 0.05, 0.08)


@dataclass
class EvalConfig:
    """What one evaluation run does.

    Attributes:
        seed: derives the sweep's noise keys and the numpy samples (never production noise).
        sigmas: noise levels (sigma per coordinate); 0 = no noise.
        max_docs: use at most this many paragraphs.
        n_queries: known-item queries.
        carriers_per_kind: paragraphs carrying a planted secret, per secret kind.
        n_candidates: the attacker's candidate values per carrier (chance = 1/n_candidates).
        k: retrieval cut-off.
        progress: draw progress bars.
        noise_policy: overrides of the policy's noise parameters (mechanism, epsilon, ...).
        noise_queries: noise the query vectors too. Off by default, as in the guard: a collection
            noises queries only with ``noise_queries = true``, for every principal not allowed raw
            vectors (outside its owner boundary, or everyone when ``raw_in_boundary = false``). On,
            utility is measured as if every query were noised (more pessimistic).
        generalize_identifiers: with redaction on, also generalise identifiers
            (:func:`qdrant_guard.identifiers.generalize_identifiers`) as the guard does for text it
            embeds under a policy with ``generalize_identifiers = true`` (the policy default, and
            this one's). Off: the redaction alone.
        planted_pool: planted identifiers per kind (:func:`.planted.plant_identifiers`) for the
            inversion attack on identifiers that carry no topic.
        utility_draws: independent noise draws (keys) over which retrieval utility is measured at
            each noised level. One draw's recall is one sample: at the policy default on the full
            corpus, draws differ by about 0.8 points of recall (standard deviation), so the
            target is judged on their mean and the report gives the spread. Draw 0 is the one the
            attacks see.
    """

    seed: int = 0
    sigmas: Sequence[float] = DEFAULT_SIGMAS
    max_docs: int | None = None
    n_queries: int = 300
    carriers_per_kind: int = 4
    n_candidates: int = 1000
    k: int = 10
    progress: bool = True
    noise_policy: dict[str, Any] = field(default_factory=dict)
    noise_queries: bool = False
    generalize_identifiers: bool = field(default_factory=lambda: _policy_default("generalize_identifiers"))
    planted_pool: int = 20
    utility_draws: int = 20


@dataclass(frozen=True)
class Level:
    """One noise level: the epsilon at the policy radius that yields ``sigma`` (0: no noise)."""

    label: str
    sigma: float
    epsilon: float | None
    is_policy_default: bool = False


def _policy_default(name: str) -> Any:
    from ..policy import CollectionPolicy

    return CollectionPolicy.model_fields[name].default


def _policy_defaults() -> dict[str, Any]:
    try:
        from ..policy import NoisePolicy

        p = NoisePolicy()
        return {
            "mechanism": p.mechanism,
            "epsilon": p.epsilon,
            "delta": p.delta,
            "radius": p.radius,
            "clip_norm": p.clip_norm,
        }
    except ImportError:
        return {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-6, "radius": 0.01, "clip_norm": 1.0}


def epsilon_for_sigma(sigma: float, delta: float, radius: float) -> float:
    """Invert :func:`qdrant_guard.noise.calibrate_gaussian_sigma` by bisection in log-epsilon."""
    from ..noise import calibrate_gaussian_sigma

    lo, hi = math.log(1e-4), math.log(1e4)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if calibrate_gaussian_sigma(math.exp(mid), delta, radius) > sigma:
            lo = mid
        else:
            hi = mid
    return math.exp(hi)


def make_levels(sigmas: Sequence[float], policy: dict[str, Any]) -> list[Level]:
    """The swept levels plus the policy's default epsilon, ordered by increasing noise."""
    from ..noise import calibrate_gaussian_sigma

    levels = []
    for s in sigmas:
        if not (math.isfinite(s) and s >= 0):
            raise GuardArgumentValueError(f"a noise level is a finite sigma >= 0 (0 = no noise), got {s!r}")
        if s == 0:
            levels.append(Level("clean", 0.0, None))
        else:
            eps = epsilon_for_sigma(s, policy["delta"], policy["radius"])
            levels.append(Level(f"sigma={s:g}", float(s), eps))
    sd = calibrate_gaussian_sigma(policy["epsilon"], policy["delta"], policy["radius"])
    levels.append(Level(f"policy default eps={policy['epsilon']:g}", sd, float(policy["epsilon"]), True))
    return sorted(levels, key=lambda lv: lv.sigma)


def _key(seed: int, *parts: str) -> bytes:
    return hashlib.sha256(("qdrant-guard eval v1\0" + "\0".join((str(seed),) + parts)).encode()).digest()


def _noised(x: np.ndarray, level: Level, policy: dict[str, Any], key: bytes) -> tuple[np.ndarray, float]:
    if level.epsilon is None:
        return np.asarray(x, dtype=np.float32), 0.0
    from ..noise import privatize

    out, params = privatize(
        np.ascontiguousarray(x, dtype=np.float32),
        mechanism="gaussian",
        epsilon=level.epsilon,
        radius=policy["radius"],
        delta=policy["delta"],
        clip_norm=policy["clip_norm"],
        key=key,
    )
    return out, float(params.scale)


def _topk(docs: np.ndarray, queries: np.ndarray, k: int) -> list[list[int]]:
    d = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    sims = q @ d.T
    top: list[list[int]] = np.argsort(-sims, axis=1, kind="stable")[:, :k].tolist()
    return top


def run_sweep(config: EvalConfig, embed: Callable[..., np.ndarray], redact: Callable[[str], str]) -> dict[str, Any]:
    """Run the whole evaluation and return every measured number (JSON-serialisable).

    Args:
        config: the run configuration.
        embed: ``embed(texts, progress=..., desc=...) -> ndarray`` (unit-norm rows).
        redact: the redaction applied before embedding when redaction is on (followed by the
            identifier generalisation when ``config.generalize_identifiers``).
    """
    if isinstance(config.utility_draws, bool) or not isinstance(config.utility_draws, int) or config.utility_draws < 1:
        raise GuardArgumentValueError(f"utility_draws must be an int >= 1, got {config.utility_draws!r}")
    t0 = time.monotonic()
    policy = {**_policy_defaults(), **config.noise_policy}
    rng = np.random.default_rng(config.seed)
    paragraphs = load_paragraphs(config.max_docs)
    queries = make_queries(paragraphs, config.n_queries, rng)
    carriers = make_carriers(paragraphs, config.carriers_per_kind, config.n_candidates, rng)
    levels = make_levels(config.sigmas, policy)
    pb = config.progress

    qtexts = [q for q, _ in queries]
    targets = [t for _, t in queries]

    def guard_text(redacted: str) -> str:
        return generalize_identifiers(redacted) if config.generalize_identifiers else redacted

    text_modes: tuple[tuple[str, Callable[[str], str]], ...] = (
        ("off", lambda s: s), ("on", lambda s: guard_text(redact(s))))
    views: dict[str, dict[str, np.ndarray]] = {}
    for mode, fn in text_modes:
        views[mode] = {
            "docs": embed([fn(p) for p in paragraphs], progress=pb, desc=f"embed docs (redaction {mode})"),
            "queries": embed([fn(q) for q in qtexts], progress=pb, desc=f"embed queries (redaction {mode})"),
        }
    clean_docs, clean_q = views["off"]["docs"], views["off"]["queries"]
    clean_top = _topk(clean_docs, clean_q, config.k)
    qrels = {i: {t} for i, t in enumerate(targets)}
    clean_metrics = retrieval_metrics(clean_top, k=config.k, qrels=qrels, reference=clean_top)

    # The attacker's candidate embeddings, and what the guard would embed for each truth.
    carrier_emb = []
    detector = {"planted": 0, "redacted": 0}
    for c in progress_iter(carriers, total=len(carriers), desc="embed secret candidates", enabled=pb):
        texts = [c.text(v) for v in c.candidates]
        cand = embed(texts)
        red_texts = [redact(t) for t in texts]
        detector["planted"] += len(texts)
        detector["redacted"] += sum(1 for v, r in zip(c.candidates, red_texts) if v not in r)
        carrier_emb.append((c, cand, embed([guard_text(r) for r in red_texts])))

    # Bag-of-words split (fixed across levels and modes).
    order = rng.permutation(len(paragraphs))
    n_train = int(0.7 * len(paragraphs))
    tr, te = np.sort(order[:n_train]), np.sort(order[n_train:])
    vocab = attacks.build_vocab([paragraphs[i] for i in tr])
    y = vocab.labels(paragraphs)
    # The topic-only reference: the probe on noise-free vectors of the same texts with every
    # identifier deleted. What it finds, the shared words alone give away.
    topic_view = embed([drop_identifiers(redact(p)) for p in paragraphs], progress=pb,
                       desc="embed docs (identifiers dropped)")
    topic_scores, _ = attacks.probe_scores(topic_view[tr], y[tr], topic_view[te])

    # The same split, with topic-free identifiers planted (their own generator, so that adding
    # them left every other sample of a seed as it was).
    planted = plant_identifiers(paragraphs, np.random.default_rng([config.seed, 1]), pool=config.planted_pool)
    pvocab = attacks.BowVocab(planted.words, np.ones(len(planted.words), bool), np.zeros(len(planted.words), bool))
    py = pvocab.labels(planted.texts)
    pviews = {
        mode: embed([fn(t) for t in planted.texts], progress=pb, desc=f"embed planted (redaction {mode})")
        for mode, fn in text_modes
    }

    results: list[dict[str, Any]] = []
    for level in progress_iter(levels, total=len(levels), desc="sweep levels", enabled=pb):
        for mode in ("off", "on"):
            docs, qv = views[mode]["docs"], views[mode]["queries"]
            tag = f"{level.label}/{mode}"
            nd, scale = _noised(docs, level, policy, _key(config.seed, "docs", tag))
            nq = _noised(qv, level, policy, _key(config.seed, "queries", tag))[0] if config.noise_queries else qv
            top = _topk(nd, nq, config.k)
            # The metrics, then the draws' ratios (a list) beside them.
            util: dict[str, Any] = retrieval_metrics(top, k=config.k, qrels=qrels, reference=clean_top)
            util["recall_ratio"] = util["recall"] / clean_metrics["recall"]
            ratios = [util["recall_ratio"]]
            for j in range(1, config.utility_draws if level.epsilon is not None else 1):
                dj = _noised(docs, level, policy, _key(config.seed, "docs", tag, f"draw {j}"))[0]
                qj = (_noised(qv, level, policy, _key(config.seed, "queries", tag, f"draw {j}"))[0]
                      if config.noise_queries else qv)
                mj = retrieval_metrics(_topk(dj, qj, config.k), k=config.k, qrels=qrels, reference=clean_top)
                ratios.append(mj["recall"] / clean_metrics["recall"])
            util["recall_ratio_draws"] = ratios
            util["recall_ratio_mean"] = float(np.mean(ratios))
            util["recall_ratio_sd"] = float(np.std(ratios, ddof=1)) if len(ratios) > 1 else 0.0

            per_kind: dict[str, list[dict[str, float]]] = {}
            for i, (c, cand, red) in enumerate(carrier_emb):
                released_src = cand if mode == "off" else red
                released, _ = _noised(released_src, level, policy, _key(config.seed, "secret", tag, str(i)))
                per_kind.setdefault(c.kind, []).append(attacks.candidate_ranking(cand, released))
            secret = {
                kind: {
                    "top1": float(np.mean([r["top1"] for r in rs])),
                    "mean_rank_pct": float(np.mean([r["mean_rank_pct"] for r in rs])),
                    "chance": rs[0]["chance"],
                }
                for kind, rs in per_kind.items()
            }
            all_top1 = float(np.mean([r["top1"] for rs in per_kind.values() for r in rs]))
            secret["all"] = {
                "top1": all_top1,
                "chance": 1.0 / config.n_candidates,
                "x_chance": all_top1 * config.n_candidates,
            }

            # BoW inversion: the attacker wants the words of the original text.
            noised_train, _ = _noised(docs[tr], level, policy, _key(config.seed, "bow-train", tag))
            test_x = nd[te]
            naive = attacks.bow_inversion(clean_docs[tr] if mode == "off" else docs[tr], y[tr], test_x, y[te], vocab)
            adaptive = attacks.bow_inversion(noised_train, y[tr], test_x, y[te], vocab, reference=topic_scores)

            pdocs = pviews[mode]
            p_test, _ = _noised(pdocs[te], level, policy, _key(config.seed, "planted", tag))
            p_train, _ = _noised(pdocs[tr], level, policy, _key(config.seed, "planted-train", tag))
            planted_attack = {
                "naive": attacks.bow_inversion(pdocs[tr], py[tr], p_test, py[te], pvocab)["identifier"],
                "adaptive": attacks.bow_inversion(p_train, py[tr], p_test, py[te], pvocab)["identifier"],
            }

            reid = attacks.reidentify(clean_docs, nd)
            results.append(
                {
                    "level": level.label,
                    "sigma": level.sigma,
                    "scale": scale,
                    "epsilon": level.epsilon,
                    "policy_default": level.is_policy_default,
                    "redaction": mode == "on",
                    "utility": util,
                    "secret": secret,
                    "bow_naive": naive,
                    "bow_adaptive": adaptive,
                    "planted": planted_attack,
                    "reid": reid,
                }
            )
    return {
        "config": {
            "seed": config.seed,
            "sigmas": list(config.sigmas),
            "n_docs": len(paragraphs),
            "n_queries": len(queries),
            "carriers": len(carriers),
            "carriers_per_kind": config.carriers_per_kind,
            "n_candidates": config.n_candidates,
            "k": config.k,
            "policy": policy,
            "noise_queries": config.noise_queries,
            "generalize_identifiers": config.generalize_identifiers,
            "bow_vocab": {"identifier": int(vocab.identifier.sum()), "topic": int(vocab.topic.sum())},
            "bow_split": {"train": int(len(tr)), "test": int(len(te))},
            "planted": {"pool": config.planted_pool, "labels": len(planted.words), "per_text": 3},
            "utility_draws": config.utility_draws,
        },
        "clean": clean_metrics,
        "detector": detector,
        "levels": results,
        "elapsed_s": time.monotonic() - t0,
        "example_queries": [
            {"query": q, "target": paragraphs[t][:200]} for q, t in queries[:3]
        ],
    }
