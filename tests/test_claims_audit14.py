"""Claims audit 14: a fresh pass over docs/threat-model.md, privacy.md, receipt-format.md,
integrations.md, server.md and the README's receipt, trust-boundary, DP and CLI statements.

Each test runs what a sentence states (real qdrant-client local mode, real keys and files, the
CLI in process) and fails when the sentence stops being true. Wrong, and corrected:

1. threat-model.md gave ``{"db_pass": "hunter2"}`` as a value the payload screen lets pass and
   listed the password names without ``pw``, ``db_pass`` and the rest; ``pass`` after an account
   word is a password name (policy.md, integrations.md), so that value is refused.
2. receipt-format.md: ``verify()`` "reads every point ... with a raw client"; it reads through the
   client it is given, and through a guarded one a stripped vector is ``vector_mismatch``.
3. The EPSILON_ABOVE_CEILING directive named "raise epsilon_ceiling" alone as a fix, which turns
   the refusal into NOISE_REQUIRED (code; the test fails on the old directive).
4. server.md's count cost (1.1 s / 0.12 s for 10,000 points) predates the per-set calibration
   bounds; rerun with bench/left_behind_count.py (figures, not a test).
5. ``_noise.set_threads``' docstring read ``QG_NOISE_THREADS`` "at the first batch"; noise.c reads
   it at import, as the README says (tests/test_mutation_noise_c.py pins it).
"""
from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import json
import math
import os
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from detect_cases import luhn
from guardkit import DIM, RawClient, audit_records, create, make_kit, models, record_sent, run_cli, unit

from qdrant_guard import ConfigError, CredentialError, GuardRefusal, QdrantClient, keys
from qdrant_guard.boundary import CredentialRejected, issue_credential, verify_credential
from qdrant_guard.canonical import canonical_json
from qdrant_guard.hashing_embedder import HashingEmbedder
from qdrant_guard.noise import check_release, privatize, query_noise_key
from qdrant_guard.receipt_format import ISSUED_AT_LEEWAY_S
from qdrant_guard.receipts import (ReceiptItem, ReceiptSigner, issue_receipt, issue_receipts_batch, stored_form,
                                   verify_receipt)

ROOT = Path(__file__).resolve().parent.parent


def _refusal(call):
    """The verdict of the GuardRefusal ``call`` raises, or ``"allowed"``."""
    try:
        call()
    except GuardRefusal as exc:
        return exc.verdict
    return "allowed"


# ------------------------------------------------------------------ threat-model.md, payload screen


# "Under a password name (`password`, ..., `pw`, `pswd` or `pword` ..., `pass_word`, `pass` after an
# account or service word, `db_pass`, and `pin` after what it unlocks, `card_pin` ...) any value but
# a placeholder ... is a credential"; "What passes: values too short or too plain for those rules
# under names that are not password names (`{"token": "hunter2hunter2x"}`, `{"db_secret":
# "hunter2"}`)"; "`{"password": "changeme"}` and `{"password": "AKIAIOSFODNN7EXAMPLE"}` are
# refused"; the AWS documentation's keys elsewhere are stored as given; `{"PWD": "/home/alice"}`.
REFUSED = [{"db_pass": "hunter2"}, {"pw": "hunter2"}, {"pswd": "hunter2"}, {"pword": "hunter2"},
           {"pass_word": "hunter2"}, {"card_pin": "1234"}, {"password": "changeme"},
           {"password": "AKIAIOSFODNN7EXAMPLE"}, {"password": "hunter2hunter2x"},
           {"api_key": "a8f3k2j9x0q7w1e5r4t6"}, {"items": [{"name": "DB_PASSWORD", "value": "abc"}]}]
PASSES = [{"token": "hunter2hunter2x"}, {"db_secret": "hunter2"}, {"k": "AKIAIOSFODNN7EXAMPLE"},
          {"k": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}, {"password": "********"}, {"password": "${DB_PASSWORD}"},
          {"password": "[REDACTED]"}, {"PWD": "/home/alice"}, {"label": "db_password", "data": "hunter2hunter2x"},
          {"u": "3f2504e0-4f89-11d3-9a0c-0305e82c3301"}, {"boarding_pass": "hunter2"}, {"pin_code": "560001"}]


def test_the_password_names_and_what_passes_the_payload_screen(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "raw_in_boundary": True, "intent": {"enabled": False}},
                      "pub": {"class": "PUBLIC"}})
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(c, "pii")
    create(c, "pub")
    rng = np.random.default_rng(0)

    def write(collection, payload):
        return _refusal(lambda: c.upsert(collection, [models.PointStruct(id=1, vector=unit(rng), payload=payload)]))

    for payload in REFUSED:
        assert write("pii", payload) == "CREDENTIAL_IN_TEXT", payload
        assert write("pub", payload) == "SENSITIVITY_MISMATCH", payload
    for payload in PASSES:
        assert write("pii", payload) == "allowed", payload
        assert write("pub", payload) == "allowed", payload


# integrations.md "Metadata values": numbers as digits, barcodes, media ids, password keys.
def _gs1(digits: str) -> bool:
    body = [int(c) for c in digits[:-1]]
    return (10 - sum(d * (3 if i % 2 else 1) for i, d in enumerate(body)) % 10) % 10 == int(digits[-1])


def test_integrations_metadata_rules_on_a_public_collection(tmp_path):
    ean = next(n for n in range(4000000000000, 4000000010000) if luhn(str(n)) and _gs1(str(n)))
    jcb = next(n for n in range(3528000000000000000, 3528000000000010000) if luhn(str(n)))
    kit = make_kit(tmp_path)
    c = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}), principal=kit.principal("a", "hr"))
    create(c, "pub")
    rng = np.random.default_rng(1)
    cases = {
        "SENSITIVITY_MISMATCH": [{"order": 4000000000000002}, {"user_ssn": 123456789}, {"userSsn": 123456789},
                                 {"sku": ean}, {"ref": jcb}, {"card_id": jcb}, {"has_password": "yes"},
                                 {"name": "Forgot password", "value": "hunter2"}, {"SMTP_PASS": "hunter2"},
                                 {"admin_pass": "hunter2"}, {"auth": {"user": "u", "pass": "hunter2"}},
                                 {"sim_pin": "1234"}, {"password": {"value": "hunter2"}}],
        "allowed": [{"businessNumber": 123456789}, {"classNumber": 123456789}, {"ean": ean}, {"gtin": ean},
                   {"media_id": jcb}, {"photo_ids": [jcb]}, {"has_password": True}, {"api": {"pass": 120, "fail": 3}},
                   {"first_pass": "hunter2"}, {"pass": "hunter2"}, {"pin": "560001"}, {"password": {"min_length": 8}},
                   {"password": {"hash": "hunter2"}}, {"password_reset_required": "yes"}, {"passwordless": "yes"},
                   {"password_hash": "yes"}, {"page": 12}, {"ts": 1733600000000}, {"snowflake": 1234567890123456789}],
    }
    for want, payloads in cases.items():
        for p in payloads:
            assert _refusal(lambda: c.upsert("pub", [models.PointStruct(id=1, vector=unit(rng), payload=p)])) == want, p


