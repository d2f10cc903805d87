"""`qdrant-guard bench` review: what each variant reads, what guard-only still sends to Qdrant, and
bad inputs and interruptions answered without a traceback or a lost run.

No timed assertions: the tests check what was measured and what the user is told.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from guardkit import make_kit, replay_policy_file
from test_overhead_cli import TINY, shared

from qdrant_guard.errors import BenchmarkError, QdrantGuardError
from qdrant_guard.overhead import drop_scratch, measure_overhead, read_credential, stats_us

REPO = Path(__file__).resolve().parent.parent
NOTES = '[collections.notes]\nclass = "PII"\nowner = "hr"\ntext_field = "text"\n'


@pytest.fixture
def kit(tmp_path):
    return make_kit(tmp_path)


def bench(*args, cwd=REPO, env=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "qdrant_guard.cli", "bench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env={**os.environ, **(env or {})}, **kw)


def run(*args, **kw):
    proc = bench(*args, **kw)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def test_raw_reads_the_twin_as_stored_without_the_guard(kit):
    # Raw is what the application reads today: exact vectors, payloads without receipts. Reading the
    # guarded collection raw would put the receipts' payload on both sides of the comparison.
    rep = measure_overhead(kit.config(shared()), "docs", credential=kit.principal("alice", "hr").credential,
                           read_credential=kit.principal("bob", "support").credential, **TINY)
    assert rep.checks["receipted_points"] == TINY["points"]
    assert rep.checks["raw_query_points_with_receipt"] == 0
    assert "twin collection" in rep.format_table()


def test_guard_only_names_the_lookups_it_still_sends_to_qdrant(kit):
    # An extraction budget (the README's policy sets one) has the guard resolve aliases on each read.
    rep = measure_overhead(kit.config(shared(diversity={"max_source_coverage": 1.0})), "docs", credential=kit.principal("alice", "hr").credential,
                           read_credential=kit.principal("bob", "support").credential, **TINY)
    assert rep.checks["guard_only_forwarded_calls"] > 0
    note = next(n for n in rep.notes if n.startswith("guard-only query is not Qdrant-free"))
    assert "get_aliases 1 per call" in note and "only the answer to the final request is replayed" in note
    assert note in rep.format_table()


def test_percentiles_on_known_lists():
    s = stats_us(np.array([1.0, 2.0, 3.0, 4.0]) * 1e-6)
    assert (s["p50_us"], s["p90_us"], s["n"]) == (pytest.approx(2.5), pytest.approx(3.7), 4)
    s = stats_us(np.arange(1, 102) * 1e-6)  # 1..101 us: the ranks fall on samples
    assert (s["p50_us"], s["p90_us"], s["mean_us"]) == (pytest.approx(51), pytest.approx(91), pytest.approx(51))


def test_a_mistyped_token_is_not_echoed():
    token = "qgc2." + "A" * 120  # not a path, not a qgc1 token: a secret all the same
    with pytest.raises(BenchmarkError) as err:
        read_credential(token)
    assert "A" * 20 not in str(err.value) and "125 characters, not shown" in str(err.value)
    assert read_credential("  qgc1.abc\n") == "qgc1.abc"


def test_an_expired_credential_is_named(kit):
    expired = kit.principal("alice", "hr", ttl_s=1, now=time.time() - 3600).credential
    with pytest.raises(BenchmarkError, match="a credential was rejected: .*expired") as err:
        measure_overhead(kit.config(shared()), "docs", credential=expired, **TINY)
    assert isinstance(err.value, QdrantGuardError) and expired not in str(err.value)


def test_json_in_a_missing_directory_is_refused_before_the_run(kit, tmp_path):
    policy = replay_policy_file(kit, NOTES)
    cred = kit.principal("alice", "hr").credential
    rc, out, err = run("--policy", str(policy), "--collection", "notes", "--credential", cred, "--dim", "8",
                       "--points", "10", "--batch", "10", "--queries", "1", "--rounds", "1", "--no-progress",
                       "--json", str(tmp_path / "no-such-dir" / "bench.json"))
    assert rc == 2 and "Traceback" not in err
    assert f"--json {tmp_path / 'no-such-dir' / 'bench.json'}: directory {tmp_path / 'no-such-dir'} does not exist" in err
    assert "guarded/raw" not in out  # refused before measuring, not after
    assert cred not in out + err


@pytest.mark.parametrize("args, needle", [
    (["--points", "0"], "argument --points: must be an integer >= 1, got '0'"),
    (["--rounds", "-1"], "argument --rounds: must be an integer >= 1, got '-1'"),
    (["--policy", "/nonexistent/missing.toml"], "/nonexistent/missing.toml"),
    (["--seed", "-3"], "seed must be an integer >= 0, got -3"),
])
def test_bad_flags_exit_non_zero_naming_the_flag(kit, tmp_path, args, needle):
    policy = replay_policy_file(kit, NOTES)
    base = {"--policy": str(policy), "--collection": "notes", "--throwaway-credentials": None}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    argv = [x for k, v in base.items() for x in ((k,) if v is None else (k, v))]
    rc, _, err = run(*argv)  # from the checkout: the venv's qdrant_guard may be another one
    assert rc == 2 and needle in err and "Traceback" not in err


def test_ctrl_c_inside_a_round_ends_cleanly_and_leaves_no_temporary_files(kit, tmp_path):
    policy = replay_policy_file(kit, NOTES)
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    proc = bench("--policy", str(policy), "--collection", "notes", "--throwaway-credentials", "--dim", "64",
                 "--points", "2000", "--queries", "400", "--rounds", "50", env={"TMPDIR": str(scratch)})
    seen = ""
    while "bench upsert" not in seen:  # the progress bar: the timed rounds have begun
        ch = proc.stderr.read(1)
        assert ch, f"ended before its rounds: {seen}"
        seen += ch
    assert [p.name for p in scratch.iterdir() if p.name.startswith("qdrant-guard-bench-")]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted: nothing measured is kept" in err
    assert "guarded/raw" not in out
    assert not [p.name for p in scratch.iterdir() if p.name.startswith("qdrant-guard-bench-")]


def test_an_error_inside_a_round_removes_the_temporary_directory(kit, tmp_path, monkeypatch):
    # A refusal during the first guarded write (the collections exist by then): the run stops with
    # the guard's verdict, and its temporary directory (audit log, budget store) is gone.
    import tempfile

    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    pol = shared()
    pol["docs"].update(writers=["support"], noise_on_write=False)
    with pytest.raises(BenchmarkError, match="NOISE_REQUIRED"):
        measure_overhead(kit.config(pol), "docs", credential=kit.principal("bob", "support").credential, **TINY)
    assert list(scratch.iterdir()) == []


@pytest.mark.filterwarnings("ignore:Failed to obtain server version:UserWarning")  # the unreachable server
@pytest.mark.parametrize("scratch", [None, "bench_tmp"])
def test_a_password_in_the_url_is_never_shown(kit, scratch):
    url = "http://bench:s3cret@127.0.0.1:9/?api_key=k3y"  # nothing listens on the discard port
    with pytest.raises(BenchmarkError) as err:
        measure_overhead(kit.config(shared()), "docs", credential=kit.principal("alice", "hr").credential,
                         url=url, scratch_collection=scratch, **TINY)
    assert "--url http://127.0.0.1:9/:" in str(err.value)
    assert "s3cret" not in str(err.value) and "k3y" not in str(err.value)


@pytest.mark.parametrize("target", ["policy", "audit_log", "credential"])
def test_json_never_overwrites_a_file_of_the_user(kit, tmp_path, target):
    policy = replay_policy_file(kit, NOTES)
    policy.write_text(f'audit_log = "{tmp_path / "audit.jsonl"}"\n' + policy.read_text())
    (tmp_path / "audit.jsonl").write_text("")
    cred = tmp_path / "alice.cred"
    cred.write_text(kit.principal("alice", "hr").credential + "\n")
    path = {"policy": policy, "audit_log": tmp_path / "audit.jsonl", "credential": cred}[target]
    before = path.read_text()
    rc, out, err = run("--policy", str(policy), "--collection", "notes", "--credential", str(cred), "--dim", "8",
                       "--points", "10", "--batch", "10", "--queries", "1", "--rounds", "1", "--no-progress",
                       "--json", str(path))
    what = {"policy": "the policy file", "audit_log": "the policy's audit_log", "credential": "the --credential file"}
    assert rc == 2 and f"--json {path} is {what[target]}, which the benchmark never writes" in err
    assert path.read_text() == before and "guarded/raw" not in out


def test_an_owner_writing_raw_is_told_the_noise_is_not_timed(kit):
    # The throwaway default writer is the owner: under raw_in_boundary its writes are stored raw.
    cfg = kit.config(shared(raw_in_boundary=True, writers=["support"]))
    rep = measure_overhead(cfg, "docs", throwaway_credentials=True, **TINY)
    assert rep.writer == "bench-writer@hr" and rep.checks["receipted_points"] == 0
    assert any("noising and receipt signing are NOT in the upsert figures; a writer of support times them" in n
               for n in rep.notes)
    noised = measure_overhead(cfg, "docs", throwaway_credentials=True, write_boundary="support", **TINY)
    assert noised.checks["receipted_points"] == TINY["points"]
    assert not any("NOT in the upsert figures" in n for n in noised.notes)


def test_no_token_in_the_report(kit):
    alice, bob = kit.principal("alice", "hr").credential, kit.principal("bob", "support").credential
    rep = measure_overhead(kit.config(shared()), "docs", credential=alice, read_credential=bob, **TINY)
    text = json.dumps(rep.to_dict()) + rep.format_table()
    assert alice not in text and bob not in text and "alice@hr" in text


def test_a_scratch_collection_left_behind_is_named_not_swallowed():
    # The --url path deletes its scratch collections at the end; no server here, so the same
    # clean-up runs on local mode: once where deletion works, once on a closed client where it fails.
    import warnings

    import qdrant_client
    from qdrant_client.http import models

    c = qdrant_client.QdrantClient(":memory:")
    for n in ("a", "b"):
        c.create_collection(n, vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert drop_scratch(c, ["a"], "http://host:6333") == []
    assert not c.collection_exists("a") and c.collection_exists("b")
    c.close()
    with pytest.warns(RuntimeWarning, match=r"could not delete its scratch collection 'b' at http://host:6333.*"
                                            r"delete it by hand"):
        assert drop_scratch(c, ["b"], "http://host:6333") == ["b"]
