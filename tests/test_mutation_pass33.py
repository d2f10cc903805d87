"""Mutation pass 33 (docs/security-testing.md): what no test held of sourcefilters.py (the filter
that keeps the points of a spent source out of a budgeted read, and the source-only filter check
of count, facet and retagging) and of collection_policy.py (which key combinations a collection's
policy refuses). Real local-mode Qdrant, real keys and policies; nothing mocked."""
from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError
from qdrant_client import QdrantClient as RawClient
from qdrant_client import grpc
from qdrant_client.conversions.conversion import RestToGrpc
from qdrant_client.http import models

from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.errors import ConfigError
from qdrant_guard.sentmodels import UncheckedForm
from qdrant_guard.sourcefilters import (Exclusion, _only_names_sources, _source_condition, _sources_of_points,
                                        _stored_forms)
from tests.guardkit import create, hr_policy, make_kit, unit

FREE = {"max_source_coverage": 0.2, "max_source_fraction": 1.0, "min_unique_sources": 1}


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _ids(points):
    return sorted(p.id for p in points)


def _budgeted(kit, *, source_field="source", payloads=None):
    """(alice@hr, bob@support) on ``hr``: points 0..9 of source payroll (salary 1000 + id), 100..104
    of misc, 20 % of each source readable by bob (2 of payroll, 1 of misc)."""
    pol = {**hr_policy(FREE), "source_field": source_field}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(3)
    payloads = payloads or {i: {"source": "payroll" if i < 10 else "misc", "salary": 1000 + i}
                            for i in [*range(10), *range(100, 105)]}
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload=p) for i, p in payloads.items()])
    return owner, owner.with_principal(kit.principal("bob", "support"))


# --- sourcefilters: Exclusion ---------------------------------------------------------------

