"""Second review of the audit log's verifier and repair.

Each test pins a defect found in review (it failed before the fix next to it).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qdrant_guard.audit import GENESIS, AuditLog, entry_hash, repair_audit_file, verify_audit_file
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import AuditError, AuditIntegrityError
from qdrant_guard.keys import generate_keypair
from qdrant_guard.receipts import ReceiptSigner

ROOT = str(Path(__file__).resolve().parents[1])


def _log(path: Path, n: int, tag: str = "real", **kw) -> list[bytes]:
    with AuditLog(path, **kw) as log:
        for i in range(n):
            log.append({"event": tag, "i": i})
    return path.read_bytes().splitlines(keepends=True)


def _side_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".cut-*"))


def _forged(n: int, prev: str = GENESIS, seq: int = 1) -> list[bytes]:
    """``n`` entries chained from ``prev``, as anyone who can write the file can make them."""
    out = []
    for k in range(seq, seq + n):
        e = {"seq": k, "ts": 1.0, "prev": prev, "record": {"event": "forged", "i": k}}
        e["hash"] = prev = entry_hash(e)
        out.append(canonical_json(e) + b"\n")
    return out


def _last_record(path: Path) -> dict:
    return json.loads(path.read_bytes().splitlines()[-1])["record"]


# --------------------------------------------------------------------------- repair: side file

def test_two_repairs_at_the_same_seq_do_not_collide_on_the_side_file(tmp_path):
    # The side file was `<log>.cut-<seq>-<unix second>` opened O_EXCL: a second repair cutting at
    # the same seq within that second (or a name squatted by anyone who can create files next to
    # the log) made repair fail with "File exists". The names of the next two minutes are taken
    # here, so the old naming fails however slowly this runs.
    p = tmp_path / "a.jsonl"
    lines = _log(p, 4)
    now = int(time.time())
    for t in range(now - 1, now + 120):
        (tmp_path / f"a.jsonl.cut-4-{t}").write_bytes(b"squatter\n")
    squatted = set(_side_files(p))
    cuts = []
    for junk in (b"junk one\n", b"junk two\n"):
        p.write_bytes(b"".join(lines) + junk)
        rep = repair_audit_file(p)
        assert rep.ok and rep.last_seq == 5, rep.detail
        (side,) = set(_side_files(p)) - squatted - set(cuts)
        assert side.read_bytes() == junk and (os.stat(side).st_mode & 0o777) == 0o600
        cuts.append(side)
    assert len(set(cuts)) == 2


_LIMITED_REPAIR = r"""
import resource, signal, sys
from qdrant_guard.audit import repair_audit_file
from qdrant_guard.errors import AuditError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    rep = repair_audit_file(sys.argv[1])
except AuditError as exc:
    print("AuditError:", exc)
else:
    print("repaired:", rep.ok, rep.detail)
