"""Guarded writes against real local-mode Qdrant: every verdict path, atomic refusals."""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import DIM, RawClient, count, create, make_kit, models, snapshot, unit
from qdrant_guard import GuardRefusal, InvalidVectorError, QdrantClient, keys
from qdrant_guard.noise import privatize
from qdrant_guard.receipts import (
    RECEIPT_KEY,
    ReceiptItem,
    ReceiptSigner,
    issue_receipts_batch,
    receipts_for_payload,
    receipts_from_payload,
    stored_form,
)
from qdrant_guard.receipts import verify as verify_stored


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _policy(kit, **over):
    base = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False,
            "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}
    base.update(over)
    return kit.config({"pii": base})


def _client(kit, cfg, who=("bob", "support"), collection="pii", **kw):
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, collection, **kw)
    return owner.with_principal(kit.principal(*who))


def _verify(client, name):
    """Verify stored receipts as the owner (the reader the receipts are for)."""
    return verify_stored(client._origin, name, trusted_keys=client.guard.trusted_receipt_keys)


def _receipted(signer, vec, *, collection="pii", point_id=1, epsilon=1.0, radius=0.01, clip_norm=1.0):
    noised, params = privatize(np.asarray(vec, dtype=np.float32), mechanism="gaussian", epsilon=epsilon,
                               delta=1e-6, radius=radius, clip_norm=clip_norm)
    final = stored_form(noised, distance="Cosine")
    rec = issue_receipts_batch(signer, [ReceiptItem(params=params, vector=final, collection=collection,
                                                    point_id=point_id, vector_name="")])[0]
    return final.tolist(), {RECEIPT_KEY: receipts_for_payload({"": rec})}


def test_raw_write_from_other_boundary_is_refused_and_nothing_is_written(kit):
    rng = np.random.default_rng(1)
    client = _client(kit, _policy(kit))
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"n": i}) for i in range(5)])
    err = ei.value
    assert err.verdict == "NOISE_REQUIRED"
    assert sorted(err.point_ids) == [0, 1, 2, 3, 4]
    assert len(err.manifest_digest) == 64
    assert "receipt" in err.directive
    assert count(client, "pii") == 0


def test_noise_on_write_stores_noised_vector_with_verifying_receipt(kit):
    rng = np.random.default_rng(2)
    client = _client(kit, _policy(kit, noise_on_write=True))
    raw = [unit(rng) for _ in range(4)]
    client.upsert("pii", [models.PointStruct(id=i, vector=v, payload={"source": "s"}) for i, v in enumerate(raw)])
    stored = snapshot(client, "pii")
    assert len(stored) == 4
    for (pid, payload, vec), clean in zip(stored, raw):
        assert RECEIPT_KEY in payload
        assert not np.allclose(vec, clean, atol=1e-4)  # it really was noised
        rec = receipts_from_payload(payload)[""]
        assert rec["epsilon"] == 1.0 if "epsilon" in rec else True
    reports = _verify(client, "pii")
    assert len(reports) == 4 and all(r.ok for r in reports), [r.reason for r in reports]


def test_keyed_noise_same_vector_same_release(kit):
    rng = np.random.default_rng(3)
    client = _client(kit, _policy(kit, noise_on_write=True))
    v = unit(rng)
    client.upsert("pii", [models.PointStruct(id=1, vector=v), models.PointStruct(id=2, vector=v)])
    (_, _, a), (_, _, b) = snapshot(client, "pii")
    assert np.array_equal(np.asarray(a), np.asarray(b))


def test_owner_raw_in_boundary_write_is_accepted_raw(kit):
    rng = np.random.default_rng(4)
    client = _client(kit, _policy(kit, raw_in_boundary=True), who=("alice", "hr"))
    v = unit(rng)
    client.upsert("pii", [models.PointStruct(id=1, vector=v)])
    (_, payload, vec), = snapshot(client, "pii")
    assert np.allclose(vec, v, atol=1e-6)
    assert not payload or RECEIPT_KEY not in payload


def test_owner_without_raw_allowance_must_noise(kit):
    rng = np.random.default_rng(5)
    client = _client(kit, _policy(kit, raw_in_boundary=False), who=("alice", "hr"))
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pii", [models.PointStruct(id=1, vector=unit(rng))])
    assert ei.value.verdict == "NOISE_REQUIRED"


