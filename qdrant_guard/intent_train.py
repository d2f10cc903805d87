"""Train the built-in intent model: ``python -m qdrant_guard.intent_train``.

Reproduces ``qdrant_guard/data/intent_model.json`` from ``qdrant_guard/data/intent_dataset.jsonl``
and ``qdrant_guard/data/intent_train_only.jsonl``:

1. Split the dataset by group id (a template or a cluster of paraphrases never straddles the
   split), stratified by label, with a fixed seed; at least :data:`TEST_FRACTION` of each label is
   held out. The train-only lines join the training part and never the held-out one, so the
   held-out part is the same queries the earlier models were scored on.
2. Fit an L2-regularised multinomial logistic regression on the training part with L-BFGS
   (scipy, needed at training time only), starting from zero weights, with class-balanced
   example weights scaled by :data:`CLASS_SCALE`. A line's optional ``weight`` (in (0, 1], 1 when
   left out) makes it count as that many lines, in the loss and in its label's total; the 1,522
   documentation openings of the train-only file carry 0.05.
3. Evaluate the written model through the runtime classifier on the held-out part and store the
   per-class precision/recall/F1, macro-F1 and confusion matrix under ``"metrics"``.

The shipped model is the one fitted on the training part only, so the reported metrics are
measured on queries the model has never seen.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import defaultdict
from typing import Any, Sequence

import numpy as np

from .errors import GuardArgumentValueError
from .intent import INTENT_LABELS, BuiltinIntentClassifier
from .intent_features import CUE_NAMES, FEATURE_VERSION, feature_rows, featurize

__all__ = ["SEED", "TEST_FRACTION", "CLASS_SCALE", "load_dataset", "split_dataset", "train", "evaluate", "main"]

SEED = 20240611
TEST_FRACTION = 0.22
HASH_BITS = 16
L2 = 1e-4  # chosen by 5 repeated group splits of the training part only (not the held-out set)
# Per-label multipliers of the class-balanced example weights, in INTENT_LABELS order: a missed
# suspicious query costs three times, a missed adversarial one four times, a refused harmless one.
# Benign train-only lines pull borderline grabs below the policy's threshold; (1, 1, 2, 3) was chosen
# for the hand-written lines on five group splits against the first three judging corpora, and
# (1, 1, 3, 4) with the weighted documentation lines on five group splits and the blind
# documentation set's val half (docs/intent.md), never on tests/data/intent_*_heldout4.jsonl.
CLASS_SCALE = (1.0, 1.0, 3.0, 4.0)
MAX_ITER = 1000
MODEL_NAME = "builtin-linear-v3"
_DECIMALS = 6


def default_dataset_path() -> str:
    """Path of the packaged dataset, ``qdrant_guard/data/intent_dataset.jsonl``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "intent_dataset.jsonl")


def default_train_only_path() -> str:
    """Path of the packaged train-only lines, ``qdrant_guard/data/intent_train_only.jsonl``.

    Same shape as the dataset; written after its held-out split was measured, so they only ever
    train (``build_model``), which keeps that split's figures comparable across retrains.
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "intent_train_only.jsonl")


def load_dataset(path: str | None = None) -> list[dict[str, str]]:
    """Read and validate the JSONL dataset.

    Each line is ``{"text", "label", "domain", "note", "group"}`` and an optional ``weight`` in
    (0, 1]; ``group`` ties paraphrases and template instances together for the split.

    Raises:
        ValueError: a line is not valid JSON or has a missing field or unknown label.
    """
    path = path or default_dataset_path()
    rows: list[dict[str, str]] = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise GuardArgumentValueError(f"{path}:{n}: not JSON ({exc})") from None
            for key in ("text", "label", "domain", "note", "group"):
                if not isinstance(row.get(key), str):
                    raise GuardArgumentValueError(f"{path}:{n}: field {key!r} missing or not a string")
            if row["label"] not in INTENT_LABELS:
                raise GuardArgumentValueError(f"{path}:{n}: label {row['label']!r} is not one of {INTENT_LABELS}")
            w = row.get("weight", 1.0)
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 < w <= 1:
                raise GuardArgumentValueError(f"{path}:{n}: weight {w!r} must be a number in (0, 1]; leave it out for 1")
            rows.append(row)
    return rows


def split_dataset(rows: Sequence[dict[str, str]], seed: int = SEED,
                  test_fraction: float = TEST_FRACTION) -> tuple[list[int], list[int]]:
    """Deterministic group-wise split stratified by each group's majority label.

    Returns:
        ``(train_indices, test_indices)``, each sorted.
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        groups[row["group"]].append(i)
    by_label: dict[str, list[str]] = defaultdict(list)
    for gid in sorted(groups):
        labels = [rows[i]["label"] for i in groups[gid]]
        majority = max(sorted(set(labels)), key=labels.count)
        by_label[majority].append(gid)
    rng = np.random.default_rng(seed)
    test: list[int] = []
    for label in INTENT_LABELS:
        gids = by_label.get(label, [])
        order = rng.permutation(len(gids))
        total = sum(len(groups[g]) for g in gids)
        taken = 0
        for j in order:
            if taken >= test_fraction * total:
                break
            test.extend(groups[gids[j]])
            taken += len(groups[gids[j]])
    test_set = set(test)
    return [i for i in range(len(rows)) if i not in test_set], sorted(test_set)


