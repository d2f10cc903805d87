"""Utility records name the embedding model they measured (record version 5, 2026-12-05).

A record bound the collection, mechanism, epsilon, dimension, vector name and distance, but not the
embedding model: two 384-d Cosine models share all of those, yet the same noise costs them
different recall drops, so a record measured on one vouched for writes embedded by the other. A
record now carries ``embedding_model`` (signed), and a policy that sets ``utility.embedding_model``
refuses writes under a record naming another model, or none.

Real local Qdrant, records measured by calibrate() on a real store and signed with the guard's
real Ed25519 key; the CLI runs on a real on-disk store.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json

import numpy as np
import pytest
from guardkit import audit_records, make_kit, models, staging_store
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal, QdrantClient, keys
from qdrant_guard.cli import main
from qdrant_guard.hashing_embedder import HashingEmbedder
from qdrant_guard.utility import UTILITY_DOMAIN, UtilityRecord, calibrate, verify_utility_record

DIM = 32
_VP = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
MODEL_A = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_B = "BAAI/bge-small-en-v1.5"  # also 384-d Cosine: dimension and distance cannot tell them apart


def _calibrate(kit, raw, queries, **kw):
    return calibrate(raw, "staging", queries, k=10, radius=0.01, epsilons=(0.02, 0.1, 0.5, 2.0), threshold=0.05,
                     signer=keys.load_private_key(kit.guard_key_path), progress=False, seed=1, **kw)


def _resigned(kit, rec, **changes):
    """``rec`` with ``changes``, signed again by the guard's own key (a valid record)."""
    out = dataclasses.replace(rec, signature=None, **changes)
    sig = keys.load_private_key(kit.guard_key_path).sign(UTILITY_DOMAIN + out.signed_bytes())
    return dataclasses.replace(out, signature=base64.b64encode(sig).decode("ascii"))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The kit, records of model A, of no named model (version 5) and of version 4, and the docs."""
    tmp = tmp_path_factory.mktemp("umodel")
    kit = make_kit(tmp)
    raw, docs, queries = staging_store(DIM)
    named = _calibrate(kit, raw, queries, embedding_model=MODEL_A)
    unnamed = _calibrate(kit, raw, queries)
    v4 = _resigned(kit, unnamed, version=4, n_measured_queries=None)
    paths = {}
    for key, rec in (("a", named), ("unnamed", unnamed), ("v4", v4)):
        paths[key] = tmp / f"utility-{key}.json"
        paths[key].write_text(rec.to_json())
    return kit, {"a": named, "unnamed": unnamed, "v4": v4}, paths, docs


def _policy(rec, record, model=None, **utility):
    utility = {"record": str(record), **utility}
    if model is not None:
        utility["embedding_model"] = model
    return {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
            "intent": {"enabled": False}, "noise": {"epsilon": rec.epsilon, "radius": 0.01}, "utility": utility}


def _writer(kit, rec, record, model=None, **utility):
    cfg = kit.config({"docs": _policy(rec, record, model, **utility)}, epsilon_ceiling={"PII": 5.0})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("docs", vectors_config=_VP)
    return owner, owner.with_principal(kit.principal("bob", "support"))


def _write(client, docs, pid=1):
    client.upsert("docs", [models.PointStruct(id=pid, vector=docs[pid].tolist())])


# --------------------------------------------------------------------------- the record


def test_a_calibrated_record_names_its_model_round_trips_and_verifies(setup):
    kit, recs, paths, _ = setup
    pub = keys.load_private_key(kit.guard_key_path).public_key()
    rec = recs["a"]
    assert rec.version == 6 and rec.embedding_model == MODEL_A
    assert rec.body()["embedding_model"] == MODEL_A
    back = UtilityRecord.from_json(paths["a"].read_text())
    assert back == rec and verify_utility_record(back, [pub])
    # Not named: the field is null, and still part of the signed body (it cannot be added later).
    plain = UtilityRecord.from_json(paths["unnamed"].read_text())
    assert plain.version == 6 and plain.embedding_model is None and "embedding_model" in plain.body()
    assert verify_utility_record(plain, [pub])


@pytest.mark.parametrize("edit", [{"embedding_model": MODEL_B}, {"embedding_model": None}])
def test_the_signature_covers_the_model_name(setup, edit):
    kit, recs, paths, _ = setup
    pub = keys.load_private_key(kit.guard_key_path).public_key()
    data = json.loads(paths["a"].read_text())
    data.update(edit)
    edited = UtilityRecord.from_json(json.dumps(data))
    assert edited.digest != recs["a"].digest
    assert not verify_utility_record(edited, [pub])
    # And a model cannot be written into an unnamed record.
    data = json.loads(paths["unnamed"].read_text())
    data["embedding_model"] = MODEL_A
    assert not verify_utility_record(UtilityRecord.from_json(json.dumps(data)), [pub])


def test_a_version_4_record_reads_as_before_without_the_field(setup):
    kit, recs, paths, _ = setup
    pub = keys.load_private_key(kit.guard_key_path).public_key()
    back = UtilityRecord.from_json(paths["v4"].read_text())
    assert back.version == 4 and back.embedding_model is None
    assert "embedding_model" not in back.body() and verify_utility_record(back, [pub])
    data = json.loads(paths["v4"].read_text())
    del data["embedding_model"]  # as a version-4 qdrant_guard wrote it
    assert verify_utility_record(UtilityRecord.from_json(json.dumps(data)), [pub])
    # A version-4 record cannot carry a model: its signature would not cover it.
    data["embedding_model"] = MODEL_A
    with pytest.raises(ValueError, match="'embedding_model' field, which records before version 5"):
        UtilityRecord.from_json(json.dumps(data))


@pytest.mark.parametrize("bad", [5, "", "   ", ["x"], True])
def test_a_wrong_typed_model_name_is_not_read_and_the_guard_says_so(setup, tmp_path, bad):
    kit, recs, paths, docs = setup
    data = json.loads(paths["a"].read_text())
    data["embedding_model"] = bad
    with pytest.raises(ValueError, match="needs 'embedding_model'"):
        UtilityRecord.from_json(json.dumps(data))
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    _, writer = _writer(kit, recs["a"], path)
    with pytest.raises(ConfigError) as err:
        _write(writer, docs)
    assert "embedding_model" in str(err.value) and "bad.json" in str(err.value)


def test_version_7_is_not_read(setup):
    _, _, paths, _ = setup
    data = json.loads(paths["a"].read_text())
    data["version"] = 7
    with pytest.raises(ValueError, match="reads versions 1 to 6"):
        UtilityRecord.from_json(json.dumps(data))


# --------------------------------------------------------------------------- calibrate


class _FastembedLike:
    """An embedder object naming its model the way fastembed's TextEmbedding does."""

    def __init__(self, model_name, dim):
        self.model_name = model_name
        self._inner = HashingEmbedder(dim)

    def embed(self, texts):
        return self._inner(texts)


