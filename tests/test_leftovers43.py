"""Leftovers of h-left5/h-left6 (branch h-left7): `audit repair` checks the log's mode and owner
as opening it for writing does; a batch filter key is checked by the grammar of the backend it
goes to (a server's, read in qdrant/qdrant lib/segment/src/json_path/parse.rs, or local mode's);
the async lock's holder on a stopped loop. Real files, the real CLI, real local mode, a real
remote client (no server listens: the guard's refusal comes before any request)."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
import unicodedata

import pytest
from qdrant_client.local.json_path_parser import parse_json_path

from qdrant_guard import AuditError, QdrantClient, QdrantGuardError, UnsupportedWriteError, keys
from qdrant_guard.async_lock import TaskLock
from qdrant_guard.audit import AuditLog, repair_audit_file
from qdrant_guard.cli import main
from qdrant_guard.filterpaths import unevaluable_reason
from qdrant_guard.serverpath import _raw_char, server_reads
from tests.groupkit import give_shared_group
from tests.guardkit import closed_port, make_kit, models as M

posix = pytest.mark.skipif(os.name != "posix", reason="file modes and owners are POSIX")


def _torn_log(path) -> bytes:
    """A log of three entries with a torn fourth line: what repair cuts."""
    with AuditLog(path) as log:
        for i in range(3):
            log.append({"event": "e", "i": i})
    with open(path, "ab") as f:
        f.write(b'{"seq": 4, "torn')
    return path.read_bytes()


def _cli(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


@posix
@pytest.mark.parametrize("mode,who", [(0o620, "group-writable"), (0o602, "world-writable"),
                                      (0o666, "group- and world-writable")], ids=["620", "602", "666"])
def test_repair_refuses_a_log_others_can_write_and_changes_nothing(tmp_path, mode, who):
    p = tmp_path / "audit.jsonl"
    before = _torn_log(p)
    os.chmod(p, mode)
    world = mode & 0o002
    gid = None if world else give_shared_group(p)  # a group only this uid and root are in may write it
    with pytest.raises(AuditError) as ei:
        repair_audit_file(p)
    msg = str(ei.value)
    assert isinstance(ei.value, QdrantGuardError)
    assert repr(str(p)) in msg and f"is {who} (mode {mode:o}" in msg
    assert world or f"(gid {gid}) may write it" in msg
    assert f"`chmod {'600' if world else 'g-w'} {p}`" in msg and "qdrant-guard audit repair FILE --allow-shared-file" in msg
    assert "Nothing was changed" in msg
    assert p.read_bytes() == before and not list(tmp_path.glob("audit.jsonl.cut-*"))


@posix
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another uid needs root")
def test_repair_refuses_a_log_owned_by_another_uid(tmp_path):
    p = tmp_path / "audit.jsonl"
    before = _torn_log(p)
    os.chown(p, 54321, -1)
    with pytest.raises(AuditError) as ei:
        repair_audit_file(p)
    msg = str(ei.value)
    assert "owned by uid 54321" in msg and f"chown {os.geteuid()} {p}" in msg
    assert p.read_bytes() == before


@posix
def test_repair_refuses_a_log_in_a_world_writable_directory_without_sticky_bit(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    p = d / "audit.jsonl"
    before = _torn_log(p)
    os.chmod(d, 0o777)
    with pytest.raises(AuditError, match=r"world-writable without the sticky bit \(mode 777\)") as ei:
        repair_audit_file(p)
    assert f"chmod o-w {d}" in str(ei.value) and p.read_bytes() == before
    os.chmod(d, 0o1777)
    assert repair_audit_file(p).ok


@posix
def test_repair_opt_out_repairs_a_shared_log(tmp_path):
    p = tmp_path / "audit.jsonl"
    _torn_log(p)
    os.chmod(p, 0o664)
    with pytest.raises(TypeError, match="allow_shared_file must be bool"):
        repair_audit_file(p, allow_shared_file=1)
    rep = repair_audit_file(p, allow_shared_file=True)
    assert rep.ok and rep.detail.startswith("repaired: torn_tail")


@posix
def test_repair_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "audit.jsonl"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(AuditError, match=r"is a named pipe \(FIFO\), not a regular file"):
        repair_audit_file(fifo)


@posix
def test_cli_repair_refuses_a_fifo_without_blocking(tmp_path, capsys):
    # Before: the command verified the path before repairing, and reading the FIFO waited for a
    # writer (here: until the test opened it for writing after 5 s).
    fifo = tmp_path / "audit.jsonl"
    os.mkfifo(fifo, 0o600)
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("rc", main(["audit", "repair", str(fifo)])), daemon=True)
    t.start()
    t.join(5)
    blocked = t.is_alive()
    if blocked:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(5)
    err = capsys.readouterr().err
    assert not blocked, "audit repair blocked on a FIFO"
    assert out.get("rc") == 2 and "is a named pipe (FIFO), not a regular file" in err, (out, err)


@posix
def test_cli_repair_refuses_a_shared_log_and_the_flag_or_policy_knob_opts_out(tmp_path, capsys):
    p = tmp_path / "audit.jsonl"
    before = _torn_log(p)
    os.chmod(p, 0o660)
    give_shared_group(p)
    rc, out, err = _cli(["audit", "repair", str(p)], capsys)
    assert rc == 2 and "group-writable (mode 660: its group" in err and "--allow-shared-file" in err, (rc, out, err)
    assert "Traceback" not in err and p.read_bytes() == before
    # The same opt-out as the guard's: audit_allow_shared_file in the policy given to --trust-policy.
    key = tmp_path / "guard.key"
    key.write_bytes(keys.private_key_to_pem(keys.generate_keypair()[0]))
    os.chmod(key, 0o600)
    pol = tmp_path / "policy.toml"
    pol.write_text(f'signing_key = "{key}"\naudit_log = "{p}"\naudit_allow_shared_file = false\n')
    rc, out, err = _cli(["audit", "repair", str(p), "--trust-policy", str(pol)], capsys)
    assert rc == 2 and "group-writable" in err and p.read_bytes() == before, (rc, out, err)
    pol.write_text(f'signing_key = "{key}"\naudit_log = "{p}"\naudit_allow_shared_file = true\n')
    rc, out, err = _cli(["audit", "repair", str(p), "--trust-policy", str(pol)], capsys)
    assert rc == 0 and out.startswith("repaired: torn_tail"), (rc, out, err)
    _torn_again = p.read_bytes() + b'{"torn'
    p.write_bytes(_torn_again)
    rc, out, err = _cli(["audit", "repair", str(p), "--allow-shared-file"], capsys)
    assert rc == 0 and out.startswith("repaired: torn_tail"), (rc, out, err)


# -- filter keys against a server: its JSON path grammar, not local mode's ----------------------

HINDI = "हिंदी"  # its vowel signs are Other_Alphabetic: Rust alphanumeric, not Python isalnum
DECOMPOSED = "e\u0301"  # a combining acute accent: alphanumeric in neither


def _delete_where(key: str) -> M.DeleteOperation:
    return M.DeleteOperation(delete=M.FilterSelector(filter=M.Filter(must=[
        M.FieldCondition(key=key, match=M.MatchValue(value=1))])))


@pytest.mark.parametrize("path,reads", [
    ("a", True), ("a.b[0][]", True), ('"a b".c', True), ('""', True), ("123", True), (HINDI, True),
    ("a_b-c", True), ("a[18446744073709551615]", True),
    ('"a\\b"', False), ('a."b\\c"', False), ('"a\\"b"', False), (DECOMPOSED, False), ("a..b", False),
    ("a.", False), ("[0]", False), ("a[18446744073709551616]", False), ("a[x]", False), ('a"b"', False),
    ('"unclosed', False), ("", False), ("a b", False), ("a[0]b", False),
])
def test_the_servers_grammar_as_read_in_its_parser(path, reads):
    assert server_reads(path) is reads


def test_local_mode_and_the_server_differ_exactly_where_documented():
    # The corners this change is about: local mode reads a quoted backslash and refuses the
    # vowel signs; the server the other way round.
    parse_json_path('"a\\b"')
    with pytest.raises(ValueError):
        parse_json_path(HINDI)


def test_the_rust_alphanumeric_table_agrees_with_unicode_alphabetic():
    regex = pytest.importorskip("regex")
    rust = regex.compile(r"[\p{Alphabetic}\p{Nd}\p{Nl}\p{No}]")
    wrong = [hex(cp) for cp in range(sys.maxunicode + 1)
             if unicodedata.category(chr(cp)) != "Cn" and chr(cp) not in "_-"
             and _raw_char(chr(cp)) != bool(rust.match(chr(cp)))]
    assert wrong == []


def test_server_fault_messages_name_the_fix():
    flt = [("f", M.Filter(must=[M.FieldCondition(key='"a\\b"', match=M.MatchValue(value=1))]))]
    assert unevaluable_reason(flt) is None  # local mode reads it
    msg = unevaluable_reason(flt, remote=True)
    assert msg is not None and "a Qdrant server refuses it" in msg and "Name another field" in msg
    assert "reads no escapes in a quoted key" in msg
    flt = [("f", M.Filter(must=[M.FieldCondition(key=DECOMPOSED, match=M.MatchValue(value=1))]))]
    msg = unevaluable_reason(flt, remote=True)
    assert msg is not None and "Write the key quoted" in msg and f'"{DECOMPOSED}"' in msg
    assert unevaluable_reason([("f", M.Filter(must=[M.FieldCondition(key=HINDI, match=M.MatchValue(value=1))]))],
                              remote=True) is None


def test_a_server_client_refuses_a_quoted_backslash_key_before_sending_and_sends_an_unquoted_hindi_key(tmp_path):
    # Before: the quoted key with a backslash was sent (the server would refuse it, over gRPC
    # after the operations before it), and the Hindi key refused though the server reads it.
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"]}})
    bob = QdrantClient(url=f"http://127.0.0.1:{closed_port()}", timeout=2, guard=cfg,
                       principal=kit.principal("bob", "support"))
    try:
        with pytest.raises(UnsupportedWriteError) as ei:
            bob.batch_update_points("pii", [_delete_where("k"), _delete_where('a."b\\c"')])
        msg = str(ei.value)
        assert "update_operations[1]" in msg and "a Qdrant server refuses it" in msg and "Nothing was written" in msg
        last = json.loads((kit.tmp / "audit.jsonl").read_text().splitlines()[-1])["record"]
        assert last["verdict"] == "UNSUPPORTED_WRITE"
        with pytest.raises(UnsupportedWriteError, match="Write the key quoted"):
            bob.batch_update_points("pii", [_delete_where(DECOMPOSED)])
        # Accepted by the guard: what stops it is the connection (no server listens there).
        with pytest.raises(Exception) as ei:
            bob.batch_update_points("pii", [_delete_where(HINDI)])
        assert not isinstance(ei.value, QdrantGuardError), ei.value
    finally:
        bob.close()


def test_local_mode_keeps_its_own_reading(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"]}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=M.VectorParams(size=4, distance=M.Distance.DOT))
    bob = owner.with_principal(kit.principal("bob", "support"))
    bob.batch_update_points("pii", [_delete_where("k"), _delete_where('"a\\b"')])
    with pytest.raises(UnsupportedWriteError, match="local mode fails on it"):
        bob.batch_update_points("pii", [_delete_where("k"), _delete_where(HINDI)])


# -- the async lock: a stopped loop's holder keeps it, a task handed it on a stopped loop does not --


HANG_S = 20  # only against a hang


def _wait(cond, bound: float = HANG_S) -> bool:
    end = time.monotonic() + bound
    while not cond() and time.monotonic() < end:
        time.sleep(0.002)
    return cond()


class _PausedLoop:
    """A loop in a thread of its own, run in phases: ``run_until(cond)`` runs it until ``cond()``,
    then it stops (not closed) with its tasks pending; ``resume(task)`` runs it until ``task`` ends."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.jobs: list = []
        self.job = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            self.job.wait()
            self.job.clear()
            fn, done = self.jobs.pop()
            if fn is None:
                self.loop.close()
                done.set()
                return
            try:
                fn()
            finally:
                done.set()

    def call(self, fn) -> threading.Event:
        done = threading.Event()
        self.jobs.append((fn, done))
        self.job.set()
        return done

    def start(self, coro):
        out = {}
        assert self.call(lambda: out.setdefault("task", self.loop.create_task(coro))).wait(HANG_S)
        return out["task"]

    def run_until(self, cond) -> None:
        assert self.call(lambda: self.loop.run_until_complete(asyncio.to_thread(_wait, cond))).wait(HANG_S)

    def resume(self, task) -> threading.Event:
        return self.call(lambda: self.loop.run_until_complete(asyncio.wait_for(task, HANG_S)))

    def close(self) -> None:
        assert self.call(None).wait(HANG_S)


