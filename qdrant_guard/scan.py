"""Structural query scanning: the first, cheap gate before a query is embedded.

:func:`scan_query` checks a query's shape, not its meaning: size, stuffing, encoded payloads and
hidden characters. It runs the native kernel (``qdrant_guard._scan``) unless
``QDRANT_GUARD_IMPLEMENTATION=python`` selects the pure-Python reference
(``qdrant_guard._scan_py``, which also holds the exact definitions of every figure and kind); a
missing native build raises :class:`~qdrant_guard.errors.NativeUnavailableError`.

Example:
    >>> from qdrant_guard.scan import scan_query
    >>> result = scan_query("reset %2e%2e%2f%2e%2e%2f password")
    >>> result.ok, [v.kind for v in result.violations]
    (False, ['percent_encoding'])
"""
from __future__ import annotations

from ._impl import load_kernel
from ._scan_py import KINDS, ScanResult, Violation

__all__ = ["KINDS", "ScanResult", "Violation", "scan_query"]

_kernel = load_kernel("_scan", "_scan_py")

scan_query = _kernel.scan_query
