"""Claims audit (2026-12-05): documented security claims the code broke (each test fails on the
code before its fix) or that nothing pinned before (each would fail if the claim broke).

Each test names the doc and the claim it holds to; real qdrant-client local mode, real
cryptography and real resource limits, no mocks.
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
def test_a_write_qdrant_fails_is_audited_by_method_and_error_type_not_message(tmp_path, call, monkeypatch):
    import json

    from qdrant_guard import writeprep

    monkeypatch.setattr(writeprep, "LAYOUT_FRESH_S", 3600.0)  # the upsert uses the layout it cached

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


# docs/receipt-format.md, "Verifying in another language", steps 1-8, written from the doc alone
# (hashlib, json and cryptography; nothing from qdrant_guard's verifier; step 6 from "The
# guarantee sentence"): the guard's batch receipts on a real store verify by them, as do a single
# receipt and one in the oldest wording, and the steps reject an altered field, a moved vector, a
# promoted-node path entry and a re-signed sentence that contradicts the fields. A drift between
# the doc's prefixes, Merkle rule, sentence templates or commitment layout and the code fails here.
def _doc_canonical(obj):
    import json

    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _doc_sentence(p, wording):
    """params.guarantee in ``wording`` (1-4), from the doc's templates."""
    def exact(x):
        short = "%g" % x
        return short if float(short) == x else repr(x)

    num = exact if wording >= 3 else (lambda x: "%g" % x)
    e, d, r, lat = num(p["epsilon"]), num(p["delta"]), num(p["radius"]), num(p["lattice_step"])
    if p["clip_norm"] is None:
        inputs = f"any two inputs (as given, not clipped) within L2 distance radius={r}"
    else:
        inputs = (f"any two inputs within L2 distance radius={r} (rows are first clipped to L2 norm "
                  f"{num(p['clip_norm'])}, which never increases distances")
        inputs += ", so with radius >= 2*clip_norm this covers every pair)" if p["radius"] >= 2 * p["clip_norm"] else ")"
    sens = "%.9g" % (p["radius"] + math.sqrt(p["dim"]) * p["lattice_step"])
    lattice = (f"calibrated for L2 sensitivity {sens} = radius + sqrt({p['dim']})*{lat} to cover snapping the "
               f"output to multiples of {lat}")
    notes = " Inputs are float64: coordinates below 2^-511 in magnitude are read as 0 first." \
        if p["dtype"] == "float64" and wording >= 2 else ""
    if wording == 4:
        notes += (" Stated for the ideal noise distribution: the sampler's noise is bounded, which adds about "
                  f"{'%.2g' % (p['dim'] * 2.3e-34)} or less to delta (docs/privacy.md).")
    s = "%.9g" % p["scale"]
    if p["mechanism"] == "gaussian":
        return (f"gaussian: (epsilon={e}, delta={d})-differential privacy per released vector between {inputs}; "
                f"analytic Gaussian mechanism with sigma={s} per coordinate, {lattice}.{notes}")
    return (f"laplace_l2: epsilon={e} at L2 distance radius={r} (metric DP, delta=0: log-likelihood ratio <= "
            f"epsilon*distance/radius) per released vector between {inputs}; multivariate L2 Laplace with "
            f"Gamma({p['dim']}) norm scale={s}, {lattice}.{notes}")


