"""Review 35: a utility record measured on a handful of queries vouched for its noise like any other
(branch h-minq).

One query's known-item recall@10 is 0 or 1, so a drop measured on one query (`calibrate
--sample-limit 1`) is a coin flip, yet calibrate signed it and the guard accepted it. Now calibrate
refuses fewer than ``min_queries`` (default 20) unless ``allow_few_queries``, and the guard refuses
a record whose ``n_queries`` is below ``utility.min_queries`` unless ``allow_small_records``. Each
test fails on the code before. Real local Qdrant, real calibrate, real Ed25519 keys; no mocks.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from guardkit import make_kit, models, staging_store
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import GuardRefusal, QdrantClient, cli, keys
from qdrant_guard.errors import ConfigError, GuardArgumentTypeError, GuardArgumentValueError
from qdrant_guard.utility import UtilityRecord, calibrate

_ARGS = dict(k=10, radius=0.01, epsilons=(0.5, 2.0, 8.0), threshold=0.05, progress=False, seed=1)


def test_calibrate_refuses_fewer_queries_than_min_queries_unless_allowed() -> None:
    raw, _, queries = staging_store(32)
    with pytest.raises(GuardArgumentValueError) as err:
        calibrate(raw, "staging", queries, sample_limit=1, **_ARGS)
    msg = str(err.value)
    assert "recall would be measured on 1 query (of 40 given), fewer than min_queries=20" in msg
    assert "nothing was measured or signed" in msg and "--sample-limit" in msg and "allow_few_queries=True" in msg
    with pytest.raises(GuardArgumentValueError, match="on 19 queries"):
        calibrate(raw, "staging", queries[:19], **_ARGS)
    assert calibrate(raw, "staging", queries[:20], **_ARGS).n_queries == 20
    assert calibrate(raw, "staging", queries, sample_limit=1, allow_few_queries=True, **_ARGS).n_queries == 1
    assert calibrate(raw, "staging", queries[:5], min_queries=5, **_ARGS).n_queries == 5
    with pytest.raises(GuardArgumentValueError, match="fewer than min_queries=30"):
        calibrate(raw, "staging", queries[:25], min_queries=30, **_ARGS)


def test_calibrate_counts_only_labelled_queries_for_recall_with_qrels() -> None:
    # retrieval_metrics averages labelled recall over the labelled queries only: 3 of 25 here.
    raw, _, queries = staging_store(32)
    qrels = {i: [i] for i in range(3)}
    with pytest.raises(GuardArgumentValueError, match="on 3 queries with relevance labels in qrels .of 25 given."):
        calibrate(raw, "staging", queries[:25], qrels=qrels, **_ARGS)
    full = {i: [i] for i in range(25)}
    assert calibrate(raw, "staging", queries[:25], qrels=full, **_ARGS).n_queries == 25


@pytest.mark.parametrize("bad,exc", [(0, GuardArgumentValueError), (True, GuardArgumentValueError),
                                     (2.5, GuardArgumentValueError)])
def test_min_queries_must_be_a_positive_int(bad, exc) -> None:
    raw, _, queries = staging_store(32)
    with pytest.raises(exc, match="'min_queries' must be an int >= 1"):
        calibrate(raw, "staging", queries, min_queries=bad, **_ARGS)
    with pytest.raises(GuardArgumentTypeError, match="allow_few_queries' must be a bool, not str"):
        calibrate(raw, "staging", queries, allow_few_queries="yes", **_ARGS)


# -- the guard -------------------------------------------------------------------------------------

def _few_record(kit, tmp: Path, n: int) -> tuple[Path, UtilityRecord, np.ndarray]:
    raw, docs, queries = staging_store(32)
    rec = calibrate(raw, "staging", queries, sample_limit=n, allow_few_queries=True,
                    signer=keys.load_private_key(kit.guard_key_path), **_ARGS)
    path = tmp / f"q{n}.json"
    path.write_text(rec.to_json())
    return path, rec, docs


def _write(kit, path: Path, rec: UtilityRecord, docs: np.ndarray, **utility) -> int:
    coll = {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False},
            "noise": {"epsilon": rec.epsilon, "radius": 0.01}, "utility": {"record": str(path), **utility}}
    cl = QdrantClient(":memory:", guard=kit.config({"docs": coll}, epsilon_ceiling={"PII": 10.0}),
                      principal=kit.principal("alice", "hr"))
    cl.create_collection("docs", vectors_config=models.VectorParams(size=32, distance=models.Distance.COSINE))
    cl.upsert("docs", [models.PointStruct(id=1, vector=docs[0].tolist())])
    return RawClient.count(cl, "docs").count


def test_the_guard_refuses_a_record_of_fewer_queries_than_min_queries(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    path, rec, docs = _few_record(kit, tmp_path, 1)
    with pytest.raises(GuardRefusal) as exc:
        _write(kit, path, rec, docs)
    assert exc.value.verdict == "UTILITY_DEGRADED"
    assert exc.value.details["reasons"]["1"].startswith("few_queries: ")
    msg = str(exc.value)
    assert f"utility record {str(path)!r} was calibrated on 1 query, fewer than utility.min_queries = 20" in msg
    assert "re-run `qdrant-guard calibrate` on at least 20 queries" in msg and "lower utility.min_queries" in msg
    # A test collection lowers the floor, or takes the one opt-in for test and demo records.
    assert _write(kit, path, rec, docs, min_queries=1) == 1
    assert _write(kit, path, rec, docs, allow_small_records=True) == 1
    assert _write(kit, path, rec, docs, enforce=False) == 1
    path, rec, docs = _few_record(kit, tmp_path, 20)
    assert _write(kit, path, rec, docs) == 1


def test_min_queries_is_a_documented_positive_int() -> None:
    from qdrant_guard import utility
    from qdrant_guard.policy import UtilityPolicy, config_from_dict

    assert UtilityPolicy().min_queries == utility.DEFAULT_MIN_QUERIES == 20
    for bad in (0, "20"):
        with pytest.raises(ConfigError):
            config_from_dict({"collections": {"kb": {"utility": {"min_queries": bad}}}}, source="t")
    root = Path(__file__).resolve().parent.parent
    assert "utility.min_queries`" in (root / "docs/policy.md").read_text()
    assert "\nmin_queries = 20 " in (root / "docs/policy.example.toml").read_text()


# -- the CLI ---------------------------------------------------------------------------------------

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


def test_the_cli_refuses_sample_limit_1_unless_allowed(tmp_path: Path, capsys) -> None:
    args = _cli_args(tmp_path)
    assert cli.main(args + ["--sample-limit", "1"]) == 2
    err = capsys.readouterr().err
    assert "measured on 1 query (of 30 given), fewer than min_queries=20" in err and "--allow-few-queries" in err
    assert not (tmp_path / "u.json").exists()
    assert cli.main(args + ["--sample-limit", "1", "--allow-few-queries"]) == 0
    assert UtilityRecord.from_json((tmp_path / "u.json").read_text()).n_queries == 1
    assert cli.main(args + ["--sample-limit", "5", "--min-queries", "5"]) == 0
    assert cli.main(args + ["--min-queries", "31"]) == 2
    assert "on 30 queries (of 30 given), fewer than min_queries=31" in capsys.readouterr().err


def _policy(kit, tmp: Path, extra: str = "") -> Path:
    pol = tmp / "policy.toml"
    pol.write_text(f"""signing_key = "{kit.guard_key_path}"
