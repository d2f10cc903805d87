"""Third review of the offline check (receipts.verify and `qdrant-guard receipt verify`):
sparse vectors and multivectors written around the guard, and receipts whose signed noise a
guarded write would refuse. Real local-mode Qdrant throughout."""
from __future__ import annotations

import dataclasses
import json
import textwrap

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from qdrant_client import QdrantClient as RawClient
from qdrant_client import models

from guardkit import DIM, make_kit, unit
from qdrant_guard import InvalidVectorError, QdrantClient, keys, noise
from qdrant_guard.cli import main as cli_main
from qdrant_guard.noise_params import guarantee_sentence
from qdrant_guard.policy import NoisePolicy
from qdrant_guard.receipts import (
    REASONS,
    RECEIPT_KEY,
    ReceiptItem,
    ReceiptSigner,
    issue_receipts_batch,
    receipts_for_payload,
    stored_form,
    verify,
)

KEY = bytes(range(32))


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


# ------------------------------------------------------------------ 1. sparse vectors and multivectors
def _guarded_mixed(kit, *, close: bool = True):
    """A sensitive collection with a dense, a sparse and a multivector slot, on disk; the guard
    noises and receipts point 1's dense vector. Returns (guarded owner client, or a raw client on
    the same store once the guarded one is closed; the trusted receipt keys)."""
    cfg = kit.config({"mix": {"class": "PII", "owner": "hr", "noise_on_write": True}})
    store = str(kit.tmp / "store")
    owner = QdrantClient(path=store, guard=cfg, principal=kit.principal("alice", "hr"))
    # Made before the guard: the guard refuses sparse slots on sensitive collections.
    RawClient.create_collection(
        owner, "mix",
        vectors_config={
            "d": models.VectorParams(size=DIM, distance=models.Distance.COSINE),
            "m": models.VectorParams(size=DIM, distance=models.Distance.DOT,
                                     multivector_config=models.MultiVectorConfig(
                                         comparator=models.MultiVectorComparator.MAX_SIM)),
        },
        sparse_vectors_config={"s": models.SparseVectorParams()},
    )
    owner.upsert("mix", [models.PointStruct(id=1, vector={"d": unit(np.random.default_rng(1))})])
    trusted = dict(owner.guard.trusted_receipt_keys)
    if not close:
        return owner, trusted
    owner.close()
    return RawClient(path=store), trusted


def _by_name(reports):
    return {(r.point_id, r.vector_name): r for r in reports}


def test_the_guard_refuses_sparse_and_multivectors_on_a_sensitive_collection(kit):
    # The premise of the verify fix: no guarded write, receipted or not, stores either.
    owner, _ = _guarded_mixed(kit, close=False)
    sparse = models.SparseVector(indices=[1, 5], values=[0.5, 0.2])
    multi = [unit(np.random.default_rng(2))] * 2
    for vec in ({"s": sparse}, {"m": multi}):
        with pytest.raises(InvalidVectorError, match="sparse|multivector"):
            owner.upsert("mix", [models.PointStruct(id=2, vector=vec)])


def test_what_the_guard_stores_in_a_collection_with_sparse_and_multivector_slots_verifies(kit):
    # Empty sparse and multivector slots are not reported: the point has no such vector.
    raw, trusted = _guarded_mixed(kit)
    reports = verify(raw, "mix", trusted_keys=trusted)
    assert [(r.point_id, r.vector_name, r.reason) for r in reports] == [(1, "d", "ok")]


def test_a_named_sparse_vector_written_around_the_guard_is_reported(kit):
    # Before: verify skipped every named vector that was not a dense list, so this was silent.
    raw, trusted = _guarded_mixed(kit)
    raw.update_vectors("mix", [models.PointVectors(
        id=1, vector={"s": models.SparseVector(indices=[3, 7], values=[1.0, 0.5])})])
    got = _by_name(verify(raw, "mix", trusted_keys=trusted))
    assert set(got) == {(1, "d"), (1, "s")}
    assert got[(1, "d")].ok
    assert got[(1, "s")].reason == "unsupported_vector"
    assert "sparse vector" in got[(1, "s")].check.detail


