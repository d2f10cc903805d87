"""Mutation pass 24 (branch h-mut24, 2026-12-06): tests killing the survivors of budget_units.py,
score_charge.py, sentmodels.py, serverpath.py and budget_stores.py's ``_check_points`` and
``_CountingStore`` (docs/security-testing.md, "Mutation pass 24")."""
from __future__ import annotations

import sys
import unicodedata

import pytest

from qdrant_guard import GuardArgumentTypeError, GuardArgumentValueError
from qdrant_guard.budget import MemoryBudgetStore

KEY = "vsu|p|c|16"


def units(groups, *, cap=100, key=KEY, window_s=60.0, now=100.0, store=None):
    return (store or MemoryBudgetStore()).admit_units(key, groups, cap=cap, window_s=window_s, now=now)


# --- budget_units.check_units_args -------------------------------------------------------------


def test_units_cap_and_weight_stay_below_2_53():
    # Redis adds weights as doubles: exact below 2**53 only.
    big = 2 ** 53 - 1
    assert units([([("a", big)], -1)], cap=big) == ([True], 0, big)
    with pytest.raises(GuardArgumentValueError, match=r"cap must be below 2\*\*53"):
        units([], cap=2 ** 53)
    for items in ([("a", 2 ** 53)], (("a", 2 ** 53),)):
        with pytest.raises(GuardArgumentTypeError, match=r"items\[0\] must be \(str id, int weight >= 1\)"):
            units([(items, -1)], cap=big)


def test_units_key_is_a_non_empty_str():
    with pytest.raises(GuardArgumentTypeError, match="key must be a str"):
        units([], key=5)
    with pytest.raises(GuardArgumentValueError, match="key must be a non-empty string"):
        units([], key="")


@pytest.mark.parametrize("groups", ["", b"", "ab", set(), 5, {0: ([("a", 1)], -1)}])
def test_units_groups_must_be_a_sequence(groups):
    with pytest.raises(GuardArgumentTypeError, match="groups must be a sequence of"):
        units(groups)


@pytest.mark.parametrize("group", [[[("a", 1)], -1], ([("a", 1)], -1, 0), ([("a", 1)],), "ab"])
def test_units_a_group_is_an_items_requires_pair(group):
    with pytest.raises(GuardArgumentTypeError, match=r"groups\[0\] must be an \(items, requires\) tuple"):
        units([group])


@pytest.mark.parametrize("plain", [True, False], ids=["list-items", "tuple-items"])
@pytest.mark.parametrize("requires", [-2, 1, 2, True, 0.0, None, "0"])
def test_units_requires_names_an_earlier_group(plain, requires):
    # The second group (index 1) may require -1 or 0 only; a list of items takes the quick path,
    # a tuple of them the full checks: both refuse alike.
    items = [("b", 1)] if plain else (("b", 1),)
    with pytest.raises(GuardArgumentValueError, match=r"groups\[1\] requires must be -1 or the index"):
        units([([("a", 1)], -1), (items, requires)])


def test_units_requires_minus_one_and_earlier_indices_are_taken():
    assert units([([("a", 1)], -1), ([("b", 1)], 0), ((("c", 1),), 1), ((("d", 1),), -1)]) == ([True] * 4, 0, 4)


@pytest.mark.parametrize("items", ["ab", b"ab", iter([("a", 1)]), {("a", 1)}, 7])
def test_units_items_must_be_a_sequence(items):
    with pytest.raises(GuardArgumentTypeError, match=r"groups\[0\] items must be a sequence"):
        units([(items, -1)])


@pytest.mark.parametrize("plain", [True, False], ids=["list-items", "tuple-items"])
@pytest.mark.parametrize("item", [["a", 1], ("a", 1, 2), ("a",), (5, 1), (b"a", 1), ("a", 0), ("a", -1),
                                  ("a", 1.0), ("a", 1.5), ("a", True), ("a", "1")])
def test_units_an_item_is_a_str_id_and_a_positive_int_weight(plain, item):
    items = [("z", 1), item] if plain else (("z", 1), item)
    with pytest.raises(GuardArgumentTypeError, match=r"groups\[0\] items\[1\] must be \(str id, int weight >= 1\)"):
        units([(items, -1)])


def test_units_weights_of_one_and_str_subclass_ids_are_counted():
    class S(str):
        pass

    store = MemoryBudgetStore()
    assert units([((("a", 1), (S("b"), 2)), -1)], store=store) == ([True], 0, 3)
    # the subclass was stored as its plain text: the same id again is free
    assert units([([("b", 2)], -1)], store=store) == ([True], 3, 3)


