"""Guards sharing one audit log can refuse forged entries under each other's writer id.

Without ``sign_every_entry`` a writer follows an entry under another trusted guard's id unchecked
(it holds no key for that guard's MACs) and its next checkpoint signs it. With it, every entry a
writer writes is a signed checkpoint, and an entry under another trusted guard's id must carry one
that verifies under that guard's public key, or the append (or the open) is refused and nothing
is written; `audit verify --every-entry-signed` names such entries with public keys only. All on real
files; every test named ``*refused*`` appends or opens without error on
the code before this knob (which had no ``sign_every_entry``: those tests fail on the argument).
"""
from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from qdrant_guard import AuditUnauthenticatedError, keys
from qdrant_guard.audit import AuditLog, verify_audit_file
from qdrant_guard.audit_mac import writer_keys
from qdrant_guard.audit_verify import CHECKPOINT_PREFIX
from qdrant_guard.canonical import canonical_json
from qdrant_guard.cli import main
from qdrant_guard.errors import GuardArgumentTypeError, GuardArgumentValueError
from qdrant_guard.policy import GuardConfig
from qdrant_guard.receipts import ReceiptSigner

ROOT = Path(__file__).resolve().parents[1]


def _key(tmp_path, name):
    sk, _ = keys.generate_keypair()
    path = tmp_path / name
    path.write_bytes(keys.private_key_to_pem(sk))
    path.chmod(0o600)
    (tmp_path / (name + ".pub")).write_text(keys.public_key_to_str(sk.public_key()) + "\n")
    return sk, path


def _two(tmp_path):
    ska, _ = _key(tmp_path, "a.key")
    skb, _ = _key(tmp_path, "b.key")
    return ska, skb, ReceiptSigner(ska), ReceiptSigner(skb)


def _log(p, me, other, on=True, every=5):
    return AuditLog(p, signer=me, checkpoint_every=every, trusted_keys={other.key_id: other.public_key},
                    sign_every_entry=on)


def _one_entry_each(tmp_path, sa, sb):
    """A shared log where guard A, then guard B (each signing every entry) wrote one entry."""
    p = tmp_path / "audit.jsonl"
    a, b = _log(p, sa, sb), _log(p, sb, sa)
    a.append({"event": "e"})
    b.append({"event": "e"})
    a.close()
    b.close()
    return p


def _last(p) -> dict:
    return json.loads(Path(p).read_bytes().splitlines()[-1])


def _forged(p, w: str, ckpt: dict | None = None, sign_with=None, kid: str | None = None) -> None:
    # What anyone who can write the file can make: an entry under guard B's id, hash recomputed,
    # any MAC (B's MAC key is not theirs), and a checkpoint they choose or sign with a key of theirs.
    last = _last(p)
    entry = {"seq": last["seq"] + 1, "ts": 1.0, "prev": last["hash"],
             "record": {"event": "write", "verdict": "ALLOWED", "forged": True}, "w": w}
    entry["hash"] = hashlib.sha256(canonical_json(entry)).hexdigest()
    entry["mac"] = "ab" * 32
    if sign_with is not None:
        sig = sign_with.sign(CHECKPOINT_PREFIX + bytes.fromhex(entry["hash"]))
        ckpt = {"kid": kid or w, "sig": base64.b64encode(sig).decode("ascii")}
    if ckpt is not None:
        entry["ckpt"] = ckpt
    with open(p, "ab") as fh:
        fh.write(canonical_json(entry) + b"\n")


def _refused(log, p, seq, why):
    before = Path(p).read_bytes()
    with pytest.raises(AuditUnauthenticatedError) as err:
        log.append({"event": "write", "after": "forgery"})
    assert err.value.seqs == (seq,)
    assert why in str(err.value) and "audit_sign_every_entry" in str(err.value)
    assert Path(p).read_bytes() == before  # nothing written: no signature of A's covers it


