"""Policy: pydantic models of the guard configuration and the TOML loader.

A policy is a TOML file (see ``docs/policy.md`` for every key) or a :class:`GuardConfig` built in
code. Unknown keys are rejected; every error names the file, the key path, the bad value and the
allowed values.
"""
from __future__ import annotations

import base64
import enum
import json
import math
import os
import re
import stat
import tomllib
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import (BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, ValidationInfo,
                      field_validator, model_serializer, model_validator)

from .boundary import TOKEN_PREFIX
from .budget import store_kind
from .dirmodes import foreign_owner, replaceable_by_anyone
from .errors import ConfigError, GuardArgumentTypeError
from .keys import _looks_like_key_body, key_id as _key_id, public_key_from_str as _public_key_from_str
from .names import toml_key, toml_str
from .receipts import RECEIPT_KEY

__all__ = [
    "SensitivityClass",
    "NoisePolicy",
    "QueryRules",
    "DiversityPolicy",
    "IntentPolicy",
    "UtilityPolicy",
    "CollectionPolicy",
    "BoundaryConfig",
    "ReceiptTrust",
    "GuardConfig",
    "load_policy",
]


class SensitivityClass(str, enum.Enum):
    """The ``embedding_sensitivity_class`` of a collection's content."""

    PUBLIC = "PUBLIC"
    PII = "PII"
    CREDENTIAL = "CREDENTIAL"
    PROPRIETARY = "PROPRIETARY"


Mode = Literal["enforce", "monitor"]


def _scalar_kinds(annotation: Any) -> set[Any]:
    """The non-None members of a field's type (``float | None`` -> ``{float}``)."""
    union = get_origin(annotation) in (Union, types.UnionType)
    return {a for a in (get_args(annotation) if union else (annotation,)) if a is not type(None)}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, use_attribute_docstrings=True)

    @field_validator("*", mode="before")
    @classmethod
    def _typed_scalars(cls, v: Any, info: ValidationInfo) -> Any:
        # TOML values are typed: "no" or 0 for a bool, true or "1.5" for a number are mistakes
        # that pydantic's lax mode would silently read as False / 1.0 (lists for tuples and
        # integers for floats stay accepted).
        if info.field_name is None:
            return v
        kinds = _scalar_kinds(cls.model_fields[info.field_name].annotation)
        if kinds == {bool} and not isinstance(v, bool):
            raise ValueError(f"expected true or false, got {v!r} ({type(v).__name__})")
        if kinds and kinds <= {int, float} and (isinstance(v, (bool, str)) or (kinds == {int} and isinstance(v, float))):
            want = "an integer" if kinds == {int} else "a number"
            field = cls.model_fields[info.field_name]
            if isinstance(v, str) and v.strip().lower() in ("none", "null", "nil") and type(None) in get_args(
                    field.annotation):
                # A null written as text (calibrate's --clip-norm takes "none"): TOML has no null.
                unset = ("leave the key out: its default is unset" if field.default is None else
                         f"its default is {field.default!r}, and only a GuardConfig built in Python can unset "
                         f"it ({info.field_name}=None)")
                raise ValueError(f"expected {want}, got {v!r} (a string): TOML has no null; {unset}")
            raise ValueError(f"expected {want}, got {v!r} ({type(v).__name__})")
        if kinds and kinds <= {int, float} and isinstance(v, float) and not math.isfinite(v):
            # TOML's inf and nan: nan fails every bound with a misleading message, and inf passed
            # unbounded keys (window_s = inf broke every budgeted read with a bare ValueError).
            none = " (leave the key out for its default)" if type(None) in get_args(
                cls.model_fields[info.field_name].annotation) else ""
            raise ValueError(f"expected a finite number, got {v!r}{none}")
        if v == "" and info.field_name in _EMPTY:
            raise ValueError(_EMPTY[info.field_name])
        if isinstance(v, (list, tuple)) and "" in v and info.field_name in _EMPTY:
            raise ValueError(f"entry {list(v).index('')} is empty: {_EMPTY[info.field_name]}")
        return v


# What an empty string would mean for a key, and the fix. A relative path is resolved against the
# policy file's directory, so "" named the directory itself; an empty boundary name names no boundary.
_EMPTY: dict[str, str] = {
    "embedding_model": ("an empty name names no model; name the model the collection's vectors come from, "
                        "e.g. \"sentence-transformers/all-MiniLM-L6-v2\", or leave the key out"),
    **dict.fromkeys(("signing_key", "audit_log", "record"),
                    "an empty path names no file (it would be read as the policy's directory); give a "
                    "file path or leave the key out"),
    **dict.fromkeys(("audit_trusted_keys", "trusted_keys", "retired_keys", "authority_keys", "receipt_keys"),
                    "give each key as 'ed25519:<base64>' or the path of its .pub file"),
    "owner": "an empty owner names no boundary; name a [boundaries.NAME] section or leave owner out",
    **dict.fromkeys(("readers", "writers"), "an empty name is no boundary; name a [boundaries.NAME] section or "
                    "\"*\" (any verified principal)"),
    "restricted_sources": ("a point whose source is \"\" counts as having none, so \"\" restricts nothing; "
                           "name a source (a source_field value), or \"__unknown__\" for points without one"),
}


class NoisePolicy(_Strict):
    """How vectors of a collection are noised, and the privacy parameters of the guarantee.

    ``epsilon`` is the privacy loss at the protected L2 ``radius`` (metric DP): two clipped
    embeddings closer than ``radius`` are (epsilon, delta)-indistinguishable, for the ideal noise
    distributions (the implemented samplers' noise is bounded, which adds at most about dim * 2.3e-34 to
    delta, ``laplace_l2``'s zero included). It is *not* a worst-case guarantee over arbitrary
    texts (see docs/privacy.md for the worked numbers).
    """

    mechanism: Literal["gaussian", "laplace_l2"] = "gaussian"
    """``gaussian``: analytic Gaussian mechanism (Balle & Wang 2018), (epsilon, delta) at ``radius``.
    ``laplace_l2``: multivariate Laplace in L2 norm, pure metric DP (epsilon at ``radius``) for the
    ideal distribution (the bounded sampler makes it (epsilon, 1.3e-34) at 384-d). The
    collection holds this mechanism's releases only: a writer's receipt of the other one is refused
    (``NOISE_REQUIRED``, reason ``mechanism_mismatch``) whatever its numbers, and a stored vector
    whose receipt names the other one is stripped from the reads of every principal not allowed raw
    vectors (all but the owner boundary under ``raw_in_boundary``): changing this on a collection
    that holds vectors withholds them from those reads until they are re-noised."""
    epsilon: float = Field(1.0, gt=0, le=1000)
    """Privacy loss of each released vector between any two clipped inputs at L2 distance <=
    ``radius`` (metric DP: per vector, not per user, and far larger between arbitrary texts:
    docs/privacy.md). Must be <= the class's ``epsilon_ceiling``."""
    delta: float = Field(1e-6, ge=0, lt=1)
    """Failure probability of the Gaussian guarantee: ``gaussian`` needs 1e-300 <= delta < 1 (the
    calibration cannot resolve a smaller one), ``laplace_l2`` needs 0 (a pure guarantee for the ideal
    noise; the bounded sampler adds 1.3e-34 at 384-d, as it adds about dim * 2.3e-34 to the Gaussian's)."""
    radius: float = Field(0.01, gt=0, le=2)
    """Protected L2 radius of the metric-DP guarantee (inputs are clipped to ``clip_norm`` first)."""
    clip_norm: float | None = Field(1.0, gt=0, allow_inf_nan=False)
    """Inputs are clipped to this L2 norm before noising (1.0 suits normalised embeddings): a longer
    vector is scaled down to it, so a ``Dot`` or ``Euclid`` collection of unnormalised embeddings
    loses their length, which those rankings use (normalise them first, or set this to their largest
    norm: ``radius`` is absolute, so it then protects a smaller change relative to their length).
    ``None`` (from Python; TOML has no null): not clipped, and the guarantee is between inputs as
    given."""
    max_receipt_param_sets: int = Field(32, ge=0, le=1024)
    """How many parameter sets (epsilon, delta, radius, dim) of stored receipts of stronger noise than
    this section's, besides its own, the guard holds to their own calibration when it checks that no
    stored vector is raw (``noise_queries`` outside the owner boundary: a query by point id, MMR,
    ``search_matrix_*``). A filter does no arithmetic, so the count matches each known set exactly,
    and learns new ones by a ``scroll`` of 64 receipts; past this many sets per collection the
    receipts of further sets are counted as if raw, unchecked, and those calls are refused
    (QUERY_REJECTED, naming how many points that cap counted, this key and the fix): fail-closed.
    A writer whose receipts the guard trusts can fill it with sets of its own (stronger noise,
    each a valid release), which only makes those calls refuse. Raising it costs the count about
    six payload conditions per vector for each set, on every such call until none is left behind
    (and one ``count`` and ``scroll`` per learning round); re-writing those points through the
    guard, at this section's noise, removes the extra sets instead. 0: only this section's own set
    is known, every other is counted."""
    keyed: bool = True
    """Derive the noise from a PRF of (guard key, clean vector): re-sending a vector yields the same
    noised vector, so averaging repeated releases gains an attacker nothing. "The same" is the same
    float32 values bit for bit (0.0 and -0.0 differ) under the same noise parameters; a changed
    policy gives independent noise (docs/privacy.md)."""

    @model_validator(mode="after")
    def _delta_fits_mechanism(self) -> "NoisePolicy":
        if self.mechanism == "gaussian" and not (1e-300 <= self.delta < 1):
            # Below 1e-300 the calibration cannot resolve delta in float64 (noise.calibrate_gaussian_sigma).
            raise ValueError("gaussian needs 1e-300 <= delta < 1 (typical: 1e-6)")
        if self.mechanism == "laplace_l2" and self.delta != 0:
            raise ValueError("laplace_l2 is pure metric DP: set delta = 0")
        return self


# max_tokens -> the "auto" max_model_tokens (see QueryRules.model_token_cap).
_AUTO_MODEL_CAPS: dict[int, int] = {}


