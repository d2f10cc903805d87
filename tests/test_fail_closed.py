"""Fail-closed paths on sensitive collections: each failure is a refusal, never a silent allow.
(Classifier failures: tests/test_retrieval_defenses.py; audit log: tests/test_client_reads.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import DIM, count, create, make_kit, models, unit
from qdrant_guard import ConfigError, GuardRefusal, QdrantClient
from qdrant_guard.keys import KeyStoreError
from qdrant_guard.textguard import EmbedderError


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def test_embedder_failure_refuses_the_write(kit):
    def broken(texts):
        raise ConnectionError("embedding service unreachable")

    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=broken)
    create(client, "pii")
    with pytest.raises(EmbedderError, match="embedding service unreachable"):
        client.upsert("pii", [models.PointStruct(id=1, vector=models.Document(text="hello", model="m"))])
    assert count(client, "pii") == 0


def test_embedder_returning_garbage_refuses(kit):
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"),
                          embedder=lambda texts: [[1.0, 2.0]])
    create(client, "pii")
    with pytest.raises(Exception, match="dimension|shape"):
        client.upsert("pii", [models.PointStruct(id=i, vector=models.Document(text=f"t{i}", model="m")) for i in range(2)])
    assert count(client, "pii") == 0


def test_unreadable_signing_key_refuses_to_start(kit, tmp_path):
    data = kit.config({"pii": {"class": "PII", "owner": "hr"}}).model_dump(by_alias=True, exclude={"source_path"})
    data["signing_key"] = str(tmp_path / "missing.key")
    from qdrant_guard.policy import config_from_dict

    with pytest.raises(KeyStoreError, match="missing.key"):
        QdrantClient(":memory:", guard=config_from_dict(data))
    world = tmp_path / "world.key"
    world.write_bytes(kit.guard_key_path.read_bytes())
    world.chmod(0o644)
    data["signing_key"] = str(world)
    with pytest.raises(KeyStoreError, match="world.key"):
        QdrantClient(":memory:", guard=config_from_dict(data))


def test_unreadable_authority_key_is_a_config_error(kit, tmp_path):
    data = kit.config({}).model_dump(by_alias=True, exclude={"source_path"})
    data["boundaries"]["hr"]["authority_keys"] = [str(tmp_path / "nope.pub")]
    from qdrant_guard.policy import config_from_dict

    with pytest.raises(ConfigError, match="nope.pub"):
        QdrantClient(":memory:", guard=config_from_dict(data))


def test_budget_store_failure_refuses_reads(kit):
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "raw_in_boundary": True, "readers": ["support"],
                              "intent": {"enabled": False},
                              "diversity": {"max_source_coverage": 0.5}}},
                     budget_store="redis://127.0.0.1:1/0")  # nothing listens on port 1
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    rng = np.random.default_rng(0)
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "s"}) for i in range(4)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("pii", query=[0.1] * DIM)
    assert ei.value.verdict == "FAIL_CLOSED"


def test_fail_open_is_configurable_per_collection(kit):
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "raw_in_boundary": True, "readers": ["support"],
                              "intent": {"enabled": False}, "fail_closed": False,
                              "diversity": {"max_source_coverage": 0.5}}},
                     budget_store="redis://127.0.0.1:1/0")
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    rng = np.random.default_rng(0)
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "s"}) for i in range(4)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert bob.query_points("pii", query=[0.1] * DIM).points


@pytest.mark.parametrize("fail_closed", [True, False])
def test_budget_store_failure_and_the_vector_budget(kit, fail_closed):
    cfg = kit.config({"model": {"class": "PROPRIETARY", "owner": "hr", "raw_in_boundary": True,
                                "intent": {"enabled": False}, "fail_closed": fail_closed,
                                "diversity": {"max_vectors": 3}}},
                     budget_store="redis://127.0.0.1:1/0")  # nothing listens on port 1
    alice = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(alice, "model")
    rng = np.random.default_rng(0)
    alice.upsert("model", [models.PointStruct(id=i, vector=unit(rng)) for i in range(4)])
    if fail_closed:
        with pytest.raises(GuardRefusal) as ei:
            alice.query_points("model", query=[0.1] * DIM, with_vectors=True)
        assert ei.value.verdict == "FAIL_CLOSED" and "vector budget" in str(ei.value)
    else:
        pts = alice.query_points("model", query=[0.1] * DIM, with_vectors=True).points
        assert len(pts) == 4 and all(p.vector is not None for p in pts)
