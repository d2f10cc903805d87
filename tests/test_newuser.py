"""A new user's first run: each error names the bad input and the fix, and changes nothing.

Every case here is one a first-time user hit following the README: the public key given where the
private one belongs (and the reverse), a key file not made yet, policy values and keys written the
way TOML invites (a string for a list, a typo, a key in the wrong section), an audit log in a
directory that does not exist, a mistyped or busy store path, a --url with no server, CLI options
without help, an unsigned utility record, and the demo's leftovers. Each test failed on the code
before its fix.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from qdrant_client import models

from qdrant_guard import AuditError, ConfigError, QdrantClient, QdrantGuardError, cli
from tests.guardkit import closed_port


def _keys(tmp: Path, *names: str) -> None:
    for name in names:
        assert cli.main(["keys", "new", "--out", str(tmp / "keys" / name)]) == 0


def _policy(tmp: Path, **over: str) -> Path:
    """The README's quick-start policy (its shape), with ``over`` replacing whole lines by key."""
    fields = {
        "signing_key": '"keys/guard.key"',
        "audit_log": '"audit.jsonl"',
        "authority": '["keys/hr-authority.key.pub"]',
        "readers": '["hr"]',
    }
    fields.update(over)
    text = textwrap.dedent(f"""\
        signing_key = {fields['signing_key']}
        audit_log = {fields['audit_log']}

        [boundaries.hr]
        authority_keys = {fields['authority']}

        [collections.employee_records]
        class = "PII"
        owner = "hr"
        readers = {fields['readers']}
        """)
    p = tmp / "policy.toml"
    p.write_text(text)
    return p


def _store(path: Path, collection: str) -> QdrantClient:
    """A plain local store at ``path`` holding an empty 4-d ``collection`` (the client left open)."""
    client = QdrantClient(path=str(path))
    client.create_collection(collection, vectors_config=VECTORS)
    return client


VECTORS = models.VectorParams(size=4, distance=models.Distance.COSINE)


@pytest.fixture()
def keydir(tmp_path: Path) -> Path:
    _keys(tmp_path, "guard.key", "hr-authority.key")
    return tmp_path


def test_signing_key_naming_the_pub_file_says_so_not_chmod(keydir: Path) -> None:
    # Before: "private key file '.../guard.key.pub' is accessible by other users (mode 644); run
    # `chmod 600 ...`": chmod would not have helped, the file holds the public key.
    pol = _policy(keydir, signing_key='"keys/guard.key.pub"')
    with pytest.raises(QdrantGuardError) as ei:
        QdrantClient(":memory:", guard=str(pol))
    msg = str(ei.value)
    assert "holds a public key" in msg and "chmod" not in msg
    assert repr(str(keydir / "keys" / "guard.key")) in msg  # the file to give instead


def test_missing_signing_key_names_the_command_that_makes_it(tmp_path: Path) -> None:
    _keys(tmp_path, "hr-authority.key")
    pol = _policy(tmp_path)
    with pytest.raises(QdrantGuardError) as ei:
        QdrantClient(":memory:", guard=str(pol))
    msg = str(ei.value)
    assert str(tmp_path / "keys" / "guard.key") in msg
    assert f"qdrant-guard keys new --out {tmp_path / 'keys' / 'guard.key'}" in msg


def test_authority_key_naming_the_private_file_points_at_its_pub(keydir: Path) -> None:
    pol = _policy(keydir, authority='["keys/hr-authority.key"]')
    with pytest.raises(ConfigError) as ei:
        QdrantClient(":memory:", guard=str(pol))
    msg = str(ei.value)
    assert "boundaries.hr.authority_keys" in msg and "holds a private key" in msg
    assert repr(str(keydir / "keys" / "hr-authority.key.pub")) in msg
    assert "-----BEGIN" not in msg and "Are you sure" not in msg


def test_missing_public_key_file_says_where_pub_files_come_from(keydir: Path) -> None:
    pol = _policy(keydir, authority='["keys/hr.key.pub"]')
    with pytest.raises(ConfigError) as ei:
        QdrantClient(":memory:", guard=str(pol))
    assert "No such file" in str(ei.value) and "qdrant-guard keys new" in str(ei.value)