def test_units_items_are_read_once_as_checked():
    class Lying(tuple):
        # iteration (what the checks see) gives one item; indexing another
        def __getitem__(self, i):
            return ("other", 99)

    assert units([(Lying([("a", 1)]), -1)], cap=10) == ([True], 0, 1)


def test_units_window_and_time_are_checked():
    with pytest.raises(GuardArgumentValueError, match="window_s must be a finite number > 0"):
        units([], window_s=0.0)
    assert units([([("a", 1)], -1)], now=0.0) == ([True], 0, 1)
    assert units([([("a", 1)], -1)], now=-5.0) == ([True], 0, 1)


# --- sentmodels ----------------------------------------------------------------------------------


def test_unchecked_form_says_where_what_and_why():
    from qdrant_guard.sentmodels import UncheckedForm

    assert str(UncheckedForm("query", 5)) == "query is a int, a form the guard cannot check"
    err = UncheckedForm("prefetch[0]", [], "which is odd")
    assert str(err) == "prefetch[0] is a list, which is odd" and (err.where, err.form) == ("prefetch[0]", "list")


def test_a_rebuilt_filter_keeps_a_field_sent_by_its_alias():
    # MatchExcept's field is except_, sent and validated as "except": dumped by name it would not
    # validate again (so a tuple-holding, rebuilt filter was refused).
    from qdrant_client.http import models

    from qdrant_guard.sentmodels import sent_models

    cond = models.FieldCondition(key="x", match=models.MatchExcept(**{"except": [1, 2]}))
    out = sent_models("scroll", {"scroll_filter": models.Filter.model_construct(must=(cond,))})["scroll_filter"]
    assert type(out.must) is list and out.must[0].match.except_ == [1, 2]


