"""A demanding new user's review (2026-12-05): each test failed on the code before its fix."""
from __future__ import annotations

import gc
from pathlib import Path

import pytest
from qdrant_client import models

from guardkit import DIM, create, make_kit
from qdrant_guard import CredentialError, Principal, QdrantClient


@pytest.mark.parametrize("bad", [
    "a credential of another agent",
    "a malformed credential",
    "a tuple instead of a Principal",
])
def test_a_rejected_with_principal_leaves_the_shared_store_open(tmp_path: Path, bad: str) -> None:
    # The half-built view was collected as if it owned the connection, and its __del__ closed the
    # store under the client it was asked of: every later call failed with "instance is closed".
    kit = make_kit(tmp_path)
    cfg = kit.config({"kb": {"class": "PII", "owner": "hr", "readers": ["support"]}})
    client = QdrantClient(path=str(tmp_path / "store"), guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "kb")
    token = kit.principal("alice", "hr").credential
    arg = {"a credential of another agent": Principal("bob", "hr", token),
           "a malformed credential": Principal("alice", "hr", "not-a-token"),
           "a tuple instead of a Principal": ("alice", "hr", token)}[bad]
    with pytest.raises((CredentialError, TypeError)):
        client.with_principal(arg)
    gc.collect()
    client.upsert("kb", points=[models.PointStruct(id=1, vector=[1.0] + [0.0] * (DIM - 1))])
    assert client.count("kb").count == 1
    client.close()
