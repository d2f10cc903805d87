"""The declared embedding model is compared with the models the guard and a writer's signer name
(2026-12-05, branch h-umodel2).

``utility.embedding_model`` / ``utility.embedding_models`` held only utility records to the declared
model: a writer's receipt whose signed ``model_id`` named another model was stored, and the guard
embedded ``models.Document`` texts with an embedder of another model, unchecked. Now, for a vector
whose model the policy declares:

* a writer's receipt naming another model is refused on every write path that takes one
  (``NOISE_REQUIRED``, reason ``model_mismatch``), as one of another mechanism is; one naming no
  model is accepted (its signer named none);
* a Document the guard would embed with an embedder naming another model is a ConfigError before
  anything is embedded; an embedder naming no model is not checked;
* the guard's own receipts name its embedder's model only for vectors it embedded (it named it for
  vectors it was given too, whose model it does not know);
* ``receipts.verify(policy=...)`` and ``qdrant-guard receipt verify --policy`` report
  ``model_mismatch``.

Real local Qdrant, real Ed25519 keys, the real hashing embedder; no mocks.
"""
from __future__ import annotations

import asyncio
import json
import textwrap

import numpy as np
import pytest
from guardkit import (DIM, Recorder, audit_records, count, create, guard_signer, make_kit, models, receipt_writes,
                      receipted_point, receipted_vector, unit)
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal, QdrantClient, keys
from qdrant_guard.cli import main as cli_main
from qdrant_guard.hashing_embedder import HashingEmbedder
from qdrant_guard.receipts import (REASONS, RECEIPT_KEY, receipts_for_payload, receipts_from_payload, verify,
                                   verify_receipt)

MODEL_A = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_B = "BAAI/bge-small-en-v1.5"
CLIP = "openai/clip-vit-base-patch32"
HASHING = f"qg-hashing-v1-{DIM}"
WRITES = ["upsert", "upload_points", "upload_collection", "batch_update_points"]


def _policy(kit, model=MODEL_A, *, noise_on_write=False, **utility):
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
           "noise_on_write": noise_on_write, "intent": {"enabled": False}, "diversity": {"enabled": False},
           "noise": {"epsilon": 1.0, "radius": 0.01}, "utility": dict(utility)}
    if model is not None:
        pol["utility"]["embedding_model"] = model
    return kit.config({"pii": pol})


def _receipt(kit, pid, vector, vname, model_id):
    return receipted_vector(guard_signer(kit), pid, vector, model_id=model_id, vname=vname)


def _point(kit, pid, rng, model_id):
    """A point noised at the collection's own noise and receipted by the guard's key (trusted), whose
    receipt's signed ``model_id`` is ``model_id``."""
    return receipted_point(kit, pid, rng, model_id=model_id)


_writes = receipt_writes


def _clients(kit, cfg, **kw):
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), **kw)
    create(owner, "pii", distance=models.Distance.EUCLID)
    return owner, owner.with_principal(kit.principal("bob", "support"))


def _assert_model_refusal(err, bad_id, *, have=MODEL_B, want=MODEL_A, key="utility.embedding_model",
                          vector="<unnamed>"):
    assert err.verdict == "NOISE_REQUIRED"
    text = str(err)
    # Names the collection, the vector, both models, the key and the fix.
    assert "collection 'pii'" in text and f"vector {vector!r}" in text
    assert f"names embedding model {have!r}" in text and f'declares {key} = "{want}"' in text
    assert f"sign a fresh receipt with model_id={want!r}" in text and f"or correct {key}" in text
    assert err.details["reasons"][str(bad_id)].startswith(f"model_mismatch: the receipt of vector {vector!r}")
    assert err.point_ids == [bad_id]


# ------------------------------------------------------------------ a writer's receipts (sync)

@pytest.mark.parametrize("call", WRITES)
def test_a_receipt_naming_another_model_is_refused_on_every_write_path(tmp_path, call):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit))
    rng = np.random.default_rng(1)
    good, bad = _point(kit, 1, rng, MODEL_A), _point(kit, 2, rng, MODEL_B)
    with pytest.raises(GuardRefusal) as ei:
        _writes(bob, [good, bad])[call]()
    _assert_model_refusal(ei.value, 2)
    assert audit_records(kit)[-1]["verdict"] == "NOISE_REQUIRED"
    assert count(owner, "pii") == 0  # the good point of the refused call is not written either
    # The same call with a receipt naming the declared model is accepted.
    _writes(bob, [good, _point(kit, 2, rng, MODEL_A)])[call]()
    assert count(owner, "pii") == 2


