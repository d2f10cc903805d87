"""The retrieval utility guard inside the pipeline: a signed record from calibrate() refuses noise
levels whose measured recall drop exceeds the threshold, and its digest is the manifest's
retrieval_utility_guard_hash."""
from __future__ import annotations

import json

import numpy as np
import pytest
import qdrant_client

from guardkit import make_kit, models, staging_record
from qdrant_guard import ConfigError, GuardRefusal, QdrantClient

DIM = 32


@pytest.fixture(scope="module")
def record_and_kit(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("util")
    kit = make_kit(tmp)
    path = tmp / "utility.json"
    rec, docs = staging_record(kit, path, dim=DIM)
    return rec, path, kit, docs


def _client(kit, path, epsilon, dim=DIM):
    cfg = kit.config(
        {"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                 "noise": {"epsilon": epsilon, "radius": 0.01}, "utility": {"record": str(path)}}},
        epsilon_ceiling={"PII": 5.0},
    )
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE))
    return owner.with_principal(kit.principal("bob", "support"))


def test_levels_with_a_measured_drop_above_threshold_are_refused(record_and_kit):
    rec, path, kit, docs = record_and_kit
    worst = max(rec.measured, key=lambda lv: lv["drop"])
    assert worst["drop"] > 0.05, rec.measured  # the strongest noise really hurts recall here
    bob = _client(kit, path, worst["epsilon"])
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [models.PointStruct(id=1, vector=docs[0].tolist())])
    assert ei.value.verdict == "UTILITY_DEGRADED"
    assert bob._origin.count("pii").count == 0


def test_the_chosen_level_is_accepted_and_its_hash_is_in_the_manifest(record_and_kit):
    rec, path, kit, docs = record_and_kit
    bob = _client(kit, path, rec.epsilon)
    bob.upsert("pii", [models.PointStruct(id=1, vector=docs[0].tolist())])
    last = json.loads((kit.tmp / "audit.jsonl").read_text().splitlines()[-1])["record"]
    assert last["verdict"] == "ALLOW_NOISED"
    assert last["manifest"]["retrieval_utility_guard_hash"] == rec.digest
    assert last["manifest"]["differential_privacy_epsilon"] == rec.epsilon


def test_a_tampered_or_foreign_record_is_a_config_error(record_and_kit, tmp_path):
    rec, path, kit, docs = record_and_kit
    data = json.loads(path.read_text())
    data["threshold"] = 0.5
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(data))
    bob = _client(kit, bad, rec.epsilon)
    with pytest.raises(ConfigError, match="does not verify"):
        bob.upsert("pii", [models.PointStruct(id=1, vector=docs[0].tolist())])


def test_a_record_signed_by_a_revoked_key_is_a_config_error(record_and_kit, tmp_path):
    rec, path, kit, docs = record_and_kit
    # The guard itself signs with another key: a guard whose own key is revoked refuses to start.
    # Its own audit log too: the kit's holds entries of the revoked key, which a guard under
    # another key will not sign over (tests/test_audit_writer_macs.py).
    from qdrant_guard import keys
    own = tmp_path / "guard2.key"
    own.write_bytes(keys.private_key_to_pem(keys.generate_keypair()[0]))
    own.chmod(0o600)
    cfg = kit.config(
        {"pii": {"class": "PII", "owner": "hr", "noise_on_write": True,
                 "noise": {"epsilon": rec.epsilon, "radius": 0.01}, "utility": {"record": str(path)}}},
        epsilon_ceiling={"PII": 5.0}, receipts={"revoked_keys": [rec.signer_key_id]}, signing_key=str(own),
        audit_log=str(tmp_path / "audit-guard2.jsonl"),
    )
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    with pytest.raises(ConfigError, match="revoked key"):
        owner.upsert("pii", [models.PointStruct(id=1, vector=docs[0].tolist())])
    assert qdrant_client.QdrantClient.count(owner, "pii").count == 0


