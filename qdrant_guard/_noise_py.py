"""Pure-Python reference of the noise kernel: the specification the native twin must match.

Everything here is deliberately plain. In the deterministic modes (``stream_key`` or ``row_keys``)
the native kernel must produce bit-identical output; tests/test_noise.py (the twin tests, every
SIMD level) and tests/test_fuzz_diff.py check that.

Randomness: ChaCha20 (RFC 8439) keystream, read as consecutive little-endian 32-bit words. The
block counter is 32-bit; on wrap-around it carries into the first nonce word (so a stream never
repeats a block). Word consumption order, shared by both twins:

* normal: one word ``w``: layer ``w & 255``, sign ``(w >> 8) & 1``, 23-bit uniform ``w >> 9``
  (256-layer Ziggurat). The tail and wedge tests draw extra 53-bit uniforms (two words each,
  low word first); a rejection restarts with a fresh word.
* gamma(shape) (Marsaglia-Tsang): one normal, then one 53-bit uniform, repeated until accepted.
* gaussian row: ``d`` normals, coordinate order.
* laplace_l2 row: ``d`` normals (the direction; redrawn if all are zero), then one gamma(``d``).

Clipping uses the squared norm summed in eight interleaved lanes (see ``_sum_squares``).

Fresh noise here (no ``stream_key`` or ``row_keys``) is ChaCha20 with a new 32-byte key from
``os.urandom`` per call (zero nonce; the key is not wiped from memory): :data:`PRODUCTION_CIPHER`
is ``"chacha20"``. The
native kernel's production stream is AES-256-CTR where the CPU has AES-NI; :func:`aes256ctr_stream`
is the reference of that keystream (slow: for tests on small sizes only).
"""
from __future__ import annotations

import math
import numbers
import os
import struct
from typing import Any

import numpy as np

from .errors import GuardArgumentTypeError, GuardArgumentValueError, InvalidVectorError

__all__ = [
    "PRODUCTION_CIPHER",
    "ZIGGURAT_LAYERS",
    "aes256ctr_stream",
    "chacha20_block",
    "chacha20_stream",
    "check_vectors",
    "dense_floats",
    "gammas",
    "fresh_noise_cached",
    "noise_vectors",
    "normals",
    "production_cipher",
    "unit_grid_nudge",
    "ziggurat_tables",
]

MECHANISMS = ("gaussian", "laplace_l2")
# Cipher of this twin's fresh noise; the native twin reports its own (AES-256-CTR or ChaCha20).
PRODUCTION_CIPHER = "chacha20"
ZIGGURAT_LAYERS = 256
_MASK = 0xFFFFFFFF
_TWO_M23 = 2.0**-23
_TWO_M53 = 2.0**-53
_ROUND_MAGIC = 6755399441055744.0  # 1.5 * 2**52: adding and subtracting it rounds half-to-even


# ---------------------------------------------------------------- ChaCha20 (RFC 8439, section 2.3)
def _rotl(v: int, c: int) -> int:
    return ((v << c) & _MASK) | (v >> (32 - c))


def _quarter(s: list[int], a: int, b: int, c: int, d: int) -> None:
    s[a] = (s[a] + s[b]) & _MASK
    s[d] = _rotl(s[d] ^ s[a], 16)
    s[c] = (s[c] + s[d]) & _MASK
    s[b] = _rotl(s[b] ^ s[c], 12)
    s[a] = (s[a] + s[b]) & _MASK
    s[d] = _rotl(s[d] ^ s[a], 8)
    s[c] = (s[c] + s[d]) & _MASK
    s[b] = _rotl(s[b] ^ s[c], 7)


def _block_words(key: tuple[int, ...], counter: int, nonce: tuple[int, ...]) -> list[int]:
    init = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574, *key, counter, *nonce]
    s = list(init)
    for _ in range(10):
        _quarter(s, 0, 4, 8, 12)
        _quarter(s, 1, 5, 9, 13)
        _quarter(s, 2, 6, 10, 14)
        _quarter(s, 3, 7, 11, 15)
        _quarter(s, 0, 5, 10, 15)
        _quarter(s, 1, 6, 11, 12)
        _quarter(s, 2, 7, 8, 13)
        _quarter(s, 3, 4, 9, 14)
    return [(x + y) & _MASK for x, y in zip(s, init)]


