"""A filter's match value that opens with a double quote is screened as the payload screen reads
such a value (quoted): read bare, the detector saw a quote never closed and the secret under a
secret-like key passed (mutation pass 32 found it in payloads; the filter screen read values the same
way). Real guard, local-mode Qdrant."""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import audit_records, create, make_kit, models, unit
from qdrant_guard import GuardRefusal, QdrantClient


@pytest.fixture()
def cl(tmp_path):
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}}
    client = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(client, "c")
    client.upsert("c", [models.PointStruct(id=i, vector=unit(np.random.default_rng(i)), payload={"text": "t"})
                        for i in range(3)])
    client.kit = kit
    return client


@pytest.mark.parametrize("value", ['"a8f3k2j9x0q7w1e5r4t6', "\"a8f3k2j9x0q7w1e5r4t6'", '"\\a8f3k2j9x0q7w1e5r4t6'])
def test_a_filter_secret_behind_a_quote_is_refused(cl, value) -> None:
    # Mutation pass 32 found a payload value opening with a double quote read as a quote never
    # closed, so its secret passed; a filter's match value was read the same way.
    flt = models.Filter(must=[models.FieldCondition(key="api_key", match=models.MatchValue(value=value))])
    with pytest.raises(GuardRefusal) as ei:
        cl.scroll("c", scroll_filter=flt, limit=2)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert "a8f3k2j9x0q7w1e5r4t6" not in str(ei.value)
    assert audit_records(cl.kit)[-1]["verdict"] == "CREDENTIAL_IN_TEXT"


def test_a_quoted_ordinary_filter_value_still_passes(cl) -> None:
    flt = models.Filter(must=[models.FieldCondition(key="title", match=models.MatchValue(value='"Annual report"'))])
    assert cl.scroll("c", scroll_filter=flt, limit=2)[0] == []