@pytest.mark.parametrize("call", WRITES)
def test_a_receipt_naming_no_model_is_accepted(tmp_path, call):
    # Pins what the check leaves alone: the signer named no model, so there is nothing to compare.
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit))
    rng = np.random.default_rng(2)
    _writes(bob, [_point(kit, 1, rng, None), _point(kit, 2, rng, MODEL_A)])[call]()
    assert count(owner, "pii") == 2
    assert audit_records(kit)[-1]["verdict"] == "ALLOW_RECEIPTED"


@pytest.mark.parametrize("utility", [{}, {"embedding_models": {"image": CLIP}}])
def test_without_a_declared_model_any_receipt_model_is_accepted(tmp_path, utility):
    # Pins the unset knob (and a table naming other vectors only): nothing changes.
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, None, **utility))
    rng = np.random.default_rng(3)
    bob.upsert("pii", [_point(kit, 1, rng, MODEL_B), _point(kit, 2, rng, "anything")])
    assert count(owner, "pii") == 2


def test_names_are_compared_exactly(tmp_path):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit))
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [_point(kit, 1, np.random.default_rng(4), "all-MiniLM-L6-v2")])
    _assert_model_refusal(ei.value, 1, have="all-MiniLM-L6-v2")


def test_the_refusal_does_not_depend_on_a_record_or_enforce(tmp_path):
    # The declaration states the collection's model; vectors of two models do not rank together
    # whether or not a utility record is consulted, so enforce = false does not let one in.
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, enforce=False))
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [_point(kit, 1, np.random.default_rng(5), MODEL_B)])
    _assert_model_refusal(ei.value, 1)


def test_embedding_models_holds_a_named_vector_to_its_own_model(tmp_path):
    kit = make_kit(tmp_path)
    cfg = _policy(kit, MODEL_A, embedding_models={"image": CLIP})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID, named=("text", "image"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    rng = np.random.default_rng(6)

    def point(pid, text_model, image_model):
        tv, tr = _receipt(kit, pid, unit(rng), "text", text_model)
        iv, ir = _receipt(kit, pid, unit(rng), "image", image_model)
        return models.PointStruct(id=pid, vector={"text": tv, "image": iv},
                                  payload={RECEIPT_KEY: receipts_for_payload({"text": tr, "image": ir})})

    bob.upsert("pii", [point(1, MODEL_A, CLIP)])
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [point(2, MODEL_A, MODEL_A)])  # the image vector is held to CLIP, not model A
    _assert_model_refusal(ei.value, 2, have=MODEL_A, want=CLIP, key="utility.embedding_models.image",
                          vector="image")
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [point(3, CLIP, CLIP)])  # the text vector falls back to embedding_model
    _assert_model_refusal(ei.value, 3, have=CLIP, want=MODEL_A, vector="text")
    assert count(owner, "pii") == 1


def test_the_directive_keeps_the_generic_advice_for_other_faulty_points(tmp_path):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit))
    rng = np.random.default_rng(7)
    unreceipted = models.PointStruct(id=3, vector=unit(rng), payload={"t": "x"})
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [_point(kit, 2, rng, MODEL_B), unreceipted])
    assert ei.value.verdict == "NOISE_REQUIRED" and set(ei.value.point_ids) == {2, 3}
    assert f"names embedding model {MODEL_B!r}" in ei.value.directive
    assert "; other points: sensitive vectors need a valid reconstruction-resistance receipt" in ei.value.directive


def test_a_str_subclass_model_id_is_compared_by_its_characters(tmp_path):
    # A receipt handed over as a dict may hold a str subclass that equals every name; the signature
    # covers its characters, which name model B.
    class Agreeable(str):
        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

        __hash__ = str.__hash__

    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit))
    point = _point(kit, 1, np.random.default_rng(8), MODEL_B)
    container = point.payload[RECEIPT_KEY]
    rec = dict(receipts_from_payload(point.payload)[""])
    rec["model_id"] = Agreeable(MODEL_B)
    check = verify_receipt(rec, vector=point.vector, collection="pii", point_id=1, trusted_keys={
        keys.key_id(keys.load_private_key(kit.guard_key_path).public_key()):
            keys.load_private_key(kit.guard_key_path).public_key()})
    assert check.ok and type(check.model_id) is str and check.model_id == MODEL_B
    payload = {"t": "x", RECEIPT_KEY: {**container, "vectors": {"": rec}}}
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [models.PointStruct(id=1, vector=point.vector, payload=payload)])
    _assert_model_refusal(ei.value, 1)


# ------------------------------------------------------------------ a writer's receipts (async)

