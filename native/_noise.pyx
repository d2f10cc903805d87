# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Native noise kernel: CSPRNG, Ziggurat/Gamma samplers, clip + noise + lattice.

Fresh noise comes from a per-thread stream keyed from getrandom(2), re-keyed in a forked child,
with fast key erasure after each 4 KiB refill: AES-256-CTR with AES-NI/VAES where the CPU has
AES-NI (``PRODUCTION_CIPHER == "aes256ctr"``), else ChaCha20; ``QG_NOISE_CIPHER=chacha20`` forces
ChaCha20 (read once, at import). Keyed and seeded streams are always ChaCha20.

Twin of :mod:`qdrant_guard._noise_py` (the specification). Argument checks take a typed fast path
here; anything unusual is handed to the reference's checker, so both twins accept the same inputs
and raise the same errors.
"""
import warnings

import numpy as np

cimport numpy as cnp
from libc.float cimport FLT_MAX
from libc.math cimport fabs, frexp, isfinite
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE

from qdrant_guard import _noise_py as _ref
from qdrant_guard.errors import GuardArgumentValueError

from noise cimport *

cnp.import_array()
qg_noise_init()

IMPLEMENTATION = (<bytes>qg_chacha20_impl()).decode()
# "vaes", "aesni" or "none" (no AES instructions: the production stream stays ChaCha20).
AES_IMPLEMENTATION = (<bytes>qg_aes_impl()).decode()
# Chosen here, at import, once: QG_NOISE_CIPHER is not read again.
PRODUCTION_CIPHER = (<bytes>qg_production_cipher_name()).decode()
if qg_cipher_knob_status() == QG_CIPHER_KNOB_INVALID:
    warnings.warn(f"QG_NOISE_CIPHER must be 'aes' or 'chacha20'; ignoring the unknown value and using "
                  f"{PRODUCTION_CIPHER} for fresh noise", RuntimeWarning, stacklevel=2)
elif qg_cipher_knob_status() == QG_CIPHER_KNOB_NO_AES:
    warnings.warn("QG_NOISE_CIPHER=aes but this CPU has no AES-NI (and software AES is never used); "
                  "using chacha20 for fresh noise", RuntimeWarning, stacklevel=2)


def production_cipher():
    return PRODUCTION_CIPHER


cdef inline bint _positive(object value):
    return type(value) is float and 0.0 < <double>value < float("inf")


cdef inline bint _native_vectors(object vectors):
    cdef cnp.ndarray arr
    if type(vectors) is not cnp.ndarray:
        return False
    arr = <cnp.ndarray>vectors
    if cnp.PyArray_TYPE(arr) != cnp.NPY_FLOAT32 and cnp.PyArray_TYPE(arr) != cnp.NPY_FLOAT64:
        return False
    if not cnp.PyArray_ISNOTSWAPPED(arr):
        return False
    return (cnp.PyArray_NDIM(arr) == 1 or cnp.PyArray_NDIM(arr) == 2) and cnp.PyArray_SIZE(arr) > 0


def check_vectors(vectors):
    if _native_vectors(vectors):
        return int((<cnp.ndarray>vectors).shape[cnp.PyArray_NDIM(<cnp.ndarray>vectors) - 1])
    return _ref.check_vectors(vectors)


def chacha20_block(key, counter, nonce):
    cdef uint32_t k[8]
    cdef uint32_t n[3]
    cdef uint32_t out[16]
    _ref._check_bytes("key", key, 32)
    _ref._check_count("counter", counter, 0xFFFFFFFF)
    _ref._check_bytes("nonce", nonce, 12)
    _load_words(key, k, 8)
    _load_words(nonce, n, 3)
    qg_chacha20_block(k, <uint32_t>counter, n, out)
    return _store_words(out, 16)


def chacha20_stream(key, nonce, counter, nbytes):
    cdef uint32_t k[8]
    cdef uint32_t n[3]
    cdef uint32_t c
    cdef size_t nblocks
    _ref._check_bytes("key", key, 32)
    _ref._check_bytes("nonce", nonce, 12)
    _ref._check_count("counter", counter, 0xFFFFFFFF)
    _ref._check_count("nbytes", nbytes, 1 << 30)
    _load_words(key, k, 8)
    _load_words(nonce, n, 3)
    c = <uint32_t>counter
    nblocks = (<size_t>nbytes + 63) // 64
    words = np.empty(nblocks * 16, dtype="<u4")
    cdef uint32_t[::1] view = words
    if nblocks:
        with nogil:
            qg_chacha20_blocks(k, &c, n, &view[0], nblocks)
    return words.tobytes()[:nbytes]


def aes256ctr_stream(key, counter_block, nbytes):
    cdef uint8_t ctr[16]
    cdef const uint8_t *k
    cdef size_t nblocks
    cdef int rc = 0
    _ref._check_bytes("key", key, 32)
    _ref._check_bytes("counter_block", counter_block, 16)
    _ref._check_count("nbytes", nbytes, 1 << 30)
    if AES_IMPLEMENTATION == "none":
        raise RuntimeError("this CPU has no AES-NI; software AES is deliberately not provided")
    memcpy(ctr, <const uint8_t *><char *>counter_block, 16)  # advanced by the call
    k = <const uint8_t *><char *>key  # read in place: no copy of the key left on the stack
    nblocks = (<size_t>nbytes + 15) // 16
    out = np.empty(nblocks * 16, dtype=np.uint8)
    cdef uint8_t[::1] view = out
    if nblocks:
        with nogil:
            rc = qg_aes256ctr(k, ctr, &view[0], nblocks)
    if rc:
        raise RuntimeError("AES-256-CTR keystream failed")
    return out.tobytes()[:nbytes]


cdef void _load_words(bytes data, uint32_t *dst, int count):
    cdef const uint8_t *p = <const uint8_t *><char *>data
    cdef int i
    for i in range(count):
        dst[i] = p[4 * i] | (<uint32_t>p[4 * i + 1] << 8) | (<uint32_t>p[4 * i + 2] << 16) | (<uint32_t>p[4 * i + 3] << 24)


cdef bytes _store_words(const uint32_t *words, int count):
    cdef bytearray out = bytearray(4 * count)
    cdef int i
    for i in range(count):
        out[4 * i] = words[i] & 0xFF
        out[4 * i + 1] = (words[i] >> 8) & 0xFF
        out[4 * i + 2] = (words[i] >> 16) & 0xFF
        out[4 * i + 3] = (words[i] >> 24) & 0xFF
    return bytes(out)


def normals(stream_key, nonce, count):
    cdef qg_stream st
    cdef Py_ssize_t i, n
    _ref._check_bytes("stream_key", stream_key, 32)
    _ref._check_bytes("nonce", nonce, 12)
    _ref._check_count("count", count, 1 << 40)
    n = count
    out = np.empty(n, dtype=np.float64)
    cdef double[::1] view = out
    qg_stream_init(&st, <const uint8_t *><char *>stream_key, <const uint8_t *><char *>nonce)
    with nogil:
        if n:
            qg_normals(&st, &view[0], n)
        qg_stream_wipe(&st)
    return out


def gammas(stream_key, nonce, shape, count):
    cdef qg_stream st
    cdef Py_ssize_t i, n
    cdef double a
    _ref._check_bytes("stream_key", stream_key, 32)
    _ref._check_bytes("nonce", nonce, 12)
    a = _ref._check_real("shape", shape)
    if a < 1.0:
        raise GuardArgumentValueError(f"shape must be >= 1, got {a!r}")
    _ref._check_count("count", count, 1 << 40)
    n = count
    out = np.empty(n, dtype=np.float64)
    cdef double[::1] view = out
    qg_stream_init(&st, <const uint8_t *><char *>stream_key, <const uint8_t *><char *>nonce)
    with nogil:
        for i in range(n):
            view[i] = qg_gamma(&st, a)
        qg_stream_wipe(&st)
    return out


def noise_vectors(vectors, mechanism, scale, step, clip_norm, stream_key, row_keys, nonce):
    cdef cnp.ndarray src
    cdef size_t rows = 0
    cdef int exponent
    cdef double scale_c = 0.0, step_c = 0.0, clip_c = 0.0
    fast = (
        _native_vectors(vectors)
        and (mechanism == "gaussian" or mechanism == "laplace_l2")
        and _positive(scale) and _positive(step) and frexp(<double>step, &exponent) == 0.5
        and (clip_norm is None or _positive(clip_norm))
        and (stream_key is None or (type(stream_key) is bytes and len(<bytes>stream_key) == 32))
        and type(nonce) is bytes and len(<bytes>nonce) == 12
    )
    src = <cnp.ndarray>vectors if fast else None
    if fast:
        rows = 1 if src.ndim == 1 else <size_t>src.shape[0]
        scale_c = scale
        step_c = step
        if clip_norm is not None:
            clip_c = clip_norm
        if row_keys is not None:
            fast = stream_key is None and type(row_keys) is bytes and <size_t>len(<bytes>row_keys) == 32 * rows
    if not fast:
        rows, _, scale_c, step_c, clip_c = _ref._check_noise_args(
            vectors, mechanism, scale, step, clip_norm, stream_key, row_keys, nonce
        )
        src = <cnp.ndarray>vectors
    return _run(src, QG_GAUSSIAN if mechanism == "gaussian" else QG_LAPLACE_L2, scale_c, step_c, clip_c,
                stream_key, row_keys, nonce)


cdef object _run(cnp.ndarray src, int mech, double scale_c, double step_c, double clip_c,
                 object stream_key, object row_keys, bytes nonce):
    """Noise a validated array (any strides) into a new C-contiguous one of the same shape and type."""
    cdef cnp.ndarray out
    cdef size_t rows, dim, bad_row = 0, bad_col = 0
    cdef int rc, is_f32
    cdef qg_stream st
    cdef qg_stream *stream = NULL
    cdef const uint8_t *keys = NULL
    cdef const uint8_t *nonce_p = <const uint8_t *><char *>nonce
    if not cnp.PyArray_IS_C_CONTIGUOUS(src) or not cnp.PyArray_ISALIGNED(src):
        # A contiguous but misaligned buffer (e.g. a byte buffer viewed from offset 1) would be read
        # through misaligned double/float pointers in C: copy it into a fresh, aligned array.
        src = np.array(src, order="C", copy=True)
    dim = <size_t>src.shape[src.ndim - 1]
    rows = 1 if src.ndim == 1 else <size_t>src.shape[0]
    is_f32 = cnp.PyArray_TYPE(src) == cnp.NPY_FLOAT32
    out = cnp.PyArray_EMPTY(src.ndim, src.shape, cnp.PyArray_TYPE(src), 0)
    if row_keys is not None:
        keys = <const uint8_t *><char *>row_keys
    elif stream_key is not None:
        qg_stream_init(&st, <const uint8_t *><char *>stream_key, nonce_p)
        stream = &st
    if rows * dim <= 4096:
        # Not worth a GIL round trip.
        rc = qg_noise_rows(cnp.PyArray_DATA(src), cnp.PyArray_DATA(out), is_f32, rows, dim, mech,
                           scale_c, step_c, clip_c, stream, keys, nonce_p, &bad_row, &bad_col)
    else:
        with nogil:
            rc = qg_noise_rows(cnp.PyArray_DATA(src), cnp.PyArray_DATA(out), is_f32, rows, dim, mech,
                               scale_c, step_c, clip_c, stream, keys, nonce_p, &bad_row, &bad_col)
    if stream != NULL:
        qg_stream_wipe(stream)
    if rc == QG_OK:
        return out
    if rc == QG_ERR_NONFINITE:
        raise _ref._nonfinite_error(bad_row, bad_col)
    if rc == QG_ERR_CLIP_OVERFLOW:
        raise _ref._clip_overflow_error(bad_row)
    if rc == QG_ERR_OUTPUT_OVERFLOW:
        raise _ref._output_overflow_error(bad_row, bad_col, src.dtype)
    if rc == QG_ERR_RANDOM:
        raise OSError(<int>bad_col, "getrandom(2) failed: the OS provides no randomness for noise")
    raise MemoryError("cannot allocate the noise scratch row")


THREADS_MIN_ELEMENTS = QG_NOISE_MT_MIN


def set_threads(n):
    """Limit the threads a large batch is split over (``n < 1``: the default); return the old limit.

    Batches of at least ``THREADS_MIN_ELEMENTS`` values (rows x dim) with fresh or per-row keyed
    noise are shared, in chunks of whole rows, by up to this many threads (one per 2**19 values at
    most), the GIL released; keyed output and errors are the same as with one thread, and a seeded
    stream is never split. The default is the number of CPUs the process may use (at most 8), or
    the environment variable ``QG_NOISE_THREADS`` (1 to 8) read once at import, since a batch runs
    without the GIL; ``set_threads(1)`` or ``QG_NOISE_THREADS=1`` turns threading off. Call it
    while no batch is running.
    """
    if type(n) is not int:
        raise TypeError(f"n must be an int, not {type(n).__name__}")
    return qg_noise_set_threads(<int>max(-1, min(n, 1 << 20)))


def get_threads():
    """The current thread limit for large batches (see :func:`set_threads`)."""
    return qg_noise_get_threads()


cdef bytes _ZERO_NONCE = bytes(12)


cdef inline bint _float_or_none(object value):
    return value is None or type(value) is float


# The last hit, holding references to its arguments so identity means equality. Entries are a pure
# function of their key (the calibration), so reusing the last one for the very same argument
# objects and cache is the dict lookup without building and hashing the key.
cdef object _last_cache = None
cdef tuple _last_args = None
cdef tuple _last_entry = None


def fresh_noise_cached(vectors, cache, mechanism, epsilon, radius, delta, clip_norm):
    global _last_cache, _last_args, _last_entry
    cdef cnp.ndarray arr
    cdef object entry, dtype_name
    cdef Py_ssize_t dim
    if not (_native_vectors(vectors) and type(cache) is dict and type(mechanism) is str
            and type(epsilon) is float and type(radius) is float
            and _float_or_none(delta) and _float_or_none(clip_norm)):
        return None
    arr = <cnp.ndarray>vectors
    dim = arr.shape[cnp.PyArray_NDIM(arr) - 1]
    dtype_name = "float32" if cnp.PyArray_TYPE(arr) == cnp.NPY_FLOAT32 else "float64"
    if (_last_args is not None and cache is _last_cache and mechanism is _last_args[0]
            and epsilon is _last_args[1] and radius is _last_args[2] and delta is _last_args[3]
            and clip_norm is _last_args[4] and dim == <Py_ssize_t>_last_args[5]
            and dtype_name is _last_args[6]):
        entry = _last_entry
    else:
        key = (mechanism, epsilon, radius, delta, clip_norm, dim, dtype_name)
        entry = (<dict>cache).get(key)
        if entry is None:
            return None
        _last_cache, _last_args, _last_entry = cache, key, <tuple>entry
    params, scale, step = <tuple>entry
    return _run(arr, QG_GAUSSIAN if mechanism == "gaussian" else QG_LAPLACE_L2, scale, step,
                0.0 if clip_norm is None else <double>clip_norm, None, None, _ZERO_NONCE), params


# One docstring per function, written on the reference (STYLE.md habit 3).
for _name in ("check_vectors", "chacha20_block", "chacha20_stream", "aes256ctr_stream", "normals", "gammas",
              "noise_vectors", "fresh_noise_cached", "production_cipher"):
    try:
        globals()[_name].__doc__ = getattr(_ref, _name).__doc__
    except (AttributeError, TypeError):
        pass
del _name


def unit_grid_nudge(k, residual, order, shift, tol, max_passes):
    """The Cosine stored form's norm correction, in place on ``k`` and ``residual`` (see
    :func:`qdrant_guard._noise_py.unit_grid_nudge`, the reference, for the arguments)."""
    cdef double[:, ::1] kv
    cdef double[::1] rv
    cdef cnp.int32_t[:, ::1] o32
    cdef cnp.int64_t[:, ::1] o64
    cdef const int32_t *p32 = NULL
    cdef const int64_t *p64 = NULL
    cdef int c_shift, c_passes, rc
    cdef double c_tol
    if (type(k) is not cnp.ndarray or type(residual) is not cnp.ndarray or type(order) is not cnp.ndarray
            or k.dtype != np.float64 or residual.dtype != np.float64
            or order.dtype not in (np.int32, np.int64) or k.ndim != 2 or order.shape != k.shape
            or residual.shape != (k.shape[0],) or not k.flags.c_contiguous or not k.flags.writeable
            or not residual.flags.c_contiguous or not residual.flags.writeable
            or not order.flags.c_contiguous or type(shift) is not int or not 1 <= shift <= 40
            or type(tol) is not float or type(max_passes) is not int):
        return _ref.unit_grid_nudge(k, residual, order, shift, tol, max_passes)
    if k.shape[0] == 0 or k.shape[1] == 0:
        return None
    kv = k
    rv = residual
    if order.dtype == np.int32:
        o32 = order
        p32 = <const int32_t *>&o32[0, 0]
    else:
        o64 = order
        p64 = <const int64_t *>&o64[0, 0]
    c_shift, c_tol, c_passes = shift, tol, max_passes
    with nogil:
        rc = qg_unit_grid_nudge(&kv[0, 0], &rv[0], p32, p64, <size_t>kv.shape[0], <size_t>kv.shape[1],
                                c_shift, c_tol, c_passes)
    if rc != 0:
        raise ValueError(_ref.order_error(k.shape[1], shift))
    return None


def dense_floats(value):
    """``(float64 array, all storable)`` of a non-empty list of exact floats, else None (see
    :func:`qdrant_guard._noise_py.dense_floats`)."""
    cdef Py_ssize_t n, i
    cdef object item
    cdef double x
    cdef double *dst
    cdef bint finite = True
    cdef cnp.ndarray out
    if type(value) is not list:
        return None
    n = PyList_GET_SIZE(value)
    if n == 0:
        return None
    out = cnp.PyArray_EMPTY(1, [n], cnp.NPY_FLOAT64, 0)
    dst = <double *>cnp.PyArray_DATA(out)
    # Nothing in this loop runs Python code, so the list cannot change under it.
    for i in range(n):
        item = <object>PyList_GET_ITEM(value, i)
        if type(item) is not float:
            return None
        x = PyFloat_AS_DOUBLE(item)
        # Finite and within float32 range, what Qdrant stores (NaN compares false).
        finite = finite and fabs(x) <= FLT_MAX
        dst[i] = x
    return out, finite