def _doc_verify(receipt, *, vector, collection, point_id, vector_name, trusted):
    import base64
    import hashlib
    import struct

    from cryptography.exceptions import InvalidSignature

    def sha(data):
        return hashlib.sha256(data).digest()

    if receipt["format"] != "qg-receipt/1" or receipt["alg"] != "Ed25519":  # step 2
        return "format"
    pk = trusted.get(receipt["kid"])  # step 3
    if pk is None:
        return "unknown_key"
    body = {k: v for k, v in receipt.items() if k not in ("sig", "batch")}  # step 4
    sig = base64.b64decode(receipt["sig"], validate=True)
    try:  # step 5
        if "batch" not in receipt:
            pk.verify(sig, b"qdrant-guard receipt v1\0" + _doc_canonical(body))
        else:
            b = receipt["batch"]
            h, i, w, k, path = sha(b"\x00" + _doc_canonical(body)), b["index"], b["size"], 0, b["path"]
            while w > 1:
                if i % 2 == 1:
                    h, k = sha(b"\x01" + bytes.fromhex(path[k]) + h), k + 1
                elif i + 1 < w:
                    h, k = sha(b"\x01" + h + bytes.fromhex(path[k])), k + 1
                i, w = i // 2, (w + 1) // 2
            if k != len(path):
                return "path"
            pk.verify(sig, b"qdrant-guard receipt batch v1\0" + h + struct.pack(">Q", b["size"]))
    except (InvalidSignature, IndexError):
        return "signature"
    p = receipt["params"]  # step 6
    # The doc's table: wording 1 for versions 1-3, wordings 2 and 3 for version 3, wording 4 for any.
    versions = {1: ("1", "2", "3"), 2: ("3",), 3: ("3",)}
    words = [w for w in (1, 2, 3, 4) if p["mechanism_version"] in versions.get(w, (p["mechanism_version"],))]
    if p["guarantee"] not in [_doc_sentence(p, w) for w in words] or (
            p["mechanism"] == "laplace_l2" and p["delta"] != 0):
        return "guarantee"
    want_pid = f"int:{point_id}" if isinstance(point_id, int) else f"uuid:{point_id}"
    if (receipt["collection"], receipt["point_id"], receipt["vector_name"]) != (collection, want_pid, vector_name):
        return "place"  # step 7
    ints = np.rint(np.asarray(vector, dtype=np.float64) * 2.0 ** 20).astype("<i4")  # step 8
    digest = sha(b"qg-vec-v1" + base64.b64decode(receipt["salt"]) + struct.pack("<I", ints.size) + ints.tobytes())
    return "ok" if digest.hex() == receipt["commitment"] else "commitment"


def _plain_owner(tmp_path):
    """A kit and hr's owner client on a PII collection "c" with intent and diversity off."""
    from tests.guardkit import QdrantClient, create, make_kit

    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "diversity": {"enabled": False}}
    client = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(client, "c")
    return kit, client


