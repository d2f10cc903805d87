"""Mutation pass 31 (docs/security-testing.md): tests that kill the survivors of `calibrate` and of
`UtilityRecord.from_json`, `frontier`, `signed_bytes` and `to_json`, which no earlier pass mutated.
Real local-mode Qdrant (guardkit's staging store), real Ed25519 keys; nothing mocked."""
from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest

from qdrant_guard import errors
from qdrant_guard.errors import GuardArgumentTypeError, GuardArgumentValueError
from qdrant_guard.keys import generate_keypair, key_id
from qdrant_guard.utility import (
    UtilityCalibrationError,
    UtilityRecord,
    calibrate,
    query_sample_digest,
    verify_utility_record,
)

_BASE = dict(k=10, radius=0.01, epsilons=(2.0, 8.0), threshold=0.5, progress=False, seed=1)


@pytest.fixture(scope="module")
def store():
    """Collection ``staging``: 300 float32 unit vectors of dim 32 around 30 seeded centres, compared
    by Euclid distance, and 40 queries near the first 40.

    Not Cosine (guardkit's staging store): local mode renormalises a Cosine collection's stored
    vectors in the last bits over its first searches (what scroll returns changes from call to
    call), and keyed noise of another vector is other noise, so the drops pinned below would
    depend on the order the tests ran in. Euclid vectors are stored as given."""
    from qdrant_client import QdrantClient as RawClient
    from qdrant_client.http import models

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(30, 32))
    x = centres[rng.integers(0, 30, 300)] + 0.35 * rng.normal(size=(300, 32))
    docs = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    raw = RawClient(":memory:")
    raw.create_collection("staging", vectors_config=models.VectorParams(size=32, distance=models.Distance.EUCLID))
    raw.upsert("staging", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(docs)])
    queries = (docs[:40] + 0.05 * np.random.default_rng(9).normal(size=(40, 32))).astype(np.float32).tolist()
    yield raw, docs, queries
    raw.close()


@pytest.fixture(scope="module")
def signed(store):
    raw, _, queries = store
    sk, pk = generate_keypair()
    return calibrate(raw, "staging", queries, signer=sk, **_BASE), pk


# --------------------------------------------------------------------------- calibrate's arguments

def _flat(texts: list[str]) -> np.ndarray:
    """An embedder that returns one flat row of every text's coordinates, not a row per text."""
    return np.zeros(len(texts) * 32, dtype=np.float32)


