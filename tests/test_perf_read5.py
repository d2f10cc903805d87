"""The fifth round of read-path shortcuts (h-readperf), each against the general code it skips: the
memory store's kept listing (and the span an admission keeps) against a pass over every entry, the
budget's one-pass admission against the per-source key, share and rank-order code it replaced, and
the smaller shortcuts (diversity's source names, the query walk of a plain vector, a fresh plan)."""
from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from qdrant_guard import budget as _budget
from qdrant_guard import budget_memory as _budget_memory
from qdrant_guard import budget_store_base as _store_base
from qdrant_guard import diversity as _diversity
from qdrant_guard import querycheck as _querycheck
from qdrant_guard import budgetops as _budgetops
from qdrant_guard import reads as _reads
from qdrant_guard.errors import GuardArgumentTypeError


class _General(_budget.MemoryBudgetStore):
    """The memory store with every listing read off every entry: no kept listing, span or set."""

    def _entries_by_prefix(self, prefix, window_s, now):
        with self._lock:
            self._window = max(self._window, window_s)
            found = {key: _store_base._in_window(entries.items(), window_s, now)
                     for key, entries in self._keys.items() if key.startswith(prefix)}
        return {key: ids for key, ids in found.items() if ids}


KEYS = [f"src|p|c|s{i}" for i in range(4)] + ["src|p|d|s0", "src|q|c|s0", "src|p|c|x|y"]
PREFIXES = ["src|p|c|", "src|p|c|", "src|p|c|", "src|p|d|", "src|q|c|", "src|p|", "src|p|c|x|", "src|p|c|s1", ""]


def _step(stores, rng, ids, now):
    window = float(rng.choice([50.0, 100.0]))
    kind = int(rng.integers(0, 5))
    picked = [str(i) for i in rng.choice(ids, size=int(rng.integers(1, 4)))]
    if kind <= 1:  # the read path's admission, often of ids the key holds (a refresh)
        chosen = list(dict.fromkeys(str(k) for k in rng.choice(KEYS, size=int(rng.integers(1, 4)))))
        points = [(pid, sorted({int(m) for m in rng.choice(len(chosen), size=int(rng.integers(1, len(chosen) + 1)))}))
                  for pid in dict.fromkeys(picked)]
        caps = [(k, int(rng.integers(0, 6))) for k in chosen]
        return [s.admit_points(caps, points, window_s=window, now=now) for s in stores]
    if kind == 2:
        key, cap = str(rng.choice(KEYS)), int(rng.integers(0, 6))
        return [s.admit_counted(key, picked, cap=cap, window_s=window, now=now) for s in stores]
    if kind == 3:
        key = str(rng.choice(KEYS))
        return [s.seen(key, window_s=window, now=now) for s in stores]
    if rng.random() < 0.1:
        key = str(rng.choice(KEYS)) if rng.random() < 0.8 else None
        return [s.reset(key) for s in stores]
    return [None, None]


@pytest.mark.parametrize("seed", range(8))
def test_kept_listings_list_as_a_pass_over_every_entry(seed):
    # Admissions (new ids, refreshes, withheld ids), expiry, resets and many listings of the same
    # prefixes in between, under two windows sharing the keys, at times that jump forward and back:
    # the store with kept listings lists what a pass over every entry lists, and holds the same entries.
    rng = np.random.default_rng(seed)
    fast, general = stores = (_budget.MemoryBudgetStore(), _General())
    hits, passes = 0, [0]
    live_ids = fast._live_ids

    def counted(*args):
        passes[0] += 1
        return live_ids(*args)

    fast._live_ids = counted
    now = 0.0
    for _ in range(1200):
        now = max(0.0, now + float(rng.choice([0.0, 0.0, 1.0, 7.0, 30.0, 60.0, -20.0, 0.5])))
        got, want = _step(stores, rng, np.arange(10), now)
        assert got == want
        for _ in range(int(rng.integers(0, 4))):
            prefix = str(rng.choice(PREFIXES))
            window = float(rng.choice([50.0, 100.0]))
            at = max(0.0, now + float(rng.choice([0.0, 0.0, -10.0, 5.0, 45.0, -60.0])))
            kept, before = prefix in fast._listings, passes[0]
            got, want = (s.entries_by_prefix(prefix, window_s=window, now=at) for s in stores)
            assert got == want, (prefix, window, at)
            hits += kept and passes[0] == before and len(got) > 1
        assert {k: list(v.items()) for k, v in fast._keys.items()} == \
            {k: list(v.items()) for k, v in general._keys.items()}
    assert hits > 10  # listings of several keys were answered from the kept ones