def test_writer_signed_receipt_with_trusted_key_is_accepted(kit):
    rng = np.random.default_rng(6)
    agent_sk, agent_pk = keys.generate_keypair()
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False,
                              "noise": {"radius": 0.01}}},
                     receipts={"trusted_keys": [keys.public_key_to_str(agent_pk)]})
    client = _client(kit, cfg)
    vec, payload = _receipted(ReceiptSigner(agent_sk), unit(rng))
    client.upsert("pii", [models.PointStruct(id=1, vector=vec, payload=payload)])
    assert count(client, "pii") == 1


@pytest.mark.parametrize("attack", ["untrusted_key", "flipped_vector", "other_point", "other_collection",
                                    "revoked_key", "stripped_signature"])
def test_bad_receipts_are_rejected(kit, attack):
    rng = np.random.default_rng(7)
    agent_sk, agent_pk = keys.generate_keypair()
    trusted = [] if attack == "untrusted_key" else [keys.public_key_to_str(agent_pk)]
    revoked = [keys.key_id(agent_pk)] if attack == "revoked_key" else []
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False}},
                     receipts={"trusted_keys": trusted, "revoked_keys": revoked})
    client = _client(kit, cfg)
    point_id = 2 if attack == "other_point" else 1
    coll = "other" if attack == "other_collection" else "pii"
    vec, payload = _receipted(ReceiptSigner(agent_sk), unit(rng), collection=coll, point_id=point_id)
    if attack == "flipped_vector":
        vec[3] = float(np.nextafter(np.float32(vec[3]), np.float32(2)) + 2.0 ** -19)
    if attack == "stripped_signature":
        inner = payload[RECEIPT_KEY]
        rec = receipts_from_payload(payload)[""]
        rec = {k: v for k, v in rec.items() if k != "sig"}
        payload = {RECEIPT_KEY: {**inner, "vectors": {"": rec}}} if isinstance(inner, dict) and "vectors" in inner else {RECEIPT_KEY: rec}
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pii", [models.PointStruct(id=1, vector=vec, payload=payload)])
    assert ei.value.verdict == "INVALID_RECEIPT"
    assert count(client, "pii") == 0


def test_epsilon_above_ceiling_is_refused(kit):
    rng = np.random.default_rng(8)
    agent_sk, agent_pk = keys.generate_keypair()
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False}},
                     receipts={"trusted_keys": [keys.public_key_to_str(agent_pk)]})
    client = _client(kit, cfg)
    vec, payload = _receipted(ReceiptSigner(agent_sk), unit(rng), epsilon=5.0)  # PII ceiling is 2.0
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pii", [models.PointStruct(id=1, vector=vec, payload=payload)])
    assert ei.value.verdict == "EPSILON_ABOVE_CEILING"
    assert "ceiling" in ei.value.directive


@pytest.mark.parametrize("noise, weaker", [
    ({"radius": 0.05}, {"radius": 0.01}),  # protects a smaller radius than the policy's
    ({"epsilon": 0.5, "radius": 0.01}, {"epsilon": 1.0}),  # a larger epsilon, still under the PII ceiling 2.0
], ids=["smaller_radius", "larger_epsilon"])
def test_receipt_weaker_than_the_policy_is_refused_and_a_stronger_one_accepted(kit, noise, weaker):
    rng = np.random.default_rng(9)
    agent_sk, agent_pk = keys.generate_keypair()
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False,
                              "noise": noise}},
                     receipts={"trusted_keys": [keys.public_key_to_str(agent_pk)]})
    client = _client(kit, cfg)
    vec, payload = _receipted(ReceiptSigner(agent_sk), unit(rng), **weaker)
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pii", [models.PointStruct(id=1, vector=vec, payload=payload)])
    assert ei.value.verdict == "NOISE_REQUIRED"
    assert count(client, "pii") == 0
    vec, payload = _receipted(ReceiptSigner(agent_sk), unit(rng), epsilon=0.25, radius=noise["radius"])
    client.upsert("pii", [models.PointStruct(id=1, vector=vec, payload=payload)])
    assert count(client, "pii") == 1


@pytest.mark.parametrize("clip_norm, accepted", [(None, False), (2.0, False), (1.0, True), (0.5, True)],
                         ids=["unclipped", "larger_clip", "same_clip", "smaller_clip"])
