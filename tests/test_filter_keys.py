"""The filter screen reads field names too: a key of a range, geo, ``values_count``, ``is_empty``,
``is_null`` or nested condition, of a match without a string to screen, or named in a formula went
to the store and into the audit entry unscreened (only ``key: value`` of match conditions was).

Real local-mode Qdrant, real keys (see guardkit).
"""
from __future__ import annotations

import pytest
from qdrant_client import grpc

from guardkit import audit_records, make_kit, models, record_scans, record_sent, snapshot
from qdrant_guard import GuardRefusal, QdrantClient

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
EMAIL = "alice@example.com"
V = [0.25] * 16
SENT = ("scroll", "count", "delete", "query_points", "set_payload")


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def sent(monkeypatch):
    """The methods of every call that reaches the real (unguarded) client."""
    return record_sent(monkeypatch, SENT)


def _owner(kit, **policy):
    """alice@hr, owner of PII collection ``c`` which support may read and write; points 1-3."""
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "raw_in_boundary": True,
           "intent": {"enabled": False}}
    pol.update(policy)
    cl = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    cl.create_collection("c", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
    cl.upsert("c", [models.PointStruct(id=i, vector=V, payload={
        "x": i, "source": "d1", "at": f"2026-01-0{i}T00:00:00Z", "loc": {"lat": 52.0 + i, "lon": 13.0},
        "tags": ["a"] * i, "people": [{"age": 30 + i}], **({"gone": None} if i == 2 else {})}) for i in (1, 2, 3)])
    return cl


def _f(*conds):
    return models.Filter(must=list(conds))


def _fc(key, **kw):
    return models.FieldCondition(key=key, **kw)


GEO_BOX = models.GeoBoundingBox(top_left=models.GeoPoint(lat=60, lon=10), bottom_right=models.GeoPoint(lat=50, lon=20))
GEO_RADIUS = models.GeoRadius(center=models.GeoPoint(lat=53, lon=13), radius=10_000.0)
GEO_POLYGON = models.GeoPolygon(exterior=models.GeoLineString(points=[
    models.GeoPoint(lat=50, lon=10), models.GeoPoint(lat=60, lon=10), models.GeoPoint(lat=60, lon=20),
    models.GeoPoint(lat=50, lon=10)]))

# Each builds a filter whose only field name is ``key``; the value is where the refusal names it.
FORMS = {
    "range": (lambda k: _f(_fc(k, range=models.Range(gte=1))), "must[0].key"),
    "datetime_range": (lambda k: _f(_fc(k, range=models.DatetimeRange(gte="2026-01-02T00:00:00Z"))), "must[0].key"),
    "geo_bounding_box": (lambda k: _f(_fc(k, geo_bounding_box=GEO_BOX)), "must[0].key"),
    "geo_radius": (lambda k: _f(_fc(k, geo_radius=GEO_RADIUS)), "must[0].key"),
    "geo_polygon": (lambda k: _f(_fc(k, geo_polygon=GEO_POLYGON)), "must[0].key"),
    "values_count": (lambda k: _f(_fc(k, values_count=models.ValuesCount(gte=2))), "must[0].key"),
    "match_bool": (lambda k: _f(_fc(k, match=models.MatchValue(value=True))), "must[0].key"),
    "match_any_empty": (lambda k: _f(_fc(k, match=models.MatchAny(any=[]))), "must[0].key"),
    "is_empty": (lambda k: _f(models.IsEmptyCondition(is_empty=models.PayloadField(key=k))), "must[0].is_empty.key"),
    "is_null": (lambda k: _f(models.IsNullCondition(is_null=models.PayloadField(key=k))), "must[0].is_null.key"),
    "nested": (lambda k: models.Filter(should=[models.NestedCondition(nested=models.Nested(
        key=k, filter=_f(_fc("age", range=models.Range(gte=31)))))]), "should[0].nested.key"),
    "in_nested": (lambda k: _f(models.NestedCondition(nested=models.Nested(
        key="people", filter=_f(_fc(k, range=models.Range(gte=31)))))), "must[0].nested.filter.must[0].key"),
    "min_should": (lambda k: models.Filter(min_should=models.MinShould(conditions=[
        _fc(k, range=models.Range(gte=1)), _fc("x", range=models.Range(gte=1))], min_count=1)),
        "min_should.conditions[0].key"),
}
# Ordinary field names for each form (a field the points have).
PLAIN = {"range": "x", "datetime_range": "at", "geo_bounding_box": "loc", "geo_radius": "loc", "geo_polygon": "loc",
         "values_count": "tags", "match_bool": "flag", "match_any_empty": "source", "is_empty": "tags",
         "is_null": "gone", "nested": "people", "in_nested": "age", "min_should": "x"}

# Reads and writes by filter.
CALLS = {
    "scroll": lambda c, f: c.scroll("c", scroll_filter=f, limit=5),
    "count": lambda c, f: c.count("c", count_filter=f),
    "query_points": lambda c, f: c.query_points("c", query=V, query_filter=f, limit=5),
    "delete": lambda c, f: c.delete("c", points_selector=models.FilterSelector(filter=f)),
    "set_payload": lambda c, f: c.set_payload("c", payload={"y": 1}, points=f),
}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_credential_as_a_field_name_is_refused_and_nothing_is_sent(kit, sent, form, call):
    owner = _owner(kit, query={"filter_pii": "allow"})
    build, at = FORMS[form]
    root = "points_selector.filter" if call == "delete" else {
        "scroll": "scroll_filter", "count": "count_filter", "query_points": "query_filter", "set_payload": "points"}[call]
    before, sent[:] = snapshot(owner, "c"), []
    n = len(audit_records(kit))
    with pytest.raises(GuardRefusal) as ei:
        CALLS[call](owner, build(f"meta.{STRIPE}"))
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT", (form, call)
    assert ei.value.details["filter"] == f"{root}.{at}"
    assert ei.value.details["findings"] == ["STRIPE_KEY"]
    assert "[STRIPE_KEY]" in ei.value.details["key"]
    assert STRIPE not in str(ei.value)
    assert sent == [] and snapshot(owner, "c") == before
    assert [e["verdict"] for e in audit_records(kit)[n:]] == ["CREDENTIAL_IN_TEXT"]
    assert STRIPE not in (kit.tmp / "audit.jsonl").read_text()


@pytest.mark.parametrize("form", sorted(FORMS))
def test_ordinary_field_names_still_pass(kit, form):
    owner = _owner(kit)
    flt = FORMS[form][0](PLAIN[form])
    got, _ = owner.scroll("c", scroll_filter=flt, limit=5)
    assert audit_records(kit)[-1]["verdict"] == "ALLOW"
    assert owner.count("c", count_filter=flt).count == len(got)
    assert "filter_pii" not in audit_records(kit)[-1]["details"]


def test_ordinary_keys_select_what_they_name(kit):
    owner = _owner(kit)
    ids = lambda f: sorted(p.id for p in owner.scroll("c", scroll_filter=f, limit=5)[0])  # noqa: E731
    assert ids(FORMS["range"][0]("x")) == [1, 2, 3]
    assert ids(_f(_fc("x", range=models.Range(gte=2)))) == [2, 3]
    assert ids(FORMS["values_count"][0]("tags")) == [2, 3]
    assert ids(FORMS["in_nested"][0]("age")) == [1, 2, 3]
    assert ids(FORMS["is_null"][0]("gone")) == [2]


def _formula(expr, **kw):
    return lambda c: c.query_points("c", prefetch=models.Prefetch(query=V, limit=5),
                                    query=models.FormulaQuery(formula=expr, **kw), limit=2)


FORMULAS = {
    "sum": (lambda k: _formula(models.SumExpression(sum=["$score", k])), "query.formula.sum[1]"),
    "mult": (lambda k: _formula(models.SumExpression(sum=["$score", models.MultExpression(mult=[0.5, k])])),
             "query.formula.sum[1].mult[1]"),
    "decay": (lambda k: _formula(models.ExpDecayExpression(exp_decay=models.DecayParamsExpression(x=k, target=1.0))),
              "query.formula.exp_decay.x"),
    "geo_distance": (lambda k: _formula(models.GeoDistance(geo_distance=models.GeoDistanceParams(
        origin=models.GeoPoint(lat=52, lon=13), to=k))), "query.formula.geo_distance.to"),
    "datetime_key": (lambda k: _formula(models.DatetimeKeyExpression(datetime_key=k)), "query.formula.datetime_key"),
    "defaults": (lambda k: _formula(models.SumExpression(sum=["$score", "x"]), defaults={k: 0}), "query.defaults"),
    "condition": (lambda k: _formula(models.SumExpression(sum=["$score", models.IsEmptyCondition(
        is_empty=models.PayloadField(key=k))])), "query.formula.sum[1].is_empty.key"),
}


@pytest.mark.parametrize("form", sorted(FORMULAS))
def test_a_credential_named_in_a_formula_is_refused(kit, sent, form):
    owner = _owner(kit)
    build, at = FORMULAS[form]
    sent[:] = []
    with pytest.raises(GuardRefusal) as ei:
        build(STRIPE)(owner)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT", form
    assert ei.value.details["filter"] == at
    assert sent == []
    assert STRIPE not in (kit.tmp / "audit.jsonl").read_text()
    build({"geo_distance": "loc", "datetime_key": "at"}.get(form, "x"))(owner)  # an ordinary field name goes ahead
    assert sent == ["query_points"]


def test_grpc_range_key_is_screened(kit, sent):
    owner = _owner(kit)
    flt = grpc.Filter(must=[grpc.Condition(field=grpc.FieldCondition(key=STRIPE, range=grpc.Range(gte=1)))])
    sent[:] = []
    with pytest.raises(GuardRefusal) as ei:
        owner.scroll("c", scroll_filter=flt, limit=2)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert sent == []


@pytest.mark.parametrize("form", ["is_empty", "range", "nested"])
def test_personal_data_as_a_field_name_follows_filter_pii(kit, sent, form):
    # Whether any point has a field named alice@example.com is a question about her, as a match
    # on her address is; filter_pii decides both the same way.
    build, at = FORMS[form]
    flt = build(f'"{EMAIL}"')  # quoted: a JSON path key may hold any character
    owner = _owner(kit)
    sent[:] = []
    with pytest.raises(GuardRefusal) as ei:
        owner.scroll("c", scroll_filter=flt, limit=2)
    assert ei.value.verdict == "QUERY_REJECTED" and "filter_pii" in str(ei.value)
    assert ei.value.details == {"filter": f"scroll_filter.{at}", "key": '"[EMAIL]"',
                                "condition": ei.value.details["condition"], "findings": ["EMAIL"]}
    assert sent == []
    owner = _owner(kit, query={"filter_pii": "owner"})
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal):
        bob.scroll("c", scroll_filter=flt, limit=2)
    owner.scroll("c", scroll_filter=flt, limit=2)
    entry = audit_records(kit)[-1]
    assert entry["verdict"] == "ALLOW"
    # (under "nested" the inner key, her address + "[].age", names her too and is listed after)
    assert entry["details"]["filter_pii"][0] == {"filter": f"scroll_filter.{at}", "key": '"[EMAIL]"',
                                                 "condition": ei.value.details["condition"], "findings": ["EMAIL"]}
    assert EMAIL not in (kit.tmp / "audit.jsonl").read_text()


