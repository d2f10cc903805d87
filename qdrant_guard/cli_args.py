"""What several ``qdrant-guard`` commands share about their arguments: argparse value types, and the
checks of file and credential arguments (each error names the flag and the fix).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
from pathlib import Path

from .errors import ConfigError


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