def test_receipt_clipped_less_than_the_policy_is_refused(kit, clip_norm, accepted):
    # The policy protects inputs within radius *after clipping to its clip_norm* (1.0). A receipt
    # clipped at a larger norm, or not at all, protects only inputs within radius as clipped by
    # it: two embeddings of norm 10 at policy-clipped distance 0.01 are 0.1 apart unclipped, where
    # the same sigma gives epsilon ~12.6, not 1. Clipping harder never increases a distance, so
    # a smaller clip_norm is at least as strong.
    rng = np.random.default_rng(12)
    agent_sk, agent_pk = keys.generate_keypair()
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False,
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01, "clip_norm": 1.0}}},
                     receipts={"trusted_keys": [keys.public_key_to_str(agent_pk)]})
    client = _client(kit, cfg)
    vec, payload = _receipted(ReceiptSigner(agent_sk), unit(rng), clip_norm=clip_norm)
    if accepted:
        client.upsert("pii", [models.PointStruct(id=1, vector=vec, payload=payload)])
        assert count(client, "pii") == 1
        return
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pii", [models.PointStruct(id=1, vector=vec, payload=payload)])
    assert ei.value.verdict == "NOISE_REQUIRED"
    assert "clip_norm" in ei.value.details["reasons"]["1"]
    assert count(client, "pii") == 0


def test_one_bad_point_refuses_the_whole_batch_and_leaves_contents_unchanged(kit):
    rng = np.random.default_rng(10)
    agent_sk, agent_pk = keys.generate_keypair()
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False}},
                     receipts={"trusted_keys": [keys.public_key_to_str(agent_pk)]})
    client = _client(kit, cfg)
    signer = ReceiptSigner(agent_sk)
    good = []
    for i in range(3):
        vec, payload = _receipted(signer, unit(rng), point_id=i)
        good.append(models.PointStruct(id=i, vector=vec, payload=payload))
    client.upsert("pii", good)
    before = snapshot(client, "pii")
    batch = []
    for i in range(3, 8):
        vec, payload = _receipted(signer, unit(rng), point_id=i)
        batch.append(models.PointStruct(id=i, vector=vec, payload=payload))
    batch.append(models.PointStruct(id=99, vector=unit(rng), payload={"x": 1}))  # raw: the one bad point
    batch.append(models.PointStruct(id=0, vector=unit(rng), payload={"overwrite": True}))
    for method in ("upsert", "upload_points", "batch_update_points"):
        with pytest.raises(GuardRefusal) as ei:
            if method == "upsert":
                client.upsert("pii", batch)
            elif method == "upload_points":
                client.upload_points("pii", iter(batch))
            else:
                client.batch_update_points("pii", [models.UpsertOperation(upsert=models.PointsList(points=batch))])
        assert ei.value.verdict == "NOISE_REQUIRED"
        assert set(ei.value.point_ids) == {99, 0}
        assert snapshot(client, "pii") == before


@pytest.mark.parametrize("method", ["upsert_list", "upsert_batch", "upload_points", "upload_collection",
                                    "batch_update_points"])
def test_every_write_method_noises_on_write(kit, method):
    rng = np.random.default_rng(11)
    client = _client(kit, _policy(kit, noise_on_write=True))
    vecs = np.stack([unit(rng) for _ in range(3)])
    ids = [10, 11, 12]
    if method == "upsert_list":
        client.upsert("pii", [models.PointStruct(id=i, vector=v.tolist()) for i, v in zip(ids, vecs)])
    elif method == "upsert_batch":
        client.upsert("pii", models.Batch(ids=ids, vectors=vecs.tolist()))
    elif method == "upload_points":
        client.upload_points("pii", (models.PointStruct(id=i, vector=v.tolist()) for i, v in zip(ids, vecs)), wait=True)
    elif method == "upload_collection":
        client.upload_collection("pii", vectors=vecs, ids=ids, payload=[{"k": i} for i in ids], wait=True)
    else:
        client.batch_update_points("pii", [models.UpsertOperation(upsert=models.PointsBatch(
            batch=models.Batch(ids=ids, vectors=vecs.tolist())))])
    stored = snapshot(client, "pii")
    assert [s[0] for s in stored] == ids
    assert all(RECEIPT_KEY in s[1] for s in stored)
    reports = _verify(client, "pii")
    assert len(reports) == 3 and all(r.ok for r in reports)


