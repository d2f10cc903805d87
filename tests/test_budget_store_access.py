"""Who may write the extraction budget's SQLite file (2026-12-07, h-left10).

The per-principal budget lives in the file ``budget_store = "sqlite:///..."`` names. Whoever can
write that file, or a SQLite side file beside it (``-wal``, ``-shm``, a hot ``-journal``), can
delete the rows that count what a principal was given and read a source past its cap again. The
store now refuses such a file when it is opened: writable by group or others, owned by a uid that
is neither the process's nor root, or in a directory others may create files in.

Real local Qdrant, real Ed25519 keys, real SQLite files; no mocks."""
from __future__ import annotations

import grp
import os
import sqlite3
import stat

import numpy as np
import pytest
from groupkit import give_shared_group
from guardkit import PAYROLL_DIVERSITY, audit_records, create, hr_policy, make_kit, models, unit

from qdrant_guard import QdrantClient
from qdrant_guard.errors import ConfigError, GuardRefusal

_ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="chown to another uid needs root")


def _owner(kit, db):
    """alice@hr's client on ``hr`` (cap 2 of source payroll's 10 points), budget in ``db``."""
    cfg = kit.config({"hr": hr_policy(PAYROLL_DIVERSITY)}, budget_store=f"sqlite:///{db}")
    return QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))


def _fill(owner):
    create(owner, "hr")
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"}) for i in range(10)])


def _read(bob, seen=()):
    """The ids bob's scroll returns, leaving out ``seen``."""
    flt = models.Filter(must_not=[models.HasIdCondition(has_id=sorted(seen))]) if seen else None
    return sorted(p.id for p in bob.scroll("hr", scroll_filter=flt, limit=20)[0])


def test_a_store_file_others_can_write_does_not_start_the_client(tmp_path):
    # The store file exists at mode 666 (made by a tool under umask 0, or opened up "to share"):
    # any local user can write it.
    kit = make_kit(tmp_path)
    db = tmp_path / "budget.db"
    sqlite3.connect(db).close()
    db.chmod(0o666)
    try:
        owner = _owner(kit, db)
    except ConfigError as exc:
        message = str(exc)
    else:  # the old code: the cap holds until another user deletes bob's rows
        _fill(owner)
        bob = owner.with_principal(kit.principal("bob", "support"))
        seen = set(_read(bob))
        assert len(seen) == 2 and _read(bob, seen) == []  # the cap: 2 of payroll's 10
        for _ in range(4):
            with sqlite3.connect(db) as attacker:  # anyone: the file is mode 666
                attacker.execute("DELETE FROM qg_budget WHERE key LIKE '%bob@support%'")
            seen.update(_read(bob, seen))
        pytest.fail(f"the guard started on a budget store any user can write; after bob's rows were "
                    f"deleted he read {len(seen)} of payroll's 10 points (cap 2): {sorted(seen)}")
    assert str(db) in message and "mode 666" in message and f"chmod go-w {db}" in message
    assert "budget_store" in message


def test_a_store_made_unsafe_after_the_start_fails_closed_at_its_first_read_and_is_audited(tmp_path):
    # The start found no file; by the first budgeted read (where the store is opened) there is one
    # any user can write. The read is refused FAIL_CLOSED, audited, naming the file.
    kit = make_kit(tmp_path)
    db = tmp_path / "budget.db"
    owner = _owner(kit, db)
    _fill(owner)
    sqlite3.connect(db).close()
    db.chmod(0o666)
    bob = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as err:
        bob.scroll("hr", limit=20)
    assert err.value.verdict == "FAIL_CLOSED"
    assert f"chmod go-w {db}" in str(err.value) and "mode 666" in str(err.value)
    last = audit_records(kit)[-1]
    assert (last["op"], last["verdict"], last["principal"]) == ("scroll", "FAIL_CLOSED", "bob@support")
    assert str(db) in last["details"]["error"]
    db.chmod(0o644)  # fixed: the next read opens the store and is capped
    assert len(_read(bob)) == 2


def _store(path):
    from qdrant_guard.budget import SqliteBudgetStore

    store = SqliteBudgetStore(str(path))
    store.close()
    return store