def _timeline_holder(lock: TaskLock, name: str, log: list, hold_s: float = 0.0):
    async def body() -> None:
        await lock.acquire()
        log.append(("in", name))
        if hold_s:
            await asyncio.sleep(hold_s)
        log.append(("out", name))
        lock.release()
    return body()


def _no_overlap(log: list) -> bool:
    inside = None
    for what, name in log:
        if what == "in":
            if inside is not None:
                return False
            inside = name
        else:
            if inside != name:
                return False
            inside = None
    return inside is None


def test_a_task_handed_the_lock_while_its_loop_is_stopped_does_not_keep_it_and_queues_again_on_resume():
    # Before: the lock went to the task on the stopped loop and stayed there until that loop ran
    # again or was closed; the waiter behind it waited as long (here: never got it).
    lock, log = TaskLock(), []
    first = threading.Event()
    let_go = threading.Event()

    async def holder() -> None:
        await lock.acquire()
        log.append(("in", "holder"))
        first.set()
        await asyncio.to_thread(let_go.wait, HANG_S)
        log.append(("out", "holder"))
        lock.release()

    holding = threading.Thread(target=asyncio.run, args=(holder(),), daemon=True)
    holding.start()
    assert first.wait(HANG_S)
    paused = _PausedLoop()
    stranded = paused.start(_timeline_holder(lock, "paused", log))
    paused.run_until(lambda: len(lock._waiters) == 1)  # queued; its loop now stopped
    behind_done = threading.Event()
    behind = threading.Thread(target=lambda: (asyncio.run(_timeline_holder(lock, "behind", log, 0.2)),
                                              behind_done.set()), daemon=True)
    behind.start()
    assert _wait(lambda: len(lock._waiters) == 2)
    let_go.set()  # handed to the task on the stopped loop
    assert behind_done.wait(HANG_S), "the waiter behind waited for a task whose loop is stopped"
    assert ("in", "paused") not in log  # it never ran under the lock
    # Its loop runs again: the task finds the hand-over revoked, queues anew and takes it in turn.
    assert paused.resume(stranded).wait(HANG_S) and stranded.done() and stranded.exception() is None
    assert log[-2:] == [("in", "paused"), ("out", "paused")] and _no_overlap(log), log
    assert lock.owner is None
    paused.close()


