"""Claims audit (2026-12-05): tests for documented security claims that nothing pinned before.

Each test names the doc and the claim it holds to; real qdrant-client local mode and real
cryptography, no mocks.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from qdrant_guard.errors import InvalidVectorError
from qdrant_guard.receipts import commitment_bytes, stored_form, stored_form_batch


# docs/receipt-format.md, "Stored form and commitment": "Coordinates must satisfy |v| < 2048 (int32
# on the grid); a larger one is an InvalidVectorError naming its magnitude", and the writer is
# told to "Sign stored_form(v, distance=...)". Just below 2048 the value is on the 2^-20 grid but
# float32 cannot hold it (its spacing there is 2^-13) and rounds it up to 2048: stored_form
# returned a vector that commitment_bytes, and so every receipt, refuses.
@pytest.mark.parametrize("value", [2048 - 2.0 ** -20, 2048 - 2.0 ** -14, -(2048 - 2.0 ** -20)])
def test_stored_form_refuses_a_coordinate_that_float32_rounds_to_2048(value):
    with pytest.raises(InvalidVectorError, match="float32 rounds to 2048"):
        stored_form(np.array([value, 0.5]), distance="Euclid")
    with pytest.raises(InvalidVectorError, match="row 1"):
        stored_form_batch(np.array([[0.5, 0.5], [0.5, value]]), distance="Dot")


def test_stored_form_keeps_the_largest_coordinate_float32_holds_below_2048():
    # 2048 - 2^-13 is float32's last value below 2048, a multiple of 2^-20: stored and committed.
    top = 2048 - 2.0 ** -13
    out = stored_form(np.array([top, -top]), distance="Euclid")
    assert out.tolist() == [top, -top]
    assert len(commitment_bytes(out)) == 8
    # Values that float32 rounds down to it are kept too (they never reach 2048).
    assert stored_form(np.array([2048 - 2.0 ** -14 - 2.0 ** -20]), distance="Dot").tolist() == [top]
    assert math.isfinite(float(out[0]))
