"""Renders docs/policy.md from the policy models, so the reference cannot drift from the code.

Run ``python -m qdrant_guard.policy_doc > docs/policy.md``; tests/test_policy_doc.py checks it.
"""
from __future__ import annotations

import enum
import sys
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .policy import (
    BoundaryConfig,
    CollectionPolicy,
    DiversityPolicy,
    GuardConfig,
    IntentPolicy,
    NoisePolicy,
    QueryRules,
    ReceiptTrust,
    UtilityPolicy,
)

SECTIONS: list[tuple[str, type[BaseModel], str]] = [
    ("Top level", GuardConfig, ""),
    ("[boundaries.NAME]", BoundaryConfig, "boundaries.NAME."),
    ("[receipts]", ReceiptTrust, "receipts."),
    ("[collections.NAME] (and [default])", CollectionPolicy, "collections.NAME."),
    ("[collections.NAME.noise]", NoisePolicy, "collections.NAME.noise."),
    ("[collections.NAME.query]", QueryRules, "collections.NAME.query."),
    ("[collections.NAME.diversity]", DiversityPolicy, "collections.NAME.diversity."),
    ("[collections.NAME.intent]", IntentPolicy, "collections.NAME.intent."),
    ("[collections.NAME.utility]", UtilityPolicy, "collections.NAME.utility."),
]

_NESTED = {"noise", "query", "diversity", "intent", "utility", "receipts", "default", "collections", "boundaries"}


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "see section"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return ", ".join(f"{k.value if isinstance(k, enum.Enum) else k} = {v}" for k, v in value.items())
    if isinstance(value, enum.Enum):
        return f'"{value.value}"'
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    if value is None:
        return "unset"
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _toml_type(annotation: Any) -> str:
    """A field's type as a policy author writes it in TOML (not the Python annotation)."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        inner = _toml_type(kinds[0]) if len(kinds) == 1 else " or ".join(_toml_type(k) for k in kinds)
        return f"{inner}, or unset" if type(None) in args else inner
    if origin is typing.Literal:
        return " or ".join(f'"{a}"' for a in args)
    if origin is tuple:
        item = _toml_type(args[0])
        return "list of strings" if item == "string" else f"list of {item}"
    if origin is dict:
        if args[1] is str:
            return "table of strings by name"
        return "table of numbers by class" if args[1] is float else "tables by name"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " or ".join(f'"{m.value}"' for m in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    return {bool: "true or false", int: "integer", float: "number", str: "string"}.get(annotation, repr(annotation))


def _type(field: Any) -> str:
    text = _toml_type(field.annotation)
    if text.endswith(", or unset") and field.default is not None and field.default_factory is None:
        # TOML has no null: leaving the key out gives the default, so None is reachable from Python only.
        text = text.removesuffix(", or unset") + " (None: from Python only)"
    return text


def _range(field: Any) -> str:
    """The bounds a field's value is checked against (``> 0, <= 1000``), as the loader enforces them."""
    import annotated_types as at

    parts = []
    for m in field.metadata:
        for cls, op, attr in ((at.Gt, ">", "gt"), (at.Ge, ">=", "ge"), (at.Lt, "<", "lt"), (at.Le, "<=", "le"),
                              (at.MinLen, "at least", "min_length")):
            if isinstance(m, cls):
                parts.append(f"{op} {m.min_length} item" if isinstance(m, at.MinLen) else f"{op} {getattr(m, attr)!r}")
    return ", ".join(parts)


def render() -> str:
    """The Markdown policy reference."""
    out = [
        "# Policy reference",
        "",
        "Generated from `qdrant_guard/policy.py` by `python -m qdrant_guard.policy_doc`; do not edit by",
        "hand. Every key, its default and its meaning. Unknown keys are rejected. A complete example:",
        "[policy.example.toml](policy.example.toml). The `[default]` section (unlisted collections) takes",
        "the collection keys; its `readers` default is `[\"*\"]` (any verified principal). Numbers must",
        "be finite (TOML's `inf` and `nan` are refused) and within `range`; path and name strings may",
        "not be empty.",
        "",
    ]
    for title, model, prefix in SECTIONS:
        out += [f"## {title}", "", (model.__doc__ or "").strip().splitlines()[0], "",
                "| key | type | default | range | meaning |",
                "|---|---|---|---|---|"]
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            key = field.alias or name
            desc = " ".join((field.description or "").split()).replace("|", "\\|")
            if key in _NESTED and not desc:
                desc = "see its section"
            typ = _type(field).replace("|", "\\|")
            rng = _range(field)
            out.append(f"| `{prefix}{key}` | `{typ}` | `{_default(field)}` | {f'`{rng}`' if rng else ''} | {desc} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(render())
