"""Audit chain: every tamper kind is detected and located; crashes, threads and processes."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from qdrant_guard.audit import (
    GENESIS,
    AuditLog,
    entry_hash,
    repair_audit_file,
    verify_audit_file,
)
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import AuditError, AuditIntegrityError
from qdrant_guard.keys import generate_keypair
from qdrant_guard.receipts import ReceiptSigner

ROOT = str(Path(__file__).resolve().parents[1])


def make_log(path, n=10, **kw):
    with AuditLog(path, **kw) as log:
        for i in range(n):
            log.append({"event": "write", "i": i})
    return path


def lines_of(path):
    return Path(path).read_bytes().splitlines(keepends=True)


def write_lines(path, lines):
    Path(path).write_bytes(b"".join(lines))


def rehash(line: bytes, **changes) -> bytes:
    entry = json.loads(line)
    entry.update(changes)
    entry["hash"] = entry_hash(entry)
    return canonical_json(entry) + b"\n"


def test_chain_format(tmp_path):
    p = make_log(tmp_path / "a.jsonl", 3)
    entries = [json.loads(x) for x in lines_of(p)]
    assert [e["seq"] for e in entries] == [1, 2, 3]
    assert entries[0]["prev"] == GENESIS
    for a, b in zip(entries, entries[1:]):
        assert b["prev"] == a["hash"]
    for e, raw in zip(entries, lines_of(p)):
        assert raw == canonical_json(e) + b"\n"
        assert e["hash"] == entry_hash(e)
        assert set(e) == {"seq", "ts", "prev", "record", "hash"}
    rep = verify_audit_file(p)
    assert rep.ok and rep.entries == 3 and rep.valid_prefix == 3 and rep.problem is None
    assert rep.last_hash == entries[-1]["hash"] and rep.valid_bytes == os.path.getsize(p)
    assert (os.stat(p).st_mode & 0o777) == 0o600


def test_reopen_continues_chain(tmp_path):
    p = make_log(tmp_path / "a.jsonl", 4)
    log = AuditLog(p)
    assert log.seq == 4
    e = log.append({"event": "again"})
    assert e["seq"] == 5 and e["prev"] == json.loads(lines_of(p)[3])["hash"]
    log.close()
    assert verify_audit_file(p).ok


def _tampered(tmp_path, kind):
    p = make_log(tmp_path / f"{kind}.jsonl", 10)
    ls = lines_of(p)
    if kind == "edited":
        ls[3] = ls[3].replace(b'"i":3', b'"i":7')
    elif kind == "edited_whitespace":
        ls[3] = json.dumps(json.loads(ls[3])).encode() + b"\n"
    elif kind == "edited_rehashed":
        ls[3] = rehash(ls[3], record={"event": "write", "i": 99})
    elif kind == "deleted":
        del ls[4]
    elif kind == "deleted_head":
        del ls[0]
    elif kind == "deleted_many":
        del ls[2:5]
    elif kind == "reordered":
        ls[4], ls[5] = ls[5], ls[4]
    elif kind == "inserted_forged":
        prev = json.loads(ls[2])
        forged = {"seq": 4, "ts": 1.0, "prev": prev["hash"], "record": {"event": "forged"}}
        forged["hash"] = entry_hash(forged)
        ls.insert(3, canonical_json(forged) + b"\n")
    elif kind == "inserted_replay":
        ls.insert(6, ls[1])
    elif kind == "corrupt":
        ls[6] = b"garbage\n"
    elif kind == "torn":
        ls[-1] = ls[-1][: len(ls[-1]) // 2]
    write_lines(p, ls)
    return verify_audit_file(p)


@pytest.mark.parametrize("kind,problem,line,prefix", [
    ("edited", "edited", 4, 3),
    ("edited_whitespace", "edited", 4, 3),
    ("edited_rehashed", "chain_broken", 5, 4),
    ("deleted", "deleted", 5, 4),
    ("deleted_head", "deleted", 1, 0),
    ("deleted_many", "deleted", 3, 2),
    ("reordered", "reordered", 5, 4),
    ("inserted_forged", "inserted", 4, 3),
    ("inserted_replay", "inserted", 7, 6),
    ("corrupt", "corrupt", 7, 6),
    ("torn", "torn_tail", 10, 9),
])
def test_each_tamper_is_detected_and_located(tmp_path, kind, problem, line, prefix):
    rep = _tampered(tmp_path, kind)
    assert not rep.ok
    assert (rep.problem, rep.index, rep.valid_prefix) == (problem, line, prefix), rep.detail
    assert f"line {line}" in rep.detail
    assert rep.last_seq == prefix


def test_detail_names_the_seq(tmp_path):
    rep = _tampered(tmp_path, "deleted")
    assert "seq 6" in rep.detail and "entry 5 missing" in rep.detail


def test_open_refuses_damaged_file(tmp_path):
    p = make_log(tmp_path / "a.jsonl", 5)
    ls = lines_of(p)
    write_lines(p, ls[:-1] + [ls[-1][:20]])
    with pytest.raises(AuditIntegrityError, match="qdrant-guard audit repair"):
        AuditLog(p)
    write_lines(p, ls[:-1] + [ls[-1].replace(b'"i":4', b'"i":5')])
    with pytest.raises(AuditIntegrityError, match="does not verify"):
        AuditLog(p)
    # Damage before the entries checked on open (back to the last checkpoint, at most
    # checkpoint_every) is found on open only with verify_existing=True.
    write_lines(p, [ls[0], ls[1].replace(b'"i":1', b'"i":9')] + ls[2:])
    AuditLog(p, checkpoint_every=2).close()
    with pytest.raises(AuditIntegrityError, match="the entry before seq 3 does not verify"):
        AuditLog(p)
    with pytest.raises(AuditIntegrityError, match="edited"):
        AuditLog(p, verify_existing=True)


def test_repair_then_append(tmp_path):
    p = make_log(tmp_path / "a.jsonl", 6)
    ls = lines_of(p)
    torn = ls[-1][:30]
    write_lines(p, ls[:-1] + [torn])
    rep = repair_audit_file(p)
    assert rep.ok and rep.entries == 6 and "torn_tail" in rep.detail
    last = json.loads(lines_of(p)[-1])
    assert last["seq"] == 6 and last["record"]["event"] == "audit_repair"
    assert last["record"]["cut_bytes"] == len(torn) and last["record"]["cut_lines"] == 1
    side = tmp_path / last["record"]["cut_file"]
    assert side.read_bytes() == torn
    with AuditLog(p) as log:
        assert log.append({"event": "after"})["seq"] == 7
    assert verify_audit_file(p).ok
    # Repairing a sound file changes nothing.
    before = Path(p).read_bytes()
    assert repair_audit_file(p).ok and Path(p).read_bytes() == before


def test_repair_mid_file_edit_keeps_cut_lines(tmp_path):
    p = make_log(tmp_path / "a.jsonl", 8)
    ls = lines_of(p)
    ls[2] = ls[2].replace(b'"i":2', b'"i":5')
    write_lines(p, ls)
    rep = repair_audit_file(p)
    assert rep.ok and rep.entries == 3
    rec = json.loads(lines_of(p)[-1])["record"]
    assert (rec["problem"], rec["line"], rec["cut_lines"]) == ("edited", 3, 6)
    assert (tmp_path / rec["cut_file"]).read_bytes() == b"".join(ls[2:])


def test_checkpoints_detect_full_rewrite(tmp_path):
    sk, pk = generate_keypair()
    signer = ReceiptSigner(sk)
    trusted = {signer.key_id: pk}
    p = make_log(tmp_path / "a.jsonl", 9, signer=signer, checkpoint_every=3)
    entries = [json.loads(x) for x in lines_of(p)]
    # seq 1 too: a signing writer's first entry in a new log is one (tests/test_audit_v1_rewrite.py).
    assert [e["seq"] for e in entries if "ckpt" in e] == [1, 3, 6, 9]
    rep = verify_audit_file(p, trusted_keys=trusted)
    assert rep.ok and rep.checkpoints == 4
    # An attacker without the key rewrites entry 2 and recomputes every later hash.
    prev = entries[0]["hash"]
    out = [lines_of(p)[0]]
    for e in entries[1:]:
        if e["seq"] == 2:
            e["record"] = {"event": "rewritten"}
        e["prev"] = prev
        e["hash"] = entry_hash(e)
        prev = e["hash"]
        out.append(canonical_json(e) + b"\n")
    write_lines(p, out)
    assert verify_audit_file(p).ok  # the bare hash chain cannot see a full rewrite...
    rep = verify_audit_file(p, trusted_keys=trusted)  # ...the signed checkpoint does
    assert (rep.problem, rep.index, rep.valid_prefix) == ("bad_checkpoint", 3, 2)
    assert verify_audit_file(p, trusted_keys={}).problem == "bad_checkpoint"


def test_stripping_checkpoints_does_not_hide_a_full_rewrite(tmp_path):
    # ckpt is outside the hash, so an attacker who rewrites entry 2 and recomputes every later
    # hash can simply drop the checkpoints they cannot re-sign. The verifier must expect one at
    # every checkpoint_every-th seq, or a rewritten log "verifies" with the key, 0 checkpoints.
    sk, pk = generate_keypair()
    signer = ReceiptSigner(sk)
    trusted = {signer.key_id: pk}
    p = make_log(tmp_path / "a.jsonl", 1001, signer=signer)  # the default: every 1000th entry
    assert verify_audit_file(p, trusted_keys=trusted).checkpoints == 2  # and seq 1, the first
    entries = [json.loads(x) for x in lines_of(p)]
    prev = entries[0]["hash"]
    out = [lines_of(p)[0]]
    for e in entries[1:]:
        if e["seq"] == 2:
            e["record"] = {"event": "rewritten"}
        e.pop("ckpt", None)
        e["prev"] = prev
        e["hash"] = entry_hash(e)
        prev = e["hash"]
        out.append(canonical_json(e) + b"\n")
    write_lines(p, out)
    assert verify_audit_file(p).ok  # the bare chain cannot tell...
    rep = verify_audit_file(p, trusted_keys=trusted)  # ...the missing checkpoint does
    assert (rep.ok, rep.problem, rep.index, rep.valid_prefix) == (False, "bad_checkpoint", 1000, 999)
    assert "no checkpoint" in rep.detail
    # A custom period is verified with the same period.
    q = make_log(tmp_path / "b.jsonl", 7, signer=signer, checkpoint_every=3)
    assert verify_audit_file(q, trusted_keys=trusted, checkpoint_every=3).checkpoints == 3
    write_lines(q, [canonical_json({k: v for k, v in json.loads(x).items() if k != "ckpt"}) + b"\n"
                    for x in lines_of(q)])
    rep = verify_audit_file(q, trusted_keys=trusted, checkpoint_every=3)
    assert (rep.problem, rep.index) == ("bad_checkpoint", 3)


def test_deeply_nested_line_is_corrupt_and_repairable(tmp_path):
    # json raises RecursionError (not ValueError) on deep nesting: verify, repair and opening the
    # log must still treat such a line as corrupt instead of crashing.
    p = make_log(tmp_path / "a.jsonl", 3)
    good = Path(p).read_bytes()
    with open(p, "ab") as fh:
        fh.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    rep = verify_audit_file(p)
    assert (rep.ok, rep.problem, rep.index, rep.valid_prefix) == (False, "corrupt", 4, 3)
    with pytest.raises(AuditIntegrityError):
        AuditLog(p)
    assert repair_audit_file(p).ok
    assert Path(p).read_bytes().startswith(good) and verify_audit_file(p).entries == 4


def test_truncating_whole_entries_needs_an_anchor(tmp_path):
    p = tmp_path / "a.jsonl"
    log = AuditLog(p)
    for i in range(5):
        log.append({"i": i})
    anchor = log.last_hash
    log.close()
    write_lines(p, lines_of(p)[:3])
    rep = verify_audit_file(p)
    assert rep.ok  # documented: a clean cut at a line boundary is invisible without an anchor
    assert rep.last_hash != anchor


def test_logging_and_memory_mode(caplog):
    caplog.set_level(logging.INFO, logger="qdrant_guard.audit.test")
    log = AuditLog(None, logger_name="qdrant_guard.audit.test")
    a = log.append({"event": "x"})
    b = log.append({"event": "y"})
    assert (a["seq"], b["seq"], b["prev"]) == (1, 2, a["hash"])
    assert a["prev"] == GENESIS and b["hash"] == entry_hash(b)
    got = [r.qdrant_guard for r in caplog.records if r.name == "qdrant_guard.audit.test"]
    assert got == [a, b]
    assert "event=y" in caplog.records[-1].getMessage()


def test_argument_and_write_errors(tmp_path):
    log = AuditLog(tmp_path / "a.jsonl")
    with pytest.raises(TypeError):
        log.append([1])
    with pytest.raises(TypeError):
        log.append({"x": object()})
    with pytest.raises(ValueError):
        log.append({"x": float("nan")})
    assert log.seq == 0  # nothing was written
    with pytest.raises(TypeError):
        AuditLog(5)
    with pytest.raises(ValueError):
        AuditLog(None, checkpoint_every=0)
    with pytest.raises(AuditError, match="nodir"):
        AuditLog(tmp_path / "nodir" / "a.jsonl")
    with pytest.raises(AuditError):
        verify_audit_file(tmp_path / "missing.jsonl")
    with pytest.raises(TypeError):
        verify_audit_file(None)


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs RLIMIT_FSIZE")
def test_write_failure_raises_audit_error(tmp_path):
    # A file size limit of 0 makes every write fail (EFBIG); /dev/full did, but a device is no
    # log the writer can re-read and is refused at open (tests/test_review42.py).
    import resource
    log = AuditLog(tmp_path / "a.jsonl")
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, limits[1]))
    try:
        with pytest.raises(AuditError, match="cannot write"):
            log.append({"event": "x"})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert log.seq == 0


def test_concurrent_threads(tmp_path):
    p = tmp_path / "a.jsonl"
    shared = AuditLog(p)
    own = [AuditLog(p) for _ in range(4)]  # separate descriptors: flock serialises them too
    logs = [shared] * 4 + own

    def work(k):
        for i in range(50):
            logs[k].append({"t": k, "i": i})

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rep = verify_audit_file(p)
    assert rep.ok and rep.entries == 400, rep.detail
    entries = [json.loads(x) for x in lines_of(p)]
    assert [e["seq"] for e in entries] == list(range(1, 401))
    assert sorted((e["record"]["t"], e["record"]["i"]) for e in entries) == [
        (k, i) for k in range(8) for i in range(50)]


_WRITER = r"""
import sys
from qdrant_guard.audit import AuditLog
log = AuditLog(sys.argv[1])
for i in range(int(sys.argv[3])):
    log.append({"writer": sys.argv[2], "i": i})