def test_the_async_client_refuses_every_write_path_alike(tmp_path):
    kit = make_kit(tmp_path)

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_policy(kit), principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(
            size=DIM, distance=models.Distance.EUCLID))
        bob = owner.with_principal(kit.principal("bob", "support"))
        rng = np.random.default_rng(9)
        good, bad = _point(kit, 1, rng, MODEL_A), _point(kit, 2, rng, MODEL_B)
        errors = {}
        for call, run in _writes(bob, [good, bad]).items():
            with pytest.raises(GuardRefusal) as ei:
                await run()
            errors[call] = ei.value
        refused_count = (await owner.count("pii")).count
        await bob.upsert("pii", [good, _point(kit, 2, rng, None)])  # null: accepted
        return errors, refused_count, (await owner.count("pii")).count

    errors, refused_count, stored = asyncio.run(main())
    assert sorted(errors) == sorted(WRITES)
    for err in errors.values():
        _assert_model_refusal(err, 2)
    assert refused_count == 0 and stored == 2


# ------------------------------------------------------------------ the guard's own embedder

def _doc_point(pid, text="a note about the quarterly plan"):
    return models.PointStruct(id=pid, vector=models.Document(text=text, model="any"), payload={"t": "x"})


def _assert_embedder_refusal(err, *, have=HASHING, want=MODEL_A, key="utility.embedding_model", vector="<unnamed>"):
    text = str(err)
    assert "collection 'pii'" in text and f"vector {vector!r}" in text and "models.Document" in text
    assert f"embedder's model {have!r}" in text and f'declares {key} = "{want}"' in text
    assert f"Pass embedder= an embedder of {want!r}" in text and f"or correct {key}" in text
    assert "Nothing was embedded or written" in text


def test_a_document_for_another_model_than_the_embedders_is_refused_before_embedding(tmp_path):
    kit = make_kit(tmp_path)
    embed = Recorder()  # names qg-hashing-v1-16
    owner, bob = _clients(kit, _policy(kit, noise_on_write=True), embedder=embed)
    for client in (bob, owner):  # noised or raw in boundary: the embedder's model is wrong for both
        with pytest.raises(ConfigError) as ei:
            client.upsert("pii", [_doc_point(1)])
        _assert_embedder_refusal(ei.value)
    assert embed.seen == [] and count(owner, "pii") == 0
    # update_vectors embeds Documents too.
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(10)))])
    with pytest.raises(ConfigError) as ei:
        owner.update_vectors("pii", [models.PointVectors(id=1, vector=models.Document(text="x", model="any"))])
    _assert_embedder_refusal(ei.value)
    assert embed.seen == []


def test_the_async_client_refuses_the_embedder_alike(tmp_path):
    kit = make_kit(tmp_path)
    embed = Recorder()

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_policy(kit, noise_on_write=True),
                                  principal=kit.principal("alice", "hr"), embedder=embed)
        await owner.create_collection("pii", vectors_config=models.VectorParams(
            size=DIM, distance=models.Distance.EUCLID))
        bob = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(ConfigError) as ei:
            await bob.upsert("pii", [_doc_point(1)])
        return ei.value, (await owner.count("pii")).count

    err, stored = asyncio.run(main())
    _assert_embedder_refusal(err)
    assert stored == 0 and embed.seen == []


class _NamedLike:
    """An embedder object naming its model as fastembed's TextEmbedding does (``model_name``)."""

    def __init__(self, model_name):
        self.model_name = model_name
        self._inner = HashingEmbedder(DIM)

    def embed(self, texts):
        return self._inner(texts)


def _stored_model_ids(owner):
    records, _ = RawClient.scroll(owner, "pii", with_payload=True, limit=100)
    return {r.id: receipts_from_payload(r.payload)[""]["model_id"] for r in records}


def test_an_embedder_of_the_declared_model_embeds_and_its_receipts_name_it(tmp_path):
    kit = make_kit(tmp_path)
    # model_name on the object whose bound method is the embedder: the same name calibrate reads.
    owner, bob = _clients(kit, _policy(kit, noise_on_write=True), embedder=_NamedLike(MODEL_A).embed)
    bob.upsert("pii", [_doc_point(1)])
    assert _stored_model_ids(owner) == {1: MODEL_A}
    # ... and it is held to the declared model like a model_id.
    owner, bob = _clients(kit, _policy(kit, MODEL_B, noise_on_write=True), embedder=_NamedLike(MODEL_A).embed)
    with pytest.raises(ConfigError) as ei:
        bob.upsert("pii", [_doc_point(1)])
    _assert_embedder_refusal(ei.value, have=MODEL_A, want=MODEL_B)


def test_an_embedder_naming_no_model_is_not_checked(tmp_path):
    # Pins the decision: the guard cannot tell an unnamed embedder's model; its receipts name none.
    kit = make_kit(tmp_path)
    inner = HashingEmbedder(DIM)
    owner, bob = _clients(kit, _policy(kit, noise_on_write=True), embedder=lambda texts: inner(texts))
    bob.upsert("pii", [_doc_point(1)])
    assert _stored_model_ids(owner) == {1: None}


