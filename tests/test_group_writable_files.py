"""Group-writable trust files in a user-private group (2026-12-07, h-grpfile).

Before, a policy, key, audit log or SQLite budget store whose mode had group write was refused
whatever its group, though its directories were judged by who may be in their group: a user with
umask 002 (Debian's default for user-private groups) who saved policy.toml 664 was refused while
nobody but themselves could write it. Now the file is judged as its directories are
(qdrant_guard.group_writers): accepted when only the guard's uid and root can be in its group,
refused, naming the group, its gid, a member outside and `chmod g-w FILE`, when anyone else can
(a member listed, a user whose primary group it is); world write is refused always; a named entry
of the file's POSIX ACL that lets another uid (or a group with another user in it) write it is
refused (`setfacl -x u:UID FILE`), and one the mask takes write from is not.

The users and groups are real (useradd, gpasswd, as root) in a copy-on-write /etc private to a
forked child (tests/groupkit.py): the machine's user database, which other tests read, is never
changed. The checks run in a grandchild that has become the guard's user; real keys, SQLite and
audit log, no mocks.
"""
from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from typing import Callable

import pytest
from groupkit import add_user, as_user, in_private_etc

from qdrant_guard import keys
from qdrant_guard.audit import AuditLog
from qdrant_guard.budget_stores import SqliteBudgetStore
from qdrant_guard.policy import load_policy

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="making users, and becoming one, needs root")
needs_setfacl = pytest.mark.skipif(shutil.which("setfacl") is None, reason="setfacl (package acl) is not installed")

KINDS = ("policy", "public key", "private key", "audit log", "budget store")
FILES = {"policy": "policy.toml", "public key": "k.pub", "private key": "k.key", "audit log": "audit.jsonl",
         "budget store": "budget.db"}
# 664 as umask 002 leaves them; the private key keeps its read rules (no group or world read).
MODES = {"policy": 0o664, "public key": 0o664, "private key": 0o620, "audit log": 0o664, "budget store": 0o664}
ERRORS = {"policy": "ConfigError", "public key": "KeyStoreError", "private key": "KeyStoreError",
          "audit log": "AuditError", "budget store": "BudgetStoreError"}
ACCEPTED = dict.fromkeys(KINDS, "accepted")


def _make(base: str) -> str:
    """Each trust file in ``base``, as its user writes them under umask 002."""
    os.umask(0o002)
    sk, pk = keys.generate_keypair()
    for kind, data in (("policy", b'[collections.pub]\nclass = "PUBLIC"\n'),
                       ("public key", (keys.public_key_to_str(pk) + "\n").encode()),
                       ("private key", keys.private_key_to_pem(sk))):
        with open(os.path.join(base, FILES[kind]), "wb") as fh:
            fh.write(data)
    AuditLog(os.path.join(base, FILES["audit log"])).close()
    SqliteBudgetStore(os.path.join(base, FILES["budget store"])).close()
    return "made"


def _load_all(base: str) -> str:
    """Each trust file loaded as its loader does: {kind: "accepted" or the refusal}, as JSON."""
    def path(kind: str) -> str:
        return os.path.join(base, FILES[kind])

    loaders = {"policy": lambda: load_policy(path("policy")),
               "public key": lambda: keys.load_public_key(path("public key")),
               "private key": lambda: keys.load_private_key(path("private key")),
               "audit log": lambda: AuditLog(path("audit log")).close(),
               "budget store": lambda: SqliteBudgetStore(path("budget store")).close()}
    said = {}
    for kind, load in loaders.items():
        try:
            load()
            said[kind] = "accepted"
        except Exception as exc:  # the refusal is the result
            said[kind] = f"{type(exc).__name__}: {exc}"
    return json.dumps(said)


