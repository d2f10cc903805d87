"""Every public method of qdrant-client is either guarded or declared safe, with the same signature."""
from __future__ import annotations

import inspect

import pytest
import qdrant_client

import qdrant_guard
from qdrant_guard.surface import GUARDED, SAFE

PAIRS = [(qdrant_client.QdrantClient, qdrant_guard.QdrantClient),
         (qdrant_client.AsyncQdrantClient, qdrant_guard.AsyncQdrantClient)]


def public(cls):
    return {n for n in dir(cls) if not n.startswith("_")}


@pytest.mark.parametrize("base,ours", PAIRS, ids=["sync", "async"])
def test_no_public_method_is_unaccounted_for(base, ours):
    missing = sorted(public(base) - GUARDED - set(SAFE))
    assert not missing, (
        f"qdrant-client {base.__name__} has public members that are neither guarded nor declared safe: "
        f"{missing}. Add each to qdrant_guard/surface.py (GUARDED, or SAFE with a reason)."
    )


@pytest.mark.parametrize("base,ours", PAIRS, ids=["sync", "async"])
def test_guarded_methods_are_installed_with_the_original_signature(base, ours):
    for name in sorted(GUARDED & public(base)):
        original = getattr(base, name)
        mine = getattr(ours, name)
        assert mine is not original, f"{name} is not guarded"
        if name == "migrate" and base is qdrant_client.AsyncQdrantClient:
            with pytest.raises(NotImplementedError):  # qdrant-client's async migrate is unimplemented
                mine(None)
            continue
        assert inspect.signature(mine) == inspect.signature(original), name
        assert mine.__doc__ == original.__doc__, name
        assert inspect.iscoroutinefunction(mine) == inspect.iscoroutinefunction(original), name


@pytest.mark.parametrize("base,ours", PAIRS, ids=["sync", "async"])
def test_all_public_members_remain_available(base, ours):
    assert public(base) <= public(ours)


def test_safe_entries_have_reasons_and_are_not_also_guarded():
    assert not (set(SAFE) & GUARDED)
    assert all(isinstance(r, str) and len(r) > 5 for r in SAFE.values())


def test_subclass_relationship_for_isinstance_checks():
    assert issubclass(qdrant_guard.QdrantClient, qdrant_client.QdrantClient)
    assert issubclass(qdrant_guard.AsyncQdrantClient, qdrant_client.AsyncQdrantClient)


def test_constructor_accepts_every_original_argument():
    for base, ours in PAIRS:
        orig = inspect.signature(base.__init__).parameters
        mine = inspect.signature(ours.__init__).parameters
        for name, p in orig.items():
            assert name in mine, name
            if p.default is not inspect.Parameter.empty:
                assert mine[name].default == p.default, name
        assert {"guard", "principal", "embedder"} <= set(mine)


def test_raw_handles_are_refused_under_a_policy():
    c = qdrant_guard.QdrantClient(":memory:", guard=qdrant_guard.GuardConfig())
    with pytest.raises(qdrant_guard.QdrantGuardError, match="bypass the guard"):
        c.http
    plain = qdrant_guard.QdrantClient(":memory:")
    with pytest.raises(NotImplementedError):  # same behaviour as qdrant-client in local mode
        plain.http


@pytest.mark.parametrize("cls", [qdrant_guard.QdrantClient, qdrant_guard.AsyncQdrantClient], ids=["sync", "async"])
def test_init_options_are_refused_under_a_policy(cls):
    # init_options holds the connection's api_key, headers and auth_token_provider, and is made to be
    # passed back to a constructor: QdrantClient(**client.init_options) is a client without guard=
    # on the same server, so under a policy it is refused like the raw handles (also for a view).
    c = cls(":memory:", guard=qdrant_guard.GuardConfig(), api_key=None)
    with pytest.raises(qdrant_guard.QdrantGuardError, match="bypass the guard"):
        c.init_options
    with pytest.raises(qdrant_guard.QdrantGuardError, match="bypass the guard"):
        c.with_principal(None).init_options
    plain = cls(":memory:")
    assert plain.init_options == qdrant_client.QdrantClient(":memory:").init_options
