"""What a query on a PUBLIC collection would send to inference, screened first.

A PUBLIC collection's reads pass through the guard, but a query's ``models.Document`` (and an
``InferenceObject`` or ``Image``) is embedded by qdrant-client's inference: fastembed in local mode,
or Qdrant Cloud inference, which hands the text to the model's provider. Credentials are never
embedded, nor PII as given, so on a PUBLIC collection the policy lists, every inference input of a
query (top-level, nested in a recommend, discover, context or nearest query, in prefetches, in each
``query_batch_points`` request) is screened by the native detector, as a sensitive collection's
query inputs are: a Document's text, the options of all three (a provider's key option passes), an
InferenceObject's object, an Image's path or URL (a ``Path`` or bytes as the string sent). A
credential is refused (CREDENTIAL_IN_TEXT, audited, nothing sent) or, under
``credentials_in_text = "redact"``, redacted; personal data is refused (SENSITIVITY_MISMATCH:
inference would embed it as given, at a remote provider under Qdrant Cloud inference) or, under
``allow_redaction_on_public``, redacted (sent as given under ``redact_pii = false``), as in a write
to the collection (issue 5: text with secrets or PII sent to a PUBLIC collection is refused unless
the policy allows redaction there). A path or URL, or a model name, holding either is
refused: neither can be redacted. Raw vectors and point ids pass without a walk; collections left
unlisted under ``unlisted = "public"`` pass through unscreened.
"""
from __future__ import annotations

import uuid
from typing import Any, Callable

import numpy as np
from pydantic import BaseModel
from qdrant_client.http import models

from . import detect as _detect
from .inference import screen_inference

_INPUTS = (models.Document, models.Image, models.InferenceObject)
# Queries that hold no inference input (a vector, a multivector, a point id): not walked.
_PLAIN = frozenset({list, np.ndarray, int, str, uuid.UUID, models.SparseVector, type(None)})
# Leaves of a query model that hold nothing inference reads (a sparse vector's indices are not walked).
_LEAVES = frozenset({float, int, str, bool, uuid.UUID, np.ndarray, models.SparseVector, type(None)})


def screens_public_queries(ops: Any, name: str) -> bool:
    """Whether queries on ``name`` (a PUBLIC collection) are screened: not when it is unlisted under
    ``unlisted = "public"``, whose calls pass through unscreened."""
    cfg = ops.config
    return not (cfg.unlisted == "public" and name not in cfg.collections)


def carries_inputs(args: dict[str, Any]) -> bool:
    """Whether a query's ``args`` may hold an inference input: not a vector or point id without
    prefetches (a type check, all a PUBLIC read by vector pays)."""
    return args.get("prefetch") is not None or type(args.get("query")) not in _PLAIN


def public_query_text(ops: Any, op: str, name: str, args: dict[str, Any], at: str = "") -> dict[str, Any]:
    """``args`` (a query's, or a batch request's ``query`` and ``prefetch``) with the credentials and
    PII in its inference inputs refused or redacted (see the module); ``args`` itself when nothing changed.
    ``at`` prefixes the places refusals name (``requests[1].``)."""
    if not carries_inputs(args) or not screens_public_queries(ops, name):
        return args
    pol = ops.policy(name)

    def visit(value: Any, where: str) -> Any:
        new = value
        if isinstance(value, models.Document) and isinstance(value.text, str):
            findings = _detect.find_sensitive(value.text)  # the redacted form only when something is there
            if findings:
                text = ops.screen_text(op, name, pol, value.text, field=f"{where} (Document) text", inference=True,
                                       query=True, scanned=(_detect.replace_findings(value.text, findings), findings))
                new = value.model_copy(update={"text": text})
        return screen_inference(ops, op, name, pol, new, point_id=None, where=where, write=False)

    changed: dict[str, Any] = {}
    for key in ("query", "prefetch"):
        if args.get(key) is not None:
            sent = _walk(args[key], visit, f"{at}{key}")
            if sent is not args[key]:
                changed[key] = sent
    return {**args, **changed} if changed else args


def _walk(value: Any, visit: Callable[[Any, str], Any], where: str) -> Any:
    """``value`` with each inference input in it replaced by ``visit(input, where)``: every field of
    a query model, item of a list and value of a dict (a prefetch's query and prefetches only),
    as qdrant-client's inference finds them wherever they are."""
    if isinstance(value, _INPUTS):
        return visit(value, where)
    t = type(value)
    if t in _LEAVES:
        return value
    if isinstance(value, BaseModel):
        fields = ("query", "prefetch") if isinstance(value, models.Prefetch) else type(value).model_fields
        update: dict[str, Any] = {}
        for f in fields:
            v = getattr(value, f, None)
            if type(v) in _LEAVES:
                continue
            nv = _walk(v, visit, f"{where}.{f}")
            if nv is not v:
                update[f] = nv
        return value.model_copy(update=update) if update else value
    if isinstance(value, (list, tuple)):
        items = list(value)
        if not items or type(items[0]) is float:
            return value  # a vector
        new = [_walk(v, visit, f"{where}[{i}]") for i, v in enumerate(items)]
        return value if all(a is b for a, b in zip(new, items)) else new
    if isinstance(value, dict):
        out = {k: _walk(v, visit, f"{where}.{k}") for k, v in value.items()}
        return value if all(out[k] is v for k, v in value.items()) else out
    return value