def test_a_rebuild_raises_no_serializer_warning():
    # A dict standing for a condition is rebuilt into its model without pydantic's
    # "serialized value may not be as expected" warnings (an error under -W error).
    import warnings

    from qdrant_client.http import models

    from qdrant_guard.sentmodels import sent_models

    flt = models.Filter.model_construct(must=[{"key": "x", "match": {"value": 1}}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = sent_models("scroll", {"scroll_filter": flt})["scroll_filter"]
    assert out.must == [models.FieldCondition(key="x", match=models.MatchValue(value=1))]


def test_a_filter_that_does_not_validate_is_refused_naming_the_first_error():
    from qdrant_client.http import models

    from qdrant_guard.sentmodels import UncheckedForm, sent_models

    bad = models.Filter.model_construct(must=("nope", 5))
    dumped = models.Filter.__pydantic_serializer__.to_python(bad, by_alias=True, exclude_unset=True, exclude_none=True,
                                                              warnings=False)
    with pytest.raises(ValueError) as direct:
        models.Filter.model_validate(dumped)
    errors = direct.value.errors()
    assert len({e["msg"] for e in (errors[0], errors[1], errors[-1])}) == 3  # the test can tell them apart
    with pytest.raises(UncheckedForm) as ei:
        sent_models("scroll", {"scroll_filter": bad})
    assert str(ei.value) == (f"scroll_filter is a Filter, which does not validate as models.Filter ({errors[0]['msg']}; "
                             "was it built with model_construct() or changed after it was built?)")


# --- score_charge.score_spec ---------------------------------------------------------------------


def _spec(query, prefetch=None, using=None, flt=None, lookup_from=None, params=None):
    from qdrant_guard.score_charge import score_spec

    return score_spec(query, prefetch, using, flt, lookup_from, params)


def _charged_again(query, **kw):
    """Whether the same request twice gets two digests (so its repeat is charged again)."""
    first, second = _spec(query, **kw), _spec(query, **kw)
    assert first[0] == second[0]
    return first[1] != second[1]


def test_queries_that_score_no_vector_have_no_spec():
    from qdrant_client.http import models

    assert _spec(None) is None
    assert _spec(models.OrderByQuery(order_by="x")) is None
    assert _spec(models.SampleQuery(sample=models.Sample.RANDOM)) is None
    fused = models.FusionQuery(fusion=models.Fusion.RRF)
    prefetch = [models.Prefetch(query=[1.0, 0.0], using="a"), models.Prefetch(query=models.OrderByQuery(order_by="x")),
                models.Prefetch(query=[0.0, 1.0], using="b")]
    assert _spec(fused, prefetch=prefetch, using="ignored")[0] == ("a", "b")
    assert _spec(None, prefetch=prefetch)[0] == ("a", "b")


@pytest.mark.parametrize("query", ["dict", "discover-target", "discover-context", "context"])
def test_a_query_taking_a_stored_point_is_charged_again(query):
    from qdrant_client.http import models

    vec_pair = models.ContextPair(positive=[1.0, 0.0], negative=[0.0, 1.0])
    id_pair = models.ContextPair(positive=1, negative=[0.0, 1.0])
    forms = {
        "dict": {"nearest": 1},  # a form not walked counts as taking a point
        "discover-target": models.DiscoverQuery(discover=models.DiscoverInput(target=7, context=[vec_pair])),
        "discover-context": models.DiscoverQuery(discover=models.DiscoverInput(target=[1.0, 0.0], context=[id_pair])),
        "context": models.ContextQuery(context=[vec_pair, id_pair]),
    }
    assert _charged_again(forms[query])


def test_a_query_of_vectors_only_is_free_again():
    from qdrant_client.http import models

    vec_pair = models.ContextPair(positive=[1.0, 0.0], negative=[0.0, 1.0])
    for query in ([1.0, 0.0], models.NearestQuery(nearest=[1.0, 0.0]),
                  models.DiscoverQuery(discover=models.DiscoverInput(target=[1.0, 0.0], context=[vec_pair])),
                  models.ContextQuery(context=[vec_pair])):
        assert not _charged_again(query)


def test_the_digest_does_not_depend_on_the_order_of_a_mappings_keys():
    a = {"must": [{"key": "x", "match": {"value": 1}}], "must_not": [{"key": "y", "match": {"value": 2}}]}
    b = {"must_not": a["must_not"], "must": a["must"]}
    assert _spec([1.0, 0.0], flt=a) == _spec([1.0, 0.0], flt=b)
    assert _spec([1.0, 0.0], flt=a) != _spec([1.0, 0.0], flt={"must": a["must"]})


def test_a_none_among_a_filters_conditions_is_refused_as_unchecked_and_audited(tmp_path, monkeypatch):
    # plain() took a None list item as plain, so Filter.model_construct(must=[cond, None]) skipped
    # the rebuild and reached local mode, which raised a bare ValueError ("Unknown condition: None")
    # with no audit record; over REST it sent {"must": [..., null]}. It does not validate, so it is
    # refused as every other model that does not validate is.
    from guardkit import audit_records, make_kit, models, record_sent

    from qdrant_guard import GuardRefusal, QdrantClient
    from qdrant_guard.sentmodels import UncheckedForm, sent_models

    cond = models.FieldCondition(key="x", match=models.MatchValue(value=1))
    for flt in (models.Filter.model_construct(must=[cond, None]), models.Filter.model_construct(should=[None])):
        with pytest.raises(UncheckedForm, match="does not validate as models.Filter"):
            sent_models("scroll", {"scroll_filter": flt})
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True, "intent": {"enabled": False}}
    alice = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    alice.create_collection("c", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    alice.upsert("c", [models.PointStruct(id=1, vector=[0.5] * 4, payload={"x": 1})])
    bob = alice.with_principal(kit.principal("bob", "support"))
    sent = record_sent(monkeypatch, ("scroll",))
    with pytest.raises(GuardRefusal) as ei:
        bob.scroll("c", scroll_filter=models.Filter.model_construct(must=[cond, None]))
    assert ei.value.verdict == "QUERY_REJECTED" and "model_construct" in str(ei.value)
    assert sent == [] and audit_records(kit)[-1]["verdict"] == "QUERY_REJECTED"


def test_a_list_where_the_annotation_admits_none_is_rebuilt_and_refused():
    # FieldCondition.key is a str: a list there is not plain (plain() returning True for it would
    # send a list key past the key checks unrebuilt).
    from qdrant_client.http import models

    from qdrant_guard.sentmodels import UncheckedForm, sent_models

    cond = models.FieldCondition.model_construct(key=["email"], match=models.MatchValue(value="x"))
    with pytest.raises(UncheckedForm):
        sent_models("scroll", {"scroll_filter": models.Filter.model_construct(must=[cond])})


def test_a_vector_is_charged_under_the_vector_budgets_id_each_name_apart():
    from qdrant_guard.budget import normalize_point_id
    from qdrant_guard.readbudget import _named_vector_id
    from qdrant_guard.score_charge import _vector_id

    assert _vector_id(1, None) == "i:1"
    assert _vector_id(1, "a") == normalize_point_id(_named_vector_id(1, "a"))
    assert len({_vector_id(1, "a"), _vector_id(1, "b"), _vector_id(2, "a"), _vector_id(1, None)}) == 4


# --- budget_units stores -------------------------------------------------------------------------


def _stores(tmp_path, redis_url=None):
    import uuid

    from qdrant_guard.budget import RedisBudgetStore, SqliteBudgetStore

    out = [MemoryBudgetStore(), SqliteBudgetStore(str(tmp_path / "u.db"))]
    if redis_url:
        out.append(RedisBudgetStore(redis_url, prefix=f"qg:test:{uuid.uuid4().hex}:"))
    return out


def test_units_time_runs_from_the_newest_timestamp_not_a_weight(tmp_path, redis_url):
    # A heavy id (weight 1000) does not move the key's clock: the next admission, 5 s later in a
    # 20 s window, still holds it.
    for store in _stores(tmp_path, redis_url):
        assert units([([("a", 1000)], -1)], cap=5000, window_s=20.0, now=10.0, store=store) == ([True], 0, 1000)
        assert units([([("b", 1)], -1)], cap=5000, window_s=20.0, now=15.0, store=store) == ([True], 1000, 1001)
        # and 31 s after "a" (window 20), "a" has expired while "b" (16 s old) is kept
        assert units([([("c", 1)], -1)], cap=5000, window_s=20.0, now=31.0, store=store) == ([True], 1, 2)


# --- budget_stores._CountingStore ----------------------------------------------------------------


@pytest.mark.parametrize("requests", ["", b"", set(), 5])
def test_admit_many_counted_requests_must_be_a_sequence(requests):
    with pytest.raises(GuardArgumentTypeError, match="requests must be a sequence of"):
        MemoryBudgetStore().admit_many_counted(requests, window_s=60.0, now=1.0)


def test_a_model_whose_state_is_not_its_fields_is_rebuilt():
    # A field missing from its __dict__, or extras pydantic would not send, make a model not plain:
    # the rebuilt copy, with every field, is checked and sent.
    from qdrant_client.http import models

    from qdrant_guard.sentmodels import sent_models

    missing = models.FieldCondition(key="x", match=models.MatchValue(value=1))
    del missing.__dict__["range"]
    extra = models.FieldCondition(key="x", match=models.MatchValue(value=1))
    object.__setattr__(extra, "__pydantic_extra__", {"should": "email"})
    for cond in (missing, extra):
        flt = models.Filter(must=[cond])
        out = sent_models("scroll", {"scroll_filter": flt})["scroll_filter"]
        assert out is not flt and out.must[0] is not cond
        assert out.must[0].range is None and not out.must[0].__pydantic_extra__


def test_the_digest_tells_apart_every_value_form():
    import types

    import numpy as np

    values = [1, 2, "1", True, 1.5, 1.25, None, "None", b"x", b"y", [], ["a"], [1.0, 2.0], [2.0, 1.0], {"a": 1},
              {"a": 1.0}, "5", 5, np.float64(2.5), np.int64(7), [True, 1.0], [1.0, 1.0], [2 ** 70], [2 ** 70 + 1]]
    digests = [_spec([1.0, 0.0], flt={"k": v})[1] for v in values]
    assert len(set(digests)) == len(values)
    assert digests == [_spec([1.0, 0.0], flt={"k": v})[1] for v in values]  # and each again the same
    # a vector as numpy or as a list is the same request; a mapping that is no dict reads as one
    assert _spec(np.array([1.0, 2.0]))[1] == _spec([1.0, 2.0])[1] != _spec([1.0, 2.5])[1]
    a = {"must": [1], "should": [2]}
    assert _spec([1.0], flt=types.MappingProxyType(a)) == _spec([1.0], flt={"should": [2], "must": [1]})


def test_charge_scores_refuses_a_query_on_a_vector_it_cannot_size(tmp_path):
    # A score of the sparse vector (a prefetch fused with a dense one) has no dense size to charge
    # in: refused, not charged as nothing. (No sparse data can be stored here; the slot was made before the guard.)
    from guardkit import RawClient, make_kit, models

    from qdrant_guard import GuardRefusal, QdrantClient

    kit = make_kit(tmp_path)
    pol = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
           "diversity": {"max_vectors": 2, "max_source_fraction": 1.0, "min_unique_sources": 1, "charge_scores": True}}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    # Made before the guard: the guard refuses sparse slots on sensitive collections.
    RawClient.create_collection(owner, "hr", vectors_config={"d": models.VectorParams(size=4, distance=models.Distance.DOT)},
                                sparse_vectors_config={"s": models.SparseVectorParams()})
    owner.upsert("hr", [models.PointStruct(id=i, vector={"d": [0.5] * 4}, payload={"source": f"s{i}"}) for i in range(3)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    dense = models.Prefetch(query=[1.0, 0.0, 0.0, 0.0], using="d", limit=3)
    sparse = models.Prefetch(query=models.SparseVector(indices=[0, 1], values=[1.0, 1.0]), using="s", limit=3)
    fused = models.FusionQuery(fusion=models.Fusion.RRF)
    assert len(bob.query_points("hr", prefetch=[dense], query=fused, limit=3).points) == 3
    with pytest.raises(GuardRefusal, match="not a dense vector of the collection") as ei:
        bob.query_points("hr", prefetch=[dense, sparse], query=fused, limit=3)
    assert ei.value.verdict == "QUERY_REJECTED" and ei.value.details["using"] == "s"


def test_a_units_key_whose_ids_all_expired_is_dropped_at_its_next_admission():
    store = MemoryBudgetStore()
    assert units([([("a", 1)], -1)], window_s=10.0, now=0.0, store=store) == ([True], 0, 1)
    assert KEY in store._units.keys
    assert units([([("b", 200)], -1)], window_s=10.0, now=50.0, store=store) == ([False], 0, 0)  # over the cap
    assert KEY not in store._units.keys


def test_each_named_vector_returned_is_charged_a_whole_unit(tmp_path):
    # Sizes 16 and 8 (unit 16), max_vectors 1: a point's two named vectors cost 32 units, so one
    # of them is withheld; the next point keeps neither.
    from guardkit import charged_named, make_kit

    kit = make_kit(tmp_path)
    owner = charged_named(kit, {"a": 16, "b": 8}, max_vectors=1, points=2)
    bob = owner.with_principal(kit.principal("bob", "support"))
    first, second = bob.retrieve("hr", [0, 1], with_vectors=True)
    assert set(first.vector) == {"a"}  # charged in order: "a" fits, "b" is the one withheld
    assert second.vector is None
    from guardkit import audit_records

    assert audit_records(kit)[-1]["details"]["vector_budget"]["withheld"] == 3


def test_admit_many_counted_of_nothing_is_an_empty_list():
    assert MemoryBudgetStore().admit_many_counted([], window_s=60.0, now=1.0) == []


def test_admit_points_with_no_keys_releases_every_point():
    assert MemoryBudgetStore().admit_points([], [("i:1", []), ("i:2", [])], window_s=60.0, now=-1.0) == ([True, True], [])
    with pytest.raises(GuardArgumentValueError, match="window_s must be a finite number > 0"):
        MemoryBudgetStore().admit_points([], [], window_s=0.0, now=1.0)


def test_a_counting_store_without_units_says_so():
    from qdrant_guard.budget_store_base import _CountingStore

    class NoUnits(_CountingStore):
        pass

    with pytest.raises(NotImplementedError):
        NoUnits().admit_units(KEY, [([("a", 1)], -1)], cap=10, window_s=60.0, now=1.0)


@pytest.mark.parametrize("key,error", [(5, GuardArgumentTypeError), ("", GuardArgumentValueError), (None, GuardArgumentTypeError)])
def test_seen_checks_its_key(key, error):
    with pytest.raises(error, match="key must be a"):
        MemoryBudgetStore().seen(key, window_s=60.0, now=1.0)


# --- serverpath ----------------------------------------------------------------------------------


def test_a_backslash_anywhere_in_a_quoted_key_is_refused():
    from qdrant_guard.serverpath import server_reads

    for path in ('"\\a"', '"a\\"', '"\\"', 'x."\\y"', '"ok"."\\"'):
        assert server_reads(path) is False, path
    assert server_reads('"a"') and server_reads('x."y z"')


def test_no_unassigned_code_point_is_read_as_a_key_character():
    # The table holds only characters this Python's Unicode assigns, so that no key is accepted
    # with a character an older server could not know (serverpath's table comment).
    # (Elsewhere _raw_char is isalnum, "_" or "-", which no unassigned code point is: checking
    # each table range and the code point either side of it is checking them all.)
    from qdrant_guard.serverpath import _OTHER_ALNUM, _raw_char

    near = {cp for start, end in zip(_OTHER_ALNUM[::2], _OTHER_ALNUM[1::2]) for cp in range(start - 1, end + 1)}
    assert not any(chr(cp).isalnum() or chr(cp) in "_-" for cp in range(sys.maxunicode + 1)
                   if unicodedata.category(chr(cp)) == "Cn" and cp < 0x20000)
    accepted = [hex(cp) for cp in sorted(near) if unicodedata.category(chr(cp)) == "Cn" and _raw_char(chr(cp))]
    assert accepted == []


def test_seen_reset_and_listing_check_their_arguments_and_act():
    store = MemoryBudgetStore()
    store.admit("p|a", ["i:1"], cap=5, window_s=60.0, now=1.0)
    store.admit("p|b", ["i:2"], cap=5, window_s=60.0, now=1.0)
    store.admit("q|c", ["i:3"], cap=5, window_s=60.0, now=1.0)
    for call in (lambda: store.seen("p|a", window_s=0.0, now=1.0),
                 lambda: store.entries_by_prefix("p|", window_s=0.0, now=1.0)):
        with pytest.raises(GuardArgumentValueError, match="window_s must be a finite number > 0"):
            call()
    assert store.seen("p|a", window_s=60.0, now=-1.0) == 1  # any finite time
    with pytest.raises(GuardArgumentTypeError, match="prefix must be a str"):
        store.entries_by_prefix(5, window_s=60.0, now=1.0)
    assert store.entries_by_prefix("p|", window_s=60.0, now=-1.0) == {"p|a": frozenset({"i:1"}), "p|b": frozenset({"i:2"})}
    assert set(store.entries_by_prefix("", window_s=60.0, now=1.0)) == {"p|a", "p|b", "q|c"}  # "" lists all
    for bad, error in ((5, GuardArgumentTypeError), ("", GuardArgumentValueError)):
        with pytest.raises(error, match="key must be a"):
            store.reset(bad)
    store.reset("p|a")
    assert (store.seen("p|a", window_s=60.0, now=1.0), store.seen("p|b", window_s=60.0, now=1.0)) == (0, 1)
    store.reset()
    assert store.entries_by_prefix("", window_s=60.0, now=1.0) == {}


def test_a_bare_counting_store_implements_nothing():
    from qdrant_guard.budget_store_base import _CountingStore

    bare = _CountingStore()
    calls = [lambda: bare.entries_by_prefix("p", window_s=1.0, now=0.0),
             lambda: bare.admit("k", ["i:1"], cap=1, window_s=1.0, now=0.0),
             lambda: bare.admit_points([("k", 1)], [("i:1", [0])], window_s=1.0, now=0.0),
             lambda: bare.seen("k", window_s=1.0, now=0.0), lambda: bare.reset("k")]
    for call in calls:
        with pytest.raises(NotImplementedError):
            call()


def test_units_time_never_runs_back_in_any_store(tmp_path, redis_url):
    # An admission at 50 after ids stamped 90 and 100 runs at 100 (the newest), not 90 or 50: so
    # "c" is stamped 100 and is still held at 111 (window 20), when "a" (90) has expired.
    for store in _stores(tmp_path, redis_url):
        run = [units([([("a", 1)], -1)], window_s=20.0, now=90.0, store=store),
               units([([("b", 1)], -1)], window_s=20.0, now=100.0, store=store),
               units([([("c", 1)], -1)], window_s=20.0, now=50.0, store=store),
               units([([("d", 1)], -1)], window_s=20.0, now=111.0, store=store)]
        assert run == [([True], 0, 1), ([True], 1, 2), ([True], 2, 3), ([True], 2, 3)], type(store).__name__


def test_redis_units_keys_live_for_the_window(redis_url):
    import uuid

    import redis

    from qdrant_guard.budget import RedisBudgetStore
    from qdrant_guard.budget_units import redis_names

    prefix = f"qg:test:{uuid.uuid4().hex}:"
    store = RedisBudgetStore(redis_url, prefix=prefix)
    units([([("a", 1)], -1)], cap=5, window_s=100_000.0, now=10.0, store=store)
    client = redis.Redis.from_url(redis_url)
    ttls = [client.pttl(name) for name in redis_names(prefix, KEY)]
    assert all(99_990_000 < t <= 100_000_000 for t in ttls), ttls  # the window in ms, less the seconds since


@pytest.mark.parametrize("keys,error", [([["k", 1]], GuardArgumentTypeError), ([(5, 1)], GuardArgumentTypeError),
                                        ([("", 1)], GuardArgumentValueError), ([("k", -1)], GuardArgumentValueError),
                                        ([("k", True)], GuardArgumentTypeError), ([("k", 1, 2)], GuardArgumentTypeError)])
def test_admit_points_refuses_a_bad_key_pair(keys, error):
    with pytest.raises(error):
        MemoryBudgetStore().admit_points(keys, [], window_s=60.0, now=1.0)


def test_sqlite_units_reads_every_held_id_of_a_large_admission(tmp_path):
    # Held ids are read 500 to a query: the 501st and 1001st are held too, so free again.
    from qdrant_guard.budget import SqliteBudgetStore

    store = SqliteBudgetStore(str(tmp_path / "big.db"))
    items = [(f"u:{i}", 1) for i in range(1001)]
    assert units([(items, -1)], cap=5000, store=store) == ([True], 0, 1001)
    assert units([(items, -1)], cap=5000, store=store) == ([True], 1001, 1001)
    assert units([(items[::-1] + [("new", 1)], -1)], cap=5000, store=store) == ([True], 1001, 1002)


def test_units_reset_forgets_one_key_or_all(tmp_path):
    for store in _stores(tmp_path):
        for key in ("k1", "k2"):
            units([([("a", 3)], -1)], key=key, store=store)
        store.reset("k1")
        assert units([], key="k1", store=store) == ([], 0, 0)
        assert units([], key="k2", store=store) == ([], 3, 3)
        store.reset()
        assert units([], key="k2", store=store) == ([], 0, 0)


def test_payload_selectors_order_by_and_point_selectors_reach_the_call_as_checked():
    from qdrant_client.http import models

    from qdrant_guard.sentmodels import sent_models

    class Hiding(list):
        def __iter__(self):
            return iter(list.__getitem__(self, slice(0, 1)))

    exclude = models.PayloadSelectorExclude(exclude=["email"])
    assert sent_models("scroll", {"with_payload": exclude})["with_payload"] is exclude
    constructed = models.PayloadSelectorInclude.model_construct(include=("a", "b"))
    out = sent_models("scroll", {"with_payload": constructed})["with_payload"]
    assert type(out) is models.PayloadSelectorInclude and out.include == ["a", "b"]
    for odd in (5, 1.5, {"x": 1}):  # left for qdrant-client to refuse, not dropped
        assert sent_models("scroll", {"with_payload": odd})["with_payload"] == odd
    ids = [1, 2]
    assert sent_models("delete", {"points_selector": ids})["points_selector"] is ids
    hidden = sent_models("delete", {"points_selector": Hiding([1, 2])})["points_selector"]
    assert type(hidden) is list and hidden == [1, 2]


@pytest.mark.parametrize("kind", ["upsert", "update_vectors"])
def test_a_batch_write_filter_is_rebuilt(kind):
    from qdrant_client.http import models

    from qdrant_guard.sentmodels import sent_models

    cond = models.FieldCondition(key="x", match=models.MatchValue(value=1))
    flt = models.Filter.model_construct(must=(cond,))
    if kind == "upsert":
        op = models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=1, vector=[0.5])],
                                                             update_filter=flt))
    else:
        op = models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
            points=[models.PointVectors(id=1, vector=[0.5])], update_filter=flt))
    (out,) = sent_models("batch_update_points", {"update_operations": [op]})["update_operations"]
    sent = getattr(out, kind).update_filter
    assert type(sent.must) is list and sent.must == [cond]