# ------------------------------------------------------------------ receipt-format.md


@pytest.fixture(scope="module")
def signed():
    sk, pk = keys.generate_keypair()
    signer = ReceiptSigner(sk)
    rng = np.random.default_rng(3)
    noised, params = privatize(rng.normal(size=8), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01,
                               clip_norm=1.0)
    final = stored_form(noised, distance="Cosine")
    batch = issue_receipts_batch(signer, [ReceiptItem(params=params, vector=final, collection="c", point_id=7),
                                          ReceiptItem(params=params, vector=final, collection="c", point_id=8)])
    single = issue_receipt(signer, params=params, vector=final, collection="c", point_id=7)
    return {"pk": pk, "trusted": {keys.key_id(pk): pk}, "final": final, "batch": batch[0], "single": single,
            "params": params}


def _check(s, receipt, **kw):
    kw.setdefault("now", None)
    return verify_receipt(receipt, vector=s["final"], collection="c", point_id=7, trusted_keys=s["trusted"], **kw)


def test_key_id_and_the_text_form_of_a_public_key(signed):
    raw = keys.public_key_bytes(signed["pk"])
    assert keys.key_id(signed["pk"]) == "ed25519:" + hashlib.sha256(raw).hexdigest()[:32]
    assert keys.public_key_to_str(signed["pk"]) == "ed25519:" + base64.b64encode(raw).decode()


def test_a_private_key_of_another_algorithm_is_refused_naming_its_type(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    p = tmp_path / "ec.key"
    p.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    p.chmod(0o600)
    with pytest.raises(keys.KeyAlgorithmError, match="EC private key"):
        keys.load_private_key(p)
    sk, _ = keys.generate_keypair()
    q = tmp_path / "g.key"
    q.write_bytes(keys.private_key_to_pem(sk))
    q.chmod(0o644)
    with pytest.raises(keys.KeyStoreError, match="chmod 600"):
        keys.load_private_key(q)


def test_canonical_json_as_stated():
    assert canonical_json({"b": 1, "a": [1.0, 1e300, 5e-324, "é\n\x01"]}) == \
        '{"a":[1.0,1e+300,5e-324,"é\\n\\u0001"],"b":1}'.encode()
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError):
            canonical_json(bad)
    for bad in (b"x", {1: 2}, {1.5}):
        with pytest.raises(TypeError):
            canonical_json(bad)


def _text_with(receipt, old, new):
    text = canonical_json(receipt).decode()
    assert text.count(old) == 1
    return text.replace(old, new)


def test_every_non_canonical_form_and_every_field_type_error_has_its_reason(signed):
    r = signed["batch"]
    text = canonical_json(r).decode()
    assert _check(signed, text).ok and _check(signed, text.encode()).ok
    body = json.loads(text)
    pairs = [f"{json.dumps(k)}:{canonical_json(body[k]).decode()}" for k in sorted(body, reverse=True)]
    reordered = "{" + ",".join(pairs) + "}"
    non_canonical = [json.dumps(r), text + "\n", reordered, _text_with(r, '"epsilon":1.0', '"epsilon":1e0'),
                     _text_with(r, '"alg":"Ed25519"', '"alg":"Ed25519","alg":"Ed25519"'),
                     _text_with(r, '"collection":"c"', '"collection":"\\u0063"')]
    for t in non_canonical:
        assert _check(signed, t).reason == "non_canonical", t[:60]

    def changed(path, value):
        out = copy.deepcopy(r)
        *head, last = path
        node = out
        for k in head:
            node = node[k]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
        return out

    reasons = {("params", "epsilon"): (1, "non_canonical"), ("params", "dim"): (8.0, "malformed"),
               ("issued_at",): (float(r["issued_at"]), "malformed"), ("extra",): (1, "malformed"),
               ("alg",): ("RS256", "algorithm"), ("format",): ("qg-receipt/2", "unsupported_version"),
               ("params", "dtype"): ("float16", "malformed"), ("batch", "size"): (2 ** 64, "malformed"),
               ("sig",): ("abc", "bad_signature"), ("batch", "path"): ([1], "bad_merkle_proof")}
    for path, (value, reason) in reasons.items():
        assert _check(signed, changed(path, value)).reason == reason, path


def test_a_change_is_bad_merkle_proof_in_a_batch_and_bad_signature_in_a_single_receipt(signed):
    for receipt, reason in ((signed["batch"], "bad_merkle_proof"), (signed["single"], "bad_signature")):
        assert _check(signed, receipt).ok
        later = dict(receipt, issued_at=receipt["issued_at"] + 1)
        assert _check(signed, later).reason == reason
        sig = bytearray(base64.b64decode(receipt["sig"]))
        sig[0] ^= 1
        assert _check(signed, dict(receipt, sig=base64.b64encode(bytes(sig)).decode())).reason == reason
    stripped = {k: v for k, v in signed["batch"].items() if k != "batch"}
    assert _check(signed, stripped).reason == "bad_signature"
    given = dict(signed["single"], batch={"index": 0, "size": 1, "path": []})
    assert not _check(signed, given).ok
    assert _check(signed, dict(signed["batch"], batch=dict(signed["batch"]["batch"], size=3))).reason == \
        "bad_merkle_proof"


def test_a_receipt_dated_past_the_leeway_is_not_yet_valid_under_max_age(signed):
    r = signed["single"]
    issued = r["issued_at"] / 1000
    assert ISSUED_AT_LEEWAY_S == 300
    assert _check(signed, r, now=issued - 299, max_age_s=60).ok
    assert _check(signed, r, now=issued - 301, max_age_s=60).reason == "not_yet_valid"
    assert _check(signed, r, now=issued + 61, max_age_s=60).reason == "expired"
    assert _check(signed, r, now=issued + 10 ** 6).ok  # no max_age_s: no expiry


def test_point_ids_are_typed_and_a_uuid_in_any_spelling_is_normalised(signed):
    u = uuid.UUID("3F2504E0-4F89-11D3-9A0C-0305E82C3301")
    s = signed
    rec = issue_receipt(ReceiptSigner(keys.generate_keypair()[0]), params=s["params"], vector=s["final"],
                        collection="c", point_id="{3F2504E0-4F89-11D3-9A0C-0305E82C3301}")
    assert rec["point_id"] == f"uuid:{u}" and s["single"]["point_id"] == "int:7"


