"""The points, vectors and payloads of a write are checked and sent as ONE snapshot
(qdrant_guard.sentpoints): a ``model_construct()``ed point, a dict subclass payload, a numpy
vector or an id subclass cannot show the guard's checks one value and the transport another.

Real local-mode Qdrant, real keys (see guardkit). Each attack reads the stored point back past
the guard (``snapshot``: the unguarded base class on the same local instance) and shows it holds
what the guard never saw on the code before the snapshot: an SSN stored on a PUBLIC collection,
a vector other than its receipt's, a receipt naming another point than the one stored, a stale
receipt kept for a vector the update replaced.
"""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from guardkit import (DIM, audit_records, create, guard_signer, make_kit, models, receipted_vector, record_sent,
                      snapshot, unit)
from qdrant_guard import GuardRefusal, QdrantClient, QdrantGuardError
from qdrant_guard.receipts import RECEIPT_KEY, receipts_for_payload, receipts_from_payload, verify_receipt

SSN = "my ssn is 123-45-6789"


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


class _CleanFirst(dict):
    """A payload whose first ``items()`` shows ``shown`` in place of its entries; every other read
    (its storage, a second ``items()``, which local mode's ``json.dumps`` makes) holds them."""

    def __init__(self, *a, shown=None, **kw):
        super().__init__(*a, **kw)
        self.shown = {"note": "fine"} if shown is None else shown
        self.calls = 0

    def items(self):
        self.calls += 1
        if self.calls == 1:
            return [(k, self.shown.get(k, v)) for k, v in dict.items(self)]
        return dict.items(self)


def _public(kit, **extra):
    cfg = kit.config({"pub": {"class": "PUBLIC", **extra}})
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("bob", "support"))
    create(c, "pub")
    return c


def _stored_text(c, name):
    return repr([payload for _, payload, _ in snapshot(c, name)])


PUBLIC_WRITES = {
    "upsert": lambda c, p: c.upsert("pub", [p]),
    "upload_points": lambda c, p: c.upload_points("pub", [p], wait=True),
    "batch_update_points": lambda c, p: c.batch_update_points("pub", [
        models.UpsertOperation(upsert=models.PointsList.model_construct(points=[p]))]),
}


@pytest.mark.parametrize("write", list(PUBLIC_WRITES))
@pytest.mark.parametrize("text_field", [None, "text"])
def test_a_public_payload_cannot_hide_an_ssn_from_the_screen(kit, write, text_field):
    # Old code: the screen read items() once (clean), local mode's json.dumps read it again (or the
    # text field's copy read keys() and __getitem__): the SSN was stored on the PUBLIC collection.
    c = _public(kit, **({"text_field": text_field} if text_field else {}))
    rng = np.random.default_rng(1)
    point = models.PointStruct.model_construct(id=1, vector=unit(rng), payload=_CleanFirst(text="hi", note=SSN))
    with pytest.raises(GuardRefusal) as ei:
        PUBLIC_WRITES[write](c, point)
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert "123-45-6789" not in _stored_text(c, "pub")


def _euclid_pii(kit, **extra):
    """alice@hr owns PII collection ``pii`` (Euclid, noise on write); bob@support writes it."""
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
           "intent": {"enabled": False}, "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}, **extra}
    alice = QdrantClient(":memory:", guard=kit.config({"pii": pol}), principal=kit.principal("alice", "hr"))
    return alice, alice.with_principal(kit.principal("bob", "support"))