def test_a_holder_on_a_stopped_loop_resumes_still_holding_and_the_waiter_gets_it_after():
    lock, log = TaskLock(), []
    go_on = threading.Event()

    async def step_then_wait() -> None:
        await lock.acquire()
        log.append(("in", "paused"))
        await asyncio.to_thread(go_on.wait, HANG_S)  # the loop stops while the task is here
        log.append(("out", "paused"))
        lock.release()

    paused = _PausedLoop()
    task = paused.start(step_then_wait())
    paused.run_until(lambda: lock.owner is task)
    got = threading.Event()
    waiter = threading.Thread(target=lambda: (asyncio.run(_timeline_holder(lock, "waiter", log)), got.set()),
                              daemon=True)
    waiter.start()
    assert _wait(lambda: len(lock._waiters) == 1)
    assert not got.wait(1.5) and lock.owner is task  # paused, pending: it keeps the lock
    go_on.set()
    assert paused.resume(task).wait(HANG_S) and task.exception() is None
    assert got.wait(HANG_S) and _no_overlap(log) and [n for w, n in log if w == "in"] == ["paused", "waiter"], log
    paused.close()


def test_a_holder_whose_task_ended_without_releasing_does_not_block_the_next():
    # Before: a task that ended holding the lock (an acquire without release) kept it for good,
    # though its loop ran on.
    lock = TaskLock()

    async def main() -> None:
        async def leaks() -> None:
            await lock.acquire()

        await asyncio.create_task(leaks())
        await asyncio.wait_for(lock.acquire(), 5)
        lock.release()

    asyncio.run(main())
    assert lock.owner is None