def test_the_embedder_is_checked_against_the_vector_it_embeds(tmp_path):
    # A collection of text (the embedder's model) and image vectors (CLIP, embedded elsewhere): the
    # embedder is right for text and not refused for it; a Document for the image vector is.
    kit = make_kit(tmp_path)
    cfg = _policy(kit, HASHING, noise_on_write=True, embedding_models={"image": CLIP})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=Recorder())
    create(owner, "pii", distance=models.Distance.EUCLID, named=("text", "image"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    rng = np.random.default_rng(11)
    bob.upsert("pii", [models.PointStruct(id=1, vector={"text": models.Document(text="plan", model="any"),
                                                        "image": unit(rng)})])
    with pytest.raises(ConfigError) as ei:
        bob.upsert("pii", [models.PointStruct(id=2, vector={"image": models.Document(text="plan", model="any")})])
    _assert_embedder_refusal(ei.value, want=CLIP, key="utility.embedding_models.image", vector="image")
    records, _ = RawClient.scroll(owner, "pii", with_payload=True, limit=10)
    rec = receipts_from_payload(records[0].payload)
    # The image vector was given, not embedded by the guard: its receipt names no model.
    assert rec["text"]["model_id"] == HASHING and rec["image"]["model_id"] is None


def test_a_given_vector_the_guard_noises_names_no_model(tmp_path):
    # The guard signed its embedder's model into receipts of vectors a writer embedded elsewhere:
    # a claim about a vector it did not make (and, declared otherwise, a model_mismatch in verify).
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, None, noise_on_write=True), embedder=HashingEmbedder(DIM))
    bob.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(12))), _doc_point(2)])
    assert _stored_model_ids(owner) == {1: None, 2: HASHING}


# ------------------------------------------------------------------ receipts.verify and the CLI

def _raw_store(kit, path=":memory:"):
    raw = RawClient(path) if path == ":memory:" else RawClient(path=path)
    raw.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.EUCLID))
    rng = np.random.default_rng(13)
    raw.upsert("pii", [_point(kit, 1, rng, MODEL_A), _point(kit, 2, rng, MODEL_B), _point(kit, 3, rng, None)])
    return raw


def test_verify_with_a_policy_reports_model_mismatch(tmp_path):
    kit = make_kit(tmp_path)
    raw = _raw_store(kit)
    pk = keys.load_private_key(kit.guard_key_path).public_key()
    trusted = {keys.key_id(pk): pk}
    assert [r.reason for r in verify(raw, "pii", trusted_keys=trusted)] == ["ok", "ok", "ok"]
    cfg = _policy(kit)
    for policy in (cfg, cfg.policy_for("pii")):
        got = {r.point_id: r for r in verify(raw, "pii", trusted_keys=trusted, policy=policy)}
        assert got[1].ok and got[3].ok and got[1].check.model_id == MODEL_A and got[3].check.model_id is None
        assert got[2].reason == "model_mismatch" and got[2].check.model_id == MODEL_B
        assert got[2].check.params is not None and got[2].check.key_id == keys.key_id(pk)
        assert "collection 'pii' declares utility.embedding_model" in got[2].check.detail
    # Without a declared model, nothing is compared.
    assert all(r.ok for r in verify(raw, "pii", trusted_keys=trusted, policy=_policy(kit, None)))
    assert "model_mismatch" in REASONS


def test_the_cli_reports_model_mismatch_with_policy(tmp_path, capsys):
    kit = make_kit(tmp_path)
    store = str(tmp_path / "store")
    _raw_store(kit, store).close()
    policy = tmp_path / "policy.toml"
    policy.write_text(textwrap.dedent(f"""\
        signing_key = "{kit.guard_key_path}"

        [boundaries.hr]
        authority_keys = ["{kit.authority_pub['hr']}"]

        [collections.pii]
        class = "PII"
        owner = "hr"
        noise = {{ epsilon = 1.0, radius = 0.01 }}
        utility = {{ embedding_model = "{MODEL_A}" }}
        """))
    assert cli_main(["receipt", "verify", "--path", store, "--collection", "pii", "--policy", str(policy)]) == 1
    lines = capsys.readouterr().out.splitlines()
    bad = [json.loads(line) for line in lines[:-1]]
    assert [(b["id"], b["reason"]) for b in bad] == [("2", "model_mismatch")]
    assert MODEL_B in bad[0]["detail"] and MODEL_A in bad[0]["detail"]
    assert lines[-1].startswith("2/3 receipted vectors verify")
