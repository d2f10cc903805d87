"""The second round of read-path shortcuts, each against the general code it skips: the memory
store's listing (kept timestamp spans) against a pass over every entry, and the budget's listing
by source against the comprehension it replaced."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from qdrant_guard import budget as _budget
from qdrant_guard import budget_store_base as _store_base

WINDOWS = (50.0, 100.0)


class _General(_budget.MemoryBudgetStore):
    """The memory store with the listing and expiry read off every entry: no kept state used."""

    def _expire_listed(self, key, window_s, now):
        return self._expire(key, window_s, now)

    def _admit_points(self, keys, points, window_s, now):
        # As it read before its one-key shortcut, with _expire.
        with self._lock:
            live = [self._expire(key, window_s, now) for key, _ in keys]
            sets = [entries if entries is not None else OrderedDict() for entries, _ in live]
            before = [len(entries) for entries in sets]
            released = []
            for pid, members in points:
                ok = all(pid in sets[k] or len(sets[k]) < keys[k][1] for k in members)
                if ok:
                    for k in members:
                        sets[k][pid] = live[k][1]
                        sets[k].move_to_end(pid)
                released.append(ok)
            for (key, _), entries, count in zip(keys, sets, before):
                if len(entries) != count:
                    self._frozen.pop(key, None)
                if entries:
                    self._put(key, entries)
            return released, [(b, len(entries)) for b, entries in zip(before, sets)]

    def _entries_by_prefix(self, prefix, window_s, now):
        with self._lock:
            found = {key: _store_base._in_window(entries.items(), window_s, now)
                     for key, entries in self._keys.items() if key.startswith(prefix)}
        return {key: ids for key, ids in found.items() if ids}


def _random_step(stores, rng, keys, ids, now):
    window = float(rng.choice(WINDOWS))
    kind = int(rng.integers(0, 6))
    picked = [str(i) for i in rng.choice(ids, size=int(rng.integers(1, 5)))]
    if kind == 0:
        key, cap = str(rng.choice(keys)), int(rng.integers(0, 6))
        return [s.admit_counted(key, picked, cap=cap, window_s=window, now=now) for s in stores]
    if kind == 1:
        chosen = list(dict.fromkeys(str(k) for k in rng.choice(keys, size=int(rng.integers(1, 4)))))
        points = [(pid, sorted(set(int(m) for m in rng.choice(len(chosen), size=int(rng.integers(1, len(chosen) + 1))))))
                  for pid in dict.fromkeys(picked)]
        caps = [(k, int(rng.integers(0, 6))) for k in chosen]
        return [s.admit_points(caps, points, window_s=window, now=now) for s in stores]
    if kind == 2:
        request = [(str(rng.choice(keys)), picked, int(rng.integers(0, 6)))]
        return [s.admit_many_counted(request, window_s=window, now=now) for s in stores]
    if kind == 3:
        key = str(rng.choice(keys))
        return [s.seen(key, window_s=window, now=now) for s in stores]
    if kind == 4 and rng.random() < 0.2:
        key = str(rng.choice(keys)) if rng.random() < 0.8 else None
        return [s.reset(key) for s in stores]
    return [None, None]


PREFIXES = ["src|p|c|", "src|p|", "src|", "src|q|c|", "src|p|c|s1", "src|p|c|s", "src|p|d", ""]


@pytest.mark.parametrize("seed", range(6))
def test_kept_spans_decide_and_list_as_a_pass_over_every_entry(seed):
    # Admissions (adding, refreshing, withholding), expiry, resets and listings interleaved, at
    # times that jump forward and back, under two window lengths sharing the keys: the store with
    # kept spans answers every call as the store that reads every entry, and holds the same entries.
    rng = np.random.default_rng(seed)
    fast, general = stores = (_budget.MemoryBudgetStore(), _General())
    keys = [f"src|p|c|s{i}" for i in range(4)] + ["src|p|d|s0", "src|q|c|s0"]
    ids = np.arange(12)
    now = 0.0
    listings = 0
    for _ in range(1500):
        now = max(0.0, now + float(rng.choice([0.0, 1.0, 7.0, 30.0, 60.0, -20.0, 0.5])))
        got, want = _random_step(stores, rng, keys, ids, now)
        assert got == want
        for _ in range(int(rng.integers(0, 3))):
            prefix = str(rng.choice(PREFIXES))
            window = float(rng.choice(WINDOWS))
            at = max(0.0, now + float(rng.choice([0.0, -10.0, 5.0, 45.0])))
            got, want = (s.entries_by_prefix(prefix, window_s=window, now=at) for s in stores)
            assert got == want
            listings += 1
        assert {k: list(v.items()) for k, v in fast._keys.items()} == \
            {k: list(v.items()) for k, v in general._keys.items()}
    assert listings > 1000 and fast._spans  # the kept spans were exercised


class _Listing:
    """A third-party store's listing: keys as given, id collections of any kind."""

    def __init__(self, found):
        self.found = found

    def entries_by_prefix(self, prefix, *, window_s, now):
        return self.found

    def admit(self, *a, **k):
        raise NotImplementedError

    seen = reset = admit


