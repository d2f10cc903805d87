"""Claims audit 17: the sentences this session added to README.md, docs/receipt-format.md,
docs/diversity-budget.md, docs/threat-model.md, the Makefile and the ``source_field`` and
``qdrant_guard.detect`` docstrings, each run as stated (real qdrant-client local mode, real keys).

Checked and true (pinned here where no earlier test pins the case): ``make test`` runs
``mypy --strict`` on the package, then on the usage file; the detector's version-file and TLD
examples; ``verify``/``averify`` refusing the other's kind of client and checking every argument
before the owner's one audit entry; the untagged-source warning for payload changes on a dotted
``source_field`` (a ``key`` above, at or beside it, a quoted key, a ``[]`` key that is not worked
out); the ``credentials_in_text`` directive naming ``[default]`` for an unlisted collection.
"""
from __future__ import annotations

import asyncio
import re
import warnings
from pathlib import Path

import pytest
from guardkit import audit_records
from qdrant_client.http import models
from test_onboard import POLICY, _agent, workdir  # noqa: F401  (workdir: fixture)
from test_receipt_verify_async import store  # noqa: F401  (fixture)
from test_receipt_verify_client import _pii, _trusted

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient, UntaggedSourceWarning, detect
from qdrant_guard.errors import GuardArgumentTypeError, GuardArgumentValueError
from qdrant_guard.receipts import averify, verify

ROOT = Path(__file__).resolve().parent.parent


def test_make_test_runs_mypy_strict_on_the_package_then_on_the_usage_file() -> None:
    """README line 5 and the Makefile's comment: ``make test`` runs ``typecheck``, which runs mypy
    --strict over the whole package, then over tests/typing_usage.py, with the same flags."""
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "typecheck" in re.search(r"^test:(.*)$", make, re.M).group(1).split()
    recipe = re.search(r"^typecheck:.*\n((?:\t.*\n)+)", make, re.M).group(1).splitlines()
    mypy = [line.split("-m mypy", 1)[1].split() for line in recipe if "-m mypy" in line]
    assert mypy == [["--strict", "--follow-imports=silent", "qdrant_guard"],
                    ["--strict", "--follow-imports=silent", "tests/typing_usage.py"]]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "mypy --strict (the whole package, then a usage file of the public API)" in readme.split("\n", 8)[4]


# docs/threat-model.md and detect.py's docstring: files named for a version are no address
# anywhere; in a URL's path, extensions that are no TLD come off; a TLD never does.
NOT_FOUND = ["alice@v2.zip", "alice@163.zip", "alice@v2.corp.com.csv", "alice@1.2.corp.com.csv", "release@v2.zip",
             "app@v2.bundle.js", "lodash@4.17.21.tgz", "jquery@3.7.1.min.js", "pkg@2.tar.gz",
             "https://x.example/builds/agent@nightly.exe", "https://x.example/archive/main@abc.tgz", "logo@2x.png"]
FOUND = ["alice@163.com.csv", "https://x.example/u/alice@corp.zip", "exports/alice@corp.zip.csv",
         "archive/main@abc.zip", "https://x.example/archive/main@abc.zip", "exports/alice@example.com.csv",
         "?email=a@b.zip", "mailto:a@b.zip", "a@b.zip", "alice@example.com.png"]


@pytest.mark.parametrize("text", NOT_FOUND)
def test_a_file_named_for_a_version_is_no_address(text: str) -> None:
    assert detect.redact(text) == text


@pytest.mark.parametrize("text", FOUND)
def test_an_address_the_version_rules_keep(text: str) -> None:
    assert "[EMAIL]" in detect.redact(text)


# -- receipts.verify / averify (docs/receipt-format.md, README) ---------------------------------


