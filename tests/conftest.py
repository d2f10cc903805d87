"""Suite-wide guard: the tests exercise the native kernels, never a silent Python fallback."""
from __future__ import annotations

import importlib
import os

import pytest

from tests.redis_server import redis_url  # noqa: F401  (fixture: one redis-server per session)

NATIVE_MODULES = ("qdrant_guard._noise", "qdrant_guard._scan", "qdrant_guard._detect")


def pytest_configure(config: pytest.Config) -> None:
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
