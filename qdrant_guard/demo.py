"""``qdrant-guard demo``: two agents in two trust boundaries share one embedded Qdrant store.

Every step states the verdict it expects; the demo prints a table and exits non-zero when any
expectation fails, so ``make demo`` doubles as an end-to-end check.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from qdrant_client.http import models

from . import implementation, keys
from .audit import verify_audit_file
from .boundary import Principal, issue_credential
from .client import QdrantClient
from .errors import GuardArgumentValueError, GuardRefusal
from .hashing_embedder import HashingEmbedder
from .noise import privatize
from .receipts import RECEIPT_KEY, ReceiptItem, ReceiptSigner, issue_receipts_batch, receipts_for_payload, stored_form
from .receipts import verify as verify_stored

DIM = 384

POLICY = """\
# qdrant_guard demo policy: HR owns the sensitive collections; support agents may write
# (noised, receipted) but not read them.
signing_key = "guard.key"
audit_log = "audit.jsonl"
unlisted = "strict"

[boundaries.hr]
authority_keys = ["hr-authority.key.pub"]

[boundaries.support]
authority_keys = ["support-authority.key.pub"]

[receipts]
trusted_keys = ["support-agent.key.pub"]   # agent B signs receipts for vectors it noised itself

[collections.shared_queries]
class = "PII"
owner = "hr"
writers = ["support"]
noise_on_write = false        # the writer must bring a receipt; the guard does not noise for it
text_field = "text"

[collections.shared_queries.noise]
mechanism = "gaussian"
epsilon = 1.0
delta = 1e-6
radius = 0.01
clip_norm = 1.0

[collections.code_snippets]
class = "CREDENTIAL"
owner = "hr"
writers = ["support"]
noise_on_write = false

[collections.code_snippets.noise]
epsilon = 0.5

