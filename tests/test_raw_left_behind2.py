"""Vectors reads strip for their receipt's mechanism or model also count as left behind
(2026-12-05, branch h-rawleft2).

Under ``noise_queries`` with ``raw_in_boundary`` off, queries by point id (Qdrant searches with the
point's stored vector), MMR re-ranking and ``search_matrix_*`` compare stored vectors with one
another, where the query noise never reaches; h-rawleft refuses them while a point holds a dense
vector without a receipt (one exact ``count``). That count saw only whether a receipt was there:
reads strip a stored vector whose receipt names another noise mechanism than the collection's
(``mechanism_mismatch``) or another embedding model than ``utility.embedding_model(s)`` declares
(``model_mismatch``), or whose signed noise is weaker than the policy's (``noise_shortfall``, a
generator that gives no privacy), yet Qdrant still searched with it, ranked by it and compared it.
The count's filter now also matches a receipt's ``params.mechanism`` other than the collection's,
an epsilon, radius, delta or clip_norm weaker than its ``[noise]``, an ``rng_id`` not private, and,
where a model is declared for the vector, a ``model_id`` neither null nor that model: still one
request.

Real local Qdrant (``:memory:`` and ``path=``), real Ed25519 keys, the real hashing embedder; no mocks.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
import qdrant_client
from guardkit import (DIM, Recorder, audit_records, create, guard_signer, make_kit, models, receipted_vector, record_sent,
                      unit)
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient, keys
from qdrant_guard.hashing_embedder import HashingEmbedder
from qdrant_guard.receipts import RECEIPT_KEY, receipts_for_payload, verify

MODEL_A = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_B = "BAAI/bge-small-en-v1.5"
CLIP = "openai/clip-vit-base-patch32"
GAUSS = {"mechanism": "gaussian", "delta": 1e-6}
LAPLACE = {"mechanism": "laplace_l2", "delta": 0.0}
_MMR = models.NearestQuery(nearest=[1.0] + [0.0] * (DIM - 1), mmr=models.Mmr(diversity=0.5, candidates_limit=5))


def _policy(kit, noise=GAUSS, model=None, **utility):
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
           "noise_on_write": True, "raw_in_boundary": False, "noise_queries": True,
           "intent": {"enabled": False}, "diversity": {"enabled": False},
           "noise": {"epsilon": 1.0, "radius": 0.01, **noise}, "utility": dict(utility)}
    if model is not None:
        pol["utility"]["embedding_model"] = model
    return kit.config({"pii": pol})


def _clients(kit, cfg, *, named=(), location=":memory:", **kw):
    owner = QdrantClient(location, guard=cfg, principal=kit.principal("alice", "hr"), embedder=Recorder(), **kw)
    create(owner, "pii", distance=models.Distance.EUCLID, named=named)
    return owner, owner.with_principal(kit.principal("bob", "support"))


def _receipted(kit, pid, rng, **kw):
    """A vector noised at the collection's epsilon, delta, radius and clip_norm (or the keywords'
    instead), receipted by the guard's own key (trusted): :func:`guardkit.receipted_vector`."""
    return receipted_vector(guard_signer(kit), pid, unit(rng), **kw)


def _point(kit, pid, rng, **kw):
    vec, rec = _receipted(kit, pid, rng, **kw)
    return models.PointStruct(id=pid, vector=vec, payload={"t": "x", RECEIPT_KEY: receipts_for_payload({"": rec})})


def _counts(calls):
    """The guard's own left-behind counts among the recorded ``count`` calls."""
    return [kw for m, kw in calls if m == "count" and RECEIPT_KEY in repr(kw.get("count_filter"))]


def _compare_calls(c, pid=1, using=None):
    """Each form that compares stored vectors with one another: {form: call}."""
    return {
        "point id": lambda: c.query_points("pii", query=pid, using=using, limit=5),
        "recommend": lambda: c.query_points("pii", query=models.RecommendQuery(
            recommend=models.RecommendInput(positive=[pid])), using=using, limit=5),
        "mmr": lambda: c.query_points("pii", query=_MMR, using=using, query_text="the plan", limit=5),
        "search_matrix_pairs": lambda: c.search_matrix_pairs("pii", sample=5, limit=2, using=using),
        "search_matrix_offsets": lambda: c.search_matrix_offsets("pii", sample=5, limit=2, using=using),
    }


