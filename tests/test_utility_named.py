"""One utility record per named vector (``[collections.NAME.utility] records``).

A record carries the dimension it was calibrated on, so with one ``record`` a collection whose
named vectors differ in dimension could write only the calibrated vector while ``enforce`` was on.
Records from version 3 on also carry the calibrated vector's name (signed), and a policy can give
each named vector its record. Real local Qdrant, real Ed25519 signatures, real calibration.
"""
from __future__ import annotations

import asyncio
import base64
import dataclasses
import json

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from guardkit import audit_records, make_kit
from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal, QdrantClient, keys
from qdrant_guard.policy import load_policy
from qdrant_guard.utility import UTILITY_DOMAIN, UtilityRecord, calibrate, verify_utility_record

DIMS = {"text": 16, "image": 24, "title": 16}
EPSILONS = (0.1, 0.5, 2.0, 8.0, 32.0)


def _unit_clusters(dim: int, seed: int, n: int = 200, clusters: int = 20) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim))
    x = centres[rng.integers(0, clusters, n)] + 0.35 * rng.normal(size=(n, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _staging(path=None):
    """A raw store whose collection ``staging`` has the named vectors of DIMS, and their docs."""
    raw = RawClient(":memory:") if path is None else RawClient(path=str(path))
    raw.create_collection("staging", vectors_config={
        name: models.VectorParams(size=dim, distance=models.Distance.COSINE) for name, dim in DIMS.items()})
    docs = {name: _unit_clusters(dim, seed) for seed, (name, dim) in enumerate(DIMS.items())}
    raw.upsert("staging", [models.PointStruct(id=i, vector={name: docs[name][i].tolist() for name in DIMS})
                           for i in range(200)])
    return raw, docs


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The kit, one signed record per vector of text and image (files), and the staging docs."""
    tmp = tmp_path_factory.mktemp("named")
    kit = make_kit(tmp)
    raw, docs = _staging()
    signer = keys.load_private_key(kit.guard_key_path)
    recs, paths = {}, {}
    for name in ("text", "image"):
        queries = (docs[name][:40] + 0.05 * np.random.default_rng(9).normal(size=(40, DIMS[name]))).tolist()
        recs[name] = calibrate(raw, "staging", queries, k=10, radius=0.01, epsilons=EPSILONS, threshold=0.1,
                               signer=signer, progress=False, seed=1, vector_name=name)
        paths[name] = tmp / f"utility-{name}.json"
        paths[name].write_text(recs[name].to_json())
    raw.close()
    return kit, recs, paths, docs


def _epsilon(recs) -> float:
    # One noise level for the collection: every record passes at its largest chosen epsilon (all
    # levels above a record's chosen one pass, by how calibrate chooses).
    return max(r.epsilon for r in recs.values())


def _writer(kit, utility, epsilon, vectors=("text", "image"), client=QdrantClient):
    """bob@support's view of collection ``pii`` (named ``vectors``), which he writes noised."""
    cfg = kit.config(
        {"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                 "noise": {"epsilon": epsilon, "radius": 0.01}, "intent": {"enabled": False},
                 "utility": utility}},
        epsilon_ceiling={"PII": 40.0},
    )
    owner = client(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    config = {n: models.VectorParams(size=DIMS[n], distance=models.Distance.COSINE) for n in vectors}
    return owner, config, owner.with_principal(kit.principal("bob", "support"))


def _open(kit, utility, epsilon, vectors=("text", "image")):
    owner, config, bob = _writer(kit, utility, epsilon, vectors)
    owner.create_collection("pii", vectors_config=config)
    return bob


def _point(docs, pid, *names):
    return models.PointStruct(id=pid, vector={n: docs[n][pid].tolist() for n in names})


def _records(setup, *names):
    _, _, paths, _ = setup
    return {"records": {n: str(paths[n]) for n in names}}


# --------------------------------------------------------------------------- records by vector


def test_calibrate_records_the_vector_it_measured_and_signs_it(setup):
    kit, recs, _, _ = setup
    for name in ("text", "image"):
        rec = recs[name]
        assert (rec.vector_name, rec.dim, rec.version) == (name, DIMS[name], 6)
        assert rec.body()["vector_name"] == name  # in the signed body
        assert verify_utility_record(UtilityRecord.from_json(rec.to_json()),
                                     [keys.load_private_key(kit.guard_key_path).public_key()])


def test_each_named_vector_is_written_under_its_own_record(setup):
    kit, recs, _, docs = setup
    bob = _open(kit, _records(setup, "text", "image"), _epsilon(recs))
    bob.upsert("pii", [_point(docs, 0, "text", "image")])
    last = audit_records(kit)[-1]
    assert last["verdict"] == "ALLOW_NOISED"
    # The manifest names the record applied to each vector written.
    assert last["manifest"]["retrieval_utility_guard_hash"] == {"image": recs["image"].digest,
                                                               "text": recs["text"].digest}
    bob.upsert("pii", [_point(docs, 1, "image")])
    assert audit_records(kit)[-1]["manifest"]["retrieval_utility_guard_hash"] == {"image": recs["image"].digest}
    assert bob._origin.count("pii").count == 2


def test_with_one_record_the_other_vector_was_always_refused(setup):
    # The limit this file lifts: one record of 16-d "text" refuses every 24-d "image" write.
    kit, recs, paths, docs = setup
    bob = _open(kit, {"record": str(paths["text"])}, _epsilon(recs))
    bob.upsert("pii", [_point(docs, 0, "text")])
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [_point(docs, 1, "image")])
    assert ei.value.verdict == "UTILITY_DEGRADED"


def test_a_vector_without_a_record_is_refused_naming_it_and_how_to_calibrate_it(setup):
    kit, recs, _, docs = setup
    bob = _open(kit, _records(setup, "text"), _epsilon(recs))
    bob.upsert("pii", [_point(docs, 0, "text")])
    for point in (_point(docs, 1, "image"), _point(docs, 2, "text", "image")):
        with pytest.raises(GuardRefusal) as ei:
            bob.upsert("pii", [point])
        assert ei.value.verdict == "UTILITY_DEGRADED"
        msg = str(ei.value)
        assert "vector 'image' has no utility record" in msg and "utility.records lists 'text'" in msg
        assert "qdrant-guard calibrate" in msg and "--vector-name image" in msg
        assert 'add image = "FILE" to utility.records' in msg
        assert "use a measured passing epsilon" not in msg  # the generic advice does not apply
        last = audit_records(kit)[-1]
        assert last["verdict"] == "UTILITY_DEGRADED"
        assert last["manifest"]["retrieval_utility_guard_hash"] == (
            {"image": None} if len(point.vector) == 1 else {"image": None, "text": recs["text"].digest})
    assert bob._origin.count("pii").count == 1


def test_enforce_false_writes_a_vector_without_a_record_and_says_it_had_none(setup):
    kit, recs, _, docs = setup
    bob = _open(kit, {**_records(setup, "text"), "enforce": False}, _epsilon(recs))
    bob.upsert("pii", [_point(docs, 0, "image")])
    assert audit_records(kit)[-1]["manifest"]["retrieval_utility_guard_hash"] == {"image": None}


def test_a_receipted_vector_is_checked_against_its_own_vectors_record(setup):
    # A writer's own receipts take the other path to the utility check: it must use the
    # receipt's vector name too.
    from qdrant_guard.noise import privatize
    from qdrant_guard.receipts import RECEIPT_KEY, ReceiptSigner, issue_receipt, receipts_for_payload, stored_form

    kit, recs, _, docs = setup
    eps = _epsilon(recs)
    bob = _open(kit, _records(setup, "text"), eps)
    signer = ReceiptSigner(keys.load_private_key(kit.guard_key_path))

    def receipted(pid, name):
        noised, params = privatize(np.asarray(docs[name][pid], dtype=np.float32), mechanism="gaussian",
                                   epsilon=eps, delta=1e-6, radius=0.01, clip_norm=1.0)
        final = stored_form(noised, distance="Cosine")
        rec = issue_receipt(signer, params=params, vector=final, collection="pii", point_id=pid, vector_name=name)
        return models.PointStruct(id=pid, vector={name: final.tolist()},
                                  payload={RECEIPT_KEY: receipts_for_payload({name: rec})})

    bob.upsert("pii", [receipted(0, "text")])
    assert audit_records(kit)[-1]["verdict"] == "ALLOW_RECEIPTED"
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [receipted(1, "image")])
    assert ei.value.verdict == "UTILITY_DEGRADED" and "vector 'image' has no utility record" in str(ei.value)


