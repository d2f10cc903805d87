"""AES-256-CTR production stream: known answers, agreement with `cryptography` and the pure-Python
twin, the cipher knob, honest rng_id labelling, and fork/thread freshness under both ciphers."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from oracle import assert_same, both
from qdrant_guard import noise

NATIVE, PY = both("noise")
ROOT = Path(__file__).resolve().parent.parent
HAS_AESNI = " aes " in f" {Path('/proc/cpuinfo').read_text().replace(chr(10), ' ')} "
needs_aesni = pytest.mark.skipif(not HAS_AESNI, reason="this CPU has no AES-NI (AES is then never used)")

# NIST SP 800-38A, F.5.5 CTR-AES256.Encrypt.
SP800_KEY = bytes.fromhex("603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4")
SP800_CTR = bytes.fromhex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")
SP800_PT = bytes.fromhex(
    "6bc1bee22e409f96e93d7e117393172a" "ae2d8a571e03ac9c9eb76fac45af8e51"
    "30c81c46a35ce411e5fbc1191a0a52ef" "f69f2445df4f9b17ad2b417be66c3710"
)
SP800_CT = bytes.fromhex(
    "601ec313775789a5b7a7f504bbf3d228" "f443e3ca4d62b59aca84e990cacaf5c5"
    "2b0930daa23de94ce87017ba2d84988d" "dfc9c58db67aada613c2dd08457941a6"
)


def _reference(key: bytes, counter_block: bytes, nbytes: int) -> bytes:
    enc = Cipher(algorithms.AES(key), modes.CTR(counter_block)).encryptor()
    return enc.update(bytes(nbytes)) + enc.finalize()


def _mods():
    return [pytest.param(NATIVE, id="native", marks=needs_aesni), pytest.param(PY, id="python")]


# ------------------------------------------------------------------ known answers
@pytest.mark.parametrize("mod", _mods())
def test_sp800_38a_f55_ctr_aes256(mod):
    stream = mod.aes256ctr_stream(SP800_KEY, SP800_CTR, 64)
    assert bytes(a ^ b for a, b in zip(stream, SP800_PT)) == SP800_CT
    # Each block on its own, from its own counter block (the last one ends in ...ff02 + 1).
    for i in range(4):
        ctr = ((int.from_bytes(SP800_CTR, "big") + i) % 2**128).to_bytes(16, "big")
        assert bytes(a ^ b for a, b in zip(mod.aes256ctr_stream(SP800_KEY, ctr, 16), SP800_PT[16 * i:])) == \
            SP800_CT[16 * i: 16 * i + 16]


@pytest.mark.parametrize("mod", _mods())
def test_partial_and_empty_lengths(mod):
    full = mod.aes256ctr_stream(SP800_KEY, SP800_CTR, 64)
    for n in (0, 1, 15, 17, 63):
        assert mod.aes256ctr_stream(SP800_KEY, SP800_CTR, n) == full[:n]


# ------------------------------------------------------------------ agreement with cryptography
_CARRY_COUNTERS = [
    bytes(16),
    bytes(8) + (2**64 - 1).to_bytes(8, "big"),        # low half wraps on the 2nd block
    bytes(8) + (2**64 - 9).to_bytes(8, "big"),        # wraps inside an 8/16-block group
    bytes(8) + (2**64 - 300).to_bytes(8, "big"),      # wraps after several 16-block groups
    bytes(7) + b"\x01" + (2**64 - 17).to_bytes(8, "big"),
    (2**128 - 5).to_bytes(16, "big"),                 # the 128-bit counter wraps to zero
    bytes.fromhex("ffffffffffffffff") + (2**64 - 40).to_bytes(8, "big"),
]


@needs_aesni
@pytest.mark.parametrize("counter_block", _CARRY_COUNTERS, ids=lambda c: c.hex()[-8:])
@pytest.mark.parametrize("nbytes", [16, 16 * 7 + 3, 16 * 8, 16 * 16, 16 * 17 + 5, 4096, 16 * 300 + 1])
def test_counter_carry_matches_cryptography(counter_block, nbytes):
    key = bytes(range(100, 132))
    assert NATIVE.aes256ctr_stream(key, counter_block, nbytes) == _reference(key, counter_block, nbytes)


@needs_aesni
def test_random_keys_counters_lengths_match_cryptography():
    rng = random.Random(20261203)
    for _ in range(300):
        key = rng.randbytes(32)
        if rng.random() < 0.5:
            ctr = rng.randbytes(16)
        else:  # near a carry of the low 64 bits or of all 128
            hi = rng.choice([rng.getrandbits(64), 2**64 - 1])
            ctr = ((hi << 64) | (2**64 - rng.randrange(1, 600))).to_bytes(16, "big")
        nbytes = rng.choice([rng.randrange(0, 100), rng.randrange(0, 9000)])
        assert NATIVE.aes256ctr_stream(key, ctr, nbytes) == _reference(key, ctr, nbytes), (key.hex(), ctr.hex(), nbytes)


# ------------------------------------------------------------------ the pure-Python twin
@needs_aesni
@pytest.mark.parametrize("counter_block", _CARRY_COUNTERS[:3] + _CARRY_COUNTERS[5:6], ids=lambda c: c.hex()[-8:])
def test_twins_agree_across_counter_carry(counter_block):
    assert_same(NATIVE.aes256ctr_stream, PY.aes256ctr_stream, os.urandom(32), counter_block, 16 * 40 + 9)


@needs_aesni
def test_python_twin_matches_cryptography():
    key, ctr = bytes(range(32)), bytes(8) + (2**64 - 2).to_bytes(8, "big")
    assert PY.aes256ctr_stream(key, ctr, 100) == _reference(key, ctr, 100)


@needs_aesni
@pytest.mark.parametrize("args", [
    (bytes(31), bytes(16), 16), (bytes(32), bytes(15), 16), (bytes(32), bytes(16), -1),
    (bytes(32), bytes(16), (1 << 30) + 1), ("k" * 32, bytes(16), 16), (bytes(32), bytearray(16), 16),
    (bytes(32), bytes(16), 1.0), (bytes(32), bytes(16), True), (None, bytes(16), 16),
])
def test_twins_raise_the_same_errors(args):
    assert isinstance(assert_same(NATIVE.aes256ctr_stream, PY.aes256ctr_stream, *args), (TypeError, ValueError))


# ------------------------------------------------------------------ which cipher, and rng_id
def test_python_twin_reports_chacha20():
    assert PY.production_cipher() == PY.PRODUCTION_CIPHER == "chacha20"


def test_in_process_cipher_and_rng_id_agree():
    want = "aes256ctr" if HAS_AESNI and os.environ.get("QG_NOISE_CIPHER", "aes") in ("aes", "") else "chacha20"
    assert NATIVE.production_cipher() == NATIVE.PRODUCTION_CIPHER == want
    _, params = noise.privatize(np.ones(8, np.float32), mechanism="gaussian", epsilon=1.0, radius=1.0, delta=1e-6)
    assert params.rng_id == noise.RNG_PRODUCTION == {
        "aes256ctr": "aes256ctr-getrandom-v1", "chacha20": "chacha20-getrandom-v1"}[want]
    # Keyed and seeded releases are ChaCha20 whatever the production cipher.
    _, keyed = noise.privatize(np.ones(8), mechanism="gaussian", epsilon=1.0, radius=1.0, delta=1e-6, key=bytes(32))
    _, seeded = noise.privatize_seeded_for_tests(np.ones(8), mechanism="gaussian", epsilon=1.0, radius=1.0,
                                                 delta=1e-6, seed=1)
    assert keyed.rng_id == "chacha20-keyed-hmac-sha256-v1" and seeded.rng_id == "chacha20-seeded-TEST-ONLY-v2"


def test_check_release_accepts_both_production_ids_and_not_the_seeded_one():
    _, params = noise.privatize(np.ones(8), mechanism="gaussian", epsilon=1.0, radius=1.0, delta=1e-6)
    for rng_id in ("aes256ctr-getrandom-v1", "chacha20-getrandom-v1", "chacha20-keyed-hmac-sha256-v1"):
        assert noise.check_release(params.__class__(**{**params.__dict__, "rng_id": rng_id})) is None, rng_id
    bad = noise.check_release(params.__class__(**{**params.__dict__, "rng_id": "chacha20-seeded-TEST-ONLY-v2"}))
    assert bad is not None and "not a private generator" in bad


_PROBE = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import numpy as np
    from qdrant_guard import noise
_, p = noise.privatize(np.zeros(300, np.float32), mechanism="gaussian", epsilon=1.0, radius=1.0, delta=1e-6)
print(noise._k.production_cipher(), p.rng_id, noise.check_release(p))
for w in caught:
    print("WARNING", w.category.__name__, w.message)
"""