def test_calibrate_cli_writes_a_record(record_and_kit, tmp_path):
    import subprocess
    import sys

    rec, path, kit, docs = record_and_kit
    store = tmp_path / "store"
    raw = qdrant_client.QdrantClient(path=str(store))
    raw.create_collection("staging", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    raw.upsert("staging", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(docs[:120])])
    raw.close()
    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(json.dumps(v.tolist()) for v in docs[:20]) + "\n")
    out = tmp_path / "rec.json"
    proc = subprocess.run([sys.executable, "-m", "qdrant_guard.cli", "calibrate", "--path", str(store),
                           "--collection", "staging", "--queries", str(q), "--out", str(out),
                           "--key", str(kit.guard_key_path), "--epsilons", "0.5,2", "--no-progress", "--seed", "3"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["collection"] == "staging"


@pytest.fixture(scope="module")
def overlap_at_5_record(record_and_kit, tmp_path_factory):
    """A record of overlap@5 on the same store, signed by the kit's guard key."""
    from guardkit import staging_store

    from qdrant_guard import keys
    from qdrant_guard.utility import calibrate

    _, _, kit, docs = record_and_kit
    raw, _, queries = staging_store(DIM)
    rec = calibrate(raw, "staging", queries, k=5, metric="overlap", radius=0.01,
                    epsilons=(0.02, 0.1, 0.5, 2.0, 8.0, 32.0), threshold=0.3,
                    signer=keys.load_private_key(kit.guard_key_path), progress=False, seed=1)
    path = tmp_path_factory.mktemp("util5") / "overlap5.json"
    path.write_text(rec.to_json())
    return rec, path


def _client_with(kit, path, epsilon, **utility):
    cfg = kit.config(
        {"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                 "noise": {"epsilon": epsilon, "radius": 0.01},
                 "utility": {"record": str(path), "max_recall_drop": 0.3, **utility}}},
        epsilon_ceiling={"PII": 40.0},
    )
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    return owner.with_principal(kit.principal("bob", "support"))


def test_a_record_of_another_metric_or_cut_off_cannot_vouch_for_recall_at_10(record_and_kit, overlap_at_5_record):
    _, _, kit, docs = record_and_kit
    rec, path = overlap_at_5_record
    assert (rec.metric, rec.k) == ("overlap", 5)
    bob = _client_with(kit, path, rec.epsilon)  # the policy limits recall@10 (the default)
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [models.PointStruct(id=1, vector=docs[0].tolist())])
    assert ei.value.verdict == "UTILITY_DEGRADED"
    assert "overlap@5" in str(ei.value) and "recall@10" in str(ei.value)
    assert "--metric recall --k 10" in str(ei.value)
    assert bob._origin.count("pii").count == 0


def test_a_policy_that_names_the_records_metric_and_cut_off_accepts_it(record_and_kit, overlap_at_5_record):
    _, _, kit, docs = record_and_kit
    rec, path = overlap_at_5_record
    bob = _client_with(kit, path, rec.epsilon, metric="overlap", k=5)
    bob.upsert("pii", [models.PointStruct(id=1, vector=docs[0].tolist())])
    assert bob._origin.count("pii").count == 1


def test_the_utility_metric_and_cut_off_are_validated():
    from qdrant_guard.policy import UtilityPolicy

    with pytest.raises(ValueError, match="metric"):
        UtilityPolicy.model_validate({"metric": "precision"})
    with pytest.raises(ValueError, match="k"):
        UtilityPolicy.model_validate({"k": 0})


# --------------------------------------------------------------------------- the record's dimension


def test_a_record_vouches_only_for_vectors_of_its_dimension(record_and_kit):
    # Noise of one sigma per coordinate costs vectors of another dimension another drop: a record
    # calibrated on 32-d staging vectors says nothing about a 64-d collection's writes.
    rec, path, kit, docs = record_and_kit
    assert rec.dim == DIM and rec.version >= 2
    bob = _client(kit, path, rec.epsilon, dim=2 * DIM)
    wide = np.concatenate([docs[0], docs[1]]).tolist()
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [models.PointStruct(id=1, vector=wide)])
    assert ei.value.verdict == "UTILITY_DEGRADED"
    assert f"calibrated on {DIM}-d vectors" in str(ei.value) and f"have {2 * DIM} dimensions" in str(ei.value)
    assert bob._origin.count("pii").count == 0


def test_a_version_1_record_without_a_dimension_still_verifies_and_applies(record_and_kit, tmp_path):
    # Records written before the dimension was recorded are signed over a body without it.
    import base64
    import dataclasses

    from qdrant_guard import keys
    from qdrant_guard.utility import UTILITY_DOMAIN, UtilityRecord, verify_utility_record

    rec, _, kit, docs = record_and_kit
    old = dataclasses.replace(rec, version=1, dim=None, vector_name=None, distance=None, n_measured_queries=None,
                              signature=None)
    assert "dim" not in old.body()
    sig = keys.load_private_key(kit.guard_key_path).sign(UTILITY_DOMAIN + old.signed_bytes())
    old = dataclasses.replace(old, signature=base64.b64encode(sig).decode("ascii"))
    path = tmp_path / "v1.json"
    path.write_text(old.to_json())
    back = UtilityRecord.from_json(path.read_text())
    assert back.dim is None and verify_utility_record(back, [keys.load_private_key(kit.guard_key_path).public_key()])
    bob = _client(kit, path, rec.epsilon)
    bob.upsert("pii", [models.PointStruct(id=1, vector=docs[0].tolist())])
    assert bob._origin.count("pii").count == 1


@pytest.mark.parametrize("edit, message", [
    ({"dim": None}, "needs 'dim'"),
    ({"dim": 0}, "needs 'dim'"),
    ({"dim": True}, "needs 'dim'"),
    ({"version": 7}, "reads versions 1 to 6"),
    ({"version": 1, "n_measured_queries": None}, "version 1 records do not carry"),
])
def test_a_record_whose_version_and_dimension_disagree_is_not_read(record_and_kit, edit, message):
    from qdrant_guard.utility import UtilityRecord

    rec, path, _, _ = record_and_kit
    data = json.loads(path.read_text())
    data.update(edit)
    with pytest.raises(ValueError, match=message):
        UtilityRecord.from_json(json.dumps(data))