def _check_bytes(name: str, value: Any, size: int) -> bytes:
    if not isinstance(value, bytes):
        raise GuardArgumentTypeError(f"{name} must be bytes, not {type(value).__name__}")
    if len(value) != size:
        raise GuardArgumentValueError(f"{name} must be {size} bytes, got {len(value)}")
    return value


def _check_count(name: str, value: Any, limit: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise GuardArgumentTypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0 or value > limit:
        raise GuardArgumentValueError(f"{name} must be between 0 and {limit}, got {value}")
    return value


def chacha20_block(key: bytes, counter: int, nonce: bytes) -> bytes:
    """Return the 64-byte ChaCha20 block for ``key`` (32 bytes), ``counter`` (u32), ``nonce`` (12 bytes)."""
    _check_bytes("key", key, 32)
    _check_count("counter", counter, _MASK)
    _check_bytes("nonce", nonce, 12)
    words = _block_words(struct.unpack("<8I", key), counter, struct.unpack("<3I", nonce))
    return struct.pack("<16I", *words)


def chacha20_stream(key: bytes, nonce: bytes, counter: int, nbytes: int) -> bytes:
    """Return ``nbytes`` of ChaCha20 keystream starting at block ``counter`` (carrying into the nonce)."""
    _check_bytes("key", key, 32)
    _check_bytes("nonce", nonce, 12)
    _check_count("counter", counter, _MASK)
    _check_count("nbytes", nbytes, 1 << 30)
    stream = _Stream(key, nonce, counter)
    out = bytearray()
    while len(out) < nbytes:
        out += struct.pack("<16I", *stream.next_block())
    return bytes(out[:nbytes])


def production_cipher() -> str:
    """Return the cipher of fresh (OS-keyed) noise: ``"aes256ctr"`` or ``"chacha20"``.

    Native kernel: AES-256-CTR (AES-NI/VAES) where the CPU has AES-NI, else ChaCha20; the
    environment variable ``QG_NOISE_CIPHER=chacha20`` forces ChaCha20 (``aes``, unset or empty:
    the default). It is read once, at import; an unknown value, or ``aes`` on a CPU without AES-NI,
    keeps the default or ChaCha20 with a ``RuntimeWarning``. This pure-Python twin always uses
    ChaCha20. Keyed and seeded noise are ChaCha20 in both twins.
    """
    return PRODUCTION_CIPHER


# ---------------------------------------------------------------- AES-256 (FIPS 197), CTR (SP 800-38A)
# Reference only: Python table lookups are not constant time, and nothing in a release uses this.
def _xtime(a: int) -> int:
    return ((a << 1) ^ 0x1B) & 0xFF if a & 0x80 else a << 1


def _gmul(a: int, b: int) -> int:
    out = 0
    while b:
        if b & 1:
            out ^= a
        a = _xtime(a)
        b >>= 1
    return out


def _make_sbox() -> list[int]:
    sbox = []
    for x in range(256):
        inv = next((y for y in range(1, 256) if _gmul(x, y) == 1), 0)  # GF(2^8) inverse, 0 -> 0
        b = inv
        for shift in range(1, 5):
            b ^= ((inv << shift) | (inv >> (8 - shift))) & 0xFF
        sbox.append(b ^ 0x63)
    return sbox


_SBOX = _make_sbox()


def _aes256_round_keys(key: bytes) -> list[list[int]]:
    words = [list(key[4 * i: 4 * i + 4]) for i in range(8)]
    rcon = 1
    for i in range(8, 60):
        t = list(words[i - 1])
        if i % 8 == 0:
            t = [_SBOX[b] for b in t[1:] + t[:1]]
            t[0] ^= rcon
            rcon = _xtime(rcon)
        elif i % 8 == 4:
            t = [_SBOX[b] for b in t]
        words.append([a ^ b for a, b in zip(words[i - 8], t)])
    return [sum(words[4 * r: 4 * r + 4], []) for r in range(15)]


def _aes256_encrypt_block(round_keys: list[list[int]], block: bytes) -> bytes:
    s = [a ^ b for a, b in zip(block, round_keys[0])]  # column-major: s[4*c + r]
    for rnd in range(1, 15):
        s = [_SBOX[b] for b in s]
        s = [s[4 * ((c + r) % 4) + r] for c in range(4) for r in range(4)]  # ShiftRows
        if rnd < 14:
            mixed = []
            for c in range(4):
                a0, a1, a2, a3 = s[4 * c: 4 * c + 4]
                mixed += [
                    _gmul(a0, 2) ^ _gmul(a1, 3) ^ a2 ^ a3,
                    a0 ^ _gmul(a1, 2) ^ _gmul(a2, 3) ^ a3,
                    a0 ^ a1 ^ _gmul(a2, 2) ^ _gmul(a3, 3),
                    _gmul(a0, 3) ^ a1 ^ a2 ^ _gmul(a3, 2),
                ]
            s = mixed
        s = [a ^ b for a, b in zip(s, round_keys[rnd])]
    return bytes(s)


def aes256ctr_stream(key: bytes, counter_block: bytes, nbytes: int) -> bytes:
    """Return ``nbytes`` of AES-256-CTR keystream: AES-256(``key``, counter), counter += 1, ...

    ``counter_block`` is the 16-byte initial counter block, incremented as one big-endian 128-bit
    integer (carrying through all 16 bytes, wrapping modulo 2**128), as in NIST SP 800-38A and
    ``cryptography``'s ``modes.CTR``. The native production stream reads this keystream as
    little-endian 32-bit words.
    """
    _check_bytes("key", key, 32)
    _check_bytes("counter_block", counter_block, 16)
    _check_count("nbytes", nbytes, 1 << 30)
    round_keys = _aes256_round_keys(key)
    counter = int.from_bytes(counter_block, "big")
    out = bytearray()
    while len(out) < nbytes:
        out += _aes256_encrypt_block(round_keys, counter.to_bytes(16, "big"))
        counter = (counter + 1) & ((1 << 128) - 1)
    return bytes(out[:nbytes])


class _Stream:
    """Consecutive 32-bit words of one ChaCha20 keystream."""

    def __init__(self, key: bytes, nonce: bytes, counter: int = 0) -> None:
        self.key = struct.unpack("<8I", key)
        self.nonce = list(struct.unpack("<3I", nonce))
        self.counter = counter
        self.words: list[int] = []
        self.pos = 0

    def next_block(self) -> list[int]:
        block = _block_words(self.key, self.counter, tuple(self.nonce))
        self.counter = (self.counter + 1) & _MASK
        if self.counter == 0:
            self.nonce[0] = (self.nonce[0] + 1) & _MASK
        return block

    def u32(self) -> int:
        if self.pos == len(self.words):
            self.words = self.next_block()
            self.pos = 0
        self.pos += 1
        return self.words[self.pos - 1]

    def uniform(self) -> float:
        """53-bit uniform in [0, 1)."""
        lo = self.u32()
        hi = self.u32()
        return ((lo | (hi << 32)) >> 11) * _TWO_M53

    def uniform_open0(self) -> float:
        """53-bit uniform in (0, 1], safe for log()."""
        lo = self.u32()
        hi = self.u32()
        return (((lo | (hi << 32)) >> 11) + 1) * _TWO_M53


# ---------------------------------------------------------------- Ziggurat (Marsaglia & Tsang 2000)
def _density(x: float) -> float:
    return math.exp(-0.5 * x * x)


def _layers(r: float, n: int) -> tuple[float, list[float]]:
    v = r * _density(r) + math.sqrt(math.pi / 2.0) * math.erfc(r / math.sqrt(2.0))
    xs = [v / _density(r), r]
    for _ in range(2, n):
        y = _density(xs[-1]) + v / xs[-1]
        if y >= 1.0:
            return v, xs
        xs.append(math.sqrt(-2.0 * math.log(y)))
    return v, xs


def ziggurat_tables(n: int = ZIGGURAT_LAYERS) -> tuple[float, list[float], list[float]]:
    """Return ``(r, X, F)`` of an ``n``-layer Ziggurat for the unnormalised density exp(-x²/2).

    ``X[0] = v/f(r)`` (base strip incl. tail), ``X[1] = r``, ``X[n] = 0``; ``F[i] = f(X[i])``,
    ``F[n] = 1``. ``r`` is found by bisection so the top strip closes at density 1 exactly enough
    (every layer has the same area ``v``). native/gen_tables.py writes these into a C header.
    """
    lo, hi = 2.0, 5.0
    for _ in range(200):
        r = 0.5 * (lo + hi)
        v, xs = _layers(r, n)
        # Too small an r makes layers too thick: they reach density 1 before layer n-1.
        if len(xs) < n or _density(xs[-1]) + v / xs[-1] > 1.0:
            lo = r
        else:
            hi = r
        if hi - lo <= 0.0:
            break
    r = hi
    _, xs = _layers(r, n)
    xs = xs + [0.0]
    fs = [_density(x) for x in xs[:-1]] + [1.0]
    return r, xs, fs


_R, _X, _F = ziggurat_tables()
_XS = [x * _TWO_M23 for x in _X]  # exact: scaling by a power of two


def _normal(s: _Stream) -> float:
    while True:
        w = s.u32()
        i = w & 255
        z = (w >> 9) * _XS[i]
        if z < _X[i + 1]:
            return -z if (w >> 8) & 1 else z
        if i == 0:
            while True:
                a = -math.log(s.uniform_open0()) / _R
                b = -math.log(s.uniform_open0())
                if b + b > a * a:
                    z = _R + a
                    return -z if (w >> 8) & 1 else z
        y = _F[i] + s.uniform() * (_F[i + 1] - _F[i])
        if y < _density(z):
            return -z if (w >> 8) & 1 else z


def _gamma(s: _Stream, shape: float) -> float:
    dd = shape - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * dd)
    while True:
        x = _normal(s)
        v = 1.0 + c * x
        if v <= 0.0:
            continue
        v = v * v * v
        u = s.uniform_open0()
        x2 = x * x
        if u < 1.0 - 0.0331 * (x2 * x2):
            return dd * v
        if math.log(u) < 0.5 * x2 + dd * (1.0 - v + math.log(v)):
            return dd * v


