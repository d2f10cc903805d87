"""A demanding new user's review (2026-12-05): each test failed on the code before its fix."""
from __future__ import annotations

import gc
from pathlib import Path

import pytest
from qdrant_client import models

from guardkit import DIM, create, make_kit
from qdrant_guard import CredentialError, GuardArgumentTypeError, Principal, QdrantClient, QdrantGuardWarning


@pytest.mark.parametrize("bad", [
    "a credential of another agent",
    "a malformed credential",
    "a tuple instead of a Principal",
])
def test_a_rejected_with_principal_leaves_the_shared_store_open(tmp_path: Path, bad: str) -> None:
    # The half-built view was collected as if it owned the connection, and its __del__ closed the
    # store under the client it was asked of: every later call failed with "instance is closed".
    kit = make_kit(tmp_path)
    cfg = kit.config({"kb": {"class": "PII", "owner": "hr", "readers": ["support"]}})
    client = QdrantClient(path=str(tmp_path / "store"), guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "kb")
    token = kit.principal("alice", "hr").credential
    arg = {"a credential of another agent": Principal("bob", "hr", token),
           "a malformed credential": Principal("alice", "hr", "not-a-token"),
           "a tuple instead of a Principal": ("alice", "hr", token)}[bad]
    with pytest.raises((CredentialError, TypeError)):
        client.with_principal(arg)
    gc.collect()
    client.upsert("kb", points=[models.PointStruct(id=1, vector=[1.0] + [0.0] * (DIM - 1))])
    assert client.count("kb").count == 1
    client.close()


