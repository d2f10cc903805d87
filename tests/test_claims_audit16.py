"""Claims audit 16: README's opening list and "Quick start" run as a new user would (the README's
own commands, policy and code, in a fresh directory, local mode), and the statements today's merged
commits changed: ``audit_signed_from`` on open (README, docs/audit-log.md) and qdrant-client's
warnings landing on the caller's line (README, docs/integrations.md).

Each test runs what a sentence states (real qdrant-client local mode, real files and Ed25519 keys,
the CLI in process) and fails when the sentence stops being true. Wrong, and corrected in the docs:

1. README: with ``audit_signed_from`` the guard "checks on start what ``--signed-from SEQ`` does (the
   entry at SEQ carries a checkpoint that verifies, every checkpoint seq from there on carries
   one)". A checkpoint stripped from seq 1000 of a 2,500-entry log (``ckpt`` is outside the hash)
   opens, while ``audit verify`` names it ``bad_checkpoint``: the guard checks the checkpoint seqs
   among the entries it reads on open (back to the most recent checkpoint) and the entry at SEQ,
   and the entry at SEQ may also be the guard's own entry without a checkpoint (its MAC verifying).
2. docs/audit-log.md: "any change to the lines between them ... breaks the chain, which ``audit
   verify`` names (even without keys)": a stripped checkpoint breaks no hash; ``audit verify``
   names it as ``bad_checkpoint``, with or without keys.
"""
from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import shutil
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from qdrant_guard import (ConfigError, CredentialError, GuardRefusal, InvalidVectorError, Principal, QdrantClient,
                          keys)
from qdrant_guard.audit import AuditLog, verify_audit_file
from qdrant_guard.canonical import canonical_json
from qdrant_guard.cli import main
from qdrant_guard.errors import AuditUnauthenticatedError
from qdrant_guard.hashing_embedder import HashingEmbedder
from qdrant_guard.receipts import ReceiptSigner

README = Path(__file__).resolve().parent.parent / "README.md"
QUICK_START = README.read_text(encoding="utf-8").split("## Quick start", 1)[1].split("\n## ", 1)[0]


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", QUICK_START, re.S)


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse's usage errors
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def _shell_line(line: str) -> None:
    """One `qdrant-guard ...` line of the README's set-up block, its `> FILE` redirect included."""
    line = line.split("#", 1)[0].strip()
    argv, _, target = line.partition(">")
    words = argv.split()
    assert words[0] == "qdrant-guard", line
    rc, out, _ = _cli(*words[1:])
    assert rc == 0, line
    if target.strip():
        Path(target.strip()).write_text(out)


@pytest.fixture(scope="module")
def quick_start_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding what the Quick start's commands make: keys, agent-7.cred, alice.cred
    (its `credential issue ... --agent alice` line) and policy.toml (its TOML block)."""
    d = tmp_path_factory.mktemp("quickstart")
    here = os.getcwd()
    os.chdir(d)
    try:
        (setup,) = _blocks("bash")
        for line in setup.strip().splitlines():
            _shell_line(line)
        alice = re.search(r"`(qdrant-guard credential issue [^`]*--agent alice[^`]*)`", QUICK_START).group(1)
        _shell_line(alice)
    finally:
        os.chdir(here)
    (policy,) = _blocks("toml")
    (d / "policy.toml").write_text(policy)
    return d


@pytest.fixture()
def qs(quick_start_files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the Quick start's files of this test's own (local mode holds a store per client),
    the working directory."""
    d = tmp_path / "app"
    shutil.copytree(quick_start_files, d)
    monkeypatch.chdir(d)
    return d


def _client(d: Path = Path("."), agent: str = "agent-7", boundary: str = "support", **kw) -> QdrantClient:
    return QdrantClient(path=str(d / "store"), guard=str(d / "policy.toml"),
                        principal=Principal(agent, boundary, (d / f"{agent}.cred").read_text().strip()), **kw)