def normals(stream_key: bytes, nonce: bytes, count: int) -> np.ndarray:
    """Return ``count`` standard normal samples from the ChaCha20 stream (``stream_key``, ``nonce``)."""
    _check_bytes("stream_key", stream_key, 32)
    _check_bytes("nonce", nonce, 12)
    _check_count("count", count, 1 << 40)
    s = _Stream(stream_key, nonce)
    return np.array([_normal(s) for _ in range(count)], dtype=np.float64)


def gammas(stream_key: bytes, nonce: bytes, shape: float, count: int) -> np.ndarray:
    """Return ``count`` Gamma(``shape``, scale 1) samples (``shape`` >= 1) from the ChaCha20 stream."""
    _check_bytes("stream_key", stream_key, 32)
    _check_bytes("nonce", nonce, 12)
    shape = _check_real("shape", shape)
    if shape < 1.0:
        raise GuardArgumentValueError(f"shape must be >= 1, got {shape!r}")
    _check_count("count", count, 1 << 40)
    s = _Stream(stream_key, nonce)
    return np.array([_gamma(s, shape) for _ in range(count)], dtype=np.float64)


# ---------------------------------------------------------------- argument checks
def _check_real(name: str, value: Any) -> float:
    if type(value) is not float and (not isinstance(value, numbers.Real) or isinstance(value, bool)):
        raise GuardArgumentTypeError(f"{name} must be a real number, not {type(value).__name__}")
    out = float(value)
    if not (0.0 < out < math.inf):
        raise GuardArgumentValueError(f"{name} must be a finite number > 0, got {value!r}")
    return out


