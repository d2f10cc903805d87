"""``qdrant-guard audit replay``: re-evaluate logged queries under a changed policy.

Only the pre-retrieval text layers (structural validation and intent) are replayed: they depend on
the query text alone. Every text an entry holds is replayed, in the order the guard checked them:
``query_text``, each of ``query_texts`` (a query with both ``query_text=`` and a
``models.Document``), and those of each request of a ``query_batch_points`` entry (``requests``);
the entry's new verdict is that of its first text the new policy refuses, as a live call would
get. Entries whose logged text was redacted are counted and skipped, because the original text is
not in the log (by design) and the redacted form would be judged differently. An entry only some
of whose texts can be replayed is not replayed at all (so not counted as replayed) and is listed
with the texts that could not be, and why.

The log is verified first (as ``qdrant-guard audit verify`` does, with the same optional trusted
keys), on the very bytes that are then replayed: a log that does not verify is not replayed unless
the caller asks for its verified prefix (``mode="prefix"``) or, explicitly, for every line
(``mode="unverified"``). See docs/audit-log.md.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Mapping, TextIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .audit_verify import DEFAULT_CHECKPOINT_EVERY, AuditReport, _read_locked, _scan_fork, legacy_note
from .decision import Verdict
from .detect import FINDING_TYPES
from .errors import ConfigError, GuardArgumentValueError, GuardRefusal
from .guard import Guard
from .pipeline import drive_sync
from .policy import load_policy

_QUERY_OPS = {"query_points", "query_points_groups", "query_batch_points"}
# What redaction writes in place of a finding ([EMAIL], ...): any other bracketed word, such as a
# query's own "[TODO]", is the query's text and is replayed.
_PLACEHOLDER = re.compile(r"\[(?:" + "|".join(map(re.escape, FINDING_TYPES)) + r")\]")
REPLAY_MODES = ("verified", "prefix", "unverified")


def _text_item(item: Any) -> bool:
    # One checked text's fields, with the types the guard writes them with.
    return (isinstance(item, dict) and isinstance(item.get("query_text"), (str, type(None)))
            and all(isinstance(item.get(k), (dict, type(None))) for k in ("scan", "intent")))


def _checked(details: dict[str, Any]) -> bool:
    # The text fields of one query check (an entry's details, or one batch request's).
    if not _text_item(details):
        return False
    many = details.get("query_texts")
    return many is None or (isinstance(many, list) and all(_text_item(x) for x in many))


def _shown(value: Any) -> str:
    # Text from the log is printed in the report: a forged line (any self-consistent one without
    # --key) could otherwise end a report line and print lines of its own.
    if isinstance(value, str) and value.isascii() and value.isprintable():
        return value
    return ascii(value)


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
    if rec.get("op") not in _QUERY_OPS:
        return all(isinstance(details.get(k), (dict, type(None))) for k in ("scan", "intent"))
    requests = details.get("requests")
    return _checked(details) and (
        requests is None or (isinstance(requests, list) and all(_checked(d) for d in requests)))


def _flagged(item: dict[str, Any]) -> str | None:
    # What a monitor-mode check noted it would have refused (the call itself went through).
    if (item.get("scan") or {}).get("would_reject"):
        return Verdict.QUERY_REJECTED.value
    if (item.get("intent") or {}).get("would_block"):
        return Verdict.INTENT_BLOCKED.value
    return None


def _texts(details: dict[str, Any], where: str = "") -> list[tuple[str, Any, dict[str, Any]]]:
    """Every query text in ``details`` as ``(where, text, its check's fields)``, in the order the
    guard checked them; the text is None where the entry has the place but not the text."""
    requests = details.get("requests")
    if isinstance(requests, list):
        return [t for i, d in enumerate(requests) for t in _texts(d, f"{where}requests[{i}].")]
    many = details.get("query_texts")
    if isinstance(many, list) and many:
        # The top-level query_text is one of these (the first, or the refused one): not twice.
        return [(f"{where}query_texts[{i}] (from {_shown(item.get('from'))})", item.get("query_text"), item)
                for i, item in enumerate(many)]
    if "query_text" in details:
        return [(f"{where}query_text", details["query_text"], details)]
    return []


def _old_outcome(rec: dict[str, Any], texts: list[tuple[str, Any, dict[str, Any]]]) -> tuple[str | None, str]:
    """The logged text-layer verdict of an entry (None: allowed) and the text it was about."""
    verdict = rec.get("verdict")
    details = rec.get("details") or {}
    # QUERY_REJECTED is also the verdict of refusals replay does not re-run (a Document with no
    # embedder under noise_queries, a form the guard cannot inspect, a filter's match): those
    # entries can hold a text that passed. Only the text scan's refusal lists "violations" of it.
    if verdict == Verdict.INTENT_BLOCKED.value or (
            verdict == Verdict.QUERY_REJECTED.value and "violations" in details and "filter" not in details):
        # A refusal's top-level query_text is the refused text.
        text = details.get("query_text")
        return verdict, text if isinstance(text, str) else ""
    for _, text, item in texts:
        flagged = _flagged(item)
        if flagged is not None:
            return flagged, text
    # Before query_texts, a monitor note on the top-level fields alone.
    flagged = _flagged(details)
    text = details.get("query_text")
    return flagged, text if flagged is not None and isinstance(text, str) else ""


def logged_boundary(guard: Guard, principal: Any) -> str | None:
    """The boundary of a logged ``principal`` label (``agent@boundary``), None when it cannot be told.

    A label is split at its last ``@``; where a boundary of the policy has ``@`` in its name the
    split could name the wrong one, so no boundary is read from any label.
    """
    if not isinstance(principal, str) or "@" not in principal:
        return None
    if any("@" in b for b in guard.config.boundaries):
        return None
    return principal.rpartition("@")[2]


def evaluate(guard: Guard, collection: str, text: str, boundary: str | None = None) -> str | None:
    """The text-layer verdict ``guard`` reaches for ``text`` on ``collection`` (None: allowed),
    for a principal of ``boundary`` (its query is not classified when it is the owner's under
    ``intent.skip_owner``; None: classified).

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
        if pol.intent.skip_owner and boundary is not None and boundary == pol.owner:
            return None
        drive_sync(guard.check_intent("replay", collection, enforce, text, details), None)
    except GuardRefusal as exc:
        return exc.verdict
    return None


def _integrity_lines(log_path: str, rep: AuditReport, mode: str, keyed: bool,
                     macs: bool = False) -> tuple[list[str], bool]:
    """What to say about the log's verification, and whether to replay at all. ``macs``: writer
    MACs were checked (``--writer-key``), so the v1 entries they let through unchecked, as
    ``audit verify`` does, are named: they are replayed as logged."""
    legacy = ([legacy_note(rep.legacy) + "; they are replayed as logged\n"]
              if macs and rep.legacy and (rep.ok or mode != "verified") else [])
    if rep.ok:
        how = (f"{rep.checkpoints} signed checkpoint(s) verified" if keyed
               else "checkpoint signatures not checked (no trusted keys)")
        return [f"log: {rep.entries} entries verified, hash chain intact, {how} ({log_path})\n", *legacy], True
    where = f"{rep.problem} at {rep.detail}"
    rest = rep.entries - rep.valid_prefix
    if mode == "verified":
        return [f"NOT REPLAYED: audit log {log_path} does not verify: {where}\n",
                f"valid prefix: {rep.valid_prefix} entries, then {rest} line(s) that do not verify. "
                "`qdrant-guard audit verify` locates the problem and docs/audit-log.md describes repair; "
                f"--verified-prefix replays only the {rep.valid_prefix} verified entries, --unverified "
                "every line (forged or edited ones included)\n"], False
    if mode == "prefix":
        return [f"WARNING: audit log {log_path} does not verify: {where}\n",
                f"WARNING: replayed only its verified prefix, the first {rep.valid_prefix} entries; the "
                f"{rest} line(s) after it were NOT replayed\n", *legacy], True
    return [f"WARNING: UNVERIFIED REPLAY: audit log {log_path} does not verify: {where}\n",
            f"WARNING: every line was replayed, including the {rest} line(s) from the problem on, which "
            "may be forged or edited: the counts below are not evidence of what was logged\n"], True


def replay_log(log_path: str, policy_path: str, *, out: TextIO,
               trusted_keys: Mapping[str, Ed25519PublicKey] | None = None,
               checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY, mode: str = "verified",
               writer_keys: Mapping[str, bytes] | None = None, signed_entries: bool = False) -> int:
    """Print what would change under ``policy_path`` for the queries logged in ``log_path``.

    The log is read once (under a shared lock) and those bytes are verified as
    :func:`qdrant_guard.audit.verify_audit_file` verifies a file (with ``trusted_keys``, checkpoint
    signatures too), then replayed.

    Args:
        log_path: the audit log (JSONL).
        policy_path: the policy to evaluate the logged queries under.
        out: where the report is written.
        trusted_keys: key id -> public key: verify checkpoint signatures, as ``audit verify --key``.
        checkpoint_every: the writer's checkpoint period (with ``trusted_keys``).
        writer_keys: writer id -> MAC key: an entry no given writer authenticates is a problem,
            as ``audit verify --writer-key`` (``verify_audit_file(writer_keys=...)``) finds it.
        signed_entries: every entry must carry its writer's signature, as ``audit verify
            --every-entry-signed`` requires (needs ``trusted_keys``; ``audit replay --trust-policy``
            sets it from the policy's ``audit_sign_every_entry``).
        mode: ``"verified"`` (default): a log that does not verify is not replayed;
            ``"prefix"``: replay only its verified prefix; ``"unverified"``: replay every line.
            The output says which, and the problem verify found.

    Returns:
        0 when the log verified and was replayed; 1 when it does not verify (replayed in part or
        in whole only in ``"prefix"`` / ``"unverified"`` mode).

    Raises:
        AuditError: the log cannot be read.
        ValueError: ``mode`` is not one of :data:`REPLAY_MODES`.
    """
    if mode not in REPLAY_MODES:
        raise GuardArgumentValueError(f"replay_log() mode must be one of {', '.join(REPLAY_MODES)}, got {mode!r}")
    if signed_entries and trusted_keys is None:
        raise GuardArgumentValueError("replay_log() signed_entries=True checks each entry's signature by its writer, "
                                      "and trusted_keys is None: pass the public key of every guard writing the log")
    data = _read_locked(log_path)
    rep = _scan_fork(log_path, trusted_keys, checkpoint_every, data=data, writer_keys=writer_keys,
                     signed_entries=signed_entries)[0]
    notes, go = _integrity_lines(log_path, rep, mode, trusted_keys is not None, writer_keys is not None)
    if not go:
        out.writelines(notes)
        return 1
    if not rep.ok and mode == "prefix":
        data = data[:rep.valid_bytes]
    # Replaying must never touch the live audit log: not create it, not need its tail intact.
    cfg = load_policy(policy_path).model_copy(update={"audit_log": None})
    guard = Guard(cfg)
    guard.audit = None
    counts: Counter[str] = Counter()
    changes: Counter[tuple[str, str]] = Counter()
    examples: dict[tuple[str, str], str] = {}
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    partly: list[str] = []
    texts_replayed = 0
    for lineno, raw in enumerate(lines, 1):
        try:
            entry = json.loads(raw)
            rec = entry["record"]
        except (ValueError, KeyError, TypeError):
            counts["unreadable"] += 1
            continue
        if not _well_formed(rec):
            # Not a record the guard writes (a hand-edited or foreign line): skip, don't crash.
            counts["unreadable"] += 1
            continue
        if rec.get("op") not in _QUERY_OPS:
            continue
        texts = _texts(rec.get("details") or {})
        unplayable = [(where, "text not logged" if not isinstance(text, str) else "redacted")
                      for where, text, _ in texts if not isinstance(text, str) or _PLACEHOLDER.search(text)]
        if len(unplayable) == len(texts):
            if any(why == "redacted" for _, why in unplayable):
                counts["redacted_skipped"] += 1
            else:
                counts["no_text"] += 1
            continue
        if unplayable:
            bad = {where for where, _ in unplayable}
            seq = entry.get("seq") if isinstance(entry, dict) else None
            partly.append(f"  line {lineno} (seq {seq}) {rec.get('op')}: not replayed: "
                          + ", ".join(f"{where} ({why})" for where, why in unplayable)
                          + "; replayable alone: " + ", ".join(w for w, _, _ in texts if w not in bad) + "\n")
            continue
        counts["replayed"] += 1
        texts_replayed += len(texts)
        old, old_text = _old_outcome(rec, texts)
        new, new_text = None, ""
        for _, text, _ in texts:
            new = evaluate(guard, rec.get("collection") or "", text, logged_boundary(guard, rec.get("principal")))
            if new is not None:
                new_text = text
                break
        if old == new:
            continue
        key = ("newly_blocked", new) if new is not None else ("newly_allowed", old or "")
        changes[key] += 1
        examples.setdefault(key, (new_text if new is not None else old_text)[:80])
    out.writelines(notes)
    out.write(f"replayed {counts['replayed']} logged queries ({texts_replayed} texts) under {policy_path}\n")
    out.write(f"skipped: {counts['redacted_skipped']} with redacted text, {counts['no_text']} without text, "
              f"{counts['unreadable']} unreadable, {len(partly)} with only some texts replayable\n")
    if partly:
        out.write(f"NOT REPLAYED: {len(partly)} entries hold texts that cannot be replayed next to ones that "
                  "could; an entry is replayed whole or not at all, so these are not counted above:\n")
        out.writelines(partly)
    if not changes:
        out.write("no change\n")
    for (kind, rule), n in sorted(changes.items()):
        out.write(f"{kind:14s} {rule:16s} {n:6d}   e.g. {examples[(kind, rule)]!r}\n")
    return 0 if rep.ok else 1
