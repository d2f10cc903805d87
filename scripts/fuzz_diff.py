#!/usr/bin/env python3
"""Differential replay of libFuzzer inputs: each native kernel against its pure-Python twin.

    python scripts/fuzz_diff.py [--out DIR] [--max-inputs N] TARGET:PATH [TARGET:PATH ...]

TARGET is scan, detect or noise; PATH a corpus directory (every file in it) or one input file.
Each input is decoded exactly as fuzz/fuzz_<TARGET>.c decodes it (header bytes, then payload;
past the end the header reads zeros) into the arguments of the Python API over that C entry
point, and every call is made on the native binding (qdrant_guard._<name>) and on the reference
twin (qdrant_guard._<name>_py) and compared with tests/oracle.py's ``assert_same`` (results bit
for bit, errors by type and message). scripts/fuzz_ci.sh runs it on the inputs the fuzzers grew
and on the committed seeds.

What Python can express: scan compares bytes mode always and str mode when the payload decodes
as UTF-8 with 'surrogatepass' (the only bytes a str can reach the scanner as); detect takes a str
only, so a payload that is not such UTF-8 is compared as the str 'surrogateescape' decodes it to
(its invalid bytes become lone surrogates: not the harness's bytes, the nearest text Python can
pass). noise compares
``noise_vectors`` (same rows, dim, dtype, mechanism, scale, step, clip and keys as
``qg_noise_rows``) in the seeded and keyed modes (mode 2, fresh OS noise, cannot be reproduced),
the samplers ``normals``/``gammas`` on the harness's stream, and ``unit_grid_nudge`` on the
rows, residuals and visiting order the harness builds.

Exits 1 on any disagreement (printing the input file and the first difference, and copying the
input to --out as diff-<target>-<name>) and when a target compared no input at all (a replay
that compares nothing must not pass). Exits 2 if the native kernels are not the ones loaded.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import math
import os
import shutil
import struct
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))  # this checkout's package and its in-place native build

import numpy as np

from tests.oracle import assert_same

TARGETS = ("scan", "detect", "noise")

# A call to compare: (label, native function, python function, args, kwargs).
Case = tuple[str, Callable[..., Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class NativeNotLoaded(RuntimeError):
    pass


def load_twins(target: str) -> tuple[ModuleType, ModuleType]:
    """(native binding, Python twin) of a kernel; NativeNotLoaded unless the native one is this
    checkout's compiled extension (comparing the twin with itself would always agree)."""
    if os.environ.get("QDRANT_GUARD_IMPLEMENTATION", "native").strip().lower() not in ("", "native"):
        raise NativeNotLoaded("QDRANT_GUARD_IMPLEMENTATION selects the Python reference; unset it")
    try:
        native = importlib.import_module(f"qdrant_guard._{target}")
    except ImportError as exc:
        raise NativeNotLoaded(f"native kernel qdrant_guard._{target} is not built ({exc}); run "
                              "`make build` (or setup.py build_ext --inplace)") from exc
    path = Path(getattr(native, "__file__", "") or "")
    if (path.parent != ROOT / "qdrant_guard"
            or not any(path.name.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES)):
        raise NativeNotLoaded(f"qdrant_guard._{target} was loaded from {path}, not as this checkout's "
                              f"compiled extension in {ROOT / 'qdrant_guard'}")
    return native, importlib.import_module(f"qdrant_guard._{target}_py")


