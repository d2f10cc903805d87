"""Verifying every stored vector of a collection read back from Qdrant against its receipt
(:func:`verify`, what ``qdrant-guard receipt verify`` runs; :func:`averify` for an
``AsyncQdrantClient``, the same checks), one :class:`PointReceiptReport` per
point and vector name, each receipt checked by :func:`~qdrant_guard.receipt_verify.verify_receipt`
and, under a policy, compared with it as a guarded write would.
:mod:`qdrant_guard.receipts` re-exports the public names.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Collection, Generator, Mapping, Sequence, cast

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

if TYPE_CHECKING:
    from .pipeline import Op

__all__ = [
    "PointReceiptReport",
    "averify",
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


@dataclass(frozen=True)
class _Read:
    """A read, yielded by :func:`_verify_op`, that its driver makes on the client: ``method(*args,
    **kwargs)`` (``args`` positional as verify() always sent them, for a wrapper that names them
    otherwise)."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


_READS = ("scroll", "retrieve", "get_aliases")


def _collection_names(name: str) -> Generator[_Read, Any, frozenset[str]]:
    """The names that denote collection ``name`` now: the collection itself (also when ``name``
    is an alias) and every alias of it, read with one ``get_aliases``. A client that may not list
    aliases (a server key scoped to one collection) gets ``name`` alone: receipts bound to an alias
    then report ``collection_mismatch``, as before aliases were resolved."""
    try:
        aliases = (yield _Read("get_aliases")).aliases
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


def _mismatched(client: Any, asynchronous: bool) -> bool:
    """Whether ``client``'s reads are of the other kind than the caller drives: verify() refuses a
    client with any coroutine read, averify() one with any read that is not."""
    awaited = [inspect.iscoroutinefunction(getattr(client, m, None)) for m in _READS]
    return not all(awaited) if asynchronous else any(awaited)


def _reads_of(client: Any, collection_name: str, asynchronous: bool = False) -> Any:
    """What verify() (averify() if ``asynchronous``) reads ``collection_name`` through: ``client``
    itself, unless it is a guarded qdrant_guard client whose guard filters reads of that collection
    (every class but PUBLIC).

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
    fname = "averify" if asynchronous else "verify"
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
        if _mismatched(client, asynchronous):
            return client  # the caller refuses a client of the other kind, naming the fix
        from .decision import Verdict

        # The reads past the guard are not audited one by one: one entry still shows who read what.
        return (_AsyncPastTheGuard if asynchronous else _PastTheGuard)(client, lambda: guard.record(guard.decision(
            "receipts.verify", collection_name, pol, Verdict.ALLOW,
            f"receipts.{fname}() by the owner boundary: the collection's stored vectors and receipts read past "
            "the guard's release to verify the receipts; the reports carry no vector")))
    who = f"a principal of boundary {boundary!r}" if boundary is not None else "an unverified principal"
    kind = "AsyncQdrantClient" if asynchronous else "QdrantClient"
    as_cli = "" if asynchronous else ", as `qdrant-guard receipt verify` does"
    other_kind = ""
    if _mismatched(client, asynchronous):
        # The fix above names this function's kind of client; this one is of the other kind.
        other, its = ("verify", "QdrantClient") if asynchronous else ("averify", "AsyncQdrantClient")
        other_kind = (f"; a {its} (this one is) goes to qdrant_guard.receipts.{other}() instead, unguarded or "
                      "the owner boundary's")
    raise GuardArgumentTypeError(
        f"{fname}() client is a guarded {type(client).__name__} acting for {who}, and {collection_name!r} is "
        f"{what} owned by {pol.owner if pol is not None else None!r}: its reads withhold the vectors (and, under "
        "budgets, the points) its principal may not get, so their receipts would be reported as vector_mismatch "
        f"or not at all; pass an unguarded qdrant_client.{kind} opened on the same storage "
        f"({kind}(path=...) or url=...{as_cli}; a local store opens in one "
        f"client at a time, so close this one first), or the owner boundary's guarded {kind}" + other_kind)


class _PastTheGuard:
    """The three reads verify() makes, sent by qdrant-client's own methods over a guarded client's
    connection (under its local-mode lock, as its guarded calls are), ``audit`` called once before
    the first (so a call refused for its arguments leaves no entry)."""

    def __init__(self, client: Any, audit: Callable[[], Any]) -> None:
        self._client = client
        self._audit: Callable[[], Any] | None = audit

    def _one_read(self, read: _Read) -> Generator[_Read, Any, Any]:
        """``read``, after the audit entry if it is still owed (one whose append failed is owed
        by the next read)."""
        if self._audit is not None:
            self._audit()
            self._audit = None
        return (yield read)

    def _read(self, method: str, *args: Any, **kwargs: Any) -> Any:
        from .pipeline import drive_sync

        def invoke(r: Any) -> Any:
            return getattr(qdrant_client.QdrantClient, r.method)(self._client, *r.args, **r.kwargs)

        with getattr(self._client, "_local_lock", None) or contextlib.nullcontext():
            return drive_sync(cast("Op", self._one_read(_Read(method, args, kwargs))), invoke)

    def scroll(self, *args: Any, **kwargs: Any) -> Any:
        return self._read("scroll", *args, **kwargs)

    def retrieve(self, *args: Any, **kwargs: Any) -> Any:
        return self._read("retrieve", *args, **kwargs)

    def get_aliases(self, *args: Any, **kwargs: Any) -> Any:
        return self._read("get_aliases", *args, **kwargs)


class _AsyncPastTheGuard(_PastTheGuard):
    """:class:`_PastTheGuard` for averify() and a guarded ``AsyncQdrantClient``: each read driven
    as the client's guarded calls are (:func:`~qdrant_guard.async_driver.drive_async`), so the
    audit entry is appended off the event loop and, in local mode, the read waits its turn for the
    client's lock (a guarded operation of another task holds it from its read to its write)."""

    async def _aread(self, method: str, *args: Any, **kwargs: Any) -> Any:
        from .async_driver import drive_async

        async def invoke(r: Any) -> Any:
            return await getattr(qdrant_client.AsyncQdrantClient, r.method)(self._client, *r.args, **r.kwargs)

        return await drive_async(cast("Op", self._one_read(_Read(method, args, kwargs))), invoke,
                                 lock=self._client._local_alock())

    async def scroll(self, *args: Any, **kwargs: Any) -> Any:
        return await self._aread("scroll", *args, **kwargs)

    async def retrieve(self, *args: Any, **kwargs: Any) -> Any:
        return await self._aread("retrieve", *args, **kwargs)

    async def get_aliases(self, *args: Any, **kwargs: Any) -> Any:
        return await self._aread("get_aliases", *args, **kwargs)


