"""Fast paths added to the write path for speed decide exactly as the general checks they skip."""
from __future__ import annotations

from collections import OrderedDict
from types import MappingProxyType

import pytest

from qdrant_guard.receipts import receipts_for_payload


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
