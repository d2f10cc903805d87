"""The ``qdrant-guard`` command: keys, credentials, receipts, audit, demo, calibrate, eval."""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from .errors import ConfigError, GuardArgumentValueError, QdrantGuardError
from .names import shown, toml_key


def _positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (0.0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


# Ten years: past it a --ttl is a typo (1e30 made a credential that outlives every key rotation),
# not a lifetime.
_MAX_TTL_S = 10 * 365 * 86400


def _ttl(text: str) -> float:
    """argparse type of ``credential issue --ttl``: seconds, > 0 and at most ten years."""
    try:
        value = _positive_float(text)
    except argparse.ArgumentTypeError as exc:
        # "1d" or "24h" is the likely slip: the option takes a plain number of seconds.
        raise argparse.ArgumentTypeError(f"{exc}; give the lifetime in seconds, e.g. 86400 for a day") from None
    if value > _MAX_TTL_S:
        raise argparse.ArgumentTypeError(
            f"{text!r} seconds is over ten years ({_MAX_TTL_S} s); give the lifetime in seconds, e.g. "
            "86400 for a day, and issue a new credential when it runs out")
    return value


def _nonempty(text: str) -> str:
    """argparse type: a name that is not empty or blank, nor padded with whitespace (a quoting slip:
    "hr " is another boundary than the policy's hr, so its credential would be refused there)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    if text != text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} begins or ends with whitespace; give the name as the "
                                         f"policy spells it ({text.strip()!r}?)")
    return text


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def cmd_keys_new(args: argparse.Namespace) -> int:
    from . import keys

    sk, pk = keys.generate_keypair()
    out = Path(args.out)
    if not args.out or out.is_dir():
        # "exists; refusing to overwrite a key" would call a directory (or ".") a key.
        what = "is empty" if not args.out else f"{args.out!r} is a directory"
        print(f"error: --out {what}; give the path of the key file to create, e.g. --out keys/guard.key "
              "(its public key goes beside it, as keys/guard.key.pub)", file=sys.stderr)
        return 2
    if args.out.endswith(("/", os.sep)):
        # Path() drops the slash: "keys/" would become a key file named "keys".
        print(f"error: --out {args.out!r} ends with a slash; give the path of the key file to create, e.g. "
              f"--out {args.out.rstrip('/' + os.sep) or '.'}/guard.key", file=sys.stderr)
        return 2
    pub = out.with_suffix(out.suffix + ".pub")
    for existing in (out, pub):
        # A .pub left beside the path is what a policy or an auditor trusts: replacing it silently
        # would swap the key they check against.
        if os.path.lexists(existing):
            print(f"error: {existing} exists; refusing to overwrite a key (choose another --out, or move "
                  f"{existing} aside)", file=sys.stderr)
            return 2
    written: Path | None = None
    try:
        _write_private(out, keys.private_key_to_pem(sk))
        written = out
        fd = os.open(pub, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(keys.public_key_to_str(pk) + "\n")
    except OSError as exc:
        if written is not None:
            written.unlink()  # a private key without its .pub is half a key pair
        print(f"error: cannot write key file {exc.filename or out} (--out {args.out}): "
              f"{exc.strerror or exc}; nothing was written", file=sys.stderr)
        return 2
    print(json.dumps({"private_key": str(out), "public_key_file": str(pub),
                      "public_key": keys.public_key_to_str(pk), "key_id": keys.key_id(pk)}, indent=2))
    return 0


def cmd_keys_pub(args: argparse.Namespace) -> int:
    from . import keys

    pub = Path(args.key + ".pub")
    if os.path.lexists(pub):
        # The .pub is what a policy or an auditor trusts: never replace it silently.
        print(f"error: {pub} exists; refusing to overwrite a key (move {pub} aside first)", file=sys.stderr)
        return 2
    try:
        pk = keys.load_private_key(args.key).public_key()
    except keys.KeyStoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        fd = os.open(pub, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(keys.public_key_to_str(pk) + "\n")
    except OSError as exc:
        print(f"error: cannot write {pub}: {exc.strerror or exc}; nothing was written", file=sys.stderr)
        return 2
    print(json.dumps({"private_key": args.key, "public_key_file": str(pub),
                      "public_key": keys.public_key_to_str(pk), "key_id": keys.key_id(pk)}, indent=2))
    return 0


def _credential_policy_problem(args: argparse.Namespace, authority: Any) -> str | None:
    """Why a guard under ``--policy`` would refuse a credential of ``--boundary`` signed by
    ``authority``, or None: the boundary is not in the policy, the key is not one of its
    authority keys, or an authority key of the policy has a second role (the guard would not start)."""
    from . import keys
    from .policy import load_policy

    cfg = load_policy(args.policy)
    named = cfg.boundaries.get(args.boundary)
    if named is None:
        known = ", ".join(repr(b) for b in sorted(cfg.boundaries)) or "none"
        return (f"--boundary {args.boundary!r} is not a boundary of --policy {args.policy} (its boundaries: "
                f"{known}); the guard would refuse the credential. Check the name, or add a "
                f"[boundaries.{toml_key(args.boundary)}] section with the authority's .pub")
    mine = keys.key_id(authority.public_key())
    if all(keys.key_id(keys.load_public_key(spec)) != mine for spec in named.authority_keys):
        return (f"--authority {args.authority} (key id {mine}) is not among [boundaries.{toml_key(args.boundary)}] "
                f"authority_keys of --policy {args.policy}; the guard would refuse the credential. Use that "
                "boundary's authority key, or add this key's .pub to its authority_keys")
    own_kid = None
    if cfg.signing_key:
        try:
            own_kid = keys.key_id(_signing_public_key(cfg.signing_key))
        except (QdrantGuardError, OSError, ValueError):
            pass  # the issuer may not read the guard's key; the other roles are still checked
    try:
        # A guard refuses to start on a policy that gives an authority key a second role; its
        # retired_keys role (and a retired key that is current or revoked) is load_retired_keys' check.
        keys.check_authority_roles(cfg, signing_key_id=own_kid, source=f"--policy {args.policy}")
        authorities = {keys.key_id(keys.load_public_key(spec)): b  # each loaded by the check above
                       for b, bc in cfg.boundaries.items() for spec in bc.authority_keys}
        keys.load_retired_keys(cfg.receipts.retired_keys, current_key_id=own_kid, revoked=cfg.receipts.revoked_keys,
                               source=f"--policy {args.policy}", authorities=authorities)
    except ConfigError as exc:
        return f"{exc} (the guard would not start with this policy, so the credential is not issued)"
    return None


def cmd_credential_issue(args: argparse.Namespace) -> int:
    from . import keys
    from .boundary import issue_credential, unprintable_name

    for flag, name in (("--agent", args.agent), ("--boundary", args.boundary)):
        problem = unprintable_name(name, flag)
        if problem is not None:
            print(f"error: {problem}; nothing was issued", file=sys.stderr)
            return 2
    sk = keys.load_private_key(args.authority)
    if args.policy:
        problem = _credential_policy_problem(args, sk)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    token = issue_credential(sk, agent_id=args.agent, boundary=args.boundary, ttl_s=args.ttl)
    print(token)
    body = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    # stderr, so that `credential issue ... > agent.cred` still captures the token alone.
    print(f"note: {shown(args.agent)}@{shown(args.boundary)} until "
          f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(claims['exp']))}; credential id (jti) "
          f"{claims['jti']}: list it in [boundaries.{toml_key(args.boundary)}] revoked_credentials to revoke "
          "it sooner",
          file=sys.stderr)
    return 0


def _require_local_store(path: str) -> None:
    """Refuse a ``--path`` that is not a qdrant-client local store: local mode would create an empty
    one there, and a mistyped path would then report "collection not found" and leave a directory."""
    if not (Path(path) / "meta.json").is_file():
        what = "does not exist" if not Path(path).exists() else "holds no qdrant-client local store (no meta.json)"
        raise ConfigError(f"--path {path!r} {what}; give the directory the client was opened with "
                          "(QdrantClient(path=...)), or --url for a server")


def _client_from(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    import qdrant_client

    if args.url:
        return qdrant_client.QdrantClient(url=args.url, api_key=os.environ.get("QDRANT_API_KEY"))
    _require_local_store(args.path)
    return qdrant_client.QdrantClient(path=args.path)


def _receipted_points(client: Any, collection: str) -> int:
    """How many points of ``collection`` hold a receipt: vectors a guard (or a writer) noised."""
    from qdrant_client import models

    from .receipts import RECEIPT_KEY

    has_receipt = models.Filter(must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key=RECEIPT_KEY))])
    return int(client.count(collection, count_filter=has_receipt, exact=True).count)


def _print_missing_collection(client: Any, args: argparse.Namespace) -> None:
    names = sorted(c.name for c in client.get_collections().collections)
    print(f"error: --collection {args.collection!r} is not in the store at "
          f"{'--path ' + repr(args.path) if args.path else '--url ' + args.url} (its collections: "
          f"{', '.join(names) or 'none'}); check the name and the store", file=sys.stderr)


def _signing_public_key(path: str) -> Any:
    """The public key of the guard's ``signing_key``: from ``<path>.pub`` (written beside it by
    ``keys new``) when that exists, so an auditor needs no read access to the private key; if the
    private key is readable too, the two must match."""
    from . import keys

    pub = Path(str(path) + ".pub")
    if not pub.exists():
        return keys.load_private_key(path).public_key()
    pk = keys.load_public_key(pub)
    try:
        own = keys.load_private_key(path).public_key()
    except QdrantGuardError as exc:
        if isinstance(exc.__cause__, OSError):  # unreadable (or absent) to this user: the .pub decides
            return pk
        raise
    if keys.key_id(own) != keys.key_id(pk):
        raise ConfigError(f"{pub} holds {keys.key_id(pk)}, not the public key of {path} ({keys.key_id(own)}); "
                          "rewrite it from the private key or remove it")
    return pk

def _policy_signing_keys(cfg: Any, policy: str) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """The guard's own keys per ``cfg``: (current key id or None, {kid: its public key} (empty
    without signing_key), {kid: public key} of receipts.retired_keys), checked as the guard checks
    them (a retired key that is the current one, revoked, or a boundary's authority key is an error, as
    is an authority key that is the signing_key or listed in trusted_keys, receipt_keys or
    audit_trusted_keys)."""
    from . import keys

    own: dict[str, Any] = {}
    if cfg.signing_key:
        try:
            pk = _signing_public_key(cfg.signing_key)
        except (QdrantGuardError, OSError, ValueError) as exc:
            raise ConfigError(f"--policy: signing_key: {exc}") from None
        own[keys.key_id(pk)] = pk
    own_kid = next(iter(own), None)
    authorities: dict[str, str] = {}
    for name, b in cfg.boundaries.items():
        for spec in b.authority_keys:
            try:
                authorities[keys.key_id(keys.load_public_key(spec))] = name
            except QdrantGuardError as exc:
                raise ConfigError(f"--policy: boundaries.{toml_key(name)}.authority_keys: {exc}") from None
    retired = keys.load_retired_keys(cfg.receipts.retired_keys, current_key_id=own_kid,
                                     revoked=cfg.receipts.revoked_keys, source=cfg.source_path or policy,
                                     authorities=authorities)
    # The guard refuses to start with an authority key in a second role; so does this check of its policy.
    keys.check_authority_roles(cfg, signing_key_id=own_kid, source=cfg.source_path or policy)
    return own_kid, own, retired


def _key_status(kid: str, *, own_kid: str | None, retired: Any, revoked: Any, trusted: Any) -> str:
    """What a key is to the policy: revoked, current (its signing_key), retired (an earlier
    signing key, receipts.retired_keys), trusted (another listed key) or unknown."""
    if kid in revoked:
        return "revoked"
    if kid == own_kid:
        return "current"
    if kid in retired:
        return "retired"
    return "trusted" if kid in trusted else "unknown"


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
                              check_noise=args.check_noise, noise_policy=noise_policy, policy=pol)
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


def _writer_keys(args: argparse.Namespace, trusted: dict[str, Any] | None
                 ) -> tuple[dict[str, bytes] | None, dict[str, Any] | None]:
    """The MAC keys of ``--writer-key`` (None without one), and ``trusted`` with their public keys:
    a writer's key checks its entries' MACs and, its public half, its checkpoints."""
    if not args.writer_key:
        return None, trusted
    from . import keys
    from .audit_mac import writer_keys

    sks = [keys.load_private_key(k) for k in args.writer_key]
    return writer_keys(sks), {**(trusted or {}), **{keys.key_id(sk.public_key()): sk.public_key() for sk in sks}}


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from . import keys
    from .audit import verify_audit_file
    from .audit_verify import _show_kid

    trusted = None
    if args.key:
        pks = [keys.load_public_key(k) for k in args.key]
        trusted = {keys.key_id(pk): pk for pk in pks}
    macs, trusted = _writer_keys(args, trusted)
    own_kid: str | None = None
    retired: dict[str, Any] = {}
    revoked: frozenset[str] = frozenset()
    if args.policy:
        own_kid, retired, revoked, trusted = _policy_audit_keys(args.policy, trusted, flag="--policy")
    if args.every_entry_signed and trusted is None:
        print("error: --every-entry-signed checks each entry's signature by its writer: give the public key of "
              "every guard writing the log (--key GUARD.pub, repeatable; or --policy, or --writer-key)",
              file=sys.stderr)
        return 2
    rep = verify_audit_file(args.file, trusted_keys=trusted, checkpoint_every=args.checkpoint_every,
                            writer_keys=macs, signed_entries=args.every_entry_signed)
    if rep.ok:
        signed = f", {rep.checkpoints} signed checkpoint(s) verified" if trusted is not None else ""
        print(f"OK: {rep.entries} entries, hash chain intact{signed} ({args.file})")
        if macs is not None:
            print("entries authenticated by their writer's MAC: " + (", ".join(
                f"{_show_kid(w)}: {n}" for w, n in rep.writers) or "none"))
            if rep.legacy:
                print(f"note: the first {rep.legacy} entr{'y' if rep.legacy == 1 else 'ies'} (before the first with a "
                      "writer MAC) are unauthenticated (pre-v2: written before entries carried MACs, or by a guard "
                      "without signing_key): anyone who could write the file then may have written them, and a "
                      "checkpoint after them signs them as its writer found them")
        elif args.every_entry_signed:
            print(f"every entry signed by its writer (--every-entry-signed): {rep.checkpoints} signatures verified")
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
    trust = "".join(f" --key {k}" for k in args.key or ()) + (f" --trust-policy {args.policy}" if args.policy else "")
    print(f"valid prefix: {rep.valid_prefix} entries; keep a copy of the file, then, with the guard stopped, "
          f"`qdrant-guard audit repair {args.file}{trust}` moves the rest to a side file and records the cut "
          "(docs/audit-log.md, 'Repair')")
    return 1


def cmd_audit_repair(args: argparse.Namespace) -> int:
    from . import keys
    from .audit import _refuse_not_regular, repair_audit_file, verify_audit_file
    from .receipts import ReceiptSigner

    signer = ReceiptSigner(keys.load_private_key(args.signing_key)) if args.signing_key else None
    trusted = None
    if args.key:
        pks = [keys.load_public_key(k) for k in args.key]
        trusted = {keys.key_id(pk): pk for pk in pks}
    macs, trusted = _writer_keys(args, trusted)
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
    from . import keys
    from .replay import replay_log

    trusted = None
    if args.key:
        pks = [keys.load_public_key(k) for k in args.key]
        trusted = {keys.key_id(pk): pk for pk in pks}
    macs, trusted = _writer_keys(args, trusted)
    if args.trust_policy:
        trusted = _policy_audit_keys(args.trust_policy, trusted, flag="--trust-policy")[3]
    mode = "prefix" if args.verified_prefix else "unverified" if args.unverified else "verified"
    if mode != "unverified":
        from .audit import verify_audit_file

        # A wrong path (a policy file, another JSONL) is named as one, as `audit verify` does, and
        # not offered --verified-prefix / --unverified as if it were a damaged log.
        wrong_file = _not_an_audit_log(args.log, verify_audit_file(args.log, trusted_keys=trusted,
                                                                   checkpoint_every=args.checkpoint_every,
                                                                   writer_keys=macs))
        if wrong_file:
            print(f"NOT AN AUDIT LOG: {args.log}: {wrong_file}")
            return 1
    return replay_log(args.log, args.policy, out=sys.stdout, trusted_keys=trusted,
                      checkpoint_every=args.checkpoint_every, mode=mode, writer_keys=macs)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import claim_workdir, run_demo

    if args.workdir is not None:
        try:
            claim_workdir(args.workdir, name="--workdir", example="--workdir demo")
        except GuardArgumentValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return run_demo(workdir=args.workdir)


def _output_file_error(flag: str, spec: str) -> str | None:
    """Why ``spec`` cannot take a JSON output, checked before a run of minutes writes it; or None.

    An existing file is replaced only if it holds JSON (an earlier output): a private key or a
    policy given by mistake would otherwise be overwritten after the run."""
    out = Path(spec)
    if not spec or out.is_dir():
        return f"{flag} {'is empty' if not spec else repr(spec) + ' is a directory'}; give the path of a JSON file to write"
    if not out.parent.is_dir():
        return f"{flag} {spec!r}: directory {str(out.parent)!r} does not exist; create it, or give a path in an existing directory"
    if out.exists():
        try:
            json.loads(out.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return (f"{flag} {spec!r} exists and holds no JSON (a key, a policy?); refusing to overwrite it: "
                    "give a new file, or remove that one first")
    return None


def _readable_file_error(flag: str, spec: str) -> str | None:
    path = Path(spec)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        return f"{flag} {spec!r} {what}; give the JSONL file (one entry per line, docs/eval.md)"
    return None


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


_ISSUE_HINT = ("get a valid one from the boundary's authority key with `qdrant-guard credential issue --authority "
               "AUTHORITY.key --agent AGENT --boundary BOUNDARY > agent.cred` and pass that file")
# Three dot-separated base64url parts, the last two long: what a token of another version or format
# looks like (a file name such as agent.v1.cred does not).
_TOKEN_LIKE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}")


def _credential_form_problem(token: str) -> str | None:
    """What makes ``token`` no credential token at all, judged by its form alone (no key needed),
    or None: the guard's verifier says the same, but tells a library caller to pass a file's
    contents, which a CLI user, who passed the token or its file, cannot act on."""
    from .boundary import TOKEN_PREFIX, CredentialRejected, verify_credential

    parts = token.split(".")
    if parts[0] != TOKEN_PREFIX:
        return f"it does not start with '{TOKEN_PREFIX}.'"
    if len(parts) != 3 or not all(parts):
        return (f"it has {len(parts)} dot-separated part(s) where a token has 3, "
                f"'{TOKEN_PREFIX}.<claims>.<signature>' (cut short or pasted twice?)")
    try:
        # With no authority, a token whose claims are well formed stops at its boundary.
        verify_credential(token, authorities={})
    except CredentialRejected as exc:
        if exc.reason in ("malformed", "non_canonical", "algorithm"):
            return f"its claims part is invalid ({str(exc).split(': ', 1)[1]})"
    try:
        signature = base64.urlsafe_b64decode(parts[2] + "=" * (-len(parts[2]) % 4))
    except ValueError:
        return "its signature is not base64url (cut short or edited?)"
    if base64.urlsafe_b64encode(signature).rstrip(b"=").decode("ascii") != parts[2]:
        return "its signature is not canonical base64url (cut short or edited?)"
    if len(signature) != 64:
        return f"its signature has {len(signature)} bytes where an Ed25519 signature has 64 (cut short?)"
    return None


def _credential_from(spec: str, flag: str) -> str:
    """``--credential``'s token; a file that holds none (empty, a key file) is named as such, where the
    verifier's "malformed" would tell a CLI user to pass the file's contents instead of its path,
    and so is a token of the wrong form, given as text or in a file (what is wrong, and how to
    get a valid one). The token itself is never printed: it is a bearer secret."""
    from .overhead import read_credential

    as_text = spec.strip().startswith("qgc1.")
    if not as_text and _TOKEN_LIKE.fullmatch(spec.strip()) and not os.path.exists(spec):
        raise ConfigError(f"{flag} was given a malformed credential token as text: it has the form of a token "
                          f"but does not start with 'qgc1.'; {_ISSUE_HINT}")
    token = read_credential(spec, flag)
    if not as_text and not token.startswith("qgc1."):
        if token.startswith("-----BEGIN") or token.startswith("ed25519:"):
            raise ConfigError(f"{flag} {spec!r} is a key file, not a credential; pass the token `qdrant-guard "
                              "credential issue` printed, or the file it was redirected to")
        what = "is empty" if not token else "holds no credential token (qgc1....)"
        raise ConfigError(f"{flag} file {spec!r} {what}; write one into it with `qdrant-guard credential issue "
                          f"--authority AUTHORITY.key --agent AGENT --boundary BOUNDARY > {spec}`")
    problem = _credential_form_problem(token)
    if problem is not None:
        given = "was given a malformed credential token as text" if as_text else \
            f"file {spec!r} holds a malformed credential token"
        raise ConfigError(f"{flag} {given}: {problem}; {_ISSUE_HINT}")
    return token


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
                         "that does not (public keys suffice)")
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
                    help="repair a log that others than this uid can write (group- or world-writable, another "
                         "owner, a world-writable directory without the sticky bit), refused by default as the "
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
                    "Figures depend on the machine. The defaults take about 10 s on a 2-core machine; "
                    "README.md, 'Benchmark your own policy', describes the output and the --json fields.")
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
    bn.add_argument("--queries", type=_positive_int, default=200, help="distinct queries per round (default 200)")
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