def test_two_guards_signing_every_entry_accept_each_others_entries(tmp_path, capsys):
    ska, skb, sa, sb = _two(tmp_path)
    p = tmp_path / "audit.jsonl"
    a, b = _log(p, sa, sb), _log(p, sb, sa)
    for i in range(11):
        (a, b)[i % 3 == 2].append({"event": "e", "i": i})
    a.close()
    b.close()
    lines = [json.loads(x) for x in p.read_bytes().splitlines()]
    assert all(e["ckpt"]["kid"] == e["w"] for e in lines)  # each entry signed by its own writer
    again = _log(p, sa, sb)  # opens on B's signed last entry
    again.append({"event": "reopened"})
    again.close()
    rep = verify_audit_file(p, trusted_keys={sa.key_id: sa.public_key, sb.key_id: sb.public_key},
                            checkpoint_every=5, writer_keys=writer_keys([ska, skb]))
    assert rep.ok and rep.entries == rep.checkpoints == 12, rep.detail
    assert dict(rep.checkpoint_keys) == {sa.key_id: 9, sb.key_id: 3}
    assert main(["audit", "verify", str(p), "--key", str(tmp_path / "a.key.pub"),
                 "--key", str(tmp_path / "b.key.pub"), "--checkpoint-every", "5"]) == 0
    assert "12 entries, hash chain intact, 12 signed checkpoint(s) verified" in capsys.readouterr().out


def test_forged_entry_under_the_other_guards_id_is_refused_on_append(tmp_path):
    ska, skb, sa, sb = _two(tmp_path)
    p = tmp_path / "audit.jsonl"
    a = _log(p, sa, sb)
    for i in range(3):
        a.append({"event": "e", "i": i})
    _forged(p, sb.key_id)
    _refused(a, p, 4, "carries no signature by that writer's key")


def test_limit_without_the_knob_the_same_forgery_is_signed_over(tmp_path):
    # The pinned limit the knob closes: off, the forged entry is followed and the writer's next
    # checkpoint signs it; only `audit verify --writer-key` with B's key names it.
    ska, skb, sa, sb = _two(tmp_path)
    p = tmp_path / "audit.jsonl"
    a = _log(p, sa, sb, on=False)
    for i in range(3):
        a.append({"event": "e", "i": i})
    _forged(p, sb.key_id)
    assert "ckpt" in a.append({"event": "e", "i": 4})  # seq 5: a checkpoint over the forgery
    a.close()
    rep = verify_audit_file(p, trusted_keys={sa.key_id: sa.public_key, sb.key_id: sb.public_key},
                            checkpoint_every=5)
    assert rep.ok
    assert verify_audit_file(p, writer_keys=writer_keys([ska, skb])).unauthenticated == (4,)


def test_forged_entry_with_a_signature_by_another_key_is_refused(tmp_path):
    ska, skb, sa, sb = _two(tmp_path)
    p = tmp_path / "audit.jsonl"
    a = _log(p, sa, sb)
    a.append({"event": "e"})
    forger = ReceiptSigner(keys.generate_keypair()[0])
    _forged(p, sb.key_id, sign_with=forger)  # kid says B, the signature is the forger's
    _refused(a, p, 2, "its signature does not verify under that writer's public key")


def test_forged_entry_with_a_signature_copied_from_a_genuine_entry_is_refused(tmp_path):
    ska, skb, sa, sb = _two(tmp_path)
    p = tmp_path / "audit.jsonl"
    a, b = _log(p, sa, sb), _log(p, sb, sa)
    a.append({"event": "e"})
    genuine = b.append({"event": "e"})["ckpt"]
    a.append({"event": "e"})
    _forged(p, sb.key_id, ckpt=genuine)  # B's signature, over another entry's hash
    _refused(a, p, 4, "its signature does not verify under that writer's public key")