@pytest.fixture(scope="module", autouse=True)
def warm(tmp_path_factory) -> None:
    """Made and loaded once as root: the grandchild that becomes alice may not read this
    interpreter's files (a venv whose Python is below /root), so what they import lazily is
    imported here."""
    base = str(tmp_path_factory.mktemp("warm"))
    old = os.umask(0o022)
    try:
        _make(base)
    finally:
        os.umask(old)
    _load_all(base)


def _as_alice(scenario: Callable[[pwd.struct_passwd, str], None]) -> None:
    """Run ``scenario(alice, base)`` in a private /etc: alice is made with useradd -U (her
    user-private group), ``base`` is her directory (not below pytest's root-only 0700 tmp) with
    each trust file she wrote under umask 002, then given MODES. Its assertions fail the test."""
    def child() -> str:
        alice = add_user("-U")
        base = tempfile.mkdtemp(dir="/tmp")
        try:
            os.chown(base, alice.pw_uid, alice.pw_gid)
            assert as_user(alice, lambda: _make(base)) == "made"
            for kind in KINDS:
                os.chmod(os.path.join(base, FILES[kind]), MODES[kind])
            scenario(alice, base)
        finally:
            shutil.rmtree(base)
        return "ok"

    said = in_private_etc(child)
    assert said == "ok", said


def _verdicts(alice: pwd.struct_passwd, base: str) -> dict[str, str]:
    said = as_user(alice, lambda: _load_all(base))
    assert not said.startswith("error "), said
    return json.loads(said)


def _assert_refused(verdicts: dict[str, str], base: str, who: str | dict[str, str], fix: str,
                    modes: dict[str, int] = MODES) -> None:
    """Each kind refused with its error class, naming the mode, ``who`` (or ``who[kind]``) and
    ``fix FILE``."""
    for kind in KINDS:
        msg = verdicts[kind]
        assert msg.startswith(f"{ERRORS[kind]}: "), (kind, msg)
        assert f"(mode {modes[kind]:o}: {who if isinstance(who, str) else who[kind]})" in msg, (kind, msg)
        assert f"run `{fix} {os.path.join(base, FILES[kind])}`" in msg, (kind, msg)


def _gpasswd(*argv: str) -> None:
    subprocess.run(["gpasswd", *argv], check=True, capture_output=True)


def test_group_writable_trust_files_in_a_user_private_group_are_accepted():
    def scenario(alice, base):
        assert grp.getgrgid(alice.pw_gid).gr_name == alice.pw_name and grp.getgrgid(alice.pw_gid).gr_mem == []
        assert {kind: os.stat(os.path.join(base, FILES[kind])).st_gid for kind in KINDS} == dict.fromkeys(
            KINDS, alice.pw_gid)
        assert _verdicts(alice, base) == ACCEPTED
        # The private key's read rules stay: group read only when asked for.
        key = os.path.join(base, FILES["private key"])
        os.chmod(key, 0o660)
        refused = _verdicts(alice, base)["private key"]
        assert refused == (f"KeyStoreError: private key file {key!r} is accessible by other users (mode 660); run "
                           f"`chmod 600 {key}` and retry")
        assert as_user(alice, lambda: str(bool(keys.load_private_key(key, allow_group_readable=True)))) == "True"
    _as_alice(scenario)


def test_a_member_listed_in_the_group_makes_its_write_refused():
    def scenario(alice, base):
        bob = add_user("-U")
        _gpasswd("-a", bob.pw_name, alice.pw_name)
        _assert_refused(_verdicts(alice, base), base,
                        f"its group {alice.pw_name!r} (gid {alice.pw_gid}) may write it, and user {bob.pw_name!r} "
                        f"(uid {bob.pw_uid}) is in it", "chmod g-w")
        _gpasswd("-d", bob.pw_name, alice.pw_name)
        assert _verdicts(alice, base) == ACCEPTED
    _as_alice(scenario)


