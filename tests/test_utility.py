"""The retrieval utility guard: calibration on real local-mode Qdrant with synthetic clusters."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from qdrant_client import QdrantClient, models

from qdrant_guard.errors import QdrantGuardError
from qdrant_guard.keys import generate_keypair, key_id
from qdrant_guard.utility import (
    UtilityCalibrationError,
    UtilityRecord,
    calibrate,
    retrieval_metrics,
    run_calibrate_cli,
    verify_utility_record,
)

DIM = 48
LADDER = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)
RADIUS = 0.05


def _clustered(n_clusters: int = 12, per: int = 25, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, DIM))
    docs = np.repeat(centres, per, axis=0) + 0.35 * rng.normal(size=(n_clusters * per, DIM))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    labels = np.repeat(np.arange(n_clusters), per)
    return docs.astype(np.float32), labels


@pytest.fixture(scope="module")
def corpus():
    docs, labels = _clustered()
    client = QdrantClient(":memory:")
    client.create_collection(
        "kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE)
    )
    client.upsert(
        "kb",
        points=[models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(docs)],
        wait=True,
    )
    rng = np.random.default_rng(11)
    targets = rng.choice(len(docs), size=60, replace=False)
    queries = docs[targets] + 0.15 * rng.normal(size=(len(targets), DIM)).astype(np.float32)
    yield client, docs, labels, targets, queries
    client.close()


def _run(client, queries, **kw):
    kw.setdefault("radius", RADIUS)
    kw.setdefault("epsilons", LADDER)
    kw.setdefault("seed", 3)
    kw.setdefault("progress", False)
    return calibrate(client, "kb", list(queries), **kw)


def test_chosen_level_is_the_strongest_within_threshold(corpus):
    client, _, _, _, queries = corpus
    record = _run(client, queries, threshold=0.05)
    levels = record.measured
    assert [lv["epsilon"] for lv in levels] == sorted(LADDER)
    chosen = levels[record.chosen_level]
    assert chosen["drop"] <= 0.05
    assert record.epsilon == chosen["epsilon"] and record.scale == chosen["scale"]
    # The ladder must bracket the answer, otherwise this test could not fail.
    assert record.chosen_level > 0
    assert all(lv["drop"] > 0.05 for lv in levels[: record.chosen_level])
    # Noise grows as epsilon shrinks.
    scales = [lv["scale"] for lv in levels]
    assert scales == sorted(scales, reverse=True)
    assert record.mode == "known_item" and record.clean["recall"] == 1.0
    assert record.n_queries == len(queries) and record.n_documents == 300
    assert record.drop_for(chosen["epsilon"], "gaussian") == chosen["drop"]
    assert record.drop_for(chosen["epsilon"], "laplace_l2") is None
    assert record.drop_for(12345.0, "gaussian") is None


def test_looser_threshold_never_picks_weaker_noise(corpus):
    client, _, _, _, queries = corpus
    strict = _run(client, queries, threshold=0.02)
    loose = _run(client, queries, threshold=0.4)
    assert loose.epsilon <= strict.epsilon
    assert loose.epsilon < strict.epsilon  # the ladder spans both answers


def test_seed_makes_the_measurement_reproducible(corpus):
    client, _, _, _, queries = corpus
    a = _run(client, queries, threshold=0.05)
    b = _run(client, queries, threshold=0.05)
    assert a.measured == b.measured
    c = _run(client, queries, threshold=0.05, seed=4)
    assert c.measured != a.measured


def test_infeasible_threshold_raises_with_frontier(corpus):
    client, _, _, _, queries = corpus
    with pytest.raises(UtilityCalibrationError) as info:
        _run(client, queries, threshold=0.0, epsilons=(0.03, 0.1), epsilon_ceiling=0.1)
    err = info.value
    assert isinstance(err, QdrantGuardError)
    msg = str(err)
    # Both levels lose all recall: no threshold below 1 admits one, and the ladder reaches the
    # ceiling, so the fix is weaker levels with a higher ceiling (test_review26.py).
    assert "raise threshold" not in msg
    assert "add epsilons above 0.1 to the ladder and raise epsilon_ceiling" in msg
    assert "0.03" in msg and "0.1" in msg and "sigma" in msg
    assert len(err.frontier) == 2 and all(lv["drop"] > 0 for lv in err.frontier)


def test_ceiling_excludes_levels_and_names_the_fix(corpus):
    client, _, _, _, queries = corpus
    with pytest.raises(UtilityCalibrationError, match="raise epsilon_ceiling to >= "):
        _run(client, queries, threshold=0.05, epsilon_ceiling=0.05)


def test_record_signature_verifies_and_tampering_fails(corpus):
    client, _, _, _, queries = corpus
    sk, pk = generate_keypair()
    record = _run(client, queries, threshold=0.05, signer=sk)
    assert record.signer_key_id == key_id(pk)
    assert verify_utility_record(record, [pk])
    assert verify_utility_record(record, {key_id(pk): pk})
    assert len(record.digest) == 64

    again = UtilityRecord.from_json(record.to_json())
    assert again == record and again.digest == record.digest
    assert verify_utility_record(again, [pk])

    other_sk, other_pk = generate_keypair()
    assert not verify_utility_record(record, [other_pk])
    weaker = dataclasses.replace(record, threshold=0.5)
    assert not verify_utility_record(weaker, [pk])
    assert weaker.digest != record.digest
    levels = json.loads(record.to_json())
    levels["measured"][0]["drop"] = 0.0
    assert not verify_utility_record(UtilityRecord.from_json(json.dumps(levels)), [pk])
    assert not verify_utility_record(dataclasses.replace(record, signature=None), [pk])
    assert not verify_utility_record(dataclasses.replace(record, signature="!!notbase64"), [pk])


def test_query_digest_covers_the_queries_not_the_documents(corpus):
    client, _, _, _, queries = corpus
    a = _run(client, queries, threshold=0.05)
    b = _run(client, queries[:-1], threshold=0.05)
    assert a.query_sample_digest != b.query_sample_digest
    assert a.query_sample_digest == _run(client, queries, threshold=0.05).query_sample_digest


def test_qrels_mode_measures_recall_and_ndcg(corpus):
    client, _, labels, targets, queries = corpus
    # Graded: the source document is highly relevant, its cluster mates somewhat.
    qrels = {}
    for qi, t in enumerate(targets):
        grades = {int(j): 1 for j in np.flatnonzero(labels == labels[t])}
        grades[int(t)] = 3
        qrels[qi] = grades
    record = _run(client, queries, qrels=qrels, threshold=0.1, metric="ndcg")
    assert record.mode == "qrels" and record.metric == "ndcg"
    assert 0 < record.clean["ndcg"] <= 1 and 0 < record.clean["recall"] <= 1
    for lv in record.measured:
        assert {"recall", "ndcg", "overlap"} <= set(lv)
        assert lv["drop"] == lv["drops"]["ndcg"]
    assert record.measured[record.chosen_level]["drop"] <= 0.1
    # Binary qrels (a set) are accepted as well.
    binary = {qi: {int(t)} for qi, t in enumerate(targets)}
    rec2 = _run(client, queries, qrels=binary, threshold=0.1)
    assert rec2.mode == "qrels" and rec2.clean["recall"] > 0.5


def test_sample_limit_measures_fewer_queries(corpus):
    client, _, _, _, queries = corpus
    record = _run(client, queries, threshold=0.2, sample_limit=20)
    assert record.n_queries == 20


def test_text_queries_use_the_embedder(corpus):
    client, docs, _, targets, _ = corpus
    texts = [f"doc {int(t)}" for t in targets[:10]]
    lookup = {f"doc {int(t)}": docs[t] for t in targets[:10]}
    record = _run(
        client, texts, threshold=0.5, embedder=lambda batch: np.stack([lookup[t] for t in batch]),
        allow_few_queries=True,
    )
    assert record.clean["recall"] == 1.0 and record.n_queries == 10
    with pytest.raises(ValueError, match="embedder"):
        _run(client, texts, threshold=0.5)


def test_retrieval_metrics_by_hand():
    results = [[1, 2, 3], [4, 5, 6]]
    m = retrieval_metrics(results, k=3, qrels={0: {2, 9}, 1: {7}}, reference=[[1, 2, 3], [4, 8, 9]])
    assert m["recall"] == pytest.approx((0.5 + 0.0) / 2)
    assert m["overlap"] == pytest.approx((1.0 + 1 / 3) / 2)
    # nDCG of query 0: relevant at rank 2 -> (1/log2 3) / (1 + 1/log2 3); query 1: 0.
    import math

    assert m["ndcg"] == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)) / 2)
    km = retrieval_metrics(results, k=2, known_items=[2, 6])
    assert km["recall"] == 0.5


@pytest.mark.parametrize(
    "kwargs, exc, text",
    [
        ({"mechanism": "uniform"}, ValueError, "mechanism"),
        ({"threshold": 1.5}, ValueError, "threshold"),
        ({"radius": -1.0}, ValueError, "radius"),
        ({"radius": "big"}, TypeError, "radius"),
        ({"epsilons": ()}, ValueError, "epsilons"),
        ({"k": 0}, ValueError, "'k'"),
        ({"metric": "ndcg"}, ValueError, "qrels"),
        ({"delta": 0.0}, ValueError, "delta"),
    ],
)
def test_bad_arguments(corpus, kwargs, exc, text):
    client, _, _, _, queries = corpus
    with pytest.raises(exc, match=text):
        _run(client, queries[:3], **kwargs)


def test_bad_collection_and_dimension(corpus):
    client, _, _, _, queries = corpus
    with pytest.raises(ValueError, match="dimension"):
        _run(client, [q[:10] for q in queries[:3]])
    with pytest.raises(ValueError, match="empty"):
        _run(client, [])


def test_cli_writes_a_signed_record(tmp_path, corpus):
    from qdrant_guard.keys import private_key_to_pem

    _, docs, _, targets, queries = corpus
    store = tmp_path / "qdrant"
    local = QdrantClient(path=str(store))
    local.create_collection(
        "kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE)
    )
    local.upsert("kb", points=[models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(docs)])
    local.close()
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps(q.tolist()) + "\n" for q in queries[:30]))
    sk, pk = generate_keypair()
    keyfile = tmp_path / "key.pem"
    keyfile.write_bytes(private_key_to_pem(sk))
    keyfile.chmod(0o600)
    out = tmp_path / "record.json"
    args = type("Args", (), dict(
        path=str(store), url=None, collection="kb", queries=str(qfile), qrels=None,
        threshold=0.05, out=str(out), key=str(keyfile), radius=RADIUS,
        epsilons=",".join(str(e) for e in LADDER), seed=1, no_progress=True,
    ))()
    assert run_calibrate_cli(args) == 0
    record = UtilityRecord.from_json(out.read_text())
    assert verify_utility_record(record, [pk])
    args.threshold = 0.0
    args.epsilons = "0.03"
    assert run_calibrate_cli(args) == 2


def test_calibrate_cli_query_text_follows_the_guard_text_path():
    from qdrant_guard.utility import query_text_transform

    text = "refund order 48213 for Alice, SSN 123-45-6789"
    assert query_text_transform("raw")(text) == text
    assert query_text_transform("redacted")(text) == "refund order 48213 for Alice, SSN [SSN]"
    assert query_text_transform("generalized")(text) == "refund order [NUMBER] for [NAME], [CODE] [SSN]"
    with pytest.raises(ValueError, match="must be one of"):
        query_text_transform("clean")
