"""A text field's value as a reader outside the owner boundary gets it: strings redacted, numbers
as the digits JSON stores (redacted if they hold PII), arrays and objects item by item.
"""
from __future__ import annotations

from typing import Any

from . import detect as _detect
from .field_screen import _number_text


def _redacted_text(value: Any, depth: int = 0) -> Any:
    """A text field's ``value`` (or a facet value or group id of it) as a reader outside the owner
    boundary gets it, read as writes read it (``TextOps._guard_text_field``): a string redacted; a
    number as the digits JSON stores (``_number_text``), the redacted string if they hold PII; an
    array item by item and an object value by value, at any depth (to 64 levels, as writes read
    them). A number, array or object written around the guard, or before writes screened them,
    kept the card a string lost. The same object when nothing in it was redacted."""
    if isinstance(value, str):
        return _detect.redact(value)
    if isinstance(value, list) and depth <= 64:
        items = [_redacted_text(v, depth + 1) for v in value]
        return value if items == value else items
    if isinstance(value, dict) and depth <= 64:
        fields = {k: _redacted_text(v, depth + 1) for k, v in value.items()}
        return value if fields == value else fields
    return _redacted_number(value)


def _redacted_number(value: Any) -> Any:
    digits = _number_text(value)
    if digits is None:
        return value
    shown = _detect.redact(digits)
    return value if shown == digits else shown