class QueryRules(_Strict):
    """Structural query validation (run first, natively, before any embedding or model call)."""

    mode: Mode = "enforce"
    """``enforce`` refuses (QUERY_REJECTED); ``monitor`` only logs what would have been refused. It
    covers the structural checks (``max_chars``, ``max_tokens``, ``max_model_tokens``, ``max_repetition``, ``max_ngram_run``,
    ``max_glued_repetition``, ``encoded_payloads``, of query text and of filter match strings); ``require_text``,
    ``filter_pii``, credentials and text the guard cannot check are refused in either mode."""
    enabled: bool = True
    """Run structural validation on queries that carry text, and on the strings of full-text filter
    matches (``MatchText``, ``MatchTextAny``, ``MatchPhrase``) of reads and writes; ``max_chars``
    caps every match string of a filter too (``require_text`` and ``filter_pii`` apply either way).
    ``false`` switches ``max_chars`` off as well, so the detector then reads text of any length."""
    max_chars: int | None = Field(65536, gt=0)
    """Hard size cap, in characters, checked before scanning (None, from Python: no cap). It bounds
    the scan's cost on hostile input, including text crafted to collide in the scanner's token
    table."""
    max_tokens: int | None = Field(500, gt=0)
    """Whitespace-token cap (None, from Python: no cap; in a file, set a large value)."""
    max_model_tokens: int | Literal["auto"] | None = "auto"
    """Cap on the scanner's subword estimate (``model_token_estimate``: a quarter token per ASCII
    letter or digit, one per other character; violation ``token_cap``). ``max_tokens`` counts
    whitespace tokens, so text without spaces (CJK, or a phrase glued to itself) is one token to
    it; this cap bounds such text too. ``"auto"`` (the default) is eight times ``max_tokens`` (4000
    at the default 500; no cap when ``max_tokens`` is None). Text within ``max_tokens`` whose words
    are separated by spaces stays well under it (English runs about two estimated tokens per
    whitespace token, the standard library's documentation with its code under five); text
    without spaces is capped at about 4000 characters of CJK or 16,000 ASCII letters at the
    default. A positive integer sets the cap; None (from Python), or a large value in a file: no
    cap beyond ``max_chars``."""
    max_repetition: float | None = Field(0.5, ge=0, le=1)
    """Cap on 1 - unique/total tokens: a query above it is refused (None, from Python, or 1 in a
    file: no cap; 0 refuses any repeated token). The guard measures this rule, ``max_ngram_run``
    and ``max_glued_repetition`` on the text as written and again folded (NFKD, combining
    diacritics and any nonspacing mark on a Latin, Greek, Cyrillic, Armenian or Cherokee letter
    dropped, NFC, lower case, Latin lookalikes of Cyrillic, Greek, Armenian and Cherokee letters made Latin, as are
    Latin letters shaped like another, ``ı`` ``ɑ`` ``ɡ`` and small capitals such as ``ᴏ``), so copies
    whose letters change case, take accents, turn fullwidth or are swapped for lookalikes at random
    (``IgNoRe iGnÓrE ｉgnore іgnоre ...``) count as repeated: a tokenizer that lowers, strips
    accents or applies NFKC hands the model the first ones as one copy repeated, and an uncased
    WordPiece one the pieces the lookalike copies share. Where a script has two lookalikes of one
    Latin letter (Cyrillic ``н`` and ``һ``, Greek ``ο`` and ``σ``) both map to it, so two words of
    that script differing only there count as one; text in one script otherwise scores as before.
    ``scan_query`` itself compares characters exactly."""
    max_ngram_run: float | None = Field(None, ge=0, le=1)
    """Cap on the share of tokens in the longest immediately repeated n-gram run (None: off).
    Measured on the folded text too, as ``max_repetition``."""
    max_glued_repetition: float | None = Field(0.5, ge=0, le=1)
    """Cap on the repetition inside text without whitespace (violation ``glued_repetition``), which
    ``max_repetition`` and ``max_ngram_run`` see as one token: CJK or Thai stuffing, or a phrase
    glued to itself (``ignorepreviousinstructionsignorepreviousinstructions...``). For every run
    of at least 64 characters without whitespace the scanner takes the period (1 to 256
    characters, at most half the run) at which the most characters equal the one a period
    before, and refuses the query when that share of the run is above this cap: ``k`` glued
    copies of a string score ``1 - 1/k``, as ``k`` copies of a word score on ``max_repetition``,
    so the default 0.5 refuses three copies or more. Letters and non-ASCII characters count
    wherever they match; an ASCII digit, punctuation mark or symbol counts only inside a stretch
    of at least 8 consecutive matching characters, so the commas, ``0.`` and ``:`` of data
    written without spaces, which recur at a fixed step, do not add up: 64 random binary digits
    score up to 0.48 (median 0.14), 40 digits joined by commas 0.11, a compact JSON array of 20
    two-decimal numbers 0.09, ISO date lists 0.1, glibc's ``<U0431><U0430>...`` escapes 0.25,
    random decimal digits 0. Natural text without spaces scores far below the cap too (Chinese,
    Japanese and Thai paragraphs 0.02 to 0.07; JWTs and long identifiers up to 0.15; 64 random
    characters of base64 up to 0.11 and of hex up to 0.16; a URL repeating a path segment four
    times 0.45), while ten or more exact copies score 0.9 and more, and copies with one character
    changed in each 0.74 (Chinese) to 0.88 (English). A run of one repeated character or pair
    (64 dashes, ``hahaha...``), ``../`` or ``1234567890`` repeated is refused too, and so is data
    that repeats a piece of 8 characters or more, or letters: IPv6 addresses written with their
    zero groups (0.76), MAC addresses that differ only in their last byte (0.79; six
    sharing only a three-byte vendor prefix mostly pass, at most 0.52), base64 of zero-padded binary
    (``AQAAAAAA...``, 0.89) and tandem-repeat DNA; put spaces between such items or raise the
    cap where queries carry them. Measured on the folded text too (see ``max_repetition``).
    Stuffing whose copies are separated by junk of varying length escapes it (ratio 0.4 with 0
    to 3 random characters between copies), and so do copies longer than 256 characters and
    stuffing cut by spaces into runs under 64 characters at a length its period does not divide
    (the pieces all differ, so ``max_repetition`` sees no repeated token either). None (from
    Python), or 1 in a file: off."""
    encoded_payloads: bool = True
    """Reject percent/hex/unicode escapes, HTML entities and base64/hex blobs. Control, invisible
    and bidi characters, invalid UTF-8 and lone surrogates are rejected whatever this says (ZWJ
    inside emoji sequences is allowed); ``enabled = false`` switches every structural check off."""
    require_text: bool = False
    """Refuse (TEXT_REQUIRED) a raw query vector that comes without ``query_text=``, or with one that
    has no letter or digit (``""``, spaces, punctuation, invisible characters), so text checks cannot be
    skipped. The guard cannot tell whether the text is the one the vector was embedded from."""
    redact_query_text: bool = True
    """Screen query text (``query_text=`` and a ``models.Document`` query's text) before it is
    embedded or classified: credentials are refused or redacted per ``credentials_in_text``, and
    PII redacted when ``redact_pii`` is on. ``false`` keeps PII in query text: it goes to the
    embedder and the intent classifier (an ``llm`` one is a remote service) as given; credentials
    are still refused or redacted per ``credentials_in_text``, since they are never embedded. The
    audit entry logs the text redacted either way."""
    filter_pii: Literal["refuse", "owner", "allow"] = "refuse"
    """Reads and writes whose filters match on personal data: the detector screens every match
    value of every read filter (``query_filter``, prefetch and batch-request filters, formula
    conditions, ``scroll_filter``, ``count_filter``, ``facet_filter``) and of every write by filter
    (the filter or ``FilterSelector`` of ``delete``, ``set_payload``, ``overwrite_payload``,
    ``delete_payload``, ``clear_payload``, ``delete_vectors``, the ``update_filter`` of ``upsert``,
    ``upload_points``, ``upload_collection``, ``update_vectors``, and those of every
    ``batch_update_points`` operation) as ``key: value``. Such a filter is a presence probe:
    ``MatchText("123-45-6789")`` answers whether a stored point holds that SSN, whatever the read
    returns (a write by it answers in what it leaves). ``refuse`` (QUERY_REJECTED for everyone, the
    call sends nothing); ``owner``: principals of the owner boundary may (their own lookups, e.g.
    by e-mail, and erasing a person's points by the value that names them), others are refused;
    ``allow``: no one is refused, and the audit entry lists the filters that matched on PII
    (``filter_pii``); ``owner`` needs an ``owner`` (without one it would act as ``refuse``). Field
    names are screened too (every key a filter or formula names, and those
    given outside a filter: ``facet``'s ``key``, ``order_by`` and an ``OrderByQuery``'s, ``group_by``,
    ``with_payload`` keys, ``set_payload``'s ``key``, ``delete_payload``'s ``keys``, a payload index's
    ``field_name``): a key holding personal data follows this setting, and is logged redacted.
    Credentials in a filter or a key are refused (CREDENTIAL_IN_TEXT) whatever this says, and so
    is a match value under a password name by ``payload_fields``' rule (``MatchValue`` of
    ``"hunter2"`` on ``db_password``, or on ``password.value``, a key that holds the password in
    an object under one; a placeholder such as ``""`` is not), and so is a numeric ``Range`` bound
    there (``Range(gte=4921, lte=4921)`` on ``card_pin`` asks what its match would); a product barcode or a media id
    under a field named for one is no card number here either (``payload_fields``);
    a name-like value (``google-oauth2-provider``) under a field whose last word names an attribute
    of a credential (``auth_provider``, ``token_issuer``, ``key_region``) is no credential. Partial values
    (``MatchPrefix("123-45-")``) are not personal data to the detector and pass; so, unless this is
    ``allow``, with ``keep_payload_text_in_boundary`` a boundary other than the owner may not match
    on the ``text_field`` at all, nor range over it, order by it or name it in a formula, each of
    which reads its value back (REFUSED_CROSS_BOUNDARY): it gets that text redacted."""
    allow_images: bool = False
    """Let queries carry a ``models.Image`` (the top-level ``query``, a ``NearestQuery``, a
    recommend, discover or context input, a prefetch, a ``query_batch_points`` request) for
    qdrant-client's or Qdrant's inference to embed. The guard cannot read an image, so such a query
    passes none of its text checks (redaction, intent, ``require_text``'s text): ``false`` (the
    default) refuses it (QUERY_REJECTED) before anything is sent; embed the image yourself and
    query with the vector and ``query_text=``. ``true`` sends it after the model check
    (``utility.embedding_model(s)``); its ``options`` are screened as a Document's (credentials
    refused or redacted per ``credentials_in_text``, PII per ``redact_query_text``), and an image
    given as a path or URL is refused (CREDENTIAL_IN_TEXT) when it holds a credential: a locator
    cannot be redacted. Under ``noise_queries`` an image query is refused whatever this says (the
    guard could not noise the vector inference makes). Writes of a ``models.Image`` to a sensitive
    collection are refused whatever this says: the guard must embed, noise and receipt what it
    stores."""

    @field_validator("max_model_tokens", mode="before")
    @classmethod
    def _model_token_cap(cls, v: Any) -> Any:
        # The union with "auto" takes the number checks _typed_scalars gives plain int fields.
        if v is None or (isinstance(v, str) and v == "auto"):
            return v
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f'expected a positive integer or "auto", got {v!r} ({type(v).__name__})')
        if v <= 0:
            raise ValueError(f'expected a positive integer or "auto", got {v}')
        return v

    def model_token_cap(self) -> int | None:
        """The subword cap ``max_model_tokens`` stands for: ``"auto"`` resolved against ``max_tokens``."""
        cap = self.max_model_tokens
        if cap is None or isinstance(cap, int):
            return cap
        if self.max_tokens is None:
            return None
        # The same int object for the same max_tokens: the scan binding reuses its checked rules
        # while every argument is the very object it saw last.
        return _AUTO_MODEL_CAPS.setdefault(self.max_tokens, 8 * self.max_tokens)


class DiversityPolicy(_Strict):
    """Per-source caps on results, and the cross-query extraction budget."""

    mode: Mode = "enforce"
    """``enforce`` applies caps and budgets; ``monitor`` only logs what they would have withheld."""
    enabled: bool = True
    """Apply per-source caps to query results, and the budgets below when set: ``false`` switches
    caps and budgets off (only the owner still writes ``restricted_sources`` points)."""
    max_source_fraction: float = Field(0.4, gt=0, le=1)
    """No source holds more than max(1, floor(k * fraction)) of a returned top-k. A hard cap: the
    guard returns fewer results rather than backfill over it."""
    min_unique_sources: int = Field(2, ge=1)
    """At least ``min(min_unique_sources, k)`` sources appear in a result when the candidates have
    them (1: no minimum): the best candidate of a missing source replaces the lowest-ranked kept
    point of a source holding several (docs/diversity-budget.md)."""
    overfetch_factor: float = Field(3.0, ge=1, le=50)
    """Fetch ``ceil(limit * factor)`` candidates from Qdrant (at most 1000, never fewer than the
    limit; ``group_size`` likewise for grouped queries) so the cap can still return k results. 1:
    no over-fetch, so a capped result can come back short."""
    max_source_coverage: float | None = Field(None, gt=0, le=1)
    """Fraction of a source's points one principal may see within ``window_s`` (None: no budget)."""
    restricted_sources: tuple[str, ...] = ()
    """Sources the budget applies to (empty: every source; needs ``max_source_coverage``). A budget
    on every source also costs benign users their follow-up questions; restrict it to the
    confidential documents. Only the owner boundary may write points tagged with these, or take
    points out of them: outside it a payload change that reaches the source field (a ``set_payload``
    or ``delete_payload`` of its top-level key, any ``overwrite_payload`` or ``clear_payload``) is
    refused when it selects a point of one, and whatever it selects when it selects by a filter on
    other fields than ``source_field`` (its refusal would tell whether the filter matched there)."""
    window_s: float = Field(86400.0, gt=0)
    """Sliding window of the extraction and distillation budgets, in seconds (finite: for a budget
    that never resets, use a long window). A window other than the default with neither
    ``max_source_coverage`` nor ``max_vectors`` set is refused: it would apply to nothing."""
    max_vectors: int | None = Field(None, ge=0)
    """PROPRIETARY distillation budget: distinct vectors one principal may receive within ``window_s``
    (refused on other classes, which it would not apply to). Charged only by reads that return
    vectors, one charge per stored vector (a point's named vectors count one each); past it the
    vectors are left out (``vector=None`` when none of a point's is left). 0: no vector is ever returned
    to anyone (the owner included); unset: no budget."""
    charge_scores: bool = False
    """Charge scores to the distillation budget too (needs ``max_vectors``). A score is the query's
    similarity to a stored vector, one linear measurement of it: ``d`` queries by basis vectors
    rebuild every ranked point's ``d``-dimensional vector from scores alone. When true, the budget
    counts in coordinates: a returned vector of size ``d`` costs ``d`` (one vector, as without it),
    each scored point returned outside the owner boundary costs 1 per dense vector the request
    scores with (``using``, and each prefetch's; a request scoring with any other vector, e.g. a
    sparse one, is refused), and the cap is ``max_vectors`` vectors' worth
    (with vectors of several sizes, in units of their least common multiple). Past the cap a
    scored point is left out of the result (its score cannot be), and ``search_matrix_*`` is
    refused outside the owner boundary (pairwise similarities of stored vectors, with no query the
    budget could charge per point). A repeated request (the same query, prefetches and filter) is
    free for the points it already returned. Default false because it charges every search, not
    only reads asking for vectors: size ``max_vectors`` for the searches readers make
    (docs/diversity-budget.md)."""

    @model_validator(mode="after")
    def _budget_keys_that_apply(self) -> "DiversityPolicy":
        # restricted_sources only narrows the extraction budget; without it, nothing is restricted.
        if self.restricted_sources and self.max_source_coverage is None:
            raise ValueError(
                f"restricted_sources = {list(self.restricted_sources)!r} names the sources the extraction "
                "budget applies to, but max_source_coverage is not set, so no budget would apply; set "
                "max_source_coverage (e.g. 0.25) or remove restricted_sources"
            )
        # Compared with the default, not looked up in the keys set: a dump writes every key.
        if (self.window_s != type(self).model_fields["window_s"].default and self.max_source_coverage is None
                and self.max_vectors is None):
            raise ValueError(
                f"window_s = {self.window_s} is the window of the extraction budget (max_source_coverage) and "
                "the distillation budget (max_vectors), and neither is set, so it would be ignored; set "
                "max_source_coverage (e.g. 0.25) or, on PROPRIETARY collections, max_vectors, or remove window_s"
            )
        if self.charge_scores and self.max_vectors is None:
            raise ValueError(
                "charge_scores = true charges scores to the distillation budget (max_vectors), which is not "
                "set, so it would charge nothing; set max_vectors (e.g. 1000) or remove charge_scores"
            )
        return self


