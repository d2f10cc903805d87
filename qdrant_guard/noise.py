"""Differentially private noise for embeddings: calibration, lattice snapping, keyed release.

The sampling kernel is native (``qdrant_guard._noise``) unless ``QDRANT_GUARD_IMPLEMENTATION=python``
selects the pure-Python reference (``qdrant_guard._noise_py``); there is no silent fallback.

Mechanisms:

* ``"gaussian"``: the analytic Gaussian mechanism (Balle & Wang, ICML 2018), sigma per coordinate
  calibrated for (epsilon, delta) at L2 sensitivity Δ = ``radius`` + sqrt(d)·Λ (Λ below).
* ``"laplace_l2"``: multivariate Laplace in L2 norm, density ∝ exp(-ε_u‖z‖) with
  ε_u = epsilon/Δ, Δ as above: a uniformly random direction times a Gamma(d, 1/ε_u) norm. This is
  metric DP: outputs for inputs x, x' differ in log-likelihood by at most ε_u·‖x - x'‖, so by at
  most ``epsilon`` at distance ``radius`` (< Δ).

Outputs are snapped to multiples of a power of two Λ = 2^floor(log2(scale₀/1024)) (Mironov 2012:
a lattice hides the floating-point artefacts of the sampler), where scale₀ is the scale for the
nominal sensitivity ``radius``. The calibration is conservative: it uses sensitivity
``radius + sqrt(d)·Λ``, the largest L2 displacement rounding can cause between two neighbours.

Float64 coordinates below 2^-511 in magnitude (subnormals, and normals whose square underflows)
are read as 0.0 by both kernels, before clipping: arithmetic on them takes microcode assists on
some CPUs, which would make a release's time depend on the input. The guarantee is for the
vectors as read; two float64 inputs within L2 distance r are within r + 2·sqrt(d)·2^-511 as read.
Float32 inputs are read exactly (no float32 but 0 is that small).

Randomness for fresh noise (``key=None``) comes from a per-thread stream keyed from getrandom(2)
and re-keyed in a forked child, so parent and child never share keystream. Its cipher is
AES-256 in CTR mode using the AES-NI instructions (VAES where available) on a CPU that has them,
else ChaCha20 (RFC 8439); ``QG_NOISE_CIPHER=chacha20`` in the environment forces ChaCha20 (read
once, when the kernel is imported; ``aes``, unset or empty: the default; another value, or ``aes``
without AES-NI, keeps the default or ChaCha20 with a ``RuntimeWarning``). There is no software AES.
Each 4 KiB refill of the stream takes the first 32 bytes of its keystream as the next key (never
output) and overwrites the old key (fast key erasure), so a later read of the process memory does not reveal the noise drawn from
earlier refills; it does not protect against a read that sees the current key or the current
buffer (the keystream of noise drawn since the last refill and of noise still to be drawn), nor
the released or input vectors themselves. The release's ``rng_id`` names the cipher used:
``"aes256ctr-getrandom-v1"`` or ``"chacha20-getrandom-v1"`` (the pure-Python kernel, selected with
``QDRANT_GUARD_IMPLEMENTATION=python``, uses ChaCha20 keyed from ``os.urandom``). Keyed noise
(``key=...``) is ChaCha20 keyed per row by HMAC-SHA256, and the TEST-ONLY seeded noise ChaCha20,
whatever the production cipher. The keystream is turned into normals by a 256-layer Ziggurat with
23-bit uniform resolution and into Gamma norms by Marsaglia-Tsang. As for any implementation, the
guarantee is stated for the ideal continuous distributions these samplers approximate.
"""
from __future__ import annotations

import math
import numbers
from functools import lru_cache
from typing import Any, Callable

import numpy as np
from cryptography.hazmat.primitives import hashes, hmac

from ._impl import load_kernel
from .errors import GuardArgumentTypeError, GuardArgumentValueError, InvalidVectorError
from .noise_params import DTYPES, MECHANISMS, NoiseParams, guarantee_sentence

