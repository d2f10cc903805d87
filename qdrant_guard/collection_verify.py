"""Verifying every stored vector of a collection read back from Qdrant against its receipt
(:func:`verify`, what ``qdrant-guard receipt verify`` runs), one :class:`PointReceiptReport` per
point and vector name, each receipt checked by :func:`~qdrant_guard.receipt_verify.verify_receipt`
and, under a policy, compared with it as a guarded write would.
:mod:`qdrant_guard.receipts` re-exports the public names.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

import numpy as np
import qdrant_client
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from qdrant_client.http import models

from .errors import ConfigError, GuardArgumentTypeError, GuardArgumentValueError, InvalidVectorError, ReceiptError
from .noise import check_release as _check_release
from .receipt_format import ISSUED_AT_LEEWAY_S, normalize_point_id, receipts_from_payload
from .receipt_verify import (
    ReceiptCheck,
    _check_times,
    _check_trusted,
    mechanism_mismatch,
    model_mismatch,
    noise_shortfall,
    verify_receipt,
)

__all__ = [
    "PointReceiptReport",
    "verify",
]


# --------------------------------------------------------------------------- verify a collection

@dataclass(frozen=True)
class PointReceiptReport:
    """Verification result of one (point, vector name) read from Qdrant."""

    point_id: int | str
    vector_name: str
    check: ReceiptCheck

    @property
    def ok(self) -> bool:
        """True if the receipt verified, or the vector has none and its collection's class needs
        none (reason ``"not_required"``, only with ``verify(policy=...)``; ``check.ok`` is then
        False: no receipt was verified)."""
        return self.check.ok or self.check.reason == "not_required"

    @property
    def reason(self) -> str:
        """``"ok"`` or the failure reason."""
        return self.check.reason


def _unsupported_kind(v: Any) -> str | None:
    """``"sparse vector"`` or ``"multivector"`` for a value the guard never stores on a sensitive
    collection (vectors.as_dense refuses both, receipted or not), else None."""
    if isinstance(v, models.SparseVector):
        return "sparse vector"
    if isinstance(v, np.ndarray):
        return "multivector" if v.ndim == 2 else None
    if isinstance(v, (list, tuple)) and len(v) > 0 and isinstance(v[0], (list, tuple, np.ndarray)):
        return "multivector"
    return None


def _split_vectors(vector: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """``({name: dense value}, {name: unsupported kind})`` of a point's vector field.

    Every value that is not a sparse vector or a multivector counts as dense, so that anything
    else read back (an empty list, a scalar) is reported by verify_receipt or as missing_receipt
    rather than skipped.
    """
    if vector is None:
        return {}, {}
    items = vector.items() if isinstance(vector, Mapping) else (("", vector),)
    dense: dict[str, Any] = {}
    unsupported: dict[str, str] = {}
    for name, v in items:
        kind = _unsupported_kind(v)
        if kind is None:
            dense[name] = v
        else:
            unsupported[name] = kind
    return dense, unsupported


def _collection_names(client: Any, name: str) -> frozenset[str]:
    """The names that denote collection ``name`` now: the collection itself (also when ``name``
    is an alias) and every alias of it, read with one ``get_aliases``. A client that may not list
    aliases (a server key scoped to one collection) gets ``name`` alone: receipts bound to an alias
    then report ``collection_mismatch``, as before aliases were resolved."""
    try:
        aliases = client.get_aliases().aliases
    except Exception:  # not allowed, or no such endpoint: verify what can be verified
        return frozenset({name})
    target = next((a.collection_name for a in aliases if a.alias_name == name), name)
    return frozenset({name, target} | {a.alias_name for a in aliases if a.collection_name == target})


def _collection_policy(policy: Any, collection: str) -> Any:
    """The policy of ``collection`` that ``verify``'s ``policy`` argument gives (a GuardConfig's
    ``policy_for(collection)``, or a CollectionPolicy itself), or None for None."""
    if policy is None:
        return None
    if callable(getattr(policy, "policy_for", None)):
        policy = policy.policy_for(collection)
    if not isinstance(getattr(policy, "is_public", None), bool) or not callable(
            getattr(getattr(policy, "utility", None), "declared_model", None)):
        raise GuardArgumentTypeError(f"policy must be a qdrant_guard.policy.GuardConfig (e.g. load_policy(path)) or "
                                     f"CollectionPolicy (config.policy_for(collection)), not {type(policy).__name__}")
    return policy


def _receipts_required(policy: Any) -> bool:
    """Whether the vectors of a collection whose policy is ``policy`` (None: not given) need
    receipts (see :func:`verify`): every class but PUBLIC, which the guard passes through
    unchanged (writes.py noises and receipts what a sensitive collection stores; a PUBLIC one
    stores vectors as given)."""
    return policy is None or not policy.is_public


def _reads_of(client: Any, collection_name: str) -> Any:
    """What verify() reads ``collection_name`` through: ``client`` itself, unless it is a guarded
    qdrant_guard client whose guard filters reads of that collection (every class but PUBLIC).

    A guarded read strips the vectors its principal may not get, and those include every vector
    whose receipt fails: verify() reported such a vector as ``vector_mismatch``, and a stripped
    unreceipted one not at all (a raw vector then looked verified). The owner boundary's client is
    read past its guard, on the same connection, under one audit entry (op ``receipts.verify``):
    the reports name the point ids and receipts its own guarded reads already return, and no
    vector. Any other principal's client is refused: past the guard it would learn the ids of points
    its reads withhold (extraction budgets).
    """
    from ._facade import PrincipalViews

    guard = getattr(client, "_guard", None) if isinstance(client, PrincipalViews) else None
    if guard is None or guard.transparent:
        return client
    try:
        pol = guard.policy(collection_name)
    except ConfigError:  # unlisted = "refuse": the guard lets no one read it
        pol, what = None, "a collection its policy does not list (unlisted = \"refuse\")"
    else:
        if pol.is_public:
            return client  # the guard passes PUBLIC reads through unchanged
        what = f"a {pol.sensitivity.value} collection"
    boundary = guard.boundary()
    if pol is not None and boundary is not None and boundary == pol.owner:
        if any(inspect.iscoroutinefunction(getattr(client, m, None)) for m in ("scroll", "retrieve", "get_aliases")):
            return client  # verify() refuses an async client below, naming the fix
        from .decision import Verdict

        # The reads past the guard are not audited one by one: one entry still shows who read what.
        return _PastTheGuard(client, lambda: guard.record(guard.decision(
            "receipts.verify", collection_name, pol, Verdict.ALLOW,
            "receipts.verify() by the owner boundary: the collection's stored vectors and receipts read past "
            "the guard's release to verify the receipts; the reports carry no vector")))
    who = f"a principal of boundary {boundary!r}" if boundary is not None else "an unverified principal"
    raise GuardArgumentTypeError(
        f"verify() client is a guarded {type(client).__name__} acting for {who}, and {collection_name!r} is "
        f"{what} owned by {pol.owner if pol is not None else None!r}: its reads withhold the vectors (and, under "
        "budgets, the points) its principal may not get, so their receipts would be reported as vector_mismatch "
        "or not at all; pass an unguarded qdrant_client.QdrantClient opened on the same storage "
        "(QdrantClient(path=...) or url=..., as `qdrant-guard receipt verify` does; a local store opens in one "
        "client at a time, so close this one first), or the owner boundary's guarded client")


class _PastTheGuard:
    """The three reads verify() makes, sent by qdrant-client's own methods over a guarded client's
    connection (under its local-mode lock, as its guarded calls are), ``audit`` called once before
    the first (so a call refused for its arguments leaves no entry)."""

    def __init__(self, client: Any, audit: Callable[[], Any]) -> None:
        self._client = client
        self._lock = getattr(client, "_local_lock", None) or contextlib.nullcontext()
        self._audit: Callable[[], Any] | None = audit

    def _read(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self._audit is not None:
                self._audit()
                self._audit = None
            return getattr(qdrant_client.QdrantClient, method)(self._client, *args, **kwargs)

    def scroll(self, *args: Any, **kwargs: Any) -> Any:
        return self._read("scroll", *args, **kwargs)

    def retrieve(self, *args: Any, **kwargs: Any) -> Any:
        return self._read("retrieve", *args, **kwargs)

    def get_aliases(self, *args: Any, **kwargs: Any) -> Any:
        return self._read("get_aliases", *args, **kwargs)


def verify(
    client: Any,
    collection_name: str,
    ids: Sequence[int | str] | None = None,
    *,
    trusted_keys: Mapping[str, Ed25519PublicKey],
    revoked: Collection[str] = (),
    now: float | None = None,
    max_age_s: float | None = None,
    max_clock_skew_s: float | None = ISSUED_AT_LEEWAY_S,
    batch_size: int = 256,
    check_noise: bool = False,
    noise_policy: Any = None,
    policy: Any = None,
) -> list[PointReceiptReport]:
    """Read points from Qdrant and verify each stored receipt against the stored vector.

    On a sensitive collection (the default, without ``policy``) every dense vector of every point
    must carry a valid receipt; a vector without one is reported as ``"missing_receipt"``, an id
    not found as ``"missing_point"``. A sparse vector or a multivector (named or the default
    vector) is ``"unsupported_vector"`` whatever its receipt: the guard refuses both on sensitive
    collections, so one can only have been written around it.

    A receipt bound to an alias that names the collection now (the guard binds a vector written
    through an alias to the alias's name) verifies as one bound to the collection; ``collection_name``
    may be an alias too. One bound to an alias that names another collection now, or no longer
    exists, is ``"collection_mismatch"``.

    On a PUBLIC collection (``policy`` says so) the guard stores vectors as given, unreceipted:
    a vector without a receipt, of any kind, is ``"not_required"``, which is not a failure
    (``report.ok`` is True). A receipt that is there is still verified, and a bad one reported:
    it asserts something about the stored vector, true or not.

    A receipt that verifies shows what its signer asserts, not that the noise was drawn: a trusted
    signer that lies consistently passes every check here, ``check_noise`` included.

    Args:
        client: a ``qdrant_client.QdrantClient`` without a guard: the guard must not alter the reads.
            A guarded ``qdrant_guard.QdrantClient`` is read through on a PUBLIC collection (its guard
            passes the reads through), read past its guard on the same connection when its principal
            is of the collection's owner boundary, and refused otherwise.
        collection_name: collection to check.
        ids: point ids to check (default: every point, by scrolling); an id named twice (in any
            spelling of the same id) is checked once.
        trusted_keys: key id -> Ed25519 public key.
        revoked: revoked key ids (any iterable; read once).
        now: current time in seconds (default: ``time.time()``).
        max_age_s: report receipts older than this as ``"expired"`` (None: no age limit).
        max_clock_skew_s: report receipts issued more than this many seconds after ``now`` as
            ``"not_yet_valid"`` (default :data:`ISSUED_AT_LEEWAY_S`, 300 s; None: no check), as
            :func:`~qdrant_guard.receipt_verify.verify_receipt` does.
        batch_size: points per scroll/retrieve request.
        check_noise: also judge the signed noise parameters of each receipt that verifies, as a
            guarded write does: one that :func:`qdrant_guard.noise.check_release` refuses (the
            TEST-ONLY seeded generator, a scale below the calibration, an unknown mechanism
            version) is ``"insufficient_noise"``, with check_release's explanation in ``detail``
            and the params in ``check.params``. Off by default: without it a receipt's
            parameters are not judged (the signature and binding only).
        noise_policy: a :class:`qdrant_guard.policy.NoisePolicy` (e.g.
            ``config.policy_for(name).noise``); implies ``check_noise`` and also reports as
            ``"insufficient_noise"`` a receipt weaker than it (larger epsilon or delta, smaller
            radius, larger or no clip_norm), the comparison a guarded write makes; a receipt
            of another mechanism than ``noise_policy.mechanism`` is ``"mechanism_mismatch"``
            (a guarded write refuses it, a guarded read strips it: :func:`mechanism_mismatch`).
        policy: the collection's policy, which decides whether its vectors need receipts: a
            :class:`qdrant_guard.policy.GuardConfig` (e.g. ``load_policy("policy.toml")``; its
            ``policy_for(collection_name)`` is used) or a
            :class:`qdrant_guard.policy.CollectionPolicy`. Only PUBLIC needs none. A receipt that
            verifies but whose signed ``model_id`` names another embedding model than the one the
            policy declares for its vector (``utility.embedding_models``, else
            ``utility.embedding_model``) is ``"model_mismatch"`` (a guarded write refuses it:
            :func:`model_mismatch`); one naming no model is not (its signer named none). None (the
            default): every vector is taken to need one, and models are not compared.

    Returns:
        One :class:`PointReceiptReport` per (point, vector name), in read order.

    Raises:
        TypeError: ``client`` has no ``scroll``, ``retrieve`` or ``get_aliases``, is an
            AsyncQdrantClient (its methods return coroutines), or is a guarded qdrant_guard client
            acting for a principal outside the owner boundary of a sensitive collection (its reads
            withhold vectors and points), ``check_noise`` is
            not a bool, ``noise_policy`` lacks mechanism, epsilon, delta, radius or
            clip_norm, ``policy`` is neither a GuardConfig nor a CollectionPolicy, or another
            argument has the wrong type.
        ConfigError: ``policy`` is a GuardConfig with ``unlisted = "refuse"`` that does not list
            the collection (it states no class for it).
        ValueError: ``batch_size`` is not a positive int, or an id in ``ids`` is not a Qdrant point
            id (an int 0 <= id < 2**64 or a UUID string), before any point is read.
    """
    lacking = [m for m in ("scroll", "retrieve", "get_aliases") if not callable(getattr(client, m, None))]
    if lacking:
        raise GuardArgumentTypeError(
            f"verify() client must be a qdrant_client.QdrantClient (e.g. QdrantClient(path=...) or url=...), "
            f"not {type(client).__name__}, which has no {', '.join(lacking)}")
    if not isinstance(collection_name, str):
        raise GuardArgumentTypeError(f"collection_name must be str, not {type(collection_name).__name__}")
    client = _reads_of(client, collection_name)
    # An AsyncQdrantClient has the methods, but they return coroutines: it failed below with a bare
    # TypeError ("cannot unpack non-iterable coroutine object") and unawaited-coroutine warnings.
    if any(inspect.iscoroutinefunction(getattr(client, m)) for m in ("scroll", "retrieve", "get_aliases")):
        raise GuardArgumentTypeError(
            f"verify() is synchronous and client is a {type(client).__name__}, whose methods return coroutines; "
            "pass a qdrant_client.QdrantClient on the same storage (QdrantClient(path=...) or url=...)")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise GuardArgumentValueError(f"batch_size must be a positive int, got {batch_size!r}")
    _check_trusted(trusted_keys, revoked)
    _check_times(now, max_age_s, max_clock_skew_s)
    if not isinstance(check_noise, bool):
        raise GuardArgumentTypeError(f"check_noise must be True or False, not {type(check_noise).__name__}")
    if noise_policy is not None:
        missing = [a for a in ("mechanism", "epsilon", "delta", "radius", "clip_norm") if not hasattr(noise_policy, a)]
        if missing:
            raise GuardArgumentTypeError(f"noise_policy must be a qdrant_guard.policy.NoisePolicy (e.g. "
                                         f"config.policy_for(collection).noise); a {type(noise_policy).__name__} "
                                         f"has no {', '.join(missing)}")
        check_noise = True
    policy = _collection_policy(policy, collection_name)
    required = _receipts_required(policy)
    names = _collection_names(client, collection_name)
    # Read once: a one-shot iterable (a generator) passed on to every verify_receipt call was
    # empty from the second point on, so a revoked key verified there.
    revoked = frozenset(revoked)
    points: list[Any] = []
    reports: list[PointReceiptReport] = []
    if ids is None:
        offset = None
        while True:
            page, offset = client.scroll(collection_name, limit=batch_size, offset=offset,
                                         with_payload=True, with_vectors=True)
            points.extend(page)
            if offset is None:
                break
    else:
        # One report per point, as documented: Qdrant returns a point once per time it is named.
        by_key: dict[str, Any] = {}
        for pid in ids:
            try:
                key = normalize_point_id(pid)
            except (TypeError, ValueError) as exc:
                raise GuardArgumentValueError(f"verify(ids=...): {pid!r} is not a Qdrant point id ({exc}); pass ints "
                                              "0 <= id < 2**64 or UUID strings") from None
            by_key.setdefault(key, pid)
        id_list = list(by_key.values())
        for start in range(0, len(id_list), batch_size):
            chunk = id_list[start:start + batch_size]
            got = client.retrieve(collection_name, chunk, with_payload=True, with_vectors=True)
            found = {normalize_point_id(p.id) for p in got}
            points.extend(got)
            for pid in chunk:
                if normalize_point_id(pid) not in found:
                    reports.append(PointReceiptReport(
                        pid, "", ReceiptCheck(False, "missing_point", None, None,
                                              f"point {pid!r} not found in {collection_name!r}")))
    for point in points:
        try:
            stored = receipts_from_payload(point.payload)
        except ReceiptError as exc:
            reports.append(PointReceiptReport(point.id, "", ReceiptCheck(False, "malformed", None,
                                                                         None, str(exc))))
            continue
        vectors, unsupported = _split_vectors(point.vector)
        for name in sorted(set(vectors) | set(stored) | set(unsupported)):
            if not required and name not in stored:
                check = ReceiptCheck(False, "not_required", None, None,
                                     f"vector {name!r} has no receipt; the collection is PUBLIC, whose "
                                     "vectors the guard stores as given and needs none")
            elif not required and name in unsupported:
                check = ReceiptCheck(False, "unsupported_vector", None, None, (
                    f"vector {name!r} is a {unsupported[name]} but carries a receipt, which commits to "
                    "one dense vector: it certifies nothing stored here"))
            elif name in unsupported:
                check = ReceiptCheck(False, "unsupported_vector", None, None, (
                    f"vector {name!r} is a {unsupported[name]}; the guard refuses "
                    f"{unsupported[name]}s on sensitive collections (no receipt can cover one), so on a "
                    "sensitive collection it was written around the guard"))
            elif name not in stored:
                check = ReceiptCheck(False, "missing_receipt", None, None,
                                     f"vector {name!r} has no receipt")
            elif name not in vectors:
                check = ReceiptCheck(False, "vector_mismatch", None, None,
                                     f"receipt for vector {name!r} but the point has no such dense vector")
            else:
                bound = stored[name].get("collection") if isinstance(stored[name], Mapping) else None
                # A vector the guard wrote through an alias has a receipt bound to the alias's name;
                # the signature still covers that name, which must name this collection now.
                where = bound if isinstance(bound, str) and bound in names else collection_name
                try:
                    check = verify_receipt(stored[name], vector=vectors[name], collection=where,
                                           point_id=point.id, vector_name=name,
                                           trusted_keys=trusted_keys, revoked=revoked, now=now,
                                           max_age_s=max_age_s, max_clock_skew_s=max_clock_skew_s)
                except (TypeError, InvalidVectorError) as exc:
                    # What the client returned is not numbers: one point's report, not a crash.
                    check = ReceiptCheck(False, "vector_mismatch", None, None, str(exc))
                if check.ok and policy is not None:
                    other_model = model_mismatch(check.model_id, policy.utility, collection_name, name)
                    if other_model is not None:
                        check = ReceiptCheck(False, "model_mismatch", check.params, check.key_id, other_model,
                                             check.model_id)
                if check_noise and check.ok and check.params is not None:
                    problem = _check_release(check.params)
                    if problem is None and noise_policy is not None:
                        other = mechanism_mismatch(check.params, noise_policy, collection_name)
                        if other is not None:
                            check = ReceiptCheck(False, "mechanism_mismatch", check.params, check.key_id, other,
                                                 check.model_id)
                        problem = noise_shortfall(check.params, noise_policy) if other is None else None
                    if problem is not None:
                        check = ReceiptCheck(False, "insufficient_noise", check.params, check.key_id, problem,
                                             check.model_id)
            reports.append(PointReceiptReport(point.id, name, check))
    return reports
