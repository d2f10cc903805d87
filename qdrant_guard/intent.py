"""Query intent classification: protocol, result type, built-in linear model and LLM adapter.

The guard classifies each query before retrieval into one of :data:`INTENT_LABELS` and the pipeline
blocks the labels listed in a collection's block set. Classifiers here never fail open: on any
failure they raise :class:`IntentClassifierError` (or a ``TypeError``/``ValueError`` for bad
arguments) and never return a default label. Refusing the query when that happens is the
pipeline's decision.

Two implementations ship:

* :class:`BuiltinIntentClassifier` - an offline multinomial logistic regression over hashed word
  n-grams, character trigrams and hand-written cue features. Inference needs numpy only.
* :class:`LLMIntentClassifier` - a client for any OpenAI-compatible ``/chat/completions`` endpoint,
  using only the standard library.

:func:`classify_with_timeout` is how the pipeline calls a classifier: the built-in one inline, any
other on a worker thread, abandoned (as a timeout) when it does not answer in time.

This module is the public face and :func:`load_classifier`; the parts live in
``intent_types`` (labels, result, protocol, error), ``intent_features`` (feature extraction),
``intent_builtin``, ``intent_llm`` and ``intent_pool`` (the time limit).
"""
from __future__ import annotations

import importlib
from typing import Any

from .errors import ConfigError, GuardArgumentTypeError
from .intent_builtin import BuiltinIntentClassifier, default_model_path
from .intent_llm import LLMIntentClassifier
from .intent_pool import MAX_ABANDONED_CALLS, classify_with_timeout
from .intent_types import INTENT_LABELS, IntentClassifier, IntentClassifierError, IntentResult

# Importable from here as before the split (docs/intent.md times featurize this way), not in __all__.
from .intent_builtin import model_from_dict  # noqa: F401
from .intent_features import CUE_NAMES, FEATURE_VERSION, Featurized, feature_rows, featurize, hash_key  # noqa: F401
from .intent_llm import SYSTEM_PROMPT  # noqa: F401

__all__ = [
    "INTENT_LABELS",
    "IntentResult",
    "IntentClassifier",
    "IntentClassifierError",
    "BuiltinIntentClassifier",
    "LLMIntentClassifier",
    "load_classifier",
    "classify_with_timeout",
    "default_model_path",
    "MAX_ABANDONED_CALLS",
]


def load_classifier(spec: str | None, *, timeout_s: float | None = None) -> IntentClassifier:
    """Build a classifier from a policy value.

    Args:
        spec: ``None`` or ``"builtin"`` for :class:`BuiltinIntentClassifier`; ``"llm"`` for
            :class:`LLMIntentClassifier` configured from the environment; ``"module:attr"`` for a
            user classifier: ``attr`` may be an instance, or a class/factory called with no
            arguments.
        timeout_s: the LLM classifier's ``timeout_s`` (default 5 s); the other classifiers take
            none (the pipeline bounds their calls with :func:`classify_with_timeout`).

    Returns:
        An object with a ``name`` and a ``classify`` method.

    Raises:
        TypeError: ``spec`` is not a str or None, or the object is not a classifier.
        ValueError: ``spec`` is not one of the accepted forms or cannot be imported.
    """
    if spec is None or spec == "builtin":
        return BuiltinIntentClassifier()
    if not isinstance(spec, str):
        raise GuardArgumentTypeError(f"load_classifier() argument 'spec' must be str or None, not {type(spec).__name__}")
    if spec == "llm":
        return LLMIntentClassifier() if timeout_s is None else LLMIntentClassifier(timeout_s=timeout_s)
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise ConfigError(f"intent classifier spec {spec!r} is not 'builtin', 'llm' or 'module:attr'")
    try:
        obj: Any = importlib.import_module(mod_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # ImportError, AttributeError, or whatever the module raises on import
        raise ConfigError(f"intent classifier spec {spec!r} cannot be loaded: {type(exc).__name__}: {exc}") from exc
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "classify")):
        try:
            obj = obj()
        except Exception as exc:  # a constructor that fails is a spec that cannot be loaded
            raise ConfigError(f"intent classifier spec {spec!r} cannot be loaded: calling {attr} raised "
                              f"{type(exc).__name__}: {exc}") from exc
    if not callable(getattr(obj, "classify", None)) or not isinstance(getattr(obj, "name", None), str):
        raise GuardArgumentTypeError(f"{spec!r} gave {type(obj).__name__}, which has no str 'name' and classify() method")
    classifier: IntentClassifier = obj  # checked above, as far as a Protocol can be at run time
    return classifier