@pytest.fixture(scope="module")
def text_store():
    texts = [f"note {i} about topic {i % 12} and project {i % 7} in week {i % 5}" for i in range(120)]
    emb = HashingEmbedder(DIM)
    raw = RawClient(":memory:")
    raw.create_collection("staging", vectors_config=_VP)
    raw.upsert("staging", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(emb(texts))])
    return raw, texts[:30]


def test_calibrate_takes_the_model_name_from_the_embedder(setup, text_store):
    kit = setup[0]
    raw, queries = text_store
    assert _calibrate(kit, raw, queries, embedder=HashingEmbedder(DIM)).embedding_model == f"qg-hashing-v1-{DIM}"
    bound = _FastembedLike(MODEL_B, DIM).embed  # a bound method: its object names the model
    assert _calibrate(kit, raw, queries, embedder=bound).embedding_model == MODEL_B
    assert _calibrate(kit, raw, queries, embedder=lambda ts: HashingEmbedder(DIM)(ts)).embedding_model is None
    # Given and matching the embedder's: kept.
    assert _calibrate(kit, raw, queries, embedder=bound, embedding_model=MODEL_B).embedding_model == MODEL_B


def test_calibrate_refuses_a_name_the_embedder_contradicts_and_bad_names(setup, text_store):
    kit = setup[0]
    raw, queries = text_store
    with pytest.raises(ValueError) as err:
        _calibrate(kit, raw, queries, embedder=_FastembedLike(MODEL_B, DIM).embed, embedding_model=MODEL_A)
    assert MODEL_A in str(err.value) and MODEL_B in str(err.value)
    with pytest.raises(TypeError, match="embedding_model"):
        _calibrate(kit, raw, queries, embedder=HashingEmbedder(DIM), embedding_model=7)
    with pytest.raises(ValueError, match="embedding_model"):
        _calibrate(kit, raw, queries, embedder=HashingEmbedder(DIM), embedding_model=" ")


