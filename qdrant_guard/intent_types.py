"""What every intent classifier shares: the labels, the result type, the protocol and the error."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

from .errors import GuardArgumentTypeError, QdrantGuardError

__all__ = ["INTENT_LABELS", "IntentResult", "IntentClassifier", "IntentClassifierError"]

INTENT_LABELS: tuple[str, ...] = ("benign", "exploratory", "suspicious", "adversarial")


class IntentClassifierError(QdrantGuardError):
    """An intent classifier could not produce a valid result.

    Raised on timeouts, transport and HTTP errors, unparsable or invalid responses, and unreadable
    model files. Callers must treat it as "intent unknown" and apply their fail-closed policy.
    """


@dataclass(frozen=True)
class IntentResult:
    """The intent of one query.

    Attributes:
        label: one of :data:`INTENT_LABELS`.
        confidence: the classifier's probability (or stated confidence) for ``label``, in [0, 1].
        reasoning: a short human-readable justification.
        classifier: name of the classifier that produced the result, e.g. ``"builtin-linear-v1"``.
        features: the top contributing features as ``(name, contribution)`` pairs, strongest first
            (empty for classifiers that do not expose features).
    """

    label: str
    confidence: float
    reasoning: str
    classifier: str
    features: tuple[tuple[str, float], ...] = ()


@runtime_checkable
class IntentClassifier(Protocol):
    """What the pipeline needs from an intent classifier.

    Implementations must raise (preferably :class:`IntentClassifierError`) when they cannot
    classify, and must never return a default label in place of an answer.
    """

    name: str

    def classify(self, text: str, *, embedding: Sequence[float] | None = None) -> IntentResult:
        """Classify one query text; ``embedding`` is the query vector when the caller has it."""
        ...


def _check_text(text: object) -> str:
    if not isinstance(text, str):
        raise GuardArgumentTypeError(f"classify() argument 'text' must be str, not {type(text).__name__}")
    return text
