"""A trust file named through ``link/..`` is checked where the kernel finds it.

``os.path.abspath`` drops ``link/..`` by its letters, but the kernel goes up from where the link
points. Mutation pass 29 found the budget store checked at the lexical place; the directory walk
every other trust file goes through (``qdrant_guard.dirmodes``) made the same mistake, so a key,
a policy or an audit log in a directory anyone may write, reached as ``work/link/../x``, was
checked under ``work/`` and accepted. Real files, no mocks.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from guardkit import make_kit

from qdrant_guard import QdrantClient, keys
from qdrant_guard.audit import AuditLog
from qdrant_guard.dirmodes import replaceable_by_anyone
from qdrant_guard.errors import AuditError, ConfigError
from qdrant_guard.keys import KeyStoreError


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """tmp/work/link -> tmp/open/sub; tmp/open is world-writable without the sticky bit, so
    'work/link/../x' is tmp/open/x, in a directory anyone may put a file of their own in."""
    (tmp_path / "work").mkdir(mode=0o755)
    opened = tmp_path / "open"
    (opened / "sub").mkdir(parents=True)
    opened.chmod(0o777)
    (tmp_path / "work" / "link").symlink_to(opened / "sub")
    monkeypatch.chdir(tmp_path)
    return opened, Path("work") / "link" / ".."


def test_the_walk_finds_the_directory_the_kernel_goes_up_to(layout):
    opened, via = layout
    found = replaceable_by_anyone(via / "k.pub")
    assert found is not None and os.path.realpath(found.directory) == str(opened.resolve())
    assert found.owner is None and found.mode == 0o777


def test_a_key_reached_through_link_dotdot_is_refused(layout):
    opened, via = layout
    _, pk = keys.generate_keypair()
    (opened / "k.pub").write_text(keys.public_key_to_str(pk) + "\n")
    (opened / "k.pub").chmod(0o644)
    with pytest.raises(KeyStoreError, match="every user may write"):
        keys.load_public_key(str(opened / "k.pub"))
    with pytest.raises(KeyStoreError, match="every user may write"):
        keys.load_public_key(str(via / "k.pub"))


def test_a_policy_reached_through_link_dotdot_stops_the_client(layout, tmp_path):
    opened, via = layout
    (tmp_path / "kit").mkdir()
    kit = make_kit(tmp_path / "kit")
    policy = opened / "policy.toml"
    policy.write_text(f'signing_key = "{kit.guard_key_path}"\n[collections.pub]\nclass = "PUBLIC"\n')
    policy.chmod(0o644)
    with pytest.raises(ConfigError, match="every user may write|world-writable"):
        QdrantClient(":memory:", guard=str(via / "policy.toml"))


def test_an_audit_log_reached_through_link_dotdot_is_refused(layout):
    _, via = layout
    with pytest.raises(AuditError, match="world-writable|every user may write"):
        AuditLog(via / "audit.jsonl")
