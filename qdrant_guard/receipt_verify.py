"""Verifying receipts: one receipt against the vector and the place it was read from
(:func:`verify_receipt`), with the comparisons with a policy that guarded writes and reads make too
(:func:`noise_shortfall`, :func:`mechanism_mismatch`, :func:`model_mismatch`). Every stored vector
of a collection is verified by :mod:`qdrant_guard.collection_verify`.
:mod:`qdrant_guard.receipts` re-exports the public names.
"""
from __future__ import annotations

import binascii
import json
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Mapping

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import merkle
from .canonical import canonical_json, decode_canonical
from .errors import GuardArgumentTypeError, GuardArgumentValueError, InvalidVectorError
from .names import shown as _shown
from .noise_params import DTYPES, MECHANISMS, NoiseParams, guarantee_mismatch
from .receipt_format import (
    ALGORITHM,
    ISSUED_AT_LEEWAY_S,
    RECEIPT_FORMAT,
    SIGNATURE_PREFIX,
    _HEX64,
    _INT_ID,
    _batch_message,
    _unb64,
    normalize_point_id,
)
from .storedform import SALT_BYTES, vector_commitment

__all__ = [
    "ReceiptCheck",
    "verify_receipt",
]


@dataclass(frozen=True)
class ReceiptCheck:
    """Outcome of :func:`verify_receipt`.

    Attributes:
        ok: True only if every check passed.
        reason: ``"ok"`` or one of :data:`REASONS`.
        params: the signed noise parameters (only when ``ok``, or ``"insufficient_noise"``).
        key_id: the key id named by the receipt (when it could be read).
        detail: a human-readable explanation.
        model_id: the embedding model the receipt's signer names (its signed ``model_id``; only
            when the signature verified; None also when the signer named none). It is what the
            signer asserts: nothing in a vector shows which model made it.
    """

    ok: bool
    reason: str
    params: NoiseParams | None
    key_id: str | None
    detail: str = ""
    model_id: str | None = None

    def __bool__(self) -> bool:
        return self.ok


class _Reject(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


_TOP_FIELDS = {
    "format": str, "alg": str, "kid": str, "params": dict, "model_id": (str, type(None)),
    "salt": str, "commitment": str, "collection": str, "point_id": str, "vector_name": str,
    "issued_at": int, "sig": str,
}


_PARAM_FIELDS = {
    "mechanism": str, "mechanism_version": str, "epsilon": float, "delta": float,
    "radius": float, "clip_norm": (float, type(None)), "scale": float, "lattice_step": float,
    "rng_id": str, "dim": int, "dtype": str, "guarantee": str,
}


def _check_fields(obj: Mapping[str, Any], spec: Mapping[str, Any], where: str,
                  optional: Collection[str] = ()) -> None:
    missing = [k for k in spec if k not in obj and k not in optional]
    if missing:
        raise _Reject("malformed", f"{where} lacks field(s) {', '.join(sorted(missing))}")
    extra = [k for k in obj if k not in spec]
    if extra:
        raise _Reject("malformed", f"{where} has unknown field(s) {', '.join(sorted(map(str, extra)))}")
    for name, want in spec.items():
        if name not in obj:
            continue
        value = obj[name]
        if isinstance(value, bool) and want is not bool:
            raise _Reject("malformed", f"{where}.{name} is a bool")
        if isinstance(value, want):
            continue
        wants_float = want is float or (isinstance(want, tuple) and float in want)
        if wants_float and isinstance(value, int):
            raise _Reject("non_canonical", f"{where}.{name} is the int {value}; a float is signed")
        raise _Reject("malformed", f"{where}.{name} has type {type(value).__name__}")


# Deeper than any receipt (receipt.batch.path's items are at depth 3): a value below is kept as it
# is, and the field checks refuse it.
_PLAIN_DEPTH = 6


def plain_receipt(value: Any, _depth: int = 0) -> Any:
    """A receipt given as Python objects, as exact JSON types (str, int, float, bool, None, list,
    dict): a str, int or float subclass becomes its value, a dict subclass or other Mapping a dict
    of its entries, a list subclass or tuple a list. Anything else is kept (the checks refuse it).

    The signature covers the values (JSON encodes a subclass by its value), but the binding
    checks compare with ``!=``, ``>`` and ``in``: a str subclass whose ``__ne__`` said False made
    a receipt for another point, collection or vector verify here, and a float subclass could hide
    an epsilon above the ceiling. Verifying this copy, and storing it, closes that."""
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    if _depth > _PLAIN_DEPTH:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):  # bool is exact (it has no subclasses)
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, dict) or (_depth == 0 and isinstance(value, Mapping)):
        items = dict.items(value) if isinstance(value, dict) else value.items()
        return {plain_receipt(k, _depth + 1): plain_receipt(v, _depth + 1) for k, v in items}
    if isinstance(value, list):
        return [plain_receipt(v, _depth + 1) for v in list.__iter__(value)]
    return value