W = 100.0


def test_a_refresh_under_a_longer_window_ends_a_shorter_windows_listing():
    # Listed under a 50 s window at 10 s (a: 0 s, b: 10 s, both in); then b is re-read under a 100 s
    # window at 90 s (a refresh: no id added, a kept): listed at 40 s under 50 s, a is out, as the
    # window ends at b's 90 s. A kept listing that did not look past its own oldest time lists a.
    store = _budget.MemoryBudgetStore()
    store.admit_points([("src|p|c|s", 5)], [("a", [0])], window_s=50.0, now=0.0)
    store.admit_points([("src|p|c|s", 5)], [("b", [0])], window_s=50.0, now=10.0)
    assert store.entries_by_prefix("src|p|c|", window_s=50.0, now=10.0) == {"src|p|c|s": frozenset({"a", "b"})}
    store.admit_points([("src|p|c|s", 5)], [("b", [0])], window_s=100.0, now=90.0)
    assert store.entries_by_prefix("src|p|c|", window_s=50.0, now=40.0) == {"src|p|c|s": frozenset({"b"})}


def test_a_kept_listing_follows_every_change_of_its_keys():
    store = _budget.MemoryBudgetStore()

    def listed(now):
        return {k[len("src|p|c|"):]: set(v) for k, v in store.entries_by_prefix("src|p|c|", window_s=W, now=now).items()}

    store.admit_points([("src|p|c|s", 5)], [("a", [0])], window_s=W, now=1.0)
    assert listed(2.0) == {"s": {"a"}}
    assert "src|p|c|" in store._listings
    store.admit_points([("src|p|c|s", 5)], [("a", [0])], window_s=W, now=3.0)  # a refresh: still kept
    assert "src|p|c|" in store._listings and listed(4.0) == {"s": {"a"}}
    store.admit_points([("src|p|c|t", 5)], [("b", [0])], window_s=W, now=5.0)  # a new key of the group
    assert listed(6.0) == {"s": {"a"}, "t": {"b"}}
    store.admit("src|p|c|s", ["c"], cap=5, window_s=W, now=7.0)  # an id added through admit
    assert listed(8.0) == {"s": {"a", "c"}, "t": {"b"}}
    store.admit_points([("src|p|c|x|y", 5)], [("d", [0])], window_s=W, now=9.0)  # a longer group
    assert listed(10.0) == {"s": {"a", "c"}, "t": {"b"}, "x|y": {"d"}}
    assert listed(104.0) == {"s": {"c"}, "t": {"b"}, "x|y": {"d"}}  # a's time is up
    assert store.seen("src|p|c|s", window_s=W, now=104.0) == 1  # expires a
    assert listed(104.0) == {"s": {"c"}, "t": {"b"}, "x|y": {"d"}}
    store.reset("src|p|c|t")
    assert listed(104.0) == {"s": {"c"}, "x|y": {"d"}}
    store.admit("src|p|c|q", ["z"], cap=5, window_s=W, now=300.0)
    assert store.seen("src|p|c|s", window_s=W, now=300.0) == 0  # drops s
    assert listed(300.0) == {"q": {"z"}}
    store.reset()
    assert listed(402.0) == {} and store._listings == {}


def test_a_listing_given_out_is_the_callers_to_change():
    store = _budget.MemoryBudgetStore()
    store.admit_points([("src|p|c|s", 5)], [("a", [0])], window_s=W, now=1.0)
    first = store.entries_by_prefix("src|p|c|", window_s=W, now=2.0)
    first["src|p|c|forged"] = frozenset({"x"})
    del first["src|p|c|s"]
    assert store.entries_by_prefix("src|p|c|", window_s=W, now=3.0) == {"src|p|c|s": frozenset({"a"})}


