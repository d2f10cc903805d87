"""``audit_signed_from``: the guard holds its own log to the seq where signing began.

Without it, a signing guard that opens a log rewritten in format v1 from some seq on (writer ids,
MACs and checkpoints dropped, hashes recomputed) takes it for a log begun without a key, logs an
``audit_unsigned_entries_adopted`` alert, and its next checkpoint signs over the rewrite; only
``audit verify --signed-from SEQ`` named it afterwards. With the setting the guard refuses such a
log on open and such entries appended before its next append, and a log ending before that seq,
nothing written; ``audit verify --policy``, ``audit repair --trust-policy`` and ``audit replay
--trust-policy`` take the seq from the policy. Real files, real Ed25519 keys, guarded clients in
local mode, the CLI in process. Every test not marked as a control fails on the code before
(audit.py, guard_config.py, pipeline.py, cli_audit.py put back: the setting is an unknown key there).
"""
from __future__ import annotations

import hashlib
import logging

import pytest
from qdrant_client import models

from guardkit import Recorder, create, make_kit, one_logged_query, replay_policy_file
from qdrant_guard import QdrantClient, keys
from qdrant_guard.audit import GENESIS, AuditLog, verify_audit_file
from qdrant_guard.canonical import canonical_json
from qdrant_guard.cli import main
from qdrant_guard.errors import AuditIntegrityError, AuditUnauthenticatedError, ConfigError
from qdrant_guard.policy import config_from_dict
from qdrant_guard.receipts import ReceiptSigner
from test_review55 import _as_v1

DOCS = {"docs": {"class": "PII", "owner": "hr", "intent": {"enabled": False}}}


def _guard(kit, **extra):
    """A guarded client of alice@hr on ``docs`` under the kit's policy plus ``extra``."""
    return QdrantClient(":memory:", guard=kit.config(DOCS, **extra), principal=kit.principal("alice", "hr"),
                        embedder=Recorder())


def _query(c):
    create(c, "docs")
    c.query_points("docs", query=models.Document(text="short query", model="hashing"))


def _alerts(caplog, event):
    return [r.qdrant_guard_alert for r in caplog.records
            if getattr(r, "qdrant_guard_alert", {}).get("event") == event]


def _v1_line(seq, prev, record):
    """An entry in format v1 as anyone who can write the file makes one (no key needed)."""
    e = {"seq": seq, "ts": 1.0, "prev": prev, "record": record}
    e["hash"] = hashlib.sha256(canonical_json(e)).hexdigest()
    return canonical_json(e) + b"\n", e["hash"]


# ------------------------------------------------------------------ the guard on open

def test_a_guard_with_signed_from_refuses_a_log_rewritten_in_v1_nothing_written(tmp_path, caplog):
    kit, log = one_logged_query(tmp_path, audit_signed_from=1)
    _as_v1(log)
    before = log.read_bytes()
    n = len(before.splitlines())
    with caplog.at_level(logging.WARNING, logger="qdrant_guard.audit"):
        with pytest.raises(AuditUnauthenticatedError) as err:
            _guard(kit, audit_signed_from=1)
    msg = str(err.value)
    assert err.value.seqs == tuple(range(1, n + 1))
    assert "at or after seq 1, where signing began (signed_from)" in msg
    assert "`qdrant-guard audit repair` cannot cut such entries" in msg and "--signed-from 1" in msg
    assert "move it aside" in msg and "--signing-key" not in msg  # no repair offered: it would keep them
    assert log.read_bytes() == before
    (alert,) = _alerts(caplog, "audit_unauthenticated_entry")
    assert alert["seqs"] == list(range(1, n + 1)) and alert["path"] == str(log)
    assert _alerts(caplog, "audit_unsigned_entries_adopted") == []


def test_control_without_signed_from_the_guard_signs_over_the_rewrite(tmp_path, caplog):
    # Control (the gap): the same rewrite, adopted with a WARNING and signed over.
    kit, log = one_logged_query(tmp_path)
    _as_v1(log)
    with caplog.at_level(logging.WARNING, logger="qdrant_guard.audit"):
        c = _guard(kit)
        _query(c)
        c.close()
    assert len(_alerts(caplog, "audit_unsigned_entries_adopted")) == 1
    key = keys.load_private_key(kit.guard_key_path)
    rep = verify_audit_file(log, trusted_keys={keys.key_id(key.public_key()): key.public_key()})
    assert rep.ok and rep.checkpoints == 1, rep.detail