__all__ = [
    "MECHANISM_VERSION",
    "calibrate_gaussian_sigma",
    "check_release",
    "clip_l2",
    "lattice_step",
    "privatize",
    "privatize_seeded_for_tests",
    "query_noise_key",
    "snap_to_lattice",
]

_k = load_kernel("_noise", "_noise_py")

# 2: the clipping norm is summed in eight interleaved lanes (see _noise_py._sum_squares).
# 3: normals from a 256-layer Ziggurat (8-bit layer, 23-bit uniform) instead of 128 layers.
MECHANISM_VERSION = "3"
# Versions whose releases share this calibration (sigma/scale and lattice step): they differ only
# in how the sampler consumes the keystream, so their receipts are checked like the current one's.
CALIBRATED_VERSIONS = ("1", "2", "3")
LATTICE_DIVISOR = 1024.0
RNG_PRODUCTION_CHACHA20 = "chacha20-getrandom-v1"
RNG_PRODUCTION_AES = "aes256ctr-getrandom-v1"
# The id of this process's fresh noise: the kernel's production cipher, chosen once at its import.
RNG_PRODUCTION = {"aes256ctr": RNG_PRODUCTION_AES, "chacha20": RNG_PRODUCTION_CHACHA20}[_k.production_cipher()]
RNG_KEYED = "chacha20-keyed-hmac-sha256-v1"
RNG_SEEDED = "chacha20-seeded-TEST-ONLY-v2"
# Generators whose releases carry the stated guarantee; RNG_SEEDED is deliberately absent.
PRIVATE_RNG_IDS = (RNG_PRODUCTION_CHACHA20, RNG_PRODUCTION_AES, RNG_KEYED)
_QUERY_KEY_LABEL = b"qdrant-guard query noise key v1"


# ---------------------------------------------------------------- calibration
def _phi(x: float) -> float:
    # erfc keeps full relative precision in the lower tail, where 1 + erf(x) would cancel.
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


_SQRT_2PI = math.sqrt(2.0 * math.pi)
# 8-point Gauss-Legendre nodes and weights on [-1, 1].
_GAUSS_LEGENDRE = tuple(zip(*(v.tolist() for v in np.polynomial.legendre.leggauss(8))))


def _mills_tail(t: float) -> float:
    # J(t) = 1/(t + 2/(t + 3/(t + ...))) for t >= 4, evaluated backwards (Laplace's continued
    # fraction of the Mills ratio M(t) = 1/(t + J(t))); the term count gives float64 precision.
    j = 0.0
    for k in range(40 + int(800.0 / (t * t)), 1, -1):
        j = k / (t + j)
    return 1.0 / (t + j)


def _mills(t: float) -> float:
    """M(t) = (1 − Φ(t)) / φ(t), without underflow for large t."""
    if t >= 4.0:
        return 1.0 / (t + _mills_tail(t))
    return 0.5 * math.erfc(t / math.sqrt(2.0)) * _SQRT_2PI * math.exp(0.5 * t * t)


