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
                 "utility": {"record": str(path), "max_recall_drop": rec.threshold,
                             "metric": rec.metric, "k": rec.k}}},
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
                        epsilons=(1000.0,), progress=False, seed=0, allow_few_queries=True)
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


def _staging_files(tmp_path, docs, queries):
    """An on-disk copy of the staging store as collection "c", and its queries as a JSONL file."""
    import json

    store = tmp_path / "store"
    local = RawClient(path=str(store))
    local.create_collection("c", vectors_config=qmodels.VectorParams(size=BUMPY_DIM, distance=qmodels.Distance.COSINE))
    local.upsert("c", points=[qmodels.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(docs)])
    local.close()
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps([float(x) for x in q]) + "\n" for q in queries))
    return store, qfile


def test_calibrate_cli_can_measure_a_policy_without_clipping_as_the_guard_advises(bumpy, tmp_path):
    import argparse
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
                 "utility": {"record": str(path), "max_recall_drop": rec.threshold,
                             "metric": rec.metric, "k": rec.k}}},
        epsilon_ceiling={"PII": 100.0},
    )
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=qmodels.VectorParams(size=BUMPY_DIM, distance=qmodels.Distance.COSINE))
    with pytest.raises(GuardRefusal) as ei:
        owner.upsert("pii", [qmodels.PointStruct(id=1, vector=docs[0].tolist())])
    advice = re.search(r"re-run `qdrant-guard calibrate` for this policy \(([^)]*)\)", str(ei.value)).group(1)
    # Follow the advice with the CLI on a copy of the staging store.
    store, qfile = _staging_files(tmp_path, docs, queries)
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

    from qdrant_guard.utility import add_calibrate_arguments, run_calibrate_cli

    _, docs, queries = bumpy
    store, qfile = _staging_files(tmp_path, docs, queries[:2])
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


# --------------------------------------------------------------------------- signed record


def test_altering_any_field_of_a_signed_record_fails_verification(bumpy):
    import dataclasses

    from qdrant_guard.utility import verify_utility_record

    raw, _, queries = bumpy
    sk, pk = keys.generate_keypair()
    rec = _bumpy_record(raw, queries, signer=sk, threshold=0.3)
    assert verify_utility_record(rec, [pk])
    measured = [dict(lv) for lv in rec.measured]
    measured[0]["drop"] += 0.01
    changes = {
        "collection": "other", "mechanism": "laplace_l2", "epsilon": rec.epsilon * 2,
        "delta": 1e-5, "radius": 0.2, "clip_norm": None, "scale": rec.scale / 2, "k": 10,
        "threshold": 0.9, "metric": "recall", "mode": "qrels", "epsilon_ceiling": 1.0,
        "clean": {**rec.clean, "recall": 0.5}, "measured": measured, "chosen_level": rec.chosen_level + 1,
        "query_sample_digest": "0" * 64, "n_queries": rec.n_queries + 1,
        "n_documents": rec.n_documents - 1, "created_at": rec.created_at + 1, "version": 1,
        "dim": rec.dim + 1, "vector_name": "other", "distance": "Dot", "embedding_model": "other-model",
        "n_measured_queries": rec.measured_queries - 1,
    }
    names = {f.name for f in dataclasses.fields(rec)} - {"signature", "signer_key_id"}
    assert set(changes) == names
    for name, value in changes.items():
        bad = dataclasses.replace(rec, **{name: value})
        assert not verify_utility_record(bad, [pk]), name
    assert not verify_utility_record(dataclasses.replace(rec, signer_key_id="ed25519:" + "0" * 64), [pk])


# --------------------------------------------------------------------------- metrics by hand


def _plain_ndcg(ranked, grades, k):
    dcg = sum(grades.get(p, 0) / math.log2(i + 2) for i, p in enumerate(ranked[:k]))
    ideal = sorted(grades.values(), reverse=True)[:k]
    return dcg / sum(g / math.log2(i + 2) for i, g in enumerate(ideal))


