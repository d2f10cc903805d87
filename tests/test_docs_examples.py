"""The README and docs/*.md, read as a new user reads them: their examples run, their commands parse.

Every fenced Python block compiles, imports what exists, and uses no name it does not define
except the placeholders registered in ``GIVEN`` (so a block that forgets ``import os`` fails).
Every block is run on local-mode Qdrant by a test here, or listed in ``NOT_RUN`` with the reason
(the server example only compiles). The README's quick start runs end to end: its shell commands
through the CLI, its policy, its client construction, and the refusal it quotes is the one the
guard raises. Every ``qdrant-guard`` command and option shown exists, make targets, modules, files
and tests the docs cite exist, policy keys named exist, call shapes shown bind to the real
signatures, and the defaults the docs state are the policy's. Measurement figures
(docs/benchmarks.md, docs/performance-notes.md, the eval tables) are not checked here.

A failure names the page and line; fix the page (or, if the page is right, the code).
"""
from __future__ import annotations

import argparse
import ast
import asyncio
import builtins
import importlib
import importlib.util
import inspect
import json
import re
import shlex
import sys
import tomllib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from guardkit import make_kit
from qdrant_guard import GuardRefusal, Principal, QdrantClient, Verdict, cli
from qdrant_guard.policy import CollectionPolicy, GuardConfig, config_from_dict

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
# The pages that hold what the README held before it was cut to one sitting (2026-12-08): the
# checks that read the README read them too.
README_PARTS = ("features.md", "quick-start.md", "switching.md", "verdicts.md", "retrieval-defences.md",
                "privacy-utility.md", "performance.md", "environment.md")
