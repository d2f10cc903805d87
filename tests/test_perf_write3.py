"""The guarded upsert's output shortcuts give what the paths they skip gave.

* ``builtpoints._point`` builds an output PointStruct field for field (``_built_point``) instead of
  validating it again, for exact int/str ids and payloads of str keys; every other point is
  validated as before (``builtpoints._BUILD_OK`` False forces that path for all).
* The noised matrix is converted to lists once (``finals.tolist()``), not row by row.
* ``refuse_reserved_sources`` is skipped where ``restricts_sources(pol)`` says no writer can be
  refused (it is forced on for every policy in the comparison runs).

Each scenario is run twice in one process with keys, salts, clock and keyed noise fixed: with the
shortcuts, and with them off. What reached qdrant-client (each point's JSON, with and without
unset fields, its set fields, and the REST body ``models.PointsList``) and what local Qdrant
stored must be identical; every receipt must verify against the vector sent for it.
"""
from __future__ import annotations

import hashlib
import json
import types
import uuid
from pathlib import Path

import numpy as np
import pydantic
import pytest
from guardkit import create, make_kit, record_sent
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models
from qdrant_client.http.api.points_api import jsonable_encoder as rest_body  # the REST client's body

from qdrant_guard import QdrantClient, builtpoints, keys, receipts, writeprep
from qdrant_guard.errors import GuardRefusal
from qdrant_guard.receipts import RECEIPT_KEY, receipts_from_payload, verify_receipt
from qdrant_guard.sources import reserved_claims, restricts_sources

NOW = 1_800_000_000.0
PII = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": False,
       "noise_on_write": True, "text_field": "text", "intent": {"enabled": False}}
RAW = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
       "text_field": "text", "intent": {"enabled": False}}
UUIDS = ["8c1a5a2e-6b0c-4a43-9d4e-1f3b2d6c7e90", "00000000-0000-0000-0000-000000000001"]


