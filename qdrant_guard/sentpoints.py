"""The points of a write as ONE snapshot, taken before any check reads them (:func:`sent_point`,
:func:`sent_vectors`); the guard checks that snapshot and sends exactly it.

A point the guard is handed is read many times: the text screen, the payload screen and the
restricted-source check read its payload, the receipt check and the noise its vector, the receipt,
the audit entry and the budget its id; then the transport serialises it again, each in its own way
(qdrant-client's REST transport dumps the model with pydantic, which reads a dict's or a list's
storage; local mode's ``json.dumps`` calls a dict subclass's ``items()``; its gRPC converters
iterate). A ``model_construct()``ed point (or one whose fields were assigned after it was built) is
not validated, so it can hold what answers each of those reads differently: a dict subclass whose
first ``items()`` hides an SSN from the screen that the second one stores, a numpy array the
caller's code overwrites after its receipt verified, named vectors whose ``keys()`` name other
vectors than the ones sent, an id subclass. So a point that is not :func:`plain` is read once here,
as the REST transport dumps it (pydantic's serializer of the declared type; a numpy array as its
values), and validated again into exact types: str, int, float, bool, None, plain lists and dicts.

A point built normally from plain values is plain (an exact ``PointStruct`` holding an exact int,
str or UUID id, a list vector or a dict of list vectors, and a payload of exact JSON types): it is
checked and sent as it is, with no copy; what may sit inside a plain list vector is read once into
the guard's own array on sensitive collections (vectors.as_dense) and not read at all on PUBLIC
ones. What cannot be read so (an object pydantic cannot serialise, a payload that is no mapping)
is refused: :class:`UnsnapshotableInput`.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np
import pydantic
from pydantic_core import PydanticSerializationError, to_jsonable_python
from qdrant_client.http import models

from .errors import GuardArgumentTypeError, GuardArgumentValueError, InvalidVectorError, UnsupportedWriteError
from .point_uuid import real_uuid

_VECTOR = pydantic.TypeAdapter(models.VectorStruct)
_LEAVES = frozenset({str, int, float, bool, type(None)})
_IDS = frozenset({int, str, uuid.UUID})
# Deeper than Qdrant's JSON nesting and the text field's screen (64): such a payload (or a cycle)
# is rebuilt, and to_jsonable_python refuses a cycle.
_PLAIN_DEPTH = 128


class UnsnapshotableInput(GuardArgumentTypeError):
    """A point, vector or payload of a write that the guard cannot read once as it would be sent."""


class NotAVector(UnsnapshotableInput, InvalidVectorError):
    """A write's vector that reads as no vector qdrant-client sends (text, a number, None where a
    list of floats or a dict of vectors by name belongs): refused as an InvalidVectorError, as a
    vector that holds no numbers is, and an UnsnapshotableInput as before."""

    reason = "not_a_vector"


def sent_point(p: models.PointStruct, index: int, at: str = "points") -> models.PointStruct:
    """``p`` (``points[index]`` of the call; ``at``: where that list is, e.g. in a batch operation) itself when :func:`plain`; otherwise its one snapshot
    (see the module docstring).

    Raises:
        UnsnapshotableInput: its vector or payload does not serialise as qdrant-client sends it.
    """
    if type(p) is models.PointStruct:
        # _plain_state inlined: this runs for every point of every write.
        d = p.__dict__
        if type(d.get("id")) in _IDS:
            v = d.get("vector")
            if type(v) is list or _plain_vector(v):
                body = d.get("payload")
                if body is None or (type(body) is dict and _plain_json(body)):
                    return p
    where = f"{at}[{index}]"
    state = _state(p)
    pid = sent_id(state.get("id"))
    return models.PointStruct.model_construct(
        id=pid, vector=_sent_vector(state.get("vector"), where, pid),
        payload=_sent_payload(state.get("payload"), where, pid))


def sent_vectors(u: models.PointVectors, index: int, at: str = "points") -> models.PointVectors:
    """:func:`sent_point` for ``update_vectors``' ``models.PointVectors`` (an id and a vector)."""
    if type(u) is models.PointVectors:
        d = u.__dict__
        if type(d.get("id")) in _IDS:
            v = d.get("vector")
            if type(v) is list or _plain_vector(v):
                return u
    where = f"{at}[{index}]"
    state = _state(u)
    pid = sent_id(state.get("id"))
    return models.PointVectors.model_construct(id=pid, vector=_sent_vector(state.get("vector"), where, pid))


