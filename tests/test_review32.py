"""Thirty-second review (2026-12-06, h-rev32): h-upperf's upsert fast paths and h-newuser's messages.

* A ``uuid.UUID`` subclass point id whose ``__str__`` lies was normalised by its ``str()``: the
  receipt named text that is no UUID (every such receipt read back ``malformed``), and since
  h-upperf's inline encoding writes the point id into the signed JSON unescaped, a quote in it
  made the signed leaf differ from ``canonical_json`` of the stored body. ``normalize_point_id``
  now reads the id's own 128 bits.
* The expired and revoked credential messages (and the unknown-boundary ones) printed the agent
  id and boundary bare into a shell command and a TOML section name: an id with a space, a quote
  or ``;`` gave a command that splits or runs something else, and a section that nests.

Plus invariants of h-upperf's shortcuts that already held (pinned, they pass on the code before):
each stored receipt is its own dict (no two points, nor the caller, share one), and as_dense's
shortcut returns a new array (the caller's list cannot change it after the checks).
"""
from __future__ import annotations

import shlex
import uuid

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from qdrant_client import models

from qdrant_guard import receipts
from qdrant_guard.boundary import CredentialRejected, issue_credential, verify_credential
from qdrant_guard.canonical import canonical_json
from qdrant_guard.keys import generate_keypair, key_id
from qdrant_guard.receipts import (
    RECEIPT_KEY, ReceiptItem, ReceiptSigner, issue_receipt, issue_receipts_batch, normalize_point_id,
    stored_form_batch, verify_receipt,
)
from qdrant_guard.vectors import VectorSpec, as_dense

from test_perf_write4 import make_params

U = uuid.UUID("8c1a5a2e-6b0c-4a43-9d4e-1f3b2d6c7e90")
OTHER = uuid.UUID("11111111-2222-4333-8444-555555555555")


class LyingUUID(uuid.UUID):
    def __str__(self) -> str:
        return 'x"y'


class OtherUUID(uuid.UUID):
    def __str__(self) -> str:
        return str(OTHER)


class HonestUUID(uuid.UUID):
    pass


def test_normalize_point_id_refuses_a_uuid_whose_str_is_not_its_value() -> None:
    # Before: 'uuid:x"y' and the other point's 'uuid:1111...', accepted.
    for pid in (LyingUUID(str(U)), OtherUUID(str(U))):
        with pytest.raises(ValueError, match="whose str\\(\\) is"):
            normalize_point_id(pid)
    assert normalize_point_id(HonestUUID(str(U))) == normalize_point_id(U) == f"uuid:{U}"


@pytest.mark.parametrize("batch", [True, False])
def test_no_receipt_is_signed_for_a_uuid_whose_str_lies(batch: bool) -> None:
    # Before: signed, naming 'uuid:x"y'; since h-upperf's inline encoding the quote went into the
    # signed leaf unescaped, so the leaf was not canonical_json of the stored body.
    sk, _ = generate_keypair()
    signer = ReceiptSigner(sk)
    vecs = stored_form_batch(np.random.default_rng(3).normal(size=(3, 8)), distance="Cosine")
    pids = [5, LyingUUID(str(U)), U]
    with pytest.raises(ValueError, match="whose str"):
        if batch:
            issue_receipts_batch(signer, [ReceiptItem(make_params(8), v, "c", p, "", None) for v, p in zip(vecs, pids)])
        else:
            issue_receipt(signer, params=make_params(8), vector=vecs[0], collection="c", point_id=pids[1])


def test_batch_inline_encoding_is_canonical_json_for_uuid_ids() -> None:
    sk, pk = generate_keypair()
    vecs = stored_form_batch(np.random.default_rng(4).normal(size=(3, 8)), distance="Cosine")
    items = [ReceiptItem(make_params(8), v, "c", pid, "", None)
             for v, pid in zip(vecs, [HonestUUID(str(U)), 5, str(U).upper()])]
    bodies, encoded = receipts._batch_bodies(ReceiptSigner(sk), items)
    assert encoded == [canonical_json(b) for b in bodies]
    rec = issue_receipts_batch(ReceiptSigner(sk), items)[0]
    assert verify_receipt(rec, vector=vecs[0], collection="c", point_id=str(U), trusted_keys={key_id(pk): pk}).ok


NOW = 1_796_520_000.0
ODD = ["ops bot", "a;touch x", "it's", "$(id)"]


def _rejection(agent: str, boundary: str, *, revoke: bool) -> str:
    sk = Ed25519PrivateKey.generate()
    tok = issue_credential(sk, agent_id=agent, boundary=boundary, ttl_s=3600, now=NOW)
    auth = {boundary: [sk.public_key()]}
    jti = verify_credential(tok, authorities=auth, now=NOW).jti
    with pytest.raises(CredentialRejected) as ei:
        if revoke:
            verify_credential(tok, authorities=auth, revoked_credentials=[jti], now=NOW)
        else:
            verify_credential(tok, authorities=auth, now=NOW + 7200)
    assert tok not in str(ei.value)  # the bearer token is never in a message
    return str(ei.value)


