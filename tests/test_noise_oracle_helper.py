"""Self-tests of tests/oracle.py: the helper must catch every kind of divergence it claims to."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from oracle import assert_equal_results, assert_same


def _raise(exc_type: type[Exception], msg: str):
    def fn(*_a, **_k):
        raise exc_type(msg)

    return fn


def _const(value):
    return lambda *_a, **_k: value


@dataclasses.dataclass
class _Pair:
    a: float
    b: np.ndarray


def test_equal_results_pass():
    value = (np.array([np.nan, 1.0]), {"k": [1.5, _Pair(2.0, np.arange(3))]})
    assert_same(_const(value), _const(value))
    assert isinstance(assert_same(_raise(ValueError, "m"), _raise(ValueError, "m")), ValueError)


@pytest.mark.parametrize(
    "native,python",
    [
        (_raise(ValueError, "bad x"), _raise(ValueError, "bad y")),
        (_raise(ValueError, "bad"), _raise(TypeError, "bad")),
        (_raise(ValueError, "bad"), _const(1)),
        (_const(1), _raise(ValueError, "bad")),
        (_const(np.array([1.0, 2.0])), _const(np.array([1.0, 3.0]))),
        (_const(np.array([1.0, 2.0])), _const(np.array([1.0, 2.0], dtype=np.float32))),
        (_const(np.zeros((2, 1))), _const(np.zeros(2))),
        (_const(np.array([0.0])), _const(np.array([-0.0]))),
        (_const(0.0), _const(-0.0)),
        (_const((1, [2.0])), _const((1, [2]))),
        (_const([1, 2]), _const([1, 2, 3])),
        (_const({"a": 1}), _const({"b": 1})),
        (_const(_Pair(1.0, np.zeros(2))), _const(_Pair(1.0, np.ones(2)))),
        (_const(np.array([1.0])), _const([1.0])),
    ],
)
def test_divergence_is_caught(native, python):
    with pytest.raises(AssertionError):
        assert_same(native, python)


def test_arguments_are_forwarded():
    seen = []
    fn = lambda *a, **k: seen.append((a, k)) or len(seen)  # noqa: E731
    with pytest.raises(AssertionError):  # the two calls return 1 and 2
        assert_same(fn, fn, 1, key="v")
    assert seen == [((1,), {"key": "v"})] * 2
    assert_equal_results(np.float64(1.0), np.float64(1.0))