# Measurement history: its figures are not examples, and its test names are benchmark ids.
MEASUREMENTS = {"benchmarks.md", "performance-notes.md"}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def fenced_blocks(path: Path) -> list[Block]:
    """Every ``` fenced block of a Markdown page, with the line of its opening fence."""
    out, lines, i = [], path.read_text().splitlines(), 0
    while i < len(lines):
        m = re.match(r"^\s*```(\S*)\s*$", lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            out.append(Block(rel(path), i + 1, m.group(1), "\n".join(lines[i + 1:j]) + "\n"))
            i = j
        i += 1
    return out


def python_blocks() -> list[Block]:
    return [b for p in PAGES for b in fenced_blocks(p) if b.lang == "python"]


def prose(path: Path) -> str:
    """A page without its fenced blocks."""
    return re.sub(r"```.*?```", "", path.read_text(), flags=re.S)


def spans(path: Path) -> list[str]:
    """The inline ``code`` spans of a page's prose."""
    return re.findall(r"`([^`\n]+)`", prose(path))


def block(page: str, first_line_contains: str) -> Block:
    found = [b for b in python_blocks() if b.page == page and first_line_contains in b.text]
    assert len(found) == 1, f"expected one Python block of {page} holding {first_line_contains!r}, found {len(found)}"
    return found[0]


# Names a block uses without defining them: the reader's own objects, set up in the prose around
# it. Keyed by (page, a string only that block holds). A block not listed may use none.
GIVEN: dict[tuple[str, str], set[str]] = {
    ("README.md", "from langchain_qdrant import QdrantVectorStore"):
        {"guarded_client", "embeddings", "guarded_async_client"},
    ("README.md", "alice.create_collection(\"employee_records\""): {"client", "Principal", "Path"},  # the quick start's
    ("docs/diversity-budget.md", "enforce_diversity"): {"client", "c", "v"},
    ("docs/diversity-budget.md", "ExtractionBudget"): {"kept_from_memo", "memo_ids", "hb_ids"},
    ("docs/integrations.md", "from langchain_qdrant"): {"alice", "bob", "my_embeddings"},
    ("docs/integrations.md", "from llama_index.core"): {"alice", "bob", "docs", "my_embed_model", "nodes", "query"},
    ("docs/receipt-format.md", "ReceiptSigner(load_private_key"): {"client", "vector"},
    # a signature, imported by the page's API block
    ("docs/intent.md", "LLMIntentClassifier(base_url=None"): {"LLMIntentClassifier"},
}


def given_for(b: Block) -> set[str]:
    hits = [names for (page, marker), names in GIVEN.items() if page == b.page and marker in b.text]
    assert len(hits) <= 1, f"{b.where}: several GIVEN entries match"
    return hits[0] if hits else set()


def compile_block(b: Block) -> Any:
    return compile(b.text, b.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def free_names(tree: ast.AST) -> set[str]:
    """Names loaded but never bound anywhere in ``tree`` (flat: a block is a few lines)."""
    bound: set[str] = set()
    loaded: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return loaded - bound - set(dir(builtins))


def run_block(b: Block, ns: dict[str, Any]) -> dict[str, Any]:
    """Execute a block in ``ns``; a block with top-level ``await`` runs in a fresh event loop."""
    code = compile_block(b)
    result = eval(code, ns)  # noqa: S307 - the docs' own examples
    if inspect.iscoroutine(result):
        asyncio.run(result)
    return ns


# --- every Python block -------------------------------------------------------------------------

PY_BLOCKS = python_blocks()


@pytest.mark.parametrize("b", PY_BLOCKS, ids=[b.where for b in PY_BLOCKS])
def test_python_block_compiles_and_defines_what_it_uses(b):
    tree = ast.parse(b.text, b.where)  # a SyntaxError names the page and line
    compile_block(b)
    missing = free_names(tree) - given_for(b)
    assert not missing, (f"{b.where} uses {sorted(missing)} without defining or importing them; fix the "
                         "example, or register them in GIVEN if the prose says where they come from")


# Blocks no test here runs, and why; every other Python block must be run by a test below.
NOT_RUN = {
    ("docs/server.md", "url=\"https://qdrant.internal:6333\""): "needs a Qdrant server",
    ("docs/intent.md", "LLMIntentClassifier(base_url=None"): "a signature (needs an LLM endpoint); "
                                                               "test_intent_llm_signature_is_the_documented_one",
}


def test_every_python_block_is_run_or_excused():
    run = set(re.findall(r'block\("([^"]+)", "((?:[^"\\]|\\.)+)"\)', Path(__file__).read_text()))
    run = {(page, marker.replace('\\"', '"')) for page, marker in run}
    for b in PY_BLOCKS:
        keys = [k for k in run | set(NOT_RUN) if k[0] == b.page and k[1] in b.text]
        assert keys, f"{b.where}: no test runs this block; run it with block({b.page!r}, <marker>) or list it in NOT_RUN"


def _imports(tree: ast.AST) -> list[tuple[str, list[str]]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


@pytest.mark.parametrize("b", PY_BLOCKS, ids=[b.where for b in PY_BLOCKS])
def test_python_block_imports_exist(b):
    for module, names in _imports(ast.parse(b.text)):
        if not module.startswith("qdrant_guard") and importlib.util.find_spec(module.split(".")[0]) is None:
            pytest.skip(f"{module} is not installed")
        mod = importlib.import_module(module)
        for name in names:
            assert hasattr(mod, name), f"{b.where}: `from {module} import {name}`: {module} has no {name!r}"


# --- the README quick start, end to end -----------------------------------------------------------

def _readme_blocks() -> list[Block]:
    return fenced_blocks(README)


def _run_cli(capsys, argv: list[str]) -> tuple[int, str]:
    capsys.readouterr()
    rc = cli.main(argv)
    return rc, capsys.readouterr().out


def _cli(capsys, argv: list[str]) -> str:
    rc, out = _run_cli(capsys, argv)
    assert rc == 0, f"qdrant-guard {shlex.join(argv)} exited {rc}: {out}"
    return out


def _without_redirect(words: list[str]) -> tuple[list[str], str | None]:
    """A shell command's words before a ``> FILE`` stdout redirect, and FILE (None without one)."""
    if ">" not in words:
        return words, None
    i = words.index(">")
    assert len(words) == i + 2, f"`{shlex.join(words)}`: only a final `> FILE` is understood here"
    return words[:i], words[i + 1]


def _quick_start_commands() -> list[tuple[list[str], str | None]]:
    blocks = [b for b in _readme_blocks() if b.lang == "bash" and "credential issue" in b.text]
    assert len(blocks) == 1, "README: the key/credential set-up block is gone"
    cmds = [shlex.split(line, comments=True) for line in blocks[0].text.splitlines()]
    cmds = [c for c in cmds if c]
    assert all(c[0] == "qdrant-guard" for c in cmds)
    return [_without_redirect(c[1:]) for c in cmds]


def _quick_start_code() -> str:
    diff = [b for b in _readme_blocks() if b.lang == "diff"]
    assert len(diff) == 1, "README: the quick-start diff is gone"
    added = [line[2:] for line in diff[0].text.splitlines() if line.startswith("+")]
    assert added and all(not line.startswith("-") for line in added)
    return "\n".join(added) + "\n"


def _readme_policy() -> str:
    tomls = [b for b in _readme_blocks() if b.lang == "toml"]
    assert len(tomls) == 1
    return tomls[0].text


@pytest.fixture()
def quick_start(tmp_path, monkeypatch, capsys):
    """The README's set-up run as written in a fresh directory: keys, credential, policy."""
    monkeypatch.chdir(tmp_path)
    token = ""
    for argv, stdout_file in _quick_start_commands():
        out = _cli(capsys, argv)
        if stdout_file is not None:  # as the shell would: stdout, its newline included, to the file
            (tmp_path / stdout_file).write_text(out)
        if argv[:2] == ["credential", "issue"]:
            token = out.strip()
    assert token, "the README's commands issue no credential"
    (tmp_path / "policy.toml").write_text(_readme_policy())
    return tmp_path, token


def test_readme_quick_start_runs_as_written(quick_start, capsys):
    tmp, token = quick_start
    # Nothing is handed in: the diff reads the credential the set-up commands wrote (before, it
    # used a `credential_token` it never defined, and a file read as written kept its newline).
    ns: dict[str, Any] = {}
    exec(compile(_quick_start_code(), "README.md (quick start)", "exec"), ns)
    client = ns["client"]
    assert ns["credential_token"] == token
    assert isinstance(client, QdrantClient) and client.get_collections().collections == []
    client.close()
    # The audit log the policy names exists, and the README's audit commands read it.
    log = tmp / "audit.jsonl"
    assert log.exists()
    assert "OK:" in _cli(capsys, ["audit", "verify", str(log)])
    replay = _cli(capsys, ["audit", "replay", str(log), "--policy", "policy.toml"])
    assert "replayed 0 logged queries" in replay and "with redacted text" in replay  # "counted and skipped"


def test_readme_bench_command_reads_the_credential_the_quick_start_wrote(quick_start, capsys):
    # The README's first bench command names agent-7.cred; the set-up commands now write that file
    # (before, they printed the token and left the file for the reader to guess at). Run verbatim
    # but for smaller sizes, appended (argparse takes the last of a repeated option).
    benches = [line for b in _readme_blocks() if b.lang == "bash" for line in b.text.splitlines()
               if line.startswith("qdrant-guard bench ") and "--credential" in line]
    assert benches, "README: the bench command with --credential is gone"
    argv = shlex.split(benches[0], comments=True)[1:]
    assert "agent-7.cred" in argv
    out = _cli(capsys, argv + ["--points", "40", "--batch", "20", "--queries", "4", "--rounds", "1",
                               "--dim", "16", "--no-progress"])
    assert "writer agent-7@support, reader agent-7@support" in out and "guarded/raw" in out


def test_readme_policy_tells_a_new_user_how_to_write_an_unlisted_collection(quick_start):
    _, token = quick_start
    from qdrant_client import models

    assert re.search(r'unlisted = "strict" +# collections not listed: PII, readable by any verified agent, '
                     r"written by none", _readme_policy())
    ns: dict[str, Any] = {}
    exec(compile(_quick_start_code(), "README.md (quick start)", "exec"), ns)
    client = ns["client"]
    with pytest.raises(GuardRefusal) as exc:
        client.create_collection("notes", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    # The refusal used to name "allowed boundaries: []" and ask for a credential from one of them.
    assert "allowed boundaries" not in str(exc.value)
    assert 'Set owner = "<boundary>" in a [collections.notes] section' in exc.value.directive
    assert client.get_collections().collections == []
    client.close()


def test_readme_owner_set_up_runs_as_written(quick_start, capsys):
    # README says the quick start's support agent cannot create employee_records and that its owner
    # needs an hr credential; it now shows the command and the call, which must work as shown.
    from qdrant_client import models

    issue = [s for s in spans(README) if s.startswith("qdrant-guard credential issue") and "--boundary hr" in s]
    assert len(issue) == 1, "README: the hr credential command is gone"
    argv, stdout_file = _without_redirect(shlex.split(issue[0])[1:])
    assert stdout_file == "alice.cred"
    (quick_start[0] / stdout_file).write_text(_cli(capsys, argv))
    view = [s for s in spans(README) if s.startswith('client.with_principal(Principal("alice"')]
    assert len(view) == 1, "README: the owner's with_principal call is gone"
    ns: dict[str, Any] = {}
    exec(compile(_quick_start_code(), "README.md (quick start)", "exec"), ns)
    owner = eval(view[0], ns)
    owner.create_collection("employee_records", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    with pytest.raises(GuardRefusal) as exc:  # as README says, the support agent may not
        ns["client"].delete_collection("employee_records")
    assert exc.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert owner.collection_exists("employee_records")
    ns["client"].close()


def test_readme_first_write_and_read_runs_as_written(quick_start, capsys):
    # The quick start ended with a client and no call on it; the README now shows the first write
    # and read (h-walk). Run as written after the quick start, with alice.cred issued by the
    # README's own hr command; each print prints what its comment says.
    from qdrant_client import models

    issue = [s for s in spans(README) if s.startswith("qdrant-guard credential issue") and "--boundary hr" in s]
    argv, out_file = _without_redirect(shlex.split(issue[0])[1:])
    (quick_start[0] / out_file).write_text(_cli(capsys, argv))
    ns: dict[str, Any] = {}
    exec(compile(_quick_start_code(), "README.md (quick start)", "exec"), ns)
    b = block("README.md", "alice.create_collection(\"employee_records\"")
    capsys.readouterr()
    run_block(b, ns)
    printed = capsys.readouterr().out.splitlines()
    said = [line.split("# ", 1)[1].split(":")[0].strip() for line in b.text.splitlines() if line.startswith("print(")]
    assert printed == said
    # "a read outside hr gets that noised vector, never the one you sent"
    got = ns["client"].query_points("employee_records", query=ns["embedding"], limit=1, with_vectors=True).points[0]
    assert got.vector is not None and got.vector != ns["embedding"]
    assert ns["alice"].retrieve("employee_records", [1], with_vectors=True)[0].vector != ns["embedding"]
    assert isinstance(ns["hit"], models.ScoredPoint)
    ns["client"].close()


def test_readme_embedder_example_runs_as_written(quick_start, capsys, monkeypatch):
    # The README named `embedder=` but never said what it takes, nor which embedder to try it with:
    # a new user read client.py's docstring and hashing_embedder.py to write a models.Document
    # (h-walk3). Run as written after the first write and read, whose client it says to close;
    # the embedder must see the redacted, generalised text, never the SSN or the name.
    from qdrant_guard.hashing_embedder import HashingEmbedder

    issue = [s for s in spans(README) if s.startswith("qdrant-guard credential issue") and "--boundary hr" in s]
    argv, out_file = _without_redirect(shlex.split(issue[0])[1:])
    (quick_start[0] / out_file).write_text(_cli(capsys, argv))
    ns: dict[str, Any] = {}
    exec(compile(_quick_start_code(), "README.md (quick start)", "exec"), ns)
    run_block(block("README.md", "alice.create_collection(\"employee_records\""), ns)
    ns["client"].close()
    seen: list[str] = []
    real_call = HashingEmbedder.__call__
    monkeypatch.setattr(HashingEmbedder, "__call__", lambda self, texts: (seen.extend(texts), real_call(self, texts))[1])
    b = block("README.md", "embedder=HashingEmbedder(384)")
    capsys.readouterr()
    ns2 = run_block(b, {})
    printed = capsys.readouterr().out.splitlines()
    said = [line.split("# ", 1)[1].strip() for line in b.text.splitlines() if line.startswith("print(")]
    assert printed == said
    # The text the README says the embedder got, which shows the name it misses at a sentence start.
    shown = re.search(r"The embedder was called with `([^`]+)`", " ".join(README.read_text().split()))
    assert shown and seen == [shown.group(1)], seen
    assert "123-45-6789" not in seen[0] and "Roe" not in seen[0]
    for claim in ("takes a list of texts, even for one text", "refused with `InvalidVectorError`",
                  "`utility.embedding_model`"):  # the README's embedder paragraph in full
        assert claim in " ".join((DOCS / "quick-start.md").read_text().split()), claim
    ns2["client"].close()


def test_readme_quick_start_works_the_same_way_async(quick_start):
    _, token = quick_start
    assert "`AsyncQdrantClient` works the same way" in README.read_text()
    code = _quick_start_code().replace("QdrantClient", "AsyncQdrantClient")
    ns: dict[str, Any] = {}
    exec(compile(code, "README.md (quick start, async)", "exec"), ns)

    async def use(client):
        try:
            return (await client.get_collections()).collections
        finally:
            await client.close()

    assert asyncio.run(use(ns["client"])) == []


def test_readme_quoted_refusal_is_the_one_raised(quick_start, capsys):
    tmp, support_token = quick_start
    quoted = [b for b in _readme_blocks() if b.text.startswith("GuardRefusal: ")]
    assert len(quoted) == 1, "README: the quoted GuardRefusal is gone"
    expected = " ".join(line.strip() for line in quoted[0].text.splitlines() if line.strip())
    # The README's policy noises support's writes; the refusal it quotes is the one without that.
    policy = _readme_policy().replace("noise_on_write = true", "noise_on_write = false")
    assert policy != _readme_policy()
    (tmp / "policy.toml").write_text(policy)
    hr_token = _cli(capsys, ["credential", "issue", "--authority", "keys/hr-authority.key",
                             "--agent", "alice", "--boundary", "hr"]).strip()
    from qdrant_client import models

    owner = QdrantClient(path="./store", guard="policy.toml", principal=Principal("alice", "hr", hr_token))
    owner.create_collection("employee_records", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    support = owner.with_principal(Principal("agent-7", "support", support_token))
    with pytest.raises(GuardRefusal) as exc:
        support.upsert("employee_records", [models.PointStruct(id=1, vector=[0.5, 0.5, 0.5, 0.5])])
    owner.close()
    assert f"GuardRefusal: {exc.value}" == expected
    # "carrying the verdict, a directive ..., the point ids at fault and the manifest digest (the
    # hash of the audit-log entry that records the decision)"
    last = json.loads((tmp / "audit.jsonl").read_text().splitlines()[-1])
    assert (exc.value.verdict, exc.value.point_ids) == ("NOISE_REQUIRED", [1]) and exc.value.directive
    assert exc.value.manifest_digest == last["hash"] and last["record"]["verdict"] == "NOISE_REQUIRED"
    # "with four recorded elements" (the README's audit paragraph, now docs/verdicts.md)
    four = re.search(r"four recorded elements \(([^)]*)\)", " ".join((DOCS / "verdicts.md").read_text().split())).group(1)
    assert set(re.findall(r"`(\w+)`", four)) <= set(last["record"]["manifest"])


def test_readme_receipt_and_audit_commands_do_what_it_says(quick_start, capsys):
    tmp, support_token = quick_start
    from qdrant_client import models

    hr_token = _cli(capsys, ["credential", "issue", "--authority", "keys/hr-authority.key",
                             "--agent", "alice", "--boundary", "hr"]).strip()
    owner = QdrantClient(path="./store", guard="policy.toml", principal=Principal("alice", "hr", hr_token))
    owner.create_collection("employee_records", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    support = owner.with_principal(Principal("agent-7", "support", support_token))
    support.upsert("employee_records", [models.PointStruct(id=1, vector=[0.5, 0.5, 0.5, 0.5])])  # noised + receipt
    owner.upsert("employee_records", [models.PointStruct(id=2, vector=[0.1, 0.5, 0.5, 0.5])])  # raw in boundary
    owner.close()

    # The README's receipt and audit paragraph in full lives in docs/verdicts.md.
    verdicts = DOCS / "verdicts.md"
    text = " ".join(prose(verdicts).split())
    shown = [s for s in spans(verdicts) if s.startswith("qdrant-guard receipt verify ")]
    assert len(shown) == 1, "docs/verdicts.md: the receipt verify command is gone"
    rc, out = _run_cli(capsys, shlex.split(shown[0])[1:] + ["--verbose"])
    reports = {r["id"]: r for r in map(json.loads, out.splitlines()[:-1])}
    assert reports["1"]["ok"] and reports["2"]["reason"] == "missing_receipt" and "`missing_receipt`" in text
    assert rc == 1 and "any failure makes the exit status 1" in text

    log = tmp / "audit.jsonl"
    with open(log, "a") as fh:
        fh.write('{"seq": 9')  # a writer killed mid-entry
    rc, out = _run_cli(capsys, ["audit", "verify", str(log)])
    assert rc == 1 and "torn_tail" in out
    _cli(capsys, ["audit", "repair", str(log), "--signing-key", "keys/guard.key"])
    assert "OK:" in _cli(capsys, ["audit", "verify", str(log), "--key", "keys/guard.key.pub"])


def test_receipt_page_own_receipt_example_writes_under_the_readme_policy(quick_start, capsys):
    import numpy as np
    from qdrant_client import models

    from qdrant_guard.audit import verify_audit_file

    tmp, token = quick_start
    _cli(capsys, ["keys", "new", "--out", "keys/support-agent.key"])
    policy = tmp / "policy.toml"
    policy.write_text(policy.read_text() + '\n[receipts]\ntrusted_keys = ["keys/support-agent.key.pub"]\n')
    hr_token = _cli(capsys, ["credential", "issue", "--authority", "keys/hr-authority.key", "--agent", "alice",
                             "--boundary", "hr"]).strip()
    owner = QdrantClient(path="./store", guard="policy.toml", principal=Principal("alice", "hr", hr_token))
    owner.create_collection("employee_records",
                            vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
    client = owner.with_principal(Principal("agent-7", "support", token))
    rng = np.random.default_rng(0)
    vector = rng.normal(size=8).astype(np.float32)
    b = block("docs/receipt-format.md", "ReceiptSigner(load_private_key")

    def last_verdict() -> str:
        lines = (tmp / "audit.jsonl").read_text().splitlines()
        return json.loads(lines[-1])["record"]["verdict"]

    ns = run_block(b, {"client": client, "vector": vector})
    assert last_verdict() == Verdict.ALLOW_RECEIPTED.value
    # Local mode renormalises a cosine vector in float32 (an ulp either way now and then); the
    # receipt commits to the 2^-20 grid, so what was stored is within half a step of `final`.
    stored = owner.retrieve("employee_records", [7], with_vectors=True)[0].vector
    assert np.allclose(stored, ns["final"], rtol=0, atol=2.0**-21)
    # What the page says the guard refuses: a receipt for another point, and weaker noise.
    with pytest.raises(GuardRefusal) as exc:
        run_block(Block(b.page, b.line, b.lang, b.text.replace("id=7,", "id=8,")), {"client": client, "vector": vector})
    assert exc.value.verdict == Verdict.INVALID_RECEIPT.value
    with pytest.raises(GuardRefusal) as exc:
        run_block(Block(b.page, b.line, b.lang, b.text.replace("epsilon=1.0", "epsilon=1.5")),
                  {"client": client, "vector": vector})
    assert exc.value.verdict == Verdict.NOISE_REQUIRED.value
    owner.close()
    assert verify_audit_file(tmp / "audit.jsonl").ok


def test_readme_demo_output_is_what_the_demo_prints(tmp_path, capsys):
    from qdrant_guard.demo import run_demo

    shown = [b for b in _readme_blocks() if b.text.startswith("qdrant_guard demo (")]
    assert len(shown) == 1, "README: the demo output block is gone"
    assert run_demo(workdir=str(tmp_path / "demo")) == 0
    printed = capsys.readouterr().out.splitlines()
    want = shown[0].text.splitlines()
    assert len(printed) == len(want), "the demo prints another number of lines than the README shows"
    assert printed[0].startswith("qdrant_guard demo (kernels: ")
    for got, doc in zip(printed[1:], want[1:]):
        assert got.rstrip() == doc.rstrip(), f"README demo line differs:\n  README: {doc}\n  demo:   {got}"


# --- blocks that run on local-mode Qdrant ---------------------------------------------------------

def _kit_policy(kit, toml_text: str) -> str:
    """A policy file: the kit's boundaries and keys, then a docs page's collection section."""
    head = f'signing_key = "{kit.guard_key_path}"\naudit_log = "audit.jsonl"\n'
    for b, pub in kit.authority_pub.items():
        head += f'[boundaries.{b}]\nauthority_keys = ["{pub}"]\n'
    return head + toml_text


def test_readme_integration_block_runs(tmp_path):
    pytest.importorskip("langchain_qdrant")
    pytest.importorskip("llama_index.vector_stores.qdrant")
    from integration_embeddings import DIM, LCHashingEmbeddings
    from qdrant_client import models

    from qdrant_guard import AsyncQdrantClient

    kit = make_kit(tmp_path)
    cfg = kit.config({"kb": {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "page_content",
                             "source_field": "metadata.source"}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    aclient = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    b = block("README.md", "from langchain_qdrant import QdrantVectorStore")
    reader = owner.with_principal(kit.principal("bob", "support"))
    ns = run_block(b, {"guarded_client": reader, "embeddings": LCHashingEmbeddings(), "guarded_async_client": aclient})
    assert ns["store"].client is reader and ns["vector_store"]._client is reader


def _small_collection():
    import numpy as np
    from qdrant_client import QdrantClient as RawClient
    from qdrant_client import models

    client = RawClient(":memory:")
    client.create_collection("docs", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
    rng = np.random.default_rng(0)
    client.upsert("docs", [models.PointStruct(id=i, vector=rng.normal(size=8).tolist(), payload={"source": f"s{i % 3}"})
                           for i in range(40)])
    return client, rng.normal(size=8).tolist()


def test_diversity_example_runs():
    client, v = _small_collection()
    ns = run_block(block("docs/diversity-budget.md", "enforce_diversity"), {"client": client, "c": "docs", "v": v})
    out = ns["out"]
    assert len(out.kept) == 10 and max(out.per_source.values()) <= 4 and out.min_unique_met


def test_budget_example_runs(tmp_path):
    b = block("docs/diversity-budget.md", "ExtractionBudget")
    assert "sqlite:////var/lib/qg/budget.db" in b.text
    b = Block(b.page, b.line, b.lang, b.text.replace("/var/lib/qg", str(tmp_path)))

    @dataclass
    class Hit:
        id: int

    ns = run_block(b, {"kept_from_memo": [Hit(i) for i in range(8)], "memo_ids": list(range(8, 16)),
                       "hb_ids": [100, 101]})
    assert ns["released"] == [0, 1, 2, 3, 4]  # floor(20 * 0.25)
    assert ns["ds"]["board-memo"].admitted == [] and ns["ds"]["handbook"].admitted == [100, 101]


def test_intent_example_runs_and_labels_as_shown():
    ns = run_block(block("docs/intent.md", "load_classifier(\"builtin\")"), {})
    assert ns["res"].label == "suspicious" and ns["res"].features


def test_intent_llm_signature_is_the_documented_one():
    from qdrant_guard.intent import LLMIntentClassifier

    call = ast.parse(block("docs/intent.md", "LLMIntentClassifier(base_url=None").text).body[0].value
    shown = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    params = inspect.signature(LLMIntentClassifier).parameters
    assert shown == {n: p.default for n, p in params.items()}


def test_langchain_example_runs_with_its_policy(tmp_path, monkeypatch):
    pytest.importorskip("langchain_qdrant")
    from integration_embeddings import TEXTS, LCHashingEmbeddings

    monkeypatch.chdir(tmp_path)
    kit = make_kit(tmp_path)
    tomls = [b for b in fenced_blocks(DOCS / "integrations.md") if b.lang == "toml"]
    (tmp_path / "policy.toml").write_text(_kit_policy(kit, tomls[0].text))
    ns = run_block(block("docs/integrations.md", "from langchain_qdrant"),
                   {"alice": kit.principal("alice", "hr"), "bob": kit.principal("bob", "support"),
                    "my_embeddings": LCHashingEmbeddings(384)})
    ns["store"].add_texts(TEXTS, metadatas=[{"source": f"doc{i}"} for i in range(len(TEXTS))])
    # With the page's policy the source caps read langchain's nested metadata: 4 sources, 4 hits.
    assert len(ns["reader"].similarity_search("refund policy", k=4, query_text="refund policy")) == 4


# llama-index creates a payload index, which local mode ignores with this warning
@pytest.mark.filterwarnings("ignore:Payload indexes have no effect")
def test_llamaindex_example_runs_with_its_policy(tmp_path, monkeypatch):
    pytest.importorskip("llama_index.vector_stores.qdrant")
    from integration_embeddings import LIHashingEmbedding
    from llama_index.core import Document
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import VectorStoreQuery

    monkeypatch.chdir(tmp_path)
    kit = make_kit(tmp_path)
    tomls = [b for b in fenced_blocks(DOCS / "integrations.md") if b.lang == "toml"]
    (tmp_path / "policy.toml").write_text(_kit_policy(kit, tomls[1].text))
    emb = LIHashingEmbedding()
    node = TextNode(text="payroll runs on fridays", metadata={"source": "hr"},
                    embedding=emb.get_text_embedding("payroll runs on fridays"))
    ns = run_block(block("docs/integrations.md", "from llama_index.core"),
                   {"alice": kit.principal("alice", "hr"), "bob": kit.principal("bob", "support"),
                    "my_embed_model": emb, "nodes": [node],
                    "docs": [Document(text="refund policy for damaged goods", metadata={"source": "handbook"})],
                    "query": VectorStoreQuery(query_embedding=emb.get_query_embedding("payroll"), similarity_top_k=2)})
    assert ns["index"] is not None


# --- policies, keys and defaults ------------------------------------------------------------------

def _policy_fields() -> dict[str, set[str]]:
    """Every policy key, by the section it lives in ('' for the top level and collections)."""
    from pydantic import BaseModel

    out: dict[str, set[str]] = {}

    def walk(model: type[BaseModel], section: str) -> None:
        for name, f in model.model_fields.items():
            key = f.alias or name
            out.setdefault(section, set()).add(key)
            for t in (f.annotation, *typing.get_args(f.annotation)):  # a section, or a table of them
                if isinstance(t, type) and issubclass(t, BaseModel):
                    walk(t, key)

    walk(GuardConfig, "")
    walk(CollectionPolicy, "")
    return out


def test_policy_keys_named_in_the_docs_exist():
    fields = _policy_fields()
    every = set().union(*fields.values())
    bad = []
    # Pages whose `name = value` spans are policy settings (the others also hold formulas).
    # The README's moved sections (2026-12-08: features, quick-start, switching, verdicts, retrieval-defences,
    # privacy-utility, performance, environment) are checked as the README was.
    for page in (README, *(DOCS / n for n in ("atomicity.md", "diversity-budget.md", "eval.md", "integrations.md",
                                               "security-testing.md", "server.md", "threat-model.md", *README_PARTS))):
        for span in spans(page):
            m = re.fullmatch(r"([a-z_]+(?:\.[a-z_]+)?) = .+", span)
            if not m or span.startswith("key = "):  # threat-model quotes a code line `key = win32api...`
                continue
            *section, key = m.group(1).split(".")
            ok = key in fields.get(section[0], set()) if section else key in every
            if not ok:
                bad.append(f"{rel(page)}: `{span}`")
    assert not bad, "policy keys that do not exist:\n  " + "\n  ".join(bad)


def test_toml_examples_validate():
    from qdrant_guard import keys

    for page in (README, DOCS / "integrations.md"):
        for b in fenced_blocks(page):
            if b.lang != "toml":
                continue
            data = tomllib.loads(b.text)
            # Key files are made by the quick start (run above); here only the schema is checked. A
            # collection-only section (integrations.md) names the hr and support boundaries.
            names = data.get("boundaries") or {"hr": {}, "support": {}}
            data["boundaries"] = {n: {**v, "authority_keys": [keys.public_key_to_str(keys.generate_keypair()[1])]}
                                  for n, v in names.items()}
            config_from_dict(data, source=b.where)


def _default_of(key: str) -> Any:
    """The default of a collection or top-level policy key, by its (possibly dotted) name."""
    *section, name = key.split(".")
    for model in (CollectionPolicy(), GuardConfig()):
        obj: Any = model
        for part in section:
            obj = getattr(obj, part, None)
        if obj is not None and name in type(obj).model_fields:
            return getattr(obj, name)
    raise AssertionError(f"{key!r} is no policy key")


def test_defaults_stated_in_prose_are_the_policy_defaults():
    stated = []
    for page in PAGES:
        if page.name in MEASUREMENTS or page.name == "policy.md":
            continue
        text = " ".join(prose(page).split())
        for m in re.finditer(r"default (?:policy )?\(?`([a-z_.]+) = ([^`]+)`"
                             r"|`([a-z_.]+) = ([^`]+)`,? (?:the|by) default", text):
            key, value = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            stated.append((rel(page), key, value))
            assert _default_of(key) == tomllib.loads(f"v = {value}")["v"], (
                f"{rel(page)} says the default is `{key} = {value}`; policy.py: {_default_of(key)!r}")
    assert len(stated) >= 3, stated


def _readme_defaults_table() -> dict[str, str]:
    text = (DOCS / "retrieval-defences.md").read_text()  # the README's table, moved there 2026-12-08
    start = text.index("| layer | default on sensitive collections |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1]
    return rows


def test_readme_defaults_are_the_policy_defaults():
    pol = CollectionPolicy()
    rows = _readme_defaults_table()
    fields = {**{k: getattr(pol.query, k) for k in type(pol.query).model_fields},
              **{k: getattr(pol.diversity, k) for k in type(pol.diversity).model_fields},
              **{k: getattr(pol.intent, k) for k in type(pol.intent).model_fields},
              **{k: getattr(pol, k) for k in type(pol).model_fields}}
    stated = [m for cell in rows.values() for m in re.findall(r"`([a-z_]+) = ([^`]+)`", cell)]
    assert stated, "README defaults table: no `key = value` found"
    for key, value in stated:
        assert key in fields, f"README defaults table names {key!r}, which is no policy key"
        assert fields[key] == tomllib.loads(f"v = {value}")["v"], f"README says {key} = {value}, policy: {fields[key]!r}"
    # The same table in words.
    structural = rows["structural validation (native)"]
    assert f"{pol.query.max_chars:,}-character cap" in structural
    assert f"{pol.query.max_tokens} whitespace tokens" in structural
    assert f"repetition ratio ≤ {pol.query.max_repetition}" in structural
    intent = rows["intent (built-in, offline)"]
    assert pol.intent.enabled and pol.intent.classifier == "builtin" and pol.intent.fail_closed
    assert f"blocks `{pol.intent.block[0]}` and `{pol.intent.block[1]}` at confidence ≥ {pol.intent.min_confidence}" in intent
    diversity = rows["per-source diversity"]
    assert f"over-fetch × {pol.diversity.overfetch_factor:g}" in diversity
    budget = rows["extraction budget"]
    assert pol.diversity.max_source_coverage is None and "off until `max_source_coverage` is set" in budget
    assert f"sliding {pol.diversity.window_s / 3600:g} h window" in budget


def test_readme_privacy_paragraph_is_the_default_policys_calibration():
    import numpy as np

    from qdrant_guard import noise

    text = " ".join(README.read_text().split())
    m = re.search(r"At the default PII policy \(Gaussian, epsilon ([\d.]+) at radius ([\d.]+), delta ([\de.-]+), "
                  r"(\d+)-d\) sigma is ([\d.]+) per coordinate; between two arbitrary texts the same noise gives "
                  r"epsilon ≈ ([\d,]+)\.", text)
    assert m, "README: the privacy paragraph changed shape; update this test"
    eps, radius, delta, dim, sigma, far = m.groups()
    pol = CollectionPolicy().noise
    assert (pol.mechanism, pol.epsilon, pol.radius, pol.delta) == ("gaussian", float(eps), float(radius), float(delta))
    _, params = noise.privatize(np.full((1, int(dim)), 0.01), mechanism=pol.mechanism, epsilon=pol.epsilon,
                                radius=pol.radius, delta=pol.delta, clip_norm=pol.clip_norm)
    assert f"{params.scale:.{len(sigma) - 2}f}" == sigma
    # any two clipped inputs are at most 2 * clip_norm apart
    lo, hi = 1.0, 1e6  # delta falls as epsilon grows: bisect for the epsilon with the policy's delta
    while hi - lo > 1e-3:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if noise.analytic_gaussian_delta(params.scale, mid, 2 * pol.clip_norm) > pol.delta else (lo, mid)
    far_eps = lo
    assert round(far_eps, -1) == float(far.replace(",", ""))


@pytest.mark.parametrize("page", [README, DOCS / "verdicts.md"], ids=rel)
def test_readme_verdict_table_lists_every_verdict(page):
    # The README keeps a short table; docs/verdicts.md the full one. Both name every verdict.
    text = page.read_text()
    start = text.index("| verdict | when |")
    table = text[start:text.index("\n\n", start)]
    named = set(re.findall(r"^\| ([^|]+) \|", table, flags=re.M)[1:])  # after the header
    named = {v for cell in named for v in re.findall(r"`([A-Z_]+)`", cell)}
    assert named == {v.value for v in Verdict}


# --- commands -------------------------------------------------------------------------------------

def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _parser_for(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The ``qdrant-guard`` (sub)parser that ``words`` select, and the words after the subcommands."""
    from qdrant_guard.evaluation import build_parser as eval_parser

    if words[:1] == ["eval"]:
        return eval_parser(), words[1:]
    p, i = cli.build_parser(), 0
    while i < len(words) and words[i] in _subparsers(p):  # FILE, LOG: positional placeholders
        p, i = _subparsers(p)[words[i]], i + 1
    assert not _subparsers(p), f"`qdrant-guard {' '.join(words)}`: incomplete subcommand"
    return p, words[i:]


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {s for a in p._actions for s in a.option_strings}


def _all_options() -> set[str]:
    from qdrant_guard.evaluation import build_parser as eval_parser

    out = _options(eval_parser())
    todo = [cli.build_parser()]
    while todo:
        p = todo.pop()
        out |= _options(p)
        todo.extend(_subparsers(p).values())
    return out


def _invocations() -> list[tuple[str, str, bool]]:
    """(where, command after `qdrant-guard`, whether it is shown to be run verbatim)."""
    out = []
    for page in PAGES:
        for b in fenced_blocks(page):
            if b.lang in ("", "bash", "sh", "console"):
                for line in b.text.splitlines():
                    if line.startswith("qdrant-guard "):
                        out.append((b.where, line[len("qdrant-guard "):], True))
        for span in spans(page):
            m = re.match(r"qdrant-guard ([a-z][^`]*)$", span)
            if m and not re.search(r"\bv1\b", span):  # signature domain strings, not commands
                out.append((rel(page), m.group(1), False))
    return out


INVOCATIONS = _invocations()


@pytest.mark.parametrize("where,command,verbatim", INVOCATIONS, ids=[f"{w} {c}"[:80] for w, c, _ in INVOCATIONS])
def test_documented_command_exists(where, command, verbatim):
    words, _ = _without_redirect(shlex.split(command, comments=True))
    parser, rest = _parser_for(words)
    known = _options(parser)
    for w in rest:
        opt = w.strip("[]").split("=")[0]
        if opt.startswith("--"):
            assert opt in known, f"{where}: `qdrant-guard {command}`: {opt} is not an option of {parser.prog}"
    if verbatim and "[" not in command and not command.startswith("eval"):
        # shown as a command to type: it must parse (positional placeholders such as FILE parse too)
        try:
            parser.parse_args(rest)
        except SystemExit as exc:
            pytest.fail(f"{where}: `qdrant-guard {command}` does not parse (exit {exc.code})")
    if verbatim and command.startswith("eval"):
        parser.parse_args(rest)


def test_options_named_alone_exist():
    known = _all_options() | {"--dataset"}  # python -m qdrant_guard.intent_train --dataset (docs/intent.md)
    bad = []
    for page in PAGES:
        if page.name in MEASUREMENTS or page.name == "threat-model.md":  # it quotes curl's options
            continue
        for span in spans(page):
            if span.startswith(("qdrant-guard ", "python ", "pytest ")):
                continue
            for opt in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", span):
                if opt not in known:
                    bad.append(f"{rel(page)}: {opt} in `{span}`")
    assert not bad, "options the qdrant-guard command does not have:\n  " + "\n  ".join(bad)


def test_documented_option_values_parse():
    from qdrant_guard.evaluation import build_parser as eval_parser
    from qdrant_guard.utility import add_calibrate_arguments

    cal = argparse.ArgumentParser()
    add_calibrate_arguments(cal)
    base = ["--path", "x", "--collection", "c", "--queries", "q.jsonl", "--out", "r.json"]
    assert cal.parse_args(base + ["--clip-norm", "none"]).clip_norm is None  # docs/eval.md
    # "--query-text generalized by default" without --policy; absent from the namespace, so that
    # --policy can tell a given mode from the default (run_calibrate_cli resolves it).
    assert not hasattr(cal.parse_args(base), "query_text")
    assert cal.parse_args(base + ["--query-text", "generalized-unredacted"]).query_text == "generalized-unredacted"
    assert eval_parser().parse_args(["--no-generalize-identifiers"]).generalize_identifiers is False
    assert eval_parser().parse_args([]).seed == 0  # `make eval` = `qdrant-guard eval --seed 0 --out docs/eval-report`


def test_make_targets_modules_and_cited_files_exist():
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), flags=re.M))
    bad = []
    for page in PAGES:
        text = page.read_text()
        for target in re.findall(r"`(?:[A-Z_]+=\S+ )*make ([a-z-]+)`", text) + re.findall(r"^make ([a-z-]+)", text, re.M):
            if target not in targets:
                bad.append(f"{rel(page)}: make {target}")
        for mod in re.findall(r"python -m ([\w.]+)", text):
            if importlib.util.find_spec(mod) is None:
                bad.append(f"{rel(page)}: python -m {mod}")
        for path, test in re.findall(r"((?:tests|bench|scripts|fuzz|native|docs)/[\w./-]+\.\w+)(?:::(\w+))?", text):
            found = [p for p in (ROOT / path, DOCS / path) if p.exists()]
            if not found:
                bad.append(f"{rel(page)}: {path} does not exist")
            elif test and not re.search(rf"def {test}\b", found[0].read_text()):
                bad.append(f"{rel(page)}: {path} has no {test}")
        if page.name in MEASUREMENTS:
            continue
        for test in re.findall(r"`(test_\w+)`", text):
            if not any(re.search(rf"def {test}\b", p.read_text()) for p in (ROOT / "tests").glob("*.py")):
                bad.append(f"{rel(page)}: no test named {test}")
    assert not bad, "cited but missing:\n  " + "\n  ".join(bad)


# --- public names ---------------------------------------------------------------------------------

def _resolve(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            fields = getattr(obj, "__dataclass_fields__", {})
            if p in fields and not hasattr(obj, p):
                obj = None  # a dataclass field without a default: named on the class, set per instance
                break
            if not hasattr(obj, p):
                return False
            obj = getattr(obj, p)
        return True
    return False


def test_qualified_names_in_the_docs_exist():
    bad = []
    for page in PAGES:
        for span in spans(page):
            for name in re.findall(r"\bqdrant_guard(?:\.\w+)+", span):
                if not _resolve(name):
                    bad.append(f"{rel(page)}: `{name}`")
    assert not bad, "names the docs give that do not exist:\n  " + "\n  ".join(bad)


# Unqualified API names per page, resolved in the modules the page documents. Names of other
# libraries, the standard library and prose are the exceptions listed.
PAGE_MODULES: dict[str, tuple[str, ...]] = {
    "README.md": ("qdrant_guard", "qdrant_guard.client", "qdrant_guard.noise"),
    **{f"docs/{n}": ("qdrant_guard", "qdrant_guard.client", "qdrant_guard.noise") for n in README_PARTS},
    "docs/diversity-budget.md": ("qdrant_guard.diversity", "qdrant_guard.budget", "qdrant_guard.budget.ExtractionBudget",
                                 "qdrant_guard.budget.RedisBudgetStore", "qdrant_guard.budget.MemoryBudgetStore",
                                 "qdrant_guard.errors"),
    "docs/eval.md": ("qdrant_guard.utility", "qdrant_guard.utility.UtilityRecord", "qdrant_guard.noise",
                     "qdrant_guard.detect", "qdrant_guard.errors"),
    "docs/integrations.md": ("qdrant_guard",),
    "docs/atomicity.md": ("qdrant_guard",),
    "docs/server.md": ("qdrant_guard",),
}
FOREIGN = {
    "InferenceObject", "NearestQuery", "TextQuery", "TypeError", "ValueError", "KeyboardInterrupt", "ClearPayload",
    "OverwritePayload", "UpdateVectorsOperation", "Filter", "HasId", "MatchValue", "QdrantClient", "QdrantVectorStore",
    "RetrievalMode", "VectorStoreQuery", "default_rng", "getrandom", "ceil", "floor", "min", "max", "str", "reset",
    "query", "aquery", "similarity_search", "create_payload_index", "classify", "to_json", "from_json",
    "pydoc_data", "asyncio", "client", "models", "qdrant_client", "langchain_qdrant", "llama_index", "aclient",
    "store", "record", "e", "i", "detect", "AsyncQdrantClient",
}


@pytest.mark.parametrize("page", sorted(PAGE_MODULES))
def test_api_names_of_a_page_exist(page):
    objs = _page_objects(page)
    bad = []
    for span in spans(ROOT / page):
        m = re.match(r"^([A-Za-z_][\w.]*)(\(|$)", span)
        if not m or m.group(1).startswith("qdrant_guard."):
            continue
        name = m.group(1)
        looks_api = m.group(2) == "(" or re.search(r"[a-z][A-Z]|^[A-Z][a-z]+[A-Z]", name) or name.endswith("Error")
        if not looks_api or name.split(".")[0] in FOREIGN or name in FOREIGN:
            continue
        head, *rest = name.split(".")
        if not any(hasattr(o, head) for o in objs):
            bad.append(name)
            continue
        obj = next(getattr(o, head) for o in objs if hasattr(o, head))
        for r in rest:
            if not hasattr(obj, r) and r not in getattr(obj, "__dataclass_fields__", {}):
                bad.append(name)
                break
            obj = getattr(obj, r, None)
    assert not bad, f"{page} names {sorted(set(bad))}, which {', '.join(PAGE_MODULES[page])} do not have"


def _documented_signature(text: str, name: str) -> list[tuple[str, Any, Any]]:
    """The signature a page gives as `name(...) -> T` (possibly over several lines), as Python."""
    m = re.search(rf"`{name}\((.*?)\)(?: -> \w+)?`", text.replace("\n", " "), flags=re.S)
    assert m, f"no `{name}(...)` signature found"
    fn = ast.parse(f"def {name}({m.group(1)}): pass").body[0]
    args = fn.args
    params = []
    positional = args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for a, d in zip(positional, defaults):
        params.append((a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, d))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        params.append((a.arg, inspect.Parameter.KEYWORD_ONLY, d))
    return params


def test_calibrate_signature_is_the_documented_one():
    from qdrant_guard import utility

    shown = _documented_signature((DOCS / "eval.md").read_text(), "calibrate")
    real = inspect.signature(utility.calibrate).parameters
    assert [n for n, _, _ in shown] == list(real), "docs/eval.md: calibrate's parameters differ"
    for name, kind, default in shown:
        assert real[name].kind == kind, f"docs/eval.md: calibrate's {name} is {real[name].kind.description}"
        want = inspect.Parameter.empty if default is None else (
            getattr(utility, default.id) if isinstance(default, ast.Name) else ast.literal_eval(default))
        assert real[name].default == want, f"docs/eval.md: calibrate({name}=...) defaults to {real[name].default!r}"


def test_calibrate_key_is_needed_as_eval_page_says(tmp_path, capsys):
    import numpy as np
    from qdrant_client import QdrantClient as RawClient
    from qdrant_client import models

    from qdrant_guard import ConfigError

    text = " ".join(prose(DOCS / "eval.md").split())
    assert "`--key` signs the record: pass the guard's `signing_key`" in text
    assert 'raises `ConfigError` ("does not verify against the trusted keys") on every noised write' in text
    kit = make_kit(tmp_path)
    raw = RawClient(path=str(tmp_path / "staging"))
    raw.create_collection("docs", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 8))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    raw.upsert("docs", [models.PointStruct(id=i, vector=x[i].tolist()) for i in range(40)])
    raw.close()
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(x[i].tolist()) + "\n" for i in range(20)))
    for signed in (False, True):
        out = tmp_path / f"record-{signed}.json"
        _cli(capsys, ["calibrate", "--path", str(tmp_path / "staging"), "--collection", "docs", "--queries",
                      str(tmp_path / "q.jsonl"), "--out", str(out), "--epsilons", "1", "--threshold", "0.9",
                      "--no-progress"] + (["--key", str(kit.guard_key_path)] if signed else []))
        cfg = kit.config({"kb": {"class": "PII", "owner": "hr", "utility": {"record": str(out)}}})
        client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        client.create_collection("kb", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
        write = lambda: client.upsert("kb", [models.PointStruct(id=1, vector=x[0].tolist())])  # noqa: E731
        if signed:
            write()
        else:
            with pytest.raises(ConfigError, match="does not verify against the trusted keys"):
                write()


def test_diversity_page_store_specs_work(tmp_path, monkeypatch):
    from qdrant_guard import budget

    text = " ".join(prose(DOCS / "diversity-budget.md").split())
    specs = re.search(r"`make_store\(([^`]*)\)`", text).group(1).split(" | ")
    kinds = {"None": "MemoryBudgetStore", "memory": "MemoryBudgetStore", "sqlite": "SqliteBudgetStore",
             "redis": "RedisBudgetStore"}  # the Redis store connects at its first admission
    monkeypatch.chdir(tmp_path)
    for spec in specs:
        value = None if spec == "None" else (ast.literal_eval(spec).replace("/abs.db", str(tmp_path / "abs.db"))
                                             .replace("host:port", "127.0.0.1:6379"))
        store = budget.make_store(value)
        assert type(store).__name__ == kinds[spec.strip('"').split(":")[0]], spec
    assert len(specs) == 5 and (tmp_path / "rel.db").exists() and (tmp_path / "abs.db").exists()


def test_diversity_page_worked_examples_hold():
    from qdrant_guard.budget import ExtractionBudget, MemoryBudgetStore
    from qdrant_guard.diversity import overfetch_limit, source_cap

    text = " ".join(prose(DOCS / "diversity-budget.md").split())
    examples = re.findall(r"`(source_cap\([\d., ]+\)) = (\d+)`", text)
    assert len(examples) >= 2
    for call, value in examples:
        assert eval(call, {"source_cap": source_cap}) == int(value), f"docs/diversity-budget.md: {call} = {value}"
    assert "`source_cap(100, 0.57)` is 57" in text and source_cap(100, 0.57) == 57
    assert "a 3-chunk source at coverage 0.25 has a cap of 0" in text
    assert ExtractionBudget(MemoryBudgetStore()).cap_for(3, 0.25) == 0
    assert "`overfetch_limit(limit, factor=, max_limit=1000)` returns `ceil(limit·factor)`" in text
    assert overfetch_limit(10, factor=3.0) == 30 and overfetch_limit(10, factor=1000.0) == 1000
    assert "`%` and `|` percent-escaped" in text
    assert ExtractionBudget.budget_key("a|b", "c%", "s") == "src|a%7Cb|c%25|s"


def _page_objects(page: str) -> list[Any]:
    objs = []
    for m in PAGE_MODULES[page]:
        parts = m.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj: Any = importlib.import_module(".".join(parts[:i]))
                break
            except ImportError:
                continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        objs.append(obj)
    return objs


def _check_call_shapes(page: str) -> list[str]:
    objs = _page_objects(page)
    checked: list[str] = []
    bad: list[str] = []
    for span in spans(ROOT / page):
        m = re.fullmatch(r"([A-Za-z_]\w*)\((.*)\)(?: -> \w+)?", span)
        if not m or not m.group(2) or m.group(1) in FOREIGN:
            continue
        target = next((getattr(o, m.group(1)) for o in objs if hasattr(o, m.group(1))), None)
        params = re.sub(r"(\w+)=(?=\s*[,)]|\s*$)", r"\1=None", m.group(2))
        try:
            args = ast.parse(f"def f({params}): pass").body[0].args
        except SyntaxError:  # not a parameter list (a formula, an expression)
            continue
        if not callable(target) or args.vararg or args.kwarg:
            continue
        sig = inspect.signature(target)
        n_pos = len(args.args) - len(args.defaults)
        positional = [object() for _ in args.args[:n_pos]]
        if next(iter(sig.parameters), None) == "self":
            positional.insert(0, object())
        named = {a.arg: object() for a in args.args[n_pos:] + args.kwonlyargs}
        try:
            sig.bind(*positional, **named)
        except TypeError as exc:
            bad.append(f"`{span}`: {exc}; the real signature is {m.group(1)}{sig}")
        checked.append(m.group(1))
    assert not bad, f"{page}:\n  " + "\n  ".join(bad)
    return checked


@pytest.mark.parametrize("page", sorted(PAGE_MODULES))
def test_call_shapes_in_a_page_bind_to_the_real_signatures(page):
    """`f(a, b=..., *, c=)` in prose: a positional name must be passable positionally, a named one by name."""
    _check_call_shapes(page)


def test_call_shape_check_sees_the_api_calls():
    assert {"admit_vectors", "overfetch_limit", "RedisBudgetStore"} <= set(_check_call_shapes("docs/diversity-budget.md"))
    assert {"run_calibrate_cli", "add_calibrate_arguments"} <= set(_check_call_shapes("docs/eval.md"))


def test_audit_line_format_is_the_documented_one(tmp_path):
    from qdrant_guard.audit import AuditLog

    shown = [b for b in fenced_blocks(DOCS / "audit-log.md") if b.lang == "json"]
    assert len(shown) == 1
    keys = set(re.findall(r'"(\w+)":', shown[0].text))
    # The guard's log is written with its signing key: format v2 (the writer id and MAC).
    from qdrant_guard.keys import generate_keypair
    from qdrant_guard.receipts import ReceiptSigner

    log = AuditLog(str(tmp_path / "a.jsonl"), signer=ReceiptSigner(generate_keypair()[0]))
    log.append({"op": "x"})
    log.append({"op": "y"})
    # The second: the first carries a checkpoint (`ckpt`, documented as optional).
    line = json.loads((tmp_path / "a.jsonl").read_text().splitlines()[1])
    assert set(line) == keys, f"docs/audit-log.md shows {sorted(keys)}, the log writes {sorted(line)}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


# --- links ----------------------------------------------------------------------------------------

def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


def _anchors(page: Path) -> set[str]:
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", prose(page), flags=re.M)}


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_relative_links_resolve_with_their_anchors(page):
    # The README sends a new user to docs pages, and those back to its sections (2026-12-08): a
    # link to a moved or renamed page or section would leave the reader at nothing.
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`\n]*`", "", prose(page))):  # code spans are no links
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no such section")
    assert not bad, f"{rel(page)}:\n  " + "\n  ".join(bad)


def test_readme_links_every_docs_page():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in re.findall(r"\]\(([^)\s#]+[^)\s]*)\)", prose(README))}
    missing = [rel(p) for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"
