"""scripts/fuzz_diff.py: the differential replay scripts/fuzz_ci.sh runs on the fuzzers' inputs.

It decodes each input as fuzz/fuzz_<target>.c does and compares the native binding with the
Python twin. These tests run it on committed seeds plus crafted inputs (agreement), on a twin that
is deliberately wrong (caught, with the file and a reproducer), on nothing (refused: a replay that
compares nothing must not pass) and without the native kernels (refused).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from qdrant_guard import _detect_py, _noise_py, _scan_py

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "fuzz_diff.py"
CORPUS = ROOT / "fuzz" / "corpus"


def _fuzz_diff() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_diff", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Crafted inputs in the harnesses' formats (see the header comment of each fuzz/fuzz_<target>.c).
# scan: flags 0x0a (bytes mode, encoded payloads on, max_tokens = cap), cap 3, blobs from 9,
# percent runs from 2: an escape run, a base64 blob, a repetition and a token cap in one text.
SCAN = bytes([0x0A, 3, 1, 1]) + b"reset %2e%2e%2f aGVsbG8gd29ybGQgdGhpcyBpcyBh word word word word"
# detect: misalignment byte, then text with findings; the second also holds an invalid byte.
DETECT = b"\x05" + "ssn 123-45-6789 mail alice@example.com caf\u00e9".encode()
DETECT_INVALID = b"\x03card 4111 1111 1111 1111 \xff\xfe ssn 078-05-1120"
# noise: flags 0x04 (float64, gaussian, per-row keys), 2 rows of 3, scale 0.5, step 2^-20,
# clip 1.0, a 20-byte key, then 6 doubles.
NOISE = (bytes([0x04, 1, 2]) + struct.pack("<d", 0.5) + struct.pack("<b", -5) + struct.pack("<d", 1.0)
         + bytes(range(1, 21)) + struct.pack("<6d", 0.25, -1.5, 3.0, 1e-3, 0.0, -2.0))
CRAFTED = {"scan": [SCAN, b"", b"\x02"], "detect": [DETECT, DETECT_INVALID], "noise": [NOISE, b"\x07" * 39]}


def _corpus_dir(tmp_path: Path, target: str, seeds: int) -> tuple[Path, list[Path]]:
    d = tmp_path / target
    d.mkdir()
    for seed in sorted((CORPUS / target).iterdir())[:seeds]:
        shutil.copyfile(seed, d / seed.name)
    crafted = []
    for k, data in enumerate(CRAFTED[target]):
        crafted.append(d / f"crafted-{k}")
        crafted[-1].write_bytes(data)
    return d, crafted


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "QDRANT_GUARD_IMPLEMENTATION"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False,
                          env={**base, **(env or {})}, cwd=ROOT, timeout=600)


def test_seeds_and_crafted_inputs_agree_and_every_input_is_compared(tmp_path: Path) -> None:
    dirs = {t: _corpus_dir(tmp_path, t, seeds=12)[0] for t in ("scan", "detect", "noise")}
    proc = _run(*(f"{t}:{d}" for t, d in dirs.items()), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for target, d in dirs.items():
        n = len(list(d.iterdir()))
        assert re.search(rf"^fuzz-diff: {target}: {n} of {n} inputs compared .*all agree$",
                         proc.stdout, re.MULTILINE), proc.stdout
    assert not (tmp_path / "out").exists()


def test_crafted_inputs_decode_to_the_calls_the_harnesses_make() -> None:
    fd = _fuzz_diff()
    native, python = fd.load_twins("scan")
    (_, _, _, args, rules), (_, _, _, str_args, _) = fd.scan_cases(SCAN, native, python)
    assert args == (SCAN[4:],) and str_args == (SCAN[4:].decode(),) and rules["max_tokens"] == 3 and rules["max_model_tokens"] == 9
    assert rules["min_blob_len"] == 9 and rules["min_percent_run"] == 2 and rules["encoded_payloads"]
    assert native.scan_query(*args, **rules).violations  # the text trips the rules it was made for
    native, python = fd.load_twins("detect")
    assert [c[0] for c in fd.detect_cases(DETECT_INVALID, native, python)] == ["find_spans(surrogateescape)"]
    assert native.find_spans(fd.detect_cases(DETECT, native, python)[0][3][0])
    native, python = fd.load_twins("noise")
    cases = {c[0]: c for c in fd.noise_cases(NOISE, native, python)}
    assert set(cases) == {"unit_grid_nudge", "noise_vectors(mode 1)", "normals", "gammas"}
    x, mechanism, scale, step, clip, stream_key, row_keys, nonce = cases["noise_vectors(mode 1)"][3]
    assert x.shape == (2, 3) and x.dtype == np.float64 and x[1, 2] == -2.0
    assert (mechanism, scale, step, clip, stream_key) == ("gaussian", 0.5, 2.0 ** -20, 1.0, None)
    assert row_keys == bytes(range(1, 21)) + b"\x5a" * 11 + b"\x00" + bytes(range(1, 21)) + b"\x5a" * 11 + b"\x01"
    assert nonce == bytes(12)


def _broken(module: types.ModuleType, name: str, wrong) -> types.SimpleNamespace:
    twin = types.SimpleNamespace(**{k: getattr(module, k) for k in dir(module) if not k.startswith("__")})
    right = getattr(module, name)
    setattr(twin, name, lambda *a, **kw: wrong(right(*a, **kw)))
    return twin


def _nudge_last(out: np.ndarray) -> np.ndarray:
    out = out.copy()
    out.flat[-1] = np.nextafter(out.flat[-1], np.inf)
    return out


BROKEN = {
    "scan": (_scan_py, "scan_query", lambda r: dataclasses.replace(r, token_count=r.token_count + 1)),
    "detect": (_detect_py, "find_spans", lambda spans: spans[:-1]),
    "noise": (_noise_py, "noise_vectors", _nudge_last),
}


@pytest.mark.parametrize("target", ["scan", "detect", "noise"])
def test_a_wrong_twin_is_caught_with_the_input_and_a_reproducer(
        target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fd = _fuzz_diff()
    _, crafted = _corpus_dir(tmp_path, target, seeds=0)
    module, name, wrong = BROKEN[target]
    native, _ = fd.load_twins(target)
    twins = {target: (native, _broken(module, name, wrong))}
    assert fd.main([f"{target}:{crafted[0]}", "--out", str(tmp_path / "out")], twins=twins) == 1
    err = capsys.readouterr().err
    assert f"DISAGREEMENT on {crafted[0]} in {name}" in err, err
    assert (tmp_path / "out" / f"diff-{target}-crafted-0").read_bytes() == crafted[0].read_bytes()
    # The same input with the real twin agrees: the failure above is the broken twin's.
    assert fd.main([f"{target}:{crafted[0]}", "--out", str(tmp_path / "out2")]) == 0


def test_a_replay_that_compares_nothing_fails(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    proc = _run(f"scan:{tmp_path / 'empty'}")
    assert proc.returncode == 1 and "no input compared" in proc.stderr, proc.stdout + proc.stderr


def test_it_refuses_to_run_without_the_native_kernels(tmp_path: Path) -> None:
    d, _ = _corpus_dir(tmp_path, "scan", seeds=2)
    proc = _run(f"scan:{d}", env={"QDRANT_GUARD_IMPLEMENTATION": "python"})
    assert proc.returncode == 2 and "selects the Python reference" in proc.stderr, proc.stdout + proc.stderr
