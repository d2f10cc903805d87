"""The output points of a guarded write (``models.PointStruct``, ``models.PointVectors``) built
without validating their vectors again: :func:`_point`, :func:`_update_point`,
:func:`_point_vectors`. The field-for-field build is used only where a check at import
(:data:`_BUILD_OK`, :data:`_BUILD_PV_OK`) found it gives what validation gives on this pydantic and
qdrant-client; otherwise every point is validated as before."""
from __future__ import annotations

from typing import Any, Callable, Iterator

from pydantic import BaseModel
from qdrant_client.http import models

from .vectors import _DENSE_FLOATS


def _point(point_id: Any, vector: Any, payload: dict[str, Any] | None) -> models.PointStruct:
    """``models.PointStruct(id=point_id, vector=vector, payload=payload)`` for a vector made of
    ``ndarray.tolist()`` lists (one, or a dict of them by name).

    The id and payload are validated as before (same errors for a bad id or payload); the vector
    is set after validation, because validating it re-checked each of its floats (~5 us a 384-d
    point) and could neither refuse nor change lists of Python floats.
    """
    if _BUILD_OK and (type(point_id) is int or type(point_id) is str) and (
            payload is None or all(type(k) is str for k in payload)):
        # What validation would give, field for field: an exact int or str id and a dict of str
        # keys validate to themselves (the payload's values are Any), so validating them again
        # (every output point came from a validated PointStruct) bought nothing but ~1.4 us a point.
        return _built_point(point_id, vector, payload)
    point = models.PointStruct(id=point_id, vector=[], payload=payload)
    point.vector = vector
    return point


def _update_point(u: models.PointVectors) -> models.PointStruct:
    """``models.PointStruct(id=u.id, vector=u.vector, payload=None)``, the form prepare_points reads.

    A vector that is a plain list of exact floats validates to an equal list, so it is set after
    validation (~15 us a 384-d point less); the id is validated as :func:`_point` does. Any other
    vector (named, numpy, ints) is validated as before. One that does not validate (a
    ``model_construct``'ed ``PointVectors`` holding text where floats belong) is set unvalidated,
    as an upsert's ``model_construct``'ed point reaches prepare_points: its checks refuse it with
    the :class:`~qdrant_guard.errors.InvalidVectorError` an upsert raises, naming the point and
    what it holds, where pydantic's ValidationError named a PointStruct the caller never built.
    """
    if _DENSE_FLOATS is not None and _DENSE_FLOATS(u.vector) is not None:
        return _point(u.id, u.vector, None)
    try:
        return models.PointStruct(id=u.id, vector=u.vector, payload=None)
    except ValueError:  # pydantic's ValidationError; the ids were checked before (check_point_ids)
        return _point(u.id, u.vector, None)


def _point_vectors(point_id: Any, vector: Any) -> models.PointVectors:
    """``models.PointVectors(id=point_id, vector=vector)`` for an output point's id and vector
    (``ndarray.tolist()`` lists, one or a dict of them by name), as :func:`_point` builds a
    PointStruct: validating the vector again re-checked each float (~15 us a 384-d point)."""
    if _BUILD_PV_OK and (type(point_id) is int or type(point_id) is str):
        return _built_point_vectors(point_id, vector)
    pv = models.PointVectors(id=point_id, vector=[])
    pv.vector = vector
    return pv


def _built_point_vectors(point_id: Any, vector: Any) -> models.PointVectors:
    pv = object.__new__(models.PointVectors)
    _set(pv, "__dict__", {"id": point_id, "vector": vector})
    _set(pv, "__pydantic_fields_set__", {"id", "vector"})
    _set(pv, "__pydantic_extra__", None)
    _set(pv, "__pydantic_private__", None)
    return pv


_set = object.__setattr__


def _built_point(point_id: Any, vector: Any, payload: dict[str, Any] | None) -> models.PointStruct:
    """A PointStruct holding these values, set as pydantic's model_construct sets them (without its
    per-field default handling: all three fields are given)."""
    point = object.__new__(models.PointStruct)
    _set(point, "__dict__", {"id": point_id, "vector": vector, "payload": dict(payload) if payload is not None else None})
    _set(point, "__pydantic_fields_set__", {"id", "vector", "payload"})
    _set(point, "__pydantic_extra__", None)
    _set(point, "__pydantic_private__", None)
    return point


def _same_model(got: BaseModel, want: BaseModel) -> bool:
    """Whether a hand-built pydantic model is indistinguishable from the validated one."""
    return (got.__dict__ == want.__dict__ and got.__pydantic_fields_set__ == want.__pydantic_fields_set__
            and got.__pydantic_extra__ == want.__pydantic_extra__
            and got.__pydantic_private__ == want.__pydantic_private__
            and got.model_dump_json() == want.model_dump_json() and got == want)


def _builds_match(pairs: Callable[[], Iterator[tuple[Any, Any]]]) -> bool:
    """Whether each hand-built model of ``pairs()`` (hand-built, validated) is what validation
    gives on this pydantic and qdrant-client (checked once at import; if not, every point is
    validated as before)."""
    try:
        return all(_same_model(got, want) for got, want in pairs())
    except Exception:  # noqa: BLE001 - any difference means: validate as before
        return False


def _point_pairs() -> Iterator[tuple[Any, Any]]:
    payload = {"k": [1, {"x": None}], "f": 1.5}
    for pid, pl in ((7, payload), ("8c1a5a2e-6b0c-4a43-9d4e-1f3b2d6c7e90", None)):
        want = models.PointStruct(id=pid, vector=[], payload=pl)
        want.vector = [0.5, -1.0]
        yield _built_point(pid, [0.5, -1.0], pl), want


def _point_vectors_pairs() -> Iterator[tuple[Any, Any]]:
    cases: tuple[tuple[Any, Any], ...] = ((7, [0.5, -1.0]),
                                          ("8c1a5a2e-6b0c-4a43-9d4e-1f3b2d6c7e90", {"a": [0.25], "": [1.5, 2.0]}))
    for pid, vec in cases:
        yield _built_point_vectors(pid, vec), models.PointVectors(id=pid, vector=vec)


_BUILD_OK = _builds_match(_point_pairs)
_BUILD_PV_OK = _builds_match(_point_vectors_pairs)
