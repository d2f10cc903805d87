"""The update_vectors and single-row stored-form shortcuts give what the paths they skip gave.

* ``storedform._unit_grid_row`` (one row, native nudge) against the batch path with einsum and the
  row loop (``_ROW_DOTS`` None, as on numpy < 2): the same stored bytes on random rows at
  d = 2, 3, 4, 384, and on zero, extreme, tiny, NaN and seeded-noise rows (same errors too).
* ``builtpoints._update_point`` / ``builtpoints._point_vectors`` against validating ``PointStruct`` /
  ``PointVectors``; and a whole guarded ``update_vectors`` with both shortcuts on and off
  (keys, salts, clock and noise fixed): the same requests and the same stored points.
"""
from __future__ import annotations

import hashlib
import types
import uuid
import warnings

import numpy as np
import pytest
from guardkit import create, make_kit, record_sent
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import QdrantClient, builtpoints, keys, noise, receipts, storedform, writeprep
from qdrant_guard._impl import implementation
from qdrant_guard.receipts import stored_form, stored_form_batch

NATIVE = implementation() == "native"


def _outcome(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return fn(*a, **kw).tobytes()
        except Exception as exc:  # noqa: BLE001 - the error is part of the output compared
            return f"{type(exc).__name__}: {exc}"


def _rows(d: int, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    out = [x[i:i + 1] for i in range(n)]
    out += [x[:1] * s for s in (0.0, 5e-324, 1e-160, 1e-300, 1e160, 1e300)]
    out += [np.abs(x[1:2]), np.round(x[2:3] * 3), x[3:4].astype(np.float32), np.full((1, d), 1e308)]
    nan = x[4:5].copy()
    nan[0, -1] = np.nan
    out.append(nan)
    unit = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    noised, _ = noise.privatize_seeded_for_tests(unit[:200], mechanism="laplace_l2", epsilon=4.0, radius=1.0,
                                                 clip_norm=1.0, seed=seed)
    out += [noised[i:i + 1] for i in range(len(noised))]
    return out


@pytest.mark.skipif(not NATIVE, reason="the single-row path runs with the native nudge only")
@pytest.mark.parametrize("d,n", [(2, 3000), (3, 3000), (4, 3000), (384, 400)])
def test_single_row_stored_form_equals_the_batch_path(monkeypatch, d, n):
    fast_calls = [0]
    original = storedform._unit_grid_row

    def counted(arr):
        out = original(arr)
        fast_calls[0] += out is not None
        return out

    monkeypatch.setattr(storedform, "_unit_grid_row", counted)
    rows = _rows(d, n, 100 + d)
    fast = [_outcome(stored_form_batch, r, distance="Cosine") for r in rows]
    single = [_outcome(stored_form, r[0], distance="Cosine") for r in rows]
    assert fast_calls[0] >= 2 * n  # the new path ran on the ordinary rows
    monkeypatch.setattr(storedform, "_ROW_DOTS", None)  # einsum residual, row-loop norms, no fast path
    slow = [_outcome(stored_form_batch, r, distance="Cosine") for r in rows]
    assert fast == slow
    assert single == [_outcome(stored_form, r[0], distance="Cosine") for r in rows]
    # Batches (the vecdot residual) against the einsum residual too.
    batch = np.concatenate([r for r in rows if np.isfinite(r).all() and np.abs(r).max() > 1e-200][:500]).astype(np.float64)
    got = _outcome(stored_form_batch, batch, distance="Cosine")
    monkeypatch.setattr(storedform, "_ROW_DOTS", np.vecdot if hasattr(np, "vecdot") else None)
    assert got == _outcome(stored_form_batch, batch, distance="Cosine")


@pytest.mark.parametrize("pid", [7, 0, 2 ** 64 - 1, "8c1a5a2e-6b0c-4a43-9d4e-1f3b2d6c7e90",
                                 uuid.UUID("00000000-0000-0000-0000-000000000001")])
@pytest.mark.parametrize("vector", [[0.5, -1.0, 2.0], {"a": [0.25], "": [1.5, 2.0]}, {}])
def test_point_vectors_matches_the_validated_one(pid, vector):
    want = models.PointVectors(id=pid, vector=vector)
    got = builtpoints._point_vectors(pid, vector)
    assert type(got) is models.PointVectors
    assert got.__dict__ == want.__dict__ and got.__pydantic_fields_set__ == want.__pydantic_fields_set__
    assert got.__pydantic_extra__ == want.__pydantic_extra__ and got == want
    assert got.model_dump_json() == want.model_dump_json()
    assert got.model_dump_json(exclude_unset=True) == want.model_dump_json(exclude_unset=True)


@pytest.mark.parametrize("vector", [[0.5, -1.0], [1, 2.5], np.array([0.5, 1.0]), {"a": [0.5]}, [[0.5, 1.0]]])
@pytest.mark.parametrize("pid", [3, "8c1a5a2e-6b0c-4a43-9d4e-1f3b2d6c7e90", uuid.UUID(int=5)])
def test_update_point_matches_the_validated_point(pid, vector):
    u = models.PointVectors(id=pid, vector=vector)
    want = models.PointStruct(id=u.id, vector=u.vector, payload=None)
    got = builtpoints._update_point(u)
    assert got.__dict__ == want.__dict__ and got.__pydantic_fields_set__ == want.__pydantic_fields_set__
    assert got.model_dump_json() == want.model_dump_json()


def test_update_point_hands_what_does_not_validate_to_the_vector_checks():
    # A model_construct'ed update skips validation: its bad vector is passed on as it is, for
    # prepare_points to refuse with the InvalidVectorError an upsert raises, naming the point
    # (tests/test_review59_wpath.py), not pydantic's ValidationError of a PointStruct the caller
    # never built.
    for bad in (["x", 1.0], [1.0, None], "text"):
        u = models.PointVectors.model_construct(id=1, vector=bad)
        with pytest.raises(ValueError):
            models.PointStruct(id=u.id, vector=u.vector, payload=None)
        got = builtpoints._update_point(u)
        assert type(got) is models.PointStruct and got.id == 1 and got.vector is bad and got.payload is None


PII = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": False,
       "noise_on_write": True, "intent": {"enabled": False}}


def _fixed(monkeypatch):
    count, state, seed = [0], [0], [0]

    def keypair():
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        count[0] += 1
        sk = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"w5-key-%d" % count[0]).digest())
        return sk, sk.public_key()

    def urandom(n):
        out = b""
        while len(out) < n:
            state[0] += 1
            out += hashlib.sha256(b"w5-salt-%d" % state[0]).digest()
        return out[:n]

    def seeded(batch, *, mechanism, epsilon, radius, delta=None, clip_norm=None, key=None):
        seed[0] += 1
        return noise.privatize_seeded_for_tests(batch, mechanism=mechanism, epsilon=epsilon, radius=radius,
                                                delta=delta, clip_norm=clip_norm, seed=seed[0])

    monkeypatch.setattr(keys, "generate_keypair", keypair)
    monkeypatch.setattr(receipts, "os", types.SimpleNamespace(urandom=urandom))
    monkeypatch.setattr(receipts, "time", types.SimpleNamespace(time=lambda: 1_800_000_000.0))
    monkeypatch.setattr(noise, "privatize", seeded)


