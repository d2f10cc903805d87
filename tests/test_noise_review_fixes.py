"""Regressions from the noise/receipt/utility review (reproducers in the review's query_oracle.py,
utility_bypass.py, testonly_receipt.py, future_issued.py and calib_hint.py)."""
from __future__ import annotations

import dataclasses
import math
import re
import time

import numpy as np
import pytest
import qdrant_client

from guardkit import make_kit, models, staging_record
from qdrant_guard import GuardRefusal, QdrantClient, keys, noise
from qdrant_guard.noise_params import NoiseParams, guarantee_sentence
from qdrant_guard.receipts import (
    RECEIPT_KEY,
    ReceiptItem,
    ReceiptSigner,
    issue_receipt,
    issue_receipts_batch,
    receipts_for_payload,
    stored_form,
    stored_form_batch,
    verify_receipt,
)
from qdrant_guard.utility import UtilityCalibrationError, calibrate


def _unit(rng: np.random.Generator, dim: int) -> np.ndarray:
    v = rng.normal(size=dim)
    return v / np.linalg.norm(v)


# ----------------------------------------------------------------- 1. query noise has its own key
def test_a_query_equal_to_a_stored_clean_vector_does_not_get_its_stored_noise(tmp_path):
    dim = 128
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"],
                              "noise_queries": True, "noise": {"epsilon": 1.0, "radius": 0.01},
                              "diversity": {"enabled": False}, "intent": {"enabled": False}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE))
    bob = owner.with_principal(kit.principal("bob", "support"))
    rng = np.random.default_rng(5)
    x = _unit(rng, dim)
    bob.upsert("pii", [models.PointStruct(id=1, vector=x.tolist(), payload={"source": "a"})])

    # Before the fix the query got exactly the stored noise and scored 1.0 (an exact-match oracle).
    score = bob.query_points("pii", query=x.tolist(), limit=1).points[0].score
    assert score < 0.99, score
    # Repeated identical queries stay deterministic (keyed noise, so averaging gains nothing). The
    # noised query is compared exactly; the score only to float precision, since local mode's own
    # dot product can differ in the last bits from one call to the next (about 1 run in 20).
    assert bob.query_points("pii", query=x.tolist(), limit=1).points[0].score == pytest.approx(score, abs=1e-6)

    pol = bob.guard.policy("pii")
    noised_query = np.asarray(bob.guard.noise_query(pol, x.tolist()), dtype=np.float32)
    assert bob.guard.noise_query(pol, x.tolist()) == noised_query.tolist()
    doc_noise, _ = noise.privatize(x.astype(np.float32), mechanism="gaussian", epsilon=1.0, radius=0.01,
                                   delta=1e-6, clip_norm=1.0, key=bob.guard.noise_key)
    assert not np.array_equal(noised_query, doc_noise)


def test_query_noise_key_is_distinct_and_checked():
    key = b"k" * 32
    assert noise.query_noise_key(key) != key and len(noise.query_noise_key(key)) == 32
    assert noise.query_noise_key(key) == noise.query_noise_key(key)
    with pytest.raises(ValueError, match="at least 32 bytes"):
        noise.query_noise_key(b"short")


# ----------------------------------------------------------------- 2. utility guard bypasses
UDIM = 32


@pytest.fixture(scope="module")
def utility_setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("util_review")
    kit = make_kit(tmp)
    paths = {}
    for radius in (0.01, 0.0005):
        path = tmp / f"utility-{radius}.json"
        rec, docs = staging_record(kit, path, radius=radius, dim=UDIM)
        paths[radius] = (rec, path)
    rec = paths[0.01][0]
    # The frontier these tests rely on: 0.02 and 0.1 fail, 0.5 and 2.0 pass.
    assert [lv["drop"] > 0.05 for lv in rec.measured] == [True, True, False, False], rec.measured
    wsk, wpk = keys.generate_keypair()
    return kit, docs, paths, ReceiptSigner(wsk), wpk


