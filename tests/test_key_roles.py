"""Key roles: a boundary's credential authority key may not also sign or verify for the guard.

Before (h-keyrole, 2026-12-05), only ``receipts.retired_keys`` was checked (h-rev29): the guard's
``signing_key`` could be an authority key (the guard's host, holding its private half, could then
issue that boundary's credentials, and the credential issuer could sign receipts, utility records
and audit checkpoints), and ``receipts.trusted_keys``, a ``receipt_keys`` list or
``audit_trusted_keys`` could list one (the issuer then signs receipts or checkpoints the guard
accepts). And ``audit repair`` / ``audit replay`` could trust checkpoint keys by ``--key`` only.

Real Ed25519 keys, real qdrant-client local mode, real audit logs (tests/guardkit.py and the
rotation kit of tests/test_retired_keys.py).
"""
from __future__ import annotations

import asyncio
import json

import pytest
from test_retired_keys import _cfg, _colls, _old_checkpoint, _policy_file, _write_under_a, rot  # noqa: F401

from qdrant_guard import AsyncQdrantClient, ConfigError, QdrantClient, keys
from qdrant_guard.cli import build_parser, main

ROLES = ["signing_key", "receipts.trusted_keys", "default.receipt_keys", "collections.plain.receipt_keys",
         "audit_trusted_keys"]


def _support(rot):  # noqa: F811
    """The support boundary's authority: its private key file (mode 600), its .pub text, its key id."""
    kit = rot["kit"]
    path = kit.tmp / "support-authority.key"
    if not path.exists():
        path.write_bytes(keys.private_key_to_pem(kit.authority["support"]))
        path.chmod(0o600)
    pub = kit.authority_pub["support"]
    return path, pub, keys.key_id(keys.load_public_key(pub))


def _with_role(rot, role, pub, key_path):  # noqa: F811
    """The rotation kit's config (signing key B, retired A) with ``pub`` (or ``key_path``) in ``role``."""
    kit = rot["kit"]
    colls = _colls(rot)
    extra: dict = {"signing_key": str(rot["b"]), "receipts": {"retired_keys": [str(rot["a_pub"])]}}
    if role == "signing_key":
        extra["signing_key"] = str(key_path)
    elif role == "receipts.trusted_keys":
        extra["receipts"]["trusted_keys"] = [pub]
    elif role == "default.receipt_keys":
        extra["default"] = {"receipt_keys": [pub]}
    elif role == "collections.plain.receipt_keys":
        colls["plain"]["receipt_keys"] = [pub]
    else:
        extra["audit_trusted_keys"] = [pub]
    return kit.config(colls, **extra)


def _assert_names_both_roles(msg, kid, role, boundary="support"):
    assert kid in msg and f"boundaries.{boundary}.authority_keys" in msg, msg
    assert (("the guard's signing_key" in msg) if role == "signing_key" else (f"listed in {role}:" in msg)), msg
    assert "separate keys per role" in msg and "qdrant-guard keys new" in msg, msg


@pytest.mark.parametrize("role", ROLES)
def test_an_authority_key_in_another_role_refuses_the_sync_client(rot, role):  # noqa: F811
    key_path, pub, kid = _support(rot)
    with pytest.raises(ConfigError) as err:
        QdrantClient(":memory:", guard=_with_role(rot, role, pub, key_path),
                     principal=rot["kit"].principal("alice", "hr"))
    _assert_names_both_roles(str(err.value), kid, role)


@pytest.mark.parametrize("role", ROLES)
def test_an_authority_key_in_another_role_refuses_the_async_client(rot, role):  # noqa: F811
    key_path, pub, kid = _support(rot)
    cfg = _with_role(rot, role, pub, key_path)

    async def build():
        c = AsyncQdrantClient(":memory:", guard=cfg, principal=rot["kit"].principal("alice", "hr"))
        await c.close()

    with pytest.raises(ConfigError) as err:
        asyncio.run(build())
    _assert_names_both_roles(str(err.value), kid, role)


@pytest.mark.parametrize("role", ROLES)
def test_a_key_of_its_own_in_each_role_starts(rot, role):  # noqa: F811
    # The neighbour: the same role filled by a key that issues no credentials is accepted.
    sk, pk = keys.generate_keypair()
    own = rot["kit"].tmp / "own.key"
    own.write_bytes(keys.private_key_to_pem(sk))
    own.chmod(0o600)
    QdrantClient(":memory:", guard=_with_role(rot, role, keys.public_key_to_str(pk), own),
                 principal=rot["kit"].principal("alice", "hr")).close()


# -- the offline verifiers that take --policy ---------------------------------------------------

