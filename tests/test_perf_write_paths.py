"""Fast paths added to the write path for speed decide exactly as the general checks they skip."""
from __future__ import annotations

from collections import OrderedDict
from types import MappingProxyType

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient

from guardkit import create, make_kit, models, snapshot, unit
from qdrant_guard import QdrantClient
from qdrant_guard.errors import InvalidVectorError, UnsupportedWriteError
from qdrant_guard import receipt_format, receipts, storedform
from qdrant_guard.keys import generate_keypair, key_id
from qdrant_guard.noise_params import NoiseParams, guarantee_sentence
from qdrant_guard.receipts import (
    ReceiptItem,
    ReceiptSigner,
    issue_receipts_batch,
    receipts_for_payload,
    stored_form,
    stored_form_batch,
    vector_commitment,
    verify_receipt,
)

SSN = "Customer John Doe, SSN 123-45-6789"


class _ReceiptDict(dict):
    pass


def test_receipts_for_payload_accepts_every_mapping_not_only_dict():
    receipt = {"format": "qg-receipt/1", "sig": "x"}
    for container in ({"": receipt}, MappingProxyType({"": receipt}), OrderedDict({"": receipt}),
                      _ReceiptDict({"": receipt})):
        out = receipts_for_payload(container)
        assert out == {"v": 1, "vectors": {"": receipt}}
        assert type(out["vectors"][""]) is dict and out["vectors"][""] is not receipt
    for inner in (MappingProxyType(receipt), _ReceiptDict(receipt)):
        out = receipts_for_payload({"a": inner})
        assert out["vectors"]["a"] == receipt and type(out["vectors"]["a"]) is dict


@pytest.mark.parametrize("bad", [[("", {})], None, "x", 3])
def test_receipts_for_payload_still_refuses_non_mappings(bad):
    with pytest.raises(TypeError, match="mapping of vector name to receipt"):
        receipts_for_payload(bad)


@pytest.mark.parametrize("bad", [[1, 2], None, "receipt", ("a", "b")])
def test_receipts_for_payload_still_refuses_a_non_mapping_receipt(bad):
    with pytest.raises(TypeError, match="must be a dict"):
        receipts_for_payload({"v": bad})
    with pytest.raises(TypeError, match="vector name must be str"):
        receipts_for_payload({1: {}})


# -- prepare_points skips embed_documents only for plain lists --------------------------------------

def test_named_vectors_mixing_a_list_and_a_document_still_embed_the_document(tmp_path):
    kit = make_kit(tmp_path)
    seen: list[str] = []

    def embedder(texts):
        seen.extend(texts)
        return [unit(np.random.default_rng(len(seen))) for _ in texts]

    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "raw_in_boundary": True}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=embedder)
    create(client, "pii", named=("a", "b"))
    plain = unit(np.random.default_rng(0))
    client.upsert("pii", [models.PointStruct(id=1, vector={"a": plain, "b": models.Document(text=SSN, model="m")})])
    assert len(seen) == 1 and "123-45-6789" not in seen[0] and "[SSN]" in seen[0]
    (_, _, vector), = snapshot(client, "pii")
    assert set(vector) == {"a", "b"} and np.allclose(vector["b"], unit(np.random.default_rng(1)), atol=1e-6)
    image = models.InferenceObject(object={"url": "https://example.com/x.png"}, model="m")
    with pytest.raises(InvalidVectorError, match="InferenceObject"):
        client.upsert("pii", [models.PointStruct(id=2, vector={"a": plain, "b": image})])
    assert len(snapshot(client, "pii")) == 1


# -- prepare_points sets each output vector after validating the id and payload ----------------------

def _revalidated(p):
    return models.PointStruct(id=p.id, vector=p.vector, payload=p.payload)


def _floats(vector):
    lists = vector.values() if isinstance(vector, dict) else [vector]
    return all(type(v) is list and all(type(x) is float for x in v) for v in lists)


def test_points_sent_to_qdrant_equal_fully_validated_points(tmp_path, monkeypatch):
    sent: list = []
    for method in ("upsert", "upload_points"):
        original = getattr(RawClient, method)

        def spy(self, *args, _original=original, **kwargs):
            sent.extend(kwargs["points"])
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(RawClient, method, spy)
    kit = make_kit(tmp_path)
    cfg = kit.config({
        "noised": {"class": "PII", "owner": "hr", "noise_on_write": True, "text_field": "text"},
        "raw": {"class": "PII", "owner": "hr", "raw_in_boundary": True, "text_field": "text"},
    })
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"),
                          embedder=lambda texts: [unit(np.random.default_rng(7)) for _ in texts])
    create(client, "noised")
    create(client, "raw", named=("a", "b"))
    rng = np.random.default_rng(0)
    uid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    client.upsert("noised", [models.PointStruct(id=i, vector=unit(rng), payload={"text": SSN, "n": i}) for i in range(3)]
                  + [models.PointStruct(id=uid, vector=unit(rng)), models.PointStruct(id=9, vector=unit(rng), payload={})])
    client.upload_collection("noised", vectors=[unit(rng)], payload=[{"k": [1, {"x": None}]}], ids=[11])
    client.upsert("raw", [models.PointStruct(id=1, vector={"a": unit(rng), "b": models.Document(text=SSN, model="m")},
                                             payload={"text": SSN}),
                          models.PointStruct(id=2, vector={"a": unit(rng)})])
    assert len(sent) == 8
    for p in sent:
        again = _revalidated(p)
        assert again == p and again.model_fields_set == p.model_fields_set
        assert p.model_dump_json() == again.model_dump_json() and _floats(p.vector)


