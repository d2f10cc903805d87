"""What a new user walking through the README with a two-boundary RAG app ran into (h-walk3)."""
from __future__ import annotations

import pytest

from qdrant_guard import cli


def _help(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_bench_help_says_a_spent_extraction_budget_takes_minutes_not_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    # The help promised "about 10 s" and nothing else: under a budget on every source the run with
    # the defaults went on for over five minutes with no hint why, and --queries 20 ran out too.
    text = _help(capsys, ["bench"])
    assert "The defaults take about 10 s on a 2-core machine, but minutes when the reader's extraction budget (max_source_coverage) runs out for any source" in text
    assert "names the --queries, --limit, --sources or --points values that keep every source under its cap" in text
    assert "each read charges up to --limit points to the reader's extraction budget" in text


def test_the_ssns_the_detector_skips_by_design_are_the_ones_the_threat_model_names() -> None:
    # A user testing the PUBLIC collection's refusal with the best-known sample SSN saw it stored,
    # and found why only in detect.py's docstring; docs/threat-model.md now names them.
    import re
    from pathlib import Path

    from qdrant_guard import detect

    page = " ".join((Path(__file__).resolve().parent.parent / "docs" / "threat-model.md").read_text().split())
    named = re.search(r"advertising numbers printed on sample cards, `([\d-]+)` and `([\d-]+)`", page)
    assert named, "docs/threat-model.md no longer names the SSNs the detector skips"
    for ssn in named.groups():
        assert detect.redact(f"SSN {ssn}") == f"SSN {ssn}"
    assert detect.redact("SSN 123-45-6789") == "SSN [SSN]"  # the number the page says to use instead


def test_policy_paths_are_read_from_the_policy_files_directory_as_the_readme_says(
        tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # docs/policy.md says "relative to the policy file" for three keys only; a user running the app
    # from another directory could not tell where signing_key and audit_log were looked for.
    from pathlib import Path

    from qdrant_guard import Principal, QdrantClient

    # The README's policy paragraph in full (docs/quick-start.md since 2026-12-08).
    readme = " ".join((Path(__file__).resolve().parent.parent / "docs/quick-start.md").read_text().split())
    assert "Relative paths in it are read from the policy file's directory, not from the working directory." in readme
    app = tmp_path / "app"
    (app / "keys").mkdir(parents=True)
    monkeypatch.chdir(app)
    for argv in (["keys", "new", "--out", "keys/guard.key"], ["keys", "new", "--out", "keys/hr.key"]):
        assert cli.main(argv) == 0
    assert cli.main(["credential", "issue", "--authority", "keys/hr.key", "--agent", "a", "--boundary", "hr"]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    (app / "policy.toml").write_text('signing_key = "keys/guard.key"\naudit_log = "audit.jsonl"\n'
                                     '[boundaries.hr]\nauthority_keys = ["keys/hr.key.pub"]\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    client = QdrantClient(":memory:", guard=str(app / "policy.toml"), principal=Principal("a", "hr", token))
    client.close()
    assert (app / "audit.jsonl").exists() and not (elsewhere / "audit.jsonl").exists()