# --------------------------------------------------------------------------- the guard


def test_a_record_of_another_model_refuses_writes_naming_both_and_the_fix(setup):
    kit, recs, paths, docs = setup
    owner, writer = _writer(kit, recs["a"], paths["a"], model=MODEL_B)
    with pytest.raises(GuardRefusal) as err:
        _write(writer, docs)
    msg = str(err.value)
    assert err.value.verdict == "UTILITY_DEGRADED"
    assert "model_mismatch" in msg and "'docs'" in msg and MODEL_A in msg and MODEL_B in msg
    assert "qdrant-guard calibrate --embedding-model BAAI/bge-small-en-v1.5" in msg
    assert "utility.embedding_model" in msg
    assert err.value.details["reasons"]["1"].startswith("model_mismatch: ")
    assert audit_records(kit)[-1]["verdict"] == "UTILITY_DEGRADED"
    assert owner.count("docs", exact=True).count == 0


def test_a_record_of_the_declared_model_vouches_as_before(setup):
    kit, recs, paths, docs = setup
    owner, writer = _writer(kit, recs["a"], paths["a"], model=MODEL_A)
    _write(writer, docs)
    assert owner.count("docs", exact=True).count == 1


def test_names_are_compared_exactly(setup):
    kit, recs, paths, docs = setup
    _, writer = _writer(kit, recs["a"], paths["a"], model="all-MiniLM-L6-v2")
    with pytest.raises(GuardRefusal, match="model_mismatch"):
        _write(writer, docs)


def test_the_mismatch_is_refused_in_async_too(setup):
    kit, recs, paths, docs = setup
    cfg = kit.config({"docs": _policy(recs["a"], paths["a"], MODEL_B)}, epsilon_ceiling={"PII": 5.0})

    async def run():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("docs", vectors_config=_VP)
        writer = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(GuardRefusal) as err:
            await writer.upsert("docs", [models.PointStruct(id=1, vector=docs[1].tolist())])
        assert err.value.verdict == "UTILITY_DEGRADED" and "model_mismatch" in str(err.value)
        assert MODEL_A in str(err.value) and MODEL_B in str(err.value)
        assert (await owner.count("docs", exact=True)).count == 0

    asyncio.run(run())


def test_a_receipted_write_is_checked_too(setup):
    # A writer's own receipts take the other path to the utility check.
    from qdrant_guard.noise import privatize
    from qdrant_guard.receipts import RECEIPT_KEY, ReceiptSigner, issue_receipt, receipts_for_payload, stored_form

    kit, recs, paths, docs = setup
    rec = recs["a"]
    signer = ReceiptSigner(keys.load_private_key(kit.guard_key_path))
    noised, params = privatize(np.asarray(docs[2], dtype=np.float32), mechanism="gaussian", epsilon=rec.epsilon,
                               delta=1e-6, radius=0.01, clip_norm=1.0)
    final = stored_form(noised, distance="Cosine")
    receipt = issue_receipt(signer, params=params, vector=final, collection="docs", point_id=2, vector_name="")
    point = models.PointStruct(id=2, vector=final.tolist(), payload={RECEIPT_KEY: receipts_for_payload({"": receipt})})
    owner, writer = _writer(kit, rec, paths["a"], model=MODEL_B)
    with pytest.raises(GuardRefusal) as err:
        writer.upsert("docs", [point])
    assert err.value.verdict == "UTILITY_DEGRADED" and "model_mismatch" in str(err.value)
    owner, writer = _writer(kit, rec, paths["a"], model=MODEL_A)
    writer.upsert("docs", [point])
    assert audit_records(kit)[-1]["verdict"] == "ALLOW_RECEIPTED"


@pytest.mark.parametrize("which, why", [("unnamed", "calibrated without --embedding-model"),
                                        ("v4", "predates record version 5")])