"""


def test_repair_that_cannot_save_all_cut_bytes_changes_nothing(tmp_path):
    # os.write() of the cut bytes to the side file was not checked for a short write: under a file
    # size limit (or a nearly full disk) only part of the cut was saved, and the log was then
    # truncated anyway, losing the rest. A real limit (RLIMIT_FSIZE) in a child process, no mocks.
    p = tmp_path / "a.jsonl"
    _log(p, 3)
    with open(p, "ab") as fh:
        fh.write(b"x" * 200_000 + b"\n")  # a corrupt line far bigger than the limit below
    before = p.read_bytes()
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", _LIMITED_REPAIR, str(p), str(64 * 1024)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert p.read_bytes() == before, out.stdout
    assert out.stdout.startswith("AuditError:") and "nothing was changed" in out.stdout, out.stdout
    assert _side_files(p) == []
    # Without the limit the same repair goes through and keeps every cut byte.
    rep = repair_audit_file(p)
    assert rep.ok
    (side,) = _side_files(p)
    assert side.read_bytes() == before[len(b"".join(before.splitlines(keepends=True)[:3])):]


def test_repair_that_cannot_write_its_entry_does_not_leave_a_silent_clean_cut(tmp_path):
    # Repair truncated the log first and appended its entry after: when that append failed, the
    # damaged tail was gone and nothing recorded the cut, so the log verified as sound. Now the
    # entry is written over the cut bytes before truncating; when it cannot be written the log is
    # as it was (the cut is already safe in the side file) and verify still reports the damage.
    p = tmp_path / "a.jsonl"
    _log(p, 3, tag="r" * 30_000)  # a valid prefix of about 90 kB ...
    before_prefix = p.stat().st_size
    with open(p, "ab") as fh:
        fh.write(b"garbage\n")   # ... then a short corrupt line
    before = p.read_bytes()
    env = dict(os.environ, PYTHONPATH=ROOT)
    # The limit lets the small side file be written but not the log beyond its valid prefix.
    out = subprocess.run([sys.executable, "-c", _LIMITED_REPAIR, str(p), str(before_prefix - 1000)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert p.read_bytes() == before, out.stdout
    assert out.stdout.startswith("AuditError:") and "saved in" in out.stdout, out.stdout
    rep = verify_audit_file(p)
    assert (rep.ok, rep.problem, rep.index) == (False, "corrupt", 4)
    (side,) = _side_files(p)
    assert side.read_bytes() == b"garbage\n"


# --------------------------------------------------------------------------- two chains in one file

@pytest.mark.parametrize("forged_first", [True, False])
def test_a_longer_forged_chain_from_genesis_is_not_taken_for_the_log(tmp_path, forged_first):
    # The longer of two chains from genesis used to win: a forged 10-entry chain put in front of a
    # real 5-entry log verified as the valid prefix (the real log was the "inserted" part), and
    # repair kept the forgery and cut the real entries; put behind it, it made verify blame line 1
    # and repair cut the whole real log. A second genesis is reported as such, with both chains.
    real = _log(tmp_path / "real.jsonl", 5)
    forged = _forged(10)
    p = tmp_path / "two.jsonl"
    p.write_bytes(b"".join(forged + real if forged_first else real + forged))
    before = p.read_bytes()
    rep = verify_audit_file(p)
    second = 11 if forged_first else 6
    assert (rep.ok, rep.problem, rep.index, rep.valid_prefix, rep.last_seq) == (
        False, "second_genesis", 1, 0, 0), rep.detail
    assert rep.fork == (1, second)
    assert f"line {second} starts a second chain from genesis" in rep.detail
    # Repair will not guess: nothing changes, nothing is cut, and the message says how to decide.
    with pytest.raises(AuditIntegrityError, match=r"keep_chain_from=1 or " + str(second)) as err:
        repair_audit_file(p)
    assert "signed" in str(err.value) and "copy" in str(err.value)
    assert p.read_bytes() == before and _side_files(p) == []


def test_junk_between_two_chains_from_genesis_does_not_hide_the_second(tmp_path):
    # The first problem used to end the scan: forged chain, then one junk line, then the real log
    # reported "corrupt" after the forged entries, which verified as the valid prefix.
    real = _log(tmp_path / "real.jsonl", 5)
    p = tmp_path / "two.jsonl"
    p.write_bytes(b"".join(_forged(10) + [b"junk\n"] + real))
    rep = verify_audit_file(p)
    assert (rep.problem, rep.index, rep.valid_prefix) == ("second_genesis", 1, 0), rep.detail
    assert rep.fork == (1, 12)


def test_a_long_forged_branch_in_front_of_the_real_entries_is_not_kept(tmp_path):
    # The same in mid-file: seventeen forged entries chained from entry 3, put before the real
    # entries 4..8, were "the longer chain" and verified; the real entry 4 was blamed.
    real = _log(tmp_path / "real.jsonl", 8)
    forged = _forged(17, prev=json.loads(real[2])["hash"], seq=4)
    p = tmp_path / "forked.jsonl"
    p.write_bytes(b"".join(real[:3] + forged + real[3:]))
    rep = verify_audit_file(p)
    assert (rep.problem, rep.index, rep.valid_prefix) == ("inserted", 4, 3), rep.detail
    assert rep.fork == (4, 21)
    with pytest.raises(AuditIntegrityError):
        repair_audit_file(p)


def test_operator_keeps_the_chain_they_established_as_real(tmp_path):
    real = _log(tmp_path / "real.jsonl", 5)
    forged = _forged(10)
    p = tmp_path / "two.jsonl"
    before = b"".join(forged + real)
    p.write_bytes(before)
    with pytest.raises(ValueError, match="must be 1 or 11"):
        repair_audit_file(p, keep_chain_from=6)
    assert p.read_bytes() == before
    rep = repair_audit_file(p, keep_chain_from=11)
    assert rep.ok and rep.last_seq == 6 and rep.fork is None, rep.detail
    assert p.read_bytes().splitlines(keepends=True)[:5] == real
    rec = _last_record(p)
    assert (rec["problem"], rec["fork"], rec["kept_chain_from"], rec["decided_by"], rec["kept_lines"]) == (
        "second_genesis", [1, 11], 11, "operator", [11, 15])
    assert (rec["cut_lines"], rec["cut_bytes"]) == (10, len(b"".join(forged)))
    (side,) = _side_files(p)
    assert side.read_bytes() == before  # everything from the end of the kept prefix, as it was
    # The first chain can be kept too; keep_chain_from on a log without two chains is refused.
    q = tmp_path / "two_b.jsonl"
    q.write_bytes(b"".join(real + forged))
    assert repair_audit_file(q, keep_chain_from=1).ok
    assert q.read_bytes().splitlines(keepends=True)[:5] == real and _last_record(q)["cut_lines"] == 10
    with pytest.raises(ValueError, match="applies only to a log holding two chains"):
        repair_audit_file(q, keep_chain_from=1)


@pytest.mark.parametrize("forged_first", [True, False])
def test_a_signed_checkpoint_settles_which_chain_is_real(tmp_path, forged_first):
    sk, pk = generate_keypair()
    signer = ReceiptSigner(sk)
    trusted = {signer.key_id: pk}
    real = _log(tmp_path / "real.jsonl", 7, signer=signer, checkpoint_every=3)
    forged = _forged(10)  # whoever forged it has no key: no checkpoint verifies on it
    p = tmp_path / "two.jsonl"
    p.write_bytes(b"".join(forged + real if forged_first else real + forged))
    assert verify_audit_file(p).fork is not None  # without the key: undecidable
    rep = verify_audit_file(p, trusted_keys=trusted, checkpoint_every=3)
    assert rep.problem == "second_genesis" and rep.fork is None, rep.detail
    if forged_first:
        assert (rep.index, rep.valid_prefix) == (1, 0)
        assert "only the chain from line 11 carries a verified checkpoint" in rep.detail
    else:
        assert (rep.index, rep.valid_prefix) == (8, 7)
    fixed = repair_audit_file(p, signer=signer, trusted_keys=trusted, checkpoint_every=3)
    assert fixed.ok and fixed.last_seq == 8, fixed.detail
    assert p.read_bytes().splitlines(keepends=True)[:7] == real
    rec = _last_record(p)
    assert rec["decided_by"] == "checkpoint" and rec["kept_chain_from"] == (11 if forged_first else 1)
    assert verify_audit_file(p, trusted_keys=trusted, checkpoint_every=3).ok


def test_the_repair_command_refuses_to_guess_and_takes_the_operators_choice_or_a_key(tmp_path, capsys):
    # `qdrant-guard audit repair` had no way to pass the trusted key or the operator's decision.
    from qdrant_guard import keys
    from qdrant_guard.cli import main

    real = _log(tmp_path / "real.jsonl", 5)
    p = tmp_path / "two.jsonl"
    p.write_bytes(b"".join(_forged(10) + real))
    assert main(["audit", "repair", str(p)]) == 2
    assert "--keep-chain-from" in capsys.readouterr().err and _side_files(p) == []
    assert main(["audit", "repair", str(p), "--keep-chain-from", "11"]) == 0
    assert p.read_bytes().splitlines(keepends=True)[:5] == real

    sk, pk = generate_keypair()
    signer = ReceiptSigner(sk)
    signed = _log(tmp_path / "signed.jsonl", 4, signer=signer, checkpoint_every=2)
    q = tmp_path / "two_signed.jsonl"
    q.write_bytes(b"".join(_forged(6) + signed))
    # The log carries its writer's MACs (format v2), so the repair entry needs the writer's key too.
    key_file = tmp_path / "guard.key"
    key_file.write_bytes(keys.private_key_to_pem(sk))
    key_file.chmod(0o600)
    assert main(["audit", "repair", str(q), "--key", keys.public_key_to_str(pk), "--checkpoint-every", "2",
                 "--signing-key", str(key_file)]) == 0
    assert q.read_bytes().splitlines(keepends=True)[:4] == signed
    assert verify_audit_file(q).ok


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd to see repair's open file")
def test_repair_does_not_cut_a_file_by_what_a_replacement_at_its_path_holds(tmp_path):
    # Repair opened the log, waited for its lock, then verified *the path* again: a log rotated
    # or replaced meanwhile was verified in place of the file it held and would cut. Here the
    # replacement is a sound log, so the damaged file repair held was reported sound and left
    # damaged. The wait is made certain with a lock held by the test, no timing involved.
    import fcntl
    import threading

    p = tmp_path / "a.jsonl"
    lines = _log(p, 4)
    damaged = b"".join(lines) + b"junk\n"
    p.write_bytes(damaged)
    holder = os.open(p, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    result: list[object] = []

    def repair() -> None:
        try:
            result.append(repair_audit_file(p))
        except AuditError as exc:
            result.append(exc)

    t = threading.Thread(target=repair)
    t.start()
    try:
        # Wait until repair has the old file open (its fd and ours both link to it).
        real = os.path.realpath(p)
        while sum(os.path.realpath(f"/proc/self/fd/{n}") == real for n in os.listdir("/proc/self/fd")) < 2:
            assert t.is_alive()
            time.sleep(0.001)
        os.rename(p, tmp_path / "a.jsonl.1")
        _log(p, 2, tag="new")
        fresh = p.read_bytes()
    finally:
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)
        t.join()
    (got,) = result
    assert isinstance(got, AuditError) and "was replaced" in str(got), got
    assert (tmp_path / "a.jsonl.1").read_bytes() == damaged and p.read_bytes() == fresh
    assert _side_files(p) == []


def test_repair_with_keys_but_no_signer_refuses_an_unsigned_entry_at_a_checkpoint_seq(tmp_path):
    # With trusted_keys, repair verifies as `verify --key` does, and that requires a signed
    # checkpoint at every checkpoint_every-th seq. An unsigned repair entry landing there was
    # written and then reported as bad_checkpoint (the command said "NOT repaired" about a file it
    # had just changed). Now it refuses up front.
    sk, pk = generate_keypair()
    signer = ReceiptSigner(sk)
    trusted = {signer.key_id: pk}
    p = tmp_path / "a.jsonl"
    lines = _log(p, 5, signer=signer, checkpoint_every=3)
    damaged = b"".join(lines) + b"junk\n"
    p.write_bytes(damaged)
    with pytest.raises(ValueError, match="seq 6, a checkpoint seq"):
        repair_audit_file(p, trusted_keys=trusted, checkpoint_every=3)
    assert p.read_bytes() == damaged and _side_files(p) == []
    rep = repair_audit_file(p, trusted_keys=trusted, checkpoint_every=3, signer=signer)
    assert rep.ok and rep.last_seq == 6
