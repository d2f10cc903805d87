"""Mutation pass 37: the mutants earlier hot passes reported killed because scripts/mutate_hot.py
could not patch them in (a deleted ``super().__init__``/``super().close`` changes the method's
free variables, and the failed swap counted as a kill), rerun cold; what they showed untested.

Real audit logs and a real local-mode store; nothing mocked.
"""
from __future__ import annotations

import json
import logging
import time

import numpy as np
import pytest
from qdrant_client.http import models
from guardkit import audit_records, make_kit, unit
from test_audit_writer_macs import _append_raw, _forged, _guard_log, _last

from qdrant_guard import AuditUnauthenticatedError, QdrantClient, keys
from qdrant_guard.audit import AuditLog, repair_audit_file, verify_audit_file
from qdrant_guard.boundary import CredentialRejected
from qdrant_guard.receipts import ReceiptSigner


def test_the_writers_refusal_of_an_unvouched_entry_is_the_text_of_its_alert(tmp_path, caplog):
    # errors.py: the error keeps its message as its text, the seqs apart (``super().__init__``
    # deleted, it read as a tuple of both: "('audit log ...', (4,))").
    p, _, _, _, log = _guard_log(tmp_path)
    last = _last(p)
    _append_raw(p, _forged(last["seq"] + 1, last["hash"]))
    with caplog.at_level(logging.ERROR), pytest.raises(AuditUnauthenticatedError) as err:
        log.append({"event": "write", "after": "forgery"})
    alerts = [r.getMessage() for r in caplog.records if "unauthenticated entries" in r.getMessage()]
    assert alerts == [f"qdrant_guard audit unauthenticated entries: {err.value}"]
    assert str(err.value).startswith(f"audit log {str(p)!r}: seq 4 ") and err.value.seqs == (4,)


def test_the_refused_repair_says_it_changed_nothing_last(tmp_path):
    p, _, _, signer, log = _guard_log(tmp_path)
    log.close()
    last = _last(p)
    _append_raw(p, _forged(last["seq"] + 1, last["hash"]))
    _append_raw(p, b'{"seq":5,"ts":1.0,"pr')
    with pytest.raises(AuditUnauthenticatedError) as err:
        repair_audit_file(p, signer=signer, checkpoint_every=5)
    assert str(err.value).startswith(f"repair_audit_file(): the repair entry of {str(p)!r}")
    assert str(err.value).endswith("Nothing was changed") and err.value.seqs == (4,)


def _client(kit, store, principal=None):
    return QdrantClient(path=store, guard=kit.config({"docs": {"owner": "hr"}}),
                        principal=principal or kit.principal("alice", "hr"))


def test_closing_a_guarded_client_frees_its_local_store_for_the_next(tmp_path):
    # client.py: close() hands on to qdrant-client's, which drops the store's lock file (deleted,
    # or a client taken for a view by the class default of _facade's ``_is_view``, the store stayed
    # held by a closed client and no other could open it).
    kit = make_kit(tmp_path)
    store = str(tmp_path / "store")
    first = _client(kit, store)
    first.create_collection("docs", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    with pytest.raises(RuntimeError, match="already accessed by another instance"):
        QdrantClient(path=store)
    first.close()
    second = _client(kit, store)
    assert second.collection_exists("docs")
    second.close()



def test_an_expired_credential_is_refused_in_the_guards_words(tmp_path):
    # boundary.py: the refusal reads "credential rejected (REASON): ..." (``super().__init__``
    # deleted, it read as the tuple of its arguments: "('expired', 'credential of ...')").
    kit = make_kit(tmp_path)
    stale = kit.principal("alice", "hr", ttl_s=60, now=time.time() - 3600)
    with pytest.raises(CredentialRejected) as err:
        _client(kit, str(tmp_path / "store"), stale)
    assert err.value.reason == "expired"
    assert str(err.value).startswith("credential rejected (expired): credential of alice@hr expired at ")
    assert "qdrant-guard credential issue --authority AUTHORITY_KEY --agent alice --boundary hr" in str(err.value)


def test_a_write_of_101_points_is_audited_with_the_first_100_ids_and_the_count(tmp_path):
    # decision.py's MAX_IDS_IN_RECORD, which docs/audit-log.md states as 100 (the tests that read
    # the constant followed it to 99 or 101; a hot run left the modules importing it at 100).
    kit = make_kit(tmp_path)
    rng = np.random.default_rng(37)
    owner = _client(kit, str(tmp_path / "store"))
    owner.create_collection("docs", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
    owner.upsert("docs", [models.PointStruct(id=i, vector=unit(rng)) for i in range(1, 102)])
    owner.close()
    entry = audit_records(kit)[-1]
    assert entry["op"] == "upsert" and entry["point_count"] == 101
    assert entry["point_ids"] == list(range(1, 101))


def test_a_signing_writer_checkpoints_every_1000th_entry_by_default(tmp_path):
    # audit_verify.py's DEFAULT_CHECKPOINT_EVERY, which docs/audit-log.md states as 1000 (as 999
    # or 1001 the writer and the verifier agreed with each other, so no test saw it).
    signer = ReceiptSigner(keys.generate_keypair()[0])
    p = tmp_path / "audit.jsonl"
    with AuditLog(p, signer=signer) as log:
        for i in range(1001):
            log.append({"event": "write", "i": i})
    signed = [json.loads(line)["seq"] for line in p.read_bytes().splitlines() if b'"ckpt"' in line]
    assert signed == [1, 1000]  # seq 1: a log a signing writer begins is never checkpoint-free
    report = verify_audit_file(p, trusted_keys={signer.key_id: signer.public_key})
    assert report.ok and report.checkpoints == 2 and report.last_seq == 1001
