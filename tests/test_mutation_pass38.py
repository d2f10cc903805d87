"""Mutation pass 38: what survived the mutants of the code changed on 2026-12-07 (since 38e2879).

The async lock's stopped-loop revocation (async_lock's rule): the clock the rule reads is replaced
by one the test sets (``async_lock.time``), and the loops are real ones the test stops, runs and
blocks itself, so nothing here races the wall clock. The probe is :meth:`TaskLock.acquire_plain`
from a running loop: it looks (``_reclaim``) once, then takes the lock or is refused at once.

Real event loops and threads, real audit files and keys, the real detector; nothing mocked.
"""
from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import types

import numpy as np
import pytest
from guardkit import PAYROLL_DIVERSITY, create, hr_policy, make_kit, models, unit
from test_audit_v1_rewrite import _key, _write
from tests.oracle import assert_same, both

from qdrant_guard import GuardArgumentTypeError, GuardArgumentValueError, QdrantClient, async_lock
from qdrant_guard.async_lock import TaskLock
from qdrant_guard.audit import AuditLog, repair_audit_file, verify_audit_file
from qdrant_guard.audit_mac import writer_keys
from qdrant_guard.audit_verify import CHECKPOINT_PREFIX
from qdrant_guard.detect import find_sensitive

NATIVE, PYTHON = both("detect")


class _Refused(Exception):
    pass


@pytest.fixture
def clock(monkeypatch):
    """The rule's clock: ``clock.now`` is what ``time.monotonic()`` reads in async_lock."""
    fake = types.SimpleNamespace(now=1000.0)
    monkeypatch.setattr(async_lock, "time", types.SimpleNamespace(monotonic=lambda: fake.now))
    return fake


def _probe(lock: TaskLock) -> bool:
    """Whether a call on another loop takes the lock now (released at once if it does)."""
    async def take() -> bool:
        try:
            lock.acquire_plain(_Refused)
        except _Refused:
            return False
        lock.release()
        return True
    return asyncio.run(take())


def _holder_on_stopped_loop(lock: TaskLock):
    """A task holding ``lock`` on a loop that is then stopped (not closed, the task pending)."""
    loop = asyncio.new_event_loop()
    got: list[object] = []
    go_on = asyncio.Event()

    async def hold() -> None:
        got.append(await lock.acquire())
        await go_on.wait()
        lock.release(got[0])

    task = loop.create_task(hold())
    loop.run_until_complete(asyncio.sleep(0))
    assert got and lock.holds(got[0])
    return loop, task, got[0], go_on


def _finish(loop, task, go_on) -> None:
    loop.call_soon(go_on.set)
    loop.run_until_complete(task)
    loop.close()


def test_a_stopped_loop_that_ran_between_two_looks_counts_its_stop_afresh(clock):
    # The mark queued on the stopped loop at the first look runs when the loop runs again: the
    # next look, however late, starts the count again instead of revoking (mark not queued, or
    # queued and not setting ``ran``: the holder lost the lock at the second look).
    lock = TaskLock()
    loop, task, hold, go_on = _holder_on_stopped_loop(lock)
    assert not _probe(lock)                      # first look at t: the stop is noted
    loop.run_until_complete(asyncio.sleep(0))    # the loop runs a moment, then stops again
    clock.now += 10 * async_lock._STOPPED_S
    assert not _probe(lock)                      # it ran since: counted afresh from here
    assert lock.holds(hold)
    clock.now += async_lock._STOPPED_S - 1.0
    assert not _probe(lock)
    clock.now += 1.0                             # exactly _STOPPED_S since the second look
    assert _probe(lock) and not lock.holds(hold)
    _finish(loop, task, go_on)


def test_a_stop_is_revoked_at_the_limit_and_not_before(clock):
    lock = TaskLock()
    loop, task, hold, go_on = _holder_on_stopped_loop(lock)
    assert not _probe(lock)
    clock.now += async_lock._STOPPED_S / 2
    assert not _probe(lock) and lock.holds(hold)
    clock.now += async_lock._STOPPED_S / 2 - 0.5
    assert not _probe(lock) and lock.holds(hold)
    clock.now += 0.5                             # the limit itself: revoked (>=, not >)
    assert _probe(lock)
    assert not lock.holds(hold) and lock.owner is None
    _finish(loop, task, go_on)