def test_a_key_is_scanned_once_per_call(kit, monkeypatch):
    owner = _owner(kit)
    seen = record_scans(monkeypatch)
    key = "source_of_record"
    owner.scroll("c", scroll_filter=models.Filter(should=[
        _fc(key, match=models.MatchValue(value="d1")), _fc(key, match=models.MatchValue(value="d2")),
        _fc(key, match=models.MatchAny(any=["d3"])), _fc(key, range=models.Range(gte=1))]), limit=2)
    assert seen.count(key) == 1


def test_a_facet_key_is_screened_like_a_filters_keys(kit):
    # facet(key=...) names a field outside any filter; it reaches the store, and on a budgeted
    # collection a refusal quoted it in the audit entry as given.
    owner = _owner(kit, diversity={"max_source_coverage": 0.5, "restricted_sources": ["d1"]})
    reader = owner.with_principal(kit.principal("bob", "support"))
    n = len(audit_records(kit))
    with pytest.raises(GuardRefusal) as ei:
        reader.facet("c", key=f"meta.{STRIPE}")
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert "[STRIPE_KEY]" in ei.value.details["key"]
    assert [e["verdict"] for e in audit_records(kit)[n:]] == ["CREDENTIAL_IN_TEXT"]
    # A field name that is personal data follows filter_pii; an ordinary key past the budget is
    # refused as before, and the key is logged as given only when the detector finds nothing.
    with pytest.raises(GuardRefusal) as ei:
        reader.facet("c", key=EMAIL)
    assert ei.value.verdict == "QUERY_REJECTED"
    with pytest.raises(GuardRefusal) as ei:
        reader.facet("c", key="x")
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY" and ei.value.details["key"] == "x"
    assert STRIPE not in (kit.tmp / "audit.jsonl").read_text()
    assert EMAIL not in (kit.tmp / "audit.jsonl").read_text()