def check_vectors(vectors: Any) -> int:
    """Validate the container of ``vectors`` and return its dimension ``d``.

    Raises:
        TypeError: ``vectors`` is not a numpy array.
        InvalidVectorError: wrong dtype, wrong number of dimensions, or empty.
    """
    if not isinstance(vectors, np.ndarray):
        raise GuardArgumentTypeError(
            f"vectors must be a numpy.ndarray of float32 or float64, not {type(vectors).__name__}; "
            "convert with np.asarray(vectors, dtype=np.float32)"
        )
    if vectors.dtype != np.float32 and vectors.dtype != np.float64:
        raise InvalidVectorError(
            f"vectors must have dtype float32 or float64, not {vectors.dtype}; "
            "convert with vectors.astype(np.float32)"
        )
    if vectors.ndim != 1 and vectors.ndim != 2:
        raise InvalidVectorError(
            f"vectors must be one vector of shape (d,) or a batch of shape (n, d), got shape {vectors.shape}"
        )
    if vectors.size == 0:
        raise InvalidVectorError(f"vectors must not be empty, got shape {vectors.shape}")
    return int(vectors.shape[-1])


def _check_noise_args(
    vectors: Any, mechanism: Any, scale: Any, step: Any, clip_norm: Any,
    stream_key: Any, row_keys: Any, nonce: Any,
) -> tuple[int, int, float, float, float]:
    dim = check_vectors(vectors)
    rows = 1 if vectors.ndim == 1 else int(vectors.shape[0])
    if mechanism != "gaussian" and mechanism != "laplace_l2":
        raise GuardArgumentValueError(f"mechanism must be 'gaussian' or 'laplace_l2', not {mechanism!r}")
    scale_f = _check_real("scale", scale)
    step_f = _check_real("step", step)
    if math.frexp(step_f)[0] != 0.5:
        raise GuardArgumentValueError(f"step must be a power of two, got {step!r}")
    clip_f = 0.0 if clip_norm is None else _check_real("clip_norm", clip_norm)
    if stream_key is not None:
        _check_bytes("stream_key", stream_key, 32)
    if row_keys is not None:
        if stream_key is not None:
            raise GuardArgumentValueError("pass stream_key or row_keys, not both")
        _check_bytes("row_keys", row_keys, 32 * rows)
    _check_bytes("nonce", nonce, 12)
    return rows, dim, scale_f, step_f, clip_f


