"""Review 42: today's write shortcuts, batch filter paths and file checks.

An upsert's (or upload's) ``update_filter`` whose key is no JSON path: local mode evaluates it
point by point while it stores them, so it raised at the first point that already existed, after
storing the new points before it; the audit log recorded QDRANT_ERROR with no point written. The
guard now refuses it before anything is sent, as it does for batch operations (review 41 (a)).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from guardkit import make_kit, models as M, pii_writer, snapshot, unit
from qdrant_guard import UnsupportedWriteError


@pytest.fixture()
def pii(tmp_path):
    kit = make_kit(tmp_path)
    owner, bob = pii_writer(kit)
    bob.upsert("pii", [M.PointStruct(id=5, vector=unit(np.random.default_rng(5)), payload={"k": 5})])
    return kit, owner, bob


def _filter(key: str) -> M.Filter:
    return M.Filter(must=[M.FieldCondition(key=key, match=M.MatchValue(value=1))])


def _points() -> list[M.PointStruct]:
    rng = np.random.default_rng(42)
    # A new point first, then the existing one: local mode stored point 1 before failing at 5.
    return [M.PointStruct(id=1, vector=unit(rng), payload={"k": 1}),
            M.PointStruct(id=5, vector=unit(rng), payload={"k": 9})]


@pytest.mark.parametrize("method", ["upsert", "upload_points"])
def test_an_update_filter_local_mode_cannot_evaluate_is_refused_before_any_point_is_stored(pii, method):
    kit, owner, bob = pii
    before = snapshot(owner, "pii")
    with pytest.raises(UnsupportedWriteError) as ei:
        if method == "upsert":
            bob.upsert("pii", _points(), update_filter=_filter("a..b"))
        else:
            bob.upload_points("pii", _points(), update_filter=_filter("a..b"), wait=True)
    msg = str(ei.value)
    assert "'a..b'" in msg and "update_filter" in msg and '"a..b"' in msg and "Nothing was written" in msg, msg
    assert snapshot(owner, "pii") == before
    records = [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text().splitlines()]
    assert records[-1]["verdict"] == "UNSUPPORTED_WRITE" and records[-1]["op"] == method


def test_a_quoted_key_still_runs_as_a_conditional_upsert(pii):
    _, owner, bob = pii
    bob.upsert("pii", _points(), update_filter=_filter('"a..b"'))
    got = {p.id: p.payload for p in owner.scroll("pii", limit=10)[0]}
    # Point 5 does not match the filter, so only the new point 1 is stored.
    assert sorted(got) == [1, 5] and got[5]["k"] == 5 and got[1]["k"] == 1


# -- an audit log path that names no regular file -------------------------------------------------
# The writer re-reads its log before each append (the chain check): a device or pipe gives nothing
# back, so the second append failed as a log "cut off by someone else" (and today's mode check
# refused /dev/null advising `chmod 600 /dev/null`). Now refused at open, naming what it is.

import os  # noqa: E402
import threading  # noqa: E402

from qdrant_guard.audit import AuditLog  # noqa: E402
from qdrant_guard.errors import AuditError  # noqa: E402

posix_only = pytest.mark.skipif(os.name != "posix" or not hasattr(os, "mkfifo"), reason="needs FIFOs and /dev/null")


@posix_only
@pytest.mark.parametrize("shared", [False, True])
def test_a_character_device_as_the_log_is_refused_as_no_regular_file(shared):
    with pytest.raises(AuditError, match=r"'/dev/null' is a character device, not a regular file.*audit_log") as ei:
        AuditLog("/dev/null", allow_shared_file=shared).append({"x": 1})
    assert "chmod" not in str(ei.value)


@posix_only
def test_a_fifo_as_the_log_is_refused_before_any_entry(tmp_path):
    fifo = tmp_path / "audit.fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(AuditError, match=r"is a named pipe \(FIFO\), not a regular file"):
        log = AuditLog(fifo)
        for i in range(2):
            log.append({"x": i})


@posix_only
def test_verify_existing_on_a_fifo_is_refused_instead_of_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "audit.fifo"
    os.mkfifo(fifo, 0o600)
    got: list[BaseException | None] = []

    def run() -> None:
        try:
            AuditLog(fifo, verify_existing=True)
            got.append(None)
        except BaseException as exc:  # noqa: BLE001 - the outcome is checked below
            got.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # the old code's open for reading waits for a writer: give it one
        with open(fifo, "wb"):
            pass
        t.join(5)
        pytest.fail("AuditLog(verify_existing=True) waited on the FIFO for a writer")
    assert isinstance(got[0], AuditError) and "not a regular file" in str(got[0])


def test_a_regular_log_still_takes_entries(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    for i in range(3):
        log.append({"x": i})
    assert len((tmp_path / "audit.jsonl").read_text().splitlines()) == 3