def test_a_record_naming_no_model_is_refused_when_the_policy_names_one(setup, which, why):
    kit, recs, paths, docs = setup
    owner, writer = _writer(kit, recs[which], paths[which], model=MODEL_A)
    with pytest.raises(GuardRefusal) as err:
        _write(writer, docs)
    msg = str(err.value)
    assert err.value.verdict == "UTILITY_DEGRADED" and "model_unnamed" in msg and why in msg
    assert MODEL_A in msg and "remove utility.embedding_model" in msg
    assert owner.count("docs", exact=True).count == 0


@pytest.mark.parametrize("which", ["a", "unnamed", "v4"])
def test_without_the_knob_any_record_vouches_as_before(setup, which):
    kit, recs, paths, docs = setup
    owner, writer = _writer(kit, recs[which], paths[which])
    _write(writer, docs)
    assert owner.count("docs", exact=True).count == 1


def test_enforce_false_refuses_nothing_for_the_model(setup):
    kit, recs, paths, docs = setup
    owner, writer = _writer(kit, recs["a"], paths["a"], model=MODEL_B, enforce=False)
    _write(writer, docs)
    assert owner.count("docs", exact=True).count == 1


CLIP = "openai/clip-vit-base-patch32"


@pytest.fixture(scope="module")
def named(setup, tmp_path_factory):
    """Records of vectors ``text`` (model A) and ``image`` (CLIP, and one naming model A), and docs."""
    kit = setup[0]
    tmp = tmp_path_factory.mktemp("umodel-named")
    _, docs, queries = staging_store(DIM)
    raw = RawClient(":memory:")
    raw.create_collection("staging", vectors_config={"text": _VP, "image": _VP})
    raw.upsert("staging", [models.PointStruct(id=i, vector={"text": v.tolist(), "image": v.tolist()})
                           for i, v in enumerate(docs)])
    paths = {}
    for key, vector, model in (("text", "text", MODEL_A), ("image", "image", CLIP), ("image_a", "image", MODEL_A)):
        rec = _calibrate(kit, raw, queries, vector_name=vector, embedding_model=model)
        paths[key] = tmp / f"{key}.json"
        paths[key].write_text(rec.to_json())
    return rec.epsilon, paths, docs


def _named_owner(kit, eps, paths, image_record, **models_keys):
    pol = {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False},
           "noise": {"epsilon": eps, "radius": 0.01},
           "utility": {"records": {"text": str(paths["text"]), "image": str(paths[image_record])}, **models_keys}}
    cfg = kit.config({"docs": pol}, epsilon_ceiling={"PII": 5.0})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("docs", vectors_config={"text": _VP, "image": _VP})
    return owner


def _named_write(owner, docs, vector, pid=1):
    owner.upsert("docs", [models.PointStruct(id=pid, vector={vector: docs[pid].tolist()})])


def test_records_of_named_vectors_are_held_to_the_collection_model(setup, named):
    kit = setup[0]
    eps, paths, docs = named
    owner = _named_owner(kit, eps, paths, "image_a", embedding_model=MODEL_A)
    _named_write(owner, docs, "text")
    _named_write(owner, docs, "image", 2)
    owner = _named_owner(kit, eps, paths, "image_a", embedding_model=MODEL_B)
    for vector in ("text", "image"):
        with pytest.raises(GuardRefusal) as err:
            _named_write(owner, docs, vector)
        assert "model_mismatch" in str(err.value) and "utility.embedding_model = " in str(err.value)


def test_embedding_models_holds_a_named_vector_to_its_own_model(setup, named):
    kit = setup[0]
    eps, paths, docs = named
    owner = _named_owner(kit, eps, paths, "image", embedding_model=MODEL_A, embedding_models={"image": CLIP})
    _named_write(owner, docs, "text")
    _named_write(owner, docs, "image", 2)
    assert owner.count("docs", exact=True).count == 2
    # The image vector's record names model A: the table's CLIP is what image writes are held to.
    owner = _named_owner(kit, eps, paths, "image_a", embedding_model=MODEL_A, embedding_models={"image": CLIP})
    _named_write(owner, docs, "text")
    with pytest.raises(GuardRefusal) as err:
        _named_write(owner, docs, "image", 2)
    msg = str(err.value)
    assert err.value.verdict == "UTILITY_DEGRADED" and "model_mismatch" in msg
    assert f'utility.embedding_models.image = "{CLIP}"' in msg and MODEL_A in msg
    # Listed in the table only, the other vectors are not checked.
    owner = _named_owner(kit, eps, paths, "image", embedding_models={"image": CLIP})
    _named_write(owner, docs, "text")
    _named_write(owner, docs, "image", 2)
    assert owner.count("docs", exact=True).count == 2


