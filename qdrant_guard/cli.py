"""The ``qdrant-guard`` command: keys, credentials, receipts, audit, demo, calibrate, eval.

This module builds the parser and runs a command (:func:`main`, the console entry point); each
command family is in a module of its own: :mod:`qdrant_guard.cli_keys` (``keys``, ``credential``),
:mod:`qdrant_guard.cli_receipts` (``receipt verify``), :mod:`qdrant_guard.cli_audit` (``audit``),
:mod:`qdrant_guard.cli_workloads` (``demo``, ``calibrate``, ``bench``), with what several share in
:mod:`qdrant_guard.cli_args` (argument types and checks), :mod:`qdrant_guard.cli_store` (the store
a command opens) and :mod:`qdrant_guard.cli_policy_keys` (the guard's keys per its policy).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .cli_args import _nonempty, _positive_int, _ttl
from .cli_audit import (cmd_audit_repair as cmd_audit_repair, cmd_audit_replay as cmd_audit_replay,
                        cmd_audit_verify as cmd_audit_verify)
from .cli_keys import (cmd_credential_issue as cmd_credential_issue, cmd_keys_new as cmd_keys_new,
                       cmd_keys_pub as cmd_keys_pub)
from .cli_receipts import cmd_receipt_verify as cmd_receipt_verify
from .cli_workloads import cmd_bench as cmd_bench, cmd_calibrate as cmd_calibrate, cmd_demo as cmd_demo
from .errors import QdrantGuardError


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``qdrant-guard``."""
    p = argparse.ArgumentParser(
        prog="qdrant-guard", description="qdrant_guard's command: keys, credentials, receipts, audit log, "
        "demo, utility calibration, overhead benchmark, eval. `qdrant-guard COMMAND SUBCOMMAND --help` describes each.",
        epilog="first run: `keys new --out keys/guard.key` (the policy's signing_key), one `keys new` per "
               "boundary authority (the policy lists its .pub), then `credential issue` for each agent "
               "(it prints the token the agent passes as Principal(agent, boundary, token)). README.md "
               "has the quick start, docs/policy.md every policy key.")
    from . import __version__

    # The first thing a new user types to check the install; it answered "arguments are required".
    p.add_argument("--version", action="version", version=f"qdrant-guard {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    keys_p = sub.add_parser("keys", help="key management").add_subparsers(dest="sub", required=True)
    kn = keys_p.add_parser("new", help="make an Ed25519 key pair (private PEM 0600 + .pub)",
                           description="Write a new Ed25519 private key (PEM, mode 0600) to --out and its "
                                       "public key to OUT.pub, and print their paths, the public key and its "
                                       "key id as JSON; if OUT or OUT.pub exists, nothing is written (exit 2).")
    kn.add_argument("--out", required=True, help="path of the private key file to create")
    kn.set_defaults(func=cmd_keys_new)
    kp = keys_p.add_parser("pub", help="write the .pub of an existing private key (a lost or deleted .pub)",
                           description="Write the public key of --key to KEY.pub (the file `keys new` writes "
                                       "beside it) and print it as `keys new` does; if KEY.pub exists, nothing is "
                                       "written (exit 2). The key pair stays the same, so what it signed still "
                                       "verifies.")
    kp.add_argument("--key", required=True, help="the private key file (the --out of `keys new`)")
    kp.set_defaults(func=cmd_keys_pub)

    cred_p = sub.add_parser("credential", help="boundary credentials").add_subparsers(dest="sub", required=True)
    ci = cred_p.add_parser("issue", help="issue a credential proving an agent is in a boundary",
                           description="Print a credential token (qgc1....) on stdout, and on stderr its expiry and "
                                       "credential id (jti, which [boundaries.NAME] revoked_credentials revokes); "
                                       "the agent passes the token as Principal(agent, boundary, token).")
    ci.add_argument("--authority", required=True,
                    help="the boundary authority's private key file (from `keys new`; the policy lists its "
                         ".pub in [boundaries.NAME] authority_keys)")
    ci.add_argument("--agent", required=True, type=_nonempty, help="agent id (the Principal's agent_id)")
    ci.add_argument("--boundary", required=True, type=_nonempty,
                    help="boundary name, as in the policy's [boundaries.NAME]")
    ci.add_argument("--ttl", type=_ttl, default=3600.0,
                    help="lifetime in seconds, at most ten years (default 3600); the expiry goes to stderr")
    ci.add_argument("--policy", metavar="POLICY",
                    help="check first that the policy names --boundary and lists --authority's public key "
                         "among its authority_keys (a credential the guard would refuse is not issued)")
    ci.set_defaults(func=cmd_credential_issue)

    rec_p = sub.add_parser("receipt", help="reconstruction-resistance receipts").add_subparsers(dest="sub", required=True)
    rv = rec_p.add_parser("verify", help="verify the receipts of stored points against their vectors",
                          description="Check the receipt of every stored vector of --collection against that "
                                      "vector and print the failures (missing_receipt, unsupported_vector, ...); "
                                      "exit 1 if any. A local store only while no other client holds it.")
    where = rv.add_mutually_exclusive_group(required=True)
    where.add_argument("--path", help="local-mode storage directory")
    where.add_argument("--url", help="Qdrant server URL (API key from QDRANT_API_KEY)")
    rv.add_argument("--collection", required=True, help="the collection whose points are checked")
    rv.add_argument("--trusted-key", action="append", help="trusted public key (ed25519:... or file); repeatable")
    rv.add_argument("--policy", help="the guard's policy file: trust its receipts.trusted_keys (the collection's "
                                    "receipt_keys instead, when it sets them), its signing_key's "
                                    "public key and its receipts.retired_keys, refuse its revoked_keys, and apply "
                                    "the collection's class (a PUBLIC collection needs no receipts) and its declared "
                                    "utility.embedding_model(s) (a receipt naming another model: model_mismatch); "
                                    "each line names the signer's key_status (current, retired, trusted, ...)")
    rv.add_argument("--check-noise", action="store_true",
                    help="also refuse receipts whose signed noise a guarded write refuses "
                         "(noise.check_release: the TEST-ONLY seeded generator, a scale below the "
                         "calibration), reported as insufficient_noise; with --policy, also noise "
                         "weaker than the collection's [noise] section (insufficient_noise) or of "
                         "another mechanism than its [noise] mechanism (mechanism_mismatch)")
    rv.add_argument("--verbose", action="store_true", help="print a line for every vector, not only failures")
    rv.set_defaults(func=cmd_receipt_verify)

    aud_p = sub.add_parser("audit", help="the hash-chained audit log").add_subparsers(dest="sub", required=True)
    av = aud_p.add_parser(
        "verify", help="detect edited, deleted, inserted, reordered or torn entries",
        description="Check an audit log's hash chain and name the first bad line. A writer of the file "
                    "can recompute every hash after a change (--key checks the signed checkpoints, which "
                    "catches a change made after a checkpoint was signed to the entries it covers) or cut "
                    "entries off the end (compare the last entry's seq and hash printed here with a copy kept "
                    "elsewhere). A checkpoint signs entries others appended before it too: --writer-key "
                    "checks each entry's writer MAC, which whoever holds that key can also forge.")
    av.add_argument("file", help="the audit log (the policy's audit_log)")
    av.add_argument("--key", action="append", metavar="PUBLIC_KEY",
                    help="verify signed checkpoints with this public key (file or ed25519:... text; "
                         "repeatable), e.g. the guard's signing key's .pub")
    av.add_argument("--policy", metavar="POLICY",
                    help="the guard's policy file: verify signed checkpoints with its signing_key's public key, "
                         "its receipts.retired_keys and its audit_trusted_keys (with any --key), and name each "
                         "checkpoint key's status (current, retired, trusted)")
    av.add_argument("--checkpoint-every", type=_positive_int, default=1000, metavar="N",
                    help="with --key or --policy: every N-th entry must carry a signed checkpoint (the writer's "
                         "checkpoint_every; default 1000, the guard's)")
    av.add_argument("--writer-key", action="append", metavar="PRIVATE_KEY",
                    help="the signing key (private) of a guard that writes this log (repeatable: one per guard): "
                         "check each entry's writer MAC and name every entry none of these writers made; its "
                         "public key verifies checkpoints too")
    av.add_argument("--every-entry-signed", action="store_true",
                    help="for a log whose guards all set audit_sign_every_entry: every entry must carry a checkpoint "
                         "signed by its own writer, verified with --key/--policy/--writer-key; name every entry "
                         "that does not, format-v1 entries included (public keys suffice); implied by --policy of a policy "
                         "that sets audit_sign_every_entry")
    av.add_argument("--allow-unsigned", action="store_true",
                    help="with keys: accept a log none of whose entries they authenticate (no checkpoint or writer MAC "
                         "verifies), refused by default since anyone who can write the file can rewrite it so; for a "
                         "log written by a guard without signing_key (verifying it without keys says the same)")
    av.add_argument("--signed-from", type=_positive_int, metavar="SEQ",
                    help="the seq from which a guard with signing_key wrote this log (1 if it began it; `audit verify` "
                         "prints it), kept outside the file: refuse a v1 entry from it on, an entry at it without its "
                         "checkpoint, and a log ending before it; --policy of a policy that sets audit_signed_from "
                         "implies it")
    av.set_defaults(func=cmd_audit_verify)
    ar = aud_p.add_parser("repair", help="cut a torn/tampered tail to the valid prefix, recording the cut",
                          description="Cut the log after its valid prefix: the cut bytes go to a side file "
                                      "FILE.cut-..., and an audit_repair entry records what was cut "
                                      "(docs/audit-log.md). A log that verifies, or a file that is no audit "
                                      "log, is not changed.")
    ar.add_argument("file", help="the audit log (the policy's audit_log); stop the guard first")
    ar.add_argument("--signing-key", metavar="PRIVATE_KEY",
                    help="sign the repair entry as a checkpoint with this key (the guard's signing key)")
    ar.add_argument("--key", action="append", metavar="PUBLIC_KEY",
                    help="verify as `audit verify --key` does; of two chains in one file, keep the one "
                         "that alone carries a checkpoint signed with this key (repeatable)")
    ar.add_argument("--trust-policy", metavar="POLICY",
                    help="verify with the checkpoint keys of this guard policy (and any --key), as `audit verify --policy` does: "
                         "its signing_key's public key, receipts.retired_keys and audit_trusted_keys (a revoked "
                         "key, or a boundary's authority key in one of those roles, is an error)")
    ar.add_argument("--checkpoint-every", type=_positive_int, default=1000, metavar="N",
                    help="with --key or --trust-policy: the writer's checkpoint period (default 1000)")
    ar.add_argument("--writer-key", action="append", metavar="PRIVATE_KEY",
                    help="verify as `audit verify --writer-key` does: cut from the first entry none of these "
                         "writers' MACs authenticates (repeatable: the signing key of each guard writing the log)")
    ar.add_argument("--keep-chain-from", type=_positive_int, metavar="LINE",
                    help="the log holds two chains verify cannot tell apart: keep the one starting on "
                         "LINE (one of the two lines verify names), as you established from a copy or anchor")
    ar.add_argument("--allow-shared-file", action="store_true",
                    help="repair a log that others than this uid can write (world-writable, writable by a group "
                         "or ACL entry others are in, another owner, a directory without the sticky bit that others or a group others are in may "
                         "write, or another uid's), refused by default as the "
                         "guard refuses to open one (audit_allow_shared_file)")
    ar.set_defaults(func=cmd_audit_repair)
    arp = aud_p.add_parser("replay", help="re-evaluate logged queries under a new policy (the log is "
                                          "verified first; one that does not verify is not replayed)",
                           description="Run the texts of the logged queries through --policy's query checks and "
                                       "list what it would newly block or allow. The log is verified first; "
                                       "entries with redacted text are counted and skipped.")
    arp.add_argument("log", help="the audit log (the policy's audit_log)")
    arp.add_argument("--policy", required=True, help="the changed policy file to evaluate the logged queries under")
    arp.add_argument("--key", action="append", metavar="PUBLIC_KEY",
                     help="verify the log's signed checkpoints with this public key, as `audit verify "
                          "--key` (repeatable)")
    arp.add_argument("--trust-policy", metavar="POLICY",
                     help="verify the log's signed checkpoints with the keys of this guard policy (the one that "
                          "wrote the log, not --policy), as `audit verify --policy` does: its signing_key's "
                          "public key, receipts.retired_keys and audit_trusted_keys (a revoked key, or a "
                          "boundary's authority key in one of those roles, is an error)")
    arp.add_argument("--checkpoint-every", type=_positive_int, default=1000, metavar="N",
                     help="with --key or --trust-policy: the writer's checkpoint period (default 1000)")
    arp.add_argument("--writer-key", action="append", metavar="PRIVATE_KEY",
                     help="verify as `audit verify --writer-key` does: a log with an entry none of these writers' "
                          "MACs authenticates is not sound (repeatable: the signing key of each guard writing it)")
    damaged = arp.add_mutually_exclusive_group()
    damaged.add_argument("--verified-prefix", action="store_true",
                         help="a log that does not verify: replay only its verified prefix (exit 1)")
    damaged.add_argument("--unverified", action="store_true",
                         help="a log that does not verify: replay every line anyway, forged or edited "
                              "ones included; the output is labelled UNVERIFIED (exit 1)")
    arp.set_defaults(func=cmd_audit_replay)

    d = sub.add_parser("demo", help="two agents, two boundaries, one store: the guard's verdicts",
                       description="Two agents (alice@hr, bob@support) share one local-mode store: each step "
                                   "prints the verdict expected and the one the guard gave; exit 1 if any "
                                   "differs.")
    d.add_argument("--workdir", metavar="DIR",
                   help="keep keys, policy, store and audit log in DIR, a new or empty directory or one an "
                        "earlier demo wrote (whose keys, store and log it replaces); default: a temp dir, removed")
    d.set_defaults(func=cmd_demo)

    cal = sub.add_parser("calibrate", help="measure recall under noise and sign a utility record",
                         description="Measure --metric@--k of --collection's clean vectors under noise at each "
                                     "of --epsilons and write the signed utility record the policy's "
                                     "utility.record names (or utility.records, one per named vector: --vector-name) "
                                     "(docs/eval.md). Exit status: 0 the record was written; 2 an error or no "
                                     "feasible level, nothing written; 3 the record was written, but the guard of "
                                     "--policy would refuse writes under it (it does not cover the policy's "
                                     "noise.epsilon, or it was signed under --allow-small-collection or on fewer "
                                     "queries than utility.min_queries, and the policy does not set "
                                     "utility.allow_small_records).")
    try:
        from .calibrate_cli import add_calibrate_arguments

        add_calibrate_arguments(cal)
    except ImportError:  # pragma: no cover
        pass
    cal.set_defaults(func=cmd_calibrate)

    bn = sub.add_parser(
        "bench", help="time raw qdrant-client vs the guarded client under your policy (a scratch store)",
        description="Time upserts and top-k queries, raw qdrant-client on a twin collection vs the guarded "
                    "client (and the guard alone, Qdrant's recorded answer replayed), under the policy of "
                    "--collection, in interleaved rounds on a fresh local-mode store (:memory:); nothing of "
                    "yours is written (the audit log and a sqlite budget store go to a temporary directory). "
                    "Figures depend on the machine. The defaults take about 10 s on a 2-core machine, but "
                    "minutes when the reader's extraction budget (max_source_coverage) runs out for any "
                    "source, since every later read carries a filter excluding it that local mode checks "
                    "point by point (the run warns before it starts and names the --queries, --limit, --sources "
                    "or --points values that keep every source under its cap, or an owner-boundary reader). docs/performance.md, 'Benchmark your own policy', describes the output and the --json fields.")
    bn.add_argument("--policy", required=True, help="your policy file (TOML)")
    bn.add_argument("--collection", required=True, help="the collection whose policy is measured (listed in --policy)")
    bn.add_argument("--credential", metavar="TOKEN_OR_FILE",
                    help="credential of the writing principal (a boundary that may write the collection), as "
                         "the token `credential issue` printed or a file holding it (a file keeps the token out "
                         "of the shell history and the process list); also the reader unless --read-credential "
                         "is given")
    bn.add_argument("--read-credential", metavar="TOKEN_OR_FILE",
                    help="credential of the reading principal (a boundary that may read the collection)")
    bn.add_argument("--throwaway-credentials", action="store_true",
                    help="no credentials: mint a throwaway authority key that the write and read boundaries "
                         "trust in an in-memory copy of the policy (the output says so; your authority keys are "
                         "not exercised)")
    bn.add_argument("--write-boundary", metavar="B",
                    help="with --throwaway-credentials: the writer's boundary (default: the collection's owner)")
    bn.add_argument("--read-boundary", metavar="B",
                    help="with --throwaway-credentials: the reader's boundary (default: the first reader "
                         "boundary other than the owner, else the owner)")
    bn.add_argument("--dim", type=_positive_int, default=384, help="vector dimension (default 384)")
    bn.add_argument("--points", type=_positive_int, default=1000, help="points stored and searched (default 1000)")
    bn.add_argument("--batch", type=_positive_int, default=256, help="points per upsert call (default 256)")
    bn.add_argument("--queries", type=_positive_int, default=200,
                    help="distinct queries per round (default 200); each read charges up to --limit points "
                         "to the reader's extraction budget")
    bn.add_argument("--limit", type=_positive_int, default=10, help="top-k of each query (default 10)")
    bn.add_argument("--rounds", type=_positive_int, default=5,
                    help="timed interleaved rounds, after one untimed warm-up (default 5)")
    bn.add_argument("--sources", type=_positive_int,
                    help="distinct values of the policy's source_field (default 50, or one per 20 points "
                         "below 1000 points); budgets and diversity caps count by source")
    bn.add_argument("--source", metavar="NAME", action="append",
                    help="give the run's points this source value (repeatable; the first --sources values are "
                         "the names given, the rest doc0, doc1, ...), e.g. one of the policy's "
                         "diversity.restricted_sources so that its extraction budget is charged and timed: a "
                         "restricted source needs a writer of the owner boundary and a reader of another")
    bn.add_argument("--seed", type=int, default=20240611, help="seeds vectors, texts and the order (an integer >= 0; default 20240611)")
    bn.add_argument("--no-query-text", action="store_true",
                    help="send guarded queries without query_text= (no text scan or intent check)")
    bn.add_argument("--json", metavar="OUT", help="also write the full report as JSON to this file (an existing "
                                                  "file is replaced only if it holds JSON, e.g. an earlier report)")
    bn.add_argument("--url", help="a Qdrant server instead of local :memory: (API key from QDRANT_API_KEY; "
                                  "same code path, untested here); needs --scratch-collection")
    bn.add_argument("--scratch-collection", metavar="NAME",
                    help="with --url: a collection that must not exist yet; it and NAME_raw are created, "
                         "guarded by the policy of --collection, and deleted at the end")
    bn.add_argument("--workdir", metavar="DIR",
                    help="keep the local store (on disk, so slower than :memory:) and the audit log in DIR "
                         "(new or empty)")
    bn.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    bn.set_defaults(func=cmd_bench)

    for group in (keys_p, cred_p, rec_p, aud_p):
        # argparse names a missing subcommand by its dest ("required: sub"); name the choices instead.
        group.metavar = "{" + ",".join(group.choices) + "}"
    ev = sub.add_parser("eval", help="privacy-utility report with real inversion attacks (needs [eval])", add_help=False)
    ev.set_defaults(func=None)
    sub.metavar = "{" + ",".join(sub.choices) + "}"
    return p


def _stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reading end is closed (poll reports an error on it)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or stdout is not a file
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``qdrant-guard`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["eval"]:
        from .evaluation import run_eval_cli

        return run_eval_cli(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = int(args.func(args))
        # Flushed here, not at interpreter exit, so that a reader gone before the flush (`| true`,
        # or `| head` while the output still sits in the buffer) lands in the handler below.
        sys.stdout.flush()
        return status
    except BrokenPipeError as exc:
        if not _stdout_reader_gone():  # a socket or another pipe: a real error, not `... | head`
            print(f"error: {exc}", file=sys.stderr)
            return 2
        # The reader of our output went away (`qdrant-guard audit replay ... | head`): stop quietly
        # as a command killed by SIGPIPE does, and keep the interpreter's last flush off the pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except QdrantGuardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        # A file that cannot be read or written, or a value the library refuses: the message names
        # it; a traceback would only bury it.
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        from qdrant_client.http.exceptions import ResponseHandlingException

        url, path = getattr(args, "url", None), getattr(args, "path", None)
        if path and isinstance(exc, RuntimeError) and "already accessed by another instance" in str(exc):
            # Local mode lets one client hold a store; the guarded application usually has it open.
            print(f"error: --path {path!r} is open in another client (local mode allows one at a time): stop "
                  "the application that uses it and retry, or run Qdrant as a server and pass --url",
                  file=sys.stderr)
            return 2
        if url and isinstance(exc, ResponseHandlingException):
            # A wrong --url (or a server that is down) is the user's input, not a bug to trace.
            print(f"error: cannot reach Qdrant at --url {url}: {exc}; check the URL and that the server "
                  "is up", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
