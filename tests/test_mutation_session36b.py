"""Tests from mutation pass 13 (h-mut13 branch, 2026-12-06): the SQLite budget store's kept
listings (``_KeptListings`` and the store's changed lines, 7634cbb) and the twin's card coverage
rules (``_glued_start``, ``_glue_before``).

Each test kills mutants of ``scripts/mutate.py`` that survived every older test of the code.
docs/security-testing.md ("Mutation pass 13") lists the mutants, which test kills each and the
equivalent ones. Real SQLite files; no mocks.
"""
from __future__ import annotations

from qdrant_guard.budget import SqliteBudgetStore
from test_budget_sqlite_cache import P, W, _listed, _listings_read


def test_a_refresh_through_admit_under_a_longer_window_ends_a_shorter_windows_listing(tmp_path):
    """``admit`` (``_admit_many``) must move the connection's latest ``now`` as ``admit_points``
    does: a refresh changes no listing, so only that ``now`` stops a kept listing from being
    given to a caller whose clock is behind the refresh. Without ``kept.admitting(now)`` in
    ``_admit_many`` the listing at 40 s under 50 s still held a, which b's refresh at 90 s put out
    of the key's window (the existing test refreshes through ``admit_points`` only)."""
    store = SqliteBudgetStore(tmp_path / "b.db")
    store.admit(P + "s", ["a"], cap=5, window_s=50.0, now=0.0)
    store.admit(P + "s", ["b"], cap=5, window_s=50.0, now=10.0)
    assert _listed(store, 10.0, window=50.0) == {"s": {"a", "b"}}
    store.admit(P + "s", ["b"], cap=5, window_s=100.0, now=90.0)  # a refresh: no id added
    assert _listed(store, 40.0, window=50.0) == {"s": {"b"}}
    store.close()


def test_a_listing_whose_oldest_id_is_exactly_a_window_old_is_kept_and_given(tmp_path):
    """An id exactly ``window_s`` old still counts (``ts >= now - window``), so a listing whose
    oldest id is at the window's edge holds every id: it is kept (``oldest >=``; with ``>`` it
    was read again) and given while the edge is not passed (``end - window <= oldest``; with
    ``<`` the next read at that edge ran the query again). The answers are the same either way;
    the query count is what the kept listing is for."""
    store = SqliteBudgetStore(tmp_path / "b.db")
    store.admit(P + "s", ["a"], cap=5, window_s=W, now=0.0)
    store.admit(P + "s", ["b"], cap=5, window_s=W, now=40.0)
    queries = _listings_read(store)
    assert _listed(store, W) == {"s": {"a", "b"}}  # a is exactly W old: kept
    assert _listed(store, W) == {"s": {"a", "b"}} and queries[0] == 1  # given at the edge
    assert _listed(store, W + 0.5) == {"s": {"b"}} and queries[0] == 2
    store.close()


def test_the_connection_keeps_at_most_1024_listings(tmp_path):
    """Past 1024 kept listings all are dropped (``len >= _LISTINGS_KEPT``): with ``>`` the
    connection kept 1025, and without the ``clear()`` one per prefix it ever listed."""
    store = SqliteBudgetStore(tmp_path / "b.db")
    for i in range(1100):
        store.admit(f"src|p{i}|c|s", ["1"], cap=5, window_s=W, now=0.0)
    most = 0
    for i in range(1100):
        assert store.entries_by_prefix(f"src|p{i}|c|", window_s=W, now=0.0) == {f"src|p{i}|c|s": frozenset({"1"})}
        most = max(most, len(store._local.kept.by_prefix))
    assert most == 1024
    store.close()


def test_an_admission_drops_the_listing_of_every_prefix_of_its_key_empty_parts_included(tmp_path):
    """``changed`` drops the listing of each prefix of the key ending at a ``|``, one by one
    (``key.find("|", end + 1)``): with ``end + 2`` a ``|`` right after another was skipped, so the
    listing of ``src||`` (an empty principal) was given again without the id just added; and
    with ``end > 0`` a key's leading ``|`` (the store takes any key) was never a prefix's end."""
    store = SqliteBudgetStore(tmp_path / "b.db")
    store.admit("|s", ["a"], cap=5, window_s=W, now=0.0)
    assert _listed(store, 1.0, prefix="|") == {"s": {"a"}}
    store.admit("|s", ["b"], cap=5, window_s=W, now=2.0)
    assert _listed(store, 3.0, prefix="|") == {"s": {"a", "b"}}
    store.admit("src||c|s", ["a"], cap=5, window_s=W, now=0.0)
    assert _listed(store, 1.0, prefix="src||") == {"c|s": {"a"}}
    store.admit("src||c|s", ["b"], cap=5, window_s=W, now=2.0)
    assert _listed(store, 3.0, prefix="src||") == {"c|s": {"a", "b"}}
    store.close()
