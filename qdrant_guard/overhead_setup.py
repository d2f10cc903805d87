"""Set-up of a ``qdrant-guard bench`` run: credentials given or minted, and the user's policy with
every side effect (audit log, budget store) moved into the run's scratch directory."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence

from .errors import BenchmarkError
from .policy import CollectionPolicy, GuardConfig
from .names import shown_url as shown_url, toml_key


def read_credential(spec: str, flag: str = "--credential") -> str:
    """A credential token given as the token itself (``qgc1.``...) or as a file holding it."""
    if spec.strip().startswith("qgc1."):
        return spec.strip()
    try:
        return Path(spec).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        # A mistyped or truncated token is a secret all the same: name it by its length, not its text.
        shown = repr(spec) if len(spec) < 64 or os.sep in spec else f"(a value of {len(spec)} characters, not shown)"
        raise BenchmarkError(
            f"{flag} {shown} is neither a credential token (qgc1....) nor a readable file ({why}); pass the "
            "token `qdrant-guard credential issue` printed, or a file holding it") from None


def listed_policy(cfg: GuardConfig, collection: str, source: str) -> CollectionPolicy:
    """The policy of ``collection``; a :class:`BenchmarkError` naming the listed ones if it has none."""
    pol = cfg.collections.get(collection)
    if pol is None:
        listed = ", ".join(sorted(cfg.collections)) or "none"
        raise BenchmarkError(
            f"collection {collection!r} is not listed in the policy {source} (listed: {listed}); pass one "
            f"of them with --collection, or add a [collections.{toml_key(collection)}] section")
    return pol


def with_throwaway_authorities(cfg: GuardConfig, pol: CollectionPolicy, write_boundary: str | None,
               read_boundary: str | None) -> tuple[GuardConfig, str, str, list[str]]:
    """A copy of ``cfg`` whose write and read boundaries trust a fresh authority key, and credentials
    from it. Returns (config, write token, read token, notes)."""
    from . import keys
    from .boundary import issue_credential
    from .policy import BoundaryConfig

    if pol.is_public:
        raise BenchmarkError("the collection is PUBLIC: anyone reads and writes it without a credential, "
                             "so --throwaway-credentials has nothing to emulate; drop it")
    wb = write_boundary or pol.owner or next((b for b in (pol.writers or ()) if b != "*"), None)
    if wb is None:
        raise BenchmarkError("the collection has no owner and no named writer boundary; pass "
                             "--write-boundary NAME for the throwaway credential")
    if not pol.may_write(wb):
        raise BenchmarkError(f"--write-boundary {wb!r} may not write this collection (owner {pol.owner!r}, "
                             f"writers {list(pol.writers or ())}); pass one that may")
    rb = read_boundary or next((b for b in pol.readers if b not in ("*", pol.owner)), None) or wb
    if not pol.may_read(rb):
        raise BenchmarkError(f"--read-boundary {rb!r} may not read this collection (owner {pol.owner!r}, "
                             f"readers {list(pol.readers)}); pass one that may")
    bounds = dict(cfg.boundaries)
    authority: dict[str, Any] = {}
    for b in sorted({wb, rb}):  # one key per boundary: the guard refuses a key shared by two
        sk, pk = keys.generate_keypair()
        authority[b] = sk
        old = bounds.get(b)
        bounds[b] = BoundaryConfig(authority_keys=(keys.public_key_to_str(pk),),
                                   revoked_credentials=old.revoked_credentials if old is not None else ())
    note = (f"THROWAWAY CREDENTIALS: boundaries {', '.join(sorted(authority))} trusted throwaway authority "
            "keys in an in-memory copy of the policy, not the authority_keys of the policy file; the "
            "credentials were verified against them (the same Ed25519 check), so your authority keys and "
            "your credentials' expiry and revocation were not exercised")
    return (cfg.model_copy(update={"boundaries": bounds}),
            issue_credential(authority[wb], agent_id="bench-writer", boundary=wb, ttl_s=3600),
            issue_credential(authority[rb], agent_id="bench-reader", boundary=rb, ttl_s=3600), [note])


def scratch_config(cfg: GuardConfig, tmp: Path, collection: str, scratch: str,
                    pol: CollectionPolicy, *, kept: bool = False) -> tuple[GuardConfig, list[str]]:
    """``cfg`` with its side effects moved into ``tmp``: nothing of the user's is written.
    ``kept``: ``tmp`` is the user's ``--workdir``, which outlives the run."""
    notes: list[str] = []
    update: dict[str, Any] = {}
    # With --workdir the files stay, and the user looks for them there.
    def where(f: str) -> str:
        return f"{tmp / f} (in --workdir, kept)" if kept else "a temporary file"

    if cfg.audit_log is not None:
        update["audit_log"] = str(tmp / "audit.jsonl")
        notes.append(f"audit log written to {where('audit.jsonl')}, not {cfg.audit_log} (fsync "
                     f"{'on' if cfg.audit_fsync else 'off'}: the policy's audit_fsync)")
    else:
        notes.append("the policy sets no audit_log: decisions go to `logging` only, as the policy says")
    if cfg.budget_store.startswith("sqlite"):
        update["budget_store"] = f"sqlite:///{tmp / 'budget.db'}"
        notes.append(f"extraction budgets kept in {where('budget.db')}, not the policy's budget_store")
    elif cfg.budget_store != "memory":
        update["budget_store"] = "memory"
        update["budget_store_allow_unauthenticated"] = False  # a Redis-only knob: the copy must stay valid
        notes.append(f"budget_store {shown_url(cfg.budget_store)!r} replaced by 'memory' so the run "
                     "spends no real budget: its network round trips are NOT in these figures")
    if scratch != collection:
        if scratch in cfg.collections and cfg.collections[scratch] != pol:
            raise BenchmarkError(
                f"--scratch-collection {scratch!r} is listed in the policy with another policy than "
                f"{collection!r}; choose a name the policy does not list")
        update["collections"] = {**cfg.collections, scratch: pol}
        notes.append(f"scratch collection {scratch!r} guarded by the policy of {collection!r}")
    return cfg.model_copy(update=update), notes