def test_forged_entry_signed_under_the_writers_own_id_by_another_key_is_refused(tmp_path):
    # A checkpoint under A's own id on an entry naming B is not B's signature.
    ska, skb, sa, sb = _two(tmp_path)
    p = tmp_path / "audit.jsonl"
    a = _log(p, sa, sb)
    own = a.append({"event": "e"})["ckpt"]
    _forged(p, sb.key_id, ckpt=own)
    _refused(a, p, 2, "carries no signature by that writer's key")


def test_forged_entry_is_refused_on_open(tmp_path):
    ska, skb, sa, sb = _two(tmp_path)
    p = tmp_path / "audit.jsonl"
    a = _log(p, sa, sb)
    for i in range(3):
        a.append({"event": "e", "i": i})
    a.close()
    _forged(p, sb.key_id)
    before = p.read_bytes()
    with pytest.raises(AuditUnauthenticatedError) as err:
        _log(p, sa, sb)
    assert err.value.seqs == (4,) and "carries no signature" in str(err.value)
    assert p.read_bytes() == before


def test_guard_without_the_knob_on_a_shared_log_is_refused_with_the_fix(tmp_path):
    # Every guard of the log must sign: B's unsigned entries read like forged ones.
    ska, skb, sa, sb = _two(tmp_path)
    p = tmp_path / "audit.jsonl"
    a, b = _log(p, sa, sb), _log(p, sb, sa, on=False)
    a.append({"event": "e"})
    b.append({"event": "e"})
    _refused(a, p, 2, "carries no signature by that writer's key")


def test_arguments_are_checked(tmp_path):
    with pytest.raises(GuardArgumentValueError, match="pass signer"):
        AuditLog(tmp_path / "a.jsonl", sign_every_entry=True)
    with pytest.raises(GuardArgumentTypeError, match="sign_every_entry must be bool"):
        AuditLog(tmp_path / "a.jsonl", sign_every_entry=1)


def test_policy_knob_needs_audit_log_and_signing_key(tmp_path):
    with pytest.raises(ValueError, match="audit_sign_every_entry = true .* audit_log is not set"):
        GuardConfig.model_validate({"audit_sign_every_entry": True})
    with pytest.raises(ValueError, match="signing_key is not set"):
        GuardConfig.model_validate({"audit_sign_every_entry": True, "audit_log": str(tmp_path / "a.jsonl")})
    assert GuardConfig.model_validate({}).audit_sign_every_entry is False