def _mills_slope(t: float) -> float:
    """−M'(t) = 1 − t·M(t) > 0, without the cancellation of that difference for large t."""
    if t >= 4.0:
        j = _mills_tail(t)
        return j / (t + j)
    return 1.0 - t * _mills(t)


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """Return the smallest delta the Gaussian mechanism with ``sigma`` satisfies at (epsilon, sensitivity).

    Balle & Wang (2018), Theorem 8: δ(σ) = Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ). Evaluated in
    float64 to within a relative 5e-11 of the exact value wherever that is above 1e-290 (checked
    against a 60-digit evaluation in tests/test_review_dp.py).
    """
    a = 0.5 * (sensitivity / sigma)  # not sensitivity / (2 sigma): 2 sigma overflows at sigma > 2^1023
    b = epsilon * sigma / sensitivity
    first = _phi(a - b)
    lower = _phi(-a - b)
    if lower > 1e-290:
        # e^ε Φ(·) in log space so a large epsilon does not overflow before the tiny Φ cancels it.
        second = math.exp(epsilon + math.log(lower))
    else:
        # Φ(−a−b) underflows (large epsilon): e^ε φ(a+b) = φ(b−a) exactly, since ε = 2ab, so
        # e^ε Φ(−a−b) = φ(b−a)·M(a+b).
        second = math.exp(-0.5 * (b - a) ** 2) / _SQRT_2PI * _mills(a + b)
    out = first - second
    if first < 1e-20 and b - a >= 4.0:
        # Deep in the tail erfc's relative error, amplified by the cancellation, reached 7e-11:
        # Φ(a−b) = φ(b−a)·M(b−a) with the continued fraction is exact to rounding. (Only for
        # deltas far below any in use, so their calibrations keep their bits.)
        out = math.exp(-0.5 * (b - a) ** 2) / _SQRT_2PI * (_mills(b - a) - _mills(a + b))
    if out <= first * 1e-3 and a * max(1.0, a + b) < 0.25:
        # The two terms cancel (tiny epsilon): the same identity gives δ = φ(b−a)·(M(b−a) − M(b+a)),
        # and M(b−a) − M(b+a) = ∫ −M'(t) dt over [b−a, b+a], a short interval: Gauss-Legendre.
        integral = a * math.fsum(w * _mills_slope(b + a * x) for x, w in _GAUSS_LEGENDRE)
        out = math.exp(-0.5 * (b - a) ** 2) / _SQRT_2PI * integral
    return out


def _real(name: str, value: Any, *, positive: bool = True) -> float:
    if type(value) is not float and (not isinstance(value, numbers.Real) or isinstance(value, bool)):
        raise GuardArgumentTypeError(f"{name} must be a real number, not {type(value).__name__}")
    out = float(value)
    if not math.isfinite(out) or (positive and out <= 0.0):
        raise GuardArgumentValueError(f"{name} must be a finite number > 0, got {value!r}")
    return out


_MIN_DELTA = 1e-300


def _delta(value: Any) -> float:
    delta = _real("delta", value)
    if delta >= 1.0:
        raise GuardArgumentValueError(f"delta must be in (0, 1), got {value!r}; typical values are 1e-5 to 1e-9")
    if delta < _MIN_DELTA:
        # Below this, delta(sigma) is itself near float64's subnormal range, where the calibration
        # cannot resolve it (a target of 5e-324 gave 1.5 times the target).
        raise GuardArgumentValueError(f"delta must be at least {_MIN_DELTA:g}, got {value!r}; typical values are 1e-5 to 1e-9")
    return delta


@lru_cache(maxsize=1024)
def _sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    try:
        return _sigma_search(epsilon, delta, sensitivity)
    except OverflowError:
        # epsilon*sigma/sensitivity past ~1e154 overflows the delta formula's square; no release
        # needs such an epsilon, and a signed receipt with one must be refused, not crash a read.
        raise GuardArgumentValueError(f"epsilon={epsilon!r} at sensitivity={sensitivity!r} is too large to "
                                      "calibrate (float64 overflows); use an epsilon within the policy's "
                                      "ceiling (at most 1000)") from None


def _sigma_search(epsilon: float, delta: float, sensitivity: float) -> float:
    lo = hi = sensitivity
    while analytic_gaussian_delta(hi, epsilon, sensitivity) > delta:
        hi *= 2.0
        if hi == math.inf:
            raise GuardArgumentValueError(f"epsilon={epsilon!r}, delta={delta!r} at sensitivity={sensitivity!r} need a "
                                          "sigma beyond float64's range; use a smaller sensitivity (radius) or a larger "
                                          "epsilon or delta")
    while analytic_gaussian_delta(lo, epsilon, sensitivity) <= delta and lo > 1e-300:
        lo *= 0.5
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if analytic_gaussian_delta(mid, epsilon, sensitivity) <= delta:
            hi = mid
        else:
            lo = mid
    # The upper end satisfies the condition as evaluated in float64, which is within a relative
    # 5e-11 of the exact delta (docs/privacy.md, "Ideal versus implemented noise").
    return hi


