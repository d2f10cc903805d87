"""The thirty-eighth review (h-rev38): review 37's leftovers on the write path."""
from __future__ import annotations

import pytest
from qdrant_client import QdrantClient as RawClient

from guardkit import make_kit, models
from qdrant_guard import QdrantClient

M = models
SSN = "Customer John Doe, SSN 123-45-6789"


# -- a PUBLIC collection: a lone vector named "" given as a models.Document ------------------------


@pytest.fixture()
def public(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pub": {"class": "PUBLIC", "text_field": "text", "allow_redaction_on_public": True}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    client.create_collection("pub", vectors_config={n: M.VectorParams(size=4, distance=M.Distance.COSINE)
                                                    for n in ("", "b")})
    return client


def test_a_lone_document_named_empty_on_a_public_collection_stays_a_named_vector(public):
    # The screened Document was joined back into a bare Document, the unnamed vector, which Qdrant
    # refuses on a collection of named vectors (review 37 fixed the same on sensitive collections).
    pol = public.guard.policy("pub")
    doc = M.Document(text=SSN, model="m")
    points = public.guard.public_points("upsert", "pub", pol, [M.PointStruct(id=1, vector={"": doc})])
    assert isinstance(points[0].vector, dict) and set(points[0].vector) == {""}
    assert points[0].vector[""].text == "Customer John Doe, SSN [SSN]"
    updates = public.guard._public_vector_updates("update_vectors", "pub", pol,
                                                  [M.PointVectors(id=1, vector={"": doc})])
    assert set(updates[0].vector) == {""}
    # A bare Document (the unnamed vector) keeps its bare form.
    bare = public.guard.public_points("upsert", "pub", pol, [M.PointStruct(id=1, vector=doc)])
    assert isinstance(bare[0].vector, M.Document)


def test_why_the_named_form_matters_qdrant_refuses_a_bare_vector_there():
    # Control on plain qdrant-client: the bare form is the unnamed vector, refused on this layout.
    raw = RawClient(":memory:")
    raw.create_collection("c", vectors_config={n: M.VectorParams(size=4, distance=M.Distance.COSINE)
                                               for n in ("", "b")})
    raw.upsert("c", [M.PointStruct(id=1, vector={"": [0.5] * 4})])
    with pytest.raises(Exception):
        raw.upsert("c", [M.PointStruct(id=2, vector=[0.5] * 4)])
    assert raw.count("c").count == 1


# -- Cosine stored forms at d = 2 and 3 ------------------------------------------------------------

import numpy as np  # noqa: E402

from guardkit import guard_signer, snapshot  # noqa: E402
from qdrant_guard import _cosine_repair  # noqa: E402
from qdrant_guard.noise import privatize  # noqa: E402
from qdrant_guard.receipts import (RECEIPT_KEY, ReceiptItem, commitment_bytes,  # noqa: E402
                                   issue_receipts_batch, receipts_for_payload, stored_form, stored_form_batch)
from qdrant_guard.receipts import verify as verify_stored  # noqa: E402
from qdrant_guard.storedform import _unit_grid_rows  # noqa: E402

_GRID = 2.0 ** 20


def _ints(rows):
    return np.rint(np.asarray(rows, dtype=np.float64) * _GRID)


@pytest.mark.parametrize("d", [2, 3])
def test_cosine_stored_forms_survive_float32_and_float64_renormalisation(d):
    # The norm nudge's single steps are too coarse with two or three coordinates: about 1 row in
    # 200 at d = 2 was stored more than 1/4 grid step from its exact normalisation (up to 0.48),
    # and Qdrant's re-normalisation moved some of them onto other grid points than their receipts.
    rows = np.random.default_rng(38 + d).normal(size=(20_000, d))
    stored = stored_form_batch(rows, distance="Cosine")
    k = _ints(stored)
    assert _cosine_repair.drift(k).max() <= 0.25
    s64 = stored.astype(np.float64)
    by64 = (s64 / np.linalg.norm(s64, axis=1, keepdims=True)).astype(np.float32)
    by32 = stored / np.linalg.norm(stored, axis=1, keepdims=True).astype(np.float32)
    assert (_ints(by64) == k).all() and (_ints(by32) == k).all()
    # stored_form of one row is the batch's row.
    assert all(np.array_equal(stored_form(r, distance="Cosine"), s) for r, s in zip(rows[:200], stored[:200]))


def test_stored_forms_from_d4_on_are_unchanged_by_the_repair():
    rows = np.random.default_rng(4).normal(size=(5_000, 4))
    assert np.array_equal(_ints(stored_form_batch(rows, distance="Cosine")), _unit_grid_rows(rows.copy(), "f", False))


def _fragile_row():
    """A d = 2 row whose norm-nudged grid point (the stored form before the repair) lies more than
    3/8 step from its exact normalisation (about 1 row in 850)."""
    rows = np.random.default_rng(2).normal(size=(5_000, 2))
    drift = _cosine_repair.drift(_unit_grid_rows(rows.copy(), "f", False))
    assert drift.max() > 0.375
    return rows[int(np.argmax(drift > 0.375))]


def test_a_receipt_over_a_d2_cosine_stored_form_is_accepted_and_verifies_after_replacement(tmp_path):
    # Before, such a stored form was refused (INVALID_RECEIPT, the guard's 3/8-step check), and a
    # guard-noised one was stored where its receipt could fail to verify.
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False,
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=M.VectorParams(size=2, distance=M.Distance.COSINE))
    bob = owner.with_principal(kit.principal("bob", "support"))
    final = stored_form(_fragile_row(), distance="Cosine")
    # The receipt's noise parameters are those of a real release; it commits to ``final``.
    _, params = privatize(np.asarray([[0.6, 0.8]], dtype=np.float32), mechanism="gaussian", epsilon=1.0,
                          delta=1e-6, radius=0.01, clip_norm=1.0)
    rec = issue_receipts_batch(guard_signer(kit), [ReceiptItem(params=params, vector=final, collection="pii",
                                                               point_id=1, vector_name="")])[0]
    point = M.PointStruct(id=1, vector=final.tolist(), payload={RECEIPT_KEY: receipts_for_payload({"": rec})})
    bob.upsert("pii", [point])
    bob.upsert("pii", [point])  # replaced: local mode re-normalises it in float64
    assert [(r.point_id, r.reason) for r in verify_stored(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys)] \
        == [(1, "ok")]
    assert commitment_bytes(snapshot(owner, "pii")[0][2]) == commitment_bytes(final)