def test_a_named_multivector_written_around_the_guard_is_reported(kit):
    raw, trusted = _guarded_mixed(kit)
    rng = np.random.default_rng(3)
    raw.upsert("mix", [models.PointStruct(id=2, vector={"m": [unit(rng), unit(rng)]})])
    got = _by_name(verify(raw, "mix", trusted_keys=trusted))
    assert set(got) == {(1, "d"), (2, "m")}
    assert got[(2, "m")].reason == "unsupported_vector"
    assert "multivector" in got[(2, "m")].check.detail
    # Also when asked for by id.
    (only,) = verify(raw, "mix", [2], trusted_keys=trusted)
    assert (only.vector_name, only.reason) == ("m", "unsupported_vector")


def test_a_receipt_entry_for_a_sparse_vector_does_not_make_it_ok(kit):
    # A receipt commits to one dense vector; an entry under a sparse name is no cover for it.
    raw, trusted = _guarded_mixed(kit)
    (point,) = raw.retrieve("mix", [1], with_payload=True, with_vectors=True)
    container = point.payload["_qdrant_guard_receipt"]
    container["vectors"]["s"] = container["vectors"]["d"]
    raw.upsert("mix", [models.PointStruct(
        id=1, payload={**point.payload, "_qdrant_guard_receipt": container},
        vector={"d": point.vector["d"], "s": models.SparseVector(indices=[0], values=[1.0])})])
    got = _by_name(verify(raw, "mix", trusted_keys=trusted))
    assert got[(1, "d")].ok and got[(1, "s")].reason == "unsupported_vector"


def test_a_default_multivector_is_reported_as_the_named_one_is():
    raw = RawClient(":memory:")
    raw.create_collection("m", vectors_config=models.VectorParams(
        size=4, distance=models.Distance.DOT,
        multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM)))
    raw.upsert("m", [models.PointStruct(id=7, vector=[[0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 0.0]])])
    signer = ReceiptSigner(Ed25519PrivateKey.generate())
    (r,) = verify(raw, "m", trusted_keys={signer.key_id: signer.public_key})
    assert (r.point_id, r.vector_name, r.reason) == (7, "", "unsupported_vector")


def test_new_reasons_are_listed_and_the_old_ones_kept():
    for reason in ("ok", "missing_point", "missing_receipt", "vector_mismatch", "bad_signature"):
        assert reason in REASONS
    assert "unsupported_vector" in REASONS and "insufficient_noise" in REASONS


# ------------------------------------------------------------------ 2. the signed noise parameters
@pytest.fixture(scope="module")
def signer() -> ReceiptSigner:
    return ReceiptSigner(Ed25519PrivateKey.generate())


def _store(signer: ReceiptSigner, releases: dict[int, tuple[np.ndarray, noise.NoiseParams]],
           client: RawClient | None = None) -> RawClient:
    """A collection "c" holding each (vector, params) release with a receipt signed by signer."""
    raw = client or RawClient(":memory:")
    raw.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    items = [ReceiptItem(params=params, vector=vec, collection="c", point_id=pid, vector_name="")
             for pid, (vec, params) in releases.items()]
    recs = issue_receipts_batch(signer, items)
    raw.upsert("c", [models.PointStruct(id=it.point_id, vector=it.vector.tolist(),
                                        payload={RECEIPT_KEY: receipts_for_payload({"": rec})})
                     for it, rec in zip(items, recs)])
    return raw


