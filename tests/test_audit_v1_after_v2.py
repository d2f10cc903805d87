"""The audit writer refuses v1 entries after v2 ones even when its window on open holds no v2 entry.

A writer with a signing key writes format v2 (its writer id and MAC), so a v1 entry after a v2
one is what someone who can write the file appends. On open the writer reads back only to the most
recent checkpoint, at most ``checkpoint_every`` entries: a forger who appended that many v1 entries
(no checkpoint among them: it cannot sign one) left it a window of v1 entries only, which it took
for a log begun before v2 and signed over at its next checkpoint. Now a window that ends on its
length at a v1 entry is followed by a search of the bytes before it for a v2 entry; and a writer's
first v2 entry in a log that held none is a checkpoint, which later opens stop at. All on real
files; every test named ``*refused*`` opens or appends without error on the code before.
"""
from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from qdrant_client.http import models

from qdrant_guard import AuditUnauthenticatedError, QdrantClient, keys
from qdrant_guard import audit as audit_mod
from qdrant_guard.audit import AuditLog, verify_audit_file
from qdrant_guard.audit_mac import entry_mac, writer_keys
from qdrant_guard.canonical import canonical_json
from qdrant_guard.receipts import ReceiptSigner

from guardkit import make_kit, pii_writer, unit

ROOT = Path(__file__).resolve().parents[1]


def _signer() -> tuple[object, ReceiptSigner]:
    sk, _ = keys.generate_keypair()
    return sk, ReceiptSigner(sk)


def _last(p) -> dict:
    return json.loads(Path(p).read_bytes().splitlines()[-1])


def _forged_line(seq: int, prev: str, pad: int = 0, w: str | None = None, mac_key: bytes | None = None) -> bytes:
    # What anyone who can write the file can make: a self-consistent entry with a recomputed hash.
    entry = {"seq": seq, "ts": 1.0, "prev": prev, "record": {"event": "write", "forged": True, "pad": "x" * pad}}
    if w is not None:
        entry["w"] = w
    entry["hash"] = hashlib.sha256(canonical_json(entry)).hexdigest()
    if w is not None:
        entry["mac"] = entry_mac(mac_key, bytes.fromhex(entry["hash"])) if mac_key else "ab" * 32
    return canonical_json(entry) + b"\n"


def _forge(p, n: int, pad: int = 0) -> list[int]:
    seqs = []
    with open(p, "ab") as fh:
        for _ in range(n):
            last = _last(p)
            fh.write(_forged_line(last["seq"] + 1, last["hash"], pad))
            fh.flush()
            seqs.append(last["seq"] + 1)
    return seqs


def _refused_on_open(p, signer, every, seqs, **kw):
    before = Path(p).read_bytes()
    with pytest.raises(AuditUnauthenticatedError) as err:
        AuditLog(p, signer=signer, checkpoint_every=every, **kw)
    assert err.value.seqs == tuple(seqs), err.value.seqs
    assert "carries no writer MAC (format v1) after entries in format v2" in str(err.value)
    assert Path(p).read_bytes() == before  # nothing written, so no checkpoint signs them
    return str(err.value)



def _legacy_log(tmp_path, n):
    """A log of ``n`` v1 entries, as a guard without signing_key writes them."""
    p = tmp_path / "audit.jsonl"
    with AuditLog(p) as legacy:
        for i in range(n):
            legacy.append({"event": "legacy", "i": i})
    return p

def test_a_window_of_forged_v1_entries_after_a_v2_log_is_refused(tmp_path):
    # 7 guard entries (a checkpoint at 5), then 6 forged: the window (6 entries) is all v1.
    _, signer = _signer()
    p = tmp_path / "audit.jsonl"
    with AuditLog(p, signer=signer, checkpoint_every=5) as log:
        for i in range(7):
            log.append({"event": "write", "i": i})
    forged = _forge(p, 6)
    msg = _refused_on_open(p, signer, 5, forged)
    assert "format v2 (seq 7 is one)" in msg


