"""The facade's fast argument binder agrees with inspect.Signature.bind on every guarded method."""
from __future__ import annotations

import inspect

import pytest
import qdrant_client

from qdrant_guard._facade import _binder
from qdrant_guard.surface import GUARDED

METHODS = sorted(m for m in GUARDED if callable(getattr(qdrant_client.QdrantClient, m, None)))


def reference(original, args, kwargs):
    bound = inspect.signature(original).bind(None, *args, **kwargs)
    bound.apply_defaults()
    out = dict(bound.arguments)
    out.pop("self")
    out.update(out.pop("kwargs", None) or {})
    return out


@pytest.mark.parametrize("name", METHODS)
def test_binder_matches_signature_bind(name):
    original = getattr(qdrant_client.QdrantClient, name)
    params = [p for p in list(inspect.signature(original).parameters.values())[1:]
              if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    bind = _binder(original)
    values = [f"v{i}" for i in range(len(params))]
    for n in range(len(params) + 1):
        args = tuple(values[:n])
        kwargs = {p.name: f"k{i}" for i, p in enumerate(params[n:]) if p.default is inspect.Parameter.empty}
        assert bind(None, args, kwargs) == reference(original, args, kwargs)
    with pytest.raises(TypeError):
        bind(None, tuple(values) + ("extra",), {})
    with pytest.raises(TypeError):
        reference(original, tuple(values) + ("extra",), {})
    if params:
        with pytest.raises(TypeError, match="multiple values"):
            bind(None, (values[0],), {params[0].name: "again"})


def test_unknown_keywords_pass_into_kwargs_when_the_method_accepts_them():
    bind = _binder(qdrant_client.QdrantClient.query_points)
    out = bind(None, ("c",), {"query_text": "hello"})
    assert out["query_text"] == "hello" and out["collection_name"] == "c"
    bind_m = _binder(qdrant_client.QdrantClient.migrate)
    with pytest.raises(TypeError, match="unexpected keyword"):
        bind_m(None, (None,), {"nope": 1})
    with pytest.raises(TypeError, match="missing"):
        bind_m(None, (), {})
