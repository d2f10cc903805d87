"""Selection of the kernel implementation: native (default) or the pure-Python reference.

``QDRANT_GUARD_IMPLEMENTATION=python`` selects the reference twins explicitly. Anything else
(unset, ``native``) requires the compiled extensions and raises :class:`NativeUnavailableError`
when they are missing: there is never a silent fallback.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType

from .errors import NativeUnavailableError

_ENV = "QDRANT_GUARD_IMPLEMENTATION"
_CHOICES = ("native", "python")


def implementation() -> str:
    """Return ``"native"`` or ``"python"``: the kernel implementation this process uses."""
    value = os.environ.get(_ENV, "native").strip().lower() or "native"
    if value not in _CHOICES:
        raise NativeUnavailableError(
            f"{_ENV}={value!r} is not valid; use 'native' (default) or 'python'"
        )
    return value


def load_kernel(native_name: str, python_name: str) -> ModuleType:
    """Import the kernel module for the active implementation.

    Args:
        native_name: module under ``qdrant_guard`` built from native/ (e.g. ``"_noise"``).
        python_name: the pure-Python reference twin (e.g. ``"_noise_py"``).
    """
    if implementation() == "python":
        return importlib.import_module(f"qdrant_guard.{python_name}")
    try:
        return importlib.import_module(f"qdrant_guard.{native_name}")
    except ImportError as exc:
        raise NativeUnavailableError(
            f"native kernel qdrant_guard.{native_name} is not built ({exc}). Build it with "
            f"`make build` (or `pip install .`), or set {_ENV}=python to use the slower "
            "pure-Python reference explicitly."
        ) from exc
