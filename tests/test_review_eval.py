"""Review of the retrieval utility guard and the evaluation's metrics: each figure checked on tiny
inputs against an independent plain-Python computation, and calibrate() against the guard."""
from __future__ import annotations

import math

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient
from qdrant_client import models as qmodels

from guardkit import make_kit
from qdrant_guard import GuardRefusal, QdrantClient, keys
from qdrant_guard.utility import UtilityCalibrationError, calibrate

# A small collection whose measured drops go up and down with epsilon (few queries, k=5): the
# frontier is not monotone, so "the first level within the threshold" can sit below a weaker
# level that fails.
BUMPY_DIM = 8
BUMPY_LADDER = (4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 12.0, 14.0, 16.0, 20.0, 25.0, 30.0, 40.0)
BUMPY_RADIUS = 0.1


@pytest.fixture(scope="module")
def bumpy():
    rng = np.random.default_rng(0)
    docs = rng.normal(size=(60, BUMPY_DIM))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    raw = RawClient(":memory:")
    raw.create_collection("c", vectors_config=qmodels.VectorParams(size=BUMPY_DIM, distance=qmodels.Distance.COSINE))
    raw.upsert("c", points=[qmodels.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(docs)])
    queries = docs[:20] + rng.normal(scale=0.05, size=(20, BUMPY_DIM))
    yield raw, docs, list(queries)
    raw.close()


def _bumpy_record(raw, queries, **kw):
    kw.setdefault("threshold", 0.1)
    return calibrate(raw, "c", queries, k=5, radius=BUMPY_RADIUS, epsilons=BUMPY_LADDER, seed=0,
                     progress=False, metric="overlap", **kw)


def test_calibrate_never_chooses_a_level_its_own_record_refuses(bumpy):
    raw, _, queries = bumpy
    rec = _bumpy_record(raw, queries)
    drops = [lv["drop"] for lv in rec.measured]
    # The frontier really is bumpy: some level within the threshold has a weaker one failing.
    assert any(d <= 0.1 and any(e > 0.1 for e in drops[i + 1:]) for i, d in enumerate(drops)), drops
    why = rec.level_refusal(mechanism=rec.mechanism, epsilon=rec.epsilon, radius=rec.radius,
                            delta=rec.delta, clip_norm=rec.clip_norm, max_drop=rec.threshold)
    assert why is None, why
    # Still the strongest such level: every stronger one is refused by the same rule.
    for lv in rec.measured[: rec.chosen_level]:
        assert rec.level_refusal(mechanism=rec.mechanism, epsilon=lv["epsilon"], radius=rec.radius,
                                 delta=rec.delta, clip_norm=rec.clip_norm, max_drop=rec.threshold)


def test_the_guard_accepts_writes_at_the_calibrated_level(bumpy, tmp_path):
    raw, docs, queries = bumpy
    kit = make_kit(tmp_path)
    rec = _bumpy_record(raw, queries, signer=keys.load_private_key(kit.guard_key_path))
    path = tmp_path / "utility.json"
    path.write_text(rec.to_json())
    cfg = kit.config(
        {"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                 "noise": {"epsilon": rec.epsilon, "radius": BUMPY_RADIUS},
                 "utility": {"record": str(path), "max_recall_drop": rec.threshold}}},
        epsilon_ceiling={"PII": 100.0},
    )
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=qmodels.VectorParams(size=BUMPY_DIM, distance=qmodels.Distance.COSINE))
    bob = owner.with_principal(kit.principal("bob", "support"))
    bob.upsert("pii", [qmodels.PointStruct(id=1, vector=docs[0].tolist())])
    assert bob._origin.count("pii").count == 1


def test_each_hint_of_an_infeasible_calibration_is_enough_on_a_bumpy_frontier(bumpy):
    raw, _, queries = bumpy
    ceiling = 14.0
    with pytest.raises(UtilityCalibrationError) as ei:
        _bumpy_record(raw, queries, epsilon_ceiling=ceiling)
    msg = str(ei.value)
    import re

    threshold = float(re.search(r"raise threshold to >= ([0-9.]+)", msg).group(1))
    new_ceiling = float(re.search(r"raise epsilon_ceiling to >= ([0-9.]+)", msg).group(1))
    drops = {lv["epsilon"]: lv["drop"] for lv in ei.value.frontier}
    # Independently: the smallest threshold under which some level <= ceiling has itself and every
    # weaker level within it, and the smallest epsilon whose suffix is within 0.1.
    want_t = min(max(d for e, d in drops.items() if e >= e0) for e0 in drops if e0 <= ceiling)
    want_c = min(e0 for e0 in drops if all(d <= 0.1 for e, d in drops.items() if e >= e0))
    assert threshold == pytest.approx(math.ceil(want_t * 10_000) / 10_000)
    assert new_ceiling == want_c
    assert _bumpy_record(raw, queries, epsilon_ceiling=ceiling, threshold=threshold).epsilon <= ceiling
    assert _bumpy_record(raw, queries, epsilon_ceiling=new_ceiling).epsilon == want_c


def _tiny(ids):
    raw = RawClient(":memory:")
    raw.create_collection("t", vectors_config=qmodels.VectorParams(size=4, distance=qmodels.Distance.COSINE))
    vecs = np.eye(4)[: len(ids)]
    raw.upsert("t", points=[qmodels.PointStruct(id=i, vector=v.tolist()) for i, v in zip(ids, vecs)])
    return raw


