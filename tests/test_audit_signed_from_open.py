"""``audit_signed_from`` on open: the guard requires of the entry at S what ``audit verify
--signed-from S`` requires, wherever S is.

Before, a guard with the setting checked S only as one of the entries after the most recent
checkpoint, and only for format v1: an entry at S under another trusted writer's id (its MAC
unchecked) without the checkpoint a signing writer's first entry carries, a window that reached
past S by lacking the checkpoint due every 1000 entries, and an S before the most recent
checkpoint (a rewrite some guard without the setting had signed over) were let through, and the
guard's next checkpoint signed them, while ``audit verify --signed-from`` refused each log. Real
files, real Ed25519 keys, guarded clients in local mode. Every test not marked as a control fails
on the code before (qdrant_guard/audit.py put back).
"""
from __future__ import annotations

import hashlib
import json
import logging

import pytest

from guardkit import make_kit, one_logged_query
from qdrant_guard import keys
from qdrant_guard.audit import GENESIS, AuditLog, verify_audit_file
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import AuditIntegrityError, AuditUnauthenticatedError
from qdrant_guard.receipts import ReceiptSigner
from test_audit_signed_from import _alerts, _guard, _query
from test_review55 import _as_v1

FAKE_MAC = "ab" * 32  # what someone without the writer's key puts where its MAC goes


def _other_writer(tmp_path):
    """A second signing key, trusted by the guard's policy (a retired key, another guard): its id and
    the policy setting that trusts it."""
    _, pk = keys.generate_keypair()
    return keys.key_id(pk), {"audit_trusted_keys": [keys.public_key_to_str(pk)]}


def _forge(seq, prev, writer, record=None):
    """An entry in format v2 under ``writer``'s id with a made-up MAC and no checkpoint, as anyone who
    can write the file makes one (the hash covers the writer id, not the MAC): line and hash."""
    e = {"seq": seq, "ts": 1.0, "prev": prev, "record": record or {"event": "forged"}, "w": writer}
    e["hash"] = hashlib.sha256(canonical_json(e)).hexdigest()
    e["mac"] = FAKE_MAC
    return canonical_json(e) + b"\n", e["hash"]


def _as_writer(log, writer):
    """The whole log rewritten under ``writer``'s id: checkpoints dropped, MACs made up, hashes recomputed."""
    out, prev = [], GENESIS
    for raw in log.read_bytes().splitlines():
        e = json.loads(raw)
        line, prev = _forge(e["seq"], prev, writer, {**e["record"], "forged": True})
        out.append(line)
    log.write_bytes(b"".join(out))


def _public(kit):
    pk = keys.load_private_key(kit.guard_key_path).public_key()
    return {keys.key_id(pk): pk}


def _signer(kit):
    return ReceiptSigner(keys.load_private_key(kit.guard_key_path))


# ------------------------------------------------------------------ S among the entries read on open

def test_a_log_rewritten_under_a_trusted_writers_id_is_refused_at_s(tmp_path, caplog):
    other, trust = _other_writer(tmp_path)
    kit, log = one_logged_query(tmp_path, audit_signed_from=1, **trust)
    _as_writer(log, other)
    before = log.read_bytes()
    # What verify says of it, with the public keys the guard holds.
    rep = verify_audit_file(log, trusted_keys=_public(kit), signed_from=1)
    assert (rep.ok, rep.problem, rep.unauthenticated[:1]) == (False, "unauthenticated", (1,))
    with caplog.at_level(logging.WARNING, logger="qdrant_guard.audit"):
        with pytest.raises(AuditUnauthenticatedError) as err:
            _guard(kit, audit_signed_from=1, **trust)
    msg = str(err.value)
    assert err.value.seqs == (1,)
    assert str(log) in msg and "carries no checkpoint" in msg and "seq 1 is where signing began" in msg
    assert "--signed-from 1" in msg and "move it aside" in msg
    assert log.read_bytes() == before
    (alert,) = _alerts(caplog, "audit_unauthenticated_entry")
    assert alert["seqs"] == [1] and alert["path"] == str(log)


def test_control_without_signed_from_such_a_rewrite_is_signed_over(tmp_path):
    # Control (the gap the setting closes; "What the writer cannot check" in docs/audit-log.md).
    other, trust = _other_writer(tmp_path)
    kit, log = one_logged_query(tmp_path, **trust)
    _as_writer(log, other)
    n = len(log.read_bytes().splitlines())
    c = _guard(kit, **trust)
    _query(c)  # appended on the rewrite: its checkpoint at seq 1000 would sign it
    c.close()
    grown = log.read_bytes().splitlines()
    assert len(grown) > n and all(json.loads(r)["w"] == other for r in grown[:n])