@pytest.mark.parametrize("revoke", [True, False])
@pytest.mark.parametrize("agent", ODD)
def test_the_credential_issue_command_in_a_rejection_is_quoted_for_the_shell(agent: str, revoke: bool) -> None:
    # Before: `... --agent ops bot --boundary hr team` (split into stray arguments, or `;` runs
    # a second command when pasted).
    msg = _rejection(agent, "hr team", revoke=revoke)
    cmd = msg.split("`")[1]
    assert shlex.split(cmd) == ["qdrant-guard", "credential", "issue", "--authority", "AUTHORITY_KEY", "--agent", agent,
                                "--boundary", "hr team"]


def test_a_revoked_credential_names_its_policy_section_as_toml_spells_it() -> None:
    # Before: [boundaries.hr.eu] revoked_credentials (a nested table hr -> eu).
    assert '[boundaries."hr.eu"] revoked_credentials' in _rejection("alice", "hr.eu", revoke=True)
    assert "[boundaries.hr] revoked_credentials" in _rejection("alice", "hr", revoke=True)


# --- invariants that held (pass on the code before too) ---------------------------------------

def test_as_dense_shortcut_returns_a_new_array_the_caller_cannot_change() -> None:
    spec = VectorSpec(name="", size=4, distance=models.Distance.COSINE, multivector=False)
    value = [0.5, 0.25, -1.0, 2.0]
    arr = as_dense(value, spec, where="t")
    value[0] = float("nan")
    value.append(1.0)
    assert arr.tolist() == [0.5, 0.25, -1.0, 2.0] and arr.dtype == np.float64 and arr.shape == (4,)
    for bad, reason in (([1e39, 0.0, 0.0, 0.0], "beyond_float32"), ([float("inf"), 0.0, 0.0, 0.0], "non_finite"),
                        ([0.5, 0.5, 0.5], "wrong_dimension")):
        with pytest.raises(Exception) as ei:
            as_dense(bad, spec, where="t")
        assert getattr(ei.value, "reason", None) == reason


PII = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": False,
       "noise_on_write": True, "text_field": "text", "intent": {"enabled": False}}


def test_stored_receipts_are_distinct_dicts_per_point_and_not_the_callers(tmp_path, monkeypatch) -> None:
    # h-upperf stores the guard's own receipt dicts without receipts_for_payload's copy: no two
    # points (one payload dict given for all) nor the manifest's list may share one.
    from guardkit import create, make_kit, record_sent

    from qdrant_guard import QdrantClient

    kit = make_kit(tmp_path)
    client = QdrantClient(":memory:", guard=kit.config({"pii": PII}), principal=kit.principal("alice", "hr"))
    create(client, "pii", dim=8)
    sent = record_sent(monkeypatch, ("upsert",), with_kwargs=True)
    shared = {"text": "onboarding notes", "meta": {"k": [1]}}
    rng = np.random.default_rng(5)
    pts = [models.PointStruct(id=i, vector=(rng.normal(size=8) / 3).tolist(), payload=shared) for i in range(4)]
    client.upsert("pii", points=pts)
    assert shared == {"text": "onboarding notes", "meta": {"k": [1]}}  # the caller's payload untouched
    stored = [p.payload for p in sent[-1][1]["points"]]
    recs = [pl[RECEIPT_KEY]["vectors"][""] for pl in stored]
    assert len({id(pl) for pl in stored}) == 4 and len({id(pl[RECEIPT_KEY]) for pl in stored}) == 4
    assert len({id(r) for r in recs}) == 4 and len({id(r["batch"]) for r in recs}) == 4
    assert len({id(r["params"]) for r in recs}) == 4 and len({id(r["batch"]["path"]) for r in recs}) == 4
    assert [r["point_id"] for r in recs] == [f"int:{i}" for i in range(4)]


def test_a_guarded_upsert_stores_a_uuid_subclass_id_under_its_value(tmp_path) -> None:
    # Before review 32: stored by local mode under str(id) ('x"y', or another point's UUID) with a
    # receipt naming whatever str() said; then refused; since the write snapshot (sentpoints) the id
    # is taken as the UUID its bits name, which is what REST sends, checked, receipted and stored.
    from guardkit import create, make_kit

    from qdrant_guard import QdrantClient
    from qdrant_guard.receipts import receipts_from_payload

    kit = make_kit(tmp_path)
    client = QdrantClient(":memory:", guard=kit.config({"pii": PII}), principal=kit.principal("alice", "hr"))
    create(client, "pii", dim=8)
    for cls in (OtherUUID, LyingUUID):
        client.upsert("pii", points=[models.PointStruct(id=cls(str(U)), vector=[0.3] * 8, payload={"text": "x"})])
        recs, _ = client.scroll("pii", with_payload=True)
        assert [r.id for r in recs] == [str(U)]
        assert str(U) in repr(receipts_from_payload(recs[0].payload)) and str(OTHER) not in repr(recs[0].payload)