def test_an_empty_group_is_admitted_and_charges_nothing():
    assert units([([], -1), ([("a", 2)], 0), ((), 1)]) == ([True, True, True], 0, 2)


def _pro(tmp_path, n=4, **pol_extra):
    import numpy as np
    from guardkit import make_kit, models, unit

    from qdrant_guard import QdrantClient

    kit = make_kit(tmp_path)
    pol = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
           "diversity": {"max_vectors": 1, "max_source_fraction": 1.0, "min_unique_sources": 1, "charge_scores": True},
           **pol_extra}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    owner.create_collection("hr", vectors_config={"a": models.VectorParams(size=16, distance=models.Distance.COSINE),
                                                  "b": models.VectorParams(size=8, distance=models.Distance.COSINE)})
    rng = np.random.default_rng(6)
    owner.upsert("hr", [models.PointStruct(id=i, vector={"a": unit(rng, 16), "b": unit(rng, 8)},
                                           payload={"source": f"s{i}"}) for i in range(n)])
    return kit, owner, owner.with_principal(kit.principal("bob", "support"))


def test_a_failing_units_store_with_fail_closed_off_withholds_nothing(tmp_path):
    from qdrant_guard.budget import BudgetStoreError

    class Down(MemoryBudgetStore):
        def admit_units(self, *args, **kwargs):
            raise BudgetStoreError("down")

    kit, owner, bob = _pro(tmp_path, fail_closed=False)
    owner._guard.shared["budget_store"] = Down()
    got = bob.query_points("hr", query=[1.0] + [0.0] * 15, using="a", limit=4, with_vectors=True).points
    assert len(got) == 4 and all(set(p.vector) == {"a", "b"} for p in got)


