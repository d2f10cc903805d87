"""Claims audit 15: docs/diversity-budget.md as review 57 left it (who a principal is to the budget,
failed reads keep their charge, the closed window, the async lock's stopped-loop rule) and
docs/audit-log.md as h-auditv1 left it (seq-1 checkpoint, ``UNSIGNED``, ``--allow-unsigned``,
``--signed-from``, the ``audit_unsigned_entries_adopted`` alert).

Each test runs what a sentence states (real qdrant-client local mode, real SQLite files, a real
redis-server for tests marked ``redis``, real Ed25519 keys and files, the CLI in process) and fails
when the sentence stops being true. The stores that fail on purpose are the real stores with one
method made to fail, as tests/test_review57.py does. Wrong, and corrected in the docs:

1. diversity-budget.md: "a `FAIL_CLOSED` entry ... [carries] the `budget` and `vector_budget`
   reports of its run" held for the run the store failed in only: a store failing in a re-run
   leaves an entry naming the error alone, while the first run's charge stays.
2. README's FAIL_CLOSED row: a failing audit log means "the call does not run"; a read did run in
   Qdrant and was charged, only its result is not returned (a write is not sent).
   docs/audit-log.md line 153 says the same and is left to its owner (h-auditfrom).
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import time

import numpy as np
import pytest
import qdrant_client
from guardkit import (PAYROLL_DIVERSITY, RawClient, audit_records, create, make_kit, models, payroll, record_sent,
                      replay_policy_file, unit)
from test_audit_sign_every_entry import _key as _key_files
from test_review55 import _as_v1

from qdrant_guard import AuditError, GuardRefusal, QdrantClient, QdrantGuardError, async_lock
from qdrant_guard.audit import AuditLog, verify_audit_file
from qdrant_guard.budget import (BudgetStoreError, ExtractionBudget, MemoryBudgetStore, RedisBudgetStore,
                                 SqliteBudgetStore)
from qdrant_guard.cli import main
from qdrant_guard.receipts import ReceiptSigner

CAP = 2  # PAYROLL_DIVERSITY over 10 points of source "payroll": floor(10 * 0.2)


def _listed(store) -> dict:
    return store.entries_by_prefix("src|", window_s=86400.0, now=time.time())


def _ids(result) -> list:
    points = result[0] if isinstance(result, tuple) else getattr(result, "points", result)
    return [p.id for p in points]


# ------------------------------------------------------------------ who a principal is to the budget


def test_a_case_variant_of_an_agent_id_is_another_agent_with_a_budget_of_its_own(tmp_path):
    # "`Bob`, `bob ` or a look-alike spelling of `bob` is another agent, with a budget of its own
    # ... (the guard does not fold case, spaces or look-alike letters)". Cyrillic "о" in "bоb".
    kit = make_kit(tmp_path)
    owner, bob = payroll(kit)
    spent = set(_ids(bob.scroll("hr", limit=10)))
    assert len(spent) == CAP
    for agent in ("Bob", "bob ", "b\u043eb"):
        other = owner.with_principal(kit.principal(agent, "support"))
        got = _ids(other.scroll("hr", limit=10, offset=5))
        assert len(got) == CAP and set(got) <= {5, 6, 7, 8, 9}, agent
    assert len(_listed(owner.guard.shared["budget_store"])) == 4


def test_a_percent_in_an_agent_id_is_escaped_so_m_at_x_and_m_percent40x_are_two_budgets(tmp_path):
    # "In the store key a `%` or `@` of the agent id is percent-escaped": agent "m%40x" must not
    # land on the key agent "m@x" (escaped to "m%40x") has.
    kit = make_kit(tmp_path)
    owner, _ = payroll(kit)
    first = owner.with_principal(kit.principal("m@x", "support"))
    second = owner.with_principal(kit.principal("m%40x", "support"))
    assert len(_ids(first.scroll("hr", limit=10))) == CAP
    got = _ids(second.scroll("hr", limit=10, offset=5))
    assert len(got) == CAP and set(got) <= {5, 6, 7, 8, 9}
    assert len(_listed(owner.guard.shared["budget_store"])) == 2


# ------------------------------------------------------------------ the window is closed at both ends


def _stores(tmp_path, request, with_redis):
    if with_redis:
        return [RedisBudgetStore(request.getfixturevalue("redis_url"), prefix=f"qg:c15:{time.monotonic_ns()}:")]
    return [MemoryBudgetStore(), SqliteBudgetStore(str(tmp_path / "b.db"))]


@pytest.mark.parametrize("with_redis", [False, pytest.param(True, marks=pytest.mark.redis)])
def test_an_id_still_counts_at_t_plus_window_in_seen_and_listing_and_not_just_after(tmp_path, request, with_redis):
    # "an id admitted at `t` still counts at `t + window_s` exactly ... and is forgotten just
    # after", "in every store": read through seen() and entries_by_prefix() too, which the guard's
    # exclusion filter is built from, not only through admissions.
    for store in _stores(tmp_path, request, with_redis):
        clock = [5000.0]
        budget = ExtractionBudget(store, window_s=30.0, clock=lambda: clock[0])
        got = budget.admit(principal="p", collection="c", source="s", point_ids=[1, 2], source_size=2,
                           max_source_coverage=1.0)
        assert got.admitted == [1, 2]
        key = got.key
        assert store.seen(key, window_s=30.0, now=5030.0) == 2, type(store).__name__
        assert len(store.entries_by_prefix("src|", window_s=30.0, now=5030.0)[key]) == 2
        assert store.seen(key, window_s=30.0, now=5030.001) == 0, type(store).__name__
        assert key not in store.entries_by_prefix("src|", window_s=30.0, now=5030.001)


# ------------------------------------------------------------------ a failed read keeps its charge


def test_a_read_whose_audit_entry_cannot_be_written_returns_nothing_and_keeps_its_charge(tmp_path, monkeypatch):
    # "A read that fails ... after a run was charged (... its audit entry cannot be written ...)
    # returns nothing and keeps the charge". The audit file is deleted under the guard: the
    # writer's check before each append refuses to write into a file nobody reads. The read itself
    # did run in Qdrant (README's FAIL_CLOSED row said "the call does not run"); a write does not.
    kit = make_kit(tmp_path)
    owner, bob = payroll(kit)
    (tmp_path / "audit.jsonl").unlink()
    sent = record_sent(monkeypatch, ("query_points", "upsert"))
    with pytest.raises(AuditError):
        bob.query_points("hr", query=unit(np.random.default_rng(3)), limit=5)
    assert sent == ["query_points", "query_points"]  # the run, charged, and its re-run
    listed = _listed(owner.guard.shared["budget_store"])
    assert [len(v) for v in listed.values()] == [CAP]
    with pytest.raises(AuditError):
        owner.upsert("hr", [models.PointStruct(id=99, vector=unit(np.random.default_rng(4)), payload={"source": "x"})])
    assert "upsert" not in sent and RawClient.count(owner, "hr").count == 10


def _proprietary_bob(kit, **point_payload):
    """bob@support's view of PROPRIETARY collection ``hr``: 10 points of source ``payroll`` (source
    cap 2), a vector cap of 1; each point's payload also holds ``point_payload``'s values of it."""
    pol = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
           "diversity": {**PAYROLL_DIVERSITY, "max_vectors": 1}}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={
        "source": "payroll", **{k: f(i) for k, f in point_payload.items()}}) for i in range(10)])
    return owner, owner.with_principal(kit.principal("bob", "support"))


class _FailsOnItsSecondSourceAdmission(MemoryBudgetStore):
    calls = 0

    def admit_points(self, *args, **kwargs):
        self.calls += 1
        if self.calls == 2:
            raise BudgetStoreError("store gone")
        return super().admit_points(*args, **kwargs)


def test_a_fail_closed_entry_carries_the_budget_and_vector_budget_reports_of_its_run(tmp_path):
    # "a `FAIL_CLOSED` entry (a store that failed after the charge) [carries] the `budget` and
    # `vector_budget` reports of its run". A grouped read charges each group in turn: the first
    # group's source admission withholds 3 and its vector admission 1, the second group's fails.
    kit = make_kit(tmp_path)
    owner, bob = _proprietary_bob(kit, g=lambda i: i % 2)
    store = owner.guard.shared["budget_store"] = _FailsOnItsSecondSourceAdmission()
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points_groups("hr", query=unit(np.random.default_rng(4)), group_by="g", group_size=5, limit=2,
                                with_vectors=True)
    assert ei.value.verdict == "FAIL_CLOSED"
    details = audit_records(kit)[-1]["details"]
    assert details["budget"] == {"payroll": {"withheld": 3, "seen": CAP, "cap": CAP}}
    assert details["vector_budget"] == {"withheld": 1, "cap": 1}
    assert [len(v) for v in _listed(store).values()] == [CAP]


def test_a_store_failing_in_a_re_run_keeps_the_first_runs_charge_which_its_entry_does_not_report(tmp_path):
    # The limit the docs now state: the FAIL_CLOSED entry holds the reports of the run the store
    # failed in; a scroll whose first run was charged (2 admitted, 8 withheld) and whose re-run's
    # admission fails is refused with an entry naming the error only, and the charge stays.
    # (If the entry comes to carry the earlier runs' reports, as QDRANT_ERROR's does, say so in
    # docs/diversity-budget.md, "Charged, not returned".)
    kit = make_kit(tmp_path)
    owner, bob = _proprietary_bob(kit)
    store = owner.guard.shared["budget_store"] = _FailsOnItsSecondSourceAdmission()
    with pytest.raises(GuardRefusal) as ei:
        bob.scroll("hr", limit=10, with_vectors=True)
    assert ei.value.verdict == "FAIL_CLOSED" and store.calls == 2
    assert audit_records(kit)[-1]["details"] == {"error": "BudgetStoreError('store gone')"}
    assert [len(v) for v in _listed(store).values()] == [CAP]


# ------------------------------------------------------------------ the async lock's stopped-loop rule


def test_the_stopped_loop_limit_and_the_revoked_calls_error_are_what_the_docs_name():
    # "keeps it until that loop has not run for 30 s (`async_lock._STOPPED_S`)", "each waiting one
    # within 0.5 s", "at most every 5 s per client", "`LockRevoked` ... (a `QdrantGuardError` ...)".
    assert async_lock._STOPPED_S == 30.0 and async_lock._RECHECK_S == 0.5 and async_lock._COLLECT_S == 5.0
    assert issubclass(async_lock.LockRevoked, QdrantGuardError)


# ------------------------------------------------------------------ docs/audit-log.md (h-auditv1)


def _run(*args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(args))
    return rc, out.getvalue()


def _signer(tmp_path):
    sk, path = _key_files(tmp_path, "guard.key")
    return ReceiptSigner(sk), f"{path}.pub"


def _write(p, n, signer=None, start=0):
    log = AuditLog(p, signer=signer)
    for i in range(n):
        log.append({"event": "w", "i": start + i})
    log.close()


def test_an_unsigned_log_is_left_alone_by_repair_and_not_replayed_with_keys(tmp_path):
    # "`audit repair` leaves such a log unchanged ("nothing to repair"). `audit replay` with keys
    # does not replay it (`NOT REPLAYED: ... unsigned at line 1`"; "An empty log is not `unsigned`".
    signer, pub = _signer(tmp_path)
    p = tmp_path / "a.jsonl"
    _write(p, 3, signer)
    _as_v1(p)
    before = p.read_bytes()
    rc, out = _run("audit", "verify", str(p), "--key", pub)
    assert rc == 1 and out.startswith(f"UNSIGNED: {p}: ")
    rc, out = _run("audit", "repair", str(p), "--key", pub)
    assert rc == 0 and out.startswith("nothing to repair") and p.read_bytes() == before
    (tmp_path / "kit").mkdir()
    policy = replay_policy_file(make_kit(tmp_path / "kit"))
    rc, out = _run("audit", "replay", str(p), "--policy", str(policy), "--key", pub)
    assert rc == 1 and out.startswith("NOT REPLAYED: ") and "unsigned at line 1" in out
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    rc, out = _run("audit", "verify", str(empty), "--key", pub)
    assert rc == 0 and out.startswith("OK: 0 entries")


def test_signed_from_needs_a_key_and_names_a_rewrite_the_guard_signed_over(tmp_path, caplog):
    # "`--signed-from SEQ` (...; needs a key)"; the alert "with extra={"qdrant_guard_alert":
    # {"event": "audit_unsigned_entries_adopted", "path", "first_seq", "last_seq", "hash"}}"
    # (`hash`: the last entry's), "whose message names the fix (`audit verify --signed-from`)";
    # after that `--key` verifies the log and prints `signed from: seq S`; with --signed-from 1
    # the v1 entries are `unauthenticated` (exit 1) and a log ending before S is `deleted`.
    signer, pub = _signer(tmp_path)
    p = tmp_path / "a.jsonl"
    _write(p, 3, signer)
    _as_v1(p)
    last_hash = json.loads(p.read_bytes().splitlines()[-1])["hash"]
    with contextlib.redirect_stderr(io.StringIO()) as err:
        assert main(["audit", "verify", str(p), "--signed-from", "1"]) == 2
    assert "give the guard's key" in err.getvalue()
    with caplog.at_level(logging.WARNING, logger="qdrant_guard.audit"):
        _write(p, 1, signer, start=3)
    alerts = [r.qdrant_guard_alert for r in caplog.records if hasattr(r, "qdrant_guard_alert")]
    assert alerts == [{"event": "audit_unsigned_entries_adopted", "path": str(p), "first_seq": 1, "last_seq": 3,
                       "hash": last_hash}]
    assert "--signed-from" in caplog.records[-1].getMessage()
    rc, out = _run("audit", "verify", str(p), "--key", pub)
    assert rc == 0 and "signed from: seq 4" in out
    rc, out = _run("audit", "verify", str(p), "--key", pub, "--signed-from", "1")
    assert rc == 1 and out.startswith("TAMPERED: unauthenticated at line 1") and "seq 1, 2, 3" in out
    rc, out = _run("audit", "verify", str(p), "--key", pub, "--signed-from", "9")
    assert rc == 1 and out.startswith("TAMPERED: deleted")
    rep = verify_audit_file(p, trusted_keys={signer.key_id: signer.public_key}, signed_from=4)
    assert rep.ok and rep.signed_from == 4


def test_a_keyless_log_taken_over_by_a_signing_guard_raises_the_alert_once_and_is_checkpointed(tmp_path, caplog):
    # "a writer's first entry in a log that held no v2 entry (... the first after entries of a log
    # begun ... by a guard without `signing_key`) carries [a checkpoint]"; "A log begun by a guard
    # without `signing_key` raises it when guards with a key open it before the first of them has
    # written there (normally once)"; then `--key` verifies and prints `signed from: seq 4`, and
    # `--signed-from 4` passes.
    signer, pub = _signer(tmp_path)
    p = tmp_path / "a.jsonl"
    _write(p, 3)
    with caplog.at_level(logging.WARNING, logger="qdrant_guard.audit"):
        _write(p, 2, signer, start=3)
        _write(p, 2, signer, start=5)
    alerts = [r.qdrant_guard_alert["event"] for r in caplog.records if hasattr(r, "qdrant_guard_alert")]
    assert alerts == ["audit_unsigned_entries_adopted"]
    lines = [json.loads(x) for x in p.read_bytes().splitlines()]
    assert ["ckpt" in e for e in lines] == [False, False, False, True, False, False, False]
    rc, out = _run("audit", "verify", str(p), "--key", pub)
    assert rc == 0 and "signed from: seq 4" in out
    assert _run("audit", "verify", str(p), "--key", pub, "--signed-from", "4")[0] == 0
