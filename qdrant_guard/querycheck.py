"""Checks on a query before it reaches Qdrant: structure (native scan), redaction, intent."""
from __future__ import annotations

from typing import Any

import numpy as np
from qdrant_client.http import models

from . import detect as _detect
from .decision import Verdict
from .pipeline import Offload, Op
from .policy import CollectionPolicy
from .textguard import TextOps

_RAW_QUERY_TYPES = (list, tuple, np.ndarray, models.NearestQuery)


class QueryChecks(TextOps):
    """Structural validation, redaction and intent classification of query text."""

    def prepare_query(self, op: str, name: str, pol: CollectionPolicy, args: dict[str, Any],
                      query_text: str | None, details: dict[str, Any]) -> Op:
        """Check the query's text and return the (possibly rewritten) arguments.

        A generator: the classifier and the embedder run as :class:`Offload` requests.
        """
        query = args.get("query")
        text = query.text if isinstance(query, models.Document) else query_text
        if text is None:
            if pol.query.enabled and pol.query.require_text and _is_raw_vector(query):
                raise self.refuse(self.decision(
                    op, name, pol, Verdict.TEXT_REQUIRED,
                    "this collection requires the query's text for its checks: pass query_text= "
                    "next to the vector, or query with models.Document(text=...)",
                ))
        else:
            if not isinstance(text, str):
                raise TypeError(f"query_text must be str, not {type(text).__name__}")
            details["query_text"] = _detect.redact(text)
            self.validate_structure(op, name, pol, text, details)
            cleaned = self.screen_text(op, name, pol, text) if pol.query.redact_query_text else text
            yield from self.check_intent(op, name, pol, cleaned, details)
            if isinstance(query, models.Document):
                embedded = self.embeddable_text(pol, cleaned)
                if self.embedder is not None:
                    matrix = yield Offload(lambda: self.embed([embedded], where="query"))
                    args = {**args, "query": matrix[0].tolist()}
                else:
                    args = {**args, "query": query.model_copy(update={"text": embedded})}
        q = args.get("query")
        if pol.noise_queries and not pol.raw_allowed(self.boundary()) and isinstance(q, (list, tuple, np.ndarray)):
            args = {**args, "query": self.noise_query(pol, q)}  # type: ignore[attr-defined]
            details["query_noised"] = True
        return args

    def validate_structure(self, op: str, name: str, pol: CollectionPolicy, text: str, details: dict[str, Any]) -> None:
        """Native structural scan (token cap, repetition, encoded payloads) -> QUERY_REJECTED."""
        rules = pol.query
        if not rules.enabled:
            return
        from . import scan as _scan

        if rules.max_chars is not None and len(text) > rules.max_chars:
            violation = {"kind": "size_cap", "position": rules.max_chars,
                         "detail": f"{len(text)} characters > max_chars {rules.max_chars}"}
            if rules.mode == "monitor":
                details["scan"] = {"would_reject": [violation]}
                return
            raise self.refuse(self.decision(
                op, name, pol, Verdict.QUERY_REJECTED,
                f"the query text has {len(text)} characters, above max_chars {rules.max_chars}; shorten it",
                details={"violations": [violation], "query_text": details.get("query_text")},
            ))
        result = _scan.scan_query(
            text, max_tokens=rules.max_tokens, max_repetition=rules.max_repetition,
            max_ngram_run=rules.max_ngram_run, encoded_payloads=rules.encoded_payloads,
        )
        details["scan"] = {"tokens": result.token_count, "repetition": round(result.repetition_ratio, 4)}
        if result.ok:
            return
        violations = [{"kind": v.kind, "position": v.position, "detail": v.detail} for v in result.violations]
        if rules.mode == "monitor":
            details["scan"]["would_reject"] = violations
            return
        raise self.refuse(self.decision(
            op, name, pol, Verdict.QUERY_REJECTED,
            "the query failed structural validation (" + ", ".join(sorted({v['kind'] for v in violations}))
            + "); shorten it, remove repetition or encoded/invisible characters",
            details={"violations": violations, "query_text": details.get("query_text")},
        ))

    def check_intent(self, op: str, name: str, pol: CollectionPolicy, text: str, details: dict[str, Any]) -> Op:
        """Intent classification -> INTENT_BLOCKED, or FAIL_CLOSED when the classifier fails.

        A generator: classification is yielded as an :class:`Offload` (off the event loop in async).
        """
        ip = pol.intent
        if not ip.enabled:
            return
        try:
            clf = self.intent_classifier(ip.classifier)
            result = yield Offload(lambda: clf.classify(text))
        except Exception as exc:  # a broken classifier must never silently allow
            details["intent_error"] = repr(exc)
            if ip.fail_closed and not pol.is_public:
                raise self.refuse(self.decision(
                    op, name, pol, Verdict.FAIL_CLOSED,
                    f"the intent classifier failed ({type(exc).__name__}); the query was refused because "
                    "intent.fail_closed = true. Check the classifier service, or set fail_closed = false",
                    details={"error": repr(exc), "query_text": details.get("query_text")},
                )) from exc
            return
        details["intent"] = {"label": result.label, "confidence": round(float(result.confidence), 4),
                             "reasoning": result.reasoning, "classifier": result.classifier}
        if result.label in ip.block:
            if result.confidence < ip.min_confidence:
                details["intent"]["below_min_confidence"] = True
                return
            if ip.mode == "monitor":
                details["intent"]["would_block"] = True
                return
            raise self.refuse(self.decision(
                op, name, pol, Verdict.INTENT_BLOCKED,
                f"query classified {result.label} ({result.confidence:.2f}; {result.reasoning}). "
                "Rephrase the request to what the task needs",
                details={"intent": details["intent"], "query_text": details.get("query_text")},
            ))

    def intent_classifier(self, spec: str) -> Any:
        """The classifier for ``spec`` (loaded once per pipeline)."""
        cache = self.shared.setdefault("classifiers", {})
        clf = cache.get(spec)
        if clf is None:
            from .intent import load_classifier

            clf = cache[spec] = load_classifier(spec)
        return clf


def _is_raw_vector(query: Any) -> bool:
    if isinstance(query, _RAW_QUERY_TYPES):
        return True
    return False