def test_receipts_verify_by_the_docs_steps_for_other_languages(tmp_path):
    import copy
    import dataclasses
    import hashlib

    from qdrant_guard import keys, noise
    from qdrant_guard.receipts import ReceiptSigner, issue_receipt, stored_receipts, verify_receipt
    from tests.guardkit import models, snapshot, unit

    kit, client = _plain_owner(tmp_path)
    rng = np.random.default_rng(5)
    client.upsert("c", [models.PointStruct(id=i, vector=unit(rng), payload={"text": "t"}) for i in range(5)])
    sk = keys.load_private_key(kit.guard_key_path)
    raw_pk = keys.public_key_bytes(sk.public_key())
    kid = "ed25519:" + hashlib.sha256(raw_pk).digest()[:16].hex()
    trusted = {kid: sk.public_key()}
    rows = snapshot(client, "c")
    for pid, payload, vector in rows:
        rec = stored_receipts(payload)[""]
        assert rec["batch"]["size"] == 5  # one signature over the batch; index 4 is promoted
        assert _doc_verify(rec, vector=vector, collection="c", point_id=pid, vector_name="", trusted=trusted) == "ok"
    pid, payload, vector = rows[4]
    rec = stored_receipts(payload)[""]
    assert len(rec["batch"]["path"]) == 1  # levels where it was promoted add no path entry
    for field, value in (("collection", "d"), ("issued_at", rec["issued_at"] + 1)):
        altered = copy.deepcopy(rec)
        altered[field] = value
        assert _doc_verify(altered, vector=vector, collection=altered["collection"], point_id=pid, vector_name="",
                           trusted=trusted) == "signature"
    padded = copy.deepcopy(rec)
    padded["batch"]["path"].append(padded["batch"]["path"][0])
    assert _doc_verify(padded, vector=vector, collection="c", point_id=pid, vector_name="", trusted=trusted) == "path"
    moved = list(vector)
    moved[0] += 2.0 ** -20
    assert _doc_verify(rec, vector=moved, collection="c", point_id=pid, vector_name="", trusted=trusted) == "commitment"
    # A single receipt (no batch): the other domain-separated prefix.
    out, params = noise.privatize(np.asarray(vector, np.float32), mechanism="gaussian", epsilon=1.0, delta=1e-6,
                                  radius=0.01, clip_norm=1.0)
    final = stored_form(out, distance="Cosine")
    single = issue_receipt(ReceiptSigner(sk), params=params, vector=final, collection="c", point_id=9)
    assert "batch" not in single
    assert _doc_verify(single, vector=final.tolist(), collection="c", point_id=9, vector_name="", trusted=trusted) == "ok"
    # Step 6: the guard's sentence is the doc's wording 4; one in wording 1 (mechanism version 1,
    # epsilon printed by %g) verifies; a re-signed sentence that says another epsilon does not.
    assert single["params"]["guarantee"] == _doc_sentence(single["params"], 4)
    for mechanism, eps, dlt, wording, want in (("gaussian", 0.1234567, 1e-6, 1, "ok"),
                                               ("laplace_l2", 2.0, None, 2, "ok")):
        _, prm = noise.privatize(np.asarray(vector, np.float64), mechanism=mechanism, epsilon=eps, delta=dlt,
                                 radius=0.01, clip_norm=None)
        old = dataclasses.replace(prm, mechanism_version="1" if wording == 1 else "3",
                                  guarantee=_doc_sentence(dataclasses.asdict(prm), wording))
        assert old.guarantee != prm.guarantee
        rec = issue_receipt(ReceiptSigner(sk), params=old, vector=final, collection="c", point_id=9)
        assert _doc_verify(rec, vector=final.tolist(), collection="c", point_id=9, vector_name="", trusted=trusted) == want
        assert verify_receipt(rec, vector=final.tolist(), collection="c", point_id=9, trusted_keys=trusted).ok
    lying = dataclasses.replace(params, guarantee=params.guarantee.replace("(epsilon=1,", "(epsilon=0.1,"))
    assert lying.guarantee != params.guarantee
    from qdrant_guard import receipts as receipts_module

    with pytest.MonkeyPatch.context() as mp:  # sign as a writer outside this library would
        mp.setattr(receipts_module, "_refuse_lying_sentence", lambda params: None)
        rec = issue_receipt(ReceiptSigner(sk), params=lying, vector=final, collection="c", point_id=9)
    assert _doc_verify(rec, vector=final.tolist(), collection="c", point_id=9, vector_name="", trusted=trusted) == "guarantee"
    assert verify_receipt(rec, vector=final.tolist(), collection="c", point_id=9, trusted_keys=trusted).reason == \
        "guarantee_mismatch"


# docs/audit-log.md, "Writing": "If the write fails, append raises AuditError and nothing is
# logged; callers fail closed." Under a real file-size limit (RLIMIT_FSIZE in a child, no mocks) a
# write that fits only partly leaves a torn line in the file; what keeps the log sound is that
# the append raises, the writer then refuses every later append, and verify and repair see the
# torn tail. (The doc now says so instead of "nothing is logged".)
_SHORT_WRITE = r"""
import resource, signal, sys
from qdrant_guard.audit import AuditLog
from qdrant_guard.errors import AuditError, AuditIntegrityError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
log = AuditLog(sys.argv[1])
log.append({"event": "before"})
size = len(open(sys.argv[1], "rb").read())
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 40, hard))
try:
    log.append({"event": "x" * 200})
except AuditError as exc:
    print("first:", type(exc).__name__)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
try:
    log.append({"event": "after"})
except AuditIntegrityError as exc:
    print("second:", type(exc).__name__, "torn" in str(exc))
else:
    print("second: appended")
"""


