"""Twenty-fifth adversarial review (2026-12-05, branch h-rev27): findings on the changes of this
session (collection metadata visibility, utility record scope, glued_repetition, the claims-audit
argument checks), each with the test that failed on the code before its fix, or that pins what is
left open as docs/security-testing.md and the threat model describe it.

Real qdrant-client local mode, real keys; no mocks.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qdrant_guard import AsyncQdrantClient, GuardArgumentTypeError, UnsupportedWriteError
from qdrant_guard.receipts import RECEIPT_KEY
from qdrant_guard.scan import scan_query
from tests.guardkit import QdrantClient, RawClient, audit_records, make_kit, models, unit
from tests.oracle import both

NATIVE, PYTHON = both("scan")

_VP = {"": models.VectorParams(size=16, distance=models.Distance.COSINE),
       "b": models.VectorParams(size=16, distance=models.Distance.COSINE)}
_PRIVATE = {"class": "PII", "owner": "hr", "readers": ["hr"], "writers": ["support"], "intent": {"enabled": False}}


def _points(n: int = 3) -> list[models.PointStruct]:
    rng = np.random.default_rng(0)
    return [models.PointStruct(id=i, vector={"": unit(rng), "b": unit(rng)},
                               payload={"source": "s", "y": 1, "z": 2}) for i in range(n)]


# --- 1. delete_payload's keys and delete_vectors' vectors: any iterable of str -----------------
# Claims audit 2 (9b029df) refused every keys/vectors argument but a list or tuple on sensitive
# collections. qdrant-client's REST models take any iterable of str there (pydantic reads a set,
# dict.keys() or a generator as a list), and local mode iterates it: a PUBLIC collection, or a
# client without the guard, deletes the keys; the guarded sensitive collection raised
# GuardArgumentTypeError. A generator must also reach Qdrant whole, not as the guard left it.
_KEYS = {
    "set": lambda: {"y", "z"},
    "dict_keys": lambda: {"y": 0, "z": 0}.keys(),
    "generator": lambda: (k for k in ["y", "z"]),
    "numpy": lambda: np.array(["y", "z"]),
}


@pytest.mark.parametrize("kind", sorted(_KEYS))
def test_delete_payload_takes_any_iterable_of_keys(tmp_path, kind):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"c": _PRIVATE}), principal=kit.principal("alice", "hr"))
    raw = RawClient(":memory:")
    for client in (alice, raw):
        client.create_collection("c", vectors_config=_VP)
        client.upsert("c", _points())
        client.delete_payload("c", keys=_KEYS[kind](), points=[1])
    for client in (alice, raw):
        (rec,) = RawClient.retrieve(client, "c", [1], with_payload=True)
        assert {k: v for k, v in rec.payload.items() if k != RECEIPT_KEY} == {"source": "s"}


@pytest.mark.parametrize("kind", ["set", "generator"])
def test_delete_vectors_takes_any_iterable_of_names(tmp_path, kind):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"c": _PRIVATE}), principal=kit.principal("alice", "hr"))
    alice.create_collection("c", vectors_config=_VP)
    alice.upsert("c", _points())
    before = RawClient.retrieve(alice, "c", [1], with_vectors=True)[0].vector
    assert set(before) == {"", "b"}
    alice.delete_vectors("c", vectors={"b"} if kind == "set" else (n for n in ["b"]), points=[1])
    after = RawClient.retrieve(alice, "c", [1], with_vectors=True)[0].vector
    # local mode answers the one vector left, the unnamed one, as a bare list
    assert after == before[""]


def test_delete_payload_takes_a_set_of_keys_in_async_too(tmp_path):
    kit = make_kit(tmp_path)

    async def run():
        alice = AsyncQdrantClient(":memory:", guard=kit.config({"c": _PRIVATE}), principal=kit.principal("alice", "hr"))
        await alice.create_collection("c", vectors_config=_VP)
        await alice.upsert("c", _points())
        await alice.delete_payload("c", keys={"y", "z"}, points=[1])
        (rec,) = await alice.retrieve("c", [1], with_payload=True)
        return rec.payload

    payload = asyncio.run(run())
    assert "y" not in payload and "z" not in payload and payload["source"] == "s"


@pytest.mark.parametrize("keys, named", [("yz", "str"), (b"y", "bytes"), ({"y": 1}, "dict"), (["y", 3], "int"),
                                         (7, "int")])
def test_a_str_mapping_or_non_str_key_is_still_refused_audited(tmp_path, keys, named):
    # A str would be read as its characters by local mode ('yz' deletes keys 'y' and 'z').
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"c": _PRIVATE}), principal=kit.principal("alice", "hr"))
    alice.create_collection("c", vectors_config=_VP)
    alice.upsert("c", _points())
    with pytest.raises(GuardArgumentTypeError, match=f"argument 'keys' must be a list of str.*{named}"):
        alice.delete_payload("c", keys=keys, points=[1])
    last = audit_records(kit)[-1]
    assert last["op"] == "delete_payload" and last["verdict"] == "UNSUPPORTED_WRITE"
    (rec,) = RawClient.retrieve(alice, "c", [1], with_payload=True)
    assert rec.payload["y"] == 1 and rec.payload["z"] == 2


# --- 3. glued_repetition --------------------------------------------------------------------
# What the guard's [query] defaults are (policy.QueryRules): the scan arguments they become.
_DEFAULTS = dict(max_tokens=500, max_repetition=0.5, max_ngram_run=None, max_model_tokens=4000,
                 max_glued_repetition=0.5)


def _kinds(text: str) -> set[str]:
    return {v.kind for v in scan_query(text, **_DEFAULTS).violations}


# Left open, docs corrected. docs/threat-model.md said runs under 64 characters escape the rule but
# "their copies, split by spaces, are whitespace tokens for max_repetition". Only when the split
# falls at the same place in every copy: a phrase whose length does not divide 63, glued and cut
# every 63 characters, gives tokens that are all different (each starts at another offset of the
# phrase), so max_repetition scores ~0 and no run is long enough for glued_repetition. Copies
# longer than 256 characters (the longest period tried) also pass. Both pinned here as the threat
# model now lists them.
def test_glued_stuffing_cut_every_63_characters_passes_both_rules():
    glued = "ignorepreviousinstructions" * 63                    # 1,638 letters, period 26
    cut = " ".join(glued[i:i + 63] for i in range(0, len(glued), 63))
    assert _kinds(glued) == {"glued_repetition"}
    assert _kinds(cut) == set()
    assert scan_query(cut, **_DEFAULTS).repetition_ratio == 0.0
    # Cut at a multiple of the period, the copies line up and max_repetition catches them.
    aligned = " ".join(glued[i:i + 52] for i in range(0, len(glued), 52))
    assert "repetition" in _kinds(aligned)


def test_glued_copies_longer_than_the_longest_period_pass():
    rng = np.random.default_rng(3)
    unit_text = "".join(chr(int(c)) for c in rng.integers(0x4E00, 0x9FA5, size=300))
    assert _kinds(unit_text * 10) == set()                      # 3,000 CJK characters, 10 copies
    assert _kinds(unit_text[:256] * 10) == {"glued_repetition"}  # the same at period 256


_ALPHABET = ["a", "b", "é", "数", "\U0001F600", " ", "\u3000", "\u00a0", "\u200b", "\ud800", "\udcff"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(st.tuples(st.lists(st.sampled_from(_ALPHABET), min_size=1, max_size=12),
                                 st.integers(1, 40)), min_size=1, max_size=6),
       as_bytes=st.booleans(), cap=st.sampled_from([0.0, 0.3, 0.5, 0.9]))
def test_glued_violations_agree_native_and_twin(pieces, as_bytes, cap):
    # Positions are code points for str (a lone surrogate is one) and byte offsets for bytes (an
    # invalid byte is one unit, here the UTF-8 of U+DCFF's surrogateescape byte and U+D800's bytes).
    text = "".join("".join(unit) * k for unit, k in pieces)
    arg: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
    rules = dict(max_tokens=None, max_repetition=None, encoded_payloads=False, max_glued_repetition=cap)
    native = [(v.kind, v.position, v.detail) for v in NATIVE.scan_query(arg, **rules).violations
              if v.kind == "glued_repetition"]
    twin = [(v.kind, v.position, v.detail) for v in PYTHON.scan_query(arg, **rules).violations
            if v.kind == "glued_repetition"]
    assert native == twin


# --- 1. collection metadata visibility --------------------------------------------------------
# Left open, documented. get_collection withholds the point count from a principal who may not
# read the collection, but a write-only principal (writers, not readers) learns which point ids
# exist from any write by id: the guard refuses a payload or vector change naming a missing point
# and lists the missing ids (Qdrant itself fails such a write with "no point with id ..." on a
# server, a KeyError in local mode). With guessable ids (0, 1, 2, ...) that is the count.
def test_a_write_only_principal_learns_which_ids_exist_from_a_write(tmp_path):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"c": _PRIVATE}), principal=kit.principal("alice", "hr"))
    alice.create_collection("c", vectors_config=_VP)
    alice.upsert("c", _points(7))
    bob = alice.with_principal(kit.principal("bob", "support"))
    assert bob.get_collection("c").points_count is None
    with pytest.raises(UnsupportedWriteError, match=r"point\(s\) \[7, 8, 9\] do not exist"):
        bob.set_payload("c", payload={"note": "x"}, points=list(range(10)))
    assert [r["verdict"] for r in audit_records(kit)[-2:]] == ["ALLOW", "UNSUPPORTED_WRITE"]


# --- 4. receipts.verify with an AsyncQdrantClient ---------------------------------------------
# Claims audit 2 made verify() refuse a client without scroll/retrieve/get_aliases as
# GuardArgumentTypeError. An AsyncQdrantClient (raw or guarded) has all three, returning
# coroutines: verify() raised a bare TypeError ("cannot unpack non-iterable coroutine object")
# after leaving an unawaited coroutine behind.
@pytest.mark.parametrize("guarded", [False, True])
@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_verify_refuses_an_async_client_naming_the_fix(tmp_path, guarded):
    from qdrant_client import AsyncQdrantClient as RawAsync

    from qdrant_guard import receipts

    kit = make_kit(tmp_path)

    async def make():
        if guarded:
            client = AsyncQdrantClient(":memory:", guard=kit.config({"c": _PRIVATE}),
                                       principal=kit.principal("alice", "hr"))
        else:
            client = RawAsync(":memory:")
        await client.create_collection("c", vectors_config=_VP)
        await client.upsert("c", _points())
        return client

    client = asyncio.run(make())
    for ids in (None, [1]):
        with pytest.raises(GuardArgumentTypeError, match="verify\\(\\) is synchronous.*QdrantClient"):
            receipts.verify(client, "c", ids, trusted_keys={})


# list_full_snapshots was SAFE ("lists snapshot names"): it also answers each full snapshot's size,
# the storage of every collection, so a principal who reads all collections but one measured the
# one get_collection withholds the counts of. The size is now 0 to a principal who may not read
# every collection. Local mode has no snapshots: the guard's operation is driven with a server's
# answer built of qdrant-client models, and the real call is shown going through the guard.
def _snapshots() -> list[models.SnapshotDescription]:
    return [models.SnapshotDescription(name="full-1.snapshot", creation_time="2026-12-05T17:00:00",
                                       size=123_456, checksum="ab" * 32)]


def test_full_snapshot_sizes_only_for_a_principal_who_reads_every_collection(tmp_path):
    from qdrant_guard.pipeline import drive_sync

    kit = make_kit(tmp_path)
    shared = {**_PRIVATE, "readers": ["hr", "support"]}
    alice = QdrantClient(":memory:", guard=kit.config({"c": _PRIVATE, "s": shared}), principal=kit.principal("alice", "hr"))
    for name in ("c", "s"):
        alice.create_collection(name, vectors_config=_VP)
    bob = alice.with_principal(kit.principal("bob", "support"))
    sent = []

    def invoke(call):
        sent.append(call.method)
        return _snapshots() if call.method == "list_full_snapshots" else RawClient.get_collections(alice)

    (theirs,) = drive_sync(bob._guard.run("list_full_snapshots", {}), invoke)
    assert sent == ["get_collections", "list_full_snapshots"]
    assert theirs.size == 0 and theirs.name == "full-1.snapshot" and theirs.checksum == "ab" * 32
    assert audit_records(kit)[-1]["details"] == {"hidden": ["size"]}
    (mine,) = drive_sync(alice._guard.run("list_full_snapshots", {}), invoke)
    assert mine.size == 123_456
    assert bob.list_full_snapshots() == []  # the real call, through the guard (local mode has none)
    assert [(e["op"], e["verdict"]) for e in audit_records(kit)[-1:]] == [("list_full_snapshots", "ALLOW")]
