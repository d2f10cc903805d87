"""Fuzzing findings and corpus replay through the Python API (see fuzz/README.md).

Every input here either made a libFuzzer harness (fuzz/fuzz_*.c, ASan + UBSan) fail or exercises
an edge the harnesses found worth keeping. The committed seed corpora are replayed too, so an
input added to fuzz/corpus/<target>/ (e.g. a minimised crash) is checked here as well: no crash,
native and reference twins agree, and the API's invariants hold (findings sorted, non-overlapping
and inside the text; redaction leaves valid text).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import struct
from pathlib import Path

import numpy as np
import pytest

from qdrant_guard import _detect_py, _noise_py, _scan_py, implementation
from qdrant_guard.detect import find_sensitive, redact
from qdrant_guard.noise import privatize_seeded_for_tests

CORPUS = Path(__file__).resolve().parent.parent / "fuzz" / "corpus"
NATIVE = implementation() == "native"
needs_native = pytest.mark.skipif(not NATIVE, reason="compares the native kernel with the reference")

if NATIVE:
    from qdrant_guard import _detect, _noise, _scan


def _corpus(target: str) -> list[Path]:
    files = sorted((CORPUS / target).iterdir())
    assert files, f"empty seed corpus {CORPUS / target}"
    return files


def _make_corpus():
    path = CORPUS.parent / "make_corpus.py"
    spec = importlib.util.spec_from_file_location("make_corpus", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# fuzz/make_corpus.py once numbered the header byte of its last detect texts after the planted
# rows, so each new row of tests/data/planted_secrets.jsonl renamed them: rerunning it dropped
# committed seeds. Every file it writes must be committed, so a rerun changes nothing.
@pytest.mark.parametrize("target", ["scan", "detect", "noise", "chacha20", "aes"])
def test_committed_corpus_holds_every_seed_make_corpus_writes(target: str) -> None:
    committed = {p.name: p.read_bytes() for p in _corpus(target)}
    assert all(hashlib.sha1(data).hexdigest() == name for name, data in committed.items())
    written = {hashlib.sha1(data).hexdigest() for data in getattr(_make_corpus(), f"{target}_corpus")()}
    missing = sorted(written - committed.keys())
    assert not missing, f"run python fuzz/make_corpus.py and commit fuzz/corpus/{target}: {missing}"


def _as_str(data: bytes) -> str | None:
    """The str Python would pass for these bytes, or None if no str encodes to them."""
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


# ------------------------------------------------------------------------------------ detect
def _check_findings(text: str) -> None:
    found = find_sensitive(text)
    prev_end = 0
    for f in found:
        assert 0 <= f.start < f.end <= len(text), f
        assert f.start >= prev_end, f"overlap or unsorted at {f}"
        prev_end = f.end
    if NATIVE:
        assert _detect.find_spans(text) == _detect_py.find_spans(text)
    redacted = redact(text)
    # Redaction only removes text and inserts ASCII markers: it never creates a lone surrogate,
    # so text that encodes as UTF-8 still does after redaction.
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        redacted.encode("utf-8")


# Finding 1 (fuzz_detect, UBSan): qg_detect called qsort(NULL, 0, ...) whenever a text had no
# finding (native/detect.c resolve() and to_code_points()); fixed by returning early.
@pytest.mark.parametrize("text", ["", "a", "\x00", "plain words only", "caf\u00e9 \U0001F600",
                                  "\ud800 lone", "1234", "@", "://", "eyJ"])
def test_texts_without_findings(text: str) -> None:
    assert find_sensitive(text) == []
    assert redact(text) == text
    _check_findings(text)


@pytest.mark.parametrize("path", _corpus("detect"), ids=lambda p: p.name[:12])
def test_detect_corpus_replay(path: Path) -> None:
    text = _as_str(path.read_bytes()[1:])  # first byte: the harness's misalignment
    if text is None:
        pytest.skip("not a text Python can pass (invalid UTF-8)")
    _check_findings(text)
    _check_findings(text + "\x00" + text[::-1])


# -------------------------------------------------------------------------------------- scan
@functools.cache
def _fuzz_diff():
    path = Path(__file__).resolve().parent.parent / "scripts" / "fuzz_diff.py"
    spec = importlib.util.spec_from_file_location("fuzz_diff", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scan_rules(header: bytes) -> dict[str, object]:
    """The rules fuzz/fuzz_scan.c derives from its 4 header bytes (scripts/fuzz_diff.py decodes
    the harnesses' inputs for the fuzz pass's own replay: one decoder for both)."""
    return _fuzz_diff().scan_rules(header)


@needs_native
@pytest.mark.parametrize("path", _corpus("scan"), ids=lambda p: p.name[:12])
def test_scan_corpus_replay(path: Path) -> None:
    data = path.read_bytes()
    rules, payload = _scan_rules(data[:4]), data[4:]
    inputs: list[str | bytes] = [payload, payload + b"\xff\x00" + payload]
    text = _as_str(payload)
    if text is not None:
        inputs += [text, text + "\ud800" + text]
    for item in inputs:
        native = _scan.scan_query(item, **rules)
        assert native == _scan_py.scan_query(item, **rules)
        units = len(item)
        assert all(0 <= v.position < max(units, 1) for v in native.violations), native
        assert list(native.violations) == sorted(
            native.violations, key=lambda v: (v.position, v.kind, v.detail))


# ------------------------------------------------------------------------------------- noise
def _unaligned(values: np.ndarray) -> np.ndarray:
    raw = np.zeros(values.nbytes + 1, np.uint8)
    out = raw[1:].view(values.dtype).reshape(values.shape)
    out[...] = values
    assert not out.flags.aligned
    return out


# Finding 2 (UBSan, reproduced with a direct call): numpy arrays that are C-contiguous but not
# aligned (np.frombuffer at an odd offset, views of byte buffers) reach qg_noise_rows as a
# misaligned float*/double*, which is undefined behaviour in C (native/_noise.pyx checks dtype,
# byte order, ndim and contiguity, not alignment). x86-64 tolerates it today; a vectorised kernel
# may not, so the release must equal the release of an aligned copy.
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace_l2"])
def test_unaligned_input_releases_what_an_aligned_copy_does(mechanism: str, dtype: type) -> None:
    x = np.linspace(-2.0, 2.0, 5 * 17).reshape(5, 17).astype(dtype)
    kw = {"mechanism": mechanism, "epsilon": 1.0, "radius": 1.0, "clip_norm": 1.0, "seed": 5,
          "delta": 1e-6 if mechanism == "gaussian" else None}
    aligned, _ = privatize_seeded_for_tests(x, **kw)
    unaligned, _ = privatize_seeded_for_tests(_unaligned(x), **kw)
    np.testing.assert_array_equal(unaligned, aligned)


EXTREMES = [0.0, -0.0, 5e-324, -2.2250738585072014e-308, 1e-45, 1.0, 3.0e38, -1e300, 1.7e308]


@needs_native
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace_l2"])
@pytest.mark.parametrize("clip_norm", [None, 1.0, 1e300])
def test_noise_twins_agree_on_extreme_values(mechanism: str, dtype: type, clip_norm: float | None) -> None:
    with np.errstate(over="ignore"):
        rows = np.array([EXTREMES, EXTREMES[::-1], [5e-324] * len(EXTREMES)], dtype=np.float64).astype(dtype)
    for scale, step in [(1.0, 2.0**-10), (1e-300, 2.0**-1000), (1e300, 2.0**990)]:
        outcomes = []
        for kernel in (_noise, _noise_py):
            try:
                outcomes.append(kernel.noise_vectors(rows, mechanism, scale, step, clip_norm,
                                                     bytes(range(32)), None, bytes(12)))
            except Exception as exc:  # both twins must fail the same way
                outcomes.append((type(exc), str(exc)))
        native, reference = outcomes
        if isinstance(native, np.ndarray) and isinstance(reference, np.ndarray):
            np.testing.assert_array_equal(native, reference)
            assert np.isfinite(native).all()
        else:
            assert native == reference


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("position", [(0, 0), (2, 16)])
def test_nonfinite_input_is_refused_at_its_position(value: float, position: tuple[int, int]) -> None:
    x = np.zeros((3, 17))
    x[position] = value
    with pytest.raises(ValueError, match=rf"vectors\[{position[0]}\] contains NaN or Inf at index {position[1]};"):
        privatize_seeded_for_tests(x, mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=1.0,
                                   clip_norm=1.0, seed=1)


# Finding 3 (fuzz_noise, extreme lattice steps): when radius/epsilon is below about 2^-1014 the
# lattice step is below 2^-1024, 1/step overflows to inf, and snapping turns every output into
# NaN (native/noise.c snap() with inv_step = 1.0 / step; _noise_py._snap does the same). The
# release of an all-zero vector then fails as "overflows float64 ... values are too large".
# Fixed by refusing such parameters: privatize raises a ValueError naming radius and epsilon (no
# embedding noise is anywhere near that scale).
@pytest.mark.parametrize("radius", [1e-306, 1e-310])
def test_tiny_radius_is_refused_with_a_clear_error(radius: float) -> None:
    for mechanism, delta in (("laplace_l2", None), ("gaussian", 1e-6)):
        with pytest.raises(ValueError, match="too small to snap"):
            privatize_seeded_for_tests(np.zeros(4), mechanism=mechanism, epsilon=1.0, delta=delta,
                                       radius=radius, seed=1)


# Finding 4 (fuzz_noise in CI, 2026-12-04): the huge-value fix returned v unsnapped wherever
# |v * inv_step| >= 2^52. With a step below 2^-1024 (the raw kernel takes one; privatize refuses
# the scale) inv_step is inf and so is every q, so a tiny value such as -3.3e-320 was released
# off the lattice. The test is now on |v| >= 2^52 * step; such rows overflow and are refused, as
# before the fix, and a huge value with an ordinary step is still released as it is.
@needs_native
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace_l2"])
def test_a_step_below_2_to_minus_1024_never_releases_off_the_lattice(mechanism: str, dtype: type) -> None:
    step = 2.0 ** -1054
    rows = np.array([[-3.3e-320, 0.0, 1e-310, 5e-324], [1e-300, -2e-308, 0.0, 0.0]], dtype=np.float64).astype(dtype)
    for kernel in (_noise, _noise_py):
        try:
            out = kernel.noise_vectors(rows, mechanism, 2.0 ** -1040, step, None, bytes(range(32)), None, bytes(12))
        except ValueError as exc:
            assert "overflow" in str(exc).lower() or "finite" in str(exc).lower(), exc
            continue
        q = out.astype(np.float64) / step
        assert np.isfinite(out).all() and np.array_equal(q, np.round(q)), (kernel.__name__, out)
    big = np.array([[1e300, -1e300, 3.0, 0.0]])
    for kernel in (_noise, _noise_py):
        out = kernel.noise_vectors(big, "gaussian", 2.0 ** -20, 2.0 ** -30, None, bytes(range(32)), None, bytes(12))
        assert out[0, 0] == 1e300 and out[0, 1] == -1e300
        assert np.array_equal(out / 2.0 ** -30, np.round(out / 2.0 ** -30))


# ---------------------------------------------------------------------------------- chacha20
@needs_native
@pytest.mark.parametrize("path", _corpus("chacha20"), ids=lambda p: p.name[:12])
def test_chacha20_corpus_replay(path: Path) -> None:
    data = path.read_bytes()
    key, nonce = data[:32], data[32:44]
    counter = struct.unpack("<I", data[44:48])[0]
    if data[48] & 2:
        counter = 0xFFFFFFFF - (counter & 15)
    nbytes = 64 * ((data[48] >> 3) * 9 % 300 + (data[48] & 1)) + (data[48] & 63)
    native = _noise.chacha20_stream(key, nonce, counter, nbytes)
    assert native == _noise_py.chacha20_stream(key, nonce, counter, nbytes)
    assert len(native) == nbytes


@needs_native
@pytest.mark.parametrize("counter", [0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFF9, 0xFFFFFFF8, 0xFFFFFFF5])
def test_chacha20_simd_paths_carry_across_the_counter_wrap(counter: int) -> None:
    key, nonce = bytes(range(32)), bytes.fromhex("ffffffff0000004a00000000")
    native = _noise.chacha20_stream(key, nonce, counter, 64 * 20 + 3)
    assert native == _noise_py.chacha20_stream(key, nonce, counter, 64 * 20 + 3)
