"""Trust files below a directory that a group, or a POSIX ACL entry, lets others write (2026-12-07, h-grp).

Before, a key, policy, budget store or audit log below a directory mode 775 was accepted whatever
its group: every member of that group may rename the file (or a directory on its path) away and
put their own in its place. Now such a directory (without the sticky bit; the budget store's own
directory even with it) is refused unless only the guard's uid and root can be in its group, as
Debian's OpenSSH accepts user-private groups; a named ACL entry granting write to someone else is
refused the same way.

Groups are the machine's own (read from the group and user databases, none created); ACLs are
set with ``os.setxattr`` (and checked against ``setfacl``/``getfacl`` where installed). chgrp,
setxattr and switching uid need root: those tests are skipped elsewhere. Real keys, SQLite,
local Qdrant; no mocks.
"""
from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from groupkit import as_user
from guardkit import make_kit

from qdrant_guard import QdrantClient, keys
from qdrant_guard.audit import AuditLog
from qdrant_guard.budget_stores import BudgetStoreError, SqliteBudgetStore
from qdrant_guard.dirmodes import replaceable_by_anyone
from qdrant_guard.errors import AuditError, ConfigError
from qdrant_guard.group_writers import GROUP, GROUP_OBJ, MASK, OTHER, USER, USER_OBJ, AclEntry, outsider, parse_acl
from qdrant_guard.keys import KeyStoreError
from qdrant_guard.policy import load_policy
from qdrant_guard.receipts import ReceiptSigner

root_only = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                               reason="chgrp to another group, setting an ACL and switching uid need root")
NOBODY = 65534


def _acl(*entries: tuple[int, int, int]) -> bytes:
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


_U = 0xFFFFFFFF  # the id field of an unnamed entry


def _members(gid: int) -> set[int]:
    uids = {pw.pw_uid for pw in pwd.getpwall() if pw.pw_gid == gid}
    for name in grp.getgrgid(gid).gr_mem:
        uids.add(pwd.getpwnam(name).pw_uid)
    return uids


def _shared_group(guard_uid: int = 0) -> grp.struct_group:
    """A group of this machine that a user other than root and ``guard_uid`` is in."""
    for gr in grp.getgrall():
        try:
            if _members(gr.gr_gid) - {0, guard_uid}:
                return gr
        except KeyError:
            continue
    pytest.skip("no group here has a member other than root")


def _private_user() -> pwd.struct_passwd:
    """A non-root user whose primary group holds nobody else (a user-private group)."""
    for pw in pwd.getpwall():
        try:
            if pw.pw_uid != 0 and _members(pw.pw_gid) == {pw.pw_uid}:
                return pw
        except KeyError:
            continue
    pytest.skip("no non-root user here has a user-private group")


# The parser, on bytes: runs anywhere.

def test_parse_acl_reads_the_linux_binary_layout():
    raw = _acl((USER_OBJ, 6, _U), (USER, 7, 1234), (GROUP_OBJ, 4, _U), (GROUP, 2, 50), (MASK, 6, _U), (OTHER, 4, _U))
    assert parse_acl(raw) == [AclEntry(USER_OBJ, 6, None), AclEntry(USER, 7, 1234), AclEntry(GROUP_OBJ, 4, None),
                              AclEntry(GROUP, 2, 50), AclEntry(MASK, 6, None), AclEntry(OTHER, 4, None)]


@pytest.mark.parametrize("raw, says", [
    (b"", "0 bytes"), (b"\x02\x00\x00", "3 bytes"), (_acl((USER_OBJ, 6, _U)) + b"\x00", "13 bytes"),
    (struct.pack("<I", 1) + struct.pack("<HHI", USER_OBJ, 6, _U), "version 1"),
    (_acl((0x40, 7, 0)), "tag 0x40"),
])
def test_parse_acl_refuses_what_it_cannot_read(raw, says):
    # An ACL this code cannot read must not pass for one that grants nothing.
    with pytest.raises(ValueError, match=says):
        parse_acl(raw)