@dataclass(frozen=True)
class _Checks:
    """verify()'s checked arguments that judge each stored receipt."""

    collection_name: str
    trusted_keys: Mapping[str, Ed25519PublicKey]
    revoked: frozenset[str]
    now: float | None
    max_age_s: float | None
    max_clock_skew_s: float | None
    check_noise: bool
    noise_policy: Any
    policy: Any
    required: bool


def _prepared(fname: str, client: Any, collection_name: str, ids: Sequence[int | str] | None, *,
              trusted_keys: Mapping[str, Ed25519PublicKey], revoked: Collection[str], now: float | None,
              max_age_s: float | None, max_clock_skew_s: float | None, batch_size: int, check_noise: bool,
              noise_policy: Any, policy: Any) -> tuple[Any, Generator[_Read, Any, list[PointReceiptReport]]]:
    """Check verify()'s (``fname`` is ``"averify"``: averify()'s) arguments, all before any read, and
    return the client to read through and the operation that reads and checks."""
    asynchronous = fname == "averify"
    lacking = [m for m in _READS if not callable(getattr(client, m, None))]
    if lacking:
        kind = "AsyncQdrantClient" if asynchronous else "QdrantClient"
        raise GuardArgumentTypeError(
            f"{fname}() client must be a qdrant_client.{kind} (e.g. {kind}(path=...) or url=...), "
            f"not {type(client).__name__}, which has no {', '.join(lacking)}")
    if not isinstance(collection_name, str):
        raise GuardArgumentTypeError(f"collection_name must be str, not {type(collection_name).__name__}")
    client = _reads_of(client, collection_name, asynchronous)
    if _mismatched(client, asynchronous):
        if asynchronous:
            raise GuardArgumentTypeError(
                f"averify() awaits the client's reads and client is a {type(client).__name__}, whose "
                f"{', '.join(m for m in _READS if not inspect.iscoroutinefunction(getattr(client, m)))} return "
                "no coroutine; call qdrant_guard.receipts.verify() with the same arguments instead, or pass a "
                "qdrant_client.AsyncQdrantClient (AsyncQdrantClient(path=...) or url=...)")
        # An AsyncQdrantClient has the methods, but they return coroutines: it failed below with a bare
        # TypeError ("cannot unpack non-iterable coroutine object") and unawaited-coroutine warnings.
        raise GuardArgumentTypeError(
            f"verify() is synchronous and client is a {type(client).__name__}, whose methods return coroutines; "
            "`await qdrant_guard.receipts.averify(...)` with the same arguments instead, or pass a "
            "qdrant_client.QdrantClient on the same storage (QdrantClient(path=...) or url=...)")
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
    # Read once: a one-shot iterable (a generator) passed on to every verify_receipt call was
    # empty from the second point on, so a revoked key verified there.
    checks = _Checks(collection_name, trusted_keys, frozenset(revoked), now, max_age_s, max_clock_skew_s,
                     check_noise, noise_policy, policy, _receipts_required(policy))
    id_list = None if ids is None else _distinct_ids(fname, ids)
    return client, _verify_op(checks, id_list, batch_size)