@pytest.mark.parametrize("found", [
    {},
    {"src|bob|hr|payroll": frozenset({"i:1"}), "src|bob|hr|a%7Cb": frozenset({"i:2", "i:3"})},
    {"src|bob|hr|100%25": {"i:4"}, "src|bob|hr|%257C": ["i:5", "i:5"], "src|bob|hr|x": ("i:6",)},
    {"src|bob|hr|plain": frozenset(), "src|bob|hr|%25%7C%25": frozenset({"i:7"})},
])
def test_listing_by_source_is_the_general_comprehension(found):
    budget = _budget.ExtractionBudget(_Listing(found), window_s=10.0, clock=lambda: 5.0)
    prefix = "src|bob|hr|"
    general = {_budget._unescape_part(key[len(prefix):]): frozenset(ids) for key, ids in found.items()}
    listed = budget.admitted_by_source(principal="bob", collection="hr")
    assert listed == general and list(listed) == list(general)
    assert all(type(ids) is frozenset for ids in listed.values())


class _Pair(tuple):
    """A tuple subclass: not a plain tuple, so _check_points takes its general checks."""


class _Named(str):
    pass


@pytest.mark.parametrize("pair", [("k", 1), ("k", 0), ("", 1), ("k", -1), ("k", True), ("k", 1.0), (_Named("k"), 1),
                                  ("k", np.int64(2)), (7, 1), ("k",), ("k", 1, 2), ("k", None), ("k", 10**30)])
def test_plain_keys_check_as_the_general_checks(pair):
    def outcome(first):
        try:
            keys, points = _store_base._check_points([first, ("other", 3)], [("i:1", [0, 1])])
        except (TypeError, ValueError) as exc:
            return type(exc), str(exc)
        return [(k, c, type(k), type(c)) for k, c in keys], points

    assert outcome(pair) == outcome(_Pair(pair))
    assert outcome(pair) != outcome(_Pair(("k", 2))) or pair == ("k", 2)


# -- the read path: a source's cached size looked up inline, a budget with nothing to withhold ---

import time as _time
import types
import uuid

from qdrant_guard import budgetops as _budgetops
from qdrant_guard import reads as _reads
from qdrant_guard.budget import normalize_point_id
from tests.guardkit import hr_shared, make_kit


def _drive(gen, sizes, calls):
    """Run a read-path generator, answering each ``count`` from ``sizes`` (source -> size)."""
    try:
        call = next(gen)
        while True:
            calls.append(call)
            source = call.kwargs["count_filter"].should[0].match.value if call.kwargs["count_filter"].should else None
            call = gen.send(types.SimpleNamespace(count=sizes.get(source, 3)))
    except StopIteration as stop:
        return stop.value


def _reader(tmp_path, restricted=()):
    kit = make_kit(tmp_path)
    diversity = {"max_source_coverage": 0.5, "max_source_fraction": 1.0, "min_unique_sources": 1}
    if restricted:
        diversity["restricted_sources"] = list(restricted)
    owner = hr_shared(kit, "hr", diversity)
    bob = owner.with_principal(kit.principal("bob", "support"))
    guard = bob._guard
    return guard, guard.policy("hr")


def _general_exclusion(self, op, name, pol, account):
    # budget_exclusion as it read before its cached sizes were looked up inline.
    exclusion = _reads.Exclusion(pol.source_field)
    listed = self._admitted_by_source(op, name, pol, account)
    restricted = pol.diversity.restricted_sources
    coverage = pol.diversity.max_source_coverage
    cap_for = self.extraction_budget(pol).cap_for
    cached = self.cached_source_size
    for source, ids in (listed or {}).items():
        if restricted and source not in restricted:
            continue
        size = cached(account, source)
        if size is None:
            size = yield from self.source_size(account, pol, source)
        if len(ids) >= cap_for(size, coverage):
            exclusion.sources[source] = ids
    sized = [source for (where, source), (_, size) in list(self.shared.get("source_sizes", {}).items())
             if where == account and size * coverage < 1.000001 and source not in exclusion.sources
             and (not restricted or source in restricted) and cap_for(size, coverage) == 0]
    for source in sized:
        size = cached(account, source)
        if size is None:
            size = yield from self.source_size(account, pol, source)
        if cap_for(size, coverage) == 0:
            exclusion.sources[source] = frozenset()
    return exclusion


