"""Review of the cryptographic core: receipts, credentials, keys, the audit chain and replay.

Each test pins a defect found in review (it failed before the fix next to it).
"""
from __future__ import annotations

import base64
import io
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from qdrant_client import models

from qdrant_guard import GuardRefusal, Principal, QdrantClient, keys
from qdrant_guard.audit import AuditLog, entry_hash, repair_audit_file, verify_audit_file
from qdrant_guard.boundary import CREDENTIAL_SIGNATURE_PREFIX, CredentialRejected, issue_credential, verify_credential
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import ConfigError, QdrantGuardError
from qdrant_guard.noise_params import NoiseParams, guarantee_sentence
from qdrant_guard.policy import BoundaryConfig, config_from_dict
from qdrant_guard.noise import privatize
from qdrant_guard.receipts import (
    RECEIPT_KEY,
    ReceiptSigner,
    issue_receipt,
    receipts_for_payload,
    stored_form,
    verify_receipt,
)
from qdrant_guard.replay import replay_log
from qdrant_guard.writereceipts import _batch_digest

from groupkit import give_shared_group
from guardkit import create, make_kit, replay_policy_file, unit


def _log(path: Path, n: int, tag: str = "a") -> list[bytes]:
    with AuditLog(path) as log:
        for i in range(n):
            log.append({"event": tag, "i": i})
    return path.read_bytes().splitlines(keepends=True)


# --------------------------------------------------------------------------- audit: inserted lines

def test_replayed_tail_blames_the_replay_not_the_original(tmp_path):
    # Lines 3..6 copied again after line 6: the originals are sound; the copies are the problem.
    lines = _log(tmp_path / "a.jsonl", 6)
    p = tmp_path / "replayed.jsonl"
    p.write_bytes(b"".join(lines + lines[2:]))
    rep = verify_audit_file(p)
    assert (rep.problem, rep.index, rep.valid_prefix, rep.last_seq) == ("inserted", 7, 6, 6), rep.detail
    # Repair keeps all six sound entries and cuts only the replayed copies.
    fixed = repair_audit_file(p)
    assert fixed.ok and fixed.last_seq == 7
    assert p.read_bytes().splitlines(keepends=True)[:6] == lines


def test_spliced_middle_of_another_log_blames_the_splice(tmp_path):
    # Entries 3..5 of another log appended: they chain to nothing in this file.
    own = _log(tmp_path / "a.jsonl", 5)
    other = _log(tmp_path / "b.jsonl", 5, tag="b")
    p = tmp_path / "spliced.jsonl"
    p.write_bytes(b"".join(own + other[2:]))
    rep = verify_audit_file(p)
    assert (rep.problem, rep.index, rep.valid_prefix) == ("inserted", 6, 5), rep.detail


def test_forged_segment_in_front_of_the_real_entries_is_still_blamed(tmp_path):
    # Two forged entries chained from entry 3, followed by the real entries 4..8: the longer chain
    # goes on from the real entry 4, so the forged line 4 is the extra one (as before the fixes
    # above).
    lines = _log(tmp_path / "a.jsonl", 8)
    prev = json.loads(lines[2])["hash"]
    forged = []
    for seq in (4, 5):
        e = {"seq": seq, "ts": 1.0, "prev": prev, "record": {"event": "forged"}}
        e["hash"] = entry_hash(e)
        forged.append(canonical_json(e) + b"\n")
        prev = e["hash"]
    p = tmp_path / "forged.jsonl"
    p.write_bytes(b"".join(lines[:3] + forged + lines[3:]))
    rep = verify_audit_file(p)
    assert (rep.problem, rep.index, rep.valid_prefix) == ("inserted", 4, 3), rep.detail


