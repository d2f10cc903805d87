"""Where a warning lands: at the caller's line outside qdrant_guard, as if the guard were not there.

qdrant-client's warnings (a deprecated method or argument, a search parameter local mode ignores)
pass ``stacklevel=N`` counted for a call made straight to its client. Called through the facade,
the guard's frames (_facade.py, pipeline.py) sit between that client and the caller, so the
warning landed on a guard line: shown there, counted once for every caller in that guard module's
``__warningregistry__``, and matched by module filters under the guard's name (Python's default
filters show a ``DeprecationWarning`` only when it lands in ``__main__``, so a script calling a
deprecated method through the guard was never told).

:func:`install` gives each qdrant_client module that imported ``warnings`` a view of that module
whose ``warn`` counts ``stacklevel`` over frames outside qdrant_guard and then calls
``warnings.warn`` itself: the filters, the registry, the shown location and ``-W error`` (the
warning raised as an exception from the same place) are Python's own. No frame is walked unless a
warning is being issued, nothing is caught or re-emitted (``warnings.catch_warnings`` is
process-wide, unsafe from several threads), and with no qdrant_guard frame in the counted range
the stacklevel passed on is the one qdrant-client gave.
"""
from __future__ import annotations

import functools
import sys
import types
import warnings
from typing import Any

_PACKAGE = __name__.rpartition(".")[0]
_CLIENT = "qdrant_client"


def _in_guard(frame: types.FrameType) -> bool:
    name = frame.f_globals.get("__name__")
    return isinstance(name, str) and (name == _PACKAGE or name.startswith(_PACKAGE + "."))


def _internal(frame: types.FrameType) -> bool:
    # CPython's warnings skip the import machinery's frames when counting (_warnings.c,
    # is_internal_frame); counted the same way here, they are neither guard frames nor the caller's.
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def stacklevel_past_guard(stacklevel: int, frame: types.FrameType) -> int:
    """The stacklevel, counted from ``frame`` (level 1), of the frame that ``stacklevel`` names
    when qdrant_guard's frames are left out of the count."""
    if stacklevel <= 1:  # warnings.warn reads 0 and below as 1
        return 1
    skipped = 0
    remaining = stacklevel - 1
    f: types.FrameType | None = frame
    while remaining > 0 and f is not None:
        f = f.f_back
        while f is not None and _internal(f):
            f = f.f_back
        if f is None:
            break
        if _in_guard(f):
            skipped += 1
        else:
            remaining -= 1
    return stacklevel + skipped


def warn(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` at the first caller outside qdrant_guard (the guard's own warnings)."""
    # Level 1 is this function's caller, a guard frame: level 2 is the first frame past the guard.
    warnings.warn(message, category, stacklevel=stacklevel_past_guard(2, sys._getframe(1)) + 1)


class _ClientWarnings:
    """qdrant-client's view of the ``warnings`` module: the module itself, each name read from it
    when used (``catch_warnings`` swaps ``warnings.filters``), but for :meth:`warn`."""

    def __getattr__(self, name: str) -> Any:  # a name the module gained after this class was made
        return getattr(warnings, name)

    def __repr__(self) -> str:
        return "<qdrant_guard.warnsite's view of module 'warnings'>"

    @staticmethod
    def warn(message: Any, category: Any = None, stacklevel: int = 1, source: Any = None, **kwargs: Any) -> None:
        # One more level: this frame sits between qdrant-client's call and warnings.warn.
        warnings.warn(message, category, stacklevel_past_guard(stacklevel, sys._getframe(1)) + 1, source, **kwargs)


def _read(name: str, view: _ClientWarnings) -> Any:
    return getattr(warnings, name)


# A property each: a lookup through __getattr__ alone costs ten times more, and local mode reads
# warnings.catch_warnings for every point a formula query rescores.
for _name in vars(warnings):
    if not _name.startswith("__") and _name != "warn":
        setattr(_ClientWarnings, _name, property(functools.partial(_read, _name)))
del _name

CLIENT_WARNINGS = _ClientWarnings()


def install() -> None:
    """Give every loaded qdrant_client module whose global ``warnings`` is the warnings module
    :data:`CLIENT_WARNINGS` instead (qdrant-client's ``show_warning`` and its direct
    ``warnings.warn`` calls all go through such a global)."""
    for name, module in list(sys.modules.items()):
        if name != _CLIENT and not name.startswith(_CLIENT + "."):
            continue
        namespace = getattr(module, "__dict__", None)
        if namespace is not None and namespace.get("warnings") is warnings:
            namespace["warnings"] = CLIENT_WARNINGS