[collections.kb]
class = "PII"
owner = "hr"
[collections.kb.noise]
epsilon = 2.0
[collections.kb.utility]
metric = "overlap"
max_recall_drop = 0.9
{extra}
""")
    return pol


def test_calibrate_policy_takes_min_queries_and_exits_3_for_a_record_its_guard_refuses(tmp_path: Path, capsys) -> None:
    kit = make_kit(tmp_path)
    args = _cli_args(tmp_path) + ["--policy", str(_policy(kit, tmp_path, "min_queries = 25")),
                                  "--policy-collection", "kb"]
    assert cli.main(args + ["--sample-limit", "24"]) == 2
    assert "fewer than min_queries=25" in capsys.readouterr().err
    assert cli.main(args + ["--sample-limit", "25"]) == 0
    # A lower --min-queries than the policy's is a record its guard refuses; a higher one is a margin.
    assert cli.main(args + ["--min-queries", "10"]) == 2
    assert "--min-queries 10 disagrees" in capsys.readouterr().err
    assert cli.main(args + ["--min-queries", "30"]) == 0
    capsys.readouterr()
    # Signed anyway: kept, but exit 3, unless the policy takes test records.
    assert cli.main(args + ["--sample-limit", "3", "--allow-few-queries"]) == 3
    err = capsys.readouterr().err
    assert "so calibrate exits 3: few_queries:" in err and "calibrated on 3 queries" in err
    assert (tmp_path / "u.json").exists()
    args[args.index("--policy") + 1] = str(_policy(kit, tmp_path, "min_queries = 25\nallow_small_records = true"))
    assert cli.main(args + ["--sample-limit", "3", "--allow-few-queries"]) == 0
