"""Raw vectors left in a sensitive collection's store: the filters that count the points whose
vectors a read would strip for their receipts (:func:`left_behind_filter`,
:func:`unseen_params_filter`, :func:`receipt_params_of`), and the words of the refusal that names
them (:func:`raw_stored_clause`, :func:`raw_stored_way_out`, :func:`left_details`)."""
from __future__ import annotations

import functools
import math
from typing import Any, Iterable, Sequence, TypeGuard

from qdrant_client.http import models

from .names import shell_quote
from .noise import CALIBRATED_VERSIONS, PRIVATE_RNG_IDS, release_bounds
from .noise_params import DTYPES
from .policy import CollectionPolicy
from .receipts import RECEIPT_KEY, stored_receipts
from .utility import same_model
from .vectors import CollectionShape


def left_behind_filter(shape: CollectionShape, pol: CollectionPolicy,
                       seen: Iterable[tuple[float, float, float, int]] = ()) -> models.Filter | None:
    """The points with a dense vector that a read under ``pol`` strips for its receipt's fields
    (see :meth:`~.reads.ReadOps.releasable_vectors`), or None for a collection without dense
    vectors: a vector whose receipt is not :func:`_accepted_receipt`. That is one without a receipt
    in the receipt container (see :func:`~.receipts.receipts_for_payload`), one whose receipt's
    ``params.mechanism`` is not the collection's ``[noise] mechanism`` (``mechanism_mismatch``),
    one whose signed noise is weaker than the policy's or not one this guard vouches for (its
    dtype, mechanism version, scale or lattice step), or, where ``pol`` declares an embedding model for
    that vector (``utility.embedding_model(s)``), one whose ``model_id`` is neither null nor that
    model (``model_mismatch``; null is released: its signer named no model).

    ``seen``: the ``(epsilon, delta, radius, dim)`` of receipts found stored besides the policy's
    own (:func:`unseen_params_filter`); a receipt of these is held to its own calibration, one of
    others is counted (the policy's own, at each vector's size, are always known).

    A named vector counts only on the points that have it (``HasVectorCondition``); a point without
    a container, or whose container lacks the vector's name (a raw in-boundary update of one vector
    drops that vector's receipt only), counts, and so does a receipt lacking a field (it cannot
    verify). A name holding ``"`` or ``\\`` cannot be written as a payload path: every point having
    that vector counts, which errs towards refusing."""
    seen = tuple(seen)
    conds: list[Any] = []
    for vname, spec in shape.dense.items():
        if '"' in vname or "\\" in vname:
            odd: list[Any] = []
        else:
            known = [_policy_params(pol, spec.size), *seen]
            cal = [(*t, *b) for t in dict.fromkeys(known) if (b := _own_bounds(pol.noise.mechanism, *t)) is not None]
            odd = [models.Filter(must_not=[_accepted_receipt(f'{RECEIPT_KEY}.vectors."{vname}"', vname, pol, cal)])]
        if shape.unnamed:
            conds.extend(odd)  # every point has the unnamed vector
        else:
            conds.append(models.Filter(must=[models.HasVectorCondition(has_vector=vname), *odd]))
    return models.Filter(should=conds) if conds else None


def unseen_params_filter(shape: CollectionShape, pol: CollectionPolicy,
                         seen: Iterable[tuple[float, float, float, int]]) -> models.Filter | None:
    """The points with a vector whose receipt :func:`_accepted_receipt` would accept but for its
    calibration, of ``(epsilon, delta, radius, dim)`` neither ``seen`` nor the policy's own: the
    receipts a count must look at (:func:`receipt_params_of`) before it can hold them to their own
    calibration. None when no vector's receipt can be named by a payload path."""
    seen = tuple(seen)
    conds: list[Any] = []
    for vname, spec in shape.dense.items():
        if '"' in vname or "\\" in vname:
            continue
        at = f'{RECEIPT_KEY}.vectors."{vname}"'
        known = dict.fromkeys([_policy_params(pol, spec.size), *seen])
        must: list[Any] = [_receipt_fields(at, vname, pol)]
        if not shape.unnamed:
            must.insert(0, models.HasVectorCondition(has_vector=vname))
        conds.append(models.Filter(must=must, must_not=[_params_match(f"{at}.params", t) for t in known]))
    return models.Filter(should=conds) if conds else None


