"""The README after its cut to one sitting, followed as written by a new user (2026-12-08, h-onboard2).

* ``qdrant-guard bench --help`` sent the user to the README for the ``--json`` fields; the README
  no longer lists them (docs/performance.md does), and the list there missed the checks that tell
  a run's budget exclusions. The help now names the page, and every field a run writes is on it.
* The README's second bench command, with its own policy, times no noise: ``--throwaway-credentials``
  writes as the owner boundary under ``raw_in_boundary``. The README now says so and names the flag
  that times it; both are run here.
* The bench's note said the audit log's fsync was off "as the policy says" of a policy that says
  nothing of it (the README's); the note now names the key, ``audit_fsync``, whose default decides.
* The frontier's columns read "F1 − prior" before any sentence said what the prior is.
* Moved sections kept their bold lead-in under a heading of the same words.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from qdrant_guard import cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MOVED = ("features.md", "quick-start.md", "switching.md", "verdicts.md", "retrieval-defences.md",
         "privacy-utility.md", "performance.md", "environment.md")
SMALL = ["--points", "40", "--batch", "20", "--queries", "4", "--rounds", "1", "--dim", "16", "--no-progress"]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _fenced(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README.read_text(), re.S | re.M)


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    rc = cli.main(argv)
    out = capsys.readouterr().out
    assert rc == 0, f"qdrant-guard {shlex.join(argv)} exited {rc}: {out}"
    return out


@pytest.fixture()
def readme_set_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """The README's key and credential commands and its policy, in a fresh directory."""
    monkeypatch.chdir(tmp_path)
    (block,) = [b for b in _fenced("bash") if "credential issue" in b]
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[0] == "qdrant-guard"
        out_file = None
        if ">" in words:
            words, out_file = words[:words.index(">")], words[words.index(">") + 1]
        out = _run(capsys, words[1:])
        if out_file:
            (tmp_path / out_file).write_text(out)
    (policy,) = _fenced("toml")
    (tmp_path / "policy.toml").write_text(policy)
    return tmp_path


def _bench_lines() -> list[list[str]]:
    return [shlex.split(line, comments=True)[1:] for b in _fenced("bash") for line in b.splitlines()
            if line.startswith("qdrant-guard bench ")]


def _json_keys(report: dict) -> set[str]:
    keys = set(report) | set(report["checks"])
    for op in ("upsert", "query"):
        keys |= set(report[op]) | {k for v in report[op].values() if isinstance(v, dict) for k in v}
    return keys


def test_every_json_field_a_bench_run_writes_is_on_the_page_bench_help_names(
        readme_set_up: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    named = re.search(r"(\S+), 'Benchmark your own policy', describes the output and the --json fields",
                      _flat(capsys.readouterr().out))
    assert named, "bench --help no longer names the page with the --json fields"
    page = (ROOT / named.group(1)).read_text()
    section = page[page.index("Benchmark your own policy"):]
    documented = set(re.findall(r"`(?:checks\.)?(\w+)`", section))
    # With the README's policy (an audit log), and without its audit log, where the budget's
    # exclusions are counted by a check of another name.
    no_log = readme_set_up / "no-log.toml"
    no_log.write_text("\n".join(line for line in (readme_set_up / "policy.toml").read_text().splitlines()
                                if not line.startswith("audit_log")))
    written: set[str] = set()
    for policy in ("policy.toml", str(no_log)):
        argv = ["bench", "--policy", policy, "--collection", "employee_records", "--throwaway-credentials",
                "--json", str(readme_set_up / "out.json"), *SMALL]
        _run(capsys, argv)
        written |= _json_keys(json.loads((readme_set_up / "out.json").read_text()))
    assert {"audited_reads_with_budget_exclusion", "queries_whose_request_changed"} <= written
    assert written - documented == set(), f"{named.group(1)} does not name these --json fields"


def test_the_readmes_throwaway_bench_times_noise_only_with_the_flag_it_names(
        readme_set_up: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (throwaway,) = [argv for argv in _bench_lines() if "--throwaway-credentials" in argv]
    report = readme_set_up / "out.json"
    # argparse takes the last of a repeated option: the README's command, at smaller sizes.
    out = _run(capsys, [*throwaway, *SMALL, "--json", str(report)])
    checks = json.loads(report.read_text())["checks"]
    assert checks["stored_points"] == 40 and checks["receipted_points"] == 0
    assert "noising and receipt signing are NOT in the upsert figures" in out
    said = re.search(r"With `--throwaway-credentials` the writer is of the owner boundary \(with the policy "
                     r"above, `(\w+)`, under `raw_in_boundary`\), whose vectors are stored raw: the upsert "
                     r"figures then leave out the noise and the receipts, as the output notes; add `([^`]+)` "
                     r"to time them", _flat(README.read_text()))
    assert said, "README no longer says what the throwaway bench leaves out"
    assert f"writer bench-writer@{said.group(1)}" in out
    _run(capsys, [*throwaway, *SMALL, *shlex.split(said.group(2)), "--json", str(report)])
    checks = json.loads(report.read_text())["checks"]
    assert checks["receipted_points"] == checks["stored_points"] == 40


def test_the_bench_note_names_the_key_that_turns_the_audit_logs_fsync_off(
        readme_set_up: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (first,) = [argv for argv in _bench_lines() if "--credential" in argv]
    assert "audit_fsync" not in (readme_set_up / "policy.toml").read_text()
    out = _run(capsys, [*first, *SMALL])
    assert "(fsync off: the policy's audit_fsync)" in out


def test_the_frontier_says_what_the_prior_is_before_its_table_uses_it() -> None:
    text = README.read_text()
    section = text[text.index("## Privacy–utility"):text.index("## Performance")]
    defined = section.find("the prior-only baseline, which guesses")
    assert defined != -1, "README's frontier no longer says what the prior is"
    assert defined < section.index("| sigma")  # the table, whose columns read "F1 − prior"


@pytest.mark.parametrize("page", MOVED)
def test_a_moved_section_does_not_repeat_its_heading_as_a_bold_lead(page: str) -> None:
    text = (ROOT / "docs" / page).read_text()
    repeated = [h for h in re.findall(r"^#+ (.+)\n\n\*\*(.+?)\.?\*\*", text, re.M) if h[0] == h[1]]
    assert repeated == [], f"docs/{page}: heading repeated as its first words: {repeated}"