def test_qrels_name_uuid_points_in_any_form_qdrant_accepts():
    simple = "550E8400E29B41D4A716446655440000"  # Qdrant stores it as 550e8400-e29b-...
    raw = _tiny([simple, 5, 6])
    try:
        rec = calibrate(raw, "t", [[1.0, 0.0, 0.0, 0.1]], qrels={0: [simple]}, k=1, radius=0.01,
                        epsilons=(1000.0,), progress=False, seed=0)
    finally:
        raw.close()
    assert rec.clean["recall"] == 1.0 and rec.clean["ndcg"] == 1.0


def test_a_clean_metric_of_zero_is_an_error_not_a_pass_at_the_strongest_noise():
    raw = _tiny([5, 6, 7])
    try:
        with pytest.raises(ValueError, match="clean recall@1 is 0"):
            calibrate(raw, "t", [[1.0, 0.0, 0.0, 0.1]], qrels={0: [99]}, k=1, radius=0.01,
                      progress=False, seed=0)
    finally:
        raw.close()


@pytest.mark.parametrize("content", [b"not json at all", b"[1, 2]", b'{"collection": "x"}',
                                     b'{"bogus": 1}', b"\xff\xfe\x00"])
def test_an_unreadable_record_file_is_a_config_error_naming_it(tmp_path, content):
    from qdrant_guard import ConfigError

    kit = make_kit(tmp_path)
    path = tmp_path / "utility.json"
    path.write_bytes(content)
    cfg = kit.config(
        {"pii": {"class": "PII", "owner": "hr", "noise_on_write": True,
                 "noise": {"epsilon": 1.0, "radius": 0.01}, "utility": {"record": str(path)}}},
    )
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=qmodels.VectorParams(size=4, distance=qmodels.Distance.COSINE))
    with pytest.raises(ConfigError, match="utility record") as ei:
        owner.upsert("pii", [qmodels.PointStruct(id=1, vector=[1.0, 0.0, 0.0, 0.0])])
    assert str(path) in str(ei.value)
    assert RawClient.count(owner, "pii").count == 0


def test_calibrate_cli_can_measure_a_policy_without_clipping_as_the_guard_advises(bumpy, tmp_path):
    import argparse
    import json
    import re

    from qdrant_guard.utility import UtilityRecord, add_calibrate_arguments, run_calibrate_cli

    _, docs, queries = bumpy
    kit = make_kit(tmp_path)
    # A record calibrated with the default clipping, for a policy that does not clip.
    rec = _bumpy_record(bumpy[0], queries, signer=keys.load_private_key(kit.guard_key_path))
    path = tmp_path / "utility.json"
    path.write_text(rec.to_json())
    cfg = kit.config(
        {"pii": {"class": "PII", "owner": "hr", "noise_on_write": True,
                 "noise": {"epsilon": rec.epsilon, "radius": BUMPY_RADIUS, "clip_norm": None},
                 "utility": {"record": str(path), "max_recall_drop": rec.threshold}}},
        epsilon_ceiling={"PII": 100.0},
    )
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=qmodels.VectorParams(size=BUMPY_DIM, distance=qmodels.Distance.COSINE))
    with pytest.raises(GuardRefusal) as ei:
        owner.upsert("pii", [qmodels.PointStruct(id=1, vector=docs[0].tolist())])
    advice = re.search(r"re-run `qdrant-guard calibrate` for this policy \(([^)]*)\)", str(ei.value)).group(1)
    # Follow the advice with the CLI on a copy of the staging store.
    store = tmp_path / "store"
    local = RawClient(path=str(store))
    local.create_collection("c", vectors_config=qmodels.VectorParams(size=BUMPY_DIM, distance=qmodels.Distance.COSINE))
    local.upsert("c", points=[qmodels.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(docs)])
    local.close()
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps([float(x) for x in q]) + "\n" for q in queries))
    out = tmp_path / "new.json"
    parser = argparse.ArgumentParser()
    add_calibrate_arguments(parser)
    flags = advice.replace("--epsilons including", "--epsilons").split()
    args = parser.parse_args(["--path", str(store), "--collection", "c", "--queries", str(qfile),
                              "--out", str(out), "--key", str(kit.guard_key_path), "--threshold", "0.5",
                              "--no-progress", "--seed", "0", "--k", "5", *flags])
    assert run_calibrate_cli(args) == 0
    new = UtilityRecord.from_json(out.read_text())
    assert new.clip_norm is None
    assert new.parameter_mismatch(mechanism="gaussian", radius=BUMPY_RADIUS, delta=1e-6, clip_norm=None) is None


def test_calibrate_cli_refuses_a_query_listed_twice_in_qrels(bumpy, tmp_path):
    import argparse
    import json

    from qdrant_guard.utility import add_calibrate_arguments, run_calibrate_cli

    _, docs, queries = bumpy
    store = tmp_path / "store"
    local = RawClient(path=str(store))
    local.create_collection("c", vectors_config=qmodels.VectorParams(size=BUMPY_DIM, distance=qmodels.Distance.COSINE))
    local.upsert("c", points=[qmodels.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(docs)])
    local.close()
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps([float(x) for x in q]) + "\n" for q in queries[:2]))
    qrels = tmp_path / "qrels.jsonl"
    # One row per relevant document (the TREC habit): the second row used to replace the first.
    qrels.write_text('{"query": 0, "relevant": [0]}\n{"query": 1, "relevant": [1]}\n{"query": 0, "relevant": [7]}\n')
    parser = argparse.ArgumentParser()
    add_calibrate_arguments(parser)
    args = parser.parse_args(["--path", str(store), "--collection", "c", "--queries", str(qfile),
                              "--qrels", str(qrels), "--out", str(tmp_path / "r.json"), "--no-progress",
                              "--seed", "0", "--epsilons", "1000"])
    with pytest.raises(ValueError, match=r"query 0 .*row 3"):
        run_calibrate_cli(args)
