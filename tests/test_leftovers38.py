"""Four leftovers of h-minq, h-left3 and h-newuser2 (branch h-left4, 2026-12-06).

1. A utility record's signed ``n_queries`` counts every query searched, so the guard's
   ``utility.min_queries`` could not hold a record calibrated with qrels to its labelled count;
   record version 6 signs ``n_measured_queries`` and the guard holds that.
2. ``qdrant-guard calibrate --allow-few-queries`` without ``--policy`` signed a record the default
   policy's guard refuses, silently; it now warns.
3. The left-behind count's cap on learnt parameter sets is a policy knob, and a refusal it causes
   says so.
4. ``qdrant-guard bench --source NAME`` tags the run's points with a (restricted) source, so an
   extraction budget on restricted sources is timed.

Real local Qdrant, real calibrate, real Ed25519 keys; no mocks.
"""
from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from guardkit import make_kit, models, staging_store
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import GuardRefusal, QdrantClient, cli, keys
from qdrant_guard.utility import UTILITY_DOMAIN, UtilityRecord, calibrate, verify_utility_record

_ARGS = dict(k=10, radius=0.01, epsilons=(0.5, 2.0, 8.0), threshold=0.05, progress=False, seed=1)


# -- 1. the measured query count is signed and held ------------------------------------------------

def _qrels_record(kit, labelled: int, searched: int = 25, **kw) -> UtilityRecord:
    raw, _, queries = staging_store(32)
    qrels = {i: [i] for i in range(labelled)}
    return calibrate(raw, "staging", queries[:searched], qrels=qrels, allow_few_queries=True,
                     signer=keys.load_private_key(kit.guard_key_path), **_ARGS, **kw)


def _resigned(kit, rec: UtilityRecord, **changes) -> UtilityRecord:
    out = dataclasses.replace(rec, signature=None, **changes)
    sig = keys.load_private_key(kit.guard_key_path).sign(UTILITY_DOMAIN + out.signed_bytes())
    return dataclasses.replace(out, signature=base64.b64encode(sig).decode("ascii"))


def _trusted(kit) -> list:
    return [keys.load_private_key(kit.guard_key_path).public_key()]


def _write(kit, path: Path, rec: UtilityRecord, **utility) -> int:
    _, docs, _ = staging_store(32)
    coll = {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False},
            "noise": {"epsilon": rec.epsilon, "radius": 0.01}, "utility": {"record": str(path), **utility}}
    cl = QdrantClient(":memory:", guard=kit.config({"docs": coll}, epsilon_ceiling={"PII": 10.0}),
                      principal=kit.principal("alice", "hr"))
    cl.create_collection("docs", vectors_config=models.VectorParams(size=32, distance=models.Distance.COSINE))
    cl.upsert("docs", [models.PointStruct(id=1, vector=docs[0].tolist())])
    return RawClient.count(cl, "docs").count