def test_records_on_a_collection_with_an_unnamed_vector_refuse_its_writes_saying_to_use_record(setup):
    kit, recs, _, docs = setup
    owner, _, bob = _writer(kit, _records(setup, "text"), _epsilon(recs))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [models.PointStruct(id=1, vector=docs["text"][0].tolist())])
    assert ei.value.verdict == "UTILITY_DEGRADED"
    assert "unnamed vector has no utility record" in str(ei.value) and "utility.record," in str(ei.value)


def test_a_record_listed_under_another_vector_is_a_config_error_at_the_first_write(setup):
    kit, recs, paths, docs = setup
    bob = _open(kit, {"records": {"text": str(paths["text"]), "image": str(paths["text"])}}, _epsilon(recs))
    # Any first write, even of the correctly listed vector: the policy is wrong, not the write.
    with pytest.raises(ConfigError) as ei:
        bob.upsert("pii", [_point(docs, 0, "text")])
    msg = str(ei.value)
    assert "utility.records.image" in msg and "calibrated for vector 'text', not 'image'" in msg
    assert "--vector-name image" in msg and f"text = {json.dumps(str(paths['text']))}" in msg
    assert bob._origin.count("pii").count == 0


def test_an_old_record_without_a_vector_name_may_be_listed_under_any_vector(setup, tmp_path):
    # A version-2 record names no vector (only its dimension): the policy's table names it.
    kit, recs, _, docs = setup
    path = tmp_path / "v2-image.json"
    path.write_text(_resigned(kit, recs["image"], version=2, vector_name=None, distance=None,
                              n_measured_queries=None).to_json())
    bob = _open(kit, {"records": {"text": str(setup[2]["text"]), "image": str(path)}}, _epsilon(recs))
    bob.upsert("pii", [_point(docs, 0, "text", "image")])
    assert bob._origin.count("pii").count == 1