def test_a_string_where_a_list_belongs_shows_the_list(keydir: Path) -> None:
    # Before: "Input should be a valid tuple", a Python type a TOML author never wrote.
    pol = _policy(keydir, readers='"hr"')
    with pytest.raises(ConfigError) as ei:
        QdrantClient(":memory:", guard=str(pol))
    msg = str(ei.value)
    assert "collections.employee_records.readers = 'hr'" in msg
    assert 'readers = ["hr"]' in msg and "tuple" not in msg


def test_audit_log_in_a_missing_directory_names_the_directory(keydir: Path) -> None:
    pol = _policy(keydir, audit_log='"logs/audit.jsonl"')
    with pytest.raises(AuditError) as ei:
        QdrantClient(":memory:", guard=str(pol))
    assert f"create the directory {str(keydir / 'logs')!r}" in str(ei.value)
    assert not (keydir / "logs").exists()


def test_cli_credential_issue_with_the_pub_file_says_so(keydir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["credential", "issue", "--authority", str(keydir / "keys" / "hr-authority.key.pub"),
                   "--agent", "alice", "--boundary", "hr"])
    err = capsys.readouterr().err
    assert rc == 2 and "holds a public key" in err and "chmod" not in err


def test_cli_audit_verify_with_the_private_key_points_at_its_pub(keydir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = keydir / "audit.jsonl"
    log.write_text("")
    rc = cli.main(["audit", "verify", str(log), "--key", str(keydir / "keys" / "guard.key")])
    err = capsys.readouterr().err
    assert rc == 2 and "holds a private key" in err and "guard.key.pub" in err


@pytest.mark.parametrize("command", ["receipt", "calibrate"])
def test_cli_mistyped_store_path_is_refused_and_not_created(
        keydir: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: local mode created an empty store at the mistyped path, and the command reported
    # "Collection employee_records not found", leaving the new directory behind.
    real = keydir / "store"
    _store(real, "employee_records").close()
    typo = keydir / "stroe"
    if command == "receipt":
        argv = ["receipt", "verify", "--path", str(typo), "--collection", "employee_records",
                "--trusted-key", str(keydir / "keys" / "guard.key.pub")]
    else:
        queries = keydir / "q.jsonl"
        queries.write_text(json.dumps([0.1, 0.2, 0.3, 0.4]) + "\n")
        argv = ["calibrate", "--path", str(typo), "--collection", "employee_records", "--queries", str(queries),
                "--out", str(keydir / "record.json"), "--no-progress"]
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and repr(str(typo)) in err and "does not exist" in err
    assert not typo.exists()
    # An existing directory that is no store is named as such, and left as it was.
    typo.mkdir()
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and "no meta.json" in err and list(typo.iterdir()) == []


def _parsers(p, words=()):
    import argparse

    yield words, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _parsers(sub, (*words, name))


def test_every_cli_option_says_what_it_is() -> None:
    # Before: calibrate's --threshold, --radius, --delta, --epsilons, --k, --metric, --seed ... and
    # eval's --max-docs, --queries, --carriers-per-kind showed a bare metavar, receipt verify's
    # --collection and the audit commands' file argument nothing at all.
    import argparse

    from qdrant_guard.evaluation import build_parser as eval_parser

    bare = []
    for words, p in [*_parsers(cli.build_parser()), (("eval",), eval_parser())]:
        if words == ("eval",) and p.add_help is False:
            continue  # the stub that hands over to the eval parser below
        for a in p._actions:
            if a.dest != "help" and not a.help and not isinstance(a, argparse._SubParsersAction):
                bare.append(f"qdrant-guard {' '.join(words)}: {'/'.join(a.option_strings) or a.dest}")
    assert not bare, "options without help:\n  " + "\n  ".join(bare)


def test_top_level_help_shows_the_first_run_order(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "``" not in out  # the module docstring's reST markup was the description
    assert "first run: `keys new --out keys/guard.key`" in out and "credential issue" in out


def test_the_complete_example_policy_names_every_key() -> None:
    # docs/policy.example.toml calls itself complete; it lacked 15 keys (query.max_chars,
    # filter_pii, the modes, utility.metric/k/enforce, receipts.max_age_s, ...). A key may be
    # commented out (one whose default is "unset", which TOML cannot write).
    import re
    import tomllib

    from qdrant_guard.policy import CollectionPolicy, GuardConfig

    path = Path(__file__).resolve().parent.parent / "docs" / "policy.example.toml"
    text = path.read_text()
    data = tomllib.loads(text)
    commented = set(re.findall(r"^# ?([a-z_]+) = ", text, flags=re.M))

    def missing(model: type, section: dict, where: str) -> list[str]:
        names = [f.alias or k for k, f in model.model_fields.items() if not f.exclude]
        return [where + n for n in names if n not in section and n not in commented]

    gaps = missing(GuardConfig, data, "")
    gaps += missing(type(GuardConfig().receipts), data["receipts"], "receipts.")
    coll = data["collections"]["employee_records"]
    gaps += missing(CollectionPolicy, coll, "collections.employee_records.")
    for sec in ("noise", "query", "diversity", "intent", "utility"):
        model = type(getattr(CollectionPolicy(), sec))
        gaps += [g for g in missing(model, coll[sec], f"collections.employee_records.{sec}.")
                 if not g.endswith((".max_vectors", ".charge_scores"))]  # PROPRIETARY only: set on model_embeddings
    assert data["collections"]["model_embeddings"]["diversity"]["max_vectors"]
    assert "charge_scores" in data["collections"]["model_embeddings"]["diversity"]
    assert not gaps, f"{path.name} lacks: {gaps}"


def test_a_missing_policy_file_says_where_it_was_looked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as ei:
        QdrantClient(":memory:", guard="policy.toml")
    msg = str(ei.value)
    assert repr(str(tmp_path / "policy.toml")) in msg and "docs/policy.example.toml" in msg
    # An empty path used to read as the directory ".": "Is a directory".
    with pytest.raises(ConfigError, match="policy path is empty"):
        QdrantClient(":memory:", guard="")


def test_cli_calibrate_without_key_says_the_record_is_unusable_by_a_guard(
        keydir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: exit 0 and a "chosen epsilon" line only; the guard then refused the record at its
    # first noised write ("does not verify against the trusted keys").
    store = keydir / "store"
    c = _store(store, "kb")
    c.upsert("kb", [models.PointStruct(id=i, vector=[1.0 + i, 0.5, 0.25 * i, 0.1]) for i in range(6)])
    c.close()
    queries = keydir / "q.jsonl"
    queries.write_text("[1.0, 0.5, 0.0, 0.1]\n[3.0, 0.5, 0.5, 0.1]\n")
    # --k 3: calibrate refuses a collection of no more than k points (test_leftovers36).
    base = ["calibrate", "--path", str(store), "--collection", "kb", "--queries", str(queries), "--no-progress",
            "--seed", "0", "--k", "3", "--allow-few-queries"]  # 2 queries: fewer than --min-queries 20
    assert cli.main([*base, "--out", str(keydir / "unsigned.json")]) == 0
    err = capsys.readouterr().err
    assert "unsigned" in err and "--key" in err and "utility.record" in err
    assert cli.main([*base, "--out", str(keydir / "signed.json"), "--key", str(keydir / "keys" / "guard.key")]) == 0
    assert "unsigned" not in capsys.readouterr().err


@pytest.mark.parametrize("command", ["receipt", "calibrate"])
def test_cli_url_of_no_server_is_an_error_naming_it_and_calibrate_sends_the_api_key(
        keydir: Path, command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: a traceback ending in ResponseHandlingException; and calibrate --url ignored
    # QDRANT_API_KEY (receipt verify read it), so it could not read a server that needs one.
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("QDRANT_API_KEY", "k")
    if command == "receipt":
        argv = ["receipt", "verify", "--url", url, "--collection", "kb",
                "--trusted-key", str(keydir / "keys" / "guard.key.pub")]
    else:
        queries = keydir / "q.jsonl"
        queries.write_text("[0.1, 0.2, 0.3, 0.4]\n")
        argv = ["calibrate", "--url", url, "--collection", "kb", "--queries", str(queries),
                "--out", str(keydir / "r.json"), "--no-progress"]
    # qdrant-client warns when it is given an API key for plain http: the key reached the client.
    with pytest.warns(UserWarning, match="Api key is used with an insecure connection"):
        rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and f"cannot reach Qdrant at --url {url}" in err


@pytest.mark.parametrize("data, shown", [
    ({"collections": {"c": {"noise": 1.0}}},
     "collections.c.noise = 1.0: expected a table: a [collections.c.noise] section"),
    ({"receipts": 3}, "receipts = 3: expected a table: a [receipts] section"),
    ({"boundaries": {"hr": {}}}, "boundaries.hr.authority_keys: required key missing: add authority_keys to [boundaries.hr]"),
])
def test_a_value_where_a_section_belongs_and_a_missing_key_read_in_toml_terms(data: dict, shown: str) -> None:
    # Before: "Input should be a valid dictionary or instance of NoisePolicy", "Field required".
    from qdrant_guard.policy import config_from_dict

    with pytest.raises(ConfigError) as ei:
        config_from_dict(data, source="p.toml")
    assert f"p.toml: {shown}" in str(ei.value)
    assert "instance of" not in str(ei.value) and "Field required" not in str(ei.value)


@pytest.mark.parametrize("data, hint", [
    ({"collections": {"c": {"raw_in_bounday": True}}}, "did you mean 'raw_in_boundary' (a key of [collections.NAME] (and [default]))?"),
    ({"collections": {"c": {"noise": {"epsilom": 1.0}}}}, "did you mean 'epsilon' (a key of [collections.NAME.noise])?"),
    ({"audit_logg": "a.jsonl"}, "did you mean 'audit_log' (a key of the top level)?"),
    # A right key in the wrong section: the README's policy sets epsilon under [..noise].
    ({"collections": {"c": {"epsilon": 1.0}}}, "'epsilon' is a key of [collections.NAME.noise], not of this section"),
])
def test_an_unknown_key_names_the_key_it_is_probably_meant_to_be(data: dict, hint: str) -> None:
    # Before: only "check the spelling — see docs/policy.md".
    from qdrant_guard.policy import config_from_dict

    with pytest.raises(ConfigError) as ei:
        config_from_dict(data, source="p.toml")
    assert hint in str(ei.value)


def test_an_unknown_section_is_not_echoed_whole() -> None:
    from qdrant_guard.policy import config_from_dict

    section = {f"key_{i}": "x" * 40 for i in range(20)}
    with pytest.raises(ConfigError) as ei:
        config_from_dict({"collections": {"c": {"diversty": section}}}, source="p.toml")
    line = str(ei.value).splitlines()[1]
    assert "unknown key 'collections.c.diversty'" in line and "did you mean 'diversity'" in line
    assert len(line) < 300


def test_the_policy_reference_gives_types_as_toml_spells_them() -> None:
    # Before: `tuple[str, ...]`, `Literal['strict', 'public', 'refuse']`, `float | None` with a default
    # of `none`, for a file format that has arrays, strings and no null.
    from qdrant_guard.policy_doc import render

    rows = [line.split(" | ") for line in render().splitlines() if line.startswith("| `")]
    types = {r[0].strip("| `"): r[1].strip("`") for r in rows}
    defaults = {r[0].strip("| `"): r[2].strip("`") for r in rows}
    for python in ("tuple[", "Literal", "None |", "| None", "\\| None", "SensitivityClass", "dict["):
        assert not any(python in t for t in types.values()), python
    assert types["collections.NAME.readers"] == "list of strings"
    assert types["unlisted"] == '"strict" or "public" or "refuse"'
    assert types["collections.NAME.owner"] == "string, or unset" and defaults["collections.NAME.owner"] == "unset"
    # A None that TOML cannot write: leaving the key out gives the default, not None.
    assert types["collections.NAME.query.max_tokens"] == "integer (None: from Python only)"


def test_demo_without_workdir_leaves_nothing_behind(capsys: pytest.CaptureFixture[str]) -> None:
    # Before: every `make demo` left a store, an audit log and four private keys in /tmp.
    import re

    from qdrant_guard.demo import run_demo

    assert run_demo() == 0
    first = capsys.readouterr().out.splitlines()[0]
    m = re.search(r"workdir: (\S+?),? ", first)
    assert m and "removed at the end; --workdir DIR keeps it" in first
    assert not Path(m.group(1)).exists()


def test_demo_with_workdir_keeps_what_the_readme_commands_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qdrant_guard.demo import run_demo

    assert run_demo(workdir=str(tmp_path / "d")) == 0
    assert "removed" not in capsys.readouterr().out.splitlines()[0]
    for name in ("policy.toml", "audit.jsonl", "store", "guard.key"):
        assert (tmp_path / "d" / name).exists()


@pytest.mark.parametrize("out", ["DIR", ""])
def test_cli_keys_new_into_a_directory_says_to_give_a_file(tmp_path: Path, out: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # Before: "keys exists; refusing to overwrite a key", for a directory (and "." for "").
    arg = str(tmp_path) + "/" if out == "DIR" else out
    assert cli.main(["keys", "new", "--out", arg]) == 2
    err = capsys.readouterr().err
    assert "refusing to overwrite" not in err and "give the path of the key file" in err
    assert list(tmp_path.iterdir()) == []


def test_cli_audit_verify_prints_the_last_entry_to_keep(keydir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A log cut after any entry verifies; the README and docs/audit-log.md say truncation is found
    # by comparing last_hash with a copy, but the command printed no hash to keep.
    pol = _policy(keydir)
    c = QdrantClient(":memory:", guard=str(pol))
    with pytest.raises(QdrantGuardError):  # anonymous, refused: one audited decision
        c.count("employee_records")
    c.close()
    log = keydir / "audit.jsonl"
    last = json.loads(log.read_text().splitlines()[-1])
    assert cli.main(["audit", "verify", str(log)]) == 0
    out = capsys.readouterr().out
    assert f"last entry: seq {last['seq']}, hash {last['hash']}" in out


def test_python_dash_m_qdrant_guard_is_the_command() -> None:
    # Before: "No module named qdrant_guard.__main__" for a user whose venv bin is not on PATH.
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "qdrant_guard", "keys", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "usage: qdrant-guard keys" in proc.stdout


@pytest.mark.parametrize("command", ["receipt", "calibrate"])
def test_cli_store_held_by_another_client_is_an_error_naming_it(
        keydir: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: a RuntimeError traceback from qdrant-client when the guarded application (or any
    # client) had the local store open, the usual case while it runs.
    store = keydir / "store"
    holder = _store(store, "kb")
    try:
        if command == "receipt":
            argv = ["receipt", "verify", "--path", str(store), "--collection", "kb",
                    "--trusted-key", str(keydir / "keys" / "guard.key.pub")]
        else:
            queries = keydir / "q.jsonl"
            queries.write_text("[0.1, 0.2, 0.3, 0.4]\n")
            argv = ["calibrate", "--path", str(store), "--collection", "kb", "--queries", str(queries),
                    "--out", str(keydir / "r.json"), "--no-progress"]
        rc = cli.main(argv)
    finally:
        holder.close()
    err = capsys.readouterr().err
    assert rc == 2 and f"--path {str(store)!r} is open in another client" in err


def test_noise_required_names_the_page_that_shows_how_to_sign_a_receipt() -> None:
    # Before: "noise them with qdrant_guard.noise.privatize and sign a receipt", and no page showed
    # how; docs/receipt-format.md now does, under the heading the directive names.
    from qdrant_guard.decision import Verdict
    from qdrant_guard.writeprep import _DIRECTIVES

    directive = _DIRECTIVES[Verdict.NOISE_REQUIRED]
    assert "docs/receipt-format.md, 'Writing with a receipt of your own'" in directive
    page = (Path(__file__).resolve().parent.parent / "docs" / "receipt-format.md").read_text()
    assert "\n### Writing with a receipt of your own\n" in page


def test_a_signing_key_error_names_the_policy_key_and_file(tmp_path: Path) -> None:
    # Before: only the key file was named; a policy with several key files did not say which
    # setting pointed at it.
    from qdrant_guard.keys import KeyStoreError
    _keys(tmp_path, "hr-authority.key")
    pol = _policy(tmp_path)
    with pytest.raises(KeyStoreError) as ei:
        QdrantClient(":memory:", guard=str(pol))
    assert str(ei.value).startswith(f"{pol}: signing_key: ")


def test_a_principal_without_a_credential_is_told_it_gave_none(keydir: Path) -> None:
    # Before: "an unverified principal may not read ...", which did not say why it was unverified.
    from qdrant_guard import GuardRefusal, Principal
    pol = _policy(keydir)
    client = QdrantClient(":memory:", guard=str(pol), principal=Principal("agent-7", "hr"))
    with pytest.raises(GuardRefusal) as ei:
        client.create_collection("employee_records", vectors_config=VECTORS)
    assert "unverified principal 'agent-7@unverified' (no credential was given)" in str(ei.value)
    bare = QdrantClient(":memory:", guard=str(pol))
    with pytest.raises(GuardRefusal) as ei:
        bare.create_collection("employee_records", vectors_config=VECTORS)
    assert "a client without principal=" in str(ei.value)
