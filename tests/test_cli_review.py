"""The ``qdrant-guard`` command used the way a careless new user uses it (CLI new-user review,
docs/security-testing.md): output paths that already hold a key, a demo pointed at a project
directory, a --ttl typo, an --out whose directory is missing. Each test failed on the command
before the review (commit 7336b72): it overwrote a file, deleted one, or answered with a bare
errno after minutes of work."""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient, models

from qdrant_guard.cli import main
from qdrant_guard.errors import GuardArgumentValueError


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line_error(err: str, *names: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and "Traceback" not in err, err
    assert all(name in lines[-1] for name in names), err


def _new_key(path: Path, capsys: pytest.CaptureFixture[str]) -> bytes:
    assert _run(["keys", "new", "--out", str(path)], capsys)[0] == 0
    return path.read_bytes()


# keys new

def test_keys_new_does_not_replace_a_public_key_left_at_out_pub(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: the .pub beside --out (what a policy's authority_keys trusts) was silently rewritten.
    pub = tmp_path / "guard.key.pub"
    pub.write_text("ed25519:the-key-the-policy-trusts\n")
    rc, out, err = _run(["keys", "new", "--out", str(tmp_path / "guard.key")], capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, str(pub), "refusing to overwrite")
    assert pub.read_text() == "ed25519:the-key-the-policy-trusts\n"
    assert not (tmp_path / "guard.key").exists()


def test_keys_new_that_cannot_write_the_pub_leaves_no_private_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A name of 252 characters fits, its .pub (256) does not: before, the private key stayed behind
    # without its public half.
    out = tmp_path / ("k" * 252)
    rc, stdout, err = _run(["keys", "new", "--out", str(out)], capsys)
    assert rc == 2 and stdout == ""
    _one_line_error(err, "--out", "nothing was written")
    assert list(tmp_path.iterdir()) == []


# credential issue

@pytest.mark.parametrize("ttl", ["1e30", "315360001"])
def test_credential_issue_refuses_a_ttl_over_ten_years(tmp_path: Path, capsys: pytest.CaptureFixture[str], ttl: str) -> None:
    # Before: --ttl 1e30 printed a credential valid for 10^22 years.
    _new_key(tmp_path / "hr.key", capsys)
    rc, out, err = _run(["credential", "issue", "--authority", str(tmp_path / "hr.key"), "--agent", "a",
                         "--boundary", "hr", "--ttl", ttl], capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, "--ttl", "ten years")


def test_credential_issue_prints_the_token_alone_and_its_expiry_and_id_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _new_key(tmp_path / "hr.key", capsys)
    rc, out, err = _run(["credential", "issue", "--authority", str(tmp_path / "hr.key"), "--agent", "a",
                         "--boundary", "hr", "--ttl", "86400"], capsys)
    assert rc == 0
    token = out.strip()
    assert out.count("\n") == 1 and token.startswith("qgc1.")
    body = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    assert claims["exp"] - claims["iat"] == 86400
    assert claims["jti"] in err and "revoked_credentials" in err and "[boundaries.hr]" in err


# demo --workdir

def test_demo_does_not_delete_the_keys_log_and_store_of_a_project_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: `demo --workdir .` in a project deleted every *.key* file, audit.jsonl and store there.
    (tmp_path / "guard.key").write_text("my key\n")
    (tmp_path / "audit.jsonl").write_text("my log\n")
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "meta.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("mine\n")
    rc, out, err = _run(["demo", "--workdir", str(tmp_path)], capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, "--workdir", "notes.txt", "new or empty directory")
    assert (tmp_path / "guard.key").read_text() == "my key\n"
    assert (tmp_path / "audit.jsonl").read_text() == "my log\n"
    assert (tmp_path / "store" / "meta.json").read_text() == "{}"


def test_demo_does_not_take_a_directory_of_only_demo_named_files_it_did_not_mark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "guard.key").write_text("my key\n")
    (tmp_path / "audit.jsonl").write_text("my log\n")
    rc, _, err = _run(["demo", "--workdir", str(tmp_path)], capsys)
    assert rc == 2
    _one_line_error(err, "--workdir", ".qdrant-guard-demo")
    assert (tmp_path / "guard.key").read_text() == "my key\n"


def test_demo_reruns_in_its_own_workdir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "demo"
    for _ in range(2):
        rc, out, err = _run(["demo", "--workdir", str(work)], capsys)
        assert rc == 0 and "all expectations hold" in out, err


def test_demo_workdir_that_is_a_file_names_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: "error: [Errno 17] File exists: '...'".
    f = tmp_path / "afile"
    f.write_text("x")
    rc, _, err = _run(["demo", "--workdir", str(f)], capsys)
    assert rc == 2
    _one_line_error(err, "--workdir", "not a directory")


# calibrate

@pytest.fixture()
def clean_store(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(40, 8))
    client = QdrantClient(path=str(tmp_path / "store"))
    client.create_collection("docs", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
    client.upsert("docs", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(vectors)])
    client.close()
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps(v.tolist()) + "\n" for v in vectors[:20]))
    return tmp_path / "store", queries