def test_a_rewrite_from_the_seq_signing_began_is_refused_and_the_legacy_prefix_is_not(tmp_path):
    kit = make_kit(tmp_path)
    log = tmp_path / "audit.jsonl"
    unsigned = AuditLog(log)  # a guard without signing_key began it: seq 1, 2 in format v1
    unsigned.append({"event": "a"})
    unsigned.append({"event": "b"})
    unsigned.close()
    c = _guard(kit)
    _query(c)  # its first signed entry: seq 3
    c.close()
    signed_from = verify_audit_file(log, trusted_keys=_trusted(kit)).signed_from
    assert signed_from == 3
    c = _guard(kit, audit_signed_from=3)  # control: as written, it opens and appends
    _query(c)
    c.close()
    _as_v1(log)
    with pytest.raises(AuditUnauthenticatedError) as err:
        _guard(kit, audit_signed_from=3)
    assert err.value.seqs[0] == 3 and 1 not in err.value.seqs and 2 not in err.value.seqs


def _trusted(kit):
    pk = keys.load_private_key(kit.guard_key_path).public_key()
    return {keys.key_id(pk): pk}


def test_a_guard_with_signed_from_refuses_a_log_that_ends_before_it(tmp_path, caplog):
    kit = make_kit(tmp_path)
    log = tmp_path / "audit.jsonl"
    unsigned = AuditLog(log)
    for i in range(3):
        unsigned.append({"event": "a", "i": i})
    unsigned.close()
    c = _guard(kit)
    _query(c)
    c.close()
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:3]))  # the signed entries (seq 4 on) cut off its end
    with caplog.at_level(logging.WARNING, logger="qdrant_guard.audit"):
        with pytest.raises(AuditIntegrityError) as err:
            _guard(kit, audit_signed_from=4)
    assert "ends at seq 3, before seq 4, where signing began (audit_signed_from = 4)" in str(err.value)
    assert "cannot cut such entries" in str(err.value)
    assert log.read_bytes() == b"".join(lines[:3])
    (alert,) = _alerts(caplog, "audit_signed_entries_missing")
    assert (alert["last_seq"], alert["signed_from"]) == (3, 4)
    log.write_bytes(b"")  # emptied
    with pytest.raises(AuditIntegrityError, match="ends at seq 0, before seq 4"):
        _guard(kit, audit_signed_from=4)
    assert log.read_bytes() == b""


def test_control_signed_from_1_starts_a_new_log_and_reopens_it(tmp_path):
    kit = make_kit(tmp_path)
    for _ in range(2):
        c = _guard(kit, audit_signed_from=1)
        _query(c)
        c.close()
    rep = verify_audit_file(tmp_path / "audit.jsonl", trusted_keys=_trusted(kit), signed_from=1)
    assert rep.ok and rep.signed_from == 1, rep.detail


# ------------------------------------------------------------------ entries appended before an append

def test_v1_entries_appended_by_others_are_refused_before_the_next_append(tmp_path, caplog):
    sk, _ = keys.generate_keypair()
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p, signer=ReceiptSigner(sk), signed_from=1)  # a new, empty log
    line, _ = _v1_line(1, GENESIS, {"event": "forged"})
    with open(p, "ab") as f:
        f.write(line)
    with caplog.at_level(logging.WARNING, logger="qdrant_guard.audit"):
        with pytest.raises(AuditUnauthenticatedError) as err:
            log.append({"event": "mine"})
    assert err.value.seqs == (1,) and "refuses to append until it is reopened" in str(err.value)
    assert p.read_bytes() == line
    with pytest.raises(AuditIntegrityError):
        log.append({"event": "again"})
    assert p.read_bytes() == line
    (alert,) = _alerts(caplog, "audit_unauthenticated_entry")
    assert alert["seqs"] == [1] and alert["after_seq"] == 0
    log.close()


def test_control_without_signed_from_such_an_entry_is_signed_over(tmp_path):
    sk, _ = keys.generate_keypair()
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p, signer=ReceiptSigner(sk))
    line, _ = _v1_line(1, GENESIS, {"event": "forged"})
    with open(p, "ab") as f:
        f.write(line)
    assert "ckpt" in log.append({"event": "mine"})
    log.close()


# ------------------------------------------------------------------ the CLI takes it from the policy

