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

The code is in modules of its own, whose public names import from here too:
:mod:`qdrant_guard.calibration` (:func:`calibrate`), :mod:`qdrant_guard.utility_record`
(:class:`UtilityRecord`, :func:`verify_utility_record`), :mod:`qdrant_guard.ranking_metrics`
(:func:`retrieval_metrics`), :mod:`qdrant_guard.calibrate_cli` (``qdrant-guard calibrate``) and
:mod:`qdrant_guard.progress` (:func:`progress_iter`).
"""
from __future__ import annotations

from .calibrate_cli import (
    EXIT_POLICY_NOT_COVERED as EXIT_POLICY_NOT_COVERED,
    POLICY_OPTIONS as POLICY_OPTIONS,
    QUERY_TEXT_MODES as QUERY_TEXT_MODES,
    add_calibrate_arguments as add_calibrate_arguments,
    calibrate_options as calibrate_options,
    policy_query_text_mode as policy_query_text_mode,
    query_text_transform as query_text_transform,
    run_calibrate_cli as run_calibrate_cli,
)
from .calibration import (
    DEFAULT_EPSILONS as DEFAULT_EPSILONS,
    DEFAULT_MIN_QUERIES as DEFAULT_MIN_QUERIES,
    UtilityCalibrationError as UtilityCalibrationError,
    calibrate as calibrate,
    embedder_model_name as embedder_model_name,
    noise_pair as noise_pair,
    query_sample_digest as query_sample_digest,
    same_model as same_model,
)
from .progress import progress_iter as progress_iter
from .ranking_metrics import retrieval_metrics as retrieval_metrics
from .utility_record import (
    RECORD_VERSION as RECORD_VERSION,
    UTILITY_DOMAIN as UTILITY_DOMAIN,
    UtilityRecord as UtilityRecord,
    verify_utility_record as verify_utility_record,
)

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
