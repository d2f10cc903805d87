"""The retrieval utility guard: calibrate the noise level against measured retrieval quality.

:func:`calibrate` reads the clean vectors of a collection, noises documents *and* queries at each
candidate privacy level (strongest noise, i.e. smallest epsilon, first), searches a temporary
in-memory Qdrant collection with the same distance, and measures how much retrieval quality is lost
against the clean collection. It picks the strongest noise whose loss stays within ``threshold``
(and no weaker level's loss exceeds it, since measured losses need not be monotone) and signs the whole measured frontier into a :class:`UtilityRecord`. The SHA-256 of the record's
signed body is the ``retrieval_utility_guard_hash``. The pipeline refuses (``UTILITY_DEGRADED``)
writes whose noise the record does not show to stay within the threshold: a record calibrated for
another mechanism, radius, delta or clip_norm than the policy's, or of another metric or cut-off
than the policy's ``utility.metric`` and ``utility.k``, noise parameters other than the record's, a
receipt's noise at a larger scale than its epsilon's calibrated one, or an epsilon without a
passing measured level of at least as much noise or with a failing one of no more noise
(:meth:`UtilityRecord.level_refusal`). A record also names the dimension, the vector and (format
version 4 on) the distance it measured, and a write of a vector of another dimension, name or
distance is refused too; a policy gives each named vector its own record (``utility.records``).
From version 5 a record also carries the embedding model its signer says the vectors came from
(``embedding_model``); a policy that declares the collection's model (``utility.embedding_model``)
refuses writes under a record naming another model or none. A record measured on no more points
than its ``k`` (``allow_small_collection``) is refused unless the policy sets
``utility.allow_small_records`` (:meth:`UtilityRecord.small_collection_refusal`), and so is a
record measured on fewer queries than the policy's ``utility.min_queries``
(:meth:`UtilityRecord.few_queries_refusal`), which calibrate refuses to sign below its
``min_queries`` unless ``allow_few_queries``. From version 6 a record also carries how many queries
its metric averaged over (``n_measured_queries``: with qrels, the labelled ones for recall and
nDCG), the count that check holds.

Calibration needs the *clean* vectors, so it runs on a raw :class:`qdrant_client.QdrantClient`
pointed at a clean staging collection (or at the in-boundary collection, by a principal allowed to
read raw vectors). Nothing about the documents is stored in the record: only the metrics, the
parameters and a digest of the queries the operator chose.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import numbers
import os
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import numpy as np

from .errors import GuardArgumentTypeError, GuardArgumentValueError, QdrantGuardError

__all__ = [
    "DEFAULT_EPSILONS",
    "UTILITY_DOMAIN",
    "UtilityCalibrationError",
    "UtilityRecord",
    "calibrate",
    "embedder_model_name",
    "verify_utility_record",
    "retrieval_metrics",
    "add_calibrate_arguments",
    "run_calibrate_cli",
]

UTILITY_DOMAIN = b"qdrant-guard utility v1\0"
_QUERY_DOMAIN = b"qdrant-guard utility queries v1\0"
_SEED_KEY_DOMAIN = b"qdrant-guard calibration seed v1\0"
RECORD_VERSION = 6

#: The distances Qdrant compares vectors by (``models.Distance`` values), as a record names them.
_DISTANCES = ("Cosine", "Euclid", "Dot", "Manhattan")

#: Candidate ladder, strongest noise first. At the policy default radius 0.01 and delta 1e-6 the
#: analytic Gaussian sigma per coordinate runs from about 0.44 (0.125; 0.29 without the lattice
#: margin, see docs/privacy.md) down to about 0.002 (32), for 384-d vectors.
DEFAULT_EPSILONS: tuple[float, ...] = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)

_METRICS = ("recall", "ndcg", "overlap")

#: ``qdrant-guard calibrate``'s exit status when it wrote a record the guard of its ``--policy``
#: would refuse writes under (2 is taken: an error, or no feasible level, with nothing written).
EXIT_POLICY_NOT_COVERED = 3
#: Fewest queries :func:`calibrate` signs a record on, and the default of the policy's
#: ``utility.min_queries`` (see ``UtilityPolicy.min_queries`` for the arithmetic).
DEFAULT_MIN_QUERIES = 20

T = TypeVar("T")


class UtilityCalibrationError(QdrantGuardError):
    """No candidate noise level satisfies the utility threshold and the epsilon ceiling.

    Attributes:
        frontier: the measured levels (one dict per candidate epsilon).
    """

    def __init__(self, message: str, frontier: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(message)
        self.frontier = [dict(level) for level in frontier]


def progress_iter(
    items: Iterable[T], *, total: int | None = None, desc: str = "", enabled: bool = True
) -> Iterator[T]:
    """Yield ``items`` while drawing a progress bar on stderr.

    Uses tqdm when it is installed, otherwise a one-line bar of its own (no hard dependency).
    """
    if not enabled:
        yield from items
        return
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        yield from tqdm(items, total=total, desc=desc, file=sys.stderr, leave=False)
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    start = time.monotonic()
    done = 0
    for item in items:
        yield item
        done += 1
        if total:
            filled = int(30 * done / total)
            bar = "#" * filled + "." * (30 - filled)
            sys.stderr.write(f"\r{desc} [{bar}] {done}/{total} {time.monotonic() - start:.0f}s")
        else:
            sys.stderr.write(f"\r{desc} {done} {time.monotonic() - start:.0f}s")
        sys.stderr.flush()
    sys.stderr.write("\n")


@dataclass(frozen=True)
class UtilityRecord:
    """A signed statement of how retrieval quality degrades with noise on one collection.

    Attributes:
        collection: the calibrated collection.
        mechanism: ``"gaussian"`` or ``"laplace_l2"``.
        epsilon: the chosen privacy level (strongest noise within the threshold).
        delta: the Gaussian delta (``0.0`` for ``laplace_l2``).
        radius: protected L2 radius of the guarantee.
        clip_norm: inputs were clipped to this L2 norm before noising (``None``: not clipped).
        scale: noise scale of the chosen level (sigma per coordinate, or the Laplace-L2 scale).
        k: the cut-off of every metric (recall@k, nDCG@k, overlap@k).
        threshold: the largest accepted relative drop of ``metric``.
        metric: which metric the drop refers to: ``"recall"``, ``"ndcg"`` or ``"overlap"``.
        mode: ``"qrels"`` (labelled relevance) or ``"known_item"`` (query i's item = its clean top-1).
        epsilon_ceiling: the ceiling that applied (``None``: none).
        clean: the metrics of the clean collection.
        measured: one dict per candidate level: ``epsilon``, ``scale``, ``recall``, ``ndcg`` (qrels
            mode), ``overlap``, ``drop`` (of ``metric``), ``drops`` (per metric), ``feasible`` (its
            drop and every drop at a larger epsilon within the threshold, epsilon within the
            ceiling: the levels the guard would accept at this threshold).
        chosen_level: index of the chosen level in ``measured``.
        query_sample_digest: SHA-256 hex over the canonical encoding of the queries used.
        n_queries: number of queries measured (searched), labelled or not.
        n_documents: number of points read from the collection.
        created_at: integer milliseconds since the Unix epoch.
        dim: dimension of the calibrated vectors (version 2 on; ``None`` in version-1 records,
            which predate it). Noise of one scale per coordinate costs vectors of another
            dimension a different drop, so the guard refuses writes of any other dimension.
        vector_name: the vector of the calibrated collection that was measured, ``""`` for an
            unnamed vector (version 3 on; ``None`` in older records, which predate it). A record of
            a named vector vouches only for writes of a vector of that name
            (:meth:`vector_name_mismatch`).
        distance: the distance of the measured vector (``"Cosine"``, ``"Euclid"``, ``"Dot"`` or
            ``"Manhattan"``; version 4 on, ``None`` in older records). Noise moves rankings by
            another distance differently, so the guard refuses writes of a vector compared by
            another distance.
        embedding_model: the embedding model the calibrating signer says the collection's vectors
            (and the calibration queries) came from, as the caller named it (version 5 on; ``None``
            in older records and in records whose caller named none). Two models of one dimension
            and distance lose different amounts of quality to the same noise, so a policy that sets
            ``utility.embedding_model`` refuses writes under a record naming another model or
            none. It is the signer's assertion: nothing in a raw vector tells which model made it.
        n_measured_queries: how many queries the record's ``metric`` averaged over (version 6 on;
            ``None`` in older records): ``n_queries``, but with qrels, for recall and nDCG, only the
            queries with at least one relevant label (:func:`retrieval_metrics` skips the others).
            The guard's ``utility.min_queries`` holds this count (older records: ``n_queries``).
        signer_key_id: key id of the Ed25519 signer (``None``: unsigned).
        signature: base64 Ed25519 signature over ``UTILITY_DOMAIN + canonical_json(body)``.
        version: record format version.
    """

    collection: str
    mechanism: str
    epsilon: float
    delta: float
    radius: float
    clip_norm: float | None
    scale: float
    k: int
    threshold: float
    metric: str
    mode: str
    epsilon_ceiling: float | None
    clean: dict[str, float]
    measured: list[dict[str, Any]]
    chosen_level: int
    query_sample_digest: str
    n_queries: int
    n_documents: int
    created_at: int
    dim: int | None = None
    vector_name: str | None = None
    distance: str | None = None
    embedding_model: str | None = None
    n_measured_queries: int | None = None
    signer_key_id: str | None = None
    signature: str | None = None
    version: int = RECORD_VERSION

    def body(self) -> dict[str, Any]:
        """Return every field except ``signature``: the signed content."""
        out = dataclasses.asdict(self)
        del out["signature"]
        # Older versions had no such field; their signatures cover the body without it. The
        # version is in the body, so editing it to drop a field breaks the signature.
        if self.version < 2:
            del out["dim"]
        if self.version < 3:
            del out["vector_name"]
        if self.version < 4:
            del out["distance"]
        if self.version < 5:
            del out["embedding_model"]
        if self.version < 6:
            del out["n_measured_queries"]
        return out

    def signed_bytes(self) -> bytes:
        """Return the canonical encoding of :meth:`body` (what the digest covers)."""
        from .canonical import canonical_json

        return canonical_json(self.body())

    @property
    def digest(self) -> str:
        """SHA-256 hex of the signed canonical body: the ``retrieval_utility_guard_hash``."""
        return hashlib.sha256(self.signed_bytes()).hexdigest()

    def vector_name_mismatch(self, vector_name: str) -> str | None:
        """Why this record cannot vouch for writes of vector ``vector_name``, or None when it can.

        A record calibrated on a named vector measured that vector's embeddings only. A record
        without a vector name (versions 1 and 2) or calibrated on an unnamed vector (``""``: a
        staging collection with one vector says nothing about names) names no vector.
        """
        if not self.vector_name or self.vector_name == vector_name:
            return None
        return (f"it was calibrated for vector {self.vector_name!r}, not "
                f"{vector_name or '<unnamed>'!r}")

    def small_collection_refusal(self, path: str | None) -> str | None:
        """Why this record proves nothing about its noise (``path``: where the policy names it), or None.

        A record measured on no more than ``k`` points (``calibrate(allow_small_collection=True)``,
        ``--allow-small-collection``) saw every top-``k`` hold every point, so no noise could lower
        its recall@k or overlap@k: its drops are 0 whatever the noise costs real data.
        """
        if self.n_documents > self.k:
            return None
        return (f"small_collection: utility record {path!r} was calibrated on {self.n_documents} point(s), no more "
                f"than its k {self.k} (signed under --allow-small-collection), so every top-{self.k} held every "
                "point and its drops say nothing about the noise; re-run `qdrant-guard calibrate` on a staging "
                f"collection of many more than {self.k} points, or set utility.allow_small_records = true "
                "for a test or demo collection")

    def few_queries_refusal(self, path: str | None, min_queries: int) -> str | None:
        """Why this record measured too few queries to vouch for its noise, or None.

        One query's recall@k moves in steps of 1/k (known-item recall: 0 or 1), so a drop
        measured on fewer than ``min_queries`` (the policy's ``utility.min_queries``) queries is
        mostly chance (``calibrate(allow_few_queries=True)``, ``--allow-few-queries``).
        """
        n = self.measured_queries
        if n >= min_queries:
            return None
        # Older records carry no measured count: with qrels their n_queries may count unlabelled ones.
        labelled = (f" with relevance labels (of {self.n_queries} searched; with qrels its {self.metric} averages "
                    "over the labelled ones only)" if n != self.n_queries else "")
        return (f"few_queries: utility record {path!r} was calibrated on {n} quer"
                f"{'y' if n == 1 else 'ies'}{labelled}, fewer than utility.min_queries = {min_queries}, so its "
                f"{self.metric}@{self.k} drops are mostly the chance of which queries were drawn; re-run "
                f"`qdrant-guard calibrate` on at least {min_queries} queries"
                f"{' labelled in --qrels' if labelled else ''} (more --queries, or a larger "
                "--sample-limit), or lower utility.min_queries (or set utility.allow_small_records = true) "
                "for a test or demo collection")

    @property
    def measured_queries(self) -> int:
        """How many queries the record's metric averaged over: ``n_measured_queries`` (version 6 on),
        else ``n_queries``, the only count older records carry (with qrels it may count unlabelled
        queries, which the metric skipped)."""
        return self.n_queries if self.n_measured_queries is None else self.n_measured_queries

    def drop_for(self, epsilon: float, mechanism: str) -> float | None:
        """Return the measured drop at ``(epsilon, mechanism)``, or ``None`` if not measured.

        Args:
            epsilon: a privacy level.
            mechanism: the mechanism name.

        Returns:
            The relative drop of :attr:`metric` measured at that level, or ``None``.
        """
        if mechanism != self.mechanism:
            return None
        for level in self.measured:
            if math.isclose(float(level["epsilon"]), float(epsilon), rel_tol=1e-12, abs_tol=0.0):
                return float(level["drop"])
        return None

    def parameter_mismatch(
        self, *, mechanism: str, radius: float, delta: float, clip_norm: float | None
    ) -> str | None:
        """Return how these noise parameters differ from the calibrated ones, or None if they match.

        Only levels of the same mechanism, radius, delta and clip_norm were measured; epsilon is
        the one parameter the record spans.
        """
        diffs = []
        if mechanism != self.mechanism:
            diffs.append(f"mechanism {mechanism!r} (record: {self.mechanism!r})")
        if not _same(radius, self.radius):
            diffs.append(f"radius {radius!r} (record: {self.radius!r})")
        if not _same(delta, self.delta):
            diffs.append(f"delta {delta!r} (record: {self.delta!r})")
        if not _same(clip_norm, self.clip_norm):
            diffs.append(f"clip_norm {clip_norm!r} (record: {self.clip_norm!r})")
        return ", ".join(diffs) or None

    def frontier(self, max_drop: float) -> str:
        """One line: the parameters and every measured epsilon with its drop, pass or fail."""
        levels = ", ".join(
            f"epsilon {lv['epsilon']!r} drop {lv['drop']:.4f} "
            + ("pass" if _within(lv["drop"], max_drop) else "FAIL")
            for lv in self.measured
        )
        return (f"measured {self.metric}@{self.k} drops ({self.mechanism}, radius {self.radius!r}, "
                f"delta {self.delta!r}, clip_norm {self.clip_norm!r}; threshold {max_drop!r}): "
                f"{levels}")

    def level_refusal(
        self,
        *,
        mechanism: str,
        epsilon: float,
        radius: float,
        delta: float,
        clip_norm: float | None,
        max_drop: float,
        scale: float | None = None,
        dim: int | None = None,
    ) -> str | None:
        """Return why the record does not show this noise level keeps the drop <= ``max_drop``.

        Conservative: the level is allowed (None) only when it has the record's mechanism,
        radius, delta and clip_norm, the record measured a passing level with at least as much
        noise (epsilon <= ``epsilon``) and no failing level with as little or less noise
        (epsilon >= ``epsilon``). At fixed mechanism, radius, delta and dimension a smaller
        epsilon means a larger noise scale, so epsilons order the levels by noise.

        ``scale`` and ``dim``: the noise scale and dimension of a release whose scale need not be
        the calibrated one (a receipt's: ``noise.check_release`` admits any scale at least the
        calibrated one). A scale above its epsilon's calibrated scale is more noise than that
        epsilon names, so the epsilons measured say nothing about it: refused.

        Returns:
            None when allowed, else a message naming the cause and the measured frontier.
        """
        frontier = self.frontier(max_drop)
        mismatch = self.parameter_mismatch(
            mechanism=mechanism, radius=radius, delta=delta, clip_norm=clip_norm
        )
        if mismatch is not None:
            return (f"noise with {mismatch} was never measured; re-noise with the record's "
                    f"parameters or calibrate them. {frontier}")
        if scale is not None and dim is not None:
            want = _calibrated_scale(mechanism, epsilon, radius, delta, clip_norm, dim)
            if want is None or not scale <= want * (1.0 + 1e-12):  # NaN refused too
                return (f"epsilon {epsilon!r} with noise scale {scale!r}: the calibrated scale of that epsilon is "
                        f"{want!r}, and the record measured levels at their calibrated scales only, so more "
                        "noise than the epsilon names was never measured; re-noise with "
                        "qdrant_guard.noise.privatize at a measured passing epsilon (the calibrated scale). "
                        f"{frontier}")
        failing = [lv for lv in self.measured
                   if not _within(lv["drop"], max_drop) and _at_least(float(lv["epsilon"]), epsilon)]
        if failing:
            worst = failing[0]
            return (f"epsilon {epsilon!r}: the record measured a drop of {worst['drop']:.4f} > "
                    f"{max_drop!r} at epsilon {worst['epsilon']!r}, which has no more noise; use a measured "
                    "passing epsilon (less noise) with the record's noise parameters, or re-run `qdrant-guard "
                    f"calibrate` for this policy. {frontier}")
        if not any(_within(lv["drop"], max_drop) and _at_least(epsilon, float(lv["epsilon"]))
                   for lv in self.measured):
            return (f"epsilon {epsilon!r}: no level with at least this much noise (epsilon <= "
                    f"{epsilon!r}) was measured to pass; calibrate with this epsilon in the ladder. "
                    f"{frontier}")
        return None

    def to_json(self) -> str:
        """Return the record (signature included) as canonical JSON text."""
        from .canonical import canonical_json

        return canonical_json(dataclasses.asdict(self)).decode("utf-8")

    @classmethod
    def from_json(cls, text: str | bytes) -> "UtilityRecord":
        """Parse a record written by :meth:`to_json`.

        Args:
            text: JSON text or bytes.

        Returns:
            The record (not yet verified: call :func:`verify_utility_record`).

        Raises:
            ValueError: the text is not JSON, lacks/has unknown fields, or has a field of the
                wrong form (``created_at`` not integer milliseconds, ``dim``, ``vector_name`` or
                ``distance`` missing or wrong for its version, ``embedding_model`` neither null nor
                a non-empty string, or set before version 5; ``n_measured_queries`` missing or not an
                integer from 1 to ``n_queries`` from version 6, or set before it).
        """
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        if not isinstance(text, str):
            raise GuardArgumentTypeError(f"from_json() argument must be str or bytes, not {type(text).__name__}")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GuardArgumentValueError(f"utility record is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise GuardArgumentValueError("utility record must be a JSON object")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise GuardArgumentValueError(f"utility record has unknown fields {unknown}")
        required = {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        missing = sorted(required - set(data))
        if missing:
            raise GuardArgumentValueError(f"utility record lacks fields {missing}")
        created = data["created_at"]
        if isinstance(created, bool) or not isinstance(created, int) or not -(2 ** 63) <= created < 2 ** 63:
            # utility.max_age_s does arithmetic on it: a string, null or a number beyond float
            # range would end a write in a TypeError or OverflowError instead of a decision.
            shown = repr(created) if len(repr(created)) <= 40 else repr(created)[:40] + "..."
            raise GuardArgumentValueError(f"utility record needs 'created_at', when it was calibrated, as integer "
                                          f"milliseconds since the Unix epoch (an int64, as `qdrant-guard calibrate` "
                                          f"writes it), got {shown}; re-run `qdrant-guard calibrate` to write the record again")
        version = data.get("version", RECORD_VERSION)
        if isinstance(version, bool) or version not in (1, 2, 3, 4, 5, 6):
            raise GuardArgumentValueError(f"utility record has version {version!r}; this qdrant_guard reads versions 1 "
                                          "to 6 (re-run `qdrant-guard calibrate` to write a current record)")
        dim = data.get("dim")
        if version == 1 and dim is not None:
            raise GuardArgumentValueError("utility record of version 1 has a 'dim' field, which version 1 records "
                                          "do not carry (was its version edited?)")
        if version >= 2 and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise GuardArgumentValueError(f"utility record of version {version} needs 'dim', the calibrated vector "
                                          f"dimension, as a positive integer; got {dim!r}")
        vname = data.get("vector_name")
        if version < 3 and vname is not None:
            raise GuardArgumentValueError(f"utility record of version {version} has a 'vector_name' field, which records "
                                          "before version 3 do not carry (was its version edited?)")
        if version >= 3 and not isinstance(vname, str):
            raise GuardArgumentValueError(f"utility record of version {version} needs 'vector_name', the calibrated "
                                          f"vector's name (\"\" for an unnamed vector), as a string; got {vname!r}")
        distance = data.get("distance")
        if version < 4 and distance is not None:
            raise GuardArgumentValueError(f"utility record of version {version} has a 'distance' field, which records "
                                          "before version 4 do not carry (was its version edited?)")
        if version >= 4 and distance not in _DISTANCES:
            raise GuardArgumentValueError(f"utility record of version {version} needs 'distance', the calibrated "
                                          f"vector's distance, as one of {', '.join(_DISTANCES)}; got {distance!r}")
        model = data.get("embedding_model")
        if version < 5 and model is not None:
            raise GuardArgumentValueError(f"utility record of version {version} has an 'embedding_model' field, which "
                                          "records before version 5 do not carry (was its version edited?)")
        if model is not None and not (isinstance(model, str) and model.strip()):
            shown = repr(model) if len(repr(model)) <= 40 else repr(model)[:40] + "..."
            raise GuardArgumentValueError(f"utility record of version {version} needs 'embedding_model', the embedding "
                                          f"model its vectors came from, as a non-empty string or null (not named); "
                                          f"got {shown}; re-run `qdrant-guard calibrate --embedding-model NAME`")
        measured, searched = data.get("n_measured_queries"), data.get("n_queries")
        if version < 6 and measured is not None:
            raise GuardArgumentValueError(f"utility record of version {version} has an 'n_measured_queries' field, which "
                                          "records before version 6 do not carry (was its version edited?)")
        if version >= 6 and not (type(measured) is int and type(searched) is int and 1 <= measured <= searched):
            # The guard's utility.min_queries compares with it: a string would end a write in a TypeError.
            shown = repr(measured) if len(repr(measured)) <= 40 else repr(measured)[:40] + "..."
            raise GuardArgumentValueError(f"utility record of version {version} needs 'n_measured_queries', the number "
                                          f"of queries its metric averaged over, as an integer from 1 to its n_queries "
                                          f"({searched!r}); got {shown}; re-run `qdrant-guard calibrate` to write the "
                                          "record again")
        return cls(**data)


def _within(drop: float, max_drop: float) -> bool:
    """``drop <= max_drop``, give or take float rounding: 1 - 38/40 is 0.050000000000000044, and a
    drop of exactly 5 % must pass a threshold of 0.05 (in calibrate and in the guard alike)."""
    return drop <= max_drop + 1e-12


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)


def _at_least(a: float, b: float) -> bool:
    return a >= b or _same(a, b)


def _calibrated_scale(mechanism: str, epsilon: float, radius: float, delta: float,
                      clip_norm: float | None, dim: int) -> float | None:
    """The scale ``noise.privatize`` gives these parameters (None: they cannot be calibrated)."""
    from . import noise

    try:
        return noise._params(mechanism, epsilon, None if mechanism == "laplace_l2" else delta, radius,
                             clip_norm, int(dim), "float32", noise.RNG_KEYED).scale
    except (TypeError, ValueError):
        return None


def _public_keys(trusted_keys: Any) -> dict[str, Any]:
    from .keys import key_id

    if isinstance(trusted_keys, Mapping):
        return dict(trusted_keys)
    return {key_id(pk): pk for pk in trusted_keys}


def verify_utility_record(record: UtilityRecord, trusted_keys: Any) -> bool:
    """Check that ``record`` is signed by a trusted key and unmodified.

    Args:
        record: the record.
        trusted_keys: a mapping key id -> Ed25519 public key, or an iterable of public keys.

    Returns:
        True if the signature verifies under the trusted key named by ``signer_key_id``.
    """
    from cryptography.exceptions import InvalidSignature

    if not isinstance(record, UtilityRecord):
        raise GuardArgumentTypeError(
            f"verify_utility_record() argument 'record' must be UtilityRecord, not "
            f"{type(record).__name__}"
        )
    if record.signature is None or record.signer_key_id is None:
        return False
    key = _public_keys(trusted_keys).get(record.signer_key_id)
    if key is None:
        return False
    try:
        sig = base64.b64decode(record.signature, validate=True)
        key.verify(sig, UTILITY_DOMAIN + record.signed_bytes())
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


# --------------------------------------------------------------------------- metrics


def _norm_id(point_id: Any) -> str:
    # Qdrant accepts a UUID in any form (upper case, no hyphens, braces) and returns it canonical.
    if isinstance(point_id, str):
        try:
            return str(uuid.UUID(point_id))
        except ValueError:
            return point_id
    return str(point_id)


def _as_grades(relevant: Any) -> dict[str, float]:
    if isinstance(relevant, Mapping):
        return {_norm_id(k): float(v) for k, v in relevant.items() if float(v) > 0}
    return {_norm_id(k): 1.0 for k in relevant}


def retrieval_metrics(
    results: Sequence[Sequence[Any]],
    *,
    k: int,
    qrels: Mapping[int, Any] | None = None,
    known_items: Sequence[Any] | None = None,
    reference: Sequence[Sequence[Any]] | None = None,
) -> dict[str, float]:
    """Compute mean recall@k, nDCG@k (with qrels) and overlap@k with a reference ranking.

    Args:
        results: per query, the ranked retrieved point ids.
        k: the cut-off.
        qrels: query index -> set of relevant ids, or dict id -> graded relevance (gain = grade).
        known_items: per query, its one known relevant id (used when ``qrels`` is None).
        reference: per query, the clean top-k ids, for ``overlap`` = |top-k ∩ reference| / k.

    Returns:
        A dict with ``recall``, ``overlap`` (when ``reference``) and ``ndcg`` (when ``qrels``).
    """
    out: dict[str, float] = {}
    recalls: list[float] = []
    ndcgs: list[float] = []
    for i, ranked in enumerate(results):
        top = [_norm_id(p) for p in list(ranked)[:k]]
        if qrels is not None:
            if i not in qrels:
                continue
            grades = _as_grades(qrels[i])
            if not grades:
                continue
            hits = sum(1 for p in top if p in grades)
            recalls.append(hits / len(grades))
            dcg = sum(grades.get(p, 0.0) / math.log2(r + 2) for r, p in enumerate(top))
            ideal = sorted(grades.values(), reverse=True)[:k]
            idcg = sum(g / math.log2(r + 2) for r, g in enumerate(ideal))
            ndcgs.append(dcg / idcg)
        elif known_items is not None:
            recalls.append(1.0 if _norm_id(known_items[i]) in top else 0.0)
    if recalls:
        out["recall"] = float(np.mean(recalls))
    if ndcgs:
        out["ndcg"] = float(np.mean(ndcgs))
    if reference is not None:
        overlaps = [
            len({_norm_id(p) for p in list(r)[:k]} & {_norm_id(p) for p in list(ref)[:k]}) / k
            for r, ref in zip(results, reference)
        ]
        out["overlap"] = float(np.mean(overlaps)) if overlaps else 0.0
    return out


# --------------------------------------------------------------------------- calibration


def _measured_count(used: list[Any], used_qrels: Mapping[int, Any] | None, metric: str) -> int:
    """How many of ``used`` the metric averages over: with qrels, recall and nDCG skip the queries
    without a relevant label (:func:`retrieval_metrics`); overlap and known-item recall take all."""
    if used_qrels is None or metric == "overlap":
        return len(used)
    return sum(1 for j in range(len(used)) if j in used_qrels and _as_grades(used_qrels[j]))


def _check_query_count(used: list[Any], used_qrels: Mapping[int, Any] | None, metric: str, min_queries: int,
                       allow_few_queries: bool, given: int) -> None:
    counted = _measured_count(used, used_qrels, metric)
    if counted >= min_queries or allow_few_queries:
        return
    labelled = " with relevance labels in qrels" if counted != len(used) else ""
    raise GuardArgumentValueError(
        f"{metric} would be measured on {counted} quer{'y' if counted == 1 else 'ies'}{labelled} (of {given} given), "
        f"fewer than min_queries={min_queries}: one query's {metric} moves in large steps, so the drop would be "
        f"mostly chance; nothing was measured or signed. Give at least {min_queries} queries (more --queries"
        f"{', labelled in --qrels' if labelled else ''}, or a larger --sample-limit), or lower min_queries "
        f"(`--min-queries`, and the policy's utility.min_queries); allow_few_queries=True (`--allow-few-queries`) "
        "signs such a record anyway, for tests and demos")


def _read_collection(
    client: Any, collection: str, vector_name: str | None
) -> tuple[list[Any], np.ndarray, Any]:
    from qdrant_client import models

    info = client.get_collection(collection)
    params = info.config.params.vectors
    if isinstance(params, Mapping):
        if vector_name is None:
            if len(params) != 1:
                raise GuardArgumentValueError(
                    f"collection {collection!r} has named vectors {sorted(params)}; pass "
                    "vector_name= (`qdrant-guard calibrate --vector-name`) to choose one"
                )
            vector_name = next(iter(params))
        if vector_name not in params:
            raise GuardArgumentValueError(
                f"collection {collection!r} has no vector named {vector_name!r}; "
                f"it has {sorted(params)}"
            )
        vparams = params[vector_name]
    else:
        if vector_name not in (None, ""):
            raise GuardArgumentValueError(
                f"collection {collection!r} has one unnamed vector; drop vector_name={vector_name!r}"
            )
        vector_name = None
        vparams = params
    ids: list[Any] = []
    rows: list[list[float]] = []
    offset = None
    while True:
        points, offset = client.scroll(
            collection, limit=512, offset=offset, with_payload=False, with_vectors=True
        )
        for p in points:
            vec = p.vector
            if isinstance(vec, Mapping):
                if vector_name not in vec:
                    # Qdrant lets a point lack a named vector; searches of that vector never
                    # return it, so it is no document of this calibration.
                    continue
                vec = vec[vector_name]
            ids.append(p.id)
            rows.append(list(vec))
        if offset is None:
            break
    if not rows:
        what = f"has no point with vector {vector_name!r}" if vector_name else "is empty"
        raise GuardArgumentValueError(f"collection {collection!r} {what}; calibrate needs its clean vectors")
    distance = vparams.distance
    if not isinstance(distance, models.Distance):
        distance = models.Distance(distance)
    return ids, np.asarray(rows, dtype=np.float32), (vector_name, distance)


def _search(
    client: Any, collection: str, queries: np.ndarray, k: int, using: str | None
) -> list[list[Any]]:
    from qdrant_client import models

    out: list[list[Any]] = []
    step = 64
    for start in range(0, len(queries), step):
        requests = [
            models.QueryRequest(query=q.tolist(), limit=k, using=using)
            for q in queries[start : start + step]
        ]
        for resp in client.query_batch_points(collection, requests=requests):
            out.append([p.id for p in resp.points])
    return out


def _seed_key(seed: int, purpose: bytes) -> bytes:
    return hashlib.sha256(_SEED_KEY_DOMAIN + purpose + str(int(seed)).encode()).digest()


def noise_pair(
    docs: np.ndarray,
    queries: np.ndarray,
    *,
    mechanism: str,
    epsilon: float,
    radius: float,
    delta: float | None,
    clip_norm: float | None,
    seed: int | None,
) -> tuple[np.ndarray, np.ndarray, Any]:
    """Noise documents and queries at one level with :func:`qdrant_guard.noise.privatize`.

    With ``seed`` the noise is the production mechanism in *keyed* mode under a key derived from
    the seed (reproducible measurements); without it, fresh CSPRNG noise.

    Returns:
        ``(noised_docs, noised_queries, NoiseParams)``.
    """
    from . import noise

    kd = _seed_key(seed, b"docs") if seed is not None else None
    kq = _seed_key(seed, b"queries") if seed is not None else None
    d = None if mechanism == "laplace_l2" else delta
    nd, params = noise.privatize(
        docs, mechanism=mechanism, epsilon=epsilon, radius=radius, delta=d, clip_norm=clip_norm, key=kd
    )
    nq, _ = noise.privatize(
        queries, mechanism=mechanism, epsilon=epsilon, radius=radius, delta=d, clip_norm=clip_norm, key=kq
    )
    return nd, nq, params


def _drop(clean: float, noisy: float) -> float:
    if clean <= 0.0:
        return 0.0
    return float(1.0 - noisy / clean)


def _canonical_queries(queries: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for q in queries:
        if isinstance(q, str):
            out.append(q)
        else:
            out.append([float(x) for x in np.asarray(q, dtype=np.float64).ravel()])
    return out


def query_sample_digest(queries: Sequence[Any]) -> str:
    """SHA-256 hex over the canonical encoding of the query texts or vectors."""
    from .canonical import canonical_json

    return hashlib.sha256(_QUERY_DOMAIN + canonical_json(_canonical_queries(queries))).hexdigest()


def _check_positive(name: str, value: Any, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GuardArgumentTypeError(f"calibrate() argument '{name}' must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise GuardArgumentValueError(f"calibrate() argument '{name}' must be a finite number > 0, got {value!r}")


def _frontier_table(levels: Sequence[Mapping[str, Any]], metric: str) -> str:
    lines = [f"  {'epsilon':>9} {'sigma':>10} {metric:>8} {'drop':>8}"]
    for lv in levels:
        lines.append(
            f"  {lv['epsilon']:>9.4g} {lv['scale']:>10.4g} {lv[metric]:>8.4f} {lv['drop']:>8.4f}"
        )
    return "\n".join(lines)


def _round_up_4(value: float) -> str:
    """``value`` to 4 decimals, rounded up: advice to raise a bound to it must then be enough."""
    # Less the rounding _within forgives: a drop of 0.075 computed as 0.07500000000000007 needs 0.0750.
    text = f"{math.ceil((value - 1e-12) * 10_000) / 10_000:.4f}"
    if not _within(value, float(text)):  # value * 10_000 itself rounded down
        text = f"{float(text) + 0.0001:.4f}"
    return text


def same_model(a: str, b: str) -> bool:
    """Whether embedding model names ``a`` and ``b`` name the same model, as qdrant-client's
    inference resolves them: case-insensitively (``str.lower``; qdrant_client/fastembed_common.py's
    ``is_supported_*_model`` and fastembed's ``TextEmbedding`` both look a name up lowercased), so
    ``BAAI/bge-small-en-v1.5`` and ``baai/bge-small-en-v1.5`` load one model. Otherwise exact:
    no whitespace or Unicode folding, which no resolver does either."""
    return str.__str__(a).lower() == str.__str__(b).lower()


def embedder_model_name(embedder: Any) -> str | None:
    """The model name an embedder exposes, on itself or on the object whose bound method it is:
    its ``model_id`` (what the guard records in receipts, as :class:`HashingEmbedder` has) or
    ``model_name`` (fastembed's ``TextEmbedding``); None when it has no non-empty string one."""
    for owner in (embedder, getattr(embedder, "__self__", None)):
        for attr in ("model_id", "model_name"):
            name = getattr(owner, attr, None) if owner is not None else None
            if isinstance(name, str) and name.strip():
                return name
    return None


def _embedding_model(embedding_model: Any, embedder: Any) -> str | None:
    """The model name a record is to carry: the one given, else the embedder's (see calibrate)."""
    named = embedder_model_name(embedder) if embedder is not None else None
    if embedding_model is None:
        return named
    if not isinstance(embedding_model, str):
        raise GuardArgumentTypeError(f"calibrate() argument 'embedding_model' must be a str or None, not "
                                     f"{type(embedding_model).__name__}")
    if not embedding_model.strip():
        raise GuardArgumentValueError("calibrate() argument 'embedding_model' is empty; name the model the "
                                      "collection's vectors came from, e.g. 'sentence-transformers/all-MiniLM-L6-v2', "
                                      "or pass None")
    if named is not None and not same_model(named, embedding_model):
        # The queries would be embedded by one model and the record would name another.
        raise GuardArgumentValueError(f"calibrate() argument 'embedding_model' is {embedding_model!r}, but the "
                                      f"embedder embeds with {named!r}; name the embedder's model (names are compared "
                                      "as qdrant-client resolves them: exactly but for case), or pass an embedder of the model the collection was embedded with")
    return embedding_model


def calibrate(
    client: Any,
    collection: str,
    queries: Sequence[Any],
    qrels: Mapping[int, Any] | None = None,
    k: int = 10,
    *,
    mechanism: str = "gaussian",
    radius: float,
    delta: float = 1e-6,
    clip_norm: float | None = 1.0,
    epsilons: Sequence[float] = DEFAULT_EPSILONS,
    threshold: float = 0.05,
    epsilon_ceiling: float | None = None,
    signer: Any = None,
    embedder: Callable[[list[str]], np.ndarray] | None = None,
    progress: bool = True,
    sample_limit: int | None = None,
    seed: int | None = None,
    metric: str = "recall",
    vector_name: str | None = None,
    embedding_model: str | None = None,
    allow_small_collection: bool = False,
    min_queries: int = DEFAULT_MIN_QUERIES,
    allow_few_queries: bool = False,
) -> UtilityRecord:
    """Choose the strongest noise level whose retrieval-quality drop stays within ``threshold``.

    A level qualifies when its drop and the drop of every level with a larger epsilon (less noise)
    are within ``threshold``, and its epsilon within ``epsilon_ceiling``: the guard refuses a level
    when a weaker measured one fails (:meth:`UtilityRecord.level_refusal`), and with few queries
    the measured drops need not grow monotonically with the noise.

    Args:
        client: a raw ``qdrant_client.QdrantClient`` that can read the clean vectors.
        collection: the (clean, staging or in-boundary) collection to calibrate.
        queries: query vectors, or query texts together with ``embedder``.
        qrels: query index -> set of relevant point ids, or dict id -> graded relevance. Without
            it, query i's known item is its clean top-1 (known-item recall).
        k: the cut-off of recall@k, nDCG@k and overlap@k.
        mechanism: ``"gaussian"`` or ``"laplace_l2"``.
        radius: protected L2 radius of the guarantee.
        delta: Gaussian delta (ignored for ``laplace_l2``).
        clip_norm: clip vectors to this L2 norm before noising (``None``: no clipping).
        epsilons: candidate privacy levels; measured from the smallest (strongest noise) up.
        threshold: largest accepted relative drop ``1 - noisy/clean`` of ``metric``.
        epsilon_ceiling: levels above it are measured and recorded but never chosen.
        signer: Ed25519 private key that signs the record (``None``: unsigned record).
        embedder: callable ``list[str] -> ndarray`` for text queries. For vectors the guard
            embedded itself, give it the guard's text path so queries match the documents:
            ``lambda ts: model([generalize_identifiers(redact(t)) for t in ts])`` under the
            default policy (``qdrant_guard.identifiers``, ``qdrant_guard.detect``).
        progress: draw a progress bar on stderr.
        sample_limit: measure at most this many queries (a random sample; seeded by ``seed``).
        seed: makes the measurement reproducible: noise from the keyed mechanism under a key
            derived from the seed. Never use it for production writes.
        metric: ``"recall"`` (default), ``"ndcg"`` (needs qrels) or ``"overlap"``.
        vector_name: which named vector to calibrate (needed when the collection has several).
            The record carries the measured vector's name (``""`` for an unnamed vector), and a
            guard applies a record of a named vector only to writes of a vector of that name.
        embedding_model: the embedding model the collection's vectors (and the queries) came from,
            e.g. ``"sentence-transformers/all-MiniLM-L6-v2"``, signed into the record; a policy
            that sets ``utility.embedding_model`` accepts only records naming its model. ``None``:
            the ``model_id`` or ``model_name`` of ``embedder`` (or of the object whose bound method
            it is) when it has a non-empty string one (:func:`embedder_model_name`), else not
            named. It is what the caller asserts: calibrate cannot tell which model made the
            collection's vectors.
        allow_small_collection: sign a record measured on a collection of no more than ``k``
            points (default False: refused). Every top-k of such a collection holds all of its
            points, so no noise lowers recall@k or overlap@k there and the record would vouch for
            the strongest level tried; for tests and demos only.
        min_queries: fewest queries the metric may average over (after ``sample_limit``; with
            ``qrels`` and metric ``recall`` or ``ndcg``, the queries with labels) for the record to
            be signed; default :data:`DEFAULT_MIN_QUERIES`, the policy's default
            ``utility.min_queries``. Fewer raise, nothing measured, unless ``allow_few_queries``.
        allow_few_queries: sign a record measured on fewer than ``min_queries`` queries anyway
            (default False); a guard then refuses it unless its policy's ``utility.min_queries``
            is as low or it sets ``utility.allow_small_records``. For tests and demos only.

    Returns:
        The (signed) :class:`UtilityRecord`.

    Raises:
        UtilityCalibrationError: no level meets both the threshold and the ceiling; the message
            shows the measured frontier and which constraint to relax.
        TypeError, ValueError: a bad argument, or a clean ``metric`` of 0 (qrels naming no point
            the clean search returns: there is no quality to lose), an ``embedding_model`` other
            than the model ``embedder`` names, a collection of no more than ``k`` points without
            ``allow_small_collection``, or fewer than ``min_queries`` queries without
            ``allow_few_queries`` (nothing is measured).
    """
    if not isinstance(collection, str) or not collection:
        raise GuardArgumentTypeError("calibrate() argument 'collection' must be a non-empty str")
    if mechanism not in ("gaussian", "laplace_l2"):
        raise GuardArgumentValueError(f"mechanism must be 'gaussian' or 'laplace_l2', got {mechanism!r}")
    if metric not in _METRICS:
        raise GuardArgumentValueError(f"metric must be one of {_METRICS}, got {metric!r}")
    embedding_model = _embedding_model(embedding_model, embedder)
    if metric == "ndcg" and qrels is None:
        raise GuardArgumentValueError("metric='ndcg' needs qrels (graded or binary relevance labels)")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise GuardArgumentValueError(f"calibrate() argument 'k' must be an int >= 1, got {k!r}")
    for flag, given in (("allow_small_collection", allow_small_collection), ("allow_few_queries", allow_few_queries)):
        if not isinstance(given, bool):
            raise GuardArgumentTypeError(f"calibrate() argument '{flag}' must be a bool, not {type(given).__name__}")
    if isinstance(min_queries, bool) or not isinstance(min_queries, numbers.Integral) or min_queries < 1:
        raise GuardArgumentValueError(f"calibrate() argument 'min_queries' must be an int >= 1, got {min_queries!r}")
    _check_positive("radius", radius)
    _check_positive("clip_norm", clip_norm, allow_none=True)
    _check_positive("epsilon_ceiling", epsilon_ceiling, allow_none=True)
    if mechanism == "gaussian":
        if isinstance(delta, bool) or not isinstance(delta, numbers.Real):
            raise GuardArgumentTypeError(f"calibrate() argument 'delta' must be a number, not {type(delta).__name__}")
        if not (1e-300 <= delta < 1):
            raise GuardArgumentValueError(f"gaussian needs 1e-300 <= delta < 1, got delta={delta!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not (
        0 <= threshold < 1
    ):
        raise GuardArgumentValueError(f"threshold must be a number in [0, 1), got {threshold!r}")
    if isinstance(epsilons, (str, bytes)) or not isinstance(epsilons, Iterable):
        # A string would be read one character at a time ("124" as 1, 2 and 4).
        raise GuardArgumentTypeError(f"calibrate() argument 'epsilons' must be a sequence of numbers such as "
                                     f"(0.5, 1.0, 2.0), not {type(epsilons).__name__}")
    epsilons = list(epsilons)
    for e in epsilons:
        if isinstance(e, bool) or not isinstance(e, numbers.Real):
            raise GuardArgumentTypeError(f"calibrate() argument 'epsilons' holds a {type(e).__name__}; give "
                                         "numbers such as (0.5, 1.0, 2.0)")
        _check_positive("epsilons[]", float(e))
    eps_list = sorted({float(e) for e in epsilons})
    if not eps_list:
        raise GuardArgumentValueError("epsilons is empty; pass at least one candidate epsilon")
    for name, value in (("sample_limit", sample_limit), ("seed", seed)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise GuardArgumentTypeError(f"calibrate() argument '{name}' must be an int or None, not "
                                         f"{type(value).__name__}")
    queries = list(queries)
    if not queries:
        raise GuardArgumentValueError("queries is empty; pass query vectors or texts")
    if qrels is not None and not isinstance(qrels, Mapping):
        raise GuardArgumentTypeError(f"qrels must be a mapping query index -> relevant ids, not {type(qrels).__name__}")

    index = list(range(len(queries)))
    if sample_limit is not None and sample_limit < len(queries):
        if sample_limit < 1:
            raise GuardArgumentValueError(f"sample_limit must be >= 1, got {sample_limit!r}")
        rng = np.random.default_rng(seed)
        index = sorted(rng.choice(len(queries), size=sample_limit, replace=False).tolist())
    used = [queries[i] for i in index]
    used_qrels = {j: qrels[i] for j, i in enumerate(index) if i in qrels} if qrels is not None else None

    if all(isinstance(q, str) for q in used):
        if embedder is None:
            raise GuardArgumentValueError("queries are texts: pass embedder= (a callable list[str] -> ndarray)")
        qvecs = np.asarray(embedder(list(used)), dtype=np.float32)
    elif any(isinstance(q, str) for q in used):
        raise GuardArgumentTypeError("queries mixes texts and vectors; pass only one kind")
    else:
        qvecs = np.asarray([np.asarray(q, dtype=np.float32).ravel() for q in used], dtype=np.float32)
    if qvecs.ndim != 2 or not np.all(np.isfinite(qvecs)):
        raise GuardArgumentValueError("query vectors must form a finite 2-D array (n_queries, dim)")

    ids, docs, (using, distance) = _read_collection(client, collection, vector_name)
    if len(ids) <= k and not allow_small_collection:
        # Every top-k then holds the whole collection: no noise moves a point out of it, so recall
        # and overlap lose nothing at any level (nDCG only reorders), and the record would vouch for
        # the strongest level on evidence that says nothing about a collection of real size.
        shown = f"vector {using!r} of collection {collection!r}" if using else f"collection {collection!r}"
        raise GuardArgumentValueError(
            f"{shown} holds {len(ids)} point(s), no more than k={k}: every top-{k} returns all of them, so "
            f"noise cannot move a point out of it and the measured {metric}@{k} drop says nothing about real "
            f"data; nothing was measured or signed. Calibrate on a collection much larger than k (a staging "
            f"copy of the real one: add points), or lower k (`--k`, and the policy's utility.k) below "
            f"{len(ids)}; allow_small_collection=True (`--allow-small-collection`) signs such a record anyway, "
            "for tests and demos")
    if qvecs.shape[1] != docs.shape[1]:
        raise GuardArgumentValueError(
            f"query dimension {qvecs.shape[1]} does not match collection dimension {docs.shape[1]}"
        )

    clean_results = _search(client, collection, qvecs, k, using)
    known = [r[0] if r else None for r in clean_results]
    clean = retrieval_metrics(
        clean_results, k=k, qrels=used_qrels, known_items=known, reference=clean_results
    )
    if metric not in clean:
        raise GuardArgumentValueError(f"no query has relevance labels in qrels; cannot measure {metric!r}")
    if clean[metric] <= 0.0:
        # Nothing to lose: every level would show a drop of 0 and the strongest would be signed.
        raise GuardArgumentValueError(
            f"clean {metric}@{k} is 0 on collection {collection!r}: no relevant id in qrels is among "
            "the clean results; check that qrels name the collection's point ids"
        )
    _check_query_count(used, used_qrels, metric, min_queries, allow_few_queries, len(queries))

    from qdrant_client import QdrantClient, models

    measured: list[dict[str, Any]] = []
    for eps in progress_iter(eps_list, total=len(eps_list), desc="calibrate", enabled=progress):
        nd, nq, params = noise_pair(
            docs, qvecs, mechanism=mechanism, epsilon=eps, radius=radius, delta=delta,
            clip_norm=clip_norm, seed=seed,
        )
        tmp = QdrantClient(":memory:")
        try:
            tmp.create_collection(
                "calibration", vectors_config=models.VectorParams(size=docs.shape[1], distance=distance)
            )
            tmp.upload_points(
                "calibration",
                points=[models.PointStruct(id=pid, vector=v.tolist()) for pid, v in zip(ids, nd)],
                batch_size=512,
                wait=True,
            )
            noisy_results = _search(tmp, "calibration", nq, k, None)
        finally:
            tmp.close()
        noisy = retrieval_metrics(
            noisy_results, k=k, qrels=used_qrels, known_items=known, reference=clean_results
        )
        drops = {m: _drop(clean[m], noisy[m]) for m in noisy}
        level: dict[str, Any] = {"epsilon": eps, "scale": float(params.scale)}
        level.update(noisy)
        level["drops"] = drops
        level["drop"] = drops[metric]
        measured.append(level)

    # A level qualifies only when no level with less noise (a larger epsilon) fails as well: the
    # guard refuses writes at a level with a failing weaker one (UtilityRecord.level_refusal), and
    # measured drops need not grow monotonically with the noise.
    worst_from = [0.0] * len(measured)  # worst_from[i]: the largest drop at epsilons >= level i's
    worst = -math.inf
    for i in range(len(measured) - 1, -1, -1):
        worst = max(worst, measured[i]["drop"])
        worst_from[i] = worst
    for i, lv in enumerate(measured):
        lv["feasible"] = bool(
            _within(worst_from[i], threshold)
            and (epsilon_ceiling is None or lv["epsilon"] <= epsilon_ceiling)
        )

    chosen = next((i for i, lv in enumerate(measured) if lv["feasible"]), None)
    if chosen is None:
        table = _frontier_table(measured, metric)
        under = [i for i, lv in enumerate(measured)
                 if epsilon_ceiling is None or lv["epsilon"] <= epsilon_ceiling]
        meeting = [lv for i, lv in enumerate(measured) if _within(worst_from[i], threshold)]
        hints = []
        if under:
            best = _round_up_4(min(worst_from[i] for i in under))
            # A threshold is a drop below 1: advice to raise it to 1 (every level under the
            # ceiling lost everything) could not be followed.
            if float(best) < 1.0:
                hints.append(
                    f"raise threshold to >= {best} (smallest drop under the ceiling "
                    "with no weaker level dropping more)"
                )
        if meeting:
            hints.append(
                f"raise epsilon_ceiling to >= {meeting[0]['epsilon']!r} (smallest epsilon within "
                "the threshold)"
            )
        elif epsilon_ceiling is None or eps_list[-1] < epsilon_ceiling:
            # A level above the ceiling is measured but never chosen.
            hints.append("add larger epsilons to the ladder (weaker noise"
                         + ("" if epsilon_ceiling is None else f", up to the ceiling {epsilon_ceiling:g}") + ")")
        else:
            hints.append(f"add epsilons above {eps_list[-1]:g} to the ladder and raise epsilon_ceiling to "
                         "them (weaker noise than any level measured)")
        if not under:
            hints.append(f"add epsilons <= {epsilon_ceiling:g} to the ladder (every level measured is above "
                         "the ceiling)")
        ceiling = ("" if epsilon_ceiling is None else f" with epsilon <= {epsilon_ceiling:g}")
        raise UtilityCalibrationError(
            f"no noise level keeps the {metric}@{k} drop <= {threshold:g} (at it and at every "
            f"weaker level measured){ceiling} on collection {collection!r}; "
            "relax a constraint: "
            + "; or ".join(hints)
            + f". Measured frontier ({mechanism}, radius {radius:g}, clean {metric} "
            f"{clean[metric]:.4f}):\n{table}",
            measured,
        )

    key_id_str = None
    if signer is not None:
        from .keys import key_id

        key_id_str = key_id(signer.public_key())
    record = UtilityRecord(
        collection=collection,
        mechanism=mechanism,
        epsilon=measured[chosen]["epsilon"],
        delta=0.0 if mechanism == "laplace_l2" else float(delta),
        radius=float(radius),
        clip_norm=None if clip_norm is None else float(clip_norm),
        scale=measured[chosen]["scale"],
        k=k,
        threshold=float(threshold),
        metric=metric,
        mode="qrels" if used_qrels is not None else "known_item",
        epsilon_ceiling=None if epsilon_ceiling is None else float(epsilon_ceiling),
        clean=clean,
        measured=measured,
        chosen_level=chosen,
        query_sample_digest=query_sample_digest(used),
        n_queries=len(used),
        n_measured_queries=_measured_count(used, used_qrels, metric),
        n_documents=len(ids),
        created_at=int(time.time() * 1000),
        dim=int(docs.shape[1]),
        vector_name=using or "",
        distance=distance.value,
        embedding_model=embedding_model,
        signer_key_id=key_id_str,
    )
    if signer is not None:
        sig = signer.sign(UTILITY_DOMAIN + record.signed_bytes())
        record = dataclasses.replace(record, signature=base64.b64encode(sig).decode("ascii"))
    return record


# --------------------------------------------------------------------------- CLI


def _positive_arg(text: str) -> float:
    """``--radius``, ``--epsilon-ceiling``: a finite number above 0 (argparse names the option)."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number above 0")
    return value


def _below_one_arg(text: str, what: str, example: str) -> float:
    """A number in [0, 1) given on the command line (argparse names the option)."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give {what} such as {example}") from None
    if not (0 <= value < 1):
        raise argparse.ArgumentTypeError(f"{text} is not {what} in [0, 1); give one such as {example}")
    return value


def _delta_arg(text: str) -> float:
    """``--delta``: 0 <= value < 1; 0 is for ``laplace_l2``, whose policies state ``delta = 0``
    (calibrate refuses it for ``gaussian``, naming delta)."""
    return _below_one_arg(text, "a delta", "1e-6")


def _clip_norm_arg(text: str) -> float | None:
    """``--clip-norm``: a finite number above 0, or ``none`` (no clipping, as a policy without
    ``clip_norm``)."""
    return None if text.strip().lower() == "none" else _positive_arg(text)


def _epsilons_arg(text: str) -> tuple[float, ...]:
    """``--epsilons``: comma-separated finite numbers above 0 (argparse names the option)."""
    import argparse

    values = []
    for part in (x.strip() for x in text.split(",")):
        if not part:
            continue
        try:
            e = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a number; give epsilons such as 0.5,1,2") from None
        if not (math.isfinite(e) and e > 0):
            raise argparse.ArgumentTypeError(f"{part} is not a finite epsilon above 0; give epsilons such as 0.5,1,2")
        values.append(e)
    if not values:
        raise argparse.ArgumentTypeError("no epsilon given; give epsilons such as 0.5,1,2")
    return tuple(values)


def _threshold_arg(text: str) -> float:
    """``--threshold``: a relative drop, 0 <= value < 1."""
    return _below_one_arg(text, "a relative drop", "0.05")


def _model_arg(text: str) -> str:
    """``--embedding-model``: a non-empty name (argparse names the option)."""
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError("an empty name names no model; give the model the collection's vectors "
                                         "came from, e.g. sentence-transformers/all-MiniLM-L6-v2")
    return text


class _CliQueryEmbedder:
    """The CLI's text-query path: the guard's text transform, then the evaluation model."""

    def __init__(self, transform: Callable[[str], str]) -> None:
        from .evaluation.embed import MODEL_ID, Embedder

        self.model_id = MODEL_ID
        self._model = Embedder()
        self._transform = transform

    def __call__(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._model.encode([self._transform(t) for t in texts]))


def add_calibrate_arguments(parser: Any) -> None:
    """Add the ``qdrant-guard calibrate`` options to an argparse parser.

    The options a policy states (:data:`POLICY_OPTIONS`) are left out of the namespace unless given,
    so that ``--policy`` can tell a given value from a default."""
    from argparse import SUPPRESS

    from .cli import _positive_int
    from .evaluation.embed import MODEL_ID

    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--path", help="local Qdrant storage directory")
    src.add_argument("--url", help="Qdrant server URL (API key from QDRANT_API_KEY)")
    parser.add_argument("--collection", required=True,
                        help="the collection to measure, read with plain qdrant-client (its clean vectors)")
    parser.add_argument("--queries", required=True, help="JSONL: one text or vector per line")
    parser.add_argument("--qrels", help="JSONL: {\"query\": i, \"relevant\": [ids] or {id: grade}}")
    parser.add_argument("--threshold", type=_threshold_arg, default=SUPPRESS,
                        help="largest accepted relative drop of --metric (the policy's "
                             "utility.max_recall_drop; default 0.05)")
    parser.add_argument("--out", required=True, help="where to write the signed record (JSON); an existing file "
                                                     "is replaced only if it holds JSON, e.g. an earlier record")
    parser.add_argument("--key", help="Ed25519 private key (PEM) that signs the record: the guard's "
                                      "signing_key, or a key whose .pub is in receipts.trusted_keys (a guard "
                                      "refuses noised writes under an unsigned record)")
    parser.add_argument("--mechanism", default=SUPPRESS, choices=("gaussian", "laplace_l2"),
                        help="the collection's noise.mechanism (default gaussian)")
    parser.add_argument("--radius", type=_positive_arg, default=SUPPRESS, help="the collection's noise.radius (default 0.01)")
    parser.add_argument("--delta", type=_delta_arg, default=SUPPRESS,
                        help="the collection's noise.delta (default 1e-6; ignored for laplace_l2)")
    parser.add_argument("--clip-norm", type=_clip_norm_arg, default=SUPPRESS,
                        help="the collection's noise.clip_norm (default 1.0, the policy's default), or "
                             "'none' for a policy whose clip_norm is None (set from Python: TOML has no null)")
    parser.add_argument("--epsilons", type=_epsilons_arg, help="comma-separated candidate epsilons, measured from the smallest "
                                           "(most noise) up (default: %s)" % ",".join(f"{e:g}" for e in DEFAULT_EPSILONS))
    parser.add_argument("--epsilon-ceiling", type=_positive_arg, default=SUPPRESS,
                        help="levels above it are measured and recorded but never chosen (the class's "
                             "epsilon_ceiling)")
    parser.add_argument("--vector-name",
                        help="the named vector to measure (needed when --collection has several); the "
                             "record vouches only for writes of a vector of this name (the policy's "
                             "utility.records)")
    parser.add_argument("--embedding-model", type=_model_arg, default=SUPPRESS,
                        help="the embedding model the collection's vectors came from, signed into the record "
                             "(the policy's utility.embedding_model must name the same, compared exactly but for case, as qdrant-client resolves model names); text "
                             "queries are embedded with %s, the default for them" % MODEL_ID)
    parser.add_argument("--k", type=_positive_int, default=SUPPRESS, help="cut-off of the metric (the policy's utility.k; default 10)")
    parser.add_argument("--metric", default=SUPPRESS, choices=_METRICS,
                        help="the policy's utility.metric (default recall; ndcg needs --qrels)")
    parser.add_argument("--sample-limit", type=_positive_int, help="measure at most this many queries (a random sample)")
    parser.add_argument("--seed", type=int, help="reproducible measurement (test noise; never for production writes)")
    parser.add_argument("--policy", metavar="POLICY",
                        help="the guard's policy file: take the noise (mechanism, radius, delta, clip_norm), "
                             "utility.k, utility.metric, utility.max_recall_drop (as --threshold), utility.min_queries "
                             "(as --min-queries), the class's "
                             "epsilon_ceiling, the declared embedding model and (without --key) the signing_key "
                             "of --policy-collection from it, so the record is one that policy accepts; an option "
                             "given as well must agree (--threshold and --epsilon-ceiling may be lower, --min-queries higher; --key must be "
                             "a key the collection accepts records from)")
    parser.add_argument("--policy-collection", metavar="NAME",
                        help="with --policy: the collection whose settings apply (default: --collection; give "
                             "it when --collection is a staging copy of another name)")
    parser.add_argument("--allow-small-collection", action="store_true",
                        help="sign a record measured on a collection of no more than --k points (refused "
                             "without it: every top-k then returns every point, so no noise shows a drop); "
                             "for tests and demos")
    parser.add_argument("--min-queries", type=_positive_int, default=SUPPRESS,
                        help="fewest queries (after --sample-limit; with --qrels, labelled ones) a record is "
                             "signed on (the policy's utility.min_queries; default %d)" % DEFAULT_MIN_QUERIES)
    parser.add_argument("--allow-few-queries", action="store_true",
                        help="sign a record measured on fewer than --min-queries queries (refused without it: "
                             "one query's recall moves in large steps, so the drop is mostly chance); for tests "
                             "and demos")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument(
        "--query-text", default=SUPPRESS, choices=QUERY_TEXT_MODES,
        help="what text queries look like when embedded: PII redacted and identifiers generalised, "
             "as the guard does by default (generalized), PII redacted only, for collections with "
             "generalize_identifiers = false (redacted), identifiers generalised with PII kept, for "
             "redact_query_text = false or redact_pii = false (generalized-unredacted), or as given "
             "(raw). Default: what --policy's collection does to query text (its query.redact_query_text, "
             "redact_pii and generalize_identifiers), else generalized; given, it wins over the policy",
    )


#: ``qdrant-guard calibrate --query-text`` choices (see :func:`query_text_transform`).
QUERY_TEXT_MODES = ("raw", "redacted", "generalized", "generalized-unredacted")


def query_text_transform(mode: str) -> Callable[[str], str]:
    """The text path of ``--query-text``: what the guard does to query text before embedding it.

    ``"raw"``: nothing; ``"redacted"``: :func:`qdrant_guard.detect.redact`
    (``redact_query_text = true`` with ``generalize_identifiers = false``); ``"generalized"``: that,
    then :func:`qdrant_guard.identifiers.generalize_identifiers` (the guard's default);
    ``"generalized-unredacted"``: the generalisation alone (PII kept by ``redact_query_text = false``
    or ``redact_pii = false``, identifiers still generalised).
    """
    from .detect import redact
    from .identifiers import generalize_identifiers

    if mode == "raw":
        return lambda text: text
    if mode == "redacted":
        return redact
    if mode == "generalized":
        return lambda text: generalize_identifiers(redact(text))
    if mode == "generalized-unredacted":
        return generalize_identifiers
    raise GuardArgumentValueError(f"query text mode must be one of {QUERY_TEXT_MODES}, got {mode!r}")


def policy_query_text_mode(pol: Any) -> str:
    """The :data:`QUERY_TEXT_MODES` entry of what a guard under collection policy ``pol`` does to a
    query's text before embedding it: PII redacted when both ``query.redact_query_text`` and
    ``redact_pii`` are on (``QueryChecks`` keeps PII when either is off), identifiers generalised
    when ``generalize_identifiers`` is (calibrate takes no PUBLIC collection, where it is not).
    Credentials, which the guard redacts or refuses whatever these say, are left to the text."""
    redacts = bool(pol.query.redact_query_text and pol.redact_pii)
    if pol.generalize_identifiers:
        return "generalized" if redacts else "generalized-unredacted"
    return "redacted" if redacts else "raw"


def _read_jsonl(path: str) -> list[tuple[str, Any]]:
    """``(where, value)`` of each non-blank line; ``where`` is ``path:line`` for error messages."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append((f"{path}:{n}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise GuardArgumentValueError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
    return rows


def _calibration_query(where: str, q: Any) -> Any:
    """A queries-file line as a text or a list of numbers (ValueError naming the line otherwise)."""
    if isinstance(q, dict):
        q = q["text"] if "text" in q else q.get("vector")
    if isinstance(q, str) or (isinstance(q, list) and q and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in q)):
        return q
    raise GuardArgumentValueError(f"{where}: a query is a JSON string, a list of numbers, or an object with "
                                  f'"text" or "vector"; got {json.dumps(q)[:80]}')


def _qrels_row(where: str, row: Any) -> tuple[int, Any]:
    """A qrels-file line as ``(query index, relevant ids or {id: grade})``."""
    if (isinstance(row, dict) and isinstance(row.get("query"), int) and not isinstance(row["query"], bool)
            and isinstance(row.get("relevant"), (list, dict))):
        return row["query"], row["relevant"]
    raise GuardArgumentValueError(f'{where}: a qrels line is {{"query": <int>, "relevant": [ids] or {{id: grade}}}}; '
                                  f"got {json.dumps(row)[:80]}")


#: ``qdrant-guard calibrate`` options a policy states, with their values without one.
POLICY_OPTIONS: dict[str, Any] = {
    "mechanism": "gaussian", "radius": 0.01, "delta": 1e-6, "clip_norm": 1.0, "threshold": 0.05,
    "epsilon_ceiling": None, "k": 10, "metric": "recall", "embedding_model": None,
    "min_queries": DEFAULT_MIN_QUERIES,
}
_FLAGS = {"threshold": "--threshold", "epsilon_ceiling": "--epsilon-ceiling", "embedding_model": "--embedding-model",
          "clip_norm": "--clip-norm", "min_queries": "--min-queries"}


def calibrate_options(args: Any) -> tuple[dict[str, Any], str | None, str | None, Any]:
    """The :data:`POLICY_OPTIONS` calibrate runs with, the signing key's path, and the policy file
    and section they came from with that section's ``CollectionPolicy`` (both None without
    ``--policy``).

    Without ``--policy``: the options given, the rest at their defaults. With it: the settings of
    ``--policy-collection`` (default ``--collection``) as the guard resolves that name
    (``GuardConfig.policy_for``): its ``[noise]``, ``utility.k``, ``utility.metric``,
    ``utility.max_recall_drop`` (the threshold), its class's ``epsilon_ceiling``, the embedding
    model it declares for ``--vector-name`` and, without ``--key``, its ``signing_key``. An option
    given too must state the same (a record of other noise, k or metric is one the guard refuses),
    except a lower ``--threshold`` (a margin) or ``--epsilon-ceiling``; a ``--key`` given must be one the
    collection accepts records from (:func:`_policy_key_refusal`).

    Raises:
        GuardArgumentValueError: an option disagrees with the policy, or the collection is PUBLIC.
        ConfigError: the policy file is invalid, or refuses the unlisted collection.
    """
    given = {name: getattr(args, name) for name in POLICY_OPTIONS if hasattr(args, name)}
    key = getattr(args, "key", None)
    path = getattr(args, "policy", None)
    if not path:
        return {**POLICY_OPTIONS, **given}, key, None, None
    from .policy import SensitivityClass, load_policy, toml_key

    cfg = load_policy(path)
    name = getattr(args, "policy_collection", None) or getattr(args, "collection")
    pol = cfg.policy_for(name)
    section = f"[collections.{toml_key(name)}]" if name in cfg.collections else "[default]"
    if pol.sensitivity is SensitivityClass.PUBLIC:
        raise GuardArgumentValueError(
            f"--policy {path}: collection {name!r} is PUBLIC ({section if name in cfg.collections else 'unlisted'}), "
            "whose vectors are never noised, so there is no noise to calibrate; give --policy-collection a "
            "PII, CREDENTIAL or PROPRIETARY collection")
    n, u = pol.noise, pol.utility
    stated: dict[str, Any] = {
        "mechanism": n.mechanism, "radius": n.radius, "delta": n.delta, "clip_norm": n.clip_norm,
        "threshold": u.max_recall_drop, "epsilon_ceiling": cfg.epsilon_ceiling[pol.sensitivity], "k": u.k,
        "metric": u.metric, "embedding_model": u.declared_model(getattr(args, "vector_name", None) or "")[0],
        "min_queries": u.min_queries,
    }
    where = {"threshold": "utility.max_recall_drop", "epsilon_ceiling": f"epsilon_ceiling.{pol.sensitivity.value}",
             "k": "utility.k", "metric": "utility.metric", "embedding_model": "utility.embedding_model(s)",
             "min_queries": "utility.min_queries"}
    for opt, value in given.items():
        want = stated[opt]
        if (opt == "embedding_model" and want is None) or (opt == "delta" and n.mechanism == "laplace_l2"):
            continue  # no model declared, or a delta laplace_l2 ignores
        if opt in ("threshold", "epsilon_ceiling"):
            agrees = value is not None and value <= want + 1e-12
        elif opt == "embedding_model":
            agrees = same_model(value, want)
        elif opt == "min_queries":
            agrees = value >= want  # more queries is a record the policy accepts too
        elif opt in ("radius", "delta", "clip_norm"):
            agrees = _same(value, want)
        else:
            agrees = value == want
        if not agrees:
            flag = _FLAGS.get(opt, f"--{opt}")
            bound = (" or below" if opt in ("threshold", "epsilon_ceiling")
                     else " or above" if opt == "min_queries" else "")
            raise GuardArgumentValueError(
                f"{flag} {value!r} disagrees with --policy {path}, whose {section} states "
                f"{where.get(opt, 'noise.' + opt)} = {want!r}: a guard under that policy would refuse the record; "
                f"drop {flag} (the policy's value applies), give {want!r}{bound}, or change the policy")
    for opt, value in stated.items():
        if opt not in given and not (opt == "embedding_model" and value is None):
            given[opt] = value
    if key:
        refusal = _policy_key_refusal(cfg, pol, key, path, section)
        if refusal is not None:
            raise GuardArgumentValueError(refusal)
    return {**POLICY_OPTIONS, **given}, key or cfg.signing_key, f"{path} {section}", pol


def _policy_key_refusal(cfg: Any, pol: Any, key: str, path: str, section: str) -> str | None:
    """Why a guard under ``cfg`` refuses a record signed by ``--key`` for ``pol``'s collection, or
    None: a record verifies only under the keys the collection accepts receipts from (the
    guard's signing_key, receipts.retired_keys, and receipt_keys when the collection sets it, else
    receipts.trusted_keys), and never under a key receipts.revoked_keys lists."""
    from . import keys
    from .cli import _policy_signing_keys

    kid = keys.key_id(keys.load_private_key(key).public_key())
    own_kid, own, retired = _policy_signing_keys(cfg, path)
    if kid in cfg.receipts.revoked_keys:
        why = "receipts.revoked_keys revokes it"
    else:
        scope = pol.receipt_keys if pol.receipt_keys is not None else cfg.receipts.trusted_keys
        accepted = {*own, *retired, *(keys.key_id(keys.load_public_key(spec)) for spec in scope)}
        if kid in accepted:
            return None
        listed = ("its receipt_keys" if pol.receipt_keys is not None else "receipts.trusted_keys")
        why = f"it is neither the signing_key ({own_kid or 'none set'}), a retired key nor in {listed}"
    return (f"--key {key} (key id {kid}): a guard under --policy {path} would refuse the record, as {section} "
            f"accepts records only from the keys it accepts receipts from and {why}; drop --key (the policy's "
            "signing_key signs), or give a key that policy accepts")


def run_calibrate_cli(args: Any) -> int:
    """Run ``qdrant-guard calibrate`` from parsed arguments (see :func:`add_calibrate_arguments`).

    Returns:
        0 on success, 2 when no level is feasible (the frontier is printed on stderr; nothing is
        written), :data:`EXIT_POLICY_NOT_COVERED` when the record was written but the guard of
        ``--policy`` would refuse writes under it (it does not cover the policy's ``noise.epsilon``,
        or it was signed under ``--allow-small-collection`` or on fewer queries than its
        ``utility.min_queries`` and the policy does not set ``utility.allow_small_records``).
    """
    from qdrant_client import QdrantClient

    get = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    opts, key_path, section, pol = calibrate_options(args)
    queries = [_calibration_query(where, q) for where, q in _read_jsonl(get("queries"))]
    qrels = None
    if get("qrels"):
        qrels = {}
        for row_no, (where, row) in enumerate(_read_jsonl(get("qrels")), 1):
            q, relevant = _qrels_row(where, row)
            if q in qrels:
                raise GuardArgumentValueError(
                    f"{where}: query {q} is listed again (row {row_no}); give each query one row "
                    "with all its relevant ids"
                )
            qrels[q] = relevant
    embedder = None
    if queries and isinstance(queries[0], str):
        mode = get("query_text") or (policy_query_text_mode(pol) if pol is not None else "generalized")
        if pol is not None and get("query_text") and mode != policy_query_text_mode(pol):
            print(f"warning: --query-text {mode} embeds the queries otherwise than the guard of --policy {section} "
                  f"does ({policy_query_text_mode(pol)}), so the record measures other query vectors than that "
                  "guard's; drop --query-text to take the policy's", file=sys.stderr)
        embedder = _CliQueryEmbedder(query_text_transform(mode))
        named = opts["embedding_model"]
        if named is not None and not same_model(named, embedder.model_id):
            raise GuardArgumentValueError(
                f"--embedding-model {named!r}: the text queries of --queries are embedded with {embedder.model_id} "
                f"(the eval model), so the record would name a model its queries were not made by; give "
                f"--embedding-model {embedder.model_id} (names are compared exactly but for case), or give --queries as vectors "
                f"embedded with {named!r}")
    signer = None
    if key_path:
        from .keys import load_private_key

        signer = load_private_key(key_path)
    epsilons = DEFAULT_EPSILONS
    if get("epsilons"):
        given = get("epsilons")
        # The CLI's type parsed it already; a caller of this function may pass the text.
        epsilons = given if isinstance(given, tuple) else _epsilons_arg(str(given))
    client = (QdrantClient(path=get("path")) if get("path")
              else QdrantClient(url=get("url"), api_key=os.environ.get("QDRANT_API_KEY")))
    try:
        record = calibrate(
            client,
            get("collection"),
            queries,
            qrels,
            opts["k"],
            mechanism=opts["mechanism"],
            radius=opts["radius"],
            delta=opts["delta"],
            clip_norm=opts["clip_norm"],
            epsilons=epsilons,
            threshold=opts["threshold"],
            epsilon_ceiling=opts["epsilon_ceiling"],
            signer=signer,
            embedder=embedder,
            progress=not get("no_progress", False),
            sample_limit=get("sample_limit"),
            seed=get("seed"),
            metric=opts["metric"],
            vector_name=get("vector_name"),
            embedding_model=opts["embedding_model"],
            allow_small_collection=bool(get("allow_small_collection", False)),
            min_queries=opts["min_queries"],
            allow_few_queries=bool(get("allow_few_queries", False)),
        )
    except UtilityCalibrationError as exc:
        print(f"qdrant-guard calibrate: {exc}", file=sys.stderr)
        return 2
    finally:
        client.close()
    with open(get("out"), "w", encoding="utf-8") as fh:
        fh.write(record.to_json() + "\n")
    print(
        (f"vector {record.vector_name!r}: " if record.vector_name else "")
        + (f"model {record.embedding_model!r}: " if record.embedding_model else "")
        + f"chosen epsilon {record.epsilon:g} (sigma {record.scale:.4g}), {record.metric} drop "
        f"{record.measured[record.chosen_level]['drop']:.4f} <= {record.threshold:g}; "
        f"retrieval_utility_guard_hash {record.digest}"
        + (f" (the settings of --policy {section})" if section else "")
    )
    if record.n_documents <= record.k:
        # Every top-k then holds the whole collection: no noise can move it out, so the drops
        # measured are 0 whatever the noise costs on a collection of real size.
        print(f"warning: --collection {record.collection!r} holds {record.n_documents} point(s), no more than "
              f"--k {record.k} (signed under --allow-small-collection): every top-{record.k} returns all of "
              f"them, so noise cannot move a point out of it here and the drop says nothing about real data; "
              "calibrate on a collection much larger than --k (a staging copy of the real one)", file=sys.stderr)
    if pol is None and record.measured_queries < DEFAULT_MIN_QUERIES:
        # Without --policy nothing below checks the record against a guard; the default policy refuses it.
        n = record.measured_queries
        how = "--allow-few-queries" if get("allow_few_queries") else f"--min-queries {opts['min_queries']}"
        print(f"warning: {get('out')} was signed (under {how}) on {n} quer{'y' if n == 1 else 'ies'}"
              f"{' with relevance labels' if n != record.n_queries else ''}, fewer than utility.min_queries = "
              f"{DEFAULT_MIN_QUERIES}, the policy default: while utility.enforce is on, a guard refuses every write "
              "that consults this record (UTILITY_DEGRADED, reason few_queries) unless that collection's policy sets "
              f"utility.min_queries = {n} or lower, or utility.allow_small_records = true (for test and demo "
              "collections); calibrate on more queries for a production record, and give --policy to have calibrate "
              "check the record against your guard's policy", file=sys.stderr)
    if pol is not None and pol.utility.enforce:  # enforce off: the guard refuses nothing for utility
        refusal = None if pol.utility.allow_small_records else (
            record.small_collection_refusal(get("out"))
            or record.few_queries_refusal(get("out"), pol.utility.min_queries))
        if refusal is None:
            refusal = record.level_refusal(
                mechanism=pol.noise.mechanism, epsilon=pol.noise.epsilon, radius=pol.noise.radius,
                delta=pol.noise.delta, clip_norm=pol.noise.clip_norm, max_drop=pol.utility.max_recall_drop)
            if refusal is not None:
                refusal = f"it noises at epsilon {pol.noise.epsilon:g}, which this record does not cover: {refusal}"
        if refusal is not None:
            # The record is sound and kept (another policy may use it), but a script that deploys
            # this policy next would deploy one whose writes are all refused.
            print(f"error: {get('out')} was written, but the guard of --policy {section} refuses writes under it "
                  f"(UTILITY_DEGRADED), so calibrate exits {EXIT_POLICY_NOT_COVERED}: {refusal}", file=sys.stderr)
            return EXIT_POLICY_NOT_COVERED
    return 0