def test_a_grouped_read_adds_up_what_each_group_withheld(tmp_path):
    from guardkit import audit_records

    kit, owner, bob = _pro(tmp_path)
    groups = bob.query_points_groups("hr", query=[1.0] + [0.0] * 15, using="a", group_by="source", limit=4,
                                     group_size=1, with_vectors=True).groups
    hits = [h for g in groups for h in g.hits]
    missing = sum(2 - len(h.vector or {}) for h in hits)
    details = audit_records(kit)[-1]["details"]
    assert missing >= 2 and details["vector_budget"]["withheld"] == missing


def test_batch_writes_without_a_filter_and_dict_forms_pass_unchanged():
    from qdrant_client.http import models

    from qdrant_guard.sentmodels import sent_models

    op = models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=1, vector=[0.5])]))
    assert sent_models("batch_update_points", {"update_operations": [op]})["update_operations"] == [op]
    req = {"query": [0.5], "limit": 1}
    assert sent_models("query_batch_points", {"requests": [req]})["requests"] == [req]
    flt = {"must": []}
    assert sent_models("scroll", {"scroll_filter": flt})["scroll_filter"] is flt


def test_an_unclosed_index_is_refused():
    from qdrant_guard.serverpath import server_reads

    assert server_reads("a[12") is False and server_reads("a[") is False and server_reads("a[12]") is True