def test_a_short_audit_write_fails_closed_and_leaves_a_torn_tail_that_repair_cuts(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from qdrant_guard.audit import AuditLog, repair_audit_file, verify_audit_file
    from qdrant_guard.errors import AuditIntegrityError

    p = tmp_path / "audit.jsonl"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-c", _SHORT_WRITE, str(p)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["first: AuditError", "second: AuditIntegrityError True"], out.stdout
    data = p.read_bytes()
    assert not data.endswith(b"\n") and data.count(b"\n") == 1  # one entry, then the torn part
    assert verify_audit_file(p).problem == "torn_tail"
    with pytest.raises(AuditIntegrityError):
        AuditLog(p)
    rep = repair_audit_file(p)
    assert rep.ok and verify_audit_file(p).ok
    AuditLog(p).append({"event": "resumed"})
    assert verify_audit_file(p).last_seq == 3  # "before", the repair entry, "resumed"


# docs/privacy.md, "Guarantee": "Keyed mode (default) makes re-releases of the same vector
# identical, so an attacker gains nothing by averaging repeated writes of the same content".
# Pinned before only for two points of one call; a re-release in a later call, at another place
# in a batch of other vectors, must be the same vector too, or the writes could be averaged.
def test_a_keyed_re_release_is_identical_whatever_batch_it_comes_in(tmp_path):
    from tests.guardkit import models, snapshot, unit

    kit, client = _plain_owner(tmp_path)
    rng = np.random.default_rng(21)
    v = unit(rng)
    client.upsert("c", [models.PointStruct(id=0, vector=v, payload={"text": "t"})])
    others = [models.PointStruct(id=i, vector=unit(rng), payload={"text": "t"}) for i in range(1, 6)]
    client.upsert("c", others[:3] + [models.PointStruct(id=9, vector=v, payload={"text": "t"})] + others[3:])
    stored = {pid: vector for pid, _, vector in snapshot(client, "c")}
    assert stored[9] == stored[0]
    assert all(stored[i] != stored[0] for i in range(1, 6))


# docs/audit-log.md, "Before each append the writer checks that its path still names the file it
# holds open ... that the entry it last wrote or read is still on the bytes where it was". After
# an append whose write failed, the writer forgot where its last entry was and skipped both checks
# on the next append: a same-size rewrite of that entry (hash recomputed, so the file verifies)
# was taken as the tail and chained onto. The write fails for real here: RLIMIT_FSIZE at the
# file's size in a child, so EFBIG with nothing written.
_FAILED_WRITE_THEN_REWRITE = r"""
import json, resource, signal, sys
from qdrant_guard.audit import AuditLog, entry_hash
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import AuditError, AuditIntegrityError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
path = sys.argv[1]
log = AuditLog(path)
for i in range(3):
    log.append({"event": "real", "i": i})
data = open(path, "rb").read()
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (len(data), hard))
try:
    log.append({"event": "refused"})
except AuditError as exc:
    print("write failed:", type(exc).__name__)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
lines = data.splitlines(keepends=True)
e = json.loads(lines[-1])
e["record"]["i"] = 7  # same length
e["hash"] = entry_hash(e)
lines[-1] = canonical_json(e) + b"\n"
open(path, "r+b").write(b"".join(lines))  # same inode, same size
try:
    log.append({"event": "after"})
except AuditIntegrityError as exc:
    print("after:", "refused", "seq 3" in str(exc))
else:
    print("after: appended")
"""


def test_a_failed_audit_write_does_not_switch_off_the_writers_tail_check(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    p = tmp_path / "audit.jsonl"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-c", _FAILED_WRITE_THEN_REWRITE, str(p)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["write failed: AuditError", "after: refused True"], out.stdout
    assert p.read_bytes().count(b"\n") == 3  # nothing chained onto the rewritten entry