def test_the_guarantee_sentence_numbers(signed):
    _, p = privatize(np.ones(8), mechanism="gaussian", epsilon=0.1234567, delta=1e-6, radius=0.01, clip_norm=1.0)
    g = p.guarantee
    assert "epsilon=0.1234567," in g and "delta=1e-06)" in g and "radius=0.01 " in g
    assert f"sigma={p.scale:.9g} per coordinate" in g
    assert f"sensitivity {0.01 + math.sqrt(8) * p.lattice_step:.9g} = radius + sqrt(8)*" in g
    assert f"adds about {8 * 2.3e-34:.2g} or less to delta" in g
    assert "(rows are first clipped to L2 norm 1, which never increases distances)" in g
    _, w = privatize(np.ones(8), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=2.0, clip_norm=1.0)
    assert "so with radius >= 2*clip_norm this covers every pair)" in w.guarantee
    _, n = privatize(np.ones(8, dtype=np.float32), mechanism="laplace_l2", epsilon=1.0, radius=0.01)
    assert "any two inputs (as given, not clipped) within L2 distance radius=0.01" in n.guarantee
    assert "delta=0" in n.guarantee and n.delta == 0 and "Inputs are float64" not in n.guarantee


def test_check_release_as_receipt_format_and_privacy_state_it(signed):
    p = signed["params"]
    assert check_release(p) is None
    for version in ("1", "2", "3"):
        assert check_release(dataclasses.replace(p, mechanism_version=version)) is None
    assert "(1, 2, 3)" in check_release(dataclasses.replace(p, mechanism_version="4"))
    assert "TEST-ONLY" in check_release(dataclasses.replace(p, rng_id="chacha20-seeded-TEST-ONLY-v2"))
    for rng_id in ("aes256ctr-getrandom-v1", "chacha20-getrandom-v1", "chacha20-keyed-hmac-sha256-v1"):
        assert check_release(dataclasses.replace(p, rng_id=rng_id)) is None
    # "scale must be at least (to a relative 1e-12 ...) what the calibration gives"
    assert check_release(dataclasses.replace(p, scale=p.scale * (1 - 1e-13))) is None
    assert "below the calibrated" in check_release(dataclasses.replace(p, scale=p.scale * (1 - 1e-11)))
    assert "coarser" in check_release(dataclasses.replace(p, lattice_step=p.lattice_step * 2))
    assert "float16" in check_release(dataclasses.replace(p, dtype="float16"))


# README and receipt-format.md: `qdrant-guard receipt verify` lines, summary, exit statuses, keys.
POLICY = """
signing_key = "guard.key"
audit_log = "audit.jsonl"
unlisted = "refuse"
[boundaries.hr]
authority_keys = ["hr.pub"]
[boundaries.support]
authority_keys = ["support.pub"]
[collections.pii]
class = "PII"
owner = "hr"
readers = ["support"]
writers = ["support"]
raw_in_boundary = true
noise_on_write = true
[collections.pii.intent]
enabled = false
[collections.pub]
class = "PUBLIC"
"""


def test_receipt_verify_cli_summary_lines_and_exit_statuses(tmp_path):
    kit = make_kit(tmp_path)
    for b in ("hr", "support"):
        (tmp_path / f"{b}.pub").write_text(kit.authority_pub[b] + "\n")
    guard_pub = keys.public_key_to_str(keys.load_private_key(kit.guard_key_path).public_key()) + "\n"
    (tmp_path / "guard.key.pub").write_text(guard_pub)
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    store = str(tmp_path / "store")
    c = QdrantClient(path=store, guard=str(policy), principal=kit.principal("alice", "hr"))
    for name in ("pii", "pub"):
        create(c, name)
    rng = np.random.default_rng(0)
    c.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"source": "a"})])  # raw, in boundary
    c.with_principal(kit.principal("bob", "support")).upsert(
        "pii", [models.PointStruct(id=2, vector=unit(rng), payload={"source": "a"})])  # noised + receipted
    c.upsert("pub", [models.PointStruct(id=1, vector=unit(rng))])
    c.close()
    base = ("receipt", "verify", "--path", store)

    r = run_cli(*base, "--collection", "pii", "--policy", str(policy), "--verbose")
    assert r.returncode == 1
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert [(x["id"], x["reason"]) for x in lines] == [("1", "missing_receipt"), ("2", "ok")]
    assert "detail" in lines[0] and lines[1]["key_status"] == "current"
    assert (f"1/2 receipted vectors verify in 'pii' (class PII in {policy}: every dense vector needs a receipt; "
            "raw_in_boundary is on") in r.stdout
    r = run_cli(*base, "--collection", "pub", "--policy", str(policy))
    assert r.returncode == 0
    assert (f"0/0 receipted vectors verify in 'pub' (class PUBLIC in {policy}: its vectors need no receipt; "
            "1 vector(s) without one not checked, the receipts present verified)") in r.stdout
    r = run_cli(*base, "--collection", "pii", "--trusted-key", str(tmp_path / "guard.key.pub"))
    assert r.returncode == 1 and "no --policy, so every vector is taken to need a receipt" in r.stdout
    # a collection the file does not list under unlisted = "refuse": exit 2
    assert run_cli(*base, "--collection", "other", "--policy", str(policy)).returncode == 2
    # the .pub beside signing_key must match the private key when both can be read: exit 2
    (tmp_path / "guard.key.pub").write_text(keys.public_key_to_str(keys.generate_keypair()[1]) + "\n")
    r = run_cli(*base, "--collection", "pii", "--policy", str(policy))
    assert r.returncode == 2 and "not the public key of" in r.stderr


# ------------------------------------------------------------------ credentials (receipt-format.md, README)


def test_credential_issue_cli_defaults_and_refusals(tmp_path):
    key = tmp_path / "a.key"
    assert run_cli("keys", "new", "--out", str(key)).returncode == 0
    pub = (tmp_path / "a.key.pub").read_text()
    before = time.time()
    r = run_cli("credential", "issue", "--authority", str(key), "--agent", "agent-7", "--boundary", "support")
    assert r.returncode == 0 and r.stdout.startswith("qgc1.") and "credential id (jti)" in r.stderr
    claims = json.loads(base64.urlsafe_b64decode(r.stdout.split(".")[1] + "=="))
    assert set(claims) == {"v", "agent_id", "boundary", "iat", "exp", "kid", "alg", "jti"}
    assert claims["exp"] - claims["iat"] == 3600 and claims["iat"] >= int(before) - 1
    assert "=" not in r.stdout.strip()  # base64url without padding
    over = run_cli("credential", "issue", "--authority", str(key), "--agent", "a", "--boundary", "support",
                   "--ttl", str(10 * 365 * 86400 + 1))
    assert over.returncode == 2 and over.stdout == ""
    assert run_cli("credential", "issue", "--authority", str(key), "--agent", "a", "--boundary", "support",
                   "--ttl", str(10 * 365 * 86400)).returncode == 0
    bad = run_cli("credential", "issue", "--authority", str(key), "--agent", "a\nb", "--boundary", "support")
    assert bad.returncode == 2 and bad.stdout == "" and "U+000A" in bad.stderr
    (tmp_path / "a.key.pub").unlink()
    assert run_cli("keys", "pub", "--key", str(key)).returncode == 0
    assert (tmp_path / "a.key.pub").read_text() == pub


