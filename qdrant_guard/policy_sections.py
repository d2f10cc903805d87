"""The per-collection policy sections: ``noise``, ``query``, ``diversity``, ``intent`` and ``utility``."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .names import toml_key
from .policy_base import Mode, _EMPTY, _Strict


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
    epsilon: float = Field(default=1.0, gt=0, le=1000)
    """Privacy loss of each released vector between any two clipped inputs at L2 distance <=
    ``radius`` (metric DP: per vector, not per user, and far larger between arbitrary texts:
    docs/privacy.md). Must be <= the class's ``epsilon_ceiling``."""
    delta: float = Field(default=1e-6, ge=0, lt=1)
    """Failure probability of the Gaussian guarantee: ``gaussian`` needs 1e-300 <= delta < 1 (the
    calibration cannot resolve a smaller one), ``laplace_l2`` needs 0 (a pure guarantee for the ideal
    noise; the bounded sampler adds 1.3e-34 at 384-d, as it adds about dim * 2.3e-34 to the Gaussian's)."""
    radius: float = Field(default=0.01, gt=0, le=2)
    """Protected L2 radius of the metric-DP guarantee (inputs are clipped to ``clip_norm`` first)."""
    clip_norm: float | None = Field(default=1.0, gt=0, allow_inf_nan=False)
    """Inputs are clipped to this L2 norm before noising (1.0 suits normalised embeddings): a longer
    vector is scaled down to it, so a ``Dot`` or ``Euclid`` collection of unnormalised embeddings
    loses their length, which those rankings use (normalise them first, or set this to their largest
    norm: ``radius`` is absolute, so it then protects a smaller change relative to their length).
    ``None`` (from Python; TOML has no null): not clipped, and the guarantee is between inputs as
    given."""
    max_receipt_param_sets: int = Field(default=32, ge=0, le=1024)
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
    max_chars: int | None = Field(default=65536, gt=0)
    """Hard size cap, in characters, checked before scanning (None, from Python: no cap). It bounds
    the scan's cost on hostile input, including text crafted to collide in the scanner's token
    table."""
    max_tokens: int | None = Field(default=500, gt=0)
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
    max_repetition: float | None = Field(default=0.5, ge=0, le=1)
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
    max_ngram_run: float | None = Field(default=None, ge=0, le=1)
    """Cap on the share of tokens in the longest immediately repeated n-gram run (None: off).
    Measured on the folded text too, as ``max_repetition``."""
    max_glued_repetition: float | None = Field(default=0.5, ge=0, le=1)
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
    max_source_fraction: float = Field(default=0.4, gt=0, le=1)
    """No source holds more than max(1, floor(k * fraction)) of a returned top-k. A hard cap: the
    guard returns fewer results rather than backfill over it."""
    min_unique_sources: int = Field(default=2, ge=1)
    """At least ``min(min_unique_sources, k)`` sources appear in a result when the candidates have
    them (1: no minimum): the best candidate of a missing source replaces the lowest-ranked kept
    point of a source holding several (docs/diversity-budget.md)."""
    overfetch_factor: float = Field(default=3.0, ge=1, le=50)
    """Fetch ``ceil(limit * factor)`` candidates from Qdrant (at most 1000, never fewer than the
    limit; ``group_size`` likewise for grouped queries) so the cap can still return k results. 1:
    no over-fetch, so a capped result can come back short."""
    max_source_coverage: float | None = Field(default=None, gt=0, le=1)
    """Fraction of a source's points one principal may see within ``window_s`` (None: no budget)."""
    restricted_sources: tuple[str, ...] = ()
    """Sources the budget applies to (empty: every source; needs ``max_source_coverage``). A budget
    on every source also costs benign users their follow-up questions; restrict it to the
    confidential documents. Only the owner boundary may write points tagged with these, or take
    points out of them: outside it a payload change that reaches the source field (a ``set_payload``
    or ``delete_payload`` of its top-level key, any ``overwrite_payload`` or ``clear_payload``) is
    refused when it selects a point of one, and whatever it selects when it selects by a filter on
    other fields than ``source_field`` (its refusal would tell whether the filter matched there)."""
    window_s: float = Field(default=86400.0, gt=0)
    """Sliding window of the extraction and distillation budgets, in seconds (finite: for a budget
    that never resets, use a long window). A window other than the default with neither
    ``max_source_coverage`` nor ``max_vectors`` set is refused: it would apply to nothing."""
    max_vectors: int | None = Field(default=None, ge=0)
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
    min_confidence: float = Field(default=0.6, ge=0, le=1)
    """A blocked label is enforced only at this confidence or above; below it the query goes ahead
    and the audit record keeps the label (``below_min_confidence``; tune with ``qdrant-guard audit
    replay``). 0: every blocked label is enforced; 1: only those the classifier is certain of."""
    fail_closed: bool = True
    """Refuse the query (FAIL_CLOSED) when the classifier raises, returns an invalid result or
    does not answer within ``timeout_s``. A classifier that cannot be loaded (a ``module:attr``
    that does not import) refuses whatever this says."""
    timeout_s: float = Field(default=5.0, gt=0, le=3600, allow_inf_nan=False)
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

    max_recall_drop: float = Field(default=0.05, ge=0, lt=1)
    """Largest drop of ``metric``@``k`` (default recall@10), relative to clean retrieval, the
    noise may cause."""
    metric: Literal["recall", "ndcg", "overlap"] = "recall"
    """The retrieval metric ``max_recall_drop`` limits: ``recall`` (labelled recall, or known-item
    recall without labels), ``ndcg`` (needs labels) or ``overlap`` with the clean top-k. The record
    must have been calibrated for it (``qdrant-guard calibrate --metric``)."""
    k: int = Field(default=10, ge=1)
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
    max_age_s: float | None = Field(default=None, gt=0)
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
    min_queries: int = Field(default=20, ge=1)
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
