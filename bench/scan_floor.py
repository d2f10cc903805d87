"""Measure the floor under scan_query's 500-token benchmark (see bench/scan_floor.c).

Run: python bench/scan_floor.py    (needs gcc; builds into a temporary directory)
Prints the C timings of a whitespace split + exact distinct count, and of the real kernel on the
same query, distinct counts by keyed hash alone against the byte-comparing one (on the query and on
bench_scan's 64 varied queries), then the Python call's own cost (empty, and with the one violation
the benchmark query gets), and what 20x against the lesson's validator (timed here too) would leave
for the kernel.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The package of this tree, not one installed elsewhere (an editable install of another checkout).
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_scan import QUERY, VARIED, lesson_validator  # noqa: E402

from qdrant_guard._scan import scan_query  # noqa: E402


def _best(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        exe, query, varied = Path(tmp) / "scan_floor", Path(tmp) / "query.txt", Path(tmp) / "varied.txt"
        query.write_bytes(QUERY.encode())
        varied.write_bytes(b"\0".join(q.encode() for q in VARIED))
        subprocess.run(
            ["gcc", "-O3", "-std=gnu99", "-ffp-contract=off", "-fno-strict-aliasing", f"-I{ROOT / 'native'}",
             str(ROOT / "bench" / "scan_floor.c"), str(ROOT / "native" / "scan.c"), "-o", str(exe)],
            check=True,
        )
        print(subprocess.run([str(exe), str(query), str(varied)], check=True, capture_output=True, text=True).stdout, end="")
    empty = _best(lambda: scan_query(""), 200_000)
    # The benchmark query is over max_repetition: its result carries one violation, whose objects
    # and detail text cost more than the empty result. A 3-token text with the same finding times
    # the call with that result (and a kernel call on 5 bytes).
    violation = _best(lambda: scan_query("a a a"), 200_000)
    full = _best(lambda: scan_query(QUERY), 20_000)
    lesson = _best(lambda: lesson_validator(QUERY), 5_000)
    print(f"Python call of scan_query on an empty string: {empty * 1e6:.3f} us")
    print(f"Python call of scan_query with one repetition violation ('a a a'): {violation * 1e6:.3f} us")
    print(f"scan_query on the benchmark query: {full * 1e6:.2f} us ({lesson / full:.1f}x the lesson validator)")
    print(f"lesson validator: {lesson * 1e6:.2f} us; 20x leaves {lesson / 20 * 1e6:.2f} us for the call and the kernel, "
          f"{(lesson / 20 - violation) * 1e6:.2f} us for the kernel after a call with a violation")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