def _setup_collection(client: QdrantClient, d: Path = Path(".")) -> None:
    from qdrant_client import models
    alice = client.with_principal(Principal("alice", "hr", (d / "alice.cred").read_text().strip()))
    alice.create_collection("employee_records",
                            vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE))


# ------------------------------------------------------------------ Quick start, as written


def test_the_quick_start_runs_as_written_and_prints_what_its_comments_say(qs: Path) -> None:
    diff = next(b for b in _blocks("diff") if "+ from qdrant_guard import" in b)
    opening = "\n".join(line[2:] for line in diff.splitlines() if line.startswith("+ "))
    first, second = _blocks("python")
    printed: list[str] = []
    for code in (opening + "\n" + first, second):
        expected = [m.group(1).strip() for m in re.finditer(r"^print\(.*?\)\s*#\s*(.*)$", code, re.M)]
        out = io.StringIO()
        ns: dict = {}
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(README), "exec"), ns)
        ns["client"].close()  # "after the script above has closed its client"
        got = out.getvalue().splitlines()
        # A comment is the printed value, or the value then ": why".
        assert len(got) == len(expected) and all(e == g or e.startswith(g + ":") for g, e in zip(got, expected)), \
            (got, expected)
        printed += got
    assert printed == ["Jane asked about leave; SSN [SSN]", "True", "Jane Roe asked about parental leave; SSN [SSN]"]
    # "`qdrant-guard receipt verify --path ./store --collection employee_records --policy policy.toml`"
    rc, out, _ = _cli("receipt", "verify", "--path", "./store", "--collection", "employee_records",
                      "--policy", "policy.toml")
    assert rc == 0 and out.startswith("2/2 receipted vectors verify in 'employee_records'"), out


def test_the_token_with_the_files_trailing_newline_is_refused_hence_strip(qs: Path) -> None:
    token = Path("agent-7.cred").read_text()
    assert token.endswith("\n") and token.strip().startswith("qgc1.")
    with pytest.raises(CredentialError, match="strip"):
        QdrantClient(path="./store", guard="policy.toml", principal=Principal("agent-7", "support", token))


def test_credential_issue_ttl_default_an_hour_at_most_ten_years_and_the_policy_check_issues_nothing(qs: Path) -> None:
    rc, out, err = _cli("credential", "issue", "--authority", "keys/support-authority.key", "--agent", "a",
                        "--boundary", "support")
    assert rc == 0 and out.startswith("qgc1.")
    until = re.search(r"until (\S+Z)", err).group(1)
    left = time.mktime(time.strptime(until, "%Y-%m-%dT%H:%M:%SZ")) - time.mktime(time.gmtime())
    assert 3500 < left <= 3600
    rc, out, err = _cli("credential", "issue", "--authority", "keys/support-authority.key", "--agent", "a",
                        "--boundary", "support", "--ttl", str(10 * 365 * 86400 + 1))
    assert rc == 2 and out == "" and "ten years" in err
    for authority, boundary in (("keys/support-authority.key", "nope"), ("keys/hr-authority.key", "support")):
        rc, out, err = _cli("credential", "issue", "--authority", authority, "--agent", "a", "--boundary", boundary,
                            "--policy", "policy.toml")
        assert rc != 0 and out == "" and boundary in err, (authority, boundary)


def test_keys_pub_writes_a_lost_pub_again_and_it_still_verifies_issued_credentials(qs: Path) -> None:
    pub = Path("keys/hr-authority.key.pub")
    before = pub.read_text()
    pub.unlink()
    rc, _, _ = _cli("keys", "pub", "--key", "keys/hr-authority.key")
    assert rc == 0 and pub.read_text() == before
    client = _client(agent="alice", boundary="hr")
    _setup_collection(client)  # alice.cred, issued before, verifies under the rewritten .pub
    assert client.collection_exists("employee_records")
    client.close()


def test_a_support_agent_cannot_create_the_hr_collection(qs: Path) -> None:
    from qdrant_client import models
    client = _client()
    with pytest.raises(GuardRefusal) as err:
        client.create_collection("employee_records", vectors_config=models.VectorParams(
            size=384, distance=models.Distance.COSINE))
    assert err.value.verdict == "REFUSED_CROSS_BOUNDARY"
    client.close()