@pytest.mark.parametrize("restricted", [(), ("s1", "s3", "s5")])
def test_exclusion_with_inline_size_lookups_is_the_general_exclusion(tmp_path, restricted):
    # Sources listed with fresh, stale and missing cached sizes, some used up: the same count
    # requests in the same order, and the same exclusion, as looking each size up through
    # cached_source_size.
    guard, pol = _reader(tmp_path, restricted)
    rng = np.random.default_rng(5)
    budget = guard.extraction_budget(pol)
    calls = excluded = 0
    for trial in range(60):
        budget.store.reset()
        guard.shared["source_sizes"] = {}
        sizes = {f"s{i}": int(rng.integers(1, 9)) for i in range(8)}
        for source, size in sizes.items():
            taken = int(rng.integers(0, size + 1))
            budget.admit(principal=guard.principal_label, collection="hr", source=source, point_ids=list(range(100 * trial, 100 * trial + taken)),
                         source_size=size, max_source_coverage=0.5)
            age = float(rng.choice([-1.0, 1.0, _budgetops._SOURCE_SIZE_TTL_S - 0.5, _budgetops._SOURCE_SIZE_TTL_S + 1.0]))
            if age >= 0:
                cached = sizes[source] if rng.random() < 0.7 else int(rng.integers(0, 3))
                guard.shared["source_sizes"][("hr", source)] = (_time.monotonic() - age, cached)
        before = dict(guard.shared["source_sizes"])
        want_calls: list = []
        want = _drive(_general_exclusion(guard, "query_points", "hr", pol, "hr"), sizes, want_calls)
        guard.shared["source_sizes"] = dict(before)
        got_calls: list = []
        got = _drive(guard.budget_exclusion("query_points", "hr", pol, "hr"), sizes, got_calls)
        assert [c.kwargs for c in got_calls] == [c.kwargs for c in want_calls]
        assert got == want
        calls += len(want_calls)
        excluded += len(want.sources)
    assert calls > 50 and excluded > 50


def _point(rng, ids, sources):
    pid = ids[int(rng.integers(0, len(ids)))]
    named = [sources[int(i)] for i in rng.integers(0, len(sources), size=int(rng.integers(0, 3)))]
    value = named[0] if len(named) == 1 else named or None
    return types.SimpleNamespace(id=pid, payload={"source": value})


@pytest.mark.parametrize("restricted", [(), ("s1", "s2")])
def test_budgeted_points_are_the_general_filter(tmp_path, restricted):
    # Random reads (int and UUID ids in several forms, repeats, points of several sources or of
    # none) against a budget that withholds some of them: the points returned are the points
    # whose normalised id was not withheld, in order.
    guard, pol = _reader(tmp_path, restricted)
    rng = np.random.default_rng(9)
    u = [uuid.UUID(int=int(x)) for x in rng.integers(1, 2**62, size=4)]
    ids = [0, 1, 2, 3, 4, 5, str(u[0]), str(u[0]).upper(), u[1].hex, "{%s}" % u[2], str(u[3])]
    sources = ["s1", "s2", "s3"]
    withheld_some = nothing_withheld = 0
    for _ in range(300):
        if rng.random() < 0.3:
            guard.extraction_budget(pol).store.reset()
        pts = [_point(rng, ids, sources) for _ in range(int(rng.integers(0, 8)))]
        plan = _reads.ReadPlan(user_with_payload=True, user_with_vectors=False)
        out = _drive(guard.apply_budget("query_points", "hr", pol, pts, {},
                                        lambda p: _reads._sources(p, "source"), plan=plan), {}, [])
        assert out == [p for p in pts if normalize_point_id(p.id) not in plan.withheld_ids]
        assert all(a is b for a, b in zip(out, [p for p in pts if normalize_point_id(p.id) not in plan.withheld_ids]))
        withheld_some += bool(plan.withheld_ids)
        nothing_withheld += bool(pts) and not plan.withheld_ids
    assert withheld_some > 20 and nothing_withheld > 20


