"""Mutation pass 41: the survivors, among the mutants of the previous session's changes and the
functions around them, that no test reached. Real qdrant-client local mode where a collection is
written.
"""
from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import numpy as np
import pytest
from guardkit import create, guard_signer, make_kit, models, receipted_vector, staging_record, unit

from qdrant_guard import GuardRefusal, QdrantClient, keys
from qdrant_guard.audit import AuditLog
from qdrant_guard.audit_verify import CHECKPOINT_PREFIX, GENESIS, entry_hash
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import AuditIntegrityError
from qdrant_guard.receipts import RECEIPT_KEY, ReceiptSigner, receipts_for_payload

# ------------------------------------------------------------------ writeprep: the refusal's directive


@pytest.fixture
def bob(tmp_path):
    """bob@support's client of a PII collection "pii" (Euclid, 32-d, gaussian noise) whose
    utility.records vouch for a vector named "image" only, so a receipted write to the unnamed
    vector is refused UTILITY_DEGRADED once its receipt passes every earlier check."""
    kit = make_kit(tmp_path)
    staging_record(kit, tmp_path / "image.json")
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False,
           "intent": {"enabled": False}, "diversity": {"enabled": False},
           "noise": {"epsilon": 1.0, "radius": 0.01},
           "utility": {"records": {"image": str(tmp_path / "image.json")}}}
    owner = QdrantClient(":memory:", guard=kit.config({"pii": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "pii", dim=32, distance=models.Distance.EUCLID)
    rng = np.random.default_rng(1)

    def point(pid: int, **kw) -> models.PointStruct:
        vec, rec = receipted_vector(guard_signer(kit), pid, unit(rng, 32), **kw)
        return models.PointStruct(id=pid, vector=vec, payload={RECEIPT_KEY: receipts_for_payload({"": rec})})

    yield owner.with_principal(kit.principal("bob", "support")), point
    owner.close()


@pytest.mark.parametrize("second, its_reason, its_fix", [
    ({}, "the collection's unnamed vector has no utility record", "the retrieval utility guard refuses this write"),
    ({"mechanism": "laplace_l2"}, "mechanism_mismatch: ", "the receipt's noise mechanism is 'laplace_l2'"),
])
def test_a_refusal_led_by_a_bad_receipt_keeps_its_advice_when_a_later_point_has_its_own_fix(bob, second, its_reason,
                                                                                            its_fix):
    # The first point's fault (a receipt that does not verify) is the verdict; a later point's
    # utility or mechanism reason is in the details, and does not replace the verdict's directive
    # (mutants read utility_why or mechanism_why whatever the verdict).
    client, point = bob
    altered = point(1)
    altered.vector[0] += 0.5
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pii", [altered, point(2, **second)])
    err = ei.value
    assert err.verdict == "INVALID_RECEIPT" and err.point_ids == [1, 2]
    assert err.directive.startswith("the receipt does not verify for this vector, collection and point")
    assert err.directive.endswith("(point 1: vector_mismatch)")
    assert err.details["reasons"]["2"].startswith(its_reason)
    # Control: the second point alone is refused for its own reason, with its own fix.
    with pytest.raises(GuardRefusal) as alone:
        client.upsert("pii", [point(2, **second)])
    assert alone.value.directive.startswith(its_fix)


# ------------------------------------------------------------------ audit: opening reads the window backwards


def _grow(path, target: int) -> bool:
    """Append entries to the audit log at ``path`` until the file is exactly ``target`` bytes; False
    when the last one came out a byte off (the length of its ts field varies), to start over."""
    log = AuditLog(path)
    try:
        while True:
            size = os.path.getsize(path)
            left = target - size
            if left == 0:
                return True
            if size == 0 or left > 12_000:
                log.append({"op": "pad", "pad": "a" * (6000 if size else 0)})
                continue
            last = Path(path).read_bytes().rsplit(b"\n", 2)[-2]
            base = len(last) + 1 - len(json.loads(last)["record"]["pad"])  # a line's length without its pad
            if left < base:
                return False
            log.append({"op": "pad", "pad": "a" * (left - base)})
            if os.path.getsize(path) != target:
                return False
    finally:
        log.close()


@pytest.mark.parametrize("line_ends", [
    # The lines before the last one fill 65,537 bytes: the 64 KiB block read back from the last
    # line stops one byte after the file's start, the first line's "{".
    [65_537],
    # A line ends 65,536 bytes before the last line: the block read back starts at its newline.
    [700, 700 + 65_535],
], ids=["a-block-ends-one-byte-into-the-file", "a-block-starts-on-a-newline"])
def test_a_log_opens_whatever_the_block_boundaries_of_its_window(tmp_path, line_ends):
    # Opening reads the entries back to the most recent checkpoint (here every one, to seq 1) in
    # 64 KiB blocks; a mutant that stopped reading with one byte left, or dropped the newline a
    # block started on, parsed a line without its first or last byte and refused a sound log.
    for attempt in range(20):
        path = tmp_path / f"audit{attempt}.log"
        if all(_grow(path, end) for end in line_ends):
            break
    else:
        pytest.fail("could not lay out the log's lines at the wanted offsets")
    with AuditLog(path) as log:
        log.append({"op": "last"})
    data = path.read_bytes()
    before_last = data.rstrip(b"\n").rfind(b"\n") + 1
    assert before_last == line_ends[-1]
    with AuditLog(path) as log:
        assert log.seq == data.count(b"\n")
    with AuditLog(path, verify_existing=True) as log:  # the whole file verifies too
        assert log.seq == data.count(b"\n")


@pytest.mark.parametrize("first_seq, first_prev, refused", [(1, "f" * 64, True), (2, GENESIS, True),
                                                            (1, GENESIS, False)],
                         ids=["seq-1-after-another-hash", "seq-2-after-genesis", "control-re-chained-as-written"])
def test_a_log_whose_first_line_is_not_a_chains_start_is_refused_on_open(tmp_path, first_seq, first_prev, refused):
    # The first line must be seq 1 *and* follow GENESIS: a head cut off and the rest renumbered
    # (or re-chained from GENESIS) with every hash recomputed chains line to line, and only this
    # check sees it (a mutant required both to differ, so each layout opened).
    path = tmp_path / "audit.log"
    with AuditLog(path) as log:
        for i in range(3):
            log.append({"op": "x", "i": i})
    entries = [json.loads(line) for line in path.read_bytes().splitlines()]
    prev = first_prev
    for n, entry in enumerate(entries):
        entry["seq"], entry["prev"] = first_seq + n, prev
        entry["hash"] = prev = entry_hash(entry)
    path.write_bytes(b"".join(canonical_json(e) + b"\n" for e in entries))
    if not refused:
        with AuditLog(path) as log:
            assert log.seq == 3
        return
    with pytest.raises(AuditIntegrityError, match="not the start of a chain"):
        AuditLog(path)


def test_a_signing_writer_names_the_unsigned_entries_after_an_old_format_checkpoint(tmp_path, caplog):
    # A log whose most recent checkpoint is in format v1 (a signing guard before format v2 wrote
    # it) and whose later entries carry no MAC: the writer opening it names exactly those entries,
    # not the checkpoint (a mutant named none, another one fewer).
    signer = ReceiptSigner(keys.generate_keypair()[0])
    path = tmp_path / "audit.log"
    with AuditLog(path) as log:
        for i in range(5):
            log.append({"op": "x", "i": i})
    entries = [json.loads(line) for line in path.read_bytes().splitlines()]
    sig = signer.sign(CHECKPOINT_PREFIX + bytes.fromhex(entries[1]["hash"]))  # ckpt is outside the hash
    entries[1]["ckpt"] = {"kid": signer.key_id, "sig": base64.b64encode(sig).decode()}
    path.write_bytes(b"".join(canonical_json(e) + b"\n" for e in entries))
    caplog.set_level("WARNING", logger="qdrant_guard.audit")
    AuditLog(path, signer=signer).close()
    (alert,) = [r.qdrant_guard_alert for r in caplog.records
                if getattr(r, "qdrant_guard_alert", {}).get("event") == "audit_unsigned_entries_adopted"]
    assert (alert["first_seq"], alert["last_seq"]) == (3, 5)
