"""The sparse vector slots a collection call would add (``create_collection``,
``recreate_collection``, ``create_vector_name``), read as qdrant-client sends them.

A sensitive collection refuses every write to a sparse vector (:meth:`vectors.CollectionShape.spec`):
its term weights are the words themselves, which the guard can neither redact, noise nor receipt.
A slot created there could never be written through the guard, so the call that would create it is
refused instead (:meth:`qdrant_guard.dispatch.Dispatch.refuse_sparse_slots`), before anything is sent.

``update_collection``'s ``sparse_vectors_config`` is not read: it changes the parameters of sparse
vectors the collection has, and Qdrant refuses a name it does not have (local mode:
``ValueError: Vector ... does not exist``), so it adds none. A sensitive collection that already
has sparse slots (made before the guard) keeps them, and its reads are unchanged.
"""
from __future__ import annotations

from typing import Any

import pydantic
from qdrant_client.http import models

from .errors import GuardArgumentTypeError

# What qdrant-client validates these arguments as (models.CreateCollection.sparse_vectors, and
# models.VectorNameConfig for create_vector_name), so that a Mapping that is no exact dict, or a
# dict where a config model belongs, is read once as it is sent, and that copy is sent.
_SPARSE_CONFIG = pydantic.TypeAdapter(dict[str, models.SparseVectorParams])
_NAME_CONFIG = pydantic.TypeAdapter(models.VectorNameConfig)

# The methods whose arguments can add a sparse vector slot to a collection.
ADDS_SPARSE_SLOTS = frozenset({"create_collection", "recreate_collection", "create_vector_name"})


def asked_sparse_slots(method: str, args: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The sparse slot names ``method`` with ``args`` would add, and ``args`` as they are to be
    sent (an argument that was not an exact dict or config model replaced by its validated copy).

    Raises:
        GuardArgumentTypeError: ``sparse_vectors_config`` or ``vector_name_config`` does not
            validate as qdrant-client's model (it would fail in qdrant-client too; refused here
            because a value that answered one read and not the other could add a slot unread).
    """
    if method == "create_vector_name":
        return _vector_name_slots(args)
    value = args.get("sparse_vectors_config")
    if value is None:
        return [], args
    if type(value) is not dict:
        try:
            value = _SPARSE_CONFIG.validate_python(value)
        except pydantic.ValidationError:
            raise GuardArgumentTypeError(
                f"{method}() argument 'sparse_vectors_config' must be a dict of models.SparseVectorParams by "
                f"vector name, not {type(value).__name__}; pass a dict (or None for no sparse vectors)") from None
        args = {**args, "sparse_vectors_config": value}
    return [str.__str__(n) if isinstance(n, str) else n for n in dict.keys(value)], args


def _vector_name_slots(args: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    value = args.get("vector_name_config")
    if not isinstance(value, (models.SparseVectorNameConfig, models.DenseVectorNameConfig)):
        try:
            value = _NAME_CONFIG.validate_python(value)
        except pydantic.ValidationError:
            raise GuardArgumentTypeError(
                "create_vector_name() argument 'vector_name_config' must be a models.DenseVectorNameConfig "
                f"or models.SparseVectorNameConfig, not {type(value).__name__}") from None
        args = {**args, "vector_name_config": value}
    if not isinstance(value, models.SparseVectorNameConfig):
        return [], args
    name = args.get("vector_name")
    return [str.__str__(name) if isinstance(name, str) else name], args


def sparse_slots_message(method: str, collection: str, sensitivity: str, slots: list[Any]) -> str:
    """Why ``method`` may not add sparse slot(s) ``slots`` to sensitive ``collection``, and the fix."""
    if method == "create_vector_name":
        fix = "Add a dense vector here instead (models.DenseVectorNameConfig)"
    else:
        fix = f"Call {method} without those sparse_vectors_config entries (None or {{}} for none)"
    fix += ("; a sparse index of text that may be public belongs in a PUBLIC collection (a hybrid search "
            "then queries both collections and fuses the two result lists)")
    return (f"{method}: collection {collection!r} is {sensitivity}, and sparse vector slot(s) {slots} "
            "would hold lexical term weights (the words themselves, which the guard can neither redact, "
            "noise nor receipt): every write to them would be refused (InvalidVectorError). "
            f"{fix}. For keyword search here, filter on the payload text with models.MatchText. "
            "Nothing was sent")