# Shared with the native binding so both twins word their errors identically.
def _nonfinite_error(row: int, col: int) -> InvalidVectorError:
    return InvalidVectorError(
        f"vectors[{row}] contains NaN or Inf at index {col}; only finite values can be noised"
    )


def _clip_overflow_error(row: int) -> InvalidVectorError:
    return InvalidVectorError(
        f"vectors[{row}] is too large to clip (its squared L2 norm overflows float64)"
    )


def _output_overflow_error(row: int, col: int, dtype: Any) -> InvalidVectorError:
    return InvalidVectorError(
        f"vectors[{row}] overflows {dtype} after noising at index {col}; the values are too large"
    )


_TINY = 2.0 ** -511  # see noise_vectors: smaller coordinates are read as 0.0


def _sum_squares(row: list[float]) -> float:
    # Eight interleaved partial sums (coordinate j in lane j % 8), combined in a fixed order, so
    # the native twin can add eight lanes at once and still get the same bits.
    lanes = [0.0] * 8
    for j, v in enumerate(row):
        lanes[j & 7] += v * v
    t = [lanes[k] + lanes[k + 4] for k in range(4)]
    return (t[0] + t[2]) + (t[1] + t[3])


def _snap(v: float, inv_step: float, step: float) -> float:
    if abs(v) >= 4503599627370496.0 * step:
        # |v| >= 2**52 * step: v's float spacing is step or coarser, so v is already a multiple of
        # step. rint(v * inv_step) * step gives v back, but v * inv_step can overflow (a huge v with
        # a tiny step), which made a finite, on-lattice release fail as an overflow. Tested on v,
        # not q: below a step of 2**-1024 inv_step is inf, and so is every q.
        return v
    q = v * inv_step
    if abs(q) < 2251799813685248.0:  # 2**51: the magic-constant rounding is exact below this
        q = (q + _ROUND_MAGIC) - _ROUND_MAGIC
    elif math.isfinite(q):
        q = float(round(q))
    return q * step  # an inf or NaN q (a step below 2**-1024, a NaN v) gives a non-finite output


