"""Reads release a receipted vector outside the owner boundary only if a guarded write would accept
its noise now: a valid signature is not enough.

A receipt proves what its signer asserted. A vector can reach the store around the guard (a raw
client, another tool holding a trusted writer key), and a policy can be tightened after a vector
was released under it. The write path refuses a receipt whose parameters fail
``noise.check_release`` (the TEST-ONLY seeded generator, an inconsistent calibration) or are
weaker than the collection's ``[noise]`` policy; the read path now applies the same checks before
it hands the vector to another boundary, and strips it otherwise.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from guardkit import DIM, QdrantClient, RawClient, create, make_kit, models

from qdrant_guard import keys, noise
from qdrant_guard.receipts import PAYLOAD_CONTAINER_VERSION, RECEIPT_KEY, ReceiptSigner, issue_receipt, stored_form

NAME = "pii"


def _policy(epsilon: float = 1.0) -> dict[str, Any]:
    return {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False}, "raw_in_boundary": True,
            "noise": {"mechanism": "gaussian", "epsilon": epsilon, "delta": 1e-6, "radius": 0.01}}


def _write_around_guard(owner: Any, signer: ReceiptSigner, pid: int, *, seeded: bool, epsilon: float = 1.0) -> None:
    """A release and its receipt, signed with the guard's own (trusted) key, stored by the
    unguarded base class: what another tool holding a writer key could put in the store."""
    x = np.random.default_rng(pid).normal(size=(1, DIM)).astype(np.float32)
    kw = dict(mechanism="gaussian", epsilon=epsilon, radius=0.01, delta=1e-6, clip_norm=1.0)
    if seeded:
        out, params = noise.privatize_seeded_for_tests(x, seed=7, **kw)
    else:
        out, params = noise.privatize(x, **kw)
    v = stored_form(out[0], distance="Cosine")
    rec = issue_receipt(signer, params=params, vector=v, collection=NAME, point_id=pid)
    RawClient.upsert(owner, NAME, points=[models.PointStruct(
        id=pid, vector=v.tolist(),
        payload={"text": "note", RECEIPT_KEY: {"v": PAYLOAD_CONTAINER_VERSION, "vectors": {"": rec}}})])


def _released(client: Any) -> dict[int, bool]:
    recs = client.retrieve(NAME, [1, 2], with_vectors=True)
    return {r.id: r.vector is not None for r in recs}


@pytest.fixture
def kit(tmp_path: Path) -> Any:
    return make_kit(tmp_path)


def test_a_test_only_seeded_release_is_not_released_to_readers(kit: Any) -> None:
    signer = ReceiptSigner(keys.load_private_key(kit.guard_key_path))
    owner = QdrantClient(":memory:", guard=kit.config({NAME: _policy()}), principal=kit.principal("alice", "hr"))
    create(owner, NAME)
    _write_around_guard(owner, signer, 1, seeded=False)
    _write_around_guard(owner, signer, 2, seeded=True)
    reader = owner.with_principal(kit.principal("bob", "support"))
    # Point 1 is a sound release (control); point 2's receipt verifies but names the TEST-ONLY
    # generator, which a guarded write refuses (NOISE_REQUIRED).
    assert _released(reader) == {1: True, 2: False}
    hits = reader.query_points(NAME, query=[1.0] + [0.0] * (DIM - 1), limit=5, with_vectors=True).points
    assert {h.id: h.vector is not None for h in hits} == {1: True, 2: False}
    # The owner boundary (raw_in_boundary) reads its own collection's vectors as stored.
    assert _released(owner) == {1: True, 2: True}


def test_vectors_released_under_a_weaker_policy_are_stripped_after_it_is_tightened(kit: Any, tmp_path: Path) -> None:
    signer = ReceiptSigner(keys.load_private_key(kit.guard_key_path))
    store = str(tmp_path / "store")
    owner = QdrantClient(path=store, guard=kit.config({NAME: _policy(1.0)}), principal=kit.principal("alice", "hr"))
    create(owner, NAME)
    _write_around_guard(owner, signer, 1, seeded=False, epsilon=1.0)
    _write_around_guard(owner, signer, 2, seeded=False, epsilon=0.5)
    assert _released(owner.with_principal(kit.principal("bob", "support"))) == {1: True, 2: True}
    owner.close()
    tightened = QdrantClient(path=store, guard=kit.config({NAME: _policy(0.5)}),
                             principal=kit.principal("bob", "support"))
    # epsilon 1.0 is weaker than the policy's 0.5 now: a write of it would be NOISE_REQUIRED.
    assert _released(tightened) == {1: False, 2: True}
    tightened.close()
