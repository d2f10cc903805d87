"""Three items the h-left entry of docs/security-testing.md left open (branch h-left2).

Each test fails on the code before its fix: the guard accepted a utility record measured on no
more points than its k, `calibrate --policy` exited 0 with a record its policy's guard refuses
writes under, and credentials were issued and verified for names with control characters.
Real local Qdrant and real Ed25519 keys; no mocks.
"""
from __future__ import annotations

import base64
import dataclasses
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from guardkit import make_kit, models, staging_record
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import GuardRefusal, Principal, QdrantClient, cli, keys
from qdrant_guard.boundary import (
    CREDENTIAL_SIGNATURE_PREFIX, TOKEN_PREFIX, CredentialRejected, issue_credential, verify_credential,
)
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import GuardArgumentValueError, QdrantGuardError


# -- 1. the guard refuses a record measured on no more points than its k -------------------------

def _record_of(kit, tmp: Path, n_documents: int) -> tuple[Path, object, object]:
    """The staging record (k 10) re-signed by the guard's key with ``n_documents`` points."""
    from qdrant_guard.utility import UTILITY_DOMAIN

    rec, docs = staging_record(kit, tmp / "fresh.json", dim=32)
    small = dataclasses.replace(rec, n_documents=n_documents, signature=None)
    sig = keys.load_private_key(kit.guard_key_path).sign(UTILITY_DOMAIN + small.signed_bytes())
    path = tmp / f"n{n_documents}.json"
    path.write_text(dataclasses.replace(small, signature=base64.b64encode(sig).decode("ascii")).to_json())
    return path, rec, docs


def _write(kit, path: Path, rec, docs, **utility) -> int:
    coll = {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False},
            "noise": {"epsilon": rec.epsilon, "radius": 0.01}, "utility": {"record": str(path), **utility}}
    cl = QdrantClient(":memory:", guard=kit.config({"docs": coll}, epsilon_ceiling={"PII": 5.0}),
                      principal=kit.principal("alice", "hr"))
    cl.create_collection("docs", vectors_config=models.VectorParams(size=32, distance=models.Distance.COSINE))
    cl.upsert("docs", [models.PointStruct(id=1, vector=docs[0].tolist())])
    return RawClient.count(cl, "docs").count


@pytest.mark.parametrize("n_documents", [10, 3, 1])
def test_the_guard_refuses_a_record_of_no_more_points_than_k(tmp_path: Path, n_documents: int) -> None:
    # Before: written (1 point); every top-10 of such a collection holds every point, so the
    # record's drops are 0 at every level and it vouched for any noise it measured.
    kit = make_kit(tmp_path)
    path, rec, docs = _record_of(kit, tmp_path, n_documents)
    with pytest.raises(GuardRefusal) as exc:
        _write(kit, path, rec, docs)
    assert exc.value.verdict == "UTILITY_DEGRADED"
    msg = str(exc.value)
    assert f"utility record {str(path)!r} was calibrated on {n_documents} point(s), no more than its k 10" in msg
    assert "utility.allow_small_records = true" in msg and "re-run `qdrant-guard calibrate`" in msg
    assert exc.value.details["reasons"]["1"].startswith("small_collection: ")