def test_a_group_is_private_only_when_its_members_are_this_uid_or_root():
    gr = _shared_group()
    member = sorted(_members(gr.gr_gid) - {0})[0]
    why = outsider(gr.gr_gid, 0)
    assert why is not None and "uid" in why
    others = _members(gr.gr_gid) - {0, member}
    assert (outsider(gr.gr_gid, member) is None) == (not others)
    assert outsider(0, 0) is None or _members(0) - {0}
    unused = next(g for g in range(40000, 60000) if not any(x.gr_gid == g for x in grp.getgrall()))
    assert "no entry in the group database" in outsider(unused, 0)
    empty = [g for g in grp.getgrall() if not g.gr_mem and not any(p.pw_gid == g.gr_gid for p in pwd.getpwall())]
    if empty:  # a group nobody is in is a setgid program's: not private
        assert "setgid" in outsider(empty[0].gr_gid, 0)


# Group-writable directories, as root.

def _shared_dir(tmp_path, mode=0o775):
    """tmp_path/x (root's, mode 775, group one that others are in) with x/sub: the file goes in sub."""
    gr = _shared_group()
    x = tmp_path / "x"
    (x / "sub").mkdir(parents=True)
    os.chown(x, 0, gr.gr_gid)
    x.chmod(mode)
    return gr, x, x / "sub"


def _pub(d, name="k.pub"):
    _, pk = keys.generate_keypair()
    pub = d / name
    pub.write_text(keys.public_key_to_str(pk) + "\n")
    pub.chmod(0o644)
    return pk, pub


@root_only
def test_a_key_below_a_directory_a_shared_group_may_write_is_refused(tmp_path):
    gr, x, sub = _shared_dir(tmp_path)
    pk, pub = _pub(sub)
    with pytest.raises(KeyStoreError) as err:
        keys.load_public_key(str(pub))
    msg = str(err.value)
    assert msg.startswith(f"public key file {str(pub)!r} is below directory {str(x)!r} (mode 775), which others may "
                          f"write: its group {gr.gr_name!r} (gid {gr.gr_gid}) may write it, and user ")
    assert f"run `chmod g-w {x}` (or `chmod +t {x}`)" in msg
    x.chmod(0o1775)  # sticky: a member may no longer rename root's entries
    assert keys.load_public_key(str(pub)) == pk
    x.chmod(0o775)
    os.chown(x, 0, 0)  # root's own group, which only root is in
    if not _members(0) - {0}:
        assert keys.load_public_key(str(pub)) == pk


@root_only
def test_a_private_key_policy_and_authority_key_below_a_shared_group_directory_are_refused(tmp_path):
    kit = make_kit(tmp_path)
    gr, x, sub = _shared_dir(tmp_path)
    _, pub = _pub(sub)
    cfg = kit.config({"c": {"class": "PII"}}, boundaries={"hr": {"authority_keys": [str(pub)]}})
    with pytest.raises((ConfigError, KeyStoreError), match=f"boundaries.hr.authority_keys: .*gid {gr.gr_gid}"):
        QdrantClient(":memory:", guard=cfg)
    key = sub / "guard.key"
    os.link(kit.guard_key_path, key)
    with pytest.raises(KeyStoreError, match=f"private key file .* below directory '{x}' \\(mode 775\\), which others "
                                            f"may write: its group '{gr.gr_name}' \\(gid {gr.gr_gid}\\)"):
        keys.load_private_key(str(key))
    policy = sub / "policy.toml"
    policy.write_text('[collections.pub]\nclass = "PUBLIC"\n')
    policy.chmod(0o644)
    with pytest.raises(ConfigError, match=f"policy file .* below directory '{x}' \\(mode 775\\), which others may write.*"
                                          f"chmod g-w {x}"):
        load_policy(policy)
    x.chmod(0o755)
    keys.load_private_key(str(key))
    load_policy(policy)
    QdrantClient(":memory:", guard=cfg).close()