def _utility_client(setup, epsilon, *, radius=0.01, record_radius=0.01, enforce=True, noise_on_write=True):
    kit, _docs, paths, _writer, wpk = setup
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"],
                              "noise_on_write": noise_on_write,
                              "noise": {"epsilon": epsilon, "radius": radius},
                              "utility": {"record": str(paths[record_radius][1]), "enforce": enforce}}},
                     epsilon_ceiling={"PII": 5.0}, receipts={"trusted_keys": [keys.public_key_to_str(wpk)]})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=UDIM, distance=models.Distance.COSINE))
    return owner.with_principal(kit.principal("bob", "support"))


def _receipted_point(setup, pid, **kw):
    _kit, docs, _paths, writer, _wpk = setup
    nv, params = noise.privatize(docs[pid:pid + 1].astype(np.float32), **kw)
    final = stored_form_batch(nv, distance="Cosine")
    r = issue_receipts_batch(writer, [ReceiptItem(params=params, vector=final[0], collection="pii", point_id=pid)])[0]
    return models.PointStruct(id=pid, vector=final[0].tolist(), payload={RECEIPT_KEY: receipts_for_payload({"": r})})


@pytest.mark.parametrize("epsilon", [0.05, 0.01])
def test_an_unmeasured_policy_level_without_a_passing_level_of_as_much_noise_is_refused(utility_setup, epsilon):
    # 0.05 lies between two failing levels; 0.01 is stronger noise than anything measured.
    bob = _utility_client(utility_setup, epsilon)
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [models.PointStruct(id=1, vector=utility_setup[1][1].tolist())])
    assert ei.value.verdict == "UTILITY_DEGRADED"
    assert "epsilon 0.02 drop" in ei.value.directive  # the measured frontier is shown
    assert bob._origin.count("pii").count == 0


@pytest.mark.parametrize("kw", [
    dict(mechanism="gaussian", epsilon=0.5, radius=0.25, delta=1e-6, clip_norm=1.0),   # other radius
    dict(mechanism="gaussian", epsilon=0.01, radius=0.01, delta=1e-6, clip_norm=1.0),  # below the ladder
    dict(mechanism="gaussian", epsilon=0.5, radius=0.01, delta=1e-8, clip_norm=1.0),   # other delta
], ids=["radius", "epsilon", "delta"])
def test_receipts_with_noise_the_record_never_measured_are_refused(utility_setup, kw):
    bob = _utility_client(utility_setup, 0.5, noise_on_write=False)
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [_receipted_point(utility_setup, 2, **kw)])
    assert ei.value.verdict == "UTILITY_DEGRADED", ei.value.details
    assert "measured recall@10 drops" in ei.value.details["reasons"]["2"]


def test_a_receipt_of_another_mechanism_is_refused_before_the_record_is_consulted(utility_setup):
    # It was UTILITY_DEGRADED here (the record measured gaussian only); since h-mech a receipt of
    # another mechanism than the collection's is refused as such, record or not
    # (tests/test_receipt_mechanism.py).
    bob = _utility_client(utility_setup, 0.5, noise_on_write=False)
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [_receipted_point(utility_setup, 2, mechanism="laplace_l2", epsilon=0.1, radius=0.01,
                                            clip_norm=1.0)])
    assert ei.value.verdict == "NOISE_REQUIRED", ei.value.details
    assert ei.value.details["reasons"]["2"].startswith("mechanism_mismatch: ")