def test_a_loop_busy_in_a_long_step_keeps_the_lock_however_long(clock):
    # A running loop that does not get round to its callbacks (a long synchronous step) is not a
    # stopped one: its holder keeps the lock, whatever the clock says.
    lock = TaskLock()
    loop = asyncio.new_event_loop()
    holding, go_on = threading.Event(), threading.Event()

    async def hold_through_a_blocking_step() -> None:
        hold = await lock.acquire()
        holding.set()
        go_on.wait(30)  # blocks the loop itself: it stays running, its callbacks wait
        lock.release(hold)

    runner = threading.Thread(target=loop.run_until_complete, args=(hold_through_a_blocking_step(),))
    runner.start()
    try:
        assert holding.wait(30)
        assert not _probe(lock)
        clock.now += 100 * async_lock._STOPPED_S
        assert not _probe(lock)
        clock.now += 100 * async_lock._STOPPED_S
        assert not _probe(lock)
    finally:
        go_on.set()
        runner.join(30)
    loop.close()
    assert _probe(lock)


# --- audit_verify: signed_from, allow_unsigned and the report of a repair ------------------------



def _trusted(signer):
    return {signer.key_id: signer.public_key}


def test_signed_from_at_the_last_entry_is_not_a_cut_log(tmp_path):
    # The signing guard began at seq 3 and wrote one entry: the log ends at signed_from, which is
    # not before it (``<=``, or the last entry but one, read it as cut off).
    _, signer, _ = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 2)
    _write(p, 1, signer, start=2)
    rep = verify_audit_file(p, trusted_keys=_trusted(signer), signed_from=3)
    assert rep.ok and (rep.valid_prefix, rep.last_seq, rep.signed_from) == (3, 3, 3), rep.detail
    assert verify_audit_file(p, trusted_keys=_trusted(signer), signed_from=4).problem == "deleted"


def test_signed_from_under_public_keys_counts_no_legacy_entries(tmp_path):
    # ``legacy`` counts the v1 prefix only under writer keys (AuditReport); with public keys and
    # signed_from the v1 entries before it are neither legacy nor unauthenticated.
    sk, signer, _ = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 3)
    _write(p, 2, signer, start=3)
    rep = verify_audit_file(p, trusted_keys=_trusted(signer), signed_from=4)
    assert rep.ok and (rep.legacy, rep.unauthenticated) == (0, ())
    assert verify_audit_file(p, writer_keys=writer_keys([sk]), signed_from=4).legacy == 3  # control


@pytest.mark.parametrize("bad", [True, 0, -1, "4", 4.0])
def test_signed_from_that_is_not_a_seq_is_refused_naming_it(tmp_path, bad):
    _, signer, _ = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 1, signer)
    with pytest.raises(GuardArgumentValueError, match=r"signed_from must be a seq \(a positive int\) or None, got "):
        verify_audit_file(p, trusted_keys=_trusted(signer), signed_from=bad)


def test_signed_from_without_keys_and_a_non_bool_allow_unsigned_are_refused(tmp_path):
    _, signer, _ = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 1, signer)
    with pytest.raises(GuardArgumentValueError, match="signed_from checks that the entries from that seq on are signed"):
        verify_audit_file(p, signed_from=1)
    with pytest.raises(GuardArgumentTypeError, match="allow_unsigned must be bool, not str"):
        verify_audit_file(p, trusted_keys=_trusted(signer), allow_unsigned="no")
    assert verify_audit_file(p, trusted_keys=_trusted(signer), signed_from=1).ok