def _assert_all_refused(c, left, *, reason, using=None, pid=1):
    """Every comparing form is refused for ``left`` points, naming what makes them odd and the fix."""
    for form, call in _compare_calls(c, pid, using).items():
        with pytest.raises(GuardRefusal) as err:
            call()
        assert err.value.verdict == "QUERY_REJECTED", form
        text = str(err.value)
        assert f"still holds {left} point(s) with a vector that has no receipt, or whose receipt names" in text, form
        assert reason in text, form
        assert f"or have those {left} point(s) re-written through the guard" in err.value.directive, form
        assert "qdrant-guard receipt verify --collection pii --policy POLICY --check-noise" in err.value.directive
        assert err.value.details.get("unreceipted_points") == left, form


def _assert_all_run(c, using=None, pid=1):
    for form, call in _compare_calls(c, pid, using).items():
        call()  # no refusal


# ------------------------------------------------------------------ another mechanism


@pytest.mark.parametrize("noise, other", [(GAUSS, "laplace_l2"), (LAPLACE, "gaussian")],
                         ids=["laplace-receipt-in-gaussian", "gaussian-receipt-in-laplace"])
def test_a_receipt_of_another_mechanism_counts_as_left_behind(tmp_path, noise, other):
    kit = make_kit(tmp_path)
    store = str(tmp_path / "store")
    owner, bob = _clients(kit, _policy(kit, noise), location=None, path=store)
    rng = np.random.default_rng(1)
    own = noise["mechanism"]
    RawClient.upsert(owner, "pii", [_point(kit, 1, rng, mechanism=own), _point(kit, 2, rng, mechanism=own),
                                    _point(kit, 3, rng, mechanism=own), _point(kit, 4, rng, mechanism=other)])
    # Reads strip point 4's vector (h-rmech) ...
    assert {p.id: p.vector is None for p in bob.retrieve("pii", [1, 2, 3, 4], with_vectors=True)} == {
        1: False, 2: False, 3: False, 4: True}
    # ... which Qdrant still compares as stored: before, every form below ran.
    _assert_all_refused(bob, 1, reason=f"another noise mechanism than {own!r}")
    assert "model_mismatch" not in str(audit_records(kit)[-1])  # no model declared: not named
    refused = [r for r in audit_records(kit) if r["verdict"] == "QUERY_REJECTED"]
    assert len(refused) == 5 and all(r["details"]["unreceipted_points"] == 1 for r in refused)
    owner.close()
    # The listing the refusal names agrees with the count (read around the guard, which strips).
    raw = RawClient(path=store)
    pk = keys.load_private_key(kit.guard_key_path).public_key()
    cfg = _policy(kit, noise)
    reports = {r.point_id: r.reason for r in verify(raw, "pii", trusted_keys={keys.key_id(pk): pk}, policy=cfg,
                                                    noise_policy=cfg.policy_for("pii").noise)}
    assert reports == {1: "ok", 2: "ok", 3: "ok", 4: "mechanism_mismatch"}
    raw.close()


def test_changing_the_mechanism_leaves_the_old_releases_behind(tmp_path):
    # The realistic way in: the guard itself wrote laplace_l2 releases, then the policy's mechanism
    # became gaussian. Every stored vector is receipted, every one stripped on reads.
    kit = make_kit(tmp_path)
    store = str(tmp_path / "store")
    owner = QdrantClient(path=store, guard=_policy(kit, LAPLACE), principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    rng = np.random.default_rng(2)
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"t": "x"}) for i in range(1, 5)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    _assert_all_run(bob)  # under the policy they were written for
    owner.close()
    owner = QdrantClient(path=store, guard=_policy(kit, GAUSS), principal=kit.principal("alice", "hr"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert all(p.vector is None for p in bob.retrieve("pii", [1, 2, 3, 4], with_vectors=True))
    _assert_all_refused(bob, 4, reason="another noise mechanism than 'gaussian'")
    # Re-written through the guard (noised with gaussian now, receipted), the queries run again:
    # a refusal is not kept, so the same client counts again.
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"t": "x"}) for i in range(1, 4)])
    _assert_all_refused(bob, 1, reason="another noise mechanism than 'gaussian'")
    owner.update_vectors("pii", [models.PointVectors(id=4, vector=unit(rng))])
    _assert_all_run(bob)
    owner.close()


# ------------------------------------------------------------------ weaker noise

WEAKER = [pytest.param({"epsilon": 2.0}, id="larger-epsilon"), pytest.param({"radius": 0.005}, id="smaller-radius"),
          pytest.param({"delta": 1e-5}, id="larger-delta"), pytest.param({"clip_norm": 2.0}, id="less-clipping"),
          pytest.param({"clip_norm": None}, id="no-clipping"), pytest.param({"seeded": True}, id="seeded-generator")]


