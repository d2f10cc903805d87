"""A second new-user walkthrough (2026-12-06): what the first run still got wrong.

A credential that expired (or is not valid yet) was reported as a bare Unix time with no fix; a
deleted authority ``.pub`` was answered with "`keys new` writes the public key", which makes a new
pair that no longer verifies the credentials already issued, and no command wrote the ``.pub``
again; ``calibrate --clip-norm`` did not say its default or which policy key it mirrors; and
``calibrate`` on a collection no larger than ``--k`` signed a record of drop 0 without a word.
Each test failed on the code before its fix (real keys, real local-mode Qdrant, the real CLI).
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from qdrant_client import QdrantClient as RawClient
from qdrant_client import models

from qdrant_guard import ConfigError, QdrantClient, cli
from qdrant_guard import keys as qkeys
from qdrant_guard.boundary import CredentialRejected, issue_credential, verify_credential

NOW = 1_796_520_000.0  # 2026-12-06T01:20:00Z


def _reject(token: str, sk: Ed25519PrivateKey, now: float) -> CredentialRejected:
    with pytest.raises(CredentialRejected) as ei:
        verify_credential(token, authorities={"hr": [sk.public_key()]}, now=now)
    return ei.value


def test_an_expired_credential_says_when_in_utc_and_how_to_get_a_new_one() -> None:
    # Before: "credential rejected (expired): credential expired at 1796523600".
    sk = Ed25519PrivateKey.generate()
    tok = issue_credential(sk, agent_id="alice", boundary="hr", ttl_s=3600, now=NOW)
    exc = _reject(tok, sk, NOW + 3600 + 31)
    assert exc.reason == "expired"
    msg = str(exc)
    assert "alice@hr expired at 2026-12-06T02:20:00Z" in msg
    assert "`qdrant-guard credential issue --authority AUTHORITY_KEY --agent alice --boundary hr`" in msg


def test_a_credential_from_the_future_names_the_clocks() -> None:
    sk = Ed25519PrivateKey.generate()
    tok = issue_credential(sk, agent_id="alice", boundary="hr", ttl_s=3600, now=NOW)
    exc = _reject(tok, sk, NOW - 120)
    assert exc.reason == "not_yet_valid"
    assert "valid from 2026-12-06T01:20:00Z" in str(exc) and "clock" in str(exc)


def test_a_claim_time_out_of_datetimes_range_is_shown_as_the_number() -> None:
    # exp is an unbounded JSON integer: its message must not raise OverflowError instead.
    from qdrant_guard.boundary import _utc

    assert _utc(10 ** 30) == str(10 ** 30)
    assert _utc(0) == "1970-01-01T00:00:00Z"


def _keys(tmp: Path, *names: str) -> None:
    for name in names:
        assert cli.main(["keys", "new", "--out", str(tmp / "keys" / name)]) == 0


def test_keys_pub_writes_the_same_public_key_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _keys(tmp_path, "hr-authority.key")
    key = tmp_path / "keys" / "hr-authority.key"
    pub = Path(str(key) + ".pub")
    original = pub.read_text()
    capsys.readouterr()
    pub.unlink()
    assert cli.main(["keys", "pub", "--key", str(key)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert pub.read_text() == original
    assert out["public_key_file"] == str(pub)
    assert out["key_id"] == qkeys.key_id(qkeys.load_private_key(key).public_key())
    # A credential issued before the .pub was lost still verifies under the rewritten one.
    tok = issue_credential(qkeys.load_private_key(key), agent_id="alice", boundary="hr")
    assert verify_credential(tok, authorities={"hr": [qkeys.load_public_key(pub)]}).boundary == "hr"


def test_keys_pub_never_replaces_an_existing_pub(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _keys(tmp_path, "a.key", "b.key")
    a, b = tmp_path / "keys" / "a.key", tmp_path / "keys" / "b.key"
    Path(str(a) + ".pub").write_text(Path(str(b) + ".pub").read_text())  # someone's else's key there
    before = Path(str(a) + ".pub").read_text()
    capsys.readouterr()
    assert cli.main(["keys", "pub", "--key", str(a)]) == 2
    assert "exists; refusing to overwrite" in capsys.readouterr().err
    assert Path(str(a) + ".pub").read_text() == before


def test_a_policy_whose_pub_was_deleted_names_keys_pub_not_a_new_pair(tmp_path: Path) -> None:
    # Before: "`qdrant-guard keys new --out KEY` writes the public key beside the private one",
    # which makes a new authority that no longer verifies the credentials already issued.
    _keys(tmp_path, "guard.key", "hr-authority.key")
    (tmp_path / "keys" / "hr-authority.key.pub").unlink()
    pol = tmp_path / "policy.toml"
    pol.write_text(textwrap.dedent("""\
        signing_key = "keys/guard.key"
        [boundaries.hr]
        authority_keys = ["keys/hr-authority.key.pub"]
        [collections.employee_records]
        class = "PII"
        owner = "hr"
        """))
    with pytest.raises(ConfigError) as ei:
        QdrantClient(":memory:", guard=str(pol))
    assert f"`qdrant-guard keys pub --key {tmp_path / 'keys' / 'hr-authority.key'}`" in str(ei.value)
    # No private key beside it: the old hint, which is then the right one.
    (tmp_path / "keys" / "hr-authority.key").unlink()
    with pytest.raises(ConfigError) as ei:
        QdrantClient(":memory:", guard=str(pol))
    assert "keys pub" not in str(ei.value) and "keys new --out KEY" in str(ei.value)


def test_calibrate_clip_norm_help_names_its_default_and_policy_key(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["calibrate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    at = text.rindex("--clip-norm CLIP_NORM")  # the option, not the usage line
    assert "noise.clip_norm (default 1.0" in text[at:at + 200]


def _calibrate(tmp: Path, points: int, k: int) -> list[str]:
    store = tmp / f"store{points}"
    c = RawClient(path=str(store))
    c.create_collection("kb", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    c.upsert("kb", [models.PointStruct(id=i, vector=[1.0 + i, 0.5, 0.25 * i, 0.1 * (i % 3)])
                    for i in range(points)])
    c.close()
    q = tmp / "q.jsonl"
    q.write_text("[1.0, 0.5, 0.0, 0.1]\n[3.0, 0.5, 0.5, 0.1]\n")
    _keys(tmp, f"g{points}.key")
    return ["calibrate", "--path", str(store), "--collection", "kb", "--queries", str(q), "--no-progress",
            "--seed", "0", "--k", str(k), "--out", str(tmp / f"u{points}.json"),
            "--key", str(tmp / "keys" / f"g{points}.key"), "--allow-few-queries"]


def test_calibrate_warns_when_the_collection_is_no_larger_than_k(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: "chosen epsilon 0.125 ..., recall drop 0.0000" and nothing else: a 6-point
    # collection at k=10 returns every point to every query, so no noise can show a drop.
    # Since test_leftovers36 such a record is refused unless --allow-small-collection asks for it;
    # the warning stays for a record signed that way.
    assert cli.main(_calibrate(tmp_path, 6, 10) + ["--allow-small-collection"]) == 0
    err = capsys.readouterr().err
    assert "holds 6 point(s), no more than --k 10 (signed under --allow-small-collection)" in err
    assert cli.main(_calibrate(tmp_path, 12, 3)) == 0
    assert "no more than --k" not in capsys.readouterr().err


@pytest.mark.parametrize("section,key,word,hint", [
    ({"collections": {"kb": {"noise": {}}}}, "clip_norm", "none",
     "TOML has no null; its default is 1.0, and only a GuardConfig built in Python can unset it (clip_norm=None)"),
    ({"receipts": {}}, "max_age_s", "null", "TOML has no null; leave the key out: its default is unset"),
])
def test_a_null_written_as_text_is_told_toml_has_none(section: dict, key: str, word: str, hint: str) -> None:
    # Before: "expected a number, got 'none' (str)", though `calibrate --clip-norm none` is how the
    # CLI spells an unclipped policy, and nothing said how to write one in a policy file.
    from qdrant_guard.policy import config_from_dict

    data = json.loads(json.dumps(section))
    inner = data["collections"]["kb"]["noise"] if "collections" in data else data["receipts"]
    inner[key] = word
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data)
    assert hint in str(ei.value)
    inner[key] = "x"  # any other string keeps the plain message
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data)
    assert "TOML has no null" not in str(ei.value) and "expected a number, got 'x' (str)" in str(ei.value)


def test_a_revoked_credential_says_where_it_is_revoked_and_how_to_replace_it() -> None:
    # Before: "credential rejected (revoked): credential <jti> is revoked", naming neither the
    # agent, nor the policy list, nor the fix.
    sk = Ed25519PrivateKey.generate()
    tok = issue_credential(sk, agent_id="agent-r", boundary="hr", ttl_s=3600, now=NOW)
    jti = verify_credential(tok, authorities={"hr": [sk.public_key()]}, now=NOW).jti
    with pytest.raises(CredentialRejected) as ei:
        verify_credential(tok, authorities={"hr": [sk.public_key()]}, revoked_credentials=[jti], now=NOW)
    assert ei.value.reason == "revoked"
    assert f"credential {jti} of agent-r@hr is revoked (listed in [boundaries.hr] revoked_credentials)" in str(ei.value)
    assert "`qdrant-guard credential issue --authority AUTHORITY_KEY --agent agent-r --boundary hr`" in str(ei.value)


def test_a_tampered_log_names_the_repair_command_and_that_command_repairs_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: "valid prefix: 1 entries; see docs/audit-log.md for the repair procedure", which
    # named neither the command nor the trust options to give it.
    import shlex

    from qdrant_guard.audit import AuditLog

    _keys(tmp_path, "guard.key")
    log = tmp_path / "audit.jsonl"
    writer = AuditLog(str(log))
    for i in range(3):
        writer.append({"event": i})
    writer.close()
    lines = log.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"event":1', '"event":7')
    log.write_text("".join(lines))
    pub = str(tmp_path / "keys" / "guard.key.pub")
    capsys.readouterr()
    assert cli.main(["audit", "verify", str(log), "--key", pub]) == 1
    out = capsys.readouterr().out
    shown = out.split("`")[1]
    assert shown == f"qdrant-guard audit repair {log} --key {pub}"
    assert cli.main(shlex.split(shown)[1:]) == 0
    capsys.readouterr()
    assert cli.main(["audit", "verify", str(log)]) == 0