@pytest.mark.parametrize("restricted", [(), ("payroll",)])
def test_a_bad_id_is_refused_with_or_without_anything_withheld(tmp_path, restricted):
    # Every returned id is normalised, also one of a source the budget does not restrict.
    guard, pol = _reader(tmp_path, restricted)
    pts = [types.SimpleNamespace(id=1, payload={"source": "payroll"}),
           types.SimpleNamespace(id="not-a-uuid", payload={"source": "misc"})]
    with pytest.raises(ValueError, match="is not a UUID string"):
        _drive(guard.apply_budget("query_points", "hr", pol, pts, {}, lambda p: _reads._sources(p, "source")), {}, [])


# -- a point's sources and the diversity selection ------------------------------------------------

from qdrant_guard import diversity as _diversity
from qdrant_guard import sources as _sources_mod


class _Str(str):
    pass


@pytest.mark.parametrize("field", ["source", "meta.source", "other"])
def test_a_points_sources_are_its_payloads_sources(field):
    values = ["memo", "", _Str("memo"), ["a", "b", "a"], ["a", "", None, 3], 7, None, {"source": "x"},
              {"source": ["y", "z"]}, True, 1.5, ("t",)]
    payloads = [None, "text", [1], *({"source": v, "other": v} for v in values), *({"meta": v} for v in values), {}]
    for payload in payloads:
        for point in (types.SimpleNamespace(payload=payload), types.SimpleNamespace()):
            want = _sources_mod.payload_sources(getattr(point, "payload", None), field)
            got = _sources_mod.point_sources(point, field)
            assert got == want and type(got) is type(want)


def _general_select(sources, *, k, cap, min_unique, totals, total_cap):
    # _select's first pass as it read before its one-source shortcut, then its unchanged rest.
    counts: dict[str, int] = {}
    kept: list[int] = []
    for index, names in enumerate(sources):
        if len(kept) < k and all(counts.get(n, 0) < cap and totals.get(n, 0) < total_cap for n in names):
            kept.append(index)
            for n in names:
                counts[n] = counts.get(n, 0) + 1
                totals[n] = totals.get(n, 0) + 1
    return counts, kept


def test_first_pass_of_select_is_the_general_pass(monkeypatch):
    rng = np.random.default_rng(11)
    names = ["a", "b", "c", "d", "e"]
    for _ in range(3000):
        sources = [tuple(dict.fromkeys(names[int(i)] for i in rng.integers(0, 5, size=int(rng.choice([1, 1, 1, 2, 3])))))
                   for _ in range(int(rng.integers(0, 14)))]
        k, cap, total_cap = int(rng.integers(1, 8)), int(rng.integers(1, 4)), int(rng.integers(1, 6))
        totals = {n: int(rng.integers(0, 3)) for n in names if rng.random() < 0.4}
        want_totals = dict(totals)
        want_counts, want_kept = _general_select(sources, k=k, cap=cap, min_unique=0, totals=want_totals,
                                                 total_cap=total_cap)
        kept, met = _diversity._select(sources, k=k, cap=cap, min_unique=0, totals=totals, total_cap=total_cap)
        assert kept == want_kept and totals == want_totals and met
        assert len({n for i in kept for n in sources[i]}) == len(want_counts)


# -- the budget's decisions --------------------------------------------------------------------------

def _general_decision(charge, normalised, released, before, after):
    key, originals, cap = charge
    return _budget.BudgetDecision(admitted=[o for o, n in zip(originals, normalised) if n in released],
                                  withheld=[o for o, n in zip(originals, normalised) if n not in released],
                                  seen_before=before, seen_after=after, cap=cap, key=key)


def test_decisions_are_the_general_decisions():
    rng = np.random.default_rng(13)
    pool = [0, 1, 2, 3, "00000000-0000-0000-0000-000000000001", "00000000000000000000000000000002"]
    for _ in range(3000):
        originals = [pool[int(i)] for i in rng.integers(0, len(pool), size=int(rng.integers(0, 6)))]
        normalised = [_budget.normalize_point_id(o) for o in originals]
        released = {_budget.normalize_point_id(pool[int(i)]) for i in rng.integers(0, len(pool), size=int(rng.integers(0, 7)))}
        for given in (originals, tuple(originals)):
            charge = ("src|p|c|s", given, int(rng.integers(0, 5)))
            got = _budget._decision(charge, normalised, released, 1, 2)
            assert got == _general_decision(charge, normalised, released, 1, 2)
            assert type(got.admitted) is list and got.admitted is not given