def _design(texts: Sequence[str], hash_bits: int) -> Any:
    from scipy import sparse

    indptr, indices, data = [0], [], []
    for text in texts:
        idx, vals = feature_rows(featurize(text), hash_bits)
        indices.extend(idx)
        data.extend(vals)
        indptr.append(len(indices))
    dim = (1 << hash_bits) + len(CUE_NAMES)
    x = sparse.csr_matrix((data, indices, indptr), shape=(len(texts), dim), dtype=np.float64)
    x.sum_duplicates()  # hash collisions inside one text add up, as in inference
    return x


def train(rows: Sequence[dict[str, str]], train_idx: Sequence[int], *, hash_bits: int = HASH_BITS,
          l2: float = L2, class_scale: Sequence[float] = CLASS_SCALE) -> dict[str, Any]:
    """Fit the model on ``rows[train_idx]`` and return the model document (without metrics)."""
    from scipy.optimize import minimize

    texts = [rows[i]["text"] for i in train_idx]
    y = np.array([INTENT_LABELS.index(rows[i]["label"]) for i in train_idx])
    x_full = _design(texts, hash_bits)
    used = np.unique(x_full.indices)  # untouched buckets have zero gradient, so leave them out
    x = x_full[:, used]
    n, d = x.shape
    k = len(INTENT_LABELS)
    row_w = np.array([float(rows[i].get("weight", 1.0)) for i in train_idx])
    # A line of weight w counts as w lines, in its label's total as in the loss.
    counts = np.bincount(y, weights=row_w, minlength=k)
    if len(class_scale) != k or min(class_scale) <= 0:
        raise GuardArgumentValueError(f"class_scale {tuple(class_scale)!r} must be {k} positive numbers, "
                                      f"one per label of {INTENT_LABELS}")
    sample_w = row_w * (n * np.asarray(class_scale, dtype=np.float64) / (k * counts))[y] / n
    onehot = np.eye(k)[y]

    def loss_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w = theta[: d * k].reshape(d, k)
        b = theta[d * k:]
        z = x @ w + b
        z -= z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        loss = -float(np.sum(sample_w * np.sum(onehot * logp, axis=1))) + 0.5 * l2 * float(np.sum(w * w))
        r = (np.exp(logp) - onehot) * sample_w[:, None]
        gw = np.asarray(x.T @ r) + l2 * w
        return loss, np.concatenate([gw.ravel(), r.sum(axis=0)])

    res = minimize(loss_grad, np.zeros(d * k + k), jac=True, method="L-BFGS-B",
                   options={"maxiter": MAX_ITER, "gtol": 1e-9, "ftol": 1e-12})
    w = res.x[: d * k].reshape(d, k)
    b = res.x[d * k:]
    base = 1 << hash_bits
    hashed: dict[str, list[float]] = {}
    cue_w: dict[str, list[float]] = {name: [0.0] * k for name in CUE_NAMES}
    for col, row in zip(used, w):
        vals = [round(float(v), _DECIMALS) for v in row]
        if col >= base:
            cue_w[CUE_NAMES[col - base]] = vals
        elif any(vals):
            hashed[str(int(col))] = vals
    return {
        "name": MODEL_NAME,
        "feature_version": FEATURE_VERSION,
        "labels": list(INTENT_LABELS),
        "hash_bits": hash_bits,
        "cues": list(CUE_NAMES),
        "bias": [round(float(v), _DECIMALS) for v in b],
        "cue_weights": cue_w,
        "hashed_weights": dict(sorted(hashed.items(), key=lambda kv: int(kv[0]))),
        "training": {
            "seed": SEED, "test_fraction": TEST_FRACTION, "l2": l2, "class_scale": [float(v) for v in class_scale],
            "optimizer": "L-BFGS-B",
            "iterations": int(res.nit), "converged": bool(res.success), "train_examples": n,
        },
    }


