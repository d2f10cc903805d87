"""The place in ``update_operations`` that a refusal of ``batch_update_points`` names.

The checks a batch shares with the single-operation methods (points, vectors, payload screens,
receipts) word their refusals for those methods: ``point 4: vector '<unnamed>' has dimension 3``.
In a batch the caller also needs to know which operation it was, so the batch re-raises such an
error as one of the same class whose message starts with the place
(``update_operations[2].upsert.points[1].vector: point 4: ...``); the original is its
``__cause__``. Only the message changes: the class, a refusal's verdict, point ids, details and
manifest digest stay, and the audit entry written before the raise is the same.
"""
from __future__ import annotations

from typing import Any

from qdrant_client.http import models

from .errors import AuditError, GuardRefusal, QdrantGuardError
from .receipts import normalize_point_id

# Refusals the guard words itself; qdrant-client's errors and the audit log's are never renamed.
_PLACED = (QdrantGuardError, TypeError, ValueError)


def operation_place(op: Any, j: int, exc: BaseException) -> str:
    """Where ``exc``, raised while the guard checked ``op`` (``update_operations[j]``), is:
    ``update_operations[j].<kind>``, then the point (``.points[i]``, ``.batch[i]``) when the error
    names one point the operation holds, then ``.vector`` (``.vector['name']``) when it is that
    point's vector."""
    where = f"update_operations[{j}]"
    fields = getattr(type(op), "model_fields", None)
    if not fields or len(fields) != 1:
        return where
    kind = next(iter(fields))
    where += f".{kind}"
    inner = getattr(op, kind, None)
    if isinstance(inner, models.PointsBatch):
        where += ".batch"
        ids = list(getattr(inner.batch, "ids", None) or ())
    elif isinstance(inner, (models.PointsList, models.UpdateVectors)):
        where += ".points"
        ids = [p.get("id") if isinstance(p, dict) else getattr(p, "id", None) for p in inner.points or ()]
    else:
        return where
    pid = getattr(exc, "_qg_point", None)
    if pid is None and isinstance(exc, GuardRefusal) and len(exc.point_ids) == 1:
        pid = exc.point_ids[0]
    index = _index_of(ids, pid)
    if index is None:
        return where.rsplit(".", 1)[0]
    where += f"[{index}]"
    vector = getattr(exc, "_qg_vector", None)
    if isinstance(vector, str):
        where += ".vector" if vector == "" else f".vector[{vector!r}]"
    return where


def _index_of(ids: list[Any], pid: Any) -> int | None:
    """The index of the first of ``ids`` that is point ``pid`` (as Qdrant reads ids), or None."""
    if pid is None:
        return None
    try:
        key = normalize_point_id(pid)
    except (TypeError, ValueError):
        return None
    for i, candidate in enumerate(ids):
        try:
            if normalize_point_id(candidate) == key:
                return i
        except (TypeError, ValueError):
            continue
    return None


def placed(exc: BaseException, method: str, place: str, j: int) -> BaseException:
    """``exc`` as a new error of its class whose message names ``place`` first (after ``method: ``
    when the message starts so), its attributes copied; ``exc`` itself when its message names
    ``update_operations[j]`` already, is not one string (a ``KeyError``'s repr, pydantic's
    computed text), or it is no refusal the guard words (an audit-log failure)."""
    if not isinstance(exc, _PLACED) or isinstance(exc, AuditError):
        return exc
    if len(exc.args) != 1 or type(exc.args[0]) is not str or str(exc) != exc.args[0]:
        return exc
    message = exc.args[0]
    if isinstance(exc, GuardRefusal):
        head = f"{exc.verdict}: "
        if not (isinstance(exc.directive, str) and message.startswith(head + exc.directive)):
            return exc
        text, tail = exc.directive, message[len(head) + len(exc.directive):]
    else:
        head, text, tail = "", message, ""
    if f"update_operations[{j}]" in text:
        return exc
    lead = f"{method}: "
    text = (lead + place + ": " + text[len(lead):]) if text.startswith(lead) else f"{place}: {text}"
    try:
        new = type(exc).__new__(type(exc), head + text + tail)
    except Exception:  # noqa: BLE001 - a class that cannot be made so keeps its own message
        return exc
    new.__dict__.update(exc.__dict__)
    if isinstance(new, GuardRefusal):
        new.directive = text
    return new