def sent_id(pid: Any) -> Any:
    """A point id as its value: an int subclass its int, a str subclass its characters, a UUID
    subclass the UUID its 128 bits name (as pydantic dumps it; its ``__str__`` or ``__format__``
    could name another point to the receipt than the transport stores). Any other id (a bool,
    another type) is returned as it is, for the point-id check to refuse by name."""
    t = type(pid)
    if t in _IDS or t is bool:
        return pid
    if isinstance(pid, int):
        return int.__int__(pid)
    if isinstance(pid, str):
        return str.__str__(pid)
    if isinstance(pid, uuid.UUID):
        try:
            return real_uuid(pid)
        except GuardArgumentValueError:
            raise _at(None, UnsnapshotableInput(
                f"a point id is a {type(pid).__name__}, a uuid.UUID subclass whose value the guard cannot read; "
                "pass the id as a uuid.UUID or its string. Nothing was written")) from None
    return pid


def plain(p: Any) -> bool:
    """Whether ``p`` is an exact PointStruct or PointVectors that :func:`sent_point` or
    :func:`sent_vectors` returns as it is."""
    if type(p) is models.PointStruct:
        return _plain_state(p.__dict__, True)
    return type(p) is models.PointVectors and _plain_state(p.__dict__, False)


def _plain_state(state: dict[str, Any], payload: bool) -> bool:
    if type(state.get("id")) not in _IDS or not _plain_vector(state.get("vector")):
        return False
    if not payload:
        return True
    body = state.get("payload")
    return body is None or (type(body) is dict and _plain_json(body))


def _plain_vector(v: Any) -> bool:
    """A list, or a dict (str keys) of lists and of sparse vectors made of lists. What a plain list
    holds is not asked: a sensitive collection reads it once into the guard's own array, a PUBLIC
    one never reads it; a sparse vector is refused on sensitive collections and not read on PUBLIC
    ones."""
    t = type(v)
    if t is list:
        return True
    if t is not dict:
        return False
    for k, x in v.items():
        if type(k) is not str:
            return False
        tx = type(x)
        if tx is not list and not (tx is models.SparseVector and type(x.indices) is list and type(x.values) is list):
            return False
    return True


def _plain_json(body: dict[str, Any]) -> bool:
    """Whether ``body`` holds only exact dicts (of str keys), lists and JSON scalars, to
    ``_PLAIN_DEPTH`` levels (without recursion: a deep payload costs no stack)."""
    for k, x in body.items():  # the top level first: most payloads are flat
        if type(k) is not str:
            return False
        t = type(x)
        if t not in _LEAVES and not ((t is dict or t is list) and _plain_nested(x)):
            return False
    return True


def _plain_nested(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth >= _PLAIN_DEPTH:
            return False
        if type(node) is dict:
            for k in node:
                if type(k) is not str:
                    return False
            values = node.values()
        else:
            values = node
        for x in values:
            t = type(x)
            if t is dict or t is list:
                stack.append((x, depth + 1))
            elif t not in _LEAVES:
                return False
    return True


def _state(p: Any) -> dict[str, Any]:
    """The fields of a model as its instance holds them, read once (a subclass's attribute
    properties or ``__getattr__`` are not asked)."""
    try:
        return dict(object.__getattribute__(p, "__dict__"))
    except (AttributeError, TypeError):
        return {}


def _arrays(value: Any) -> Any:
    """pydantic's fallback for a value it cannot serialise: a numpy array (or subclass) as its
    values, read through the base class (a subclass's ``tolist`` is not asked)."""
    if isinstance(value, np.ndarray):
        return np.ndarray.tolist(np.asarray(value))
    raise PydanticSerializationError(f"Unable to serialize unknown type: {type(value).__name__}")


def _sent_vector(vector: Any, where: str, pid: Any) -> Any:
    if _plain_vector(vector):
        return vector
    try:
        dumped = _VECTOR.dump_python(vector, mode="json", by_alias=True, exclude_unset=True, exclude_none=True,
                                     warnings=False, fallback=_arrays)
    except (ValueError, TypeError) as exc:  # PydanticSerializationError
        raise _refused(where, pid, "vector", exc) from None
    try:
        return _VECTOR.validate_python(dumped)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0].get("msg", "")
        raise _at(pid, NotAVector(
            f"{where} (point id {pid!r}): its vector cannot be read as qdrant-client would send it ({first}): "
            f"it is {_found(vector, dumped)}; give a list of floats, or a dict of them by vector name. Nothing was "
            "written")) from None


