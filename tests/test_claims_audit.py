"""Claims audit (2026-12-05): tests for documented security claims that nothing pinned before.

Each test names the doc and the claim it holds to; real qdrant-client local mode and real
cryptography, no mocks.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from qdrant_guard.errors import InvalidVectorError
from qdrant_guard.receipts import commitment_bytes, stored_form, stored_form_batch


# docs/receipt-format.md, "Stored form and commitment": "Coordinates must satisfy |v| < 2048 (int32
# on the grid); a larger one is an InvalidVectorError naming its magnitude", and the writer is
# told to "Sign stored_form(v, distance=...)". Just below 2048 the value is on the 2^-20 grid but
# float32 cannot hold it (its spacing there is 2^-13) and rounds it up to 2048: stored_form
# returned a vector that commitment_bytes, and so every receipt, refuses.
@pytest.mark.parametrize("value", [2048 - 2.0 ** -20, 2048 - 2.0 ** -14, -(2048 - 2.0 ** -20)])
def test_stored_form_refuses_a_coordinate_that_float32_rounds_to_2048(value):
    with pytest.raises(InvalidVectorError, match="float32 rounds to 2048"):
        stored_form(np.array([value, 0.5]), distance="Euclid")
    with pytest.raises(InvalidVectorError, match="row 1"):
        stored_form_batch(np.array([[0.5, 0.5], [0.5, value]]), distance="Dot")


def test_stored_form_keeps_the_largest_coordinate_float32_holds_below_2048():
    # 2048 - 2^-13 is float32's last value below 2048, a multiple of 2^-20: stored and committed.
    top = 2048 - 2.0 ** -13
    out = stored_form(np.array([top, -top]), distance="Euclid")
    assert out.tolist() == [top, -top]
    assert len(commitment_bytes(out)) == 8
    # Values that float32 rounds down to it are kept too (they never reach 2048).
    assert stored_form(np.array([2048 - 2.0 ** -14 - 2.0 ** -20]), distance="Dot").tolist() == [top]
    assert math.isfinite(float(out[0]))


# docs/privacy.md, "The mechanisms" 2-3 and "Every receipt ... states the mechanism, epsilon, delta,
# radius, clip norm, sigma/scale, lattice step ... (no rounded epsilon or radius)"; noise_params.py:
# the scale is calibrated at sensitivity radius + sqrt(dim)*lattice_step, the step being
# 2^floor(log2(scale0/1024)) for the scale0 the nominal radius needs. Through a real guarded write,
# with parameters that are not round numbers, on a Euclid collection (no normalisation after the
# noise, so the stored vector is still on the lattice).
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace_l2"])
def test_a_guarded_release_records_the_policy_exactly_and_its_lattice_margin(tmp_path, mechanism):
    from qdrant_guard import keys, noise
    from qdrant_guard.receipts import stored_receipts, verify_receipt
    from tests.guardkit import DIM, QdrantClient, create, make_kit, models, snapshot

    kit = make_kit(tmp_path)
    eps, radius, delta = 0.7, 0.013, 3e-7
    section = {"mechanism": mechanism, "epsilon": eps, "radius": radius, "clip_norm": 0.9}
    section["delta"] = delta if mechanism == "gaussian" else 0.0
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "noise": section}
    client = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(client, "c", distance=models.Distance.EUCLID)
    clean = np.random.default_rng(3).normal(size=DIM)
    client.upsert("c", [models.PointStruct(id=1, vector=clean.tolist(), payload={"text": "x"})])
    [(pid, payload, stored)] = snapshot(client, "c")
    rec = stored_receipts(payload)[""]
    guard_pk = keys.load_private_key(kit.guard_key_path).public_key()
    check = verify_receipt(rec, vector=stored, collection="c", point_id=1,
                           trusted_keys={keys.key_id(guard_pk): guard_pk})
    assert check.ok, check.detail
    p = check.params
    # The policy's own floats, bit for bit, not a rounding of them.
    assert (p.mechanism, p.epsilon, p.radius, p.clip_norm, p.dim) == (mechanism, eps, radius, 0.9, DIM)
    assert f"epsilon={eps!r}" in p.guarantee and f"radius={radius!r}" in p.guarantee
    if mechanism == "gaussian":
        assert p.delta == delta and f"delta={delta!r}" in p.guarantee
        step = noise.lattice_step(noise.calibrate_gaussian_sigma(eps, delta, radius))
        assert p.scale == noise.calibrate_gaussian_sigma(eps, delta, radius + math.sqrt(DIM) * step)
    else:
        assert p.delta == 0.0 and "delta=0" in p.guarantee
        step = noise.lattice_step(radius / eps)
        assert p.scale == (radius + math.sqrt(DIM) * step) / eps
    assert p.lattice_step == step and step == 2.0 ** math.floor(math.log2(
        (noise.calibrate_gaussian_sigma(eps, delta, radius) if mechanism == "gaussian" else radius / eps) / 1024))
    # The margin is really there: the scale is above what the nominal radius alone would need.
    assert p.scale > (noise.calibrate_gaussian_sigma(eps, delta, radius) if mechanism == "gaussian" else radius / eps)
    assert noise.check_release(p) is None
    assert p.rng_id == noise.RNG_KEYED  # keyed = true is the default
    # Snapped to that lattice: every stored coordinate is a multiple of the recorded step.
    q = np.asarray(stored, dtype=np.float64) / p.lattice_step
    assert np.array_equal(q, np.rint(q))
    assert not np.array_equal(np.asarray(stored, np.float64), noise.clip_l2(clean.astype(np.float32), 0.9))


# README, verdict QDRANT_ERROR: "the entry names the method and the error type, not the message,
# which can quote the filter"; docs/audit-log.md likewise for reads. A decided write that Qdrant
# fails logged the exception's message in its directive (a server's response body can quote the
# filter or payload values of the call), unlike a failed read or look-up. Made to fail for real:
# the collection is deleted around the guard after it cached the collection's layout.
@pytest.mark.parametrize("call", ["upsert", "delete_by_filter"])
def test_a_write_qdrant_fails_is_audited_by_method_and_error_type_not_message(tmp_path, call):
    import json

    from qdrant_client import QdrantClient as RawClient

    from qdrant_guard.audit import verify_audit_file
    from tests.guardkit import QdrantClient, create, make_kit, models, unit

    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}}
    client = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(client, "c")
    client.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)), payload={"text": "x"})])
    RawClient.delete_collection(client, "c")
    with pytest.raises(Exception) as info:
        if call == "upsert":
            client.upsert("c", [models.PointStruct(id=2, vector=unit(np.random.default_rng(1)), payload={"n": 2})])
        else:
            client.delete("c", models.FilterSelector(filter=models.Filter(
                must=[models.FieldCondition(key="team", match=models.MatchValue(value="zeta"))])))
    message = str(info.value)
    assert message  # the caller still gets the message
    record = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])["record"]
    assert record["verdict"] == "QDRANT_ERROR"
    assert message not in json.dumps(record)
    assert record["details"]["error"] == type(info.value).__name__
    assert record["details"]["method"] == ("upsert" if call == "upsert" else "delete")
    assert verify_audit_file(tmp_path / "audit.jsonl").ok


# docs/privacy.md, "Known limit of keyed mode": the remedies against write-then-compare are
# "different noise parameters or separate guards with separate signing keys (the noise key is
# derived from the signing key), or set keyed = false". Each must really give independent noise;
# the same key and parameters (the limit itself) give the identical release, so the test can fail.
def test_the_documented_remedies_for_the_keyed_guess_oracle_give_independent_noise(tmp_path):
    from qdrant_guard import noise
    from qdrant_guard.receipts import stored_receipts
    from tests.guardkit import QdrantClient, create, make_kit, models, snapshot

    off = {"diversity": {"enabled": False}, "intent": {"enabled": False}}

    def pol(**noise_section):
        return {"class": "PII", "owner": "hr", **off, "noise": {"epsilon": 1.0, "radius": 0.01, **noise_section}}

    secret = np.random.default_rng(11).normal(size=16)
    secret = (secret / np.linalg.norm(secret)).astype(np.float32).tolist()

    def release(kit, policy, pid=1, name="c"):
        client = QdrantClient(":memory:", guard=kit.config({name: policy}), principal=kit.principal("alice", "hr"))
        create(client, name, distance=models.Distance.DOT)
        client.upsert(name, [models.PointStruct(id=pid, vector=secret, payload={"text": "t"})])
        return client, snapshot(client, name)

    kit = make_kit(tmp_path)
    (tmp_path / "other").mkdir()
    other_key = make_kit(tmp_path / "other")
    _, [(_, _, same)] = release(kit, pol())
    _, [(_, _, again)] = release(kit, pol(), pid=2, name="d")  # another guard, same key and parameters
    assert again == same  # the oracle the doc warns about
    _, [(_, _, other_params)] = release(kit, pol(epsilon=0.9))
    _, [(_, _, other_guard)] = release(other_key, pol())
    assert other_params != same and other_guard != same
    client, _ = release(kit, pol(keyed=False))
    client.upsert("c", [models.PointStruct(id=2, vector=secret, payload={"text": "t"})])
    rows = {pid: (vector, payload) for pid, payload, vector in snapshot(client, "c")}
    assert rows[1][0] != rows[2][0] and same not in (rows[1][0], rows[2][0])
    assert stored_receipts(rows[1][1])[""]["params"]["rng_id"] == noise.RNG_PRODUCTION


# docs/threat-model.md, "Credential expiry leeway": "A credential up to 30 s past its expiry is
# accepted when a client is built (clock skew); every call with it after its expiry is refused
# (INVALID_CREDENTIAL)". Tested before only for a credential that expired after the build.
def test_a_credential_inside_the_build_leeway_but_expired_is_refused_on_every_call(tmp_path):
    import time

    from qdrant_guard.errors import GuardRefusal
    from tests.guardkit import QdrantClient, count, create, make_kit, models, unit

    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}}
    cfg = kit.config({"c": pol})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "c")
    late = kit.principal("alice", "hr", ttl_s=60, now=time.time() - 70)  # expired 10 s ago
    view = owner.with_principal(late)  # accepted: within the 30 s leeway
    with pytest.raises(GuardRefusal) as read:
        view.query_points("c", query=[0.1] * 16)
    with pytest.raises(GuardRefusal) as write:
        view.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)), payload={"text": "t"})])
    assert read.value.verdict == write.value.verdict == "INVALID_CREDENTIAL"
    assert count(owner, "c") == 0