def _release(seed: int, *, seeded: bool = False, **kw) -> tuple[np.ndarray, noise.NoiseParams]:
    x = np.asarray(unit(np.random.default_rng(seed)), np.float32)[None, :]
    args = dict(mechanism="gaussian", epsilon=1.0, radius=0.01, delta=1e-6, clip_norm=1.0)
    args.update(kw)
    if seeded:
        out, params = noise.privatize_seeded_for_tests(x, seed=seed, **args)
    else:
        out, params = noise.privatize(x, key=KEY, **args)
    return stored_form(out[0], distance="Cosine"), params


def test_a_test_only_seeded_release_is_ok_by_default_and_refused_with_check_noise(signer):
    raw = _store(signer, {1: _release(1), 2: _release(2, seeded=True)})
    trusted = {signer.key_id: signer.public_key}
    # Backwards compatible: without the option only the signature and the binding are checked.
    assert [r.reason for r in verify(raw, "c", trusted_keys=trusted)] == ["ok", "ok"]
    got = {r.point_id: r for r in verify(raw, "c", trusted_keys=trusted, check_noise=True)}
    assert got[1].ok
    assert got[2].reason == "insufficient_noise"
    assert "TEST-ONLY" in got[2].check.detail
    # The parameters stay readable on the refusal, and it is the guard's own judgement.
    assert got[2].check.params is not None and got[2].check.params.rng_id == noise.RNG_SEEDED
    assert noise.check_release(got[2].check.params) == got[2].check.detail


def test_a_scale_below_the_calibration_is_refused_with_check_noise(signer):
    vec, params = _release(3)
    # A signer claiming the calibrated epsilon with a tenth of the noise (what a buggy or lying
    # signer can sign; the receipt is otherwise valid).
    weak = noise.NoiseParams(**{**params.__dict__, "scale": params.scale / 10})
    # ... and the sentence for it (a consistent liar; verify_receipt checks the sentence).
    weak = dataclasses.replace(weak, guarantee=guarantee_sentence(
        weak.mechanism, weak.epsilon, weak.delta, weak.radius, weak.clip_norm, weak.scale, weak.lattice_step,
        weak.dim, weak.dtype))
    raw = _store(signer, {1: (vec, weak)})
    trusted = {signer.key_id: signer.public_key}
    assert verify(raw, "c", trusted_keys=trusted)[0].ok
    (r,) = verify(raw, "c", trusted_keys=trusted, check_noise=True)
    assert r.reason == "insufficient_noise" and "below the calibrated" in r.check.detail


@pytest.mark.parametrize("weaker, named", [
    (dict(epsilon=4.0), "epsilon 4.0"),
    (dict(radius=0.001), "radius 0.001"),
    (dict(delta=1e-3), "delta 0.001"),
    (dict(clip_norm=2.0), "clip_norm 2.0"),
    (dict(clip_norm=None), "clip_norm None"),
])
def test_noise_weaker_than_the_policy_is_refused_with_noise_policy(signer, weaker, named):
    # Each release is consistent (check_release passes) but weaker than the collection's policy.
    raw = _store(signer, {1: _release(4), 2: _release(5, **weaker)})
    trusted = {signer.key_id: signer.public_key}
    pol = NoisePolicy(epsilon=1.0, delta=1e-6, radius=0.01, clip_norm=1.0)
    assert [r.reason for r in verify(raw, "c", trusted_keys=trusted, check_noise=True)] == ["ok", "ok"]
    got = {r.point_id: r for r in verify(raw, "c", trusted_keys=trusted, noise_policy=pol)}
    assert got[1].ok
    assert got[2].reason == "insufficient_noise" and named in got[2].check.detail


def test_noise_policy_accepts_what_the_guard_itself_wrote(kit):
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True,
                              "noise": {"epsilon": 0.5, "delta": 1e-7, "radius": 0.02}}})
    store = str(kit.tmp / "store")
    owner = QdrantClient(path=store, guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    rng = np.random.default_rng(6)
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng)) for i in range(3)])
    trusted = dict(owner.guard.trusted_receipt_keys)
    owner.close()
    reports = verify(RawClient(path=store), "pii", trusted_keys=trusted,
                     noise_policy=cfg.policy_for("pii").noise)
    assert [r.reason for r in reports] == ["ok"] * 3


