"""The second round of read-path shortcuts, each against the general code it skips: the memory
store's listing (kept timestamp spans) against a pass over every entry, and the budget's listing
by source against the comprehension it replaced."""
from __future__ import annotations

import numpy as np
import pytest

from qdrant_guard import budget as _budget

WINDOWS = (50.0, 100.0)


def _general_listing(store, prefix, window_s, now):
    # What entries_by_prefix lists, read off every key's entries with no kept state.
    return {key: _budget._in_window(entries.items(), window_s, now)
            for key, entries in store._keys.items()
            if key.startswith(prefix) and _budget._in_window(entries.items(), window_s, now)}


def _random_step(store, rng, keys, ids, now):
    window = float(rng.choice(WINDOWS))
    kind = int(rng.integers(0, 6))
    picked = [str(i) for i in rng.choice(ids, size=int(rng.integers(1, 5)))]
    if kind == 0:
        store.admit(str(rng.choice(keys)), picked, cap=int(rng.integers(0, 6)), window_s=window, now=now)
    elif kind == 1:
        chosen = list(dict.fromkeys(str(k) for k in rng.choice(keys, size=int(rng.integers(1, 4)))))
        points = [(pid, sorted(set(int(m) for m in rng.choice(len(chosen), size=int(rng.integers(1, len(chosen) + 1))))))
                  for pid in dict.fromkeys(picked)]
        store.admit_points([(k, int(rng.integers(0, 6))) for k in chosen], points, window_s=window, now=now)
    elif kind == 2:
        store.admit_many_counted([(str(rng.choice(keys)), picked, int(rng.integers(0, 6)))],
                                 window_s=window, now=now)
    elif kind == 3:
        store.seen(str(rng.choice(keys)), window_s=window, now=now)
    elif kind == 4 and rng.random() < 0.2:
        store.reset(str(rng.choice(keys)) if rng.random() < 0.8 else None)


@pytest.mark.parametrize("seed", range(6))
def test_kept_spans_list_what_a_pass_over_every_entry_lists(seed):
    # Admissions (adding, refreshing, withholding), expiry, resets and listings interleaved, at
    # times that jump forward and back, under two window lengths sharing the keys: every listing
    # must equal the general pass over the raw entries.
    rng = np.random.default_rng(seed)
    store = _budget.MemoryBudgetStore()
    keys = [f"src|p|c|s{i}" for i in range(4)] + ["src|p|d|s0", "src|q|c|s0"]
    ids = np.arange(12)
    now = 0.0
    listings = 0
    for _ in range(1500):
        now = max(0.0, now + float(rng.choice([0.0, 1.0, 7.0, 30.0, 60.0, -20.0, 0.5])))
        _random_step(store, rng, keys, ids, now)
        for _ in range(int(rng.integers(0, 3))):
            prefix = str(rng.choice(["src|p|c|", "src|p|", "src|", "src|q|c|"]))
            window = float(rng.choice(WINDOWS))
            at = max(0.0, now + float(rng.choice([0.0, -10.0, 5.0, 45.0])))
            assert store.entries_by_prefix(prefix, window_s=window, now=at) == \
                _general_listing(store, prefix, window, at)
            listings += 1
    assert listings > 1000 and store._spans  # the kept spans were exercised


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
