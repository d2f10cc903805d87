"""``qdrant-guard calibrate``: its options (:func:`add_calibrate_arguments`), how they are read
against a policy file (:func:`calibrate_options`), the query text path (:func:`query_text_transform`)
and the run (:func:`run_calibrate_cli`). :mod:`qdrant_guard.utility` re-exports the public names.
"""
from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, Callable

import numpy as np

from .calibration import (
    DEFAULT_EPSILONS,
    DEFAULT_MIN_QUERIES,
    _METRICS,
    UtilityCalibrationError,
    calibrate,
    same_model,
)
from .errors import GuardArgumentValueError
from .utility_record import _same

__all__ = [
    "EXIT_POLICY_NOT_COVERED",
    "add_calibrate_arguments",
    "run_calibrate_cli",
]

#: ``qdrant-guard calibrate``'s exit status when it wrote a record the guard of its ``--policy``
#: would refuse writes under (2 is taken: an error, or no feasible level, with nothing written).
EXIT_POLICY_NOT_COVERED = 3


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

    from .cli_args import _positive_int
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
    chosen = getattr(args, "policy_collection", None)
    name = chosen or getattr(args, "collection")
    if name not in cfg.collections and (chosen or cfg.unlisted != "strict"):
        # A record for [default] (or a refused name) when the user named a collection of the
        # policy with a typo, or a staging copy without --policy-collection: refused before any
        # measuring, with the names it could be. (Only under unlisted = "strict" is an unlisted
        # name one the guard has a policy for.)
        import difflib

        flag = "--policy-collection" if chosen else "--collection"
        near = difflib.get_close_matches(name, list(cfg.collections), n=1)
        guess = f"; did you mean {near[0]!r}?" if near else ""
        more = "" if chosen else (" If it is a staging copy of a listed collection, pass --policy-collection "
                                  "with that collection's name.")
        raise GuardArgumentValueError(
            f"{flag} {name!r} is not listed in --policy {path} (listed: {', '.join(sorted(cfg.collections)) or 'none'})"
            f"{guess}{more}")
    pol = cfg.policy_for(name)
    if name not in cfg.collections:
        print(f"note: --collection {name!r} is not listed in --policy {path}: the record is for its [default] "
              "section, as the guard treats unlisted collections; for a staging copy of a listed collection, "
              "pass --policy-collection with that collection's name", file=sys.stderr)
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
    from .cli_policy_keys import _policy_signing_keys

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

    def get(name: str, default: Any = None) -> Any:
        return getattr(args, name, default)

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