def calibrate_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Return the smallest sigma (to float precision, rounded up) of the analytic Gaussian mechanism.

    Binary search on Balle & Wang's exact condition δ(σ) <= delta (see
    :func:`analytic_gaussian_delta`); valid for every epsilon > 0, unlike the classic
    sqrt(2 ln(1.25/δ))·Δ/ε bound, which needs ε < 1 and is never smaller.

    Args:
        epsilon: privacy loss, > 0.
        delta: failure probability, in [1e-300, 1).
        sensitivity: L2 sensitivity Δ, > 0.

    Returns:
        sigma such that the mechanism x + N(0, sigma² I) is (epsilon, delta)-DP at sensitivity Δ.

    Raises:
        TypeError: an argument is not a real number.
        ValueError: an argument is out of range.
    """
    return _sigma(_real("epsilon", epsilon), _delta(delta), _real("sensitivity", sensitivity))


_MIN_STEP = 2.0 ** -1000


def lattice_step(scale: float) -> float:
    """Return Λ = 2^floor(log2(scale/1024)), computed exactly (0.0 where it underflows float64)."""
    # frexp of scale itself, not of scale/1024: that quotient underflows to 0 for a subnormal scale,
    # and frexp(0) would make the step 0.5.
    mantissa, exponent = math.frexp(_real("scale", scale))
    return math.ldexp(1.0, exponent - 1 - int(math.log2(LATTICE_DIVISOR)))


def calibrated_lattice_step(mechanism: str, epsilon: float, delta: float, radius: float) -> float:
    """The lattice step a release of these parameters is snapped to (:func:`check_release` refuses a
    coarser one). It depends on no other parameter (not the dimension, dtype or clip_norm), and it
    never shrinks as the noise grows (a smaller epsilon or delta, a larger radius).

    Raises:
        ValueError: the parameters cannot be calibrated (as :func:`privatize` refuses them).
    """
    dlt = None if mechanism == "laplace_l2" else delta
    return _params(mechanism, epsilon, dlt, radius, None, 1, "float32", RNG_KEYED).lattice_step


@lru_cache(maxsize=1024, typed=True)  # typed: True must not hit the entry of 1.0 and skip the checks
def _params(mechanism: Any, epsilon: Any, delta: Any, radius: Any, clip_norm: Any, dim: int,
            dtype: str, rng_id: str) -> NoiseParams:
    if mechanism not in MECHANISMS:
        raise GuardArgumentValueError(f"mechanism must be 'gaussian' or 'laplace_l2', not {mechanism!r}")
    eps = _real("epsilon", epsilon)
    rad = _real("radius", radius)
    clip = None if clip_norm is None else _real("clip_norm", clip_norm)
    if mechanism == "gaussian":
        if delta is None:
            raise GuardArgumentValueError("delta is required for mechanism='gaussian'; pass e.g. delta=1e-6")
        dlt = _delta(delta)
        step = lattice_step(_sigma(eps, dlt, rad))
        sensitivity = rad + math.sqrt(dim) * step
        scale = _sigma(eps, dlt, sensitivity)
    else:
        if delta not in (None, 0, 0.0):
            raise GuardArgumentValueError(f"mechanism='laplace_l2' has delta=0; pass delta=None, not {delta!r}")
        dlt = 0.0
        scale = math.inf
        if math.isfinite(rad / eps):
            step = lattice_step(rad / eps)
            sensitivity = rad + math.sqrt(dim) * step
            scale = sensitivity / eps
        if not math.isfinite(scale):
            raise GuardArgumentValueError(f"radius={rad!r} with epsilon={eps!r} gives a noise scale beyond float64's "
                                          "range; use a smaller radius or a larger epsilon")
    if step < _MIN_STEP:
        # Below this the lattice arithmetic (1/step) overflows float64; no useful embedding noise
        # is anywhere near it, so such parameters are refused rather than silently mis-snapped.
        raise GuardArgumentValueError(
            f"radius={rad!r} with epsilon={eps!r} gives a noise scale of {scale:.3g}, too small to "
            f"snap to a float64 lattice (step {step:.3g} < 2**-1000); use a larger radius or a "
            "smaller epsilon"
        )
    return NoiseParams(
        mechanism=mechanism, mechanism_version=MECHANISM_VERSION, epsilon=eps, delta=dlt,
        radius=rad, clip_norm=clip, scale=scale, lattice_step=step, rng_id=rng_id, dim=dim,
        dtype=dtype,
        guarantee=guarantee_sentence(mechanism, eps, dlt, rad, clip, scale, step, dim, dtype),
    )


def _tag(p: NoiseParams) -> bytes:
    return (f"qg-noise|{p.mechanism_version}|{p.mechanism}|{p.epsilon!r}|{p.delta!r}|{p.radius!r}|"
            f"{p.clip_norm!r}|{p.scale!r}|{p.lattice_step!r}|{p.dtype}|{p.dim}").encode()


def _sha256(data: bytes) -> bytes:
    h = hashes.Hash(hashes.SHA256())
    h.update(data)
    return h.finalize()


@lru_cache(maxsize=1024)
def _keyed_context(p: NoiseParams) -> tuple[bytes, bytes]:
    tag = _tag(p)
    # The nonce only separates parameter sets; the secret is the HMAC key.
    return b"qg-noise-row|" + tag + b"|", _sha256(b"qg-noise-nonce|" + tag)[:12]


_ZERO_NONCE = bytes(12)
# numpy 2 computes dtype.name in Python (~1.5 us); check_vectors has admitted only these two.
_DTYPE_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}
# Production parameters by (mechanism, epsilon, radius, delta, clip_norm, d, dtype name), filled
# after the full checks and read by the kernel's fresh_noise_cached fast path.
_FRESH: dict[tuple[Any, ...], tuple[NoiseParams, float, float]] = {}
_FRESH_MAX = 1024
_fresh_noise_cached: Callable[..., tuple[np.ndarray, NoiseParams] | None] = _k.fresh_noise_cached


def _release(vectors: Any, mechanism: Any, epsilon: Any, radius: Any, delta: Any, clip_norm: Any,
             rng_id: str) -> tuple[int, NoiseParams]:
    dim = _k.check_vectors(vectors)
    dtype = _DTYPE_NAMES.get(vectors.dtype) or vectors.dtype.name
    try:
        return dim, _params(mechanism, epsilon, delta, radius, clip_norm, dim, dtype, rng_id)
    except TypeError as exc:
        if "unhashable" not in str(exc):
            raise
        raise GuardArgumentTypeError(f"mechanism, epsilon, delta, radius and clip_norm must be str/numbers: {exc}") from None


# The last (key, prefix, HMAC state after the prefix): most releases reuse the same key and
# parameters, and an HMAC copy costs half of a new HMAC. The key object is matched by identity.
_ROW_BASE: tuple[bytes, bytes, Any] | None = None


def _row_keys(rows: np.ndarray, key: bytes, prefix: bytes) -> bytes:
    global _ROW_BASE
    last = _ROW_BASE
    if last is not None and last[0] is key and last[1] == prefix:
        base = last[2]
    else:
        base = hmac.HMAC(key, hashes.SHA256())
        base.update(prefix)
        _ROW_BASE = (key, prefix, base)
    out = []
    for row in rows:
        h = base.copy()
        h.update(row.tobytes())
        out.append(h.finalize())
    return b"".join(out)


def _overflow_hint(exc: InvalidVectorError, params: NoiseParams) -> InvalidVectorError:
    """The kernel's output-overflow error, naming the noise scale as the other possible cause."""
    # The implemented noise is bounded (docs/privacy.md): |z| <= 12.23 sigma a coordinate, and the
    # Marsaglia-Tsang Gamma(d) norm <= (d - 1/3)(1 + 12.23/sqrt(9(d - 1/3)))^3 scale. Only a scale
    # whose noise can reach the dtype's range is named.
    shape = params.dim - 1.0 / 3.0
    reach = params.scale * (12.3 if params.mechanism == "gaussian"
                            else shape * (1.0 + 12.3 / math.sqrt(9.0 * shape)) ** 3)
    if "after noising" not in str(exc) or reach < 0.5 * float(np.finfo(params.dtype).max):
        return exc
    per = "per coordinate" if params.mechanism == "gaussian" else "of the noise vector's norm"
    return InvalidVectorError(
        f"{exc}, or the noise scale is: {params.scale:.4g} {per} ({params.mechanism} at "
        f"epsilon={params.epsilon!r}, radius={params.radius!r}); a larger epsilon or a smaller radius "
        "gives smaller noise"
    )