def _calibrate(store: Path, queries: Path, out: str, *extra: str) -> list[str]:
    return ["calibrate", "--path", str(store), "--collection", "docs", "--queries", str(queries), "--out", out,
            "--no-progress", "--threshold", "0.9", "--epsilons", "1,8", *extra]


def test_calibrate_does_not_overwrite_a_private_key_given_as_out(tmp_path: Path, clean_store: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    # Before: the measurement ran, then the record replaced the key.
    key = _new_key(tmp_path / "hr.key", capsys)
    rc, out, err = _run(_calibrate(*clean_store, str(tmp_path / "hr.key")), capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, "--out", "refusing to overwrite")
    assert (tmp_path / "hr.key").read_bytes() == key


def test_calibrate_replaces_an_earlier_record(tmp_path: Path, clean_store: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "utility.json"
    out.write_text('{"earlier": "record"}\n')
    rc, stdout, err = _run(_calibrate(*clean_store, str(out)), capsys)
    assert rc == 0 and "chosen epsilon" in stdout, err
    assert "earlier" not in out.read_text()


@pytest.mark.parametrize("case", ["out_dir_missing", "out_is_dir", "queries_missing", "collection_missing"])
def test_calibrate_names_the_bad_option_before_measuring(tmp_path: Path, clean_store: tuple[Path, Path], capsys: pytest.CaptureFixture[str], case: str) -> None:
    # Before: "[Errno 2] No such file or directory: 'nodir/u.json'" after the whole measurement, or
    # "Collection nope not found".
    store, queries = clean_store
    argv, names = {
        "out_dir_missing": (_calibrate(store, queries, str(tmp_path / "nodir" / "u.json")), ("--out", "nodir")),
        "out_is_dir": (_calibrate(store, queries, str(tmp_path)), ("--out", "is a directory")),
        "queries_missing": (_calibrate(store, tmp_path / "nope.jsonl", str(tmp_path / "u.json")), ("--queries", "nope.jsonl")),
        "collection_missing": (_calibrate(store, queries, str(tmp_path / "u.json"))[:4] + ["nope"]
                               + _calibrate(store, queries, str(tmp_path / "u.json"))[5:], ("--collection", "nope", "docs")),
    }[case]
    rc, out, err = _run(argv, capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, *names)
    assert not (tmp_path / "u.json").exists()


# bench --json

def test_bench_json_does_not_overwrite_a_private_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: an authority key (the policy names only its .pub) was replaced by the report.
    _new_key(tmp_path / "guard.key", capsys)
    key = _new_key(tmp_path / "hr.key", capsys)
    policy = tmp_path / "policy.toml"
    policy.write_text(f'signing_key = "{tmp_path / "guard.key"}"\n'
                      f'[boundaries.hr]\nauthority_keys = ["{tmp_path / "hr.key.pub"}"]\n'
                      '[collections.docs]\nclass = "PII"\nowner = "hr"\nraw_in_boundary = true\n')
    rc, out, err = _run(["bench", "--policy", str(policy), "--collection", "docs", "--throwaway-credentials",
                         "--dim", "4", "--points", "20", "--queries", "2", "--rounds", "1", "--no-progress",
                         "--json", str(tmp_path / "hr.key")], capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, "--json", "refusing to overwrite")
    assert (tmp_path / "hr.key").read_bytes() == key


# bench --credential

@pytest.mark.parametrize("content", ["", "-----BEGIN PRIVATE KEY-----\nMC4\n-----END PRIVATE KEY-----\n"])
def test_bench_credential_file_without_a_token_is_named_for_what_it_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str) -> None:
    # Before: the verifier's "malformed ... pass its contents: open(path).read().strip(), not the
    # path", which a CLI user, who did pass a file, cannot act on.
    _new_key(tmp_path / "guard.key", capsys)
    _new_key(tmp_path / "hr.key", capsys)
    policy = tmp_path / "policy.toml"
    policy.write_text(f'signing_key = "{tmp_path / "guard.key"}"\n'
                      f'[boundaries.hr]\nauthority_keys = ["{tmp_path / "hr.key.pub"}"]\n'
                      '[collections.docs]\nclass = "PII"\nowner = "hr"\nraw_in_boundary = true\n')
    cred = tmp_path / "agent.cred"
    cred.write_text(content)
    rc, out, err = _run(["bench", "--policy", str(policy), "--collection", "docs", "--credential", str(cred),
                         "--dim", "4", "--points", "20", "--queries", "2", "--rounds", "1", "--no-progress"], capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, "--credential", str(cred), "is empty" if not content else "key file")
    assert "open(path)" not in err


# audit verify --key

def test_audit_verify_says_when_key_checked_no_signature(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: "OK ..., 0 signed checkpoint(s) verified" for any --key, the wrong one included, with
    # nothing saying that the key vouched for nothing.
    from qdrant_guard.audit import AuditLog

    log = tmp_path / "audit.jsonl"
    writer = AuditLog(str(log))
    writer.append({"event": "one"})
    writer.close()
    _new_key(tmp_path / "other.key", capsys)
    # Since 2026-12-07 such a log fails with a key (UNSIGNED, tests/test_audit_v1_rewrite.py); the
    # explicit --allow-unsigned gives the OK, with the note.
    rc, out, _ = _run(["audit", "verify", str(log), "--key", str(tmp_path / "other.key.pub")], capsys)
    assert rc == 1 and out.startswith(f"UNSIGNED: {log}")
    rc, out, _ = _run(["audit", "verify", str(log), "--key", str(tmp_path / "other.key.pub"), "--allow-unsigned"], capsys)
    assert rc == 0 and "OK: 1 entries" in out
    assert "--key checked no signature" in out


# help and usage

@pytest.mark.parametrize("argv,choices", [([], "{keys,credential,receipt,audit,demo,calibrate,bench,eval}"),
                                          (["audit"], "{verify,repair,replay}"), (["keys"], "{new,pub}")])
def test_a_missing_subcommand_is_named_by_its_choices(capsys: pytest.CaptureFixture[str], argv: list[str], choices: str) -> None:
    # Before: "the following arguments are required: sub".
    rc, _, err = _run(argv, capsys)
    assert rc == 2
    _one_line_error(err, f"required: {choices}")


def test_keys_new_help_describes_what_it_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: "print both key ids"; it prints one key id, the public key and the two paths.
    printed = json.loads(_run(["keys", "new", "--out", str(tmp_path / "k.key")], capsys)[1])
    assert set(printed) == {"private_key", "public_key_file", "public_key", "key_id"}
    _, help_text, _ = _run(["keys", "new", "--help"], capsys)
    assert "both key ids" not in help_text and "key id" in help_text


def test_keys_new_out_ending_in_a_slash_is_not_made_a_key_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: `--out keys/` (a directory meant) wrote the private key to a file named "keys".
    rc, out, err = _run(["keys", "new", "--out", f"{tmp_path}/keys/"], capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, "--out", "slash", "keys/guard.key")
    assert list(tmp_path.iterdir()) == []


def test_receipt_verify_with_a_policy_naming_no_key_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: "no trusted keys: pass --trusted-key or --policy" to a user who had passed --policy.
    client = QdrantClient(path=str(tmp_path / "store"))
    client.create_collection("docs", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    client.close()
    policy = tmp_path / "policy.toml"
    policy.write_text('[collections.docs]\nclass = "PUBLIC"\n')
    rc, out, err = _run(["receipt", "verify", "--path", str(tmp_path / "store"), "--collection", "docs",
                         "--policy", str(policy)], capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, str(policy), "names no signing_key", "--trusted-key")


def test_calibrate_out_is_not_its_own_one_line_queries_file(tmp_path: Path, clean_store: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    # A one-line JSONL file is also one JSON document, so "replace only JSON" alone would let the
    # record overwrite the queries it measured.
    store, queries = clean_store
    one = tmp_path / "one.jsonl"
    one.write_text(queries.read_text().splitlines()[0] + "\n")
    before = one.read_text()
    rc, out, err = _run(_calibrate(store, one, str(one)), capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, "--out", "--queries")
    assert one.read_text() == before


@pytest.mark.parametrize("flag", ["--agent", "--boundary"])
def test_credential_issue_refuses_a_name_padded_with_whitespace(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    # Before: --boundary "hr " issued a credential for boundary 'hr ', which no policy's [boundaries.hr]
    # accepts, and nothing said so until the guard refused it.
    _new_key(tmp_path / "hr.key", capsys)
    names = {"--agent": "a", "--boundary": "hr"}
    names[flag] += " "
    rc, out, err = _run(["credential", "issue", "--authority", str(tmp_path / "hr.key"),
                         "--agent", names["--agent"], "--boundary", names["--boundary"]], capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, flag, "whitespace")


def test_credential_issue_names_a_dotted_boundary_as_toml_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import tomllib

    _new_key(tmp_path / "k.key", capsys)
    rc, _, err = _run(["credential", "issue", "--authority", str(tmp_path / "k.key"), "--agent", "a",
                       "--boundary", "eu.hr"], capsys)
    assert rc == 0
    table = re.search(r"(\[boundaries\.[^\]]+\])", err).group(1)
    assert list(tomllib.loads(table + "\nrevoked_credentials = []\n")["boundaries"]) == ["eu.hr"]


def test_run_demo_from_python_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    # Before: only the CLI checked; run_demo(workdir=...) deleted the directory's keys and log.
    from qdrant_guard.demo import run_demo

    (tmp_path / "guard.key").write_text("my key\n")
    (tmp_path / "audit.jsonl").write_text("my log\n")
    with pytest.raises(GuardArgumentValueError, match=r"workdir .* \.qdrant-guard-demo mark.*new or empty directory"):
        run_demo(workdir=str(tmp_path))
    assert (tmp_path / "guard.key").read_text() == "my key\n"
    assert (tmp_path / "audit.jsonl").read_text() == "my log\n"
    assert not (tmp_path / ".qdrant-guard-demo").exists()


@pytest.mark.parametrize("option, value, says", [
    ("--k", "0", "must be an integer >= 1"),
    ("--k", "ten", "not an integer"),
    ("--sample-limit", "0", "must be an integer >= 1"),
    ("--epsilons", "0,-1", "not a finite epsilon above 0"),
    ("--epsilons", "1,x", "not a number"),
    ("--epsilons", ",", "no epsilon given"),
    ("--threshold", "2", "not a relative drop in [0, 1)"),
])
def test_calibrate_numeric_options_are_usage_errors_naming_the_option(
        tmp_path: Path, clean_store: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        option: str, value: str, says: str) -> None:
    # Before: "calibrate() argument 'k' ..." in library terms, or a bare float() error, after loading the store.
    out = tmp_path / "record.json"
    argv = [a for a in _calibrate(*clean_store, str(out)) if a not in ("--threshold", "0.9", "--epsilons", "1,8")]
    rc, _, err = _run([*argv, f"{option}={value}"], capsys)
    assert rc == 2
    _one_line_error(err, option, says)
    assert not out.exists()


def test_a_directory_given_as_a_key_says_to_name_the_file_in_it(tmp_path: Path) -> None:
    # Before: "cannot read key file '...': Is a directory", with no fix.
    from qdrant_guard import keys

    for load in (keys.load_private_key, keys.load_public_key):
        with pytest.raises(keys.KeyStoreError, match=r"is a directory, not a regular file; give the path of a key file in it .*guard\.key"):
            load(str(tmp_path))


def test_audit_repair_keep_chain_from_on_a_log_that_verifies_names_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: "repair_audit_file() keep_chain_from=5 applies only ...", the library's words.
    from qdrant_guard.audit import AuditLog

    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path))
    for i in range(6):
        log.append({"op": "x", "i": i})
    before = path.read_bytes()
    rc, out, err = _run(["audit", "repair", str(path), "--keep-chain-from", "5"], capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, "--keep-chain-from 5", "without --keep-chain-from")
    assert "repair_audit_file()" not in err
    assert path.read_bytes() == before


def test_audit_replay_of_a_file_that_is_no_audit_log_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: "NOT REPLAYED: ... does not verify", with --verified-prefix / --unverified offered for a policy file.
    policy = tmp_path / "policy.toml"
    policy.write_text('[collections.docs]\nclass = "PUBLIC"\n')
    rc, out, _ = _run(["audit", "replay", str(policy), "--policy", str(policy)], capsys)
    assert rc == 1
    assert out.startswith(f"NOT AN AUDIT LOG: {policy}: none of its lines is an audit entry")
    assert "--unverified" not in out


def test_credential_issue_checks_the_boundary_and_key_against_a_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: a misspelt --boundary or the wrong authority key issued a credential the guard refuses.
    _new_key(tmp_path / "hr.key", capsys)
    _new_key(tmp_path / "support.key", capsys)
    policy = tmp_path / "policy.toml"
    policy.write_text('[boundaries.hr]\nauthority_keys = ["hr.key.pub"]\n'
                      '[boundaries.support]\nauthority_keys = ["support.key.pub"]\n'
                      '[collections.docs]\nclass = "PUBLIC"\n')
    base = ["credential", "issue", "--agent", "a1", "--policy", str(policy)]
    rc, out, err = _run([*base, "--authority", str(tmp_path / "hr.key"), "--boundary", "hrr"], capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, "--boundary 'hrr'", "'hr', 'support'", "[boundaries.hrr]")
    rc, out, err = _run([*base, "--authority", str(tmp_path / "support.key"), "--boundary", "hr"], capsys)
    assert rc == 2 and out == ""
    _one_line_error(err, "--authority", "[boundaries.hr] authority_keys", "would refuse")
    rc, out, err = _run([*base, "--authority", str(tmp_path / "hr.key"), "--boundary", "hr"], capsys)
    assert rc == 0 and out.startswith("qgc1.")
    from qdrant_guard import Principal, QdrantClient

    client = QdrantClient(":memory:", guard=str(policy), principal=Principal("a1", "hr", out.strip()))
    assert client.guard is not None
    client.close()