_REFUSED = [
    ({"collection": ""}, GuardArgumentTypeError, "argument 'collection' must be a non-empty str"),
    ({"collection": 3}, GuardArgumentTypeError, "argument 'collection' must be a non-empty str"),
    ({"mechanism": "laplace"}, GuardArgumentValueError, "mechanism must be 'gaussian' or 'laplace_l2', got 'laplace'"),
    ({"metric": "mrr"}, GuardArgumentValueError, "metric must be one of ('recall', 'ndcg', 'overlap'), got 'mrr'"),
    ({"metric": "ndcg"}, GuardArgumentValueError, "metric='ndcg' needs qrels"),
    ({"k": True}, GuardArgumentValueError, "argument 'k' must be an int >= 1, got True"),
    ({"k": 0}, GuardArgumentValueError, "argument 'k' must be an int >= 1, got 0"),
    ({"k": 10.0}, GuardArgumentValueError, "argument 'k' must be an int >= 1, got 10.0"),
    ({"allow_small_collection": 1}, GuardArgumentTypeError, "'allow_small_collection' must be a bool, not int"),
    ({"allow_few_queries": "yes"}, GuardArgumentTypeError, "'allow_few_queries' must be a bool, not str"),
    ({"min_queries": 0}, GuardArgumentValueError, "'min_queries' must be an int >= 1, got 0"),
    ({"min_queries": True}, GuardArgumentValueError, "'min_queries' must be an int >= 1, got True"),
    ({"min_queries": 20.0}, GuardArgumentValueError, "'min_queries' must be an int >= 1, got 20.0"),
    ({"delta": True}, GuardArgumentTypeError, "argument 'delta' must be a number, not bool"),
    ({"delta": "1e-6"}, GuardArgumentTypeError, "argument 'delta' must be a number, not str"),
    ({"delta": 0.0}, GuardArgumentValueError, "gaussian needs 1e-300 <= delta < 1, got delta=0.0"),
    ({"delta": 1e-301}, GuardArgumentValueError, "gaussian needs 1e-300 <= delta < 1, got delta=1e-301"),
    ({"delta": 1}, GuardArgumentValueError, "gaussian needs 1e-300 <= delta < 1, got delta=1"),
    ({"delta": 1.5}, GuardArgumentValueError, "gaussian needs 1e-300 <= delta < 1, got delta=1.5"),
    ({"threshold": True}, GuardArgumentValueError, "threshold must be a number in [0, 1), got True"),
    ({"threshold": "0.05"}, GuardArgumentValueError, "threshold must be a number in [0, 1), got '0.05'"),
    ({"threshold": -0.01}, GuardArgumentValueError, "threshold must be a number in [0, 1), got -0.01"),
    ({"threshold": 1}, GuardArgumentValueError, "threshold must be a number in [0, 1), got 1"),
    ({"threshold": 1.5}, GuardArgumentValueError, "threshold must be a number in [0, 1), got 1.5"),
    ({"epsilons": "124"}, GuardArgumentTypeError, "'epsilons' must be a sequence of numbers such as (0.5, 1.0, 2.0), not str"),
    ({"epsilons": b"1"}, GuardArgumentTypeError, "'epsilons' must be a sequence of numbers such as (0.5, 1.0, 2.0), not bytes"),
    ({"epsilons": 2.0}, GuardArgumentTypeError, "'epsilons' must be a sequence of numbers such as (0.5, 1.0, 2.0), not float"),
    ({"epsilons": (2.0, True)}, GuardArgumentTypeError, "'epsilons' holds a bool; give numbers"),
    ({"epsilons": (2.0, "8")}, GuardArgumentTypeError, "'epsilons' holds a str; give numbers"),
    ({"epsilons": (2.0, 0.0)}, GuardArgumentValueError, "'epsilons[]' must be a finite number > 0, got 0.0"),
    ({"epsilons": (2.0, float("inf"))}, GuardArgumentValueError, "'epsilons[]' must be a finite number > 0, got inf"),
    ({"epsilons": ()}, GuardArgumentValueError, "epsilons is empty; pass at least one candidate epsilon"),
    ({"sample_limit": "5"}, GuardArgumentTypeError, "'sample_limit' must be an int or None, not str"),
    ({"sample_limit": True}, GuardArgumentTypeError, "'sample_limit' must be an int or None, not bool"),
    ({"seed": 1.5}, GuardArgumentTypeError, "'seed' must be an int or None, not float"),
    ({"queries": []}, GuardArgumentValueError, "queries is empty; pass query vectors or texts"),
    ({"qrels": [[0]] * 40}, GuardArgumentTypeError, "qrels must be a mapping query index -> relevant ids, not list"),
    ({"sample_limit": 0}, GuardArgumentValueError, "sample_limit must be >= 1, got 0"),
    ({"sample_limit": -3}, GuardArgumentValueError, "sample_limit must be >= 1, got -3"),
    ({"queries": ["refund policy"] * 40}, GuardArgumentValueError, "queries are texts: pass embedder="),
    ({"queries": ["refund policy"] + [[0.1] * 32] * 39}, GuardArgumentTypeError, "queries mixes texts and vectors"),
    ({"queries": ["a"] * 40, "embedder": _flat}, GuardArgumentValueError, "query vectors must form a finite 2-D array"),
    ({"queries": [[float("nan")] * 32] * 40}, GuardArgumentValueError, "query vectors must form a finite 2-D array"),
    ({"queries": [[0.1] * 16] * 40}, GuardArgumentValueError, "query dimension 16 does not match collection dimension 32"),
    ({"qrels": {}}, GuardArgumentValueError, "no query has relevance labels in qrels; cannot measure 'recall'"),
    ({"qrels": {i: [99999] for i in range(40)}}, GuardArgumentValueError,
     "clean recall@10 is 0 on collection 'staging': no relevant id in qrels is among the clean results"),
    ({"k": 300}, GuardArgumentValueError, "collection 'staging' holds 300 point(s), no more than k=300"),
]


@pytest.mark.parametrize("kw, error, words", _REFUSED, ids=[str(i) for i in range(len(_REFUSED))])
def test_every_calibrate_argument_refusal_names_the_argument(store, kw, error, words):
    # Each refusal's test and raise: deleting the raise (or `or` as `and`) let the bad value on,
    # to a refusal by another check with other words, a numpy or qdrant-client error, or a record
    # signed on nothing (no labels, a clean metric of 0, a collection of exactly k points).
    raw, _, queries = store
    args = {**_BASE, "collection": "staging", "queries": queries, **kw}
    with pytest.raises(error) as ei:
        calibrate(raw, **args)
    assert words in str(ei.value)