def _signed_over(tmp_path):
    """A guard's log rewritten in v1, then signed over by a guard without the setting."""
    kit, log = one_logged_query(tmp_path)
    _as_v1(log)
    c = _guard(kit)
    _query(c)
    c.close()
    trust = tmp_path / "trust.toml"
    trust.write_text(f'signing_key = "{kit.guard_key_path}"\naudit_log = "{log}"\naudit_signed_from = 1\n')
    plain = tmp_path / "plain.toml"
    plain.write_text(f'signing_key = "{kit.guard_key_path}"\naudit_log = "{log}"\n')
    return kit, log, trust, plain


def test_audit_verify_policy_takes_signed_from(tmp_path, capsys):
    _, log, trust, plain = _signed_over(tmp_path)
    capsys.readouterr()
    assert main(["audit", "verify", str(log), "--policy", str(plain)]) == 0  # control: the gap
    # It names the guard's first entry as where signing began, and offers the setting.
    assert f"set audit_signed_from = 3 in {plain}" in capsys.readouterr().out
    assert main(["audit", "verify", str(log), "--policy", str(trust)]) == 1
    out = capsys.readouterr().out
    assert "TAMPERED: unauthenticated at line 1" in out and "where signing began" in out
    assert "repair cannot cut them" in out and "audit repair" not in out


def test_audit_repair_trust_policy_refuses_to_sign_over_the_rewrite(tmp_path, capsys):
    kit, log, trust, plain = _signed_over(tmp_path)
    before = log.read_bytes()
    sign = ["--signing-key", str(kit.guard_key_path)]
    capsys.readouterr()
    assert main(["audit", "repair", str(log), "--trust-policy", str(plain), *sign]) == 0  # control
    assert "nothing to repair" in capsys.readouterr().out
    assert main(["audit", "repair", str(log), "--trust-policy", str(trust), *sign]) == 1
    out = capsys.readouterr().out
    assert out.startswith("NOT repaired: unauthenticated at line 1") and "Nothing was changed" in out
    assert "audit_signed_from in" in out and log.read_bytes() == before
    assert not list(tmp_path.glob("audit.jsonl.*"))  # no side file either


def test_audit_replay_trust_policy_does_not_replay_the_rewrite(tmp_path, capsys):
    kit, log, trust, plain = _signed_over(tmp_path)
    policy = replay_policy_file(kit)
    capsys.readouterr()
    assert main(["audit", "replay", str(log), "--policy", str(policy), "--trust-policy", str(plain)]) == 0  # control
    for mode in ([], ["--verified-prefix"]):
        capsys.readouterr()
        assert main(["audit", "replay", str(log), "--policy", str(policy), "--trust-policy", str(trust), *mode]) == 1
        out = capsys.readouterr().out
        assert out.startswith("NOT REPLAYED: unauthenticated at line 1"), out


# ------------------------------------------------------------------ the setting and the argument

@pytest.mark.parametrize("value, says", [
    (0, "must be a seq of the audit log (1 or more), got 0"),
    (-2, "must be a seq of the audit log (1 or more), got -2"),
    ("1", "write it without quotes: audit_signed_from = 1"),
    (True, "expected an integer"),
    (1.5, "expected an integer"),
])
def test_audit_signed_from_must_be_a_seq(tmp_path, value, says):
    kit = make_kit(tmp_path)
    with pytest.raises(ConfigError) as err:
        kit.config(DOCS, audit_signed_from=value)
    assert "audit_signed_from" in str(err.value) and says in str(err.value)


def test_audit_signed_from_needs_audit_log_and_signing_key(tmp_path):
    with pytest.raises(ConfigError, match="audit_signed_from = 1 says where signing began.*set audit_log"):
        config_from_dict({"audit_signed_from": 1}, source="t")
    with pytest.raises(ConfigError, match="signing_key is not set.*remove audit_signed_from"):
        config_from_dict({"audit_signed_from": 1, "audit_log": str(tmp_path / "a.jsonl")}, source="t")


def test_audit_log_signed_from_argument(tmp_path):
    signer = ReceiptSigner(keys.generate_keypair()[0])
    p = tmp_path / "a.jsonl"
    with pytest.raises(TypeError, match="signed_from must be int or None, not bool"):
        AuditLog(p, signer=signer, signed_from=True)
    with pytest.raises(ValueError, match=r"signed_from must be a seq \(1 or more\), got 0"):
        AuditLog(p, signer=signer, signed_from=0)
    with pytest.raises(ValueError, match="signer is None"):
        AuditLog(p, signed_from=1)
