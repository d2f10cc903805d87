"""The declared embedding model on the read side (2026-12-05, branch h-umodel3).

h-umodel2 held writes to ``utility.embedding_model`` / ``utility.embedding_models``: a writer's
receipt naming another model is refused, and a Document the guard would embed for a write with an
embedder naming another model is a ConfigError. Reads were left as they were. Now, for a vector
whose model the policy declares:

* a query ``models.Document`` the guard would embed (query_points, query_batch_points,
  query_points_groups; sync and async) with an embedder naming another model than the one declared
  for the vector queried (``using=``, or the unnamed one) is a ConfigError before the text is
  scanned, embedded or sent; an embedder naming no model is not checked;
* a stored vector whose receipt's signed ``model_id`` names another model is stripped from the
  reads of every principal not allowed raw vectors, as one of another noise mechanism is; a receipt
  naming no model is released as before.

Unset, nothing changes. Real local Qdrant, real Ed25519 keys, the real hashing embedder; no mocks.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
import qdrant_client
from guardkit import (DIM, Recorder, audit_records, create, guard_signer, make_kit, models, receipted_point,
                      receipted_vector, record_scans, record_sent, unit)
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal, QdrantClient, keys
from qdrant_guard.hashing_embedder import HashingEmbedder
from qdrant_guard.receipts import RECEIPT_KEY, receipts_for_payload, verify

MODEL_A = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_B = "BAAI/bge-small-en-v1.5"
CLIP = "openai/clip-vit-base-patch32"
HASHING = f"qg-hashing-v1-{DIM}"
QUERIES = ["query_points", "query_batch_points", "query_points_groups"]


def _policy(kit, model=MODEL_A, *, noise_queries=False, raw_in_boundary=False, **utility):
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
           "noise_on_write": True, "raw_in_boundary": raw_in_boundary, "noise_queries": noise_queries,
           "intent": {"enabled": False}, "diversity": {"enabled": False},
           "noise": {"epsilon": 1.0, "radius": 0.01}, "utility": dict(utility)}
    if model is not None:
        pol["utility"]["embedding_model"] = model
    return kit.config({"pii": pol})


def _clients(kit, cfg, *, named=(), **kw):
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), **kw)
    create(owner, "pii", distance=models.Distance.EUCLID, named=named)
    return owner, owner.with_principal(kit.principal("bob", "support"))


def _doc(text="the quarterly plan"):
    return models.Document(text=text, model="any")


def _query(c, method, query, using=None):
    """One guarded query of ``method`` with ``query`` for vector ``using``."""
    if method == "query_points":
        return c.query_points("pii", query=query, using=using, limit=3)
    if method == "query_batch_points":
        return c.query_batch_points("pii", [models.QueryRequest(query=query, using=using, limit=3)])
    return c.query_points_groups("pii", query=query, using=using, group_by="t", limit=3)


def _assert_query_refusal(err, *, have=HASHING, want=MODEL_A, key="utility.embedding_model", vector="<unnamed>"):
    text = str(err)
    # Names the collection, the vector, both models, the key and the fix.
    assert "collection 'pii'" in text and f"vector {vector!r}" in text and "query is a models.Document" in text
    assert f"embedder's model {have!r}" in text and f'declares {key} = "{want}"' in text
    assert f"Pass embedder= an embedder of {want!r}" in text and f"or correct {key}" in text
    assert "Nothing was embedded or sent" in text


# ------------------------------------------------------------------ query Documents (sync)

@pytest.mark.parametrize("noise_queries", [False, True], ids=["plain", "noise_queries"])
@pytest.mark.parametrize("method", QUERIES)
def test_a_query_document_for_another_model_is_refused_before_it_is_read_or_embedded(
        tmp_path, monkeypatch, method, noise_queries):
    kit = make_kit(tmp_path)
    embed = Recorder()  # names qg-hashing-v1-16
    owner, bob = _clients(kit, _policy(kit, noise_queries=noise_queries), embedder=embed)
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"t": "x"})])
    scans = record_scans(monkeypatch)
    sent = record_sent(monkeypatch, tuple(QUERIES))
    for client in (bob, owner):
        with pytest.raises(ConfigError) as ei:
            _query(client, method, _doc())
        _assert_query_refusal(ei.value)
    # The Document's text reached neither the detector nor the embedder (group_by's field name is
    # screened earlier, as before), and no query was sent.
    assert embed.seen == [] and not any("quarterly" in t for t in scans) and sent == []


@pytest.mark.parametrize("method", QUERIES)
def test_a_query_document_for_the_declared_model_is_embedded(tmp_path, method):
    # The same query under a policy declaring the embedder's model runs: the check is the model's.
    kit = make_kit(tmp_path)
    embed = Recorder()
    owner, bob = _clients(kit, _policy(kit, HASHING), embedder=embed)
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(2)), payload={"t": "x"})])
    _query(bob, method, _doc())
    assert embed.seen == ["the quarterly plan"]


@pytest.mark.parametrize("method", QUERIES)
def test_the_query_embedder_is_checked_against_the_vector_queried(tmp_path, method):
    # Text vectors of the embedder's model, image vectors of CLIP: a Document for "text" is
    # embedded, one for "image" (using=) is refused naming the per-vector key.
    kit = make_kit(tmp_path)
    embed = Recorder()
    owner, bob = _clients(kit, _policy(kit, HASHING, embedding_models={"image": CLIP}), named=("text", "image"),
                          embedder=embed)
    rng = np.random.default_rng(3)
    owner.upsert("pii", [models.PointStruct(id=1, vector={"text": unit(rng), "image": unit(rng)}, payload={"t": "x"})])
    _query(bob, method, _doc(), using="text")
    assert embed.seen == ["the quarterly plan"]
    with pytest.raises(ConfigError) as ei:
        _query(bob, method, _doc("another"), using="image")
    _assert_query_refusal(ei.value, want=CLIP, key="utility.embedding_models.image", vector="image")
    assert embed.seen == ["the quarterly plan"]


def test_the_batch_names_the_vector_of_the_request_that_fails(tmp_path):
    kit = make_kit(tmp_path)
    embed = Recorder()
    owner, bob = _clients(kit, _policy(kit, HASHING, embedding_models={"image": CLIP}), named=("text", "image"),
                          embedder=embed)
    with pytest.raises(ConfigError) as ei:
        bob.query_batch_points("pii", [models.QueryRequest(query=_doc(), using="text", limit=3),
                                       models.QueryRequest(query=_doc("b"), using="image", limit=3)])
    _assert_query_refusal(ei.value, want=CLIP, key="utility.embedding_models.image", vector="image")
    assert embed.seen == ["the quarterly plan"]  # the first request's, checked and embedded in turn; nothing sent


@pytest.mark.parametrize("utility, embedder", [
    ({}, Recorder),  # the knob unset
    ({"embedding_models": {"image": CLIP}}, Recorder),  # a table naming another vector only
    ({"embedding_model": MODEL_A}, lambda: (lambda texts, _e=HashingEmbedder(DIM): _e(texts))),  # names no model
], ids=["unset", "other-vector", "unnamed-embedder"])
def test_what_the_query_check_leaves_alone(tmp_path, utility, embedder):
    # Pins: without a declared model for the vector, or with an embedder that names none (the guard
    # cannot tell its model), the Document is embedded as before.
    kit = make_kit(tmp_path)
    model = utility.pop("embedding_model", None)
    owner, bob = _clients(kit, _policy(kit, model, **utility), embedder=embedder())
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(4)), payload={"t": "x"})])
    for method in QUERIES:
        _query(bob, method, _doc())
    assert audit_records(kit)[-1]["verdict"] == "ALLOW"


def test_a_prefetch_document_is_not_embedded_at_all(tmp_path):
    # Pins why prefetches need no model check: the guard refuses text there (it embeds only the
    # top-level query's Document), whatever the models.
    kit = make_kit(tmp_path)
    embed = Recorder()
    owner, bob = _clients(kit, _policy(kit), embedder=embed)
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("pii", query=unit(np.random.default_rng(5)), query_text="plan",
                         prefetch=models.Prefetch(query=_doc(), limit=5), limit=3)
    assert ei.value.verdict == "QUERY_REJECTED" and embed.seen == []


# ------------------------------------------------------------------ query Documents (async)

def test_the_async_client_refuses_query_documents_alike(tmp_path):
    kit = make_kit(tmp_path)
    embed = Recorder()

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_policy(kit, noise_queries=True),
                                  principal=kit.principal("alice", "hr"), embedder=embed)
        await owner.create_collection("pii", vectors_config=models.VectorParams(
            size=DIM, distance=models.Distance.EUCLID))
        bob = owner.with_principal(kit.principal("bob", "support"))
        errors = {}
        for method, run in {
            "query_points": lambda: bob.query_points("pii", query=_doc(), limit=3),
            "query_batch_points": lambda: bob.query_batch_points("pii", [models.QueryRequest(query=_doc(), limit=3)]),
            "query_points_groups": lambda: bob.query_points_groups("pii", query=_doc(), group_by="t", limit=3),
        }.items():
            with pytest.raises(ConfigError) as ei:
                await run()
            errors[method] = ei.value
        return errors

    errors = asyncio.run(main())
    assert sorted(errors) == sorted(QUERIES)
    for err in errors.values():
        _assert_query_refusal(err)
    assert embed.seen == []


# ------------------------------------------------------------------ stored vectors

def _receipted(kit, pid, rng, model_id, vname=""):
    """A vector noised at the collection's noise, receipted by the guard's key (trusted), its receipt
    naming ``model_id``."""
    return receipted_vector(guard_signer(kit), pid, unit(rng), model_id=model_id, vname=vname)


def _point(kit, pid, rng, model_id):
    return receipted_point(kit, pid, rng, model_id=model_id)


def _store_three(kit, client, rng):
    """Points 1 (receipt naming model A), 2 (model B), 3 (no model), written around the guard."""
    RawClient.upsert(client, "pii", [_point(kit, 1, rng, MODEL_A), _point(kit, 2, rng, MODEL_B),
                                     _point(kit, 3, rng, None)])


def _read_every_way(c, rng):
    """Each read that returns stored vectors: {read: {id: vector}}."""
    groups = c.query_points_groups("pii", query=unit(rng), group_by="t", group_size=5, limit=1, with_vectors=True)
    return {
        "retrieve": {p.id: p.vector for p in c.retrieve("pii", [1, 2, 3], with_vectors=True)},
        "scroll": {p.id: p.vector for p in c.scroll("pii", with_vectors=True)[0]},
        "query_points": {p.id: p.vector for p in c.query_points("pii", query=unit(rng), limit=5,
                                                                  with_vectors=True).points},
        "query_batch_points": {p.id: p.vector for p in c.query_batch_points("pii", [models.QueryRequest(
            query=unit(rng), limit=5, with_vector=True)])[0].points},
        "query_points_groups": {h.id: h.vector for g in groups.groups for h in g.hits},
    }


def test_a_stored_vector_whose_receipt_names_another_model_is_stripped_on_every_read(tmp_path):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit))
    rng = np.random.default_rng(6)
    _store_three(kit, owner, rng)
    for client in (bob, owner):  # the owner is not allowed raw vectors here (raw_in_boundary = false)
        for read, got in _read_every_way(client, rng).items():
            assert sorted(got) == [1, 2, 3], read
            assert got[1] is not None and got[3] is not None, read  # the declared model, and none named
            assert got[2] is None, read
    assert audit_records(kit)[-1]["verdict"] == "ALLOW"


@pytest.mark.parametrize("utility", [{}, {"embedding_models": {"image": CLIP}}], ids=["unset", "other-vector"])
def test_without_a_declared_model_every_receipted_vector_is_released(tmp_path, utility):
    # Pins the unset knob (and a table naming another vector): nothing changes.
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, None, **utility))
    rng = np.random.default_rng(7)
    _store_three(kit, owner, rng)
    for read, got in _read_every_way(bob, rng).items():
        assert all(v is not None for v in got.values()) and len(got) == 3, read


def test_a_reader_allowed_raw_vectors_gets_them_all(tmp_path):
    # Pins: raw_in_boundary lets the owner's boundary read vectors as stored, whatever receipts say.
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, raw_in_boundary=True))
    rng = np.random.default_rng(8)
    _store_three(kit, owner, rng)
    for read, got in _read_every_way(owner, rng).items():
        assert all(v is not None for v in got.values()) and len(got) == 3, read
    assert {p.id: p.vector is None for p in bob.retrieve("pii", [1, 2, 3], with_vectors=True)} == {
        1: False, 2: True, 3: False}


def test_a_named_vector_is_held_to_its_own_model(tmp_path):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, MODEL_A, embedding_models={"image": CLIP}), named=("text", "image"))
    rng = np.random.default_rng(9)

    def point(pid, text_model, image_model):
        tv, tr = _receipted(kit, pid, rng, text_model, "text")
        iv, ir = _receipted(kit, pid, rng, image_model, "image")
        return models.PointStruct(id=pid, vector={"text": tv, "image": iv},
                                  payload={RECEIPT_KEY: receipts_for_payload({"text": tr, "image": ir})})

    RawClient.upsert(owner, "pii", [point(1, MODEL_A, CLIP), point(2, MODEL_A, MODEL_A), point(3, CLIP, CLIP)])
    got = {p.id: p.vector for p in bob.retrieve("pii", [1, 2, 3], with_vectors=True)}
    assert set(got[1]) == {"text", "image"}
    assert set(got[2]) == {"text"}  # its image vector names model A, not CLIP
    assert set(got[3]) == {"image"}  # its text vector names CLIP, not model A (embedding_model)


def test_declaring_a_model_strips_what_the_guard_embedded_with_another_and_verify_agrees(tmp_path):
    # The guard's own receipts name its embedder's model (h-umodel2). Written with the hashing
    # embedder and no declared model, then the policy declares model A: reads strip those vectors,
    # as they strip the releases of a changed mechanism, and the offline check names the mismatch.
    kit = make_kit(tmp_path)
    store = str(tmp_path / "store")
    owner = QdrantClient(path=store, guard=_policy(kit, None), principal=kit.principal("alice", "hr"),
                         embedder=HashingEmbedder(DIM))
    create(owner, "pii", distance=models.Distance.EUCLID)
    bob = owner.with_principal(kit.principal("bob", "support"))
    rng = np.random.default_rng(10)
    bob.upsert("pii", [models.PointStruct(id=1, vector=_doc("a note"), payload={"t": "x"}),
                       models.PointStruct(id=2, vector=unit(rng), payload={"t": "x"})])  # given: names no model
    assert all(p.vector is not None for p in bob.retrieve("pii", [1, 2], with_vectors=True))
    owner.close()

    cfg = _policy(kit)
    owner = QdrantClient(path=store, guard=cfg, principal=kit.principal("alice", "hr"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert {p.id: p.vector is None for p in bob.retrieve("pii", [1, 2], with_vectors=True)} == {1: True, 2: False}
    owner.close()
    raw = RawClient(path=store)  # verify reads the store itself (through the guard it would see the strip)
    pk = keys.load_private_key(kit.guard_key_path).public_key()
    reports = {r.point_id: r.reason for r in verify(raw, "pii", trusted_keys={keys.key_id(pk): pk}, policy=cfg)}
    assert reports == {1: "model_mismatch", 2: "ok"}
    raw.close()


def test_the_async_client_strips_alike(tmp_path):
    kit = make_kit(tmp_path)

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_policy(kit), principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(
            size=DIM, distance=models.Distance.EUCLID))
        bob = owner.with_principal(kit.principal("bob", "support"))
        rng = np.random.default_rng(11)
        await qdrant_client.AsyncQdrantClient.upsert(owner, "pii", [
            _point(kit, 1, rng, MODEL_A), _point(kit, 2, rng, MODEL_B), _point(kit, 3, rng, None)])
        got = {
            "retrieve": {p.id: p.vector for p in await bob.retrieve("pii", [1, 2, 3], with_vectors=True)},
            "scroll": {p.id: p.vector for p in (await bob.scroll("pii", with_vectors=True))[0]},
            "query_points": {p.id: p.vector for p in (await bob.query_points(
                "pii", query=unit(rng), limit=5, with_vectors=True)).points},
            "query_batch_points": {p.id: p.vector for p in (await bob.query_batch_points("pii", [
                models.QueryRequest(query=unit(rng), limit=5, with_vector=True)]))[0].points},
        }
        return got

    for read, got in asyncio.run(main()).items():
        assert sorted(got) == [1, 2, 3], read
        assert got[1] is not None and got[3] is not None and got[2] is None, read


def test_point_id_and_mmr_queries_are_refused_while_a_vector_stripped_for_its_model_is_stored(tmp_path):
    # Flipped by h-rawleft2 (tests/test_raw_left_behind2.py): h-umodel3 pinned that under
    # noise_queries Qdrant searched with point 2's stored vector although reads strip it, the guard's
    # count of vectors left behind seeing only whether a receipt was there. It now also counts a
    # receipt naming another model than the one declared, so both forms are refused until point 2
    # is re-written or deleted.
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, noise_queries=True), embedder=Recorder())
    rng = np.random.default_rng(12)
    RawClient.upsert(owner, "pii", [_point(kit, 1, rng, MODEL_A), _point(kit, 2, rng, MODEL_B)])
    assert [p.vector is None for p in bob.retrieve("pii", [1, 2], with_vectors=True)] == [False, True]
    mmr = models.NearestQuery(nearest=unit(rng), mmr=models.Mmr(diversity=0.5))
    with pytest.raises(GuardRefusal, match="QUERY_REJECTED: query is a point id") as by_id:
        bob.query_points("pii", query=2, limit=5)
    with pytest.raises(GuardRefusal, match="QUERY_REJECTED: query.mmr asks Qdrant to re-rank") as by_mmr:
        bob.query_points("pii", query=mmr, query_text="plan", limit=5)
    for err in (by_id, by_mmr):
        assert "still holds 1 point(s)" in str(err.value) and "another embedding model" in str(err.value)
        assert err.value.details["unreceipted_points"] == 1
    owner.upsert("pii", [models.PointStruct(id=2, vector=unit(rng), payload={"t": "x"})])  # names no model now
    assert [p.id for p in bob.query_points("pii", query=2, limit=5).points] == [1]
    assert sorted(p.id for p in bob.query_points("pii", query=mmr, query_text="plan", limit=5).points) == [1, 2]