def test_a_read_outside_hr_gets_the_noised_vector_never_the_one_sent(qs: Path) -> None:
    from qdrant_client import models
    client = _client()
    _setup_collection(client)
    sent = np.full(384, 0.05)
    client.upsert("employee_records", [models.PointStruct(id=1, vector=sent.tolist(), payload={"source": "a"})])
    (point,) = client.retrieve("employee_records", [1], with_vectors=True)
    got = np.asarray(point.vector)
    unit = sent / np.linalg.norm(sent)  # Cosine: Qdrant keeps the unit vector
    assert got.shape == (384,) and not np.allclose(got, unit, atol=1e-6)
    client.close()


def test_relative_paths_in_the_policy_are_read_from_its_directory(qs: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    client = _client(qs)
    _setup_collection(client, qs)
    client.close()
    assert (qs / "audit.jsonl").stat().st_size > 0 and not (elsewhere / "audit.jsonl").exists()
    assert not (elsewhere / "keys").exists()


def test_the_noise_required_refusal_reads_as_the_readme_shows(qs: Path) -> None:
    from qdrant_client import models
    policy = Path("policy.toml")
    policy.write_text(policy.read_text().replace("noise_on_write = true", "noise_on_write = false"))
    client = _client()
    _setup_collection(client)
    shown = re.search(r"```\n(GuardRefusal: NOISE_REQUIRED.*?)```", QUICK_START, re.S).group(1)
    shown = " ".join(shown.replace("GuardRefusal: ", "", 1).split())
    with pytest.raises(GuardRefusal) as err:
        client.upsert("employee_records", [models.PointStruct(id=1, vector=[0.05] * 384)])
    assert " ".join(str(err.value).split()) == shown
    assert err.value.manifest_digest and err.value.point_ids == [1]
    client.close()


def test_a_document_needs_the_embedder_which_sees_the_redacted_text(qs: Path) -> None:
    from qdrant_client import models
    text = "Jane Roe asked about parental leave; SSN 123-45-6789"
    doc = models.Document(text=text, model="qg-hashing-v1-384")
    client = _client()
    _setup_collection(client)
    with pytest.raises(InvalidVectorError):
        client.upsert("employee_records", [models.PointStruct(id=2, payload={"text": text}, vector=doc)])
    client.close()
    seen: list[str] = []
    inner = HashingEmbedder(384)

    def embedder(texts):
        seen.extend(texts)
        return inner(texts)

    client = _client(embedder=embedder)
    client.upsert("employee_records", [models.PointStruct(id=2, payload={"text": text}, vector=doc)])
    said = re.search(r"The embedder was called with `([^`]*)`", " ".join(
        README.read_text(encoding="utf-8").split())).group(1)
    assert seen == [said] == ["Jane [NAME] asked about parental leave; [CODE] [SSN]"]
    client.close()


@pytest.mark.parametrize("name", ["keys/hr-authority.key.pub", "policy.toml"])
def test_a_trust_file_others_may_write_is_refused_naming_it_and_the_fix(qs: Path, name: str) -> None:
    os.chmod(name, 0o666)
    with pytest.raises(ConfigError) as err:
        _client()
    assert Path(name).name in str(err.value) and "chmod go-w" in str(err.value)


def test_a_private_key_others_may_read_is_refused_naming_it_and_chmod_600(qs: Path) -> None:
    # Stricter than "writable by nobody else": the signing key's own check (a KeyStoreError).
    os.chmod("keys/guard.key", 0o644)
    with pytest.raises(keys.KeyStoreError) as err:
        _client()
    assert "guard.key" in str(err.value) and "chmod 600" in str(err.value)


def test_an_unloadable_signing_key_is_a_key_store_error_not_a_config_error(qs: Path) -> None:
    Path("keys/guard.key").write_text("not a key\n")
    with pytest.raises(keys.KeyStoreError) as err:
        _client()
    assert not isinstance(err.value, ConfigError)


def test_without_signing_key_a_path_store_warns_that_its_noise_is_stripped_after_a_restart(qs: Path) -> None:
    policy = Path("policy.toml")
    policy.write_text(policy.read_text().replace('signing_key = "keys/guard.key"\n', ""))
    with pytest.warns(UserWarning, match="signing_key") as seen:
        client = _client()
    assert seen[0].filename == __file__  # on this line, the guard's own warning at its caller
    client.close()


# ------------------------------------------------------------------ README's opening list


def test_credentials_found_are_never_embedded_also_inside_base64(qs: Path) -> None:
    from qdrant_client import models
    seen: list[str] = []
    inner = HashingEmbedder(384)
    client = _client(embedder=lambda texts: (seen.extend(texts), inner(texts))[1])
    _setup_collection(client)
    aws = "AKIAQ3EGRKJZ7UXW4N5P"  # not AWS's documented example key, which detect.py excepts ("EXAMPLE")
    for text in (f"aws key {aws}", "blob " + base64.b64encode(f"aws_access_key_id={aws}".encode()).decode()):
        with pytest.raises(GuardRefusal) as err:
            client.upsert("employee_records", [models.PointStruct(
                id=3, payload={"text": text}, vector=models.Document(text=text, model="qg-hashing-v1-384"))])
        assert err.value.verdict == "CREDENTIAL_IN_TEXT", text
    assert seen == [] and client.count("employee_records").count == 0
    client.close()


def test_keyed_noise_gives_a_vector_written_again_the_same_noise(qs: Path) -> None:
    from qdrant_client import models
    client = _client()
    _setup_collection(client)
    v = np.random.default_rng(7).normal(size=384).tolist()
    client.upsert("employee_records", [models.PointStruct(id=1, vector=v, payload={"source": "a"})])
    first = client.retrieve("employee_records", [1], with_vectors=True)[0].vector
    client.upsert("employee_records", [models.PointStruct(id=2, vector=v, payload={"source": "b"})])
    again = client.retrieve("employee_records", [2], with_vectors=True)[0].vector
    client.upsert("employee_records", [models.PointStruct(id=3, vector=(np.asarray(v) + 0.1).tolist(),
                                                          payload={"source": "c"})])
    moved = client.retrieve("employee_records", [3], with_vectors=True)[0].vector
    assert first == again and first != moved
    client.close()


def test_raw_owner_vectors_are_stripped_outside_the_owner_boundary(qs: Path) -> None:
    from qdrant_client import models
    client = _client()
    _setup_collection(client)
    alice = client.with_principal(Principal("alice", "hr", Path("alice.cred").read_text().strip()))
    alice.upsert("employee_records", [models.PointStruct(id=1, vector=[0.05] * 384, payload={"source": "a"})])
    assert alice.retrieve("employee_records", [1], with_vectors=True)[0].vector is not None
    (point,) = client.retrieve("employee_records", [1], with_vectors=True)
    assert point.vector is None or point.vector == {}
    client.close()


def test_a_cross_boundary_read_is_refused_before_qdrant_sees_it(qs: Path) -> None:
    # With support no longer a reader, its read is refused from the policy alone: the collection
    # does not exist in Qdrant, and the answer is the refusal, not Qdrant's "not found".
    policy = Path("policy.toml")
    policy.write_text(policy.read_text().replace('readers = ["support"]', "readers = []"))
    client = _client()
    for read in (lambda: client.query_points("employee_records", query=[0.05] * 384, limit=3),
                 lambda: client.retrieve("employee_records", [1]),
                 lambda: client.scroll("employee_records", limit=3)):
        with pytest.raises(GuardRefusal) as err:
            read()
        assert err.value.verdict == "REFUSED_CROSS_BOUNDARY"
    client.close()


def test_a_top_k_holds_at_most_forty_percent_of_one_source(qs: Path) -> None:
    from qdrant_client import models
    client = _client()
    _setup_collection(client)
    rng = np.random.default_rng(3)
    client.upsert("employee_records", [models.PointStruct(id=i, vector=rng.normal(size=384).tolist(),
                                                          payload={"source": "one" if i < 8 else f"s{i}"})
                                       for i in range(12)])
    hits = client.query_points("employee_records", query=rng.normal(size=384).tolist(), limit=10).points
    sources = [h.payload["source"] for h in hits]
    assert sources.count("one") <= int(0.4 * 10), sources
    client.close()


# ------------------------------------------------------------------ audit_signed_from on open (h-audit)


def _signed_log(tmp_path: Path, n: int) -> tuple[Path, ReceiptSigner, dict]:
    sk, pk = keys.generate_keypair()
    signer = ReceiptSigner(sk)
    log = tmp_path / "audit.jsonl"
    with AuditLog(log, signer=signer) as a:
        for i in range(n):
            a.append({"event": "x", "i": i})
    return log, signer, {keys.key_id(pk): pk}


def _strip_checkpoint(log: Path, seq: int) -> None:
    lines = log.read_bytes().splitlines(keepends=True)
    e = json.loads(lines[seq - 1])
    assert e["seq"] == seq and "ckpt" in e
    del e["ckpt"]
    lines[seq - 1] = canonical_json(e) + b"\n"
    log.write_bytes(b"".join(lines))


def test_signed_from_on_open_checks_the_checkpoints_it_reads_not_those_before_the_window(tmp_path: Path) -> None:
    # README (corrected): the guard checks on start, of the entries it reads and the entry at SEQ,
    # what --signed-from does; checkpoints before the most recent one are audit verify's.
    log, signer, trusted = _signed_log(tmp_path, 2500)
    _strip_checkpoint(log, 1000)  # before the window (2000..2500)
    for keys_given in (trusted, {}):
        rep = verify_audit_file(log, trusted_keys=keys_given, **({"signed_from": 1} if keys_given else {}))
        assert (rep.ok, rep.problem) == (False, "bad_checkpoint"), keys_given
    AuditLog(log, signer=signer, signed_from=1).close()  # opens: not read
    _strip_checkpoint(log, 2000)  # the window's own checkpoint: the window now reaches past seq 2000
    with pytest.raises(AuditUnauthenticatedError, match="carries no checkpoint"):
        AuditLog(log, signer=signer, signed_from=1)


def test_the_entry_at_s_may_be_the_guards_own_without_a_checkpoint_but_not_another_writers(tmp_path: Path) -> None:
    # policy.md / audit-log.md: "unless it carries a checkpoint that verifies, or is the guard's own
    # entry (its MAC verifying)". A small log: S = 1 is among the entries read on open.
    log, signer, _ = _signed_log(tmp_path, 5)
    _strip_checkpoint(log, 1)
    AuditLog(log, signer=signer, signed_from=1).close()
    other = ReceiptSigner(keys.generate_keypair()[0])
    with pytest.raises(AuditUnauthenticatedError):
        AuditLog(log, signer=other, signed_from=1, trusted_keys={signer.key_id: signer.public_key})


# ------------------------------------------------------------------ warnings on the caller's line (h-warn)


def test_llama_indexs_payload_index_warning_names_llama_indexs_line(tmp_path: Path) -> None:
    # docs/integrations.md: "The warning names llama-index's line, as it does without the guard."
    pytest.importorskip("llama_index.vector_stores.qdrant")
    import qdrant_client
    from llama_index.core.schema import TextNode
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client.common import client_warnings

    def where(client) -> list[tuple[str, str]]:
        client_warnings.SEEN_MESSAGES = set()
        store = QdrantVectorStore(client=client, collection_name="kb")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            store.add([TextNode(text="hello", embedding=[0.1, 0.2, 0.3, 0.4])])
        client.close()
        return [(Path(w.filename).name, str(w.message)[:40]) for w in seen if "Payload indexes" in str(w.message)]

    raw = where(qdrant_client.QdrantClient(path=str(tmp_path / "raw")))
    guarded = where(QdrantClient(path=str(tmp_path / "guarded")))
    assert raw and guarded == raw and raw[0][0] == "base.py", raw  # llama_index/vector_stores/qdrant/base.py