def _parse(receipt: Any) -> tuple[dict[str, Any], bytes, dict[str, Any] | None]:
    if isinstance(receipt, Mapping):
        receipt = plain_receipt(receipt)
    if isinstance(receipt, (bytes, bytearray, str)):
        try:
            data = receipt.encode("utf-8") if isinstance(receipt, str) else bytes(receipt)
        except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 text, so no receipt
            raise _Reject("malformed", f"receipt text is not valid Unicode ({exc.reason} at index "
                                       f"{exc.start})") from None
        try:
            receipt = decode_canonical(data)
        except (ValueError, TypeError) as exc:
            try:
                json.loads(data)
            except (ValueError, RecursionError):
                raise _Reject("malformed", f"receipt is not JSON: {exc}") from None
            raise _Reject("non_canonical", str(exc)) from None
    if not isinstance(receipt, Mapping):
        raise _Reject("malformed", f"receipt is a {type(receipt).__name__}, not a JSON object")
    fmt = receipt.get("format")
    if not isinstance(fmt, str):
        raise _Reject("malformed", "receipt has no 'format' string")
    if fmt != RECEIPT_FORMAT:
        raise _Reject("unsupported_version", f"receipt format {fmt!r}; this verifier reads {RECEIPT_FORMAT!r}")
    if receipt.get("alg") != ALGORITHM:
        raise _Reject("algorithm", f"receipt alg is {receipt.get('alg')!r}; only {ALGORITHM!r} is accepted")
    spec = dict(_TOP_FIELDS)
    spec["batch"] = dict
    _check_fields(receipt, spec, "receipt", optional=("batch",))
    _check_fields(receipt["params"], _PARAM_FIELDS, "receipt.params")
    params = receipt["params"]
    if params["mechanism"] not in MECHANISMS:
        raise _Reject("malformed", f"unknown mechanism {params['mechanism']!r}")
    if params["dim"] <= 0:
        raise _Reject("malformed", "params.dim must be positive")
    if params["dtype"] not in DTYPES:
        # No release is made in another dtype, and the guarantee sentence's float64 caveat keys on it.
        raise _Reject("malformed", f"unknown params.dtype {params['dtype']!r} (a release is made in "
                                   f"{' or '.join(DTYPES)}); re-noise with qdrant_guard.noise.privatize")
    if not _HEX64.fullmatch(receipt["commitment"]):
        kind = "non_canonical" if _HEX64.fullmatch(receipt["commitment"].lower()) else "malformed"
        raise _Reject(kind, "commitment must be 64 lowercase hex digits")
    try:
        salt = _unb64(receipt["salt"])
    except (binascii.Error, ValueError) as exc:
        raise _Reject("malformed", f"salt is not canonical base64: {exc}") from None
    if len(salt) != SALT_BYTES:
        raise _Reject("malformed", f"salt has {len(salt)} bytes, expected {SALT_BYTES}")
    pid = receipt["point_id"]
    if pid.startswith("int:"):
        # 2^64 - 1 has 20 digits; the length check first keeps int() from refusing (ValueError)
        # a string of more than 4300 digits.
        if not _INT_ID.fullmatch(pid) or len(pid) > 24 or int(pid[4:]) >= 2 ** 64:
            raise _Reject("non_canonical" if pid[4:].isdigit() else "malformed",
                          f"point_id {pid!r} is not 'int:' + a canonical unsigned 64-bit decimal")
    elif pid.startswith("uuid:"):
        try:
            norm = f"uuid:{uuid.UUID(pid[5:])}"
        except ValueError:
            raise _Reject("malformed", f"point_id {pid!r} is not a UUID") from None
        if norm != pid:
            raise _Reject("non_canonical", f"point_id {pid!r} is not lowercase hyphenated ({norm!r})")
    else:
        raise _Reject("malformed", f"point_id {pid!r} must start with 'int:' or 'uuid:'")
    if receipt["issued_at"] < 0:
        raise _Reject("malformed", "issued_at is negative")
    try:
        sig = _unb64(receipt["sig"])
    except (binascii.Error, ValueError):
        raise _Reject("bad_signature", "sig is not canonical base64") from None
    body = {k: v for k, v in receipt.items() if k not in ("sig", "batch")}
    try:
        canonical_json(body)
    except (TypeError, ValueError) as exc:
        raise _Reject("malformed", f"receipt cannot be canonically encoded: {exc}") from None
    batch = receipt.get("batch")
    if batch is not None:
        _check_fields(batch, {"index": int, "size": int, "path": list}, "receipt.batch")
        if not all(isinstance(h, str) for h in batch["path"]):
            raise _Reject("bad_merkle_proof", "batch.path must be a list of hex strings")
        if batch["size"] >= 2 ** 64:
            # The root signature encodes size as a uint64: a larger size was never signed.
            raise _Reject("malformed", f"batch.size {batch['size']} does not fit the signed uint64")
    return dict(body), sig, (dict(batch) if batch is not None else None)