def test_a_user_whose_primary_group_it_is_makes_its_write_refused():
    def scenario(alice, base):
        carol = add_user("-g", alice.pw_name)
        _assert_refused(_verdicts(alice, base), base,
                        f"its group {alice.pw_name!r} (gid {alice.pw_gid}) may write it, and user {carol.pw_name!r} "
                        f"(uid {carol.pw_uid}) has it as primary group", "chmod g-w")
    _as_alice(scenario)


def test_world_writable_trust_files_are_refused_in_a_user_private_group_too():
    def scenario(alice, base):
        for kind in KINDS:
            os.chmod(os.path.join(base, FILES[kind]), 0o602 if kind == "private key" else 0o666)
        verdicts = _verdicts(alice, base)
        for kind in KINDS:
            mode = 0o602 if kind == "private key" else 0o666
            assert verdicts[kind].startswith(f"{ERRORS[kind]}: "), verdicts[kind]
            assert f"(mode {mode:o})" in verdicts[kind], verdicts[kind]
    _as_alice(scenario)


# A private key's ACL entries write only: one that reads shows as group read, refused as before.
ACL_PERMS = {kind: "w" if kind == "private key" else "rw" for kind in KINDS}
ACL_SHOWN = {kind: "-w-" if kind == "private key" else "rw-" for kind in KINDS}
# What the mode shows then: the mask, recomputed to the entries' permissions, as the group's bits.
ACL_MODES = {kind: 0o620 if kind == "private key" else 0o664 for kind in KINDS}
# A mask that takes write from every entry (and, for the private key, read too).
ACL_MASK = {kind: "-" if kind == "private key" else "r" for kind in KINDS}


def _setfacl(base: str, entry: str) -> None:
    """``setfacl -m ENTRY`` on each trust file in ``base`` (``{perms}``, ``{mask}`` filled in for
    each kind), from its mode 644 (the key's 600) unless ENTRY is the mask."""
    for kind in KINDS:
        path = os.path.join(base, FILES[kind])
        if not entry.startswith("m::"):
            os.chmod(path, 0o600 if kind == "private key" else 0o644)
        done = subprocess.run(["setfacl", "-m", entry.format(perms=ACL_PERMS[kind], mask=ACL_MASK[kind]), path],
                              capture_output=True, text=True)
        assert done.returncode == 0, f"setfacl failed here: {done.stderr.strip()}"


@needs_setfacl
def test_a_files_acl_entry_letting_another_uid_write_is_refused_unless_the_mask_takes_write():
    def scenario(alice, base):
        bob = add_user("-U")
        _setfacl(base, f"u:{bob.pw_uid}:{{perms}}")
        _assert_refused(_verdicts(alice, base), base,
                        {kind: f"its ACL entry user:{bob.pw_uid}:{ACL_SHOWN[kind]} lets user {bob.pw_name!r} (uid "
                               f"{bob.pw_uid}) write it" for kind in KINDS},
                        f"setfacl -x u:{bob.pw_uid}", ACL_MODES)
        _setfacl(base, "m::{mask}")  # bob's entry now grants read at most
        assert _verdicts(alice, base) == ACCEPTED
    _as_alice(scenario)


@needs_setfacl
def test_a_files_acl_entries_for_its_own_uid_are_accepted_and_for_a_shared_group_refused():
    def scenario(alice, base):
        bob = add_user("-U")
        _setfacl(base, f"u:{alice.pw_uid}:{{perms}}")
        assert _verdicts(alice, base) == ACCEPTED
        for kind in KINDS:
            subprocess.run(["setfacl", "-m", f"g:{bob.pw_gid}:w", os.path.join(base, FILES[kind])], check=True)
        _assert_refused(_verdicts(alice, base), base,
                        f"its ACL entry group:{bob.pw_gid}:-w- lets group {bob.pw_name!r} (gid {bob.pw_gid}) write "
                        f"it, and user {bob.pw_name!r} (uid {bob.pw_uid}) has it as primary group",
                        f"setfacl -x g:{bob.pw_gid}", ACL_MODES)
    _as_alice(scenario)
