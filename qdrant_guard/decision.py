"""Verdicts, decisions and the manifest that every decision records."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from .errors import GuardRefusal

MAX_IDS_IN_RECORD = 100


class Verdict(str, enum.Enum):
    """Every verdict the guard can reach."""

    ALLOW = "ALLOW"
    ALLOW_IN_BOUNDARY_RAW = "ALLOW_IN_BOUNDARY_RAW"
    ALLOW_RECEIPTED = "ALLOW_RECEIPTED"
    ALLOW_NOISED = "ALLOW_NOISED"
    NOISE_REQUIRED = "NOISE_REQUIRED"
    EPSILON_ABOVE_CEILING = "EPSILON_ABOVE_CEILING"
    INVALID_RECEIPT = "INVALID_RECEIPT"
    RECEIPT_TAMPERING = "RECEIPT_TAMPERING"
    REFUSED_CROSS_BOUNDARY = "REFUSED_CROSS_BOUNDARY"
    INVALID_CREDENTIAL = "INVALID_CREDENTIAL"
    QUERY_REJECTED = "QUERY_REJECTED"
    INTENT_BLOCKED = "INTENT_BLOCKED"
    TEXT_REQUIRED = "TEXT_REQUIRED"
    SENSITIVITY_MISMATCH = "SENSITIVITY_MISMATCH"
    CREDENTIAL_IN_TEXT = "CREDENTIAL_IN_TEXT"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    UTILITY_DEGRADED = "UTILITY_DEGRADED"
    FAIL_CLOSED = "FAIL_CLOSED"
    QDRANT_ERROR = "QDRANT_ERROR"
    UNSUPPORTED_WRITE = "UNSUPPORTED_WRITE"


@dataclass
class Decision:
    """One decision of the pipeline, as audited.

    The manifest carries the seeds' four recorded elements: ``embedding_sensitivity_class``,
    ``differential_privacy_epsilon``, ``reconstruction_resistance_receipt`` and
    ``retrieval_utility_guard_hash``.
    """

    op: str
    collection: str | None
    verdict: Verdict
    directive: str
    principal: str | None
    point_ids: list[Any] = field(default_factory=list)
    sensitivity: str | None = None
    epsilon: float | None = None
    receipt: str | None = None
    #: The applied utility record's hash; with ``utility.records``, vector name -> hash (None: no record).
    utility_hash: str | dict[str, str | None] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    monitor: bool = False
    fail_closed: bool = True

    def manifest(self) -> dict[str, Any]:
        """The decision manifest (the four recorded elements plus what was decided)."""
        return {
            "embedding_sensitivity_class": self.sensitivity,
            "differential_privacy_epsilon": self.epsilon,
            "reconstruction_resistance_receipt": self.receipt,
            # Vector names key the dict form: escaped as other caller-chosen keys are.
            "retrieval_utility_guard_hash": (_jsonable(self.utility_hash) if isinstance(self.utility_hash, dict)
                                             else self.utility_hash),
        }

    def record(self) -> dict[str, Any]:
        """The JSON-ready audit record (its digest is the hash of the audit entry that holds it)."""
        ids = [_jsonable_id(p) for p in self.point_ids[:MAX_IDS_IN_RECORD]]
        body: dict[str, Any] = {
            "op": self.op,
            # Caller-chosen strings (a self-asserted agent id, a collection name) may hold lone
            # surrogates, which would make the append fail and the decision go unaudited.
            "collection": _utf8_safe(self.collection) if isinstance(self.collection, str) else self.collection,
            "principal": _utf8_safe(self.principal) if isinstance(self.principal, str) else self.principal,
            "verdict": self.verdict.value,
            "directive": _utf8_safe(self.directive),
            "point_ids": ids,
            "point_count": len(self.point_ids),
            "manifest": self.manifest(),
            "details": _jsonable(self.details),
        }
        if self.monitor:
            body["monitor"] = True
        return body

    def refusal(self, digest: str) -> GuardRefusal:
        """The exception that reports this (refusing) decision to the caller."""
        return GuardRefusal(
            self.verdict.value,
            self.directive,
            point_ids=self.point_ids,
            manifest_digest=digest,
            details=self.details,
        )


def _utf8_safe(text: str) -> str:
    # Lone surrogates (possible in Python str, e.g. a hostile query) cannot be UTF-8 encoded; the
    # audit record keeps them visible as escapes instead of failing the log.
    if type(text) is str and text.isascii():  # ASCII always encodes; no UTF-8 copy built
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


# Marks an audit record key that had to be escaped (see _utf8_safe_key).
_ESCAPED_KEY_PREFIX = "\\escaped:"


def _utf8_safe_key(key: str) -> str:
    # A dict key must stay distinct from every other key of its dict, so it is escaped injectively,
    # unlike a value: _utf8_safe maps "m\ud800" and the literal text "m\\ud800" to one string, and
    # two sources of a budget report then shared one entry. A key that is not valid UTF-8 (or
    # starts with the marker) gets the marker, its backslashes doubled and its lone surrogates as
    # \uXXXX; every other key stays as it is.
    if type(key) is str and key.isascii() and not key.startswith(_ESCAPED_KEY_PREFIX):
        return key
    try:
        key.encode("utf-8")
        if not key.startswith(_ESCAPED_KEY_PREFIX):
            return key
    except UnicodeEncodeError:
        pass
    return _ESCAPED_KEY_PREFIX + key.replace("\\", "\\\\").encode("utf-8", "backslashreplace").decode("utf-8")


def _jsonable_id(pid: Any) -> Any:
    if isinstance(pid, str):
        return _utf8_safe(pid)
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else _utf8_safe(str(pid))


def _jsonable(obj: Any) -> Any:
    # Exact str/int/bool/None first (most leaves): the answers the checks below give them.
    t = type(obj)
    if t is str:
        return _utf8_safe(obj)
    if t is int or t is bool or obj is None:
        return obj
    if isinstance(obj, dict):
        # Keys too: a budget report is keyed by source names, which come from stored payloads.
        return {_utf8_safe_key(str(k)): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else str(obj)
    if isinstance(obj, str):
        return _utf8_safe(obj)
    if obj is None or isinstance(obj, (bool, int)):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.value
    return str(obj)