# --------------------------------------------------------------------------- the policy


@pytest.mark.parametrize("bad", [5, True, ["a"], ""])
def test_a_bad_policy_model_is_a_config_error_naming_the_key(setup, bad):
    kit, recs, paths, _ = setup
    with pytest.raises(ConfigError) as err:
        kit.config({"docs": _policy(recs["a"], paths["a"], bad)})
    assert "utility.embedding_model" in str(err.value)


@pytest.mark.parametrize("bad, says", [({"image": 5}, "valid string"), ({"image": " "}, "names no model"),
                                       ({"": CLIP}, "utility.embedding_model = "), ("clip", "expected a table")])
def test_a_bad_model_table_is_a_config_error_naming_the_key(setup, bad, says):
    kit, recs, paths, _ = setup
    pol = _policy(recs["a"], paths["a"])
    pol["utility"]["embedding_models"] = bad
    with pytest.raises(ConfigError) as err:
        kit.config({"docs": pol})
    assert "utility.embedding_models" in str(err.value) and says in str(err.value)


# --------------------------------------------------------------------------- the CLI


@pytest.fixture()
def clean_store(tmp_path):
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(40, 8))
    client = RawClient(path=str(tmp_path / "store"))
    client.create_collection("docs", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
    client.upsert("docs", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(vectors)])
    client.close()
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps(v.tolist()) + "\n" for v in vectors[:20]))
    return tmp_path / "store", queries


def _cli(store, queries, out, *extra):
    argv = ["calibrate", "--path", str(store), "--collection", "docs", "--queries", str(queries), "--out", str(out),
            "--no-progress", "--threshold", "0.9", "--epsilons", "1,8", *extra]
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's usage errors
        return int(exc.code or 0)


def test_the_cli_signs_the_named_model_into_the_record(setup, clean_store, tmp_path, capsys):
    kit = setup[0]
    out = tmp_path / "u.json"
    assert _cli(*clean_store, out, "--embedding-model", MODEL_B, "--key", str(kit.guard_key_path)) == 0
    assert f"model {MODEL_B!r}" in capsys.readouterr().out
    rec = UtilityRecord.from_json(out.read_text())
    assert rec.embedding_model == MODEL_B and rec.version == 6
    assert verify_utility_record(rec, [keys.load_private_key(kit.guard_key_path).public_key()])
    # Without the option, vector queries name no model.
    assert _cli(*clean_store, out) == 0
    assert UtilityRecord.from_json(out.read_text()).embedding_model is None


def test_the_cli_refuses_an_empty_model_name(clean_store, tmp_path, capsys):
    out = tmp_path / "u.json"
    assert _cli(*clean_store, out, "--embedding-model", " ") == 2
    err = capsys.readouterr().err
    assert "--embedding-model" in err and "names no model" in err and not out.exists()


def test_the_cli_names_its_own_model_for_text_queries():
    from qdrant_guard.evaluation.embed import MODEL_ID
    from qdrant_guard.calibrate_cli import _CliQueryEmbedder
    from qdrant_guard.utility import embedder_model_name, query_text_transform

    # Constructing it loads no model; the name is what `calibrate` signs for text queries.
    assert embedder_model_name(_CliQueryEmbedder(query_text_transform("raw"))) == MODEL_ID


def test_the_cli_refuses_a_model_its_text_queries_are_not_embedded_with(clean_store, tmp_path, capsys):
    from qdrant_guard.evaluation.embed import MODEL_ID

    store, _ = clean_store
    texts = tmp_path / "t.jsonl"
    texts.write_text('"where is the payroll file"\n"who approved the leave"\n')
    out = tmp_path / "u.json"
    # Refused before anything is embedded or measured: the record would name a model the queries were not made by.
    assert _cli(store, texts, out, "--embedding-model", "all-MiniLM-L6-v2") == 2
    err = capsys.readouterr().err
    assert "--embedding-model 'all-MiniLM-L6-v2'" in err and f"--embedding-model {MODEL_ID}" in err
    assert "Traceback" not in err and not out.exists()