@pytest.mark.parametrize("weaker", WEAKER)
def test_a_receipt_of_weaker_noise_counts_as_left_behind(tmp_path, weaker):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit))
    rng = np.random.default_rng(8)
    RawClient.upsert(owner, "pii", [_point(kit, 1, rng), _point(kit, 2, rng), _point(kit, 3, rng, **weaker)])
    assert [p.vector is None for p in bob.retrieve("pii", [1, 2, 3], with_vectors=True)] == [False, False, True]
    _assert_all_refused(bob, 1, reason="or weaker noise than its [noise] section states")
    assert "insufficient_noise" in [r for r in audit_records(kit) if r["verdict"] == "QUERY_REJECTED"][-1]["directive"]
    owner.upsert("pii", [models.PointStruct(id=3, vector=unit(rng), payload={"t": "x"})])  # noised as stated now
    _assert_all_run(bob)
    owner.close()


def test_tightening_the_noise_leaves_the_old_releases_behind(tmp_path):
    kit = make_kit(tmp_path)
    store = str(tmp_path / "store")
    owner = QdrantClient(path=store, guard=_policy(kit, {**GAUSS, "epsilon": 2.0}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    rng = np.random.default_rng(9)
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"t": "x"}) for i in (1, 2, 3)])
    _assert_all_run(owner.with_principal(kit.principal("bob", "support")))
    owner.close()
    owner = QdrantClient(path=store, guard=_policy(kit), principal=kit.principal("alice", "hr"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert all(p.vector is None for p in bob.retrieve("pii", [1, 2, 3], with_vectors=True))
    _assert_all_refused(bob, 3, reason="weaker noise")
    owner.close()


# ------------------------------------------------------------------ another declared model


def test_a_receipt_naming_another_declared_model_counts_as_left_behind(tmp_path):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, model=MODEL_A))
    rng = np.random.default_rng(3)
    RawClient.upsert(owner, "pii", [_point(kit, 1, rng, model_id=MODEL_A), _point(kit, 2, rng, model_id=None),
                                    _point(kit, 3, rng, model_id=MODEL_A), _point(kit, 4, rng, model_id=MODEL_B)])
    assert [p.vector is None for p in bob.retrieve("pii", [1, 2, 3, 4], with_vectors=True)] == [
        False, False, False, True]
    _assert_all_refused(bob, 1, reason="or another embedding model than the policy declares for it")
    directive = [r for r in audit_records(kit) if r["verdict"] == "QUERY_REJECTED"][-1]["directive"]
    assert "re-embedded with the declared one first" in directive and "or model_mismatch" in directive
    # Re-written through the guard: a given vector's receipt names no model, which is released.
    owner.upsert("pii", [models.PointStruct(id=4, vector=unit(rng), payload={"t": "x"})])
    assert bob.retrieve("pii", [4], with_vectors=True)[0].vector is not None
    _assert_all_run(bob)
    owner.close()


def test_declaring_a_model_leaves_what_the_guard_embedded_with_another_behind(tmp_path):
    # The guard's own receipts name its embedder's model: written with the hashing embedder and no
    # declared model, then model A declared.
    kit = make_kit(tmp_path)
    store = str(tmp_path / "store")
    owner = QdrantClient(path=store, guard=_policy(kit), principal=kit.principal("alice", "hr"),
                         embedder=HashingEmbedder(DIM))
    create(owner, "pii", distance=models.Distance.EUCLID)
    rng = np.random.default_rng(4)
    owner.upsert("pii", [models.PointStruct(id=1, vector=models.Document(text="a note", model="any")),
                         models.PointStruct(id=2, vector=unit(rng)), models.PointStruct(id=3, vector=unit(rng))])
    owner.close()
    owner = QdrantClient(path=store, guard=_policy(kit, model=MODEL_A), principal=kit.principal("alice", "hr"),
                         embedder=Recorder())
    bob = owner.with_principal(kit.principal("bob", "support"))
    _assert_all_refused(bob, 1, reason="another embedding model", pid=2)
    owner.delete("pii", models.PointIdsList(points=[1]))
    _assert_all_run(bob, pid=2)
    owner.close()