def test_forged_v1_entries_before_the_window_are_refused_and_named(tmp_path):
    # More forged entries than the window holds: those between the last v2 entry and the window
    # are named too (the next checkpoint would sign them as well).
    _, signer = _signer()
    p = tmp_path / "audit.jsonl"
    with AuditLog(p, signer=signer, checkpoint_every=4) as log:
        for i in range(6):
            log.append({"event": "write", "i": i})
    forged = _forge(p, 11)
    _refused_on_open(p, signer, 4, forged)


def test_forged_v1_entries_before_a_trusted_guards_entry_in_the_window_are_refused(tmp_path):
    # The window ends on its length at a v1 entry and holds a later v2 entry (another guard's):
    # the v1 entries before that one in the window passed as entries of a log begun before v2.
    ska, sa = _signer()
    skb, sb = _signer()
    p = tmp_path / "audit.jsonl"
    trust = {sb.key_id: sb.public_key}
    with AuditLog(p, signer=sa, checkpoint_every=5, trusted_keys=trust) as log:
        for i in range(3):
            log.append({"event": "write", "i": i})
    forged = _forge(p, 8)
    last = _last(p)
    with open(p, "ab") as fh:  # a genuine entry of guard B, MAC and all
        fh.write(_forged_line(last["seq"] + 1, last["hash"], w=sb.key_id, mac_key=writer_keys([skb])[sb.key_id]))
    _refused_on_open(p, sa, 5, forged, trusted_keys=trust)


def test_an_upgraded_logs_forged_v1_tail_is_refused(tmp_path):
    # A log begun by a guard without signing_key (v1, no checkpoints), then a guard with one: its
    # first entry is a checkpoint. Forged v1 entries after it are refused on open, and the v1
    # entries before it stay accepted.
    _, signer = _signer()
    p = _legacy_log(tmp_path, 12)
    with AuditLog(p, signer=signer, checkpoint_every=5) as log:
        first = log.append({"event": "write"})
    assert first["seq"] == 13 and first["w"] == signer.key_id and first["ckpt"]["kid"] == signer.key_id
    forged = _forge(p, 6)
    _refused_on_open(p, signer, 5, forged)


def test_the_first_v2_entry_of_an_upgraded_log_is_a_checkpoint_that_ends_later_windows(tmp_path, monkeypatch):
    sk, signer = _signer()
    p = _legacy_log(tmp_path, 12)
    # Opening the v1-only log searches it for a v2 entry (there is none): it opens.
    with AuditLog(p, signer=signer, checkpoint_every=5) as log:
        entries = [log.append({"event": "write", "i": i}) for i in range(3)]
    assert ["ckpt" in e for e in entries] == [True, False, True]  # 13: the first v2; 15: the grid
    # A later open stops at a checkpoint: it has no reason to search the v1 entries before it.
    def no_search(fd, end):
        raise AssertionError("searched the bytes before the window")
    monkeypatch.setattr(audit_mod, "_last_v2_before", no_search)
    with AuditLog(p, signer=signer, checkpoint_every=5) as log:
        assert log.append({"event": "write"})["seq"] == 16
    rep = verify_audit_file(p, writer_keys=writer_keys([sk]))
    assert rep.ok and rep.legacy == 12 and dict(rep.writers) == {signer.key_id: 4}, rep.detail


def test_a_v1_only_log_still_opens_for_a_signing_writer(tmp_path):
    # Control: a log begun before v2 (or by a guard without signing_key) is no forgery.
    _, signer = _signer()
    p = _legacy_log(tmp_path, 20)
    with AuditLog(p, signer=signer, checkpoint_every=5) as log:
        assert log.append({"event": "write"})["seq"] == 21


def test_refused_across_search_blocks_and_long_lines(tmp_path):
    # The search reads 1 MiB blocks backwards: a v2 line longer than a block, and v1 lines that
    # span block ends between it and the window.
    _, signer = _signer()
    p = tmp_path / "audit.jsonl"
    with AuditLog(p, signer=signer, checkpoint_every=3) as log:
        log.append({"event": "write"})
        log.append({"event": "write", "big": "y" * (3 << 20)})  # seq 2: v2, 3 MiB, no checkpoint
    forged = _forge(p, 6, pad=700_000)
    _refused_on_open(p, signer, 3, forged)