def test_a_credential_claiming_another_boundary_is_unknown_key_and_expiry_has_30_s_of_leeway(tmp_path):
    kit = make_kit(tmp_path)
    auths = {b: [keys.public_key_from_str(kit.authority_pub[b])] for b in ("hr", "support")}
    forged = issue_credential(kit.authority["support"], agent_id="x", boundary="hr")
    with pytest.raises(CredentialRejected) as ei:
        verify_credential(forged, authorities=auths)
    assert ei.value.reason == "unknown_key"
    # README: "the guard refuses a token with the file's trailing newline, hence .strip()"
    token = issue_credential(kit.authority["hr"], agent_id="x", boundary="hr")
    with pytest.raises(CredentialRejected) as nl:
        verify_credential(token + "\n", authorities=auths)
    assert nl.value.reason == "malformed" and "strip it" in str(nl.value)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "intent": {"enabled": False}}})
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(c, "pii")
    now = time.time()
    late = c.with_principal(kit.principal("late", "hr", ttl_s=60, now=now - 80))  # expired 20 s ago: built
    with pytest.raises(GuardRefusal) as ref:
        late.count("pii")
    assert ref.value.verdict == "INVALID_CREDENTIAL"
    with pytest.raises(CredentialError) as rej:
        c.with_principal(kit.principal("later", "hr", ttl_s=60, now=now - 100))  # 40 s ago: rejected
    assert rej.value.reason == "expired"
    rec = audit_records(kit)[-1]
    assert (rec["op"], rec["principal"], rec["verdict"]) == ("with_principal", "later@hr (rejected)",
                                                             "INVALID_CREDENTIAL")


# ------------------------------------------------------------------ docs/privacy.md


def test_keyed_noise_is_identical_only_for_the_same_bytes_and_parameters():
    key = os.urandom(32)
    kw = {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-6, "radius": 0.01, "clip_norm": 1.0}
    v = np.zeros(8)
    v[0] = 1.0
    a, p = privatize(v, key=key, **kw)
    assert p.rng_id == "chacha20-keyed-hmac-sha256-v1"
    assert np.array_equal(a, privatize(v.copy(), key=key, **kw)[0])
    negzero, tiny = v.copy(), v.copy()
    negzero[1] = -0.0
    tiny[2] = 2.0 ** -512  # read as 0, but other bytes
    others = [privatize(negzero, key=key, **kw)[0], privatize(tiny, key=key, **kw)[0],
              privatize(v.astype(np.float32), key=key, **kw)[0].astype(np.float64),
              privatize(v, key=key, **{**kw, "epsilon": 1.0 + 1e-9})[0],
              privatize(v, key=query_noise_key(key), **kw)[0], privatize(v, key=os.urandom(32), **kw)[0]]
    for other in others:
        assert not np.array_equal(a[1:], other[1:])


def test_privatize_clips_only_when_asked_and_refuses_a_delta_below_1e_300():
    _, p = privatize(np.full(4, 10.0), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01)
    assert p.clip_norm is None
    with pytest.raises(ValueError, match="1e-300"):
        privatize(np.ones(4), mechanism="gaussian", epsilon=1.0, delta=1e-301, radius=0.01)
    out, _ = privatize(np.array([1e300, 0.0, 0.0, 0.0]), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01)
    assert out[0] == 1e300  # at least 2^52 lattice steps: kept as computed, not refused


def test_the_default_pii_policy_and_the_magnitudes_privacy_md_names(tmp_path):
    kit = make_kit(tmp_path)
    pol = kit.config({"pii": {"class": "PII", "owner": "hr"}}).policy_for("pii")
    n = pol.noise
    assert (n.mechanism, n.epsilon, n.delta, n.radius, n.clip_norm, n.keyed) == ("gaussian", 1.0, 1e-6, 0.01, 1.0, True)
    _, p = privatize(np.full(384, 384 ** -0.5), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01,
                     clip_norm=1.0)
    assert p.lattice_step == 2.0 ** -15 and round(p.scale, 5) == 0.04477
    assert f"{2.0 ** 53 * p.lattice_step:.1e}" == "2.7e+11" and 2.0 ** 24 * p.lattice_step == 512


# ------------------------------------------------------------------ docs/server.md, README


def test_snapshot_and_cluster_calls_refused_under_a_policy_send_nothing(tmp_path, monkeypatch):
    kit = make_kit(tmp_path)
    c = QdrantClient(":memory:", guard=kit.config({"pii": {"class": "PII", "owner": "hr"}}),
                     principal=kit.principal("alice", "hr"))
    create(c, "pii")
    calls = {"recover_snapshot": lambda: c.recover_snapshot("pii", "file:///x.snapshot"),
             "recover_shard_snapshot": lambda: c.recover_shard_snapshot("pii", 0, "file:///x.snapshot"),
             "remove_peer": lambda: c.remove_peer(1), "recover_current_peer": c.recover_current_peer,
             "delete_full_snapshot": lambda: c.delete_full_snapshot("x")}
    sent = record_sent(monkeypatch, tuple(calls))
    for name, call in calls.items():
        assert _refusal(call) == "REFUSED_CROSS_BOUNDARY", name
    assert sent == []
    assert RawClient(":memory:").list_full_snapshots() == [] == c.list_full_snapshots()


def test_points_and_with_payload_dicts_are_read_as_the_rest_client_reads_them(tmp_path):
    kit = make_kit(tmp_path)
    c = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}), principal=kit.principal("a", "hr"))
    create(c, "pub")
    rng = np.random.default_rng(2)
    c.upsert("pub", [{"id": 1, "vector": unit(rng), "payload": {"a": 1, "b": 2}}])  # local mode alone fails on it
    with pytest.raises(TypeError, match=r"invalid: vector, vectr"):
        c.upsert("pub", [{"id": 2, "vectr": unit(rng)}])
    assert c.retrieve("pub", [1], with_payload={"include": ["a"]})[0].payload == {"a": 1}
    raw = RawClient(":memory:")
    create(raw, "pub")
    raw.upsert("pub", [models.PointStruct(id=1, vector=unit(rng), payload={"a": 1})])
    assert raw.retrieve("pub", [1], with_payload={"include": ["a"]})[0].payload == {}  # the key named "include"


def test_without_guard_principal_and_embedder_are_config_errors_and_raw_handles_are_refused(tmp_path):
    kit = make_kit(tmp_path)
    with pytest.raises(ConfigError, match="principal= given without guard="):
        QdrantClient(":memory:", principal=kit.principal("a", "hr"))
    with pytest.raises(ConfigError, match="embedder= given without guard="):
        QdrantClient(":memory:", embedder=HashingEmbedder(DIM))
    c = QdrantClient(":memory:", guard=kit.config({}), principal=kit.principal("a", "hr"))
    for handle in ("http", "init_options"):
        with pytest.raises(GuardRefusal) as ei:
            getattr(c, handle)
        assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"