def privatize(
    vectors: np.ndarray,
    *,
    mechanism: str,
    epsilon: float,
    radius: float,
    delta: float | None = None,
    clip_norm: float | None = None,
    key: bytes | None = None,
) -> tuple[np.ndarray, NoiseParams]:
    """Release noised copies of embeddings under metric differential privacy.

    The guarantee is per released vector and local: (epsilon, delta) (``laplace_l2``: epsilon)
    between two inputs within L2 distance ``radius`` after clipping, for the ideal noise
    distribution, with the lattice snapping accounted in the sensitivity; it is not worst-case DP
    between arbitrary texts (docs/privacy.md). ``params.guarantee`` states it with the numbers.

    Args:
        vectors: one vector ``(d,)`` or a batch ``(n, d)`` of float32/float64 (any strides,
            read-only is fine; never modified). Float64 coordinates below 2^-511 in magnitude
            are read as 0 (see the module docstring).
        mechanism: ``"gaussian"`` or ``"laplace_l2"`` (see the module docstring).
        epsilon: privacy loss at L2 distance ``radius``.
        radius: protected L2 radius (the sensitivity).
        delta: failure probability, required for ``"gaussian"``; ``None`` for ``"laplace_l2"``.
        clip_norm: clip each row to this L2 norm before noising (``None``: no clipping).
        key: ``None`` for fresh noise from the CSPRNG (AES-256-CTR or ChaCha20, see the module
            docstring and ``params.rng_id``). Or a secret of at least 32 bytes for
            *keyed deterministic* noise: each row's ChaCha20 key is HMAC-SHA256(key, params,
            exact row bytes), so releasing the same vector again returns the identical output
            and averaging releases gains nothing.

    Returns:
        ``(noised, params)``: a new C-contiguous array of the input's shape and dtype, on the
        lattice ``params.lattice_step``, and the :class:`NoiseParams` of the release.

    Raises:
        TypeError: ``vectors`` is not a numpy array, or an argument has the wrong type.
        InvalidVectorError: wrong dtype/shape, empty, NaN/Inf, or a noised value beyond the
            dtype's range. (A value already at least 2^52 lattice steps in magnitude is a
            multiple of the step and is kept as computed, however small the step:
            docs/privacy.md.)
        ValueError: a parameter is out of range.
        OSError: the OS cannot provide randomness.
    """
    if key is None:
        try:
            hit = _fresh_noise_cached(vectors, _FRESH, mechanism, epsilon, radius, delta, clip_norm)
        except InvalidVectorError as exc:
            # A cache hit: the parameters were checked and are cached.
            raise _overflow_hint(exc, _release(vectors, mechanism, epsilon, radius, delta, clip_norm,
                                               RNG_PRODUCTION)[1]) from None
        if hit is not None:
            return hit
        _, params = _release(vectors, mechanism, epsilon, radius, delta, clip_norm, RNG_PRODUCTION)
        try:
            out = _k.noise_vectors(vectors, mechanism, params.scale, params.lattice_step, params.clip_norm,
                                   None, None, _ZERO_NONCE)
        except InvalidVectorError as exc:
            raise _overflow_hint(exc, params) from None
        if (type(mechanism) is str and type(epsilon) is float and type(radius) is float
                and (delta is None or type(delta) is float) and (clip_norm is None or type(clip_norm) is float)):
            if len(_FRESH) >= _FRESH_MAX:
                _FRESH.clear()
            _FRESH[(mechanism, epsilon, radius, delta, clip_norm, params.dim, params.dtype)] = (
                params, params.scale, params.lattice_step)
        return out, params
    if not isinstance(key, bytes):
        raise GuardArgumentTypeError(f"key must be bytes or None, not {type(key).__name__}")
    if len(key) < 32:
        raise GuardArgumentValueError(f"key must be at least 32 bytes (an HMAC-SHA256 key), got {len(key)}")
    dim, params = _release(vectors, mechanism, epsilon, radius, delta, clip_norm, RNG_KEYED)
    prefix, nonce = _keyed_context(params)
    row_keys = _row_keys(np.ascontiguousarray(vectors).reshape(-1, dim), key, prefix)
    try:
        out = _k.noise_vectors(vectors, mechanism, params.scale, params.lattice_step, params.clip_norm,
                               None, row_keys, nonce)
    except InvalidVectorError as exc:
        raise _overflow_hint(exc, params) from None
    return out, params


