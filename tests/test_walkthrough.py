"""A first-hour walkthrough of the README (2026-12-07, h-walk): the mistakes a new user makes on the
way, each answered by an error that names the bad input and a fix that works as written.

Each test fails on the code before the walkthrough:

* an expired or revoked credential's message quoted `qdrant-guard credential issue --agent A
  --boundary B`, which argparse refuses when pasted (`--authority` is required); so did the
  mid-run expiry refusal, with no agent or boundary at all;
* a token cut short in copying was refused as "signature is not canonical base64url", nothing
  more;
* Principal("agent-7", token), the boundary left out, took the token for the boundary and was told
  "no credential was given"; Principal(token, "support") showed the token in the refusal and wrote
  it to the audit log as the principal's name;
* Principal(agent, boundary, token) with a boundary the policy does not name was told to issue a
  credential "with that boundary's authority key", which no policy would accept;
* `[boundary.hr]` for `[boundaries.hr]` got no "did you mean", nor did `readers = ["suport"]`, whose
  message did not say which key named it;
* a vector of the wrong dimension was named, but not what to do;
* `credential issue --ttl 1d` said only "'1d' is not a number", and `qdrant-guard --version` that
  arguments are required;
* `qdrant-guard calibrate` pointed at the guarded collection (every vector noised) measured noise on
  noise against a noised baseline and signed the record without a word;
* docs/policy.example.toml copied next to the README's keys stopped at its first missing key
  file, one run per file.
"""
from __future__ import annotations

import shlex
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import models

from qdrant_guard import (ConfigError, CredentialError, GuardRefusal, InvalidVectorError, Principal, QdrantClient,
                          cli, keys)
from qdrant_guard.boundary import CredentialRejected, issue_credential, verify_credential

ROOT = Path(__file__).resolve().parent.parent

POLICY = """\
signing_key = "keys/guard.key"
audit_log = "audit.jsonl"

[boundaries.hr]
authority_keys = ["keys/hr-authority.key.pub"]
[boundaries.support]
authority_keys = ["keys/support-authority.key.pub"]

[collections.employee_records]
class = "PII"
owner = "hr"
readers = ["support"]
writers = ["support"]
noise_on_write = true
"""


def _cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, f"qdrant-guard {shlex.join(argv)} exited {rc}: {err}"
    return out


@pytest.fixture()
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """The README's set-up in a fresh directory: the guard's key, two authorities, a policy."""
    monkeypatch.chdir(tmp_path)
    for name in ("guard", "hr-authority", "support-authority"):
        _cli(capsys, ["keys", "new", "--out", f"keys/{name}.key"])
    (tmp_path / "policy.toml").write_text(POLICY)
    return tmp_path


def _token(agent: str, boundary: str, *, ttl_s: float = 3600, now: float | None = None) -> str:
    sk = keys.load_private_key(f"keys/{boundary}-authority.key")
    return issue_credential(sk, agent_id=agent, boundary=boundary, ttl_s=ttl_s, now=now)


def _quoted_command(message: str) -> list[str]:
    commands = [part for part in message.split("`")[1::2] if part.startswith("qdrant-guard credential issue --")]
    assert len(commands) == 1, message
    return shlex.split(commands[0])


def _run_the_fix(capsys: pytest.CaptureFixture[str], message: str) -> str:
    """Run the message's command as a user would: its placeholder replaced by the key it describes."""
    assert "AUTHORITY_KEY: the private key file whose .pub [boundaries.support] authority_keys lists" in message
    argv = [("keys/support-authority.key" if w == "AUTHORITY_KEY" else w) for w in _quoted_command(message)]
    assert argv[:3] == ["qdrant-guard", "credential", "issue"]
    return _cli(capsys, argv[1:]).strip()


@pytest.mark.parametrize("how", ["expired", "revoked"])
def test_a_rejected_credentials_reissue_command_runs_as_quoted(setup: Path, capsys, how: str) -> None:
    if how == "expired":
        token = _token("agent-7", "support", ttl_s=60, now=time.time() - 7200)
    else:
        token = _token("agent-7", "support")
        pk = keys.load_public_key("keys/support-authority.key.pub")
        jti = verify_credential(token, authorities={"support": [pk]}).jti
        (setup / "policy.toml").write_text(POLICY.replace(
            'authority_keys = ["keys/support-authority.key.pub"]',
            f'authority_keys = ["keys/support-authority.key.pub"]\nrevoked_credentials = ["{jti}"]'))
    with pytest.raises(CredentialRejected) as exc:
        QdrantClient(":memory:", guard="policy.toml", principal=Principal("agent-7", "support", token))
    assert exc.value.reason == how
    fresh = _run_the_fix(capsys, str(exc.value))
    client = QdrantClient(":memory:", guard="policy.toml", principal=Principal("agent-7", "support", fresh))
    assert client.guard.principal_label == "agent-7@support"  # type: ignore[union-attr]
    client.close()