def test_two_whole_logs_concatenated_report_the_second_genesis(tmp_path):
    # `cat a.jsonl b.jsonl`: the file cannot show which of two chains from genesis is the real
    # one (length proves nothing; see test_audit_review2.py), so it is reported as such and
    # repair keeps the first log only when told to.
    own = _log(tmp_path / "a.jsonl", 5)
    other = _log(tmp_path / "b.jsonl", 3, tag="b")
    p = tmp_path / "both.jsonl"
    p.write_bytes(b"".join(own + other))
    rep = verify_audit_file(p)
    assert (rep.problem, rep.index, rep.valid_prefix, rep.fork) == ("second_genesis", 1, 0, (1, 6)), rep.detail
    fixed = repair_audit_file(p, keep_chain_from=1)
    assert fixed.ok and p.read_bytes().splitlines(keepends=True)[:5] == own


# --------------------------------------------------------------------------- credentials

def _signed_token(authority, **changes):
    # A token signed by the real authority key, with claims an issuer other than
    # issue_credential (or a buggy one) might produce.
    claims = {"v": 1, "agent_id": "alice", "boundary": "hr", "iat": 1000, "exp": 2000,
              "kid": keys.key_id(authority.public_key()), "alg": "Ed25519", "jti": "AAAAAAAAAAAAAAAAAAAAAA"}
    claims.update(changes)
    body = canonical_json(claims)
    sig = authority.sign(CREDENTIAL_SIGNATURE_PREFIX + body)
    return f"qgc1.{_b64url(body)}.{_b64url(sig)}"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.mark.parametrize("jti", ["", "a b", "jti/with+slash", "é"])
def test_credential_whose_jti_cannot_be_revoked_is_refused(jti):
    # revoked_credentials only accepts base64url jtis (BoundaryConfig refuses anything else), so a
    # credential with another jti could never be revoked: it must not be accepted either.
    sk, pk = keys.generate_keypair()
    with pytest.raises(ValueError):
        BoundaryConfig(authority_keys=(keys.public_key_to_str(pk),), revoked_credentials=(jti,))
    with pytest.raises(CredentialRejected) as exc:
        verify_credential(_signed_token(sk, jti=jti), authorities={"hr": [pk]}, now=1500)
    assert exc.value.reason == "malformed" and "jti" in str(exc.value)


@pytest.mark.parametrize("claim", ["agent_id", "boundary"])
def test_credential_with_empty_agent_or_boundary_is_refused(claim):
    # issue_credential and Principal refuse empty ids; the verifier must not mint such a principal.
    sk, pk = keys.generate_keypair()
    token = _signed_token(sk, **{claim: ""})
    with pytest.raises(CredentialRejected) as exc:
        verify_credential(token, authorities={"hr": [pk], "": [pk]}, now=1500)
    assert exc.value.reason == "malformed" and claim in str(exc.value)


@pytest.mark.parametrize("changes,now,reason", [
    ({"exp": 10 ** 400}, 10 ** 12, None),
    ({"exp": 10 ** 400}, 500.0, "not_yet_valid"),
    ({"iat": -(10 ** 400)}, 1500.0, None),
    ({"iat": -(10 ** 400)}, 10 ** 12, "expired"),
])
def test_credential_times_beyond_float_range_do_not_crash(changes, now, reason):
    # JSON ints are unbounded: a signed token with a far-away exp or iat gave OverflowError.
    sk, pk = keys.generate_keypair()
    token = _signed_token(sk, **changes)
    if reason is None:
        v = verify_credential(token, authorities={"hr": [pk]}, now=now)
        assert v.agent_id == "alice"
    else:
        with pytest.raises(CredentialRejected) as exc:
            verify_credential(token, authorities={"hr": [pk]}, now=now)
        assert exc.value.reason == reason


# --------------------------------------------------------------------------- audit replay