# The last (key, derived query key): every read derives it again from the same key object, which
# is matched by identity.
_QUERY_KEY_LAST: tuple[bytes, bytes] | None = None


def query_noise_key(key: bytes) -> bytes:
    """Return the key for keyed noise on *query* vectors, derived from the document noise ``key``.

    Keyed document noise depends only on (key, params, row bytes). With the same key a query equal
    to a stored clean vector would get exactly the stored noise and match it with score 1.0, so
    queries use HMAC-SHA256(key, a purpose label): still deterministic per query, never the
    documents' noise.

    Raises:
        TypeError: ``key`` is not bytes.
        ValueError: ``key`` is shorter than 32 bytes.
    """
    global _QUERY_KEY_LAST
    last = _QUERY_KEY_LAST
    if last is not None and last[0] is key:
        return last[1]
    if not isinstance(key, bytes):
        raise GuardArgumentTypeError(f"key must be bytes, not {type(key).__name__}")
    if len(key) < 32:
        raise GuardArgumentValueError(f"key must be at least 32 bytes (an HMAC-SHA256 key), got {len(key)}")
    h = hmac.HMAC(key, hashes.SHA256())
    h.update(_QUERY_KEY_LABEL)
    out = h.finalize()
    _QUERY_KEY_LAST = (key, out)
    return out