@root_only
def test_a_budget_store_in_a_shared_group_directory_is_refused_even_sticky(tmp_path):
    gr, x, sub = _shared_dir(tmp_path, 0o1775)
    # In it: a member could plant a -journal beside the database, sticky bit or not.
    with pytest.raises(BudgetStoreError) as err:
        SqliteBudgetStore(str(x / "budget.db"))
    assert str(err.value).startswith(
        f"budget store {str(x / 'budget.db')!r} is in directory {str(x)!r} (mode 1775), which others may create files "
        f"in: its group {gr.gr_name!r} (gid {gr.gr_gid}) may write it, and ")
    assert f"run `chmod g-w {x}`" in str(err.value)
    # Below it, the sticky bit stops the renaming of root's sub; without it, refused.
    SqliteBudgetStore(str(sub / "budget.db")).close()
    x.chmod(0o775)
    with pytest.raises(BudgetStoreError, match=f"below directory '{x}' \\(mode 775\\), which others may write"):
        SqliteBudgetStore(str(sub / "budget.db"))


@root_only
def test_an_audit_log_in_a_shared_group_directory_is_refused(tmp_path):
    sk, _ = keys.generate_keypair()
    gr, x, sub = _shared_dir(tmp_path)
    for log, where in ((x / "audit.jsonl", "in"), (sub / "audit.jsonl", "below")):
        with pytest.raises(AuditError) as err:
            AuditLog(log, signer=ReceiptSigner(sk), checkpoint_every=1)
        assert (f"audit log {str(log)!r} is {where} directory {str(x)!r} (mode 775), which others may write: its "
                f"group {gr.gr_name!r} (gid {gr.gr_gid}) may write it, and ") in str(err.value)
        assert f"run `chmod g-w {x}`" in str(err.value)
    x.chmod(0o755)
    AuditLog(sub / "audit.jsonl", signer=ReceiptSigner(sk), checkpoint_every=1).close()


# POSIX ACLs, as root (set through the xattr the kernel reads them from).

def _set_acl_or_skip(path, raw):
    try:
        os.setxattr(path, "system.posix_acl_access", raw)
    except OSError as exc:
        pytest.skip(f"this file system holds no POSIX ACL ({exc.strerror})")


@root_only
def test_a_directory_acl_entry_letting_another_user_write_is_refused(tmp_path):
    d = tmp_path / "keys"
    d.mkdir(mode=0o755)
    pk, pub = _pub(d)
    _set_acl_or_skip(d, _acl((USER_OBJ, 7, _U), (USER, 7, NOBODY), (GROUP_OBJ, 5, _U), (MASK, 7, _U), (OTHER, 5, _U)))
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o775  # the mask shows as the group's bits
    with pytest.raises(KeyStoreError) as err:
        keys.load_public_key(str(pub))
    assert (f"below directory {str(d)!r} (mode 775), which others may write: its ACL entry user:{NOBODY}:rwx lets "
            f"user {pwd.getpwuid(NOBODY).pw_name!r} (uid {NOBODY}) write it;") in str(err.value)
    assert f"run `setfacl -x u:{NOBODY} {d}`" in str(err.value)
    # The same entry for root, or masked to read, or on a sticky directory: nobody else may replace it.
    for raw, mode in (
            (_acl((USER_OBJ, 7, _U), (USER, 7, 0), (GROUP_OBJ, 5, _U), (MASK, 7, _U), (OTHER, 5, _U)), 0o775),
            (_acl((USER_OBJ, 7, _U), (USER, 7, NOBODY), (GROUP_OBJ, 5, _U), (MASK, 5, _U), (OTHER, 5, _U)), 0o755),
            (_acl((USER_OBJ, 7, _U), (USER, 7, NOBODY), (GROUP_OBJ, 5, _U), (MASK, 7, _U), (OTHER, 5, _U)), 0o1775)):
        os.setxattr(d, "system.posix_acl_access", raw)
        d.chmod(mode)
        assert keys.load_public_key(str(pub)) == pk


