"""The errors qdrant_guard raises: every one it words itself derives from :class:`QdrantGuardError`.

Not wrapped: qdrant-client's own errors (they pass through a guarded call unchanged), Python's
signature errors for a guarded method called with wrong arguments (worded exactly as qdrant-client's
would be), and ``MemoryError``/``OSError`` from the system.
"""
from __future__ import annotations

from typing import Any, Sequence


class QdrantGuardError(Exception):
    """Base class of every error raised by qdrant_guard."""


class ConfigError(QdrantGuardError, ValueError):
    """A policy file or a GuardConfig is invalid. The message names the file, key, value and fix."""


class GuardArgumentTypeError(ConfigError, TypeError):
    """An argument of a qdrant_guard function or method is of the wrong type: a guarded client's
    ``guard=``, ``principal=`` (or ``with_principal``'s) or ``embedder=``, a
    :class:`~qdrant_guard.Principal` field, a read's ``query_text=``, or an argument of a public
    helper (audit log, credentials, receipts, budget stores, noise, scanners, calibration, ...).

    A TypeError too, as Python raises for a wrong argument type; the message names the argument
    and the fix. (A ``ValueError`` too, through :class:`ConfigError`.)"""


class GuardArgumentValueError(QdrantGuardError, ValueError):
    """An argument of a qdrant_guard function or method has the right type but a bad value (out of
    range, empty, malformed, not canonical, ...) and it is not a policy setting (those raise
    :class:`ConfigError`).

    A ValueError too, as Python raises for a bad argument value; the message names the argument
    and the fix."""


class QdrantGuardWarning(UserWarning):
    """Base class of the warnings qdrant_guard words itself (a UserWarning, so ``-W error`` and the
    default filters treat them as any library's). Filter them all with
    ``warnings.filterwarnings("ignore", category=qdrant_guard.QdrantGuardWarning)``."""


class UntaggedSourceWarning(QdrantGuardWarning):
    """A write stored points without the collection's source field where the source cap is
    enforced: they all count as one source, so a query returns at most
    ``max(1, floor(limit * max_source_fraction))`` of them. Shown once per collection and client."""


class NativeUnavailableError(QdrantGuardError, ImportError):
    """The native kernels were requested (the default) but are not built or not importable."""


class InvalidVectorError(QdrantGuardError, ValueError):
    """A vector is malformed (NaN/Inf, wrong dimension, no numbers, an unknown vector name), or a
    sparse vector or a sparse vector slot is asked for on a sensitive collection."""


class UnsupportedWriteError(QdrantGuardError, ValueError):
    """A write argument the guard cannot enforce on a sensitive collection; nothing was sent."""


class CredentialError(QdrantGuardError):
    """A boundary credential is malformed, expired, revoked or signed by an untrusted key."""


class ReceiptError(QdrantGuardError):
    """A reconstruction-resistance receipt is malformed or does not verify."""


class AuditError(QdrantGuardError):
    """The audit log cannot be written or read."""


class AuditIntegrityError(AuditError):
    """An audit log failed verification (edited, deleted, inserted, reordered or torn entry)."""


class AuditUnauthenticatedError(AuditIntegrityError):
    """The audit writer found entries after its last one that it cannot vouch for (its own writer
    id with a MAC that does not verify, an unknown writer id, or no MAC after format-v2 entries),
    and will not sign a checkpoint over them. ``seqs`` lists them; the message names the fix."""

    def __init__(self, message: str, seqs: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.seqs = seqs


class BenchmarkError(QdrantGuardError, ValueError):
    """``qdrant-guard bench`` cannot measure what was asked; the message names the input and the fix."""


class GuardRefusal(QdrantGuardError):
    """The guard refused a call: a refused write changed nothing, a refused read returns nothing.

    Most refusals are decided before Qdrant is called. Some follow a look-up the guard makes
    first (the points a write names, the collection's vector layout, its aliases), and a read whose
    extraction-budget store fails after Qdrant answered is refused with its results withheld
    (``FAIL_CLOSED``). Every refusal is audited before it is raised (``manifest_digest``).

    Attributes:
        verdict: machine-readable verdict name, e.g. ``"NOISE_REQUIRED"``.
        directive: what the caller should do to get the call accepted.
        point_ids: ids of the points at fault (empty for reads).
        manifest_digest: SHA-256 hash of the audit-log entry that records this decision.
        details: extra structured information (violations, measured values, ...).
    """

    def __init__(
        self,
        verdict: str,
        directive: str,
        *,
        point_ids: Sequence[Any] = (),
        manifest_digest: str = "",
        details: dict[str, Any] | None = None,
    ) -> None:
        self.verdict = str(verdict)
        self.directive = directive
        self.point_ids = list(point_ids)
        self.manifest_digest = manifest_digest
        self.details = dict(details or {})
        ids = ""
        if self.point_ids:
            shown = ", ".join(repr(p) for p in self.point_ids[:5])
            more = f" (+{len(self.point_ids) - 5} more)" if len(self.point_ids) > 5 else ""
            ids = f" [points: {shown}{more}]"
        super().__init__(f"{self.verdict}: {directive}{ids}")