def test_two_guarded_clients_sharing_a_log_refuse_a_forgery_under_the_others_id(tmp_path):
    import numpy as np
    from qdrant_client.http import models

    from guardkit import make_kit, unit

    p = tmp_path / "audit.jsonl"
    kits, clients = [], []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        kits.append(make_kit(tmp_path / name))
    pubs = [keys.public_key_to_str(keys.load_private_key(k.guard_key_path).public_key()) for k in kits]
    pol = {"docs": {"class": "PII", "owner": "hr", "intent": {"enabled": False}}}
    for me, kit in enumerate(kits):
        cfg = kit.config(pol, audit_log=str(p), audit_trusted_keys=[pubs[1 - me]], audit_sign_every_entry=True)
        clients.append(__import__("guardkit").QdrantClient(":memory:", guard=cfg,
                                                           principal=kit.principal("alice", "hr")))
    a, b = clients
    rng = np.random.default_rng(1)
    for c in (a, b):
        c.create_collection("docs", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        c.upsert("docs", [models.PointStruct(id=1, vector=unit(rng), payload={"source": "s"})])
    lines = [json.loads(x) for x in p.read_bytes().splitlines()]
    assert {e["w"] for e in lines} == {keys.key_id(keys.public_key_from_str(k)) for k in pubs}
    assert all(e["ckpt"]["kid"] == e["w"] for e in lines)  # every entry of both guards signed
    rep = verify_audit_file(p, trusted_keys={keys.key_id(keys.public_key_from_str(k)): keys.public_key_from_str(k)
                                             for k in pubs})
    assert rep.ok and rep.checkpoints == rep.entries == len(lines)
    _forged(p, lines[-1]["w"])  # under B's id: the last entry is B's
    before = p.read_bytes()
    with pytest.raises(AuditUnauthenticatedError):
        a.upsert("docs", [models.PointStruct(id=2, vector=unit(rng), payload={"source": "s"})])
    assert p.read_bytes() == before
    for c in clients:
        c.close()


def test_verify_with_public_keys_names_an_entry_its_writer_did_not_sign(tmp_path, capsys):
    # The forgery a writer with the knob refuses at its next append, found by a verifier holding
    # public keys only (before, only --writer-key with B's private key named it).
    ska, skb, sa, sb = _two(tmp_path)
    p = _one_entry_each(tmp_path, sa, sb)
    both = {sa.key_id: sa.public_key, sb.key_id: sb.public_key}
    assert verify_audit_file(p, trusted_keys=both, signed_entries=True).ok
    pubs = ["--key", str(tmp_path / "a.key.pub"), "--key", str(tmp_path / "b.key.pub")]
    assert main(["audit", "verify", str(p), *pubs, "--every-entry-signed"]) == 0
    assert "every entry signed by its writer (--every-entry-signed): 2 signatures verified" in capsys.readouterr().out
    _forged(p, sb.key_id)
    _forged(p, sb.key_id, sign_with=sa, kid=sa.key_id)  # a valid signature, but A's, on an entry naming B
    assert verify_audit_file(p, trusted_keys=both).ok  # without it: every checkpoint present verifies
    rep = verify_audit_file(p, trusted_keys=both, signed_entries=True)
    assert rep.problem == "unauthenticated" and rep.unauthenticated == (3, 4) and rep.last_seq == 2, rep.detail
    assert main(["audit", "verify", str(p), *pubs, "--every-entry-signed"]) == 1
    assert "seq 3 carries no signature by its writer" in capsys.readouterr().out
    assert main(["audit", "verify", str(p), "--every-entry-signed"]) == 2
    with pytest.raises(GuardArgumentValueError, match="pass the public key"):
        verify_audit_file(p, signed_entries=True)


def _torn_after_forgery(tmp_path):
    ska, skb, sa, sb = _two(tmp_path)
    p = _one_entry_each(tmp_path, sa, sb)
    _forged(p, sb.key_id)
    with open(p, "ab") as fh:
        fh.write(b'{"seq":4,"torn')  # what makes the log need a repair
    return p, sa, sb


def test_signed_repair_over_a_forgery_under_the_other_guards_id_is_refused(tmp_path):
    from qdrant_guard.audit import repair_audit_file

    p, sa, sb = _torn_after_forgery(tmp_path)
    before = p.read_bytes()
    both = {sa.key_id: sa.public_key, sb.key_id: sb.public_key}
    with pytest.raises(AuditUnauthenticatedError) as err:
        repair_audit_file(p, signer=sa, trusted_keys=both, checkpoint_every=5, sign_every_entry=True)
    assert err.value.seqs == (3,) and p.read_bytes() == before
    # Knob off (as before): the repair entry, A's checkpoint, keeps and signs the forgery.
    rep = repair_audit_file(p, signer=sa, trusted_keys=both, checkpoint_every=5)
    assert rep.ok and rep.last_seq == 4


def test_cli_repair_takes_the_knob_from_the_trust_policy(tmp_path, capsys):
    p, sa, sb = _torn_after_forgery(tmp_path)
    before = p.read_bytes()
    pol = tmp_path / "policy.toml"
    pol.write_text(f'signing_key = "{tmp_path / "a.key"}"\naudit_log = "{p}"\n'
                   f'audit_trusted_keys = ["{tmp_path / "b.key.pub"}"]\naudit_sign_every_entry = true\n')
    code = main(["audit", "repair", str(p), "--signing-key", str(tmp_path / "a.key"), "--trust-policy", str(pol),
                 "--checkpoint-every", "5"])
    assert code != 0 and p.read_bytes() == before
    assert "seq 3" in capsys.readouterr().err