def test_replay_counts_lines_of_the_wrong_shape_as_unreadable(tmp_path):
    # A hand-edited or foreign JSON line must be skipped as unreadable, not crash the replay.
    policy = replay_policy_file(make_kit(tmp_path))
    log = tmp_path / "audit.jsonl"
    good = {"op": "query_points", "collection": "docs", "details": {"query_text": "short query"}}
    rows = [
        {"record": ["not", "an", "object"]},
        {"record": {"op": "query_points", "details": "not an object"}},
        {"record": {"op": "query_points", "details": {"query_text": "x", "scan": "oops"}}},
        {"record": {"op": "query_points", "collection": 7, "details": {"query_text": "short query"}}},
        {"record": {"op": ["query_points"]}},
        {"record": {"op": "query_points", "verdict": ["x"], "details": {"query_text": "x"}}},
        {"record": good},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = io.StringIO()
    # Not a hash chain at all: replayed only on request, labelled, and exit 1.
    assert replay_log(str(log), str(policy), out=out, mode="unverified") == 1
    text = out.getvalue()
    assert "UNVERIFIED REPLAY" in text, text
    assert "replayed 1 logged queries" in text, text
    assert "6 unreadable" in text, text


# --------------------------------------------------------------------------- keys

def _secret_key_text() -> tuple[str, str]:
    # The 64-byte secret key form of other Ed25519 tools (seed || public key), written as a
    # public key string by mistake.
    sk, _ = keys.generate_keypair()
    seed = sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            serialization.NoEncryption())
    raw = seed + keys.public_key_bytes(sk.public_key())
    return "ed25519:" + base64.b64encode(raw).decode(), base64.b64encode(seed).decode()


def test_key_errors_do_not_echo_a_pasted_secret_key(tmp_path):
    text, seed_b64 = _secret_key_text()
    with pytest.raises(keys.KeyStoreError) as exc:
        keys.public_key_from_str(text)
    assert seed_b64[:16] not in str(exc.value)
    assert "64 bytes" in str(exc.value)
    f = tmp_path / "authority.pub"
    f.write_text(text + "\n")
    with pytest.raises(keys.KeyStoreError) as exc:
        keys.load_public_key(str(f))
    assert seed_b64[:16] not in str(exc.value)
    # Invalid base64 with secret-looking content is not echoed whole either.
    with pytest.raises(keys.KeyStoreError) as exc:
        keys.public_key_from_str(text[:-3] + "!!!")
    assert seed_b64[:16] not in str(exc.value)


def test_policy_error_for_a_pasted_secret_key_does_not_echo_it(tmp_path):
    text, seed_b64 = _secret_key_text()
    kit = make_kit(tmp_path)
    cfg = config_from_dict({"boundaries": {"hr": {"authority_keys": [text]}},
                            "collections": {"c": {"class": "PII", "owner": "hr"}}}, source="p")
    with pytest.raises(QdrantGuardError) as exc:
        QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    assert "authority_keys" in str(exc.value)
    assert seed_b64[:16] not in str(exc.value)


# --------------------------------------------------------------------------- receipts

def _receipt(dim: int = 8):
    sk, pk = keys.generate_keypair()
    signer = ReceiptSigner(sk)
    prm = NoiseParams("gaussian", "3", 1.0, 1e-6, 0.5, 1.0, 0.1, 2.0 ** -10, "aes256ctr-getrandom-v1",
                      dim, "float32", guarantee_sentence("gaussian", 1.0, 1e-6, 0.5, 1.0, 0.1, 2.0 ** -10, dim,
                                                         "float32"))
    v = stored_form(np.arange(1, dim + 1, dtype=float), distance="Cosine")
    rec = issue_receipt(signer, params=prm, vector=v, collection="c", point_id=1, issued_at=1000.0)
    return rec, v, {signer.key_id: pk}


@pytest.mark.parametrize("now,max_age_s", [(float("nan"), 10.0), (1000.0, float("nan")),
                                           (float("inf"), 10.0)])
def test_receipt_age_check_refuses_nan_instead_of_passing_everything(now, max_age_s):
    # NaN compares false with everything, so a NaN now or max_age_s let a receipt of any age pass.
    rec, v, trusted = _receipt()
    assert verify_receipt(rec, vector=v, collection="c", point_id=1, trusted_keys=trusted,
                          now=10 ** 9, max_age_s=10.0).reason == "expired"
    with pytest.raises(ValueError, match="now|max_age_s"):
        verify_receipt(rec, vector=v, collection="c", point_id=1, trusted_keys=trusted,
                       now=now, max_age_s=max_age_s)