def test_a_credential_expiring_mid_run_names_the_command_for_its_agent(setup: Path, capsys) -> None:
    client = QdrantClient(":memory:", guard="policy.toml",
                          principal=Principal("agent-7", "support", _token("agent-7", "support", ttl_s=60)))
    real = time.time
    client.guard.clock = lambda: real() + 3600  # type: ignore[union-attr]
    with pytest.raises(GuardRefusal) as exc:
        client.count("employee_records")
    assert exc.value.verdict == "INVALID_CREDENTIAL"
    fresh = _run_the_fix(capsys, exc.value.directive)
    view = client.with_principal(Principal("agent-7", "support", fresh))
    assert view.guard.principal_label == "agent-7@support"  # type: ignore[union-attr]
    client.close()


def test_a_token_cut_short_in_copying_says_so_and_how_to_get_a_whole_one(setup: Path, capsys) -> None:
    token = _token("agent-7", "support")
    for cut in (token[:-5], token[:-1] + ("A" if token[-1] != "A" else "B")):
        with pytest.raises(CredentialRejected) as exc:
            QdrantClient(":memory:", guard="policy.toml", principal=Principal("agent-7", "support", cut))
        assert exc.value.reason == "bad_signature"
        assert "cut short or altered: pass it whole, exactly as `qdrant-guard credential issue` printed it" in str(exc.value)
        assert token[:-5] not in str(exc.value)  # the bearer token is never in a message
        _run_the_fix(capsys, str(exc.value))


@pytest.mark.parametrize("slot", ["boundary", "agent_id"])
def test_a_token_in_a_name_slot_of_principal_is_refused_without_echoing_it(setup: Path, slot: str) -> None:
    # Principal("agent-7", token) left out the boundary: the token became the boundary, and the
    # refusal said "no credential was given"; as agent_id it was shown in the refusal and written
    # to the audit log as the principal's name.
    token = _token("agent-7", "support")
    args = ("agent-7", token) if slot == "boundary" else (token, "support")
    with pytest.raises(ConfigError) as exc:
        QdrantClient(":memory:", guard="policy.toml", principal=Principal(*args))
    assert f"Principal.{slot} holds a credential token" in str(exc.value)
    assert "Principal(agent_id, boundary, token)" in str(exc.value)
    assert token[:12] not in str(exc.value)
    assert not (setup / "audit.jsonl").exists() or token[:12] not in (setup / "audit.jsonl").read_text()


def test_a_principal_of_a_boundary_the_policy_does_not_name_is_told_so(setup: Path) -> None:
    token = _token("agent-7", "support")
    with pytest.raises(CredentialError) as exc:
        QdrantClient(":memory:", guard="policy.toml", principal=Principal("agent-7", "sales", token))
    msg = str(exc.value)
    assert "'sales', which is no boundary of the policy (its boundaries: ['hr', 'support'])" in msg
    assert "add a [boundaries.sales] section" in msg
    # A boundary the policy does name keeps its advice: a credential from that boundary's authority.
    with pytest.raises(CredentialError, match="issue a credential for 'hr' with that boundary's authority key"):
        QdrantClient(":memory:", guard="policy.toml", principal=Principal("agent-7", "hr", token))


def test_a_singular_boundary_table_is_told_its_plural(setup: Path) -> None:
    (setup / "typo.toml").write_text(POLICY.replace("[boundaries.support]", "[boundary.support]"))
    with pytest.raises(ConfigError, match=r"unknown key 'boundary' .*did you mean 'boundaries'"):
        QdrantClient(":memory:", guard="typo.toml")


@pytest.mark.parametrize("typo, key, hint", [
    ('readers = ["suport"]', "readers", "did you mean 'support'?"),
    ('owner = "HR"', "owner", "did you mean 'hr'?"),
    ('writers = ["sales"]', "writers", "fix the name, or add a [boundaries.sales] section listing its authority's .pub"),
])
def test_a_collection_naming_an_unknown_boundary_names_its_key_and_the_fix(setup: Path, typo: str, key: str,
                                                                           hint: str) -> None:
    text = {"readers": POLICY.replace('readers = ["support"]', typo), "owner": POLICY.replace('owner = "hr"', typo),
            "writers": POLICY.replace('writers = ["support"]', typo)}[key]
    (setup / "typo.toml").write_text(text)
    with pytest.raises(ConfigError) as exc:
        QdrantClient(":memory:", guard="typo.toml")
    assert f"collections.employee_records.{key} names boundary" in str(exc.value)
    assert str(exc.value).endswith(hint)


