"""A read's audit entry says which vectors it stripped and why (2026-12-05, branch h-stripaudit).

A guarded read strips each stored vector a principal not allowed raw vectors may not receive
(``ReadOps.releasable_vectors``): no receipt, a receipt that fails to verify (an untrusted or
revoked key, bound to another collection, ...), or one a guarded write would refuse now (another
mechanism, weaker noise, another embedding model). Before, the read's entry said nothing of it:
"every decision in a tamper-evident audit log" did not cover what the read withheld. Now the
entry's details carry ``stripped``: ``count`` (vectors), ``points``, ``reasons`` (reason -> count)
and ``ids`` (the first ``MAX_IDS_IN_RECORD`` points), on every read that returns vectors, sync
and async; nothing when no vector was stripped.

Real local Qdrant, real Ed25519 keys; no mocks.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
import qdrant_client
from guardkit import DIM, audit_records, create, make_kit, models, receipted_vector, replay_policy_file, unit
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import AsyncQdrantClient, QdrantClient, keys
from qdrant_guard.cli import main as cli_main
from qdrant_guard.decision import MAX_IDS_IN_RECORD
from qdrant_guard.receipts import RECEIPT_KEY, ReceiptSigner, receipts_for_payload

MODEL_A = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_B = "BAAI/bge-small-en-v1.5"
READS = ["retrieve", "scroll", "query_points", "query_batch_points", "query_points_groups"]
# Point id -> the reason its vector is stripped (point 1 is released).
EXPECTED = {2: "missing_receipt", 3: "mechanism_mismatch", 4: "noise_shortfall", 5: "model_mismatch",
            6: "unknown_key", 7: "revoked_key", 8: "collection_mismatch", 9: "unsound_noise",
            10: "epsilon_above_ceiling", 11: "vector_mismatch"}
IDS = tuple(range(1, 12))


class Keys:
    def __init__(self, kit):
        self.guard = ReceiptSigner(keys.load_private_key(kit.guard_key_path))
        self.untrusted = ReceiptSigner(keys.generate_keypair()[0])
        revoked_sk, revoked_pk = keys.generate_keypair()
        self.revoked = ReceiptSigner(revoked_sk)
        self.revoked_pub = keys.public_key_to_str(revoked_pk)
        self.revoked_id = keys.key_id(revoked_pk)


def _config(kit, ks, *, raw_in_boundary=False):
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
           "noise_on_write": False, "raw_in_boundary": raw_in_boundary,
           "intent": {"enabled": False}, "diversity": {"enabled": False},
           "noise": {"mechanism": "gaussian", "epsilon": 1.0, "radius": 0.01, "delta": 1e-6},
           "utility": {"embedding_model": MODEL_A}}
    return kit.config({"pii": pol}, receipts={"trusted_keys": [ks.revoked_pub], "revoked_keys": [ks.revoked_id]},
                      epsilon_ceiling={"PII": 1.0})


def _vector(rng, signer, pid, *, mechanism="gaussian", radius=0.01, model=MODEL_A, collection="pii", vname="",
            epsilon=1.0, seeded=False):
    return receipted_vector(signer, pid, unit(rng), mechanism=mechanism, radius=radius, model_id=model,
                            collection=collection, vname=vname, epsilon=epsilon, seeded=seeded)


def _point(pid, vec, rec):
    payload = {"t": "x"} if rec is None else {"t": "x", RECEIPT_KEY: receipts_for_payload({"": rec})}
    return models.PointStruct(id=pid, vector=vec, payload=payload)


def _points(ks, rng):
    """Point 1 released; points 2-11 each stripped for the reason EXPECTED names."""
    g = ks.guard
    vec, rec = _vector(rng, g, 11)
    return [
        _point(1, *_vector(rng, g, 1)),
        _point(2, unit(rng), None),
        _point(3, *_vector(rng, g, 3, mechanism="laplace_l2")),
        _point(4, *_vector(rng, g, 4, radius=0.005)),  # a smaller protected radius than the policy's
        _point(5, *_vector(rng, g, 5, model=MODEL_B)),
        _point(6, *_vector(rng, ks.untrusted, 6)),
        _point(7, *_vector(rng, ks.revoked, 7)),
        _point(8, *_vector(rng, g, 8, collection="other")),
        _point(9, *_vector(rng, g, 9, seeded=True)),  # a TEST-ONLY generator: no private release
        _point(10, *_vector(rng, g, 10, epsilon=2.0)),
        _point(11, [v + 0.01 for v in vec], rec),  # the vector changed after it was signed
    ]


def _setup(tmp_path, **kw):
    kit = make_kit(tmp_path)
    ks = Keys(kit)
    owner = QdrantClient(":memory:", guard=_config(kit, ks, **kw), principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    RawClient.upsert(owner, "pii", _points(ks, np.random.default_rng(5)))  # around the guard
    return kit, owner, owner.with_principal(kit.principal("bob", "support"))


def _read(c, read, rng, *, with_vectors=True, ids=IDS):
    """One read of ``read``: {id: vector}."""
    if read == "retrieve":
        return {p.id: p.vector for p in c.retrieve("pii", list(ids), with_vectors=with_vectors)}
    if read == "scroll":
        return {p.id: p.vector for p in c.scroll("pii", limit=20, with_vectors=with_vectors)[0]}
    if read == "query_points":
        return {p.id: p.vector for p in c.query_points("pii", query=unit(rng), limit=20,
                                                       with_vectors=with_vectors).points}
    if read == "query_batch_points":
        return {p.id: p.vector for p in c.query_batch_points("pii", [models.QueryRequest(
            query=unit(rng), limit=20, with_vector=with_vectors)])[0].points}
    groups = c.query_points_groups("pii", query=unit(rng), group_by="t", group_size=20, limit=1,
                                   with_vectors=with_vectors)
    return {h.id: h.vector for g in groups.groups for h in g.hits}


def _stripped(record, read):
    details = record["details"]
    if read == "query_batch_points":
        details = details["requests"][0]
    return details.get("stripped")


def _expected(ids):
    bad = [i for i in ids if i in EXPECTED]
    reasons: dict[str, int] = {}
    for i in bad:
        reasons[EXPECTED[i]] = reasons.get(EXPECTED[i], 0) + 1
    return {"count": len(bad), "points": len(bad), "reasons": reasons}, sorted(bad)


@pytest.mark.parametrize("read", READS)
def test_each_reason_is_counted_in_the_reads_entry(tmp_path, read):
    kit, _, bob = _setup(tmp_path)
    got = _read(bob, read, np.random.default_rng(1))
    assert sorted(got) == list(IDS), read
    assert got[1] is not None and all(got[i] is None for i in EXPECTED)
    record = audit_records(kit)[-1]
    assert record["op"] == read and record["verdict"] == "ALLOW"
    note = _stripped(record, read)
    want, ids = _expected(got)
    assert note is not None, "the entry does not say a vector was stripped"
    assert {k: note[k] for k in ("count", "points", "reasons")} == want
    assert sorted(note["ids"]) == ids


def test_a_point_losing_several_named_vectors_counts_each_and_is_listed_once(tmp_path):
    kit = make_kit(tmp_path)
    ks = Keys(kit)
    owner = QdrantClient(":memory:", guard=_config(kit, ks), principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID, named=("text", "image"))
    rng = np.random.default_rng(2)
    tv, tr = _vector(rng, ks.guard, 1, vname="text", mechanism="laplace_l2")
    iv, _ = _vector(rng, ks.guard, 1, vname="image")
    kv, kr = _vector(rng, ks.guard, 2, vname="text")
    RawClient.upsert(owner, "pii", [
        models.PointStruct(id=1, vector={"text": tv, "image": iv},  # image: no receipt
                           payload={RECEIPT_KEY: receipts_for_payload({"text": tr})}),
        models.PointStruct(id=2, vector={"text": kv}, payload={RECEIPT_KEY: receipts_for_payload({"text": kr})}),
    ])
    bob = owner.with_principal(kit.principal("bob", "support"))
    got = {p.id: p.vector for p in bob.retrieve("pii", [1, 2], with_vectors=True)}
    assert got[1] == {} and set(got[2]) == {"text"}
    note = audit_records(kit)[-1]["details"]["stripped"]
    assert note == {"count": 2, "points": 1, "reasons": {"mechanism_mismatch": 1, "missing_receipt": 1}, "ids": [1]}


def test_the_ids_are_bounded_and_the_counts_are_not(tmp_path):
    kit = make_kit(tmp_path)
    ks = Keys(kit)
    owner = QdrantClient(":memory:", guard=_config(kit, ks), principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    rng = np.random.default_rng(3)
    n = MAX_IDS_IN_RECORD + 30
    RawClient.upsert(owner, "pii", [_point(i, unit(rng), None) for i in range(1, n + 1)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    pts, _ = bob.scroll("pii", limit=n + 10, with_vectors=True)
    assert len(pts) == n and all(p.vector is None for p in pts)
    note = audit_records(kit)[-1]["details"]["stripped"]
    assert note["count"] == note["points"] == n and note["reasons"] == {"missing_receipt": n}
    assert len(note["ids"]) == MAX_IDS_IN_RECORD
    assert set(note["ids"]) <= set(range(1, n + 1)) and len(set(note["ids"])) == MAX_IDS_IN_RECORD


@pytest.mark.parametrize("read", READS)
def test_no_detail_when_nothing_was_stripped(tmp_path, read):
    # Pins the common case (passes on the old code too): released vectors only, or no vectors asked
    # for, leave the entry as it was.
    kit, _, bob = _setup(tmp_path)
    rng = np.random.default_rng(4)
    _read(bob, read, rng, with_vectors=False)
    assert _stripped(audit_records(kit)[-1], read) is None
    if read == "retrieve":
        assert _read(bob, read, rng, ids=(1,))[1] is not None
        assert _stripped(audit_records(kit)[-1], read) is None


def test_a_reader_allowed_raw_vectors_gets_no_strip_detail_and_one_who_is_not_does(tmp_path):
    kit, owner, bob = _setup(tmp_path, raw_in_boundary=True)
    rng = np.random.default_rng(6)
    for read in READS:
        got = _read(owner, read, rng)
        assert all(v is not None for v in got.values()) and len(got) == len(IDS), read
        assert _stripped(audit_records(kit)[-1], read) is None, read
        _read(bob, read, rng)
        assert _stripped(audit_records(kit)[-1], read)["count"] == len(EXPECTED), read


def test_the_async_client_records_the_same_detail(tmp_path):
    kit = make_kit(tmp_path)
    ks = Keys(kit)

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_config(kit, ks), principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.EUCLID))
        await qdrant_client.AsyncQdrantClient.upsert(owner, "pii", _points(ks, np.random.default_rng(5)))
        bob = owner.with_principal(kit.principal("bob", "support"))
        rng = np.random.default_rng(7)
        notes = {}
        await bob.retrieve("pii", list(IDS), with_vectors=True)
        notes["retrieve"] = _stripped(audit_records(kit)[-1], "retrieve")
        await bob.scroll("pii", limit=20, with_vectors=True)
        notes["scroll"] = _stripped(audit_records(kit)[-1], "scroll")
        await bob.query_points("pii", query=unit(rng), limit=20, with_vectors=True)
        notes["query_points"] = _stripped(audit_records(kit)[-1], "query_points")
        await bob.query_batch_points("pii", [models.QueryRequest(query=unit(rng), limit=20, with_vector=True)])
        notes["query_batch_points"] = _stripped(audit_records(kit)[-1], "query_batch_points")
        await bob.query_points_groups("pii", query=unit(rng), group_by="t", group_size=20, limit=1, with_vectors=True)
        notes["query_points_groups"] = _stripped(audit_records(kit)[-1], "query_points_groups")
        return notes

    want, ids = _expected(IDS)
    for read, note in asyncio.run(main()).items():
        assert note is not None, read
        assert {k: note[k] for k in ("count", "points", "reasons")} == want, read
        assert sorted(note["ids"]) == ids, read


def test_audit_verify_and_replay_accept_the_entries(tmp_path, capsys):
    kit, _, bob = _setup(tmp_path)
    rng = np.random.default_rng(8)
    for read in READS:
        _read(bob, read, rng)
    log = str(tmp_path / "audit.jsonl")
    assert sum(_stripped(r, r["op"]) is not None for r in audit_records(kit) if r["op"] in READS) == len(READS)
    assert cli_main(["audit", "verify", log]) == 0
    assert cli_main(["audit", "replay", log, "--policy", str(replay_policy_file(kit))]) == 0


def test_a_sparse_vector_is_recorded_as_unsupported(tmp_path):
    # A sparse vector on a sensitive collection can only have been written around the guard: no
    # receipt covers one, so it is stripped whatever its payload says (as receipts.verify reports it).
    kit = make_kit(tmp_path)
    ks = Keys(kit)
    owner = QdrantClient(":memory:", guard=_config(kit, ks), principal=kit.principal("alice", "hr"))
    RawClient.create_collection(owner, "pii", vectors_config={"text": models.VectorParams(
        size=DIM, distance=models.Distance.EUCLID)}, sparse_vectors_config={"sp": models.SparseVectorParams()})
    rng = np.random.default_rng(9)
    tv, tr = _vector(rng, ks.guard, 1, vname="text")
    RawClient.upsert(owner, "pii", [models.PointStruct(
        id=1, vector={"text": tv, "sp": models.SparseVector(indices=[1, 5], values=[0.5, 0.25])},
        payload={RECEIPT_KEY: receipts_for_payload({"text": tr, "sp": tr})})])
    bob = owner.with_principal(kit.principal("bob", "support"))
    got = bob.retrieve("pii", [1], with_vectors=True)[0].vector
    assert set(got) == {"text"}
    assert audit_records(kit)[-1]["details"]["stripped"] == {
        "count": 1, "points": 1, "reasons": {"unsupported_vector": 1}, "ids": [1]}