def test_names_visible_accessible_answers_a_hidden_collection_as_a_missing_one(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr"}, "pub": {"class": "PUBLIC"}}, names_visible="accessible")
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(c, "pii")
    create(c, "pub")
    bob = c.with_principal(kit.principal("bob", "support"))
    assert bob.collection_exists("pii") is False and bob.collection_exists("pub") is True
    with pytest.raises(ValueError) as hidden:
        bob.get_collection("pii")
    with pytest.raises(ValueError) as missing:
        bob.get_collection("nope")
    assert (type(hidden.value), str(hidden.value).replace("pii", "X")) == \
        (type(missing.value), str(missing.value).replace("nope", "X")) == (ValueError, "Collection X not found")


def test_the_quick_start_embedder_sees_the_generalised_text(tmp_path):
    from guardkit import Recorder

    kit = make_kit(tmp_path)
    cfg = kit.config({"employee_records": {"class": "PII", "owner": "hr", "readers": ["support"],
                                           "writers": ["support"], "noise_on_write": True, "text_field": "text",
                                           "intent": {"enabled": False}}})
    rec = Recorder()
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=rec)
    create(c, "employee_records")
    text = "Jane Roe asked about parental leave; SSN 123-45-6789"
    c.with_principal(kit.principal("agent-7", "support")).upsert("employee_records", [models.PointStruct(
        id=2, payload={"text": text, "source": "hr-faq"}, vector=models.Document(text=text, model="qg-hashing-v1-16"))])
    assert rec.seen == ["Jane [NAME] asked about parental leave; [CODE] [SSN]"]
    assert c.retrieve("employee_records", [2])[0].payload["text"] == "Jane Roe asked about parental leave; SSN [SSN]"


# receipt-format.md "What verify() reports": aliases ("A receipt bound to an alias that has since
# been deleted or moved to another collection is collection_mismatch; one bound to an alias that
# was moved here from another collection verifies"), and "Give it a client without guard=": a
# guarded client's read strips such a vector, so the owner's guarded client is read past its guard
# (before, the stripped vector was reported as vector_mismatch, not its receipt's reason).
def test_verify_binds_receipts_to_aliases_as_stated_and_needs_an_unguarded_client(tmp_path):
    from qdrant_guard.collection_verify import verify

    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True, "intent": {"enabled": False}}
    store = str(tmp_path / "store")
    c = QdrantClient(path=store, guard=kit.config({"pii": pol, "pii2": pol, "al": pol}),
                     principal=kit.principal("alice", "hr"))
    create(c, "pii")
    create(c, "pii2")

    def alias(client, op):
        client.update_collection_aliases(change_aliases_operations=[op])

    def to(collection):
        return models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection, alias_name="al"))

    drop = models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name="al"))
    alias(c, to("pii"))
    bob = c.with_principal(kit.principal("bob", "support"))
    rng = np.random.default_rng(4)
    bob.upsert("al", [models.PointStruct(id=1, vector=unit(rng))])  # receipt bound to 'al'
    bob.upsert("pii", [models.PointStruct(id=2, vector=unit(rng))])
    pk = keys.load_private_key(kit.guard_key_path).public_key()
    trusted = {keys.key_id(pk): pk}

    def reasons(client, name):
        return [(r.point_id, r.reason) for r in verify(client, name, trusted_keys=trusted)]

    assert reasons(c, "pii") == reasons(c, "al") == [(1, "ok"), (2, "ok")]
    alias(c, drop)
    alias(c, to("pii2"))  # moved to another collection
    assert reasons(c, "pii") == [(1, "collection_mismatch"), (2, "ok")]  # a guarded read would strip it
    c.close()
    raw = RawClient(path=store)
    assert reasons(raw, "pii") == [(1, "collection_mismatch"), (2, "ok")]
    alias(raw, drop)  # deleted
    assert reasons(raw, "pii") == [(1, "collection_mismatch"), (2, "ok")]
    got = raw.retrieve("pii", [1], with_payload=True, with_vectors=True)[0]
    raw.upsert("pii2", [models.PointStruct(id=1, vector=got.vector, payload=got.payload)])
    assert reasons(raw, "pii2") == [(1, "collection_mismatch")]
    alias(raw, to("pii2"))  # an alias moved here
    assert reasons(raw, "pii2") == [(1, "ok")]
    raw.close()


# receipt-format.md, PUBLIC collections under verify(policy=): a vector without a receipt is
# not_required (report ok, check not ok); a receipt present is verified; one under a sparse
# vector's name is unsupported_vector; without policy= every vector needs one.
def test_verify_on_a_public_collection(tmp_path):
    from guardkit import guard_signer, receipted_vector

    from qdrant_guard.collection_verify import verify
    from qdrant_guard.receipts import RECEIPT_KEY, receipts_for_payload

    kit = make_kit(tmp_path)
    cfg = kit.config({"pub": {"class": "PUBLIC"}})
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("a", "hr"))
    c.create_collection("pub", vectors_config={"d": models.VectorParams(size=DIM, distance=models.Distance.EUCLID)},
                        sparse_vectors_config={"s": models.SparseVectorParams()})
    rng = np.random.default_rng(5)
    vec, rec = receipted_vector(guard_signer(kit), 5, unit(rng), collection="pub", vname="d")
    sparse = models.SparseVector(indices=[1], values=[1.0])
    c.upsert("pub", [
        models.PointStruct(id=5, vector={"d": vec}, payload={RECEIPT_KEY: receipts_for_payload({"d": rec})}),
        models.PointStruct(id=6, vector={"d": unit(rng), "s": sparse}),
        models.PointStruct(id=7, vector={"d": unit(rng), "s": sparse},
                           payload={RECEIPT_KEY: receipts_for_payload({"s": rec})}),
    ])
    pk = keys.load_private_key(kit.guard_key_path).public_key()
    trusted = {keys.key_id(pk): pk}
    got = {(r.point_id, r.vector_name): (r.ok, r.reason, r.check.ok) for r in verify(c, "pub", trusted_keys=trusted,
                                                                                    policy=cfg)}
    assert got == {(5, "d"): (True, "ok", True), (6, "d"): (True, "not_required", False),
                   (6, "s"): (True, "not_required", False), (7, "d"): (True, "not_required", False),
                   (7, "s"): (False, "unsupported_vector", False)}
    plain = {(r.point_id, r.vector_name): r.reason for r in verify(c, "pub", trusted_keys=trusted)}
    assert plain == {(5, "d"): "ok", (6, "d"): "missing_receipt", (6, "s"): "unsupported_vector",
                     (7, "d"): "missing_receipt", (7, "s"): "unsupported_vector"}


