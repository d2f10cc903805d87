"""The receipt format's shared parts: its constants, the reasons a check reports, a point id's text
form, canonical base64, the message a batch signature covers, and the payload container receipts are
stored in.

Issuing (:mod:`qdrant_guard.receipts`) and verification (:mod:`qdrant_guard.receipt_verify`,
:mod:`qdrant_guard.collection_verify`) use them; docs/receipt-format.md describes the format. :mod:`qdrant_guard.receipts` re-exports the
public names.
"""
from __future__ import annotations

import base64
import re
import struct
import uuid
from typing import Any, Mapping

from .errors import GuardArgumentTypeError, GuardArgumentValueError, ReceiptError
from .point_uuid import real_uuid

__all__ = [
    "RECEIPT_KEY",
    "RECEIPT_FORMAT",
    "SIGNATURE_PREFIX",
    "BATCH_SIGNATURE_PREFIX",
    "REASONS",
    "ISSUED_AT_LEEWAY_S",
    "normalize_point_id",
    "receipts_for_payload",
    "receipts_from_payload",
    "stored_receipts",
]

RECEIPT_KEY = "_qdrant_guard_receipt"
RECEIPT_FORMAT = "qg-receipt/1"
PAYLOAD_CONTAINER_VERSION = 1
SIGNATURE_PREFIX = b"qdrant-guard receipt v1\x00"
BATCH_SIGNATURE_PREFIX = b"qdrant-guard receipt batch v1\x00"
#: The default clock-skew tolerance (``max_clock_skew_s``): receipts issued more than this many
#: seconds after the verifier's clock are refused as ``not_yet_valid``.
ISSUED_AT_LEEWAY_S = 300.0
ALGORITHM = "Ed25519"

REASONS = (
    "ok",
    "malformed",
    "non_canonical",
    "unknown_key",
    "revoked_key",
    "bad_signature",
    "bad_merkle_proof",
    "vector_mismatch",
    "collection_mismatch",
    "point_mismatch",
    "vector_name_mismatch",
    "expired",
    # Issued more than max_clock_skew_s after the verifier's clock (a receipt dated ahead never ages out).
    "not_yet_valid",
    "unsupported_version",
    "algorithm",
    # The signed guarantee sentence does not state the signed numeric fields (it names another
    # epsilon, delta, radius, sigma or mechanism, or is no wording this library writes).
    "guarantee_mismatch",
    # Only from verify(): the point or its receipt is absent.
    "missing_point",
    "missing_receipt",
    # Only from verify(): a sparse vector or multivector, which the guard never stores on a
    # sensitive collection (no receipt can cover one).
    "unsupported_vector",
    # Only from verify(check_noise=True): the signature verified but the signed noise parameters
    # are ones a guarded write refuses (noise.check_release, or weaker than noise_policy).
    "insufficient_noise",
    # Only from verify(noise_policy=...): the signature verified but the receipt names another noise
    # mechanism than the collection's [noise] mechanism (mechanism_mismatch).
    "mechanism_mismatch",
    # Only from verify(policy=...): the signature verified but the receipt's signed model_id names
    # another embedding model than the policy's utility.embedding_model(s) declares for the vector.
    "model_mismatch",
    # Only from verify(policy=...) on a PUBLIC collection: a vector without a receipt, which that
    # class does not need. Not a failure (PointReceiptReport.ok is True), but no receipt verified.
    "not_required",
)

_HEX64 = re.compile(r"[0-9a-f]{64}")
_INT_ID = re.compile(r"int:(0|[1-9][0-9]*)")