def _run(tmp, monkeypatch, *, shortcuts: bool):
    _fixed(monkeypatch)
    if not shortcuts:
        monkeypatch.setattr(writeprep, "_update_point",
                            lambda u: models.PointStruct(id=u.id, vector=u.vector, payload=None))
        monkeypatch.setattr(writeprep, "_point_vectors", lambda pid, v: models.PointVectors(id=pid, vector=v))
        monkeypatch.setattr(storedform, "_ROW_DOTS", None)
    tmp.mkdir()
    kit = make_kit(tmp)
    sent = record_sent(monkeypatch, ("batch_update_points",), with_kwargs=True)
    cols = {f"c{d}": PII for d in (2, 3, 384)} | {"named": PII}
    client = QdrantClient(":memory:", guard=kit.config(cols), principal=kit.principal("alice", "hr"))
    rng = np.random.default_rng(9)
    ids = [*range(40), "8c1a5a2e-6b0c-4a43-9d4e-1f3b2d6c7e90"]
    try:
        for d in (2, 3, 384):
            create(client, f"c{d}", dim=d)
            x = rng.standard_normal((len(ids), d))
            client.upsert(f"c{d}", points=[models.PointStruct(id=i, vector=x[j].tolist(), payload={"k": j})
                                           for j, i in enumerate(ids)])
            y = rng.standard_normal((len(ids), d))
            ups = [models.PointVectors(id=i, vector=y[j].tolist()) for j, i in enumerate(ids)]
            ups[1] = models.PointVectors(id=1, vector=y[1].astype(np.float32))
            ups[2] = {"id": 2, "vector": y[2].tolist()}
            ups[-1] = models.PointVectors(id=uuid.UUID(ids[-1]), vector=y[-1].tolist())
            client.update_vectors(f"c{d}", points=ups)
            client.update_vectors(f"c{d}", points=[ups[0]])  # one point: the single-row stored form
        create(client, "named", dim=8, named=("a", "b"))
        x = rng.standard_normal((10, 8))
        client.upsert("named", points=[models.PointStruct(id=i, vector={"a": x[i].tolist(), "b": x[i].tolist()})
                                       for i in range(10)])
        client.update_vectors("named", points=[models.PointVectors(id=i, vector={"a": x[i][::-1].tolist()})
                                               for i in range(10)])
        requests = []
        for _, kw in sent:
            for op in kw["update_operations"]:
                inner = [p for p in op.update_vectors.points] if isinstance(op, models.UpdateVectorsOperation) else []
                requests.append([op.model_dump_json(), op.model_dump_json(exclude_unset=True),
                                 [(sorted(p.__pydantic_fields_set__), type(p.id).__name__) for p in inner]])
        stored = []
        for col in cols:
            got, _ = RawClient.scroll(client, col, limit=1000, with_payload=True, with_vectors=True)
            stored.append([col, [[str(r.id), r.vector, r.payload] for r in sorted(got, key=lambda r: str(r.id))]])
    finally:
        client.close()
        monkeypatch.undo()
    return requests, stored


def test_update_vectors_sends_and_stores_what_validation_did(tmp_path, monkeypatch):
    fast, fast_stored = _run(tmp_path / "fast", monkeypatch, shortcuts=True)
    slow, slow_stored = _run(tmp_path / "slow", monkeypatch, shortcuts=False)
    assert len(fast) > 200
    assert fast == slow
    assert fast_stored == slow_stored
