"""The bad-input table: each input gets a clear QdrantGuardError (or TypeError/ValueError in CPython
wording), or is handled correctly. Nothing crashes, hangs, or is half-written."""
from __future__ import annotations

import numpy as np
import pytest

from guardkit import DIM, count, create, make_kit, models, snapshot, unit
from qdrant_guard import ConfigError, GuardRefusal, InvalidVectorError, QdrantClient, QdrantGuardError
from qdrant_guard.detect import find_sensitive, redact
from qdrant_guard.noise import privatize
from qdrant_guard.scan import scan_query


@pytest.fixture()
def clients(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({
        "pii": {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "noise_on_write": True,
                "diversity": {"enabled": False}, "intent": {"enabled": False}},
        "multi": {"class": "PII", "owner": "hr", "writers": ["support"]},
    })
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    owner.create_collection("multi", vectors_config={
        "mv": models.VectorParams(size=4, distance=models.Distance.COSINE,
                                  multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM))})
    return owner, owner.with_principal(kit.principal("bob", "support"))


def test_none_and_empty(clients):
    owner, bob = clients
    with pytest.raises(TypeError, match="collection_name' must be str, not NoneType"):
        bob.query_points(None, query=[0.1] * DIM)
    with pytest.raises(TypeError, match="must be the query.s text as a str, not bytes"):
        bob.query_points("pii", query=[0.1] * DIM, query_text=b"bytes are not text")
    assert bob.query_points("pii", query=[0.1] * DIM, query_text="").points == []
    with pytest.raises(TypeError):
        scan_query(None)
    with pytest.raises(TypeError):
        find_sensitive(None)
    with pytest.raises(TypeError):
        privatize(None, mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01)
    assert find_sensitive("") == [] and redact("") == "" and scan_query("").ok


def test_ten_megabyte_query_is_rejected_not_hung(clients):
    _, bob = clients
    huge = ("lorem ipsum dolor sit amet " * 400_000)[:10_000_000]
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("pii", query=[0.1] * DIM, query_text=huge)
    assert ei.value.verdict == "QUERY_REJECTED"
    assert [v["kind"] for v in ei.value.details["violations"]] == ["size_cap"]  # refused before scanning
    res = scan_query(huge)  # and the scanner itself copes with it
    assert {"token_cap", "repetition"} <= {v.kind for v in res.violations}


@pytest.mark.parametrize("text,kind", [
    ("lookup \udcff record", "lone_surrogate"),
    ("lookup\x00record", "control_char"),
    ("caf\u200be au lait", "invisible_char"),
])
def test_invalid_text_is_rejected_with_position(clients, text, kind):
    _, bob = clients
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("pii", query=[0.1] * DIM, query_text=text)
    v = [v for v in ei.value.details["violations"] if v["kind"] == kind]
    assert v and 0 <= v[0]["position"] < len(text)


def test_invalid_utf8_bytes_are_flagged_by_the_scanner():
    res = scan_query(b"abc \xff\xfe def")
    assert not res.ok and res.violations[0].kind == "invalid_utf8" and res.violations[0].position == 4


@pytest.mark.parametrize("vector,error", [
    ([float("nan")] * DIM, "non-finite"),
    ([float("-inf")] + [0.0] * (DIM - 1), "non-finite"),
    ([0.1] * (DIM - 1), "dimension 15"),
    ([[0.1] * DIM], "1-d"),
    (["a"] * DIM, None),
])
def test_bad_vectors(clients, vector, error):
    _, bob = clients
    with pytest.raises((InvalidVectorError, ValueError)) as ei:
        bob.upsert("pii", [models.PointStruct(id=1, vector=[0.2] * DIM), models.PointStruct(id=2, vector=vector)])
    if error:
        assert error in str(ei.value)
    assert count(bob._origin, "pii") == 0


