"""The scalar arguments and point ids of a call as qdrant-client sends them, made plain once at the
guarded call's entry (:func:`plain_args`), so that what the guard checks, charges and audits is
what is sent.

A str, int or float subclass is sent by pydantic (REST) as its value: its characters, its integer,
its float. The guard and local mode read it through its own methods: a ``using`` looked up in a
dict (``__hash__``/``__eq__``) and written into the score charge's ids (``__format__``), a
``limit`` or ``group_size`` read by ``int()`` (``__int__``, ``__ge__``: a ``group_size`` that
said 100 set the group caps of a read sent with 2). A ``uuid.UUID`` subclass is sent by pydantic as its
128-bit value, while local mode stores and looks up its ``str()`` and the budget named it by its
``__str__``. Each such argument is replaced by its plain value (``str.__str__``, ``int.__int__``,
``float.__float__``, :func:`~qdrant_guard.point_uuid.real_uuid`), which is checked and sent.
Plain values are passed as they are (an exact-type test, no copy). A ``wait`` that is no bool is
sent as the bool the guard reads (REST sends ``str(wait).lower()``). Not made plain, as no guard
check reads them: ``timeout``, ``consistency``, ``shard_key_selector`` (passed to the guard's own
look-ups and to the write alike), ``score_threshold``, ``with_vectors``.
"""
from __future__ import annotations

import uuid
from typing import Any

from qdrant_client.http import models

from .point_uuid import real_uuid
from .errors import QdrantGuardError
from .sentmodels import UncheckedForm, WRITE_SELECTORS, rebuilt

_PLAIN = frozenset({str, int, float, bool, uuid.UUID, type(None)})


def plain_scalar(value: Any, where: str) -> Any:
    """``value`` as the value pydantic sends for it: a str, int, float or UUID subclass as a plain
    str, int, float or UUID; anything else as it is (pydantic validates it)."""
    t = type(value)
    if t in _PLAIN:
        return value
    if isinstance(value, uuid.UUID):
        try:
            return real_uuid(value)
        except QdrantGuardError:
            raise UncheckedForm(where, value, "a UUID subclass without a value: pass a plain uuid.UUID, "
                                "its str or an unsigned int") from None
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    return value


def plain_ids(value: Any, where: str) -> Any:
    """A list or tuple of point ids with each :func:`plain_scalar` (the very list when all are)."""
    if type(value) in (list, tuple) and _PLAIN.issuperset(map(type, value)):
        return value
    if not isinstance(value, (list, tuple)):
        return plain_scalar(value, where)
    items = list.__getitem__(value, slice(None)) if isinstance(value, list) else list(tuple.__getitem__(value, slice(None)))
    return [plain_scalar(v, f"{where}[{i}]") for i, v in enumerate(items)]


def _selector(value: Any, where: str) -> Any:
    if isinstance(value, models.PointIdsList):
        ids = plain_ids(value.points, f"{where}.points")
        return value if ids is value.points else value.model_copy(update={"points": ids})
    if isinstance(value, (list, tuple)):
        return plain_ids(value, where)
    return value


def plain_args(method: str, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with ``using``, ``limit``, ``offset``, ``group_size``, ``search_params`` (rebuilt), ``ids``
    and a points selector's ids plain (:func:`plain_scalar`), and a ``wait`` that is no bool as the
    bool the guard reads; ``args`` itself when all are. (An upsert's and a
    vector update's points, ids included, are snapshotted by :mod:`qdrant_guard.sentpoints`.)

    Raises:
        UncheckedForm: a UUID subclass that holds no value, or ``search_params`` that do not validate.
    """
    changed: dict[str, Any] = {}
    using = args.get("using")
    if using is not None and type(using) is not str:
        changed["using"] = plain_scalar(using, "using")
    for key in ("limit", "offset", "group_size"):  # offset: a count, or scroll's point id
        v = args.get(key)
        if v is not None and type(v) not in _PLAIN:
            changed[key] = plain_scalar(v, key)
    wait = args.get("wait")
    if wait is not None and type(wait) is not bool:
        # The guard reads its truth (an unwaited write's source sizes); REST sends str(wait).lower().
        changed["wait"] = bool(wait)
    params = args.get("search_params")
    if params is not None and type(params) is not models.SearchParams and isinstance(params, models.SearchParams):
        # Only the score charge's digest reads it, through model_dump: a subclass's could show it
        # other params than REST dumps. An exact model (its defaults unset) dumps as REST does.
        changed["search_params"] = rebuilt(params, models.SearchParams, "search_params")
    ids = args.get("ids")
    if ids is not None:
        sent = plain_ids(ids, "ids")
        if sent is not ids:
            changed["ids"] = sent
    selector = WRITE_SELECTORS.get(method)
    value = args.get(selector) if selector is not None else None
    if selector is not None and value is not None:
        sent = _selector(value, selector)
        if sent is not value:
            changed[selector] = sent
    return {**args, **changed} if changed else args
