"""A receipt's noise mechanism must be the collection's ``[noise] mechanism`` (2026-12-05).

Before, a receipt was compared with the collection's ``[noise]`` by its numbers only
(``noise_shortfall``): a ``laplace_l2`` receipt (pure metric DP) was stored in a ``gaussian``
collection at the same epsilon and radius, and released on reads, although the collection's
stated guarantee and its utility record are the gaussian mechanism's. Now every write path that
takes a receipt refuses it (``NOISE_REQUIRED``, reason ``mechanism_mismatch``), a guarded read
strips a stored one, and ``receipts.verify(noise_policy=...)`` / ``qdrant-guard receipt verify
--policy --check-noise`` report it as ``mechanism_mismatch``.

Real local Qdrant, real Ed25519 keys; no mocks."""
from __future__ import annotations

import asyncio
import json
import textwrap

import numpy as np
import pytest
import qdrant_client
from guardkit import DIM, count, create, make_kit, models, receipt_writes, receipted_point, unit
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient, keys
from qdrant_guard.cli import main as cli_main
from qdrant_guard.policy import NoisePolicy
from qdrant_guard.receipts import REASONS, verify

GAUSS = {"mechanism": "gaussian", "delta": 1e-6}
LAPLACE = {"mechanism": "laplace_l2", "delta": 0.0}
# (the collection's noise, the receipt's mechanism): each pair in both directions.
MISMATCHES = [pytest.param(GAUSS, "laplace_l2", id="laplace-receipt-in-gaussian"),
              pytest.param(LAPLACE, "gaussian", id="gaussian-receipt-in-laplace")]


def _policy(kit, noise, **extra):
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
           "noise_on_write": False, "intent": {"enabled": False}, "diversity": {"enabled": False},
           "noise": {"epsilon": 1.0, "radius": 0.01, **noise}}
    pol.update(extra)
    return kit.config({"pii": pol})


def _point(kit, pid, rng, mechanism):
    """A point noised with ``mechanism`` at the collection's epsilon and radius (no weaker in any
    number) and receipted by the guard's own key, which every collection trusts."""
    return receipted_point(kit, pid, rng, mechanism=mechanism)


_writes = receipt_writes


WRITES = ["upsert", "upload_points", "upload_collection", "batch_update_points"]


def _assert_mechanism_refusal(err, coll_mech, rec_mech, bad_id):
    assert err.verdict == "NOISE_REQUIRED"
    text = str(err)
    # Names the collection, both mechanisms and the fix.
    assert "collection 'pii'" in text
    assert f"mechanism is {rec_mech!r}" in text and f"holds {coll_mech!r} releases only" in text
    assert f"privatize(vector, mechanism={coll_mech!r}" in text and "noise_on_write = true" in text
    assert err.details["reasons"][str(bad_id)].startswith("mechanism_mismatch: vector '<unnamed>': ")
    assert err.point_ids == [bad_id]


def _sync(tmp_path, noise):
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=_policy(kit, noise), principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    return kit, owner, owner.with_principal(kit.principal("bob", "support"))


# ------------------------------------------------------------------ writes (sync)

@pytest.mark.parametrize("noise, rec_mech", MISMATCHES)
@pytest.mark.parametrize("call", WRITES)
def test_a_receipt_of_another_mechanism_is_refused_on_every_write_path(tmp_path, call, noise, rec_mech):
    kit, owner, bob = _sync(tmp_path, noise)
    rng = np.random.default_rng(1)
    good, bad = _point(kit, 1, rng, noise["mechanism"]), _point(kit, 2, rng, rec_mech)
    with pytest.raises(GuardRefusal) as ei:
        _writes(bob, [good, bad])[call]()
    _assert_mechanism_refusal(ei.value, noise["mechanism"], rec_mech, 2)
    assert count(owner, "pii") == 0  # the good point of the refused call is not written either
    # The same call with the collection's own mechanism is accepted.
    _writes(bob, [good, _point(kit, 2, rng, noise["mechanism"])])[call]()
    assert count(owner, "pii") == 2


def test_the_directive_keeps_the_generic_advice_for_other_faulty_points(tmp_path):
    kit, owner, bob = _sync(tmp_path, GAUSS)
    rng = np.random.default_rng(2)
    unreceipted = models.PointStruct(id=3, vector=unit(rng), payload={"t": "x"})
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [_point(kit, 2, rng, "laplace_l2"), unreceipted])
    assert ei.value.verdict == "NOISE_REQUIRED" and set(ei.value.point_ids) == {2, 3}
    assert "holds 'gaussian' releases only" in ei.value.directive
    assert "; other points: sensitive vectors need a valid reconstruction-resistance receipt" in ei.value.directive


# ------------------------------------------------------------------ reads (sync)

def test_a_stored_vector_of_another_mechanism_is_stripped_on_read(tmp_path):
    kit, owner, bob = _sync(tmp_path, GAUSS)
    rng = np.random.default_rng(3)
    RawClient.upsert(owner, "pii", [_point(kit, 1, rng, "gaussian"), _point(kit, 2, rng, "laplace_l2")])  # around the guard
    got = {p.id: p.vector for p in bob.retrieve("pii", [1, 2], with_vectors=True)}
    assert got[1] is not None and got[2] is None
    hits = {p.id: p.vector for p in bob.query_points("pii", query=unit(rng), limit=5, with_vectors=True).points}
    assert hits[1] is not None and hits[2] is None
    got = {p.id: p.vector for p in bob.scroll("pii", with_vectors=True)[0]}
    assert got[1] is not None and got[2] is None