def test_a_receipted_numpy_vector_cannot_be_swapped_after_its_check(kit):
    # Old code: as_dense kept the caller's float64 array itself; the next point's payload copy ran
    # the caller's keys(), which overwrote that array with the raw vector after its receipt had
    # verified, and the raw vector was stored beside a receipt that does not bind it.
    alice, bob = _euclid_pii(kit)
    create(alice, "pii", distance=models.Distance.EUCLID)
    rng = np.random.default_rng(2)
    noised, rec = receipted_vector(guard_signer(kit), 1, unit(rng))
    raw = np.asarray(unit(rng))
    held = np.array(noised, dtype=np.float64)

    class Swap(dict):
        def __iter__(self):
            held[:] = raw  # runs while the guard copies this payload, after point 1 was checked
            return dict.__iter__(self)

        def keys(self):
            held[:] = raw
            return dict.keys(self)

    first = models.PointStruct.model_construct(id=1, vector=held, payload={RECEIPT_KEY: receipts_for_payload({"": rec})})
    second = models.PointStruct.model_construct(id=2, vector=unit(rng), payload=Swap(t="x"))
    bob.upsert("pii", [first, second])
    stored = {pid: (payload, vec) for pid, payload, vec in snapshot(alice, "pii")}
    payload, vec = stored[1]
    assert not np.allclose(vec, raw, atol=1e-3)
    check = verify_receipt(receipts_from_payload(payload)[""], vector=vec, collection="pii", point_id=1,
                           trusted_keys=alice.guard.trusted_receipt_keys)
    assert check.ok, check.detail
    assert np.allclose(vec, noised, atol=1e-6)
    payload2, vec2 = stored[2]  # the guard's own noised vector, receipted as stored
    assert verify_receipt(receipts_from_payload(payload2)[""], vector=vec2, collection="pii", point_id=2,
                          trusted_keys=alice.guard.trusted_receipt_keys).ok


def test_a_nested_payload_cannot_hide_a_restricted_source(kit):
    # Old code: the restricted-source check read the payload by json.dumps (the first items():
    # "d2"), the payload screen by its storage ("memo"), which it then sent: bob, outside the owner
    # boundary, tagged a point with the restricted source and so raised his own extraction cap.
    alice, bob = _euclid_pii(kit, source_field="meta.source", readers=["support"],
                             diversity={"max_source_coverage": 0.25, "restricted_sources": ["memo"]})
    create(alice, "pii", distance=models.Distance.EUCLID)
    meta = _CleanFirst(source="memo", shown={"source": "d2"})
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(5)), payload={"meta": meta})])
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert "memo" not in repr(snapshot(alice, "pii"))


class _Names(dict):
    """Named vectors whose iteration and keys() show vector ``b``; items() and storage hold ``a``."""

    def __iter__(self):
        return iter(["b"])

    def keys(self):
        return ["b"]

    def __getitem__(self, k):
        return dict.get(self, "a")


VECTOR_UPDATES = {
    "update_vectors": lambda c, u: c.update_vectors("pii", [u]),
    "batch_update_points": lambda c, u: c.batch_update_points("pii", [models.UpdateVectorsOperation(
        update_vectors=models.UpdateVectors.model_construct(points=[u]))]),
}


@pytest.mark.parametrize("write", list(VECTOR_UPDATES))
def test_a_vector_update_drops_the_receipt_of_the_vector_it_sends(kit, write):
    # Old code: the update sent vector a (validated from items()) but chose the receipts to drop
    # from keys(): a's stale receipt stayed beside a's new raw vector, b's went though b was untouched.
    alice, _ = _euclid_pii(kit, raw_in_boundary=True)
    alice.create_collection("pii", vectors_config={n: models.VectorParams(size=DIM, distance=models.Distance.EUCLID)
                                                   for n in ("a", "b")})
    rng = np.random.default_rng(4)
    vecs, recs = {}, {}
    for n in ("a", "b"):
        vecs[n], recs[n] = receipted_vector(guard_signer(kit), 1, unit(rng), vname=n)
    alice.upsert("pii", [models.PointStruct(id=1, vector=vecs, payload={RECEIPT_KEY: receipts_for_payload(recs)})])
    raw = unit(rng)
    VECTOR_UPDATES[write](alice, models.PointVectors.model_construct(id=1, vector=_Names(a=raw)))
    [(_, payload, stored)] = snapshot(alice, "pii")
    assert np.allclose(stored["a"], raw, atol=1e-6)
    kept = receipts_from_payload(payload)
    assert "a" not in kept  # a raw in-boundary update keeps no stale receipt
    assert verify_receipt(kept["b"], vector=stored["b"], collection="pii", point_id=1, vector_name="b",
                          trusted_keys=alice.guard.trusted_receipt_keys).ok