def test_guard_refuses_to_sign_with_a_revoked_signing_key(tmp_path):
    # Revoking the guard's own key (say it leaked) without rotating signing_key let the guard go on
    # signing receipts (ALLOW_NOISED) and audit checkpoints with it; every such receipt is then
    # rejected as revoked_key. The client must refuse to start instead.
    kit = make_kit(tmp_path)
    own = keys.key_id(keys.load_private_key(kit.guard_key_path).public_key())
    cfg = kit.config({"c": {"class": "PII", "owner": "hr", "noise_on_write": True}},
                     receipts={"revoked_keys": [own]})
    with pytest.raises(ConfigError) as exc:
        QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    assert own in str(exc.value) and "signing_key" in str(exc.value)


def _last_audit(kit) -> dict:
    return json.loads((kit.tmp / "audit.jsonl").read_bytes().splitlines()[-1])["record"]


def _agent_writer(tmp_path, *, noise_on_write: bool):
    """The kit, the hr owner's client of a PII collection, a support writer's view of it, and the
    writer's own receipt-signing key (trusted by the policy)."""
    kit = make_kit(tmp_path)
    agent_sk, agent_pk = keys.generate_keypair()
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": noise_on_write,
                              "noise": {"radius": 0.01}, "intent": {"enabled": False}}},
                     receipts={"trusted_keys": [keys.public_key_to_str(agent_pk)]})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    return kit, owner, owner.with_principal(kit.principal("bob", "support")), agent_sk


def test_receipted_write_records_its_receipts_in_the_manifest(tmp_path):
    # Every decision's manifest carries reconstruction_resistance_receipt (README); a write
    # accepted on the writer's own receipts recorded null there, so the audit log did not say
    # which signed statement the stored vectors rest on.
    kit, owner, client, agent_sk = _agent_writer(tmp_path, noise_on_write=True)
    rng = np.random.default_rng(3)
    noised, params = privatize(np.asarray(unit(rng), dtype=np.float32), mechanism="gaussian", epsilon=1.0,
                               delta=1e-6, radius=0.01, clip_norm=1.0)
    final = stored_form(noised, distance="Cosine")
    rec = issue_receipt(ReceiptSigner(agent_sk), params=params, vector=final, collection="pii", point_id=1)
    client.upsert("pii", [models.PointStruct(id=1, vector=final.tolist(),
                                             payload={RECEIPT_KEY: receipts_for_payload({"": rec})})])
    last = _last_audit(kit)
    assert last["verdict"] == "ALLOW_RECEIPTED"
    assert last["manifest"]["reconstruction_resistance_receipt"] == _batch_digest([rec])
    # A call that mixes a receipted point and a point the guard noises records both.
    rec2 = issue_receipt(ReceiptSigner(agent_sk), params=params, vector=final, collection="pii", point_id=2)
    client.upsert("pii", [
        models.PointStruct(id=2, vector=final.tolist(), payload={RECEIPT_KEY: receipts_for_payload({"": rec2})}),
        models.PointStruct(id=3, vector=unit(rng)),
    ])
    last = _last_audit(kit)
    assert last["verdict"] == "ALLOW_NOISED"
    stored = {p.id: p.payload[RECEIPT_KEY]["vectors"][""] for p in owner.retrieve("pii", [2, 3])}
    assert last["manifest"]["reconstruction_resistance_receipt"] == _batch_digest([stored[2], stored[3]])


@pytest.mark.parametrize("container", ["garbage", {"v": 2, "vectors": {}}, [1], {"v": 1, "vectors": []}])
@pytest.mark.parametrize("who", [("bob", "support"), ("alice", "hr")])
def test_malformed_receipt_container_is_an_audited_invalid_receipt(tmp_path, container, who):
    # A forged receipt container is refused like any receipt that does not verify: INVALID_RECEIPT,
    # audited, nothing written. It raised an unaudited ReceiptError instead.
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                              "raw_in_boundary": True, "intent": {"enabled": False}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    client = owner.with_principal(kit.principal(*who))
    rng = np.random.default_rng(5)
    with pytest.raises(GuardRefusal) as exc:
        client.upsert("pii", [models.PointStruct(id=1, vector=unit(rng), payload={RECEIPT_KEY: container}),
                              models.PointStruct(id=2, vector=unit(rng))])
    assert exc.value.verdict == "INVALID_RECEIPT"
    last = _last_audit(kit)
    assert last["verdict"] == "INVALID_RECEIPT" and last["point_ids"] == [1]
    assert owner.count("pii").count == 0