def _probe(cipher: str | None, impl: str = "native", **extra_env: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("QG_NOISE_CIPHER", "QG_NOISE_AES")}
    env["QDRANT_GUARD_IMPLEMENTATION"] = impl
    env.update(extra_env)
    if cipher is not None:
        env["QG_NOISE_CIPHER"] = cipher
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize("cipher,want", [
    (None, "aes256ctr"), ("", "aes256ctr"), ("aes", "aes256ctr"), ("chacha20", "chacha20"),
])
def test_cipher_knob_sets_the_stream_and_the_rng_id(cipher, want):
    if not HAS_AESNI:
        want = "chacha20"
    lines = _probe(cipher)
    rng_id = {"aes256ctr": "aes256ctr-getrandom-v1", "chacha20": "chacha20-getrandom-v1"}[want]
    assert lines[0] == f"{want} {rng_id} None"
    warned = [line for line in lines[1:] if "QG_NOISE_CIPHER" in line]
    if cipher == "aes" and not HAS_AESNI:  # asked for AES on a CPU without it: said so, not hidden
        assert warned and "no AES-NI" in warned[0], lines
    else:
        assert not warned, lines


@pytest.mark.parametrize("bad", ["AES", "chacha", "aes256ctr ", "none"])
def test_unknown_cipher_knob_warns_and_keeps_the_default(bad):
    lines = _probe(bad)
    default = "aes256ctr" if HAS_AESNI else "chacha20"
    assert lines[0].split()[0] == default
    assert any(line.startswith("WARNING RuntimeWarning QG_NOISE_CIPHER must be 'aes' or 'chacha20'")
               for line in lines[1:]), lines