# server.md: "A dict the REST client refuses is ... refused with the REST client's error before
# anything is read" where the guard projects the selector itself (source caps, vector stripping),
# "elsewhere it goes to qdrant-client unchanged".
def test_a_with_payload_dict_the_rest_client_refuses(tmp_path, monkeypatch):
    from pydantic import ValidationError

    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
                              "intent": {"enabled": False}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    rng = np.random.default_rng(6)
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={"a": 1, "source": "s"})])
    bob = owner.with_principal(kit.principal("bob", "support"))
    bad = {"foo": ["a"]}
    sent = record_sent(monkeypatch, ("retrieve", "scroll", "query_points"))
    for call in (lambda: owner.query_points("pii", query=unit(rng), with_payload=bad),
                 lambda: bob.retrieve("pii", [1], with_payload=bad, with_vectors=True),
                 lambda: bob.scroll("pii", with_payload=bad, with_vectors=True)):
        with pytest.raises(ValidationError):
            call()
    assert sent == []
    assert owner.retrieve("pii", [1], with_payload=bad)[0].payload == {}  # unchanged: local mode's reading
    assert bob.retrieve("pii", [1], with_payload={"include": ["a"]})[0].payload == {"a": 1}


# integrations.md: "PII is redacted inside the JSON, and the node still parses ... `Contact:\n
# alice@example.com` is stored as `Contact:\n[EMAIL]`".
def test_pii_in_a_llama_index_node_is_redacted_inside_its_json(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"kb": {"class": "PII", "owner": "hr", "raw_in_boundary": True, "text_field": "_node_content",
                             "intent": {"enabled": False}}})
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(c, "kb")
    node = json.dumps({"text": "Contact:\nalice@example.com", "id_": "n1"})
    c.upsert("kb", [models.PointStruct(id=1, vector=unit(np.random.default_rng(7)), payload={"_node_content": node})])
    stored = c.retrieve("kb", [1])[0].payload["_node_content"]
    assert json.loads(stored) == {"text": "Contact:\n[EMAIL]", "id_": "n1"}


# README: `receipt verify --path` works "a local store only while no other client holds it";
# `demo --workdir DIR` "refuses a directory holding anything else".
def test_receipt_verify_on_a_held_store_and_demo_on_a_foreign_directory_exit_2(tmp_path):
    store = str(tmp_path / "store")
    holder = RawClient(path=store)
    create(holder, "c")
    pub = tmp_path / "k.pub"
    pub.write_text(keys.public_key_to_str(keys.generate_keypair()[1]))
    r = run_cli("receipt", "verify", "--path", store, "--collection", "c", "--trusted-key", str(pub))
    assert r.returncode == 2 and "is open in another client" in r.stderr
    holder.close()
    work = tmp_path / "work"
    work.mkdir()
    (work / "mine.txt").write_text("x")
    r = run_cli("demo", "--workdir", str(work))
    assert r.returncode == 2 and "mine.txt" in r.stderr
    assert [p.name for p in work.iterdir()] == ["mine.txt"]


# receipt-format.md: "verify_receipt's detail names the first contradiction it finds, e.g.
# `guarantee sentence says epsilon=0.1, fields say epsilon=8.0`" (a receipt whose signature verifies).
def test_a_signed_sentence_that_contradicts_its_fields_names_the_number():
    from qdrant_guard.receipt_format import SIGNATURE_PREFIX

    sk, pk = keys.generate_keypair()
    unitv = np.ones(8) / math.sqrt(8)
    noised, p8 = privatize(unitv, mechanism="gaussian", epsilon=8.0, delta=1e-6, radius=0.01, clip_norm=1.0)
    _, p01 = privatize(unitv, mechanism="gaussian", epsilon=0.1, delta=1e-6, radius=0.01, clip_norm=1.0)
    v = stored_form(noised, distance="Cosine")
    body = {k: x for k, x in issue_receipt(ReceiptSigner(sk), params=p8, vector=v, collection="c", point_id=1).items()
            if k != "sig"}
    body["params"] = dict(body["params"], guarantee=p01.guarantee)
    lie = dict(body, sig=base64.b64encode(sk.sign(SIGNATURE_PREFIX + canonical_json(body))).decode())
    check = verify_receipt(lie, vector=v, collection="c", point_id=1, trusted_keys={keys.key_id(pk): pk})
    assert (check.reason, check.detail) == ("guarantee_mismatch", "guarantee sentence says epsilon=0.1, fields say "
                                                                  "epsilon=8.0")


# README's verdict table: TEXT_REQUIRED for a query_text with no letter or digit;
# REFUSED_CROSS_BOUNDARY for a name with a '..' segment or one folding like a listed name of
# another policy (details.reason); UNSUPPORTED_WRITE for points given as a tuple and ids Qdrant
# does not accept (negative, >= 2^64, a string that is not a UUID), nothing sent.
def test_verdict_table_rows(tmp_path, monkeypatch):
    from qdrant_guard.errors import UnsupportedWriteError

    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "raw_in_boundary": True, "intent": {"enabled": False},
                              "query": {"require_text": True}},
                      "payroll": {"class": "PII", "owner": "hr"}, "pub": {"class": "PUBLIC"}}, unlisted="public")
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(c, "pii")
    create(c, "pub")
    rng = np.random.default_rng(8)
    assert _refusal(lambda: c.query_points("pii", query=unit(rng), query_text="??? !!!")) == "TEXT_REQUIRED"
    assert c.query_points("pii", query=unit(rng), query_text="leave policy").points == []
    assert _refusal(lambda: c.delete_collection("pub/../payroll")) == "REFUSED_CROSS_BOUNDARY"
    assert audit_records(kit)[-1]["details"]["reason"] == "path_segment"
    assert _refusal(lambda: create(c, "PAYROLL")) == "REFUSED_CROSS_BOUNDARY"
    assert audit_records(kit)[-1]["details"]["reason"] == "folded_name"
    sent = record_sent(monkeypatch, ("upsert",))
    for points in (tuple([models.PointStruct(id=1, vector=unit(rng))]), [models.PointStruct(id=-1, vector=unit(rng))],
                   [models.PointStruct(id=2 ** 64, vector=unit(rng))],
                   [models.PointStruct(id="not-a-uuid", vector=unit(rng))]):
        with pytest.raises(UnsupportedWriteError):
            c.upsert("pii", points)
        assert audit_records(kit)[-1]["verdict"] == "UNSUPPORTED_WRITE"
    assert sent == []


# README / integrations.md: get_collection answers a principal who may not read the collection
# with its configuration only (points_count, indexed_vectors_count, update_queue None,
# segments_count 0, no metadata).
def test_get_collection_without_read_access_shows_the_configuration_only(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "intent": {"enabled": False}}})
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    c.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE),
                        metadata={"team": "hr"})
    info = c.with_principal(kit.principal("bob", "support")).get_collection("pii")
    counts = (info.points_count, info.indexed_vectors_count, info.update_queue, info.segments_count)
    assert counts == (None, None, None, 0)
    assert info.config.metadata is None and info.config.params.vectors.size == DIM
    assert c.get_collection("pii").config.metadata == {"team": "hr"}