def test_refused_when_the_v2_lines_end_straddles_a_search_block(tmp_path):
    # The v2 line's closing '"}' and its newline fall on both sides of the 1 MiB block boundary.
    _, signer = _signer()
    p = tmp_path / "audit.jsonl"
    with AuditLog(p, signer=signer, checkpoint_every=2) as log:
        log.append({"event": "write"})  # seq 1, v2 (no checkpoint: 2 would be one)
    v2_end = p.stat().st_size
    for cut in (1, 2):
        q = tmp_path / f"audit-{cut}.jsonl"
        q.write_bytes(p.read_bytes())
        q.chmod(0o600)
        # One forged line before the window (every=2: the window is the last 3 lines), sized so
        # the window starts 1 MiB - cut bytes after the end of the v2 line.
        last = _last(q)
        probe = len(_forged_line(2, last["hash"], 0))
        line = _forged_line(2, last["hash"], (1 << 20) - cut - probe)
        # The block boundary is window start - 1 MiB = v2_end - cut: inside '"}\n' for cut 1 and 2.
        assert v2_end + len(line) - (1 << 20) == v2_end - cut
        with open(q, "ab") as fh:
            fh.write(line)
        forged = [2] + _forge(q, 3)
        _refused_on_open(q, signer, 2, forged)


def test_guard_refuses_to_start_on_a_log_with_a_window_of_forged_v1_entries(tmp_path):
    # The guarded client (checkpoint every 1000): 1001 entries appended by someone who can write
    # the file, none with a MAC; the next start used to open it and sign them at its checkpoint.
    kit = make_kit(tmp_path)
    owner, _ = pii_writer(kit)
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(3)), payload={"source": "a"})])
    owner.close()
    log = tmp_path / "audit.jsonl"
    forged = _forge(log, 1001)
    with pytest.raises(AuditUnauthenticatedError) as err:
        pii_writer(kit)
    assert err.value.seqs == tuple(forged)


def test_limit_a_window_ending_at_a_v1_checkpoint_is_not_searched(tmp_path):
    # A checkpoint in format v1 is what a qdrant-guard before v2 signed with the key: the window
    # ends there and nothing before it is searched, so v1 entries after it pass even when a v2
    # entry precedes it (an older guard writing after this one; docs/audit-log.md says so).
    _, signer = _signer()
    p = tmp_path / "audit.jsonl"
    with AuditLog(p, signer=signer, checkpoint_every=5) as log:
        log.append({"event": "write"})  # seq 1, v2
    _forge(p, 3)
    last = _last(p)
    entry = {"seq": 5, "ts": 1.0, "prev": last["hash"], "record": {"event": "old-guard"}}
    entry["hash"] = hashlib.sha256(canonical_json(entry)).hexdigest()
    sig = signer.sign(audit_mod.CHECKPOINT_PREFIX + bytes.fromhex(entry["hash"]))
    entry["ckpt"] = {"kid": signer.key_id, "sig": base64.b64encode(sig).decode("ascii")}
    with open(p, "ab") as fh:
        fh.write(canonical_json(entry) + b"\n")
    _forge(p, 3)
    with AuditLog(p, signer=signer, checkpoint_every=5) as log:
        assert log.append({"event": "write"})["seq"] == 9
    doc = " ".join((ROOT / "docs" / "audit-log.md").read_text().split())
    assert "the v1 entries after it are let through, as in a log begun before v2, even if a v2 entry precedes it" in doc


def test_docs_say_what_the_open_check_covers():
    doc = " ".join((ROOT / "docs" / "audit-log.md").read_text().split())
    assert "searches the bytes before the window for an entry in format v2" in doc
    assert "a v1 entry in a log with no v2 entry in the writer's window on open" not in doc