def test_kept_listings_are_bounded(monkeypatch):
    monkeypatch.setattr(_budget_memory, "_LISTINGS_KEPT", 3)
    store = _budget.MemoryBudgetStore()
    for i in range(10):
        store.admit_points([(f"src|p{i}|c|s", 5)], [("a", [0])], window_s=W, now=1.0)
        assert store.entries_by_prefix(f"src|p{i}|c|", window_s=W, now=2.0) == {f"src|p{i}|c|s": frozenset({"a"})}
        assert len(store._listings) <= 3


def test_an_admissions_kept_span_is_the_entries_span():
    # The span an admission keeps is the key's oldest and newest timestamp and its ids.
    store = _budget.MemoryBudgetStore()
    store.admit_points([("src|p|c|s", 5)], [("a", [0]), ("b", [0])], window_s=W, now=1.0)
    store.entries_by_prefix("src|p|c|", window_s=W, now=2.0)  # keeps the key's set of ids
    store.admit_points([("src|p|c|s", 5)], [("a", [0])], window_s=W, now=3.0)
    entries = store._keys["src|p|c|s"]
    assert list(entries.items()) == [("b", 1.0), ("a", 3.0)]
    assert store._spans["src|p|c|s"] == (1.0, 3.0, frozenset({"a", "b"}))
    store.admit_points([("src|p|c|s", 5)], [("c", [0])], window_s=W, now=4.0)  # ids changed: no set kept
    assert "src|p|c|s" not in store._spans


# -- the budget's admission in one pass --------------------------------------------------------------

class _OldBudget(_budget.ExtractionBudget):
    """admit_many and _decide_points as they read before: a key and a share per source through
    budget_key and _floor_share, ids normalised by normalize_point_id, members then rank order."""

    def admit_many(self, *, principal, collection, requests, max_source_coverage):
        if not isinstance(requests, Mapping):
            raise GuardArgumentTypeError(f"requests must be a mapping of source to (point_ids, source_size), not {type(requests).__name__}")
        coverage = _diversity._check_fraction("max_source_coverage", max_source_coverage, allow_zero=True)
        charges = []
        for source, request in requests.items():
            if not isinstance(request, tuple) or len(request) != 2:
                raise GuardArgumentTypeError(f"requests[{source!r}] must be a (point_ids, source_size) tuple")
            point_ids, source_size = request
            if not (type(source_size) is int and source_size >= 0):
                _store_base._check_count("source_size", source_size)
            charges.append((self.budget_key(principal, collection, source), point_ids,
                            _budget._floor_share(source_size, coverage)))
        return dict(zip(requests, self._decide_points(charges))) if charges else {}

    def _decide_points(self, charges):
        normalised = []
        for _, point_ids, _ in charges:
            if type(point_ids) is not list and (isinstance(point_ids, (str, bytes)) or not isinstance(point_ids, Sequence)):
                raise GuardArgumentTypeError(f"point_ids must be a sequence of point ids, not {type(point_ids).__name__}")
            normalised.append([_budget.normalize_point_id(pid) for pid in point_ids])
        members = {}
        for index, ids in enumerate(normalised):
            for pid in dict.fromkeys(ids):
                members.setdefault(pid, []).append(index)
        points = [(pid, members[pid]) for pid in _budget._rank_walk(normalised)]
        flags, counts = self.store.admit_points([(key, cap) for key, _, cap in charges], points,
                                                window_s=self.window_s, now=self._now())
        released = {pid for (pid, _), ok in zip(points, flags) if ok}
        return [_budget._decision(charge, norm, released, before, after)
                for charge, norm, (before, after) in zip(charges, normalised, counts)]


class _Str(str):
    pass


_U = [uuid.UUID(int=i) for i in range(3)]
_IDS = [0, 1, 2, 3, 4, 5, 7, 9, str(_U[0]), _U[1], str(_U[2]).upper(), np.int64(3)]
_BAD_IDS = [-1, True, 1.5, "nope", None]
_PARTS = ["bob", "hr", "a|b", "50%", _Str("bob"), "", 7]


def _outcome(budget, **kw):
    try:
        got = budget.admit_many(**kw)
    except (TypeError, ValueError) as exc:
        return type(exc), str(exc)
    return {s: dataclasses.asdict(d) for s, d in got.items()}, list(got)