def _policy_with_role(rot, tmp_path, role):  # noqa: F811
    """The verifiers' policy file (signing key B, retired A, collection "scoped") with the support
    authority key in ``role`` ("collections.plain.receipt_keys": a collection other than the one verified)."""
    key_path, pub, kid = _support(rot)
    path = _policy_file(rot, tmp_path)
    text = path.read_text()
    if role == "signing_key":
        text = text.replace(f'signing_key = "{rot["b"]}"', f'signing_key = "{key_path}"')
    elif role == "receipts.trusted_keys":
        text = text.replace("[receipts]\n", f'[receipts]\ntrusted_keys = ["{pub}"]\n')
    elif role == "default.receipt_keys":
        text += f'[default]\nreceipt_keys = ["{pub}"]\n'
    elif role == "collections.plain.receipt_keys":
        text += f'[collections.plain]\nclass = "PII"\nowner = "hr"\nreceipt_keys = ["{pub}"]\n'
    else:
        text = text.replace("[receipts]\n", f'audit_trusted_keys = ["{pub}"]\n[receipts]\n')
    path.write_text(text)
    return path, kid


@pytest.mark.parametrize("role", ROLES)
def test_receipt_verify_with_the_policy_refuses_an_authority_key_in_another_role(rot, tmp_path, capsys, role):  # noqa: F811
    _write_under_a(rot)
    argv = ["receipt", "verify", "--path", str(rot["store"]), "--collection", "scoped", "--policy"]
    assert main(argv + [str(_policy_file(rot, tmp_path))]) == 0  # the clean policy: A's receipts verify
    capsys.readouterr()
    path, kid = _policy_with_role(rot, tmp_path, role)
    assert main(argv + [str(path)]) == 2
    _assert_names_both_roles(capsys.readouterr().err, kid, role)


@pytest.mark.parametrize("role", ROLES)
def test_audit_verify_with_the_policy_refuses_an_authority_key_in_another_role(rot, tmp_path, capsys, role):  # noqa: F811
    log = _old_checkpoint(rot)
    argv = ["audit", "verify", str(log), "--checkpoint-every", "1", "--policy"]
    assert main(argv + [str(_policy_file(rot, tmp_path))]) == 0
    capsys.readouterr()
    path, kid = _policy_with_role(rot, tmp_path, role)
    assert main(argv + [str(path)]) == 2
    captured = capsys.readouterr()
    assert "OK" not in captured.out, captured.out
    _assert_names_both_roles(captured.err, kid, role)


# -- audit repair / audit replay --trust-policy -------------------------------------------------

def test_repair_and_replay_offer_trust_policy_beside_their_own_options():
    parser = build_parser()
    repair = parser.parse_args(["audit", "repair", "LOG", "--trust-policy", "P.toml"])
    replay = parser.parse_args(["audit", "replay", "LOG", "--policy", "NEW.toml", "--trust-policy", "OLD.toml"])
    assert repair.trust_policy == "P.toml"
    assert (replay.policy, replay.trust_policy) == ("NEW.toml", "OLD.toml")  # --policy keeps its meaning


def test_replay_trusts_the_policys_retired_key_with_trust_policy(rot, tmp_path, capsys):  # noqa: F811
    log = _old_checkpoint(rot)  # a checkpoint signed by A, retired in the policy
    policy = _policy_file(rot, tmp_path)
    base = ["audit", "replay", str(log), "--policy", str(policy), "--checkpoint-every", "1"]
    assert main(base + ["--trust-policy", str(policy)]) == 0
    assert "1 signed checkpoint(s) verified" in capsys.readouterr().out
    # A policy that does not trust A (no retired_keys): its checkpoint does not verify, nothing is replayed.
    assert main(base + ["--trust-policy", str(_policy_file(rot, tmp_path, retired=False))]) == 1
    out = capsys.readouterr().out
    assert "NOT REPLAYED" in out and "bad_checkpoint" in out, out


def test_repair_keeps_the_retired_keys_checkpoint_with_trust_policy(rot, tmp_path, capsys):  # noqa: F811
    log = _old_checkpoint(rot)
    policy = _policy_file(rot, tmp_path)
    with open(log, "ab") as fh:
        fh.write(b'{"hash": "torn')  # a writer killed mid-append
    torn, other = log.read_bytes(), tmp_path / "other.jsonl"
    argv = ["audit", "repair", str(log), "--trust-policy", str(policy), "--checkpoint-every", "1",
            "--signing-key", str(rot["b"])]
    assert main(argv) == 0, capsys.readouterr()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    # The checkpoint A signed is kept (only the torn line was cut), then the repair entry signed by B.
    assert [x["ckpt"]["kid"] for x in lines if "ckpt" in x][-2:] == [rot["a_kid"], rot["b_kid"]]
    capsys.readouterr()
    assert main(["audit", "verify", str(log), "--checkpoint-every", "1", "--policy", str(policy)]) == 0
    # Trusting only the current key B (no retired_keys), repair cuts from A's checkpoint on.
    other.write_bytes(torn)
    before = [json.loads(x) for x in other.read_text().splitlines()[:-1]]
    assert main(["audit", "repair", str(other), "--trust-policy", str(_policy_file(rot, tmp_path, retired=False)),
                 "--checkpoint-every", "1", "--signing-key", str(rot["b"])]) == 0
    after = [json.loads(x) for x in other.read_text().splitlines()]
    assert rot["a_kid"] in {x.get("ckpt", {}).get("kid") for x in before}
    assert rot["a_kid"] not in {x.get("ckpt", {}).get("kid") for x in after} and len(after) <= len(before), after


