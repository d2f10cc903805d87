"""The fourth round of read-path shortcuts, each against the general code it skips: a built-in
store's admission without its argument checks, BudgetDecision made without its frozen __init__,
the points' sources listed once (diversity picking over indices), and the exclusion's one clock
read for its cached sizes."""
from __future__ import annotations

import dataclasses
import time
import types

import numpy as np
import pytest

from qdrant_guard import budget as _budget
from qdrant_guard import budget_store_base as _store_base
from qdrant_guard import budgetops as _budgetops
from qdrant_guard import reads as _reads
from qdrant_guard import sourcefilters as _sourcefilters
from qdrant_guard.diversity import enforce_diversity
from qdrant_guard.sources import point_sources
from tests.guardkit import hr_shared, make_kit


class _Checked(_budget.MemoryBudgetStore):
    """The memory store reached only through its public, checked admit_points."""

    def admit_points(self, keys, points, *, window_s, now):
        return super().admit_points(keys, points, window_s=window_s, now=now)


class _CheckedSqlite(_budget.SqliteBudgetStore):
    def admit_points(self, keys, points, *, window_s, now):
        return super().admit_points(keys, points, window_s=window_s, now=now)


def _counting_checks(monkeypatch):
    calls = []
    general = _store_base._check_points

    def counted(keys, points):
        calls.append(1)
        return general(keys, points)

    monkeypatch.setattr(_store_base, "_check_points", counted)
    return calls


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_builtin_store_admission_is_the_checked_admission(tmp_path, monkeypatch, kind):
    # Reads of points of one or several sources (shared ids, repeats), caps reached and not, time
    # moving on past the window: the budget over a built-in store decides, counts and stores as
    # the same budget whose store is reached through the checked admit_points.
    if kind == "memory":
        fast_store, general_store = _budget.MemoryBudgetStore(), _Checked()
    else:
        fast_store = _budget.SqliteBudgetStore(str(tmp_path / "fast.db"))
        general_store = _CheckedSqlite(str(tmp_path / "general.db"))
    now = [1000.0]
    fast = _budget.ExtractionBudget(fast_store, window_s=50.0, clock=lambda: now[0])
    general = _budget.ExtractionBudget(general_store, window_s=50.0, clock=lambda: now[0])
    checks = _counting_checks(monkeypatch)
    rng = np.random.default_rng(3)
    withheld = 0
    for step in range(300):
        now[0] += float(rng.choice([0.0, 1.0, 10.0, 60.0]))
        requests = {}
        for source in rng.choice(6, size=int(rng.integers(1, 5)), replace=False):
            ids = [int(i) for i in rng.integers(0, 15, size=int(rng.integers(1, 5)))]
            requests[f"s{source}"] = (ids, int(rng.integers(0, 8)))
        coverage = float(rng.choice([0.25, 0.5, 1.0]))
        before = len(checks)
        got = fast.admit_many(principal="bob", collection="hr", requests=requests, max_source_coverage=coverage)
        assert len(checks) == before  # the shortcut was taken
        want = general.admit_many(principal="bob", collection="hr", requests=requests, max_source_coverage=coverage)
        assert len(checks) == before + 1  # and the general store went through the checks
        assert got == want
        withheld += sum(len(d.withheld) for d in got.values())
        assert fast.admitted_by_source(principal="bob", collection="hr") == \
            general.admitted_by_source(principal="bob", collection="hr")
    assert withheld > 50


class _Source(str):
    """A source name distinct as a dict key from an equal plain name."""

    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other


def test_sources_sharing_a_key_are_refused_as_before():
    budget = _budget.ExtractionBudget(_budget.MemoryBudgetStore(), window_s=50.0, clock=lambda: 1.0)
    requests = {_Source("doc"): ([1], 5), _Source("doc"): ([2], 5)}
    assert len(requests) == 2
    with pytest.raises(ValueError, match="keys must be distinct"):
        budget.admit_many(principal="bob", collection="hr", requests=requests, max_source_coverage=1.0)
    assert budget.admitted_by_source(principal="bob", collection="hr") == {}


@pytest.mark.parametrize("window", [-1.0, 0.0, float("nan"), float("inf")])
def test_a_window_made_invalid_after_creation_is_refused_as_before(window):
    budget = _budget.ExtractionBudget(_budget.MemoryBudgetStore(), window_s=50.0, clock=lambda: 1.0)
    budget.window_s = window
    with pytest.raises(ValueError, match="window_s must be"):
        budget.admit_many(principal="bob", collection="hr", requests={"doc": ([1], 5)}, max_source_coverage=1.0)


def test_an_int_window_set_after_creation_decides_as_its_float():
    budgets = [_budget.ExtractionBudget(_budget.MemoryBudgetStore(), window_s=50.0, clock=lambda: 1.0)
               for _ in range(2)]
    budgets[0].window_s, budgets[1].window_s = 10, 10.0
    for budget in budgets:
        budget.admit_many(principal="bob", collection="hr", requests={"doc": ([1, 2], 5)}, max_source_coverage=1.0)
    assert budgets[0].store._keys == budgets[1].store._keys