class IntentPolicy(_Strict):
    """Query intent classification."""

    mode: Mode = "enforce"
    """``enforce`` refuses blocked labels (INTENT_BLOCKED); ``monitor`` only logs them."""
    enabled: bool = True
    """Classify the intent of queries that carry text (sensitive collections)."""
    classifier: str = "builtin"
    """``builtin`` (offline linear model), ``llm`` (OpenAI-compatible endpoint from the
    environment) or ``module:attr`` (your own IntentClassifier)."""
    block: tuple[Literal["benign", "exploratory", "suspicious", "adversarial"], ...] = (
        "suspicious",
        "adversarial",
    )
    """Labels that are refused (``[]``: none; the classifier still runs and its label is audited)."""
    min_confidence: float = Field(0.6, ge=0, le=1)
    """A blocked label is enforced only at this confidence or above; below it the query goes ahead
    and the audit record keeps the label (``below_min_confidence``; tune with ``qdrant-guard audit
    replay``). 0: every blocked label is enforced; 1: only those the classifier is certain of."""
    fail_closed: bool = True
    """Refuse the query (FAIL_CLOSED) when the classifier raises, returns an invalid result or
    does not answer within ``timeout_s``. A classifier that cannot be loaded (a ``module:attr``
    that does not import) refuses whatever this says."""
    timeout_s: float = Field(5.0, gt=0, le=3600, allow_inf_nan=False)
    """Longest wait, in seconds, for the ``llm`` or a ``module:attr`` classifier's answer; past it
    the query is treated as a classifier failure (see ``fail_closed``). Such a classifier runs on
    a worker thread, which a hung call keeps until it returns: at most 16 timed-out calls of one
    classifier are kept running, and while they are, its further calls fail at once; at most 16
    of its calls run at once (a 17th waits, within this limit), whichever client loaded it. ``llm``
    also uses it as its socket timeout. The ``builtin`` classifier runs inline, unbounded by this
    (its work is bounded by the text prefix it reads)."""
    skip_owner: bool = False
    """Principals verified in the collection's ``owner`` boundary are not classified: their queries
    go ahead whatever the classifier would have said, and the audit entry's ``intent`` is
    ``{"skipped": "owner", "boundary": ...}`` in place of a label (``qdrant-guard audit replay``
    skips the owner's logged queries alike). For a collection whose
    readers are its owner's own people and scripts, where the built-in classifier refuses ordinary
    requests (``Summarise the findings of the last penetration test report.``, ``give me all the
    documents on travel``). It also skips the check
    for an owner's agent whose prompt was injected: leave it off (the default) where the owner
    boundary holds agents that read untrusted text. Every other boundary is classified as before.
    ``true`` needs an ``owner``."""

    @field_validator("classifier")
    @classmethod
    def _classifier_spec(cls, v: str) -> str:
        mod, sep, attr = v.partition(":")
        if v in ("builtin", "llm") or (sep and mod and attr):
            return v
        raise ValueError(f"{v!r} is not 'builtin', 'llm' or 'module:attr' (e.g. 'mypkg.intent:MyClassifier')")


class UtilityPolicy(_Strict):
    """The retrieval utility guard."""

    max_recall_drop: float = Field(0.05, ge=0, lt=1)
    """Largest drop of ``metric``@``k`` (default recall@10), relative to clean retrieval, the
    noise may cause."""
    metric: Literal["recall", "ndcg", "overlap"] = "recall"
    """The retrieval metric ``max_recall_drop`` limits: ``recall`` (labelled recall, or known-item
    recall without labels), ``ndcg`` (needs labels) or ``overlap`` with the clean top-k. The record
    must have been calibrated for it (``qdrant-guard calibrate --metric``)."""
    k: int = Field(10, ge=1)
    """The cut-off of ``metric``. The record must have been calibrated at it (``--k``): a drop
    measured at another cut-off says little about this one."""
    record: str | None = None
    """Path of a signed utility record from ``qdrant-guard calibrate``, verified when first used
    against the keys the collection accepts receipts from: the guard's key (and its
    ``receipts.retired_keys``) and ``receipts.trusted_keys``, or, when the collection sets
    ``receipt_keys``, the guard's keys and those (a record signed by any other key, or by a key in ``receipts.revoked_keys``, is a
    ConfigError at the first write, naming the key id and the section to fix). It applies to every vector of the collection,
    except that a record of a named vector (records from version 3 on, calibrated with
    ``--vector-name`` or on a collection whose one vector is named) applies to writes of that name
    only: a collection whose named vectors each need a record sets ``records`` instead. Its hash
    is the manifests' ``retrieval_utility_guard_hash``. Unset (the default, with ``records`` unset
    too): no utility check, and no write is refused for utility."""
    records: dict[str, str] = Field(default_factory=dict)
    """One signed utility record per named vector, a table of vector name to path, e.g.
    ``records = { text = "utility-text.json", image = "utility-image.json" }`` (write each with
    ``qdrant-guard calibrate --vector-name NAME``). Each record applies to writes of its vector
    only, and a write of a vector the table does not name is refused (UTILITY_DEGRADED) while
    ``enforce`` is on. A record calibrated on another named vector than the one it is listed under
    is a ConfigError at the first write to the collection; a record that names no vector (versions
    1 and 2, or calibrated on an unnamed vector) may be listed under any name, its dimension still
    checked. A write's manifest names, as
    ``retrieval_utility_guard_hash``, a table of each vector it noised or took a receipt for to the
    hash of that vector's record (null: none). Each record is verified as ``record`` is. Not with ``record``, which holds the unnamed
    vector's record. ``{}`` (the default): ``record`` decides."""
    max_age_s: float | None = Field(None, gt=0)
    """Refuse writes (UTILITY_DEGRADED) once the record is older than this many seconds, counted
    from its ``created_at`` (when ``qdrant-guard calibrate`` measured it), e.g. ``max_age_s =
    7776000`` (90 days). A record measured the collection's data and embedding model as they were:
    after either moves, its drops no longer say what the noise costs, so a collection whose data
    changes sets this and re-calibrates on a schedule. A record dated more than 300 s after the
    guard's clock is refused too while this is set (its age cannot be checked, and it would never
    expire). Checked on each write that consults the record (``enforce`` on); reads are not
    affected. None (the default): a record never expires."""
    embedding_model: str | None = None
    """The embedding model this collection's vectors come from, e.g. ``embedding_model =
    "sentence-transformers/all-MiniLM-L6-v2"``. Two models of one dimension and distance lose
    different amounts of retrieval quality to the same noise, so while ``enforce`` is on a write
    that consults a record naming another model is refused (UTILITY_DEGRADED, reason
    ``model_mismatch``), and so is one under a record that names no model (records before version 5,
    or calibrated without ``qdrant-guard calibrate --embedding-model``): re-calibrate on this model
    with that option, or correct this key. Whether or not a record is set or ``enforce`` is on, a
    writer's receipt whose signed ``model_id`` names another model is refused on every write that
    takes one (NOISE_REQUIRED, reason ``model_mismatch``; ``model_id`` null is accepted: its signer
    named none), a stored vector whose receipt names another model is stripped from the reads of
    every principal not allowed raw vectors (declaring a model after the guard embedded with
    another withholds those vectors until they are re-embedded), and a ``models.Document``, written
    or queried, that the guard would embed with an ``embedder=`` naming another model (its
    ``model_id`` or ``model_name``) is a ConfigError before it is embedded (an embedder naming no
    model is not checked), as is a query Document passed to qdrant-client's inference (no
    ``embedder=``, no query noise) whose ``model`` names another, and a query ``models.Image``
    (anywhere in the query or a prefetch, held to the model of its level's ``using=``) naming
    another. Names are compared as qdrant-client's inference and fastembed resolve them, exactly but
    for case (``baai/bge-small-en-v1.5`` is ``BAAI/bge-small-en-v1.5``). Every name is
    an assertion (a record's or a receipt's signer's, the embedder's own); the guard cannot tell
    which model produced a raw vector, so this holds records, receipts and the embedder to their
    word, not a vector to its model. It applies to every vector of the collection that
    ``embedding_models`` does not name, ``records`` included. None (the default): no model is
    checked."""
    embedding_models: dict[str, str] = Field(default_factory=dict)
    """The embedding model of each named vector whose model differs from ``embedding_model``, a table
    of vector name to model, e.g. ``embedding_models = { image = "openai/clip-vit-base-patch32" }``.
    A write, read or query of a vector it names is held to that model as ``embedding_model`` holds
    the others (the record consulted, a receipt and the guard's embedder must not name another); a
    vector it does not name falls back to ``embedding_model`` (unset: not checked). ``{}`` (the
    default): ``embedding_model`` decides."""
    min_queries: int = Field(20, ge=1)
    """Fewest queries a record's metric must have averaged over (its ``n_measured_queries``: with
    qrels, for recall and nDCG, the queries with a relevance label; records before version 6 carry
    only ``n_queries``, every query searched, which is held instead). Known-item recall@10
    is 0 or 1 per query, so the measured drop over n queries moves in steps of 1/n and, near the
    default threshold (``max_recall_drop = 0.05``, a true recall of 0.95), has a standard error of
    sqrt(0.95 * 0.05 / n) = 0.218 / sqrt(n): 0.22 for one query (over four times the threshold,
    and one miss reads as a drop of 1.0), 0.049 at the default 20, 0.011 at 400. 20 is the fewest
    queries whose step (1/20 = 0.05) is no coarser than the threshold and whose standard error is no
    larger than it: a floor that refuses records whose drop is chance, not a precise measurement;
    calibrate production records on hundreds of queries. While ``enforce`` is on, a write that
    consults a record of fewer queries is refused (UTILITY_DEGRADED, reason ``few_queries``, naming
    the record, that count and this key); ``qdrant-guard calibrate`` refuses to sign one below its
    ``--min-queries`` (with ``--policy``: this value) unless ``--allow-few-queries``, counting the
    same queries. Lower it, or set ``allow_small_records``, for a test collection only."""
    allow_small_records: bool = False
    """Accept a record calibrated on a collection of no more points than its ``k`` (signed by
    ``qdrant-guard calibrate --allow-small-collection``), or on fewer queries than ``min_queries``
    (signed with ``--allow-few-queries``): one key for test and demo records. Every top-``k`` of
    such a collection holds every point, so no noise lowers its recall@k or overlap@k and the
    record vouches for any level it measured; a drop over a few queries is mostly chance.
    ``false`` (the default): while ``enforce`` is on, a write that consults such a record is
    refused (UTILITY_DEGRADED, reason ``small_collection``, naming the record, its ``n_documents``
    and ``k``, or ``few_queries``, naming its measured query count and ``min_queries``). ``true``: for
    tests and demos only."""
    enforce: bool = True
    """Refuse writes (UTILITY_DEGRADED) unless the record applies to the policy (same mechanism,
    radius, delta, clip_norm, metric and k) and to the write (a record for the vector written, see
    ``records``; vectors of the calibrated dimension, records from before version 2 carry none, and
    of its distance, records from before version 4 carry none; naming the model ``embedding_model`` or
    ``embedding_models`` declares for the vector, when set; a receipt's noise at its epsilon's calibrated scale),
    was calibrated on more points than its k and on at least ``min_queries`` queries (unless ``allow_small_records``) and measured a passing level with at least as much noise and no failing level with as little;
    unmeasured levels are refused. ``false``: nothing is refused for utility; a set record is still
    verified and its hash recorded."""

    def declared_model(self, vector_name: str) -> tuple[str | None, str]:
        """The embedding model this policy declares for vector ``vector_name`` ("" the unnamed
        vector; None: none declared) and the key that declares it, as a policy names it."""
        if vector_name in self.embedding_models:
            return self.embedding_models[vector_name], f"utility.embedding_models.{toml_key(vector_name)}"
        return self.embedding_model, "utility.embedding_model"

    @field_validator("records")
    @classmethod
    def _records_named(cls, v: dict[str, str]) -> dict[str, str]:
        for name, path in v.items():  # both str: pydantic checked the table's types first
            if not name:
                raise ValueError("a record for the vector named \"\" (the unnamed vector) is set with "
                                 "utility.record = \"PATH\", not in utility.records; name each named "
                                 "vector, e.g. text = \"utility-text.json\"")
            if not path:
                raise ValueError(f"the record of vector {name!r} is an empty path, which names no file (it "
                                 "would be read as the policy's directory); give the file `qdrant-guard "
                                 f"calibrate --vector-name {name} --out FILE` wrote, or leave {name!r} out")
        return v

    @field_validator("embedding_model")
    @classmethod
    def _model_named(cls, v: str | None) -> str | None:
        # No record carries a blank name, so a blank one would refuse every write as a mismatch.
        if v is not None and not v.strip():
            raise ValueError(_EMPTY["embedding_model"])
        return v

    @field_validator("embedding_models")
    @classmethod
    def _models_named(cls, v: dict[str, str]) -> dict[str, str]:
        for name, model in v.items():
            if not name:
                raise ValueError("the model of the vector named \"\" (the unnamed vector) is set with "
                                 "utility.embedding_model = \"NAME\", not in utility.embedding_models; name each "
                                 "named vector, e.g. image = \"openai/clip-vit-base-patch32\"")
            if not model.strip():
                raise ValueError(f"the model of vector {name!r} is empty, which names no model; name the model "
                                 f"vector {name!r} was embedded with, or leave {name!r} out")
        return v

    @model_validator(mode="after")
    def _one_way_to_name_records(self) -> "UtilityPolicy":
        if self.record is not None and self.records:
            raise ValueError(
                "utility.record and utility.records are both set; use utility.records alone, one record "
                "per named vector (move the record of utility.record under the name of the vector it "
                "was calibrated for), or utility.record alone for a collection with one vector")
        return self