@root_only
def test_a_directory_acl_entry_for_a_shared_group_is_refused_and_the_owning_groups_is_masked(tmp_path):
    gr = _shared_group()
    d = tmp_path / "store"
    d.mkdir(mode=0o755)
    _set_acl_or_skip(d, _acl((USER_OBJ, 7, _U), (GROUP_OBJ, 5, _U), (GROUP, 7, gr.gr_gid), (MASK, 7, _U),
                             (OTHER, 5, _U)))
    unsafe = f"its ACL entry group:{gr.gr_gid}:rwx lets group {gr.gr_name!r} (gid {gr.gr_gid}) write it, and "
    with pytest.raises(BudgetStoreError) as err:
        SqliteBudgetStore(str(d / "budget.db"))
    assert unsafe in str(err.value) and f"run `setfacl -x g:{gr.gr_gid} {d}`" in str(err.value)
    # The owning group (root's) writable, the shared group only reading: accepted.
    os.setxattr(d, "system.posix_acl_access", _acl((USER_OBJ, 7, _U), (GROUP_OBJ, 7, _U), (GROUP, 5, gr.gr_gid),
                                                   (MASK, 7, _U), (OTHER, 5, _U)))
    if not _members(0) - {0}:
        SqliteBudgetStore(str(d / "budget.db")).close()
    # The owning group shared and writable through the ACL's mask: refused as the group.
    os.chown(d, 0, gr.gr_gid)
    with pytest.raises(BudgetStoreError, match=f"its group '{gr.gr_name}' \\(gid {gr.gr_gid}\\) may write it through "
                                               "its ACL, and "):
        SqliteBudgetStore(str(d / "budget.db"))


@root_only
def test_a_trust_files_own_acl_entry_is_named_in_its_refusal(tmp_path):
    # The ACL's mask shows as the group's bits, so the mode check refused such files before; now the
    # message also names who the entry lets write.
    _, pub = _pub(tmp_path)
    _set_acl_or_skip(pub, _acl((USER_OBJ, 6, _U), (USER, 6, NOBODY), (GROUP_OBJ, 4, _U), (MASK, 6, _U),
                               (OTHER, 4, _U)))
    with pytest.raises(KeyStoreError) as err:
        keys.load_public_key(str(pub))
    assert str(err.value).startswith(
        f"public key file {str(pub)!r} is writable by other users (mode 664: its ACL entry user:{NOBODY}:rw- lets "
        f"user {pwd.getpwuid(NOBODY).pw_name!r} (uid {NOBODY}) write it): ")
    policy = tmp_path / "policy.toml"
    policy.write_text('[collections.pub]\nclass = "PUBLIC"\n')
    gr = _shared_group()
    os.chown(policy, 0, gr.gr_gid)
    policy.chmod(0o664)
    with pytest.raises(ConfigError, match=f"\\(mode 664: its group '{gr.gr_name}' \\(gid {gr.gr_gid}\\) may write it"):
        load_policy(policy)


@root_only
@pytest.mark.skipif(shutil.which("setfacl") is None, reason="setfacl (package acl) is not installed")
def test_what_setfacl_writes_is_what_the_parser_reads(tmp_path):
    d = tmp_path / "d"
    d.mkdir(mode=0o750)
    gr = _shared_group()
    done = subprocess.run(["setfacl", "-m", f"u:{NOBODY}:rwx,g:{gr.gr_gid}:r-x", str(d)], capture_output=True,
                          text=True)
    if done.returncode:
        pytest.skip(f"setfacl failed here: {done.stderr.strip()}")
    assert parse_acl(os.getxattr(d, "system.posix_acl_access")) == [
        AclEntry(USER_OBJ, 7, None), AclEntry(USER, 7, NOBODY), AclEntry(GROUP_OBJ, 5, None),
        AclEntry(GROUP, 5, gr.gr_gid), AclEntry(MASK, 7, None), AclEntry(OTHER, 0, None)]
    found = replaceable_by_anyone(d / "k.pub")
    assert found is not None and found.directory == str(d) and found.writer.fix == f"setfacl -x u:{NOBODY} {d}"
    subprocess.run(["setfacl", "-x", f"u:{NOBODY}", str(d)], check=True)
    assert replaceable_by_anyone(d / "k.pub") is None


# A non-root guard in its user-private group: umask 002 directories stay accepted.

