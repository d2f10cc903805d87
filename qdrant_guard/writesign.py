"""Noise and receipts for the vectors a write stores.

A mixin of :class:`qdrant_guard.writes.WriteOps`: ``_noise_and_sign`` noises a write's vectors
per vector name and signs one receipt batch over their stored form; a Document embedded by an
embedder naming another model than the policy's is refused first (``_refuse_embedder_model``),
and a noised vector past the lattice grid's range is refused with its point named
(``_refuse_past_grid``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
from qdrant_client.http import models

from . import noise as _noise
from .decision import Verdict
from .errors import InvalidVectorError
from .policy import CollectionPolicy, toml_str
from .receipts import RECEIPT_KEY, issue_receipts_rows, stored_form_batch
from .textguard import TextOps
from .utility import embedder_model_name, same_model
from .vectors import CollectionShape


_ROW = re.compile(r"\brow (\d+)")


# The commitment grid holds |v| < 2048 (receipts.commitment_bytes).
_GRID_LIMIT = 2048.0


def _located(exc: BaseException, point_id: Any, vector_name: str | None) -> BaseException:
    """``exc``, marked (once, innermost first) with the point and vector it was raised for."""
    if not hasattr(exc, "_qg_point"):
        exc._qg_point = point_id  # type: ignore[attr-defined]
        exc._qg_vector = vector_name  # type: ignore[attr-defined]
    return exc


@dataclass(slots=True)
class _Slot:
    point: int
    name: str
    vector: np.ndarray
    #: The guard embedded it (a models.Document): its receipt names the embedder's model.
    embedded: bool = False


class WriteSigning(TextOps):
    """Noising and signing a write's vectors (a mixin of :class:`qdrant_guard.writes.WriteOps`)."""

    def _noise_and_sign(self, name: str, pol: CollectionPolicy, shape: CollectionShape,
                        points: list[models.PointStruct], vectors: list[dict[str, Any]],
                        payloads: list[dict[str, Any]], slots: list[_Slot]) -> list[dict[str, Any]]:
        np_ = pol.noise
        done: list[_Slot] = []  # the slots in the order of the receipts
        groups: list[tuple[Any, ...]] = []  # issue_receipts_rows' groups, one per vector name
        by_name: dict[str, list[_Slot]] = {}
        for s in slots:
            by_name.setdefault(s.name, []).append(s)
        # The guard names a model only for the vectors it embedded: of a vector it was given, it
        # knows no model, and naming its embedder's would sign a claim about someone else's vector.
        model_id = self._embedder_model() if any(s.embedded for s in slots) else None
        # The rows of a group are 1-D float64 arrays of one length: np.array casts them to float32
        # as np.stack(...).astype(np.float32) did, without the whole float64 matrix between.
        batches = {vname: np.array([s.vector for s in group], dtype=np.float32) for vname, group in by_name.items()}
        for vname, group in by_name.items():
            self._refuse_past_grid(pol, shape.spec(vname, where=f"collection {name!r}"), points, group,
                                   batches[vname])
        for vname, group in by_name.items():
            spec = shape.spec(vname, where=f"collection {name!r}")
            batch = batches[vname]
            noised, params = _noise.privatize(
                batch, mechanism=np_.mechanism, epsilon=np_.epsilon, radius=np_.radius,
                delta=np_.delta if np_.mechanism == "gaussian" else None, clip_norm=np_.clip_norm,
                key=self.noise_key if np_.keyed else None,
            )
            try:
                finals = stored_form_batch(noised, distance=spec.distance)
            except InvalidVectorError as exc:
                # A noised coordinate beyond the commitment grid (|v| >= 2048; only without clipping).
                row = _ROW.search(str(exc))
                exc.reason = "beyond_commit_grid"  # type: ignore[attr-defined]
                raise _located(exc, points[group[int(row.group(1))].point].id if row else None, vname)
            # One tolist of the matrix (the same floats as each row's tolist, ~1.3 us a point less);
            # the receipts take the float32 rows.
            for s, row in zip(group, finals.tolist()):
                vectors[s.point][vname] = row
            groups.append((params, list(finals), name, [points[s.point].id for s in group], vname,
                           [model_id if s.embedded else None for s in group]))
            done += group
        # One batch (one Merkle tree, one signature) over every group, as issue_receipts_batch of
        # a ReceiptItem per slot signs it.
        receipts = issue_receipts_rows(self.signer, groups)
        for s, rec in zip(done, receipts):
            existing = payloads[s.point].get(RECEIPT_KEY) or {}
            existing[s.name] = rec
            payloads[s.point][RECEIPT_KEY] = existing
        return receipts

    def _embedder_model(self) -> str | None:
        """The model the guard's embedder names (its ``model_id``, else ``model_name``, as
        :func:`qdrant_guard.utility.embedder_model_name` reads it; None: it names none)."""
        named = embedder_model_name(self.embedder) if self.embedder is not None else None
        return None if named is None else str.__str__(named)

    def _refuse_embedder_model(self, op: str, name: str, pol: CollectionPolicy, vector_names: Iterable[str],
                               point_id: Any) -> None:
        """Refuse (ConfigError, audited as UNSUPPORTED_WRITE with reason ``model_mismatch``), before any
        text is embedded, ``models.Document`` vectors whose declared model (``utility.embedding_model(s)``)
        is not the one the guard's embedder names.

        An embedder that names no model passes: the guard cannot tell which model it is."""
        declared: list[tuple[str, str, str]] = []
        for vname in sorted(vector_names):
            model, key = pol.utility.declared_model(vname)
            if model is not None:
                declared.append((vname, model, key))
        have = self._embedder_model() if declared else None
        if have is None:
            return
        for vname, model, key in declared:
            if same_model(model, have):
                continue
            message = (
                f"{op}: point {point_id!r}: vector {vname or '<unnamed>'!r} of collection {name!r} is a "
                f"models.Document, which the guard would embed with its embedder's model {have!r}, but the policy "
                f"({self.config.source_path or '<GuardConfig>'}) declares {key} = {toml_str(model)} for that "
                f"vector: vectors of two models do not rank against each other, and a utility record measured on "
                f"one says nothing of the other. Pass embedder= an embedder of {model!r} (its model_id names the "
                f"model), or correct {key} if this collection's vectors come from {have!r}. Nothing was embedded "
                "or written"
            )
            # A guard decision (the policy's model against the embedder's), so it is audited like the
            # write's other refusals; _audit_input_errors passes ConfigErrors on unaudited.
            raise self.audited_model_refusal(
                op, name, pol, Verdict.UNSUPPORTED_WRITE, message,
                {"where": "write", "form": "Document", "embedded_by": "embedder", "vector_name": vname,
                 "model": have, "declared": model, "key": key},
                point_ids=[point_id])

    @staticmethod
    def _refuse_past_grid(pol: CollectionPolicy, spec: Any, points: list[models.PointStruct], group: list[_Slot],
                          batch: np.ndarray) -> None:
        """Refuse, before any noise is drawn, a vector whose noised release must land past the
        commitment grid (|v| >= 2048), which stored_form_batch would refuse after noising.

        Only a coordinate beyond 2048 by more than the noise can ever move it (the sampler's noise
        is bounded: docs/privacy.md) is refused here, so every vector the check after noising
        would accept still is, with the same output. Clipping to clip_norm <= 2048 keeps every
        coordinate within reach, and Cosine releases are normalised: neither is checked.
        """
        np_ = pol.noise
        if spec.distance == "Cosine" or (np_.clip_norm is not None and np_.clip_norm <= _GRID_LIMIT):
            return
        rows = batch.astype(np.float64)
        mags = np.abs(rows).max(axis=1)
        if np_.clip_norm is not None:
            norms = np.linalg.norm(rows, axis=1)
            mags = mags * np.minimum(1.0, np_.clip_norm / np.maximum(norms, np.finfo(np.float64).tiny))
        if not (mags > _GRID_LIMIT).any():
            return
        gaussian = np_.mechanism == "gaussian"
        params = _noise._params(np_.mechanism, np_.epsilon, np_.delta if gaussian else None, np_.radius,
                                np_.clip_norm, batch.shape[1], "float32", _noise.RNG_KEYED)
        # |z| <= 12.23 sigma a coordinate; the laplace_l2 norm <= (d - 1/3)(1 + 12.23/sqrt(9(d - 1/3)))^3
        # scale (noise._overflow_hint); 12.3, a lattice step and 1.0 are margin.
        shape_ = params.dim - 1.0 / 3.0
        reach = params.scale * (12.3 if gaussian else shape_ * (1.0 + 12.3 / math.sqrt(9.0 * shape_)) ** 3)
        reach += params.lattice_step + 1.0
        past = np.flatnonzero(mags > _GRID_LIMIT + reach)
        if past.size:
            row = int(past[0])
            pid, vname = points[group[row].point].id, group[row].name
            exc = InvalidVectorError(
                f"point {pid!r}: vector {vname or '<unnamed>'!r} has a coordinate of magnitude "
                f"{float(mags[row]):g}{' after clipping' if np_.clip_norm is not None else ''}, beyond what "
                f"noise (at most {reach:.4g} a coordinate) can bring back under the commitment grid's limit: "
                "the commitment grid 2^-20 holds |v| < 2048 in int32, rescale the vectors (on a guarded "
                "collection: noise them with a clip_norm, which keeps noised coordinates far below that). "
                "Nothing was noised or written"
            )
            exc.reason = "beyond_commit_grid"  # type: ignore[attr-defined]
            raise _located(exc, pid, vname)
