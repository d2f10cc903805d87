"""Signed reconstruction-resistance receipts: what noise the signer says it added to a stored vector.

A receipt binds the noise parameters to a salted commitment of the vector stored in Qdrant (each
coordinate as its point on the 2^-20 grid, so a vector within half a step of it verifies alike),
the collection, the point id and the vector name, under an Ed25519 signature. It proves that the
holder of the signing key *asserted* these facts; it does not prove that noise was really drawn
(a compromised signer can lie). See docs/receipt-format.md.

This module issues receipts (:class:`ReceiptSigner`, :func:`issue_receipt`,
:func:`issue_receipts_batch`). The stored form and commitment are in :mod:`qdrant_guard.storedform`,
the format's constants and payload container in :mod:`qdrant_guard.receipt_format`, the
verification of one receipt in :mod:`qdrant_guard.receipt_verify` and of a collection's stored
vectors in :mod:`qdrant_guard.collection_verify`; their public names import from here too.
"""
from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import struct
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from . import merkle
from .canonical import canonical_json
from .collection_verify import PointReceiptReport as PointReceiptReport, averify as averify, verify as verify
from .errors import GuardArgumentTypeError, GuardArgumentValueError, ReceiptError
from .keys import key_id as _key_id
from .noise_params import NoiseParams, guarantee_mismatch
from .receipt_format import (
    ALGORITHM as ALGORITHM,
    BATCH_SIGNATURE_PREFIX as BATCH_SIGNATURE_PREFIX,
    ISSUED_AT_LEEWAY_S as ISSUED_AT_LEEWAY_S,
    PAYLOAD_CONTAINER_VERSION as PAYLOAD_CONTAINER_VERSION,
    REASONS as REASONS,
    RECEIPT_FORMAT as RECEIPT_FORMAT,
    RECEIPT_KEY as RECEIPT_KEY,
    SIGNATURE_PREFIX as SIGNATURE_PREFIX,
    _b64,
    _batch_message,
    normalize_point_id as normalize_point_id,
    receipts_for_payload as receipts_for_payload,
    receipts_from_payload as receipts_from_payload,
    stored_receipts as stored_receipts,
)
from .receipt_verify import (
    ReceiptCheck as ReceiptCheck,
    mechanism_mismatch as mechanism_mismatch,
    model_mismatch as model_mismatch,
    noise_shortfall as noise_shortfall,
    plain_receipt as plain_receipt,
    verify_receipt as verify_receipt,
)
from .storedform import (
    COMMIT_GRID as COMMIT_GRID,
    COMMITMENT_PREFIX as COMMITMENT_PREFIX,
    SALT_BYTES as SALT_BYTES,
    _GRID_BLOCK_ROWS,
    _as_vector,
    _grid_blocks,
    _grid_ints,
    commitment_bytes as commitment_bytes,
    stored_form as stored_form,
    stored_form_batch as stored_form_batch,
    vector_commitment as vector_commitment,
)

if TYPE_CHECKING:
    from .audit_mac import EntryMac

__all__ = [
    "RECEIPT_KEY",
    "RECEIPT_FORMAT",
    "COMMIT_GRID",
    "SIGNATURE_PREFIX",
    "BATCH_SIGNATURE_PREFIX",
    "REASONS",
    "ISSUED_AT_LEEWAY_S",
    "stored_form",
    "stored_form_batch",
    "commitment_bytes",
    "vector_commitment",
    "normalize_point_id",
    "ReceiptSigner",
    "ReceiptItem",
    "ReceiptCheck",
    "PointReceiptReport",
    "issue_receipt",
    "issue_receipts_batch",
    "receipts_for_payload",
    "receipts_from_payload",
    "stored_receipts",
    "verify_receipt",
    "verify",
    "averify",
]


# --------------------------------------------------------------------------- signing