def test_decisions_are_frozen_dataclass_instances_with_every_field():
    cases = [(("k", [1, 2], 3), ["i:1", "i:2"], {"i:1", "i:2"}, 0, 2),
             (("k", [1, 2, 3], 2), ["i:1", "i:2", "i:3"], {"i:2"}, 1, 1),
             (("k", (4,), 0), ["i:4"], set(), 0, 0)]
    for charge, normalised, released, before, after in cases:
        got = _budget._decision(charge, normalised, released, before, after)
        want = _budget.BudgetDecision(
            admitted=[o for o, n in zip(charge[1], normalised) if n in released],
            withheld=[o for o, n in zip(charge[1], normalised) if n not in released],
            seen_before=before, seen_after=after, cap=charge[2], key=charge[0])
        assert type(got) is _budget.BudgetDecision
        assert got == want and repr(got) == repr(want)
        assert list(vars(got).items()) == list(vars(want).items())
        assert [f.name for f in dataclasses.fields(_budget.BudgetDecision)] == list(vars(got))
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.cap = 9  # type: ignore[misc]


class _Text(str):
    pass


PAYLOADS = [{"source": "a"}, {"source": ""}, {"source": _Text("b")}, {"source": ["a", "c", "a"]},
            {"source": 5}, {"source": None}, {"source": {"x": 1}}, {}, None, {"source": ["", None]},
            {"meta": {"source": "d"}}, {"source": "a", "meta": {"source": ["e", "f"]}}]


@pytest.mark.parametrize("field", ["source", "meta.source"])
def test_sources_listed_once_are_each_points_sources(field):
    pts = [types.SimpleNamespace(id=i, payload=p) for i, p in enumerate(PAYLOADS)] + [object()]
    assert _sourcefilters._sources_of_points(pts, field) == [point_sources(p, field) for p in pts]


def _reader(tmp_path, diversity):
    kit = make_kit(tmp_path)
    owner = hr_shared(kit, "hr", diversity)
    guard = owner.with_principal(kit.principal("bob", "support"))._guard
    return guard, guard.policy("hr")


def _finished(guard, pol, plan, pts):
    gen = guard.finish("query_points", "hr", pol, plan, pts, details := {})
    try:
        next(gen)
    except StopIteration as stop:
        return stop.value, details
    raise AssertionError("finish asked Qdrant something")


@pytest.mark.parametrize("mode", ["enforce", "monitor"])
def test_diversity_over_indices_keeps_what_it_keeps_over_points(tmp_path, mode):
    # Ranked points of one, several, repeated or no sources, with offsets and limits: finish keeps
    # the very points, in the order, that enforce_diversity keeps over the points themselves.
    diversity = {"max_source_coverage": None, "max_source_fraction": 0.4, "min_unique_sources": 3, "mode": mode}
    guard, pol = _reader(tmp_path, diversity)
    rng = np.random.default_rng(11)
    withheld = 0
    for _ in range(200):
        n = int(rng.integers(1, 25))
        pts = [types.SimpleNamespace(id=i, payload=PAYLOADS[int(rng.integers(0, 4))] if rng.random() < 0.5
                                     else {"source": f"s{int(rng.integers(0, 3))}"}) for i in range(n)]
        limit, offset = int(rng.integers(1, 8)), int(rng.integers(0, 3))
        plan = _reads.ReadPlan(user_with_payload=True, user_with_vectors=False, limit=limit, offset=offset,
                               diversify=True)
        got, details = _finished(guard, pol, plan, pts)
        ranked = pts[offset:]
        want = enforce_diversity(ranked, k=limit, source_of=lambda p: point_sources(p, "source"),
                                 max_source_fraction=0.4, min_unique_sources=3)
        kept = ranked[:limit] if mode == "monitor" else want.kept
        assert [id(p) for p in got] == [id(p) for p in kept]
        assert details["diversity"] == {"kept": len(want.kept), "withheld": len(want.withheld),
                                        "short_by": want.short_by, "unique_sources": want.unique_sources,
                                        "min_unique_met": want.min_unique_met,
                                        **({"monitor": True} if mode == "monitor" else {})}
        withheld += len(want.withheld) > 0
    assert withheld > 50


def test_exclusion_reads_the_clock_again_after_a_count(tmp_path, monkeypatch):
    # A cached size that goes stale while the exclusion waits for another source's count is
    # counted again, as when each size was looked up with its own clock read.
    guard, pol = _reader(tmp_path, {"max_source_coverage": 0.5, "max_source_fraction": 1.0, "min_unique_sources": 1})
    budget = guard.extraction_budget(pol)
    for source in ("s0", "s1"):
        budget.admit(principal=guard.principal_label, collection="hr", source=source, point_ids=[1],
                     source_size=4, max_source_coverage=0.5)
    first, second = budget.admitted_by_source(principal=guard.principal_label, collection="hr")  # listing order
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    # The first source listed has no size; the second's is fresh until that count takes 20 s.
    guard.shared["source_sizes"] = {("hr", second): (clock[0] - _budgetops._SOURCE_SIZE_TTL_S + 10.0, 4)}
    gen = guard.budget_exclusion("query_points", "hr", pol, "hr")
    counted = []
    try:
        call = next(gen)
        while True:
            counted.append(call.kwargs["count_filter"].should[0].match.value)
            clock[0] += 20.0
            call = gen.send(types.SimpleNamespace(count=4))
    except StopIteration:
        pass
    assert counted == [first, second]


