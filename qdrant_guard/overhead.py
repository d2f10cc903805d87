"""Benchmark the guard's overhead for *your* policy and collection shape (``qdrant-guard bench``).

:func:`measure_overhead` builds a scratch store (qdrant-client local mode, ``":memory:"``, unless
``url=`` names a server), fills it with seeded random unit vectors and ordinary English text, and
times, in interleaved rounds (every variant of one item in a shuffled order, item after item, so
drift and other load on the machine hit all variants alike):

* ``upsert`` of batches of ``batch`` points: raw qdrant-client into a twin collection vs the
  guarded client (as the writing principal) into the collection the policy names;
* top-``limit`` ``query_points``: raw on the twin (the points as stored without the guard: exact
  vectors, no receipts) vs guarded (as the reading principal) on the collection the guarded upserts
  filled, with the same query vectors and the same ``limit``, ``with_payload``, ``with_vectors``;
* ``guard_only`` for both: the guarded call driven through the guard's sans-IO pipeline with the
  final Qdrant request answered by the answer real Qdrant gave to that very request in a recording
  pass (:class:`Replay`), so only the guard is on the clock.

"Raw" calls the unguarded ``qdrant_client.QdrantClient`` method on the same client object, i.e.
the same connection and store; the twin has the same vector configuration. Look-ups the guard
itself sends to Qdrant (e.g. ``get_aliases``) still go to Qdrant in ``guard_only`` and are counted
in the report's ``checks`` and notes. Figures depend on the machine, the load on it and the backend.
"""
from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import qdrant_client
from qdrant_client.http import models

from .errors import BenchmarkError, CredentialError, GuardRefusal
from .overhead_report import (
    MEASURED,
    Comparison,
    OverheadReport,
    Timing,
    machine_info,
    stats_us,
)
from .overhead_setup import (
    budget_runout_forecast,
    budget_unused_note,
    distillation_unused_note,
    listed_policy,
    read_credential,
    restricted_source_notes,
    scratch_config,
    shown_url,
    source_labels,
    with_throwaway_authorities,
)
from .pipeline import Call, drive_sync
from .policy import CollectionPolicy, GuardConfig, load_policy
from .receipts import RECEIPT_KEY
from . import warnsite

RawClient = qdrant_client.QdrantClient


# -- data ---------------------------------------------------------------------------------
def unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    """``n`` seeded unit vectors of ``dim`` float32 components."""
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, dim)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return m


def realistic_queries(n: int) -> list[str]:
    """Benign, human-written queries from the project's labelled intent dataset (first ``n``).

    They pass the default structural scan and the built-in intent model, so every measured call
    takes the allowing path (a refusal is a different, shorter path).
    """
    from .intent import BuiltinIntentClassifier
    from .intent_train import load_dataset
    from .scan import scan_query

    clf = BuiltinIntentClassifier()
    out = []
    for row in load_dataset():
        text = row["text"]
        if row.get("label") != "benign" or len(text.split()) < 8:
            continue
        if not scan_query(text).ok or clf.classify(text).label != "benign":
            continue
        out.append(text)
        if len(out) == n:
            break
    if not out:
        raise RuntimeError("no benign query in the intent dataset passed the scan and the classifier")
    return out


_SUBJECTS = ("The quarterly report", "This short guide", "The warehouse team", "Our release notes",
             "The library catalogue", "The garden handbook", "The travel checklist", "This cooking article",
             "The support article", "The project plan")
_VERBS = ("describes", "summarises", "explains", "lists", "compares", "reviews", "outlines")
_OBJECTS = ("shipping schedules for the spring season", "the steps of the onboarding checklist",
            "inventory levels across the northern stores", "how to prune roses after the first frost",
            "the differences between the two printer models", "ways to reduce energy use in the office",
            "the menu for the annual team picnic", "common questions about returning a parcel",
            "the reading list for the history course", "options for storing old photographs")
_TAILS = ("in plain language.", "with a short worked example.", "for the next planning cycle.",
          "and links to the relevant forms.", "for new members of staff.", "in fewer than two pages.")


