"""Mutation pass 28: tests that kill the mutants of the budget store's access checks
(qdrant_guard/budget_file_access.py) that tests/test_budget_store_access.py let through. Real
SQLite files, real processes (a forked child where a uid or an audit hook must not reach pytest's
own process); no mocks."""
from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from qdrant_guard.budget import BudgetStoreError, SqliteBudgetStore
from qdrant_guard.budget_file_access import create_private

_POSIX = pytest.mark.skipif(os.name != "posix", reason="file modes and owners are POSIX's")
_ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="chown and setuid need root")
OTHER = 65534


def _in_child(body) -> str:
    """Run ``body()`` (returning a str) in a forked child and return what it returned, or the
    child's exception as text: the child never returns into pytest."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            try:
                out = body()
            except BaseException as exc:  # noqa: BLE001 - reported to the parent as text
                out = f"raised {type(exc).__name__}: {exc}"
            os.write(w, out.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        out = fh.read().decode()
    os.waitpid(pid, 0)
    return out


@_POSIX
@pytest.mark.parametrize("umask", [0o277, 0o477, 0o777], ids=oct)
def test_the_store_makes_its_database_600_under_a_umask_that_takes_the_owners_own_bits(tmp_path, umask):
    # The open's mode is masked by the umask, which may take the owner's write (or read) bit too:
    # the store sets 600 after creating the file, else a guard under such a umask made a database
    # it could not write itself.
    db = tmp_path / "budget.db"
    old = os.umask(umask)
    try:
        store = SqliteBudgetStore(str(db))
        assert stat.S_IMODE(db.stat().st_mode) == 0o600
        assert store.admit("k", ["p1"], cap=5, window_s=60.0, now=1.0) == (["p1"], [])
        store.close()
    finally:
        os.umask(old)


@_ROOT_ONLY
def test_a_guard_running_as_another_uid_under_umask_277_writes_the_store_it_created(request):
    d = Path(tempfile.mkdtemp(prefix="qg-store-"))  # pytest's tmp_path is mode 700: out of its reach
    request.addfinalizer(lambda: shutil.rmtree(d))
    for up in d.parents:
        if up.stat().st_mode & 0o001 == 0:
            pytest.skip(f"{up} is not searchable by other users")
    d.chmod(0o700)
    os.chown(d, OTHER, OTHER)
    db = d / "budget.db"

    def body() -> str:
        os.setgroups([])
        os.setgid(OTHER)
        os.setuid(OTHER)
        os.umask(0o277)
        store = SqliteBudgetStore(str(db))
        try:
            admitted, _ = store.admit("k", ["p1", "p2"], cap=5, window_s=60.0, now=1.0)
        finally:
            store.close()
        return f"{admitted} {stat.S_IMODE(db.stat().st_mode):o}"

    assert _in_child(body) == "['p1', 'p2'] 600"
    assert db.stat().st_uid == OTHER


@_POSIX
@pytest.mark.skipif(not hasattr(sys, "addaudithook"), reason="needs audit hooks")
def test_the_database_is_never_open_to_others_while_it_is_created(tmp_path):
    # Between creating the file and setting its mode, another user could open it for writing and
    # keep the descriptor (a later chmod does not close it). So the file is created with no bit
    # beyond 600 even under umask 0: the audit hook sees its mode just before the fchmod, in a
    # child (an audit hook cannot be removed).
    db = tmp_path / "budget.db"

    def body() -> str:
        seen = []

        def hook(event, args):
            if event == "os.chmod" and isinstance(args[0], int):
                seen.append(stat.S_IMODE(os.fstat(args[0]).st_mode))

        sys.addaudithook(hook)
        os.umask(0)
        create_private(str(db))
        seen.append(stat.S_IMODE(db.stat().st_mode))
        return " ".join(f"{m:o}" for m in seen)

    modes = _in_child(body).split()
    assert modes and modes[-1] == "600", modes
    assert all(int(m, 8) & ~0o600 == 0 for m in modes), modes


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_creating_the_database_leaves_no_descriptor_open(tmp_path):
    # A process that opens many stores (one per client on a path) would run out of descriptors.
    db = tmp_path / "budget.db"

    def open_on_db() -> list[str]:
        found = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}") == str(db):
                    found.append(fd)
            except OSError:
                continue
        return found

    create_private(str(db))
    assert db.exists() and open_on_db() == []
    db.unlink()
    store = SqliteBudgetStore(str(db))
    store.close()
    assert open_on_db() == []


@_POSIX
@pytest.mark.parametrize("side", ["-journal", "-wal", "-shm"])
def test_a_side_file_others_can_write_is_refused_before_the_database_exists(tmp_path, side):
    # The database is created at the first opening; a -journal or -wal already beside it is read
    # by SQLite all the same, so it is checked whether the database exists or not.
    db = tmp_path / "budget.db"
    planted = tmp_path / f"budget.db{side}"
    planted.write_bytes(b"")
    planted.chmod(0o666)
    with pytest.raises(BudgetStoreError, match=f"budget store file {str(planted)!r} is writable by other users"):
        SqliteBudgetStore(str(db))
    assert not db.exists()  # refused before anything was created


@_POSIX
def test_a_store_path_that_is_a_dangling_symlink_creates_its_target_600(tmp_path):
    # SQLite follows the link and would create the target 644 minus the umask, readable by every
    # user (its rows say who read what): the store creates it where the link points, 600.
    safe, links = tmp_path / "safe", tmp_path / "links"
    safe.mkdir(mode=0o755)
    links.mkdir(mode=0o755)
    (links / "budget.db").symlink_to(safe / "target.db")
    old = os.umask(0o022)
    try:
        store = SqliteBudgetStore(str(links / "budget.db"))
        assert store.admit("k", ["p1"], cap=5, window_s=60.0, now=1.0) == (["p1"], [])
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in safe.iterdir()}
        store.close()
    finally:
        os.umask(old)
    assert (links / "budget.db").is_symlink()
    assert {"target.db", "target.db-wal", "target.db-shm"} <= set(modes)
    assert set(modes.values()) == {0o600}, {k: oct(v) for k, v in modes.items()}