class CollectionPolicy(_Strict):
    """Policy of one collection."""

    sensitivity: SensitivityClass = Field(SensitivityClass.PII, alias="class")
    """``embedding_sensitivity_class``: PUBLIC (pass-through), PII, CREDENTIAL or PROPRIETARY. A PUBLIC
    collection may not set the keys it would ignore (owner, readers, writers, raw_in_boundary,
    noise_queries, noise, query, diversity, intent, utility, receipt_keys)."""
    owner: str | None = None
    """Owner trust boundary (one ``[boundaries.NAME]``, not ``"*"``). Principals verified in it may
    read and write, and write raw vectors when allowed. Unset: no boundary owns the collection, so
    only ``writers`` write and no one gets raw vectors (``raw_in_boundary``,
    ``keep_payload_text_in_boundary`` and ``query.filter_pii = "owner"`` are refused without one)."""
    readers: tuple[str, ...] = ()
    """Other boundaries allowed to read. ``"*"`` = any verified principal."""
    writers: tuple[str, ...] | None = None
    """Boundaries besides the owner allowed to write (default, or ``[]``: none, only the owner writes;
    ``"*"`` = any verified principal). Non-owners must noise. Only the owner writes points tagged
    with a ``restricted_sources`` entry (``REFUSED_CROSS_BOUNDARY``): a writer that also reads could
    otherwise add points to a restricted source and raise its own extraction budget. A budget on
    every source (no ``restricted_sources``), or on ``"__unknown__"``, with a boundary that both reads
    and writes is a policy error for the same reason."""
    raw_in_boundary: bool = False
    """Allow raw (un-noised) vectors written and read by principals of the owner boundary
    (``true`` needs an ``owner``: without one no principal could get raw vectors)."""
    noise_on_write: bool = True
    """The guard noises, and signs a receipt for, vectors that arrive without a valid receipt (else
    it refuses them: NOISE_REQUIRED). Principals of the owner boundary under ``raw_in_boundary``
    may store raw vectors either way."""
    noise_queries: bool = False
    """Noise query vectors before they reach Qdrant, for every principal not allowed raw vectors
    (outside the owner boundary, or everyone when ``raw_in_boundary`` is false). For them a
    ``models.Document`` query is embedded by the guard (it needs ``embedder=``) and a
    ``models.Image`` input is refused: inference would turn either into an exact query vector.
    Under ``raw_in_boundary`` they may not name a point where a query takes a vector (a bare id,
    ``NearestQuery``, recommend, discover, context or feedback examples, prefetches, batch requests,
    with or without ``lookup_from``), nor call ``search_matrix_pairs``/``search_matrix_offsets``,
    nor ask for MMR re-ranking (``models.NearestQuery(mmr=...)`` at the top level, in a prefetch,
    batch or grouped query; langchain's ``max_marginal_relevance_search``) (QUERY_REJECTED): Qdrant
    would compare the stored raw vectors unnoised (with ``lookup_from``, to one the caller stored
    itself; under MMR, with one another, which the order of the results tells). With
    ``raw_in_boundary`` off they pass where every stored vector is noised; turning it off leaves the
    raw vectors written under it in place (reads withhold them), so before the first such query the
    guard counts the points with a dense vector that has no receipt, or whose receipt names another
    mechanism than ``noise.mechanism``, weaker noise than ``noise`` states, or another model than
    ``utility.embedding_model(s)`` declares for it (reads strip those too; ``model_id`` null is not
    counted), or noise the guard does not vouch for (a ``dtype`` or ``mechanism_version``
    ``check_release`` refuses, or a ``scale`` below or a ``lattice_step`` coarser than the calibration
    of the receipt's own epsilon, delta, radius and dim): one exact ``count`` per collection and
    client, kept while it finds none (where receipts of stronger noise than the policy's are stored,
    a ``scroll`` first learns their parameter sets, at most 32 a collection, and the count is asked
    again; receipts of further sets are counted). It refuses
    the same forms while any remain, naming how many: re-write those points through the guard
    (which noises and receipts them) or delete them (``qdrant-guard receipt verify --policy POLICY
    --check-noise`` lists them as missing_receipt, mechanism_mismatch, insufficient_noise or
    model_mismatch). "None" is kept because no guarded client under this policy stores such a
    vector: every writer must run it (a client without the guard, or with another policy, writing
    after the count is not seen). The count sees whether a receipt is there and the noise and model
    it states, not whether it verifies: a raw vector written around the guard under another point's
    receipt is not counted (reads still strip it).
    ``true`` is refused where it could noise no query: only the owner boundary reads (``readers``
    empty or the owner), under ``raw_in_boundary``."""
    noise: NoisePolicy = NoisePolicy()
    """The noise mechanism and its privacy parameters."""
    source_field: str = "source"
    """Payload field naming a point's source document (diversity caps and budgets count by it). A
    dotted path reaches nested payload, e.g. ``metadata.source`` for langchain (keys of letters,
    digits, ``_`` and ``-``; no ``[]`` or quotes). Points without it all count as one source
    (``"__unknown__"``), so where no point carries it a top-k query returns at most
    max(1, floor(k * ``diversity.max_source_fraction``)) points (4 of 10 at the default 0.4):
    tag every point with the document it came from. Refused: the guard's receipt field
    ``_qdrant_guard_receipt`` or a path below it (no point could carry a source there), and the
    ``text_field`` or a path inside it (its strings are redacted as text, so a source
    ``alice@example.com`` would be counted as ``[EMAIL]``)."""
    text_field: str | None = None
    """Top-level payload key holding the point's text (no dotted path); it is screened and redacted like embedded text (a string, or each string of a list or object, nested up to 64 levels deep in what a call writes (deeper is refused), also when ``set_payload`` writes into it by a ``key`` such as ``text.body``; PII in a list or object is never kept). Refused: ``_qdrant_guard_receipt``, where the guard keeps its receipts."""
    credentials_in_text: Literal["refuse", "redact"] = "refuse"
    """Text with credentials: refuse the call (CREDENTIAL_IN_TEXT) or redact to typed placeholders.
    On PUBLIC collections ``redact`` needs ``allow_redaction_on_public`` (without it every finding
    is refused as mislabelled, so ``redact`` alone is refused). It also governs what a query on a
    PUBLIC collection the policy lists would send to inference (a ``models.Document``'s text and
    options anywhere in the query, an InferenceObject's strings, an Image's options; a credential
    in an Image's path or URL is refused either way): credentials there are refused
    (CREDENTIAL_IN_TEXT) or redacted, and PII passes as given."""
    redact_pii: bool = True
    """Redact PII in text to typed placeholders ([SSN], [EMAIL], ...) before embedding and storage,
    and in query text (``query.redact_query_text``). ``false``: PII is embedded, stored and queried
    as given; credentials still follow ``credentials_in_text``. On PUBLIC collections ``false``
    needs ``allow_redaction_on_public`` (without it every finding is refused as mislabelled, so
    ``false`` alone is refused)."""
    generalize_identifiers: bool = True
    """Replace numbers, codes and proper names by [NUMBER], [CODE], [NAME] in text the guard embeds
    (models.Document writes and queries) on sensitive collections; the payload text keeps them.
    On by default because noise that keeps retrieval useful does not hide them: in the eval,
    identifiers planted independently of the text stay readable from vectors under the default
    noise unless generalised (docs/eval.md). Costs recall where queries name identifiers (on the
    eval corpus, recall@10 as a share of clean: 97.0 % instead of 100 % without noise; at the
    default noise 95.9 % on the mean of 20 noise draws, against 97.3 % in one draw with redaction
    alone); false keeps them in the embedded text."""
    keep_payload_text_in_boundary: bool = False
    """Keep PII in the payload text when the writer is in the owner boundary (whether or not its
    vectors are noised: ``raw_in_boundary`` governs vectors only); never credentials. ``true`` needs a
    ``text_field`` and an ``owner``, and is refused on PUBLIC collections, which have no owner.
    Readers of other boundaries get the text field redacted (payloads, facet values, group ids).
    A string only: PII in a number, a list or an object in the text field is redacted for every
    writer. Reads redact a number (as its digits), a list or an object in the text field as they
    redact a string, for points stored around the guard."""
    allow_redaction_on_public: bool = False
    """On PUBLIC collections redact findings in writes instead of refusing them as mislabelled
    (``true`` is refused on sensitive collections, which redact anyway). Queries are not
    mislabelled by what they carry: their PII passes as given whatever this says, and their
    credentials follow ``credentials_in_text``."""
    payload_fields: Literal["text_field", "credentials", "all"] = "credentials"
    """Which strings of a stored payload, besides the ``text_field``, the detector screens on every
    write that stores payload (``upsert`` points and ``models.Batch`` payloads, ``upload_points``,
    ``upload_collection``, ``set_payload`` and ``overwrite_payload``, and the upsert, set and
    overwrite operations of ``batch_update_points``; the async client too). ``credentials`` (the
    default): every other string value, at any depth (nested objects, lists), and every key, at
    any depth, is screened; credentials are refused (CREDENTIAL_IN_TEXT) or redacted per
    ``credentials_in_text``, and personal data is stored as given. ``all``: personal data in those
    strings is redacted too (per ``redact_pii``), also for writers of the owner boundary
    (``keep_payload_text_in_boundary`` keeps PII in the text field only, the one field other
    boundaries' reads redact). On PUBLIC collections ``credentials`` and ``all`` alike refuse any
    finding as mislabelled (SENSITIVITY_MISMATCH) unless ``allow_redaction_on_public``, which
    redacts it (and refuses credentials unless ``credentials_in_text = "redact"``).
    ``text_field``: only the text field is screened; every other field and key is stored as given.
    On sensitive collections ``all`` needs ``redact_pii`` (with ``redact_pii = false`` it would act as
    ``credentials``, and is refused).

    A value is screened as ``key: "value"`` with its nearest key (a list's items with the list's
    key), so a secret the detector finds only next to a secret-like name is found under such a
    key: ``{"api_key": "a8f3k2j9x0q7w1e5r4t6"}`` (16+ characters, two character classes, entropy
    >= 3.5 bits a character). Under a password name (the key's last word, trailing digits aside and
    full-width forms and invisible characters read as the detector reads them, is ``password``,
    ``passwd``, ``passphrase``, ``passcode``, ``pwd``, ``pw``, ``pswd`` or ``pword`` (``DB_PASSWORD``,
    ``userPassword2``, ``db_pw``, ``PW``), or ends with one of the first four (``adminpasswd``);
    or is ``word``, ``phrase`` or ``code`` after a ``pass`` that starts the name or names a password
    itself: ``pass_word``, ``pass-word``, ``db_pass_code``; or is ``pass`` after an account or
    service word (db, mysql, postgres, redis, ldap, smtp, mail, ftp, ssh, wifi, user, admin, root,
    login, api, auth, credentials and a few more): ``db_pass``, ``SMTP_PASS``, ``admin_pass``, and
    a bare ``pass`` key in an object under such a name (``{"auth": {"user": ..., "pass": ...}}``,
    read as ``auth.pass``; spelled as the name rule reads it, ``pass1``, ``PASS``, full-width,
    too); or is ``pin`` after what it unlocks (card, sim, atm, debit, credit, bank, account,
    login, security, access, unlock, wallet, phone, device): ``card_pin``, ``SIM_PIN``, and a bare
    ``pin`` key in an object named for a card or SIM (card, sim, atm, debit, credit, bank:
    ``{"card": {"pin": ...}}``); not ``password_policy``, ``passwords``, a bare ``pass``
    elsewhere, a number under a bare ``pass`` beside a ``fail``, ``skip``, ``error`` or ``total``
    key (a tally of test results: ``{"api": {"pass": 120, "fail": 3}}``), ``boarding_pass``,
    ``first_pass``, ``boarding_pass_code``, nginx's ``proxy_pass``,
    a bare ``pin`` elsewhere (India's postal code, a GPIO pin: ``{"device": {"pin": 13}}``),
    ``map_pin`` or ``pin_code``) any value is a credential (``GENERIC_SECRET``, validator
    ``password-name``), whatever its entropy (``{"password": "hunter2"}``), unless it is a
    placeholder: empty, one character repeated (``********``), or ``[REDACTED]``, ``<redacted>``,
    ``${DB_PASSWORD}``, ``{{ db_password }}`` (the guard's own ``[GENERIC_SECRET]`` among them),
    or a POSIX path under a ``pwd`` name (an environment dump's ``{"PWD": "/home/alice"}``). In an
    object under a password name, a key that holds the password is read under that name: one
    made only of the words value, val, v, plain, plaintext, clear, cleartext, secret, current,
    new, old, previous, confirm, confirmation, initial, temp, temporary, default, raw, data, text,
    string or str (``{"password": {"value": ...}}``, ``{"db_password": {"current": ...,
    "newValue": ...}}``), or one of no word or one character (``{"password": {"x": ...}}``); other
    keys describe the password and are read under their own names (``{"password": {"min_length":
    12, "algorithm": "bcrypt", "hash": "$2b$..."}}``, JSON Schema's ``type``, ``format``,
    ``title``). ``set_payload``'s payload is read as the object it is stored as under its
    ``key``: ``set_payload(payload={"x": ...}, key="db_password")`` holds a password as
    ``{"db_password": {"x": ...}}`` would (a sibling already stored beside the key, as a ``name``
    beside ``key="env[0]"``, is not read: the guard does not read the point first).
    "token", "secret" and "key" keep the detector's rules (16+ characters, entropy). In an object
    with a ``value`` (or ``Value``, ``VALUE``) field and a string ``name``, ``key`` or ``field`` (or
    capitalised, or upper case) field, the value is also read under that name:
    ``[{"name": "DB_PASSWORD", "value": "..."}]`` as in Kubernetes env lists, and so are
    CloudFormation's ``ParameterKey``/``ParameterValue`` and ``OutputKey``/``OutputValue`` and
    Elastic Beanstalk's ``OptionName``/``Value``. Numbers are screened
    as the digits JSON stores (an int, an int subclass's value, an integral float below 10**19 as
    the integer it holds, above 2**53 too): ``{"ssn": 123456789}`` and
    ``{"card": 4111111111111111}`` are read as ``ssn: "123456789"`` and found where those strings
    are (personal data: stored as given on sensitive collections under ``credentials``, refused on
    PUBLIC ones); a redacted number is stored as the redacted string (``"[CREDIT_CARD]"``): no
    number can stand for the placeholder. A number in the text field is read as its digits by the
    text field's rules (whatever this setting), as the text would be, and PII in it is never kept
    (``keep_payload_text_in_boundary`` keeps it in a string only). A product barcode under a field
    named for one (last word ``ean``, ``gtin``, ``upc``, ``isbn`` or ``barcode``: 8, 12, 13 or 14
    digits with a valid GS1 check digit) is not a card number, though one EAN-13 in ten passes
    Luhn; nor is a 19-digit id from ``3528``..``3589`` (Instagram's media ids, one in ten a
    Luhn-valid JCB number) under a field whose last word is ``id`` or ``ids`` (``media_id``) and
    none of whose words, nor those of the keys it is under, names a card (card, pan, cc, credit,
    payment, jcb: ``card_id`` and ``{"card": {"id": ...}}`` keep their card). Filters drop those
    two card findings alike. Not found: shorter or simpler values under other names
    (``{"token": "hunter2hunter2x"}``), a UUID or hex digest under any key, a name in a field not
    so named (``{"label": "password", "data": "..."}``), fractions, booleans and nulls. numpy
    integers are refused by qdrant-client itself (pydantic cannot serialise them). A value
    qdrant-client serialises
    into JSON (bytes, a str-valued Enum, a str subclass whatever its ``__str__`` shows, a dict or list
    subclass whatever its ``items()`` shows, a dataclass or pydantic model, a deque or generator, a
    ``set_payload`` payload given as a ``UserDict``) is screened in the form it is sent and stored
    in, the text field too. A key is screened alone, as it is stored (a bytes or Enum key as its
    text), and redacted in place (``{"[GITHUB_TOKEN]": 1}``); two keys of one object that would redact to the
    same key are refused (UNSUPPORTED_WRITE). On sensitive collections the top-level receipt
    container (``_qdrant_guard_receipt``), which the guard verifies and writes itself, is not
    screened; ``set_payload``'s ``key`` is screened as a field name (``query.filter_pii``), and on
    PUBLIC collections refused on any finding (a path cannot be redacted). Collections left
    unlisted under ``unlisted = "public"`` (pass-through) are not screened: list a collection to
    screen it."""
    receipt_keys: tuple[str, ...] | None = None
    """The outside keys (``ed25519:<base64>`` or ``.pub`` files, relative to the policy file) that
    may sign receipts this collection accepts, e.g. ``receipt_keys = ["keys/support-agent.key.pub"]``.
    Set, it replaces ``receipts.trusted_keys`` for this collection: a receipt signed by any other
    outside key, one in ``receipts.trusted_keys`` included, is refused here (INVALID_RECEIPT on a
    write, naming the collection and the key id; stripped from the reads of every principal not
    allowed raw vectors (all but the owner boundary under ``raw_in_boundary``); ``unknown_key`` in
    ``qdrant-guard receipt verify --policy``), and a key listed here need not be in
    ``receipts.trusted_keys``: listed only here, it is trusted for this collection alone. ``[]``:
    no outside key, only the guard's own receipts. The guard's own ``signing_key`` is always
    trusted; a key in ``receipts.revoked_keys`` stays refused; writers still need write access
    (``writers``). The guard's earlier signing keys (``receipts.retired_keys``) are trusted here
    too, as its current one is: a rotated-out key need not be listed here. Each key is loaded when the client is
    built, as ``receipts.trusted_keys`` are. Unset (the default): the collection accepts receipts
    of every key in ``receipts.trusted_keys`` (a key trusted for one collection then signs for
    every collection that leaves this unset). It scopes the collection's utility records
    (``utility.record``, ``utility.records``) alike: set, a record must be signed by the guard's key
    or a key listed here. A boundary's ``authority_keys`` key may not be listed (its credential
    issuer would sign receipts this collection accepts: the client refuses to start, naming the key
    and both roles)."""
    fail_closed: bool = True
    """Refuse the call when the audit log or the budget store fails (False: log the failure through
    `logging` and go on). A failing embedder or key store always refuses."""
    query: QueryRules = QueryRules()
    """Structural query validation."""
    diversity: DiversityPolicy = DiversityPolicy()
    """Per-source result caps and extraction budgets."""
    intent: IntentPolicy = IntentPolicy()
    """Query intent classification."""
    utility: UtilityPolicy = UtilityPolicy()
    """The retrieval utility guard."""

    # No populate_by_name: it made ``sensitivity``, a Python attribute name, an undocumented second
    # spelling of ``class`` in policy files. Dumped as ``class`` too, so that a dump loads again.
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, use_attribute_docstrings=True,
                              serialize_by_alias=True)

    @property
    def is_public(self) -> bool:
        """True for PUBLIC collections, which the guard passes through unchanged."""
        return self.sensitivity is SensitivityClass.PUBLIC

    @model_serializer(mode="wrap")
    def _dump_without_ignored_on_public(self, handler: SerializerFunctionWrapHandler) -> Any:
        # GuardConfig refuses the keys a PUBLIC collection ignores when they are written, and a
        # dump writes every key: it leaves them out, so that it loads again.
        out = handler(self)
        if self.is_public and isinstance(out, dict):
            for key in _IGNORED_ON_PUBLIC:
                out.pop(key, None)
        return out

    @field_validator("source_field")
    @classmethod
    def _plain_source_path(cls, v: str) -> str:
        # The guard reads sources at plain dotted keys (sources.field_value); a path Qdrant reads
        # otherwise ("metadata[].source", quotes) would name no source in the guard, so no budget
        # or owner-only write rule would ever apply to it.
        if all(part and all(c.isalnum() or c in "_-" for c in part) for part in v.split(".")):
            if v.split(".")[0] == RECEIPT_KEY:
                raise ValueError(
                    f"source_field {v!r} is {'under ' if '.' in v else ''}the payload field the guard keeps "
                    "its receipts in: a write that sets it is refused (its value is read as a receipt) and "
                    "reads strip it, so no point would carry a source and all would count as one. Name the "
                    "field holding each point's source document, e.g. source_field = \"source\"")
            return v
        raise ValueError(
            f"source_field {v!r} is not a dotted path of plain keys (letters, digits, '_', '-', e.g. "
            "'metadata.source'); the guard cannot read '[]' indexing or quoted keys the way Qdrant does"
        )

    @model_validator(mode="after")
    def _switches_that_apply(self) -> "CollectionPolicy":
        # Each switch below acts on one thing the collection may lack; set without it, it promised a
        # behaviour the guard would never show.
        if self.text_field is not None and self.source_field.split(".")[0] == self.text_field:
            # The text field's strings are screened and redacted on write (and for other
            # boundaries on read), so the source the guard counted and matched against
            # restricted_sources would not be the one the writer tagged.
            raise ValueError(
                f"source_field {self.source_field!r} is {'inside ' if '.' in self.source_field else ''}the "
                f"text_field {self.text_field!r}: its strings are screened and redacted as text (a source "
                "'alice@example.com' would be stored as '[EMAIL]'), so diversity caps, budgets and "
                "restricted_sources would count and match redacted sources. Keep the text and the source "
                "under different payload keys")
        if self.keep_payload_text_in_boundary and self.text_field is None:
            raise ValueError("keep_payload_text_in_boundary = true keeps PII in the text_field only, and no "
                             "text_field is set, so it would be ignored; set text_field or remove it")
        if self.raw_in_boundary and self.owner is None and not self.is_public:
            raise ValueError("raw_in_boundary = true allows raw vectors to principals of the owner boundary only, "
                             "and no owner is set, so it would be ignored (no principal gets raw vectors); set "
                             "owner = \"NAME\" to the [boundaries.NAME] it was meant for, or remove raw_in_boundary")
        if self.keep_payload_text_in_boundary and self.is_public:
            raise ValueError("keep_payload_text_in_boundary = true keeps PII for writers of the owner boundary, and "
                             "a PUBLIC collection has none (its reads pass through; findings in its writes are "
                             "refused, or redacted under allow_redaction_on_public), so it would be ignored; remove it")
        if self.keep_payload_text_in_boundary and self.owner is None:
            raise ValueError("keep_payload_text_in_boundary = true keeps PII for writers of the owner boundary only, "
                             "and no owner is set, so it would be ignored (every writer's text is redacted); set "
                             "owner = \"NAME\" to the [boundaries.NAME] it was meant for, or remove "
                             "keep_payload_text_in_boundary")
        if self.intent.skip_owner and self.owner is None and not self.is_public:
            raise ValueError("intent.skip_owner = true skips the intent check for principals of the owner boundary, "
                             "and no owner is set, so it would be ignored (every query is classified); set "
                             "owner = \"NAME\" to the [boundaries.NAME] it was meant for, or remove intent.skip_owner")
        if self.query.filter_pii == "owner" and self.owner is None and not self.is_public:
            raise ValueError("query.filter_pii = \"owner\" lets principals of the owner boundary filter on personal "
                             "data, and no owner is set, so it would act as \"refuse\"; set owner = \"NAME\" to the "
                             "[boundaries.NAME] it was meant for, or set filter_pii to \"refuse\" or \"allow\"")
        if (self.noise_queries and self.raw_in_boundary and self.owner is not None
                and all(r == self.owner for r in self.readers)):
            raise ValueError(f"noise_queries = true noises the query vectors of principals not allowed raw vectors, "
                             f"and only the owner boundary {self.owner!r} reads, under raw_in_boundary = true (its "
                             "queries are not noised), so it would be ignored; add the readers it was meant for, "
                             "set raw_in_boundary = false to noise the owner's queries too, or remove noise_queries")
        if self.payload_fields == "all" and not self.redact_pii and not self.is_public:
            raise ValueError("payload_fields = \"all\" redacts personal data in every payload string, per "
                             "redact_pii, and redact_pii = false, so it would act as \"credentials\" (PII stored as "
                             "given); set redact_pii = true, or payload_fields = \"credentials\"")
        loosened = [k for k, on in (("credentials_in_text = \"redact\"", self.credentials_in_text == "redact"),
                                    ("redact_pii = false", not self.redact_pii)) if on]
        if self.is_public and not self.allow_redaction_on_public and loosened:
            raise ValueError(f"{' and '.join(loosened)} on a PUBLIC collection "
                             f"{'apply' if len(loosened) > 1 else 'applies'} only with allow_redaction_on_public = "
                             "true (otherwise any finding is refused as mislabelled: SENSITIVITY_MISMATCH), so "
                             f"{'they' if len(loosened) > 1 else 'it'} would be ignored; set "
                             "allow_redaction_on_public = true, or remove "
                             + " and ".join(k.split(" ")[0] for k in loosened))
        if self.allow_redaction_on_public and not self.is_public:
            raise ValueError(f"allow_redaction_on_public = true applies to PUBLIC collections only, and this one is "
                             f"{self.sensitivity.value} (its findings are redacted anyway), so it would be ignored; "
                             "remove it")
        return self

    @field_validator("owner")
    @classmethod
    def _one_owner(cls, v: str | None) -> str | None:
        # "*" means any verified principal in readers and writers; as the owner it matched only a
        # boundary literally named "*", so the collection silently had no owner.
        if v == "*":
            raise ValueError("owner names one boundary; \"*\" (any verified principal) is for readers and "
                             "writers. Name the owning [boundaries.NAME] section")
        return v

    @field_validator("text_field")
    @classmethod
    def _top_level_text_key(cls, v: str | None) -> str | None:
        # Only payload[text_field] is screened as text (PII redacted there; payload_fields covers the
        # rest). A dotted or indexed path (which Qdrant reads as nested) names no top-level key, so
        # the nested text would keep its PII, silently.
        if v == RECEIPT_KEY:
            raise ValueError(
                f"text_field {v!r} is the payload field the guard keeps its receipts in: a write that sets it "
                "is refused (its value is read as a receipt) and reads strip it, so no text would be stored "
                "there. Name the top-level key holding each point's text, e.g. text_field = \"text\"")
        if v is None or (v and not any(c in v for c in '.[]"')):
            return v
        raise ValueError(
            f"text_field {v!r} is not a top-level payload key: the guard screens only payload[text_field] "
            "as text (no '.', '[]' or quotes, not empty). Store the text under a top-level key and name it "
            "here, or remove text_field"
        )

    def may_read(self, boundary: str | None) -> bool:
        """Whether a principal verified in ``boundary`` may read this collection."""
        if self.is_public:
            return True
        if boundary is None:
            return False
        return boundary == self.owner or boundary in self.readers or "*" in self.readers

    def may_write(self, boundary: str | None) -> bool:
        """Whether a principal verified in ``boundary`` may write this collection."""
        if self.is_public:
            return True
        if boundary is None:
            return False
        allowed = self.writers if self.writers is not None else ()
        return boundary == self.owner or boundary in allowed or "*" in allowed

    def raw_allowed(self, boundary: str | None) -> bool:
        """Whether raw vectors may be written/read by a principal of ``boundary``."""
        return self.is_public or (
            self.raw_in_boundary and boundary is not None and boundary == self.owner
        )


