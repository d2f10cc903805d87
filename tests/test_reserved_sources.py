"""Only the owner boundary writes restricted sources of a budgeted collection.

The per-principal extraction budget caps each source at a share of its size. A boundary that reads
the collection under that budget and may also write it could add junk points tagged with a
restricted source, raise its own cap and read more of the real ones.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from qdrant_client.http import models

from qdrant_guard import ConfigError, GuardRefusal, QdrantClient, Verdict
from tests.guardkit import count, create, make_kit, unit

BUDGETED = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"],
            "noise_on_write": True, "intent": {"enabled": False},
            "diversity": {"max_source_coverage": 0.25, "restricted_sources": ["memo", "7"],
                          "max_source_fraction": 1.0}}


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def clients(kit):
    alice = QdrantClient(":memory:", guard=kit.config({"kb": BUDGETED}), principal=kit.principal("alice", "hr"))
    create(alice, "kb")
    rng = np.random.default_rng(3)
    alice.upsert("kb", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "memo"}) for i in range(8)])
    return alice, alice.with_principal(kit.principal("sam", "support")), rng


def _refused(kit, fn) -> GuardRefusal:
    with pytest.raises(GuardRefusal) as ei:
        fn()
    assert ei.value.verdict == Verdict.REFUSED_CROSS_BOUNDARY
    assert "restricted source" in str(ei.value) and "owner boundary ('hr')" in str(ei.value)
    last = json.loads((kit.tmp / "audit.jsonl").read_text().splitlines()[-1])["record"]
    assert last["verdict"] == "REFUSED_CROSS_BOUNDARY"
    return ei.value


@pytest.mark.parametrize("source", ["memo", ["tickets", "memo"], 7, "7"])
def test_a_writer_outside_the_owner_cannot_add_points_to_a_restricted_source(kit, clients, source) -> None:
    alice, sam, rng = clients
    batch = [models.PointStruct(id=100, vector=unit(rng), payload={"source": "tickets"}),
             models.PointStruct(id=101, vector=unit(rng), payload={"source": source})]
    _refused(kit, lambda: sam.upsert("kb", batch))
    assert count(alice, "kb") == 8  # nothing of the batch was written


def test_the_owner_and_other_sources_are_unaffected(clients) -> None:
    alice, sam, rng = clients
    alice.upsert("kb", [models.PointStruct(id=50, vector=unit(rng), payload={"source": "memo"})])
    sam.upsert("kb", [models.PointStruct(id=51, vector=unit(rng), payload={"source": "tickets"}),
                      models.PointStruct(id=52, vector=unit(rng), payload={"source": 8})])
    assert count(alice, "kb") == 11


def test_payload_methods_cannot_retag_a_point_into_a_restricted_source(kit, clients) -> None:
    alice, sam, rng = clients
    sam.upsert("kb", [models.PointStruct(id=60, vector=unit(rng), payload={"source": "tickets"})])
    _refused(kit, lambda: sam.set_payload("kb", payload={"source": "memo"}, points=[60]))
    _refused(kit, lambda: sam.overwrite_payload("kb", payload={"source": ["memo"]}, points=[60]))
    _refused(kit, lambda: sam.batch_update_points("kb", [
        models.UpsertOperation(upsert=models.PointsList(points=[
            models.PointStruct(id=61, vector=unit(rng), payload={"source": "tickets"})])),
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={"source": "memo"}, points=[60])),
    ]))
    got = alice.retrieve("kb", [60, 61])
    assert [(p.id, p.payload["source"]) for p in got] == [(60, "tickets")]
    sam.set_payload("kb", payload={"topic": "memo"}, points=[60])  # other keys stay writable


def test_a_set_payload_key_that_reaches_a_nested_source_field(kit) -> None:
    pol = {**BUDGETED, "source_field": "metadata.source"}
    alice = QdrantClient(":memory:", guard=kit.config({"kb": pol}), principal=kit.principal("alice", "hr"))
    create(alice, "kb")
    sam = alice.with_principal(kit.principal("sam", "support"))
    rng = np.random.default_rng(4)
    sam.upsert("kb", [models.PointStruct(id=1, vector=unit(rng), payload={"metadata": {"source": "tickets"}})])
    _refused(kit, lambda: sam.set_payload("kb", payload={"source": "memo"}, key="metadata", points=[1]))
    _refused(kit, lambda: sam.set_payload("kb", payload={"x": "memo"}, key='"metadata".source', points=[1]))
    _refused(kit, lambda: sam.upsert("kb", [models.PointStruct(id=2, vector=unit(rng),
                                                               payload={"metadata": {"source": "memo"}})]))
    sam.set_payload("kb", payload={"source": "memo"}, key="other", points=[1])  # not the source field


@pytest.mark.parametrize(("readers", "writers"), [(["support"], ["support"]), (["*"], ["support"]),
                                                  (["support"], ["*"])])
def test_a_budget_on_every_source_with_a_reading_writer_is_a_policy_error(kit, readers, writers) -> None:
    pol = {**BUDGETED, "readers": readers, "writers": writers,
           "diversity": {"max_source_coverage": 0.25}}
    with pytest.raises(ConfigError, match=r"restricted_sources.*remove '(support|\*)' from collections\.kb\.writers"):
        kit.config({"kb": pol})
    kit.config({"kb": {**pol, "writers": ["hr"]}})  # the owner writing is fine
    kit.config({"kb": {**pol, "diversity": {"max_source_coverage": 0.25, "restricted_sources": ["memo"]}}})


class _Doc(str, __import__("enum").Enum):
    MEMO = "memo"


@pytest.mark.parametrize("source", [("memo",), {"memo"}, frozenset({"memo"}), _Doc.MEMO, ("tickets", "memo")],
                         ids=["tuple", "set", "frozenset", "str-enum", "tuple-of-two"])
def test_python_values_that_serialise_to_a_restricted_source_are_refused(kit, clients, source) -> None:
    # The client sends the payload as JSON: a tuple or set becomes a list and a str enum its value,
    # so Qdrant stores (and counts) these points under "memo" whatever str() says of them.
    alice, sam, rng = clients
    _refused(kit, lambda: sam.upsert("kb", [models.PointStruct(id=100, vector=unit(rng), payload={"source": source})]))
    _refused(kit, lambda: sam.set_payload("kb", payload={"source": source}, points=[0]))
    assert count(alice, "kb") == 8


def test_restricting_points_without_a_source_with_a_reading_writer_is_a_policy_error(kit) -> None:
    # "__unknown__" budgets the points that name no source. Any write without the source field
    # (an upsert, clear_payload, delete_payload of the field) adds to it, and no payload names it,
    # so only keeping reading writers out protects its cap.
    pol = {**BUDGETED, "diversity": {"max_source_coverage": 0.25, "restricted_sources": ["memo", "__unknown__"]}}
    with pytest.raises(ConfigError, match=r"'__unknown__'.*remove 'support' from collections\.kb\.writers"):
        kit.config({"kb": pol})
    kit.config({"kb": {**pol, "writers": ["hr"]}})


@pytest.mark.parametrize("field", ["metadata[].source", 'metadata."source"', "metadata[0].source", "meta..source",
                                   "", "source ", "$.source"])
def test_a_source_field_the_guard_would_read_differently_from_qdrant_is_a_policy_error(kit, field) -> None:
    # The guard reads a point's sources at plain dotted keys. A path Qdrant reads through arrays or
    # quotes ("metadata[].source") named no source in the guard, so every point counted as
    # "__unknown__": a restricted source was never budgeted, nor its writes refused.
    with pytest.raises(ConfigError, match="source_field"):
        kit.config({"kb": {**BUDGETED, "source_field": field}})
    kit.config({"kb": {**BUDGETED, "source_field": "metadata.doc-source_2"}})