def test_a_point_without_vectors_read_with_vectors_comes_back(tmp_path):
    from guardkit import models

    kit, owner, bob = _pro(tmp_path)
    owner.upsert("hr", [models.PointStruct(id=9, vector={}, payload={"source": "s9"})])
    (got,) = bob.retrieve("hr", [9], with_vectors=True)
    assert got.id == 9 and not got.vector


def test_a_grouped_read_adds_up_the_scores_each_group_withheld(tmp_path):
    # A score of the 8-d vector costs 2 of the 16 units: 8 of the 12 one-hit groups fit.
    from guardkit import audit_records

    kit, owner, bob = _pro(tmp_path, n=12)
    groups = bob.query_points_groups("hr", query=[1.0] + [0.0] * 7, using="b", group_by="source", limit=12,
                                     group_size=1).groups
    assert sum(len(g.hits) for g in groups) == 8
    assert audit_records(kit)[-1]["details"]["score_budget"]["withheld"] == 4


@pytest.mark.parametrize("item", [["a", 1], ("a",), ("a", 1, 2), (5, 1), ("a", 0), ("a", 1.5), ("a", True), ("a", 2 ** 53)])
def test_units_a_lone_bad_item_is_refused(item):
    # Alone in a plain list, so only the quick path's own test can send it to the full checks.
    with pytest.raises(GuardArgumentTypeError, match=r"groups\[0\] items\[0\] must be \(str id, int weight >= 1\)"):
        units([([item], -1)])


