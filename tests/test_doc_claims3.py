"""Claims audit 12 (branch h-claims12, 2026-12-07): the user-facing statements added or changed
on 2026-12-07 in README.md, docs/architecture.md, docs/threat-model.md, docs/diversity-budget.md,
docs/audit-log.md, docs/eval.md, docs/policy.md and fuzz/README.md, checked against the code.

Pinned here (true, security-relevant, and pinned by no other test):

1. README's first write and read: the point agent-7@support writes into ``employee_records`` is
   stored noised, so a read outside ``hr`` gets a vector that is not the one sent (tests/
   test_docs_examples.py compared the read vector with the unnormalised one sent, which a Cosine
   collection's normalisation alone makes differ).
2. docs/audit-log.md: ``audit repair`` refuses a log below a directory that a uid other than its
   own and root owns, exit 2, naming the directory, with nothing changed.

Wrong and corrected:

3. README said a trust file "below a directory anyone may write" is refused; a key or policy
   file below a world-writable directory WITH the sticky bit (/tmp) is accepted, as the threat
   model says; only the SQLite budget store refuses such a directory.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from qdrant_client.http import models

from qdrant_guard import QdrantClient, keys
from qdrant_guard.audit import AuditLog, repair_audit_file
from qdrant_guard.budget_stores import BudgetStoreError, SqliteBudgetStore
from qdrant_guard.cli import main
from qdrant_guard.errors import AuditError
from qdrant_guard.keys import KeyStoreError
from tests.guardkit import make_kit, snapshot

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
# The quick start's paragraphs in full (the README keeps a summary of them since 2026-12-08).
QUICK_START_PAGE = (ROOT / "docs" / "quick-start.md").read_text(encoding="utf-8")
posix = pytest.mark.skipif(os.name != "posix", reason="file modes and owners are POSIX")
as_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                             reason="chown to another uid needs root")


def test_readme_first_write_is_stored_noised_and_read_outside_hr_as_stored(tmp_path):
    kit = make_kit(tmp_path)
    # The README policy's employee_records section, as it reads.
    cfg = kit.config({"employee_records": {
        "class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"],
        "raw_in_boundary": True, "noise_on_write": True, "text_field": "text", "source_field": "source",
        "noise": {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("agent-7", "support"))
    alice = client.with_principal(kit.principal("alice", "hr"))
    alice.create_collection("employee_records",
                            vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE))
    embedding = [0.05] * 384
    client.upsert("employee_records", [models.PointStruct(id=1, vector=embedding, payload={
        "text": "Jane asked about leave; SSN 123-45-6789", "source": "hr-faq"})])
    sent = np.array(embedding) / np.linalg.norm(embedding)  # what Cosine storage alone would make of it
    [(_, payload, stored)] = snapshot(client, "employee_records")
    assert payload["text"] == "Jane asked about leave; SSN [SSN]" and "_qdrant_guard_receipt" in payload
    assert np.linalg.norm(np.array(stored) - sent) > 0.1  # noised: sigma 0.045 a coordinate at 384-d
    got = client.query_points("employee_records", query=embedding, limit=1, with_vectors=True).points[0]
    assert np.allclose(got.vector, stored) and np.linalg.norm(np.array(got.vector) - sent) > 0.1
    client.close()


def _torn_log(path: Path) -> bytes:
    with AuditLog(path) as log:
        for i in range(3):
            log.append({"event": "e", "i": i})
    with open(path, "ab") as f:
        f.write(b'{"seq": 4, "torn')
    return path.read_bytes()


@posix
@as_root
def test_repair_refuses_a_log_below_a_directory_another_uid_owns(tmp_path, capsys):
    x = tmp_path / "x"
    (x / "sub").mkdir(parents=True)
    x.chmod(0o755)
    p = x / "sub" / "audit.jsonl"
    before = _torn_log(p)
    os.chown(x, 65534, -1)
    with pytest.raises(AuditError) as err:
        repair_audit_file(p)
    assert str(x) in str(err.value) and "65534" in str(err.value) and f"chown {os.geteuid()} {x}" in str(err.value)
    assert main(["audit", "repair", str(p)]) == 2
    capsys.readouterr()
    assert p.read_bytes() == before and not list(p.parent.glob("audit.jsonl.cut-*"))
    os.chown(x, 0, -1)
    assert repair_audit_file(p).ok


@posix
def test_readme_trust_files_sticky_directories_pass_except_for_the_budget_store(tmp_path):
    assert "that anyone may write without the sticky bit (the\nbudget store: even with it) is refused" in QUICK_START_PAGE
    assert not any(re.search(r"below a directory anyone may write or another user owns", t)
                   for t in (README, QUICK_START_PAGE))
    _, pk = keys.generate_keypair()
    shared = tmp_path / "shared"
    shared.mkdir()
    pub = shared / "a.pub"
    pub.write_text(keys.public_key_to_str(pk) + "\n")
    pub.chmod(0o644)
    shared.chmod(0o1777)
    keys.load_public_key(pub)  # sticky, as /tmp: accepted
    with pytest.raises(BudgetStoreError, match="chmod o-w"):
        SqliteBudgetStore(str(shared / "budget.db"))
    shared.chmod(0o777)
    with pytest.raises(KeyStoreError, match="no sticky bit"):
        keys.load_public_key(pub)