@pytest.mark.parametrize("seed", range(6))
def test_one_pass_admission_is_the_per_source_admission(seed):
    # Random reads of one to five sources sharing ids or not (lists with repeats, ids of every form,
    # now and then a bad id, a bad part, a bad size or coverage): the same decisions, the same error,
    # and the same entries in the store, as the code that built each key and share on its own.
    rng = np.random.default_rng(seed)
    clock = [1000.0]
    new = _budget.ExtractionBudget(_budget.MemoryBudgetStore(), window_s=500.0, clock=lambda: clock[0])
    old = _OldBudget(_budget.MemoryBudgetStore(), window_s=500.0, clock=lambda: clock[0])
    for _ in range(700):
        clock[0] += float(rng.choice([0.0, 1.0, 200.0]))
        requests = {}
        for _ in range(int(rng.integers(1, 6))):
            source = str(rng.choice(["s0", "s1", "s2", "a|b", "100%"])) if rng.random() > 0.03 else rng.choice(_PARTS)
            ids = [_IDS[int(i)] for i in rng.integers(0, len(_IDS), size=int(rng.integers(1, 5)))]
            if rng.random() < 0.02:
                ids[-1] = _BAD_IDS[int(rng.integers(0, len(_BAD_IDS)))]
            size = (int(rng.integers(0, 12)) if rng.random() > 0.2 else 100) if rng.random() > 0.02 \
                else rng.choice([-1, 2.0, True])
            requests[source] = (ids, size) if rng.random() > 0.01 else [ids, size]
        principal = "bob" if rng.random() > 0.05 else _PARTS[int(rng.integers(0, len(_PARTS)))]
        collection = "hr" if rng.random() > 0.05 else _PARTS[int(rng.integers(0, len(_PARTS)))]
        coverage = float(rng.choice([0.3, 0.5, 1.0, 0.57, 0.29])) if rng.random() > 0.02 else rng.choice([1.5, -0.1, 1])
        kw = dict(principal=principal, collection=collection, requests=requests, max_source_coverage=coverage)
        assert _outcome(new, **kw) == _outcome(old, **kw)
        assert {k: list(v.items()) for k, v in new.store._keys.items()} == \
            {k: list(v.items()) for k, v in old.store._keys.items()}


def test_a_subclass_budget_key_still_names_the_keys():
    class Prefixed(_budget.ExtractionBudget):
        @staticmethod
        def budget_key(principal, collection, source):
            return "mine|" + source

    budget = Prefixed(_budget.MemoryBudgetStore(), window_s=W, clock=lambda: 1.0)
    got = budget.admit_many(principal="bob", collection="hr", requests={"s": ([1], 5)}, max_source_coverage=1.0)
    assert got["s"].key == "mine|s" and set(budget.store._keys) == {"mine|s"}


# -- diversity's source names, the query walk of a plain vector, a fresh plan -------------------------

def test_source_names_stop_at_the_first_bad_item():
    called = []

    def source_of(item):
        called.append(item)
        return [("a",), ("b", "b"), None, 5, ("c",)][item]

    with pytest.raises(GuardArgumentTypeError, match=r"source_of\(items\[3\]\) must return str"):
        _diversity._source_names(range(5), source_of, "__none__")
    assert called == [0, 1, 2, 3]  # the item after the bad one is not asked for
    assert _diversity._source_names(range(3), source_of, "__none__") == [("a",), ("b",), ("__none__",)]


def test_a_plain_vector_query_is_visited_as_the_walk_visits_it():
    seen = []
    vector = [0.5, 0.25]

    def visit(value, where):
        seen.append((value, where))
        return ["noised"]

    assert _querycheck.map_query(vector, visit, "query") == ["noised"]
    assert seen == [(vector, "query")]
    assert _querycheck.map_query(tuple(vector), visit, "query") == ["noised"]  # the general walk
    assert seen[1] == (tuple(vector), "query")


def test_a_fresh_plan_is_the_replaced_plan():
    plan = _reads.ReadPlan(user_with_payload=["a"], user_with_vectors=True, limit=7, offset=2, diversify=True,
                           strip_vectors=True, aliases={"x": "hr"})
    plan.withheld_sources.add("s")
    plan.withheld_ids.add("i:1")
    plan.admitted["s"] = {"i:2"}
    fresh = plan.fresh()
    want = dataclasses.replace(plan, withheld_sources=set(), withheld_ids=set(), admitted={})
    assert type(fresh) is _reads.ReadPlan and fresh == want and list(vars(fresh)) == list(vars(want))
    fresh.admitted["t"] = {"i:3"}
    fresh.withheld_ids.add("i:4")
    assert plan.admitted == {"s": {"i:2"}} and plan.withheld_ids == {"i:1"}
    assert math.isfinite(fresh.offset) and fresh.user_with_payload is plan.user_with_payload