@pytest.mark.parametrize("size", [0, 3, -1, True, 1.0, np.int64(3), None, "3"])
def test_source_sizes_check_as_the_general_check(size):
    budget = _budget.ExtractionBudget(_budget.MemoryBudgetStore(), window_s=10.0, clock=lambda: 5.0)

    def outcome(call):
        try:
            call()
        except (TypeError, ValueError) as exc:
            return type(exc), str(exc)
        return None

    want = outcome(lambda: _store_base._check_count("source_size", size))
    got = outcome(lambda: budget.admit_many(principal="p", collection="c", requests={"s": ([1], size)},
                                            max_source_coverage=0.5))
    assert got == want


@pytest.mark.parametrize("pair", [("i:1", [0]), ("i:1", [1]), ("i:1", [2]), ("i:1", [-1]), ("i:1", [True]),
                                  ("i:1", [np.int64(0)]), (_Named("i:1"), [0]), ("i:1", (0,)), ("i:1", [0, 1]),
                                  ("i:1", [0.0]), (1, [0]), ("i:1", []), ("i:1", [1, 1]), ("i:1",), ("i:1", "0")])
def test_one_key_points_check_as_the_general_checks(pair):
    def outcome(point):
        try:
            keys, points = _store_base._check_points([("k0", 1), ("k1", 2)], [point])
        except (TypeError, ValueError) as exc:
            return type(exc), str(exc)
        return keys, [(pid, members, type(pid), type(members), [type(m) for m in members]) for pid, members in points]

    assert outcome(pair) == outcome(_Pair(pair))


@pytest.mark.parametrize("parts", [("bob", "hr"), ("a|b", "c"), ("100%", "x%7C"), ("|%|", "%25"), (_Named("bob"), "hr"),
                                   ("", "hr"), ("bob", ""), (None, "hr"), ("bob", 7)])
def test_listing_prefix_is_the_prefix_built_each_time(parts):
    class Recording(_Listing):
        def entries_by_prefix(self, prefix, *, window_s, now):
            self.prefix = prefix
            return {}

    def outcome():
        store = Recording({})
        budget = _budget.ExtractionBudget(store, window_s=10.0, clock=lambda: 5.0)
        try:
            budget.admitted_by_source(principal=parts[0], collection=parts[1])
        except (TypeError, ValueError) as exc:
            return type(exc), str(exc)
        return store.prefix, type(store.prefix)

    def general():
        try:
            checked = (_store_base._check_str("principal", parts[0]), _store_base._check_str("collection", parts[1]))
        except (TypeError, ValueError) as exc:
            return type(exc), str(exc)
        prefix = "src|" + "|".join(_budget._escape_part(p) for p in checked) + "|"
        return prefix, type(prefix)

    assert outcome() == general() == outcome()  # the second answer may come from the key cache


# -- a query's text is scanned once for its audit entry and its screen -----------------------------

from qdrant_guard import QdrantClient

from qdrant_guard import detect as _detect
from qdrant_guard.errors import QdrantGuardError

TEXTS = ["plain question about payroll", "SSN 123-45-6789 of jane@example.com", "",
         "key AKIAIOSFODNN7EXAMPLE and ghp_" + "a" * 36, "call +1 415 555 0100 now", "caf\u00e9 \ud800 \x00 text",
         "token=sk-" + "b" * 48]


@pytest.mark.parametrize("pol", [
    {"class": "PII"}, {"class": "PII", "credentials_in_text": "redact"}, {"class": "PII", "redact_pii": False},
    {"class": "PUBLIC"}, {"class": "PUBLIC", "allow_redaction_on_public": True, "credentials_in_text": "redact"},
])
def test_a_screen_given_the_scan_is_the_screen_that_scans(tmp_path, pol):
    kit = make_kit(tmp_path)
    full = pol if pol["class"] == "PUBLIC" else {"owner": "hr", "intent": {"enabled": False}, **pol}
    client = QdrantClient(":memory:", guard=kit.config({"c": full}),
                          principal=kit.principal("alice", "hr"))
    guard = client._guard
    policy = guard.policy("c")

    def outcome(**kw):
        try:
            return guard.screen_text("query_points", "c", policy, text, **kw)
        except QdrantGuardError as exc:
            return type(exc), str(exc)

    outcomes = set()
    for text in TEXTS:
        want = outcome()
        assert outcome(scanned=_detect.redact_with_findings(text)) == want
        assert _detect.redact_with_findings(text)[0] == _detect.redact(text)
        outcomes.add(want if isinstance(want, tuple) else want == text)
    assert len(outcomes) >= 2  # the texts reach more than one outcome under this policy