def test_a_named_vector_is_held_to_its_own_declared_model(tmp_path):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, model=MODEL_A, embedding_models={"image": CLIP}),
                          named=("text", "image"))
    rng = np.random.default_rng(5)

    def point(pid, text_model, image_model):
        tv, tr = _receipted(kit, pid, rng, model_id=text_model, vname="text")
        iv, ir = _receipted(kit, pid, rng, model_id=image_model, vname="image")
        return models.PointStruct(id=pid, vector={"text": tv, "image": iv},
                                  payload={RECEIPT_KEY: receipts_for_payload({"text": tr, "image": ir})})

    # 1 and 2 as declared (or naming none); 3's image vector names model A, which is the text's.
    RawClient.upsert(owner, "pii", [point(1, MODEL_A, CLIP), point(2, None, None), point(3, MODEL_A, MODEL_A)])
    for using in ("text", "image"):  # the count is per collection: any vector of it left behind refuses
        _assert_all_refused(bob, 1, reason="another embedding model", using=using)
    owner.delete_vectors("pii", vectors=["image"], points=[3])
    _assert_all_run(bob, using="text")
    _assert_all_run(bob, using="image")
    owner.close()


# ------------------------------------------------------------------ what is not counted


@pytest.mark.parametrize("utility", [{"model": MODEL_A}, {}, {"embedding_models": {"image": CLIP}}],
                         ids=["declared", "unset", "other-vector"])
def test_matching_receipts_and_null_models_are_not_counted(tmp_path, monkeypatch, utility):
    # Pins the other side: receipts of the collection's mechanism, at its noise or stronger, naming
    # the declared model, or none, are not left behind (and with no model declared for the vector,
    # any model passes). Two counts: point 4's parameter set (stronger noise) is not the policy's,
    # so the first count finds it, a scroll learns the set and the second count holds point 4 to
    # its own calibration and finds none (kept: the later queries send none).
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, **utility))
    rng = np.random.default_rng(6)
    other = MODEL_A if "model" in utility else MODEL_B
    RawClient.upsert(owner, "pii", [_point(kit, 1, rng, model_id=MODEL_A), _point(kit, 2, rng, model_id=None),
                                    _point(kit, 3, rng, model_id=other),
                                    _point(kit, 4, rng, epsilon=0.5, radius=0.02, delta=1e-7, clip_norm=0.5)])
    assert all(p.vector is not None for p in bob.retrieve("pii", [1, 2, 3, 4], with_vectors=True))
    calls = record_sent(monkeypatch, ("count", "scroll"), with_kwargs=True)
    _assert_all_run(bob)
    assert len(_counts(calls)) == 2 and [c[0] for c in calls[:3]] == ["count", "scroll", "count"]
    owner.close()


# ------------------------------------------------------------------ async


def test_the_async_client_counts_another_mechanism_and_model_alike(tmp_path):
    kit = make_kit(tmp_path)
    rng = np.random.default_rng(7)

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_policy(kit, model=MODEL_A),
                                  principal=kit.principal("alice", "hr"), embedder=Recorder())
        await owner.create_collection("pii", vectors_config=models.VectorParams(
            size=DIM, distance=models.Distance.EUCLID))
        bob = owner.with_principal(kit.principal("bob", "support"))
        await qdrant_client.AsyncQdrantClient.upsert(owner, "pii", [
            _point(kit, 1, rng, model_id=MODEL_A), _point(kit, 2, rng, mechanism="laplace_l2"),
            _point(kit, 3, rng, model_id=MODEL_B)])
        calls = {
            "point id": lambda: bob.query_points("pii", query=1, limit=5),
            "recommend": lambda: bob.query_points("pii", query=models.RecommendQuery(
                recommend=models.RecommendInput(positive=[1])), limit=5),
            "mmr": lambda: bob.query_points("pii", query=_MMR, query_text="the plan", limit=5),
            "search_matrix_pairs": lambda: bob.search_matrix_pairs("pii", sample=3, limit=2),
            "search_matrix_offsets": lambda: bob.search_matrix_offsets("pii", sample=3, limit=2),
        }
        refused = {}
        for form, call in calls.items():
            try:
                await call()
            except GuardRefusal as exc:
                refused[form] = exc
        await owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"t": "x"}) for i in (2, 3)])
        ran = [form for form, call in calls.items() if await call() is not None]
        await owner.close()
        return refused, ran

    refused, ran = asyncio.run(main())
    assert sorted(refused) == sorted(ran) == sorted(["point id", "recommend", "mmr", "search_matrix_pairs",
                                                     "search_matrix_offsets"])
    for exc in refused.values():
        assert exc.verdict == "QUERY_REJECTED" and "still holds 2 point(s)" in str(exc)
        assert "another noise mechanism than 'gaussian' or another embedding model" in str(exc)
