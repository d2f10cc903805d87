"""Second new-user walkthrough (h-newuser2): what `qdrant-guard bench` tells a user about the parts of
their policy it did not exercise, and where it put the files it kept."""
from __future__ import annotations

import json

import pytest
from guardkit import make_kit

from qdrant_guard.overhead import measure_overhead

TINY = {"dim": 16, "points": 40, "batch": 16, "queries": 3, "rounds": 2, "progress": False}


def shared(**over):
    return {"docs": {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text",
                     "intent": {"enabled": False}, **over}}


@pytest.fixture
def kit(tmp_path):
    return make_kit(tmp_path)


def run(kit, cfg, **more):
    return measure_overhead(cfg, "docs", credential=kit.principal("alice", "hr").credential,
                            read_credential=kit.principal("bob", "support").credential, **TINY, **more)


def test_a_budget_restricted_to_sources_the_run_never_writes_is_named_as_not_timed(kit, tmp_path):
    # The README's quick-start policy restricts its budget to 'board-memo-2026-q3'; the bench's points
    # carry doc0..docN, so the budget charged nothing and the figures held none of its admissions.
    cfg = kit.config(shared(diversity={"max_source_coverage": 0.25, "restricted_sources": ["board-memo"]}))
    rep = run(kit, cfg, sources=2, workdir=tmp_path / "wd")
    note = [n for n in rep.notes if "restricted_sources" in n]
    assert note == ["the extraction budget (max_source_coverage 0.25) applies only to restricted_sources "
                    "['board-memo'], none of which the run's points carry (their sources are doc0 .. doc1): "
                    "no point was charged to it, so the budget's admissions are NOT in these figures; `--source "
                    "board-memo` tags some of the run's points with it (written by the owner boundary, read by "
                    "another)"]
    # What the note says is so: no read of the run was charged (nothing withheld, nothing excluded).
    records = [json.loads(x)["record"] for x in (tmp_path / "wd" / "audit.jsonl").read_text().splitlines()]
    reads = [r for r in records if r["op"] == "query_points"]
    assert reads and not any("budget" in r["details"] or "budget_excluded" in r["details"] for r in reads)


def test_no_such_note_when_a_restricted_source_is_among_the_runs_or_every_source_is_budgeted(kit):
    for div in ({"max_source_coverage": 0.25, "restricted_sources": ["doc1"]}, {"max_source_coverage": 0.25},
                {}):
        rep = run(kit, kit.config(shared(diversity=div)), sources=2)
        assert not any("none of which the run's points carry" in n for n in rep.notes), div


def test_a_workdir_run_names_where_it_kept_the_audit_log_and_the_budget_file(kit, tmp_path):
    # It said "a temporary file", and a user looking for the run's audit log found it in --workdir.
    work = tmp_path / "wd"
    rep = run(kit, kit.config(shared(), budget_store="sqlite:///budget.db"), workdir=work)
    assert any(n.startswith(f"audit log written to {work / 'audit.jsonl'} (in --workdir, kept), not ")
               for n in rep.notes), rep.notes
    assert f"extraction budgets kept in {work / 'budget.db'} (in --workdir, kept), not the policy's budget_store" \
        in rep.notes
    assert (work / "audit.jsonl").exists()


def test_without_workdir_the_files_are_still_called_temporary(kit):
    rep = run(kit, kit.config(shared(), budget_store="sqlite:///budget.db"))
    assert any(n.startswith("audit log written to a temporary file, not ") for n in rep.notes)
    assert "extraction budgets kept in a temporary file, not the policy's budget_store" in rep.notes


@pytest.mark.parametrize("value, shown", [(float("nan"), "(nan)"), (float("-inf"), "(-inf)")])
def test_a_non_finite_coordinate_is_shown_as_a_plain_float_with_the_fix(value, shown):
    # The walkthrough's upsert of a NaN vector read "has a non-finite value (np.float64(nan)) at
    # index 0": numpy's repr, and no word of what to do.
    import numpy as np
    from qdrant_client import models

    from qdrant_guard import InvalidVectorError
    from qdrant_guard.vectors import VectorSpec, as_dense

    spec = VectorSpec(name="", size=4, distance=models.Distance.COSINE, multivector=False)
    for given in ([0.5, value, 0.0, 0.0], np.array([0.5, value, 0.0, 0.0], dtype=np.float32)):
        with pytest.raises(InvalidVectorError) as ei:
            as_dense(given, spec, where="point 5")
        text = str(ei.value)
        assert f"has a non-finite value {shown} at index 1" in text and "np." not in text
        assert "drop or re-embed the point" in text and ei.value.reason == "non_finite"


@pytest.mark.parametrize("unbuffered", ["1", None])
def test_output_piped_into_head_ends_quietly(tmp_path, unbuffered):
    # `qdrant-guard demo | head -n 2` (the walkthrough met it with `audit replay ... | head`) ended
    # with "error: [Errno 32] Broken pipe" on stderr and exit 2. The reader is gone before the
    # command writes (as `| true`, or `| head` while the output is still buffered), so the test
    # does not race the writes; without PYTHONUNBUFFERED the output is only flushed at the end,
    # which used to fail at interpreter exit ("Exception ignored ... BrokenPipeError", exit 120).
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    env["PYTHONPATH"] = os.getcwd()
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "qdrant_guard", "demo", "--workdir", str(tmp_path / "demo")],
                              stdout=write_end, stderr=subprocess.PIPE, env=env, timeout=300)
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and proc.stderr.decode() == ""


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error(monkeypatch, capsys):
    from qdrant_guard import cli

    def boom(args):
        raise BrokenPipeError(32, "Broken pipe")  # e.g. a socket to a server that went away

    parser = cli.build_parser()
    args = parser.parse_args(["keys", "new", "--out", "x.key"])
    monkeypatch.setattr(parser, "parse_args", lambda argv: args)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    args.func = boom
    assert cli.main(["keys", "new", "--out", "x.key"]) == 2  # stdout (captured) is not a broken pipe
    assert "error: [Errno 32] Broken pipe" in capsys.readouterr().err