class ReceiptSigner:
    """Holds an Ed25519 private key and its key id; signs receipts and audit checkpoints.

    Args:
        private_key: the signing key.
        key_id: identifier written into receipts (default: :func:`qdrant_guard.keys.key_id`).
            Verifiers look keys up by this id.
    """

    def __init__(self, private_key: Ed25519PrivateKey, *, key_id: str | None = None) -> None:
        if not isinstance(private_key, Ed25519PrivateKey):
            raise GuardArgumentTypeError(
                "ReceiptSigner() private_key must be an Ed25519PrivateKey, not "
                f"{type(private_key).__name__}"
            )
        if key_id is not None and (not isinstance(key_id, str) or not key_id):
            raise GuardArgumentTypeError("ReceiptSigner() key_id must be a non-empty str or None")
        self._sk = private_key
        self.public_key: Ed25519PublicKey = private_key.public_key()
        self.key_id: str = key_id if key_id is not None else _key_id(self.public_key)

    def sign(self, data: bytes) -> bytes:
        """Return the 64-byte Ed25519 signature of ``data``."""
        return self._sk.sign(data)

    @property
    def audit_mac_key(self) -> bytes:
        """The key of this signer's MACs on audit entries (:func:`qdrant_guard.audit_mac.mac_key`)."""
        return self.audit_mac.key

    @property
    def audit_mac(self) -> EntryMac:
        """This signer's :class:`qdrant_guard.audit_mac.EntryMac` (its key derived once)."""
        found: EntryMac | None = self.__dict__.get("_audit_mac")
        if found is None:
            from .audit_mac import EntryMac, mac_key

            found = self._audit_mac = EntryMac(self.key_id, mac_key(self._sk))
        return found

    def __repr__(self) -> str:
        return f"ReceiptSigner(key_id={self.key_id!r})"


@dataclass(frozen=True)
class ReceiptItem:
    """One (point, vector name) to receive a receipt in :func:`issue_receipts_batch`."""

    params: NoiseParams
    vector: Any
    collection: str
    point_id: Any
    vector_name: str = ""
    model_id: str | None = None
    issued_at: float | None = None


def new_item(params: NoiseParams, vector: Any, collection: str, point_id: Any, vector_name: str,
             model_id: str | None) -> ReceiptItem:
    """``ReceiptItem(...)`` (issued_at None) without the frozen dataclass's ``__init__``, which sets
    each field with its own object.__setattr__ (~1.2 us; the guarded upsert makes one a point): the
    same fields, in the same order, in the instance's __dict__."""
    item = object.__new__(ReceiptItem)
    item.__dict__.update(params=params, vector=vector, collection=collection, point_id=point_id,
                         vector_name=vector_name, model_id=model_id, issued_at=None)
    return item


def _body(signer: ReceiptSigner, item: ReceiptItem) -> dict[str, Any]:
    if not isinstance(item.params, NoiseParams):
        raise GuardArgumentTypeError(f"params must be NoiseParams, not {type(item.params).__name__}")
    if not isinstance(item.collection, str) or not item.collection:
        raise GuardArgumentTypeError("collection must be a non-empty str")
    if not isinstance(item.vector_name, str):
        raise GuardArgumentTypeError(f"vector_name must be str, not {type(item.vector_name).__name__}")
    if item.model_id is not None and not isinstance(item.model_id, str):
        raise GuardArgumentTypeError(f"model_id must be str or None, not {type(item.model_id).__name__}")
    arr = _as_vector(item.vector, "issue_receipt")
    ints = _grid_ints(arr, "issue_receipt")
    if not np.array_equal(ints.astype(np.float64) * COMMIT_GRID, arr):
        raise GuardArgumentValueError(
            "issue_receipt() vector is not on the 2^-20 commitment grid; pass "
            "stored_form(vector, distance=...) and store exactly that vector"
        )
    if item.params.dim != arr.size:
        raise GuardArgumentValueError(
            f"issue_receipt() params.dim is {item.params.dim} but the vector has {arr.size} values"
        )
    issued = time.time() if item.issued_at is None else item.issued_at
    if isinstance(issued, bool) or not isinstance(issued, (int, float)) or not math.isfinite(issued):
        raise GuardArgumentTypeError("issued_at must be a finite number of seconds since the epoch or None")
    salt = os.urandom(SALT_BYTES)
    return _body_dict(signer, item, _signed_params(item.params), _b64(salt),
                      vector_commitment(arr, salt), issued)


def _signed_params(params: NoiseParams) -> dict[str, Any]:
    # The params object as signed: float fields as float, dim as int, in field order.
    out = params.as_dict()
    for name in ("epsilon", "delta", "radius", "scale", "lattice_step"):
        out[name] = float(out[name])
    if out["clip_norm"] is not None:
        out["clip_norm"] = float(out["clip_norm"])
    out["dim"] = int(out["dim"])
    _refuse_lying_sentence(out)
    return out


def _refuse_lying_sentence(params: dict[str, Any]) -> None:
    # Signing a sentence the fields contradict would hand out a receipt that every verifier
    # refuses (guarantee_mismatch): refuse it here, where the caller can still fix it.
    try:
        wrong = guarantee_mismatch(params)
    except (TypeError, ValueError, KeyError):
        return  # a malformed field: the caller's own checks name it
    if wrong is not None:
        raise ReceiptError(
            f"issue_receipt() params.guarantee does not state the other fields ({wrong}); build "
            "NoiseParams with qdrant_guard.noise_params.guarantee_sentence(...) of its fields, or take "
            "the params privatize() returned"
        )