def normalize_point_id(point_id: Any) -> str:
    """Return the typed text form of a Qdrant point id: ``"int:<n>"`` or ``"uuid:<lowercase-hyphenated>"``.

    Raises:
        TypeError: not an int, str or uuid.UUID (bool is refused).
        ValueError: a negative or >= 2^64 int, or a str that is not a UUID.
    """
    if isinstance(point_id, bool):
        raise GuardArgumentTypeError("point_id must be int, str or uuid.UUID, not bool")
    if isinstance(point_id, int):
        # The int's own value, which pydantic sends: a subclass may override __int__ and comparisons.
        value = int.__int__(point_id)
        if not 0 <= value < 2 ** 64:
            raise GuardArgumentValueError(f"point_id {value} is outside Qdrant's unsigned 64-bit id range")
        return f"int:{value}"
    if isinstance(point_id, uuid.UUID):
        # The id's own 128 bits, not its str(): a subclass may override __str__ (or shadow .int).
        try:
            text = str(real_uuid(point_id))
        except GuardArgumentValueError:
            raise GuardArgumentTypeError(
                f"point_id {type(point_id).__name__} holds no UUID value; pass a uuid.UUID or its str") from None
        if type(point_id) is not uuid.UUID and str(point_id) != text:
            # qdrant-client sends str(id): the receipt would name one point and Qdrant store another
            # (or text that is no UUID, which the batch's inline JSON does not escape).
            raise GuardArgumentValueError(
                f"point_id {text} is a {type(point_id).__name__} whose str() is {str(point_id)!r}, not its "
                f"value, and qdrant-client would send that; pass str(point_id) or a plain uuid.UUID")
        return f"uuid:{text}"
    if isinstance(point_id, str):
        try:
            return f"uuid:{uuid.UUID(point_id)}"
        except ValueError:
            raise GuardArgumentValueError(
                f"point_id {point_id!r} is neither an unsigned integer nor a UUID string"
            ) from None
    raise GuardArgumentTypeError(f"point_id must be int, str or uuid.UUID, not {type(point_id).__name__}")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    raw = base64.b64decode(text, validate=True)
    if _b64(raw) != text:
        raise ValueError("non-canonical base64")
    return raw


def _batch_message(root: bytes, size: int) -> bytes:
    return BATCH_SIGNATURE_PREFIX + root + struct.pack(">Q", size)


def receipts_for_payload(receipts_by_name: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Wrap receipts for storage: ``payload[RECEIPT_KEY] = {"v": 1, "vectors": {name: receipt}}``.

    The default (unnamed) vector uses the name ``""``.
    """
    # `type(x) is dict` first: isinstance against typing.Mapping goes through typing's generic
    # alias checks (microseconds a call, twice per point on every guarded write); a dict is a
    # Mapping, so the outcome is the same.
    if type(receipts_by_name) is not dict and not isinstance(receipts_by_name, Mapping):
        raise GuardArgumentTypeError(
            "receipts_for_payload() argument must be a mapping of vector name to receipt, not "
            f"{type(receipts_by_name).__name__}"
        )
    vectors = {}
    for name, receipt in receipts_by_name.items():
        if not isinstance(name, str):
            raise GuardArgumentTypeError(f"vector name must be str, not {type(name).__name__}")
        if type(receipt) is not dict and not isinstance(receipt, Mapping):
            raise GuardArgumentTypeError(f"receipt for {name!r} must be a dict, not {type(receipt).__name__}")
        vectors[name] = dict(receipt)
    return {"v": PAYLOAD_CONTAINER_VERSION, "vectors": vectors}


def receipts_from_payload(payload: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return ``{vector_name: receipt}`` stored in a point payload (``{}`` when there is none).

    Raises:
        ReceiptError: the reserved key holds something that is not a version-1 container.
    """
    if payload is None:
        return {}
    # `type(x) is dict` first, as in receipts_for_payload (a dict is a Mapping: same outcome;
    # three typing.Mapping checks cost microseconds a point, up to three times per updated point).
    if type(payload) is not dict and not isinstance(payload, Mapping):
        raise GuardArgumentTypeError(f"payload must be a mapping or None, not {type(payload).__name__}")
    container = payload.get(RECEIPT_KEY)
    if container is None:
        return {}
    if (
        (type(container) is not dict and not isinstance(container, Mapping))
        or container.get("v") != PAYLOAD_CONTAINER_VERSION
        or type(container.get("v")) is not int
        or (type(vectors := container.get("vectors")) is not dict and not isinstance(vectors, Mapping))
    ):
        raise ReceiptError(
            f"payload[{RECEIPT_KEY!r}] is not a receipt container "
            '{"v": 1, "vectors": {name: receipt}}'
        )
    return dict(container["vectors"])


def stored_receipts(payload: Mapping[str, Any] | None) -> dict[str, Any]:
    """:func:`receipts_from_payload` for a point read back from Qdrant: a malformed container
    (written around the guard) counts as no receipts, so the vectors it claims to certify are
    treated as unreceipted instead of failing every read of the collection."""
    try:
        return receipts_from_payload(payload)
    except ReceiptError:
        return {}
