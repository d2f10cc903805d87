"""An ordinary qdrant-client program moved onto the guard from the README (2026-12-07, h-onboard):
the friction a new user met on the way, each test failing on the code before.

* A support-ticket program whose payload text held a Stripe key was refused with "set
  credentials_in_text = \"redact\"", no section named; set at the top of the policy, as the
  message reads, it is an unknown key. The directive now names ``[collections.NAME]``.
* docs/policy.example.toml copied into an empty directory took three starts: the missing
  ``signing_key`` alone, then the six public keys, then the audit/ directory. One error now names
  all of them.
* The program's points had no ``source`` payload field, so every top-10 query returned 4 points,
  with no error or warning. A write of such points now warns, once per collection and client, at
  the caller's line (the async client's too, whose steps run in worker threads).
"""
from __future__ import annotations

import asyncio
import shlex
import shutil
import warnings
from pathlib import Path

import pytest
from qdrant_client import models

from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal, Principal, QdrantClient, QdrantGuardWarning, UntaggedSourceWarning, cli, keys
from qdrant_guard.boundary import issue_credential

ROOT = Path(__file__).resolve().parent.parent

POLICY = """\
signing_key = "keys/guard.key"
audit_log = "audit.jsonl"

[boundaries.support]
authority_keys = ["keys/support-authority.key.pub"]

[collections.tickets]
class = "PII"
owner = "support"
noise_on_write = true
text_field = "text"

[collections.kb]
class = "PUBLIC"
"""


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("guard", "support-authority"):
        assert cli.main(["keys", "new", "--out", f"keys/{name}.key"]) == 0
    (tmp_path / "policy.toml").write_text(POLICY)
    return tmp_path


def _agent() -> Principal:
    token = issue_credential(keys.load_private_key("keys/support-authority.key"), agent_id="agent-7",
                             boundary="support", ttl_s=3600)
    return Principal("agent-7", "support", token)


def _client() -> QdrantClient:
    client = QdrantClient(":memory:", guard="policy.toml", principal=_agent())
    for name in ("tickets", "kb"):
        client.create_collection(name, vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    return client


def _points(ids: range, **payload: str) -> list[models.PointStruct]:
    return [models.PointStruct(id=i, vector=[0.1 * i, 0.2, 0.3, 0.4], payload={"text": f"ticket {i}", **payload})
            for i in ids]


def test_a_text_refusal_names_the_section_its_key_goes_in(workdir: Path) -> None:
    client = _client()
    snippet = "client = Api(key='sk_live_51HqLyjWDarjtT1zdp7dcXYZabcdef123456')"
    with pytest.raises(GuardRefusal) as exc:
        client.upsert("tickets", [models.PointStruct(id=1, vector=[0.1, 0.2, 0.3, 0.4], payload={"text": snippet})])
    assert exc.value.verdict == "CREDENTIAL_IN_TEXT"
    assert ("text contains credentials ['STRIPE_KEY']; credentials are never stored or embedded: remove them, or "
            "set credentials_in_text = \"redact\" in [collections.tickets]") in str(exc.value)
    with pytest.raises(GuardRefusal) as exc:
        client.upsert("kb", [models.PointStruct(id=1, vector=[0.1, 0.2, 0.3, 0.4],
                                                payload={"text": "SSN 123-45-6789"})])
    assert "set allow_redaction_on_public = true in [collections.kb] to redact it" in str(exc.value)
    with pytest.raises(GuardRefusal) as exc:
        client.query_points("kb", query=models.Document(text="SSN 123-45-6789", model="m"))
    assert "set allow_redaction_on_public = true in [collections.kb] to send it redacted" in str(exc.value)
    # The fix, where the message puts it, is taken (the key at the top of the policy is not).
    (workdir / "policy.toml").write_text(POLICY.replace('text_field = "text"',
                                                        'text_field = "text"\ncredentials_in_text = "redact"'))
    client.close()
    client = _client()
    client.upsert("tickets", [models.PointStruct(id=1, vector=[0.1, 0.2, 0.3, 0.4], payload={"text": snippet})])
    assert client.retrieve("tickets", [1])[0].payload["text"] == "client = Api(key='[STRIPE_KEY]')"
    client.close()


def test_the_example_policy_in_an_empty_directory_starts_after_one_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "docs" / "policy.example.toml", tmp_path / "policy.toml")
    with pytest.raises(ConfigError) as exc:
        QdrantClient(":memory:", guard="policy.toml")
    msg = str(exc.value)
    assert "7 key files the policy names do not exist" in msg
    assert f"{tmp_path / 'keys' / 'guard.key'} (signing_key): `qdrant-guard keys new --out" in msg
    assert f"also, audit_log's directory {tmp_path / 'audit'} does not exist" in msg
    commands = [shlex.split(part) for part in msg.split("`")[1::2]]
    assert len(commands) == 8 and commands[-1] == ["mkdir", "-p", str(tmp_path / "audit")]
    for argv in commands[:-1]:
        assert argv[0] == "qdrant-guard" and cli.main(argv[1:]) == 0
    (tmp_path / "audit").mkdir()
    capsys.readouterr()
    QdrantClient(":memory:", guard="policy.toml").close()