@pytest.mark.parametrize("kw", [
    {"k": 1, "epsilons": (8.0,), "threshold": 0.9},  # k >= 1: 1 is the least
    {"min_queries": 1},
    {"delta": 1e-300},  # the least delta the range takes
    {"threshold": 0},  # a drop of exactly 0 is a threshold one may ask for
    {"sample_limit": 1, "allow_few_queries": True},
    {"k": 299},  # one point more than k is measured
    {"epsilons": [8.0, 2.0, 8]},  # any iterable; sorted, duplicates measured once
])
def test_the_least_values_calibrate_takes_are_taken(store, kw):
    # Killed: `k < 1`, `min_queries < 1`, `sample_limit < 1` as `<= 1` or `< 2`, `1e-300 <= delta`
    # as `<`, `0 <= threshold` as `<`; k one below the point count is no small collection.
    raw, _, queries = store
    try:
        rec = calibrate(raw, "staging", queries, **{**_BASE, **kw})
    except UtilityCalibrationError:  # measured; only the threshold was not met
        return
    if "sample_limit" in kw:
        assert rec.n_queries == 1
    if isinstance(kw.get("epsilons"), list):
        assert [lv["epsilon"] for lv in rec.measured] == [2.0, 8.0]


def test_laplace_ignores_delta_and_records_none(store):
    # delta is a Gaussian parameter: laplace_l2 takes any value and records 0.0. Killed:
    # `mechanism == "gaussian"` as `!=` (laplace's delta checked, refused) and the record's
    # `mechanism == "laplace_l2"` as `!=` (the delta recorded for laplace, 0.0 for gaussian).
    raw, _, queries = store
    rec = calibrate(raw, "staging", queries, mechanism="laplace_l2", delta=5, **{**_BASE, "epsilons": (64.0,),
                                                                                "threshold": 0.9})
    assert rec.mechanism == "laplace_l2" and rec.delta == 0.0
    rec = calibrate(raw, "staging", queries, delta=1e-5, **_BASE)
    assert rec.delta == 1e-5


def test_a_progress_bar_is_drawn_unless_turned_off(store, capsys):
    # Killed: `progress=True` as the default made False (a long calibration said nothing).
    raw, _, queries = store
    args = {key: v for key, v in _BASE.items() if key != "progress"}
    calibrate(raw, "staging", queries, **args)
    assert "calibrate" in capsys.readouterr().err
    calibrate(raw, "staging", queries, progress=False, **args)
    assert "calibrate" not in capsys.readouterr().err


def test_a_small_collection_is_refused_by_default_and_names_its_vector():
    # Killed: `allow_small_collection=False` as True by default, and the named vector's message
    # (`using` negated). A named vector's collection of exactly k points is refused as such.
    from qdrant_client import QdrantClient as RawClient
    from qdrant_client.http import models

    raw = RawClient(":memory:")
    raw.create_collection("named", vectors_config={"text": models.VectorParams(size=8, distance=models.Distance.COSINE)})
    rng = np.random.default_rng(5)
    raw.upsert("named", [models.PointStruct(id=i, vector={"text": rng.normal(size=8).tolist()}) for i in range(10)])
    queries = rng.normal(size=(20, 8)).tolist()
    with pytest.raises(GuardArgumentValueError,
                       match=r"vector 'text' of collection 'named' holds 10 point\(s\), no more than k=10"):
        calibrate(raw, "named", queries, k=10, radius=0.01, epsilons=(8.0,), threshold=0.9, progress=False, seed=1)
    rec = calibrate(raw, "named", queries, k=10, radius=0.01, epsilons=(8.0,), threshold=0.9, progress=False, seed=1,
                    allow_small_collection=True)
    assert rec.n_documents == 10 and rec.small_collection_refusal("u.json") is not None
    raw.close()