@pytest.mark.parametrize("mode", [0o666, 0o664, 0o646, 0o620, 0o602], ids=oct)
def test_the_store_refuses_a_database_group_or_others_can_write(tmp_path, mode):
    from qdrant_guard.budget import BudgetStoreError

    db = tmp_path / "budget.db"
    _store(db)
    db.chmod(mode)
    world = mode & 0o002
    # Group write alone: refused where someone else is in the group (a user-private one passes).
    note = "" if world else f": its group {grp.getgrgid(give_shared_group(db)).gr_name!r} (gid "
    with pytest.raises(BudgetStoreError) as err:
        _store(db)
    assert str(err.value).startswith(
        f"budget store file {str(db)!r} is writable by other users (mode {mode:o}{note}")
    assert str(err.value).endswith(
        "whoever can write it can delete the rows that count what each principal was given and read past the "
        f"extraction budget's caps again; run `chmod {'go' if world else 'g'}-w {db}` and retry")
    for fine in (0o644, 0o640, 0o600, 0o444):
        db.chmod(fine)
        _store(db)


@pytest.mark.parametrize("side", ["-wal", "-shm", "-journal"])
def test_the_store_refuses_a_side_file_others_can_write(tmp_path, side):
    # SQLite plays a hot -journal into the database on open and reads pages from the -wal: who
    # writes them writes the database. (Any of them may be absent between runs.)
    from qdrant_guard.budget import BudgetStoreError

    db = tmp_path / "budget.db"
    _store(db)
    planted = tmp_path / f"budget.db{side}"
    planted.write_bytes(b"")
    planted.chmod(0o666)
    with pytest.raises(BudgetStoreError) as err:
        _store(db)
    assert f"budget store file {str(planted)!r} is writable by other users (mode 666)" in str(err.value)
    assert f"chmod go-w {planted}" in str(err.value)


@pytest.mark.parametrize("dmode", [0o777, 0o1777, 0o703], ids=oct)
def test_the_store_refuses_a_directory_others_may_create_files_in_even_sticky(tmp_path, dmode):
    # The sticky bit stops others renaming the database, not planting a -journal or -wal beside it.
    from qdrant_guard.budget import BudgetStoreError

    d = tmp_path / "shared"
    d.mkdir()
    _store(d / "budget.db")
    d.chmod(dmode)
    with pytest.raises(BudgetStoreError) as err:
        _store(d / "budget.db")
    assert f"is in directory {str(d)!r}, which every user may create files in (mode {dmode:o})" in str(err.value)
    assert f"chmod o-w {d}" in str(err.value)
    d.chmod(0o775)  # group-writable in a group only this uid (and root) is in, as umask 002 gives: accepted
    _store(d / "budget.db")


def test_a_wal_planted_in_a_sticky_shared_directory_would_rewrite_the_budget(tmp_path):
    # As /tmp (1777): nobody may rename the database, but anyone may create budget.db-wal while
    # it is absent (SQLite deletes it when the last connection closes). A -wal made from a copy
    # of the database with the rows deleted is read as the database's newest pages.
    from qdrant_guard.budget import BudgetStoreError, SqliteBudgetStore

    d = tmp_path / "shared"
    d.mkdir(mode=0o755)
    db = d / "budget.db"
    store = SqliteBudgetStore(str(db))
    assert store.admit("bob", ["p1", "p2"], cap=2, window_s=3600.0, now=10.0) == (["p1", "p2"], [])
    assert store.admit("bob", ["p3"], cap=2, window_s=3600.0, now=11.0) == ([], ["p3"])
    store.close()
    d.chmod(0o1777)
    attacker = sqlite3.connect(tmp_path / "copy.db", isolation_level=None)
    attacker.execute("PRAGMA journal_mode=WAL")
    attacker.execute("PRAGMA wal_autocheckpoint=0")
    source = sqlite3.connect(db)
    source.backup(attacker)
    source.close()
    attacker.execute("DELETE FROM qg_budget")
    (d / "budget.db-wal").write_bytes((tmp_path / "copy.db-wal").read_bytes())  # mode 644, his own file
    try:
        store = SqliteBudgetStore(str(db))
    except BudgetStoreError as exc:
        assert f"is in directory {str(d)!r}, which every user may create files in (mode 1777)" in str(exc)
    else:  # the old code: bob's two ids are forgotten, and two more are admitted under cap 2
        admitted, _ = store.admit("bob", ["p3", "p4"], cap=2, window_s=3600.0, now=20.0)
        store.close()
        pytest.fail(f"the store opened beside a planted -wal; bob's ids were gone, and under cap 2 it then "
                    f"admitted {admitted} as well")
    finally:
        attacker.close()


