"""The parameters of one noise release, as recorded in receipts and manifests."""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Mapping

from .errors import GuardArgumentValueError

MECHANISMS = ("gaussian", "laplace_l2")
#: The dtypes a release is made in (privatize admits float32 and float64 arrays only).
DTYPES = ("float32", "float64")
#: The wordings of ``NoiseParams.guarantee`` this library has written, oldest first (all under
#: receipt format ``qg-receipt/1``; ``mechanism_version`` does not tell them apart: 1 and 2 only
#: ever carried wording 1, version 3 carries any of the four). 1: numbers with ``%g``; 2: a
#: float64 release adds that tiny coordinates are read as 0; 3: epsilon, delta, radius, clip norm
#: and lattice step exact; 4 (current): adds the ideal-noise remark and its delta bound.
GUARANTEE_WORDINGS = (1, 2, 3, 4)
#: The ``mechanism_version`` values each older wording was written with (git history of
#: ``noise._guarantee`` and ``MECHANISM_VERSION``: wording 1 from 4d86439 (version 1) through
#: da4ef4b (2) and 5af38ee (3); wordings 2 (4de37fa) and 3 (2a63590) under version 3 only). A
#: receipt of another version in one of them was never written by this library and is refused
#: (``guarantee_mismatch``), so a version after 3 takes the current wording only. The current
#: wording is not listed: any version may state it (a signer in another language writes it). Both
#: dtypes were released in every wording (privatize took float64 from 4d86439 on), so a float64
#: sentence without the float64 note (wording 1) stays valid for versions 1 to 3.
WORDING_VERSIONS: dict[int, tuple[str, ...]] = {1: ("1", "2", "3"), 2: ("3",), 3: ("3",)}


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


def _exact(x: float) -> str:
    # "%g" where it reads back as x (1, 0.01, 1e-06), else the shortest exact form: a rounded
    # epsilon or radius would state a guarantee other than the one provided.
    short = f"{x:g}"
    return short if float(short) == x else repr(x)


def _rounded(x: float) -> str:
    return f"{x:g}"


def guarantee_sentence(mechanism: str, epsilon: float, delta: float, radius: float,
                       clip_norm: float | None, scale: float, lattice_step: float, dim: int,
                       dtype: str, *, wording: int = GUARANTEE_WORDINGS[-1]) -> str:
    """Return the ``guarantee`` sentence for these parameters, in ``wording`` (default: current).

    The one function that writes the sentence (``noise.privatize``) and that verification uses
    to check it: every number in it comes from the arguments, the sensitivity is
    ``radius + sqrt(dim)*lattice_step``. Older wordings (:data:`GUARANTEE_WORDINGS`) are the
    exact text earlier versions of this library wrote, so their receipts still check.
    """
    if wording not in GUARANTEE_WORDINGS:
        raise GuardArgumentValueError(f"wording must be one of {GUARANTEE_WORDINGS}, not {wording!r}")
    num = _exact if wording >= 3 else _rounded
    sensitivity = radius + math.sqrt(dim) * lattice_step
    epsilon_s, delta_s, radius_s, step_s = num(epsilon), num(delta), num(radius), num(lattice_step)
    if clip_norm is None:
        inputs = f"any two inputs (as given, not clipped) within L2 distance radius={radius_s}"
    else:
        inputs = (f"any two inputs within L2 distance radius={radius_s} (rows are first clipped to L2 "
                  f"norm {num(clip_norm)}, which never increases distances")
        inputs += ", so with radius >= 2*clip_norm this covers every pair)" if radius >= 2 * clip_norm else ")"
    lattice = (f"calibrated for L2 sensitivity {sensitivity:.9g} = radius + sqrt({dim})*{step_s} to "
               f"cover snapping the output to multiples of {step_s}")
    read = " Inputs are float64: coordinates below 2^-511 in magnitude are read as 0 first." \
        if dtype == "float64" and wording >= 2 else ""
    if wording >= 4:
        read += (f" Stated for the ideal noise distribution: the sampler's noise is bounded, which adds "
                 f"about {dim * 2.3e-34:.2g} or less to delta (docs/privacy.md).")
    if mechanism == "gaussian":
        return (f"gaussian: (epsilon={epsilon_s}, delta={delta_s})-differential privacy per released "
                f"vector between {inputs}; analytic Gaussian mechanism with sigma={scale:.9g} per "
                f"coordinate, {lattice}.{read}")
    return (f"laplace_l2: epsilon={epsilon_s} at L2 distance radius={radius_s} (metric DP, "
            f"delta=0: log-likelihood ratio <= epsilon*distance/radius) per released vector between "
            f"{inputs}; multivariate L2 Laplace with Gamma({dim}) norm scale={scale:.9g}, {lattice}.{read}")


_SENTENCE_ARGS = ("mechanism", "epsilon", "delta", "radius", "clip_norm", "scale", "lattice_step",
                  "dim", "dtype")


@lru_cache(maxsize=1024)
def _known(key: tuple[Any, ...], signs: tuple[float, ...] | None) -> tuple[str, ...]:
    # ``signs`` only keys the cache: 0.0 == -0.0 would share an entry, and the sentence prints
    # -0.0 as "-0". Newest first: a current receipt matches at once.
    return tuple(guarantee_sentence(*key, wording=w) for w in reversed(GUARANTEE_WORDINGS))


