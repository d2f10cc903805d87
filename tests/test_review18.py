"""Sixteenth review (2026-12-05): regressions found in the day's changes (ae21b51..e49e3f1).

Each test fails on the code before its fix (checked, see docs/security-testing.md)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from qdrant_guard.policy import GuardConfig, config_from_dict

_KEY = "ed25519:" + "A" * 43 + "="


def _policy(unlisted: str) -> GuardConfig:
    return config_from_dict({
        "unlisted": unlisted,
        "boundaries": {"hr": {"authority_keys": [_KEY]}},
        "collections": {"kb": {"class": "PII", "owner": "hr", "text_field": "text"}},
    })


@pytest.mark.parametrize("unlisted", ["strict", "public", "refuse"])
def test_a_loaded_policy_reloads_from_its_own_json_dump(unlisted):
    # ddfbe8b refused any [default] under unlisted = "public"/"refuse", and a dump always holds
    # the built-in default: a policy serialised with model_dump_json no longer loaded.
    cfg = _policy(unlisted)
    back = config_from_dict(json.loads(cfg.model_dump_json(by_alias=True)))
    assert back.model_dump() == cfg.model_dump()
    assert GuardConfig.model_validate_json(cfg.model_dump_json(by_alias=True)).model_dump() == cfg.model_dump()


@pytest.mark.parametrize("section", [{"class": "CREDENTIAL"}, {"class": "PII"}, {}])
def test_a_written_default_section_is_still_refused_outside_strict(section):
    # The dump leaves the ignored default out; a section the author wrote is refused as before.
    with pytest.raises(ValueError, match="would be ignored"):
        config_from_dict({"unlisted": "public", "default": section})


@pytest.mark.parametrize("unlisted", ["strict", "public", "refuse"])
def test_a_loaded_policy_reloads_from_its_own_model_dump(unlisted):
    # c7910da dropped populate_by_name (no 'sensitivity' spelling in policy files), but
    # model_dump() still wrote 'sensitivity', so its output was refused as an unknown key.
    cfg = _policy(unlisted)
    dumped = cfg.model_dump()
    assert dumped["collections"]["kb"]["class"] == "PII"
    assert GuardConfig.model_validate(dumped).model_dump() == dumped


def test_the_intent_module_keeps_the_public_names_it_had_before_the_split():
    # 143e1fc split intent.py; docs/intent.md's timing command imports featurize from
    # qdrant_guard.intent, and it raised ImportError after the split. Fresh interpreter: no
    # other test's imports can make the names appear.
    names = ["CUE_NAMES", "FEATURE_VERSION", "Featurized", "SYSTEM_PROMPT", "feature_rows", "featurize",
             "hash_key", "model_from_dict", *__import__("qdrant_guard.intent", fromlist=["x"]).__all__]
    code = ("import qdrant_guard.intent as m; import sys; missing = [n for n in sys.argv[1:] if not hasattr(m, n)]; "
            "print(missing); sys.exit(1 if missing else 0)")
    out = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    from qdrant_guard import intent
    from qdrant_guard import intent_features as features
    assert intent.featurize is features.featurize  # one function, not a copy


@pytest.mark.parametrize("module", ["intent", "intent_types", "intent_features", "intent_builtin", "intent_llm",
                                    "intent_pool", "intent_train", "audit", "audit_verify", "audit_write",
                                    "audit_file_access", "audit_repair", "receipts", "storedform",
                                    "receipt_format", "receipt_verify", "utility", "utility_record", "calibration",
                                    "calibrate_cli", "ranking_metrics", "progress", "pipeline", "perstore",
                                    "sentnames", "withheld", "notfound", "reads", "readplan", "readbudget",
                                    "payloadselect", "redacted", "sourcefilters", "budget_stores",
                                    "budget_store_base", "budget_memory", "budget_sqlite", "collection_verify",
                                    "textguard", "sent_form", "password_names", "field_screen", "policy",
                                    "policy_base", "policy_sections", "collection_policy", "guard_config",
                                    "policy_loader", "cli", "cli_args", "cli_store", "cli_policy_keys", "cli_keys",
                                    "cli_receipts", "cli_audit", "cli_workloads",
                                    "budgetops", "readrelease", "queryops", "writesign", "writeprep", "batchupdate",
                                    "callchecks", "dispatch", "sparseslots", "batchsources"])
def test_each_split_module_imports_alone_in_a_fresh_interpreter(module):
    out = subprocess.run([sys.executable, "-c", f"import qdrant_guard.{module}"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr


def _real_log(tmp_path):
    from qdrant_guard.audit import AuditLog

    log = tmp_path / "audit.jsonl"
    writer = AuditLog(str(log))
    for i in range(3):
        writer.append({"event": "test", "n": i})
    writer.close()
    return log


@pytest.mark.parametrize("mangle", [
    lambda line: line.replace(b'"record":', b'"rec0rd":'),  # one key renamed on every line
    lambda line: b"x" + line[1:],                               # every line no longer JSON
])
def test_a_log_whose_every_line_was_mangled_is_tampered_not_a_wrong_path(tmp_path, capsys, mangle):
    # 827ebba's NOT AN AUDIT LOG rule needed every line to hold all four entry keys as JSON, so one
    # sed over a real log made `audit verify` say "check the path" instead of TAMPERED, and
    # `audit repair` refuse it while the guard's writer pointed at that repair.
    from qdrant_guard import cli

    log = _real_log(tmp_path)
    log.write_bytes(b"".join(mangle(line) for line in log.read_bytes().splitlines(keepends=True)))
    assert cli.main(["audit", "verify", str(log)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("TAMPERED: ") and "NOT AN AUDIT LOG" not in out
    assert cli.main(["audit", "repair", str(log)]) == 0
    assert "repaired" in capsys.readouterr().out
    assert any(p.name.startswith("audit.jsonl.cut-") for p in tmp_path.iterdir())


def test_not_an_audit_log_says_what_to_do_when_the_path_is_the_policys_log(tmp_path, capsys):
    # A file with no trace of an entry may still be the configured log, wholly overwritten: the
    # report must not leave "check the path" as the only reading, nor repair as a dead end.
    from qdrant_guard import cli

    log = tmp_path / "audit.jsonl"
    log.write_text("hello\nworld\n")
    assert cli.main(["audit", "verify", str(log)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("NOT AN AUDIT LOG: ") and "treat the log as tampered" in out
    assert cli.main(["audit", "repair", str(log)]) == 2
    err = capsys.readouterr().err
    assert "nothing was changed" in err and "move it aside" in err
    assert log.read_text() == "hello\nworld\n"


def test_a_version_2_utility_record_edited_to_version_1_without_dim_no_longer_verifies(tmp_path):
    # Version-1 bodies omit dim, so a downgrade would drop the dimension check; the version is in
    # the signed body, so the edit must break the signature (a pin of 491a888's design).
    from guardkit import make_kit, staging_record
    from qdrant_guard import keys
    from qdrant_guard.utility import UtilityRecord, verify_utility_record

    kit = make_kit(tmp_path)
    rec, _ = staging_record(kit, tmp_path / "u.json", dim=8)
    trusted = [keys.load_private_key(kit.guard_key_path).public_key()]
    data = json.loads(rec.to_json())
    assert data["version"] >= 2 and data["dim"] == 8 and verify_utility_record(UtilityRecord.from_json(rec.to_json()), trusted)
    del data["dim"]
    data.pop("vector_name", None)  # version 3 on; version 1 has neither
    data.pop("distance", None)  # version 4 on
    data.pop("n_measured_queries", None)  # version 6 on
    data["version"] = 1
    forged = UtilityRecord.from_json(json.dumps(data))  # reads as a well-formed version-1 record
    assert forged.dim is None and not verify_utility_record(forged, trusted)


@pytest.mark.parametrize("lines", [
    [{"path": f"f{i}.bin", "hash": f"{i:064x}"} for i in range(3)],  # a file manifest
    [{"seq": i, "event": "click"} for i in range(3)],                  # another app's event log
])
def test_another_jsonl_with_one_entry_key_is_still_not_an_audit_log(tmp_path, capsys, lines):
    # The trace rule must not let `audit repair` turn a wrong path into an audit log again.
    from qdrant_guard import cli

    wrong = tmp_path / "other.jsonl"
    text = "".join(json.dumps(line) + "\n" for line in lines)
    wrong.write_text(text)
    assert cli.main(["audit", "verify", str(wrong)]) == 1
    assert capsys.readouterr().out.startswith("NOT AN AUDIT LOG: ")
    assert cli.main(["audit", "repair", str(wrong)]) == 2
    assert wrong.read_text() == text and [p.name for p in tmp_path.iterdir()] == ["other.jsonl"]
