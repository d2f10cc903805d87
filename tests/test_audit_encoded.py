"""AuditLog.append / append_encoded write exactly the lines the original entry builder wrote."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qdrant_guard import audit, audit_write
from qdrant_guard.audit import CHECKPOINT_PREFIX, AuditLog, entry_hash, verify_audit_file
from qdrant_guard.audit_mac import MAC_PREFIX
from qdrant_guard.canonical import canonical_json
from qdrant_guard.keys import generate_keypair, key_id
from qdrant_guard.receipts import ReceiptSigner

TS = 1_700_000_000.123456


def _reference_line(seq: int, prev: str, record: dict[str, Any], ts: float,
                    signer: ReceiptSigner | None, checkpoint: bool) -> bytes:
    """The entry line as the original writer built it: hash of the canonical entry, then the
    canonical encoding of the whole entry (record encoded three times). With a signer, format v2:
    the writer id inside the hash and the HMAC of the hash under the writer's MAC key."""
    entry: dict[str, Any] = {"seq": seq, "ts": ts, "prev": prev, "record": record}
    if signer is not None:
        entry["w"] = signer.key_id
    entry["hash"] = hashlib.sha256(canonical_json(entry)).hexdigest()
    if signer is not None:
        entry["mac"] = hmac.new(signer.audit_mac_key, MAC_PREFIX + bytes.fromhex(entry["hash"]), "sha256").hexdigest()
    if signer is not None and checkpoint:
        sig = signer.sign(CHECKPOINT_PREFIX + bytes.fromhex(entry["hash"]))
        entry["ckpt"] = {"kid": signer.key_id, "sig": base64.b64encode(sig).decode("ascii")}
    return canonical_json(entry) + b"\n"


@pytest.fixture()
def fixed_clock(monkeypatch):
    monkeypatch.setattr(audit_write.time, "time", lambda: TS)


@pytest.fixture(scope="module")
def signer():
    sk, pk = generate_keypair()
    return ReceiptSigner(sk), {key_id(pk): pk}


records = st.dictionaries(
    st.text(st.characters(codec="utf-8"), max_size=6),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(st.characters(codec="utf-8"), max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
        max_leaves=12,
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(records, min_size=1, max_size=6))
def test_both_methods_write_the_reference_lines(tmp_path_factory, fixed_clock, signer, batch):
    sign, trusted = signer
    d = tmp_path_factory.mktemp("a")
    plain, encoded = d / "plain.jsonl", d / "encoded.jsonl"
    with AuditLog(plain, signer=sign, checkpoint_every=2) as a, \
            AuditLog(encoded, signer=sign, checkpoint_every=2) as b:
        for rec in batch:
            ea = a.append(rec)
            eb = b.append_encoded(rec, canonical_json(rec))
            assert ea == eb
            assert ea["hash"] == entry_hash(ea)
    want, prev = [], audit.GENESIS
    for seq, rec in enumerate(batch, start=1):
        # seq 1 too: a signing writer's first entry in a new log is a checkpoint.
        line = _reference_line(seq, prev, rec, TS, sign, seq == 1 or seq % 2 == 0)
        want.append(line)
        prev = json.loads(line)["hash"]
    assert plain.read_bytes() == encoded.read_bytes() == b"".join(want)
    for path in (plain, encoded):
        report = verify_audit_file(path, trusted_keys=trusted)
        assert report.ok and report.checkpoints == len(batch) // 2 + 1, report.detail


def test_memory_mode_and_repair_entries_match(tmp_path, fixed_clock, signer):
    sign, trusted = signer
    log = AuditLog(None, signer=sign, checkpoint_every=1)
    rec = {"event": "x", "é": [1.5, None]}
    e1 = log.append(rec)
    e2 = log.append_encoded(rec, canonical_json(rec))
    assert canonical_json(e1) + b"\n" == _reference_line(1, audit.GENESIS, rec, TS, sign, True)
    assert canonical_json(e2) + b"\n" == _reference_line(2, e1["hash"], rec, TS, sign, True)
    path = tmp_path / "r.jsonl"
    with AuditLog(path) as w:
        w.append({"event": "a"})
    path.write_bytes(path.read_bytes() + b'{"torn')
    report = audit.repair_audit_file(path, signer=sign)
    assert report.ok
    assert verify_audit_file(path, trusted_keys=trusted).checkpoints == 1


def test_append_encoded_argument_errors(tmp_path):
    with AuditLog(tmp_path / "e.jsonl") as log:
        with pytest.raises(TypeError, match="record_bytes must be bytes"):
            log.append_encoded({"a": 1}, '{"a":1}')
        with pytest.raises(TypeError, match="record must be dict"):
            log.append_encoded([1], b"[1]")
        for bad in (b"[1]", b'{"a":"\n"}', b"", b'{"a":1}\n'):
            with pytest.raises(ValueError, match="one JSON object on one line"):
                log.append_encoded({"a": 1}, bad)
        with pytest.raises(ValueError, match="not UTF-8"):
            log.append_encoded({"a": 1}, b'{"a":"\xff"}')
        assert log.seq == 0
    assert verify_audit_file(tmp_path / "e.jsonl").ok


def test_bytes_that_are_not_the_canonical_record_fail_verification(tmp_path):
    path = tmp_path / "m.jsonl"
    with AuditLog(path) as log:
        log.append({"a": 1})
        log.append_encoded({"a": 1}, b'{"a": 1}')      # whitespace: not canonical
        log.append({"a": 2})
    report = verify_audit_file(path)
    assert not report.ok and report.problem == "edited" and report.index == 2


def test_logging_is_skipped_when_info_is_disabled(tmp_path):
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    logger = logging.getLogger("qdrant_guard.audit.enc-test")
    handler = Keep(level=logging.DEBUG)
    logger.addHandler(handler)
    try:
        logger.setLevel(logging.WARNING)
        log = AuditLog(None, logger_name="qdrant_guard.audit.enc-test")
        log.append({"event": "quiet"})
        assert seen == []
        logger.setLevel(logging.INFO)
        a = log.append_encoded({"event": "loud"}, b'{"event":"loud"}')
        assert [r.qdrant_guard for r in seen] == [a]
        assert "seq=2 event=loud" in seen[0].getMessage()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


def test_reopen_continues_after_encoded_entries(tmp_path):
    path = Path(tmp_path / "c.jsonl")
    with AuditLog(path) as log:
        for i in range(3):
            log.append_encoded({"i": i}, canonical_json({"i": i}))
    with AuditLog(path) as log:
        assert log.seq == 3
        log.append({"i": 3})
    assert verify_audit_file(path).valid_prefix == 4