@pytest.mark.parametrize("cipher", [None, "aes", "chacha20"])
def test_without_aesni_fresh_noise_falls_back_to_chacha20(cipher):
    # QG_NOISE_AES=off makes the kernel behave as on a CPU without AES-NI, so the fallback runs on
    # every machine: ChaCha20 releases, labelled so, and a warning only when AES was asked for.
    lines = _probe(cipher, QG_NOISE_AES="off")
    assert lines[0] == "chacha20 chacha20-getrandom-v1 None", lines
    warned = [line for line in lines[1:] if "QG_NOISE_CIPHER" in line]
    if cipher == "aes":
        assert len(warned) == 1 and "no AES-NI" in warned[0] and "using chacha20" in warned[0], lines
    else:
        assert not warned, lines


def test_without_aesni_the_aes_binding_refuses_instead_of_using_software_aes():
    code = ("from qdrant_guard import _noise\n"
            "print(_noise.AES_IMPLEMENTATION)\n"
            "try:\n    _noise.aes256ctr_stream(bytes(32), bytes(16), 16)\n"
            "except RuntimeError as e:\n    print('refused:', e)\n")
    env = {**os.environ, "QG_NOISE_AES": "off", "QDRANT_GUARD_IMPLEMENTATION": "native"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "none", "refused: this CPU has no AES-NI; software AES is deliberately not provided"]


def test_python_kernel_labels_its_releases_chacha20():
    lines = _probe(None, impl="python")
    assert lines[0] == "chacha20 chacha20-getrandom-v1 None"


# ------------------------------------------------------------------ fresh noise under each cipher
_FRESH_TESTS = [
    "tests/test_noise_stats.py::test_production_rng_distribution",
    "tests/test_noise_stats.py::test_fork_child_gets_fresh_stream",
    "tests/test_noise_stats.py::test_threads_have_distinct_streams",
    "tests/test_noise_threads.py::test_fresh_noise_over_threads_is_fresh_and_on_the_lattice",
    "tests/test_noise_aes.py::test_in_process_cipher_and_rng_id_agree",
]


@pytest.mark.parametrize("cipher", ["aes", "chacha20"])
def test_fork_threads_and_distribution_under_each_cipher(cipher):
    # The fork, thread and production-distribution tests of test_noise_stats.py, in a process whose
    # production stream is the given cipher (the knob is read once, at import).
    env = {**os.environ, "QG_NOISE_CIPHER": cipher, "QDRANT_GUARD_IMPLEMENTATION": "native"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *_FRESH_TESTS],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "5 passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-2000:]


_SIMD_PROBE = """
import sys
import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from qdrant_guard import _noise, noise
ok = True
for ctr in (bytes(16), (2**64 - 23).to_bytes(16, "big"), (2**128 - 3).to_bytes(16, "big")):
    key = bytes(range(7, 39))
    ref = Cipher(algorithms.AES(key), modes.CTR(ctr)).encryptor().update(bytes(16 * 300 + 5))
    ok &= _noise.aes256ctr_stream(key, ctr, 16 * 300 + 5) == ref
out, p = noise.privatize(np.zeros(5000, np.float32), mechanism="gaussian", epsilon=1.0, radius=1.0, delta=1e-6)
ok &= p.rng_id == "aes256ctr-getrandom-v1" and 0.9 < float(np.std(out)) / p.scale < 1.1
print(_noise.AES_IMPLEMENTATION, ok)
sys.exit(0 if ok else 1)
"""


@needs_aesni
@pytest.mark.parametrize("level,want", [("scalar", "aesni"), ("sse2", "aesni"), ("avx2", "vaes")])
def test_every_aes_path_matches_cryptography(level, want):
    # QG_NOISE_SIMD below avx2 keeps the 128-bit AES-NI path, so both paths run on a VAES CPU.
    if want == "vaes" and " vaes " not in f" {Path('/proc/cpuinfo').read_text().replace(chr(10), ' ')} ":
        want = "aesni"
    env = {k: v for k, v in os.environ.items() if k != "QG_NOISE_CIPHER"}
    env.update(QG_NOISE_SIMD=level, QDRANT_GUARD_IMPLEMENTATION="native")
    proc = subprocess.run([sys.executable, "-c", _SIMD_PROBE], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == [want, "True"]