def test_a_record_calibrated_for_another_radius_does_not_apply(utility_setup):
    # The radius-0.0005 record measured only small drops, but at 20x less noise than this policy's.
    bob = _utility_client(utility_setup, 0.1, record_radius=0.0005)
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [models.PointStruct(id=6, vector=utility_setup[1][6].tolist())])
    assert ei.value.verdict == "UTILITY_DEGRADED"
    assert "re-run `qdrant-guard calibrate` for this policy" in ei.value.directive
    assert "radius 0.01 (record: 0.0005)" in ei.value.directive


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_levels_with_no_more_noise_than_a_passing_level_are_accepted(utility_setup, epsilon):
    bob = _utility_client(utility_setup, epsilon)
    bob.upsert("pii", [models.PointStruct(id=1, vector=utility_setup[1][1].tolist())])
    assert bob._origin.count("pii").count == 1
    receipted = _utility_client(utility_setup, epsilon, noise_on_write=False)
    receipted.upsert("pii", [_receipted_point(utility_setup, 3, mechanism="gaussian", epsilon=epsilon,
                                              radius=0.01, delta=1e-6, clip_norm=1.0)])


def test_enforce_false_refuses_nothing(utility_setup):
    bob = _utility_client(utility_setup, 0.05, enforce=False)
    bob.upsert("pii", [models.PointStruct(id=1, vector=utility_setup[1][1].tolist())])
    assert bob._origin.count("pii").count == 1


# ----------------------------------------------------------------- 3. receipt parameter consistency
@pytest.fixture()
def receipt_setup(tmp_path):
    kit = make_kit(tmp_path)
    wsk, wpk = keys.generate_keypair()
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"],
                              "noise_on_write": False, "noise": {"epsilon": 1.0, "radius": 0.01}}},
                     receipts={"trusted_keys": [keys.public_key_to_str(wpk)]})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
    clean = _unit(np.random.default_rng(1), 16).astype(np.float32)[None, :]
    return owner.with_principal(kit.principal("bob", "support")), ReceiptSigner(wsk), clean


def _put(bob, writer, pid, nv, params):
    final = stored_form_batch(nv, distance="Cosine")
    r = issue_receipts_batch(writer, [ReceiptItem(params=params, vector=final[0], collection="pii", point_id=pid)])[0]
    bob.upsert("pii", [models.PointStruct(id=pid, vector=final[0].tolist(),
                                          payload={RECEIPT_KEY: receipts_for_payload({"": r})})])


GAUSS = dict(mechanism="gaussian", epsilon=1.0, radius=0.01, delta=1e-6, clip_norm=1.0)


def _seeded(clean):
    return noise.privatize_seeded_for_tests(clean, seed=1234, **GAUSS)


def _restated(p, **changes):
    # A consistent liar: changed fields and the sentence they give, so the receipt passes
    # verify_receipt (which checks the sentence) and reaches check_release.
    p = dataclasses.replace(p, **changes)
    return dataclasses.replace(p, guarantee=guarantee_sentence(
        p.mechanism, p.epsilon, p.delta, p.radius, p.clip_norm, p.scale, p.lattice_step, p.dim, p.dtype))


def _scale_of_eps_1000(clean):
    nv, p = noise.privatize(clean, **{**GAUSS, "epsilon": 1000.0})
    return nv, _restated(p, epsilon=1.0)


def _other_version(clean):
    nv, p = noise.privatize(clean, **GAUSS)
    return nv, dataclasses.replace(p, mechanism_version="99")


def _coarser_lattice(clean):
    nv, p = noise.privatize(clean, **GAUSS)
    return nv, _restated(p, lattice_step=p.lattice_step * 2)


@pytest.mark.parametrize("make, needle", [
    (_seeded, "TEST-ONLY"),
    (_scale_of_eps_1000, "below the calibrated"),
    (_other_version, "mechanism_version '99'"),
    (_coarser_lattice, "coarser"),
], ids=["seeded", "scale", "version", "lattice"])
def test_receipts_whose_params_are_not_a_calibrated_private_release_are_refused(receipt_setup, make, needle):
    bob, writer, clean = receipt_setup
    nv, params = make(clean)
    with pytest.raises(GuardRefusal) as ei:
        _put(bob, writer, 1, nv, params)
    assert ei.value.verdict == "NOISE_REQUIRED"
    assert needle in ei.value.details["reasons"]["1"]
    assert bob._origin.count("pii").count == 0


