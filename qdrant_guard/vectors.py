"""Reading vectors out of qdrant-client structures, validating them, and putting them back."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np
from qdrant_client.http import models

from ._impl import implementation, load_kernel
from .errors import InvalidVectorError

UNNAMED = ""
_F32_MAX = float(np.finfo(np.float32).max)
# np.asarray of a list of Python floats, in C (~1 us instead of ~8-14 us a 384-d vector), and
# whether all are finite and within float32 range; None sends anything else (and the pure-Python
# implementation, whose twin is no faster than np.asarray) through np.asarray.
_DENSE_FLOATS: Callable[[object], tuple[np.ndarray, bool] | None] | None = load_kernel("_noise", "_noise_py").dense_floats if implementation() == "native" else None


@dataclass(frozen=True)
class VectorSpec:
    """One dense vector slot of a collection."""

    name: str
    size: int
    distance: str
    multivector: bool
    # Storage datatype ("float32", "float16", "uint8", ...); None when the collection does not set it.
    datatype: str | None = None

    @property
    def lossy(self) -> bool:
        """Whether Qdrant stores this vector at less than float32 precision (a receipt commits to
        the float32 values, so it would not verify against what is read back)."""
        return self.datatype not in (None, "float32")


@dataclass(frozen=True)
class CollectionShape:
    """The vector layout of a collection, read from ``get_collection``."""

    dense: Mapping[str, VectorSpec]
    sparse: frozenset[str]
    unnamed: bool

    def spec(self, name: str, *, where: str) -> VectorSpec:
        """The spec of vector ``name`` (``""`` = the unnamed vector).

        Raises:
            InvalidVectorError: the collection has no such dense vector.
        """
        found = self.dense.get(name)
        if found is None:
            if name in self.sparse:
                raise _invalid(
                    "sparse_vector",
                    f"{where}: vector {name!r} is a sparse vector; sparse vectors are lexical term "
                    "weights (the words themselves, which the guard can neither redact nor noise) and "
                    f"are refused on sensitive collections: leave {name!r} out of the point's vectors "
                    "(the collection's sparse slot may stay empty), or store them in a PUBLIC "
                    "collection; for keyword search here, filter on the payload text with "
                    "models.MatchText. Sparse vectors stored before the guard stay searchable by "
                    f"every reader: remove them with delete_vectors(collection_name, [{name!r}], "
                    "points=...)"
                )
            known = sorted(n or "<unnamed>" for n in self.dense)
            shown = name or "<unnamed>"
            raise _invalid(
                "unknown_vector_name", f"{where}: unknown vector name {shown!r}; this collection has: {known}"
            )
        return found


def _invalid(reason: str, message: str) -> InvalidVectorError:
    """An InvalidVectorError carrying ``reason``, a fixed word the audit records in place of the
    message (which can quote the caller's values)."""
    exc = InvalidVectorError(message)
    exc.reason = reason  # type: ignore[attr-defined]
    return exc


def shape_from_info(info: models.CollectionInfo) -> CollectionShape:
    """Build a :class:`CollectionShape` from a ``CollectionInfo``."""
    params = info.config.params
    vectors = params.vectors
    dense: dict[str, VectorSpec] = {}
    unnamed = isinstance(vectors, models.VectorParams)
    items: Iterable[tuple[str, models.VectorParams]]
    if vectors is None:
        items = ()
    elif unnamed:
        items = ((UNNAMED, vectors),)  # type: ignore[assignment]
    else:
        items = vectors.items()  # type: ignore[union-attr]
    for name, vp in items:
        dense[name] = VectorSpec(
            name=name,
            size=int(vp.size),
            distance=vp.distance.value if hasattr(vp.distance, "value") else str(vp.distance),
            multivector=vp.multivector_config is not None,
            datatype=None if vp.datatype is None else str(getattr(vp.datatype, "value", vp.datatype)),
        )
    sparse = frozenset((params.sparse_vectors or {}).keys())
    return CollectionShape(dense=dense, sparse=sparse, unnamed=unnamed)


def split_vector_struct(vector: Any) -> dict[str, Any]:
    """Return ``{name: value}`` for a point's vector field (the unnamed vector under ``""``)."""
    if vector is None:
        return {}
    if isinstance(vector, dict):
        out = dict(vector)
        for k in out:
            if type(k) is not str:
                # A name as it is sent (its characters): a str subclass in a model_construct'ed
                # point could hash and compare as another vector's name, so that name's spec
                # (size, distance) was checked and noised for, and the receipt issued for it.
                return {str.__str__(n) if isinstance(n, str) else n: v for n, v in out.items()}
        return out
    return {UNNAMED: vector}


def join_vector_struct(vectors: dict[str, Any]) -> Any:
    """Inverse of :func:`split_vector_struct`."""
    if set(vectors) == {UNNAMED}:
        return vectors[UNNAMED]
    return {k: v for k, v in vectors.items()}


# What a vector held, by numpy dtype kind, for the refusal of one that holds no numbers.
_KIND_WORDS = {"U": "text (str)", "S": "bytes", "b": "booleans", "c": "complex numbers",
               "O": "values that are not all numbers (None, or a mix)", "M": "dates", "m": "time spans"}


def as_dense(value: Any, spec: VectorSpec, *, where: str) -> np.ndarray:
    """Validate one dense vector and return it as a float64 array.

    Raises:
        InvalidVectorError: multivector, sparse, wrong dimension, non-numeric, NaN or Inf values.
    """
    if isinstance(value, models.SparseVector):
        raise _invalid(
            "sparse_vector", f"{where}: sparse vector given for dense vector {spec.name or '<unnamed>'!r}; pass "
            "a list of floats there, or the sparse vector under the name of a sparse vector of the collection "
            "(its sparse_vectors_config)"
        )
    if spec.multivector:
        raise _invalid(
            "multivector", f"{where}: multivector {spec.name or '<unnamed>'!r} on a sensitive collection is not "
            "supported by the guard yet (no receipt format for matrices); store multivectors in a "
            "PUBLIC collection"
        )
    fast = _DENSE_FLOATS(value) if _DENSE_FLOATS is not None else None
    if fast is not None:
        arr, storable = fast
        if storable and arr.shape[0] == spec.size:
            # A new 1-D float64 array of finite float32-range values of the right length: every
            # check below passes and astype returns it as it is.
            return arr
    else:
        storable = False
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise _invalid("not_numeric", f"{where}: vector is not numeric: {exc}") from None
    if arr.dtype.kind not in "fiu" or arr.dtype.kind == "b":
        held = _KIND_WORDS.get(arr.dtype.kind, "values that are not numbers")
        raise _invalid("bad_dtype", f"{where}: vector {spec.name or '<unnamed>'!r} holds {held} (numpy dtype "
                                    f"{arr.dtype}), expected floats; give it a list of floats")
    if arr.ndim != 1:
        raise _invalid(
            "bad_shape", f"{where}: expected a 1-d vector for {spec.name or '<unnamed>'!r}, got shape {arr.shape}; "
            "give each point one flat list of floats (several points: one PointStruct each, or models.Batch)"
        )
    if arr.shape[0] != spec.size:
        raise _invalid(
            "wrong_dimension", f"{where}: vector {spec.name or '<unnamed>'!r} has dimension {arr.shape[0]}, "
            f"the collection expects {spec.size}; embed with the model the collection was created for, or "
            f"create the collection with VectorParams(size={arr.shape[0]}) for this model"
        )
    out = arr.astype(np.float64, copy=False)
    if storable:
        return out
    if not np.isfinite(out).all():
        bad = int(np.flatnonzero(~np.isfinite(out))[0])
        raise _invalid(
            "non_finite", f"{where}: vector {spec.name or '<unnamed>'!r} has a non-finite value "
            f"({float(out[bad])!r}) at index {bad}; Qdrant cannot rank NaN or infinite coordinates: drop or "
            "re-embed the point (a NaN usually comes from normalising a zero vector)"
        )
    if out.size and (out.max() > _F32_MAX or out.min() < -_F32_MAX):
        # Qdrant stores float32: such a value would be stored as +-inf.
        bad = int(np.flatnonzero(np.abs(out) > _F32_MAX)[0])
        raise _invalid(
            "beyond_float32", f"{where}: vector {spec.name or '<unnamed>'!r} has the value {float(out[bad])!r} at index {bad}, "
            f"outside the float32 range Qdrant stores (|v| <= {_F32_MAX:.4g}); rescale the vector"
        )
    return out