def test_update_vectors_renews_the_receipt(kit):
    rng = np.random.default_rng(12)
    client = _client(kit, _policy(kit, noise_on_write=True))
    client.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"keep": "me"})])
    (_, p0, v0), = snapshot(client, "pii")
    client.update_vectors("pii", [models.PointVectors(id=1, vector=unit(rng))])
    (_, p1, v1), = snapshot(client, "pii")
    assert p1["keep"] == "me"
    assert not np.allclose(v0, v1)
    assert p0[RECEIPT_KEY] != p1[RECEIPT_KEY]
    reports = _verify(client, "pii")
    assert [r.ok for r in reports] == [True]


def test_update_vectors_raw_from_other_boundary_is_refused(kit):
    rng = np.random.default_rng(13)
    client = _client(kit, _policy(kit, noise_on_write=True))
    client.upsert("pii", [models.PointStruct(id=1, vector=unit(rng))])
    before = snapshot(client, "pii")
    client.guard.config = _policy(kit, noise_on_write=False)
    with pytest.raises(GuardRefusal):
        client.update_vectors("pii", [models.PointVectors(id=1, vector=unit(rng))])
    assert snapshot(client, "pii") == before


@pytest.mark.parametrize("bad,needle", [
    ([float("nan")] + [0.1] * (DIM - 1), "non-finite"),
    ([float("inf")] + [0.1] * (DIM - 1), "non-finite"),
    ([0.1] * (DIM + 1), "dimension"),
])
def test_invalid_vectors_give_clear_errors_and_write_nothing(kit, bad, needle):
    client = _client(kit, _policy(kit, noise_on_write=True))
    with pytest.raises(InvalidVectorError, match=needle):
        client.upsert("pii", [models.PointStruct(id=1, vector=[0.1] * DIM), models.PointStruct(id=2, vector=bad)])
    assert count(client, "pii") == 0


def test_unknown_vector_name_is_a_clear_error(kit):
    cfg = kit.config({"named": {"class": "PII", "owner": "hr", "writers": ["support"]}})
    client = _client(kit, cfg, collection="named", named=("text", "title"))
    with pytest.raises(InvalidVectorError, match="unknown vector name 'body'"):
        client.upsert("named", [models.PointStruct(id=1, vector={"body": [0.1] * DIM})])
    client.upsert("named", [models.PointStruct(id=1, vector={"text": [0.1] * DIM, "title": [0.2] * DIM})])
    (_, payload, vec), = snapshot(client, "named")
    assert set(receipts_from_payload(payload)) == {"text", "title"}
    reports = _verify(client, "named")
    assert len(reports) == 2 and all(r.ok for r in reports)


def test_sparse_vectors_are_refused_on_sensitive_collections(kit):
    cfg = kit.config({"sp": {"class": "PII", "owner": "hr", "writers": ["support"]}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    client = owner.with_principal(kit.principal("bob", "support"))
    # Made before the guard: the guard refuses sparse slots on sensitive collections.
    RawClient.create_collection(owner, "sp", vectors_config={"d": models.VectorParams(size=DIM, distance=models.Distance.COSINE)},
                                sparse_vectors_config={"s": models.SparseVectorParams()})
    with pytest.raises(InvalidVectorError, match="sparse"):
        client.upsert("sp", [models.PointStruct(id=1, vector={"s": models.SparseVector(indices=[1, 5], values=[0.5, 0.2])})])
    assert count(client, "sp") == 0


def test_writer_outside_writers_is_refused_cross_boundary(kit):
    rng = np.random.default_rng(14)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True}})
    client = _client(kit, cfg)
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pii", [models.PointStruct(id=1, vector=unit(rng))])
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert count(client, "pii") == 0


def test_only_the_owner_writes_unless_writers_lists_more(kit):
    # Readers used to be writers by default, which let a reader add points to a restricted source
    # and raise its own extraction budget.
    rng = np.random.default_rng(3)
    for extra, support_may_write in (({}, False), ({"writers": ["support"]}, True), ({"writers": ["*"]}, True)):
        cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "readers": ["support"], "noise_on_write": True,
                                  **extra}})
        owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        create(owner, "pii")
        owner.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"source": "s"})])
        bob = owner.with_principal(kit.principal("bob", "support"))
        write = [models.PointStruct(id=2, vector=unit(rng), payload={"source": "s"})]
        if support_may_write:
            bob.upsert("pii", write)
            assert count(owner, "pii") == 2
        else:
            with pytest.raises(GuardRefusal) as ei:
                bob.upsert("pii", write)
            assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY" and "allowed boundaries: ['hr']" in str(ei.value)
            assert count(owner, "pii") == 1
        assert len(bob.query_points("pii", query=unit(rng)).points) == count(owner, "pii")
