"""Review 41 (receipts, boundaries, keys and the audit log, adversarially).

Each test of a fix failed on the code before it (the old module put back, run, restored); the
last test pins a limit that the docs now state instead of claiming more.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from qdrant_guard import keys
from qdrant_guard.audit import AuditLog, verify_audit_file
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import AuditIntegrityError, ConfigError
from qdrant_guard.policy import load_policy
from qdrant_guard.receipts import ReceiptSigner, issue_receipt, stored_form, verify_receipt


def _forged_line(seq: int, prev: str, record: dict) -> bytes:
    # What anyone who can write the file can make: a self-consistent entry with a recomputed hash.
    entry = {"seq": seq, "ts": 1.0, "prev": prev, "record": record}
    entry["hash"] = hashlib.sha256(canonical_json(entry)).hexdigest()
    return canonical_json(entry) + b"\n"


# -- the writer's first entry in a log that was empty ---------------------------------------------

def test_first_entry_of_an_empty_log_is_refused_when_its_path_names_another_file(tmp_path):
    # The path check ran only once an entry was known: a new (empty) log renamed away and replaced
    # took the guard's first entry into the renamed file, which nobody reads, without a word.
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p)
    os.rename(p, tmp_path / "audit.old")
    p.write_bytes(b"")
    with pytest.raises(AuditIntegrityError, match="no longer names"):
        log.append({"event": "first"})
    assert (tmp_path / "audit.old").read_bytes() == b"" and p.read_bytes() == b""
    log.close()


def test_first_line_others_put_in_an_empty_log_must_start_the_chain(tmp_path):
    # Lines appended by others after a known entry must chain to it; in a log that was empty they
    # were not checked at all, so the writer chained onto a line claiming seq 7.
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p)
    with open(p, "ab") as fh:
        fh.write(_forged_line(7, "ab" * 32, {"event": "forged"}))
    with pytest.raises(AuditIntegrityError, match="does not chain"):
        log.append({"event": "real"})
    log.close()


def test_entries_another_writer_starts_an_empty_log_with_are_followed(tmp_path):
    p = tmp_path / "audit.jsonl"
    first, second = AuditLog(p), AuditLog(p)
    second.append({"event": "a"})
    assert first.append({"event": "b"})["seq"] == 2
    assert verify_audit_file(p).ok
    first.close()
    second.close()


# -- a receipt given as text that is no Unicode -----------------------------------------------------

def test_verify_receipt_of_text_with_a_lone_surrogate_is_malformed_not_an_exception():
    sk = Ed25519PrivateKey.generate()
    signer = ReceiptSigner(sk)
    from qdrant_guard.noise import privatize

    v = np.linspace(-1.0, 1.0, 8)
    noised, params = privatize(v / np.linalg.norm(v), mechanism="gaussian", epsilon=4.0, radius=0.5, delta=1e-6)
    stored = stored_form(noised, distance="Euclid")
    receipt = issue_receipt(signer, params=params, vector=stored, collection="c", point_id=1)
    good = canonical_json(receipt).decode("utf-8")
    text = good[:-1] + ',"x":"\ud800"}'
    kw = dict(vector=stored, collection="c", point_id=1, trusted_keys={signer.key_id: sk.public_key()})
    assert verify_receipt(good, **kw).ok
    check = verify_receipt(text, **kw)  # raised UnicodeEncodeError ("never raises for a bad receipt")
    assert not check.ok and check.reason == "malformed" and "Unicode" in check.detail


# -- private key material in policy errors -------------------------------------------------------

def _pem_and_body() -> tuple[str, str]:
    pem = keys.private_key_to_pem(Ed25519PrivateKey.generate()).decode()
    return pem, pem.splitlines()[1]


@pytest.mark.parametrize("form", ["pem", "body"])
def test_policy_error_does_not_echo_a_private_key_pasted_in_revoked_keys(tmp_path, form):
    # revoked_keys takes key ids; a private key pasted there was echoed whole, twice, into the
    # ConfigError (and so into logs), where every other key list names it without showing it.
    pem, body = _pem_and_body()
    value = pem if form == "pem" else body
    (tmp_path / "p.toml").write_text(f"[receipts]\nrevoked_keys = [{json.dumps(value)}]\n")
    with pytest.raises(ConfigError) as err:
        load_policy(tmp_path / "p.toml")
    msg = str(err.value)
    assert body[10:50] not in msg and "revoked_keys" in msg and "not shown" in msg


def test_policy_error_does_not_echo_a_private_key_given_as_a_string_for_a_key_list(tmp_path):
    pem, body = _pem_and_body()
    (tmp_path / "p.toml").write_text(f"[receipts]\ntrusted_keys = {json.dumps(pem)}\n")
    with pytest.raises(ConfigError) as err:
        load_policy(tmp_path / "p.toml")
    assert body[10:50] not in str(err.value) and "trusted_keys" in str(err.value)


def test_policy_error_still_names_a_public_key_given_for_a_key_id(tmp_path):
    pk_text = keys.public_key_to_str(Ed25519PrivateKey.generate().public_key())
    (tmp_path / "p.toml").write_text(f'[receipts]\nrevoked_keys = ["{pk_text}"]\n')
    with pytest.raises(ConfigError, match="that is a public key: list its key id"):
        load_policy(tmp_path / "p.toml")


# -- key loading errors name the fix --------------------------------------------------------------

@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_a_der_private_key_error_names_a_conversion_that_works(tmp_path):
    sk = Ed25519PrivateKey.generate()
    der = tmp_path / "guard.der"
    der.write_bytes(sk.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()))
    der.chmod(0o600)
    with pytest.raises(keys.KeyStoreError) as err:
        keys.load_private_key(der)
    msg = str(err.value)
    assert "qdrant-guard keys new --out FILE" in msg and f"openssl pkey -in {der} -out NEW.key" in msg
    new = tmp_path / "NEW.key"
    subprocess.run(["openssl", "pkey", "-inform", "DER", "-in", str(der), "-out", str(new)], check=True)
    new.chmod(0o600)
    assert keys.key_id(keys.load_private_key(new)) == keys.key_id(sk)


def test_a_public_key_file_of_another_form_names_the_pub_to_give(tmp_path):
    pk = Ed25519PrivateKey.generate().public_key()
    ssh = tmp_path / "id_ed25519.pub"
    ssh.write_bytes(pk.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    with pytest.raises(keys.KeyStoreError, match=r"keys pub --key PRIVATE"):
        keys.load_public_key(ssh)


# -- a torn tail is not proof of a crash -----------------------------------------------------------

def test_verify_cli_says_a_torn_tail_may_be_a_cut(tmp_path, capsys):
    from qdrant_guard.cli import main

    p = tmp_path / "audit.jsonl"
    log = AuditLog(p)
    for i in range(5):
        log.append({"event": "e", "i": i})
    log.close()
    lines = p.read_bytes().splitlines(keepends=True)
    p.write_bytes(b"".join(lines[:2]) + lines[2][:30])  # entries 4 and 5 gone, 3 cut mid-line
    assert main(["audit", "verify", str(p)]) == 1
    out = capsys.readouterr().out
    second = json.loads(lines[1])
    assert out.startswith("INCOMPLETE: torn_tail at line 3:")
    assert "a file cut inside an entry ends the same way" in out
    assert f"seq 2, hash {second['hash']}" in out


# -- the documented limit: a checkpoint signs the chain as the writer finds it --------------------

def test_a_checkpoint_signs_an_entry_another_writer_appended_before_it(tmp_path):
    # The writer chains onto what the other guards it trusts append (several guards may share a
    # log), so its next checkpoint signs a forged entry that names one of them: `audit verify
    # --key` passes. The docs claimed checkpoints catch forged entries "up to the last one"; they
    # now say this. (A forged entry it can tell is no trusted writer's, such as one without a MAC,
    # the writer now refuses to sign over: tests/test_audit_writer_macs.py.)
    sk = Ed25519PrivateKey.generate()
    signer = ReceiptSigner(sk)
    other = ReceiptSigner(Ed25519PrivateKey.generate())
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p, signer=signer, checkpoint_every=5, trusted_keys={other.key_id: other.public_key})
    for i in range(3):
        log.append({"event": "real", "i": i})
    last = json.loads(p.read_bytes().splitlines()[-1])
    forged = {"seq": last["seq"] + 1, "ts": 1.0, "prev": last["hash"], "record": {"event": "forged"}, "w": other.key_id}
    forged["hash"] = hashlib.sha256(canonical_json(forged)).hexdigest()
    forged["mac"] = "ab" * 32  # made up: the writer holds no key to check the other guard's MACs
    with open(p, "ab") as fh:
        fh.write(canonical_json(forged) + b"\n")
    assert log.append({"event": "real", "i": 3})["seq"] == 5
    log.close()
    report = verify_audit_file(p, trusted_keys={signer.key_id: sk.public_key()}, checkpoint_every=5)
    assert report.ok and report.checkpoints == 2  # seq 1 (the writer's first) and seq 5, over the forged 4
    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "audit-log.md")).read()
    assert "signs the chain as the writer found it" in " ".join(doc.split())



# -- an unverified receipt's key id in a write refusal ---------------------------------------------

def test_a_write_refusal_does_not_print_an_untrusted_receipts_key_id_raw(tmp_path):
    # The key id of a receipt whose key is not trusted is the writer's text, unverified; the scoped
    # refusal printed it raw, so any writer wrote lines (a fake "OK") and terminal escapes into the
    # GuardRefusal message the application logs.
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from guardkit import create, make_kit, models, unit
    from qdrant_guard import GuardRefusal, QdrantClient
    from qdrant_guard.noise import privatize
    from qdrant_guard.receipts import RECEIPT_KEY, ReceiptItem, issue_receipts_batch, receipts_for_payload

    kit = make_kit(tmp_path)
    listed = keys.public_key_to_str(keys.generate_keypair()[1])
    coll = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "noise_on_write": False,
            "intent": {"enabled": False}, "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01},
            "receipt_keys": [listed]}
    owner = QdrantClient(location=":memory:", guard=kit.config({"a": coll}), principal=kit.principal("alice", "hr"))
    create(owner, "a")
    noised, params = privatize(np.asarray(unit(np.random.default_rng(0)), dtype=np.float32), mechanism="gaussian",
                               epsilon=1.0, delta=1e-6, radius=0.01, clip_norm=1.0)
    final = stored_form(noised, distance="Cosine")
    kid = "x\nOK: receipt verified\x1b[2K"
    rec = issue_receipts_batch(ReceiptSigner(Ed25519PrivateKey.generate(), key_id=kid), [ReceiptItem(
        params=params, vector=final, collection="a", point_id=1, vector_name="")])[0]
    point = models.PointStruct(id=1, vector=final.tolist(), payload={"source": "s", RECEIPT_KEY: receipts_for_payload({"": rec})})
    with pytest.raises(GuardRefusal, match="unknown_key|receipt_keys") as err:
        owner.with_principal(kit.principal("bob", "support")).upsert("a", [point])
    msg = str(err.value)
    assert "\n" not in msg and "\x1b" not in msg and repr(kid) in msg


def test_verify_receipt_detail_escapes_an_untrusted_key_id():
    from qdrant_guard.noise import privatize

    v = np.linspace(-1.0, 1.0, 8)
    noised, params = privatize(v / np.linalg.norm(v), mechanism="gaussian", epsilon=4.0, radius=0.5, delta=1e-6)
    stored = stored_form(noised, distance="Euclid")
    kid = "x\nOK: receipt verified"
    receipt = issue_receipt(ReceiptSigner(Ed25519PrivateKey.generate(), key_id=kid), params=params, vector=stored,
                            collection="c", point_id=1)
    for revoked in ((), (kid,)):
        check = verify_receipt(receipt, vector=stored, collection="c", point_id=1, trusted_keys={}, revoked=revoked)
        assert check.reason in ("unknown_key", "revoked_key") and "\n" not in check.detail and repr(kid) in check.detail


# -- an unverified credential's key id ------------------------------------------------------------

def test_a_rejected_credential_does_not_print_its_unverified_key_id_raw():
    # The kid claim is the presenter's text (an agent's): unknown_key printed it raw into the
    # CredentialError the guard raises and the application logs.
    from qdrant_guard.boundary import CREDENTIAL_SIGNATURE_PREFIX, CredentialRejected, verify_credential

    ak = Ed25519PrivateKey.generate()
    kid = "x\nOK: credential verified\x1b[2K"
    body = canonical_json({"v": 1, "agent_id": "a", "boundary": "hr", "iat": 1000, "exp": 2000, "kid": kid,
                           "alg": "Ed25519", "jti": "abc"})

    def b64(data: bytes) -> str:
        import base64

        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    token = f"qgc1.{b64(body)}.{b64(ak.sign(CREDENTIAL_SIGNATURE_PREFIX + body))}"
    with pytest.raises(CredentialRejected) as err:
        verify_credential(token, authorities={"hr": [ak.public_key()]}, now=1500)
    assert err.value.reason == "unknown_key" and "\n" not in str(err.value) and "\x1b" not in str(err.value)
    assert repr(kid) in str(err.value)


def test_a_utility_record_refusal_does_not_print_its_signer_key_id_raw(tmp_path):
    # The record file's signer_key_id is text outside what the signature checks here (the key is
    # not accepted, so nothing was verified): it was printed raw into the ConfigError.
    import base64
    import dataclasses
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from guardkit import make_kit, models, staging_record
    from qdrant_guard import QdrantClient
    from qdrant_guard.utility import UTILITY_DOMAIN

    kit = make_kit(tmp_path)
    rec, docs = staging_record(kit, tmp_path / "guard.json", dim=32)
    sk, pk = keys.generate_keypair()
    kid = "x\nOK: record verified\x1b[2K"
    out = dataclasses.replace(rec, signer_key_id=kid, signature=None)
    sig = base64.b64encode(sk.sign(UTILITY_DOMAIN + out.signed_bytes())).decode("ascii")
    (tmp_path / "forged.json").write_text(dataclasses.replace(out, signature=sig).to_json())
    coll = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
            "intent": {"enabled": False}, "noise": {"epsilon": rec.epsilon, "radius": 0.01},
            "utility": {"record": str(tmp_path / "forged.json")}, "receipt_keys": [keys.public_key_to_str(pk)]}
    owner = QdrantClient(":memory:", guard=kit.config({"c": coll}, epsilon_ceiling={"PII": 5.0}),
                         principal=kit.principal("alice", "hr"))
    owner.create_collection("c", vectors_config=models.VectorParams(size=32, distance=models.Distance.COSINE))
    with pytest.raises(ConfigError, match="is signed by") as err:
        owner.with_principal(kit.principal("bob", "support")).upsert(
            "c", [models.PointStruct(id=1, vector=docs[0].tolist())])
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value) and repr(kid) in str(err.value)
