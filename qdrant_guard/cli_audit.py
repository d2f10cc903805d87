"""``qdrant-guard audit verify``, ``audit repair`` and ``audit replay``: the tamper-evident audit log's commands."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from .cli_policy_keys import _key_status, _policy_signing_keys
from .errors import ConfigError, GuardArgumentValueError


# The chain link the writer puts first on every line: what survives of an entry whose line no
# longer parses. One 64-hex "hash" alone is any file manifest.
_CHAIN_LINK = re.compile(rb'"hash"\s*:\s*"[0-9a-f]{64}"\s*,\s*"prev"\s*:\s*"[0-9a-f]{64}"')
_ENTRY_KEYS = {"hash", "prev", "seq", "record"}


def _not_an_audit_log(path: str, rep: Any) -> str | None:
    """Why ``path`` is no audit log at all (no line of it bears a trace of an entry), or None.

    A policy file or another JSONL given by mistake fails verification at line 1; "TAMPERED" and a
    repair would then turn it into an audit log (its text moved to a side file). A trace of an
    entry (two of its keys in a JSON object, or its hash-prev link in a line that no longer parses)
    makes it a damaged log: a real log with one key renamed on every line is tampered, not a wrong
    path. One such key alone (a "seq" or a "hash" of another JSONL) is not a trace."""
    if rep.ok or rep.valid_prefix or rep.problem == "torn_tail":
        return None
    try:
        with open(path, "rb") as fh:
            for line in fh:
                if _CHAIN_LINK.search(line):
                    return None
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and len(_ENTRY_KEYS & entry.keys()) >= 2:
                    return None
    except OSError:
        return None  # the caller's own read reports it
    return (f"none of its lines is an audit entry (a JSON object with hash, prev, seq and record; "
            f"{rep.problem} at line {rep.index}). Check the path: the policy's audit_log names the file. If it "
            "is that file, every entry was overwritten: treat the log as tampered, keep a copy, and move it "
            "aside (the guard then starts a new log)")


def _policy_audit_keys(policy: str, given: dict[str, Any] | None, *, flag: str
                       ) -> tuple[str | None, dict[str, Any], frozenset[str], dict[str, Any]]:
    """The keys a guard under ``policy`` trusts for audit checkpoints, with the ``--key`` keys
    ``given``: (current key id or None, retired keys, revoked key ids, every trusted key), checked
    as the guard checks them. ``flag`` is the option that named the policy, for errors."""
    from . import keys
    from .policy import load_policy

    cfg = load_policy(policy)
    own_kid, own, retired = _policy_signing_keys(cfg, policy)
    revoked = frozenset(cfg.receipts.revoked_keys)
    for kid in sorted(k for k in {**(given or {}), **own} if k in revoked):
        # Revocation wins here as in the guard, which refuses to start with such a key.
        by_key = kid in (given or {})
        fix = (f"drop that --key (or run without {flag} to check the chain under the keys you give alone)"
               if by_key else "the guard refuses to start with it: set signing_key to a new key "
               "(`qdrant-guard keys new`)")
        raise ConfigError(f"{flag} {policy}: {'--key gives' if by_key else 'its signing_key is'} key "
                          f"{kid}, which receipts.revoked_keys revokes: a checkpoint it signed proves nothing, "
                          f"so the log is not verified under it with this policy; {fix}")
    trusted = {**(given or {}), **own, **retired}
    for spec in cfg.audit_trusted_keys:
        pk = keys.load_public_key(spec)
        if keys.key_id(pk) in revoked:
            # As the guard refuses to start with it: a revoked key's checkpoint proves nothing.
            raise ConfigError(f"{flag} {policy}: audit_trusted_keys lists key {keys.key_id(pk)}, which "
                              "receipts.revoked_keys revokes; remove it from audit_trusted_keys")
        trusted[keys.key_id(pk)] = pk
    if not trusted:
        raise ConfigError(f"{flag} {policy} names no signing_key, receipts.retired_keys or "
                          "audit_trusted_keys, so no checkpoint could be verified; pass --key GUARD.pub")
    return own_kid, retired, revoked, trusted


def _given_keys(args: argparse.Namespace) -> tuple[dict[str, bytes] | None, dict[str, Any] | None]:
    """The MAC keys of ``--writer-key`` (None without one), and the trusted public keys by key id:
    those of ``--key``, then the writers' public halves (None when neither option is given): a
    writer's key checks its entries' MACs and, its public half, its checkpoints."""
    from . import keys
    from .audit_mac import writer_keys

    trusted = None
    if args.key:
        pks = [keys.load_public_key(k) for k in args.key]
        trusted = {keys.key_id(pk): pk for pk in pks}
    if not args.writer_key:
        return None, trusted

    sks = [keys.load_private_key(k) for k in args.writer_key]
    return writer_keys(sks), {**(trusted or {}), **{keys.key_id(sk.public_key()): sk.public_key() for sk in sks}}


def _signing_began(signed_from: int | None, rep: Any) -> bool:
    """The problem ``rep`` names is one only ``signed_from`` finds (v1 entries from it on, or a log
    ending before it), which repair cannot cut."""
    return signed_from is not None and not rep.ok and "signing began" in rep.detail.split("; ")[0]


def _before_signing_refused(path: str, policy: str, signed_from: int | None, trusted: Any, macs: Any,
                            checkpoint_every: int, what: str) -> bool:
    """Under a policy's audit_signed_from, say so and return True when the log breaks it (what
    `audit verify --policy` reports): repairing or replaying it would take the rewrite as the log."""
    from .audit import verify_audit_file

    if signed_from is None:
        return False
    rep = verify_audit_file(path, trusted_keys=trusted, checkpoint_every=checkpoint_every, writer_keys=macs,
                            signed_from=signed_from)
    if not _signing_began(signed_from, rep):
        return False
    print(f"NOT {what}: {rep.problem} at line {rep.index}: {rep.detail}")
    print(f"the entries from seq {signed_from} on (audit_signed_from in {policy}) were rewritten, or the log cut, "
          "by someone without the guard's key; repair cannot cut them (without --signed-from they verify): keep "
          "a copy of the file and, with the guard stopped, move it aside so that the guard starts a new log "
          "(docs/audit-log.md, 'A log with nothing signed'). Nothing was changed")
    return True


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from .audit import verify_audit_file
    from .audit_verify import _show_kid, legacy_note

    macs, trusted = _given_keys(args)
    own_kid: str | None = None
    retired: dict[str, Any] = {}
    revoked: frozenset[str] = frozenset()
    every, signed_from = args.every_entry_signed, args.signed_from
    if args.policy:
        from .policy import load_policy

        own_kid, retired, revoked, trusted = _policy_audit_keys(args.policy, trusted, flag="--policy")
        # Its guards sign every entry, so an entry without its writer's signature is one they
        # would refuse: held to that here as `audit repair --trust-policy` holds its repair entry.
        cfg = load_policy(args.policy)
        every = every or cfg.audit_sign_every_entry
        # Where its guards began signing, as they hold the log to it (--signed-from overrides).
        signed_from = signed_from if signed_from is not None else cfg.audit_signed_from
    if every and trusted is None:
        print("error: --every-entry-signed checks each entry's signature by its writer: give the public key of "
              "every guard writing the log (--key GUARD.pub, repeatable; or --policy, or --writer-key)",
              file=sys.stderr)
        return 2
    if args.signed_from is not None and trusted is None and macs is None:
        print("error: --signed-from checks that the entries from that seq on are signed: give the guard's key "
              "(--key GUARD.pub, --policy or --writer-key)", file=sys.stderr)
        return 2
    rep = verify_audit_file(args.file, trusted_keys=trusted, checkpoint_every=args.checkpoint_every,
                            writer_keys=macs, signed_entries=every, allow_unsigned=args.allow_unsigned,
                            signed_from=signed_from)
    if rep.problem == "unsigned":
        print(f"UNSIGNED: {args.file}: {rep.detail}")
        print("If a guard without signing_key wrote it, verify it without keys, or pass --allow-unsigned. "
              "If a signing guard wrote it before its first entry in a log was a checkpoint, verify with "
              "--writer-key GUARD.key (its MACs). Otherwise treat it as tampered: keep a copy and compare it "
              "with the last seq and hash kept outside the file (docs/audit-log.md, 'A log with nothing signed')")
        return 1
    if rep.ok:
        signed = f", {rep.checkpoints} signed checkpoint(s) verified" if trusted is not None else ""
        print(f"OK: {rep.entries} entries, hash chain intact{signed} ({args.file})")
        if macs is not None:
            print("entries authenticated by their writer's MAC: " + (", ".join(
                f"{_show_kid(w)}: {n}" for w, n in rep.writers) or "none"))
            if rep.legacy:
                print(legacy_note(rep.legacy))
        elif every:
            why = "--every-entry-signed" if args.every_entry_signed else f"audit_sign_every_entry in {args.policy}"
            print(f"every entry signed by its writer ({why}): {rep.checkpoints} signatures verified")
        elif trusted is not None:
            print("note: writer MACs not checked (no --writer-key): a checkpoint signs the chain as its writer "
                  "found it, entries appended by anyone who could write the file included; pass --writer-key "
                  "with the signing key of each guard writing this log to name every entry none of them made")
        else:
            print("note: no key given (--key, --policy or --writer-key): only the chain's own consistency was "
                  "checked, which anyone who can write the file can keep after rewriting it (recomputed hashes); "
                  "neither checkpoint signatures nor writer MACs were checked")
        if rep.checkpoint_keys and args.policy:
            print("checkpoint keys: " + ", ".join(
                f"{kid} {_key_status(kid, own_kid=own_kid, retired=retired, revoked=revoked, trusted=trusted)}: {n}"
                for kid, n in rep.checkpoint_keys))
        if rep.signed_from and signed_from is None and (trusted is not None or macs is not None):
            # Static, unlike the last hash: kept once, it tells this log from one rewritten in format
            # v1 and signed over later by the guard's next checkpoint, which the file alone cannot.
            print(f"signed from: seq {rep.signed_from} (its first entry with a writer id); keep it outside the file "
                  f"and pass --signed-from {rep.signed_from} on later runs"
                  + (f" (or set audit_signed_from = {rep.signed_from} in {args.policy}, which the guard then holds "
                     "the log to as well)" if args.policy else ""))
        if trusted is not None and rep.checkpoints == 0:
            # Without a checkpoint the key vouches for nothing: any key, the wrong one too, passes.
            flag = "--policy" if args.policy and not args.key else "--key"
            print(f"note: {flag} checked no signature: the log has no signed checkpoint (one is due every "
                  f"--checkpoint-every {args.checkpoint_every} entries), so who wrote it is not verified")
        # Entries cut off the end leave a chain that verifies: only a copy of its end, kept
        # elsewhere and compared on the next run, shows the cut.
        print(f"last entry: seq {rep.last_seq}, hash {rep.last_hash} (keep it elsewhere: a log cut "
              "after an entry verifies up to it)")
        return 0
    wrong_file = _not_an_audit_log(args.file, rep)
    if wrong_file:
        print(f"NOT AN AUDIT LOG: {args.file}: {wrong_file}")
        return 1
    # A torn last line is what a writer killed mid-append leaves: damage, not evidence of tampering.
    label = "INCOMPLETE" if rep.problem == "torn_tail" else "TAMPERED"
    print(f"{label}: {rep.problem} at line {rep.index}: {rep.detail}")
    if rep.problem == "torn_tail":
        # Whoever cuts the file mid-line leaves the same torn line as a crash, after any entries cut with it.
        print(f"note: a file cut inside an entry ends the same way, and whole entries before the cut may be gone "
              f"too: compare the last whole entry (seq {rep.last_seq}, hash {rep.last_hash}) with the last seq "
              "and hash kept outside the file")
    if _signing_began(signed_from, rep):
        # Without --signed-from those entries verify (a legacy prefix), so repair keeps them all.
        print(f"the entries from seq {signed_from} on were rewritten, or the log cut, by someone without the "
              "guard's key; repair cannot cut them (without --signed-from they verify): keep a copy of the file "
              "and, with the guard stopped, move it aside so that the guard starts a new log (docs/audit-log.md, "
              "'A log with nothing signed')")
        return 1
    trust = "".join(f" --key {k}" for k in args.key or ()) + (f" --trust-policy {args.policy}" if args.policy else "")
    print(f"valid prefix: {rep.valid_prefix} entries; keep a copy of the file, then, with the guard stopped, "
          f"`qdrant-guard audit repair {args.file}{trust}` moves the rest to a side file and records the cut "
          "(docs/audit-log.md, 'Repair')")
    return 1


def cmd_audit_repair(args: argparse.Namespace) -> int:
    from . import keys
    from .audit import repair_audit_file, verify_audit_file
    from .audit_file_access import _refuse_not_regular
    from .receipts import ReceiptSigner

    signer = ReceiptSigner(keys.load_private_key(args.signing_key)) if args.signing_key else None
    macs, trusted = _given_keys(args)
    if args.trust_policy:
        given = trusted or {}
        _, _, revoked, trusted = _policy_audit_keys(args.trust_policy, trusted, flag="--trust-policy")
        policy_trusts = signer is not None and signer.key_id in trusted
        if policy_trusts and signer.key_id in given:  # type: ignore[union-attr]
            # --key widens what the chain is verified under, not what the guard trusts: a key given
            # there must be the policy's too (the guard would refuse a checkpoint it signs).
            try:
                policy_trusts = signer.key_id in _policy_audit_keys(  # type: ignore[union-attr]
                    args.trust_policy, None, flag="--trust-policy")[3]
            except ConfigError:  # the policy names no checkpoint key at all
                policy_trusts = False
        if signer is not None and not policy_trusts:
            # The repair entry would be the log's last checkpoint, under a key the policy does not
            # trust for checkpoints: the guard would not open the log, nor `audit verify --policy` pass it.
            why = ("receipts.revoked_keys revokes it: a checkpoint it signs proves nothing"
                   if signer.key_id in revoked else
                   "the policy trusts no such key for checkpoints (its signing_key, receipts.retired_keys, "
                   "audit_trusted_keys; a --key is not one of them)")
            raise ConfigError(
                f"--signing-key {args.signing_key} (key id {signer.key_id}) would sign the repair entry as the "
                f"log's most recent checkpoint, but under --trust-policy {args.trust_policy} {why}, so the guard "
                "would refuse to open the repaired log. Sign with the policy's signing_key, or add this key's .pub "
                "to audit_trusted_keys first (a key the policy revokes, or a boundary's authority key, may not be "
                "added). Nothing was changed")
    try:
        st: os.stat_result | None = os.stat(args.file)
    except OSError:
        st = None  # verify below names what is wrong with the path
    if st is not None:
        _refuse_not_regular(st, args.file, repair=True)  # verifying a FIFO first waited for a writer
    wrong_file = _not_an_audit_log(args.file, verify_audit_file(args.file, trusted_keys=trusted,
                                                                 checkpoint_every=args.checkpoint_every,
                                                                 writer_keys=macs))
    if wrong_file:
        print(f"error: {args.file} is not an audit log, so nothing was changed (repair cuts a damaged log after "
              f"its valid entries, and this one has none): {wrong_file}", file=sys.stderr)
        return 2
    allow_shared, sign_every = args.allow_shared_file, False
    if args.trust_policy:
        from .policy import load_policy

        # The guard under that policy opens a shared log; its repair may too (the same opt-out).
        trust_cfg = load_policy(args.trust_policy)
        allow_shared = allow_shared or trust_cfg.audit_allow_shared_file
        # Its repair entry must not vouch for another guard's entry that guard would refuse.
        sign_every = trust_cfg.audit_sign_every_entry
        # Nor, as its checkpoint, sign over entries the guard refuses under audit_signed_from.
        if _before_signing_refused(args.file, args.trust_policy, trust_cfg.audit_signed_from, trusted, macs,
                                   args.checkpoint_every, "repaired"):
            return 1
    try:
        rep = repair_audit_file(args.file, signer=signer, trusted_keys=trusted,
                                checkpoint_every=args.checkpoint_every, keep_chain_from=args.keep_chain_from,
                                allow_shared_file=allow_shared, writer_keys=macs, sign_every_entry=sign_every)
    except GuardArgumentValueError as exc:
        # The library words it for its own argument; a CLI user set the option.
        print("error: " + str(exc).replace("repair_audit_file() ", "").replace("keep_chain_from=", "--keep-chain-from ")
              .replace("without keep_chain_from", "without --keep-chain-from")
              .replace("keep_chain_from must be", "--keep-chain-from must be"), file=sys.stderr)
        return 2
    if rep.ok and not rep.detail.startswith("repaired: "):
        # repair_audit_file leaves a log that verifies as it is, and returns its report.
        print(f"nothing to repair: {rep.detail}; {args.file} verifies and was not changed")
        return 0
    print(rep.detail if rep.ok else f"NOT repaired: {rep.detail}")  # the detail says "repaired: ..."
    return 0 if rep.ok else 1


def cmd_audit_replay(args: argparse.Namespace) -> int:
    from .replay import replay_log

    macs, trusted = _given_keys(args)
    signed, signed_from = False, None
    if args.trust_policy:
        from .policy import load_policy

        trusted = _policy_audit_keys(args.trust_policy, trusted, flag="--trust-policy")[3]
        # As `audit verify --policy`: the guards under it sign every entry, so one without is forged.
        trust_cfg = load_policy(args.trust_policy)
        signed, signed_from = trust_cfg.audit_sign_every_entry, trust_cfg.audit_signed_from
    mode = "prefix" if args.verified_prefix else "unverified" if args.unverified else "verified"
    if mode != "unverified" and _before_signing_refused(args.log, args.trust_policy, signed_from, trusted, macs,
                                                        args.checkpoint_every, "REPLAYED"):
        # Its verified prefix would still hold the rewrite: replay_log verifies without signed_from.
        return 1
    if mode != "unverified":
        from .audit import verify_audit_file

        # A wrong path (a policy file, another JSONL) is named as one, as `audit verify` does, and
        # not offered --verified-prefix / --unverified as if it were a damaged log.
        wrong_file = _not_an_audit_log(args.log, verify_audit_file(args.log, trusted_keys=trusted,
                                                                   checkpoint_every=args.checkpoint_every,
                                                                   writer_keys=macs, signed_entries=signed))
        if wrong_file:
            print(f"NOT AN AUDIT LOG: {args.log}: {wrong_file}")
            return 1
    return replay_log(args.log, args.policy, out=sys.stdout, trusted_keys=trusted,
                      checkpoint_every=args.checkpoint_every, mode=mode, writer_keys=macs,
                      signed_entries=signed)
