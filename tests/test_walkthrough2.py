"""The second hour of a new user (2026-12-07, h-walk2): a policy of their own written from the docs,
the overhead benchmark on it, calibration. Each fix below fails on the code before it:

* `epsilon = "1.0"` (a number in quotes) was told "expected a number, got '1.0' (str)" and nothing
  about the quotes; `max_source_coverage = 25` (a percentage) was told "Input should be less than
  or equal to 1";
* `credential issue --authority keys/x.key` run from another directory told the user to make the
  key with `keys new`, which makes an authority no guard of the policy trusts;
* `qdrant-guard bench` under a budget on every source ran for over 15 minutes (the README says
  about 10 s) and said why only at the end; its progress bar counted rounds, so it showed no
  estimate through the warm-up and the whole first round.
"""
from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest

from qdrant_guard import ConfigError, Principal, QdrantClient, cli
from qdrant_guard.overhead import interleaved

POLICY = """\
signing_key = "keys/guard.key"
audit_log = "audit.jsonl"
unlisted = "refuse"

[boundaries.clinic]
authority_keys = ["keys/clinic-authority.key.pub"]
[boundaries.analytics]
authority_keys = ["keys/analytics-authority.key.pub"]

[collections.patient_notes]
class = "PII"
owner = "clinic"
readers = ["analytics"]
raw_in_boundary = true

[collections.patient_notes.noise]
epsilon = 1.0
keyed = true

[collections.patient_notes.diversity]
max_source_fraction = 0.4
max_source_coverage = 0.25

[collections.ranking_vectors]
class = "PROPRIETARY"
owner = "analytics"
readers = ["clinic"]
[collections.ranking_vectors.diversity]
max_vectors = 500

[collections.help_articles]
class = "PUBLIC"
"""


def _cli(capsys: pytest.CaptureFixture[str], argv: list[str], rc: int = 0) -> tuple[str, str]:
    capsys.readouterr()
    got = cli.main(argv)
    out, err = capsys.readouterr()
    assert got == rc, f"qdrant-guard {shlex.join(argv)} exited {got}: {err}"
    return out, err


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """A user's project: the guard's key, two authorities, the policy."""
    monkeypatch.chdir(tmp_path)
    for name in ("guard", "clinic-authority", "analytics-authority"):
        _cli(capsys, ["keys", "new", "--out", f"keys/{name}.key"])
    (tmp_path / "policy.toml").write_text(POLICY)
    return tmp_path


def _paste_fix(project: Path, wrong: str, right_prefix: str) -> None:
    """Write ``wrong`` into the policy, and the line the refusal suggests in its place; the policy
    with that line must load."""
    (project / "policy.toml").write_text(POLICY.replace(right_prefix, wrong, 1))
    with pytest.raises(ConfigError) as exc:
        QdrantClient(":memory:", guard="policy.toml")
    message = str(exc.value)
    assert repr(tomllib.loads(wrong).popitem()[1]) in message  # names the bad value
    fix = message.split("write it without quotes: " if "without quotes" in message else " % write ")[-1].strip()
    assert fix.split(" = ")[0] == wrong.split(" = ")[0], message
    (project / "policy.toml").write_text(POLICY.replace(right_prefix, fix, 1))
    QdrantClient(":memory:", guard="policy.toml").close()


@pytest.mark.parametrize("wrong, right", [
    ('epsilon = "1.0"', "epsilon = 1.0"),
    ('max_vectors = "500"', "max_vectors = 500"),
    ('keyed = "True"', "keyed = true"),
    ('max_source_fraction = "40%"', "max_source_fraction = 0.4"),
    ("max_source_coverage = 25", "max_source_coverage = 0.25"),
])
def test_a_quoted_number_or_a_percentage_is_told_the_line_to_write(project: Path, wrong: str, right: str) -> None:
    _paste_fix(project, wrong, right)


def test_text_that_is_no_number_gets_no_made_up_fix(project: Path) -> None:
    for wrong in ('epsilon = "1."', 'epsilon = "inf"', 'epsilon = "one"'):
        (project / "policy.toml").write_text(POLICY.replace("epsilon = 1.0", wrong))
        with pytest.raises(ConfigError) as exc:
            QdrantClient(":memory:", guard="policy.toml")
        assert "expected a number" in str(exc.value) and "without quotes" not in str(exc.value)