def test_group_readable_allowance_does_not_accept_a_group_writable_key(tmp_path):
    # allow_group_readable lets the group read the key; a group member who may write it could put
    # their own key in its place and have the guard sign with it.
    sk, _ = keys.generate_keypair()
    p = tmp_path / "k.pem"
    p.write_bytes(keys.private_key_to_pem(sk))
    give_shared_group(p)  # a group only this uid and root are in may write it
    p.chmod(0o660)
    with pytest.raises(keys.KeyStoreError, match="660"):
        keys.load_private_key(p, allow_group_readable=True)
    p.chmod(0o620)
    with pytest.raises(keys.KeyStoreError):
        keys.load_private_key(p, allow_group_readable=True)
    p.chmod(0o640)
    assert keys.load_private_key(p, allow_group_readable=True)


def test_key_text_given_instead_of_a_path_is_not_echoed(tmp_path):
    # signing_key = the PEM text itself (e.g. from a secret store) instead of a file path: the
    # "cannot read key file" error printed the whole private key.
    sk, _ = keys.generate_keypair()
    pem = keys.private_key_to_pem(sk).decode()
    body = pem.splitlines()[1]
    for load in (keys.load_private_key, keys.load_public_key):
        with pytest.raises(keys.KeyStoreError) as exc:
            load(pem)
        assert body[-20:] not in str(exc.value) and "path" in str(exc.value)
    cfg = config_from_dict({"signing_key": pem, "collections": {}}, source="p")
    with pytest.raises(QdrantGuardError) as exc:
        QdrantClient(":memory:", guard=cfg)
    assert body[-20:] not in str(exc.value)


def _replay_files(tmp_path, head: str, collection: str, rec: dict) -> tuple[str, str]:
    """A policy (``head``, boundary hr, one PII collection owned by hr) and a one-query log."""
    kit = make_kit(tmp_path)
    policy = tmp_path / "policy.toml"
    policy.write_text(textwrap.dedent(head) + textwrap.dedent(f"""
        [boundaries.hr]
        authority_keys = ["{kit.authority_pub['hr']}"]
        [collections.{collection}]
        class = "PII"
        owner = "hr"
        [collections.{collection}.intent]
        enabled = false
    """))
    log = tmp_path / "replayed.jsonl"
    with AuditLog(log) as audit:  # replay refuses a log that does not verify
        audit.append(rec)
    return str(log), str(policy)


def test_replay_under_a_policy_that_refuses_the_logged_collection(tmp_path):
    # A new policy that drops a collection with unlisted = "refuse" blocks its queries; replay
    # aborted on the ConfigError instead of reporting them.
    log, policy = _replay_files(tmp_path, 'unlisted = "refuse"\n', "other", {
        "op": "query_points", "collection": "docs", "verdict": "ALLOW", "details": {"query_text": "short query"}})
    out = io.StringIO()
    assert replay_log(log, policy, out=out) == 0
    text = out.getvalue()
    assert "replayed 1 logged queries" in text and "newly_blocked" in text, text
    assert "REFUSED_CROSS_BOUNDARY" in text, text


# --------------------------------------------------------------------------- audit completeness

