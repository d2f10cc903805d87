"""canonical_json's json fast path gives the same bytes and the same errors as the original encoder.

``_reference_canonical_json`` below runs the general encoder alone (the encoder as it was before
the fast path; canonical_json still uses it for whatever the fast path does not vouch for) as the
oracle: every case runs through both, and outcomes (bytes, or exception type and message) must be
equal.
"""
from __future__ import annotations

import enum
import math
import sys
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qdrant_guard.canonical import _encode, canonical_json, decode_canonical, is_canonical


def _reference_canonical_json(obj: Any) -> bytes:
    """The general encoder alone (what canonical_json did before the json fast path)."""
    out: list[str] = []
    _encode(obj, out, "$")
    return "".join(out).encode("utf-8")


def _outcome(fn: Any, obj: Any) -> tuple[Any, ...]:
    try:
        return ("ok", fn(obj))
    except Exception as exc:  # the comparison is the point: same type, same message
        return ("error", type(exc), str(exc))


def assert_same(obj: Any) -> None:
    got = _outcome(canonical_json, obj)
    want = _outcome(_reference_canonical_json, obj)
    assert got == want


# --- odd but legal (or illegal) values the fast path must hand to the general encoder ----------

class Text(str):
    pass


class LoudText(str):
    def __str__(self) -> str:
        return "LOUD"


class Count(int):
    def __repr__(self) -> str:
        return "Count(?)"


class Colour(enum.IntEnum):
    RED = 1


class Real(float):
    pass


class ShiftedReal(float):
    def __float__(self) -> float:
        return float.__float__(self) + 1.0


class Rows(list):
    def __iter__(self):  # json's C encoder ignores this; the canonical encoder must not
        return iter(list.copy(self)[::-1])


class Table(dict):
    def items(self):  # json's C encoder calls items() on dict subclasses
        return [(k, "changed") for k in self]


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2 ** 200), max_value=2 ** 200),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 5e-324, 1e300, 1e16, 1e-7, 0.1, 1.7976931348623157e308, 2.0 ** 53]),
    st.text(st.characters(codec=None, exclude_categories=()), max_size=12),
    st.text(max_size=4).map(Text),
    st.text(max_size=4).map(LoudText),
    st.integers(-5, 5).map(Count),
    st.just(Colour.RED),
    st.floats(allow_nan=True).map(Real),
    st.floats(-1e6, 1e6).map(ShiftedReal),
    st.floats(allow_nan=True).map(np.float64),
    st.integers(-5, 5).map(np.int64),
    st.sampled_from([b"x", bytearray(b"y"), {1, 2}, frozenset(), object, 1j]),
)
keys = st.one_of(
    st.text(st.characters(codec=None, exclude_categories=()), max_size=6),
    st.text(max_size=3).map(Text),
    st.integers(-3, 3),
    st.sampled_from([1.5, True, None, (1, 2)]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=5).map(tuple),
        st.lists(inner, max_size=3).map(Rows),
        st.dictionaries(keys, inner, max_size=5),
        st.dictionaries(st.text(max_size=4), inner, max_size=5),
        st.dictionaries(st.text(max_size=3), inner, max_size=3).map(Table),
        st.dictionaries(st.text(max_size=3), inner, max_size=3).map(OrderedDict),
    ),
    max_leaves=25,
)
plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
              st.text(st.characters(codec="utf-8"), max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=6), inner, max_size=5)),
    max_leaves=30,
)


@settings(max_examples=600, deadline=None)
@given(values)
def test_same_bytes_and_errors_as_the_reference(obj):
    assert_same(obj)
    assert_same({"wrapped": [obj, {"again": obj}]})


@settings(max_examples=300, deadline=None)
@given(plain)
def test_plain_values_round_trip_through_decode(obj):
    data = canonical_json(obj)
    assert data == _reference_canonical_json(obj)
    assert decode_canonical(data) == obj


@pytest.mark.parametrize("obj", [
    {"a": float("nan")},
    {"b": [1, 2, {"c": -math.inf}]},
    {"z": math.inf, "a": {"k": object()}},          # the first error in walk order wins
    {"a": b"bytes", "b": float("nan")},
    {1: "int key"}, {"x": {True: 1}}, {"x": {None: 1}}, {"x": {1.5: 1}},
    {"a": 1, 2: "key checked before values", "c": float("nan")},
    {"s": "lone \ud800 surrogate"},                  # UnicodeEncodeError at the same position
    {"s": "\ud800", "n": math.nan},
    {"big": 10 ** 5000},                             # int too long for str(): ValueError
    {"big": 10 ** 5000, "a": math.nan},
    [ShiftedReal(1.5)], {"r": Real(-0.0)}, Rows([1, 2, 3]), Table(a=1, b=2),
    {"e": Colour.RED, "c": Count(7)},
    (1, (2, (3,))), [], {}, "", -0.0, 0, True, None, 2 ** 63, -(2 ** 64),
    {"\u2028": "\x00\x1f\"\\/", "é": "😀"},
    np.float64(0.1), np.int64(3), np.float32(0.5),
])
def test_same_outcome_on_edge_cases(obj):
    assert_same(obj)


def test_recursion_limits_and_cycles_behave_as_before():
    deep: Any = []
    for _ in range(sys.getrecursionlimit() + 10):
        deep = [deep]
    assert _outcome(canonical_json, deep)[:2] == _outcome(_reference_canonical_json, deep)[:2]
    cycle: list[Any] = []
    cycle.append(cycle)
    assert _outcome(canonical_json, cycle)[:2] == ("error", RecursionError)
    assert _outcome(_reference_canonical_json, cycle)[:2] == ("error", RecursionError)


def test_errors_name_the_path():
    with pytest.raises(ValueError, match=r"\$\.a\[1\] is nan"):
        canonical_json({"a": [0.0, math.nan]})
    with pytest.raises(TypeError, match=r"\$\.x has a key of type int"):
        canonical_json({"x": {1: 2}})


def test_decode_canonical_deep_nesting_is_a_value_error():
    # Verifiers turn ValueError into a rejection; json's RecursionError would escape them.
    with pytest.raises(ValueError, match="nested too deeply"):
        decode_canonical(b"[" * 100_000 + b"]" * 100_000)
    assert not is_canonical(b'{"a":' * 100_000 + b"1" + b"}" * 100_000)