def noise_vectors(
    vectors: np.ndarray,
    mechanism: str,
    scale: float,
    step: float,
    clip_norm: float | None,
    stream_key: bytes | None,
    row_keys: bytes | None,
    nonce: bytes,
) -> np.ndarray:
    """Clip, add noise and snap every row; return a new C-contiguous array of the same shape and dtype.

    Args:
        vectors: one vector ``(d,)`` or a batch ``(n, d)``, float32 or float64, any strides.
        mechanism: ``"gaussian"`` (N(0, scale²) per coordinate) or ``"laplace_l2"`` (uniform
            direction, norm ~ Gamma(d, scale)).
        scale: sigma or the Gamma scale.
        step: lattice step (a power of two); outputs are multiples of it.
        clip_norm: clip each row to this L2 norm first; ``None`` for no clipping.
        stream_key: 32-byte key of one stream for the whole batch (seeded mode), or ``None``.
        row_keys: ``32 * n`` bytes, one ChaCha20 key per row (keyed mode), or ``None``.
            With neither key the noise is fresh (key from the OS).
        nonce: 12-byte ChaCha20 nonce used with ``stream_key``/``row_keys``.

    Raises:
        TypeError, ValueError: bad arguments.
        InvalidVectorError: bad vector content (NaN/Inf, overflow).
    """
    rows, dim, scale_f, step_f, clip_f = _check_noise_args(
        vectors, mechanism, scale, step, clip_norm, stream_key, row_keys, nonce
    )
    x = vectors.reshape(rows, dim)
    out = np.empty((rows, dim), dtype=np.float64)
    inv_step = 1.0 / step_f
    shared = None
    if row_keys is None:
        shared = _Stream(stream_key if stream_key is not None else os.urandom(32), nonce)
    for i in range(rows):
        row = [float(v) for v in x[i]]
        for j, v in enumerate(row):
            if not math.isfinite(v):
                raise _nonfinite_error(i, j)
        # Read coordinates below 2**-511 as 0.0, as the native kernel does so that subnormal
        # arithmetic (slow on some CPUs) cannot make its time depend on the input. No float32
        # is that small but 0.
        row = [v if abs(v) >= _TINY else 0.0 for v in row]
        if clip_f > 0.0:
            ss = _sum_squares(row)
            if ss == math.inf:
                raise _clip_overflow_error(i)
            norm = math.sqrt(ss)
            if norm > clip_f:
                factor = clip_f / norm
                row = [v * factor for v in row]
        s = shared if shared is not None else _Stream((row_keys or b"")[32 * i: 32 * i + 32], nonce)
        if mechanism == "gaussian":
            noise = [_normal(s) * scale_f for _ in range(dim)]
        else:
            while True:
                g = [_normal(s) for _ in range(dim)]
                gs = 0.0
                for v in g:
                    gs += v * v
                if gs > 0.0:
                    break
            coef = (_gamma(s, float(dim)) * scale_f) / math.sqrt(gs)
            noise = [v * coef for v in g]
        for j in range(dim):
            out[i, j] = _snap(row[j] + noise[j], inv_step, step_f)
        with np.errstate(over="ignore"):
            released = out[i].astype(vectors.dtype)
        bad = np.flatnonzero(~np.isfinite(released))
        if bad.size:
            raise _output_overflow_error(i, int(bad[0]), vectors.dtype)
    with np.errstate(over="ignore"):
        return out.astype(vectors.dtype).reshape(vectors.shape)