def test_a_revoked_task_cancelled_when_its_loop_runs_again_gives_nothing_back():
    """The task whose hand-over was revoked is cancelled as it resumes: it must leave the lock to
    its present holder, not hand that one's lock on."""
    lock = TaskLock()
    held, let_go = threading.Event(), threading.Event()

    async def holder(ready: threading.Event, release: threading.Event) -> None:
        await lock.acquire()
        ready.set()
        await asyncio.to_thread(release.wait, HANG_S)
        lock.release()

    a = threading.Thread(target=asyncio.run, args=(holder(held, let_go),), daemon=True)
    a.start()
    assert held.wait(HANG_S)
    paused = _PausedLoop()
    stranded = paused.start(lock.acquire())
    paused.run_until(lambda: len(lock._waiters) == 1)
    held_b, let_go_b = threading.Event(), threading.Event()
    b = threading.Thread(target=asyncio.run, args=(holder(held_b, let_go_b),), daemon=True)
    b.start()
    assert _wait(lambda: len(lock._waiters) == 2)
    let_go.set()
    assert held_b.wait(HANG_S)  # revoked from the stopped loop's task, passed to b
    owner = lock.owner
    assert paused.call(stranded.cancel).wait(HANG_S)
    done = paused.call(lambda: paused.loop.run_until_complete(asyncio.wait([stranded], timeout=HANG_S)))
    assert done.wait(HANG_S) and stranded.cancelled()
    assert lock.owner is owner and not lock._waiters  # b still holds it; nothing queued
    let_go_b.set()
    b.join(HANG_S)
    assert _wait(lambda: lock.owner is None)
    paused.close()
