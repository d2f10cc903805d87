"""A write's points argument as the models the guard checks and sends: :func:`points_from_any`
(a list of points or dicts, a ``models.Batch``), :func:`points_from_columns` (upload_collection's
columns) and :func:`vector_updates_from_any` (update_vectors' list), each point the one snapshot
:mod:`.sentpoints` takes. Errors name the point or column entry at fault, never its values."""
from __future__ import annotations

import uuid
from typing import Any, Iterable, TypeVar

import numpy as np
import pydantic
from qdrant_client.http import models

from .errors import GuardArgumentTypeError, GuardArgumentValueError, UnsupportedWriteError
from .sentpoints import sent_point, sent_vectors


def points_from_any(points: Any, at: str = "points") -> list[models.PointStruct]:
    """Materialise the ``points`` argument of upsert/upload into a list of PointStruct, each the
    one snapshot the guard checks and sends (:func:`qdrant_guard.sentpoints.sent_point`). ``at``
    is where errors say the points are (``update_operations[2].upsert.points`` in a batch)."""
    if isinstance(points, models.Batch):
        n = len(points.ids)
        columns = ({f"vectors[{k!r}]": len(v) for k, v in points.vectors.items()}
                   if isinstance(points.vectors, dict) else {"vectors": len(points.vectors)})
        if points.payloads is not None:
            columns["payloads"] = len(points.payloads)
        uneven = {k: m for k, m in columns.items() if m != n}
        if uneven:
            raise GuardArgumentValueError(
                f"{at} is a models.Batch with {n} ids but " + ", ".join(f"{m} {k}" for k, m in uneven.items())
                + "; every column must have one entry per id"
            )
        if isinstance(points.vectors, dict):
            vecs: list[Any] = [{k: v[i] for k, v in points.vectors.items()} for i in range(n)]
        else:
            vecs = list(points.vectors)
        payloads = list(points.payloads) if points.payloads is not None else [None] * n
        out = []
        for i in range(n):
            try:
                point = models.PointStruct(id=points.ids[i], vector=vecs[i], payload=payloads[i])
            except pydantic.ValidationError as exc:
                raise _row_error((f"{at}.ids", f"{at}.vectors", f"{at}.payloads"), i, vecs[i], exc,
                                 "the models.Batch", _BATCH_FIX) from None
            out.append(sent_point(point, i, at))
        return out
    out = []
    for i, p in enumerate(points):
        if isinstance(p, models.PointStruct):
            out.append(sent_point(p, i, at))
        elif isinstance(p, dict):
            out.append(sent_point(_from_dict(f"{at}[{i}]", p, models.PointStruct), i, at))
        elif isinstance(p, models.Record):
            if p.vector is None:
                # qdrant-client fails on it; storing it as vector={} would wipe the point's vectors.
                raise UnsupportedWriteError(
                    f"points: models.Record {p.id!r} has no vector (read with with_vectors=False?); "
                    "upserting it would store the point without its vectors. Read the points with "
                    "with_vectors=True, or use set_payload to change only the payload. Nothing was written"
                )
            # A Record's vector dict holds a subset of what PointStruct's accepts; mypy's dict is invariant.
            out.append(sent_point(models.PointStruct(id=p.id, vector=p.vector, payload=p.payload), i, at))  # type: ignore[arg-type]
        else:
            raise GuardArgumentTypeError(
                f"points must be models.PointStruct (or a models.Batch); got {_kind(p)}. "
                "gRPC PointStruct is not accepted by the guard; convert it to models.PointStruct"
            )
    return out


def _row_error(columns: tuple[str, str, str], i: int, vector: Any, exc: pydantic.ValidationError,
               what: str, fix: str) -> GuardArgumentValueError:
    """The error for row ``i`` of a models.Batch or upload_collection's columns (``columns``: where
    the ids, vectors and payloads are) that does not make a point (a Batch built with
    model_construct() or changed after it was built; qdrant-client fails on it too). It names each
    column entry at fault (``points.vectors[3]``, ``points.vectors['image'][3]``,
    ``points.ids[3]``, ``points.payloads[3]``), never their values (a payload may hold a secret)."""
    wrong = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
    ids, vectors, payloads = columns
    places = []
    if "id" in wrong:
        places.append(f"{ids}[{i}]")
    if "vector" in wrong:
        if isinstance(vector, dict):
            for k, v in vector.items():
                try:
                    models.PointStruct(id=0, vector={k: v})
                except pydantic.ValidationError:
                    places.append(f"{vectors}[{k!r}][{i}]")
        else:
            places.append(f"{vectors}[{i}]")
    if "payload" in wrong:
        places.append(f"{payloads}[{i}]")
    return GuardArgumentValueError(
        f"{', '.join(places) or f'row {i}'} of {what} {'does' if len(places) < 2 else 'do'} not validate as "
        f"a point's {', '.join(sorted(wrong)) or 'fields'} ({exc.errors()[0]['msg']}); {fix}. Nothing was written")


