"""Review 52: the directory walk (``qdrant_guard.dirmodes``) attacked.

A directory the walk could not stat was taken as safe (mode 0, owner root). Two ways to reach a
trust file while a directory on its path cannot be stat'ed: a working directory deeper than
PATH_MAX, the file named relatively (every stat of the absolute path fails ENAMETOOLONG, so a
world-writable directory down there was never seen), and a non-root guard given the file through
/proc/self/fd (the directory resolved to is below one it cannot search: EACCES). Both were accepted;
both now raise, naming the directory. Real files, a forked child for the non-root uid.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from qdrant_guard import keys
from qdrant_guard.dirmodes import replaceable_by_anyone

posix_root = pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="needs root to play another uid")


@pytest.fixture
def deep_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A public key in a directory every user may write, more than PATH_MAX below /, as the cwd."""
    monkeypatch.chdir(tmp_path)
    for _ in range(45):  # one step at a time: the whole path is too long for one mkdir
        os.mkdir("d" * 100)
        os.chdir("d" * 100)
    os.chmod(".", 0o777)
    _, pk = keys.generate_keypair()
    Path("k.pub").write_text(keys.public_key_to_str(pk) + "\n")
    Path("k.pub").chmod(0o644)
    assert len(os.getcwd()) > 4096
    return Path(".")


def test_a_directory_too_deep_to_stat_is_not_taken_for_safe(deep_open):
    with pytest.raises(OSError, match="cannot tell who may replace it: directory .*File name too long"):
        replaceable_by_anyone("k.pub")


def test_a_key_named_relatively_in_a_deep_open_directory_is_not_loaded(deep_open):
    # The key loader's own error class (under QdrantGuardError), as for its other refusals.
    with pytest.raises(keys.KeyStoreError, match="public key file 'k.pub'.*cannot be examined"):
        keys.load_public_key("k.pub")


def test_a_policy_named_relatively_in_a_deep_open_directory_stops_the_client(deep_open, tmp_path):
    from qdrant_guard import QdrantClient
    from qdrant_guard.errors import ConfigError

    sk, _ = keys.generate_keypair()
    guard_key = tmp_path / "guard.key"
    guard_key.write_bytes(keys.private_key_to_pem(sk))
    guard_key.chmod(0o600)
    Path("policy.toml").write_text(f'signing_key = "{guard_key}"\n[collections.pub]\nclass = "PUBLIC"\n')
    Path("policy.toml").chmod(0o644)
    with pytest.raises(ConfigError, match="policy file 'policy.toml'.*cannot be examined"):
        QdrantClient(":memory:", guard="policy.toml")


def test_an_audit_log_whose_directory_cannot_be_examined_is_an_audit_error(tmp_path):
    # The walk's failure reaches the caller as AuditError, not a bare OSError. A loop on the
    # resolved way: 'loop' points to itself, so 'loop/..' cannot be examined.
    from qdrant_guard.audit_file_access import _refuse_shared
    from qdrant_guard.errors import AuditError

    log = tmp_path / "audit.jsonl"
    log.write_text("")
    log.chmod(0o600)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    fd = os.open(log, os.O_RDONLY)
    try:
        with pytest.raises(AuditError, match="cannot be examined"):
            _refuse_shared(fd, str(tmp_path / "loop" / ".." / "audit.jsonl"), str(log))
    finally:
        os.close(fd)


@posix_root
def test_a_directory_the_guard_cannot_search_is_not_taken_for_safe(tmp_path):
    """root holds tmp/shut/open/inner open (shut 0700, open 0777, inner 0755); a guard as uid
    65534 names the key through /proc/self/fd: it can read the key, but cannot stat 'open' to see
    that every user may write it. (With the fd on 'open' itself the lexical way already refused.)"""
    tmp_path.chmod(0o755)
    shut = tmp_path / "shut"
    inner = shut / "open" / "inner"
    inner.mkdir(parents=True)
    (shut / "open").chmod(0o777)
    shut.chmod(0o700)
    _, pk = keys.generate_keypair()
    (inner / "k.pub").write_text(keys.public_key_to_str(pk) + "\n")
    (inner / "k.pub").chmod(0o644)
    fd = os.open(inner, os.O_RDONLY | os.O_DIRECTORY)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports one letter and never returns into pytest
        said = "the child failed"
        try:
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            keys.load_public_key(f"/proc/self/fd/{fd}/k.pub")
            said = "accepted"
        except Exception as exc:
            said = f"{type(exc).__name__}: {exc}"
        finally:
            os.write(w, said.encode()[:4000])
            os._exit(0)
    os.close(w)
    os.close(fd)
    said = os.read(r, 4096).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert said.startswith(f"KeyStoreError: public key file '/proc/self/fd/{fd}/k.pub': cannot tell who may replace it") \
        and "directory '" + str(inner) + "'" in said, said
    assert "cannot be examined (Permission denied)" in said, said


def test_legitimate_paths_still_pass(tmp_path, monkeypatch):
    """/tmp (1777), the file's own directory through '//', './', '/..' and a root-owned link in /tmp."""
    assert replaceable_by_anyone("/tmp/k.pub") is None
    d = tmp_path / "own"
    d.mkdir(mode=0o700)
    for name in (f"/{d}//k.pub", f"{d}/./k.pub", f"/..{d}/k.pub"):
        assert replaceable_by_anyone(name) is None, name
    monkeypatch.chdir(d)
    assert replaceable_by_anyone("./k.pub") is None
    link = Path("/tmp") / f"rev52-{os.getpid()}"
    link.symlink_to(d)
    try:
        assert replaceable_by_anyone(link / "k.pub") is None
    finally:
        link.unlink()


def test_a_budget_store_in_a_directory_too_deep_to_stat_is_refused(deep_open):
    from qdrant_guard.budget_file_access import unsafe_store_file

    why = unsafe_store_file("budget.db")
    assert why is not None and "cannot tell who may" in why and "File name too long" in why, why