class BoundaryConfig(_Strict):
    """A trust boundary: the Ed25519 authority keys whose credentials prove membership."""

    authority_keys: tuple[str, ...] = Field(min_length=1)
    """Public keys as ``"ed25519:<base64>"`` strings or paths to PEM/str files. A key belongs to one
    boundary only (the same key in two is refused when the client is built), and has no other role:
    the client refuses to start when one is also the guard's ``signing_key`` or is listed in
    ``receipts.trusted_keys``, ``receipts.retired_keys``, any ``receipt_keys`` or
    ``audit_trusted_keys``, since whoever issues the boundary's credentials would then sign what the
    guard verifies. Make each role its own key (``qdrant-guard keys new``)."""
    revoked_credentials: tuple[str, ...] = ()
    """Credential ids (``jti``) that are no longer accepted."""

    @field_validator("revoked_credentials")
    @classmethod
    def _jtis(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        # A credential is revoked by its jti claim; a whole token here would match nothing.
        for i, jti in enumerate(v):
            if _JTI_RE.fullmatch(jti):
                continue
            if jti.startswith(_TOKEN_PREFIX):
                raise ValueError(
                    f"entry {i} is a whole credential token, which revokes nothing; list its credential "
                    f"id instead: {_jti_of(jti)!r}"
                )
            raise ValueError(f"entry {i} = {jti!r} is not a credential id (jti: base64url characters only)")
        return v


class ReceiptTrust(_Strict):
    """Which keys may sign receipts the guard accepts (the guard's own key is always trusted)."""

    trusted_keys: tuple[str, ...] = ()
    """Public keys (``ed25519:<base64>`` or files) of writers whose receipts are accepted, by every
    collection that sets no ``receipt_keys`` of its own (one that sets them accepts those instead).
    For outside writers' keys; the guard's own earlier ``signing_key`` goes in ``retired_keys``. A
    boundary's ``authority_keys`` key may not be listed (the client refuses to start)."""
    retired_keys: tuple[str, ...] = ()
    """The guard's own earlier signing keys (``ed25519:<base64>`` or ``.pub`` files, relative to the
    policy file), e.g. ``retired_keys = ["keys/guard-2026.key.pub"]``. A retired key is trusted
    exactly where the current ``signing_key`` is, for verification only: the receipts it signed, on
    every collection (those that set ``receipt_keys`` included), the utility records it signed, and
    the audit log's checkpoints (as if listed in ``audit_trusted_keys`` too). After rotating
    ``signing_key``, list the old key's ``.pub`` here, once: otherwise the receipts it signed stop
    verifying, and the vectors they certify are stripped from reads outside the owner. The current
    ``signing_key`` may not be listed, nor a key in ``revoked_keys`` (revocation wins: the client
    refuses to start, naming the key, rather than trust a revoked key or appear to), nor a
    boundary's ``authority_keys`` key (its credential issuer would sign for every collection); a key listed
    twice, or also in ``trusted_keys``, ``receipt_keys`` or ``audit_trusted_keys``, is harmless.
    Whoever holds a retired key's private half can still sign receipts, utility records and
    checkpoints the guard accepts: destroy it after the rotation, and revoke a key that may be
    compromised (``revoked_keys``) rather than retire it.
    ``qdrant-guard receipt verify --policy`` and ``qdrant-guard audit verify --policy`` report what
    such a key signed as ``retired``. Each key is loaded when the client is built."""
    revoked_keys: tuple[str, ...] = ()
    """Key ids (``ed25519:<hex>``) whose receipts, credentials, utility records and audit
    checkpoints are rejected. The guard's own ``signing_key`` may not be listed (the client refuses
    to start: rotate it), nor a key of ``retired_keys`` or ``audit_trusted_keys`` (remove it there)."""
    max_age_s: float | None = Field(None, gt=0)
    """Refuse a write whose receipts were issued longer ago than this (None: no limit). Checked when
    a write presents receipts; reads release stored vectors whatever their receipts' age."""

    @field_validator("revoked_keys")
    @classmethod
    def _key_ids(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        # Revocation matches key ids exactly; anything else (a public key string, a path) would
        # revoke nothing while looking like it does.
        for k in v:
            if _KEY_ID_RE.fullmatch(k):
                continue
            try:
                hint = f"; that is a public key: list its key id {_key_id(_public_key_from_str(k))!r}"
            except Exception:
                hint = " (`qdrant-guard keys new` prints a key's key_id)"
            raise ValueError(f"{_mask_tokens(k)!r} is not a key id 'ed25519:<32 lowercase hex digits>', so it would revoke "
                             f"nothing{hint}")
        return v


_KEY_ID_RE = re.compile(r"ed25519:[0-9a-f]{32}")
_JTI_RE = re.compile(r"[A-Za-z0-9_-]+")
_TOKEN_PREFIX = TOKEN_PREFIX + "."


def _jti_of(token: str) -> str:
    """The jti claim of a credential token (unverified: only to name it in an error)."""
    try:
        body = token.split(".")[1]
        return str(json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))["jti"])
    except Exception:
        return "<the token's jti claim>"