def _drive_counts(gen, sizes, calls, clock=None):
    """Run a read-path generator, answering each ``count`` from ``sizes``; ``clock`` (a one-item
    list) moves on by 20 s during each count."""
    try:
        call = next(gen)
        while True:
            calls.append(call.kwargs["count_filter"].should[0].match.value)
            if clock is not None:
                clock[0] += 20.0
            call = gen.send(types.SimpleNamespace(count=sizes[calls[-1]]))
    except StopIteration as stop:
        return stop.value


def test_budget_sizes_are_the_cached_or_counted_sizes(tmp_path, monkeypatch):
    # Points of one, several or repeated sources, whose sizes are cached fresh, cached stale or not
    # at all: each source is counted when its cached size is not fresh, in the order the sources
    # first appear, and charged with max(its size, its distinct points), as when each size was
    # looked up through cached_source_size.
    guard, pol = _reader(tmp_path, {"max_source_coverage": 0.5, "max_source_fraction": 1.0, "min_unique_sources": 1})
    budget = guard.extraction_budget(pol)
    seen: list = []
    admit_many = budget.admit_many
    monkeypatch.setattr(budget, "admit_many", lambda **kw: seen.append(kw["requests"]) or admit_many(**kw))
    rng = np.random.default_rng(21)
    counted_any = cached_any = 0
    for _ in range(150):
        budget.store.reset()
        true = {f"s{i}": int(rng.integers(1, 9)) for i in range(6)}
        now = time.monotonic()
        guard.shared["source_sizes"] = {}
        for source in true:
            age = float(rng.choice([-1.0, 1.0, _budgetops._SOURCE_SIZE_TTL_S - 5.0, _budgetops._SOURCE_SIZE_TTL_S + 1.0]))
            if age >= 0:
                guard.shared["source_sizes"][("hr", source)] = (now - age, int(rng.integers(0, 9)))
        cache = dict(guard.shared["source_sizes"])
        pts = []
        for _ in range(int(rng.integers(1, 9))):
            named = [f"s{int(i)}" for i in rng.integers(0, 6, size=int(rng.integers(1, 3)))]
            pts.append(types.SimpleNamespace(id=int(rng.integers(0, 6)),
                                             payload={"source": named[0] if len(named) == 1 else named}))
        order = list(dict.fromkeys(s for p in pts for s in point_sources(p, "source")))
        fresh = {s: cache[("hr", s)][1] for s in order
                 if ("hr", s) in cache and time.monotonic() - cache[("hr", s)][0] < _budgetops._SOURCE_SIZE_TTL_S - 1.0}
        want_calls = [s for s in order if s not in fresh]
        want = {s: ([p.id for p in pts if s in point_sources(p, "source")],
                    max(fresh.get(s, true[s]), len({p.id for p in pts if s in point_sources(p, "source")})))
                for s in order}
        seen.clear()
        calls: list = []
        plan = _reads.ReadPlan(user_with_payload=True, user_with_vectors=False)
        _drive_counts(guard.apply_budget("query_points", "hr", pol, pts, {},
                                         lambda p: point_sources(p, "source"), plan=plan), true, calls)
        assert calls == want_calls
        assert seen == [want]
        counted_any += bool(calls)
        cached_any += len(calls) < len(order)
    assert counted_any > 50 and cached_any > 50


def test_budget_sizes_read_the_clock_again_after_a_count(tmp_path, monkeypatch):
    guard, pol = _reader(tmp_path, {"max_source_coverage": 0.5, "max_source_fraction": 1.0, "min_unique_sources": 1})
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    # s0 is counted first; s1's cached size goes stale while that count takes 20 s.
    guard.shared["source_sizes"] = {("hr", "s1"): (clock[0] - _budgetops._SOURCE_SIZE_TTL_S + 10.0, 4)}
    pts = [types.SimpleNamespace(id=1, payload={"source": "s0"}), types.SimpleNamespace(id=2, payload={"source": "s1"})]
    calls: list = []
    _drive_counts(guard.apply_budget("query_points", "hr", pol, pts, {}, lambda p: point_sources(p, "source")),
                  {"s0": 4, "s1": 4}, calls, clock)
    assert calls == ["s0", "s1"]


def test_a_bad_id_alone_in_its_source_is_refused_before_its_source_is_counted(tmp_path):
    guard, pol = _reader(tmp_path, {"max_source_coverage": 0.5, "max_source_fraction": 1.0, "min_unique_sources": 1})
    guard.shared["source_sizes"] = {}
    pts = [types.SimpleNamespace(id="not-a-uuid", payload={"source": "misc"})]
    calls: list = []
    with pytest.raises(ValueError, match="is not a UUID string"):
        _drive_counts(guard.apply_budget("query_points", "hr", pol, pts, {}, lambda p: point_sources(p, "source")),
                      {"misc": 4}, calls)
    assert calls == []