def _verify_signature(body: dict[str, Any], sig: bytes, batch: dict[str, Any] | None,
                      pk: Ed25519PublicKey) -> None:
    if len(sig) != 64:
        raise _Reject("bad_signature", f"signature has {len(sig)} bytes; Ed25519 signatures have 64")
    body_bytes = canonical_json(body)
    if batch is None:
        try:
            pk.verify(sig, SIGNATURE_PREFIX + body_bytes)
        except InvalidSignature:
            raise _Reject("bad_signature", "Ed25519 signature does not verify") from None
        return
    path_hex = batch["path"]
    if not all(_HEX64.fullmatch(h) for h in path_hex):
        raise _Reject("bad_merkle_proof", "batch.path entries must be 64 lowercase hex digits")
    try:
        root = merkle.root_from_path(merkle.leaf_hash(body_bytes), batch["index"], batch["size"],
                                     [bytes.fromhex(h) for h in path_hex])
    except ValueError as exc:
        raise _Reject("bad_merkle_proof", str(exc)) from None
    try:
        pk.verify(sig, _batch_message(root, batch["size"]))
    except InvalidSignature:
        # The signature covers only the root: a changed body, path, index or size and a forged
        # signature are indistinguishable here.
        raise _Reject("bad_merkle_proof",
                      "the Merkle root rebuilt from this receipt is not the signed root") from None


def _verify_values(vector: Any) -> np.ndarray:
    """The ``vector`` argument of :func:`verify_receipt` as float64 values (any shape).

    A stored vector is real numbers; Qdrant returns a list of floats. Numbers in any exact form
    are read as their values (float32 and float64 arrays of the same values verify alike, since
    the commitment is to the 2^-20 grid integers). What numpy would otherwise convert silently is
    refused: complex values (numpy drops the imaginary part), strings (numpy parses them), bools,
    Python objects, float16 (it cannot hold a stored float32 vector, so it would fail as if the
    stored vector had changed) and masked arrays with masked entries (numpy reads the hidden data).
    """
    if vector is None or isinstance(vector, (str, bytes, dict)):
        raise GuardArgumentTypeError(f"vector must be a sequence of numbers, not {type(vector).__name__}")
    fix = ("pass the vector as read from Qdrant (a list of floats) or a float32/float64 numpy "
           "array of it")
    if isinstance(vector, np.ma.MaskedArray) and np.ma.is_masked(vector):
        raise InvalidVectorError(f"vector is a masked array with masked entries, which have no value; {fix}")
    try:
        arr = np.asarray(vector)
    except (TypeError, ValueError) as exc:
        raise InvalidVectorError(f"vector is not an array of numbers ({exc}); {fix}") from None
    kind, size = arr.dtype.kind, arr.dtype.itemsize
    if kind not in "fiu" or (kind == "f" and size < 4):
        if kind == "f":
            raise InvalidVectorError(f"vector has dtype {arr.dtype}, which cannot hold the stored float32 "
                                     f"values exactly; {fix}")
        what = {"c": "complex values", "b": "bools", "U": "strings", "S": "bytes",
                "O": "Python objects"}.get(kind, f"values of dtype {arr.dtype}")
        raise InvalidVectorError(f"vector holds {what}, not real numbers; {fix}")
    return arr.astype(np.float64, copy=False)