_SCALE_SLACK = 1e-12


def release_bounds(mechanism: str, epsilon: float, delta: float, radius: float, dim: int) -> tuple[float, float]:
    """The least ``scale`` and the coarsest ``lattice_step`` :func:`check_release` accepts in a
    release of these parameters (whatever its clip_norm, dtype or generator, which it checks
    apart), for a check that cannot recompute the calibration per release (a Qdrant filter).

    Raises:
        TypeError, ValueError: the parameters cannot be calibrated (:func:`check_release` then
            refuses every release of them).
    """
    want = _params(mechanism, epsilon, delta, radius, None, dim, "float32", RNG_KEYED)
    return want.scale * (1.0 - _SCALE_SLACK), want.lattice_step


def check_release(params: NoiseParams) -> str | None:
    """Return why signed release ``params`` are not a private release at the calibrated scale, or None.

    Recomputes the calibration implied by the params' own (mechanism, epsilon, delta, radius,
    clip_norm, dim) and requires a generator that gives privacy (never the TEST-ONLY seeded one),
    a dtype a release is made in (float32 or float64), a mechanism version with this calibration, a scale at least the calibrated one (to a relative
    1e-12) and a lattice no coarser
    than the one the calibration covers. This checks the signer's assertions for consistency; it
    cannot prove that the noise was drawn.
    """
    if params.rng_id not in PRIVATE_RNG_IDS:
        return (f"rng_id {params.rng_id!r} is not a private generator (accepted: "
                f"{', '.join(PRIVATE_RNG_IDS)}); the TEST-ONLY seeded generator gives no privacy. "
                "Noise with qdrant_guard.noise.privatize")
    if params.dtype not in DTYPES:
        return (f"dtype {params.dtype!r} is not one a release is made in ({', '.join(DTYPES)}); "
                "re-noise with qdrant_guard.noise.privatize")
    if params.mechanism_version not in CALIBRATED_VERSIONS:
        return (f"mechanism_version {params.mechanism_version!r} is not one this guard knows "
                f"({', '.join(CALIBRATED_VERSIONS)}), so its calibration cannot be checked; re-noise "
                "with this qdrant_guard version")
    try:
        want = _params(params.mechanism, params.epsilon, params.delta, params.radius,
                       params.clip_norm, params.dim, params.dtype, params.rng_id)
    except (TypeError, ValueError) as exc:
        return f"the noise parameters cannot be calibrated: {exc}"
    # 1e-12 relative: the calibration's own float precision (a more accurate evaluation of delta
    # moved some calibrations by 4e-14), so receipts signed before such a change still check.
    if not params.scale >= want.scale * (1.0 - _SCALE_SLACK):  # written so that NaN is refused too
        return (f"scale {params.scale!r} is below the calibrated {want.scale!r} for {params.mechanism} "
                f"epsilon={params.epsilon!r}, delta={params.delta!r}, radius={params.radius!r}, "
                f"dim={params.dim}; re-noise with qdrant_guard.noise.privatize at these parameters")
    if not 0.0 < params.lattice_step <= want.lattice_step:
        return (f"lattice_step {params.lattice_step!r} is coarser than the {want.lattice_step!r} the "
                "calibration covers; re-noise with qdrant_guard.noise.privatize")
    return None