# -- the budget's exclusion, kept while the listing and the cached sizes are the same ---------------

import time as _time  # noqa: E402
import types  # noqa: E402

from tests.guardkit import hr_shared, make_kit  # noqa: E402


def _general_exclusion(self, op, name, pol, account):
    # budget_exclusion as it read before it was kept: every source listed, every size looked up.
    exclusion = _reads.Exclusion(pol.source_field)
    listed = self._admitted_by_source(op, name, pol, account)
    restricted = pol.diversity.restricted_sources
    coverage = pol.diversity.max_source_coverage
    cap_for = _budget.ExtractionBudget.cap_for.__get__(self.extraction_budget(pol))
    for source, ids in (listed or {}).items():
        if restricted and source not in restricted:
            continue
        size = self.cached_source_size(account, source)
        if size is None:
            size = yield from self.source_size(account, pol, source)
        if len(ids) >= cap_for(size, coverage):
            exclusion.sources[source] = ids
    sized = [source for (where, source), (_, size) in list(self.shared.get("source_sizes", {}).items())
             if where == account and size * coverage < 1.000001 and source not in exclusion.sources
             and (not restricted or source in restricted) and cap_for(size, coverage) == 0]
    for source in sized:
        size = self.cached_source_size(account, source)
        if size is None:
            size = yield from self.source_size(account, pol, source)
        if cap_for(size, coverage) == 0:
            exclusion.sources[source] = frozenset()
    return exclusion


def _drive(gen, sizes, calls):
    try:
        call = next(gen)
        while True:
            calls.append(call.kwargs["count_filter"].should[0].match.value)
            call = gen.send(types.SimpleNamespace(count=sizes[calls[-1]]))
    except StopIteration as stop:
        return stop.value


@pytest.mark.parametrize("restricted", [(), ("s1", "s3", "s5")])
def test_a_kept_exclusion_is_the_exclusion_worked_out_again(tmp_path, monkeypatch, restricted):
    # Admissions that use sources up (or not), cached sizes replaced, added, dropped or grown stale,
    # the cache replaced and the clock moved on, with exclusions asked again and again in between:
    # each is the exclusion worked out from scratch, with the same counts sent in the same order.
    offset = [0.0]
    monkeypatch.setattr(_budgetops, "time", types.SimpleNamespace(monotonic=lambda: _time.monotonic() + offset[0]))
    kit = make_kit(tmp_path)
    diversity = {"max_source_coverage": 0.5, "max_source_fraction": 1.0, "min_unique_sources": 1}
    if restricted:
        diversity["restricted_sources"] = list(restricted)
    owner = hr_shared(kit, "hr", diversity)
    guard = owner.with_principal(kit.principal("bob", "support"))._guard
    pol = guard.policy("hr")
    budget = guard.extraction_budget(pol)
    worked = [0]
    cap_for = budget.cap_for
    budget.cap_for = lambda *a: (worked.__setitem__(0, worked[0] + 1), cap_for(*a))[1]
    rng = np.random.default_rng(11)
    true = {f"s{i}": int(rng.integers(0, 7)) for i in range(8)}
    guard.shared["source_sizes"] = {}
    asked = kept = 0
    for step in range(500):
        kind = int(rng.integers(0, 8))
        sizes = guard.shared["source_sizes"]
        source = f"s{int(rng.integers(0, 8))}"
        if kind == 0:
            budget.admit(principal=guard.principal_label, collection="hr", source=source,
                         point_ids=[int(i) for i in rng.integers(0, 12, size=int(rng.integers(1, 4)))],
                         source_size=max(true[source], 1), max_source_coverage=0.5)
        elif kind == 1:
            true[source] = int(rng.integers(0, 7))
            sizes[("hr", source)] = (_budgetops.time.monotonic() - float(rng.choice([0.0, 10.0])), true[source])
        elif kind == 2:
            sizes.pop(("hr", source), None)
        elif kind == 3:
            offset[0] += float(rng.choice([1.0, 10.0, _budgetops._SOURCE_SIZE_TTL_S]))
        elif kind == 4 and rng.random() < 0.3:
            guard.shared["source_sizes"] = dict(sizes)
        for _ in range(int(rng.integers(1, 4))):
            saved = guard.shared["source_sizes"]
            guard.shared["source_sizes"] = dict(saved)  # worked out on a copy: counts land there
            want_calls: list = []
            want = _drive(_general_exclusion(guard, "query_points", "hr", pol, "hr"), true, want_calls)
            guard.shared["source_sizes"] = saved
            before, got_calls = worked[0], []
            got = _drive(guard.budget_exclusion("query_points", "hr", pol, "hr"), true, got_calls)
            assert got_calls == want_calls
            assert got == want and list(got.sources) == list(want.sources)
            asked += 1
            kept += worked[0] == before and bool(guard.shared["source_sizes"])
    assert kept > 100 and asked - kept > 100


