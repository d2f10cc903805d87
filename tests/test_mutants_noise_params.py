"""Mutation pass over the noise calibration (qdrant_guard/noise.py, the NoiseParams it produces).

Each test pins down a decision that a surviving mutant changed without any test noticing: the
argument checks of the calibration, the exact boundaries of the lattice and delta ranges, and the
checks check_release applies to signed params. Expected values come from the definitions (the
documented ranges, 2**-1000, the stated 1e-12 tolerance), not from the code under test.
"""
from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from qdrant_guard import noise

X = np.ones((2, 8), np.float32) / math.sqrt(8)
GAUSS = dict(mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01)
LAPLACE = dict(mechanism="laplace_l2", epsilon=1.0, radius=0.01)


# ------------------------------------------------------------------ argument checks
@pytest.mark.parametrize("bad", ["1.0", True, None, [1.0]])
@pytest.mark.parametrize("slot", [0, 1, 2])
def test_calibration_refuses_non_real_arguments(slot, bad):
    args = [1.0, 1e-6, 1.0]
    args[slot] = bad
    with pytest.raises(TypeError, match="must be a real number"):
        noise.calibrate_gaussian_sigma(*args)


@pytest.mark.parametrize("bad", [0.0, -0.0, -1.0, math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("slot", [0, 2])
def test_calibration_refuses_epsilon_or_sensitivity_that_is_not_finite_and_positive(slot, bad):
    args = [1.0, 1e-6, 1.0]
    args[slot] = bad
    with pytest.raises(ValueError, match="finite number > 0"):
        noise.calibrate_gaussian_sigma(*args)


def test_calibration_accepts_any_real_number_type():
    # numbers.Real, not only float: numpy scalars and ints give the float's calibration.
    want = noise.calibrate_gaussian_sigma(1.0, 1e-6, 1.0)
    assert noise.calibrate_gaussian_sigma(np.float32(1.0), 1e-6, 1) == want
    assert noise.calibrate_gaussian_sigma(Fraction(1), np.float64(1e-6), np.int64(1)) == want


@pytest.mark.parametrize("dlt", [1.0, 1.5, 0.0, -1e-6, math.nan, math.inf])
def test_delta_outside_the_open_unit_interval_is_refused(dlt):
    with pytest.raises(ValueError, match="delta"):
        noise.calibrate_gaussian_sigma(1.0, dlt, 1.0)


def test_delta_range_boundaries_are_exact():
    # [1e-300, 1): both documented ends, and the floats next to them.
    below_one = math.nextafter(1.0, 0.0)
    assert 0.0 < noise.calibrate_gaussian_sigma(1.0, below_one, 1.0) < math.inf
    assert noise.calibrate_gaussian_sigma(1.0, 1e-300, 1.0) > noise.calibrate_gaussian_sigma(1.0, 1e-6, 1.0)
    with pytest.raises(ValueError, match="at least 1e-300"):
        noise.calibrate_gaussian_sigma(1.0, math.nextafter(1e-300, 0.0), 1.0)


def test_sigma_decreases_as_delta_grows():
    # A larger failure probability never needs more noise (Balle & Wang's delta(sigma) decreases).
    deltas = (1e-300, 1e-100, 1e-12, 1e-6, 1e-3, 0.1, 0.5, 0.9)
    sig = [noise.calibrate_gaussian_sigma(1.0, d, 1.0) for d in deltas]
    assert all(a > b for a, b in zip(sig, sig[1:])), sig


# ------------------------------------------------------------------ release parameters
@pytest.mark.parametrize("mechanism", ["Gaussian", "laplace", "", "gaussian "])
def test_an_unknown_mechanism_is_refused_not_treated_as_laplace(mechanism):
    with pytest.raises(ValueError, match="mechanism must be"):
        noise.privatize(X, mechanism=mechanism, epsilon=1.0, delta=None, radius=0.01)


def test_gaussian_without_delta_says_delta_is_required():
    with pytest.raises(ValueError, match="delta is required"):
        noise.privatize(X, mechanism="gaussian", epsilon=1.0, delta=None, radius=0.01)


@pytest.mark.parametrize("dlt", [None, 0, 0.0])
def test_laplace_takes_delta_none_or_zero(dlt):
    _, p = noise.privatize(X, **LAPLACE, delta=dlt)
    assert p.delta == 0.0 and noise.check_release(p) is None


@pytest.mark.parametrize("dlt", [1, -1, 1e-6, 0.5])
def test_laplace_refuses_a_nonzero_delta(dlt):
    # laplace_l2 is pure (delta=0) metric DP: a nonzero delta would be stated but mean nothing.
    with pytest.raises(ValueError, match="has delta=0"):
        noise.privatize(X, **LAPLACE, delta=dlt)


def test_a_bool_epsilon_is_refused_even_after_the_equal_float_was_cached():
    # _params is cached; True == 1.0 and hash(True) == hash(1.0), so an untyped cache would return
    # the float's entry and skip the type check.
    noise.privatize(X, mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01)
    with pytest.raises(TypeError, match="epsilon must be a real number"):
        noise.privatize(X, mechanism="gaussian", epsilon=True, delta=1e-6, radius=0.01)


def test_the_smallest_lattice_step_is_exactly_two_to_the_minus_1000():
    # laplace_l2: step = 2**floor(log2((radius/epsilon)/1024)); radius 2**-990 gives 2**-1000, the
    # smallest step accepted; half that radius gives 2**-1001, refused.
    _, p = noise.privatize(np.zeros(4), mechanism="laplace_l2", epsilon=1.0, radius=2.0 ** -990)
    assert p.lattice_step == 2.0 ** -1000
    with pytest.raises(ValueError, match="too small to snap"):
        noise.privatize(np.zeros(4), mechanism="laplace_l2", epsilon=1.0, radius=2.0 ** -991)


# ------------------------------------------------------------------ check_release
@pytest.fixture(params=["gaussian", "laplace_l2"])
def honest(request):
    _, p = noise.privatize(X, **(GAUSS if request.param == "gaussian" else LAPLACE))
    assert noise.check_release(p) is None
    return p


@pytest.mark.parametrize("change", [
    dict(epsilon=0.0), dict(epsilon=-1.0), dict(radius=0.0), dict(epsilon=math.nan),
    dict(mechanism="gauss"), dict(clip_norm=-1.0),
])
def test_check_release_refuses_params_that_cannot_be_calibrated(honest, change):
    why = noise.check_release(dataclasses.replace(honest, **change))
    assert why is not None and "cannot be calibrated" in why


def test_check_release_tolerance_is_exactly_a_relative_1e_12(honest):
    floor = honest.scale * (1.0 - 1e-12)
    assert noise.check_release(dataclasses.replace(honest, scale=floor)) is None
    why = noise.check_release(dataclasses.replace(honest, scale=math.nextafter(floor, 0.0)))
    assert why is not None and "below the calibrated" in why


@pytest.mark.parametrize("step", [0.0, -0.0, "coarser", "negative", math.nan])
def test_check_release_refuses_a_zero_negative_or_coarser_lattice(honest, step):
    # A zero step means the output was not snapped at all, which the calibration does not cover.
    value = {"coarser": honest.lattice_step * 2, "negative": -honest.lattice_step}.get(step, step)
    why = noise.check_release(dataclasses.replace(honest, lattice_step=value))
    assert why is not None and "lattice_step" in why


def test_check_release_accepts_a_finer_lattice(honest):
    assert noise.check_release(dataclasses.replace(honest, lattice_step=honest.lattice_step / 2)) is None