def test_a_repairs_report_names_where_signing_began(tmp_path):
    # repair_audit_file's report of a signed log it cut said signed_from 0 ("none"): it left out
    # the field the report of the repaired log carries, so `--signed-from` could not be read there.
    _, signer, _ = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 2)
    _write(p, 3, signer, start=2)
    with open(p, "ab") as f:
        f.write(b'{"seq":6,"ts":')  # a torn last line: what a crash mid-append leaves
    rep = repair_audit_file(p, trusted_keys=_trusted(signer), signer=signer)
    assert rep.ok and rep.last_seq == 6 and "repaired" in rep.detail  # its repair entry is seq 6
    assert rep.signed_from == 3 == verify_audit_file(p, trusted_keys=_trusted(signer)).signed_from


# --- audit: the writer's audit_unsigned_entries_adopted alert --------------------------------------


def test_the_adoption_alert_starts_after_a_v1_checkpoint_the_window_stops_at(tmp_path, caplog):
    # A log of a guard from before format v2 that had signing_key: v1 entries, a checkpoint among
    # them (seq 3). What that checkpoint signs is not unsigned: the alert names seq 4..5 only (not
    # 5..5, nor no alert at all).
    _, signer, _ = _key(tmp_path)
    p = tmp_path / "audit.jsonl"
    _write(p, 5)
    lines = p.read_bytes().splitlines()
    third = json.loads(lines[2])
    sig = signer.sign(CHECKPOINT_PREFIX + bytes.fromhex(third["hash"]))
    third["ckpt"] = {"kid": signer.key_id, "sig": base64.b64encode(sig).decode("ascii")}
    lines[2] = json.dumps(third, separators=(",", ":"), sort_keys=True).encode()
    p.write_bytes(b"\n".join(lines) + b"\n")
    assert verify_audit_file(p, trusted_keys=_trusted(signer)).checkpoints == 1
    caplog.set_level("WARNING", logger="qdrant_guard.audit")
    AuditLog(p, signer=signer).close()
    alerts = [r.qdrant_guard_alert for r in caplog.records
              if getattr(r, "qdrant_guard_alert", {}).get("event") == "audit_unsigned_entries_adopted"]
    assert [(a["first_seq"], a["last_seq"]) for a in alerts] == [(4, 5)]


# --- budgetops.budget_principal --------------------------------------------------------------------


def test_an_agent_id_holding_a_percent_does_not_share_the_budget_of_the_one_it_escapes_to(tmp_path):
    # Agent "m@x" is keyed "m%40x": agent "m%40x" itself must then be escaped too ("m%2540x"), or
    # the two share one budget and the second re-reads the first's points for free (an escape
    # applied to ids with "@" only).
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"hr": hr_policy(PAYROLL_DIVERSITY)}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"}) for i in range(10)])
    at, percent = (owner.with_principal(kit.principal(agent, "support")) for agent in ("m@x", "m%40x"))
    assert len(at.scroll("hr", limit=10)[0]) == 2  # floor(10 * 0.2)
    assert len(percent.scroll("hr", limit=10)[0]) == 2
    listed = owner.guard.shared["budget_store"].entries_by_prefix("src|", window_s=86400.0, now=time.time())
    # (the store escapes "%" in its keys once more: "m%40x" is listed "m%2540x")
    assert sorted(listed) == ["src|m%252540x@support|hr|payroll", "src|m%2540x@support|hr|payroll"]


# --- detect: an address in a database URL's query or fragment ---------------------------------------


@pytest.mark.parametrize("text, address", [
    ("postgres://@db.example?contact=alice@example.com", "alice@example.com"),
    ("postgres://@db.example#to=a@corp.io", "a@corp.io"),
    ("redis://@h?x=bob@corp.io", "bob@corp.io"),
    # ... and no password is read up to the address's '@' from the port's ':' ("5432?contact=alice")
    ("postgres://@db.example:5432?contact=alice@example.com", "alice@example.com"),
])
def test_an_address_after_empty_credentials_and_a_host_is_found(text, address):
    # The credentials' '@' is the authority's first character (no user, no password): the scans
    # for it start right after "://", not one character later (the address was then left, or
    # the userinfo read up to the address's '@').
    spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
    assert [(t, text[a:b]) for a, b, t, _ in spans] == [("EMAIL", address)]
    assert [(f.type, text[f.start:f.end]) for f in find_sensitive(text)] == [("EMAIL", address)]
