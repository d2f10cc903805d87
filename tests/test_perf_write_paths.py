"""Fast paths added to the write path for speed decide exactly as the general checks they skip."""
from __future__ import annotations

from collections import OrderedDict
from types import MappingProxyType

import numpy as np
import pytest

from guardkit import create, make_kit, models, snapshot, unit
from qdrant_guard import QdrantClient
from qdrant_guard.errors import InvalidVectorError
from qdrant_guard.receipts import receipts_for_payload

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