def test_a_sample_is_distinct_queries_in_their_order(store):
    # sample_limit 39 of 40: the record's digest is that of the 40 queries less one. Killed:
    # `replace=False` as True (a query sampled twice, measured twice, digested twice).
    raw, _, queries = store
    rec = calibrate(raw, "staging", queries, sample_limit=39, **{**_BASE, "seed": 4})
    assert rec.n_queries == 39
    assert rec.query_sample_digest in {query_sample_digest(queries[:i] + queries[i + 1:]) for i in range(40)}
    # All of them (sample_limit == len): every query, once.
    rec = calibrate(raw, "staging", queries, sample_limit=40, **_BASE)
    assert rec.query_sample_digest == query_sample_digest(queries)


def test_known_item_mode_is_qrels_mode_with_each_querys_clean_top_1(store):
    # The known item of a query is its clean top-1 (not its second or last hit). Killed: `r[0]`
    # as `r[1]` or `r[-1]` (recall then measured against another point than the docstring says).
    raw, _, queries = store
    top1 = {i: [raw.query_points("staging", query=q, limit=1).points[0].id] for i, q in enumerate(queries)}
    args = {**_BASE, "epsilons": (0.2, 0.5), "threshold": 0.9}
    known = calibrate(raw, "staging", queries, **args)
    labelled = calibrate(raw, "staging", queries, qrels=top1, **args)
    assert known.mode == "known_item" and labelled.mode == "qrels"
    assert [lv["recall"] for lv in known.measured] == [lv["recall"] for lv in labelled.measured]
    assert any(lv["recall"] < 1.0 for lv in known.measured)  # the noise moved some known item


# --------------------------------------------------------------------------- which level is chosen

# The store above, metric overlap@10, seed 1: the measured drops per epsilon (keyed noise under the
# seed: the same in every run) are 1.0 0.105, 1.25 0.0875, 1.75 0.04, 2.0 0.0425, 2.75 0.0225, 4.0
# 0.0225. At a threshold of 0.041, 1.75 passes and 2.0, with less noise, fails.
_LADDER = dict(k=10, radius=0.01, metric="overlap", threshold=0.041, progress=False, seed=1)


def test_a_passing_level_with_a_failing_weaker_one_is_never_chosen(store):
    # epsilon 1.75 drops 0.04 (within 0.041), but 2.0, with less noise, drops 0.0425: the guard
    # refuses 1.75 (level_refusal), so calibrate must not choose it; 2.75 is the strongest level
    # with no failing weaker one. Killed: the worst-from-here loop run from len-2 (the last level
    # never looked at), stopping at 1 or -2, stepping by 2, and the feasibility `and` as `or`.
    raw, _, queries = store
    sk, pk = generate_keypair()
    before = int(time.time() * 1000)
    rec = calibrate(raw, "staging", queries, epsilons=(1.0, 1.75, 2.0, 2.75, 4.0), signer=sk, **_LADDER)
    after = int(time.time() * 1000)
    assert [round(lv["drop"], 4) for lv in rec.measured] == [0.105, 0.04, 0.0425, 0.0225, 0.0225]
    assert [lv["feasible"] for lv in rec.measured] == [False, False, False, True, True]
    assert rec.chosen_level == 3 and rec.epsilon == 2.75 and rec.scale == rec.measured[3]["scale"]
    noise = dict(mechanism="gaussian", radius=0.01, delta=1e-6, clip_norm=1.0, max_drop=0.041)
    assert rec.level_refusal(epsilon=1.75, **noise) is not None
    assert rec.level_refusal(epsilon=2.75, **noise) is None
    # What the record says, field by field (each a mutant's target), and who signed it.
    assert (rec.collection, rec.mechanism, rec.delta, rec.radius, rec.clip_norm, rec.k, rec.threshold) == (
        "staging", "gaussian", 1e-6, 0.01, 1.0, 10, 0.041)
    assert (rec.metric, rec.mode, rec.epsilon_ceiling, rec.n_queries, rec.n_measured_queries) == (
        "overlap", "known_item", None, 40, 40)
    assert (rec.n_documents, rec.dim, rec.vector_name, rec.distance, rec.embedding_model) == (
        300, 32, "", "Euclid", None)
    assert before <= rec.created_at <= after  # milliseconds (not 1001 or 999 a second)
    assert all("overlap" in lv and "recall" in lv for lv in rec.measured)
    assert rec.signer_key_id == key_id(pk) and verify_utility_record(rec, [pk])
    assert not verify_utility_record(rec, [generate_keypair()[1]])