def _fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every random input of a write fixed, the same for each run of a test."""
    count = [0]

    def keypair():
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        count[0] += 1
        sk = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"w3-key-%d" % count[0]).digest())
        return sk, sk.public_key()

    state = [0]

    def urandom(n: int) -> bytes:
        out = b""
        while len(out) < n:
            state[0] += 1
            out += hashlib.sha256(b"w3-salt-%d" % state[0]).digest()
        return out[:n]

    monkeypatch.setattr(keys, "generate_keypair", keypair)
    monkeypatch.setattr(receipts, "os", types.SimpleNamespace(urandom=urandom))
    monkeypatch.setattr(receipts, "time", types.SimpleNamespace(time=lambda: NOW))


def _payload(i: int) -> dict:
    return {"text": f"chunk {i} of the onboarding guide for new staff", "source": f"doc{i % 3}", "chunk": i,
            "meta": {"lang": "en", "tags": ["a", i]}, "f": 0.5 + i}


def _writes(client: QdrantClient) -> None:
    rng = np.random.default_rng(11)
    f32 = rng.standard_normal((6, 16)).astype(np.float32)
    f64 = rng.standard_normal((6, 16))
    for col in ("pii", "raw"):
        client.upsert(col, points=[
            models.PointStruct(id=1, vector=f32[0].tolist(), payload=_payload(1)),
            models.PointStruct(id=2, vector=f64[1], payload=None),  # float64 array, validated to a list
            models.PointStruct(id=UUIDS[0], vector=f64[2].tolist(), payload={"text": "hello"}),
            models.PointStruct(id=uuid.UUID(UUIDS[1]), vector=f32[3].tolist(), payload={}),
            {"id": 5, "vector": f64[4].tolist(), "payload": _payload(5)},
        ])
        client.upsert(col, points=models.Batch(ids=[10, 11, UUIDS[0]], vectors=f64[:3].tolist(),
                                               payloads=[_payload(10), {}, {"chunk": 3}]))
        client.upsert(col, points=models.Batch(ids=[12, 13], vectors=f32[:2].tolist()))
        client.upload_collection(col, vectors=f64[:4], payload=[_payload(20), None, {}, _payload(23)],
                                 ids=[20, 21, UUIDS[1], 23])
        client.upload_collection(col, vectors=f32[:2], ids=[30, 31])
        client.upload_points(col, points=[models.PointStruct(id=40, vector=f32[5].tolist(), payload=_payload(40))])
    client.upsert("named", points=[
        models.PointStruct(id=1, vector={"a": f32[0].tolist(), "b": f64[1].tolist()}, payload=_payload(1)),
        models.PointStruct(id=2, vector={"b": f64[2]}, payload=None),
        models.PointStruct(id=UUIDS[0], vector={"a": f64[3].tolist()}, payload={"text": "x"}),
    ])
    client.upsert("named", points=models.Batch(ids=[3, 4], vectors={"a": f32[:2].tolist(), "b": f64[2:4].tolist()},
                                               payloads=[{}, _payload(4)]))
    client.upload_collection("named", vectors={"a": f64[:2], "b": f32[2:4]}, payload=[{"k": 1}, None], ids=[5, 6])


def _run(tmp: Path, monkeypatch: pytest.MonkeyPatch, *, shortcuts: bool) -> tuple[list, list, dict]:
    _fixed(monkeypatch)
    built = [0]
    if shortcuts:
        original = builtpoints._built_point

        def counted(*a):
            built[0] += 1
            return original(*a)
        monkeypatch.setattr(builtpoints, "_built_point", counted)
    else:
        monkeypatch.setattr(builtpoints, "_BUILD_OK", False)
        monkeypatch.setattr(writeprep, "restricts_sources", lambda pol: True)
    tmp.mkdir()
    kit = make_kit(tmp)
    sent_calls = record_sent(monkeypatch, ("upsert", "upload_points", "upload_collection"), with_kwargs=True)
    cols = {"pii": PII, "raw": RAW, "named": PII}
    client = QdrantClient(":memory:", guard=kit.config(cols), principal=kit.principal("alice", "hr"))
    try:
        create(client, "pii")
        create(client, "raw", distance=models.Distance.DOT)
        create(client, "named", named=("a", "b"))
        _writes(client)
        sent = []
        trusted = dict(client.guard.trusted_receipt_keys)
        for method, kw in sent_calls:
            pts = kw["points"]
            assert isinstance(pts, list) and all(type(p) is models.PointStruct for p in pts), method
            sent.append([method, kw["collection_name"], models.PointsList(points=pts).model_dump_json(),
                         models.PointsList(points=pts).model_dump_json(exclude_unset=True),
                         rest_body(models.PointsList(points=pts)),
                         [[p.model_dump_json(), sorted(p.__pydantic_fields_set__), p.__pydantic_extra__,
                           p.__pydantic_private__, type(p.id).__name__] for p in pts]])
            for p in pts:
                for vname, rec in (receipts_from_payload(p.payload) if p.payload else {}).items():
                    vec = p.vector if vname == "" else p.vector[vname]
                    assert all(type(x) is float for x in vec)
                    check = verify_receipt(rec, vector=np.asarray(vec, dtype=np.float32), collection=kw["collection_name"],
                                           point_id=p.id, vector_name=vname, trusted_keys=trusted, now=NOW)
                    assert check.ok, (p.id, vname, check.reason)
        stored = []
        for col in cols:
            got, _ = RawClient.scroll(client, col, limit=1000, with_payload=True, with_vectors=True)
            stored.append([col, [[str(r.id), r.vector, r.payload] for r in sorted(got, key=lambda r: str(r.id))]])
        noised = sum(RECEIPT_KEY in (r[2] or {}) for col in stored for r in col[1])
    finally:
        client.close()
        monkeypatch.undo()
    return sent, json.loads(json.dumps(stored)), {"built": built[0], "noised": noised}


def test_output_shortcuts_send_and_store_what_validation_did(tmp_path, monkeypatch):
    fast, fast_stored, info = _run(tmp_path / "fast", monkeypatch, shortcuts=True)
    slow, slow_stored, _ = _run(tmp_path / "slow", monkeypatch, shortcuts=False)
    assert info["built"] > 20 and info["noised"] > 20  # the shortcuts ran, on noised points
    assert len(fast) == len(slow) >= 10
    for a, b in zip(fast, slow):
        assert a == b
    assert fast_stored == slow_stored


@pytest.mark.parametrize("pid, payload", [
    (7, {"a": 1, "b": {"c": [1, None]}}), (0, None), (2**64 - 1, {}), (UUIDS[0], {"x": "y"}),
    (uuid.UUID(UUIDS[1]), {"x": 1}),  # not an exact int or str: validated
    (3, {"k": 1, RECEIPT_KEY: {"v": 1, "vectors": {}}}),
])
def test_point_matches_the_validated_point(pid, payload):
    vec = [0.25, -1.5, 3.0]
    want = models.PointStruct(id=pid, vector=vec, payload=payload)
    got = builtpoints._point(pid, vec, payload)
    assert type(got) is models.PointStruct
    assert got == want
    assert got.__dict__ == want.__dict__ and type(got.id) is type(want.id)
    assert got.__pydantic_fields_set__ == want.__pydantic_fields_set__
    assert got.model_dump_json() == want.model_dump_json()
    assert got.model_dump_json(exclude_unset=True) == want.model_dump_json(exclude_unset=True)
    assert models.PointsList(points=[got]).model_dump_json() == models.PointsList(points=[want]).model_dump_json()
    if payload is not None:
        assert got.payload is not payload  # a copy, as validation makes


class Key(str):
    pass


@pytest.mark.parametrize("pid, payload", [(True, {"a": 1}), (1.0, {"a": 1}), (-1, {"a": 1}), (1, {1: "x"}),
                                          (1, {Key("k"): 1}), ("id", [("a", 1)])])
def test_point_validates_what_it_cannot_vouch_for(pid, payload):
    try:
        want = models.PointStruct(id=pid, vector=[1.0], payload=payload)
    except pydantic.ValidationError:
        with pytest.raises(pydantic.ValidationError):
            builtpoints._point(pid, [1.0], payload)
        return
    got = builtpoints._point(pid, [1.0], payload)
    assert got.__dict__ == want.__dict__ and got.model_dump_json() == want.model_dump_json()
    assert [type(k) for k in got.payload] == [type(k) for k in want.payload]


def test_build_check_passes_on_this_pydantic():
    # Without it every point is validated: correct, but the shortcut would be silently gone.
    assert builtpoints._BUILD_OK is True


@pytest.mark.parametrize("diversity", [
    {}, {"enabled": False}, {"max_source_coverage": 0.25},
    {"max_source_coverage": 0.25, "restricted_sources": ["memo"]},
])
def test_restricts_sources_is_false_only_where_no_writer_is_refused(tmp_path, diversity):
    kit = make_kit(tmp_path)
    pol = kit.config({"c": {**PII, "diversity": diversity}}).policy_for("c")
    payload = {"source": "memo", "text": "x"}
    for boundary in (None, "hr", "support", "other"):
        claims = reserved_claims(pol, boundary, payload)
        if not restricts_sources(pol):
            assert claims == []
    assert restricts_sources(pol) == bool(reserved_claims(pol, "support", payload))


def test_restricted_source_still_refused_on_upsert(tmp_path):
    # Fails if restricts_sources wrongly says no for a budget with restricted sources.
    kit = make_kit(tmp_path)
    pol = {**PII, "writers": ["support"],
           "diversity": {"max_source_coverage": 0.25, "restricted_sources": ["memo"]}}
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "c")
    bob = owner.with_principal(kit.principal("bob", "support"))
    bob.upsert("c", points=[models.PointStruct(id=1, vector=[1.0] + [0.0] * 15, payload={"source": "open"})])
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("c", points=[models.PointStruct(id=2, vector=[0.0, 1.0] + [0.0] * 14, payload={"source": "memo"})])
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY" and "restricted source" in str(ei.value)
    owner.upsert("c", points=[models.PointStruct(id=3, vector=[0.0, 1.0] + [0.0] * 14, payload={"source": "memo"})])
    assert RawClient.count(owner, "c").count == 2
    owner.close()


def test_new_item_is_the_receipt_item_init_makes():
    import dataclasses

    from qdrant_guard.noise import privatize
    from qdrant_guard.receipts import ReceiptItem, new_item
    _, params = privatize(np.ones((1, 4), dtype=np.float32), mechanism="gaussian", epsilon=2.0, radius=0.5,
                          delta=1e-6, key=b"k" * 32)
    vec = np.ones(4, dtype=np.float32)
    for pid, vname, model in ((1, "", None), (UUIDS[0], "a", "m")):
        got = new_item(params, vec, "c", pid, vname, model)
        want = ReceiptItem(params=params, vector=vec, collection="c", point_id=pid, vector_name=vname, model_id=model)
        assert type(got) is ReceiptItem
        assert list(got.__dict__) == list(want.__dict__) == [f.name for f in dataclasses.fields(ReceiptItem)]
        assert all(got.__dict__[k] is want.__dict__[k] or got.__dict__[k] == want.__dict__[k] for k in want.__dict__)
        assert got == want
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.collection = "d"
