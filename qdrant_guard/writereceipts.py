"""The receipts a guarded write stores: the payload's receipt container (:func:`_container`), a
batch's digest (:func:`_batch_digest`), whether Qdrant's storage would move a vector off the
point of the commitment grid its receipt signs (:func:`_altered_by_storage`), and the reason a
refused write gives for a writer's receipt that does not verify (:func:`_receipt_refusal`)."""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from .receipts import PAYLOAD_CONTAINER_VERSION, ReceiptCheck, commitment_bytes, receipts_for_payload

_GRID_INV = 2.0 ** 20  # grid steps per unit (receipts.COMMIT_GRID = 2^-20)


def _container(receipts_by_name: dict[str, Any], own: set[int]) -> dict[str, Any]:
    """``receipts_for_payload(receipts_by_name)``, whose receipts are dicts (the guard's, or the
    writer's as receipts_from_payload read them), without copying those whose id is in ``own``."""
    if not own:
        return receipts_for_payload(receipts_by_name)
    return {"v": PAYLOAD_CONTAINER_VERSION,
            "vectors": {n: r if id(r) in own else dict(r) for n, r in receipts_by_name.items()}}


def _receipt_refusal(check: ReceiptCheck) -> str:
    """The reason a refused write names for a writer's receipt that did not verify: the check's
    reason, and for one dated ahead also its issued_at, the tolerance and the policy key that sets it
    (the generic advice, "forged, altered, replayed", fits none of that)."""
    if check.reason != "not_yet_valid":
        return check.reason
    return f"not_yet_valid: {check.detail}, or raise receipts.max_clock_skew_s in the policy"


def _batch_digest(receipts: list[dict[str, Any]]) -> str:
    # A Merkle batch carries one signature over its root, so the signatures identify the batch.
    sigs = sorted({str(r.get("sig", "")) for r in receipts})
    return hashlib.sha256("\n".join(sigs).encode("ascii")).hexdigest()


def _altered_by_storage(arr: np.ndarray, distance: str) -> bool:
    """Whether Qdrant's storage (float32, and unit length on Cosine collections) moves ``arr`` to
    another point of the receipt commitment grid: its receipt would then verify now, but never
    against the vector read back."""
    stored = arr.astype(np.float32)
    if distance == "Cosine":
        norm = np.linalg.norm(stored)
        if norm > 0:
            stored = stored / norm
            # Qdrant's float32 normalisation is not numpy's (local mode normalises the vector of a
            # point it replaces in float64, the server sums in its own order): a coordinate the
            # exact normalisation takes within 1/8 grid step of a rounding boundary may land on
            # either side. stored_form's vectors stay within 1/4 step of their grid points (at d = 2
            # and 3 by its repair step, _cosine_repair).
            exact = arr / np.linalg.norm(arr) * _GRID_INV
            ints = np.frombuffer(commitment_bytes(arr), dtype="<i4")
            if np.abs(exact - ints).max() > 0.375:
                return True
    return commitment_bytes(stored) != commitment_bytes(arr)