# What each labelled number of a sentence is, how to find it in any wording, and the field it
# states; used only to name the first contradiction in a sentence that matched no wording.
_LABELS = (
    ("epsilon", re.compile(r"epsilon=([^,\s)]+)"), "epsilon", False),
    ("delta", re.compile(r"\bdelta=([^,\s):]+)"), "delta", False),
    ("radius", re.compile(r"radius=([^,\s)]+)"), "radius", False),
    ("clip_norm", re.compile(r"clipped to L2 norm ([^,\s)]+)"), "clip_norm", False),
    ("sigma", re.compile(r"sigma=([^\s,]+)"), "scale", True),
    ("scale", re.compile(r"norm scale=([^\s,]+)"), "scale", True),
    ("lattice_step", re.compile(r"multiples of (\S+?)\.(?:\s|$)"), "lattice_step", False),
    ("dim", re.compile(r"sqrt\((\d+)\)"), "dim", False),
    ("sensitivity", re.compile(r"sensitivity (\S+) ="), "sensitivity", True),
)


def _says(label: str, said: str, value: Any, nine_digits: bool) -> bool:
    """Whether the sentence's text ``said`` for ``label`` states the field ``value``."""
    try:
        number = float(said)
    except ValueError:
        return False
    if value is None:
        return False
    if label == "delta" and said == "0" and value == 0.0:
        return True
    if nine_digits:  # the sentence prints sigma/scale to 9 significant digits in every wording
        return f"{number:.9g}" == f"{float(value):.9g}"
    # Exact in wordings 3-4; %g (6 significant digits) in wordings 1-2.
    return number == value or said == f"{value:g}"


def guarantee_mismatch(params: Mapping[str, Any]) -> str | None:
    """Return why ``params["guarantee"]`` does not state the other fields of ``params``, or None.

    The sentence must equal :func:`guarantee_sentence` of the fields in one of the
    :data:`GUARANTEE_WORDINGS`, and a ``laplace_l2`` sentence (which says ``delta=0``) needs
    ``delta`` 0. The explanation names the first number or word that contradicts a field, e.g.
    ``guarantee sentence says epsilon=0.1, fields say epsilon=8.0``.
    """
    sentence = params["guarantee"]
    mechanism = params["mechanism"]
    if mechanism == "laplace_l2" and params["delta"] != 0.0:
        return (f"guarantee sentence says delta=0 (laplace_l2 is pure metric DP), fields say "
                f"delta={params['delta']!r}")
    key = tuple(params[k] for k in _SENTENCE_ARGS)
    signs = tuple(math.copysign(1.0, v) for v in key if isinstance(v, float)) if 0.0 in key else None
    try:
        known = _known(key, signs)
    except OverflowError:  # a signed dim beyond float range (sqrt(dim) in the sentence)
        return (f"guarantee sentence cannot be stated for dim={params['dim']}, which is beyond float64's "
                "range; no release has such a dimension")
    if sentence in known:
        # Wordings can coincide (a float32 sentence reads the same in wordings 1 and 2, %g-exact
        # numbers in 2 and 3): the sentence stands if any wording it equals was written for this version.
        said = [w for w, text in zip(reversed(GUARANTEE_WORDINGS), known) if text == sentence]
        version = params["mechanism_version"]
        if any(version in WORDING_VERSIONS.get(w, (version,)) for w in said):
            return None
        oldest = min(said)
        return (f"guarantee sentence is in wording {oldest}, which this library wrote only for "
                f"mechanism_version {' or '.join(WORDING_VERSIONS[oldest])}; fields say "
                f"mechanism_version={version!r}: state it in the current wording "
                "(qdrant_guard.noise_params.guarantee_sentence of the fields) and sign again")
    said_mechanism = sentence.split(":", 1)[0] if ":" in sentence else ""
    if said_mechanism != mechanism:
        return (f"guarantee sentence says mechanism={said_mechanism[:40]!r}, fields say "
                f"mechanism={mechanism!r}")
    if params["clip_norm"] is None and "not clipped" not in sentence:
        return "guarantee sentence says the inputs were clipped, fields say clip_norm=None"
    if params["clip_norm"] is not None and "not clipped" in sentence:
        return f"guarantee sentence says the inputs were not clipped, fields say clip_norm={params['clip_norm']!r}"
    if "Inputs are float64" in sentence and params["dtype"] != "float64":
        return f"guarantee sentence says the inputs are float64, fields say dtype={params['dtype']!r}"
    fields = dict(params, sensitivity=params["radius"] + math.sqrt(params["dim"]) * params["lattice_step"])
    for label, pattern, field, nine_digits in _LABELS:
        for said in (m.rstrip(".") for m in pattern.findall(sentence)):  # a number ending a sentence
            if not _says(label, said, fields[field], nine_digits):
                shown = said if len(said) <= 40 else said[:40] + "..."
                told = "radius + sqrt(dim)*lattice_step" if field == "sensitivity" else field
                return f"guarantee sentence says {label}={shown}, fields say {told}={fields[field]!r}"
    current = known[0]
    at = next((i for i, (a, b) in enumerate(zip(sentence, current)) if a != b), min(len(sentence), len(current)))
    return (f"guarantee sentence is not one this library writes for these fields (none of its "
            f"{len(GUARANTEE_WORDINGS)} wordings); it differs from the current wording at character {at}: "
            f"{sentence[max(0, at - 20):at + 20]!r} instead of {current[max(0, at - 20):at + 20]!r}")
