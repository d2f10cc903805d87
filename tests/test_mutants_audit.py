"""Audit-log verification checks that the mutation pass (scripts/mutate.py) found unpinned."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from qdrant_guard.audit import (
    CHECKPOINT_PREFIX,
    GENESIS,
    AuditLog,
    entry_hash,
    verify_audit_file,
)
from qdrant_guard.canonical import canonical_json
from qdrant_guard.keys import generate_keypair
from qdrant_guard.receipts import ReceiptSigner


def _signer() -> tuple[ReceiptSigner, dict]:
    """A fresh checkpoint signer and the trusted-keys map that verifies it."""
    sk, pk = generate_keypair()
    signer = ReceiptSigner(sk)
    return signer, {signer.key_id: pk}


def _log(path: Path, n: int, **kw) -> list[bytes]:
    with AuditLog(path, **kw) as log:
        for i in range(n):
            log.append({"event": "real", "i": i})
    return path.read_bytes().splitlines(keepends=True)


def _forged(n: int, prev: str = GENESIS, seq: int = 1) -> list[dict]:
    out = []
    for k in range(seq, seq + n):
        e = {"seq": k, "ts": 1.0, "prev": prev, "record": {"event": "forged", "i": k}}
        e["hash"] = prev = entry_hash(e)
        out.append(e)
    return out


def _line(entry: dict) -> bytes:
    return canonical_json(entry) + b"\n"


def _after_three(tmp_path: Path, last: bytes):
    real = _log(tmp_path / "real.jsonl", 3)
    p = tmp_path / "log.jsonl"
    p.write_bytes(b"".join(real) + last)
    return verify_audit_file(p), json.loads(real[-1])["hash"]


@pytest.mark.parametrize("line", [
    b"[1]\n", b"1\n", b'"entry"\n', b'{"seq":4}\n', b"{}\n",
])
def test_json_that_is_not_an_entry_is_corrupt(tmp_path, line):
    rep, _ = _after_three(tmp_path, line)
    assert (rep.ok, rep.problem, rep.index, rep.valid_prefix) == (False, "corrupt", 4, 3), rep.detail


@pytest.mark.parametrize("change", ["extra", "missing_ts"])
def test_an_entry_with_other_fields_is_corrupt_even_when_its_hash_matches(tmp_path, change):
    real = _log(tmp_path / "real.jsonl", 3)
    e = {"seq": 4, "ts": 1.0, "prev": json.loads(real[-1])["hash"], "record": {"event": "x"}}
    if change == "extra":
        e["note"] = "added"
    else:
        del e["ts"]
    e["hash"] = entry_hash(e)
    p = tmp_path / "log.jsonl"
    p.write_bytes(b"".join(real) + _line(e))
    rep = verify_audit_file(p)
    assert (rep.problem, rep.index, rep.valid_prefix) == ("corrupt", 4, 3), rep.detail


@pytest.mark.parametrize("field,value", [
    ("seq", 0), ("seq", -1), ("seq", True), ("seq", 4.0), ("ts", "now"), ("ts", True), ("ts", None),
    ("record", ["x"]), ("record", "x"), ("prev", "A" * 64), ("prev", 5),
])
def test_a_field_of_the_wrong_type_or_form_is_edited_even_when_its_hash_matches(tmp_path, field, value):
    real = _log(tmp_path / "real.jsonl", 3)
    e = {"seq": 4, "ts": 1.0, "prev": json.loads(real[-1])["hash"], "record": {"event": "x"}}
    e[field] = value
    e["hash"] = entry_hash(e)
    p = tmp_path / "log.jsonl"
    p.write_bytes(b"".join(real) + _line(e))
    rep = verify_audit_file(p)
    assert (rep.problem, rep.index, rep.valid_prefix) == ("edited", 4, 3), rep.detail


def test_an_entry_json_reads_but_canonical_json_cannot_encode_is_edited(tmp_path):
    real = _log(tmp_path / "real.jsonl", 3)
    prev = json.loads(real[-1])["hash"]
    line = (b'{"hash":"' + b"0" * 64 + b'","prev":"' + prev.encode() +
            b'","record":{},"seq":4,"ts":NaN}\n')
    p = tmp_path / "log.jsonl"
    p.write_bytes(b"".join(real) + line)
    rep = verify_audit_file(p)
    assert (rep.problem, rep.index, rep.valid_prefix) == ("edited", 4, 3), rep.detail


def test_a_checkpoint_signature_in_non_canonical_base64_is_refused(tmp_path):
    # b64decode without validate drops characters outside the alphabet: the same signature
    # spelled with junk in it would verify.
    signer, trusted = _signer()
    p = tmp_path / "log.jsonl"
    lines = _log(p, 4, signer=signer, checkpoint_every=3)
    assert verify_audit_file(p, trusted_keys=trusted, checkpoint_every=3).ok
    e = json.loads(lines[2])
    e["ckpt"]["sig"] = e["ckpt"]["sig"][:10] + "!" + e["ckpt"]["sig"][10:]
    p.write_bytes(b"".join(lines[:2]) + _line(e) + lines[3])
    rep = verify_audit_file(p, trusted_keys=trusted, checkpoint_every=3)
    assert (rep.problem, rep.index, rep.valid_prefix) == ("bad_checkpoint", 3, 2), rep.detail


@pytest.mark.parametrize("forged_first", [True, False])
def test_a_forged_checkpoint_does_not_make_a_chain_signed_in_a_fork(tmp_path, forged_first):
    # Two chains from genesis; the real one carries checkpoints, the forged one a checkpoint that
    # names the trusted key but is signed by another. Only verified checkpoints decide a fork.
    signer, trusted = _signer()
    real = _log(tmp_path / "real.jsonl", 7, signer=signer, checkpoint_every=3)
    other, _ = generate_keypair()
    forged = _forged(10)
    forged[2]["ckpt"] = {"kid": signer.key_id, "sig": base64.b64encode(
        other.sign(CHECKPOINT_PREFIX + bytes.fromhex(forged[2]["hash"]))).decode()}
    forged_lines = [_line(e) for e in forged]
    p = tmp_path / "two.jsonl"
    p.write_bytes(b"".join(forged_lines + real if forged_first else real + forged_lines))
    rep = verify_audit_file(p, trusted_keys=trusted, checkpoint_every=3)
    assert rep.problem == "second_genesis" and rep.fork is None, rep.detail
    real_line = 11 if forged_first else 1
    assert f"only the chain from line {real_line} carries a verified checkpoint" in rep.detail


def _branch_entry(prev: str, seq: int, tag: str) -> bytes:
    e = {"seq": seq, "ts": 1.0, "prev": prev, "record": {"event": tag}}
    e["hash"] = entry_hash(e)
    return _line(e)


@pytest.mark.parametrize("branches,fork", [
    # Two branches at the same seq: the first in the file is the one reported.
    ([(5, "a"), (5, "b")], (5, 9)),
    # A branch at a later seq found after one at an earlier seq does not replace it.
    ([(5, "a"), (6, "b")], (5, 9)),
    # A branch at an earlier seq found later does.
    ([(5, "a"), (4, "b")], (4, 10)),
])
def test_the_earliest_fork_point_is_reported(tmp_path, branches, fork):
    real = _log(tmp_path / "real.jsonl", 8)
    hashes = [json.loads(line)["hash"] for line in real]
    extra = [_branch_entry(hashes[seq - 2], seq, tag) for seq, tag in branches]
    p = tmp_path / "log.jsonl"
    p.write_bytes(b"".join(real + extra))
    rep = verify_audit_file(p)
    assert (rep.problem, rep.fork) == ("inserted", fork), rep.detail
    assert rep.valid_prefix == fork[0] - 1


def test_fork_detail_measures_each_branch_by_the_checkpoint_rules(tmp_path):
    signer, trusted = _signer()
    real = _log(tmp_path / "real.jsonl", 7, signer=signer, checkpoint_every=3)
    forged = [_line(e) for e in _forged(10)]
    p = tmp_path / "two.jsonl"
    p.write_bytes(b"".join(real + forged))
    rep = verify_audit_file(p)
    assert ("the chain from line 1 (seq 1..7, 7 line(s)) and the one from line 8 (seq 1..10, "
            "10 line(s))") in rep.detail, rep.detail
    assert "pass the trusted keys to decide" in rep.detail
    assert rep.detail.startswith("line 1 (seq 1): "), rep.detail
    # With the keys, the forged chain ends where its first checkpoint is missing (seq 3).
    rep = verify_audit_file(p, trusted_keys=trusted, checkpoint_every=3)
    assert ("the chain from line 1 (seq 1..7, 7 line(s)) and the one from line 8 (seq 1..2, "
            "2 line(s))") in rep.detail, rep.detail


def test_a_branch_whose_first_line_breaks_the_checkpoint_rules_counts_as_one_line(tmp_path):
    signer, trusted = _signer()
    real = _log(tmp_path / "real.jsonl", 7, signer=signer, checkpoint_every=3)
    # An unsigned entry at seq 3, a checkpoint seq, chained to the real entry 2.
    branch = _branch_entry(json.loads(real[1])["hash"], 3, "forged")
    p = tmp_path / "two.jsonl"
    p.write_bytes(b"".join(real + [branch]))
    rep = verify_audit_file(p, trusted_keys=trusted, checkpoint_every=3)
    assert rep.problem == "inserted" and rep.fork is None, rep.detail
    assert "the one from line 8 (seq 3..3, 1 line(s))" in rep.detail, rep.detail
    assert "neither" not in rep.detail


def test_unresolved_fork_with_keys_says_neither_chain_is_signed(tmp_path):
    sk, pk = generate_keypair()
    signer = ReceiptSigner(sk)
    real = _log(tmp_path / "real.jsonl", 5)
    p = tmp_path / "two.jsonl"
    p.write_bytes(b"".join(real + [_line(e) for e in _forged(5)]))
    rep = verify_audit_file(p, trusted_keys={signer.key_id: pk}, checkpoint_every=1000)
    assert rep.fork == (1, 6), rep.detail
    assert "neither carries a checkpoint that verifies" in rep.detail


def test_report_detail_names_the_line_and_seq_and_counts_checkpoints(tmp_path):
    signer, trusted = _signer()
    p = tmp_path / "log.jsonl"
    lines = _log(p, 7, signer=signer, checkpoint_every=3)
    rep = verify_audit_file(p, trusted_keys=trusted, checkpoint_every=3)
    assert rep.ok and rep.detail == "7 entries verified, 3 checkpoints", rep.detail  # seqs 1, 3, 6
    assert verify_audit_file(p).detail == "7 entries verified"
    p.write_bytes(b"".join(lines[:4] + lines[5:]))
    rep = verify_audit_file(p)
    assert rep.problem == "deleted" and rep.detail.startswith("line 5 (seq 6): "), rep.detail


def test_argument_checks(tmp_path):
    p = tmp_path / "log.jsonl"
    _log(p, 2)
    with pytest.raises(TypeError, match="path must be str or os.PathLike"):
        verify_audit_file(3)
    with pytest.raises(TypeError, match="trusted_keys must be a mapping"):
        verify_audit_file(p, trusted_keys=["k"])
    for bad in (0, -1, True, 1.5, "3"):
        with pytest.raises(ValueError, match="checkpoint_every must be a positive int"):
            verify_audit_file(p, checkpoint_every=bad)
    assert verify_audit_file(p, checkpoint_every=1).ok
