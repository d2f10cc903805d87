"""Cosine stored form of finite vectors whose sum of squares leaves float64's normal range.

Before: a row with |v| above about 1e154 was divided by an infinite norm and stored (and receipted)
as the zero vector, which stored_form otherwise refuses; a non-zero row with |v| below about 1e-162
was refused as "a zero vector". Guarded writes never reach either (their vectors are float32),
direct callers of the public functions did.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from qdrant_guard import storedform
from qdrant_guard.errors import GuardArgumentValueError
from qdrant_guard.receipts import stored_form, stored_form_batch

ROWS = [[3.0, 4.0], [1.0, 1.0, 0.0], [0.25, -0.5, 2.0, 1e-3], [1.0]]


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("scale", [2.0 ** 600, 1e300, 1e-170, 2.0 ** -1000, 1e-300])
def test_a_scaled_row_stores_as_the_row_itself(row, scale):
    base = stored_form(np.array(row), distance="Cosine")
    big = np.array(row) * scale
    assert np.isfinite(big).all() and big.any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = stored_form(big, distance="Cosine")
        batch = stored_form_batch(np.stack([big, np.array(row)]), distance="Cosine")
    assert got.tobytes() == base.tobytes()
    assert batch[0].tobytes() == base.tobytes() and batch[1].tobytes() == base.tobytes()
    assert abs(float(np.linalg.norm(got.astype(np.float64))) - 1.0) < 1e-6


def test_a_huge_row_is_never_stored_as_zeros():
    got = stored_form(np.array([1e200, 1e200, 0.5]), distance="Cosine")
    assert got.any()
    assert got.tobytes() == stored_form(np.array([1.0, 1.0, 0.0]), distance="Cosine").tobytes()


def test_zero_rows_are_still_refused_next_to_extreme_ones():
    with pytest.raises(GuardArgumentValueError, match="zero vector"):
        stored_form(np.zeros(3), distance="Cosine")
    with pytest.raises(GuardArgumentValueError, match=r"row 2 is a zero vector"):
        stored_form_batch(np.array([[1e300, 1.0], [1e-300, 0.0], [0.0, 0.0]]), distance="Cosine")


def test_ordinary_rows_take_no_rescale(monkeypatch):
    # Rows of ordinary magnitude keep their stored form bit for bit: the rescale is never entered.
    def boom(*a, **k):
        raise AssertionError("rescaled an ordinary row")

    monkeypatch.setattr(storedform, "_rescale_extreme_rows", boom)
    rng = np.random.default_rng(7)
    for scale in (1e-140, 1e-3, 1.0, 1e3, 1e140):
        stored_form_batch(rng.standard_normal((16, 384)) * scale, distance="Cosine")
