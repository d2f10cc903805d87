"""The parameters of one noise release, as recorded in receipts and manifests."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

MECHANISMS = ("gaussian", "laplace_l2")


@dataclass(frozen=True)
class NoiseParams:
    """What was done to a vector, exactly enough to state and re-check the guarantee.

    Attributes:
        mechanism: ``"gaussian"`` (analytic Gaussian, Balle & Wang 2018) or ``"laplace_l2"``
            (multivariate Laplace in L2 norm, metric DP).
        mechanism_version: version of the sampler + calibration code (bumped on any change).
        epsilon: privacy loss at the protected radius (see ``radius``).
        delta: failure probability (Gaussian); ``0.0`` for ``laplace_l2``. Both are for the ideal
            noise distribution; the bounded sampler adds at most about ``dim * 2.3e-34`` (stated
            in ``guarantee``; docs/privacy.md).
        radius: protected L2 radius: the guarantee holds between any two clipped inputs at L2
            distance <= radius.
        clip_norm: inputs were clipped to this L2 norm before noising (``None``: not clipped).
        scale: sigma per coordinate (Gaussian) or the Gamma norm scale (laplace_l2); both are
            calibrated at sensitivity ``radius + sqrt(dim)*lattice_step`` (the nominal radius plus
            the most snapping can move two outputs apart), so for laplace_l2 it is
            ``(radius + sqrt(dim)*lattice_step)/epsilon``.
        lattice_step: the output was snapped to multiples of this power of two.
        rng_id: which generator produced the randomness (e.g. ``"aes256ctr-getrandom-v1"`` or
            ``"chacha20-getrandom-v1"`` for fresh noise).
        dim: vector dimension.
        dtype: numpy dtype name of the released vector (``"float32"``/``"float64"``).
        guarantee: one human-readable sentence stating the guarantee exactly.
    """

    mechanism: str
    mechanism_version: str
    epsilon: float
    delta: float
    radius: float
    clip_norm: float | None
    scale: float
    lattice_step: float
    rng_id: str
    dim: int
    dtype: str
    guarantee: str

    def as_dict(self) -> dict[str, Any]:
        """Return the parameters as a plain JSON-serialisable dict."""
        return asdict(self)