def _mask_tokens(value: Any) -> Any:
    """``value`` with credential tokens and private key material (secrets) masked, for error messages."""
    if isinstance(value, str) and value.startswith(_TOKEN_PREFIX):
        return _TOKEN_PREFIX + "<credential>"
    if isinstance(value, str) and ("PRIVATE KEY" in value or _looks_like_key_body(value.strip())):
        # A private key pasted where a key id, a path or a public key belongs: never echo it.
        return f"<key material, {len(value)} characters, not shown>"
    if isinstance(value, (list, tuple)):
        return [_mask_tokens(x) for x in value]
    if isinstance(value, dict):
        return {k: _mask_tokens(x) for k, x in value.items()}
    return value


DEFAULT_CEILINGS: dict[str, float] = {"PII": 2.0, "CREDENTIAL": 1.0, "PROPRIETARY": 8.0}


_MISSING_SOURCE = "__unknown__"  # the budget's name for points without a source (reads.apply_budget)


def _check_budget_writers(where: str, pol: CollectionPolicy) -> None:
    # The coverage cap is a share of a source's size, so a boundary that reads under the budget
    # and may write could raise its own cap with junk points. With restricted_sources only the owner
    # writes those (refused otherwise); with a budget on every source nothing can keep it out, nor
    # on "__unknown__" (points without a source), which any write without the source field joins.
    restricted = pol.diversity.restricted_sources
    if pol.diversity.max_source_coverage is None or (restricted and _MISSING_SOURCE not in restricted):
        return
    writers = {b for b in pol.writers or () if b != pol.owner}
    readers = {b for b in pol.readers if b != pol.owner}
    both = sorted(writers & readers) or sorted(
        (writers if "*" in readers else set()) | (readers if "*" in writers else set()))
    if both:
        if restricted:
            covers, how, fix = (f"{_MISSING_SOURCE!r} (points without a source)", "without a source",
                                f"take {_MISSING_SOURCE!r} out of {where}.diversity.restricted_sources, or ")
        else:
            covers, how, fix = ("every source", "tagged with a source",
                                f"list the confidential sources in {where}.diversity.restricted_sources "
                                "(only the owner boundary may write those), or ")
        raise ValueError(
            f"{where}: boundary {both[0]!r} may both read and write, and the extraction budget "
            f"(diversity.max_source_coverage) covers {covers}, so it could raise its own cap by "
            f"writing points {how}; {fix}"
            f"remove {both[0]!r} from {where}.writers"
        )