@root_only
def test_a_user_private_group_directory_is_accepted_for_its_user_and_a_shared_one_is_not():
    pw = _private_user()
    shared = _shared_group(pw.pw_uid)
    base = tempfile.mkdtemp(dir="/tmp")  # not below pytest's root-only 0700 tmp
    keydir = os.path.join(base, "keys")
    key = os.path.join(keydir, "guard.key")

    def make_and_load() -> str:  # the CLI's key generation under umask 002, then the loaders
        from qdrant_guard.cli import main
        os.umask(0o002)
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            main(["keys", "new", "--out", key])
        keys.load_private_key(key)
        keys.load_public_key(key + ".pub")
        return oct(stat.S_IMODE(os.stat(keydir).st_mode))

    def load() -> str:
        try:
            keys.load_public_key(key + ".pub")
        except KeyStoreError as exc:
            return str(exc)
        return "accepted"

    try:
        os.chown(base, pw.pw_uid, pw.pw_gid)
        assert as_user(pw, make_and_load) == "0o775"  # group-writable, in the user's private group
        assert os.stat(keydir).st_gid == pw.pw_gid
        os.chown(keydir, pw.pw_uid, shared.gr_gid)  # as root: the user may not be in it
        said = as_user(pw, load)
        assert said.startswith(f"public key file {key + '.pub'!r} is below directory {keydir!r} (mode 775), which "
                               f"others may write: its group {shared.gr_name!r} (gid {shared.gr_gid}) may write it"), said
        os.chmod(keydir, 0o755)
        assert as_user(pw, load) == "accepted"
    finally:
        shutil.rmtree(base)


def test_the_demo_runs_under_umask_002(tmp_path):
    # Under umask 002 its work directory is group-writable in the user's own group (accepted), and
    # the policy it wrote was too (mode 664, which the guard refuses): the demo stopped at its start.
    from guardkit import run_cli
    if outsider(os.getegid(), os.geteuid()) is not None:
        pytest.skip("this uid's primary group holds others: a directory umask 002 makes is rightly refused")
    old = os.umask(0o002)
    try:
        done = run_cli("demo", "--workdir", str(tmp_path / "demo" / "work"))
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    assert "all expectations hold" in done.stdout
    assert stat.S_IMODE(os.stat(tmp_path / "demo" / "work").st_mode) == 0o775
    assert stat.S_IMODE(os.stat(tmp_path / "demo" / "work" / "policy.toml").st_mode) == 0o644


_DUP_GID_CHILD = r"""
import json, os, sys
from qdrant_guard.dirmodes import replaceable_by_anyone
x = sys.argv[1]
found = replaceable_by_anyone(os.path.join(x, "sub", "k.pub"))
pid = os.fork()
if pid == 0:  # nobody, with the groups login gives it: may it replace what is in x?
    os.initgroups("nobody", 65534); os.setgid(65534); os.setuid(65534)
    try:
        os.rename(os.path.join(x, "sub"), os.path.join(x, "moved"))
        os._exit(0)
    except OSError:
        os._exit(1)
_, status = os.waitpid(pid, 0)
print(json.dumps({"who": found.writer.who if found and found.writer else None,
                  "nobody_renamed": os.waitstatus_to_exitcode(status) == 0}))
"""


@root_only
@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare (util-linux) is not installed")
def test_a_second_group_entry_with_the_same_gid_is_read_too(tmp_path, request):
    # Review 53: `groupadd -o` gives a gid a second name; getgrgid returns the first entry only,
    # so root's group (only root in it) passed while the second entry puts nobody in gid 0. The
    # group file is replaced in a private mount namespace: the machine's own is not touched.
    import json
    if outsider(0, 0) is not None:
        pytest.skip("root's group here has members other than root")
    base = tempfile.mkdtemp(dir="/tmp")  # not below pytest's root-only 0700 tmp: nobody must reach x
    os.chmod(base, 0o755)
    x = Path(base) / "x"
    (x / "sub").mkdir(parents=True)
    os.chown(x, 0, 0)
    x.chmod(0o775)
    request.addfinalizer(lambda: shutil.rmtree(base))
    assert replaceable_by_anyone(x / "sub" / "k.pub") is None  # root's group, only root in it
    group = tmp_path / "group"
    group.write_text(open("/etc/group").read().rstrip("\n") + "\nqgdup53:x:0:nobody\n")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode().strip()}")
    out = subprocess.run(
        ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/group && exec "$1" -c "$2" "$3"',
         str(group), sys.executable, _DUP_GID_CHILD, str(x)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["nobody_renamed"]  # the hazard is real: nobody, in gid 0 by the second entry, moved sub
    assert seen["who"] is not None and "'nobody'" in seen["who"] and "gid 0" in seen["who"]