"""


def test_two_processes_append_to_one_file(tmp_path):
    p = str(tmp_path / "a.jsonl")
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, p, name, "150"], env=env)
             for name in ("a", "b")]
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    rep = verify_audit_file(p)
    assert rep.ok and rep.entries == 300, rep.detail
    recs = [json.loads(x)["record"] for x in lines_of(p)]
    for name in ("a", "b"):
        assert [r["i"] for r in recs if r["writer"] == name] == list(range(150))


_BULK_WRITER = r"""
import sys
from qdrant_guard.audit import AuditLog
log = AuditLog(sys.argv[1])
for i in range(3):
    log.append({"event": "small", "i": i})
blob = "x" * (32 << 20)
i = 0
while True:
    log.append({"event": "bulk", "i": i, "blob": blob})
    i += 1
"""


def _kill_mid_write(path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-c", _BULK_WRITER, path], env=env)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(path):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.001)
        fd = os.open(path, os.O_RDONLY)
        try:
            # Kill as soon as a big entry is seen half-written (the file does not end in "\n").
            while True:
                assert time.monotonic() < deadline and proc.poll() is None
                size = os.fstat(fd).st_size
                if size > 4096 and os.pread(fd, 1, size - 1) != b"\n":
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        finally:
            os.close(fd)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_sigkilled_writer_leaves_torn_tail_that_is_reported_and_repaired(tmp_path):
    torn_seen = False
    for attempt in range(3):
        p = str(tmp_path / f"k{attempt}.jsonl")
        _kill_mid_write(p)
        data = Path(p).read_bytes()
        complete = data.count(b"\n")
        rep = verify_audit_file(p)
        if data.endswith(b"\n"):
            # The write finished between the check and the kill: a sound chain.
            assert rep.ok and rep.valid_prefix == complete
            continue
        torn_seen = True
        assert not rep.ok and rep.problem == "torn_tail"
        assert rep.valid_prefix == complete >= 3 and rep.index == complete + 1
        with pytest.raises(AuditIntegrityError):
            AuditLog(p)
        fixed = repair_audit_file(p)
        assert fixed.ok and fixed.valid_prefix == complete + 1
        with AuditLog(p) as log:
            log.append({"event": "after-crash"})
        assert verify_audit_file(p).ok
        break
    assert torn_seen, "no SIGKILL landed mid-write in 3 attempts"