def test_audit_repair_of_a_file_that_is_no_audit_log_changes_nothing(tmp_path: Path, capsys) -> None:
    # `audit repair policy.toml` (a wrong path) "repaired" the policy into a one-entry audit log and
    # moved its text to a side file; `audit verify` called it TAMPERED and pointed at the repair.
    from qdrant_guard import cli

    policy = tmp_path / "policy.toml"
    text = 'signing_key = "keys/guard.key"\naudit_log = "audit.jsonl"\n\n[collections.kb]\nclass = "PII"\n'
    policy.write_text(text)
    assert cli.main(["audit", "verify", str(policy)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"NOT AN AUDIT LOG: {policy}: none of its lines is an audit entry") and "TAMPERED" not in out
    assert cli.main(["audit", "repair", str(policy)]) == 2
    assert "is not an audit log, so nothing was changed" in capsys.readouterr().err
    assert policy.read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["policy.toml"]


def test_audit_repair_still_cuts_a_log_whose_first_entry_was_overwritten(tmp_path: Path, capsys) -> None:
    from qdrant_guard import cli
    from qdrant_guard.audit import AuditLog, verify_audit_file

    log = tmp_path / "audit.jsonl"
    writer = AuditLog(str(log))
    for i in range(3):
        writer.append({"event": "test", "i": i})
    writer.close()
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("garbage\n" + "".join(lines[1:]))
    assert cli.main(["audit", "verify", str(log)]) == 1
    assert capsys.readouterr().out.startswith("TAMPERED: corrupt at line 1")
    assert cli.main(["audit", "repair", str(log)]) == 0
    assert verify_audit_file(str(log)).ok


def _kb_policy(kit, **extra):
    return kit.config({"kb": {"class": "PII", "owner": "hr", "readers": ["support"]}}, **extra)


def test_a_persistent_store_under_a_policy_without_signing_key_is_warned_about(tmp_path: Path) -> None:
    # Before: silence, and after a restart every vector the guard had noised came back vector=None
    # to the other boundary's readers.
    import warnings

    kit = make_kit(tmp_path)
    cfg = _kb_policy(kit, signing_key=None)
    with pytest.warns(QdrantGuardWarning, match=r"sets no signing_key.*qdrant-guard keys new --out keys/guard.key"):
        client = QdrantClient(path=str(tmp_path / "store"), guard=cfg, principal=kit.principal("alice", "hr"))
    client.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        QdrantClient(":memory:", guard=cfg).close()  # the store dies with the key
        client = QdrantClient(path=str(tmp_path / "store"), guard=_kb_policy(kit))  # a key of its own
        client.close()
        public = kit.config({"kb": {"class": "PUBLIC"}}, signing_key=None, unlisted="public")
        QdrantClient(path=str(tmp_path / "store"), guard=public).close()  # nothing is noised


def test_the_warning_names_the_restart_loss_it_prevents(tmp_path: Path) -> None:
    # What the warning says happens does: the support reader gets vector=None after a restart.
    import warnings

    kit = make_kit(tmp_path)
    cfg = _kb_policy(kit, signing_key=None)
    store = str(tmp_path / "store")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        owner = QdrantClient(path=store, guard=cfg, principal=kit.principal("alice", "hr"))
        create(owner, "kb")
        owner.upsert("kb", points=[models.PointStruct(id=1, vector=[1.0] + [0.0] * (DIM - 1),
                                                      payload={"source": "a"})])
        reader = owner.with_principal(kit.principal("bob", "support"))
        assert reader.retrieve("kb", [1], with_vectors=True)[0].vector is not None
        owner.close()
        again = QdrantClient(path=store, guard=cfg, principal=kit.principal("bob", "support"))
        assert again.retrieve("kb", [1], with_vectors=True)[0].vector is None
        again.close()


def test_the_async_client_warns_alike(tmp_path: Path) -> None:
    from qdrant_guard import AsyncQdrantClient

    kit = make_kit(tmp_path)
    with pytest.warns(UserWarning, match="sets no signing_key"):
        AsyncQdrantClient(path=str(tmp_path / "astore"), guard=_kb_policy(kit, signing_key=None))


def test_a_check_across_policy_keys_is_not_located_at_root() -> None:
    # Before: "p.toml: <root>: collections.kb names boundary 'suport', ...": a pydantic location
    # no TOML author wrote; the message itself names the key.
    from qdrant_guard import ConfigError
    from qdrant_guard.policy import config_from_dict

    data = {"boundaries": {"support": {"authority_keys": ["ed25519:" + "A" * 43 + "="]}},
            "collections": {"kb": {"class": "PII", "owner": "support", "readers": ["suport"]}}}
    with pytest.raises(ConfigError) as ei:
        config_from_dict(data, source="p.toml")
    assert "<root>" not in str(ei.value)
    assert "p.toml: collections.kb.readers names boundary 'suport'" in str(ei.value)


@pytest.mark.parametrize("agent,boundary,fix", [
    ("bob", "hr", "pass Principal('alice', 'hr', token), or issue 'bob' a credential of its own"),
    ("alice", "support", "pass Principal('alice', 'hr', token), or issue a credential for 'support'"),
])
def test_a_principal_that_misnames_its_credential_is_told_the_fix(tmp_path: Path, agent, boundary, fix) -> None:
    # Before: only "principal boundary 'support' does not match the credential's boundary 'hr'".
    kit = make_kit(tmp_path)
    token = kit.principal("alice", "hr").credential
    with pytest.raises(CredentialError, match="does not match the credential's") as ei:
        QdrantClient(":memory:", guard=_kb_policy(kit), principal=Principal(agent, boundary, token))
    assert fix in str(ei.value)


def test_a_wrong_guard_or_principal_type_is_a_guard_error_naming_the_fix(tmp_path: Path) -> None:
    # Before: a bare TypeError, outside QdrantGuardError, and for a dict policy no word of how to
    # pass one. It stays a TypeError, as Python raises for a wrong argument type.
    from qdrant_guard import QdrantGuardError

    with pytest.raises(QdrantGuardError, match=r"not dict; a dict is read by qdrant_guard.policy.config_from_dict") as ei:
        QdrantClient(":memory:", guard={"unlisted": "public"})
    assert isinstance(ei.value, TypeError)
    kit = make_kit(tmp_path)
    token = kit.principal("alice", "hr").credential
    client = QdrantClient(":memory:", guard=_kb_policy(kit))
    for call in (lambda: QdrantClient(":memory:", guard=_kb_policy(kit), principal=("alice", "hr", token)),
                 lambda: client.with_principal(("alice", "hr", token))):
        with pytest.raises(QdrantGuardError, match=r"not tuple: pass Principal\(agent_id, boundary, token\)") as ei:
            call()
        assert isinstance(ei.value, TypeError)


def test_a_missing_utility_record_names_the_policy_key_and_the_command_that_writes_it(tmp_path: Path) -> None:
    # Before: "utility record '.../nope.json' cannot be read: No such file or directory", no fix.
    from qdrant_guard import ConfigError

    kit = make_kit(tmp_path)
    missing = tmp_path / "nope.json"
    cfg = kit.config({"kb": {"class": "PII", "owner": "hr", "utility": {"record": str(missing)}}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "kb")
    with pytest.raises(ConfigError) as ei:
        client.upsert("kb", points=[models.PointStruct(id=1, vector=[1.0] + [0.0] * (DIM - 1))])
    assert "the policy's utility.record" in str(ei.value)
    assert f"qdrant-guard calibrate ... --out {missing}" in str(ei.value)
    assert client.count("kb").count == 0


def test_every_cli_command_help_says_what_the_command_does() -> None:
    # Before: `demo`, `calibrate`, `keys new`, `receipt verify`, `audit repair` and `audit replay`
    # printed only usage and options under --help.
    import argparse

    from qdrant_guard import cli

    def leaves(p: argparse.ArgumentParser, path: str):
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield path, p
        for a in subs:
            for name, child in a.choices.items():
                yield from leaves(child, f"{path} {name}")

    from qdrant_guard.evaluation import build_parser as eval_parser

    # `eval` is parsed by its own parser (cli.main hands it over), which has its description.
    silent = [path for path, p in leaves(cli.build_parser(), "qdrant-guard")
              if path != "qdrant-guard eval" and not (p.description or "").strip()]
    assert not silent
    assert eval_parser().description
    assert "overhead benchmark" in cli.build_parser().description


def test_receipt_verify_of_a_collection_the_store_lacks_names_the_ones_it_has(tmp_path: Path, capsys) -> None:
    # Before: "error: Collection employee_record not found" (qdrant-client's words, no store, no list).
    from qdrant_client import QdrantClient as RawClient

    from qdrant_guard import cli, keys

    store = tmp_path / "store"
    raw = RawClient(path=str(store))
    raw.create_collection("employee_records", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    raw.close()
    _, pk = keys.generate_keypair()
    args = ["receipt", "verify", "--path", str(store), "--trusted-key", keys.public_key_to_str(pk)]
    assert cli.main([*args, "--collection", "employee_record"]) == 2
    err = capsys.readouterr().err
    assert f"--collection 'employee_record' is not in the store at --path {str(store)!r}" in err
    assert "(its collections: employee_records)" in err
    assert cli.main([*args, "--collection", "employee_records"]) == 0  # the store was closed for the next client


def test_an_admin_refusal_under_a_policy_without_owner_names_the_writers_who_may(tmp_path: Path) -> None:
    # Before: "boundary 'hr' may not admin PII collection 'kb'; no boundary may: its policy names no
    # owner or writers", while the writer 'support' could create it.
    from qdrant_guard import GuardRefusal

    kit = make_kit(tmp_path)
    cfg = kit.config({"kb": {"class": "PII", "writers": ["support"], "readers": ["hr"]}})
    hr = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    with pytest.raises(GuardRefusal) as ei:
        create(hr, "kb")
    msg = str(ei.value)
    assert "boundary 'hr' may not administer PII collection 'kb'; allowed boundaries: ['support']" in msg
    assert "no boundary may" not in msg
    create(hr.with_principal(kit.principal("bob", "support")), "kb")  # as the message says


def test_a_langchain_retriever_forwards_query_text_per_call_as_integrations_md_says(tmp_path: Path) -> None:
    # docs/integrations.md, "New-user review": invoke(question, query_text=question) reaches the
    # guard; the question alone does not, and require_text refuses it.
    pytest.importorskip("langchain_qdrant")
    from langchain_qdrant import QdrantVectorStore

    from integration_embeddings import DIM as LC_DIM, LCHashingEmbeddings
    from qdrant_guard import GuardRefusal

    kit = make_kit(tmp_path)
    cfg = kit.config({"kb": {"class": "PII", "owner": "hr", "text_field": "page_content",
                             "query": {"require_text": True}, "diversity": {"enabled": False}}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "kb", dim=LC_DIM)
    store = QdrantVectorStore(client=client, collection_name="kb", embedding=LCHashingEmbeddings())
    store.add_texts(["holidays are 25 days a year"], metadatas=[{"source": "handbook"}])
    retriever = store.as_retriever(search_kwargs={"k": 1})
    question = "how many holidays do I get"
    assert len(retriever.invoke(question, query_text=question)) == 1
    with pytest.raises(GuardRefusal, match="TEXT_REQUIRED"):
        retriever.invoke(question)


def test_a_credential_file_path_given_as_the_token_is_told_to_pass_the_contents(tmp_path: Path) -> None:
    # `bench --credential` takes a file, so a user passed Principal(..., "agent-7.cred") to the client
    # and got only "token must be 'qgc1.<claims>.<signature>'".
    kit = make_kit(tmp_path)
    with pytest.raises(CredentialError, match=r"open\(path\).read\(\).strip\(\), not the path") as ei:
        QdrantClient(":memory:", guard=_kb_policy(kit), principal=Principal("agent-7", "support", "agent-7.cred"))
    assert "agent-7.cred" not in str(ei.value)  # a mistyped token is never echoed


@pytest.mark.parametrize("data,shown,gone", [
    # Before: "epsilon_ceiling.SECRET.[key]: ...", pydantic's mark for a failing table key.
    ({"epsilon_ceiling": {"SECRET": 1.0}}, "p.toml: epsilon_ceiling.SECRET: Input should be 'PUBLIC'", "[key]"),
    # Before: "Tuple should have at least 1 item after validation, not 0".
    ({"boundaries": {"hr": {"authority_keys": []}}},
     "boundaries.hr.authority_keys = []: a boundary needs at least one authority key: the .pub file", "Tuple"),
    # Before: "unknown key 'kb' (...); check the spelling — see docs/policy.md".
    ({"kb": {"class": "PII", "owner": "hr"}}, "a collection's section is [collections.kb]", "check the spelling"),
])
def test_policy_mistakes_read_in_toml_terms(data: dict, shown: str, gone: str) -> None:
    from qdrant_guard import ConfigError
    from qdrant_guard.policy import config_from_dict

    with pytest.raises(ConfigError) as ei:
        config_from_dict(data, source="p.toml")
    assert shown in str(ei.value) and gone not in str(ei.value)


def test_an_unreachable_server_raises_what_docs_server_md_says(tmp_path: Path) -> None:
    # docs/server.md, "A server that cannot be reached": qdrant-client's error, except a budgeted
    # read, which is FAIL_CLOSED chained to it. Port 1 on loopback refuses at once.
    from qdrant_client.http.exceptions import ResponseHandlingException

    from qdrant_guard import GuardRefusal

    kit = make_kit(tmp_path)
    cfg = kit.config({"kb": {"class": "PII", "owner": "hr", "readers": ["support"],
                             "diversity": {"max_source_coverage": 0.25}}})
    client = QdrantClient(url="http://127.0.0.1:1", check_compatibility=False, timeout=5, guard=cfg,
                          principal=kit.principal("bob", "support"))
    with pytest.raises(ResponseHandlingException):
        client.get_collections()
    with pytest.raises(GuardRefusal, match=r"FAIL_CLOSED: resolving aliases \(get_aliases\) failed") as ei:
        client.query_points("kb", query=[1.0] + [0.0] * (DIM - 1), limit=3)
    assert isinstance(ei.value.__cause__, ResponseHandlingException)
    assert "Check that Qdrant is reachable" in str(ei.value)


def test_a_principal_built_wrong_raises_a_guard_error_and_bytes_are_told_to_decode() -> None:
    # Before: bare TypeError / ValueError outside QdrantGuardError; a token read as bytes (binary
    # file, subprocess output) got no word of decoding it.
    from qdrant_guard import ConfigError, QdrantGuardError

    with pytest.raises(QdrantGuardError, match=r"not bytes: decode it \(token.decode\(\).strip\(\)\)") as ei:
        Principal("agent-7", "support", b"qgc1.x.y\n")
    assert isinstance(ei.value, TypeError)
    with pytest.raises(QdrantGuardError, match="must be str, not int") as ei:
        Principal("agent-7", 7)  # type: ignore[arg-type]
    assert isinstance(ei.value, TypeError)
    with pytest.raises(ConfigError, match="Principal.boundary must not be empty") as ei:
        Principal("agent-7", "")
    assert isinstance(ei.value, ValueError)


def test_a_wrong_embedder_is_a_guard_error_too(tmp_path: Path) -> None:
    from qdrant_guard import QdrantGuardError

    kit = make_kit(tmp_path)
    with pytest.raises(QdrantGuardError, match="embedder= must be a callable") as ei:
        QdrantClient(":memory:", guard=_kb_policy(kit), embedder="all-MiniLM-L6-v2")  # type: ignore[arg-type]
    assert isinstance(ei.value, TypeError)


def test_the_argument_type_error_is_exported_and_is_both_kinds() -> None:
    assert issubclass(GuardArgumentTypeError, TypeError) and issubclass(GuardArgumentTypeError, ValueError)
    import qdrant_guard

    assert "GuardArgumentTypeError" in qdrant_guard.__all__


@pytest.mark.parametrize("name,text,what", [
    ("guard.key", "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n", "a PEM key file"),
    ("audit.jsonl", '{"hash": "00", "prev": "00", "record": {}, "seq": 1}\n', "a JSON file"),
])
def test_a_key_or_log_given_as_the_policy_is_named_for_what_it_is(tmp_path: Path, name: str, text: str, what: str) -> None:
    # Before: only the TOML parser's "Expected '=' after a key ..." for the guard's key file.
    from qdrant_guard import ConfigError

    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"it looks like {what}.*not a policy: give the TOML policy file") as ei:
        QdrantClient(":memory:", guard=str(path))
    assert "MC4CAQAw" not in str(ei.value)  # key material is never echoed


def test_a_credential_from_the_wrong_authority_or_for_an_unknown_boundary_says_what_to_do(tmp_path: Path) -> None:
    # Before: "key ed25519:... is not an authority of boundary 'support'" and "no authority is
    # configured for boundary 'sales'", neither naming the mix-up or the fix.
    from qdrant_guard import issue_credential

    kit = make_kit(tmp_path)
    cfg = _kb_policy(kit)
    wrong_key = issue_credential(kit.authority["hr"], agent_id="bob", boundary="support", ttl_s=600)
    with pytest.raises(CredentialError) as ei:
        QdrantClient(":memory:", guard=cfg, principal=Principal("bob", "support", wrong_key))
    assert "is not an authority of boundary 'support' (it is an authority of 'hr'); issue the credential with " \
           "the private key whose .pub [boundaries.support] authority_keys lists" in str(ei.value)
    unknown = issue_credential(kit.authority["hr"], agent_id="bob", boundary="sales", ttl_s=600)
    with pytest.raises(CredentialError) as ei:
        QdrantClient(":memory:", guard=cfg, principal=Principal("bob", "sales", unknown))
    assert "no authority is configured for boundary 'sales' (the policy's boundaries: ['hr', 'support'])" in str(ei.value)
    assert "add a [boundaries.sales] section" in str(ei.value)


def test_credential_issue_with_an_empty_agent_names_the_option(tmp_path: Path, capsys) -> None:
    # Before: "error: Principal.agent_id must not be empty", a name the CLI user never wrote.
    from qdrant_guard import cli

    key = tmp_path / "hr.key"
    assert cli.main(["keys", "new", "--out", str(key)]) == 0
    for opt in ("--agent", "--boundary"):
        args = {"--agent": "bob", "--boundary": "hr", opt: ""}
        with pytest.raises(SystemExit) as ei:
            cli.main(["credential", "issue", "--authority", str(key), *[x for kv in args.items() for x in kv]])
        assert ei.value.code == 2
        assert f"argument {opt}: must not be empty" in capsys.readouterr().err


def test_a_query_text_of_the_wrong_type_is_a_guard_error_naming_the_fix(tmp_path: Path) -> None:
    # Before: a bare TypeError from the read screen, outside QdrantGuardError.
    from qdrant_guard import QdrantGuardError

    kit = make_kit(tmp_path)
    client = QdrantClient(":memory:", guard=_kb_policy(kit), principal=kit.principal("alice", "hr"))
    create(client, "kb")
    with pytest.raises(QdrantGuardError, match=r"query_text= must be the query's text as a str, not bytes") as ei:
        client.query_points("kb", query=[0.1] * DIM, query_text=b"quarterly revenue")
    assert isinstance(ei.value, TypeError)


def test_who_administers_a_collection_the_check_and_its_message_agree(tmp_path: Path) -> None:
    # The admin rule (the owner; without one, the writers, "*" included) is written once
    # (callchecks._admin_boundaries) for the check and for the refusal's list of who may.
    from qdrant_guard import GuardRefusal

    kit = make_kit(tmp_path)
    cfg = kit.config({
        "open": {"class": "PII", "writers": ["*"], "readers": ["hr"]},
        "owned": {"class": "PII", "owner": "support", "writers": ["hr"]},
    })
    hr = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(hr, "open")  # any verified writer administers an owner-less collection with writers "*"
    with pytest.raises(GuardRefusal) as ei:
        create(hr, "owned")  # a writer of an owned collection does not administer it
    assert "allowed boundaries: ['support']" in str(ei.value)
    create(hr.with_principal(kit.principal("bob", "support")), "owned")