[collections.hr_notes]
class = "PII"
owner = "hr"
raw_in_boundary = true
"""


@dataclass
class Step:
    label: str
    actor: str
    expected: str
    got: str = ""
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.expected == self.got


def _verdict_of(fn: Callable[[], Any]) -> tuple[str, str, Any]:
    try:
        result = fn()
    except GuardRefusal as exc:
        return exc.verdict, exc.directive, None
    return "ACCEPTED", "", result


def _setup(work: Path) -> dict[str, Any]:
    def keypair(name: str) -> Any:
        sk, pk = keys.generate_keypair()
        # A new file created 0600: written first and chmod-ed after, the key was readable by
        # others in between, and a file left by an earlier run may be open elsewhere already.
        (work / name).unlink(missing_ok=True)
        fd = os.open(work / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(keys.private_key_to_pem(sk))
        # 0644 whatever the umask (under 002 write_text made it group-writable, which the guard
        # refuses for a key it trusts unless the group is user-private); a .pub left by an earlier
        # run is replaced.
        (work / f"{name}.pub").unlink(missing_ok=True)
        fd = os.open(work / f"{name}.pub", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(keys.public_key_to_str(pk) + "\n")
        return sk

    keypair("guard.key")
    hr_auth = keypair("hr-authority.key")
    sup_auth = keypair("support-authority.key")
    agent_b_key = keypair("support-agent.key")
    # 0644 whatever the umask, as the .pub files: the guard refuses a group-writable policy
    # unless its group is user-private.
    (work / "policy.toml").unlink(missing_ok=True)
    fd = os.open(work / "policy.toml", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(POLICY)
    return {
        "alice": Principal("alice", "hr", issue_credential(hr_auth, agent_id="alice", boundary="hr", ttl_s=600)),
        "bob": Principal("bob", "support", issue_credential(sup_auth, agent_id="bob", boundary="support", ttl_s=600)),
        "bob_signer": ReceiptSigner(agent_b_key),
    }


# What a demo writes in its workdir. It deletes every *.key* file, audit.jsonl and store there
# before it starts, so it runs only where nothing else lives.
_DEMO_MARK = ".qdrant-guard-demo"
_DEMO_FILES = {_DEMO_MARK, "policy.toml", "audit.jsonl", "store"} | {
    f"{name}.key{pub}" for name in ("guard", "hr-authority", "support-authority", "support-agent")
    for pub in ("", ".pub")}


def claim_workdir(workdir: str, *, name: str = "workdir", example: str = "demo") -> Path:
    """Create ``workdir`` (or accept it: empty, or marked by an earlier demo) and mark it as a demo's.

    ``name`` and ``example`` word the errors (the CLI passes ``--workdir``).

    Raises:
        GuardArgumentValueError: ``workdir`` is empty, a file, a directory holding anything but an
            earlier demo's files, or cannot be created. Nothing is deleted or written then.
    """
    work = Path(workdir)
    if not workdir or (work.exists() and not work.is_dir()):
        what = "is empty" if not workdir else f"{workdir!r} is not a directory"
        raise GuardArgumentValueError(f"{name} {what}; give a new or empty directory (e.g. {example})")
    if work.is_dir():
        names = {p.name for p in work.iterdir()}
        if names and (_DEMO_MARK not in names or not names <= _DEMO_FILES):
            other = sorted(names - _DEMO_FILES)
            held = (f"holds files the demo does not write ({', '.join(other[:3])}{', ...' if len(other) > 3 else ''})"
                    if other else f"has no {_DEMO_MARK} mark, so it may not be a demo's (an earlier version's "
                    "demo left none: remove the directory to rerun there)")
            raise GuardArgumentValueError(
                f"{name} {workdir!r} {held}, and the demo deletes every *.key* file, audit.jsonl and store "
                f"there before it starts; give a new or empty directory (e.g. {example})")
    try:
        work.mkdir(parents=True, exist_ok=True)
        (work / _DEMO_MARK).write_text("written by `qdrant-guard demo`; the next demo run here replaces "
                                       "this directory's keys, policy, store and audit log\n")
    except OSError as exc:
        raise GuardArgumentValueError(
            f"{name} {workdir!r} cannot be created: {exc.strerror or exc}; give a new or empty directory "
            "in a writable place") from None
    return work


def run_demo(workdir: str | None = None) -> int:
    """Run the demo; return 0 when every expectation holds, 1 otherwise.

    ``workdir`` keeps the keys, policy, store and audit log there; without it they go to a
    temporary directory that is removed at the end. The demo replaces its own files in
    ``workdir``, so it must be new, empty or an earlier demo's (see :func:`claim_workdir`).

    Raises:
        GuardArgumentValueError: ``workdir`` holds anything but an earlier demo's files.
    """
    if workdir is not None:
        return _run(claim_workdir(workdir), kept=True)
    # Each `make demo` used to leave a store and private keys behind in /tmp.
    work = Path(tempfile.mkdtemp(prefix="qdrant-guard-demo-"))
    try:
        return _run(work, kept=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(work: Path, *, kept: bool) -> int:
    work.mkdir(parents=True, exist_ok=True)
    for name in ("audit.jsonl", "store"):
        p = work / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    for f in work.glob("*.key*"):
        f.unlink()
    ctx = _setup(work)
    embed = HashingEmbedder(DIM)
    policy = str(work / "policy.toml")

    # One embedded store shared by both agents: each agent gets its own guarded view of it.
    alice = QdrantClient(path=str(work / "store"), guard=policy, principal=ctx["alice"], embedder=embed)
    bob = alice.with_principal(ctx["bob"])
    for name in ("shared_queries", "code_snippets", "hr_notes"):
        alice.create_collection(name, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))

    steps: list[Step] = []
    ssn_query = "Customer John Doe, SSN 123-45-6789, asks why his refund for order 5512 is late"
    v_ssn = embed([ssn_query])[0]

    # (a) raw SSN-bearing query embedding from another boundary: refused
    s = Step("a1 raw SSN-query embedding -> shared_queries", "bob@support", "NOISE_REQUIRED")
    s.got, s.note, _ = _verdict_of(lambda: bob.upsert("shared_queries", [
        models.PointStruct(id=1, vector=v_ssn.tolist(), payload={"text": ssn_query, "source": "ticket-5512"})]))
    steps.append(s)

    # (a) the same embedding noised by bob and receipted with his key: accepted, receipt verifies
    noised, params = privatize(v_ssn, mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01, clip_norm=1.0)
    final = stored_form(noised, distance="Cosine")
    receipt = issue_receipts_batch(ctx["bob_signer"], [ReceiptItem(
        params=params, vector=final, collection="shared_queries", point_id=1, vector_name="", model_id=embed.model_id)])[0]
    s = Step("a2 noised + receipted embedding -> shared_queries", "bob@support", "ACCEPTED")
    s.got, s.note, _ = _verdict_of(lambda: bob.upsert("shared_queries", [models.PointStruct(
        id=1, vector=final.tolist(),
        payload={"text": ssn_query, "source": "ticket-5512", RECEIPT_KEY: receipts_for_payload({"": receipt})})]))
    s.note = f"sigma={params.scale:.4g}, lattice=2^{int(np.log2(params.lattice_step))}"
    steps.append(s)

    trusted = dict(alice.guard.trusted_receipt_keys) if alice.guard else {}
    reports = verify_stored(alice, "shared_queries", trusted_keys=trusted)
    s = Step("a3 stored receipt verifies against the stored vector", "auditor", "VERIFIED")
    s.got = "VERIFIED" if reports and all(r.ok for r in reports) else f"FAILED {[r.reason for r in reports]}"
    stored_text = alice.retrieve("shared_queries", [1])[0].payload["text"]  # type: ignore[index]
    s.note = f"stored text: {stored_text[:48]}..."
    steps.append(s)

    # (b) an embedded code snippet with an API key, unreceipted: refused
    snippet = 'aws_access_key_id = "AKIAZ7QP3LMNB4XKDT2Q"  # prod uploader'
    s = Step("b  unreceipted API-key snippet embedding -> code_snippets", "bob@support", "NOISE_REQUIRED")
    s.got, s.note, _ = _verdict_of(lambda: bob.upsert("code_snippets", [
        models.PointStruct(id=7, vector=embed([snippet])[0].tolist(), payload={"source": "repo/uploader.py"})]))
    steps.append(s)

    # (c) a cross-boundary search: refused before Qdrant sees it
    s = Step("c  search shared_queries from support", "bob@support", "REFUSED_CROSS_BOUNDARY")
    s.got, s.note, _ = _verdict_of(lambda: bob.query_points("shared_queries", query=embed(["refund late"])[0].tolist(), limit=3))
    steps.append(s)

    # (d) an in-boundary raw write where the policy allows it
    s = Step("d  raw in-boundary write -> hr_notes", "alice@hr", "ACCEPTED")
    s.got, s.note, _ = _verdict_of(lambda: alice.upsert("hr_notes", [
        models.PointStruct(id=3, vector=embed(["performance review notes for the payroll team"])[0].tolist(),
                           payload={"source": "reviews"})]))
    steps.append(s)

    s = Step("d2 in-boundary search of shared_queries", "alice@hr", "ACCEPTED")
    s.got, _, res = _verdict_of(lambda: alice.query_points("shared_queries", query=embed(["refund late"])[0].tolist(), limit=3))
    s.note = f"{len(res.points) if res else 0} hit(s)"
    steps.append(s)

    alice.close()
    # (e) the audit log verifies
    rep = verify_audit_file(work / "audit.jsonl")
    s = Step("e  audit log hash chain verifies", "auditor", "VERIFIED")
    s.got = "VERIFIED" if rep.ok else f"FAILED {rep.problem}"
    s.note = f"{rep.entries} entries"
    steps.append(s)

    _print(steps, work, kept)
    return 0 if all(st.ok for st in steps) else 1


def _print(steps: list[Step], work: Path, kept: bool) -> None:
    w1 = max(len(s.label) for s in steps)
    w2 = max(len(s.actor) for s in steps)
    w3 = max(len(s.expected) for s in steps)
    w4 = max(len(s.got) for s in steps)
    where = f"workdir: {work}" if kept else f"workdir: {work}, removed at the end; --workdir DIR keeps it"
    print(f"qdrant_guard demo (kernels: {implementation()}, {where})\n")
    print(f"{'step':<{w1}}  {'actor':<{w2}}  {'expected':<{w3}}  {'got':<{w4}}  ok  note")
    print("-" * (w1 + w2 + w3 + w4 + 16))
    for s in steps:
        note = textwrap.shorten(s.note, 70) if s.note else ""
        print(f"{s.label:<{w1}}  {s.actor:<{w2}}  {s.expected:<{w3}}  {s.got:<{w4}}  {'yes' if s.ok else 'NO ':<3} {note}")
    failed = [s for s in steps if not s.ok]
    print()
    print("all expectations hold" if not failed else f"{len(failed)} expectation(s) FAILED: "
          + json.dumps([s.label for s in failed]))