def test_a_changed_mechanism_strips_what_the_guard_noised_under_the_old_one_and_verify_names_it(tmp_path, capsys):
    # The guard's own noise under a laplace_l2 policy; the policy then says gaussian. As a
    # tightened policy strips the releases it no longer accepts, so does a changed mechanism:
    # reads and the offline check agree with what a write would now refuse.
    kit = make_kit(tmp_path)
    store = str(tmp_path / "store")
    before = _policy(kit, LAPLACE, noise_on_write=True)
    owner = QdrantClient(path=store, guard=before, principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    rng = np.random.default_rng(4)
    owner.with_principal(kit.principal("bob", "support")).upsert(
        "pii", [models.PointStruct(id=i, vector=unit(rng), payload={"t": "x"}) for i in range(3)])
    owner.close()

    after = _policy(kit, GAUSS, noise_on_write=True)
    owner = QdrantClient(path=store, guard=after, principal=kit.principal("alice", "hr"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert [p.vector for p in bob.retrieve("pii", [0, 1, 2], with_vectors=True)] == [None, None, None]
    owner.close()

    policy = tmp_path / "policy.toml"
    policy.write_text(textwrap.dedent(f"""\
        signing_key = "{kit.guard_key_path}"

        [boundaries.hr]
        authority_keys = ["{kit.authority_pub['hr']}"]

        [collections.pii]
        class = "PII"
        owner = "hr"
        noise = {{ mechanism = "gaussian", epsilon = 1.0, delta = 1e-6, radius = 0.01 }}
        """))
    base = ["receipt", "verify", "--path", store, "--collection", "pii", "--policy", str(policy)]
    assert cli_main(base) == 0  # the signatures hold: without --check-noise the noise is not judged
    capsys.readouterr()
    assert cli_main(base + ["--check-noise"]) == 1
    lines = capsys.readouterr().out.splitlines()
    bad = [json.loads(line) for line in lines[:-1]]
    assert [b["reason"] for b in bad] == ["mechanism_mismatch"] * 3
    assert "'laplace_l2'" in bad[0]["detail"] and "collection 'pii' holds 'gaussian'" in bad[0]["detail"]
    assert lines[-1].startswith("0/3 receipted vectors verify")


# ------------------------------------------------------------------ receipts.verify

def test_verify_with_a_noise_policy_reports_mechanism_mismatch(tmp_path):
    kit = make_kit(tmp_path)
    raw = RawClient(":memory:")
    raw.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.EUCLID))
    rng = np.random.default_rng(5)
    raw.upsert("pii", [_point(kit, 1, rng, "gaussian"), _point(kit, 2, rng, "laplace_l2")])
    pk = keys.load_private_key(kit.guard_key_path).public_key()
    trusted = {keys.key_id(pk): pk}
    assert [r.reason for r in verify(raw, "pii", trusted_keys=trusted, check_noise=True)] == ["ok", "ok"]
    got = {r.point_id: r for r in verify(raw, "pii", trusted_keys=trusted,
                                         noise_policy=NoisePolicy(mechanism="gaussian", delta=1e-6))}
    assert got[1].ok and got[2].reason == "mechanism_mismatch" and got[2].check.params.mechanism == "laplace_l2"
    assert "collection 'pii' holds 'gaussian' releases only" in got[2].check.detail
    got = {r.point_id: r for r in verify(raw, "pii", trusted_keys=trusted,
                                         noise_policy=NoisePolicy(mechanism="laplace_l2", delta=0.0))}
    assert got[1].reason == "mechanism_mismatch" and got[2].ok
    assert "mechanism_mismatch" in REASONS


def test_a_noise_policy_without_a_mechanism_is_a_clear_error(tmp_path):
    class Numbers:  # what verify() accepted before: the four numbers only
        epsilon, delta, radius, clip_norm = 1.0, 1e-6, 0.01, 1.0

    raw = RawClient(":memory:")
    raw.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.EUCLID))
    with pytest.raises(TypeError, match="NoisePolicy.*has no mechanism"):
        verify(raw, "pii", trusted_keys={}, noise_policy=Numbers())


# ------------------------------------------------------------------ async

def test_the_async_client_refuses_and_strips_alike(tmp_path):
    kit = make_kit(tmp_path)

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=_policy(kit, GAUSS), principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(
            size=DIM, distance=models.Distance.EUCLID))
        bob = owner.with_principal(kit.principal("bob", "support"))
        rng = np.random.default_rng(6)
        good, bad = _point(kit, 1, rng, "gaussian"), _point(kit, 2, rng, "laplace_l2")
        errors = {}
        for call, run in _writes(bob, [good, bad]).items():
            with pytest.raises(GuardRefusal) as ei:
                await run()
            errors[call] = ei.value
        stored = (await owner.count("pii")).count
        await qdrant_client.AsyncQdrantClient.upsert(owner, "pii", [good, bad])  # around the guard
        got = {p.id: p.vector for p in await bob.retrieve("pii", [1, 2], with_vectors=True)}
        return errors, stored, got

    errors, stored, got = asyncio.run(main())
    assert sorted(errors) == sorted(WRITES)
    for err in errors.values():
        _assert_mechanism_refusal(err, "gaussian", "laplace_l2", 2)
    assert stored == 0
    assert got[1] is not None and got[2] is None