def source_labels(given: Sequence[str], n_sources: int) -> list[str]:
    """The source values of a run's points, point ``i`` taking ``labels[i % n_sources]``: the names
    ``--source`` gave first, then ``doc0``, ``doc1``, ... (skipping a given name) up to ``n_sources``."""
    given = list(given)
    for value in given:
        if not isinstance(value, str) or not value.strip():
            raise BenchmarkError(f"--source {value!r}: give a source value, a non-empty string (e.g. a name "
                                 "the policy's diversity.restricted_sources lists)")
    if len(set(given)) != len(given):
        raise BenchmarkError(f"--source names {sorted({v for v in given if given.count(v) > 1})} more than once; "
                             "give each source once")
    if len(given) > n_sources:
        raise BenchmarkError(f"--source names {len(given)} sources, more than the run's {n_sources} (--sources); "
                             f"pass --sources {len(given)} or more")
    filler = (f"doc{i}" for i in range(n_sources + len(given)) if f"doc{i}" not in given)
    return given + [next(filler) for _ in range(n_sources - len(given))]


def _shown_sources(labels: Sequence[str]) -> str:
    """The run's source values in a note: ``doc0 .. doc49``, or the names given and the rest."""
    docs = [s for s in labels if s.startswith("doc")]
    named = [s for s in labels if s not in docs]
    tail = f"{docs[0]} .. {docs[-1]}" if len(docs) > 1 else ", ".join(docs)
    return ", ".join([*(repr(s) for s in named), *([tail] if tail else [])])


def budget_unused_note(pol: CollectionPolicy, labels: Sequence[str]) -> str | None:
    """A note when the collection's extraction budget restricts itself to sources the run's points
    (``labels``, :func:`source_labels`) never carry: no read is then charged to it."""
    div = pol.diversity
    if not div.enabled or div.max_source_coverage is None or not div.restricted_sources:
        return None
    if any(s in div.restricted_sources for s in labels):
        return None
    return (f"the extraction budget (max_source_coverage {div.max_source_coverage}) applies only to "
            f"restricted_sources {list(div.restricted_sources)}, none of which the run's points carry "
            f"(their sources are {_shown_sources(labels)}): no point was charged to it, so the "
            f"budget's admissions are NOT in these figures; `--source {div.restricted_sources[0]}` tags "
            "some of the run's points with it (written by the owner boundary, read by another)")


