"""The analytic-Gaussian calibration agrees with an independently published implementation.

Reference values: Google's dp_accounting 0.6.0 (PyPI), ``gaussian_mechanism.get_sigma_gaussian(
epsilon, delta, tol=1e-15)``, which implements Balle & Wang (2018) for L2 sensitivity 1. The numbers
were computed once with that package and are kept here as data (the package is not a dependency).
"""
from __future__ import annotations

import pytest

from qdrant_guard.noise import calibrate_gaussian_sigma

PUBLISHED = [
    (0.1, 1e-5, 30.749566131977407),
    (0.5, 1e-6, 8.057618480725047),
    (1.0, 1e-5, 3.7306316348159414),
    (1.0, 1e-6, 4.2246788893268326),
    (2.0, 1e-6, 2.23047627118642),
    (4.0, 1e-9, 1.487803677103465),
    (8.0, 1e-5, 0.6002290721989517),
]


@pytest.mark.parametrize("epsilon,delta,sigma", PUBLISHED)
def test_sigma_matches_dp_accounting(epsilon, delta, sigma):
    assert calibrate_gaussian_sigma(epsilon, delta, 1.0) == pytest.approx(sigma, rel=1e-9)


@pytest.mark.parametrize("epsilon,delta,sigma", PUBLISHED)
def test_sigma_scales_linearly_with_sensitivity(epsilon, delta, sigma):
    assert calibrate_gaussian_sigma(epsilon, delta, 0.01) == pytest.approx(0.01 * sigma, rel=1e-9)