@pytest.mark.parametrize("collection", ["pub", "pii"])
def test_what_cannot_be_snapshotted_is_refused_by_point(kit, collection):
    # Old code: the guard passed the object on (its screens leave what pydantic cannot serialise
    # as it is) and local mode failed on it with a pydantic error, after the guard's allow entry.
    alice, bob = _euclid_pii(kit)
    create(alice, "pii", distance=models.Distance.EUCLID)
    pub = _public(kit)
    c = pub if collection == "pub" else bob
    point = models.PointStruct(id=7, vector=unit(np.random.default_rng(6)), payload={"t": object()})
    with pytest.raises(QdrantGuardError, match=r"points\[0\] \(point id 7\): its payload cannot be read"):
        c.upsert(collection, [point])
    assert snapshot(c, collection) == []
    if collection == "pii":
        entry = audit_records(kit)[-1]
        assert entry["verdict"] == "UNSUPPORTED_WRITE" and entry["point_ids"] == [7]


def test_plain_points_are_checked_and_sent_as_they_are(kit, monkeypatch):
    # The fast path: an ordinary point is not copied (a PUBLIC write sends the caller's object).
    c = _public(kit)
    sent = record_sent(monkeypatch, ("upsert",), with_kwargs=True)
    rng = np.random.default_rng(7)
    points = [models.PointStruct(id=1, vector=unit(rng), payload={"note": "hi", "meta": {"tags": ["a", 1, 2.5, None]}}),
              models.PointStruct(id=str(uuid.UUID(int=2)), vector=unit(rng), payload=None)]
    c.upsert("pub", points)
    assert [p is q for p, q in zip(sent[0][1]["points"], points)] == [True, True]


def test_a_numpy_vector_and_id_subclasses_are_sent_as_their_values(kit, monkeypatch):
    # What the snapshot holds: exact types, whatever the caller's objects say of themselves.
    class Id(int):
        def __repr__(self):
            return "9"

    c = _public(kit)
    sent = record_sent(monkeypatch, ("upsert",), with_kwargs=True)
    vec = np.asarray(unit(np.random.default_rng(8)))
    class Text(str):
        def __str__(self):
            return "other"

    c.upsert("pub", [models.PointStruct.model_construct(id=Id(3), vector=vec, payload={"n": Id(4), "s": Text("hi")})])
    [p] = sent[0][1]["points"]
    assert type(p.id) is int and p.id == 3 and type(p.vector) is list and p.vector == vec.tolist()
    assert type(p.payload["n"]) is int and type(p.payload["s"]) is str
    [(pid, payload, _)] = snapshot(c, "pub")
    assert pid == 3 and payload == {"n": 4, "s": "hi"}