def _check_trusted(trusted_keys: Any, revoked: Any) -> None:
    if not isinstance(trusted_keys, Mapping):
        raise GuardArgumentTypeError(
            "trusted_keys must be a mapping of key id to Ed25519PublicKey, not "
            f"{type(trusted_keys).__name__}"
        )
    for kid, pk in trusted_keys.items():
        if not isinstance(pk, Ed25519PublicKey):
            raise GuardArgumentTypeError(
                f"trusted_keys[{kid!r}] must be an Ed25519PublicKey, not {type(pk).__name__}"
            )
    if isinstance(revoked, (str, bytes)) or not isinstance(revoked, Iterable):
        raise GuardArgumentTypeError(f"revoked must be a collection of key ids, not {type(revoked).__name__}")


def _check_times(now: Any, max_age_s: Any, max_clock_skew_s: Any = None) -> None:
    for label, value in (("now", now), ("max_age_s", max_age_s), ("max_clock_skew_s", max_clock_skew_s)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise GuardArgumentTypeError(f"{label} must be a number or None, not {type(value).__name__}")
    # NaN compares false with everything: the age check would pass a receipt of any age.
    if now is not None and not math.isfinite(now):
        raise GuardArgumentValueError(f"now must be a finite number of seconds, got {now!r}")
    if max_age_s is not None and math.isnan(max_age_s):
        raise GuardArgumentValueError("max_age_s must be a number of seconds or None, got nan")
    if max_clock_skew_s is not None and not max_clock_skew_s >= 0:
        # A negative tolerance would refuse receipts issued in the last seconds, NaN none at all.
        raise GuardArgumentValueError(f"max_clock_skew_s must be a number of seconds >= 0, or None to accept "
                                      f"receipts dated in the future, got {max_clock_skew_s!r}")


def _dated_ahead(issued_ms: int, ahead_s: float, skew_s: float) -> str:
    """The detail of a receipt issued ``ahead_s`` seconds after the verifier's clock."""
    from .boundary import _utc

    return (f"receipt issued_at is {issued_ms} ms ({_utc(issued_ms // 1000)}), {ahead_s:.0f} s in the future of "
            f"this clock, beyond the {skew_s:g} s clock-skew tolerance (max_clock_skew_s): the signer's clock is "
            "ahead or wrong, and a receipt dated ahead would never age out; sign a fresh receipt on a host "
            "with a correct clock")


def verify_receipt(
    receipt: Any,
    *,
    vector: Any,
    collection: str,
    point_id: int | str | uuid.UUID,
    vector_name: str = "",
    trusted_keys: Mapping[str, Ed25519PublicKey],
    revoked: Collection[str] = (),
    now: float | None = None,
    max_age_s: float | None = None,
    max_clock_skew_s: float | None = ISSUED_AT_LEEWAY_S,
) -> ReceiptCheck:
    """Verify a receipt against the vector and the place it was read from.

    Checks, in order: format and algorithm, field types and canonical form, signer key (trusted,
    not revoked), signature (or Merkle proof + root signature), that the ``guarantee`` sentence
    states the numeric fields (``"guarantee_mismatch"``: it must be
    :func:`qdrant_guard.noise_params.guarantee_sentence` of them in one of the wordings this
    library has written), age, collection, point id, vector name, and the salted commitment of
    ``vector`` rounded to the 2^-20 grid. It does not judge the
    signed noise parameters (a TEST-ONLY seeded release verifies too): apply
    :func:`qdrant_guard.noise.check_release` to ``params`` for that, as the guard does on writes.
    A receipt that verifies proves what its signer asserts about the stored vector, not that the
    noise was drawn (docs/receipt-format.md, "What a receipt proves, and what it does not").

    Args:
        receipt: the receipt dict (as stored in the payload), or its JSON bytes/str, which must
            then be canonical. A dict is read as the JSON values it holds (:func:`plain_receipt`:
            a str, int or float subclass as its value), so its own comparisons decide nothing.
        vector: the vector read back from Qdrant: a list of numbers (numpy scalars too) or a
            float32/float64 (or integer) numpy array, any strides. The receipt commits to the
            values rounded to the 2^-20 grid, so float32 and float64 forms of the same values
            verify alike. A vector of another shape or length is ``"vector_mismatch"``.
        collection: the collection it was read from.
        point_id: the point it was read from.
        vector_name: the named vector it was read from ("" for the default vector).
        trusted_keys: key id -> Ed25519 public key.
        revoked: revoked key ids.
        now: current time in seconds (default: ``time.time()``).
        max_age_s: reject receipts issued more than this many seconds before ``now``
            (``"expired"``). None (the default): no age limit.
        max_clock_skew_s: reject receipts issued more than this many seconds after ``now``
            (``"not_yet_valid"``), with or without ``max_age_s``: a receipt dated ahead never ages
            out, and shows a signer whose clock is wrong or lies. The default,
            :data:`ISSUED_AT_LEEWAY_S` (300 s), covers hosts whose clocks drift apart between
            synchronisations; 0 allows none. None turns the check off (then, under ``max_age_s``, a
            receipt dated ahead counts as fresh until that date).

    Returns:
        :class:`ReceiptCheck`; never raises for a bad receipt.

    Raises:
        TypeError: an argument (not the receipt) has the wrong type.
        InvalidVectorError: ``vector`` holds something other than real numbers (complex values,
            strings, bools, objects, float16, masked entries), which numpy would convert silently.
        ValueError: ``now`` is not finite, ``max_age_s`` is NaN, or ``max_clock_skew_s`` is negative
            or NaN.
    """
    if not isinstance(collection, str):
        raise GuardArgumentTypeError(f"collection must be str, not {type(collection).__name__}")
    if not isinstance(vector_name, str):
        raise GuardArgumentTypeError(f"vector_name must be str, not {type(vector_name).__name__}")
    # Their characters: a str subclass's reflected __ne__ would answer the binding checks below.
    collection, vector_name = str.__str__(collection), str.__str__(vector_name)
    want_pid = normalize_point_id(point_id)
    _check_trusted(trusted_keys, revoked)
    _check_times(now, max_age_s, max_clock_skew_s)
    values = _verify_values(vector)
    kid = None
    try:
        body, sig, batch = _parse(receipt)
        kid = body["kid"]
        if kid in set(revoked):
            raise _Reject("revoked_key", f"signer key {_shown(kid)} is revoked")
        pk = trusted_keys.get(kid)
        if pk is None:
            raise _Reject("unknown_key", f"signer key {_shown(kid)} is not trusted")
        _verify_signature(body, sig, batch, pk)
        # A reader shows the sentence, not the fields: one that says other numbers misleads even
        # under a trusted signature.
        wrong = guarantee_mismatch(body["params"])
        if wrong is not None:
            raise _Reject("guarantee_mismatch", wrong)
        if max_age_s is not None or max_clock_skew_s is not None:
            current = time.time() if now is None else float(now)
            try:
                issued_s = body["issued_at"] / 1000.0
            except OverflowError:  # a signed int beyond float range: far in the future
                issued_s = math.inf
            age = current - issued_s
            if max_clock_skew_s is not None and age < -max_clock_skew_s:
                # A negative age never exceeds max_age_s: such a receipt would never expire.
                raise _Reject("not_yet_valid", _dated_ahead(body["issued_at"], -age, max_clock_skew_s))
            if max_age_s is not None and age > max_age_s:
                raise _Reject("expired", f"receipt issued {age:.0f} s ago; max_age_s={max_age_s}")
        if body["collection"] != collection:
            raise _Reject("collection_mismatch",
                          f"receipt is for collection {body['collection']!r}, not {collection!r}")
        if body["point_id"] != want_pid:
            raise _Reject("point_mismatch", f"receipt is for point {body['point_id']}, not {want_pid}")
        if body["vector_name"] != vector_name:
            raise _Reject("vector_name_mismatch",
                          f"receipt is for vector {body['vector_name']!r}, not {vector_name!r}")
        if values.ndim != 1:
            raise _Reject("vector_mismatch",
                          f"vector has shape {values.shape}; a receipt binds one 1-D dense vector of "
                          f"{body['params']['dim']} values (for an array of shape (1, d) pass vector[0])")
        if values.size != body["params"]["dim"]:
            raise _Reject("vector_mismatch",
                          f"vector has {values.size} values; the receipt's dim is {body['params']['dim']}")
        try:
            got = vector_commitment(values, _unb64(body["salt"]))
        except (TypeError, ValueError) as exc:
            raise _Reject("vector_mismatch", f"vector cannot be committed: {exc}") from None
        if got != body["commitment"]:
            raise _Reject("vector_mismatch", "stored vector does not match the signed commitment")
        params = NoiseParams(**body["params"])
    except _Reject as rej:
        return ReceiptCheck(False, rej.reason, None, kid if isinstance(kid, str) else None, rej.detail)
    model_id = body["model_id"]
    # Its characters: a str subclass (a receipt given as a dict) could compare equal to any name.
    return ReceiptCheck(True, "ok", params, kid, "receipt verified",
                        None if model_id is None else str.__str__(model_id))


def noise_shortfall(params: NoiseParams, noise_policy: Any) -> str | None:
    """Why ``params`` are weaker than ``noise_policy`` (a policy.NoisePolicy), or None.

    The comparison a guarded write makes on a receipted vector (writes.py) and ``verify`` makes with
    ``noise_policy=``: a larger epsilon, a smaller protected radius, a larger delta, or less
    clipping than the policy states (the radius is measured between inputs clipped to clip_norm,
    and clipping harder never increases a distance, so only a larger clip_norm is weaker).
    """
    clip = noise_policy.clip_norm
    clipped_less = clip is not None and (params.clip_norm is None or params.clip_norm > clip)
    if (params.epsilon > noise_policy.epsilon or params.radius < noise_policy.radius
            or params.delta > max(noise_policy.delta, 0.0) or clipped_less):
        return (f"receipt gives epsilon {params.epsilon} at radius {params.radius} with delta "
                f"{params.delta} and clip_norm {params.clip_norm}; the policy requires epsilon <= "
                f"{noise_policy.epsilon}, radius >= {noise_policy.radius}, delta <= {noise_policy.delta} "
                f"and clip_norm <= {clip}")
    return None


def mechanism_mismatch(params: NoiseParams, noise_policy: Any, collection: str) -> str | None:
    """Why a receipt of ``params`` does not belong in ``collection``, whose ``[noise]`` section is
    ``noise_policy`` (a policy.NoisePolicy): it names another mechanism. None when it names the same.

    The comparison a guarded write makes on a receipted vector before :func:`noise_shortfall`
    (writes.py), a guarded read makes before releasing a stored one (reads.py) and ``verify`` makes
    with ``noise_policy=``. The numbers of two mechanisms do not order: a ``laplace_l2`` release
    (pure metric DP) and a ``gaussian`` one at the same epsilon and radius state different
    guarantees with differently shaped noise, and the collection's utility record was measured
    for its own mechanism (``utility.drop_for(epsilon, mechanism)``). So a collection holds the
    releases of the mechanism its policy names, and no other.
    """
    if params.mechanism == noise_policy.mechanism:
        return None
    want = noise_policy.mechanism
    return (f"the receipt's noise mechanism is {params.mechanism!r} but collection {collection!r} holds "
            f"{want!r} releases only ([noise] mechanism = \"{want}\"); re-noise the clean vector with the "
            f"collection's mechanism and parameters (qdrant_guard.noise.privatize(vector, mechanism={want!r}, "
            f"epsilon=..., radius=..., ...)) and sign a fresh receipt, or, with noise_on_write = true on the "
            "collection, send the clean vector without a receipt and the guard noises it")


def model_mismatch(model_id: str | None, utility_policy: Any, collection: str, vector_name: str) -> str | None:
    """Why a receipt whose signed ``model_id`` is ``model_id`` does not belong to vector
    ``vector_name`` of ``collection``, whose ``[utility]`` section is ``utility_policy`` (a
    policy.UtilityPolicy): it names another embedding model than the one the policy declares for
    that vector (``utility.embedding_models``, else ``utility.embedding_model``). None when the
    policy declares none, the receipt names none, or both name the same (compared as qdrant-client
    resolves model names, exactly but for case: :func:`~qdrant_guard.utility.same_model`).

    The comparison a guarded write makes on a writer's receipt (writes.py) and ``verify`` makes with
    ``policy=``. ``model_id`` is the signer's word: a raw vector does not show its model, so a
    receipt naming none is not refused, and one naming the declared model proves no more than that
    its signer says so.
    """
    from .utility import same_model

    declared, key = utility_policy.declared_model(vector_name)
    if declared is None or model_id is None or same_model(model_id, declared):
        return None
    from .policy import toml_str

    return (f"the receipt of vector {vector_name or '<unnamed>'!r} names embedding model {model_id!r} (its signed "
            f"model_id), but collection {collection!r} declares {key} = {toml_str(declared)}: vectors of two "
            f"models do not rank against each other, and a utility record measured on one says nothing of the "
            f"other; embed the text with {declared!r}, noise it and sign a fresh receipt with "
            f"model_id={declared!r}, or correct {key} if this collection's vectors come from {model_id!r}")