def distillation_unused_note(pol: CollectionPolicy) -> str | None:
    """A note when the collection's distillation budget (``max_vectors``) is charged only by reads
    that return vectors: the run's queries ask for none, so it never runs in them."""
    div = pol.diversity
    if not div.enabled or div.max_vectors is None or div.charge_scores:
        return None
    return (f"the distillation budget (max_vectors {div.max_vectors}) is charged only by reads that return "
            "vectors, and the run's queries ask for none (no with_vectors), so its admissions are NOT in these "
            "figures; reads with with_vectors=True, or charge_scores = true, would add them")


def budget_runout_forecast(pol: CollectionPolicy, labels: Sequence[str], reader: str | None, *, points: int,
                           queries: int, limit: int, named: int = 0) -> str | None:
    """A warning, before anything is timed, when the reader's extraction budget can run out for
    one of the run's sources, or None. ``named``: how many of ``labels`` ``--source`` gave.

    One spent source is enough: once the points a reader holds of one source reach its cap
    (``ExtractionBudget.cap_for`` of the source's size), every later guarded read goes out with a
    filter excluding it, which local mode evaluates point by point (runs of minutes instead of
    seconds, with nothing said until the end). Until then reads go out
    unchanged, so each of the ``queries`` distinct queries returns the same top-``limit`` points in
    every round, warm-up, recording and replay: the run reads at most ``queries * limit`` distinct
    points, of any one source no more than its size. The forecast warns when that bound reaches
    the cap of one budgeted source; it is a bound, not an estimate, because random queries return
    some points far more often than others, so the mean per source says little.
    """
    from .budget import ExtractionBudget
    from .budget_memory import MemoryBudgetStore

    div = pol.diversity
    coverage = div.max_source_coverage
    if not div.enabled or div.mode == "monitor" or coverage is None or reader == pol.owner or pol.is_public:
        return None
    n = len(labels)
    budgeted = [k for k, s in enumerate(labels) if not div.restricted_sources or s in div.restricted_sources]
    if not budgeted:
        return None
    cap_for = ExtractionBudget(MemoryBudgetStore()).cap_for
    per_read = min(limit, points)
    reads = queries * per_read
    sizes = {k: points // n + int(k < points % n) for k in budgeted}
    caps = {k: cap_for(sizes[k], coverage) for k in budgeted}
    risky = [k for k in budgeted if min(sizes[k], reads) >= caps[k]]
    if not risky:
        return None
    k = min(risky, key=lambda j: (caps[j], j))
    cap = caps[k]
    which = "each source" if not div.restricted_sources else "each restricted source"
    head = (f"the reader's extraction budget (max_source_coverage {coverage} of {which}) can run out in this run: "
            f"source {labels[k]!r} holds {sizes[k]} point(s), a cap of {cap}, and the run's {queries} distinct "
            f"top-{per_read} queries (the same ones every round) can read up to {min(sizes[k], reads)} of them "
            "(a bound: random queries return some points far more often than others). Once one source reaches "
            "its cap, every later guarded read goes out with a filter excluding it, which local mode evaluates "
            "point by point, so the run can take many minutes instead of seconds and its guarded figures time a "
            "reader whose budget has run out")
    fixes = []
    min_cap = min(caps.values())
    if min_cap > per_read:
        fixes.append(f"--queries {(min_cap - 1) // per_read} or fewer")
    elif min_cap > 1:
        fixes.append(f"--queries Q --limit L with Q x L below {min_cap} (no --queries value alone: one "
                     f"top-{per_read} query can read {per_read} points of one source)")
    if coverage > 0:
        # The smallest source size whose cap exceeds every point the run can read.
        least = max(1, math.ceil((reads + 1) / coverage) - 1)
        while cap_for(least, coverage) <= reads:
            least += 1
        if max(1, named) <= points // least < n:
            fixes.append(f"--sources {points // least} or fewer (each source then holds {least} points or more)")
        # With --sources given: below 1,000 points the default number of sources grows with --points.
        fixes.append(f"--points {(least - 1) * n + max(budgeted) + 1} or more with --sources {n} (each budgeted "
                     f"source then holds {least} points or more: a longer upsert phase)")
    if fixes:
        advice = "To keep every source under its cap: " + ", or ".join(fixes) + ". Or measure without the run-out"
    else:
        advice = (f"No --queries, --limit, --sources or --points value prevents it: coverage {coverage} admits no "
                  "point of any source, so each is excluded from the first read. Measure without the run-out")
    owner = (f"--read-credential of a principal of the owner boundary {pol.owner!r} (its reads are never charged, "
             f"so the budget is not in the figures) or --throwaway-credentials --read-boundary {pol.owner}, "
             if pol.owner else "")
    return (f"{head}. {advice}: {owner}a copy of the policy with diversity mode = \"monitor\" for this collection "
            "(reads are charged and logged, nothing is withheld or excluded), or --url a Qdrant server, "
            "which evaluates the excluding filter with its indexes")


def restricted_source_notes(pol: CollectionPolicy, labels: Sequence[str], writer: str | None, reader: str | None,
                            n_points: int) -> list[str]:
    """The notes on the run's restricted sources (``labels`` that ``restricted_sources`` lists), or a
    :class:`BenchmarkError` when the writer may not write them (only the owner boundary may)."""
    div = pol.diversity
    restricted = [s for s in labels if s in div.restricted_sources]
    if not restricted:
        return []
    if writer != pol.owner:
        raise BenchmarkError(
            f"--source {restricted[0]!r} is one of the policy's restricted_sources, which only the owner boundary "
            f"{pol.owner!r} may write, and the writer is of boundary {writer!r}, so every upsert would be refused; "
            f"pass --credential of a {pol.owner!r} principal and --read-credential of a reader boundary, or "
            "--throwaway-credentials (its writer is the owner by default)")
    per = len(range(0, n_points, len(labels)))  # points of the first source, the most any one has
    if not div.enabled or div.max_source_coverage is None:
        return []
    note = (f"{len(restricted)} of the run's {len(labels)} sources ({', '.join(map(repr, restricted))}) "
            f"{'is' if len(restricted) == 1 else 'are'} in restricted_sources, about {per} point(s) each, so reads are charged to the extraction budget "
            f"(max_source_coverage {div.max_source_coverage}) and its admissions are in the guarded figures")
    if reader == pol.owner:
        note = (f"the run's points of {', '.join(map(repr, restricted))} carry restricted_sources, but the reader "
                f"is of the owner boundary {pol.owner!r}, whose reads the extraction budget never charges: its "
                "admissions are NOT in these figures; pass --read-credential of another reader boundary")
    return [note]


def _user_files(cfg: GuardConfig, policy: str | os.PathLike[str]) -> dict[Path, str]:
    """The user's files a run reads or stands in for, by resolved path: the policy file, its
    audit log, signing key and sqlite budget store, for refusing an output path that is one of them."""
    named = {"the policy file": policy, "the policy's audit_log": cfg.audit_log,
             "the policy's signing_key": cfg.signing_key}
    if cfg.budget_store.startswith("sqlite:///"):
        named["the policy's budget_store"] = cfg.budget_store[len("sqlite:///"):]
    return {Path(v).resolve(): k for k, v in named.items() if v}


def json_path(spec: str, policy: str | os.PathLike[str], credentials: dict[str, str | None]) -> Path:
    """The ``--json`` output path, checked before the run (finding it unwritable afterwards would
    throw the measurement away): in an existing directory, and none of the user's files the run
    reads (``credentials``: flag -> token or file, as given)."""
    from .policy import load_policy

    out = Path(spec)
    if out.is_dir() or not out.parent.is_dir():
        raise BenchmarkError(
            f"--json {spec}: {'is a directory' if out.is_dir() else f'directory {out.parent} does not exist'}; "
            "pass a file path in an existing directory (e.g. --json bench.json)")
    mine = _user_files(load_policy(policy), policy)
    for flag, given in credentials.items():
        if given and not given.strip().startswith("qgc1."):
            mine[Path(given).resolve()] = f"the {flag} file"
    if out.resolve() in mine:
        raise BenchmarkError(f"--json {spec} is {mine[out.resolve()]}, which the benchmark never writes; "
                             "pass another file (e.g. --json bench.json)")
    return out