_BATCH_FIX = ("build the batch with models.Batch(ids=..., vectors=..., payloads=...) (not model_construct(), "
              "nor changed after it was built), one valid entry per id in every column")


def _operation_points(inner: Any, where: str) -> list[models.PointStruct]:
    """:func:`points_from_any` of a batch's upsert operation ``where``, its errors naming the point
    as ``update_operations[j].upsert.points[i]`` (``.batch[i]`` for a ``models.PointsBatch``)."""
    if isinstance(inner, models.PointsBatch):
        return points_from_any(inner.batch, f"{where}.upsert.batch")
    return points_from_any(inner.points, f"{where}.upsert.points")


_M = TypeVar("_M", bound=pydantic.BaseModel)


def _from_dict(where: str, p: dict[str, Any], cls: type[_M]) -> _M:
    """A point given as a dict, read as qdrant-client's REST client reads it (it validates the list
    into ``models.PointsList`` or ``models.UpdateVectors``, so a server stores it; local mode fails
    on it). The error names the fields at fault, never their values (a payload may hold a secret)."""
    try:
        return cls.model_validate(p)
    except pydantic.ValidationError as exc:
        wrong = ", ".join(sorted({str(e["loc"][0]) if e["loc"] else "<point>" for e in exc.errors()}))
        raise GuardArgumentTypeError(
            f"{where} is a dict that is not a models.{cls.__name__} (invalid: {wrong}); give its "
            f"fields as models.{cls.__name__} takes them"
        ) from None


def _kind(value: Any) -> str:
    """A type name that tells a gRPC message from the qdrant_client.models class of the same name."""
    cls = type(value)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__}"


def vector_updates_from_any(updates: Any, at: str = "points") -> list[models.PointVectors]:
    """``update_vectors``' ``points`` as a list of models.PointVectors (the form the checks read);
    ``at`` as for :func:`points_from_any`."""
    if not isinstance(updates, (list, tuple)):
        raise GuardArgumentTypeError(
            f"update_vectors() argument 'points' must be a list of models.PointVectors, not {_kind(updates)}")
    out = [_from_dict(f"{at}[{i}]", u, models.PointVectors) if isinstance(u, dict) else u
           for i, u in enumerate(updates)]
    for u in out:
        if not isinstance(u, models.PointVectors):
            raise GuardArgumentTypeError(
                f"update_vectors points must be models.PointVectors; got {_kind(u)}. gRPC "
                "PointVectors is not accepted by the guard; convert it to models.PointVectors"
            )
    # One snapshot of each, before any check: the ids, vectors and receipts to drop all read it.
    return [sent_vectors(u, i, at) for i, u in enumerate(out)]


def points_from_columns(vectors: Any, payload: Iterable[Any] | None, ids: Iterable[Any] | None) -> list[models.PointStruct]:
    """Materialise upload_collection's column arguments into PointStructs (ids are generated when
    absent, because a receipt binds the point id)."""
    if isinstance(vectors, dict):
        names = list(vectors)
        n = len(vectors[names[0]]) if names else 0
        lengths = {k: len(vectors[k]) for k in names}
        if len(set(lengths.values())) > 1:
            raise GuardArgumentValueError(
                f"upload_collection: the named vectors have different numbers of rows {lengths}; "
                "give every name one row per point"
            )
        rows: list[Any] = [{k: vectors[k][i] for k in names} for i in range(n)]
    else:
        rows = list(vectors)
    pl = list(payload) if payload is not None else [None] * len(rows)
    id_list = list(ids) if ids is not None else [str(uuid.uuid4()) for _ in rows]
    if not (len(rows) == len(pl) == len(id_list)):
        raise GuardArgumentValueError(
            f"upload_collection: {len(rows)} vectors, {len(pl)} payloads and {len(id_list)} ids; "
            "the three must have the same length"
        )
    out = []
    for n, (i, v, p) in enumerate(zip(id_list, rows, pl)):
        try:
            point = models.PointStruct(id=i, vector=_plain(v), payload=p)
        except pydantic.ValidationError as exc:
            raise _row_error(("ids", "vectors", "payload"), n, v, exc, "upload_collection's columns",
                             "give one valid id, vector and payload (a dict) a point") from None
        out.append(sent_point(point, n))
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v
