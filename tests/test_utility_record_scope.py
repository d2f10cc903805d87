"""A collection's receipt_keys scope its utility records too (h-meta, 2026-12-05).

A utility record vouches for the noise levels writes may use. Before, the guard verified every
record against its own key and receipts.trusted_keys, so a collection that sets receipt_keys (and
refuses receipts of every other outside key) still took a record signed by any key trusted for
another collection, and refused one signed by a key listed only in its own receipt_keys. Now a
record is verified against the keys the collection accepts receipts from.

Real local Qdrant, a record measured by calibrate() on a real store, real Ed25519 keys.
"""
from __future__ import annotations

import asyncio
import base64
import dataclasses
import re

import pytest
import qdrant_client
from guardkit import make_kit, models, staging_record

from qdrant_guard import AsyncQdrantClient, ConfigError, QdrantClient, keys
from qdrant_guard.utility import UTILITY_DOMAIN

DIM = 32
_VP = models.VectorParams(size=DIM, distance=models.Distance.COSINE)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The kit, its guard-signed record, the staging docs, two outside key pairs and the record re-signed by each."""
    tmp = tmp_path_factory.mktemp("uscope")
    kit = make_kit(tmp)
    rec, docs = staging_record(kit, tmp / "guard.json", dim=DIM)
    outside = {n: keys.generate_keypair() for n in ("a", "b")}
    paths = {"guard": tmp / "guard.json"}
    for n, (sk, pk) in outside.items():
        paths[n] = _resign(rec, sk, pk, tmp / f"{n}.json")
        paths[f"{n}-text"] = _resign(dataclasses.replace(rec, vector_name="text"), sk, pk, tmp / f"{n}-text.json")
    return kit, rec, docs, outside, paths


def _resign(rec, sk, pk, path):
    out = dataclasses.replace(rec, signer_key_id=keys.key_id(pk), signature=None)
    sig = sk.sign(UTILITY_DOMAIN + out.signed_bytes())
    path.write_text(dataclasses.replace(out, signature=base64.b64encode(sig).decode("ascii")).to_json())
    return path


def _pub(outside, n):
    return keys.public_key_to_str(outside[n][1])


def _kid(outside, n):
    return keys.key_id(outside[n][1])


def _coll(rec, record, receipt_keys=None, **over):
    c = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True, "intent": {"enabled": False},
         "noise": {"epsilon": rec.epsilon, "radius": 0.01}, "utility": {"record": str(record)}, **over}
    if receipt_keys is not None:
        c["receipt_keys"] = list(receipt_keys)
    return c


def _writer(kit, colls, *, trusted=(), revoked=(), vectors=_VP):
    cfg = kit.config(colls, epsilon_ceiling={"PII": 5.0},
                     receipts={"trusted_keys": list(trusted), "revoked_keys": list(revoked)})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    for name in colls:
        owner.create_collection(name, vectors_config=vectors)
    return owner.with_principal(kit.principal("bob", "support"))


def _write(client, name, docs, vector=None):
    v = docs[0].tolist()
    client.upsert(name, [models.PointStruct(id=1, vector=v if vector is None else {vector: v})])


def test_a_record_by_a_key_trusted_elsewhere_is_refused_where_receipt_keys_leave_it_out(setup):
    kit, rec, docs, outside, paths = setup
    bob = _writer(kit, {"pii": _coll(rec, paths["b"], [_pub(outside, "a")])}, trusted=[_pub(outside, "b")])
    with pytest.raises(ConfigError) as err:  # before: accepted, b being in receipts.trusted_keys
        _write(bob, "pii", docs)
    msg = str(err.value)
    assert "collection 'pii'" in msg and _kid(outside, "b") in msg and "[collections.pii]" in msg
    assert "receipts.trusted_keys lists it" in msg and _kid(outside, "a") in msg
    assert qdrant_client.QdrantClient.count(bob, "pii").count == 0


def test_a_record_by_a_key_listed_only_in_receipt_keys_is_accepted(setup):
    kit, rec, docs, outside, paths = setup
    bob = _writer(kit, {"pii": _coll(rec, paths["a"], [_pub(outside, "a")])})
    _write(bob, "pii", docs)  # before: "does not verify" (a is in no receipts.trusted_keys)
    assert qdrant_client.QdrantClient.count(bob, "pii").count == 1


def test_one_record_file_serves_a_scoped_and_an_open_collection_by_their_own_keys(setup):
    # The guard reads a record once: under one path, a scoped collection's refusal and an open
    # collection's acceptance must not leak into each other through that cache.
    kit, rec, docs, outside, paths = setup
    bob = _writer(kit, {"open": _coll(rec, paths["b"]), "scoped": _coll(rec, paths["b"], [])},
                  trusted=[_pub(outside, "b")])
    _write(bob, "open", docs)
    with pytest.raises(ConfigError, match=re.escape(_kid(outside, "b"))):
        _write(bob, "scoped", docs)  # before: accepted
    _write(bob, "open", docs)
    assert [qdrant_client.QdrantClient.count(bob, n).count for n in ("open", "scoped")] == [1, 0]


def test_the_guards_own_record_is_accepted_under_an_empty_scope(setup):
    kit, rec, docs, outside, paths = setup
    bob = _writer(kit, {"pii": _coll(rec, paths["guard"], [])})
    _write(bob, "pii", docs)
    assert qdrant_client.QdrantClient.count(bob, "pii").count == 1


def test_a_revoked_key_stays_refused_when_listed_in_receipt_keys(setup):
    kit, rec, docs, outside, paths = setup
    bob = _writer(kit, {"pii": _coll(rec, paths["a"], [_pub(outside, "a")])}, revoked=[_kid(outside, "a")])
    with pytest.raises(ConfigError, match="revoked key"):
        _write(bob, "pii", docs)


def test_utility_records_of_named_vectors_are_scoped_too(setup):
    kit, rec, docs, outside, paths = setup
    coll = _coll(rec, paths["b-text"], [_pub(outside, "a")])
    del coll["utility"]["record"]
    coll["utility"]["records"] = {"text": str(paths["b-text"])}
    bob = _writer(kit, {"pii": coll}, trusted=[_pub(outside, "b")], vectors={"text": _VP})
    with pytest.raises(ConfigError) as err:
        _write(bob, "pii", docs, vector="text")
    assert "utility.records.text" in str(err.value) and _kid(outside, "b") in str(err.value)
    coll["utility"]["records"] = {"text": str(paths["a-text"])}
    bob = _writer(kit, {"pii": coll}, trusted=[_pub(outside, "b")], vectors={"text": _VP})
    _write(bob, "pii", docs, vector="text")
    assert qdrant_client.QdrantClient.count(bob, "pii").count == 1


def test_the_default_section_names_itself(setup):
    kit, rec, docs, outside, paths = setup
    cfg = kit.config({}, default=_coll(rec, paths["b"], [_pub(outside, "a")]), epsilon_ceiling={"PII": 5.0},
                     receipts={"trusted_keys": [_pub(outside, "b")]})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("stray", vectors_config=_VP)
    with pytest.raises(ConfigError, match=r"\[default\]"):
        _write(owner.with_principal(kit.principal("bob", "support")), "stray", docs)


def test_the_scope_holds_in_async_too(setup):
    kit, rec, docs, outside, paths = setup
    cfg = kit.config({"pii": _coll(rec, paths["b"], [_pub(outside, "a")])}, epsilon_ceiling={"PII": 5.0},
                     receipts={"trusted_keys": [_pub(outside, "b")]})

    async def run():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=_VP)
        bob = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(ConfigError, match=re.escape(_kid(outside, "b"))):
            await bob.upsert("pii", [models.PointStruct(id=1, vector=docs[0].tolist())])

    asyncio.run(run())