def test_retrieval_metrics_match_a_plain_computation():
    from qdrant_guard.utility import retrieval_metrics

    results = [[3, 1, 4, 5, 9], [2, 6, 5, 3, 5], [7, 8, 9, 10, 11]]
    qrels = {0: {1: 3, 9: 1, 42: 2}, 1: {6, 3}, 2: {1, 2, 3, 4, 5, 6, 7}}
    reference = [[1, 3, 4, 0, 0], [6, 2, 7, 8, 1], [7, 8, 9, 10, 11]]
    got = retrieval_metrics(results, k=3, qrels=qrels, reference=reference)
    # By hand, k = 3. q0 retrieves 3,1,4: one of three relevant; DCG 3/log2(3), ideal 3,2,1.
    # q1 retrieves 2,6,5: one of two; DCG 1/log2(3), ideal 1,1. q2: 7 of 7 relevant, one retrieved.
    recall = (1 / 3 + 1 / 2 + 1 / 7) / 3
    ndcg0 = (3 / math.log2(3)) / (3 + 2 / math.log2(3) + 1 / 2)
    ndcg1 = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    ndcg2 = 1.0 / (1 + 1 / math.log2(3) + 1 / 2)
    assert got["recall"] == pytest.approx(recall)
    assert got["ndcg"] == pytest.approx((ndcg0 + ndcg1 + ndcg2) / 3)
    assert got["ndcg"] == pytest.approx(np.mean([
        _plain_ndcg(r, g if isinstance(g, dict) else dict.fromkeys(g, 1), 3)
        for r, g in zip(results, qrels.values())]))
    # Overlap of the top-3 with the clean top-3: {3,1,4}&{1,3,4}=3, {2,6,5}&{6,2,7}=2, 3.
    assert got["overlap"] == pytest.approx((3 + 2 + 3) / 9)
    # Known-item recall: the item anywhere in the top-k.
    assert retrieval_metrics(results, k=2, known_items=[1, 5, 7])["recall"] == pytest.approx(2 / 3)


def _plain_micro_f1(scores, truth, k):
    tp = fp = fn = 0
    for s, t in zip(scores.tolist(), truth.tolist()):
        top = set(sorted(range(len(s)), key=lambda j: -s[j])[:k])
        pos = {j for j, v in enumerate(t) if v}
        tp += len(top & pos)
        fp += len(top - pos)
        fn += len(pos - top)
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def test_micro_f1_pools_counts_over_texts_and_the_prior_gets_the_same_k_rule():
    from qdrant_guard.evaluation import attacks

    rng = np.random.default_rng(5)
    truth = (rng.random((40, 12)) < 0.25).astype(float)
    scores = truth * 0.6 + rng.random((40, 12))  # distinct floats: no ties
    for k in (1, 2, 3, 5, 12):
        assert attacks.micro_f1_topk(scores, truth, k) == pytest.approx(_plain_micro_f1(scores, truth, k))
    # Micro, not macro: one text with many labels weighs more than one with a single label.
    t2 = np.array([[1, 1, 1, 1], [1, 0, 0, 0]], dtype=float)
    s2 = np.array([[4, 3, 2, 1], [0, 1, 2, 3]], dtype=float)
    assert attacks.micro_f1_topk(s2, t2, 4) == pytest.approx(2 * 5 / (2 * 5 + 3 + 0))

    # bow_inversion: the prior is the training label frequency, and its k is chosen as the probe's.
    train_x = rng.normal(size=(50, 6))
    train_y = (rng.random((50, 12)) < 0.3).astype(float)
    test_x = rng.normal(size=(40, 6))
    vocab = attacks.BowVocab(tuple(f"w{i}" for i in range(12)), np.arange(12) < 5, np.arange(12) >= 5)
    out = attacks.bow_inversion(train_x, train_y, test_x, truth, vocab)
    freq = train_y.mean(axis=0)
    for name, mask in (("identifier", vocab.identifier), ("topic", vocab.topic)):
        prior = np.tile(freq[mask] + np.arange(mask.sum()) * 1e-9, (40, 1))  # break ties stably
        best = max((_plain_micro_f1(prior, truth[:, mask], k), -k) for k in range(1, mask.sum() + 1))
        assert out[name]["prior_f1"] == pytest.approx(best[0])
        assert out[name]["advantage"] == pytest.approx(out[name]["f1"] - out[name]["prior_f1"])


