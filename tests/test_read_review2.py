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


# -- 3. violation positions index the text the audit entry holds ------------------------------------

_LEAKY = "mail alice.smith@example.com or 123-45-6789 about %41%42%43 refund"


@pytest.mark.parametrize("mode", ["enforce", "monitor"])
def test_violation_positions_index_the_redacted_query_text_in_the_audit_entry(kit, mode):
    # The audit entry holds the query text redacted, but the scan's positions indexed the original:
    # 24 characters of e-mail and SSN became 12 of placeholders, so the position of the escape
    # pointed 12 characters past it in the logged text.
    cl = _client(kit, query={"mode": mode})
    v = unit(np.random.default_rng(0))
    if mode == "enforce":
        with pytest.raises(GuardRefusal):
            cl.query_points("c", query=v, query_text=_LEAKY, limit=1)
        details = _records(kit)[-1]["details"]
        violations = details["violations"]
    else:
        cl.query_points("c", query=v, query_text=_LEAKY, limit=1)
        details = _records(kit)[-1]["details"]
        violations = details["scan"]["would_reject"]
    logged = details["query_text"]
    assert logged == "mail [EMAIL] or [SSN] about %41%42%43 refund"
    escapes = [x for x in violations if x["kind"] != "size_cap"]
    assert escapes
    for x in escapes:
        assert logged[x["position"]:].startswith("%41"), (x, logged)


def test_size_cap_position_is_in_the_redacted_text_in_monitor_mode(kit):
    cl = _client(kit, query={"mode": "monitor", "max_chars": 40})
    cl.query_points("c", query=unit(np.random.default_rng(0)), query_text="123-45-6789 " * 5, limit=1)
    details = _records(kit)[-1]["details"]
    [cap] = details["scan"]["would_reject"]
    # Character 40 of the original is inside the fourth SSN: its placeholder in the logged text.
    assert details["query_text"][cap["position"]:].startswith("[SSN]")
    assert cap["position"] == details["query_text"].index("[SSN]", 3 * 6)


def test_redacted_position_maps_through_placeholders():
    from qdrant_guard.detect import redact_with_findings
    from qdrant_guard.querycheck import redacted_position

    text = "ab 123-45-6789 cd alice@example.com ef"
    red, found = redact_with_findings(text)
    for original, marker in ((0, "ab"), (text.index("cd"), "cd"), (text.index("ef"), "ef"),
                             (text.index("45"), "[SSN]"), (text.index("example"), "[EMAIL]")):
        assert red[redacted_position(original, found):].startswith(marker)
    assert redacted_position(len(text), found) == len(red)