def _distinct_ids(fname: str, ids: Sequence[int | str]) -> list[int | str]:
    """``ids`` with each id once (in its first spelling): Qdrant returns a point once per time it is
    named, and verify() documents one report per point."""
    by_key: dict[str, Any] = {}
    for pid in ids:
        try:
            key = normalize_point_id(pid)
        except (TypeError, ValueError) as exc:
            raise GuardArgumentValueError(f"{fname}(ids=...): {pid!r} is not a Qdrant point id ({exc}); pass ints "
                                          "0 <= id < 2**64 or UUID strings") from None
        by_key.setdefault(key, pid)
    return list(by_key.values())


def _verify_op(checks: _Checks, id_list: list[int | str] | None,
               batch_size: int) -> Generator[_Read, Any, list[PointReceiptReport]]:
    """verify()'s reads and checks, sans-IO: yields each :class:`_Read` and is sent its answer, so
    verify() and averify() share every check (one drives it with plain calls, the other awaits).
    Each page is checked as it arrives; the ``missing_point`` reports come first, as verify() made
    them while reading."""
    name = checks.collection_name
    names = yield from _collection_names(name)
    missing: list[PointReceiptReport] = []
    reports: list[PointReceiptReport] = []
    if id_list is None:
        offset = None
        while True:
            page, offset = yield _Read("scroll", (name,), dict(limit=batch_size, offset=offset,
                                                               with_payload=True, with_vectors=True))
            for point in page:
                reports.extend(_point_reports(point, names, checks))
            if offset is None:
                break
        return reports
    for start in range(0, len(id_list), batch_size):
        chunk = id_list[start:start + batch_size]
        got = yield _Read("retrieve", (name, chunk), dict(with_payload=True, with_vectors=True))
        found = {normalize_point_id(p.id) for p in got}
        for point in got:
            reports.extend(_point_reports(point, names, checks))
        for pid in chunk:
            if normalize_point_id(pid) not in found:
                missing.append(PointReceiptReport(
                    pid, "", ReceiptCheck(False, "missing_point", None, None, f"point {pid!r} not found in {name!r}")))
    return missing + reports


