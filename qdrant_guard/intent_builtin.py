"""The built-in intent classifier: an offline multinomial logistic regression over the hashed
n-grams and cues of :mod:`qdrant_guard.intent_features`, loaded from a model JSON.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
from .errors import GuardArgumentTypeError
from .intent_features import CUE_NAMES, FEATURE_VERSION, Featurized, _display, feature_rows, featurize
from .intent_types import INTENT_LABELS, IntentClassifierError, IntentResult, _check_text

__all__ = ["BuiltinIntentClassifier", "default_model_path", "model_from_dict"]


def default_model_path() -> str:
    """Path of the packaged model, ``qdrant_guard/data/intent_model.json``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "intent_model.json")


@dataclass(frozen=True)
class _LinearModel:
    hash_bits: int
    weights: np.ndarray  # (2**hash_bits + len(CUE_NAMES), n_labels)
    bias: np.ndarray
    labels: tuple[str, ...]
    name: str


def model_from_dict(doc: dict[str, Any], source: str = "<dict>") -> _LinearModel:
    """Build the dense weight matrix from a model document (the JSON written by the trainer).

    Raises:
        IntentClassifierError: the document is not a compatible model.
    """
    try:
        if doc.get("feature_version") != FEATURE_VERSION:
            raise IntentClassifierError(
                f"intent model {source} has feature_version {doc.get('feature_version')!r} but this "
                f"qdrant_guard extracts version {FEATURE_VERSION}; retrain it with "
                "`python -m qdrant_guard.intent_train`"
            )
        labels = tuple(doc["labels"])
        if labels != INTENT_LABELS:
            raise IntentClassifierError(f"intent model {source} has labels {labels!r}, expected {INTENT_LABELS!r}")
        if tuple(doc["cues"]) != CUE_NAMES:
            raise IntentClassifierError(f"intent model {source} was trained with different cue features; retrain it")
        bits = int(doc["hash_bits"])
        if not 8 <= bits <= 24:
            raise IntentClassifierError(f"intent model {source}: hash_bits={bits} is outside 8..24")
        base = 1 << bits
        w = np.zeros((base + len(CUE_NAMES), len(labels)), dtype=np.float64)
        for bucket, row in doc["hashed_weights"].items():
            b = int(bucket)
            if not 0 <= b < base:  # numpy would take -1 as the last row, a cue's
                raise IntentClassifierError(f"intent model {source}: hashed bucket {bucket!r} is outside "
                                            f"0..{base - 1}")
            w[b] = row
        for j, name in enumerate(CUE_NAMES):
            w[base + j] = doc["cue_weights"][name]
        bias = np.asarray(doc["bias"], dtype=np.float64)
        if bias.shape != (len(labels),) or not np.all(np.isfinite(w)) or not np.all(np.isfinite(bias)):
            raise IntentClassifierError(f"intent model {source} has malformed or non-finite weights")
        return _LinearModel(bits, w, bias, labels, str(doc.get("name", "builtin-linear-v1")))
    except IntentClassifierError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise IntentClassifierError(f"intent model {source} is malformed: {exc!r}") from exc


@lru_cache(maxsize=8)
def _load_model(path: str) -> _LinearModel:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise IntentClassifierError(f"cannot read intent model {path!r}: {exc}") from exc
    if not isinstance(doc, dict):
        raise IntentClassifierError(f"intent model {path!r} is not a JSON object")
    return model_from_dict(doc, repr(path))


class BuiltinIntentClassifier:
    """Offline intent classifier: multinomial logistic regression over lexical features.

    The model scores hashed word unigrams and bigrams, character trigrams and hand-written cues
    (bulk requests, sensitive nouns, named targets, instruction-override phrases, encoded or
    obfuscated text, own-account phrasing, ...). It is a statistical filter trained on a small
    labelled dataset (``data/intent_dataset.jsonl``): it raises the cost of topic-targeted probing
    and catches common attack phrasings, but paraphrases it has not seen can evade it.

    Args:
        model_path: a model JSON written by ``python -m qdrant_guard.intent_train``; default is the
            packaged ``data/intent_model.json``.

    Raises:
        IntentClassifierError: the model file is missing, unreadable or incompatible.
    """

    def __init__(self, model_path: str | None = None) -> None:
        if model_path is not None and not isinstance(model_path, (str, os.PathLike)):
            raise GuardArgumentTypeError(f"model_path must be str or None, not {type(model_path).__name__}")
        path = os.fspath(model_path) if model_path is not None else default_model_path()
        self._model = _load_model(os.path.abspath(path))
        self.name: str = self._model.name

    def scores(self, text: str) -> dict[str, float]:
        """Return the probability of every label for ``text`` (they sum to 1)."""
        probs, _, _, _ = self._score(_check_text(text))
        return {lab: float(p) for lab, p in zip(self._model.labels, probs)}

    def _score(self, text: str) -> tuple[np.ndarray, Featurized, list[int], list[float]]:
        m = self._model
        feats = featurize(text)
        idx, vals = feature_rows(feats, m.hash_bits)
        logits = m.bias + np.asarray(vals) @ m.weights[idx]
        logits -= logits.max()
        e = np.exp(logits)
        return e / e.sum(), feats, idx, vals

    def classify(self, text: str, *, embedding: Sequence[float] | None = None) -> IntentResult:
        """Classify one query.

        Args:
            text: the query text.
            embedding: accepted for protocol compatibility and ignored: the shipped model is
                text-only.

        Returns:
            The most probable label, its probability as ``confidence``, a reasoning sentence built
            from the top contributing features, and those features.

        Raises:
            TypeError: ``text`` is not a ``str``.
        """
        _check_text(text)
        m = self._model
        probs, feats, idx, vals = self._score(text)
        k = int(np.argmax(probs))
        label = m.labels[k]
        rows = m.weights[idx]
        # Contribution to the label's logit relative to the mean logit, so that features that push
        # every label equally (and thus decide nothing) score zero.
        contrib = np.asarray(vals) * (rows[:, k] - rows.mean(axis=1))
        base = 1 << m.hash_bits
        top: list[tuple[str, float]] = []
        readable: list[str] = []
        # Only the strongest features are named: formatting all of them would cost more than scoring.
        for i in np.argsort(-contrib, kind="stable"):
            c = float(contrib[i])
            if c <= 0 or (len(top) >= 5 and len(readable) >= 3):
                break
            r = idx[i]
            name = _display(feats.keys[i] if r < base else "cue:" + CUE_NAMES[r - base], feats)
            if len(top) < 5:
                top.append((name, c))
            # Character trigrams carry weight but read as noise to a human, so the sentence names
            # cue, word and phrase features; `features` keeps the full top list.
            if len(readable) < 3 and not name.startswith("fragment "):
                readable.append(name)
        conf = float(probs[k])
        if readable:
            reasoning = f"{label} ({conf:.2f}): " + " + ".join(readable[:3])
        else:
            reasoning = f"{label} ({conf:.2f}): no feature favours it strongly; decided by the prior"
        return IntentResult(label, conf, reasoning, self.name, tuple((n, round(c, 4)) for n, c in top))