def evaluate(clf: BuiltinIntentClassifier, rows: Sequence[dict[str, str]],
             idx: Sequence[int]) -> dict[str, Any]:
    """Per-class precision/recall/F1, macro-F1, accuracy and confusion matrix of ``clf`` on ``rows[idx]``.

    The confusion matrix is ``matrix[true][predicted]`` in :data:`INTENT_LABELS` order.
    """
    k = len(INTENT_LABELS)
    cm = np.zeros((k, k), dtype=int)
    for i in idx:
        pred = clf.classify(rows[i]["text"]).label
        cm[INTENT_LABELS.index(rows[i]["label"]), INTENT_LABELS.index(pred)] += 1
    per_class: dict[str, dict[str, float]] = {}
    for c, label in enumerate(INTENT_LABELS):
        tp = cm[c, c]
        prec = tp / cm[:, c].sum() if cm[:, c].sum() else 0.0
        rec = tp / cm[c, :].sum() if cm[c, :].sum() else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        per_class[label] = {"precision": round(float(prec), 4), "recall": round(float(rec), 4),
                            "f1": round(float(f1), 4), "support": int(cm[c, :].sum())}
    return {
        "per_class": per_class,
        "macro_f1": round(float(np.mean([v["f1"] for v in per_class.values()])), 4),
        "accuracy": round(float(np.trace(cm) / cm.sum()), 4) if cm.sum() else 0.0,
        "confusion_matrix": {"labels": list(INTENT_LABELS), "matrix": cm.tolist()},
        "held_out_examples": len(idx),
    }


def build_model(dataset_path: str | None = None, out_path: str | None = None,
                train_only_path: str | None = None) -> dict[str, Any]:
    """Train, evaluate on the held-out split and write the model JSON; return the document.

    ``train_only_path`` (default :func:`default_train_only_path`; ``""`` for none) adds its lines
    to the training part only.
    """
    dataset_path = dataset_path or default_dataset_path()
    out_path = out_path or os.path.join(os.path.dirname(default_dataset_path()), "intent_model.json")
    if train_only_path is None:
        train_only_path = default_train_only_path()
    rows = load_dataset(dataset_path)
    train_idx, test_idx = split_dataset(rows)
    extra = load_dataset(train_only_path) if train_only_path else []
    clash = {r["group"] for r in extra} & {r["group"] for r in rows}
    if clash:
        raise GuardArgumentValueError(f"{train_only_path}: groups {sorted(clash)[:5]} are also in {dataset_path}; "
                                      "give train-only lines their own group ids")
    doc = train(list(rows) + extra, list(train_idx) + list(range(len(rows), len(rows) + len(extra))))
    with open(dataset_path, "rb") as fh:
        doc["training"]["dataset_sha256"] = hashlib.sha256(fh.read()).hexdigest()
    if train_only_path:
        with open(train_only_path, "rb") as fh:
            doc["training"]["train_only_sha256"] = hashlib.sha256(fh.read()).hexdigest()
        doc["training"]["train_only_examples"] = len(extra)
    doc["training"]["test_groups"] = sorted({rows[i]["group"] for i in test_idx})
    tmp = out_path + ".tmp"
    _write(doc, tmp)
    doc["metrics"] = evaluate(BuiltinIntentClassifier(tmp), rows, test_idx)
    os.remove(tmp)
    _write(doc, out_path)
    return doc


def _write(doc: dict[str, Any], path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, separators=(",", ":"), sort_keys=False)
        fh.write("\n")


def format_metrics(metrics: dict[str, Any]) -> str:
    """Human-readable table of :func:`evaluate` output."""
    lines = [f"{'label':<12} {'precision':>9} {'recall':>7} {'f1':>6} {'support':>7}"]
    for label, m in metrics["per_class"].items():
        lines.append(f"{label:<12} {m['precision']:>9.3f} {m['recall']:>7.3f} {m['f1']:>6.3f} {m['support']:>7}")
    lines.append(f"macro-F1 {metrics['macro_f1']:.3f}   accuracy {metrics['accuracy']:.3f}   "
                 f"held-out {metrics['held_out_examples']}")
    lines.append("confusion (rows = true, columns = predicted): " + " ".join(INTENT_LABELS))
    for label, row in zip(INTENT_LABELS, metrics["confusion_matrix"]["matrix"]):
        lines.append(f"{label:<12} " + " ".join(f"{v:>5}" for v in row))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m qdrant_guard.intent_train", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=None, help="JSONL dataset (default: the packaged one)")
    parser.add_argument("--out", default=None, help="model JSON to write (default: the packaged one)")
    parser.add_argument("--train-only", default=None,
                        help="JSONL lines added to the training part only (default: the packaged "
                             "intent_train_only.jsonl; an empty string for none)")
    args = parser.parse_args(argv)
    doc = build_model(args.dataset, args.out, args.train_only)
    t = doc["training"]
    print(f"trained on {t['train_examples']} examples, {len(doc['hashed_weights'])} hashed rows, "
          f"L-BFGS {t['iterations']} iterations (converged: {t['converged']})")
    print(format_metrics(doc["metrics"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
