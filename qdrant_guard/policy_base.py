"""The policy models' shared base: strict, frozen pydantic models whose TOML scalars must have their
written type, and the sensitivity classes.
"""
from __future__ import annotations

import enum
import math
import tomllib
import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class SensitivityClass(str, enum.Enum):
    """The ``embedding_sensitivity_class`` of a collection's content."""

    PUBLIC = "PUBLIC"
    PII = "PII"
    CREDENTIAL = "CREDENTIAL"
    PROPRIETARY = "PROPRIETARY"


Mode = Literal["enforce", "monitor"]


def _scalar_kinds(annotation: Any) -> set[Any]:
    """The non-None members of a field's type (``float | None`` -> ``{float}``)."""
    union = get_origin(annotation) in (Union, types.UnionType)
    return {a for a in (get_args(annotation) if union else (annotation,)) if a is not type(None)}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, use_attribute_docstrings=True)

    @field_validator("*", mode="before")
    @classmethod
    def _typed_scalars(cls, v: Any, info: ValidationInfo) -> Any:
        # TOML values are typed: "no" or 0 for a bool, true or "1.5" for a number are mistakes
        # that pydantic's lax mode would silently read as False / 1.0 (lists for tuples and
        # integers for floats stay accepted).
        if info.field_name is None:
            return v
        kinds = _scalar_kinds(cls.model_fields[info.field_name].annotation)
        if kinds == {bool} and not isinstance(v, bool):
            unquote = _unquoted(info.field_name, v, bool)
            raise ValueError(f"expected true or false, got {v!r} ({type(v).__name__}){unquote}")
        if kinds and kinds <= {int, float} and (isinstance(v, (bool, str)) or (kinds == {int} and isinstance(v, float))):
            want = "an integer" if kinds == {int} else "a number"
            field = cls.model_fields[info.field_name]
            if isinstance(v, str) and v.strip().lower() in ("none", "null", "nil") and type(None) in get_args(
                    field.annotation):
                # A null written as text (calibrate's --clip-norm takes "none"): TOML has no null.
                unset = ("leave the key out: its default is unset" if field.default is None else
                         f"its default is {field.default!r}, and only a GuardConfig built in Python can unset "
                         f"it ({info.field_name}=None)")
                raise ValueError(f"expected {want}, got {v!r} (a string): TOML has no null; {unset}")
            unquote = _unquoted(info.field_name, v, int if kinds == {int} else float, fraction=_le(cls, info) == 1)
            raise ValueError(f"expected {want}, got {v!r} ({type(v).__name__}){unquote}")
        if kinds and kinds <= {int, float} and isinstance(v, float) and not math.isfinite(v):
            # TOML's inf and nan: nan fails every bound with a misleading message, and inf passed
            # unbounded keys (window_s = inf broke every budgeted read with a bare ValueError).
            none = " (leave the key out for its default)" if type(None) in get_args(
                cls.model_fields[info.field_name].annotation) else ""
            raise ValueError(f"expected a finite number, got {v!r}{none}")
        if kinds and kinds <= {int, float} and isinstance(v, (int, float)) and 1 < v <= 100:
            if _le(cls, info) == 1:
                # A fraction of 1 written as a percentage (25 for 25 %) would only meet "<= 1".
                raise ValueError(f"must be less than or equal to 1: a fraction (0.25 is 25 %), not a percentage; "
                                 f"for {v:g} % write {info.field_name} = {v / 100:g}")
        if v == "" and info.field_name in _EMPTY:
            raise ValueError(_EMPTY[info.field_name])
        if isinstance(v, (list, tuple)) and "" in v and info.field_name in _EMPTY:
            raise ValueError(f"entry {list(v).index('')} is empty: {_EMPTY[info.field_name]}")
        return v


def _le(cls: type[BaseModel], info: ValidationInfo) -> Any:
    """The field's ``le`` bound, or None."""
    assert info.field_name is not None
    return next((m.le for m in cls.model_fields[info.field_name].metadata if getattr(m, "le", None) is not None),
                None)


def _unquoted(key: str, v: Any, kind: type, *, fraction: bool = False) -> str:
    """The fix for a number or boolean written in quotes (``epsilon = "1.0"``, ``"40%"`` for a
    fraction): the line to write instead, which TOML reads as a value of ``kind``, or nothing when
    the text is not one."""
    if not isinstance(v, str):
        return ""
    text = v.strip()
    if kind is bool:
        text = text.lower()
    elif fraction and text.endswith("%"):
        try:
            text = f"{float(text[:-1]) / 100:g}"
        except ValueError:
            return ""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return ""
    fits = isinstance(value, bool) if kind is bool else (
        not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else int)
        and math.isfinite(value))
    return f"; write it without quotes: {key} = {text}" if fits else ""


# What an empty string would mean for a key, and the fix. A relative path is resolved against the
# policy file's directory, so "" named the directory itself; an empty boundary name names no boundary.
_EMPTY: dict[str, str] = {
    "embedding_model": ("an empty name names no model; name the model the collection's vectors come from, "
                        "e.g. \"sentence-transformers/all-MiniLM-L6-v2\", or leave the key out"),
    **dict.fromkeys(("signing_key", "audit_log", "record"),
                    "an empty path names no file (it would be read as the policy's directory); give a "
                    "file path or leave the key out"),
    **dict.fromkeys(("audit_trusted_keys", "trusted_keys", "retired_keys", "authority_keys", "receipt_keys"),
                    "give each key as 'ed25519:<base64>' or the path of its .pub file"),
    "owner": "an empty owner names no boundary; name a [boundaries.NAME] section or leave owner out",
    **dict.fromkeys(("readers", "writers"), "an empty name is no boundary; name a [boundaries.NAME] section or "
                    "\"*\" (any verified principal)"),
    "restricted_sources": ("a point whose source is \"\" counts as having none, so \"\" restricts nothing; "
                           "name a source (a source_field value), or \"__unknown__\" for points without one"),
}
