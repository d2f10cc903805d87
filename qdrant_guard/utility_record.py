"""The retrieval utility record: :class:`UtilityRecord`, the signed statement calibration writes of
how retrieval quality degrades with noise on one collection, with the refusals a guard derives from
it, and :func:`verify_utility_record`. :mod:`qdrant_guard.utility` re-exports the public names.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import GuardArgumentTypeError, GuardArgumentValueError

__all__ = [
    "UTILITY_DOMAIN",
    "RECORD_VERSION",
    "UtilityRecord",
    "verify_utility_record",
]

UTILITY_DOMAIN = b"qdrant-guard utility v1\0"
RECORD_VERSION = 6

#: The distances Qdrant compares vectors by (``models.Distance`` values), as a record names them.
_DISTANCES = ("Cosine", "Euclid", "Dot", "Manhattan")


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
                integer from 1 to ``n_queries`` from version 6, or set before it; ``signer_key_id``
                or ``signature`` neither a string nor null).
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
        # 6.0 == 6, but the signature covers the body as written: a float would then be refused as
        # tampered, where it is a version no calibrate writes.
        if type(version) is not int or version not in (1, 2, 3, 4, 5, 6):
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
        for name in ("signer_key_id", "signature"):
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                # The guard looks the key id up among its revoked and trusted keys before it
                # verifies: a list or object there ended the write in a TypeError (unhashable).
                shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
                raise GuardArgumentValueError(f"utility record has {name!r} {shown}, which is neither a string nor "
                                              "null (unsigned); re-run `qdrant-guard calibrate` to write the record "
                                              "again")
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