def test_a_symlinked_store_is_checked_where_sqlite_puts_its_side_files(tmp_path):
    # SQLite resolves a symlinked database and writes its -wal and -shm beside the target.
    from qdrant_guard.budget import BudgetStoreError

    shared, safe = tmp_path / "shared", tmp_path / "safe"
    shared.mkdir(mode=0o755)
    safe.mkdir(mode=0o755)
    _store(shared / "budget.db")
    (safe / "budget.db").symlink_to(shared / "budget.db")
    _store(safe / "budget.db")
    shared.chmod(0o1777)
    with pytest.raises(BudgetStoreError, match=f"is in directory {str(shared)!r}, which every user may create"):
        _store(safe / "budget.db")


def test_the_store_refuses_a_directory_anyone_may_write_further_up(tmp_path):
    from qdrant_guard.budget import BudgetStoreError

    top = tmp_path / "open"
    (top / "sub").mkdir(parents=True)
    top.chmod(0o777)
    with pytest.raises(BudgetStoreError, match=f"is below directory {str(top)!r}, which every user may write"):
        _store(top / "sub" / "budget.db")
    assert not (top / "sub" / "budget.db").exists()  # refused before anything was created


@pytest.mark.parametrize("umask", [0o000, 0o002, 0o022, 0o077], ids=oct)
def test_the_store_creates_its_database_and_side_files_mode_600_under_any_umask(tmp_path, umask):
    from qdrant_guard.budget import SqliteBudgetStore

    db = tmp_path / "budget.db"
    old = os.umask(umask)
    try:
        store = SqliteBudgetStore(str(db))
        store.admit("k", ["p1"], cap=5, window_s=60.0, now=1.0)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.glob("budget.db*")}
        store.close()
    finally:
        os.umask(old)
    assert {"budget.db", "budget.db-wal", "budget.db-shm"} <= set(modes)
    assert set(modes.values()) == {0o600}, {k: oct(v) for k, v in modes.items()}
    # An existing file keeps its mode: 644 is not refused.
    db.chmod(0o644)
    _store(db)
    assert stat.S_IMODE(db.stat().st_mode) == 0o644


@_ROOT_ONLY
@pytest.mark.parametrize("what", ["database", "-wal", "-journal", "directory"])
def test_the_store_refuses_files_another_user_owns(tmp_path, what):
    # Mode 644 does not stop a file's owner: he may chmod it and write.
    from qdrant_guard.budget import BudgetStoreError

    d = tmp_path / "store"
    d.mkdir(mode=0o755)
    db = d / "budget.db"
    _store(db)
    target = {"database": db, "-wal": d / "budget.db-wal", "-journal": d / "budget.db-journal", "directory": d}[what]
    if not target.exists():
        target.write_bytes(b"")
        target.chmod(0o644)
    os.chown(target, 65534, -1)
    with pytest.raises(BudgetStoreError) as err:
        _store(db)
    kind = "in directory" if what == "directory" else "budget store file"
    assert kind in str(err.value) and str(target) in str(err.value)
    assert f"owned by uid 65534, neither this process's uid ({os.geteuid()}) nor root" in str(err.value)
    assert f"chown {os.geteuid()} {target}" in str(err.value)
    os.chown(target, 0, -1)  # root's is accepted
    _store(db)


@_ROOT_ONLY
def test_a_store_file_another_user_owns_stops_the_client_even_with_fail_closed_off(tmp_path):
    kit = make_kit(tmp_path)
    db = tmp_path / "budget.db"
    _store(db)
    os.chown(db, 65534, -1)
    cfg = kit.config({"hr": {**hr_policy(PAYROLL_DIVERSITY), "fail_closed": False}}, budget_store=f"sqlite:///{db}")
    with pytest.raises(ConfigError) as err:
        QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    assert "test-policy: budget_store: budget store file" in str(err.value)
    assert "owned by uid 65534" in str(err.value) and f"chown {os.geteuid()} {db}" in str(err.value)


def test_the_async_client_does_not_start_on_a_store_others_can_write(tmp_path):
    from qdrant_guard import AsyncQdrantClient

    kit = make_kit(tmp_path)
    db = tmp_path / "budget.db"
    _store(db)
    db.chmod(0o664)
    give_shared_group(db)
    cfg = kit.config({"hr": hr_policy(PAYROLL_DIVERSITY)}, budget_store=f"sqlite:///{db}")
    with pytest.raises(ConfigError, match=f"budget_store: budget store file {str(db)!r} is writable by other"):
        AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