# --------------------------------------------------------------------------- the policy keys


def _policy_file(tmp_path, utility_toml: str):
    p = tmp_path / "policy.toml"
    p.write_text("[collections.c]\nclass = \"PII\"\n[collections.c.utility]\n" + utility_toml)
    return p


@pytest.mark.parametrize("toml, expected", [
    ('record = "u.json"\nrecords = { text = "t.json" }\n',
     ["collections.c.utility", "utility.record and utility.records are both set", "use utility.records alone"]),
    ('records = { "" = "u.json" }\n', ["collections.c.utility.records", 'utility.record = "PATH"']),
    ('records = { text = "" }\n', ["collections.c.utility.records", "empty path",
                                   "--vector-name text --out FILE"]),
    ('records = { text = 3 }\n', ["collections.c.utility.records.text", "valid string"]),
])
def test_records_policy_mistakes_are_refused_at_load_naming_the_key_and_the_fix(tmp_path, toml, expected):
    with pytest.raises(ConfigError) as ei:
        load_policy(_policy_file(tmp_path, toml))
    for text in expected:
        assert text in str(ei.value), (text, str(ei.value))


def test_records_paths_are_resolved_against_the_policy_file(tmp_path):
    cfg = load_policy(_policy_file(tmp_path, 'records = { text = "r/t.json", image = "/abs/i.json" }\n'))
    assert cfg.policy_for("c").utility.records == {"text": str(tmp_path.resolve() / "r/t.json"),
                                                   "image": "/abs/i.json"}


# --------------------------------------------------------------------------- the signed vector name


def _resigned(kit, rec, **changes):
    """``rec`` with ``changes``, signed again by the kit's guard key (a genuine record of that form)."""
    new = dataclasses.replace(rec, signature=None, **changes)
    sig = keys.load_private_key(kit.guard_key_path).sign(UTILITY_DOMAIN + new.signed_bytes())
    return dataclasses.replace(new, signature=base64.b64encode(sig).decode("ascii"))


def test_a_record_edited_to_claim_another_vector_fails_verification(setup, tmp_path):
    kit, recs, _, docs = setup
    trusted = [keys.load_private_key(kit.guard_key_path).public_key()]
    data = json.loads(recs["text"].to_json())
    data["vector_name"] = "title"  # another 16-d vector: the dimension check would not notice
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data))
    assert not verify_utility_record(UtilityRecord.from_json(forged.read_text()), trusted)
    bob = _open(kit, {"records": {"title": str(forged)}}, _epsilon(recs), vectors=("text", "title"))
    with pytest.raises(ConfigError, match="does not verify"):
        bob.upsert("pii", [_point(docs, 0, "title")])
    assert bob._origin.count("pii").count == 0


def test_a_record_downgraded_to_version_2_to_drop_its_vector_name_fails_verification(setup):
    kit, recs, _, _ = setup
    trusted = [keys.load_private_key(kit.guard_key_path).public_key()]
    data = json.loads(recs["text"].to_json())
    del data["vector_name"], data["distance"], data["n_measured_queries"]
    data["version"] = 2
    forged = UtilityRecord.from_json(json.dumps(data))  # a well-formed version-2 record ...
    assert forged.vector_name is None and not verify_utility_record(forged, trusted)  # ... not signed as such


@pytest.mark.parametrize("edit, message", [
    ({"vector_name": None}, "needs 'vector_name'"),
    ({"vector_name": 7}, "needs 'vector_name'"),
    ({"version": 2}, "before version 3 do not carry"),
])
def test_a_record_whose_version_and_vector_name_disagree_is_not_read(setup, edit, message):
    _, recs, _, _ = setup
    data = json.loads(recs["text"].to_json())
    data.update(edit)
    with pytest.raises(ValueError, match=message):
        UtilityRecord.from_json(json.dumps(data))


# --------------------------------------------------------------------------- one record, as before