def test_a_vector_of_the_wrong_dimension_is_told_the_fix(setup: Path) -> None:
    client = QdrantClient(":memory:", guard="policy.toml",
                          principal=Principal("agent-7", "support", _token("agent-7", "support")))
    hr = client.with_principal(Principal("alice", "hr", _token("alice", "hr")))
    hr.create_collection("employee_records", vectors_config=models.VectorParams(size=768, distance=models.Distance.COSINE))
    v = np.full(384, 384 ** -0.5)
    with pytest.raises(InvalidVectorError) as exc:
        client.upsert("employee_records", [models.PointStruct(id=1, vector=v.tolist(), payload={"text": "hello"})])
    msg = str(exc.value)
    assert "has dimension 384, the collection expects 768" in msg
    assert "embed with the model the collection was created for" in msg and "VectorParams(size=384)" in msg
    client.close()


def test_a_ttl_with_a_unit_says_it_takes_seconds(setup: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["credential", "issue", "--authority", "keys/support-authority.key", "--agent", "agent-7",
                  "--boundary", "support", "--ttl", "1d"])
    assert "'1d' is not a number; give the lifetime in seconds, e.g. 86400 for a day" in capsys.readouterr().err


def test_the_example_policy_names_every_missing_key_file_at_once_and_its_commands_make_them(
        setup: Path, capsys) -> None:
    # The README points at docs/policy.example.toml as "a complete file"; next to the README's
    # three keys it names four more, and loading stopped at the first missing one.
    shutil.copy(ROOT / "docs" / "policy.example.toml", setup / "example.toml")
    (setup / "keys" / "hr-authority.key.pub").unlink()  # a lost .pub: `keys pub` writes it again
    with pytest.raises(ConfigError) as exc:
        QdrantClient(":memory:", guard="example.toml")
    msg = str(exc.value)
    assert "5 key files the policy names do not exist" in msg
    commands = [shlex.split(part) for part in msg.split("`")[1::2]]
    # and the audit/ directory the example's audit_log needs (since h-onboard)
    assert len(commands) == 6 and commands.pop() == ["mkdir", "-p", str(setup / "audit")]
    assert ["qdrant-guard", "keys", "pub", "--key", str(setup / "keys" / "hr-authority.key")] in commands
    for argv in commands:
        _cli(capsys, argv[1:])
    (setup / "audit").mkdir()  # the example says the guard creates the log file, not its directory
    QdrantClient(":memory:", guard="example.toml").close()


def test_the_command_answers_version(capsys) -> None:
    import qdrant_guard

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"qdrant-guard {qdrant_guard.__version__}"


def test_calibrate_on_the_guarded_collection_warns_that_its_vectors_are_already_noised(setup: Path, capsys) -> None:
    # README: "calibrate on your own collection". Pointed at the guarded store, calibrate took the
    # noised vectors for clean ones, measured noise on noise and signed the record without a word.
    import json

    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(30, 8))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    (setup / "queries.jsonl").write_text("".join(json.dumps(v.tolist()) + "\n" for v in vectors[:20]))
    guarded = QdrantClient(path=str(setup / "guarded"), guard="policy.toml",
                           principal=Principal("agent-7", "support", _token("agent-7", "support")))
    guarded.with_principal(Principal("alice", "hr", _token("alice", "hr"))).create_collection(
        "employee_records", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
    guarded.upsert("employee_records", [models.PointStruct(id=i, vector=v.tolist(), payload={"source": f"s{i}"})
                                        for i, v in enumerate(vectors)])
    guarded.close()
    plain = QdrantClient(path=str(setup / "clean"))
    plain.create_collection("employee_records", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
    plain.upsert("employee_records", models.Batch(ids=list(range(30)), vectors=vectors.tolist()))
    plain.close()
    for store, warned in (("guarded", True), ("clean", False)):
        capsys.readouterr()
        rc = cli.main(["calibrate", "--path", store, "--collection", "employee_records", "--queries", "queries.jsonl",
                       "--out", f"{store}.json", "--policy", "policy.toml", "--no-progress", "--seed", "1"])
        err = capsys.readouterr().err
        assert rc == 0, err
        assert ("warning: 30 point(s) of --collection 'employee_records' carry a qdrant_guard receipt" in err) is warned
        assert ("calibrate a staging collection of the clean vectors" in err) is warned
