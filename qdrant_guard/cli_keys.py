"""``qdrant-guard keys new``, ``keys pub`` and ``credential issue``: Ed25519 keys and boundary credentials."""
from __future__ import annotations

import argparse
import base64
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from .cli_policy_keys import _signing_public_key
from .errors import ConfigError, QdrantGuardError
from .names import shown, toml_key


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


def _missing_authority(args: argparse.Namespace) -> str:
    """What to do about an ``--authority`` file that does not exist. Not ``keys new``: a new key
    issues credentials no guard accepts until the policy lists its .pub, so the fix is the path of
    the existing key, which ``--policy`` can name."""
    where = "" if os.path.isabs(args.authority) else f" (read from the current directory, {os.getcwd()})"
    head = f"--authority {args.authority}: no such file{where}"
    fix = (f"give the path of the private key whose .pub [boundaries.{toml_key(args.boundary)}] authority_keys "
           "lists (add --policy POLICY to have it named)")
    if args.policy:
        from .policy import load_policy

        try:
            named = load_policy(args.policy).boundaries.get(args.boundary)
        except (QdrantGuardError, OSError, ValueError):
            named = None  # the policy's own error comes with the corrected command
        found = [spec[:-len(".pub")] for spec in (named.authority_keys if named else ())
                 if spec.endswith(".pub") and os.path.isfile(spec[:-len(".pub")])]
        if found:
            return (f"{head}; the authority key of boundary {shown(args.boundary)} in --policy {args.policy} is "
                    f"{found[0]}: pass --authority {shlex.quote(found[0])}")
    return (f"{head}; {fix}. `qdrant-guard keys new` would make a new authority key, whose credentials the "
            "guard refuses until the policy lists its .pub")


def cmd_credential_issue(args: argparse.Namespace) -> int:
    from . import keys
    from .boundary import issue_credential, unprintable_name

    for flag, name in (("--agent", args.agent), ("--boundary", args.boundary)):
        problem = unprintable_name(name, flag)
        if problem is not None:
            print(f"error: {problem}; nothing was issued", file=sys.stderr)
            return 2
    if isinstance(args.authority, str) and args.authority and not os.path.lexists(args.authority):
        print(f"error: {_missing_authority(args)}; nothing was issued", file=sys.stderr)
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