def _body_dict(signer: ReceiptSigner, item: ReceiptItem, params: dict[str, Any], salt: str,
               commitment: str, issued: float) -> dict[str, Any]:
    return {
        "format": RECEIPT_FORMAT,
        "alg": ALGORITHM,
        "kid": signer.key_id,
        "params": params,
        "model_id": item.model_id,
        "salt": salt,
        "commitment": commitment,
        "collection": item.collection,
        "point_id": normalize_point_id(item.point_id),
        "vector_name": item.vector_name,
        "issued_at": int(round(issued * 1000)),
    }


def _batch_bodies(signer: ReceiptSigner, items: Sequence[ReceiptItem]
                  ) -> tuple[list[dict[str, Any]], list[bytes]] | None:
    """The bodies of :func:`_body` for a whole batch at once and their canonical encodings, or
    None if any item needs the item-by-item path (which then raises the first error exactly as
    before).

    Vectors are validated, snapped and committed as one matrix, the salts come from one
    ``os.urandom`` call (16 independent random bytes per item, as before), and each distinct
    NoiseParams is converted once.
    """
    vectors = []
    for item in items:
        vec = item.vector
        if (type(item.params) is not NoiseParams or type(item.collection) is not str
                or not item.collection or type(item.vector_name) is not str
                or (item.model_id is not None and type(item.model_id) is not str)
                or type(vec) is not np.ndarray or vec.ndim != 1):
            return None
        issued = item.issued_at
        if issued is not None and (type(issued) not in (int, float) or not math.isfinite(issued)):
            return None
        vectors.append(vec)
    return _column_bodies(signer, [item.params for item in items], vectors, [item.collection for item in items],
                          [item.point_id for item in items], [item.vector_name for item in items],
                          [item.model_id for item in items], [item.issued_at for item in items])