def test_the_ceiling_takes_a_level_at_it_and_is_recorded(store):
    # Killed: `lv["epsilon"] <= epsilon_ceiling` as `<` (a level exactly at the ceiling refused)
    # and the record's `epsilon_ceiling is None` reversed; clip_norm None recorded as None.
    raw, _, queries = store
    rec = calibrate(raw, "staging", queries, epsilons=(1.0, 2.75, 4.0), epsilon_ceiling=2.75, clip_norm=None,
                    **_LADDER)
    assert rec.epsilon == 2.75 and rec.epsilon_ceiling == 2.75 and rec.clip_norm is None
    assert [lv["feasible"] for lv in rec.measured][1:] == [True, False]


def _refusal(store, **kw) -> UtilityCalibrationError:
    raw, _, queries = store
    with pytest.raises(UtilityCalibrationError) as ei:
        calibrate(raw, "staging", queries, **{**_LADDER, **kw})
    return ei.value


def test_a_weakest_level_that_fails_refuses_the_whole_ladder(store):
    # 1.75 passes, 2.0 (the weakest measured) fails: no level is shown safe. Killed: the loop from
    # len-2 (worst_from[-1] left at 0.0: 2.0 chosen). The advice: the smallest worst drop, rounded
    # up, and weaker noise than any measured.
    err = _refusal(store, epsilons=(1.75, 2.0))
    assert "no noise level keeps the overlap@10 drop <= 0.041 (at it and at every weaker level measured) on " \
           "collection 'staging'; relax a constraint: raise threshold to >= 0.0425 (smallest drop under the " \
           "ceiling with no weaker level dropping more); or add larger epsilons to the ladder (weaker noise). " \
           "Measured frontier (gaussian, radius 0.01, clean overlap 1.0000):" in str(err)
    assert [round(lv["drop"], 4) for lv in err.frontier] == [0.04, 0.0425]
    assert [lv["feasible"] for lv in err.frontier] == [False, False]


@pytest.mark.parametrize("ceiling, hints", [
    # Under the ceiling only 1.0 (worst 0.105); 4.0 meets the threshold above it.
    (2.0, "raise threshold to >= 0.1050 (smallest drop under the ceiling with no weaker level dropping more); "
          "or raise epsilon_ceiling to >= 4.0 (smallest epsilon within the threshold)."),
    # Every level above the ceiling: no threshold advice; 4.0 meets the threshold.
    (0.5, "raise epsilon_ceiling to >= 4.0 (smallest epsilon within the threshold); or add epsilons <= 0.5 to "
          "the ladder (every level measured is above the ceiling)."),
])
def test_the_ceiling_refusal_says_which_constraint_to_relax(store, ceiling, hints):
    # Killed: the `under` list's `<=` as `<` or its None test reversed, each hint's append deleted
    # or its test negated, the ceiling's clause in the first sentence.
    msg = str(_refusal(store, epsilons=(1.0, 4.0), epsilon_ceiling=ceiling))
    assert f"(at it and at every weaker level measured) with epsilon <= {ceiling:g} on collection 'staging'; " \
           f"relax a constraint: {hints} Measured frontier" in msg


@pytest.mark.parametrize("ceiling, hints", [
    (8.0, "raise threshold to >= 0.0875 (smallest drop under the ceiling with no weaker level dropping more); "
          "or add larger epsilons to the ladder (weaker noise, up to the ceiling 8)."),
    # The ceiling is the largest epsilon: larger ones need the ceiling raised too; 1.25 counts as
    # under it (its worst 0.0875, not 1.0's 0.105).
    (1.25, "raise threshold to >= 0.0875 (smallest drop under the ceiling with no weaker level dropping more); "
           "or add epsilons above 1.25 to the ladder and raise epsilon_ceiling to them (weaker noise than any "
           "level measured)."),
    # Every level above the ceiling and none within the threshold: two ways to add levels.
    (0.5, "add epsilons above 1.25 to the ladder and raise epsilon_ceiling to them (weaker noise than any level "
          "measured); or add epsilons <= 0.5 to the ladder (every level measured is above the ceiling)."),
])
def test_a_ladder_that_stops_short_says_to_add_weaker_levels(store, ceiling, hints):
    # Killed: `eps_list[-1] < epsilon_ceiling` as `<=` (or its index moved), the `under` list's
    # `<=` as `<`, the ceiling named in the advice.
    msg = str(_refusal(store, epsilons=(1.0, 1.25), epsilon_ceiling=ceiling))
    assert f"relax a constraint: {hints}" in msg


