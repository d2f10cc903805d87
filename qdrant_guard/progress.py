"""A progress bar on stderr for long loops (calibration, the evaluation, the overhead benchmark),
without a hard dependency on tqdm. :mod:`qdrant_guard.utility` re-exports :func:`progress_iter`.
"""
from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


def progress_iter(
    items: Iterable[T], *, total: int | None = None, desc: str = "", enabled: bool = True
) -> Iterator[T]:
    """Yield ``items`` while drawing a progress bar on stderr.

    Uses tqdm when it is installed, otherwise a one-line bar of its own (no hard dependency).
    """
    if not enabled:
        yield from items
        return
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        yield from tqdm(items, total=total, desc=desc, file=sys.stderr, leave=False)
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    start = time.monotonic()
    done = 0
    for item in items:
        yield item
        done += 1
        if total:
            filled = int(30 * done / total)
            bar = "#" * filled + "." * (30 - filled)
            sys.stderr.write(f"\r{desc} [{bar}] {done}/{total} {time.monotonic() - start:.0f}s")
        else:
            sys.stderr.write(f"\r{desc} {done} {time.monotonic() - start:.0f}s")
        sys.stderr.flush()
    sys.stderr.write("\n")
