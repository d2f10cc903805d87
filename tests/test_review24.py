"""Twenty-second review (audit log, adversarial): what an attacker who can write the log file can
make the verifier and the writer say.

Each test pins a defect found in review and failed on the code before the fix next to it.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from guardkit import run_cli
from qdrant_guard import keys
from qdrant_guard.audit import AuditLog, verify_audit_file
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import AuditIntegrityError
from qdrant_guard.receipts import ReceiptSigner

# A key id is text taken from the file (ckpt is outside the hash, so anyone can set it without
# breaking the chain). Raw, it ended the verifier's TAMPERED line and printed a forged "OK:" line,
# then moved the cursor up and erased the real verdict on a terminal.
FORGED_KID = ("x\nOK: 3 entries, hash chain intact, 1 signed checkpoint(s) verified (audit.jsonl)\n"
              "\x1b[1A\x1b[2K\r")


def _rec(i: int) -> dict:
    return {"op": "query_points", "collection": "docs", "verdict": "ALLOW", "details": {"query_text": f"q{i}"}}


def _forge_kid(path: Path, signer: ReceiptSigner, n: int, line: int, kid: str = FORGED_KID) -> None:
    with AuditLog(path, signer=signer, checkpoint_every=2) as log:
        for i in range(n):
            log.append(_rec(i))
    lines = path.read_bytes().splitlines(keepends=True)
    entry = json.loads(lines[line - 1])
    assert "ckpt" in entry
    entry["ckpt"]["kid"] = kid
    lines[line - 1] = canonical_json(entry) + b"\n"
    path.write_bytes(b"".join(lines))


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    # In process: what `audit verify` prints; tests/test_cli.py runs it as a real subprocess.
    return run_cli(*args)


def test_verify_cli_does_not_print_a_forged_key_id_raw(tmp_path):
    signer = ReceiptSigner(keys.generate_keypair()[0])
    p = tmp_path / "audit.jsonl"
    _forge_kid(p, signer, 3, 2)
    rep = verify_audit_file(p, trusted_keys={signer.key_id: signer.public_key}, checkpoint_every=2)
    assert not rep.ok and rep.problem == "bad_checkpoint" and rep.index == 2
    assert "\n" not in rep.detail and "\x1b" not in rep.detail and "\r" not in rep.detail, rep.detail
    proc = _run_cli("audit", "verify", str(p), "--key", keys.public_key_to_str(signer.public_key),
                    "--checkpoint-every", "2")
    assert proc.returncode == 1, proc
    out = proc.stdout.splitlines()
    assert out[0].startswith("TAMPERED: bad_checkpoint at line 2"), proc.stdout
    assert not any(line.startswith("OK") for line in out), proc.stdout
    assert "\x1b" not in proc.stdout and "\r" not in proc.stdout, proc.stdout
    # The key id is still shown, escaped, so the operator sees what the file claims.
    assert "\\x1b[1A" in proc.stdout and "\\nOK: 3 entries" in proc.stdout


def test_writer_refusal_on_open_does_not_carry_a_forged_key_id_raw(tmp_path):
    # The guard's AuditLog refuses to open the log, and its error (shown at start-up, usually
    # logged line by line) carried the forged text raw: a fake log line of the attacker's choice.
    signer = ReceiptSigner(keys.generate_keypair()[0])
    p = tmp_path / "audit.jsonl"
    _forge_kid(p, signer, 2, 2)
    with pytest.raises(AuditIntegrityError, match="signed by key 'x\\\\nOK") as ei:
        AuditLog(p, signer=signer, checkpoint_every=2)
    msg = str(ei.value)
    assert "\n" not in msg and "\x1b" not in msg and "\r" not in msg, msg


def test_replay_report_does_not_print_a_logged_text_source_raw(tmp_path):
    # An entry's query_texts[i].from was printed raw in the NOT REPLAYED list. Without --key any
    # self-consistent log replays as verified (and with it, entries after the last checkpoint), so
    # a forged "from" with newlines wrote report lines of its own ("replayed 99 ...") into the replay.
    import io

    from qdrant_client.http import models

    from guardkit import Recorder, create, make_kit, replay_policy_file
    from qdrant_guard import QdrantClient
    from qdrant_guard.replay import replay_log

    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}}
    c = QdrantClient(":memory:", guard=kit.config({"docs": pol}), principal=kit.principal("alice", "hr"),
                     embedder=Recorder())
    create(c, "docs")
    c.query_points("docs", query=models.Document(text="a document query", model="hashing"), query_text="short")
    c.close()
    log = kit.tmp / "audit.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    rec = json.loads(lines[-1])["record"]
    assert rec["op"] == "query_points" and len(rec["details"]["query_texts"]) == 2
    rec["details"]["query_texts"][0]["from"] = "query_text)\nreplayed 99 logged queries\n\x1b[2K"
    rec["details"]["query_texts"][1]["query_text"] = "[EMAIL]"  # redacted: listed as not replayed
    with AuditLog(tmp_path / "forged.jsonl") as forged:
        for raw in lines[:-1]:
            forged.append(json.loads(raw)["record"])
        forged.append(rec)
    out = io.StringIO()
    replay_log(str(tmp_path / "forged.jsonl"), str(replay_policy_file(kit)), out=out)
    text = out.getvalue()
    assert "NOT REPLAYED: 1 entries" in text, text
    assert "\nreplayed 99" not in text and "\x1b" not in text, text
    assert "\\nreplayed 99 logged queries\\n" in text, text


def test_bench_counts_audit_entries_holding_a_line_separator(tmp_path):
    # qdrant-guard bench read the audit log with str.splitlines(), which splits an entry whose
    # caller text holds U+2028 raw (canonical JSON keeps it) into two halves that are no JSON.
    from qdrant_guard.audit import AuditLog
    from qdrant_guard.overhead import audit_op_counts

    log = AuditLog(str(tmp_path / "a.jsonl"))
    log.append({"op": "query_points", "text": "a\u2028b\u2029c\x85d"})
    log.append({"op": "upsert"})
    assert audit_op_counts(str(tmp_path / "a.jsonl")) == ({"query_points": 1, "upsert": 1}, 0)