def test_no_advice_to_raise_the_threshold_to_1(store):
    # k=1 at epsilon 0.001: every known item lost, a drop of exactly 1.0; a threshold must be
    # below 1, so that advice could not be followed. Killed: `float(best) < 1.0` as `<=` or negated.
    msg = str(_refusal(store, k=1, metric="recall", epsilons=(0.001,), threshold=0.9))
    assert "relax a constraint: add larger epsilons to the ladder (weaker noise). Measured" in msg
    assert "raise threshold" not in msg


def test_no_advice_to_raise_the_threshold_to_1(store):
    # k=1 at epsilon 0.001: every known item lost, a drop of exactly 1.0; a threshold must be
    # below 1, so that advice could not be followed. Killed: `float(best) < 1.0` as `<=` or negated.
    msg = str(_refusal(store, k=1, metric="recall", epsilons=(0.001,), threshold=0.9))
    assert "relax a constraint: add larger epsilons to the ladder (weaker noise). Measured" in msg
    assert "raise threshold" not in msg


# --------------------------------------------------------------------------- the record: signed bytes, JSON

def test_every_field_but_the_signature_is_signed(signed):
    # A field left out of the signed bytes could be edited under a valid signature.
    rec, pk = signed
    assert verify_utility_record(rec, [pk])
    body = rec.body()
    assert set(body) == {f.name for f in dataclasses.fields(rec)} - {"signature"}
    for name, value in body.items():
        if isinstance(value, bool) or value is None:
            edited = "x" if name in ("embedding_model", "distance", "vector_name") else 1.5
        elif isinstance(value, (int, float)):
            edited = value + 1
        elif isinstance(value, str):
            edited = value + "x"
        elif isinstance(value, dict):
            edited = {**value, "recall": value["recall"] - 0.5}
        else:
            edited = [{**value[0], "drop": value[0]["drop"] + 0.5}] + value[1:]
        assert not verify_utility_record(dataclasses.replace(rec, **{name: edited}), [pk]), name
    assert UtilityRecord.from_json(rec.to_json()) == rec
    assert json.loads(rec.to_json())["signature"] == rec.signature


def test_the_frontier_line_shows_each_level_pass_or_fail():
    # Killed: the pass/FAIL test negated and the line returned as None (every level refusal ends
    # with it: a user saw "None" where the measured levels should be).
    rec = UtilityRecord(
        collection="c", mechanism="gaussian", epsilon=2.0, delta=1e-6, radius=0.01, clip_norm=1.0, scale=0.1,
        k=10, threshold=0.05, metric="recall", mode="known_item", epsilon_ceiling=None, clean={"recall": 1.0},
        measured=[{"epsilon": 1.0, "drop": 0.1}, {"epsilon": 2.0, "drop": 0.05}], chosen_level=1,
        query_sample_digest="0" * 64, n_queries=40, n_documents=300, created_at=0)
    line = ("measured recall@10 drops (gaussian, radius 0.01, delta 1e-06, clip_norm 1.0; threshold 0.05): "
            "epsilon 1.0 drop 0.1000 FAIL, epsilon 2.0 drop 0.0500 pass")
    assert rec.frontier(0.05) == line
    refusal = rec.level_refusal(mechanism="gaussian", epsilon=1.0, radius=0.01, delta=1e-6, clip_norm=1.0,
                                max_drop=0.05)
    assert refusal.endswith(line)


# Which version brought each field in.
_SINCE = {"dim": 2, "vector_name": 3, "distance": 4, "embedding_model": 5, "n_measured_queries": 6}


def _as_version(rec: UtilityRecord, version: int) -> dict:
    """``rec``'s JSON object as a record of ``version``: the fields of later versions left out."""
    data = json.loads(rec.to_json())
    for name, since in _SINCE.items():
        if version < since:
            del data[name]
    data["version"] = version
    return data


def _read(data: dict) -> UtilityRecord:
    return UtilityRecord.from_json(json.dumps(data))


def _refused(data: dict, words: str) -> None:
    with pytest.raises(GuardArgumentValueError) as ei:
        _read(data)
    assert words in str(ei.value)


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_a_well_formed_record_of_each_version_is_read(signed, version):
    # Killed: any of the six versions dropped from the readable ones, and each version test moved
    # by one (a field of its own version refused as a later one's, or required a version early).
    rec, _ = signed
    data = _as_version(rec, version)
    assert _read(data).version == version
    if version >= 5:
        data["embedding_model"] = "sentence-transformers/all-MiniLM-L6-v2"
        assert _read(data).embedding_model == data["embedding_model"]