def test_a_kept_exclusion_ends_when_a_size_it_read_grows_stale(tmp_path, monkeypatch):
    # payroll (listed) was counted just now, tiny (too small for one point, never listed) 25 s ago:
    # 10 s on, tiny's size is stale, so the exclusion counts it again rather than being given again.
    offset = [0.0]
    monkeypatch.setattr(_budgetops, "time", types.SimpleNamespace(monotonic=lambda: _time.monotonic() + offset[0]))
    kit = make_kit(tmp_path)
    owner = hr_shared(kit, "hr", {"max_source_coverage": 0.5, "max_source_fraction": 1.0, "min_unique_sources": 1})
    guard = owner.with_principal(kit.principal("bob", "support"))._guard
    pol = guard.policy("hr")
    guard.extraction_budget(pol).admit(principal=guard.principal_label, collection="hr", source="payroll",
                                       point_ids=[1], source_size=10, max_source_coverage=0.5)
    now = _budgetops.time.monotonic()
    guard.shared["source_sizes"] = {("hr", "payroll"): (now, 10), ("hr", "tiny"): (now - 25.0, 1)}
    for expect_counts in ([], [], None):
        if expect_counts is None:
            offset[0] += 10.0
            expect_counts = ["tiny"]
        calls: list = []
        got = _drive(guard.budget_exclusion("query_points", "hr", pol, "hr"), {"tiny": 1, "payroll": 10}, calls)
        assert calls == expect_counts
        assert dict(got.sources) == {"tiny": frozenset()}


class _Listing:
    """A third-party store's listing, returned as it is held (its id collections included)."""

    def __init__(self, found):
        self.found = found

    def entries_by_prefix(self, prefix, *, window_s, now):
        return dict(self.found)

    def admit(self, *a, **k):
        raise NotImplementedError

    seen = reset = admit


def test_a_kept_listing_by_source_is_the_listing_read_again():
    # Frozen sets (kept) and a list changed in place by its store (not kept): each listing is the
    # one worked out from what the store returns now, and what a caller does to one is its own.
    held = ["i:1"]
    store = _Listing({"src|bob|hr|a": frozenset({"i:1"}), "src|bob|hr|100%25": frozenset({"i:2"})})
    budget = _budget.ExtractionBudget(store, window_s=10.0, clock=lambda: 5.0)
    want = {"a": frozenset({"i:1"}), "100%": frozenset({"i:2"})}
    first = budget.admitted_by_source(principal="bob", collection="hr")
    assert first == want
    first["forged"] = frozenset()
    again = budget.admitted_by_source(principal="bob", collection="hr")
    assert again == want and list(again) == list(want) and "src|bob|hr|" in budget._by_source
    store.found = {"src|bob|hr|100%25": frozenset({"i:2"}), "src|bob|hr|a": frozenset({"i:1"})}
    assert list(budget.admitted_by_source(principal="bob", collection="hr")) == ["100%", "a"]
    store.found = {"src|bob|hr|a": frozenset({"i:1", "i:3"})}
    assert budget.admitted_by_source(principal="bob", collection="hr") == {"a": frozenset({"i:1", "i:3"})}
    store.found = {"src|bob|hr|a": held}
    assert budget.admitted_by_source(principal="bob", collection="hr") == {"a": frozenset({"i:1"})}
    held.append("i:4")
    assert budget.admitted_by_source(principal="bob", collection="hr") == {"a": frozenset({"i:1", "i:4"})}
