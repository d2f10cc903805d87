"""Type stubs of the native noise kernel (twin of qdrant_guard._noise_py)."""
import numpy as np
import numpy.typing as npt

from .noise_params import NoiseParams

IMPLEMENTATION: str
THREADS_MIN_ELEMENTS: int

def set_threads(n: int) -> int: ...
def get_threads() -> int: ...

def check_vectors(vectors: object) -> int: ...
def chacha20_block(key: bytes, counter: int, nonce: bytes) -> bytes: ...
def chacha20_stream(key: bytes, nonce: bytes, counter: int, nbytes: int) -> bytes: ...
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