@pytest.mark.parametrize("field", sorted(_SINCE))
def test_a_field_in_a_record_older_than_it_is_refused(signed, field):
    # A record edited to an older version keeps the field that version did not carry. Killed:
    # each `version < N and value is not None` with its `and` as `or`, its `is not None`
    # reversed, N one lower, or its raise deleted.
    rec, _ = signed
    data = _as_version(rec, _SINCE[field] - 1)
    data[field] = {"dim": 32, "vector_name": "", "distance": "Euclid", "embedding_model": "m",
                   "n_measured_queries": 40}[field]
    _refused(data, f"utility record of version {_SINCE[field] - 1} has a")
    _refused(data, f"'{field}' field, which")


@pytest.mark.parametrize("field", ["dim", "vector_name", "distance", "n_measured_queries"])
def test_a_field_missing_from_the_version_that_brought_it_is_refused(signed, field):
    # Killed: each `version >= N` as `> N` or N one higher, its `and` as `or`, its raise deleted.
    rec, _ = signed
    data = _as_version(rec, _SINCE[field])
    del data[field]
    _refused(data, f"utility record of version {_SINCE[field]} needs '{field}'")


@pytest.mark.parametrize("field, value, ok", [
    ("dim", 1, True), ("dim", 0, False), ("dim", -1, False), ("dim", True, False), ("dim", "32", False),
    ("vector_name", "text", True), ("vector_name", 3, False), ("vector_name", None, False),
    ("distance", "Cosine", True), ("distance", "Dot", True), ("distance", "Manhattan", True),
    ("distance", "cosine", False), ("distance", None, False),
    ("embedding_model", None, True), ("embedding_model", "m", True), ("embedding_model", "", False),
    ("embedding_model", "  ", False), ("embedding_model", 3, False),
    ("n_measured_queries", 1, True), ("n_measured_queries", 40, True), ("n_measured_queries", 0, False),
    ("n_measured_queries", 41, False), ("n_measured_queries", "5", False), ("n_measured_queries", 5.0, False),
    ("n_measured_queries", True, False), ("n_measured_queries", None, False),
])
def test_each_versioned_fields_values(signed, field, value, ok):
    # Killed: `dim < 1` as `<= 1` or `< 2`, `or` as `and` in the dim and model tests,
    # `distance not in` reversed, `1 <= measured <= searched` as `<` either side or from 2, and the
    # type tests of the measured count (a string or float reached utility.min_queries).
    rec, _ = signed
    data = _as_version(rec, 6)
    data[field] = value
    if ok:
        assert getattr(_read(data), field) == value
    else:
        _refused(data, f"utility record of version 6 needs '{field}'")


def test_the_measured_count_needs_an_integer_count_of_queries(signed):
    # Killed: `type(searched) is int` reversed or the type tests' `and` as `or`.
    rec, _ = signed
    data = _as_version(rec, 6)
    data.update(n_queries="40", n_measured_queries=1)
    _refused(data, "needs 'n_measured_queries', the number of queries its metric averaged over, as an integer "
                   "from 1 to its n_queries ('40')")


@pytest.mark.parametrize("created, ok", [
    (-(2 ** 63), True), (2 ** 63 - 1, True), (0, True),
    (2 ** 63, False), (-(2 ** 63) - 1, False), (True, False), (1.7e12, False), ("1700000000000", False), (None, False),
])
def test_created_at_is_an_int64_of_milliseconds(signed, created, ok):
    # Killed: the int64 bounds moved (2 as 1 or 3, 63 as 62 or 64, `<=` as `<`, `<` as `<=`),
    # the `or`s as `and`, the raise deleted.
    rec, _ = signed
    data = _as_version(rec, 6)
    data["created_at"] = created
    if ok:
        assert _read(data).created_at == created
    else:
        _refused(data, "utility record needs 'created_at', when it was calibrated, as integer milliseconds")


