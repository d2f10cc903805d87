"""Second review of the read path: blank query text under require_text, filters that carry
secrets or probe for PII, violation positions in the audit entry, and reads that fail in the store.

Real local-mode Qdrant, real keys (see guardkit).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from guardkit import create, make_kit, models, unit
from qdrant_guard import GuardRefusal, QdrantClient


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _client(kit, **policy):
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text",
           "intent": {"enabled": False}}
    pol.update(policy)
    cl = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(cl, "c")
    return cl


def _records(kit):
    return [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text().splitlines()]


@pytest.fixture()
def sent(monkeypatch):
    """The (method, kwargs) of every call that reaches the real (unguarded) read methods."""
    import qdrant_client

    calls = []
    for method in ("query_points", "query_batch_points", "query_points_groups", "scroll", "count", "facet",
                   "search_matrix_pairs", "search_matrix_offsets"):
        original = getattr(qdrant_client.QdrantClient, method)

        def recording(self, *a, _original=original, _method=method, **kw):
            calls.append((_method, kw))
            return _original(self, *a, **kw)

        monkeypatch.setattr(qdrant_client.QdrantClient, method, recording)
    return calls


# -- 1. require_text: blank text is no text --------------------------------------------------------

@pytest.mark.parametrize("blank", ["", "   ", "\n\t", "\u200b", "...", "\u3000?!"])
@pytest.mark.parametrize("scan", [True, False])
def test_require_text_refuses_blank_query_text(kit, sent, blank, scan):
    # require_text exists so that a raw vector cannot skip the text checks; query_text="" satisfied
    # it, and an empty (or whitespace-only, or invisible) text passes every check trivially.
    cl = _client(kit, query={"require_text": True, "enabled": scan})
    v = unit(np.random.default_rng(0))
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("c", query=v, query_text=blank, limit=1)
    assert ei.value.verdict == "TEXT_REQUIRED"
    assert "no letter or digit" in str(ei.value) and "query_text=" in str(ei.value)
    assert sent == []
    assert _records(kit)[-1]["verdict"] == "TEXT_REQUIRED"
    # In a prefetch too; a real text goes ahead.
    with pytest.raises(GuardRefusal):
        cl.query_points("c", prefetch=models.Prefetch(query=v, limit=5), query=models.FusionQuery(fusion="rrf"),
                        query_text=blank, limit=1)
    assert sent == []
    cl.query_points("c", query=v, query_text="refund policy", limit=1)
    cl.query_points("c", query=v, query_text="日本", limit=1)  # letters of any script count


def test_blank_query_text_without_require_text_is_not_refused(kit):
    cl = _client(kit)
    cl.query_points("c", query=unit(np.random.default_rng(0)), query_text="", limit=1)