def _bad_trust_policies(rot, tmp_path):  # noqa: F811
    """(policy file, needles of the error) for each refusal `audit verify --policy` makes."""
    role_path, kid = _policy_with_role(rot, tmp_path, "audit_trusted_keys")
    role_path = role_path.rename(tmp_path / "role.toml")
    revoked = _policy_file(rot, tmp_path, retired=False).rename(tmp_path / "revoked.toml")
    revoked.write_text(revoked.read_text().replace(
        '[boundaries.', f'audit_trusted_keys = ["{rot["a_pub"]}"]\n[receipts]\nrevoked_keys = ["{rot["a_kid"]}"]\n'
                        '[boundaries.', 1))
    return [(role_path, [kid, "boundaries.support.authority_keys", "listed in audit_trusted_keys",
                         "separate keys per role"]),
            (revoked, ["--trust-policy", rot["a_kid"], "audit_trusted_keys", "revoked_keys revokes"])]


@pytest.mark.parametrize("which", [0, 1], ids=["authority-in-audit_trusted_keys", "revoked-audit-key"])
@pytest.mark.parametrize("cmd", ["repair", "replay"])
def test_trust_policy_refuses_what_audit_verify_policy_refuses(rot, tmp_path, capsys, which, cmd):  # noqa: F811
    log = _old_checkpoint(rot)
    with open(log, "ab") as fh:
        fh.write(b'{"hash": "torn')
    before = log.read_bytes()
    path, needles = _bad_trust_policies(rot, tmp_path)[which]
    argv = (["audit", "repair", str(log), "--signing-key", str(rot["b"])] if cmd == "repair" else
            ["audit", "replay", str(log), "--policy", str(_policy_file(rot, tmp_path)), "--verified-prefix"])
    assert main(argv + ["--checkpoint-every", "1", "--trust-policy", str(path)]) == 2
    captured = capsys.readouterr()
    assert all(n in captured.err for n in needles), captured.err
    assert log.read_bytes() == before and "repaired" not in captured.out  # nothing changed, nothing replayed
    # The same policy under `audit verify --policy` is refused alike.
    assert main(["audit", "verify", str(log), "--checkpoint-every", "1", "--policy", str(path)]) == 2
    err = capsys.readouterr().err
    assert all(n.replace("--trust-policy", "--policy") in err for n in needles), err



@pytest.mark.parametrize("role", ["signing_key", "receipts.trusted_keys", "audit_trusted_keys"])
def test_credential_issue_with_the_policy_refuses_an_authority_key_in_another_role(tmp_path, capsys, role):
    # Keys made by `qdrant-guard keys new`; the guard would not start with such a policy, so the
    # credential would be accepted nowhere.
    for name in ("hr", "support", "guard"):
        assert main(["keys", "new", "--out", str(tmp_path / f"{name}.key")]) == 0
    capsys.readouterr()
    second = {"signing_key": 'signing_key = "hr.key"\n',
              "receipts.trusted_keys": 'signing_key = "guard.key"\n[receipts]\ntrusted_keys = ["hr.key.pub"]\n',
              "audit_trusted_keys": 'signing_key = "guard.key"\naudit_log = "audit.jsonl"\n'
                                    'audit_trusted_keys = ["hr.key.pub"]\n'}[role]
    policy = tmp_path / "policy.toml"
    policy.write_text(second + '[boundaries.hr]\nauthority_keys = ["hr.key.pub"]\n'
                      '[boundaries.support]\nauthority_keys = ["support.key.pub"]\n')
    argv = ["credential", "issue", "--agent", "a1", "--boundary", "hr", "--authority", str(tmp_path / "hr.key"),
            "--policy", str(policy)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "", captured.out  # no token
    kid = keys.key_id(keys.load_public_key(tmp_path / "hr.key.pub"))
    _assert_names_both_roles(captured.err, kid, role, boundary="hr")
    assert "would not start" in captured.err
    # The same boundary's credential from a policy giving the key one role is issued.
    policy.write_text('signing_key = "guard.key"\n[boundaries.hr]\nauthority_keys = ["hr.key.pub"]\n'
                      '[boundaries.support]\nauthority_keys = ["support.key.pub"]\n')
    assert main(argv) == 0 and capsys.readouterr().out.startswith("qgc1.")
