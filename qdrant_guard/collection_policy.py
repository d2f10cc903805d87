"""A collection's policy (``[collections.NAME]`` and ``[default]``): its class, fields, sections and
who may read and write it.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import (ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer,
                      model_validator)

from .policy_base import SensitivityClass, _Strict
from .policy_sections import DiversityPolicy, IntentPolicy, NoisePolicy, QueryRules, UtilityPolicy
from .receipts import RECEIPT_KEY


class CollectionPolicy(_Strict):
    """Policy of one collection."""

    sensitivity: SensitivityClass = Field(default=SensitivityClass.PII, alias="class")
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
    a ``scroll`` first learns their parameter sets, at most ``noise.max_receipt_param_sets`` a
    collection (32 by default), and the count is asked again; receipts of further sets are counted).
    It refuses
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
    tag every point with the document it came from (an ``upsert``, ``upload_points``,
    ``upload_collection`` or ``batch_update_points`` Upsert of points without it warns, once per
    collection and client, while the diversity cap is enforced; so does a payload change that
    takes existing points' source away: a ``set_payload`` of null, ``""`` or ``[]`` there (or of an
    object, by a ``key`` at or below it, or by a ``key`` indexing it or a key above it with ``[]``), an
    ``overwrite_payload`` without it, a ``clear_payload``, a ``delete_payload`` of it, of a key holding
    it or of it with ``[]``, alone or in a ``batch_update_points`` whose later operations do not tag the
    points again; shown before the write is sent, so ``-W error`` refuses it). Refused: the guard's receipt field
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
    (CREDENTIAL_IN_TEXT) or redacted; PII there follows ``allow_redaction_on_public``."""
    redact_pii: bool = True
    """Redact PII in text to typed placeholders ([SSN], [EMAIL], ...) before embedding and storage,
    and in query text (``query.redact_query_text``). ``false``: PII is embedded, stored and queried
    as given; credentials still follow ``credentials_in_text``. On PUBLIC collections ``false``
    needs ``allow_redaction_on_public`` (without it every finding is refused as mislabelled, so
    ``false`` alone is refused)."""
    generalize_identifiers: bool = True
    """Replace numbers, codes and capitalised names by [NUMBER], [CODE], [NAME] in text the guard
    embeds (models.Document writes and queries) on sensitive collections; the payload text keeps
    them. A capitalised word that starts a sentence is not taken for a name (it cannot be told from
    an ordinary word there), so a name that opens a sentence reaches the vector: redact such names
    before writing if they are private (qdrant_guard.identifiers has the exact rules).
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
    (``true`` is refused on sensitive collections, which redact anyway). It also governs the PII
    (SSN, e-mail, phone, card number, IBAN) in what a query on a PUBLIC collection the policy lists
    would send to inference (a ``models.Document``'s text and options anywhere in the query, an
    InferenceObject's strings, an Image's options): ``false`` refuses it (SENSITIVITY_MISMATCH;
    inference would embed it as given), ``true`` sends it redacted (per ``redact_pii``). Their
    credentials follow ``credentials_in_text``; a finding in an Image's path or URL or in a model
    name is refused either way (neither can be redacted)."""
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


# Collection keys a PUBLIC collection does not enforce (set explicitly, they promise protection).
_IGNORED_ON_PUBLIC = frozenset({
    "owner", "readers", "writers", "raw_in_boundary", "noise_queries", "noise", "query", "diversity", "intent",
    "utility", "receipt_keys",
})
