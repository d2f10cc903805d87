"""``qdrant-guard demo``, ``calibrate`` and ``bench``: the commands that run a workload (the
demo, a noise calibration, the overhead benchmark) through their own modules.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .cli_args import _credential_from, _output_file_error, _readable_file_error
from .cli_store import _client_from, _print_missing_collection, _receipted_points
from .errors import GuardArgumentValueError


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import claim_workdir, run_demo

    if args.workdir is not None:
        try:
            claim_workdir(args.workdir, name="--workdir", example="--workdir demo")
        except GuardArgumentValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return run_demo(workdir=args.workdir)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .calibrate_cli import EXIT_POLICY_NOT_COVERED, run_calibrate_cli

    problems = [_output_file_error("--out", args.out), _readable_file_error("--queries", args.queries)]
    if args.qrels:
        problems.append(_readable_file_error("--qrels", args.qrels))
    for flag, given in (("--queries", args.queries), ("--qrels", args.qrels)):
        # A one-line JSONL file is JSON too: the rule above would let the record replace it.
        if given and args.out and Path(given).resolve() == Path(args.out).resolve():
            problems.append(f"--out {args.out!r} is the {flag} file, which calibrate reads; give another file "
                            "(e.g. --out utility.json)")
    for problem in problems:
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    client = _client_from(args)
    try:
        if not client.collection_exists(args.collection):
            _print_missing_collection(client, args)
            return 2
        noised = _receipted_points(client, args.collection)
    finally:
        client.close()  # local mode allows one client per store, and calibrate opens its own
    if noised:
        # The guarded collection itself is the natural thing to point calibrate at, and nothing
        # else would tell: its "clean" baseline is then a noised one, and each level adds noise to it.
        print(f"warning: {noised} point(s) of --collection {args.collection!r} carry a qdrant_guard receipt "
              "(_qdrant_guard_receipt): their vectors are already noised, so calibrate measures noise added to "
              "noised vectors, not to clean ones; calibrate a staging collection of the clean vectors "
              "(docs/eval.md, calibrate)", file=sys.stderr)
    rc = run_calibrate_cli(args)
    if rc in (0, EXIT_POLICY_NOT_COVERED) and json.loads(Path(args.out).read_text(encoding="utf-8")).get("signature") is None:
        # A measurement is still useful unsigned, but a guard refuses the record.
        print(f"note: no --key (nor a --policy with a signing_key), so {args.out} is unsigned: a guard whose policy names it (utility.record or utility.records) "
              "refuses it (ConfigError); re-run with --key set to the guard's signing_key to use it there",
              file=sys.stderr)
    return rc


def cmd_bench(args: argparse.Namespace) -> int:
    from .overhead import measure_overhead
    from .overhead_setup import json_path

    # json_path first: it names the user's own file (the policy, a credential) that --json points at.
    out = json_path(args.json, args.policy, {"--credential": args.credential,
                                             "--read-credential": args.read_credential}) if args.json else None
    if args.json is not None and (problem := _output_file_error("--json", args.json)):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        report = measure_overhead(
            args.policy, args.collection,
            credential=_credential_from(args.credential, "--credential") if args.credential else None,
            read_credential=_credential_from(args.read_credential, "--read-credential") if args.read_credential else None,
            throwaway_credentials=args.throwaway_credentials, write_boundary=args.write_boundary,
            read_boundary=args.read_boundary, dim=args.dim, points=args.points, batch=args.batch,
            queries=args.queries, limit=args.limit, rounds=args.rounds, sources=args.sources,
            source_values=tuple(args.source or ()), seed=args.seed,
            query_text=not args.no_query_text, url=args.url, scratch_collection=args.scratch_collection,
            workdir=args.workdir, progress=not args.no_progress)
    except KeyboardInterrupt:
        print("\ninterrupted: nothing measured is kept; the scratch collections were deleted and the "
              "temporary files removed (a --workdir stays)", file=sys.stderr)
        return 130
    print(report.format_table())
    if out is not None:
        out.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    return 0