def test_control_a_log_begun_before_the_seq_1_checkpoint_opens_on_its_mac(tmp_path):
    # Control: a signing guard's log begun before 2026-12-07 has no checkpoint at seq 1; the guard's
    # own MAC shows it wrote it, as `audit verify --writer-key --signed-from 1` accepts.
    kit, log = one_logged_query(tmp_path, audit_signed_from=1)
    lines = log.read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    del first["ckpt"]  # outside the hash and the MAC
    log.write_bytes(canonical_json(first) + b"\n" + b"".join(lines[1:]))
    sk = keys.load_private_key(kit.guard_key_path)
    from qdrant_guard.audit_mac import writer_keys
    assert verify_audit_file(log, trusted_keys=_public(kit), writer_keys=writer_keys([sk]), signed_from=1).ok
    c = _guard(kit, audit_signed_from=1)
    _query(c)
    c.close()


def test_an_entry_at_s_appended_by_another_under_a_trusted_id_is_refused(tmp_path, caplog):
    other, trust = _other_writer(tmp_path)
    kit = make_kit(tmp_path)
    log = tmp_path / "audit.jsonl"
    c = _guard(kit, audit_signed_from=1, **trust)  # opens the empty log: a new one, seq 1 next
    line, _ = _forge(1, GENESIS, other)
    log.write_bytes(line)  # written before the guard's first entry
    with caplog.at_level(logging.WARNING, logger="qdrant_guard.audit"):
        with pytest.raises(AuditUnauthenticatedError) as err:
            _query(c)
    assert err.value.seqs == (1,) and "carries no checkpoint" in str(err.value)
    assert log.read_bytes() == line
    (alert,) = _alerts(caplog, "audit_unauthenticated_entry")
    assert alert["after_seq"] == 0
    c.close()


# ------------------------------------------------------------------ a window that reaches past S

def test_a_window_past_s_without_its_checkpoint_is_refused(tmp_path, caplog):
    # 1001 entries under a trusted id, none with a checkpoint: the window ends on its length, so
    # the entry at S and the checkpoint due at seq 1000 are beyond what the guard used to check.
    other, trust = _other_writer(tmp_path)
    kit, log = one_logged_query(tmp_path, audit_signed_from=1, **trust)
    last = json.loads(log.read_bytes().splitlines()[-1])
    seq, prev, lines = last["seq"], last["hash"], []
    for _ in range(1001):
        seq += 1
        line, prev = _forge(seq, prev, other)
        lines.append(line)
    with log.open("ab") as fh:
        fh.write(b"".join(lines))
    before = log.read_bytes()
    rep = verify_audit_file(log, trusted_keys=_public(kit))
    assert (rep.ok, rep.problem) == (False, "bad_checkpoint") and "seq 1000" in rep.detail
    with caplog.at_level(logging.WARNING, logger="qdrant_guard.audit"):
        with pytest.raises(AuditUnauthenticatedError) as err:
            _guard(kit, audit_signed_from=1, **trust)
    assert 1000 in err.value.seqs and "carries no checkpoint, which a signing writer puts on every 1000th" in str(err.value)
    assert log.read_bytes() == before
    assert _alerts(caplog, "audit_unauthenticated_entry")


# ------------------------------------------------------------------ S before the most recent checkpoint

def test_a_rewrite_signed_over_by_a_guard_without_the_setting_is_refused_by_one_with_it(tmp_path, caplog):
    kit, log = one_logged_query(tmp_path)
    _as_v1(log)
    c = _guard(kit)  # without the setting: it adopts the rewrite, its first entry a checkpoint over it
    _query(c)
    c.close()
    before = log.read_bytes()
    ckpt = next(json.loads(r)["seq"] for r in before.splitlines() if b'"ckpt"' in r)
    assert ckpt > 1
    assert not verify_audit_file(log, trusted_keys=_public(kit), signed_from=1).ok
    with caplog.at_level(logging.WARNING, logger="qdrant_guard.audit"):
        with pytest.raises(AuditUnauthenticatedError) as err:
            _guard(kit, audit_signed_from=1)
    msg = str(err.value)
    assert err.value.seqs == (1,) and "format v1" in msg
    assert f"the checkpoint at seq {ckpt} signs over it" in msg and str(log) in msg and "--signed-from 1" in msg
    assert log.read_bytes() == before
    (alert,) = _alerts(caplog, "audit_unauthenticated_entry")
    assert alert["seqs"] == [1]


def _long_log(tmp_path, legacy=37, total=1010):
    """A log begun without a key (seq 1..legacy, format v1), signed from legacy + 1 on by the guard's
    key (a checkpoint there and at seq 1000), ``total`` entries: kit, path, the lines."""
    kit = make_kit(tmp_path)
    log = tmp_path / "audit.jsonl"
    with AuditLog(log) as keyless:
        for i in range(legacy):
            keyless.append({"event": "legacy", "i": i})
    with AuditLog(log, signer=_signer(kit)) as signed:
        for i in range(total - legacy):
            signed.append({"event": "signed", "i": i})
    return kit, log, log.read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("forge", ["v1", "trusted_id"])