def _raw_client(tmp_path):
    kit = make_kit(tmp_path)
    client = QdrantClient(":memory:", guard=kit.config({"raw": {"class": "PII", "owner": "hr", "raw_in_boundary": True}}),
                          principal=kit.principal("alice", "hr"))
    create(client, "raw")
    return client


@pytest.mark.parametrize("point_id", [1.5, None])
def test_an_unvalidated_point_still_fails_validation_on_the_way_out(tmp_path, point_id):
    # Only the vector skips validation; an id built around pydantic still fails, at the guard's
    # own check, before the point is rebuilt.
    client = _raw_client(tmp_path)
    point = models.PointStruct.model_construct(id=point_id, vector=unit(np.random.default_rng(0)), payload=None)
    with pytest.raises(UnsupportedWriteError):
        client.upsert("raw", [point])
    assert snapshot(client, "raw") == []


def test_an_unvalidated_payload_key_is_stored_as_qdrant_client_stores_it(tmp_path):
    # A non-str key built around pydantic: qdrant-client's local mode stores {3: "x"} as {"3": "x"},
    # and the guard screens and stores the key in that stored form (thirteenth review).
    client = _raw_client(tmp_path)
    point = models.PointStruct.model_construct(id=1, vector=unit(np.random.default_rng(0)), payload={3: "x"})
    client.upsert("raw", [point])
    assert client.retrieve("raw", [1])[0].payload == {"3": "x"}


# -- _batch_bodies snaps and commits the vectors block by block ----------------------------------------

def _params(dim):
    return NoiseParams(mechanism="gaussian", mechanism_version="1", epsilon=2.0, delta=1e-6, radius=0.5,
                       clip_norm=1.0, scale=0.31, lattice_step=2.0 ** -20, rng_id="chacha20-getrandom-v1",
                       dim=dim, dtype="float32",
                       guarantee=guarantee_sentence("gaussian", 2.0, 1e-6, 0.5, 1.0, 0.31, 2.0 ** -20, dim, "float32"))


@pytest.mark.parametrize("n", [1, storedform._GRID_BLOCK_ROWS - 1, storedform._GRID_BLOCK_ROWS,
                               storedform._GRID_BLOCK_ROWS + 1, 2 * storedform._GRID_BLOCK_ROWS + 3, 257])
def test_batch_commitments_are_right_across_block_boundaries(n):
    sk, pk = generate_keypair()
    signer, trusted = ReceiptSigner(sk), {key_id(pk): pk}
    vecs = stored_form_batch(np.random.default_rng(n).normal(size=(n, 8)), distance="Cosine")
    params = _params(8)
    items = [ReceiptItem(params, vecs[i], "docs", i) for i in range(n)]
    out = issue_receipts_batch(signer, items)
    for i, rec in enumerate(out):
        assert rec["commitment"] == vector_commitment(vecs[i], receipt_format._unb64(rec["salt"]))
        assert verify_receipt(rec, vector=vecs[i], collection="docs", point_id=i, trusted_keys=trusted).ok
        # Another point's vector (in the same or another block) must not verify.
        other = vecs[(i + 1) % n] if n > 1 else vecs[0] * -1
        assert not verify_receipt(rec, vector=other, collection="docs", point_id=i, trusted_keys=trusted).ok


@pytest.mark.parametrize("bad, error", [
    (lambda v: v + 2.0 ** -22, "not on the 2\\^-20 commitment grid"),
    (lambda v: np.full_like(v, np.nan), "NaN or Inf"),
    (lambda v: np.full_like(v, 4096.0), "int32"),
])
def test_a_bad_vector_in_a_later_block_still_raises_the_item_error(bad, error):
    sk, _ = generate_keypair()
    n = 2 * storedform._GRID_BLOCK_ROWS + 5
    vecs = list(stored_form_batch(np.random.default_rng(0).normal(size=(n, 8)), distance="Cosine"))
    vecs[n - 2] = bad(vecs[n - 2])
    items = [ReceiptItem(_params(8), vecs[i], "docs", i) for i in range(n)]
    assert receipts._batch_bodies(ReceiptSigner(sk), items) is None
    with pytest.raises(ValueError, match=error):
        issue_receipts_batch(ReceiptSigner(sk), items)


# -- _unit_grid_rows walks the visiting positions in blocks ---------------------------------------------

@pytest.mark.parametrize("dim", [storedform._POSITIONS_PER_BLOCK - 1, storedform._POSITIONS_PER_BLOCK,
                                 storedform._POSITIONS_PER_BLOCK + 1, 3 * storedform._POSITIONS_PER_BLOCK // 2,
                                 2 * storedform._POSITIONS_PER_BLOCK + 1, 384])
def test_cosine_batch_across_position_blocks_equals_row_by_row(dim):
    rng = np.random.default_rng(dim)
    matrix = rng.normal(size=(60, dim))
    matrix[1::6] = np.rint(matrix[1::6] * 2) / 2 + 0.5        # ties in the visiting order
    matrix[::4, 0] = 40.0 * np.abs(matrix[::4]).max(axis=1)  # rows that settle late or early
    matrix *= 10.0 ** rng.uniform(-3, 3, size=(60, 1))
    batch = stored_form_batch(matrix, distance="Cosine")
    rows = np.stack([stored_form(row, distance="Cosine") for row in matrix])
    assert batch.tobytes() == rows.tobytes()