def test_a_missing_authority_key_from_another_directory_is_named_not_made_anew(
        project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = project / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    argv = ["credential", "issue", "--authority", "keys/clinic-authority.key", "--agent", "nurse",
            "--boundary", "clinic"]
    _, err = _cli(capsys, argv, rc=2)
    assert "keys/clinic-authority.key: no such file (read from the current directory" in err
    assert "keys new --out" not in err  # a new authority key issues credentials no guard here accepts
    assert not (elsewhere / "keys").exists()
    _, err = _cli(capsys, argv + ["--policy", "../policy.toml"], rc=2)
    pasted = shlex.split(err.split("pass ", 1)[1].split("; nothing was issued")[0])
    assert pasted[0] == "--authority", err
    token, _ = _cli(capsys, argv[:2] + pasted + argv[4:] + ["--policy", "../policy.toml"])
    client = QdrantClient(":memory:", guard="../policy.toml", principal=Principal("nurse", "clinic", token.strip()))
    assert client.guard.principal_label == "nurse@clinic"  # type: ignore[union-attr]
    client.close()


def _bench(capsys: pytest.CaptureFixture[str], *more: str) -> tuple[str, str]:
    return _cli(capsys, ["bench", "--policy", "policy.toml", "--collection", "patient_notes",
                         "--throwaway-credentials", "--dim", "8", "--rounds", "1", *more])


def test_bench_says_before_the_run_that_the_budget_will_run_out_and_what_avoids_it(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, err = _bench(capsys, "--points", "40", "--queries", "3")
    before = err.split("bench upsert")[0]  # said before anything is timed
    assert "holds 20 point(s), a cap of 5" in before and "can read up to 20 of them" in before
    assert "Q x L below 5" in before and "--points 248 or more with --sources 2" in before
    assert "ran out for some sources during the run" in out  # and it did
    out, err = _bench(capsys, "--points", "248", "--sources", "2", "--queries", "3")
    assert "can run out" not in err and "ran out" not in out


def test_bench_progress_counts_calls_warm_up_included(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    capsys.readouterr()
    interleaved({"a": lambda i: None, "b": lambda i: None}, 3, 2, progress=True, desc="bench query")
    err = capsys.readouterr().err
    assert "bench query (1 warm-up + 2 round(s) x 3)" in err and "/9 " in err


def test_an_epsilon_above_its_class_ceiling_is_told_the_line_that_raises_it(project: Path) -> None:
    (project / "policy.toml").write_text(POLICY.replace("epsilon = 1.0", "epsilon = 3.0"))
    with pytest.raises(ConfigError) as exc:
        QdrantClient(":memory:", guard="policy.toml")
    message = str(exc.value)
    assert "collections.patient_notes.noise.epsilon = 3.0 is above the PII ceiling 2.0" in message
    line = message.split("with ", 1)[1].split(" in the policy's [epsilon_ceiling] section")[0]
    assert line == "PII = 3.0", message
    (project / "policy.toml").write_text(POLICY.replace("epsilon = 1.0", "epsilon = 3.0")
                                         + f"\n[epsilon_ceiling]\n{line}\n")
    QdrantClient(":memory:", guard="policy.toml").close()


def test_bench_says_a_distillation_budget_its_queries_never_charge_is_not_timed(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--policy", "policy.toml", "--collection", "ranking_vectors", "--throwaway-credentials",
            "--dim", "8", "--rounds", "1", "--points", "40", "--queries", "3", "--no-progress"]
    out, _ = _cli(capsys, argv)
    assert ("note: the distillation budget (max_vectors 500) is charged only by reads that return vectors, and the "
            "run's queries ask for none") in out
    (project / "policy.toml").write_text(POLICY.replace("max_vectors = 500", "max_vectors = 500\ncharge_scores = true"))
    out, _ = _cli(capsys, argv)
    assert "distillation budget" not in out


def _staging(project: Path, name: str) -> list[str]:
    """A staging copy of clean vectors, written with plain qdrant-client, and 20 vector queries."""
    import json

    import numpy as np
    from qdrant_client import QdrantClient as PlainClient, models

    rows = np.random.default_rng(7).normal(size=(60, 8))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    plain = PlainClient(path=str(project / "staging"))
    plain.create_collection(name, vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
    plain.upsert(name, [models.PointStruct(id=i, vector=r.tolist()) for i, r in enumerate(rows)])
    plain.close()
    (project / "q.jsonl").write_text("".join(json.dumps((r + 0.01).tolist()) + "\n" for r in rows[:20]))
    return ["calibrate", "--path", "staging", "--collection", name, "--queries", "q.jsonl", "--out", "u.json",
            "--policy", "policy.toml", "--no-progress", "--epsilons", "1,2"]


def test_calibrate_refuses_a_policy_collection_the_policy_does_not_list(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: under unlisted = "strict" the record was silently made for [default], whose noise
    # may differ from the collection meant; under "refuse" the fix given was to add the section.
    argv = _staging(project, "patient_notes_staging")
    (project / "policy.toml").write_text(POLICY.replace('unlisted = "refuse"', 'unlisted = "strict"'))
    _, err = _cli(capsys, argv + ["--policy-collection", "patient_note"], rc=2)
    assert ("--policy-collection 'patient_note' is not listed in --policy policy.toml (listed: help_articles, "
            "patient_notes, ranking_vectors); did you mean 'patient_notes'?") in err
    assert not (project / "u.json").exists()
    _cli(capsys, argv + ["--policy-collection", "patient_notes"])  # the name it suggests
    _, err = _cli(capsys, argv)  # an unlisted collection has a policy under "strict": [default]
    assert "note: --collection 'patient_notes_staging' is not listed in --policy policy.toml: the record is for " \
           "its [default] section" in err
    (project / "policy.toml").write_text(POLICY)
    _, err = _cli(capsys, argv, rc=2)
    assert "If it is a staging copy of a listed collection, pass --policy-collection" in err


def test_a_section_or_key_given_twice_is_told_what_to_do_with_the_two(project: Path) -> None:
    # tomllib says only "Cannot declare ... twice" / "Cannot overwrite a value" at the second one.
    twice_section = POLICY + "\n[collections.patient_notes]\nwriters = [\"clinic\"]\n"
    twice_key = POLICY.replace('owner = "clinic"\n', 'owner = "clinic"\nowner = "analytics"\n', 1)
    for text, hint in ((twice_section, "merge the keys of both sections"), (twice_key, "keep one of the two")):
        (project / "policy.toml").write_text(text)
        with pytest.raises(ConfigError) as exc:
            QdrantClient(":memory:", guard="policy.toml")
        assert "not valid TOML" in str(exc.value) and hint in str(exc.value), str(exc.value)
    (project / "policy.toml").write_text(POLICY)
    QdrantClient(":memory:", guard="policy.toml").close()