# The EPSILON_ABOVE_CEILING directive named "raise epsilon_ceiling in the policy" as a fix; done
# alone, the same receipt is then refused as NOISE_REQUIRED (weaker than the collection's
# noise.epsilon). It now names both keys, and raising both stores the receipt.
def test_the_epsilon_ceiling_refusal_names_the_fix_that_works(tmp_path):
    from guardkit import receipted_point

    kit = make_kit(tmp_path)

    def write(pol_extra, **cfg_extra):
        pol = {"class": "PII", "owner": "hr", "writers": ["support"], "intent": {"enabled": False}, **pol_extra}
        c = QdrantClient(":memory:", guard=kit.config({"pii": pol}, **cfg_extra), principal=kit.principal("a", "hr"))
        c.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.EUCLID))
        bob = c.with_principal(kit.principal("bob", "support"))
        point = receipted_point(kit, 1, np.random.default_rng(9), epsilon=3.0)
        try:
            bob.upsert("pii", [point])
        except GuardRefusal as exc:
            return exc.verdict, str(exc)
        return "stored", ""

    verdict, message = write({})
    assert verdict == "EPSILON_ABOVE_CEILING"
    assert "epsilon_ceiling and the collection's noise.epsilon together" in message
    assert write({}, epsilon_ceiling={"PII": 4.0})[0] == "NOISE_REQUIRED"
    assert write({"noise": {"epsilon": 3.0}}, epsilon_ceiling={"PII": 4.0})[0] == "stored"


# README's policy comment: unlisted = "strict" makes a collection the policy does not list "PII,
# readable by any verified agent, written by none" (nor created by any).
def test_an_unlisted_collection_under_strict_is_pii_read_by_anyone_verified_written_by_none(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({})
    assert cfg.unlisted == "strict" and cfg.policy_for("x").sensitivity.value == "PII"
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("a", "hr"))
    RawClient.create_collection(c, "x", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    rng = np.random.default_rng(10)
    for view in (c, c.with_principal(kit.principal("b", "support"))):
        assert view.query_points("x", query=unit(rng), limit=1).points == []
        assert _refusal(lambda: view.upsert("x", [models.PointStruct(id=1, vector=unit(rng))])) == \
            "REFUSED_CROSS_BOUNDARY"
    assert _refusal(lambda: create(c, "y")) == "REFUSED_CROSS_BOUNDARY"


# privacy.md: "before a read returns a stored vector to a reader without raw access ... it applies
# the same checks and the collection's [noise] policy again (its mechanism included)": receipts of
# the guard's own key written around it, with the TEST-ONLY generator, a larger epsilon, another
# mechanism or a larger clip_norm, are stripped for a reader and returned to the owner under
# raw_in_boundary.
def test_a_read_re_judges_stored_receipts_for_readers_without_raw_access(tmp_path):
    from guardkit import receipted_point

    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
                              "intent": {"enabled": False},
                              "diversity": {"max_source_fraction": 1.0, "min_unique_sources": 1}}})
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("a", "hr"))
    c.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.EUCLID))
    rng = np.random.default_rng(11)
    RawClient.upsert(c, "pii", [receipted_point(kit, 1, rng), receipted_point(kit, 2, rng, seeded=True),
                                receipted_point(kit, 3, rng, epsilon=1.5),
                                receipted_point(kit, 4, rng, mechanism="laplace_l2"),
                                receipted_point(kit, 5, rng, clip_norm=2.0)])
    reader = c.with_principal(kit.principal("b", "support"))
    ids = [1, 2, 3, 4, 5]
    assert [p.vector is not None for p in reader.retrieve("pii", ids, with_vectors=True)] == [True] + [False] * 4
    assert all(p.vector is not None for p in c.retrieve("pii", ids, with_vectors=True))


# privacy.md, through the guard: keyed noise (the default) gives a vector written again the same
# release, in any collection with the same noise parameters ("Known limit of keyed mode"), a
# float32 release ("the guard noises float32 vectors"), and another guard's signing key other noise.
def test_keyed_noise_through_the_guard(tmp_path):
    from qdrant_guard.receipts import receipts_from_payload

    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True, "intent": {"enabled": False}}
    v = unit(np.random.default_rng(12))
    stored = []
    for sub in ("one", "two"):
        (tmp_path / sub).mkdir()
        kit = make_kit(tmp_path / sub)
        c = QdrantClient(":memory:", guard=kit.config({"a": pol, "b": pol}), principal=kit.principal("alice", "hr"))
        create(c, "a")
        create(c, "b")
        bob = c.with_principal(kit.principal("bob", "support"))
        bob.upsert("a", [models.PointStruct(id=1, vector=v), models.PointStruct(id=2, vector=v)])
        bob.upsert("b", [models.PointStruct(id=1, vector=v)])
        got = [RawClient.retrieve(c, col, [i], with_vectors=True, with_payload=True)[0]
               for col, i in (("a", 1), ("a", 2), ("b", 1))]
        assert got[0].vector == got[1].vector == got[2].vector != v
        params = receipts_from_payload(got[0].payload)[""]["params"]
        assert (params["dtype"], params["rng_id"]) == ("float32", "chacha20-keyed-hmac-sha256-v1")
        stored.append(got[0].vector)
    assert stored[0] != stored[1]


# receipt-format.md "Payload storage": the guard writes and deletes one vector's receipt by its
# path, "so the container may hold fewer vectors than the point, or none ({"v": 1, "vectors": {}})":
# an owner's raw update of one vector drops that vector's receipt only.
def test_a_raw_update_of_one_vector_drops_its_receipt_only(tmp_path):
    from qdrant_guard.receipts import RECEIPT_KEY

    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True, "raw_in_boundary": True,
           "intent": {"enabled": False}}
    c = QdrantClient(":memory:", guard=kit.config({"a": pol}), principal=kit.principal("alice", "hr"))
    create(c, "a", named=("x", "y"))
    rng = np.random.default_rng(13)
    c.with_principal(kit.principal("bob", "support")).upsert(
        "a", [models.PointStruct(id=1, vector={"x": unit(rng), "y": unit(rng)})])

    def container():
        return RawClient.retrieve(c, "a", [1], with_payload=True)[0].payload[RECEIPT_KEY]

    assert container()["v"] == 1 and sorted(container()["vectors"]) == ["x", "y"]
    c.update_vectors("a", [models.PointVectors(id=1, vector={"x": unit(rng)})])
    assert sorted(container()["vectors"]) == ["y"]
    c.update_vectors("a", [models.PointVectors(id=1, vector={"y": unit(rng)})])
    assert container() == {"v": 1, "vectors": {}}


# README: "Refusals raise qdrant_guard.GuardRefusal ... carrying the verdict, a directive ..., the
# point ids at fault and the manifest digest (the hash of the audit-log entry that records the
# decision)", and the NOISE_REQUIRED refusal it prints.
def test_a_refusal_carries_its_audit_entry_hash_and_reads_as_the_readme_prints_it(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False}})
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("a", "hr"))
    create(c, "pii")
    with pytest.raises(GuardRefusal) as ei:
        c.with_principal(kit.principal("b", "support")).upsert(
            "pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(14)))])
    last = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])
    assert (ei.value.verdict, ei.value.point_ids, ei.value.manifest_digest) == ("NOISE_REQUIRED", [1], last["hash"])
    readme = (ROOT / "README.md").read_text()
    shown = readme[readme.index("GuardRefusal: NOISE_REQUIRED"):].split("\n```")[0]
    assert " ".join(shown.split()) == f"GuardRefusal: {ei.value}"