def test_a_missing_signing_key_alone_is_still_the_key_stores_error(workdir: Path) -> None:
    (workdir / "keys" / "guard.key").unlink()
    with pytest.raises(keys.KeyStoreError, match=r"signing_key: cannot read key file .*guard\.key"):
        QdrantClient(":memory:", guard="policy.toml")


def _untagged_warnings(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if "carry no 'source' payload field" in str(w.message)]


def test_points_without_a_source_warn_once_at_the_callers_line(workdir: Path) -> None:
    client = _client()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.upsert("tickets", _points(range(1, 21)))
        client.upsert("tickets", _points(range(21, 23)))
        client.upsert("kb", _points(range(1, 21)))  # PUBLIC: no cap
    found = _untagged_warnings(caught)
    assert len(found) == 1, [str(w.message) for w in caught]
    assert found[0].category is UntaggedSourceWarning and found[0].filename == __file__
    assert issubclass(UntaggedSourceWarning, QdrantGuardWarning) and issubclass(QdrantGuardWarning, UserWarning)
    assert str(found[0].message).startswith(
        "qdrant_guard: 20 of the 20 point(s) written to collection 'tickets' carry no 'source' payload field")
    assert "a top-10 query returns at most 4 of them" in str(found[0].message)
    assert "set max_source_fraction in [collections.tickets.diversity]" in str(found[0].message)
    # What it warns of: a top-10 holds 4 of the 22 points.
    assert len(client.query_points("tickets", query=[0.1, 0.2, 0.3, 0.4], limit=10).points) == 4
    client.close()


def test_tagged_points_and_an_uncapped_collection_do_not_warn(workdir: Path) -> None:
    client = _client()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.upsert("tickets", [*_points(range(1, 11), source="faq"), *_points(range(11, 21), source="kb")])
    assert not _untagged_warnings(caught)
    assert len(client.query_points("tickets", query=[0.1, 0.2, 0.3, 0.4], limit=10).points) == 8
    client.close()
    for section in ('[collections.tickets.diversity]\nmode = "monitor"\n',
                    "[collections.tickets.diversity]\nmax_source_fraction = 1.0\n"):
        (workdir / "policy.toml").write_text(POLICY + section)
        client = _client()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            client.upsert("tickets", _points(range(1, 21)))
        assert not _untagged_warnings(caught), section
        assert len(client.query_points("tickets", query=[0.1, 0.2, 0.3, 0.4], limit=10).points) == 10
        client.close()


def test_the_warning_comes_before_the_write_under_w_error(workdir: Path) -> None:
    # Shown before the write is sent (2026-12-08, h-warn2): raised as an error, nothing is stored.
    client = _client()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UntaggedSourceWarning, match="carry no 'source' payload field"):
            client.upload_points("tickets", _points(range(1, 6)))
    assert client.count("tickets").count == 0
    client.close()


def test_the_async_clients_warning_lands_on_the_callers_line(workdir: Path) -> None:
    async def run() -> list[warnings.WarningMessage]:
        client = AsyncQdrantClient(":memory:", guard="policy.toml", principal=_agent())
        await client.create_collection("tickets",
                                       vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await client.upsert("tickets", _points(range(1, 21)))
            await client.upsert("tickets", _points(range(21, 23)))
        await client.close()
        return caught

    found = _untagged_warnings(asyncio.run(run()))
    assert len(found) == 1 and found[0].filename == __file__