@pytest.mark.parametrize("field, short, long", [
    ("created_at", "x" * 38, "x" * 39),
    ("embedding_model", ["x" * 36], ["x" * 37]),
    ("n_measured_queries", "x" * 38, "x" * 39),
    ("signer_key_id", ["x" * 36], ["x" * 37]),
])
def test_a_bad_value_is_shown_whole_up_to_40_characters(signed, field, short, long):
    # Killed: each `len(repr(...)) <= 40` as `< 40` or 39/41 or negated, the cut at 39 or 41.
    rec, _ = signed
    data = _as_version(rec, 6)
    data[field] = short
    assert len(repr(short)) == 40
    with pytest.raises(GuardArgumentValueError) as ei:
        _read(data)
    assert f" {short!r}" in str(ei.value) and f"{short!r}..." not in str(ei.value)
    data[field] = long
    _refused(data, f" {repr(long)[:40]}...")
    with pytest.raises(GuardArgumentValueError) as ei:
        _read(data)
    assert repr(long) not in str(ei.value)


@pytest.mark.parametrize("text, words", [
    ("{", "utility record is not valid JSON"),
    ("", "utility record is not valid JSON"),
    ("[]", "utility record must be a JSON object"),
    ("null", "utility record must be a JSON object"),
    ('"record"', "utility record must be a JSON object"),
])
def test_text_that_is_no_json_object_is_refused_as_such(text, words):
    # Killed: each raise deleted (a JSONDecodeError, or a TypeError on the list or null).
    with pytest.raises(GuardArgumentValueError, match=words):
        UtilityRecord.from_json(text)


@pytest.mark.parametrize("missing", ["collection", "created_at", "measured", "n_documents"])
def test_a_record_lacking_a_required_field_is_refused_naming_it(signed, missing):
    # Killed: the required set's `default_factory is MISSING` reversed (nothing required) and the
    # raise deleted (a TypeError from the constructor, or a KeyError at created_at).
    rec, _ = signed
    data = _as_version(rec, 6)
    del data[missing]
    _refused(data, f"utility record lacks fields [{missing!r}]")


@pytest.mark.parametrize("version", [0, 7, True, "6", None, 6.0, 1.0])
def test_a_version_this_reader_does_not_know_is_refused(signed, version):
    # Killed: version 0 or 7 let in (the tuple's 1 as 0, 6 as 7), `bool` no longer refused; 6.0 and
    # 1.0 were read as 6 and 1 and then refused as tampered (the signature covers `6.0`).
    rec, _ = signed
    data = _as_version(rec, 6)
    data["version"] = version
    _refused(data, f"utility record has version {version!r}; this qdrant_guard reads versions 1 to 6")


@pytest.mark.parametrize("field, value", [
    ("signer_key_id", ["k"]), ("signer_key_id", {"id": "k"}), ("signer_key_id", 7),
    ("signature", ["AAAA"]), ("signature", 7),
])
def test_a_signer_or_signature_that_is_no_string_is_refused_at_reading(signed, field, value):
    # Found by this pass: from_json took any JSON value here, and a list or object as the key id
    # ended verify_utility_record (and the guard's revoked-key look-up before it) in a TypeError
    # ("unhashable type") instead of a refusal.
    rec, _ = signed
    data = _as_version(rec, 6)
    data[field] = value
    _refused(data, f"utility record has {field!r} {value!r}, which is neither a string nor null (unsigned)")
    data[field] = None
    assert not verify_utility_record(_read(data), [signed[1]])  # unsigned: read, never verified


def test_a_record_file_with_a_list_for_its_key_id_is_a_config_error_at_the_first_write(tmp_path):
    # The guard's path: the first write under the record. Before the fix: TypeError.
    from guardkit import make_kit, models, staging_record

    from qdrant_guard import ConfigError, QdrantClient

    kit = make_kit(tmp_path)
    path = tmp_path / "utility.json"
    rec, docs = staging_record(kit, path)
    data = json.loads(path.read_text())
    data["signer_key_id"] = [rec.signer_key_id]
    path.write_text(json.dumps(data))
    cfg = kit.config(
        {"pii": {"class": "PII", "owner": "hr", "noise_on_write": True,
                 "noise": {"epsilon": rec.epsilon, "radius": 0.01}, "utility": {"record": str(path)}}},
        epsilon_ceiling={"PII": 5.0},
    )
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=32, distance=models.Distance.COSINE))
    with pytest.raises(ConfigError, match=r"is not a record written by `qdrant-guard calibrate`: utility record has "
                                          r"'signer_key_id' \['"):
        owner.upsert("pii", [models.PointStruct(id=1, vector=docs[0].tolist())])