@pytest.mark.parametrize("groups", [100, 101])
def test_the_chunks_of_groups_are_about_the_square_root_of_their_number(groups):
    # Each source admitted its own two ids: one group per source, chunks of ceil(sqrt(groups))
    # (at 40 groups the floor of 8 decides, which tests/test_exclusion_shape.py holds).
    ex = Exclusion("src", {f"s{k}": frozenset({f"i:{k}", f"i:{k + 1000}"}) for k in range(groups)})
    _, *chunks = ex.conditions()
    size = math.ceil(math.sqrt(groups))
    assert [len(c.should) for c in chunks] == [size] * (groups // size) + ([groups % size] if groups % size else [])


def test_an_empty_exclusion_wraps_nothing():
    flt = models.Filter(must=[models.HasIdCondition(has_id=[1])])
    assert Exclusion("source").wrap(flt, "scroll_filter") is flt
    assert Exclusion("source").wrap(None, "scroll_filter") is None


def test_a_form_the_exclusion_cannot_combine_is_refused_not_dropped():
    # Dropped, the caller's filter would be lost and the read would answer for every point.
    ex = Exclusion("source", ids={"i:1"})
    for bad in ({"must": 5}, [models.HasIdCondition(has_id=[2])], "source = 'x'"):
        with pytest.raises(UncheckedForm):
            ex.wrap(bad, "scroll_filter")


def test_the_dict_and_grpc_forms_of_a_users_filter_keep_their_meaning_past_a_spent_source(kit):
    _, bob = _budgeted(kit)
    assert _ids(bob.scroll("hr", limit=20)[0]) == [0, 1, 100]  # payroll and misc used up
    low = {"must": [{"key": "salary", "range": {"lte": 1101}}]}
    assert _ids(bob.scroll("hr", scroll_filter=low, limit=20)[0]) == [0, 1, 100]
    rich = {"must": [{"key": "salary", "range": {"gte": 1001}}]}
    assert _ids(bob.scroll("hr", scroll_filter=rich, limit=1)[0]) == [1]
    g = grpc.Filter(must=[grpc.Condition(field=grpc.FieldCondition(key="salary", range=grpc.Range(gte=1001)))])
    assert _ids(bob.scroll("hr", scroll_filter=g, limit=1)[0]) == [1]
    assert _ids(bob.scroll("hr", scroll_filter=g, limit=20)[0]) == [1, 100]


# --- sourcefilters: the stored forms of a source -----------------------------------------------

_RAW = RawClient(":memory:")
_RAW.create_collection("c", vectors_config=models.VectorParams(size=2, distance=models.Distance.COSINE))
_EDGES = {1: 7, 2: "007", 3: " 7", 4: "7_0", 5: 70, 6: -2**63, 7: 2**63 - 1, 8: -5, 9: "+7"}
_RAW.upsert("c", [models.PointStruct(id=i, vector=[1.0, 0.5], payload={"src": v}) for i, v in _EDGES.items()])


def _matched(source: str) -> set:
    flt = models.Filter(must=[_source_condition("src", source)])
    return {p.id for p in _RAW.scroll("c", scroll_filter=flt, limit=100)[0]}


def test_a_string_source_that_int_reads_as_a_number_is_not_that_number():
    # int() reads "007", " 7", "+7" as 7 and "7_0" as 70; the budget names integer 7 "7", so those
    # sources are their strings only (matching 7 too, their sizes would count its points).
    for source, pid in (("007", 2), (" 7", 3), ("7_0", 4), ("+7", 9)):
        assert _stored_forms(source) == [source]
        assert _matched(source) == {pid}
    assert _matched("7") == {1} and _matched("70") == {5} and _matched("-5") == {8}


def test_a_sources_integer_form_spans_int64_exactly():
    # Qdrant's integers are int64: the two ends match their points; one beyond them has no integer
    # form, which gRPC could not send (RestToGrpc refuses the whole filter: "Value out of range").
    for edge, pid in ((-2**63, 6), (2**63 - 1, 7)):
        assert _stored_forms(str(edge)) == [str(edge), edge]
        assert _matched(str(edge)) == {pid}
    for beyond in (-2**63 - 1, 2**63):
        assert _stored_forms(str(beyond)) == [str(beyond)]
    ex = Exclusion("src", {str(v): frozenset() for v in (-2**63 - 1, -2**63, 2**63 - 1, 2**63)})
    RestToGrpc.convert_filter(ex.wrap(None, "scroll_filter"))


# --- sourcefilters: each point's sources ----------------------------------------------------------

def test_a_dotted_source_field_is_read_nested_not_as_a_literal_key(kit):
    # Qdrant reads "meta.src" as meta -> src: a top-level key spelled "meta.src" names no source.
    payloads = {i: {"meta": {"src": "payroll"}, "meta.src": f"decoy{i}", "salary": 1000 + i} for i in range(10)}
    _, bob = _budgeted(kit, source_field="meta.src", payloads=payloads)
    assert len(bob.scroll("hr", limit=20)[0]) == 2
    assert len(bob.scroll("hr", limit=20)[0]) == 2


def test_a_point_without_a_payload_has_no_source():
    pts = [models.Record(id=1, payload=None), models.Record(id=2, payload={"source": "a"}),
           models.Record(id=3, payload={"source": ""})]
    assert _sources_of_points(pts, "source") == [(), ("a",), ()]


# --- sourcefilters: filters that name nothing but sources ---------------------------------------

def _src(v):
    return models.FieldCondition(key="source", match=models.MatchValue(value=v))


def _refused(call) -> str:
    with pytest.raises(GuardRefusal) as ei:
        call()
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    return str(ei.value)


def test_a_budgeted_count_may_filter_on_sources_in_any_form(kit):
    _, bob = _budgeted(kit)
    nested = models.Filter(must=[models.Filter(should=[_src("misc"), _src("payroll")])])
    assert bob.count("hr", count_filter=nested).count == 15
    at_least = models.Filter(min_should=models.MinShould(conditions=[_src("misc"), _src("payroll")], min_count=1))
    assert bob.count("hr", count_filter=at_least).count == 15


def test_a_budgeted_count_on_another_field_is_refused_in_any_form(kit):
    _, bob = _budgeted(kit)
    salary = models.FieldCondition(key="salary", range=models.Range(gte=1005))
    g = grpc.Filter(must=[grpc.Condition(field=grpc.FieldCondition(key="salary", range=grpc.Range(gte=1005)))])
    for flt in (g, models.Filter(must=[models.Filter(should=[_src("payroll"), salary])]),
                models.Filter(must_not=[models.Filter(must=[salary])]),
                {"must": [{"key": "salary", "range": {"gte": 1005}}]}):
        assert "filter on fields other than 'source'" in _refused(lambda: bob.count("hr", count_filter=flt))


def test_a_dict_filter_names_only_sources_as_the_filter_it_validates_to():
    # (qdrant-client's local count takes no dict filter; a server's does.)
    assert _only_names_sources({"must": [{"key": "source", "match": {"value": "misc"}}]}, "source")
    assert not _only_names_sources({"must": [{"key": "salary", "range": {"gte": 1}}]}, "source")
    assert not _only_names_sources({"must": 5}, "source")


# --- collection_policy: refused combinations ----------------------------------------------------

def _refused_policy(kit, pol: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        kit.config({"c": pol})


@pytest.mark.parametrize("pol, words", [
    ({"owner": "hr", "keep_payload_text_in_boundary": True}, "keeps PII in the text_field only"),
    ({"intent": {"skip_owner": True}}, "intent.skip_owner = true skips"),
    ({"text_field": ""}, "is not a top-level payload key"),
    ({"text_field": "text.body"}, "is not a top-level payload key"),
])
def test_a_switch_set_without_what_it_acts_on_is_refused(kit, pol, words):
    _refused_policy(kit, pol, words)


def test_the_switches_pass_with_what_they_act_on(kit):
    kit.config({"c": {"owner": "hr", "text_field": "text", "keep_payload_text_in_boundary": True}})
    kit.config({"c": {"owner": "hr", "intent": {"skip_owner": True}}})


def test_a_principal_without_a_boundary_neither_reads_nor_writes(kit):
    # readers and writers "*" mean any *verified* principal: none verified, nothing is allowed.
    cfg = kit.config({"c": {"owner": "hr", "readers": ["*"], "writers": ["*"], "noise_on_write": True}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "c")
    anonymous = owner.with_principal(None)
    rng = np.random.default_rng(1)
    for call in (lambda: anonymous.scroll("c", limit=5),
                 lambda: anonymous.upsert("c", [models.PointStruct(id=1, vector=unit(rng), payload={"source": "a"})])):
        with pytest.raises(GuardRefusal) as ei:
            call()
        assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"


def test_a_boundary_that_is_not_a_reader_does_not_read(kit):
    # No readers: the owner alone reads, and support is refused.
    owner = QdrantClient(":memory:", guard=kit.config({"c": {"owner": "hr"}}), principal=kit.principal("alice", "hr"))
    create(owner, "c")
    with pytest.raises(GuardRefusal) as ei:
        owner.with_principal(kit.principal("bob", "support")).scroll("c", limit=5)
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert owner.scroll("c", limit=5)[0] == []


def test_a_loaded_collection_policy_cannot_be_changed_behind_its_validators(kit):
    # Its refusals run when it is built; an assignment afterwards would skip them (owner None
    # under raw_in_boundary, keep_payload_text_in_boundary without a text_field).
    pol = kit.config({"c": {"owner": "hr", "raw_in_boundary": True}}).policy_for("c")
    with pytest.raises(ValidationError, match="frozen"):
        pol.owner = None
    assert pol.owner == "hr"


def test_a_dumped_collection_policy_loads_again(kit):
    # Dumped as `class`, the key policy files use (`sensitivity` is refused there).
    pol = kit.config({"c": {"class": "CREDENTIAL", "owner": "hr", "readers": ["support"]}}).policy_for("c")
    dumped = pol.model_dump(mode="json")
    assert dumped["class"] == "CREDENTIAL" and "sensitivity" not in dumped
    assert kit.config({"c": dumped}).policy_for("c") == pol
