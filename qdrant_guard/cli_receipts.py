"""``qdrant-guard receipt verify``: checks the signed noise receipts of a collection's stored points."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .cli_policy_keys import _key_status, _policy_signing_keys
from .cli_store import _client_from, _print_missing_collection
from .errors import ConfigError


def cmd_receipt_verify(args: argparse.Namespace) -> int:
    from . import keys, receipts
    from .policy import load_policy

    trusted = {}
    for spec in args.trusted_key or []:
        pk = keys.load_public_key(spec)
        trusted[keys.key_id(pk)] = pk
    own_kid: str | None = None
    retired: dict[str, Any] = {}
    revoked: tuple[str, ...] = ()
    noise_policy = None
    pol = None
    skew_s: float | None = receipts.ISSUED_AT_LEEWAY_S
    if args.policy:
        cfg = load_policy(args.policy)
        try:
            # The collection's class decides whether its vectors need receipts at all.
            pol = cfg.policy_for(args.collection)
        except ConfigError as exc:
            print(f"error: --policy: {exc}", file=sys.stderr)
            return 2
        if args.check_noise:
            # A PUBLIC collection states no noise; its receipts are then judged by check_release only.
            noise_policy = None if pol.is_public else pol.noise
        # A collection's receipt_keys replace receipts.trusted_keys for it, as in the guard.
        listed = cfg.receipts.trusted_keys if pol.receipt_keys is None else pol.receipt_keys
        for spec in listed:
            pk = keys.load_public_key(spec)
            trusted[keys.key_id(pk)] = pk
        try:
            own_kid, own, retired = _policy_signing_keys(cfg, args.policy)
        except ConfigError as exc:
            print(f"error: {exc}" if str(exc).startswith("--policy") else f"error: --policy: {exc}", file=sys.stderr)
            return 2
        # The guard's earlier signing keys are trusted wherever its current one is, receipt_keys or not.
        trusted.update(own)
        trusted.update(retired)
        revoked = cfg.receipts.revoked_keys
        # The tolerance the guard's writes apply (its age limit is not: stored receipts age).
        skew_s = cfg.receipts.max_clock_skew_s
    if not trusted:
        where = (f"--policy {args.policy} names no signing_key and no receipts.trusted_keys (nor receipt_keys for "
                 f"{args.collection!r})" if args.policy
                 else "no --trusted-key and no --policy")
        print(f"error: no trusted keys: {where}; pass --trusted-key with the public key of each receipt signer "
              "(the guard's signing_key's .pub), or a --policy that names them", file=sys.stderr)
        return 2
    client = _client_from(args)
    if not client.collection_exists(args.collection):
        _print_missing_collection(client, args)
        client.close()
        return 2
    reports = receipts.verify(client, args.collection, trusted_keys=trusted, revoked=revoked,
                              check_noise=args.check_noise, noise_policy=noise_policy, policy=pol,
                              max_clock_skew_s=skew_s)
    bad = [r for r in reports if not r.ok]
    unneeded = sum(r.reason == "not_required" for r in reports)
    for r in reports:
        if args.verbose or not r.ok:
            line: dict[str, Any] = {"id": str(r.point_id), "vector": r.vector_name, "ok": r.ok, "reason": r.reason}
            if r.check.key_id is not None:
                line["key"] = r.check.key_id
                line["key_status"] = _key_status(r.check.key_id, own_kid=own_kid, retired=retired,
                                                 revoked=revoked, trusted=trusted)
            if not r.ok:
                line["detail"] = r.check.detail
            print(json.dumps(line))
    checked = len(reports) - unneeded
    if pol is None:
        why = ("no --policy, so every vector is taken to need a receipt (pass --policy to apply the "
               "collection's class: a PUBLIC collection needs none)")
    elif pol.is_public:
        why = (f"class PUBLIC in {args.policy}: its vectors need no receipt; {unneeded} vector(s) without "
               "one not checked, the receipts present verified")
    else:
        why = f"class {pol.sensitivity.value} in {args.policy}: every dense vector needs a receipt"
        if pol.raw_in_boundary:
            why += ("; raw_in_boundary is on, so the owner's raw writes have none and are listed as "
                    "missing_receipt (un-noised vectors)")
    print(f"{checked - len(bad)}/{checked} receipted vectors verify in {args.collection!r} ({why})")
    by_retired = sorted(r.check.key_id for r in reports if r.check.ok and r.check.key_id in retired)
    if by_retired:
        print(f"{len(by_retired)} of them signed by a retired key of the guard (receipts.retired_keys): "
              + ", ".join(f"{k} ({by_retired.count(k)})" for k in dict.fromkeys(by_retired)))
    return 1 if bad else 0