def test_integer_non_contiguous_and_read_only_arrays_are_handled(clients):
    owner, bob = clients
    ints = np.arange(1, DIM + 1, dtype=np.int64)
    base = np.asarray(unit(np.random.default_rng(1), 2 * DIM))
    strided = base[::2]
    ro = np.asarray(unit(np.random.default_rng(2)))
    ro.setflags(write=False)
    bob.upsert("pii", models.Batch(ids=[1, 2, 3], vectors=[ints.tolist(), strided.tolist(), ro.tolist()]))
    assert count(owner, "pii") == 3
    noised, _ = privatize(strided.astype(np.float32), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01)
    assert noised.flags.c_contiguous and noised.shape == (DIM,)
    out, _ = privatize(ro.astype(np.float64), mechanism="laplace_l2", epsilon=1.0, radius=0.01)
    assert out.dtype == np.float64 and not ro.flags.writeable


def test_multivectors_and_sparse_vectors_are_refused_clearly(clients):
    owner, bob = clients
    with pytest.raises(InvalidVectorError, match="multivector"):
        bob.upsert("multi", [models.PointStruct(id=1, vector={"mv": [[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]]})])
    assert count(owner, "multi") == 0


def test_unknown_collection_gives_qdrants_error_and_policy_typos_a_config_error(clients, tmp_path):
    _, bob = clients
    with pytest.raises((ValueError, QdrantGuardError), match="nope"):
        bob.upsert("nope", [models.PointStruct(id=1, vector=[0.1] * DIM)])
    bad = tmp_path / "typo.toml"
    bad.write_text('[collections.x]\nclas = "PII"\n')
    with pytest.raises(ConfigError, match="unknown key 'collections.x.clas'"):
        QdrantClient(":memory:", guard=str(bad))


def test_huge_batch_is_checked_whole_and_refused_whole(clients):
    owner, bob = clients
    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(5000, DIM))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    pts = [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(vecs)]
    pts.append(models.PointStruct(id=5000, vector=[float("nan")] * DIM))
    with pytest.raises(InvalidVectorError):
        bob.upload_points("pii", pts, batch_size=256)
    assert count(owner, "pii") == 0
    bob.upload_points("pii", pts[:-1], batch_size=256, wait=True)
    assert count(owner, "pii") == 5000
    assert len(snapshot(owner, "pii")) == 5000


@pytest.mark.parametrize("bad_id", [-4, 2**64, "not-a-uuid"])
@pytest.mark.parametrize("collection", ["pii", "model"], ids=["noised", "raw-in-boundary"])
def test_an_id_qdrant_refuses_is_refused_on_every_write_path_before_anything_is_written(tmp_path, bad_id, collection):
    # Local mode stores such an id without complaint (a server refuses it), and the raw in-boundary
    # path used to forward it while the noised path failed on it: now both refuse, audited.
    kit = make_kit(tmp_path)
    cfg = kit.config({
        "pii": {"class": "PII", "owner": "hr", "intent": {"enabled": False}},
        "model": {"class": "PROPRIETARY", "owner": "hr", "raw_in_boundary": True, "intent": {"enabled": False}},
    })
    alice = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(alice, collection)
    rng = np.random.default_rng(3)
    alice.upsert(collection, [models.PointStruct(id=1, vector=unit(rng), payload={"text": "kept"})])
    before = snapshot(alice, collection)
    good = models.PointStruct(id=2, vector=unit(rng), payload={"text": "x"})
    bad = models.PointStruct(id=bad_id, vector=unit(rng), payload={"text": "x"})
    writes = [
        lambda: alice.upsert(collection, [good, bad]),
        lambda: alice.upload_points(collection, [good, bad], wait=True),
        lambda: alice.update_vectors(collection, [models.PointVectors(id=1, vector=unit(rng)),
                                                  models.PointVectors(id=bad_id, vector=unit(rng))]),
        lambda: alice.batch_update_points(collection, [models.UpsertOperation(upsert=models.PointsList(points=[good, bad]))]),
    ]
    for write in writes:
        with pytest.raises(QdrantGuardError, match=r"point_id .* (outside Qdrant's unsigned 64-bit id range|neither an unsigned)"):
            write()
        assert snapshot(alice, collection) == before
    audit = [line for line in (tmp_path / "audit.jsonl").read_text().splitlines() if "UNSUPPORTED_WRITE" in line]
    assert len(audit) == len(writes)
