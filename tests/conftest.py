"""Suite-wide guard: the tests exercise the native kernels, never a silent Python fallback."""
from __future__ import annotations

import importlib
import os

import pytest

from tests.redis_server import redis_url  # noqa: F401  (fixture: one redis-server per session)

NATIVE_MODULES = ("qdrant_guard._noise", "qdrant_guard._scan", "qdrant_guard._detect")

# Files whose run takes a minute or more on CI's 2 cores (measured with --durations, 2026-12-07).
# Under `-n auto --dist loadfile` a file runs whole on one worker, so a long file that starts last
# is the run's tail while the other worker idles; these start first, after the `eval` files.
LONG_FILES = frozenset({
    "test_newuser_library.py",
    "test_intent_builtin.py",
    "test_cli.py",
    "test_intent_fp4.py",
    "test_overhead_cli.py",
    "test_scan_oracle.py",
    "test_privacy_audit.py",
})


def pytest_configure(config: pytest.Config) -> None:
    # xdist re-sorts loadfile units by test count unless told not to; the order comes from the
    # hook below instead (which keeps that count order among the files it does not move).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if os.environ.get("QDRANT_GUARD_REQUIRE_NATIVE") != "1":
        return
    if os.environ.get("QDRANT_GUARD_IMPLEMENTATION", "native") != "native":
        raise pytest.UsageError(
            "QDRANT_GUARD_REQUIRE_NATIVE=1 but QDRANT_GUARD_IMPLEMENTATION selects the Python reference"
        )
    for name in NATIVE_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # the whole run is void without the native build
            raise pytest.UsageError(f"native kernel {name} is not built: {exc}; run `make build`") from exc


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order files: those with an ``eval`` test, then LONG_FILES, then the rest by test count."""
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def rank(path: str) -> tuple[int, int]:
        group = by_file[path]
        evals = sum(1 for item in group if item.get_closest_marker("eval"))
        if evals:
            return (0, -evals)
        if path.rsplit("/", 1)[-1] in LONG_FILES:
            return (1, -len(group))
        return (2, -len(group))

    items[:] = [item for path in sorted(by_file, key=rank) for item in by_file[path]]
