"""Oracle helper: run one case through a native kernel and its pure-Python twin and compare.

The reference twin (``qdrant_guard._<name>_py``) is the specification; the native module
(``qdrant_guard._<name>``) must agree with it exactly, on results and on errors. Tests import both
modules directly, so the comparison does not depend on ``QDRANT_GUARD_IMPLEMENTATION``.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
from types import ModuleType
from typing import Any, Callable

import numpy as np

__all__ = ["assert_same", "assert_equal_results", "both"]


def both(module_name: str) -> tuple[ModuleType, ModuleType]:
    """Return ``(native, python)`` twins of a kernel, e.g. ``both("noise")``.

    Args:
        module_name: the kernel name without underscores (``"noise"``, ``"scan"``, ``"detect"``).

    Returns:
        The modules ``qdrant_guard._<name>`` and ``qdrant_guard._<name>_py``.

    Raises:
        ImportError: if either twin cannot be imported (a missing native build is a test failure,
            never a silent skip).
    """
    name = module_name.strip("_")
    native = importlib.import_module(f"qdrant_guard._{name}")
    python = importlib.import_module(f"qdrant_guard._{name}_py")
    return native, python


def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, Any]:
    try:
        return True, fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every exception is part of the contract being compared
        return False, exc


def assert_equal_results(native: Any, python: Any, path: str = "result") -> None:
    """Assert two results are exactly equal, recursing into containers.

    numpy arrays must match in dtype, shape and every element (``np.array_equal`` with NaN == NaN
    for float arrays). Floats must be bit-for-bit equal (NaN equals NaN, ``0.0 != -0.0``).
    Dataclasses, tuples, lists and dicts are compared field by field, item by item.

    Raises:
        AssertionError: naming the first path where the results differ.
    """
    if isinstance(native, np.ndarray) or isinstance(python, np.ndarray):
        assert isinstance(native, np.ndarray) and isinstance(python, np.ndarray), (
            f"{path}: type {type(native).__name__} != {type(python).__name__}"
        )
        assert native.dtype == python.dtype, f"{path}: dtype {native.dtype} != {python.dtype}"
        assert native.shape == python.shape, f"{path}: shape {native.shape} != {python.shape}"
        equal_nan = native.dtype.kind in "fc"
        if not np.array_equal(native, python, equal_nan=equal_nan):
            same = native == python
            if equal_nan:
                same |= np.isnan(native) & np.isnan(python)
            diff = np.argwhere(~same)
            first = tuple(int(i) for i in diff[0]) if diff.size else ()
            raise AssertionError(
                f"{path}: arrays differ at {len(diff)} positions, first {first}: "
                f"{native[first]!r} != {python[first]!r}"
            )
        if native.dtype.kind == "f":
            # array_equal treats 0.0 == -0.0; the twins must agree on the sign bit too.
            assert np.array_equal(np.signbit(native), np.signbit(python)), f"{path}: signs of zero differ"
        return
    assert type(native) is type(python), f"{path}: type {type(native).__name__} != {type(python).__name__}"
    if dataclasses.is_dataclass(native) and not isinstance(native, type):
        for field in dataclasses.fields(native):
            assert_equal_results(
                getattr(native, field.name), getattr(python, field.name), f"{path}.{field.name}"
            )
        return
    if isinstance(native, (tuple, list)):
        assert len(native) == len(python), f"{path}: length {len(native)} != {len(python)}"
        for i, (a, b) in enumerate(zip(native, python)):
            assert_equal_results(a, b, f"{path}[{i}]")
        return
    if isinstance(native, dict):
        assert native.keys() == python.keys(), f"{path}: keys {sorted(native)} != {sorted(python)}"
        for k in native:
            assert_equal_results(native[k], python[k], f"{path}[{k!r}]")
        return
    if isinstance(native, float):
        same = (math.isnan(native) and math.isnan(python)) or (
            native == python and math.copysign(1.0, native) == math.copysign(1.0, python)
        )
        assert same, f"{path}: {native!r} != {python!r}"
        return
    assert native == python, f"{path}: {native!r} != {python!r}"


def assert_same(native_fn: Callable[..., Any], python_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call both twins with the same arguments and assert they behave identically.

    If both raise, the exception types and messages must be equal. If one raises and the other
    returns, that is a failure. Otherwise the results must be equal (see
    :func:`assert_equal_results`).

    Returns:
        The native result (or the native exception, when both raised), for further checks.

    Raises:
        AssertionError: describing the first difference.
    """
    ok_n, res_n = _call(native_fn, args, kwargs)
    ok_p, res_p = _call(python_fn, args, kwargs)
    if not ok_n and not ok_p:
        assert type(res_n) is type(res_p), (
            f"exception types differ: native {type(res_n).__name__}({res_n}) vs "
            f"python {type(res_p).__name__}({res_p})"
        )
        assert str(res_n) == str(res_p), f"exception messages differ:\n native: {res_n}\n python: {res_p}"
        return res_n
    if ok_n != ok_p:
        raised, returned = ("native", "python") if not ok_n else ("python", "native")
        exc = res_n if not ok_n else res_p
        raise AssertionError(f"{raised} raised {type(exc).__name__}({exc}) but {returned} returned a result")
    assert_equal_results(res_n, res_p)
    return res_n
