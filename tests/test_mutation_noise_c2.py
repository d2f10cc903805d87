"""Inputs that kill the surviving mutants of the samplers and the ChaCha20 stream (mutation pass 8).

The Ziggurat's rare paths are reached by a word of probability 2**-23 or 2**-31, which no random
stream of a test's length draws. The nonces here were found by an exhaustive search over the first
keystream block (native/chacha20.c's block function, in a scratch C program: nonce = (n, 0, 0)
under KEY); each test checks its own precondition on the keystream from ``cryptography``, so a
change of key, nonce or table that lost the case fails loudly instead of passing emptily.
"""
from __future__ import annotations

import math
import struct

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from oracle import both

NATIVE, PY = both("noise")
KEY = bytes(range(32))


def _words(nonce: bytes, count: int) -> tuple[int, ...]:
    """The first ``count`` keystream words (block counter 0), from cryptography's ChaCha20."""
    enc = Cipher(algorithms.ChaCha20(KEY, bytes(4) + nonce), None).encryptor()
    return struct.unpack(f"<{count}I", enc.update(bytes(4 * count)))


def _fast_bound(i: int) -> int:
    """zig_k[i] of native/noise.c: the smallest 23-bit u with u * xs[i] >= X[i + 1]."""
    lo, hi = 0, 1 << 23
    while lo < hi:
        mid = (lo + hi) // 2
        if mid * PY._XS[i] >= PY._X[i + 1]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@pytest.mark.parametrize("n", [1379343, 2639963, 4540647, 8186617])
def test_a_first_word_exactly_at_its_layers_fast_bound_goes_on_to_the_wedge_test(n):
    # u == zig_k[i] gives z >= X[i + 1]: outside the layer's rectangle core, so the reference
    # draws y (two words) for the wedge test. A fast test of "u <= zig_k[i]" returns z at once
    # and every later sample of the stream comes from words shifted by two.
    nonce = struct.pack("<3I", n, 0, 0)
    (w,) = _words(nonce, 1)
    assert w >> 9 == _fast_bound(w & 255)
    # Fewer than 8 samples: the serial sampler at every SIMD level.
    assert NATIVE.normals(KEY, nonce, 4).tobytes() == PY.normals(KEY, nonce, 4).tobytes()
    assert NATIVE.gammas(KEY, nonce, 2.5, 3).tobytes() == PY.gammas(KEY, nonce, 2.5, 3).tobytes()


@pytest.mark.parametrize("n,j", [(321376182, 1), (447634360, 1), (696367349, 5), (388155010, 7)])
def test_a_zero_word_in_the_top_layer_goes_on_to_the_wedge_test(n, j):
    # Layer 255 ends at X[256] = 0, so its fast bound is 0 and u = 0 (z = 0, +0.0 or -0.0 by the
    # sign bit) fails "z < X[256]": the reference draws y before accepting it. The fast bound is
    # the smallest u with u * xs >= X[i + 1]; a ">" there makes it 1 and takes u = 0 at once.
    nonce = struct.pack("<3I", n, 0, 0)
    words = _words(nonce, j + 1)
    assert _fast_bound(255) == 0
    assert words[j] >> 9 == 0 and words[j] & 255 == 255
    # The words before it are samples of one word each, so word j starts a sample.
    assert all(w >> 9 < _fast_bound(w & 255) for w in words[:j])
    native, ref = NATIVE.normals(KEY, nonce, j + 3), PY.normals(KEY, nonce, j + 3)
    assert native.tobytes() == ref.tobytes()
    assert ref[j] == 0.0 and str(ref[j]) == ("-0.0" if words[j] & 256 else "0.0")



def test_the_layer_holding_the_inflection_point_is_decided_by_exp():
    # Layer 204 straddles z = 1, where the density turns from concave to convex, so neither the
    # concave nor the convex chord/tangent bounds hold on it (they miss by up to ~3e-8) and
    # wedge_test leaves it to exp(). Word 3 of this stream lands there with y between the density
    # and the convex-side tangent: exp() accepts it, the concave rules (a shape test of "!= 2")
    # reject it. Found by a search over nonce (n, 0, 0) for exactly that disagreement.
    nonce = struct.pack("<3I", 199209016, 0, 0)
    words = _words(nonce, 6)
    assert words[3] & 255 == 204 and PY._X[205] < 1.0 < PY._X[204]
    assert words[3] >> 9 >= _fast_bound(204)
    assert all(w >> 9 < _fast_bound(w & 255) for w in words[:3])
    z = (words[3] >> 9) * PY._XS[204]
    y = PY._F[204] + (((words[4] | words[5] << 32) >> 11) * 2.0**-53) * (PY._F[205] - PY._F[204])
    assert 0.0 < math.exp(-0.5 * z * z) - y < 1e-7  # accepted, by a margin only exp() resolves
    native, ref = NATIVE.normals(KEY, nonce, 5), PY.normals(KEY, nonce, 5)
    assert native.tobytes() == ref.tobytes()
    assert ref[3] == z


# Every SIMD level's ChaCha20 blocks against cryptography, with a nonce whose three words are all
# non-zero: every stream test before used a nonce ending in a zero word, so an AVX-512 block
# function that did not add the input state's last word (the nonce's third) back into the output
# gave the same bytes. Lengths take the 16-, 8- and 4-block paths and the single-block tail.
_STREAM_PROBE = """
import sys
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from qdrant_guard import _noise, _noise_py
key = bytes(range(100, 132))
bad = []
for nonce in (bytes.fromhex("0102030405060708090a0b0c"), bytes.fromhex("ffffffff000000017fffffff")):
    for counter in (0, 5, 0xFFFFFF00):
        for blocks in (1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64):
            nbytes = 64 * blocks - (blocks % 3)
            enc = Cipher(algorithms.ChaCha20(key, counter.to_bytes(4, "little") + nonce), None).encryptor()
            if _noise.chacha20_stream(key, nonce, counter, nbytes) != enc.update(bytes(nbytes)):
                bad.append((nonce.hex(), counter, blocks))
    # Across the 32-bit counter wrap (carried into the nonce's first word): against the twin.
    if _noise.chacha20_stream(key, nonce, 0xFFFFFFF3, 64 * 40) != _noise_py.chacha20_stream(key, nonce, 0xFFFFFFF3, 64 * 40):
        bad.append((nonce.hex(), "wrap"))
print(_noise.IMPLEMENTATION, bad)
sys.exit(1 if bad else 0)
"""


@pytest.mark.parametrize("level", ["scalar", "sse2", "avx2", "avx512"])
def test_every_simd_block_function_adds_back_every_input_word(level):
    import os
    import subprocess
    import sys

    env = {**os.environ, "QG_NOISE_SIMD": level}
    proc = subprocess.run([sys.executable, "-c", _STREAM_PROBE], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