def fresh_noise_cached(
    vectors: Any, cache: Any, mechanism: Any, epsilon: Any, radius: Any, delta: Any, clip_norm: Any,
) -> tuple[np.ndarray, Any] | None:
    """Fresh (OS-keyed) noise with parameters from ``cache``, or ``None`` to take the checked path.

    The production fast path of :func:`qdrant_guard.noise.privatize`. ``cache`` maps
    ``(mechanism, epsilon, radius, delta, clip_norm, d, dtype name)`` to ``(params, scale, step)``
    and is filled by the caller after its full argument checks, only for a ``str`` mechanism and
    ``float`` (or ``None``) numbers; lookups apply the same rule, so ``True`` never stands in for
    ``1.0``. Returns ``(noised, params)`` on a hit, ``None`` on a miss or for anything unusual
    (the caller then validates and reports errors).
    """
    if not (
        type(vectors) is np.ndarray
        and vectors.dtype.isnative
        and vectors.dtype.type in (np.float32, np.float64)
        and vectors.ndim in (1, 2)
        and vectors.size > 0
        and type(cache) is dict
        and type(mechanism) is str
        and type(epsilon) is float
        and type(radius) is float
        and (delta is None or type(delta) is float)
        and (clip_norm is None or type(clip_norm) is float)
    ):
        return None
    entry = cache.get((mechanism, epsilon, radius, delta, clip_norm, vectors.shape[-1], vectors.dtype.name))
    if entry is None:
        return None
    params, scale, step = entry
    return noise_vectors(vectors, mechanism, scale, step, clip_norm, None, None, bytes(12)), params


def unit_grid_nudge(k: np.ndarray, residual: np.ndarray, order: np.ndarray, shift: int, tol: float,
                    max_passes: int) -> None:
    """The Cosine stored form's norm correction (qdrant_guard.storedform._unit_grid_rows), in place.

    ``k``: n x d grid integers held as exact float64 values; ``residual``: per row 2^40 - sum(k^2)
    (updated); ``order``: n x d int32/int64 sort keys ``(2^20 - |k_j|) << shift | j`` in visiting
    order (their low ``shift`` bits name the coordinate). Each row, for at most ``max_passes``
    passes while |residual| > ``tol``, visits its coordinates in that order, with a = |k_j| (in
    the first pass read back from the key as ``2^20 - (key >> shift)``); where a != 0 and
    |residual| > max(a, tol), the residual changes by -(copysign(2a, residual) + 1) and k_j by
    sign(residual) * sign(k_j); a pass ends at the first position where the row takes no step
    and |residual| <= ``tol``. All values are integers far below 2^53, so float64 holds each step
    exactly.

    Raises:
        ValueError: a key's low ``shift`` bits name a coordinate outside the row (nothing is
            changed).
    """
    mask = (1 << shift) - 1
    if k.shape[1] and any((key & mask) >= k.shape[1] for row in order for key in row.tolist()):
        raise ValueError(order_error(k.shape[1], shift))
    for i in range(k.shape[0]):
        row = k[i]
        r = float(residual[i])
        for n_pass in range(max_passes):
            if not abs(r) > tol:
                break
            for key in order[i].tolist():
                j = key & mask
                c = float(row[j])
                a = abs(c) if n_pass else float((1 << 20) - (key >> shift))
                if a != 0.0 and abs(r) > max(a, tol):
                    s = 1.0 if r > 0.0 else -1.0
                    r = r - math.copysign(2.0 * a, r) - 1.0
                    row[j] = c + s * (1.0 if c > 0.0 else -1.0 if c < 0.0 else 0.0)
                elif abs(r) <= tol:
                    break
        residual[i] = r


def dense_floats(value: Any) -> tuple[np.ndarray, bool] | None:
    """``(np.asarray(value), whether every value is storable)`` when ``value`` is a non-empty list
    whose items are all exactly ``float`` (no subclass), else None. For such a list
    ``np.asarray`` gives a new 1-D float64 array of the same doubles. Storable: finite and within
    the float32 range Qdrant stores (``|x| <= float32 max``)."""
    if type(value) is not list or not value or not all(type(x) is float for x in value):
        return None
    out = np.array(value, dtype=np.float64)
    return out, bool((np.abs(out) <= float(np.finfo(np.float32).max)).all())


def order_error(dim: int, shift: int) -> str:
    """The error text of :func:`unit_grid_nudge` for an order whose keys leave the row."""
    return (f"unit_grid_nudge(): every key's low {shift} bits must name a coordinate below the row "
            f"length {dim}; build the order as storedform._unit_grid_rows does")