def test_each_function_refuses_the_other_kind_of_guarded_client_naming_the_other(store) -> None:  # noqa: F811
    """"Each refuses the other's kind of client, naming the other function": the owner's guarded
    async client to verify(), and another principal's too."""
    kit, path = store
    cfg = kit.config({"pii": _pii()})

    async def run() -> None:
        owner = AsyncQdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
        bob = owner.with_principal(kit.principal("bob", "support"))
        for client in (owner, bob):
            with pytest.raises(GuardArgumentTypeError) as exc:
                verify(client, "pii", trusted_keys=_trusted(kit))
            assert "averify" in str(exc.value), str(exc.value)
        await owner.close()

    asyncio.run(run())
    sync_owner = QdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
    for client in (sync_owner, sync_owner.with_principal(kit.principal("bob", "support"))):
        with pytest.raises(GuardArgumentTypeError) as exc:
            asyncio.run(averify(client, "pii", trusted_keys=_trusted(kit)))
        assert "receipts.verify()" in str(exc.value), str(exc.value)
    sync_owner.close()


@pytest.mark.parametrize("bad", [{"batch_size": 0}, {"ids": [1, -1]}, {"now": "today"}, {"check_noise": 1},
                                 {"noise_policy": object()}, {"policy": 3}, {"revoked": 5}])
def test_averify_checks_every_argument_before_the_owners_audit_entry(store, bad) -> None:  # noqa: F811
    """"Every argument, ids included, is checked before anything is read, so a call refused for its
    arguments leaves no audit entry" (the owner's guarded async client)."""
    kit, path = store
    cfg = kit.config({"pii": _pii()})

    async def run() -> None:
        owner = AsyncQdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
        before = audit_records(kit)
        with pytest.raises((GuardArgumentTypeError, GuardArgumentValueError)):
            await averify(owner, "pii", **{"trusted_keys": _trusted(kit), **bad})
        assert audit_records(kit) == before
        assert len(await averify(owner, "pii", [10], trusted_keys=_trusted(kit))) == 1
        assert [r["op"] for r in audit_records(kit)[len(before):]] == ["receipts.verify"]
        await owner.close()

    asyncio.run(run())


# -- payload changes on a dotted source_field (docs/diversity-budget.md, source_field) ----------