class GuardConfig(_Strict):
    """The whole guard configuration (one policy file)."""

    signing_key: str | None = None
    """Path of the guard's Ed25519 private key (PEM), made by ``qdrant-guard keys new``. It signs the
    receipts of the vectors the guard noises and the audit log's checkpoints, and keys the keyed
    noise and the audit entries' writer MACs (``qdrant-guard audit verify --writer-key`` checks
    them with this file). Unset (None): a fresh key for each process, fit for ``":memory:"`` only: after a restart
    the receipts it signed no longer verify, so the vectors it noised are stripped (``vector=None``)
    from reads outside the owner boundary, and the same vector gets other noise. A client on a store
    that outlives the process (``path=``, a server) warns of it (``UserWarning``) when the policy has a
    sensitive collection. It may not be a boundary's ``authority_keys`` key (compared by public key:
    the client refuses to start), or the guard's host could issue that boundary's credentials and
    the credential issuer could sign receipts, utility records and checkpoints."""
    audit_log: str | None = None
    """Path of the hash-chained JSONL audit log, created (mode 600) if missing; its directory must
    exist. Every entry is also logged at INFO to the ``qdrant_guard.audit`` logger. Unset (None):
    that logger only, and no file for ``qdrant-guard audit verify``."""
    audit_fsync: bool = False
    """fsync the audit log after every entry (slower; survives power loss, not only crashes).
    ``true`` needs ``audit_log``: without a file there is nothing to fsync."""
    audit_allow_shared_file: bool = False
    """Accept an ``audit_log`` file that others can write: group- or world-writable, owned by another
    uid, or below a directory anyone may write without the sticky bit. Refused by default (the guard
    does not start; the message names the mode and ``chmod 600 FILE``): whoever can append to the
    file can forge entries that the next signed checkpoint signs. Set ``true`` only where another
    uid must write the log and is trusted as much as the guard. The check does not stop a process
    running as the guard's own uid (docs/audit-log.md). ``qdrant-guard audit repair`` runs the same
    check, and this setting in the policy given to its ``--trust-policy`` opts out there too. Needs
    ``audit_log``."""
    audit_trusted_keys: tuple[str, ...] = ()
    """Public keys (``ed25519:<base64>`` or files) of earlier signing keys of this audit log. On
    start the guard checks the log back to its most recent signed checkpoint, which must verify
    under ``signing_key`` or one of these; one under any other key (after rotating
    ``signing_key``, the old key's) refuses to start, since nothing could check it. The keys of
    ``receipts.retired_keys`` are trusted here too: after a rotation, list the old key's ``.pub``
    there (it then covers receipts and utility records as well), or here for the log alone (a key
    in ``receipts.revoked_keys`` may not be, nor a boundary's ``authority_keys`` key). Needs
    ``audit_log``: without a file nothing is checked. ``qdrant-guard audit verify --policy`` and
    ``qdrant-guard audit repair`` / ``audit replay`` with ``--trust-policy`` trust these keys,
    ``signing_key``'s public key and ``receipts.retired_keys`` for the log's checkpoints."""
    audit_sign_every_entry: bool = False
    """Sign every audit entry this guard writes (an Ed25519 checkpoint, ``ckpt``, on each, not only
    every 1000th) and refuse to append after an entry under the writer id of another guard whose key
    it trusts (``audit_trusted_keys``, ``receipts.retired_keys``) unless that entry carries a
    signature by that key which verifies (``AuditUnauthenticatedError``, nothing written). For guards
    that share one ``audit_log`` file: without it, such an entry is followed unchecked (the guard
    holds no key for the other guard's MACs) and its next checkpoint signs it, so whoever can write
    the file can forge entries under the other guard's id. Every guard writing the log must set it
    (a guard without it writes unsigned entries, which are then refused), and a log that already
    holds another guard's unsigned entries after its most recent checkpoint is refused on start:
    begin a new ``audit_log`` file when turning it on. Cost: a signature per entry and a signature
    check per other guard's entry read (measured at load 6 on 2 cores: a lone writer's append 48 to
    152 us, two guards appending in turn 126 to 638 us per append). ``qdrant-guard audit verify --key`` then checks every entry's signature, and with
    ``--every-entry-signed`` names each entry without its writer's; ``qdrant-guard audit repair
    --trust-policy`` with this policy refuses to sign over such an entry as the guard does. Needs
    ``audit_log`` and ``signing_key`` (docs/audit-log.md)."""
    unlisted: Literal["strict", "public", "refuse"] = "strict"
    """Collections not listed: ``strict`` = PII with the ``default`` policy (readable by any verified
    principal, vectors never returned raw; created and written by no one unless ``[default]`` sets
    ``owner`` or ``writers``, and then noised); ``public`` = pass-through; ``refuse`` (a call that
    reads, writes, creates or deletes one raises ``ConfigError``, audited as ``REFUSED_CROSS_BOUNDARY``;
    ``collection_exists`` and ``get_collections`` still answer, and ``get_collection`` answers the
    configuration without counts, payload index schema or metadata, unless ``names_visible =
    "accessible"`` hides them)."""
    names_visible: Literal["all", "accessible"] = "all"
    """Which collection and alias names a principal is told of. ``all`` (qdrant-client's answers):
    ``get_collections``, ``get_aliases``, ``get_collection_aliases`` and ``collection_exists``
    answer every name, and ``get_collection`` every collection's configuration. ``accessible``: only
    the names the principal may read, write or own under the policy (PUBLIC collections, and
    unlisted ones under ``unlisted = "public"``, for everyone; unlisted ones under ``"strict"`` as
    ``[default]`` allows, which by default is any verified principal and no client without a
    valid credential; unlisted ones under ``"refuse"`` to no one). The lists leave the other names out (an alias when either its own name or its
    collection's is hidden), ``collection_exists`` answers ``False``, ``get_collection`` and ``get_collection_aliases``
    answer as for a collection that does not exist, without asking Qdrant, and
    ``update_collection_aliases`` answers deleting or renaming an alias of a hidden name (whether
    or not one exists: decided without asking Qdrant) or of a hidden collection as for an alias that
    does not exist (the deletion is left out of the call; the rename is sent as that of an alias no
    one made, after the call's earlier actions, so the call fails where a missing alias's would);
    each such answer is audited (``REFUSED_CROSS_BOUNDARY``, ``details.names_visible``).
    Every other call on a hidden name keeps its refusal, decided from the policy alone before
    Qdrant is asked (docs/threat-model.md, *What any principal learns about a collection*)."""
    epsilon_ceiling: dict[SensitivityClass, float] = Field(default_factory=lambda: dict(DEFAULT_CEILINGS))
    """Largest epsilon accepted per class (defaults: PII 2.0, CREDENTIAL 1.0, PROPRIETARY 8.0), for
    the policy's ``noise.epsilon`` and for the receipts of writers that noise their own vectors.
    Each a finite number > 0; a class left out keeps its default (PUBLIC has none: it is not noised)."""
    boundaries: dict[str, BoundaryConfig] = Field(default_factory=dict)
    """Trust boundaries and their authority keys."""
    receipts: ReceiptTrust = ReceiptTrust()
    """Which receipt signers are trusted or revoked."""
    budget_store: str = "memory"
    """``memory``, ``sqlite:///path.db`` or ``redis://host:port/db`` for the extraction budget (a
    relative sqlite path is relative to the policy file). ``memory`` is one store per Qdrant store
    for the life of the process, shared by every guarded client on it (a ``":memory:"`` client has
    its own); it holds about the keys (principal x collection x source) admitted within the last
    window, as each admission sweeps away a few keys whose every id has left it; it is not shared
    across processes, which need SQLite or Redis. A SQLite file likewise holds about the rows of the
    last window (each admission deletes a few rows older than the longest window used on the file,
    which the file records); Redis keys expire by TTL. A SQLite file and its side files must be the guard's
    uid's (or root's) and writable by no one else, and its directory neither writable by others
    nor another uid's (else the client does not start: whoever can write the file resets budgets;
    docs/diversity-budget.md); a missing file is created mode 600."""
    default: CollectionPolicy = CollectionPolicy(readers=("*",))
    """The policy of unlisted collections when ``unlisted = "strict"`` (refused under the other
    values, which would ignore it)."""
    collections: dict[str, CollectionPolicy] = Field(default_factory=dict)
    """Per-collection policies, keyed by collection name."""
    source_path: str | None = Field(None, exclude=True)

    @field_validator("budget_store")
    @classmethod
    def _store_spec(cls, v: str) -> str:
        # The store is built at the first budgeted read; a typo must fail here, not there.
        if store_kind(v) is not None:
            return v
        raise ValueError(f"{v!r} is not 'memory', 'sqlite:///path.db' or 'redis://host:port/db' "
                         "(also rediss:// and unix://)")

    @field_validator("boundaries")
    @classmethod
    def _boundary_names(cls, v: dict[str, "BoundaryConfig"]) -> dict[str, "BoundaryConfig"]:
        # A principal's boundary may not be empty, and "*" in readers/writers means any principal:
        # a boundary of either name could never be told apart from those meanings.
        for name in v:
            if name in ("", "*"):
                raise ValueError(f"a boundary may not be named {name!r} ("
                                 + ("a principal's boundary is never empty" if not name else
                                    "\"*\" in readers and writers means any verified principal")
                                 + "); rename the [boundaries] section")
        return v

    @field_validator("default", mode="before")
    @classmethod
    def _default_readers(cls, v: Any) -> Any:
        # A [default] section replaces the whole default policy; keep its documented readers = ["*"]
        # unless the section sets readers itself.
        if isinstance(v, dict) and "readers" not in v:
            return {**v, "readers": ("*",)}
        return v

    @field_validator("epsilon_ceiling", mode="before")
    @classmethod
    def _ceilings_numbers(cls, v: Any) -> Any:
        # The per-field type check does not reach a table's values: pydantic's lax mode read
        # PII = "2" as 2.0, and inf passed as "no ceiling" to the receipts of other writers.
        if isinstance(v, dict):
            for k, val in v.items():
                if isinstance(val, (bool, str)) or not isinstance(val, (int, float)) or not math.isfinite(val):
                    raise ValueError(f"ceiling for {k} must be a finite number > 0, got {val!r} "
                                     f"({type(val).__name__}); e.g. {k} = {DEFAULT_CEILINGS.get(str(k), 2.0)}")
        return v

    @field_validator("epsilon_ceiling")
    @classmethod
    def _ceilings_positive(cls, v: dict[SensitivityClass, float]) -> dict[SensitivityClass, float]:
        merged = {SensitivityClass(k): val for k, val in DEFAULT_CEILINGS.items()}
        for k, val in v.items():
            if k is SensitivityClass.PUBLIC:
                raise ValueError(f"PUBLIC collections are passed through, never noised, so a PUBLIC ceiling ({val!r}) "
                                 "would be ignored; remove it (classes with a ceiling: PII, CREDENTIAL, PROPRIETARY)")
            if not val > 0:
                raise ValueError(f"ceiling for {k.value} must be > 0, got {val!r}")
            merged[k] = val
        return merged

    @model_serializer(mode="wrap")
    def _dump_without_ignored_default(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Every model holds a default, but _default_applies refuses a [default] outside "strict":
        # a dump leaves the ignored one out, so that it loads again.
        out = handler(self)
        if self.unlisted != "strict" and isinstance(out, dict):
            out.pop("default", None)
        return out

    @model_validator(mode="after")
    def _audit_keys_that_apply(self) -> "GuardConfig":
        # Both act on the audit log file; without one, entries go to `logging` only.
        if self.audit_log is None:
            if self.audit_fsync:
                raise ValueError("audit_fsync = true fsyncs the audit log file after every entry, and audit_log is "
                                 "not set (entries go to the qdrant_guard.audit logger only), so it would be "
                                 "ignored; set audit_log = \"PATH\" to the log file, or remove audit_fsync")
            if self.audit_allow_shared_file:
                raise ValueError("audit_allow_shared_file = true accepts an audit log file others can write, and "
                                 "audit_log is not set (entries go to the qdrant_guard.audit logger only), so it "
                                 "would be ignored; set audit_log = \"PATH\" to the log file, or remove "
                                 "audit_allow_shared_file")
            if self.audit_trusted_keys:
                raise ValueError("audit_trusted_keys lists earlier signing keys of the audit log file, and "
                                 "audit_log is not set (no file is checked on start), so they would be ignored; set "
                                 "audit_log = \"PATH\" to the log file, or remove audit_trusted_keys")
            if self.audit_sign_every_entry:
                raise ValueError("audit_sign_every_entry = true signs every entry of the audit log file and checks "
                                 "other guards' signatures in it, and audit_log is not set (entries go to the "
                                 "qdrant_guard.audit logger only), so it would be ignored; set audit_log = \"PATH\" "
                                 "to the log file, or remove audit_sign_every_entry")
        elif self.audit_sign_every_entry and self.signing_key is None:
            raise ValueError("audit_sign_every_entry = true signs every audit entry with the guard's signing_key, and "
                             "signing_key is not set (the process's fresh key signs nothing anyone can check later); "
                             "set signing_key = \"PATH\" (qdrant-guard keys new --out PATH), or remove "
                             "audit_sign_every_entry")
        return self

    @model_validator(mode="after")
    def _default_applies(self) -> "GuardConfig":
        # policy_for reads [default] only under "strict": otherwise the section promised a policy
        # for unlisted collections that none of them would get.
        if "default" in self.model_fields_set and self.unlisted != "strict":
            raise ValueError(
                f"the [default] section is the policy of unlisted collections under unlisted = \"strict\", but "
                f"unlisted = {self.unlisted!r}, so it would be ignored; remove [default], or set "
                "unlisted = \"strict\" (or list the collections it was meant for)"
            )
        return self

    @model_validator(mode="after")
    def _noise_under_ceiling(self) -> "GuardConfig":
        items = [("default", self.default)] + [(f"collections.{toml_key(n)}", p) for n, p in self.collections.items()]
        for where, pol in items:
            if pol.is_public:
                ignored = sorted(k for k in pol.model_fields_set & _IGNORED_ON_PUBLIC
                                 if not (where == "default" and k == "readers" and pol.readers == ("*",)))
                if ignored:
                    raise ValueError(
                        f"{where} is PUBLIC (pass-through: anyone, even without a credential, reads and "
                        f"writes it; no noise, query, intent or budget checks), so its {', '.join(ignored)} "
                        f"would be ignored; remove {'them' if len(ignored) > 1 else 'it'}, or give it class "
                        "PII, CREDENTIAL or PROPRIETARY"
                    )
                continue
            if pol.diversity.max_vectors is not None and pol.sensitivity is not SensitivityClass.PROPRIETARY:
                raise ValueError(
                    f"{where}.diversity.max_vectors is the PROPRIETARY distillation budget, but {where} is "
                    f"{pol.sensitivity.value}, so it would be ignored; remove it or give the collection "
                    "class PROPRIETARY"
                )
            ceiling = self.epsilon_ceiling[pol.sensitivity]
            if pol.noise.epsilon > ceiling:
                raise ValueError(
                    f"{where}.noise.epsilon = {pol.noise.epsilon} is above the "
                    f"{pol.sensitivity.value} ceiling {ceiling}; allowed: 0 < epsilon <= {ceiling} "
                    "(or raise epsilon_ceiling)"
                )
            _check_budget_writers(where, pol)
            named = [("owner", pol.owner), *(("readers", r) for r in pol.readers),
                     *(("writers", w) for w in (pol.writers or ()))]
            for key, b in named:
                if b and b != "*" and self.boundaries and b not in self.boundaries:
                    raise ValueError(
                        f"{where}.{key} names boundary {b!r}, which has no [boundaries.{toml_key(b)}] section; "
                        f"known boundaries: {sorted(self.boundaries)}{_boundary_hint(b, self.boundaries)}"
                    )
        return self

    def policy_for(self, collection: str) -> CollectionPolicy:
        """The policy of ``collection`` (the ``default`` for unlisted ones when strict).

        Raises:
            ConfigError: when the collection is unlisted and ``unlisted = "refuse"``.
        """
        pol = self.collections.get(collection)
        if pol is not None:
            return pol
        if self.unlisted == "public":
            return _PUBLIC
        if self.unlisted == "refuse":
            err = ConfigError(
                f"collection {collection!r} is not listed in the policy"
                f"{' ' + self.source_path if self.source_path else ''} and unlisted = \"refuse\"; "
                f"add a [collections.{toml_key(collection)}] section"
            )
            err.unlisted = collection  # type: ignore[attr-defined]  # the pipeline audits the refusal
            raise err
        return self.default

    @classmethod
    def transparent(cls) -> "GuardConfig":
        """A config under which every collection is PUBLIC: the guard changes nothing."""
        return cls(unlisted="public")


# Collection keys a PUBLIC collection does not enforce (set explicitly, they promise protection).
_IGNORED_ON_PUBLIC = frozenset({
    "owner", "readers", "writers", "raw_in_boundary", "noise_queries", "noise", "query", "diversity", "intent",
    "utility", "receipt_keys",
})

# unlisted = "public" promises pass-through: its payloads are not screened (it has no text field).
_PUBLIC = CollectionPolicy(**{"class": SensitivityClass.PUBLIC, "payload_fields": "text_field"})


def _format_loc(loc: tuple[Any, ...]) -> str:
    # "[key]" is pydantic's mark for a table key (not its value) that failed: the path ends at the key.
    return ".".join(str(p) for p in loc
                    if not (isinstance(p, str) and (p.startswith("function-") or p == "[key]")))


def _value_at(data: Any, loc: tuple[Any, ...]) -> Any:
    cur = data
    for p in loc:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, (list, tuple)) and isinstance(p, int) and p < len(cur):
            cur = cur[p]
        else:
            return None
    return cur


