"""The SQLite budget store, :class:`SqliteBudgetStore`: one file shared by the processes on a host, one
``BEGIN IMMEDIATE`` transaction per admission, and the per-connection listings it keeps.
"""
from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from typing import Any, Callable

from .budget_file_access import create_private, unsafe_store_file
from .budget_store_base import BudgetStoreError, _check_real, _CountingStore, _in_window, _LISTINGS_KEPT
from .errors import GuardArgumentTypeError, GuardArgumentValueError


_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS qg_budget (
    key TEXT NOT NULL,
    pid TEXT NOT NULL,
    ts  REAL NOT NULL,
    PRIMARY KEY (key, pid)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS qg_budget_key_ts ON qg_budget (key, ts);
CREATE INDEX IF NOT EXISTS qg_budget_ts ON qg_budget (ts);
CREATE TABLE IF NOT EXISTS qg_budget_meta (
    name  TEXT PRIMARY KEY,
    value NOT NULL
) WITHOUT ROWID;
"""


# Rows an admission's sweep may delete on top of two per id the admission names: more than the
# admission can add, so the sweep keeps pace with the rows admissions write.
_SQLITE_SWEEP_STEP = 16


class SqliteBudgetStore(_CountingStore):
    """SQLite store: survives restarts and is exact across threads and processes.

    Each admission is one ``BEGIN IMMEDIATE`` transaction, which takes the database's write lock
    before reading, so two admissions to the same file never interleave. The database runs in WAL
    mode. Every thread (and every process after a fork) uses its own connection.

    Rows whose timestamp has left every window are deleted by a sweep that each admission runs in
    its own transaction, a bounded number of the oldest rows at a time (an index on the timestamp),
    so the file holds about the rows of the last window, not every row ever written. A row is
    deleted only when it is older than the sweep's time minus the longest ``window_s`` any store
    has used on the file (kept in the file, ``qg_budget_meta``, and raised in the same transaction
    that writes rows under a longer window, so a process with a longer window never loses ids it
    counts). The sweep's time is the smaller of ``now`` and a clock kept in the file that advances
    no faster than a monotonic clock runs (the process's own since it last saw the clock; with the
    default ``time.monotonic`` on Linux, also the system's since the file's clock last advanced on
    the same boot, so a stop of every process does not hold the sweep back), so a wall clock that
    jumps ahead deletes nothing early; and every call at a ``now`` no earlier, with a window no
    longer, would have forgotten the rows it deletes.

    Each thread's connection keeps the listings it read (:meth:`entries_by_prefix`, one per prefix
    ending in ``|``, such as a principal's sources in a collection) while nothing can have changed
    them: another connection's commit, in this process or another, changes ``PRAGMA data_version``
    (read before each listing; all of the connection's kept listings then go); the connection's own
    admissions drop the listings of a key's prefixes when they add or expire one of its ids, and
    resets drop them too; and a listing is given again only while every id in it is still in the
    window (the rule of :class:`MemoryBudgetStore`'s kept listings). docs/security-testing.md has
    the argument. Writes made through :meth:`_connection` itself, outside the store, are not seen.

    Args:
        path: the database file; created if missing, mode 600. ``":memory:"`` is refused because
            each connection would see a different database (use :class:`MemoryBudgetStore`).
        timeout_s: how long an admission waits for another writer before failing.
        monotonic: the clock the sweep measures elapsed time with (seconds); injectable for tests.

    Raises:
        BudgetStoreError: the database cannot be opened, or other users could rewrite it: it or a
            side file (``-journal``, ``-wal``, ``-shm``) is writable by every user or by a group (or
            named ACL entry) that someone other than this uid and root may be in (``chmod go-w``,
            ``setfacl -x``) or owned by a uid that is neither this process's nor root (``chown``), or its
            directory is writable by others or owned by such a uid, or lies below a directory
            anyone may write without the sticky bit (:mod:`qdrant_guard.budget_file_access`).
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 30.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        path = os.fspath(path)
        if not isinstance(path, str):
            raise GuardArgumentTypeError(f"path must be a str or os.PathLike[str], not {type(path).__name__}")
        if path in ("", ":memory:") or path.startswith("file::memory:"):
            raise GuardArgumentValueError(
                f"SqliteBudgetStore needs a file path, got {path!r}; use MemoryBudgetStore for an in-process budget"
            )
        self.path = path
        # Each thread and forked child opens its own connection later: a relative path would then
        # name a file in whatever the working directory has become, unchecked. Joined, not
        # abspath(): that drops "link/.." by its letters, where the kernel (and so the checks and
        # the 600 creation below) goes up from where the link points.
        self._file = os.path.join(os.getcwd(), path)
        self._timeout_s = _check_real("timeout_s", timeout_s, positive=True)
        unsafe = unsafe_store_file(path)
        if unsafe is not None:
            raise BudgetStoreError(unsafe)
        create_private(path)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        if not callable(monotonic):
            raise GuardArgumentTypeError(f"monotonic must be callable, not {type(monotonic).__name__}")
        self._monotonic = monotonic
        # The longest window_s this object has recorded in the file (committed), so an admission
        # writes the meta row only when its window is longer.
        self._window = 0.0
        # (the file's sweep clock, the monotonic time it was read or set): this process may advance
        # the clock by as much as its monotonic clock has run since. None until the first sweep.
        self._anchor: tuple[float, float] | None = None
        # With the system's monotonic clock (shared by the processes of one boot), the file also
        # keeps the monotonic time of its clock's last advance and the boot's id, so a process
        # started after every other had stopped advances the clock by the time they were down
        # (otherwise each such gap would hold the sweep back for good).
        self._boot = _boot_id() if monotonic is time.monotonic else None
        try:
            from .budget_units import SQLITE_UNITS_SCHEMA

            self._connection().executescript(_SQLITE_SCHEMA + SQLITE_UNITS_SCHEMA)
        except sqlite3.Error as exc:
            raise BudgetStoreError(f"cannot create the budget table in {path!r}: {exc}") from exc

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            try:
                conn = sqlite3.connect(self._file, timeout=self._timeout_s, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise BudgetStoreError(f"cannot open budget database {self.path!r}: {exc}") from exc
            self._local.conn, self._local.pid = conn, os.getpid()
            self._local.kept = _KeptListings()  # a new connection has seen no data_version yet
            with self._all_lock:
                self._all.append(conn)
        return conn

    def _transaction(self) -> "_SqliteTransaction":
        return _SqliteTransaction(self._connection(), self.path)

    def _expire(self, db: sqlite3.Connection, key: str, window_s: float, now: float) -> float:
        (newest,) = db.execute("SELECT MAX(ts) FROM qg_budget WHERE key = ?", (key,)).fetchone()
        if newest is not None and newest > now:
            now = newest
        if db.execute("DELETE FROM qg_budget WHERE key = ? AND ts < ?", (key, now - window_s)).rowcount:
            self._local.kept.changed(key)  # in the transaction: a failed commit only drops a listing early
        return now

    @staticmethod
    def _count(db: sqlite3.Connection, key: str) -> int:
        return int(db.execute("SELECT COUNT(*) FROM qg_budget WHERE key = ?", (key,)).fetchone()[0])

    def _admit_many(
        self, requests: list[tuple[str, list[str], int]], window_s: float, now: float
    ) -> list[tuple[list[bool], int, int]]:
        with self._transaction() as db:
            self._local.kept.admitting(now)
            self._note_window(db, window_s)
            out = [self._admit_in(db, key, ids, cap, window_s, now) for key, ids, cap in requests]
            self._sweep(db, now, _SQLITE_SWEEP_STEP + 2 * sum(len(ids) for _, ids, _ in requests))
        self._noted(window_s)
        return out

    def _admit_units(self, key: str, groups: list[Any], cap: int, window_s: float,
                     now: float) -> tuple[list[bool], int, int]:
        from .budget_units import sqlite_admit

        with self._transaction() as db:
            return sqlite_admit(db, key, groups, cap, window_s, now)

    def key_count(self) -> int:
        """How many keys the file holds: those with ids in the window, and idle ones the sweep has
        not reached yet. Reads every row's key (a diagnostic, not for each request)."""
        try:
            return int(self._connection().execute(
                "SELECT COUNT(*) FROM (SELECT DISTINCT key FROM qg_budget)").fetchone()[0])
        except sqlite3.Error as exc:
            raise BudgetStoreError(f"budget database {self.path!r}: {exc}") from exc

    def _note_window(self, db: sqlite3.Connection, window_s: float) -> None:
        # In the transaction that writes rows under window_s: no sweep, in any process, can then
        # delete a row this window still counts.
        if window_s > self._window:  # no upsert: SQLite before 3.24 has none
            db.execute("INSERT OR IGNORE INTO qg_budget_meta (name, value) VALUES ('window', ?)", (window_s,))
            db.execute("UPDATE qg_budget_meta SET value = ? WHERE name = 'window' AND value < ?", (window_s, window_s))

    def _noted(self, window_s: float) -> None:
        # After the commit: a rolled-back transaction must not leave the window counted as recorded.
        self._window = max(self._window, window_s)

    def _sweep(self, db: sqlite3.Connection, now: float, limit: int) -> None:
        meta = dict(db.execute("SELECT name, value FROM qg_budget_meta").fetchall())
        window = meta.get("window")
        if window is None:
            return
        mono = self._monotonic()
        clock = meta.get("clock")
        if not isinstance(clock, float):
            # The first sweep of this file: start at the newest row's timestamp (an existing file's
            # last admission), or now on an empty one, whichever is earlier.
            (newest,) = db.execute("SELECT MAX(ts) FROM qg_budget").fetchone()
            clock = now if newest is None or newest > now else float(newest)
            self._set_clock(db, clock, mono)
            self._anchor = (clock, mono)
        else:
            # Advance no further than a monotonic clock has run since the clock was seen (this
            # process's, or the file's own on the same boot), so a jump ahead of now does not carry
            # it; nor past now; never back.
            ahead = None
            if self._anchor is not None:
                seen, at = self._anchor
                ahead = seen + (mono - at)
            advanced_at = meta.get("mono")
            if self._boot is not None and meta.get("boot") == self._boot and isinstance(advanced_at, float):
                if ahead is None or clock + (mono - advanced_at) > ahead:
                    ahead = clock + (mono - advanced_at)
            if ahead is None or ahead <= clock:
                self._anchor = (clock, mono)  # the file's clock is as far as this process could take it
            else:
                if ahead > now:
                    ahead = now
                # Written only once it has moved a thousandth of the window (the sweep then lags
                # by at most that): most admissions then write nothing to the meta table.
                if ahead >= clock + window / 1000:
                    clock = ahead
                    self._set_clock(db, clock, mono)
                    self._anchor = (clock, mono)
                # else keep the anchor: the time it has measured still counts at the next sweep.
        if self._anchor is None:
            self._anchor = (clock, mono)
        # A caller whose now is behind the clock (a step back) deletes only what its own
        # admissions would.
        cutoff = (now if now < clock else clock) - window
        db.execute("DELETE FROM qg_budget WHERE (key, pid) IN "
                   "(SELECT key, pid FROM qg_budget WHERE ts < ? ORDER BY ts LIMIT ?)", (cutoff, limit))

    def _set_clock(self, db: sqlite3.Connection, clock: float, mono: float) -> None:
        db.execute("INSERT OR REPLACE INTO qg_budget_meta (name, value) VALUES ('clock', ?)", (clock,))
        if self._boot is not None:
            db.execute("INSERT OR REPLACE INTO qg_budget_meta (name, value) VALUES ('mono', ?)", (mono,))
            db.execute("INSERT OR REPLACE INTO qg_budget_meta (name, value) VALUES ('boot', ?)", (self._boot,))
        else:  # a monotonic time of another clock would not mean anything to the next process
            db.execute("DELETE FROM qg_budget_meta WHERE name IN ('mono', 'boot')")

    def _admit_in(self, db: sqlite3.Connection, key: str, ids: list[str], cap: int, window_s: float,
                  now: float) -> tuple[list[bool], int, int]:
        now = self._expire(db, key, window_s, now)
        count = before = self._count(db, key)
        flags = []
        for pid in ids:
            if db.execute("UPDATE qg_budget SET ts = ? WHERE key = ? AND pid = ?", (now, key, pid)).rowcount:
                flags.append(True)
            elif count < cap:
                db.execute("INSERT INTO qg_budget (key, pid, ts) VALUES (?, ?, ?)", (key, pid, now))
                count += 1
                flags.append(True)
            else:
                flags.append(False)
        if count != before:
            self._local.kept.changed(key)
        return flags, before, count

    def _admit_points(
        self, keys: list[tuple[str, int]], points: list[tuple[str, list[int]]], window_s: float, now: float
    ) -> tuple[list[bool], list[tuple[int, int]]]:
        with self._transaction() as db:
            kept = self._local.kept
            kept.admitting(now)
            self._note_window(db, window_s)
            stamps = [self._expire(db, key, window_s, now) for key, _ in keys]
            counts = [self._count(db, key) for key, _ in keys]
            before = list(counts)
            released = []
            for pid, members in points:
                held = {k for k in members if db.execute(
                    "SELECT 1 FROM qg_budget WHERE key = ? AND pid = ?", (keys[k][0], pid)).fetchone()}
                ok = all(k in held or counts[k] < keys[k][1] for k in members)
                if ok:
                    for k in members:
                        if k in held:
                            db.execute("UPDATE qg_budget SET ts = ? WHERE key = ? AND pid = ?", (stamps[k], keys[k][0], pid))
                        else:
                            db.execute("INSERT INTO qg_budget (key, pid, ts) VALUES (?, ?, ?)", (keys[k][0], pid, stamps[k]))
                            counts[k] += 1
                released.append(ok)
            for (key, _), count, was in zip(keys, counts, before):
                if count != was:
                    kept.changed(key)
            # The sweep's deletions need no drop: a row it deletes is older than this admission's
            # now minus the file's longest window, and no kept listing holding it can be given again.
            self._sweep(db, now, _SQLITE_SWEEP_STEP + 2 * sum(len(members) for _, members in points))
        self._noted(window_s)
        return released, list(zip(before, counts))

    def _seen(self, key: str, window_s: float, now: float) -> int:
        with self._transaction() as db:
            self._note_window(db, window_s)
            self._expire(db, key, window_s, now)
            count = self._count(db, key)
        self._noted(window_s)
        return count

    def _entries_by_prefix(self, prefix: str, window_s: float, now: float) -> dict[str, frozenset[str]]:
        # One SELECT reads one snapshot (WAL) and walks the primary key from the prefix on, so it
        # needs no write lock; rows come ordered by key, and the first key past the prefix ends it.
        if window_s > self._window:  # once per longer window: a listing then reads no row swept under a shorter one
            with self._transaction() as db:
                self._note_window(db, window_s)
            self._noted(window_s)
        conn = self._connection()
        kept = self._local.kept
        rows: dict[str, list[tuple[str, float]]] = {}
        oldest, newest = math.inf, -math.inf
        try:
            # Read before the listing: a commit between the two then makes the version read later differ.
            (version,) = conn.execute("PRAGMA data_version").fetchone()
            found = kept.get(version, prefix, window_s, now)
            if found is not None:
                return dict(found)
            for key, pid, ts in conn.execute(
                    "SELECT key, pid, ts FROM qg_budget WHERE key >= ? ORDER BY key", (prefix,)):
                if not key.startswith(prefix):
                    break
                rows.setdefault(key, []).append((pid, ts))
                if ts < oldest:
                    oldest = ts
                if ts > newest:
                    newest = ts
        except sqlite3.Error as exc:
            raise BudgetStoreError(f"budget database {self.path!r}: {exc}") from exc
        found = {key: _in_window(entries, window_s, now) for key, entries in rows.items()}
        found = {key: ids for key, ids in found.items() if ids}
        if oldest >= (now if now > newest else newest) - window_s:  # every id listed: none left out
            kept.keep(prefix, window_s, oldest, found)
            return dict(found)
        return found

    def _reset(self, key: str | None) -> None:
        with self._transaction() as db:
            if key is None:
                self._local.kept.by_prefix.clear()
                db.execute("DELETE FROM qg_budget")
                db.execute("DELETE FROM qg_budget_units")
            else:
                self._local.kept.changed(key)
                db.execute("DELETE FROM qg_budget WHERE key = ?", (key,))
                db.execute("DELETE FROM qg_budget_units WHERE key = ?", (key,))

    def close(self) -> None:
        """Close every connection this store opened (in this process)."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


class _KeptListings:
    """One SQLite connection's kept listings: prefix -> (window_s, oldest timestamp listed, the
    listing), each holding every id its keys had, all in the window (so its newest timestamp
    minus window_s was at most its oldest), as of ``PRAGMA data_version`` ``version`` on this
    connection (which other connections' commits change, and this one's do not)."""

    __slots__ = ("version", "latest", "by_prefix")

    def __init__(self) -> None:
        self.version: int | None = None
        # The latest now of this connection's admissions: a refresh of an id of a kept listing
        # stamps it with max(that now, its key's newest), so its key's window ends at most at
        # max(latest, the listing's newest).
        self.latest = -math.inf
        self.by_prefix: dict[str, tuple[float, float, dict[str, frozenset[str]]]] = {}

    def get(self, version: int, prefix: str, window_s: float, now: float) -> dict[str, frozenset[str]] | None:
        """The kept listing of ``prefix`` if it is still exact at ``now``, else None."""
        if version != self.version:
            self.by_prefix.clear()
            self.version = version
            return None
        kept = self.by_prefix.get(prefix)
        if kept is None or kept[0] != window_s:
            return None
        window, oldest, found = kept
        # Since it was listed, ids were only refreshed (a later timestamp): every id listed is at
        # least as recent as oldest, and each key's window ends at most at max(now, latest, the
        # listing's newest), whose last term is within the window of oldest already.
        end = now if now > self.latest else self.latest
        return found if end - window <= oldest else None

    def keep(self, prefix: str, window_s: float, oldest: float, found: dict[str, frozenset[str]]) -> None:
        if not prefix.endswith("|"):
            return  # changed() finds the prefixes of a key at its "|"s
        if len(self.by_prefix) >= _LISTINGS_KEPT:
            self.by_prefix.clear()
        self.by_prefix[prefix] = (window_s, oldest, found)

    def admitting(self, now: float) -> None:
        if now > self.latest:
            self.latest = now

    def changed(self, key: str) -> None:
        """Drop the listings that hold ``key``: an id of it was added or removed."""
        if self.by_prefix:
            end = key.find("|")
            while end >= 0:
                self.by_prefix.pop(key[: end + 1], None)
                end = key.find("|", end + 1)


def _boot_id() -> str | None:
    # Linux names each boot; elsewhere None, and only a process's own monotonic clock is used.
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except (OSError, ValueError):
        return None


class _SqliteTransaction:
    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self._conn, self._path = conn, path

    def __enter__(self) -> sqlite3.Connection:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise BudgetStoreError(f"budget database {self._path!r} is unavailable: {exc}") from exc
        return self._conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            try:
                self._conn.execute("COMMIT")
                return
            except sqlite3.Error as commit_exc:
                self._rollback()
                raise BudgetStoreError(f"budget database {self._path!r}: commit failed: {commit_exc}") from commit_exc
        self._rollback()
        if isinstance(exc, sqlite3.Error):
            raise BudgetStoreError(f"budget database {self._path!r}: {exc}") from exc

    def _rollback(self) -> None:
        # SQLite rolls a transaction back by itself on some errors (a full disk, an I/O error, an
        # interrupt); a ROLLBACK then fails and must not replace the error that caused it.
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