def _found(vector: Any, dumped: Any) -> str:
    """What a vector that is no vector is, for its refusal: its type, or in a list or dict (read
    from its dumped form) the first value that is no number, and where (its text is not quoted)."""
    odd = _odd(dumped) if isinstance(dumped, (list, dict)) else None
    return odd or _a(vector)


def _odd(v: Any) -> str | None:
    """The first value in ``v`` (a JSON value) that is no number, described; None when there is none."""
    if isinstance(v, list):
        for x in v:
            odd = _odd(x)
            if odd:
                return f"a list holding {odd}"
        return None
    if isinstance(v, dict):
        if set(v) == {"indices", "values"}:  # a sparse vector's form
            return None
        for k, x in v.items():
            odd = _odd(x)
            if odd:
                return f"a dict whose {k!r} is {odd}"
        return None
    return None if type(v) in (int, float) else _a(v)


def _a(v: Any) -> str:
    if v is None:
        return "None"
    name = type(v).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _sent_payload(payload: Any, where: str, pid: Any) -> Any:
    if payload is None or (type(payload) is dict and _plain_json(payload)):
        return payload
    if not isinstance(payload, Mapping):
        raise _at(pid, UnsnapshotableInput(
            f"{where} (point id {pid!r}): its payload is a {type(payload).__name__}, not a dict; give the "
            "payload as a dict of JSON values. Nothing was written"))
    try:
        body = to_jsonable_python(payload if isinstance(payload, dict) else dict(payload))
    except (ValueError, TypeError) as exc:  # PydanticSerializationError, a cycle
        raise _refused(where, pid, "payload", exc) from None
    if _merges_keys(payload):
        # Two keys of one object sent as one (b"note" and "note", 1 and "1"): the serialiser
        # keeps the last and drops the other value silently; the screen refuses the same
        # collision when redaction makes it.
        raise _at(pid, UnsupportedWriteError(
            f"{where} (point id {pid!r}): two keys of one payload object are sent as the same key "
            "(a bytes, int or str-subclass key beside its str), and one would overwrite the other; "
            "give each key once, as a str. Nothing was written"))
    return body


def _merges_keys(value: Any) -> bool:
    """Whether a dict in ``value`` (at any depth, read through the base classes as the serialiser
    reads it) has two keys that serialise to one JSON key."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            keys = dict.keys(node)
            if any(type(k) is not str for k in keys) and len({_json_key(k) for k in keys}) < len(keys):
                return True
            stack.extend(dict.values(node))
        elif isinstance(node, (list, tuple, set, frozenset)):
            stack.extend(node)
    return False


def _json_key(key: Any) -> str:
    if type(key) is str:
        return key
    try:
        return str(to_jsonable_python(key))
    except (ValueError, TypeError):  # refused by the snapshot itself already
        return repr(key)


def _refused(where: str, pid: Any, part: str, exc: BaseException) -> UnsnapshotableInput:
    first = exc.errors()[0].get("msg", "") if hasattr(exc, "errors") else str(exc)
    return _at(pid, UnsnapshotableInput(
        f"{where} (point id {pid!r}): its {part} cannot be read as qdrant-client would send it ({first}); "
        "build it from plain lists, dicts, str and numbers, as models.PointStruct and models.PointVectors "
        "take them (a numpy array is read as its values). Nothing was written"))


_E = TypeVar("_E", bound=Exception)


def _at(pid: Any, exc: _E) -> _E:
    # The point the audit entry of the refusal names (writes.WriteOps._record_input_refusal).
    exc._qg_point = pid  # type: ignore[attr-defined]
    exc._qg_vector = None  # type: ignore[attr-defined]
    return exc