def receipt_params_of(payload: Any, shape: CollectionShape) -> set[tuple[float, float, float, int]]:
    """The ``(epsilon, delta, radius, dim)`` of each receipt in ``payload`` for a vector of
    ``shape``, where they are numbers (and ``dim`` an int) a filter can match again."""
    found: set[tuple[float, float, float, int]] = set()
    receipts = stored_receipts(payload)
    for vname in shape.dense:
        rec = receipts.get(vname)
        params = rec.get("params") if isinstance(rec, dict) else None
        if not isinstance(params, dict):
            continue
        eps, delta, radius, dim = (params.get(k) for k in ("epsilon", "delta", "radius", "dim"))
        if _finite_number(eps) and _finite_number(delta) and _finite_number(radius) and type(dim) is int:
            found.add((float(eps), float(delta), float(radius), dim))
    return found


def _finite_number(v: object) -> TypeGuard[int | float]:
    """An int or float (not a bool) that is finite: a receipt parameter a filter can match."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _policy_params(pol: CollectionPolicy, dim: int) -> tuple[float, float, float, int]:
    """The ``(epsilon, delta, radius, dim)`` a guarded write under ``pol`` signs for a vector of
    ``dim`` (laplace_l2 releases state delta 0)."""
    n = pol.noise
    return (float(n.epsilon), 0.0 if n.mechanism == "laplace_l2" else float(n.delta), float(n.radius), dim)


def _params_match(p: str, t: tuple[float, float, float, int]) -> models.Filter:
    """Receipt params at payload path ``p`` of exactly ``t`` = ``(epsilon, delta, radius, dim)``."""
    eps, delta, radius, dim = t
    return models.Filter(must=[
        models.FieldCondition(key=f"{p}.epsilon", range=models.Range(gte=eps, lte=eps)),
        models.FieldCondition(key=f"{p}.delta", range=models.Range(gte=delta, lte=delta)),
        models.FieldCondition(key=f"{p}.radius", range=models.Range(gte=radius, lte=radius)),
        models.FieldCondition(key=f"{p}.dim", match=models.MatchValue(value=dim))])


def _accepted_receipt(at: str, vname: str, pol: CollectionPolicy,
                      calibrations: Sequence[tuple[float, float, float, int, float, float]] = ()) -> models.Filter:
    """A receipt at payload path ``at`` whose fields a read under ``pol`` accepts for vector
    ``vname``: the collection's mechanism (``mechanism_mismatch``), noise no weaker than its
    ``[noise]`` (``noise_shortfall``: epsilon, radius, delta, clip_norm; the policy's epsilon is
    within the class ceiling) from a private generator, in a dtype and mechanism version this guard
    calibrates, and the declared model or none (``model_mismatch``), all as :func:`_receipt_fields`;
    and at a scale and lattice step its own parameters calibrate to (``check_release``).

    A filter does no arithmetic, so the calibration is matched per parameter set:
    ``calibrations`` holds ``(epsilon, delta, radius, dim, least scale, coarsest step)`` of each
    set known (:func:`~.noise.release_bounds`), and a receipt of exactly one of them is held to its
    bounds, as a read holds it; a receipt of any other set matches none (counted, erring towards
    refusing; :meth:`QueryChecks.raw_vectors_left` looks such sets up first). Only sets of noise no
    weaker than the policy's are matched, so their exact epsilon, delta and radius stand for the
    policy's bounds (fewer payload look-ups: local mode reads each condition's path per point).
    Without ``calibrations`` no receipt is accepted. The signature takes a key."""
    p = f"{at}.params"
    n = pol.noise
    bounded = [[
        *_params_match(p, (eps, delta, radius, dim)).must,  # type: ignore[misc]
        models.FieldCondition(key=f"{p}.scale", range=models.Range(gte=scale)),
        models.FieldCondition(key=f"{p}.lattice_step", range=models.Range(gt=0.0, lte=step)),
    ] for eps, delta, radius, dim, scale, step in calibrations
        if eps <= n.epsilon and radius >= n.radius and delta <= max(n.delta, 0.0)]
    must = _receipt_fields(at, vname, pol, noise_bounds=False).must or []
    if len(bounded) == 1:
        return models.Filter(must=[*must, *bounded[0]])
    # An empty should would match every point in some Qdrant versions: none known, none accepted.
    own = (models.Filter(should=[models.Filter(must=b) for b in bounded]) if bounded
           else models.FieldCondition(key=f"{p}.lattice_step", range=models.Range(lt=0.0)))
    return models.Filter(must=[*must, own])


def _receipt_fields(at: str, vname: str, pol: CollectionPolicy, *, noise_bounds: bool = True) -> models.Filter:
    """The fields of :func:`_accepted_receipt` that need no calibration: the collection's
    mechanism, noise no weaker than its ``[noise]`` (epsilon, radius and delta only with
    ``noise_bounds``; :func:`_accepted_receipt` matches them exactly), a private generator, a dtype
    and mechanism version this guard calibrates, a lattice step (``noise_bounds``) and clip_norm
    above 0 (``check_release``), and the declared model or none. A missing field matches none of these.

    A read compares model names but for case, as qdrant-client's inference does
    (:func:`~.utility.same_model`); a filter matches keywords exactly, so the declared name is
    matched as written, lowercased and uppercased where that spelling is still the same model
    (not ``'ß'`` uppercased), and another spelling is counted, erring towards refusing."""
    n = pol.noise
    p = f"{at}.params"
    must: list[Any] = [
        models.FieldCondition(key=f"{p}.mechanism", match=models.MatchValue(value=n.mechanism)),
        models.FieldCondition(key=f"{p}.rng_id", match=models.MatchAny(any=list(PRIVATE_RNG_IDS))),
        models.FieldCondition(key=f"{p}.dtype", match=models.MatchAny(any=list(DTYPES))),
        models.FieldCondition(key=f"{p}.mechanism_version", match=models.MatchAny(any=list(CALIBRATED_VERSIONS))),
    ]
    if noise_bounds:
        must[1:1] = [
            models.FieldCondition(key=f"{p}.epsilon", range=models.Range(lte=n.epsilon)),
            models.FieldCondition(key=f"{p}.radius", range=models.Range(gte=n.radius)),
            models.FieldCondition(key=f"{p}.delta", range=models.Range(lte=max(n.delta, 0.0)))]
        must.append(models.FieldCondition(key=f"{p}.lattice_step", range=models.Range(gt=0.0)))
    if n.clip_norm is not None:
        must.append(models.FieldCondition(key=f"{p}.clip_norm", range=models.Range(gt=0.0, lte=n.clip_norm)))
    else:
        # check_release refuses a clip_norm it cannot read as a positive number; null: not clipped.
        must.append(models.Filter(should=[
            models.IsNullCondition(is_null=models.PayloadField(key=f"{p}.clip_norm")),
            models.FieldCondition(key=f"{p}.clip_norm", range=models.Range(gt=0.0))]))
    declared, _ = pol.utility.declared_model(vname)
    if declared is not None:
        must.append(models.Filter(should=[
            models.IsNullCondition(is_null=models.PayloadField(key=f"{at}.model_id")),
            models.FieldCondition(key=f"{at}.model_id", match=models.MatchAny(any=[
                # Only spellings a read accepts: 'ß'.upper() is 'SS', whose lower() is another name.
                name for name in dict.fromkeys((declared, declared.lower(), declared.upper()))
                if same_model(name, declared)]))]))
    return models.Filter(must=must)


@functools.lru_cache(maxsize=1024)
def _own_bounds(mechanism: str, epsilon: float, delta: float, radius: float, dim: int) -> tuple[float, float] | None:
    """:func:`~.noise.release_bounds` of these parameters, or None where they cannot be calibrated
    (``check_release`` refuses every release of them)."""
    try:
        return release_bounds(mechanism, epsilon, delta, radius, dim)
    except (TypeError, ValueError):
        return None


def raw_stored_clause(pol: CollectionPolicy, left: int, capped: int = 0) -> str:
    """What makes a collection's stored vectors raw, for a refusal: ``raw_in_boundary``, or the
    ``left`` points :meth:`QueryChecks.raw_vectors_left` found, ``capped`` of them counted unchecked
    for a receipt parameter set beyond ``noise.max_receipt_param_sets``."""
    if pol.raw_in_boundary:
        return f"keeps raw vectors for the owner boundary {pol.owner!r} (raw_in_boundary)"
    model = " or another embedding model than the policy declares for it" if _declares_model(pol) else ""
    clause = (f"still holds {left} point(s) with a vector that has no receipt, or whose receipt names another "
              f"noise mechanism than {pol.noise.mechanism!r}{model}, or weaker noise than its [noise] section "
              "states: raw vectors written while the policy had "
              "raw_in_boundary (or written without the guard), which turning it off left in the store, or "
              "releases the policy does not accept, which reads strip but Qdrant still compares as stored")
    if not capped:
        return clause
    cap = pol.noise.max_receipt_param_sets
    return (f"{clause}; {capped} of those point(s) were counted unchecked: their receipts state stronger noise "
            f"in parameter sets (epsilon, delta, radius, dim) beyond the {cap} besides the policy's own that the "
            f"guard holds to their own calibration per collection (noise.max_receipt_param_sets = {cap}), so they "
            "may well be releases reads accept, but the guard did not check them and refuses rather than "
            "compare them unchecked")


def left_details(pol: CollectionPolicy, left: int, capped: int) -> dict[str, Any]:
    """The audit details of a refusal for ``left`` points left behind, ``capped`` of them past the
    cap on receipt parameter sets."""
    if not left:
        return {}
    out: dict[str, Any] = {"unreceipted_points": left}
    if capped:
        out.update(beyond_param_cap=capped, max_receipt_param_sets=pol.noise.max_receipt_param_sets)
    return out


def raw_stored_way_out(pol: CollectionPolicy, name: str, left: int, capped: int = 0, *, action: str = "query") -> str:
    """The fix a refusal for raw stored vectors names (see :func:`raw_stored_clause`)."""
    if pol.raw_in_boundary:
        return f"or {action} from the owner boundary {pol.owner!r}"
    if capped:
        cap = pol.noise.max_receipt_param_sets
        return (f"or raise noise.max_receipt_param_sets of collection {name!r} above {cap} to the number of "
                "parameter sets its receipts state (each costs the check about six payload conditions per "
                "vector, on every such call until none is left behind), or have those points re-written "
                "through the guard (upsert or update_vectors, which noise them at the policy's own [noise]) or "
                f"deleted; any other point(s) of the {left} are raw or releases the policy does not accept: "
                f"`qdrant-guard receipt verify --collection {shell_quote(name)} --policy POLICY --check-noise` "
                f"lists those. Once none is left, this {'query' if action == 'query' else 'call'} runs")
    model = (", a vector of another model re-embedded with the declared one first" if _declares_model(pol)
             else "")
    reasons = ("missing_receipt, mechanism_mismatch, insufficient_noise or model_mismatch" if model
               else "missing_receipt, mechanism_mismatch or insufficient_noise")
    return (f"or have those {left} point(s) re-written through the guard (upsert or update_vectors, which "
            f"noise them with the collection's mechanism and receipt them{model}) or deleted; `qdrant-guard "
            f"receipt verify --collection {shell_quote(name)} --policy POLICY --check-noise` lists them as {reasons}. Once "
            f"none is left, this {'query' if action == 'query' else 'call'} runs")


def _declares_model(pol: CollectionPolicy) -> bool:
    """Whether ``pol`` declares an embedding model for any vector (``utility.embedding_model(s)``)."""
    return pol.utility.embedding_model is not None or bool(pol.utility.embedding_models)