def test_a_single_record_without_a_vector_name_applies_to_every_vector_as_before(setup, tmp_path):
    # Version-2 records (no vector name) under utility.record: unchanged, any vector of its dimension.
    kit, recs, _, docs = setup
    path = tmp_path / "v2-text.json"
    old = _resigned(kit, recs["text"], version=2, vector_name=None, distance=None, n_measured_queries=None)
    path.write_text(old.to_json())
    bob = _open(kit, {"record": str(path)}, _epsilon(recs), vectors=("text", "title"))
    bob.upsert("pii", [_point(docs, 0, "text", "title")])
    assert audit_records(kit)[-1]["manifest"]["retrieval_utility_guard_hash"] == old.digest  # a string, as before


def test_a_single_record_of_a_named_vector_vouches_for_that_vector_only(setup):
    # "title" has text's dimension, but its embeddings were never measured under this noise.
    kit, recs, paths, docs = setup
    bob = _open(kit, {"record": str(paths["text"])}, _epsilon(recs), vectors=("text", "title"))
    bob.upsert("pii", [_point(docs, 0, "text")])
    assert audit_records(kit)[-1]["manifest"]["retrieval_utility_guard_hash"] == recs["text"].digest
    # Alone, and beside a text vector of the same dimension in one point (one check per vector
    # name and dimension, not per dimension).
    for point in (_point(docs, 1, "title"), _point(docs, 2, "text", "title")):
        with pytest.raises(GuardRefusal) as ei:
            bob.upsert("pii", [point])
        assert ei.value.verdict == "UTILITY_DEGRADED"
        msg = str(ei.value)
        assert "calibrated for vector 'text', not 'title'" in msg and "--vector-name title" in msg
        assert "utility.records" in msg
    assert bob._origin.count("pii").count == 1


def test_a_record_of_an_unnamed_vector_applies_under_record_as_before(setup, tmp_path):
    kit, recs, _, docs = setup
    raw = RawClient(":memory:")
    raw.create_collection("flat", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
    raw.upsert("flat", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(docs["text"])])
    rec = calibrate(raw, "flat", docs["text"][:30].tolist(), radius=0.01, epsilons=EPSILONS, threshold=0.1,
                    signer=keys.load_private_key(kit.guard_key_path), progress=False, seed=1)
    assert rec.vector_name == ""
    path = tmp_path / "flat.json"
    path.write_text(rec.to_json())
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                              "noise": {"epsilon": rec.epsilon, "radius": 0.01}, "intent": {"enabled": False},
                              "utility": {"record": str(path)}}}, epsilon_ceiling={"PII": 40.0})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
    owner.with_principal(kit.principal("bob", "support")).upsert(
        "pii", [models.PointStruct(id=1, vector=docs["text"][0].tolist())])
    assert audit_records(kit)[-1]["manifest"]["retrieval_utility_guard_hash"] == rec.digest


# --------------------------------------------------------------------------- async client, CLI


def test_the_async_client_applies_each_vectors_record(setup):
    kit, recs, _, docs = setup

    async def main():
        owner, config, bob = _writer(kit, _records(setup, "text"), _epsilon(recs), client=AsyncQdrantClient)
        await owner.create_collection("pii", vectors_config=config)
        await bob.upsert("pii", [_point(docs, 0, "text")])
        assert audit_records(kit)[-1]["manifest"]["retrieval_utility_guard_hash"] == {"text": recs["text"].digest}
        with pytest.raises(GuardRefusal) as ei:
            await bob.upsert("pii", [_point(docs, 1, "image")])
        assert ei.value.verdict == "UTILITY_DEGRADED" and "--vector-name image" in str(ei.value)
        await owner.close()

    asyncio.run(main())


def test_calibrate_cli_writes_a_record_for_a_named_vector(setup, tmp_path, capsys):
    from qdrant_guard import cli

    kit, _, _, docs = setup
    raw, _ = _staging(tmp_path / "store")
    raw.close()
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps(v.tolist()) + "\n" for v in docs["image"][:20]))
    base = ["calibrate", "--path", str(tmp_path / "store"), "--collection", "staging", "--queries", str(q),
            "--key", str(kit.guard_key_path), "--epsilons", "2,32", "--threshold", "0.5", "--no-progress",
            "--seed", "3"]
    out = tmp_path / "image.json"
    assert cli.main(base + ["--out", str(out), "--vector-name", "image"]) == 0
    assert "vector 'image': chosen epsilon" in capsys.readouterr().out
    rec = UtilityRecord.from_json(out.read_text())
    assert (rec.vector_name, rec.dim) == ("image", 24)
    assert verify_utility_record(rec, [keys.load_private_key(kit.guard_key_path).public_key()])
    assert cli.main(base + ["--out", str(tmp_path / "none.json")]) != 0
    err = capsys.readouterr().err
    assert "has named vectors ['image', 'text', 'title']" in err and "--vector-name" in err