def test_a_record_signs_how_many_queries_its_metric_averaged_over(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    rec = _qrels_record(kit, 19)
    assert (rec.version, rec.n_queries, rec.n_measured_queries) == (6, 25, 19)
    assert rec.body()["n_measured_queries"] == 19  # signed
    back = UtilityRecord.from_json(rec.to_json())
    assert back.n_measured_queries == 19 and verify_utility_record(back, _trusted(kit))
    forged = json.loads(rec.to_json())
    forged["n_measured_queries"] = 25
    assert not verify_utility_record(UtilityRecord.from_json(json.dumps(forged)), _trusted(kit))
    # Overlap and known-item recall average over every query searched.
    assert _qrels_record(kit, 19, metric="overlap").n_measured_queries == 25
    raw, _, queries = staging_store(32)
    assert calibrate(raw, "staging", queries[:21], **_ARGS).n_measured_queries == 21


def test_the_guard_holds_a_qrels_record_to_its_labelled_query_count(tmp_path: Path) -> None:
    # Before: the guard compared n_queries (25 searched) with min_queries = 20 and accepted a record
    # whose recall averaged over 19 labelled queries, which calibrate itself refuses to sign.
    kit = make_kit(tmp_path)
    rec = _qrels_record(kit, 19)
    path = tmp_path / "u.json"
    path.write_text(rec.to_json())
    with pytest.raises(GuardRefusal) as exc:
        _write(kit, path, rec)
    assert exc.value.verdict == "UTILITY_DEGRADED"
    msg = str(exc.value)
    assert ("was calibrated on 19 queries with relevance labels (of 25 searched; with qrels its recall averages "
            "over the labelled ones only), fewer than utility.min_queries = 20") in msg
    assert "at least 20 queries labelled in --qrels" in msg
    assert _write(kit, path, rec, min_queries=19) == 1
    path.write_text(_qrels_record(kit, 20).to_json())
    assert _write(kit, path, rec) == 1


def test_a_version_5_record_still_verifies_and_is_held_to_its_n_queries(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    old = _resigned(kit, _qrels_record(kit, 19), version=5, n_measured_queries=None)
    assert "n_measured_queries" not in old.body()
    back = UtilityRecord.from_json(old.to_json())
    assert verify_utility_record(back, _trusted(kit)) and back.measured_queries == 25
    path = tmp_path / "v5.json"
    path.write_text(old.to_json())
    assert _write(kit, path, old) == 1  # the only count it carries is 25
    # A version-5 record cannot carry the field (its signature would not cover it), nor drop to 5.
    data = json.loads(_qrels_record(kit, 19).to_json())
    data["version"] = 5
    with pytest.raises(ValueError, match="'n_measured_queries' field, which records before version 6"):
        UtilityRecord.from_json(json.dumps(data))
    del data["n_measured_queries"]
    assert not verify_utility_record(UtilityRecord.from_json(json.dumps(data)), _trusted(kit))


@pytest.mark.parametrize("bad", [None, 0, 26, "19", 19.0, True])
def test_a_version_6_record_needs_a_measured_count_within_its_queries(tmp_path: Path, bad) -> None:
    kit = make_kit(tmp_path)
    data = json.loads(_qrels_record(kit, 19).to_json())
    data["n_measured_queries"] = bad
    with pytest.raises(ValueError, match="needs 'n_measured_queries', the number of queries its metric averaged "
                                         "over, as an integer from 1 to its n_queries .25."):
        UtilityRecord.from_json(json.dumps(data))


# -- 2. calibrate warns of a record the default policy refuses -----------------------------------

def _cli_args(tmp: Path) -> list[str]:
    store = tmp / "store"
    if not store.exists():
        raw = RawClient(path=str(store))
        raw.create_collection("kb_staging", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
        rng = np.random.default_rng(1)
        raw.upsert("kb_staging", [models.PointStruct(id=i, vector=rng.normal(size=4).tolist()) for i in range(60)])
        raw.close()
        (tmp / "q.jsonl").write_text("".join(json.dumps(rng.normal(size=4).tolist()) + "\n" for _ in range(30)))
    return ["calibrate", "--path", str(store), "--collection", "kb_staging", "--queries", str(tmp / "q.jsonl"),
            "--no-progress", "--seed", "0", "--epsilons", "0.5,2,8", "--threshold", "0.9", "--out", str(tmp / "u.json")]


def test_calibrate_without_policy_warns_of_a_record_below_the_default_min_queries(tmp_path: Path, capsys) -> None:
    # Before: exit 0 and nothing on stderr, though a guard under the default policy refuses the record.
    args = _cli_args(tmp_path)
    out = str(tmp_path / "u.json")
    assert cli.main(args + ["--sample-limit", "3", "--allow-few-queries"]) == 0
    err = capsys.readouterr().err
    assert (f"warning: {out} was signed (under --allow-few-queries) on 3 queries, fewer than utility.min_queries = "
            "20, the policy default: while utility.enforce is on, a guard refuses every write that consults this "
            "record (UTILITY_DEGRADED, reason few_queries) unless that collection's policy sets utility.min_queries "
            "= 3 or lower, or utility.allow_small_records = true") in err
    assert UtilityRecord.from_json(Path(out).read_text()).measured_queries == 3
    assert cli.main(args + ["--sample-limit", "5", "--min-queries", "5"]) == 0
    assert "(under --min-queries 5) on 5 queries" in capsys.readouterr().err
    # At the default floor, or with a policy that checks the record itself: no such warning.
    assert cli.main(args + ["--sample-limit", "20"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_the_warning_is_true_a_default_policy_guard_refuses_the_record(tmp_path: Path, capsys) -> None:
    kit = make_kit(tmp_path)
    args = _cli_args(tmp_path) + ["--key", str(kit.guard_key_path), "--radius", "0.01"]
    assert cli.main(args + ["--sample-limit", "3", "--allow-few-queries"]) == 0
    assert "reason few_queries" in capsys.readouterr().err
    path = tmp_path / "u.json"
    rec = UtilityRecord.from_json(path.read_text())
    coll = {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False},
            "noise": {"epsilon": rec.epsilon, "radius": 0.01},
            "utility": {"record": str(path), "metric": "recall", "max_recall_drop": 0.9}}
    for utility, refused in (({}, True), ({"min_queries": 3}, False), ({"allow_small_records": True}, False),
                             ({"enforce": False}, False)):
        pol = {**coll, "utility": {**coll["utility"], **utility}}
        cl = QdrantClient(":memory:", guard=kit.config({"docs": pol}, epsilon_ceiling={"PII": 10.0}),
                          principal=kit.principal("alice", "hr"))
        cl.create_collection("docs", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
        try:
            cl.upsert("docs", [models.PointStruct(id=1, vector=[0.5, 0.5, 0.5, 0.5])])
        except GuardRefusal as exc:
            assert refused and "few_queries" in str(exc), (utility, exc)
        else:
            assert not refused, utility


# -- 4. bench --source: a budget on restricted sources is timed ----------------------------------

_TINY = {"dim": 16, "points": 40, "batch": 16, "queries": 6, "rounds": 2, "progress": False}


def _bench_cfg(kit, **div):
    return kit.config({"docs": {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text",
                                "intent": {"enabled": False},
                                "diversity": {"max_source_coverage": 0.25, "restricted_sources": ["board-memo"],
                                              "max_source_fraction": 1.0, "min_unique_sources": 1, **div}}})


def _bench(kit, cfg, writer=("alice", "hr"), reader=("bob", "support"), **more):
    from qdrant_guard.overhead import measure_overhead

    return measure_overhead(cfg, "docs", credential=kit.principal(*writer).credential,
                            read_credential=kit.principal(*reader).credential, **_TINY, **more)


def _reads(workdir: Path) -> list[dict]:
    records = [json.loads(x)["record"] for x in (workdir / "audit.jsonl").read_text().splitlines()]
    return [r for r in records if r["op"] == "query_points"]


def test_bench_source_tags_points_with_a_restricted_source_and_the_budget_is_charged(tmp_path: Path) -> None:
    # Before: the run's points carried doc0 .. docN only, so a budget on restricted sources charged
    # no read and the figures held none of its admissions (measure_overhead had no way to tag them).
    kit = make_kit(tmp_path)
    rep = _bench(kit, _bench_cfg(kit), source_values=("board-memo",), sources=2, workdir=tmp_path / "wd")
    assert not any("none of which the run's points carry" in n for n in rep.notes)
    assert ("1 of the run's 2 sources ('board-memo') is in restricted_sources, about 20 point(s) each, so reads are "
            "charged to the extraction budget (max_source_coverage 0.25) and its admissions are in the guarded "
            "figures") in rep.notes
    reads = _reads(tmp_path / "wd")
    # What the note says is so: reads were charged to the budget until it ran out (5 of the source's 20
    # points), and the later reads were sent excluding the source (test_newuser3: none without --source).
    excluded = [r["details"]["budget_excluded"] for r in reads if "budget_excluded" in r["details"]]
    assert excluded and all(e["sources"] == 1 for e in excluded)  # board-memo; the noise (keyed) picks the ids
    assert rep.checks["audited_reads_with_budget_exclusion"] == len(excluded)


def test_bench_source_checks_the_writer_and_names_a_reader_the_budget_never_charges(tmp_path: Path) -> None:
    from qdrant_guard.errors import BenchmarkError

    kit = make_kit(tmp_path)
    cfg = _bench_cfg(kit)
    cfg = cfg.model_copy(update={"collections": {"docs": cfg.collections["docs"].model_copy(
        update={"writers": ("support",)})}})
    with pytest.raises(BenchmarkError, match="--source 'board-memo' is one of the policy's restricted_sources, "
                                             "which only the owner boundary 'hr' may write, and the writer is of "
                                             "boundary 'support'"):
        _bench(kit, cfg, writer=("bob", "support"), source_values=("board-memo",), sources=2)
    rep = _bench(kit, cfg, reader=("alice", "hr"), source_values=("board-memo",), sources=2)
    assert any(n.startswith("the run's points of 'board-memo' carry restricted_sources, but the reader is of the "
                            "owner boundary 'hr', whose reads the extraction budget never charges") for n in rep.notes)


def test_bench_without_source_names_the_option_in_its_note(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    rep = _bench(kit, _bench_cfg(kit), sources=2)
    assert any(n.endswith("the budget's admissions are NOT in these figures; `--source board-memo` tags some of "
                          "the run's points with it (written by the owner boundary, read by another)")
               for n in rep.notes), rep.notes


@pytest.mark.parametrize("given, n, message", [
    (("a", "b", "c"), 2, "--source names 3 sources, more than the run's 2 .--sources.; pass --sources 3 or more"),
    (("a", "a"), 5, r"--source names \['a'\] more than once"),
    (("",), 5, "--source '': give a source value, a non-empty string"),
])
def test_bench_source_values_are_checked(given, n, message) -> None:
    from qdrant_guard.errors import BenchmarkError
    from qdrant_guard.overhead_setup import source_labels

    with pytest.raises(BenchmarkError, match=message):
        source_labels(given, n)
    assert source_labels(("doc1", "x"), 4) == ["doc1", "x", "doc0", "doc2"]


def test_the_bench_cli_takes_source(tmp_path: Path, capsys) -> None:
    kit = make_kit(tmp_path)
    pol = tmp_path / "policy.toml"
    pol.write_text(f"""signing_key = "{kit.guard_key_path}"
[collections.docs]
class = "PII"
owner = "hr"
readers = ["support"]
text_field = "text"
[collections.docs.intent]
enabled = false
[collections.docs.diversity]
max_source_coverage = 0.25
restricted_sources = ["board-memo"]
[boundaries.hr]
authority_keys = ["{kit.authority_pub['hr']}"]
[boundaries.support]
authority_keys = ["{kit.authority_pub['support']}"]
""")
    out = tmp_path / "b.json"
    assert cli.main(["bench", "--policy", str(pol), "--collection", "docs", "--throwaway-credentials", "--dim", "8",
                     "--points", "40", "--batch", "20", "--queries", "3", "--rounds", "1", "--sources", "2",
                     "--source", "board-memo", "--no-progress", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    notes = doc["notes"]
    assert any("('board-memo') is in restricted_sources" in n for n in notes), notes
    # The values, not only how many: a reader of the report can tell which source a budget charged.
    assert doc["sources"] == 2 and doc["source_names"] == ["board-memo", "doc0"]


# -- 3. the cap on learnt receipt parameter sets: a knob, and a refusal that names it ------------

def _lb(kit, **noise):
    from test_leftovers37 import _lb_clients

    base = {"mechanism": "gaussian", "epsilon": 1.0, "radius": 0.01, "delta": 1e-6, **noise}
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
                              "noise_on_write": True, "raw_in_boundary": False, "noise_queries": True,
                              "intent": {"enabled": False}, "diversity": {"enabled": False}, "noise": base}})
    return _lb_clients(kit, cfg)


def _fill(kit, owner, n_sets: int) -> None:
    from test_leftovers37 import _noised_point

    rng = np.random.default_rng(12)
    RawClient.upsert(owner, "pii", [_noised_point(kit, 1, rng)] + [
        _noised_point(kit, pid, rng, epsilon=0.5 + pid / 1000) for pid in range(2, 2 + n_sets)])


def test_a_refusal_for_receipts_beyond_the_cap_names_the_cause_the_knob_and_the_fix(tmp_path: Path) -> None:
    # Before: the 8 points of sets past the cap were reported as raw or weaker noise, which they
    # are not (reads release them), and nothing named the cap or a way to raise it.
    kit = make_kit(tmp_path)
    owner, bob = _lb(kit)
    _fill(kit, owner, 40)
    with pytest.raises(GuardRefusal) as err:
        bob.query_points("pii", query=1, limit=5)
    msg = str(err.value)
    assert "still holds 8 point(s)" in msg
    assert ("8 of those point(s) were counted unchecked: their receipts state stronger noise in parameter sets "
            "(epsilon, delta, radius, dim) beyond the 32 besides the policy's own that the guard holds to their "
            "own calibration per collection (noise.max_receipt_param_sets = 32)") in msg
    assert "raise noise.max_receipt_param_sets of collection 'pii' above 32" in msg
    assert "re-written through the guard" in msg
    assert err.value.details["beyond_param_cap"] == 8 and err.value.details["max_receipt_param_sets"] == 32
    assert err.value.details["unreceipted_points"] == 8


def test_raising_the_knob_lets_the_query_run_and_zero_knows_only_the_policys_own_set(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    owner, bob = _lb(kit, max_receipt_param_sets=40)
    _fill(kit, owner, 40)
    assert len(bob.query_points("pii", query=1, limit=5).points) == 5
    (tmp_path / "zero").mkdir()
    kit = make_kit(tmp_path / "zero")
    owner, bob = _lb(kit, max_receipt_param_sets=0)
    _fill(kit, owner, 1)
    with pytest.raises(GuardRefusal) as err:
        bob.query_points("pii", query=1, limit=5)
    assert "still holds 1 point(s)" in str(err.value) and err.value.details["beyond_param_cap"] == 1
    assert "noise.max_receipt_param_sets = 0" in str(err.value)


def test_a_refusal_without_the_cap_reached_says_nothing_of_it(tmp_path: Path) -> None:
    from test_leftovers37 import _noised_point

    kit = make_kit(tmp_path)
    owner, bob = _lb(kit)
    rng = np.random.default_rng(3)
    RawClient.upsert(owner, "pii", [_noised_point(kit, 1, rng), _noised_point(kit, 2, rng, scale_x=0.5)])
    with pytest.raises(GuardRefusal) as err:
        bob.query_points("pii", query=1, limit=5)
    assert "still holds 1 point(s)" in str(err.value) and "max_receipt_param_sets" not in str(err.value)
    assert "beyond_param_cap" not in err.value.details


@pytest.mark.parametrize("bad", [-1, 1025, "32"])
def test_max_receipt_param_sets_is_a_bounded_documented_int(bad) -> None:
    from qdrant_guard.errors import ConfigError
    from qdrant_guard.policy import config_from_dict

    with pytest.raises(ConfigError):
        config_from_dict({"collections": {"kb": {"noise": {"max_receipt_param_sets": bad}}}}, source="t")
    root = Path(__file__).resolve().parent.parent
    assert "`collections.NAME.noise.max_receipt_param_sets`" in (root / "docs/policy.md").read_text()
    assert "\nmax_receipt_param_sets = 32 " in (root / "docs/policy.example.toml").read_text()