def _metadata_client(workdir: Path) -> QdrantClient:
    (workdir / "policy.toml").write_text(
        POLICY.replace('text_field = "text"', 'text_field = "text"\nsource_field = "metadata.source"'))
    client = QdrantClient(":memory:", guard="policy.toml", principal=_agent())
    client.create_collection("tickets", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    client.upsert("tickets", [models.PointStruct(id=i, vector=[0.1 * i, 0.2, 0.3, 0.4],
                                                 payload={"metadata": {"source": f"d{i}"}}) for i in (1, 2, 3)])
    return client


SET_PAYLOAD = [
    # (payload, key, warns: what the warning says the call does, None for no warning)
    ({"source": None}, "metadata", "sets the 'metadata.source' payload field (its source_field) of the 1 point(s) "
                                   "named by id to null"),
    ({"metadata": {"x": 1}}, None, "replaces 'metadata' of the 1 point(s) named by id with a value without the "
                                   "'metadata.source' payload field"),
    ({"source": ""}, '"metadata"', "to \"\""),
    ({"a": 1}, "metadata.source", "to an object"),
    ({"a": None}, "metadata", None),  # beside the source field
    ({"metadata": {"source": "z"}}, None, None),  # writes a source
    # [] indexing a dict: Qdrant replaces it with [] (tests/test_source_warning_gaps.py).
    ({"source": None}, "metadata[]", "sets 'metadata[]' of the 1 point(s) named by id: Qdrant replaces 'metadata', "
                                     "which holds the 'metadata.source' payload field (its source_field), with []"),
]


@pytest.mark.parametrize("payload,key,says", SET_PAYLOAD)
def test_set_payload_on_a_dotted_source_field(workdir: Path, payload, key, says) -> None:  # noqa: F811
    client = _metadata_client(workdir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.set_payload("tickets", payload, points=[1], key=key)
    found = [w for w in caught if w.category is UntaggedSourceWarning]
    if says is None:
        assert not found, [str(w.message) for w in found]
    else:
        assert len(found) == 1 and found[0].filename == __file__
        assert str(found[0].message).startswith("qdrant_guard: set_payload on collection 'tickets' ")
        assert says in str(found[0].message)
    client.close()


def test_delete_payload_of_the_key_holding_a_dotted_source_field_warns(workdir: Path) -> None:  # noqa: F811
    client = _metadata_client(workdir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.delete_payload("tickets", ["metadata"], points=models.Filter())
    (found,) = [w for w in caught if w.category is UntaggedSourceWarning]
    assert ("deletes 'metadata' of the points the filter selects, which holds the 'metadata.source' payload field"
            in str(found.message))
    assert client.retrieve("tickets", [1])[0].payload.get("metadata") is None
    client.close()


def test_the_credentials_directive_names_default_for_an_unlisted_collection(workdir: Path) -> None:  # noqa: F811
    (workdir / "policy.toml").write_text(POLICY + '\n[default]\nclass = "PII"\nowner = "support"\n'
                                                  'writers = ["support"]\ntext_field = "text"\n')
    client = QdrantClient(":memory:", guard="policy.toml", principal=_agent())
    client.create_collection("notes", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    with pytest.raises(GuardRefusal) as exc:
        client.upsert("notes", [models.PointStruct(id=1, vector=[0.1, 0.2, 0.3, 0.4], payload={
            "text": "key='sk_live_51HqLyjWDarjtT1zdp7dcXYZabcdef123456'"})])
    assert 'set credentials_in_text = "redact" in [default]' in str(exc.value)
    client.close()


def test_a_missing_signing_key_beside_other_missing_key_files_is_one_config_error(workdir: Path) -> None:  # noqa: F811
    """README: a missing signing_key among other missing key files, or beside a missing audit_log
    directory, is listed with them in one ConfigError, each with the command that makes it."""
    from qdrant_guard import ConfigError

    (workdir / "keys" / "guard.key").unlink()
    (workdir / "keys" / "support-authority.key.pub").unlink()
    (workdir / "policy.toml").write_text(POLICY.replace('audit_log = "audit.jsonl"', 'audit_log = "logs/audit.jsonl"'))
    with pytest.raises(ConfigError) as exc:
        QdrantClient(":memory:", guard="policy.toml")
    msg = str(exc.value)
    assert "2 key files the policy names do not exist" in msg
    assert "(signing_key): `qdrant-guard keys new --out" in msg and "(boundaries.support" in msg
    assert f"also, audit_log's directory {workdir / 'logs'} does not exist" in msg


def test_the_benchs_unused_budget_note_names_the_runs_sources_and_the_option(workdir: Path) -> None:  # noqa: F811
    """README, "bench": the note reads (their sources are doc0 .. doc49) and names --source."""
    from qdrant_guard.overhead_setup import budget_unused_note
    from qdrant_guard.policy_loader import load_policy

    (workdir / "policy.toml").write_text(POLICY + '\n[collections.tickets.diversity]\nmax_source_coverage = 0.25\n'
                                                  'restricted_sources = ["board-memo-2026-q3"]\n')
    cfg = load_policy(workdir / "policy.toml")
    note = budget_unused_note(cfg.policy_for("tickets"), [f"doc{i}" for i in range(50)])
    assert note == ("the extraction budget (max_source_coverage 0.25) applies only to restricted_sources "
                    "['board-memo-2026-q3'], none of which the run's points carry (their sources are doc0 .. doc49): "
                    "no point was charged to it, so the budget's admissions are NOT in these figures; "
                    "`--source board-memo-2026-q3` tags some of the run's points with it (written by the owner "
                    "boundary, read by another)")
