"""The one canonical byte encoding signed by receipts, credentials and the audit chain.

A verifier never trusts the bytes it was given: it decodes them, re-encodes the value with
:func:`canonical_json` and compares bytes, so two encodings of the same fields can never both verify.
"""
from __future__ import annotations

import json
import math
from typing import Any, Callable

from .errors import GuardArgumentTypeError, GuardArgumentValueError

__all__ = ["canonical_json", "is_canonical", "decode_canonical"]


_SCALARS = frozenset({str, int, float, bool, type(None)})
# The same bytes as _encode for plain data: sort_keys orders (key, value) pairs of unique str keys
# by key code points, str and int/float go through the same encode_basestring / int.__repr__ /
# float.__repr__ that _encode uses, and allow_nan=False raises on NaN/Infinity.
_fast_encoder = json.JSONEncoder(
    skipkeys=False, ensure_ascii=False, check_circular=False, allow_nan=False, sort_keys=True,
    separators=(",", ":"),
)
_fast_dumps = _fast_encoder.encode


def _c_dumps() -> Callable[[Any], str]:
    # JSONEncoder.encode builds its C encoder (and a closure) on every call; the same C encoder,
    # built once with _fast_encoder's settings, is reused. Used only if it agrees on a probe.
    from json import encoder as _je

    make = getattr(_je, "c_make_encoder", None)
    if make is None:
        return _fast_dumps
    e = _fast_encoder
    try:
        c_encode = make(None, e.default, _je.encode_basestring, e.indent, e.key_separator,
                        e.item_separator, e.sort_keys, e.skipkeys, e.allow_nan)
    except TypeError:  # another signature in another Python version
        return _fast_dumps

    def dumps(obj: Any) -> str:
        return "".join(c_encode(obj, 0))

    probe = {"b": [1, 2.5, None, True, "é\u2028\x00\"\\"], "a": {"z": -0.0, "y": 10 ** 30}, "": ()}
    return dumps if dumps(probe) == _fast_dumps(probe) else _fast_dumps


_dumps = _c_dumps()


def _plain(obj: Any) -> bool:
    # True only for exact dict/list/tuple containers with exact str keys and exact scalar leaves,
    # where json's encoder and _encode agree byte for byte. Subclasses (which may override
    # __iter__, items() or __float__), non-str keys (which json would silently stringify) and
    # unsupported types all return False and go to _encode.
    t = type(obj)
    if t is dict:
        for key, value in obj.items():
            if type(key) is not str:
                return False
            if type(value) not in _SCALARS and not _plain(value):
                return False
        return True
    if t is list or t is tuple:
        for value in obj:
            if type(value) not in _SCALARS and not _plain(value):
                return False
        return True
    return t in _SCALARS


def _encode(obj: Any, out: list[str], path: str) -> None:
    # The general encoder: any input, and errors raised in walk order naming the path of the bad
    # value. canonical_json() uses it for everything the json fast path does not vouch for.
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, int):
        out.append(int.__repr__(obj))
    elif isinstance(obj, float):
        value = float(obj)
        if not math.isfinite(value):
            raise GuardArgumentValueError(
                f"canonical_json: {path} is {value!r}; NaN and Infinity have no canonical JSON "
                "encoding, replace them with finite numbers or null"
            )
        # repr() is the shortest string that round-trips to the same double.
        out.append(float.__repr__(value))
    elif isinstance(obj, str):
        out.append(json.dumps(obj, ensure_ascii=False))
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        for i, item in enumerate(obj):
            if i:
                out.append(",")
            _encode(item, out, f"{path}[{i}]")
        out.append("]")
    elif isinstance(obj, dict):
        for key in obj:
            if not isinstance(key, str):
                raise GuardArgumentTypeError(
                    f"canonical_json: {path} has a key of type {type(key).__name__} ({key!r}); "
                    "only str keys are allowed"
                )
        out.append("{")
        for i, key in enumerate(sorted(obj)):
            if i:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _encode(obj[key], out, f"{path}.{key}")
        out.append("}")
    else:
        raise GuardArgumentTypeError(
            f"canonical_json: {path} is of type {type(obj).__name__}; only None, bool, int, float, "
            "str, list, tuple and dict with str keys can be encoded (convert numpy scalars with "
            ".item() and bytes with base64)"
        )


def canonical_json(obj: Any) -> bytes:
    """Encode ``obj`` as canonical JSON bytes.

    UTF-8, keys sorted by code point, no whitespace, non-ASCII characters written as themselves
    (not ``\\u`` escapes), floats in Python's shortest round-trip form (``1.0`` stays ``1.0``),
    ints as ints, tuples as lists.

    Args:
        obj: ``None``, ``bool``, ``int``, ``float``, ``str``, or lists/tuples/dicts (str keys) of them.

    Returns:
        The canonical UTF-8 bytes.

    Raises:
        TypeError: a value or a dict key has an unsupported type.
        ValueError: a float is NaN or infinite.
    """
    try:
        if _plain(obj):
            return _dumps(obj).encode("utf-8")
    except (ValueError, RecursionError):
        # NaN/Infinity, an int too long for str(), or nesting too deep: let _encode raise the
        # error (with its path) exactly as it always has.
        pass
    out: list[str] = []
    _encode(obj, out, "$")
    return "".join(out).encode("utf-8")


def _reject_constant(name: str) -> Any:
    raise GuardArgumentValueError(f"non-finite number {name} is not canonical JSON")


def decode_canonical(data: bytes) -> Any:
    """Decode ``data`` and check that it is exactly the canonical encoding of its value.

    Args:
        data: UTF-8 JSON bytes.

    Returns:
        The decoded value.

    Raises:
        TypeError: ``data`` is not bytes.
        ValueError: ``data`` is not valid UTF-8 JSON, or is valid JSON in a non-canonical form
            (reordered keys, whitespace, ``\\u`` escapes, ``1e0`` for ``1.0``, duplicate keys, ...).
    """
    if not isinstance(data, (bytes, bytearray)):
        raise GuardArgumentTypeError(f"decode_canonical() argument must be bytes, not {type(data).__name__}")
    try:
        value = json.loads(bytes(data).decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GuardArgumentValueError(f"not valid UTF-8 JSON: {exc}") from exc
    except RecursionError:
        # json's decoder raises RecursionError, not ValueError, on deep nesting; verifiers catch
        # ValueError to turn bad input into a rejection.
        raise GuardArgumentValueError("not valid JSON: nested too deeply to decode") from None
    if canonical_json(value) != bytes(data):
        raise GuardArgumentValueError("JSON is valid but not in canonical form (re-encoding gives other bytes)")
    return value


def is_canonical(data: bytes) -> bool:
    """Return True if ``data`` is the canonical JSON encoding of the value it decodes to."""
    try:
        decode_canonical(data)
    except GuardArgumentTypeError:  # a ValueError too (through ConfigError): not bytes still raises
        raise
    except ValueError:
        return False
    return True