def _point_reports(point: Any, names: frozenset[str], c: _Checks) -> list[PointReceiptReport]:
    """The reports of one point read back: one per vector name of its vectors and receipts."""
    try:
        stored = receipts_from_payload(point.payload)
    except ReceiptError as exc:
        return [PointReceiptReport(point.id, "", ReceiptCheck(False, "malformed", None, None, str(exc)))]
    collection_name, policy, noise_policy = c.collection_name, c.policy, c.noise_policy
    reports = []
    vectors, unsupported = _split_vectors(point.vector)
    for name in sorted(set(vectors) | set(stored) | set(unsupported)):
        if not c.required and name not in stored:
            check = ReceiptCheck(False, "not_required", None, None,
                                 f"vector {name!r} has no receipt; the collection is PUBLIC, whose "
                                 "vectors the guard stores as given and needs none")
        elif not c.required and name in unsupported:
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
                                       trusted_keys=c.trusted_keys, revoked=c.revoked, now=c.now,
                                       max_age_s=c.max_age_s, max_clock_skew_s=c.max_clock_skew_s)
            except (TypeError, InvalidVectorError) as exc:
                # What the client returned is not numbers: one point's report, not a crash.
                check = ReceiptCheck(False, "vector_mismatch", None, None, str(exc))
            if check.ok and policy is not None:
                other_model = model_mismatch(check.model_id, policy.utility, collection_name, name)
                if other_model is not None:
                    check = ReceiptCheck(False, "model_mismatch", check.params, check.key_id, other_model,
                                         check.model_id)
            if c.check_noise and check.ok and (params := check.params) is not None:
                problem = _check_release(params)
                if problem is None and noise_policy is not None:
                    other = mechanism_mismatch(params, noise_policy, collection_name)
                    if other is not None:
                        check = ReceiptCheck(False, "mechanism_mismatch", params, check.key_id, other,
                                             check.model_id)
                    problem = noise_shortfall(params, noise_policy) if other is None else None
                if problem is not None:
                    check = ReceiptCheck(False, "insufficient_noise", check.params, check.key_id, problem,
                                         check.model_id)
        reports.append(PointReceiptReport(point.id, name, check))
    return reports


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
            AsyncQdrantClient (its methods return coroutines: :func:`averify` takes one), or is a
            guarded qdrant_guard client
            acting for a principal outside the owner boundary of a sensitive collection (its reads
            withhold vectors and points), ``check_noise`` is
            not a bool, ``noise_policy`` lacks mechanism, epsilon, delta, radius or
            clip_norm, ``policy`` is neither a GuardConfig nor a CollectionPolicy, or another
            argument has the wrong type.
        ConfigError: ``policy`` is a GuardConfig with ``unlisted = "refuse"`` that does not list
            the collection (it states no class for it).
        ValueError: ``batch_size`` is not a positive int, or an id in ``ids`` is not a Qdrant point
            id (an int 0 <= id < 2**64 or a UUID string), before anything is read (so a guarded
            owner's verify() refused for its arguments leaves no audit entry).
    """
    from .pipeline import drive_sync

    reads, op = _prepared("verify", client, collection_name, ids, trusted_keys=trusted_keys, revoked=revoked,
                          now=now, max_age_s=max_age_s, max_clock_skew_s=max_clock_skew_s, batch_size=batch_size,
                          check_noise=check_noise, noise_policy=noise_policy, policy=policy)
    def invoke(r: Any) -> Any:
        return getattr(reads, r.method)(*r.args, **r.kwargs)

    reports: list[PointReceiptReport] = drive_sync(cast("Op", op), invoke)
    return reports


async def averify(
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
    """:func:`verify` for a ``qdrant_client.AsyncQdrantClient``: the same arguments, checks and
    reports, the reads awaited.

    Every check runs in the one code both share; between two reads the checks of a page run in a
    worker thread, off the event loop. A guarded ``qdrant_guard.AsyncQdrantClient`` is taken as
    :func:`verify` takes a guarded sync client: read through on a PUBLIC collection, read past its
    guard under one audit entry (op ``receipts.verify``) when its principal is of the collection's
    owner boundary (in local mode each read waits its turn for the client, as its guarded calls
    do), and refused otherwise.

    Args:
        client: a ``qdrant_client.AsyncQdrantClient`` (e.g. ``AsyncQdrantClient(path=...)``), or a
            guarded ``qdrant_guard.AsyncQdrantClient`` as above.
        collection_name, ids, trusted_keys, revoked, now, max_age_s, max_clock_skew_s, batch_size,
            check_noise, noise_policy, policy: as :func:`verify`.

    Returns:
        One :class:`PointReceiptReport` per (point, vector name), in read order, as :func:`verify`.

    Raises:
        TypeError: ``client``'s ``scroll``, ``retrieve`` or ``get_aliases`` is missing or is not a
            coroutine function (a sync ``QdrantClient``: call :func:`verify`), or as :func:`verify`.
        ConfigError, ValueError: as :func:`verify`, before any point is read.
    """
    from .async_driver import drive_async

    reads, op = _prepared("averify", client, collection_name, ids, trusted_keys=trusted_keys, revoked=revoked,
                          now=now, max_age_s=max_age_s, max_clock_skew_s=max_clock_skew_s, batch_size=batch_size,
                          check_noise=check_noise, noise_policy=noise_policy, policy=policy)

    async def invoke(r: Any) -> Any:
        return await getattr(reads, r.method)(*r.args, **r.kwargs)

    reports: list[PointReceiptReport] = await drive_async(cast("Op", op), invoke)
    return reports
