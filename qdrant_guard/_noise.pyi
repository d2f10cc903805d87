"""Type stubs of the native noise kernel (twin of qdrant_guard._noise_py).

Fresh noise (no stream key, no row keys) is drawn from a per-thread stream keyed from getrandom(2),
re-keyed in a forked child, with fast key erasure: after each 4 KiB refill the first 32 bytes of the
keystream become the next key (never output) and the old key is overwritten. Its cipher,
``PRODUCTION_CIPHER``, is ``"aes256ctr"`` (AES-256 in CTR mode with AES-NI, or VAES 256-bit when
``AES_IMPLEMENTATION == "vaes"``) where the CPU has AES-NI, else ``"chacha20"``; the environment
variable ``QG_NOISE_CIPHER=chacha20`` forces ChaCha20 (read once, at import; an unknown value, or
``aes`` without AES-NI, gives a ``RuntimeWarning``). There is no software AES. Keyed and seeded
streams are always ChaCha20 and match the pure-Python twin bit for bit.
"""
import numpy as np
import numpy.typing as npt

from .noise_params import NoiseParams

IMPLEMENTATION: str
AES_IMPLEMENTATION: str  # "vaes", "aesni" or "none"
PRODUCTION_CIPHER: str  # "aes256ctr" or "chacha20"
THREADS_MIN_ELEMENTS: int

def set_threads(n: int) -> int: ...
def get_threads() -> int: ...

def check_vectors(vectors: object) -> int: ...
def chacha20_block(key: bytes, counter: int, nonce: bytes) -> bytes: ...
def chacha20_stream(key: bytes, nonce: bytes, counter: int, nbytes: int) -> bytes: ...
def aes256ctr_stream(key: bytes, counter_block: bytes, nbytes: int) -> bytes: ...
def production_cipher() -> str: ...
def normals(stream_key: bytes, nonce: bytes, count: int) -> npt.NDArray[np.float64]: ...
def gammas(stream_key: bytes, nonce: bytes, shape: float, count: int) -> npt.NDArray[np.float64]: ...
def noise_vectors(
    vectors: npt.NDArray[np.floating],
    mechanism: str,
    scale: float,
    step: float,
    clip_norm: float | None,
    stream_key: bytes | None,
    row_keys: bytes | None,
    nonce: bytes,
) -> npt.NDArray[np.floating]: ...
def fresh_noise_cached(
    vectors: object,
    cache: dict[tuple[object, ...], tuple[NoiseParams, float, float]],
    mechanism: object,
    epsilon: object,
    radius: object,
    delta: object,
    clip_norm: object,
) -> tuple[npt.NDArray[np.floating], NoiseParams] | None: ...
def unit_grid_nudge(
    k: npt.NDArray[np.float64],
    residual: npt.NDArray[np.float64],
    order: npt.NDArray[np.int32] | npt.NDArray[np.int64],
    shift: int,
    tol: float,
    max_passes: int,
) -> None: ...
def dense_floats(value: object) -> tuple[npt.NDArray[np.float64], bool] | None: ...
