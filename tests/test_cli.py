"""The qdrant-guard command, run as a real subprocess.

Each test runs each command it uses at least once as a subprocess; its further calls of the same
command (other inputs, the refusals) run in process (``here``), which saves an interpreter start-up
each and checks the same output and exit status.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from guardkit import run_cli
from qdrant_guard import keys, verify_credential


def _checked(proc, check):
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def run(*args, check=True, cwd=None):
    return _checked(subprocess.run([sys.executable, "-m", "qdrant_guard.cli", *args], capture_output=True,
                                   text=True, env={**os.environ}, cwd=cwd, timeout=300), check)


def here(*args, check=True):
    return _checked(run_cli(*args), check)


def test_keys_new_and_credential_issue(tmp_path):
    out = json.loads(run("keys", "new", "--out", str(tmp_path / "hr.key")).stdout)
    assert stat.S_IMODE(os.stat(tmp_path / "hr.key").st_mode) == 0o600
    assert out["key_id"].startswith("ed25519:")
    again = here("keys", "new", "--out", str(tmp_path / "hr.key"), check=False)
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr
    token = run("credential", "issue", "--authority", str(tmp_path / "hr.key"), "--agent", "alice",
                "--boundary", "hr", "--ttl", "60").stdout.strip()
    pub = keys.load_public_key(str(tmp_path / "hr.key.pub"))
    v = verify_credential(token, authorities={"hr": [pub]})
    assert (v.agent_id, v.boundary) == ("alice", "hr")


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    work = tmp_path_factory.mktemp("demo")
    proc = run("demo", "--workdir", str(work))
    assert "all expectations hold" in proc.stdout
    for label in ("NOISE_REQUIRED", "REFUSED_CROSS_BOUNDARY", "VERIFIED"):
        assert label in proc.stdout
    return work


def test_demo_passes_and_its_receipts_verify_from_the_cli(demo_dir):
    proc = run("receipt", "verify", "--path", str(demo_dir / "store"), "--collection", "shared_queries",
               "--policy", str(demo_dir / "policy.toml"))
    assert "1/1 receipted vectors verify" in proc.stdout


def test_audit_verify_detects_an_edited_entry(demo_dir, tmp_path):
    log = demo_dir / "audit.jsonl"
    assert "OK:" in run("audit", "verify", str(log)).stdout
    lines = log.read_text().splitlines()
    lines[2] = lines[2].replace("NOISE_REQUIRED", "ALLOW_NOISED") if "NOISE_REQUIRED" in lines[2] else lines[2].replace('"op"', '"op "')
    bad = tmp_path / "edited.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    proc = here("audit", "verify", str(bad), check=False)
    assert proc.returncode == 1
    assert "TAMPERED" in proc.stdout and "line 3" in proc.stdout
    del_one = tmp_path / "deleted.jsonl"
    del_one.write_text("\n".join(lines[:1] + lines[2:]) + "\n")
    assert here("audit", "verify", str(del_one), check=False).returncode == 1


def test_audit_replay_reports_newly_blocked_queries(tmp_path):
    from guardkit import make_kit

    from qdrant_client import models
    from qdrant_guard import QdrantClient

    kit = make_kit(tmp_path)
    policy = tmp_path / "policy.toml"
    policy.write_text(textwrap.dedent(f"""
        audit_log = "audit.jsonl"
        [boundaries.hr]
        authority_keys = ["{kit.authority_pub['hr']}"]
        [collections.docs]
        class = "PII"
        owner = "hr"
        raw_in_boundary = true
        [collections.docs.diversity]
        enabled = false
        [collections.docs.intent]
        enabled = false
    """))
    strict = tmp_path / "strict.toml"
    strict.write_text(policy.read_text() + "[collections.docs.query]\nmax_tokens = 4\n")
    client = QdrantClient(":memory:", guard=str(policy), principal=kit.principal("alice", "hr"))
    client.create_collection("docs", vectors_config=models.VectorParams(size=4, distance=models.Distance.DOT))
    client.upsert("docs", [models.PointStruct(id=1, vector=[0.1, 0.2, 0.3, 0.4])])
    for text in ["short query", "a much longer query with many words in it", "SSN 123-45-6789 lookup"]:
        client.query_points("docs", query=[0.1, 0.2, 0.3, 0.4], query_text=text)
    client.close()
    proc = run("audit", "replay", str(tmp_path / "audit.jsonl"), "--policy", str(strict))
    assert "replayed 2 logged queries" in proc.stdout
    assert "1 with redacted text" in proc.stdout
    assert "newly_blocked" in proc.stdout and "QUERY_REJECTED" in proc.stdout
    same = here("audit", "replay", str(tmp_path / "audit.jsonl"), "--policy", str(policy))
    assert "no change" in same.stdout


def test_guard_audit_log_carries_checkpoints_signed_with_the_guard_key(tmp_path):
    from guardkit import create, make_kit

    from qdrant_guard import GuardRefusal, QdrantClient

    kit = make_kit(tmp_path)
    cfg = kit.config({"docs": {"class": "PII", "owner": "hr", "raw_in_boundary": True}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "docs")
    for _ in range(1000):  # every 1000th entry is a checkpoint, and the guard's first in the log
        with pytest.raises(GuardRefusal):
            client.query_points("docs", query=[0.1] * 16, query_text="refund " * 200)
    client.close()
    log = tmp_path / "audit.jsonl"
    guard_pub = tmp_path / "guard.key.pub"
    guard_pub.write_bytes(keys.public_key_to_pem(keys.load_private_key(kit.guard_key_path).public_key()))
    assert "2 signed checkpoint(s) verified" in run("audit", "verify", str(log), "--key", str(guard_pub)).stdout
    _, other = keys.generate_keypair()
    proc = here("audit", "verify", str(log), "--key", keys.public_key_to_str(other), check=False)
    assert proc.returncode == 1 and "bad_checkpoint" in proc.stdout
    # A torn tail, repaired with the guard's key: the repair entry is a third signed checkpoint.
    with open(log, "ab") as fh:
        fh.write(b'{"seq": 99999, "torn')
    assert here("audit", "verify", str(log), check=False).returncode == 1
    assert "repaired" in run("audit", "repair", str(log), "--signing-key", str(kit.guard_key_path)).stdout
    assert "3 signed checkpoint(s) verified" in here("audit", "verify", str(log), "--key", str(guard_pub)).stdout


def test_audit_verify_with_key_refuses_a_rewrite_with_checkpoints_stripped(tmp_path):
    from qdrant_guard.audit import AuditLog, entry_hash
    from qdrant_guard.canonical import canonical_json
    from qdrant_guard.receipts import ReceiptSigner

    sk, pk = keys.generate_keypair()
    log = tmp_path / "audit.jsonl"
    with AuditLog(log, signer=ReceiptSigner(sk), checkpoint_every=4) as a:
        for i in range(9):
            a.append({"event": "write", "i": i})
    assert "3 signed checkpoint(s)" in run("audit", "verify", str(log), "--key", keys.public_key_to_str(pk),
                                           "--checkpoint-every", "4").stdout
    # Rewrite entry 1 and every later hash, dropping the checkpoints that cannot be re-signed.
    prev, out = "0" * 64, []
    for n, line in enumerate(log.read_bytes().splitlines()):
        e = json.loads(line)
        e.pop("ckpt", None)
        if n == 0:
            e["record"] = {"event": "forged"}
        e["prev"], e["hash"] = prev, None
        e["hash"] = prev = entry_hash(e)
        out.append(canonical_json(e) + b"\n")
    log.write_bytes(b"".join(out))
    assert here("audit", "verify", str(log)).returncode == 0
    proc = here("audit", "verify", str(log), "--key", keys.public_key_to_str(pk), "--checkpoint-every", "4",
               check=False)
    assert proc.returncode == 1 and "bad_checkpoint at line 4" in proc.stdout


def test_demo_never_leaves_a_private_key_readable_by_others(tmp_path):
    # The demo used to write each key with the umask's mode (0644) and chmod it afterwards: in
    # between, any local user could open the file and keep reading the key. An audit hook sees
    # every later open/chmod and checks the key files that exist at that moment.
    script = textwrap.dedent(f"""
        import os, stat, sys
        from pathlib import Path
        from qdrant_guard.demo import _setup
        work = Path({str(tmp_path)!r})
        bad = []
        def hook(event, args):
            if event in ("open", "os.chmod"):
                for p in work.glob("*.key"):
                    mode = stat.S_IMODE(os.stat(p).st_mode)
                    if mode & 0o077:
                        bad.append((p.name, oct(mode)))
        os.umask(0o022)
        sys.addaudithook(hook)
        _setup(work)
        _setup(work)  # a rerun in the same workdir rewrites the keys just as safely
        print("BAD", sorted(set(bad)) if bad else "none")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "BAD none" in proc.stdout, proc.stdout
    for name in ("guard.key", "hr-authority.key", "support-authority.key", "support-agent.key"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600