class Reader:
    """fuzz_common.h's fuzz_reader: little-endian fields, zeros past the end."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, nbytes: int) -> int:
        chunk = self.data[self.pos:self.pos + nbytes]
        self.pos += len(chunk)
        return int.from_bytes(chunk.ljust(nbytes, b"\0"), "little")

    def take_double(self) -> float:
        return struct.unpack("<d", struct.pack("<Q", self.take(8)))[0]

    def rest(self) -> bytes:
        return self.data[self.pos:]


def _as_str(data: bytes) -> str | None:
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


# ------------------------------------------------------------------------------------ scan
def scan_rules(header: bytes) -> dict[str, Any]:
    """The limits fuzz/fuzz_scan.c sets in qg_scan_rules from its 4 header bytes (missing bytes
    read as zero), as scan_query arguments (the binding maps None to -1 and caps ints at 2**62).
    The two ratios are applied in Python only, on the kernel's counts: fixed; the glued-repetition
    cap is fixed too (its pass is not in the C harness: the replay is what runs it). The committed seeds'
    replay (tests/test_fuzz_regressions.py) uses this too."""
    rd = Reader(header)
    flags, cap, blob, pct = rd.take(1), rd.take(1), rd.take(1), rd.take(1)
    return {
        "max_tokens": None if flags & 4 else (cap if flags & 8 else 1 << 62),
        "max_model_tokens": None if flags & 16 else cap * 3,
        "min_blob_len": None if blob == 0 else 8 + (blob & 63),
        "min_percent_run": None if pct == 0 else 1 + (pct & 7),
        "encoded_payloads": bool(flags & 2),
        "max_ngram_run": 0.25,
        # Python-side too: the binding runs its own pass (qg_glued_scan) only when this is set.
        "max_glued_repetition": 0.25,
    }


def scan_cases(data: bytes, native: ModuleType, python: ModuleType) -> list[Case]:
    rules, payload = scan_rules(data[:4]), data[4:]
    cases: list[Case] = [("scan_query(bytes)", native.scan_query, python.scan_query, (payload,), rules)]
    text = _as_str(payload)
    if text is not None:
        cases.append(("scan_query(str)", native.scan_query, python.scan_query, (text,), rules))
    return cases


# ---------------------------------------------------------------------------------- detect
def detect_cases(data: bytes, native: ModuleType, python: ModuleType) -> list[Case]:
    rd = Reader(data)
    rd.take(1)  # the buffer misalignment
    payload = rd.rest()
    text = _as_str(payload)
    if text is not None:
        return [("find_spans", native.find_spans, python.find_spans, (text,), {})]
    # Not a str's bytes (most grown inputs hold some invalid UTF-8): compare the nearest str,
    # each invalid byte as a lone surrogate U+DC80..U+DCFF, so the fuzzer's finds around it are
    # still checked.
    text = payload.decode("utf-8", "surrogateescape")
    return [("find_spans(surrogateescape)", native.find_spans, python.find_spans, (text,), {})]


# ----------------------------------------------------------------------------------- noise
def _nudge_runner(fn: Callable[..., Any]) -> Callable[..., Any]:
    """unit_grid_nudge works in place: run it on copies and return what it left."""
    def run(k: np.ndarray, residual: np.ndarray, order: np.ndarray, shift: int, tol: float,
            passes: int) -> tuple[np.ndarray, np.ndarray]:
        k, residual = k.copy(), residual.copy()
        fn(k, residual, order, shift, tol, passes)
        return k, residual
    return run


def nudge_case(data: bytes, native: ModuleType, python: ModuleType) -> Case:
    """fuzz_noise.c fuzz_nudge(): the same bytes read as a unit_grid_nudge call."""
    rd = Reader(data)
    flags = rd.take(1)
    rows = 1 + rd.take(1) % 4
    dim = 1 + rd.take(1) % 64
    need = 1
    while (1 << need) < dim:
        need += 1
    shift = need + rd.take(1) % 8
    wide = bool(flags & 1) or shift > 10
    tol = float(rd.take(2))
    passes = rd.take(1) % 17
    plant_bad = (flags & 6) == 6 and (1 << shift) > dim
    k = np.zeros((rows, dim), np.float64)
    res = np.zeros(rows, np.float64)
    order = [[0] * dim for _ in range(rows)]
    for i in range(rows):
        res[i] = float(struct.unpack("<i", struct.pack("<I", rd.take(4)))[0])
        for j in range(dim):
            v = struct.unpack("<h", struct.pack("<H", rd.take(2)))[0]
            k[i, j] = v
            order[i][j] = (((1 << 20) - abs(v)) << shift) | j
        for j in range(dim, 1, -1):
            m = rd.take(1) % j
            order[i][j - 1], order[i][m] = order[i][m], order[i][j - 1]
    if plant_bad:
        at = rd.take(2) % (rows * dim)
        low = dim + rd.take(2) % ((1 << shift) - dim)
        i, j = divmod(at, dim)
        order[i][j] = (order[i][j] >> shift << shift) | low
    keys = np.array(order, np.int64 if wide else np.int32)  # int32 keys fit: shift <= 10
    return ("unit_grid_nudge", _nudge_runner(native.unit_grid_nudge), _nudge_runner(python.unit_grid_nudge),
            (k, res, keys, shift, tol, passes), {})


def noise_cases(data: bytes, native: ModuleType, python: ModuleType) -> list[Case]:
    cases = [nudge_case(data, native, python)]
    if len(data) < 40:
        return cases
    rd = Reader(data)
    flags = rd.take(1)
    is_f32 = bool(flags & 1)
    mechanism = "laplace_l2" if flags & 2 else "gaussian"
    mode = (flags >> 2) & 3  # 0, 3: one seeded stream; 1: row keys; 2: fresh (thread stream)
    rows = 1 + rd.take(1) % 8
    dim = 1 + rd.take(1) % 64
    scale = rd.take_double()
    step_exp = struct.unpack("<b", bytes([rd.take(1)]))[0] * 4
    clip = rd.take_double()
    key = bytes(rd.take(1) for _ in range(20)) + b"\x5a" * 12
    nonce = bytes(12)
    if not (math.isfinite(scale) and scale > 0.0):
        scale = abs(scale) if abs(scale) > 0.0 and math.isfinite(scale) else 1.0
    if flags & 0x10:
        step_exp = -1074 + (step_exp & 31) if flags & 0x20 else 1023 - (step_exp & 15)
    step = math.ldexp(1.0, step_exp)
    clip = 0.0 if not math.isfinite(clip) or flags & 0x40 else abs(clip)
    esize = 4 if is_f32 else 8
    payload = rd.rest()
    if len(payload) // esize < rows * dim:
        rows = len(payload) // esize // dim
        if rows == 0:
            return cases
    x = np.frombuffer(payload[:rows * dim * esize], "<f4" if is_f32 else "<f8").reshape(rows, dim).copy()
    clip_norm = clip if clip > 0.0 else None  # 0 turns clipping off in C, None in Python
    if mode != 2:
        if mode == 1:
            stream_key, row_keys = None, b"".join(key[:31] + bytes([i]) for i in range(rows))
        else:
            stream_key, row_keys = key, None
        cases.append((f"noise_vectors(mode {mode})", native.noise_vectors, python.noise_vectors,
                      (x, mechanism, scale, step, clip_norm, stream_key, row_keys, nonce), {}))
    shape = 1.0 + abs(clip)
    if not math.isfinite(shape) or shape > 1e12:
        shape = 1e12
    cases.append(("normals", native.normals, python.normals, (key, nonce, 16), {}))
    cases.append(("gammas", native.gammas, python.gammas, (key, nonce, shape, 4), {}))
    return cases


DECODERS: dict[str, Callable[[bytes, ModuleType, ModuleType], list[Case]]] = {
    "scan": scan_cases, "detect": detect_cases, "noise": noise_cases,
}


def _files(path: Path) -> Iterator[Path]:
    if path.is_dir():
        yield from sorted(p for p in path.iterdir() if p.is_file())
    elif path.is_file():
        yield path
    else:
        raise FileNotFoundError(f"no corpus file or directory {path}")


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    def short(v: Any) -> str:
        r = repr(v)
        return r if len(r) <= 120 else r[:117] + "..."
    return ", ".join([short(a) for a in args] + [f"{k}={short(v)}" for k, v in kwargs.items()])


def replay(target: str, paths: list[Path], out: Path, max_inputs: int = 0,
           twins: tuple[ModuleType, ModuleType] | None = None) -> dict[str, Any]:
    """Replay the inputs of one target through both twins; return counts and disagreements."""
    native, python = twins if twins is not None else load_twins(target)
    files = [f for p in paths for f in _files(p)]
    skipped = 0
    if max_inputs and len(files) > max_inputs:
        skipped = len(files) - max_inputs
        files = files[:max_inputs]  # libFuzzer names inputs by SHA-1: a sample of the corpus
    stats: dict[str, Any] = {"inputs": len(files), "compared": 0, "calls": 0, "inexpressible": 0,
                             "capped": skipped, "failures": []}
    start = time.perf_counter()
    for f in files:
        data = f.read_bytes()
        cases = DECODERS[target](data, native, python)
        if not cases:
            stats["inexpressible"] += 1
            continue
        stats["compared"] += 1
        for label, native_fn, python_fn, args, kwargs in cases:
            stats["calls"] += 1
            try:
                assert_same(native_fn, python_fn, *args, **kwargs)
            except AssertionError as exc:
                out.mkdir(parents=True, exist_ok=True)
                repro = out / f"diff-{target}-{f.name}"
                shutil.copyfile(f, repro)
                stats["failures"].append((f, label, str(exc), _describe(args, kwargs), repro))
                break
    stats["seconds"] = time.perf_counter() - start
    return stats


def main(argv: list[str] | None = None,
         twins: dict[str, tuple[ModuleType, ModuleType]] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="TARGET:PATH",
                        help=f"TARGET one of {', '.join(TARGETS)}; PATH a corpus directory or file")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "fuzz" / "out",
                        help="where disagreeing inputs are copied (default build/fuzz/out)")
    parser.add_argument("--max-inputs", type=int, default=0,
                        help="compare at most this many inputs per target (0: all)")
    opts = parser.parse_args(argv)
    by_target: dict[str, list[Path]] = {}
    for item in opts.inputs:
        target, sep, path = item.partition(":")
        if not sep or target not in TARGETS or not path:
            parser.error(f"{item!r}: expected TARGET:PATH with TARGET one of {', '.join(TARGETS)}")
        by_target.setdefault(target, []).append(Path(path))
    failed = False
    for target, paths in by_target.items():
        try:
            stats = replay(target, paths, opts.out, opts.max_inputs, (twins or {}).get(target))
        except NativeNotLoaded as exc:
            print(f"fuzz-diff: FAILED: {exc}", file=sys.stderr)
            return 2
        line = (f"fuzz-diff: {target}: {stats['compared']} of {stats['inputs']} inputs compared "
                f"native vs Python twin ({stats['calls']} calls, {stats['seconds']:.1f}s)")
        if stats["inexpressible"]:
            line += f"; {stats['inexpressible']} not expressible through the Python API"
        if stats["capped"]:
            line += f"; {stats['capped']} left out by --max-inputs"
        print(line + (f"; {len(stats['failures'])} DISAGREE" if stats["failures"] else "; all agree"))
        for f, label, message, call, repro in stats["failures"][:10]:
            print(f"fuzz-diff: {target}: DISAGREEMENT on {f} in {label}({call}):\n    {message}\n"
                  f"    reproducer: {repro} (python scripts/fuzz_diff.py {target}:{repro})", file=sys.stderr)
            failed = True
        if stats["compared"] == 0:
            print(f"fuzz-diff: {target}: FAILED: no input compared (paths: "
                  f"{', '.join(map(str, paths))}); an empty replay proves nothing", file=sys.stderr)
            failed = True
    if failed:
        print("fuzz-diff: FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
