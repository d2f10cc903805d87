"""The read path's shortcuts keep the caches' meaning: a source's size is looked up without a
generator while it is cached, and counted again once its time is up; the budget's parsed forms
(UUID ids, decimal ratios) give what parsing each time gives. Real local-mode Qdrant throughout."""
from __future__ import annotations

import types
import uuid

import numpy as np
import pytest
import qdrant_client

from qdrant_guard import budget as _budget
from qdrant_guard import budget_store_base as _store_base
from qdrant_guard import diversity as _diversity
from qdrant_guard import budgetops as _budgetops
from tests.guardkit import hr_shared, make_kit, models, unit


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def clock(monkeypatch):
    """The budget's monotonic clock (budgetops), moved forward by ``clock.skip(seconds)``."""
    real = _budgetops.time.monotonic
    state = {"offset": 0.0}
    monkeypatch.setattr(_budgetops, "time", types.SimpleNamespace(monotonic=lambda: real() + state["offset"]))
    return types.SimpleNamespace(skip=lambda s: state.__setitem__("offset", state["offset"] + s))


@pytest.fixture()
def counts(monkeypatch):
    """The ``count`` requests the guard sends to Qdrant (source sizes), as their filters."""
    sent: list = []
    original = qdrant_client.QdrantClient.count

    def count(self, *args, **kwargs):
        sent.append(kwargs.get("count_filter"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(qdrant_client.QdrantClient, "count", count)
    return sent


def _payroll(kit, n):
    """(owner, bob) on ``hr``: payroll points 0..n-1 (bob may see a fifth) and misc points 100..104."""
    owner = hr_shared(kit, "hr", {"max_source_coverage": 0.2, "max_source_fraction": 1.0, "min_unique_sources": 1})
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"}) for i in range(n)]
                 + [models.PointStruct(id=100 + i, vector=unit(rng), payload={"source": "misc"}) for i in range(5)])
    return owner, owner.with_principal(kit.principal(f"b-{uuid.uuid4().hex[:8]}", "support"))


def _payroll_seen(points):
    return sorted(p.id for p in points if p.payload.get("source") == "payroll")


@pytest.mark.parametrize("method", ["scroll", "query_points"])
def test_a_cached_source_size_is_recounted_once_its_time_is_up(kit, clock, counts, method):
    owner, bob = _payroll(kit, 10)
    query = unit(np.random.default_rng(1))

    def read():
        if method == "scroll":
            return bob.scroll("hr", limit=50)[0]
        return bob.query_points("hr", query=query, limit=30).points

    first = _payroll_seen(read())
    assert len(first) == 2  # cap floor(10 * 0.2) = 2
    assert counts  # the sizes were counted
    # payroll doubles by a write the guard does not see (another process's, here the unguarded
    # client): its cap becomes 4, but only once the cached size of 10 has expired. (A write
    # through the guard drops the cached sizes: tests/test_budget_size_after_write.py.)
    rng = np.random.default_rng(2)
    qdrant_client.QdrantClient.upsert(owner, "hr", [
        models.PointStruct(id=10 + i, vector=unit(rng), payload={"source": "payroll"}) for i in range(10)])
    counts.clear()
    assert _payroll_seen(read()) == first
    assert counts == []  # both sizes still cached: no count sent (exclusion and admission alike)
    clock.skip(_budgetops._SOURCE_SIZE_TTL_S + 1)
    seen = _payroll_seen(read())
    assert len(seen) == 4 and set(first) <= set(seen)
    assert counts  # recounted, and the new size set the cap


def test_cached_source_size_answers_only_while_fresh(kit, clock):
    owner, bob = _payroll(kit, 10)
    guard = bob._guard
    assert guard.cached_source_size("hr", "payroll") is None  # nothing counted yet
    bob.scroll("hr", limit=50)
    assert guard.cached_source_size("hr", "payroll") == 10
    assert guard.cached_source_size("other", "payroll") is None
    clock.skip(_budgetops._SOURCE_SIZE_TTL_S + 1)
    assert guard.cached_source_size("hr", "payroll") is None


def test_parsed_uuid_ids_are_the_ids_parsed_each_time():
    u = uuid.uuid4()
    for form in (str(u), str(u).upper(), u.hex, "{%s}" % u, "urn:uuid:%s" % u):
        for _ in range(2):  # the second answer comes from the parsed-id cache
            assert _budget.normalize_point_id(form) == f"u:{u}"
    for _ in range(2):  # a refusal is never cached as an answer
        with pytest.raises(ValueError, match="is not a UUID string"):
            _budget.normalize_point_id("not-a-uuid")


def test_cached_decimal_ratios_give_the_exact_shares():
    from fractions import Fraction
    import math

    for fraction in (0.1, 0.25, 0.3, 0.57, 1 / 3, 1.0, 0.0):
        for _ in range(2):
            for n in (0, 1, 7, 100, 12345):
                assert _diversity.floor_share(n, fraction) == math.floor(n * Fraction(repr(fraction)))
    for factor in (1.0, 1.5, 2.57, 3, 7.77):
        for limit in (1, 3, 10, 333):
            want = max(limit, min(1000, math.ceil(limit * Fraction(repr(float(factor))))))
            assert _diversity.overfetch_limit(limit, factor=factor) == want


def test_cached_budget_keys_are_the_keys_built_each_time():
    key = _budget.ExtractionBudget.budget_key
    for parts in (("bob", "hr", "payroll"), ("a|b", "c", "d"), ("a", "b|c", "d"), ("100%", "x%7C", "|%|")):
        built = "src|" + "|".join(p.replace("%", "%25").replace("|", "%7C") for p in parts)
        for _ in range(2):  # the second answer comes from the key cache
            assert key(*parts) == built
    assert key("a|b", "c", "d") != key("a", "b|c", "d")

    class Named(str):
        pass

    assert key(Named("bob"), "hr", "payroll") == key("bob", "hr", "payroll")  # a str subclass: checked path
    for bad, err in ((("", "hr", "s"), ValueError), (("bob", "hr", 7), TypeError), (("bob", None, "s"), TypeError)):
        for _ in range(2):
            with pytest.raises(err):
                key(*bad)


# -- the memory store's listing keeps each key's ids while they are unchanged ---------------------
W = 100.0


def _listed(store, now):
    return {key[len("src|p|c|"):]: set(ids) for key, ids in store.entries_by_prefix("src|p|c|", window_s=W, now=now).items()}


def test_listing_follows_admit_points():
    store = _budget.MemoryBudgetStore()
    store.admit_points([("src|p|c|s", 5)], [("a", [0])], window_s=W, now=1.0)
    assert _listed(store, 2.0) == {"s": {"a"}}
    store.admit_points([("src|p|c|s", 5), ("src|p|c|t", 5)], [("b", [0, 1])], window_s=W, now=3.0)
    assert _listed(store, 4.0) == {"s": {"a", "b"}, "t": {"b"}}
    store.admit_points([("src|p|c|s", 5)], [("a", [0])], window_s=W, now=5.0)  # a re-read adds nothing
    assert _listed(store, 6.0) == {"s": {"a", "b"}, "t": {"b"}}


def test_listing_follows_admit_many():
    store = _budget.MemoryBudgetStore()
    store.admit("src|p|c|s", ["a"], cap=5, window_s=W, now=1.0)
    assert _listed(store, 2.0) == {"s": {"a"}}
    store.admit_many_counted([("src|p|c|s", ["b"], 5), ("src|p|c|s", ["c"], 5)], window_s=W, now=3.0)
    assert _listed(store, 4.0) == {"s": {"a", "b", "c"}}
    store.admit("src|p|c|s", ["d"], cap=3, window_s=W, now=5.0)  # withheld: nothing added
    assert _listed(store, 6.0) == {"s": {"a", "b", "c"}}


def test_listing_follows_expiry_drop_and_reset():
    store = _budget.MemoryBudgetStore()
    store.admit("src|p|c|s", ["a"], cap=5, window_s=W, now=0.0)
    store.admit("src|p|c|s", ["b"], cap=5, window_s=W, now=50.0)
    store.admit("src|p|c|t", ["x"], cap=5, window_s=W, now=50.0)
    assert _listed(store, 60.0) == {"s": {"a", "b"}, "t": {"x"}}
    assert store.seen("src|p|c|s", window_s=W, now=120.0) == 1  # expires a
    assert _listed(store, 60.0) == {"s": {"b"}, "t": {"x"}}
    assert store.seen("src|p|c|s", window_s=W, now=500.0) == 0  # expires b: the key is dropped
    assert _listed(store, 60.0) == {"t": {"x"}}
    store.admit("src|p|c|s", ["c"], cap=5, window_s=W, now=60.0)
    assert _listed(store, 61.0) == {"s": {"c"}, "t": {"x"}}
    store.reset("src|p|c|s")
    store.admit("src|p|c|s", ["d"], cap=5, window_s=W, now=62.0)
    assert _listed(store, 63.0) == {"s": {"d"}, "t": {"x"}}
    store.reset()
    store.admit_points([("src|p|c|t", 5)], [("y", [0])], window_s=W, now=64.0)
    assert _listed(store, 65.0) == {"t": {"y"}}


def test_listing_holds_no_ids_of_keys_gone():
    # The kept frozensets must not outlive their keys (a dropped or reset key's ids are not kept).
    store = _budget.MemoryBudgetStore()
    store.admit("src|p|c|s", ["a"], cap=5, window_s=W, now=0.0)
    store.admit("src|p|c|t", ["x"], cap=5, window_s=W, now=0.0)
    assert _listed(store, 1.0) == {"s": {"a"}, "t": {"x"}}
    assert store.seen("src|p|c|s", window_s=W, now=500.0) == 0
    assert set(store._frozen) == {"src|p|c|t"}
    assert _listed(store, 1.0) == {"t": {"x"}}
    store.reset("src|p|c|t")
    assert store._frozen == {}
    store.admit("src|p|c|t", ["y"], cap=5, window_s=W, now=2.0)
    assert _listed(store, 3.0) == {"t": {"y"}}
    store.reset()
    assert store._frozen == {}


# -- fast paths against the general code they skip --------------------------------------------------

def test_rank_order_of_disjoint_lists_is_the_walks_order():
    # The shortcut (lists sharing no id are placed one after the other) must give what the
    # topological walk gives; lists that share ids still take the walk.
    rng = np.random.default_rng(3)
    for _ in range(500):
        ids = [f"i:{k}" for k in rng.permutation(40)]
        cuts = sorted(rng.choice(np.arange(1, 40), size=int(rng.integers(0, 6)), replace=False).tolist())
        lists = [ids[a:b] for a, b in zip([0, *cuts], [*cuts, 40])]
        lists = [chunk + chunk[: int(rng.integers(0, 3))] for chunk in lists]  # repeats inside a list
        assert _budget._rank_order(lists) == _budget._rank_walk(lists)
        shared = [*lists, [lists[0][0], ids[-1]]]
        assert _budget._rank_order(shared) == _budget._rank_walk(shared)


class _Members(list):
    """A list subclass: not a plain list, so _check_points takes its general checks."""


@pytest.mark.parametrize("members", [[0, 2], (1,), [], [2, 0, 1], [0, 0], [3], [-1], [True], [1.0],
                                     [np.int64(1)], "01", None, [0, 1, 2, 3]])
def test_plain_key_indices_decide_as_the_general_checks(members):
    keys = [("k0", 1), ("k1", 2), ("k2", 3)]

    def outcome(value):
        try:
            return _store_base._check_points(keys, [("i:1", value)])
        except (TypeError, ValueError) as exc:
            return type(exc)

    general = outcome(_Members(members) if isinstance(members, (list, tuple)) else members)
    assert outcome(members) == general