def english_text(i: int, seed: int) -> str:
    """Seeded ordinary English text without personal data (two sentences), for point ``i``."""
    rng = np.random.default_rng([seed, i])
    return " ".join(f"{_SUBJECTS[rng.integers(len(_SUBJECTS))]} {_VERBS[rng.integers(len(_VERBS))]} "
                    f"{_OBJECTS[rng.integers(len(_OBJECTS))]} {_TAILS[rng.integers(len(_TAILS))]}"
                    for _ in range(2))


def _nested(path: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for the dotted ``path`` ``"a.b"`` (how the guard reads source_field)."""
    *outer, last = path.split(".")
    out: dict[str, Any] = {last: value}
    for part in reversed(outer):
        out = {part: out}
    return out


# -- sans-IO driving ----------------------------------------------------------------------
class Replay:
    """Drives one guarded call through the pipeline with Qdrant's latency taken off the clock.

    ``record()`` runs the call once against real Qdrant and keeps Qdrant's answer to the pipeline's
    final ``method`` request (and that request). ``run()`` then does what the facade does (bind the
    arguments with the same binder, ``Guard.run``, ``drive_sync``) but answers that final request
    with the kept answer. Other requests (a collection-layout or source-count cache miss) still go
    to real Qdrant and are counted in ``forwarded``. ``check()`` proves the pipeline still asks
    Qdrant the very request it asked in ``record()`` (the query noise is keyed, so it does).
    """

    def __init__(self, client: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        from ._facade import _binder

        self.client, self.method, self.args, self.kwargs = client, method, args, kwargs
        self.bind = _binder(getattr(RawClient, method))
        self.answer: Any = None
        self.request: str | None = None
        self.forwarded = 0
        self.forwarded_methods: dict[str, int] = {}

    def _real(self, call: Call) -> Any:
        return getattr(RawClient, call.method)(self.client, **call.kwargs)

    def _drive(self, invoke: Callable[[Call], Any]) -> Any:
        guard = self.client.guard
        return drive_sync(guard.run(self.method, self.bind(self.client, self.args, self.kwargs)), invoke)

    def record(self) -> Any:
        """Run the call against real Qdrant, keeping the answer to its final request."""
        def invoke(call: Call) -> Any:
            res = self._real(call)
            if call.method == self.method:
                self.answer, self.request = res, _fingerprint(call.kwargs)
            return res

        return self._drive(invoke)

    def check(self) -> None:
        """Raise RuntimeError when the pipeline now asks Qdrant another request than recorded."""
        def invoke(call: Call) -> Any:
            if call.method == self.method:
                if _fingerprint(call.kwargs) != self.request:
                    raise RuntimeError(f"the pipeline asked Qdrant a different {self.method} than when recorded")
                return self.answer
            return self._real(call)

        self._drive(invoke)

    def _invoke(self, call: Call) -> Any:
        if call.method == self.method:
            return self.answer
        self.forwarded += 1
        self.forwarded_methods[call.method] = self.forwarded_methods.get(call.method, 0) + 1
        return self._real(call)

    def run(self) -> Any:
        """The guarded call with the final request answered by the recorded answer."""
        return self._drive(self._invoke)


def _fingerprint(kwargs: dict[str, Any]) -> str:
    def enc(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return v.tolist()
        if hasattr(v, "model_dump"):
            return v.model_dump()
        return repr(v)

    return json.dumps({k: v if isinstance(v, (int, float, str, bool, type(None), list)) else enc(v)
                       for k, v in sorted(kwargs.items())}, default=repr, sort_keys=True)


# -- timing -------------------------------------------------------------------------------
def interleaved(fns: dict[str, Callable[[int], Any]], n_items: int, rounds: int, *, seed: int = 20240611,
                warmup: int = 1, progress: bool = False, desc: str = "") -> dict[str, np.ndarray]:
    """Time every ``fns[name](i)`` for each item ``i`` in each round, in a seeded shuffled order per
    (round, item), so drift and other load on the machine hit every variant alike.

    Returns:
        ``{name: array of seconds, shape (rounds * n_items,)}`` in call order per name.
    """
    from .progress import progress_iter

    rng = np.random.default_rng(seed)
    names = list(fns)
    # The bar counts items, warm-up included: counted by rounds, it stood at 0 with no estimate
    # through the whole warm-up and first round, which can take minutes.
    steps = iter(progress_iter(range((warmup + rounds) * n_items), total=(warmup + rounds) * n_items,
                               desc=f"{desc} ({warmup} warm-up + {rounds} round(s) x {n_items})" if desc else "",
                               enabled=progress))
    for _ in range(warmup):
        for i in range(n_items):
            next(steps)
            for nm in names:
                fns[nm](i)
    out: dict[str, list[float]] = {nm: [] for nm in names}
    clock = time.perf_counter
    for _ in range(rounds):
        for i in range(n_items):
            next(steps)
            for j in rng.permutation(len(names)):
                nm = names[j]
                f = fns[nm]
                t0 = clock()
                f(i)
                out[nm].append(clock() - t0)
    for _ in steps:  # ends the bar
        pass
    return {nm: np.asarray(v) for nm, v in out.items()}


def _same_request(replay: Replay) -> bool:
    try:
        replay.check()
    except RuntimeError:
        return False
    return True


def _refused(what: str, who: str, exc: GuardRefusal) -> BenchmarkError:
    return BenchmarkError(
        f"the policy refused the benchmark's {what} as {who}: {exc}. The benchmark times accepted calls "
        "only; use a principal and a policy under which this call is allowed")


@dataclass
class _Bed:
    """The clients and names one run times."""

    client: Any  # the guarded client, as the writer
    reader: Any  # its view as the reader (the client itself when they are the same principal)
    name: str
    raw_name: str
    writer_label: str
    reader_label: str
    pol: CollectionPolicy
    rounds: int
    seed: int
    progress: bool
    raw_sample: list[Any] = field(default_factory=list)  # one raw read's answer, after the clock


def _record(replays: list[Replay], progress: bool, phase: str) -> None:
    """Record every replay (untimed) under a bar of its own: once a budget has run out this takes
    minutes, during which the previous phase's bar used to stand still."""
    from .progress import progress_iter

    for r in progress_iter(replays, total=len(replays), enabled=progress,
                           desc=f"{phase}: recording {len(replays)} replay(s), untimed"):
        r.record()


def _time_upserts(bed: _Bed, *, points: int, dim: int, batch: int,
                  labels: list[str]) -> tuple[dict[str, np.ndarray], list[Replay]]:
    """Interleaved raw / guarded / guard-only upserts of the same batches (which fill ``bed.name``)."""
    pol, seed, client = bed.pol, bed.seed, bed.client
    rows = unit_rows(points, dim, seed)

    def payload(i: int) -> dict[str, Any]:
        p = _nested(pol.source_field, labels[i % len(labels)])
        if pol.text_field:
            p[pol.text_field] = english_text(i, seed)
        return p

    batches = [[models.PointStruct(id=i, vector=rows[i].tolist(), payload=payload(i))
                for i in range(b * batch, min(points, (b + 1) * batch))] for b in range(math.ceil(points / batch))]
    what = f"upsert of {len(batches[0])} points into {bed.name!r}"
    try:
        client.upsert(bed.name, points=batches[0])
        replays = [Replay(client, "upsert", (bed.name, b), {}) for b in batches]
        _record(replays, bed.progress, "bench upsert")
        return interleaved({
            "raw": lambda b: RawClient.upsert(client, bed.raw_name, points=batches[b]),
            "guarded": lambda b: client.upsert(bed.name, points=batches[b]),
            "guard_only": lambda b: replays[b].run(),
        }, len(batches), bed.rounds, seed=seed, progress=bed.progress, desc="bench upsert"), replays
    except GuardRefusal as exc:
        raise _refused(what, bed.writer_label, exc) from None


def _time_queries(bed: _Bed, *, points: int, dim: int, queries: int, limit: int,
                  query_text: bool) -> tuple[dict[str, np.ndarray], list[Replay], int]:
    """Interleaved raw / guarded / guard-only top-``limit`` reads of ``bed.name``; also returns how
    many guarded reads returned fewer than ``limit`` points."""
    client, reader, name = bed.client, bed.reader, bed.name
    qv = [row.tolist() for row in unit_rows(queries, dim, bed.seed + 1)]
    texts = realistic_queries(queries) if query_text else []
    kw = [{"query": qv[i], "limit": limit, **({"query_text": texts[i % len(texts)]} if texts else {})}
          for i in range(queries)]
    short = [0]

    def raw_query(i: int) -> Any:
        # The twin: what the application reads today (exact vectors, payloads without receipts).
        return RawClient.query_points(client, bed.raw_name, query=qv[i], limit=limit)

    def guarded_query(i: int) -> None:
        if len(reader.query_points(name, **kw[i]).points) < min(limit, points):
            short[0] += 1

    try:
        reader.query_points(name, **kw[0])
        replays = [Replay(reader, "query_points", (name,), kw[i]) for i in range(queries)]
        _record(replays, bed.progress, "bench query")
        timed = interleaved({
            "raw": raw_query,
            "guarded": guarded_query,
            "guard_only": lambda i: replays[i].run(),
        }, queries, bed.rounds, seed=bed.seed + 1, progress=bed.progress, desc="bench query")
    except GuardRefusal as exc:
        raise _refused(f"top-{limit} query_points on {name!r}", bed.reader_label, exc) from None
    bed.raw_sample = raw_query(0).points
    return timed, replays, short[0]


def _checks(bed: _Bed, cfg: GuardConfig, *, points: int, limit: int, upsert_replays: list[Replay],
            query_replays: list[Replay], short: int, notes: list[str]) -> dict[str, Any]:
    """Evidence that the guarded calls went through the guard, and what changed their path (in
    ``notes``)."""
    pol = bed.pol
    stored, _ = RawClient.scroll(bed.client, bed.name, limit=points, with_payload=True)
    checks: dict[str, Any] = {
        "stored_points": len(stored),
        "receipted_points": sum(1 for p in stored if RECEIPT_KEY in (p.payload or {})),
        "guarded_reads_short": short,
        "guard_only_forwarded_calls": sum(r.forwarded for r in upsert_replays + query_replays),
        "raw_query_points_with_receipt": sum(1 for p in bed.raw_sample if RECEIPT_KEY in (p.payload or {})),
    }
    verified = bed.client.guard.verified
    writer_b = verified.boundary if verified else None
    if not pol.is_public and pol.raw_allowed(writer_b):
        others = [b for b in (pol.writers or ()) if b not in (pol.owner, "*")]
        notes.append(
            f"the writer is of the owner boundary {writer_b!r} and the policy sets raw_in_boundary, so the guarded "
            "upserts stored raw vectors: noising and receipt signing are NOT in the upsert figures"
            + (f"; a writer of {', '.join(others)} times them (--credential of one, or --write-boundary "
               "with --throwaway-credentials)" if others else ""))
    for op, replays in (("upsert", upsert_replays), ("query", query_replays)):
        sent: dict[str, int] = {}
        for r in replays:
            for m, n in r.forwarded_methods.items():
                sent[m] = sent.get(m, 0) + n
        if sent:
            runs = len(replays) * (bed.rounds + 1)  # the warm-up round runs them too
            notes.append(
                f"guard-only {op} is not Qdrant-free: the guard's own look-ups still went to Qdrant and are on "
                f"its clock ({', '.join(f'{m} {n / runs:.3g} per call' for m, n in sorted(sent.items()))}); "
                "only the answer to the final request is replayed")
    if short:
        notes.append(f"{short} guarded read(s) returned fewer than {limit} points (diversity caps or the "
                     "extraction budget withheld some): they are timed as served")
    excluded: int | None = None
    if cfg.audit_log is not None:
        ops, excluded = audit_op_counts(cfg.audit_log)
        checks["audit_entries"] = ops
        checks["audited_reads_with_budget_exclusion"] = excluded
    elif pol.diversity.enabled and pol.diversity.max_source_coverage is not None:
        excluded = sum(not _same_request(r) for r in query_replays)  # after the clock: no audit log to ask
        checks["queries_whose_request_changed"] = excluded
    if excluded:
        notes.append(
            f"the extraction budget (max_source_coverage {pol.diversity.max_source_coverage}) ran out for "
            f"some sources during the run: {excluded} audited read(s) (warm-up, recording and guard-only runs "
            "included) were sent with a filter excluding them, a slower search, so the guarded figures include it "
            "(the guard-only ones replay the answer). "
            "It cannot run out while --queries x --limit stays below every source's cap (more --points "
            "or fewer --sources raise the caps; --rounds replays the same queries and changes nothing), "
            "or with a reader of the owner boundary, or with diversity mode = \"monitor\"")
    return checks


# -- the measurement ----------------------------------------------------------------------
def drop_scratch(client: Any, names: list[str], shown: str | None) -> list[str]:
    """Delete the benchmark's scratch collections; warn naming any left behind, and return them.

    A failed deletion must neither hide the run's result or error nor pass unnoticed: a server keeps
    the scratch collections (and their points) until someone deletes them.
    """
    left: list[str] = []
    for n in names:
        try:
            RawClient.delete_collection(client, n)
        except Exception as exc:
            left.append(n)
            warnsite.warn(  # at measure_overhead's caller, not at its line in this module
                f"qdrant-guard bench could not delete its scratch collection {n!r} at {shown}: "
                f"{type(exc).__name__}: {exc}; delete it by hand "
                f"(qdrant_client.QdrantClient(url=...).delete_collection({n!r}))", RuntimeWarning)
    return left


def audit_op_counts(path: str | os.PathLike[str]) -> tuple[dict[str, int], int]:
    """Entries per ``op`` in the audit log at ``path``, and how many ``query_points`` entries
    record a budget exclusion."""
    ops: dict[str, int] = {}
    excluded = 0
    # Split at "\n" only: an entry may hold U+2028/U+2029/U+0085 raw (caller text), where
    # str.splitlines() splits.
    for line in Path(path).read_text(encoding="utf-8").split("\n"):
        if not line:
            continue
        rec = json.loads(line).get("record", {})
        ops[rec.get("op")] = ops.get(rec.get("op"), 0) + 1
        excluded += rec.get("op") == "query_points" and "budget_excluded" in (rec.get("details") or {})
    return ops, excluded


def measure_overhead(
    policy: str | os.PathLike[str] | GuardConfig,
    collection: str,
    *,
    credential: str | None = None,
    read_credential: str | None = None,
    throwaway_credentials: bool = False,
    write_boundary: str | None = None,
    read_boundary: str | None = None,
    dim: int = 384,
    points: int = 1000,
    batch: int = 256,
    queries: int = 200,
    limit: int = 10,
    rounds: int = 5,
    sources: int | None = None,
    source_values: Sequence[str] = (),
    seed: int = 20240611,
    query_text: bool = True,
    url: str | None = None,
    scratch_collection: str | None = None,
    workdir: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> OverheadReport:
    """Time raw qdrant-client against the guarded client under ``policy`` for ``collection``.

    Args:
        policy: a policy file path, or a :class:`GuardConfig`.
        collection: the collection whose policy is measured (must be listed in the policy).
        credential: the writing principal's credential token (the guarded upserts run as it); also
            the reader unless ``read_credential`` is given.
        read_credential: the reading principal's credential token (the guarded queries run as it).
        throwaway_credentials: instead of credentials, mint a throwaway authority key that the write
            and read boundaries trust in an in-memory copy of the policy (said in ``notes``).
        write_boundary, read_boundary: with ``throwaway_credentials``: the boundaries to act in
            (default: the owner, and the first named reader other than the owner, else the owner).
        dim: vector dimension of the scratch collection (cosine distance, one unnamed vector).
        points: points stored (and read); upserted in ``ceil(points / batch)`` batches.
        batch: points per upsert call.
        queries: distinct top-``limit`` queries per round.
        limit: the ``limit`` of each ``query_points``.
        rounds: timed rounds, after one untimed warm-up round.
        sources: distinct values of the policy's ``source_field`` (point ``i`` is in source
            ``doc{i % sources}``; default: 50, or one per 20 points below 1,000 points).
        source_values: source values to give the run's points instead of the first ``doc`` names (``--source
            NAME``; point ``i`` is in the ``i % sources``-th of these names followed by ``doc`` names),
            e.g. one of the policy's ``diversity.restricted_sources``, so that its extraction budget is
            charged and timed. A restricted source needs a writer of the owner boundary (only it may
            write one) and a reader of another (the owner's reads are never charged).
        seed: seeds vectors, texts and the interleaving order.
        query_text: pass a benign ``query_text=`` with each guarded query (scan, intent), as an
            application that supplies the user's words would.
        url: a Qdrant server instead of a fresh local ``":memory:"`` store (API key from
            ``QDRANT_API_KEY``); needs ``scratch_collection``.
        scratch_collection: name of a collection that must not exist yet: it (and
            ``<name>_raw``) is created, guarded by the policy of ``collection``, and deleted at the end.
        workdir: keep the local store (``workdir/store``) and the temporary audit log here
            (must not exist, or be an empty directory); default: a temporary directory, removed.
        progress: draw a progress bar on stderr.

    Returns:
        :class:`OverheadReport`; each timing holds ``rounds * ceil(points / batch)`` upsert calls and
        ``rounds * queries`` query calls per variant.

    Raises:
        BenchmarkError: a bad argument, an unlisted collection, a principal that may not write or
            read the collection, an existing scratch collection, or a guarded call the policy refused.
        ConfigError, CredentialError: the policy file or a credential does not verify.
    """
    from .client import QdrantClient

    for name, value, least in (("dim", dim, 1), ("points", points, 1), ("batch", batch, 1),
                               ("queries", queries, 1), ("limit", limit, 1), ("rounds", rounds, 1),
                               ("sources", 1 if sources is None else sources, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise BenchmarkError(f"{name} must be an integer >= {least}, got {value!r}")
    if throwaway_credentials and (credential or read_credential):
        raise BenchmarkError("pass either --credential/--read-credential or --throwaway-credentials, not both")
    if (write_boundary or read_boundary) and not throwaway_credentials:
        raise BenchmarkError("--write-boundary/--read-boundary choose the boundaries of "
                             "--throwaway-credentials; with --credential the credential names its boundary")
    shown = shown_url(url) if url is not None else None  # a URL can carry a password: never shown
    if url is not None and not scratch_collection:
        raise BenchmarkError(
            f"--url {shown}: the benchmark writes, and never into an existing collection; pass "
            "--scratch-collection NAME, a collection that does not exist yet (it is deleted afterwards)")
    if url is not None and workdir is not None:
        raise BenchmarkError("--workdir keeps a local store; it does not apply with --url")

    cfg = policy if isinstance(policy, GuardConfig) else load_policy(policy)
    source = cfg.source_path or str(policy)
    pol = listed_policy(cfg, collection, source)
    if not throwaway_credentials and credential is None and not pol.is_public:
        raise BenchmarkError(f"no principal: {collection!r} is {pol.sensitivity.value}; pass --credential "
                             "TOKEN_OR_FILE (a credential of a boundary that may write it), or "
                             "--throwaway-credentials for a quick look")
    name = scratch_collection or collection
    raw_name = f"{name}_raw"
    if raw_name in cfg.collections:
        raise BenchmarkError(f"the raw twin collection {raw_name!r} is listed in the policy; pass "
                             "--scratch-collection with a name whose '<name>_raw' is not listed")

    tmp_ctx = None
    if workdir is None:
        tmp_ctx = tempfile.TemporaryDirectory(prefix="qdrant-guard-bench-")
        tmp = Path(tmp_ctx.name)
    else:
        tmp = Path(workdir)
        if tmp.exists() and (not tmp.is_dir() or any(tmp.iterdir())):
            raise BenchmarkError(f"--workdir {tmp} exists and is not an empty directory; pass a new path")
        tmp.mkdir(parents=True, exist_ok=True)
    client: Any = None
    created: list[str] = []
    try:
        cfg, notes = scratch_config(cfg, tmp, collection, name, pol, kept=workdir is not None)
        if throwaway_credentials:
            cfg, credential, read_credential, more = with_throwaway_authorities(cfg, pol, write_boundary, read_boundary)
            notes = more + notes
        where: dict[str, Any]
        if url is not None:
            where = {"url": url, "api_key": os.environ.get("QDRANT_API_KEY")}
            backend = f"Qdrant server {shown}"
        elif workdir is not None:
            where = {"path": str(tmp / "store")}
            backend = f"local mode, on disk ({tmp / 'store'})"
        else:
            where = {"location": ":memory:"}
            backend = "local mode :memory:"
        try:
            with warnings.catch_warnings():
                # The scratch store and collections are removed after the run, so the receipts
                # signed with a throwaway key never need to verify after a restart.
                warnings.filterwarnings("ignore", message=r"qdrant_guard: the policy .* sets no signing_key",
                                        category=UserWarning)
                client = QdrantClient(**where, guard=cfg, principal=credential)
            reader = client if read_credential is None else client.with_principal(read_credential)
        except CredentialError as exc:
            raise BenchmarkError(
                f"a credential was rejected: {exc}. Pass --credential/--read-credential tokens issued by the "
                f"authority of a boundary listed in {source}, or --throwaway-credentials") from None
        writer_b = client.guard.verified.boundary if client.guard.verified else None
        reader_b = reader.guard.verified.boundary if reader.guard.verified else None
        writer_label = client.guard.principal_label or "anonymous"
        reader_label = reader.guard.principal_label or "anonymous"
        if not pol.may_write(writer_b):
            raise BenchmarkError(
                f"--credential is for {writer_label}, and boundary {writer_b!r} may not write {collection!r} "
                f"(owner {pol.owner!r}, writers {list(pol.writers or ())}); pass a credential of one of those "
                "boundaries")
        if not pol.may_read(reader_b):
            flag = "--read-credential" if read_credential is not None and read_credential != credential else "--credential"
            raise BenchmarkError(
                f"{flag} is for {reader_label}, and boundary {reader_b!r} may not read {collection!r} (owner "
                f"{pol.owner!r}, readers {list(pol.readers)}); pass --read-credential of one of those boundaries")

        n_sources = sources or (50 if points >= 50 * 20 else max(1, points // 20))
        labels = source_labels(source_values, n_sources)
        notes.extend(restricted_source_notes(pol, labels, writer_b, reader_b, points))

        for n in (name, raw_name):
            try:
                exists = RawClient.collection_exists(client, n)
            except Exception as exc:  # the first request: a server that cannot be reached fails here
                raise BenchmarkError(f"--url {shown}: cannot ask Qdrant whether {n!r} exists: "
                                     f"{type(exc).__name__}: {exc}; check the URL and QDRANT_API_KEY") from None
            if exists:
                raise BenchmarkError(
                    f"collection {n!r} already exists at {shown}; the benchmark never writes into an existing "
                    "collection: pass --scratch-collection with a name that does not exist")
        for n in (name, raw_name):
            RawClient.create_collection(client, n, vectors_config=models.VectorParams(
                size=dim, distance=models.Distance.COSINE))
            created.append(n)

        for unused in (budget_unused_note(pol, labels), distillation_unused_note(pol)):
            if unused is not None:
                notes.append(unused)
        runout = budget_runout_forecast(pol, labels, reader_b, points=points, queries=queries, limit=limit,
                                        named=len(source_values))
        if runout is not None:  # before minutes of work, so not only in the report: --no-progress too
            print(f"qdrant-guard bench: note: {runout}", file=sys.stderr, flush=True)
        bed = _Bed(client, reader, name, raw_name, writer_label, reader_label, pol, rounds, seed, progress)
        up, up_replays = _time_upserts(bed, points=points, dim=dim, batch=batch, labels=labels)
        q, q_replays, short = _time_queries(bed, points=points, dim=dim, queries=queries, limit=limit,
                                            query_text=query_text)
        checks = _checks(bed, cfg, points=points, limit=limit, upsert_replays=up_replays,
                         query_replays=q_replays, short=short, notes=notes)
        return OverheadReport(
            collection=name, policy=source, sources=n_sources, backend=backend, writer=writer_label, reader=reader_label,
            dim=dim, points=points, batch=batch, queries=queries, limit=limit, rounds=rounds, seed=seed,
            text_field=pol.text_field,
            upsert=Comparison(Timing.of(up["raw"]), Timing.of(up["guarded"]), Timing.of(up["guard_only"])),
            query=Comparison(Timing.of(q["raw"]), Timing.of(q["guarded"]), Timing.of(q["guard_only"])),
            notes=notes, checks=checks, machine=machine_info(), source_names=list(labels))
    finally:
        if client is not None:
            if url is not None:
                drop_scratch(client, created, shown)
            client.close()
        if tmp_ctx is not None:
            tmp_ctx.cleanup()


__all__ = ["MEASURED", "BenchmarkError", "Comparison", "OverheadReport", "Replay", "Timing", "english_text",
           "interleaved", "measure_overhead", "read_credential", "realistic_queries", "stats_us", "unit_rows"]
