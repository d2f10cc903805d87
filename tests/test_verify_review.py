"""receipts.verify and `qdrant-guard receipt verify` against the collection's policy: a PUBLIC
collection's vectors need no receipt (the guard stores them as given), so they are not failures;
a receipt that is there is still verified. Real local-mode Qdrant throughout."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from qdrant_client import QdrantClient as RawClient
from qdrant_client import models

from guardkit import DIM, make_kit, unit
from qdrant_guard import ConfigError, QdrantClient, keys, noise
from qdrant_guard.cli import main as cli_main
from qdrant_guard.policy import config_from_dict
from qdrant_guard.receipts import (
    REASONS,
    RECEIPT_KEY,
    ReceiptSigner,
    issue_receipt,
    receipts_for_payload,
    stored_form,
    verify,
)

KEY = bytes(range(32))
RECEIPT_DOC = Path(__file__).resolve().parent.parent / "docs" / "receipt-format.md"


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture(scope="module")
def signer() -> ReceiptSigner:
    return ReceiptSigner(Ed25519PrivateKey.generate())


def _receipted(signer: ReceiptSigner, collection: str, pid: int, seed: int, *, for_pid: int | None = None):
    """(stored vector, payload) of a release of a random unit vector with a receipt signed for
    ``for_pid`` (default ``pid``)."""
    x = np.asarray(unit(np.random.default_rng(seed)), np.float32)[None, :]
    out, params = noise.privatize(x, key=KEY, mechanism="gaussian", epsilon=1.0, radius=0.01,
                                  delta=1e-6, clip_norm=1.0)
    vec = stored_form(out[0], distance="Cosine")
    rec = issue_receipt(signer, params=params, vector=vec, collection=collection,
                        point_id=pid if for_pid is None else for_pid)
    return vec.tolist(), {RECEIPT_KEY: receipts_for_payload({"": rec})}


def _public_store(kit, signer, *, bad: bool):
    """A PUBLIC collection "pub" on disk: points 1 and 2 written through the guard (stored as
    given, unreceipted), point 3 with a valid receipt, and with ``bad`` point 4 carrying a receipt
    signed for point 3. Returns (raw client on the store, the config)."""
    cfg = kit.config({"pub": {"class": "PUBLIC"}})
    store = str(kit.tmp / "store")
    guarded = QdrantClient(path=store, guard=cfg)
    guarded.create_collection("pub", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    rng = np.random.default_rng(0)
    guarded.upsert("pub", [models.PointStruct(id=i, vector=unit(rng)) for i in (1, 2)])
    guarded.close()
    raw = RawClient(path=store)
    points = []
    vec, payload = _receipted(signer, "pub", 3, 3)
    points.append(models.PointStruct(id=3, vector=vec, payload=payload))
    if bad:
        vec, payload = _receipted(signer, "pub", 4, 4, for_pid=3)
        points.append(models.PointStruct(id=4, vector=vec, payload=payload))
    raw.upsert("pub", points)
    return raw, cfg


def test_the_guard_stores_public_vectors_unreceipted(kit, signer):
    # The premise: nothing the guard writes to a PUBLIC collection has a receipt.
    raw, _ = _public_store(kit, signer, bad=False)
    (p,) = raw.retrieve("pub", [1], with_payload=True)
    assert not (p.payload or {}).get(RECEIPT_KEY)


def test_public_collection_vectors_without_receipts_are_not_failures(kit, signer):
    # Before: verify had no notion of the class, so points 1 and 2 were missing_receipt failures
    # (every point of a PUBLIC collection the guard wrote) and the report was useless.
    raw, cfg = _public_store(kit, signer, bad=True)
    trusted = {signer.key_id: signer.public_key}
    got = {r.point_id: r for r in verify(raw, "pub", trusted_keys=trusted, policy=cfg)}
    assert {k: r.reason for k, r in got.items()} == {1: "not_required", 2: "not_required", 3: "ok",
                                                       4: "point_mismatch"}
    assert [got[k].ok for k in (1, 2, 3, 4)] == [True, True, True, False]
    # No receipt was verified on 1 and 2: the check itself says so.
    assert not got[1].check.ok and "PUBLIC" in got[1].check.detail
    # The CollectionPolicy works as the GuardConfig does.
    again = verify(raw, "pub", trusted_keys=trusted, policy=cfg.policy_for("pub"))
    assert [r.reason for r in again] == [got[k].reason for k in (1, 2, 3, 4)]
    assert "not_required" in REASONS


def test_without_a_policy_every_vector_still_needs_a_receipt(kit, signer):
    raw, _ = _public_store(kit, signer, bad=False)
    reports = verify(raw, "pub", trusted_keys={signer.key_id: signer.public_key})
    assert [r.reason for r in reports] == ["missing_receipt", "missing_receipt", "ok"]


def test_sensitive_classes_still_need_receipts_under_a_policy(kit):
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "raw_in_boundary": True}})
    store = str(kit.tmp / "store")
    owner = QdrantClient(path=store, guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)))])  # raw in boundary
    trusted = dict(owner.guard.trusted_receipt_keys)
    owner.close()
    (r,) = verify(RawClient(path=store), "pii", trusted_keys=trusted, policy=cfg)
    assert (r.reason, r.ok) == ("missing_receipt", False)


def test_unlisted_collections_follow_the_policys_unlisted_rule(kit, signer):
    raw, _ = _public_store(kit, signer, bad=False)
    trusted = {signer.key_id: signer.public_key}
    public = config_from_dict({"unlisted": "public"})
    assert [r.reason for r in verify(raw, "pub", trusted_keys=trusted, policy=public)] == [
        "not_required", "not_required", "ok"]
    strict = config_from_dict({"unlisted": "strict"})
    assert [r.reason for r in verify(raw, "pub", trusted_keys=trusted, policy=strict)] == [
        "missing_receipt", "missing_receipt", "ok"]
    with pytest.raises(ConfigError, match="not listed"):
        verify(raw, "pub", trusted_keys=trusted, policy=config_from_dict({"unlisted": "refuse"}))
    with pytest.raises(TypeError, match="GuardConfig.*CollectionPolicy"):
        verify(raw, "pub", trusted_keys=trusted, policy={"class": "PUBLIC"})


def test_sparse_and_multivectors_of_a_public_collection_need_no_receipt(signer):
    raw = RawClient(":memory:")
    raw.create_collection("pub", vectors_config={}, sparse_vectors_config={"s": models.SparseVectorParams()})
    raw.upsert("pub", [models.PointStruct(id=1, vector={"s": models.SparseVector(indices=[2], values=[0.7])})])
    cfg = config_from_dict({"collections": {"pub": {"class": "PUBLIC"}}})
    (r,) = verify(raw, "pub", trusted_keys={signer.key_id: signer.public_key}, policy=cfg)
    assert (r.vector_name, r.reason, r.ok) == ("s", "not_required", True)


# ------------------------------------------------------------------ the CLI
def _policy_file(kit, signer) -> str:
    path = kit.tmp / "policy.toml"
    path.write_text(textwrap.dedent(f"""\
        [receipts]
        trusted_keys = ["{keys.public_key_to_str(signer.public_key)}"]

        [collections.pub]
        class = "PUBLIC"
        """))
    return str(path)


def _cli(capsys, argv):
    rc = cli_main(argv)
    return rc, capsys.readouterr().out


def test_cli_on_a_public_collection_passes_and_says_what_it_checked(kit, signer, capsys):
    # Before: exit 1 with a missing_receipt line for every point the guard had written.
    raw, _ = _public_store(kit, signer, bad=False)
    raw.close()
    base = ["receipt", "verify", "--path", str(kit.tmp / "store"), "--collection", "pub"]
    rc, out = _cli(capsys, base + ["--policy", _policy_file(kit, signer)])
    assert rc == 0, out
    (summary,) = out.splitlines()
    assert summary.startswith("1/1 receipted vectors verify in 'pub'")
    assert "class PUBLIC" in summary and "need no receipt" in summary and "2 vector(s) without one" in summary
    # --verbose lists the unchecked vectors as ok, with their reason.
    rc, out = _cli(capsys, base + ["--policy", _policy_file(kit, signer), "--verbose"])
    lines = [json.loads(x) for x in out.splitlines()[:-1]]
    assert rc == 0 and [(x["id"], x["reason"], x["ok"]) for x in lines] == [
        ("1", "not_required", True), ("2", "not_required", True), ("3", "ok", True)]
    # Without --policy the class is unknown: every vector needs a receipt, and the summary says so.
    rc, out = _cli(capsys, base + ["--trusted-key", keys.public_key_to_str(signer.public_key)])
    assert rc == 1 and out.splitlines()[-1].startswith("1/3 receipted vectors verify")
    assert "no --policy" in out.splitlines()[-1]


def test_cli_on_a_public_collection_still_reports_a_bad_receipt(kit, signer, capsys):
    raw, _ = _public_store(kit, signer, bad=True)
    raw.close()
    rc, out = _cli(capsys, ["receipt", "verify", "--path", str(kit.tmp / "store"), "--collection", "pub",
                            "--policy", _policy_file(kit, signer)])
    lines = out.splitlines()
    assert rc == 1
    (bad,) = map(json.loads, lines[:-1])
    assert (bad["id"], bad["reason"], bad["ok"]) == ("4", "point_mismatch", False)
    assert lines[-1].startswith("1/2 receipted vectors verify in 'pub'")


def test_cli_policy_not_listing_the_collection_is_an_error(kit, signer, capsys):
    raw, _ = _public_store(kit, signer, bad=False)
    raw.close()
    policy = kit.tmp / "refuse.toml"
    policy.write_text(f'unlisted = "refuse"\n[receipts]\ntrusted_keys = ["{keys.public_key_to_str(signer.public_key)}"]\n')
    rc = cli_main(["receipt", "verify", "--path", str(kit.tmp / "store"), "--collection", "pub",
                   "--policy", str(policy)])
    err = capsys.readouterr().err
    assert rc == 2 and "not listed" in err and "[collections.pub]" in err


# ------------------------------------------------------------------ review of the verification paths
def test_an_id_named_twice_is_reported_once(signer):
    # Before: one report per time the id was named (Qdrant returns the point once per mention),
    # so a point counted twice in the CLI's and a caller's totals; the docs promise one per point.
    raw = RawClient(":memory:")
    raw.create_collection("pub", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    vec, payload = _receipted(signer, "pub", 1, 1)
    raw.upsert("pub", [models.PointStruct(id=1, vector=vec, payload=payload)])
    trusted = {signer.key_id: signer.public_key}
    uid = "5c56c793-69f3-4fbf-87e6-c4bf54c28c26"
    got = verify(raw, "pub", [1, 1, uid, uid.upper(), 1], trusted_keys=trusted, batch_size=2)
    assert [(r.point_id, r.reason) for r in got] == [(uid, "missing_point"), (1, "ok")]


def test_a_receipt_lets_its_holder_confirm_a_guess_of_the_stored_vector(signer):
    # docs/receipt-format.md said the salt stops a receipt exported without its vector from
    # confirming a guessed vector; the salt is in the receipt, so it does not (doc corrected).
    from qdrant_guard.receipt_format import _unb64
    from qdrant_guard.receipts import vector_commitment

    vec, payload = _receipted(signer, "pub", 1, 1)
    rec = payload[RECEIPT_KEY]["vectors"][""]
    salt = _unb64(rec["salt"])
    assert vector_commitment(np.asarray(vec) + 2.0 ** -23, salt) == rec["commitment"]
    assert vector_commitment(unit(np.random.default_rng(1)), salt) != rec["commitment"]  # the clean one
    text = " ".join(RECEIPT_DOC.read_text().split())
    assert "keeps a receipt exported without its vector from confirming" not in text
    assert "does not stop whoever holds a receipt from testing a guessed vector" in text


def test_a_replaced_vector_and_its_receipt_written_back_verify_again(signer):
    # A limit the docs now state: a receipt binds a place, not the latest write there.
    raw = RawClient(":memory:")
    raw.create_collection("pub", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    old_vec, old_payload = _receipted(signer, "pub", 1, 1)
    old = models.PointStruct(id=1, vector=old_vec, payload=old_payload)
    new_vec, new_payload = _receipted(signer, "pub", 1, 2)
    raw.upsert("pub", [old])
    raw.upsert("pub", [models.PointStruct(id=1, vector=new_vec, payload=new_payload)])
    trusted = {signer.key_id: signer.public_key}
    assert [r.reason for r in verify(raw, "pub", trusted_keys=trusted)] == ["ok"]
    raw.upsert("pub", [old])
    assert [r.reason for r in verify(raw, "pub", trusted_keys=trusted)] == ["ok"]
    text = " ".join(RECEIPT_DOC.read_text().split())
    assert "does not prove that the vector is the latest one written there" in text


def test_a_vector_written_through_an_alias_verifies_under_the_collection_and_the_alias(kit):
    # Before: the guard binds such a vector's receipt to the alias's name, so verify reported it
    # as collection_mismatch under the collection's name (and the others under the alias's).
    cfg = kit.config({"c": {"class": "PII", "owner": "hr"}, "cur": {"class": "PII", "owner": "hr"},
                      "other": {"class": "PII", "owner": "hr"}})
    store = str(kit.tmp / "store")
    owner = QdrantClient(path=store, guard=cfg, principal=kit.principal("alice", "hr"))
    for name in ("c", "other"):
        owner.create_collection(name, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    owner.update_collection_aliases(change_aliases_operations=[models.CreateAliasOperation(
        create_alias=models.CreateAlias(collection_name="c", alias_name="cur"))])
    rng = np.random.default_rng(0)
    owner.upsert("c", [models.PointStruct(id=1, vector=unit(rng))])
    owner.upsert("cur", [models.PointStruct(id=2, vector=unit(rng))])
    owner.upsert("other", [models.PointStruct(id=3, vector=unit(rng))])
    trusted = dict(owner.guard.trusted_receipt_keys)
    owner.close()
    raw = RawClient(path=store)
    for name in ("c", "cur"):
        assert [(r.point_id, r.reason) for r in verify(raw, name, trusted_keys=trusted)] == [(1, "ok"), (2, "ok")]
    # A receipt bound to a name that does not denote the collection still fails.
    (p3,) = raw.retrieve("other", [3], with_payload=True, with_vectors=True)
    raw.upsert("c", [models.PointStruct(id=3, vector=p3.vector, payload=p3.payload)])
    got = {r.point_id: r.reason for r in verify(raw, "c", trusted_keys=trusted)}
    assert got == {1: "ok", 2: "ok", 3: "collection_mismatch"}
    # Once the alias is gone, so is the vector's cover.
    raw.update_collection_aliases(change_aliases_operations=[models.DeleteAliasOperation(
        delete_alias=models.DeleteAlias(alias_name="cur"))])
    assert {r.point_id: r.reason for r in verify(raw, "c", trusted_keys=trusted)}[2] == "collection_mismatch"


def test_cli_summary_names_raw_in_boundary_as_the_cause_of_missing_receipts(kit, capsys):
    cfg_text = textwrap.dedent(f"""\
        [boundaries.hr]
        authority_keys = ["{kit.authority_pub['hr']}"]

        [collections.pii]
        class = "PII"
        owner = "hr"
        raw_in_boundary = true
        """)
    policy = kit.tmp / "raw.toml"
    policy.write_text(cfg_text)
    store = str(kit.tmp / "store")
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "raw_in_boundary": True}})
    owner = QdrantClient(path=store, guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)))])
    pub = keys.public_key_to_str(owner.guard.signer.public_key)
    owner.close()
    rc = cli_main(["receipt", "verify", "--path", store, "--collection", "pii", "--policy", str(policy),
                   "--trusted-key", pub])
    last = capsys.readouterr().out.splitlines()[-1]
    assert rc == 1 and last.startswith("0/1 receipted vectors verify in 'pii' (class PII in")
    assert "raw_in_boundary is on" in last


def _noised_store(kit, tmp: Path) -> tuple[str, Path]:
    """A store with one guard-noised vector in PII collection 'pii', and a policy file naming the
    kit's signing key (the receipt's signer) and no trusted keys."""
    store = str(tmp / "store")
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True}})
    owner = QdrantClient(path=store, guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)))])
    owner.close()
    policy = tmp / "sig.toml"
    policy.write_text(textwrap.dedent(f"""\
        signing_key = "{kit.guard_key_path}"
        [boundaries.hr]
        authority_keys = ["{kit.authority_pub['hr']}"]
        [collections.pii]
        class = "PII"
        owner = "hr"
        """))
    return store, policy


def test_cli_policy_reads_the_signing_keys_pub_file_so_an_auditor_needs_no_private_key(kit, capsys):
    store, policy = _noised_store(kit, kit.tmp)
    argv = ["receipt", "verify", "--path", store, "--collection", "pii", "--policy", str(policy)]
    sk = keys.load_private_key(kit.guard_key_path)
    pub = Path(str(kit.guard_key_path) + ".pub")
    pub.write_text(keys.public_key_to_str(sk.public_key()) + "\n")
    assert cli_main(argv) == 0
    # An auditor's copy: the .pub beside a private key it cannot read (here: absent) is enough.
    pem = kit.guard_key_path.read_bytes()
    kit.guard_key_path.unlink()
    try:
        assert cli_main(argv) == 0
    finally:
        kit.guard_key_path.write_bytes(pem)
        kit.guard_key_path.chmod(0o600)
    # A .pub that is not the private key's public key is an error, not a silent choice.
    pub.write_text(keys.public_key_to_str(Ed25519PrivateKey.generate().public_key()) + "\n")
    capsys.readouterr()
    assert cli_main(argv) == 2
    assert "not the public key of" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [-1, "not-a-uuid", 1.5])
def test_verify_names_an_id_that_is_no_point_id(bad):
    raw = RawClient(":memory:")
    raw.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    key = Ed25519PrivateKey.generate().public_key()
    with pytest.raises(ValueError, match=r"verify\(ids=\.\.\.\): .* is not a Qdrant point id"):
        verify(raw, "c", ids=[1, bad], trusted_keys={keys.key_id(key): key})


def test_verify_works_for_a_client_that_may_not_list_aliases(monkeypatch):
    # A server API key scoped to one collection can be refused get_aliases; verify then checks
    # against the collection's own name instead of failing whole.
    raw = RawClient(":memory:")
    raw.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    raw.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)))])

    def refused(*args, **kwargs):
        raise PermissionError("403: listing aliases is not allowed for this key")

    monkeypatch.setattr(raw, "get_aliases", refused)
    key = Ed25519PrivateKey.generate().public_key()
    (report,) = verify(raw, "c", trusted_keys={keys.key_id(key): key})
    assert report.reason == "missing_receipt"