def test_bootstrap_interval_resamples_texts_and_takes_percentiles():
    from qdrant_guard.evaluation import attacks

    rng = np.random.default_rng(9)
    truth = (rng.random((30, 8)) < 0.3).astype(float)
    a = truth + rng.normal(scale=0.8, size=truth.shape)
    p = np.tile(truth.mean(axis=0), (30, 1)) + np.arange(8) * 1e-9
    lo, hi = attacks.advantage_interval(a, p, truth, 2, 3, resamples=200, seed=4)
    idx = np.random.default_rng(4).integers(0, 30, size=(200, 30))
    diffs = sorted(_plain_micro_f1(a[i], truth[i], 2) - _plain_micro_f1(p[i], truth[i], 3) for i in idx)
    want = np.percentile(diffs, [2.5, 97.5])
    assert (lo, hi) == pytest.approx(tuple(want))
    full = _plain_micro_f1(a, truth, 2) - _plain_micro_f1(p, truth, 3)
    assert lo <= full <= hi


def test_candidate_ranking_and_reidentification_by_hand():
    from qdrant_guard.evaluation import attacks

    cand = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # Row j is released when candidate j is the truth. Row 0 points at candidate 0 (first), row 1
    # at candidate 2 (truth second), row 2 ties candidates 0 and 2 exactly (ties count against).
    released = np.array([[1.0, 0.1], [0.8, 1.0], [1.0, 0.0]])
    released[2] = [1.0, 1.0]
    out = attacks.candidate_ranking(cand, released)
    sims = [[np.dot(r, c) / np.linalg.norm(r) / np.linalg.norm(c) for c in cand] for r in released]
    ranks = []
    for j, row in enumerate(sims):
        better = sum(s > row[j] for s in row)
        ties = sum(s == row[j] for s in row) - 1
        ranks.append((better, ties))
    assert out["top1"] == pytest.approx(np.mean([b == 0 and t == 0 for b, t in ranks]))
    assert out["mean_rank_pct"] == pytest.approx(np.mean([(b + 0.5 * t) / 2 for b, t in ranks]))
    assert out["chance"] == pytest.approx(1 / 3)
    reid = attacks.reidentify(cand, np.array([[1.0, 0.1], [0.9, 1.0], [1.0, 1.0]]))
    assert reid == {"top1": pytest.approx(2 / 3), "top10": 1.0, "chance": pytest.approx(1 / 3)}


@pytest.mark.parametrize("sigma", [-0.02, float("nan"), float("inf")])
def test_eval_levels_refuse_a_sigma_that_is_not_a_noise_level(sigma):
    from qdrant_guard.evaluation.sweep import _policy_defaults, make_levels

    # Before: -0.02 became a level labelled "sigma=-0.02" run at epsilon 1e4, nan one at 1e-4.
    with pytest.raises(ValueError, match=repr(sigma).replace("(", r"\(")):
        make_levels((0.0, sigma), _policy_defaults())


@pytest.mark.parametrize("levels", ["0,-0.02", "nan", "0,inf"])
def test_eval_cli_refuses_such_levels_before_embedding_anything(levels, capsys):
    from qdrant_guard.evaluation import run_eval_cli

    assert run_eval_cli(["--levels", levels, "--out", "/nonexistent/never-written", "--no-progress"]) == 2
    assert levels in capsys.readouterr().err


def test_calibrate_cli_without_query_text_embeds_queries_as_the_guard_does(tmp_path, monkeypatch):
    # A hand-built Namespace without query_text got "redacted" while the CLI's documented
    # default is "generalized" (what the guard embeds under the default policy).
    import argparse
    import json

    from qdrant_guard.evaluation import embed as eval_embed
    from qdrant_guard.hashing_embedder import HashingEmbedder
    from qdrant_guard.utility import run_calibrate_cli

    hashing = HashingEmbedder(32)
    seen: list[str] = []

    def encode(self, texts, **_):
        seen.extend(texts)
        return hashing(list(texts))

    monkeypatch.setattr(eval_embed.Embedder, "encode", encode)
    texts = [f"ticket {1000 + i} about TypeError number {i}" for i in range(12)]
    store = tmp_path / "store"
    local = RawClient(path=str(store))
    local.create_collection("c", vectors_config=qmodels.VectorParams(size=32, distance=qmodels.Distance.COSINE))
    local.upsert("c", points=[qmodels.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(hashing(texts))])
    local.close()
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps(t) + "\n" for t in texts[:4]))
    args = argparse.Namespace(path=str(store), url=None, collection="c", queries=str(qfile), qrels=None,
                              out=str(tmp_path / "r.json"), progress=False, no_progress=True, seed=0,
                              epsilons="1000", threshold=0.9, allow_few_queries=True)
    run_calibrate_cli(args)
    assert seen and all("[NUMBER]" in t and "1000" not in t for t in seen), seen