def test_an_honest_receipt_is_still_accepted(receipt_setup):
    bob, writer, clean = receipt_setup
    for pid, kw in ((1, GAUSS), (2, {**GAUSS, "epsilon": 0.5})):
        nv, params = noise.privatize(clean, **kw)
        _put(bob, writer, pid, nv, params)
    nv, params = noise.privatize(clean, key=b"k" * 32, **GAUSS)
    _put(bob, writer, 3, nv, params)
    assert bob._origin.count("pii").count == 3


def test_check_release_accepts_both_mechanisms_as_privatize_releases_them():
    x = np.ones((2, 8), np.float32) / math.sqrt(8)
    for kw in (GAUSS, dict(mechanism="laplace_l2", epsilon=1.0, radius=0.01, clip_norm=None)):
        _, p = noise.privatize(x, **kw)
        assert noise.check_release(p) is None
        assert noise.check_release(dataclasses.replace(p, scale=float("nan"))) is not None


# ----------------------------------------------------------------- 4. receipts dated in the future
def test_max_age_refuses_receipts_issued_in_the_future():
    sk, pk = keys.generate_keypair()
    s = ReceiptSigner(sk)
    v = np.ones(8, np.float32) / np.sqrt(8)
    nv, p = noise.privatize(v, **GAUSS)
    f = stored_form(nv, distance="Cosine")
    now = time.time()

    def check(issued: float, **kw):
        r = issue_receipt(s, params=p, vector=f, collection="c", point_id=1, issued_at=issued)
        return verify_receipt(r, vector=f, collection="c", point_id=1, trusted_keys={s.key_id: pk}, now=now, **kw)

    far = check(now + 1000 * 365 * 86400, max_age_s=86400.0)
    assert not far.ok and far.reason == "not_yet_valid" and "future" in far.detail
    assert check(now + 60, max_age_s=86400.0).ok  # clock skew within the leeway
    # Without max_age_s too; only max_clock_skew_s=None turns the date check off.
    assert check(now + 1000 * 365 * 86400).reason == "not_yet_valid"
    assert check(now + 1000 * 365 * 86400, max_clock_skew_s=None).ok


# ----------------------------------------------------------------- 5. calibrate advice rounds up
def test_threshold_advice_is_enough_when_followed():
    dim = 16
    rng = np.random.default_rng(0)
    docs = rng.normal(size=(60, dim))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    raw = qdrant_client.QdrantClient(":memory:")
    raw.create_collection("staging", vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE))
    raw.upsert("staging", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(docs)])
    queries = docs[:9].tolist()  # 9 queries: drops are multiples of 1/9, e.g. 0.11111 -> advice 0.1112
    args = dict(k=1, radius=0.01, epsilons=(0.3,), progress=False, seed=7, allow_few_queries=True)
    with pytest.raises(UtilityCalibrationError) as ei:
        calibrate(raw, "staging", queries, threshold=0.0, **args)
    best = min(lv["drop"] for lv in ei.value.frontier)
    advised = float(re.search(r"raise threshold to >= ([0-9.]+)", str(ei.value)).group(1))
    assert best > 0 and advised >= best
    assert calibrate(raw, "staging", queries, threshold=advised, **args).epsilon == 0.3


# ----------------------------------------------------------------- 6. NoiseParams.scale docstring
def test_laplace_scale_is_what_the_docstring_says():
    assert "(radius + sqrt(dim)*lattice_step)/epsilon" in (NoiseParams.__doc__ or "")
    _, p = noise.privatize(np.ones(384, np.float32) / math.sqrt(384), mechanism="laplace_l2", epsilon=1.0,
                           radius=0.01, clip_norm=1.0)
    assert p.scale == pytest.approx((p.radius + math.sqrt(p.dim) * p.lattice_step) / p.epsilon, rel=1e-12)
    assert p.scale != pytest.approx(p.radius / p.epsilon, rel=1e-6)