def test_a_noise_policy_of_the_wrong_type_is_a_clear_error(signer):
    raw = _store(signer, {1: _release(7)})
    with pytest.raises(TypeError, match="NoisePolicy.*epsilon"):
        verify(raw, "c", trusted_keys={signer.key_id: signer.public_key}, noise_policy={"epsilon": 1.0})
    with pytest.raises(TypeError, match="check_noise must be True or False"):
        verify(raw, "c", trusted_keys={signer.key_id: signer.public_key}, check_noise="no")


# ------------------------------------------------------------------ the CLI
def _cli(capsys, argv):
    rc = cli_main(argv)
    return rc, capsys.readouterr().out


def test_cli_check_noise_reports_a_seeded_release_and_plain_verify_stays_as_it_was(tmp_path, signer, capsys):
    raw = _store(signer, {1: _release(8), 2: _release(9, seeded=True)}, RawClient(path=str(tmp_path / "store")))
    raw.close()
    pub = keys.public_key_to_str(signer.public_key)
    base = ["receipt", "verify", "--path", str(tmp_path / "store"), "--collection", "c", "--trusted-key", pub]
    rc, out = _cli(capsys, base)
    assert rc == 0 and "2/2 receipted vectors verify" in out
    rc, out = _cli(capsys, base + ["--check-noise"])
    lines = out.splitlines()
    assert rc == 1 and lines[-1].startswith("1/2 receipted vectors verify")
    (bad,) = map(json.loads, lines[:-1])
    assert (bad["id"], bad["reason"], bad["ok"]) == ("2", "insufficient_noise", False)
    assert "TEST-ONLY" in bad["detail"]


def test_cli_check_noise_with_policy_applies_the_collections_noise(kit, tmp_path, signer, capsys):
    raw = _store(signer, {1: _release(10), 2: _release(11, epsilon=1.5)}, RawClient(path=str(tmp_path / "store")))
    raw.close()
    policy = tmp_path / "policy.toml"
    policy.write_text(textwrap.dedent(f"""\
        [boundaries.hr]
        authority_keys = ["{kit.authority_pub['hr']}"]

        [receipts]
        trusted_keys = ["{keys.public_key_to_str(signer.public_key)}"]

        [collections.c]
        class = "PII"
        owner = "hr"
        noise = {{ epsilon = 1.0, delta = 1e-6, radius = 0.01 }}
        """))
    base = ["receipt", "verify", "--path", str(tmp_path / "store"), "--collection", "c", "--policy", str(policy)]
    rc, out = _cli(capsys, base)
    assert rc == 0 and "2/2 receipted vectors verify" in out
    rc, out = _cli(capsys, base + ["--check-noise"])
    assert rc == 1
    (bad,) = map(json.loads, out.splitlines()[:-1])
    assert (bad["id"], bad["reason"]) == ("2", "insufficient_noise")
    assert "epsilon 1.5" in bad["detail"] and "epsilon <= 1.0" in bad["detail"]


def test_cli_reports_a_sparse_vector_with_its_reason(tmp_path, signer, capsys):
    store = str(tmp_path / "store")
    raw = RawClient(path=store)
    raw.create_collection("sp", vectors_config={}, sparse_vectors_config={"s": models.SparseVectorParams()})
    raw.upsert("sp", [models.PointStruct(id=1, vector={"s": models.SparseVector(indices=[2], values=[0.7])})])
    raw.close()
    rc, out = _cli(capsys, ["receipt", "verify", "--path", store, "--collection", "sp",
                            "--trusted-key", keys.public_key_to_str(signer.public_key)])
    assert rc == 1
    (bad,) = map(json.loads, out.splitlines()[:-1])
    assert (bad["vector"], bad["reason"]) == ("s", "unsupported_vector")
