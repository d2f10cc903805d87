"""`qdrant-guard bench` / measure_overhead: a user's policy timed raw vs guarded on real local Qdrant.

No timed assertions: the tests check what was timed (call counts, positive figures), that the guarded
calls went through the guard (audit log, receipts, noised vectors), and that refusals are explained.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from guardkit import make_kit, replay_policy_file, run_cli
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import keys
from qdrant_guard.audit import verify_audit_file
from qdrant_guard.errors import BenchmarkError, QdrantGuardError
from qdrant_guard.overhead import english_text, measure_overhead
from qdrant_guard.receipts import RECEIPT_KEY
from qdrant_guard.receipts import verify as verify_receipts

TINY = {"dim": 16, "points": 40, "batch": 16, "queries": 3, "rounds": 2, "progress": False}


def shared(**over):
    """A PII collection hr owns and support reads; noised writes (receipts), intent off."""
    return {"docs": {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text",
                     "noise_queries": True, "intent": {"enabled": False}, **over}}


@pytest.fixture
def kit(tmp_path):
    return make_kit(tmp_path)


def test_figures_for_every_variant_with_the_calls_asked_and_writes_through_the_guard(kit, tmp_path):
    work = tmp_path / "wd"
    rep = measure_overhead(kit.config(shared()), "docs", credential=kit.principal("alice", "hr").credential,
                           read_credential=kit.principal("bob", "support").credential, workdir=work, **TINY)
    batches = math.ceil(TINY["points"] / TINY["batch"])
    for comp, calls in ((rep.upsert, TINY["rounds"] * batches), (rep.query, TINY["rounds"] * TINY["queries"])):
        for t in (comp.raw, comp.guarded, comp.guard_only):
            assert t.calls == calls
            assert 0 < t.p50_us <= t.p90_us
        assert comp.ratio_p50 > 0 and comp.ratio_p90 > 0 and comp.guard_only_share_p50 > 0
    assert (rep.writer, rep.reader) == ("alice@hr", "bob@support")
    # The policy's audit log is not written: the run's went to the work directory, and verifies.
    assert not (kit.tmp / "audit.jsonl").exists()
    log = work / "audit.jsonl"
    assert verify_audit_file(log).ok
    records = [json.loads(x)["record"] for x in log.read_text().splitlines()]
    ups = [r for r in records if r["op"] == "upsert" and r["principal"] == "alice@hr" and r["verdict"].startswith("ALLOW")]
    reads = [r for r in records if r["op"] == "query_points" and r["principal"] == "bob@support"]
    # Every guarded and guard-only call was decided by the guard: one first call, one recording per
    # item, the warm-up round and the timed rounds (guarded + guard-only each).
    for audited, items in ((ups, batches), (reads, TINY["queries"])):
        assert len(audited) == 1 + items + 2 * items + 2 * TINY["rounds"] * items
    assert rep.checks["audit_entries"]["upsert"] == len([r for r in records if r["op"] == "upsert"])
    # The guarded collection holds noised, receipted points with the English text unredacted; the raw
    # twin holds the exact vectors.
    store = RawClient(path=str(work / "store"))
    try:
        guarded, _ = store.scroll("docs", limit=100, with_payload=True, with_vectors=True)
        raw, _ = store.scroll("docs_raw", limit=100, with_vectors=True)
        assert len(guarded) == len(raw) == TINY["points"] == rep.checks["receipted_points"]
        assert all(RECEIPT_KEY in p.payload and p.payload["text"] == english_text(p.id, rep.seed) for p in guarded)
        exact = {p.id: np.asarray(p.vector) for p in raw}
        assert all(not np.allclose(np.asarray(p.vector), exact[p.id]) for p in guarded)
        signer = keys.load_private_key(kit.guard_key_path).public_key()
        reports = verify_receipts(store, "docs", trusted_keys={keys.key_id(signer): signer})
        assert reports and all(r.ok for r in reports)
    finally:
        store.close()


def test_throwaway_credentials_say_which_check_they_emulate(kit):
    cfg = kit.config(shared())
    rep = measure_overhead(cfg, "docs", throwaway_credentials=True, **TINY)
    assert (rep.writer, rep.reader) == ("bench-writer@hr", "bench-reader@support")
    note = rep.notes[0]
    assert note.startswith("THROWAWAY CREDENTIALS") and "hr, support" in note and "not exercised" in note
    assert "THROWAWAY CREDENTIALS" in rep.format_table()
    # The given config keeps its own authority keys.
    assert cfg.boundaries["hr"].authority_keys == (kit.authority_pub["hr"],)


@pytest.mark.filterwarnings("ignore:Failed to obtain server version:UserWarning")  # the unreachable server
@pytest.mark.parametrize("case, needle", [
    ("unlisted", "collection 'nope' is not listed in the policy test-policy (listed: docs)"),
    ("writer_boundary", "boundary 'support' may not write 'docs'"),
    ("reader_boundary", "boundary 'support' may not read 'docs'"),
    ("foreign_authority", "a credential was rejected"),
    ("policy_refuses_write", ("the policy refused the benchmark's upsert of 16 points into 'docs' as "
                              "bob@support: NOISE_REQUIRED")),
    ("url_without_scratch", "pass --scratch-collection NAME"),
    ("unreachable_server", "--url http://127.0.0.1:9: cannot ask Qdrant whether 'bench_tmp' exists"),
    ("no_principal", "pass --credential TOKEN_OR_FILE"),
    ("bad_dim", "dim must be an integer >= 1, got 0"),
])
def test_refusals_name_the_input_and_the_fix(kit, case, needle):
    alice = kit.principal("alice", "hr").credential
    bob = kit.principal("bob", "support").credential
    args: dict = {"credential": alice, **TINY}
    pol = shared()
    coll = "docs"
    if case == "unlisted":
        coll = "nope"
    elif case == "writer_boundary":
        args["credential"] = bob
    elif case == "reader_boundary":
        pol = shared(readers=[])
        args["read_credential"] = bob
    elif case == "foreign_authority":
        (kit.tmp / "other").mkdir()
        args["credential"] = make_kit(kit.tmp / "other").principal("eve", "hr").credential
    elif case == "policy_refuses_write":
        pol = shared(writers=["support"], noise_on_write=False)
        args["credential"] = bob
    elif case == "url_without_scratch":
        args["url"] = "http://localhost:6333"
    elif case == "unreachable_server":  # nothing listens on the discard port: connection refused
        args.update(url="http://127.0.0.1:9", scratch_collection="bench_tmp")
    elif case == "no_principal":
        args["credential"] = None
    elif case == "bad_dim":
        args["dim"] = 0
    with pytest.raises(BenchmarkError) as err:
        measure_overhead(kit.config(pol), coll, **args)
    assert isinstance(err.value, QdrantGuardError)
    assert needle in str(err.value)


def test_workdir_must_be_new_or_empty(kit, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(BenchmarkError, match="is not an empty directory"):
        measure_overhead(kit.config(shared()), "docs", credential=kit.principal("alice", "hr").credential,
                         workdir=tmp_path / "full", **TINY)
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "qdrant_guard.cli", "bench", *args], capture_output=True,
                          text=True, env={**os.environ}, cwd=cwd, timeout=300, check=False)


def test_cli_end_to_end_with_a_policy_file_and_a_credential_file(kit, tmp_path):
    policy = replay_policy_file(kit, '[collections.notes]\nclass = "PII"\nowner = "hr"\ntext_field = "text"\n')
    cred = tmp_path / "alice.cred"
    cred.write_text(kit.principal("alice", "hr").credential + "\n")
    out = tmp_path / "bench.json"
    repo = Path(__file__).resolve().parent.parent
    proc = cli("--policy", str(policy), "--collection", "notes", "--credential", str(cred), "--dim", "8",
               "--points", "30", "--batch", "10", "--queries", "2", "--rounds", "1", "--json", str(out),
               "--no-progress", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert "guarded/raw" in proc.stdout and "Figures depend on this machine" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["upsert"]["guarded"]["calls"] == 3 and doc["query"]["raw"]["calls"] == 2
    assert doc["writer"] == doc["reader"] == "alice@hr" and doc["text_field"] == "text"
    assert doc["upsert"]["guarded_over_raw_p50"] > 0 and doc["checks"]["stored_points"] == 30
    assert doc["sources"] == 1 and doc["source_names"] == ["doc0"]  # one source per 20 points
    # The rest in process (the run above is the real subprocess): what the command says.
    quick = run_cli("bench", "--policy", str(policy), "--collection", "notes", "--throwaway-credentials",
                    "--dim", "8", "--points", "10", "--batch", "10", "--queries", "1", "--rounds", "1",
                    "--no-progress")
    assert quick.returncode == 0, quick.stderr
    assert "note: THROWAWAY CREDENTIALS: boundaries hr trusted throwaway authority keys" in quick.stdout
    bad = run_cli("bench", "--policy", str(policy), "--collection", "tickets", "--credential", str(cred))
    assert bad.returncode == 2 and "error: collection 'tickets' is not listed" in bad.stderr
    missing = run_cli("bench", "--policy", str(policy), "--collection", "notes", "--credential",
                      str(tmp_path / "none"))
    assert missing.returncode == 2 and "--credential" in missing.stderr and "credential issue" in missing.stderr


def test_cli_help_documents_every_flag():
    proc = run_cli("bench", "--help")
    assert proc.returncode == 0
    for flag in ("--policy", "--collection", "--credential", "--read-credential", "--throwaway-credentials",
                 "--write-boundary", "--read-boundary", "--dim", "--points", "--batch", "--queries", "--limit",
                 "--rounds", "--sources", "--seed", "--no-query-text", "--json", "--url", "--scratch-collection",
                 "--workdir", "--no-progress"):
        assert flag in proc.stdout


@pytest.mark.parametrize("audit_log", [True, False])
def test_a_budget_that_runs_out_during_the_run_is_reported(kit, audit_log):
    # 2 sources of 20 points, at most 5 of each per reader: the reader's reads use both up.
    cfg = kit.config(shared(diversity={"max_source_coverage": 0.25}), **({} if audit_log else {"audit_log": None}))
    rep = measure_overhead(cfg, "docs", credential=kit.principal("alice", "hr").credential,
                           read_credential=kit.principal("bob", "support").credential, sources=2, **TINY)
    found = rep.checks["audited_reads_with_budget_exclusion" if audit_log else "queries_whose_request_changed"]
    assert found > 0
    assert any(n.startswith("the extraction budget (max_source_coverage 0.25) ran out") for n in rep.notes)
    assert rep.sources == 2 and rep.checks["guarded_reads_short"] > 0


def test_a_public_collection_needs_no_credential(kit):
    rep = measure_overhead(kit.config({"open": {"class": "PUBLIC"}}), "open", **TINY)
    assert rep.writer == rep.reader == "anonymous" and rep.checks["receipted_points"] == 0
    assert rep.query.guarded.calls == TINY["rounds"] * TINY["queries"]


def test_a_workdir_run_under_a_policy_without_signing_key_does_not_warn_about_restarts(kit, tmp_path):
    # The scratch store is removed after the run; the warning meant for lasting stores was noise here.
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=r".*sets no signing_key", category=UserWarning)
        measure_overhead(kit.config(shared(), signing_key=None), "docs",
                         credential=kit.principal("alice", "hr").credential,
                         read_credential=kit.principal("bob", "support").credential, workdir=tmp_path / "wd",
                         **TINY)