def _column_bodies(signer: ReceiptSigner, params_of: Sequence[NoiseParams], vectors: Sequence[np.ndarray],
                   collections: Sequence[str], point_ids: Sequence[Any], vector_names: Sequence[str],
                   model_ids: Sequence[str | None], issued_ats: Sequence[float | None]
                   ) -> tuple[list[dict[str, Any]], list[bytes]] | None:
    """:func:`_batch_bodies` of the items these columns hold, once each item's field types are
    known to be those the fast path takes (NoiseParams, a non-empty str collection, a str vector
    name, None or a str model id, a 1-D ndarray vector, None or a finite int/float issued_at)."""
    dim = vectors[0].size
    if dim == 0 or any(v.size != dim for v in vectors):
        return None
    blocks = _grid_blocks(vectors)
    if blocks is None:
        return None
    params_by_id: dict[int, tuple[dict[str, Any], str]] = {}
    for prm in params_of:
        if prm.dim != dim:
            return None
        if id(prm) not in params_by_id:
            signed = _signed_params(prm)
            try:
                params_by_id[id(prm)] = (signed, canonical_json(signed).decode("utf-8"))
            except (TypeError, ValueError):
                return None
    n = len(vectors)
    row = 4 * dim
    salts = os.urandom(SALT_BYTES * n)
    salts_b64 = _b64_salts(salts, n)
    now_ms = int(round(time.time() * 1000))
    prefix = COMMITMENT_PREFIX
    dim_bytes = struct.pack("<I", dim)
    sha256 = hashlib.sha256
    kid = signer.key_id
    kid_json = _encode_str(kid)
    # The batch's collection, vector names and model ids repeat: each distinct one is encoded once.
    encoded_strs: dict[str, str] = {}
    bodies, encoded = [], []
    for i, (prm, collection, pid, vector_name, model_id, issued_at) in enumerate(
            zip(params_of, collections, point_ids, vector_names, model_ids, issued_ats)):
        salt = salts[SALT_BYTES * i:SALT_BYTES * (i + 1)]
        block, at = blocks[i // _GRID_BLOCK_ROWS], row * (i % _GRID_BLOCK_ROWS)
        commitment = sha256(b"".join((prefix, salt, dim_bytes, block[at:at + row]))).hexdigest()
        params, params_json = params_by_id[id(prm)]
        # normalize_point_id's own result for an int in range, without its isinstance chain.
        pid = f"int:{pid}" if type(pid) is int and 0 <= pid < _ID_LIMIT else normalize_point_id(pid)
        issued = now_ms if issued_at is None else int(round(issued_at * 1000))
        # The same dict as _body_dict, key for key in the same order.
        body = {
            "format": RECEIPT_FORMAT,
            "alg": ALGORITHM,
            "kid": kid,
            "params": dict(params),
            "model_id": model_id,
            "salt": salts_b64[i],
            "commitment": commitment,
            "collection": collection,
            "point_id": pid,
            "vector_name": vector_name,
            "issued_at": issued,
        }
        bodies.append(body)
        if (coll_json := encoded_strs.get(collection)) is None:
            coll_json = encoded_strs[collection] = _encode_str(collection)
        if (name_json := encoded_strs.get(vector_name)) is None:
            name_json = encoded_strs[vector_name] = _encode_str(vector_name)
        if model_id is None:
            model_json = "null"
        elif (cached := encoded_strs.get(model_id)) is not None:
            model_json = cached
        else:
            model_json = encoded_strs[model_id] = _encode_str(model_id)
        # canonical_json(body) (tests/test_receipts_batch.py checks it): the keys in code-point
        # order, the params encoded once per NoiseParams, the repeated strings once per batch;
        # issued_at is an int, and the point id ("int:<digits>" or "uuid:<hex and hyphens>"),
        # the hex commitment and the base64 salt hold no character JSON escapes.
        encoded.append((
            f'{{"alg":{_ALG_JSON},"collection":{coll_json},"commitment":"{commitment}",'
            f'"format":{_FORMAT_JSON},"issued_at":{issued},"kid":{kid_json},"model_id":{model_json},'
            f'"params":{params_json},"point_id":"{pid}","salt":"{salts_b64[i]}","vector_name":{name_json}}}'
        ).encode("utf-8"))
    return bodies, encoded


_ID_LIMIT = 2 ** 64


def _b64_salts(salts: bytes, n: int) -> list[str]:
    """``[_b64(salt) for salt in the n SALT_BYTES-byte salts of salts]`` with one base64 call.

    Each 16-byte salt, padded with two zero bytes to a multiple of three, encodes to 24
    characters whose first 22 are the salt's own encoding (the zeros only fill what the salt's
    "==" padding stands for), so each salt's text is its 22 characters and "==".
    """
    padded = np.zeros((n, SALT_BYTES + 2), dtype=np.uint8)
    padded[:, :SALT_BYTES] = np.frombuffer(salts, dtype=np.uint8).reshape(n, SALT_BYTES)
    text = base64.b64encode(padded.tobytes()).decode("ascii")
    return [text[24 * i:24 * i + 22] + "==" for i in range(n)]


_encode_str = json.encoder.encode_basestring  # json's own string encoder, as canonical_json uses
_ALG_JSON = _encode_str(ALGORITHM)
_FORMAT_JSON = _encode_str(RECEIPT_FORMAT)


def _check_signer(signer: Any, func: str) -> None:
    if not isinstance(signer, ReceiptSigner):
        raise GuardArgumentTypeError(f"{func}() signer must be a ReceiptSigner, not {type(signer).__name__}")


def issue_receipt(
    signer: ReceiptSigner,
    *,
    params: NoiseParams,
    vector: Any,
    collection: str,
    point_id: int | str | uuid.UUID,
    vector_name: str = "",
    model_id: str | None = None,
    issued_at: float | None = None,
) -> dict[str, Any]:
    """Issue one individually signed receipt for a stored vector.

    Args:
        signer: the signing key.
        params: the noise release parameters.
        vector: the stored form (output of :func:`stored_form`), exactly as sent to Qdrant.
        collection: collection name.
        point_id: Qdrant point id (unsigned int or UUID).
        vector_name: named vector ("" for the default vector).
        model_id: embedding model identifier, if known.
        issued_at: seconds since the epoch (default: now); recorded in integer milliseconds.

    Returns:
        A JSON-serialisable dict to store under :data:`RECEIPT_KEY` (via :func:`receipts_for_payload`).

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: the vector is invalid, off the commitment grid, or does not match ``params.dim``.
        ReceiptError: ``params.guarantee`` is not the sentence its fields give (the receipt would
            fail verification as ``guarantee_mismatch``).
    """
    _check_signer(signer, "issue_receipt")
    body = _body(signer, ReceiptItem(params, vector, collection, point_id, vector_name, model_id,
                                     issued_at))
    receipt = dict(body)
    receipt["sig"] = _b64(signer.sign(SIGNATURE_PREFIX + canonical_json(body)))
    return receipt


def issue_receipts_batch(signer: ReceiptSigner, items: Sequence[ReceiptItem]) -> list[dict[str, Any]]:
    """Issue receipts for many points under one signature over a Merkle root.

    Each receipt carries ``batch = {"index", "size", "path"}`` (its leaf index, the number of
    leaves and the sibling hashes) and ``sig`` (the root signature), so it verifies on its own.

    Args:
        signer: the signing key.
        items: one :class:`ReceiptItem` per (point, vector name).

    Returns:
        Receipts in the order of ``items`` (empty list for no items).

    Raises:
        ReceiptError: an item's ``params.guarantee`` is not the sentence its fields give.
    """
    _check_signer(signer, "issue_receipts_batch")
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise GuardArgumentTypeError(
            f"issue_receipts_batch() items must be a sequence of ReceiptItem, not {type(items).__name__}"
        )
    for i, item in enumerate(items):
        if not isinstance(item, ReceiptItem):
            raise GuardArgumentTypeError(f"items[{i}] must be ReceiptItem, not {type(item).__name__}")
    if not items:
        return []
    fast = _batch_bodies(signer, items)
    if fast is None:
        bodies = [_body(signer, item) for item in items]
        encoded = [canonical_json(b) for b in bodies]
    else:
        bodies, encoded = fast
    return _signed_batch(signer, bodies, encoded)


def issue_receipts_rows(signer: ReceiptSigner, groups: Sequence[tuple[NoiseParams, Sequence[np.ndarray], str,
                                                                       Sequence[Any], str, Sequence[str | None]]]
                        ) -> list[dict[str, Any]]:
    """:func:`issue_receipts_batch` of the items ``ReceiptItem(params, vector, collection, point_id,
    vector_name, model_id)`` for each ``(params, vectors, collection, point_ids, vector_name,
    model_ids)`` group and its vectors, point ids and model ids in turn (issued_at None), without
    making the items: the guarded upsert's receipts, one group per noised vector name. The same
    receipts, errors and order; items are made only where issue_receipts_batch's fast path would
    not take them."""
    _check_signer(signer, "issue_receipts_rows")
    for i, (_, vecs, _, pids, _, models_) in enumerate(groups):
        # The groups are flattened column by column below: a short column would shift the point ids
        # (or model ids) of every later row and group, and each receipt would name another point.
        if not len(vecs) == len(pids) == len(models_):
            raise GuardArgumentValueError(
                f"issue_receipts_rows() group {i} has {len(vecs)} vector(s), {len(pids)} point id(s) and "
                f"{len(models_)} model id(s); give one point id and one model id (or None) per vector")
    fast = None
    if all(type(prm) is NoiseParams and type(coll) is str and coll and type(vname) is str
           and all(m is None or type(m) is str for m in models_)
           and all(type(v) is np.ndarray and v.ndim == 1 for v in vecs)
           for prm, vecs, coll, _, vname, models_ in groups):
        n = sum(len(g[1]) for g in groups)
        if n:
            fast = _column_bodies(
                signer, [g[0] for g in groups for _ in range(len(g[1]))], [v for g in groups for v in g[1]],
                [g[2] for g in groups for _ in range(len(g[1]))], [p for g in groups for p in g[3]],
                [g[4] for g in groups for _ in range(len(g[1]))], [m for g in groups for m in g[5]], [None] * n)
    if fast is None:
        return issue_receipts_batch(signer, [
            new_item(prm, v, coll, pid, vname, m)
            for prm, vecs, coll, pids, vname, models_ in groups for v, pid, m in zip(vecs, pids, models_)])
    return _signed_batch(signer, *fast)


def _signed_batch(signer: ReceiptSigner, bodies: list[dict[str, Any]], encoded: list[bytes]) -> list[dict[str, Any]]:
    """The receipts of a batch's bodies: one signature over the Merkle root of their encodings,
    and each its leaf's index and audit path."""
    levels = merkle.build_levels([merkle.leaf_hash(e) for e in encoded])
    root = levels[-1][0]
    sig = _b64(signer.sign(_batch_message(root, len(bodies))))
    hex_levels = [[h.hex() for h in level] for level in levels]  # each node's hex once
    size = len(bodies)
    # Every leaf's audit path in one pass (merkle.audit_paths equals audit_path leaf by leaf).
    for i, (receipt, path) in enumerate(zip(bodies, merkle.audit_paths(hex_levels))):
        receipt["batch"] = {"index": i, "size": size, "path": path}
        receipt["sig"] = sig
    return bodies