def test_a_record_of_more_points_than_k_or_a_policy_that_opts_in_or_enforce_off_writes(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    path, rec, docs = _record_of(kit, tmp_path, 11)
    assert _write(kit, path, rec, docs) == 1  # k + 1 points: no refusal
    path, rec, docs = _record_of(kit, tmp_path, 10)
    assert _write(kit, path, rec, docs, allow_small_records=True) == 1
    assert _write(kit, path, rec, docs, enforce=False) == 1


def test_allow_small_records_is_a_bool_and_documented() -> None:
    from qdrant_guard.errors import ConfigError
    from qdrant_guard.policy import UtilityPolicy, config_from_dict

    assert UtilityPolicy().allow_small_records is False
    with pytest.raises(ConfigError):
        config_from_dict({"collections": {"kb": {"utility": {"allow_small_records": "yes"}}}}, source="t")
    root = Path(__file__).resolve().parent.parent
    assert "allow_small_records" in (root / "docs/policy.md").read_text()
    assert "# allow_small_records = false" in (root / "docs/policy.example.toml").read_text()


# -- 2. calibrate --policy exits 3 when the policy's guard would refuse writes under its record ---

def test_calibrate_exits_3_and_keeps_the_record_when_it_misses_the_policys_epsilon(tmp_path: Path, capsys) -> None:
    # Before: exit 0 with a warning, so `calibrate && deploy` deployed a policy whose writes
    # are all refused (UTILITY_DEGRADED).
    from test_leftovers36 import _policy_file, _staging_args

    from qdrant_guard.utility import EXIT_POLICY_NOT_COVERED, UtilityRecord

    kit = make_kit(tmp_path)
    pol = _policy_file(kit, tmp_path)
    args = _staging_args(tmp_path) + ["--policy", str(pol), "--policy-collection", "kb"]
    args[args.index("--epsilons") + 1] = "2"  # only weaker noise than the policy's epsilon 1
    assert EXIT_POLICY_NOT_COVERED == 3
    assert cli.main(args) == 3
    err = capsys.readouterr().err
    assert f"error: {tmp_path / 'u.json'} was written, but the guard of --policy {pol} [collections.kb]" in err
    assert "so calibrate exits 3: it noises at epsilon 1, which this record does not cover" in err
    assert UtilityRecord.from_json((tmp_path / "u.json").read_text()).epsilon == 2.0  # kept
    # Covered: 0, and enforce = false (the guard refuses nothing for utility): 0 too.
    args[args.index("--epsilons") + 1] = "0.5,1,2"
    assert cli.main(args) == 0
    capsys.readouterr()
    args[args.index("--epsilons") + 1] = "2"
    pol.write_text(pol.read_text().replace('metric = "overlap"', 'metric = "overlap"\nenforce = false'))
    assert cli.main(args) == 0


def test_calibrate_exits_3_for_a_small_collection_record_unless_the_policy_allows_it(tmp_path: Path, capsys) -> None:
    from test_leftovers36 import _cli_args, _policy_file

    kit = make_kit(tmp_path)
    pol = _policy_file(kit, tmp_path)
    args = _cli_args(tmp_path, 3, 3) + ["--policy", str(pol), "--allow-small-collection"]
    assert cli.main(args) == 3
    err = capsys.readouterr().err
    assert "calibrated on 3 point(s), no more than its k 3" in err and "so calibrate exits 3" in err
    assert (tmp_path / "u.json").exists()
    pol.write_text(pol.read_text().replace('metric = "overlap"', 'metric = "overlap"\nallow_small_records = true'))
    assert cli.main(args) == 0
    assert "so calibrate exits" not in capsys.readouterr().err


def test_calibrate_help_documents_exit_3(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["calibrate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "3 the record was written, but the guard of --policy would refuse writes under it" in out


# -- 3. no credential names an agent or boundary with an unprintable character --------------------

BAD = {"newline": "\n", "cr": "\r", "escape": "\x1b", "nul": "\x00", "line-separator": "\u2028",
       "rlo": "\u202e", "lri": "\u2066", "tab": "\t", "del": "\x7f", "c1": "\x9b"}


# How names.py spells a character from U+0080 to U+00FF: as bash's $'...' reads it (\u00XX), not
# repr's \xHH, which bash would read as one byte.
_SPELT = {"\x9b": "'\\u009b'"}


def _forged(sk: Ed25519PrivateKey, agent: str, boundary: str, now: int = 1_700_000_000) -> str:
    """A token with these claims, signed as issue_credential signs (which no longer issues them)."""
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")

    claims = {"v": 1, "agent_id": agent, "boundary": boundary, "iat": now, "exp": now + 3600,
              "kid": keys.key_id(sk.public_key()), "alg": "Ed25519", "jti": "abcDEF_-12"}
    body = canonical_json(claims)
    return f"{TOKEN_PREFIX}.{b64(body)}.{b64(sk.sign(CREDENTIAL_SIGNATURE_PREFIX + body))}"


@pytest.mark.parametrize("field", ["agent_id", "boundary"])
@pytest.mark.parametrize("ch", list(BAD.values()), ids=list(BAD))
def test_issue_credential_refuses_an_unprintable_character(field: str, ch: str) -> None:
    names = {"agent_id": "ops-bot", "boundary": "hr", field: f"ops{ch}bot"}
    with pytest.raises(GuardArgumentValueError) as exc:
        issue_credential(Ed25519PrivateKey.generate(), **names)
    msg = str(exc.value)
    assert msg.startswith(f"issue_credential() {field} {names[field]!r} holds the unprintable character "
                          f"{_SPELT.get(ch, repr(ch))} (U+{ord(ch):04X}) at index 3; ")
    assert "use a name of printable characters" in msg
    assert msg.isprintable()


@pytest.mark.parametrize("ch", list(BAD.values()), ids=list(BAD))
def test_credential_issue_refuses_an_unprintable_agent_or_boundary(tmp_path: Path, capsys, ch: str) -> None:
    assert cli.main(["keys", "new", "--out", str(tmp_path / "a.key")]) == 0
    capsys.readouterr()
    for flag, argv in (("--agent", ["--agent", f"ops{ch}bot", "--boundary", "hr"]),
                       ("--boundary", ["--agent", "ops", "--boundary", f"hr{ch}x"])):
        assert cli.main(["credential", "issue", "--authority", str(tmp_path / "a.key"), *argv]) == 2
        out = capsys.readouterr()
        assert out.out == ""  # no token
        line = out.err.rstrip("\n")
        assert line.isprintable() and line.startswith(f"error: {flag} ")
        assert f"(U+{ord(ch):04X}) at index" in line and line.endswith("; nothing was issued")


@pytest.mark.parametrize("field", ["agent_id", "boundary"])
@pytest.mark.parametrize("ch", list(BAD.values()), ids=list(BAD))
def test_verify_rejects_a_credential_naming_an_unprintable_character(field: str, ch: str) -> None:
    # Before: verified (a token issued before the fix, or by another issuer), and its name then
    # went into the audit log and every message about the caller.
    sk = Ed25519PrivateKey.generate()
    names = {"agent_id": "ops-bot", "boundary": "hr", field: f"ops{ch}bot"}
    tok = _forged(sk, names["agent_id"], names["boundary"])
    with pytest.raises(CredentialRejected) as exc:
        verify_credential(tok, authorities={names["boundary"]: [sk.public_key()]}, now=1_700_000_100)
    assert exc.value.reason == "malformed"
    msg = str(exc.value)
    assert msg.isprintable() and f"claim {field} {names[field]!r} holds the unprintable character" in msg


def test_printable_names_still_issue_and_verify() -> None:
    sk = Ed25519PrivateKey.generate()
    for agent in ("ops bot", "o'ps;bot", "Zoë-7", "代理"):
        tok = issue_credential(sk, agent_id=agent, boundary="hr team", now=1_700_000_000)
        assert verify_credential(tok, authorities={"hr team": [sk.public_key()]}, now=1_700_000_100).agent_id == agent


def test_the_guard_refuses_a_principal_whose_credential_names_an_unprintable_character(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    tok = _forged(kit.authority["hr"], "ops\x1b[31mbot", "hr", now=int(time.time()))

    coll = {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False}}
    with pytest.raises(QdrantGuardError) as exc:
        cl = QdrantClient(":memory:", guard=kit.config({"docs": coll}),
                          principal=Principal("ops\x1b[31mbot", "hr", tok))
        cl.create_collection("docs", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    assert "malformed" in str(exc.value) and "'\\x1b' (U+001B) at index 3" in str(exc.value)
    assert "\x1b" not in str(exc.value)