# README: "without signing_key the guard signs with a key that dies with its process ... (a client
# on a path= or server store warns of it)"; a :memory: store, which dies with it too, does not.
def test_a_path_store_without_signing_key_warns(tmp_path):
    import warnings

    from qdrant_guard.policy import config_from_dict

    kit = make_kit(tmp_path)
    cfg = config_from_dict({"audit_log": str(tmp_path / "audit.jsonl"),
                            "boundaries": {"hr": {"authority_keys": [kit.authority_pub["hr"]]}},
                            "collections": {"pii": {"class": "PII", "owner": "hr"}}}, source="no-key.toml")
    for where, expected in (({"path": str(tmp_path / "store")}, True), ({"location": ":memory:"}, False)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            QdrantClient(**where, guard=cfg, principal=kit.principal("a", "hr")).close()
        said = [str(w.message) for w in seen if "sets no signing_key" in str(w.message)]
        assert bool(said) is expected, where
        assert all("throwaway key" in s for s in said)


# threat-model.md "Filters as probes": a match value read as `key: value` (under a password name
# any value is one: `hunter2` on `db_password`), credentials refused for everyone, PII refused
# (QUERY_REJECTED) unless `filter_pii = "owner"` and the owner boundary asks, field names screened
# too (`is_empty` on `alice@example.com`); partial values, ranges and a name-shaped value under a
# credential-attribute name (`auth_provider`) pass; a known token there is still refused.
def test_filters_as_probes(tmp_path):
    kit = make_kit(tmp_path)
    base = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
            "intent": {"enabled": False}}
    c = QdrantClient(":memory:", guard=kit.config({"pii": base, "own": {**base, "query": {"filter_pii": "owner"}}}),
                     principal=kit.principal("a", "hr"))
    create(c, "pii")
    create(c, "own")
    bob = c.with_principal(kit.principal("b", "support"))

    def match(key, value):
        return models.FieldCondition(key=key, match=models.MatchValue(value=value))

    cases = [  # condition, outcome for (owner, reader) on "pii", then on "own"
        (match("db_password", "hunter2"), ("CREDENTIAL_IN_TEXT",) * 4),
        (match("auth_provider", "sk_live_" + "a1B2c3D4e5F6g7H8i9J0k1L2"), ("CREDENTIAL_IN_TEXT",) * 4),
        (match("ssn", "123-45-6789"), ("QUERY_REJECTED", "QUERY_REJECTED", "ok", "QUERY_REJECTED")),
        (match("ssn", 123456789), ("QUERY_REJECTED", "QUERY_REJECTED", "ok", "QUERY_REJECTED")),
        (models.FieldCondition(key="t", match=models.MatchText(text="123-45-6789")),
         ("QUERY_REJECTED", "QUERY_REJECTED", "ok", "QUERY_REJECTED")),
        (models.IsEmptyCondition(is_empty=models.PayloadField(key="alice@example.com")),
         ("QUERY_REJECTED", "QUERY_REJECTED", "ok", "QUERY_REJECTED")),
        (models.FieldCondition(key="t", match=models.MatchPrefix(prefix="123-45-")), ("ok",) * 4),
        (models.FieldCondition(key="salary", range=models.Range(gte=100000)), ("ok",) * 4),
        (match("auth_provider", "google-oauth2-provider"), ("ok",) * 4),
    ]
    for cond, expected in cases:
        got = []
        for client, collection in ((c, "pii"), (bob, "pii"), (c, "own"), (bob, "own")):
            try:
                client.scroll(collection, scroll_filter=models.Filter(must=[cond]))
                got.append("ok")
            except GuardRefusal as exc:
                got.append(exc.verdict)
        assert tuple(got) == expected, cond


# receipt-format.md: "Coordinates must satisfy |v| < 2048 ...; a larger one is an
# InvalidVectorError naming its magnitude, and so is, in stored_form, one within 2^-14 below 2048,
# which float32 would round to 2048 itself. A guarded collection whose noise has no clip_norm
# refuses such a write with it".
def test_the_commitment_grid_bound(tmp_path):
    from qdrant_guard.errors import InvalidVectorError

    for x, shown in ((2048.0, "magnitude 2048;"), (2048 - 2.0 ** -15, "which float32 rounds to 2048"),
                     (3000.0, "magnitude 3000;")):
        with pytest.raises(InvalidVectorError, match=shown):
            stored_form(np.array([x, 0.0]), distance="Euclid")
    assert stored_form(np.array([2048 - 2.0 ** -13, 0.0]), distance="Euclid")[0] == np.float32(2048 - 2.0 ** -13)
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "intent": {"enabled": False},
           "noise": {"clip_norm": None}}
    c = QdrantClient(":memory:", guard=kit.config({"pii": pol}), principal=kit.principal("a", "hr"))
    c.create_collection("pii", vectors_config=models.VectorParams(size=2, distance=models.Distance.EUCLID))
    bob = c.with_principal(kit.principal("b", "support"))
    with pytest.raises(InvalidVectorError, match="2048"):
        bob.upsert("pii", [models.PointStruct(id=1, vector=[3000.0, 0.0])])
    bob.upsert("pii", [models.PointStruct(id=1, vector=[3.0, 0.0])])


# integrations.md: llama-index deletes a document by a filter on doc_id; "a document id that is
# personal data (an e-mail address, say) is refused (QUERY_REJECTED) under the default
# query.filter_pii = "refuse" ... or set filter_pii = "owner" and delete from the owner boundary".
def test_a_delete_by_a_personal_document_id(tmp_path):
    kit = make_kit(tmp_path)
    base = {"class": "PII", "owner": "hr", "writers": ["support"], "intent": {"enabled": False}}
    c = QdrantClient(":memory:", guard=kit.config({"kb": base, "kb2": {**base, "query": {"filter_pii": "owner"}}}),
                     principal=kit.principal("a", "hr"))
    create(c, "kb")
    create(c, "kb2")
    writer = c.with_principal(kit.principal("b", "support"))
    by_id = models.FilterSelector(filter=models.Filter(must=[models.FieldCondition(
        key="doc_id", match=models.MatchValue(value="alice@example.com"))]))
    outcome = {(who, col): _refusal(lambda: client.delete(col, points_selector=by_id))
               for who, client in (("owner", c), ("writer", writer)) for col in ("kb", "kb2")}
    assert outcome == {("owner", "kb"): "QUERY_REJECTED", ("owner", "kb2"): "allowed",
                       ("writer", "kb"): "QUERY_REJECTED", ("writer", "kb2"): "QUERY_REJECTED"}
