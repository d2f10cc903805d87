"""``qdrant-guard audit replay``: re-evaluate logged queries under a changed policy.

Only the pre-retrieval text layers (structural validation and intent) are replayed: they depend on
the query text alone. Entries whose logged text was redacted are counted and skipped, because the
original text is not in the log (by design) and the redacted form would be judged differently.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, TextIO

from .decision import Verdict
from .errors import ConfigError, GuardRefusal
from .guard import Guard
from .pipeline import drive_sync
from .policy import load_policy

_QUERY_OPS = {"query_points", "query_points_groups", "query_batch_points"}
_PLACEHOLDER = re.compile(r"\[[A-Z][A-Z0-9_]+\]")
_TEXT_VERDICTS = {Verdict.QUERY_REJECTED.value, Verdict.INTENT_BLOCKED.value}


def _well_formed(rec: Any) -> bool:
    # The fields replay reads, with the types the guard writes them with.
    if not isinstance(rec, dict):
        return False
    if not all(isinstance(rec.get(k), (str, type(None))) for k in ("op", "collection", "verdict")):
        return False
    details = rec.get("details")
    if details is None:
        return True
    if not isinstance(details, dict):
        return False
    return all(isinstance(details.get(k), (dict, type(None))) for k in ("scan", "intent"))


def _old_outcome(rec: dict[str, Any]) -> str | None:
    verdict = rec.get("verdict")
    if verdict in _TEXT_VERDICTS:
        return verdict
    details = rec.get("details") or {}
    if (details.get("scan") or {}).get("would_reject"):
        return Verdict.QUERY_REJECTED.value
    if (details.get("intent") or {}).get("would_block"):
        return Verdict.INTENT_BLOCKED.value
    return None


def evaluate(guard: Guard, collection: str, text: str) -> str | None:
    """The text-layer verdict ``guard`` reaches for ``text`` on ``collection`` (None: allowed).

    A collection the policy refuses as unlisted (``unlisted = "refuse"``) gives the verdict a
    live call gets, ``REFUSED_CROSS_BOUNDARY``.
    """
    try:
        pol = guard.policy(collection)
    except ConfigError as exc:
        if getattr(exc, "unlisted", None) is None:
            raise
        return Verdict.REFUSED_CROSS_BOUNDARY.value
    if pol.is_public:
        return None
    details: dict[str, Any] = {}
    enforce = pol.model_copy(update={
        "query": pol.query.model_copy(update={"mode": "enforce"}),
        "intent": pol.intent.model_copy(update={"mode": "enforce"}),
    })
    try:
        guard.validate_structure("replay", collection, enforce, text, details)
        drive_sync(guard.check_intent("replay", collection, enforce, text, details), None)
    except GuardRefusal as exc:
        return exc.verdict
    return None


def replay_log(log_path: str, policy_path: str, *, out: TextIO) -> int:
    """Print what would change under ``policy_path`` for the queries logged in ``log_path``."""
    # Replaying must never touch the live audit log: not create it, not need its tail intact.
    cfg = load_policy(policy_path).model_copy(update={"audit_log": None})
    guard = Guard(cfg)
    guard.audit = None
    counts: Counter[str] = Counter()
    changes: Counter[tuple[str, str]] = Counter()
    examples: dict[tuple[str, str], str] = {}
    with open(log_path, "rb") as fh:
        for raw in fh:
            try:
                rec = json.loads(raw)["record"]
            except (ValueError, KeyError, TypeError):
                counts["unreadable"] += 1
                continue
            if not _well_formed(rec):
                # Not a record the guard writes (a hand-edited or foreign line): skip, don't crash.
                counts["unreadable"] += 1
                continue
            if rec.get("op") not in _QUERY_OPS:
                continue
            details = rec.get("details") or {}
            text = details.get("query_text")
            if not isinstance(text, str):
                counts["no_text"] += 1
                continue
            if _PLACEHOLDER.search(text):
                counts["redacted_skipped"] += 1
                continue
            counts["replayed"] += 1
            old = _old_outcome(rec)
            new = evaluate(guard, rec.get("collection") or "", text)
            if old == new:
                continue
            key = ("newly_blocked", new) if new is not None else ("newly_allowed", old or "")
            changes[key] += 1
            examples.setdefault(key, text[:80])
    out.write(f"replayed {counts['replayed']} logged queries under {policy_path}\n")
    out.write(f"skipped: {counts['redacted_skipped']} with redacted text, {counts['no_text']} without text, "
              f"{counts['unreadable']} unreadable\n")
    if not changes:
        out.write("no change\n")
    for (kind, rule), n in sorted(changes.items()):
        out.write(f"{kind:14s} {rule:16s} {n:6d}   e.g. {examples[(kind, rule)]!r}\n")
    return 0