def test_an_entry_at_s_replaced_before_the_checkpoint_is_refused(tmp_path, forge):
    other, trust = _other_writer(tmp_path)
    kit, log, lines = _long_log(tmp_path)
    s = 38
    genuine = json.loads(lines[s - 1])
    assert "ckpt" in genuine and json.loads(lines[999]).get("ckpt")  # S and seq 1000 are checkpoints
    if forge == "v1":
        e = {"seq": s, "ts": 1.0, "prev": genuine["prev"], "record": {"event": "forged"}}
        e["hash"] = hashlib.sha256(canonical_json(e)).hexdigest()
        line = canonical_json(e) + b"\n"
    else:
        line, _ = _forge(s, genuine["prev"], other)
    log.write_bytes(b"".join(lines[:s - 1]) + line + b"".join(lines[s:]))
    before = log.read_bytes()
    with pytest.raises(AuditUnauthenticatedError) as err:
        _guard(kit, audit_signed_from=s, **trust)
    msg = str(err.value)
    assert err.value.seqs == (s,) and "the checkpoint at seq 1000 signs over it" in msg
    assert (f"seq {s} carries no writer id" if forge == "v1" else f"seq {s} names writer") in msg
    assert log.read_bytes() == before


def test_an_entry_at_s_that_does_not_verify_is_refused(tmp_path):
    kit, log, lines = _long_log(tmp_path)
    s = 38
    edited = lines[s - 1].replace(b'"signed"', b'"edited"')
    assert edited != lines[s - 1]
    log.write_bytes(b"".join(lines[:s - 1]) + edited + b"".join(lines[s:]))
    with pytest.raises(AuditIntegrityError) as err:
        _guard(kit, audit_signed_from=s)
    assert "read to find seq 38 (audit_signed_from), does not verify" in str(err.value) and str(log) in str(err.value)


def test_the_entry_at_s_is_found_wherever_it_is_before_the_checkpoint(tmp_path):
    # The bisection finds each seq before the checkpoint at 1000: the legacy entries are
    # refused as the start of signing, the signed ones accepted (a checkpoint at 38, MACs after it).
    kit, log, lines = _long_log(tmp_path)
    signer = _signer(kit)
    for s in (1, 2, 19, 36, 37):
        with pytest.raises(AuditUnauthenticatedError) as err:
            AuditLog(log, signer=signer, signed_from=s)
        assert err.value.seqs == (s,)
    for s in (38, 39, 500, 998, 999, 1000, 1005, 1010):
        AuditLog(log, signer=signer, signed_from=s).close()
    c = _guard(kit, audit_signed_from=38)
    _query(c)
    c.close()


def test_the_bisection_finds_every_seq_among_lines_of_very_different_lengths(tmp_path):
    # Lines from 100 bytes to 20 kB (a bisection step lands inside long lines and reads across the
    # 4 kB blocks it searches in); checkpoint every 50, so seq 100 ends the window and S below it is
    # found by bisection: the v1 entries refused as where signing began, the signed ones accepted.
    kit = make_kit(tmp_path)
    log = tmp_path / "audit.jsonl"
    sizes = [(i * 7919) % 20000 for i in range(120)]
    with AuditLog(log) as keyless:
        for i in range(10):
            keyless.append({"event": "legacy", "pad": "x" * sizes[i]})
    with AuditLog(log, signer=_signer(kit), checkpoint_every=50) as signed:
        for i in range(10, 120):
            signed.append({"event": "signed", "pad": "y" * sizes[i]})
    assert "ckpt" in json.loads(log.read_bytes().splitlines()[99])
    for s in range(1, 121):
        if s <= 10:
            with pytest.raises(AuditUnauthenticatedError) as err:
                AuditLog(log, signer=_signer(kit), checkpoint_every=50, signed_from=s)
            assert err.value.seqs == (s,)
        else:
            AuditLog(log, signer=_signer(kit), checkpoint_every=50, signed_from=s).close()


def test_no_line_holding_s_before_the_checkpoint_is_refused(tmp_path):
    # The entry at S deleted (the chain broken there, which the open does not read): the bisection
    # ends between S - 1 and S + 1 and says so.
    kit, log, lines = _long_log(tmp_path)
    s = 500
    log.write_bytes(b"".join(lines[:s - 1] + lines[s:]))
    with pytest.raises(AuditIntegrityError) as err:
        _guard(kit, audit_signed_from=s)
    msg = str(err.value)
    assert "no line before the most recent checkpoint (seq 1000) holds seq 500" in msg and str(log) in msg
    assert "--signed-from 500" in msg