def privatize_seeded_for_tests(
    vectors: np.ndarray,
    *,
    mechanism: str,
    epsilon: float,
    radius: float,
    delta: float | None = None,
    clip_norm: float | None = None,
    seed: int,
) -> tuple[np.ndarray, NoiseParams]:
    """TEST ONLY: :func:`privatize` with noise from a ChaCha20 stream derived from ``seed``.

    Anyone who knows or guesses the seed can subtract the noise, so this gives NO privacy. It
    exists so statistical and twin-comparison tests are reproducible; no production path calls it,
    and its ``rng_id`` (``"chacha20-seeded-TEST-ONLY-v2"``, :data:`RNG_SEEDED`) marks every release it makes.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise GuardArgumentTypeError(f"seed must be an int, not {type(seed).__name__}")
    _, params = _release(vectors, mechanism, epsilon, radius, delta, clip_norm, RNG_SEEDED)
    stream_key = _sha256(b"qg-test-seed|" + str(seed).encode())
    out = _k.noise_vectors(vectors, mechanism, params.scale, params.lattice_step, params.clip_norm,
                           stream_key, None, _keyed_context(params)[1])
    return out, params


def clip_l2(vectors: np.ndarray, clip_norm: float) -> np.ndarray:
    """Return a float64 copy of ``vectors`` with every row longer than ``clip_norm`` scaled down to it.

    The scaled row's norm is ``clip_norm`` up to rounding (a relative 1e-15 either side), as in
    the kernel.
    """
    _k.check_vectors(vectors)
    clip = _real("clip_norm", clip_norm)
    x = np.array(vectors, dtype=np.float64, ndmin=2)
    if not np.isfinite(x).all():
        raise InvalidVectorError("vectors contain NaN or Inf; only finite values can be clipped")
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    factor = np.where(norms > clip, clip / np.where(norms > 0, norms, 1.0), 1.0)
    return (x * factor[:, None]).reshape(np.shape(vectors))


def snap_to_lattice(vectors: np.ndarray, step: float) -> np.ndarray:
    """Return ``vectors`` rounded (half to even) to multiples of ``step``, a power of two.

    Snaps as the kernel does: in float64, then cast back to the input's dtype; a zero is +0.0,
    and a value whose float64 spacing is already ``step`` or coarser (``|v| >= 2^52 * step``) is
    a multiple of it and is returned unchanged.
    """
    _k.check_vectors(vectors)
    s = _real("step", step)
    if math.frexp(s)[0] != 0.5:
        raise GuardArgumentValueError(f"step must be a power of two, got {step!r}")
    # Not in the input's dtype: float32 arithmetic overflowed v / step to inf (a float32 3e38 at
    # step 2^-15) and turned a step below float32's range into 0 (every value NaN); v / step
    # overflows float64 too for a huge v and a tiny step, where v is already on the lattice.
    x = np.asarray(vectors, dtype=np.float64)
    with np.errstate(over="ignore"):
        q = x / s
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.where(np.abs(x) >= 2.0 ** 52 * s, x, (np.rint(q) + 0.0) * s)
    return out.astype(vectors.dtype)