def test_refusal_of_a_principal_named_with_a_lone_surrogate_is_audited(tmp_path):
    # A self-asserted agent id is any Python str; one that cannot be UTF-8 encoded made the audit
    # append fail, so the cross-boundary attempt was refused with AuditError and left no entry.
    kit = make_kit(tmp_path)
    cfg = kit.config({"c": {"class": "PII", "owner": "hr", "intent": {"enabled": False}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "c")
    intruder = owner.with_principal(Principal("\ud800mallory", "support"))
    with pytest.raises(GuardRefusal) as exc:
        intruder.scroll("c")
    assert exc.value.verdict == "REFUSED_CROSS_BOUNDARY"
    last = _last_audit(kit)
    assert last["verdict"] == "REFUSED_CROSS_BOUNDARY" and "mallory" in last["principal"]
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


@pytest.mark.parametrize("form", ["text", "bytes", "list"])
def test_receipt_that_is_not_a_json_object_is_an_audited_invalid_receipt(tmp_path, form):
    # verify_receipt reads a receipt given as JSON text, but the payload container stores receipt
    # objects: a receipt sent as text (or any non-object) crashed the write unaudited.
    kit, owner, client, agent_sk = _agent_writer(tmp_path, noise_on_write=False)
    noised, params = privatize(np.asarray(unit(np.random.default_rng(1)), dtype=np.float32), mechanism="gaussian",
                               epsilon=1.0, delta=1e-6, radius=0.01, clip_norm=1.0)
    final = stored_form(noised, distance="Cosine")
    rec = issue_receipt(ReceiptSigner(agent_sk), params=params, vector=final, collection="pii", point_id=1)
    sent = {"text": canonical_json(rec).decode(), "bytes": canonical_json(rec), "list": [rec]}[form]
    with pytest.raises(GuardRefusal) as exc:
        client.upsert("pii", [models.PointStruct(id=1, vector=final.tolist(),
                                                 payload={RECEIPT_KEY: {"v": 1, "vectors": {"": sent}}})])
    assert exc.value.verdict == "INVALID_RECEIPT"
    assert _last_audit(kit)["verdict"] == "INVALID_RECEIPT"
    assert owner.count("pii").count == 0


@pytest.mark.parametrize("pad", ["\n", " ", "\r\n"])
def test_token_with_surrounding_whitespace_names_the_whitespace(pad):
    # A token read from a file keeps its newline; it was rejected as bad_signature ("signature is
    # not canonical base64url"), which sends the user after the wrong problem.
    sk, pk = keys.generate_keypair()
    token = issue_credential(sk, agent_id="alice", boundary="hr", now=1000)
    with pytest.raises(CredentialRejected) as exc:
        verify_credential(token + pad, authorities={"hr": [pk]}, now=1500)
    assert exc.value.reason == "malformed" and "whitespace" in str(exc.value)
    assert verify_credential(token, authorities={"hr": [pk]}, now=1500).agent_id == "alice"


def test_replay_neither_creates_nor_needs_the_policys_live_audit_log(tmp_path):
    # replay builds a Guard from the policy only to evaluate text: it created the policy's audit
    # log file, and refused to run (AuditIntegrityError) when that live log had a torn tail, as a
    # log whose writer crashed has.
    log, policy = _replay_files(tmp_path, 'audit_log = "live.jsonl"\n', "docs", {
        "op": "query_points", "collection": "docs", "details": {"query_text": "short query"}})
    assert replay_log(log, policy, out=io.StringIO()) == 0
    assert not (tmp_path / "live.jsonl").exists()
    (tmp_path / "live.jsonl").write_bytes(b'{"seq":1,"torn')
    out = io.StringIO()
    assert replay_log(log, policy, out=out) == 0
    assert "replayed 1 logged queries" in out.getvalue()
    assert (tmp_path / "live.jsonl").read_bytes() == b'{"seq":1,"torn'


@pytest.mark.parametrize("model_id", [7, b"m", ["m"]])
def test_an_embedder_model_id_that_is_not_a_str_is_refused_at_construction(tmp_path, model_id):
    # Receipts record the embedder's model_id: a wrong type made every noised Document write raise
    # a TypeError inside the receipt batch, after the checks and without an audit entry.
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True, "text_field": "text",
                              "intent": {"enabled": False}}})

    def embed(texts):
        return np.ones((len(texts), 8))

    embed.model_id = model_id
    with pytest.raises(TypeError, match="model_id must be a str"):
        QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=embed)
    with pytest.raises(TypeError, match="embedder= must be a callable"):
        QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder="model-name")