def test_what_is_plain():
    # Plain: taken as it is. Anything a caller's object could answer for is not.
    from qdrant_guard.sentpoints import plain, sent_point, sent_vectors

    def sent(x):
        try:
            return (sent_point if isinstance(x, models.PointStruct) else sent_vectors)(x, 0)
        except QdrantGuardError:
            return None

    class L(list):
        pass

    class D(dict):
        pass

    sparse = models.SparseVector(indices=[1, 4], values=[0.5, 0.25])
    for ordinary in (
        models.PointStruct(id=1, vector=[0.5], payload={"a": [{"b": None}], "c": 1.5, "d": True}),
        models.PointStruct(id=str(uuid.UUID(int=1)), vector={"d": [0.5], "s": sparse}),
        models.PointStruct.model_construct(id=uuid.UUID(int=1), vector=[0.5], payload=None),
        models.PointVectors(id=1, vector={"s": sparse}),
    ):
        assert plain(ordinary) and sent(ordinary) is ordinary, ordinary
    for odd in (
        models.PointStruct.model_construct(id=True, vector=[0.5]),
        models.PointStruct.model_construct(id=1, vector=L([0.5])),
        models.PointStruct.model_construct(id=1, vector=np.ones(2)),
        models.PointStruct.model_construct(id=1, vector={"s": models.SparseVector.model_construct(indices=L([1]),
                                                                                                 values=[0.5])}),
        models.PointStruct(id=1, vector=[0.5], payload={"a": D()}),
        models.PointStruct(id=1, vector=[0.5], payload={"a": (1, 2)}),
        models.PointStruct.model_construct(id=1, vector=[0.5], payload={7: "x"}),
        models.PointStruct(id=1, vector=[0.5], payload={"a": np.float32(1)}),
        models.PointVectors.model_construct(id=1, vector=D(a=[0.5])),
    ):
        assert not plain(odd) and sent(odd) is not odd, odd


def test_the_async_client_checks_and_sends_the_snapshot_too(kit):
    # Old code: as the sync client (the same write path), the SSN was stored on the PUBLIC collection.
    import asyncio

    import qdrant_client

    from qdrant_guard import AsyncQdrantClient

    async def main():
        c = AsyncQdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}),
                              principal=kit.principal("bob", "support"))
        await c.create_collection("pub", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        point = models.PointStruct.model_construct(id=1, vector=unit(np.random.default_rng(9)),
                                                   payload=_CleanFirst(note=SSN))
        with pytest.raises(GuardRefusal):
            await c.upsert("pub", [point])
        records, _ = await qdrant_client.AsyncQdrantClient.scroll(c, "pub", with_payload=True)
        await c.close()
        return records

    assert asyncio.run(main()) == []


def test_ids_are_taken_as_their_values():
    from qdrant_guard.sentpoints import UnsnapshotableInput, sent_id

    class Formats(uuid.UUID):
        def __format__(self, spec):
            return "00000000-0000-0000-0000-000000000009"

    class Slots(uuid.UUID):
        __slots__ = ("int",)  # UUID.__init__ then fills this slot, not the base class's

    class Text(str):
        def __str__(self):
            return "other"

    got = sent_id(Formats(int=5))
    assert type(got) is uuid.UUID and f"{got}" == "00000000-0000-0000-0000-000000000005"
    assert type(sent_id(Text("a"))) is str and sent_id(Text("a")) == "a"
    assert sent_id(True) is True  # left to the point-id check, which refuses it by name
    with pytest.raises(UnsnapshotableInput, match="pass the id as a uuid.UUID or its string"):
        sent_id(Slots(int=5))


def test_a_payload_that_is_no_mapping_is_refused_by_point(kit):
    c = _public(kit)
    point = models.PointStruct.model_construct(id=4, vector=unit(np.random.default_rng(10)), payload=[("note", SSN)])
    with pytest.raises(QdrantGuardError, match=r"points\[0\] \(point id 4\): its payload is a list, not a dict"):
        c.upsert("pub", [point])
    assert snapshot(c, "pub") == []


@pytest.mark.parametrize("payload", [{"m": {1: "a", "1": "b"}}, {"m": {b"note": "x", "note": "y"}},
                                     {"rows": [{"k": 1}, {2: "n", "2": "m"}]}])
def test_two_keys_sent_as_one_are_refused_not_merged(kit, payload):
    # The snapshot serialises keys as the transport does (1 and b"note" become "1" and "note"),
    # and the later entry would replace the earlier: one value dropped without a word. Refused
    # instead, naming the point, as the screen refuses keys that redaction makes equal.
    c = _public(kit)
    point = models.PointStruct(id=5, vector=unit(np.random.default_rng(11)), payload=payload)
    with pytest.raises(QdrantGuardError, match=r"point id 5\): two keys of one payload object are sent as the same key"):
        c.upsert("pub", [point])
    assert snapshot(c, "pub") == []