def _boundary_hint(name: str, boundaries: dict[str, Any]) -> str:
    """The fix for a collection naming a boundary the policy lacks: the one it probably means, or
    the section to add (a typo such as 'suport' or 'HR' is the likely cause)."""
    import difflib

    folded = [b for b in boundaries if b.casefold() == name.casefold()]
    close = folded or difflib.get_close_matches(name, list(boundaries), n=1, cutoff=0.75)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; fix the name, or add a [boundaries.{toml_key(name)}] section listing its authority's .pub"


def _key_hint(key: str) -> str:
    """A hint for an unknown key: the section it belongs in, or the key it is probably a typo of."""
    import difflib

    from .policy_doc import SECTIONS  # the reference's sections (it imports this module)

    where: dict[str, list[str]] = {}
    spelled: dict[str, str] = {}
    for title, model, _ in SECTIONS:
        section = "the top level" if title == "Top level" else title
        for name, field in model.model_fields.items():
            if not field.exclude:
                where.setdefault(field.alias or name, []).append(section)
                if field.alias:
                    spelled[name] = field.alias
    if key in spelled and key not in where:
        return f"the key is spelled {spelled[key]!r} in a policy; "
    if key in where:
        return f"{key!r} is a key of {' and '.join(where[key])}, not of this section; "
    # A singular for a plural table name ([boundary.hr] for [boundaries.hr]) is below the cutoff.
    plural = key[:-1] + "ies" if key.endswith("y") else key + "s"
    close = [plural] if plural in where else difflib.get_close_matches(key, list(where), n=1, cutoff=0.8)
    if close:
        return f"did you mean {close[0]!r} (a key of {' and '.join(where[close[0]])})? "
    return "check the spelling — "


def config_from_dict(data: dict[str, Any], *, source: str = "<dict>") -> GuardConfig:
    """Validate a policy given as a dict (as parsed from TOML).

    Raises:
        ConfigError: naming the source, key path, bad value and what is allowed.
    """
    try:
        cfg = GuardConfig.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = _format_loc(tuple(err["loc"]))
            value = _mask_tokens(_value_at(data, tuple(err["loc"])))
            if err["type"] == "extra_forbidden":
                shown = repr(value)
                shown = shown if len(shown) <= 80 else shown[:76] + " ..."  # a whole mistyped section
                hint = _key_hint(str(err["loc"][-1]))
                if len(err["loc"]) == 1 and isinstance(value, dict) and "class" in value:
                    # [kb] written for [collections.kb]: the table holds a collection's keys.
                    hint = f"a collection's section is [collections.{err['loc'][0]}]; "
                lines.append(f"{source}: unknown key {loc!r} (value {shown}); {hint}see docs/policy.md")
            else:
                msg = err["msg"].removeprefix("Value error, ")
                if err["type"] in ("tuple_type", "list_type") and err["loc"]:
                    # pydantic's "a valid tuple" names a Python type; a TOML author writes an array.
                    example = json.dumps([value] if isinstance(value, str) else ["..."])
                    msg = f"expected a list (a TOML array), e.g. {err['loc'][-1]} = {example}"
                elif err["type"] in ("model_type", "dict_type") and err["loc"]:
                    # "a valid dictionary or instance of NoisePolicy": the TOML form is a table.
                    msg = f"expected a table: a [{loc}] section (or an inline table {{ ... }}) holding its keys"
                elif err["type"] == "too_short" and err["loc"][-1] == "authority_keys":
                    msg = ("a boundary needs at least one authority key: the .pub file `qdrant-guard keys new` "
                           "writes beside the authority's private key, or its 'ed25519:...' text")
                elif err["type"] == "missing" and len(err["loc"]) > 1:
                    section = _format_loc(tuple(err["loc"][:-1]))
                    msg = f"required key missing: add {err['loc'][-1]} to [{section}] (docs/policy.md)"
                ctx = err.get("ctx") or {}
                allowed = ""
                if "expected" in ctx and str(ctx["expected"]) not in msg:
                    allowed = f"; allowed: {ctx['expected']}"
                shown = "" if value is None or not err["loc"] else f" = {value!r}"
                # A check across keys has no location of its own, and its message names the keys.
                where = f"{loc}{shown}: " if loc else ""
                lines.append(f"{source}: {where}{msg}{allowed}")
        raise ConfigError("invalid qdrant_guard policy:\n  " + "\n  ".join(lines)) from None
    return cfg.model_copy(update={"source_path": source})


def load_policy(path: str | os.PathLike[str]) -> GuardConfig:
    """Load and validate a TOML policy file.

    Relative paths inside the file (keys, audit log, utility records, a ``sqlite:///`` budget store)
    are resolved against the file's directory.

    Raises:
        GuardArgumentTypeError: ``path`` is not a str or an os.PathLike of one.
        ConfigError: the file is missing, writable by other users than its owner (``chmod go-w
            FILE``), owned by a uid that is neither this process's nor root (``chown``) or below a
            directory anyone may write without the sticky bit (``chmod o-w DIR``), is not valid
            TOML, or fails validation.
    """
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise GuardArgumentTypeError(
            f"load_policy() path must be a str or os.PathLike[str] naming a TOML policy file, not "
            f"{type(path).__name__}; e.g. load_policy(\"policy.toml\")")
    if os.fspath(path) == "":
        raise ConfigError("the policy path is empty; give the path of a TOML policy file")
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read()
            st = os.fstat(fh.fileno())
    except OSError as exc:
        hint = ""
        if isinstance(exc, FileNotFoundError):
            # A relative path is read from the working directory, which is not always the one meant.
            where = f" (that is {str(p.absolute())!r})" if not p.is_absolute() else ""
            hint = (f"{where}; fix the path, or start from docs/policy.example.toml (every key) or the "
                    "README's quick-start policy")
        raise ConfigError(f"cannot read policy file {str(p)!r}: {exc.strerror}{hint}") from None
    if os.name == "posix" and stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        # As for the keys it names: whoever can write the policy chooses whom the guard trusts.
        raise ConfigError(
            f"policy file {str(p)!r} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}): whoever can "
            "write it sets every rule the guard enforces (the boundaries' authority keys, who reads and writes "
            f"each collection); run `chmod go-w {p}` and retry")
    uid = foreign_owner(st) if stat.S_ISREG(st.st_mode) else None
    if uid is not None:
        raise ConfigError(
            f"policy file {str(p)!r} is owned by uid {uid}, neither this process's uid ({os.geteuid()}) nor root "
            f"(mode {stat.S_IMODE(st.st_mode):o}): its owner can change its mode and write every rule the guard "
            f"enforces; run `chown {os.geteuid()} {p}` (as root) and retry")
    found = replaceable_by_anyone(p) if stat.S_ISREG(st.st_mode) else None
    if found is not None:
        d, dmode = found
        raise ConfigError(
            f"policy file {str(p)!r} is below directory {d!r}, which every user may write and which has no sticky "
            f"bit (mode {dmode:o}): anyone can put a policy of their own in its place; run `chmod o-w {d}` (or "
            f"`chmod +t {d}`), or move the policy to a directory only its owner writes")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        head = raw.lstrip()[:16]
        what = ("a PEM key file" if head.startswith(b"-----BEGIN") else
                "a JSON file (an audit log, a utility record?)" if head.startswith((b"{", b"[{")) else "")
        hint = (f"; it looks like {what}, not a policy: give the TOML policy file (start from "
                "docs/policy.example.toml), which names keys and logs by path") if what else ""
        raise ConfigError(f"{p}: not valid TOML: {exc}{hint}") from None
    base = p.resolve().parent

    def resolved(path: Any) -> Any:
        # An empty path stays empty, for the loader to refuse: base / "" would be the directory itself.
        return str(base / path) if isinstance(path, str) and path else path

    def keys_resolved(keys: list[Any]) -> list[Any]:
        return [k if isinstance(k, str) and k.startswith("ed25519:") else resolved(k) for k in keys]

    for key in ("signing_key", "audit_log"):
        if key in data:
            data[key] = resolved(data[key])
    store = data.get("budget_store")
    if isinstance(store, str) and store_kind(store) == "sqlite" and not store[len("sqlite:///"):].startswith("/"):
        data["budget_store"] = "sqlite:///" + str(base / store[len("sqlite:///"):])
    for coll in [data.get("default"), *(data.get("collections") or {}).values()]:
        util = coll.get("utility") if isinstance(coll, dict) else None
        if isinstance(util, dict) and "record" in util:
            util["record"] = resolved(util["record"])
        if isinstance(util, dict) and isinstance(util.get("records"), dict):
            util["records"] = {name: resolved(path) for name, path in util["records"].items()}
        if isinstance(coll, dict) and isinstance(coll.get("receipt_keys"), list):
            coll["receipt_keys"] = keys_resolved(coll["receipt_keys"])
    for b in (data.get("boundaries") or {}).values():
        if isinstance(b, dict) and isinstance(b.get("authority_keys"), list):
            b["authority_keys"] = keys_resolved(b["authority_keys"])
    if isinstance(data.get("audit_trusted_keys"), list):
        data["audit_trusted_keys"] = keys_resolved(data["audit_trusted_keys"])
    rec = data.get("receipts")
    for knob in ("trusted_keys", "retired_keys"):
        if isinstance(rec, dict) and isinstance(rec.get(knob), list):
            rec[knob] = keys_resolved(rec[knob])
    return config_from_dict(data, source=str(p))