def test_a_dict_prefetch_is_left_for_its_own_validation():
    from qdrant_guard.sentmodels import sent_models

    pre = {"query": [0.5], "limit": 3}
    assert sent_models("query_points", {"prefetch": pre})["prefetch"] is pre


@pytest.mark.parametrize("points,error", [("", GuardArgumentTypeError), (set(), GuardArgumentTypeError),
                                          ([["u:1", [0]]], GuardArgumentTypeError), ([(5, [0])], GuardArgumentTypeError),
                                          ([("u:1", [0], 1)], GuardArgumentTypeError), ([("u:1",)], GuardArgumentTypeError),
                                          ([("u:1", [1])], GuardArgumentValueError), ([("u:1", [True])], GuardArgumentTypeError),
                                          ([("u:1", [-1])], GuardArgumentValueError)])
def test_admit_points_refuses_a_bad_point_pair(points, error):
    with pytest.raises(error):
        MemoryBudgetStore().admit_points([("k", 1)], points, window_s=60.0, now=1.0)


def test_admit_points_takes_key_indices_in_any_sequence():
    # range(1) is no list or tuple: it takes the full checks, which keep the point and its id.
    store = MemoryBudgetStore()
    assert store.admit_points([("k", 5)], [("u:1", range(1)), ("u:2", [0])], window_s=60.0, now=1.0) == ([True, True], [(0, 2)])
    assert store.entries_by_prefix("k", window_s=60.0, now=1.0) == {"k": frozenset({"u:1", "u:2"})}
