"""Set-up of a ``qdrant-guard bench`` run: credentials given or minted, and the user's policy with
every side effect (audit log, budget store) moved into the run's scratch directory."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .errors import BenchmarkError
from .policy import CollectionPolicy, GuardConfig
from .names import toml_key


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
    where = (lambda f: f"{tmp / f} (in --workdir, kept)") if kept else (lambda f: "a temporary file")
    if cfg.audit_log is not None:
        update["audit_log"] = str(tmp / "audit.jsonl")
        notes.append(f"audit log written to {where('audit.jsonl')}, not {cfg.audit_log} (fsync "
                     f"{'on' if cfg.audit_fsync else 'off'}, as the policy says)")
    else:
        notes.append("the policy sets no audit_log: decisions go to `logging` only, as the policy says")
    if cfg.budget_store.startswith("sqlite"):
        update["budget_store"] = f"sqlite:///{tmp / 'budget.db'}"
        notes.append(f"extraction budgets kept in {where('budget.db')}, not the policy's budget_store")
    elif cfg.budget_store != "memory":
        update["budget_store"] = "memory"
        notes.append(f"budget_store {cfg.budget_store.split('@')[-1]!r} replaced by 'memory' so the run "
                     "spends no real budget: its network round trips are NOT in these figures")
    if scratch != collection:
        if scratch in cfg.collections and cfg.collections[scratch] != pol:
            raise BenchmarkError(
                f"--scratch-collection {scratch!r} is listed in the policy with another policy than "
                f"{collection!r}; choose a name the policy does not list")
        update["collections"] = {**cfg.collections, scratch: pol}
        notes.append(f"scratch collection {scratch!r} guarded by the policy of {collection!r}")
    return cfg.model_copy(update=update), notes


def budget_unused_note(pol: CollectionPolicy, n_sources: int) -> str | None:
    """A note when the collection's extraction budget restricts itself to sources the run's points
    (``doc0`` .. ``doc{n_sources - 1}``) never carry: no read is then charged to it."""
    div = pol.diversity
    if not div.enabled or div.max_source_coverage is None or not div.restricted_sources:
        return None
    if any(s == f"doc{i}" for s in div.restricted_sources for i in range(n_sources)):
        return None
    return (f"the extraction budget (max_source_coverage {div.max_source_coverage}) applies only to "
            f"restricted_sources {list(div.restricted_sources)}, none of which the run's points carry "
            f"(their sources are doc0 .. doc{n_sources - 1}): no point was charged to it, so the "
            "budget's admissions are NOT in these figures")


def shown_url(url: str) -> str:
    """``url`` without its ``user:password@`` part and query string, as messages and the report show it."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, "", ""))


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
