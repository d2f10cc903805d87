"""A payload value or key as qdrant-client sends and stores it, the form the screens read.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from pydantic_core import to_jsonable_python


# What the client sends as a JSON array (and Qdrant stores and indexes as one).
_ARRAYS = (list, tuple, set, frozenset)
# What the screens read as they are; anything else is sent as pydantic serialises it.
_AS_IS = (str, int, float, bool, type(None), dict, *_ARRAYS)
_EXACT = frozenset(_AS_IS)


def _as_sent(value: Any) -> Any:
    """``value`` as qdrant-client sends and stores it (local mode, REST and gRPC alike serialise a
    payload with pydantic): bytes and a str-valued Enum become the string, a dataclass or model an
    object, a deque or generator a list. The screens read that form: the Python object hid it (a
    secret as ``b"sk_live_..."`` was stored as the string, unscreened). A value pydantic cannot
    serialise is returned as it is (the client refuses it). A str subclass (a ``(str, Enum)``
    member, a class whose ``__str__`` masks it) is its characters, as it is stored: its
    ``__str__``, ``__format__``, ``__eq__`` or ``__hash__`` could show the screens something else;
    a dict or list subclass is what pydantic serialises of it."""
    if isinstance(value, _AS_IS):
        if type(value) in _EXACT or not isinstance(value, (str, dict, *_ARRAYS)):
            return value  # numbers (and their subclasses) hold no string
        if isinstance(value, str):
            return str.__str__(value)
        # A dict or list subclass: REST sends its stored entries (pydantic's serialiser reads the
        # dict or list itself), whatever its items() or __iter__ show the screen.
    try:
        return to_jsonable_python(value)
    except (ValueError, TypeError):
        return value


def _sent_key(key: Any) -> Any:
    """A payload key as it is stored: a str subclass its characters; bytes or an Enum the string
    pydantic makes of it (qdrant-client's models validate payload keys so); a number, boolean or
    None as JSON writes a key (local mode stores ``{7: v}`` as ``{"7": v}``); anything else as it
    is (the client refuses it). Read as given, a bytes key holding a secret was never screened."""
    if isinstance(key, str):
        return str.__str__(key)
    sent = _as_sent(key)
    if isinstance(sent, str):
        return str.__str__(sent)
    return json.dumps(sent) if sent is None or isinstance(sent, (int, float)) else key


def _as_dict(payload: Any) -> Any:
    """A ``set_payload``/``overwrite_payload`` payload given as another Mapping (``UserDict``,
    ``MappingProxyType``) as the dict qdrant-client's REST model validates it into and sends: read as
    it is, it was passed on unscreened."""
    # type() first: a dict (nearly every payload) skips typing.Mapping's slow isinstance check.
    return (dict(payload) if type(payload) is not dict and isinstance(payload, Mapping)
            and not isinstance(payload, dict) else payload)


def _stored_keys(payload: Any) -> Any:
    """A ``set_payload``/``overwrite_payload`` payload with its top-level keys as the client stores
    them: a str subclass key is its characters, bytes or an Enum its text (``_sent_key``). Looked
    up by its own ``__eq__``/``__hash__`` (or as bytes), a key stored as the receipt key could pass
    the reserved-key check as another name, and ``b"text"`` the text field's screen."""
    payload = _as_dict(payload)
    if isinstance(payload, dict) and any(type(k) is not str for k in payload):
        return {_sent_key(k): v for k, v in payload.items()}
    return payload
