"""Mutation pass 40: the survivors of h-rcpt's receipt changes (receipts dated ahead are
``not_yet_valid``; ``receipts.verify()`` given a guarded client) that the tests written with them did
not reach. Real qdrant-client local mode where a collection is read.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from guardkit import create, guard_signer, make_kit, receipted_point
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import GuardRefusal, QdrantClient, keys
from qdrant_guard.errors import GuardArgumentTypeError
from qdrant_guard.noise import privatize
from qdrant_guard.receipts import (
    RECEIPT_KEY,
    ReceiptSigner,
    issue_receipt,
    receipts_for_payload,
    stored_form,
    verify,
    verify_receipt,
)

NOISE = {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-6, "radius": 0.01, "clip_norm": 1.0}
ISSUED_S = 1_800_000_000.0  # a whole number of ms: issued_at / 1000 is this float exactly


def _signed() -> tuple[ReceiptSigner, list[float], dict]:
    signer = ReceiptSigner(keys.generate_keypair()[0])
    v = np.random.default_rng(5).normal(size=(1, 8)).astype(np.float32)
    noised, params = privatize(v / np.linalg.norm(v), **NOISE)
    stored = stored_form(noised[0], distance="Euclid")
    rec = issue_receipt(signer, params=params, vector=stored, collection="pii", point_id=1, issued_at=ISSUED_S)
    return signer, stored.tolist(), rec


def _reason(signer: ReceiptSigner, vec: list[float], rec: dict, **kw) -> str:
    return verify_receipt(rec, vector=vec, collection="pii", point_id=1,
                          trusted_keys={signer.key_id: signer.public_key}, **kw).reason


def test_max_age_s_still_applies_with_the_clock_skew_check_off():
    # The date block runs when either limit is set: max_age_s alone (max_clock_skew_s=None) must
    # still expire an old receipt (a mutant entering the block only without max_age_s let it pass).
    signer, vec, rec = _signed()
    assert _reason(signer, vec, rec, now=ISSUED_S + 3600, max_age_s=60, max_clock_skew_s=None) == "expired"
    assert _reason(signer, vec, rec, now=ISSUED_S + 30, max_age_s=60, max_clock_skew_s=None) == "ok"


def test_a_receipt_exactly_max_age_s_old_is_still_fresh():
    # "older than max_age_s" is refused; exactly that age is not (as the clock-skew bound is inclusive).
    signer, vec, rec = _signed()
    assert _reason(signer, vec, rec, now=ISSUED_S + 60, max_age_s=60) == "ok"
    assert _reason(signer, vec, rec, now=ISSUED_S + 60.5, max_age_s=60) == "expired"


# ------------------------------------------------------------------ verify() through the owner's guarded client

PII = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "noise_on_write": False,
       "intent": {"enabled": False}}


def _owner_over(kit, path: str) -> QdrantClient:
    """The owner boundary's guarded client over ``path``, where "pii" holds point 1 receipted for the
    alias "pii_live" (by the guard's key) and point 2 for "pii" itself."""
    raw = RawClient(path=path)
    create(raw, "pii", distance=models.Distance.EUCLID)
    rng = np.random.default_rng(7)
    raw.upsert("pii", [receipted_point(kit, 1, rng, collection="pii_live"), receipted_point(kit, 2, rng)])
    raw.update_collection_aliases(change_aliases_operations=[models.CreateAliasOperation(
        create_alias=models.CreateAlias(collection_name="pii", alias_name="pii_live"))])
    raw.close()
    return QdrantClient(path=path, guard=kit.config({"pii": PII}), principal=kit.principal("alice", "hr"))


def _trusted(kit) -> dict:
    pk = keys.load_private_key(kit.guard_key_path).public_key()
    return {keys.key_id(pk): pk}


def test_the_owners_client_resolves_aliases_past_the_guard(tmp_path):
    # get_aliases is read past the guard too: a receipt bound to an alias of the collection verifies
    # (a get_aliases returning nothing left "pii" alone: point 1 was collection_mismatch).
    kit = make_kit(tmp_path)
    owner = _owner_over(kit, str(tmp_path / "store"))
    assert {r.point_id: r.reason for r in verify(owner, "pii", trusted_keys=_trusted(kit))} == {1: "ok", 2: "ok"}
    owner.close()


class _CountingLock:
    """The guarded client's own local-mode lock, counting how often it is entered."""

    def __init__(self, lock) -> None:
        self.lock, self.entered = lock, 0

    def __enter__(self):
        self.entered += 1
        return self.lock.__enter__()

    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)


def test_the_reads_past_the_guard_hold_the_clients_local_mode_lock(tmp_path):
    # As the guarded calls do: local mode is not thread-safe, and the guard's other threads share the
    # connection (a mutant that dropped the lock for a client that has one read without it).
    kit = make_kit(tmp_path)
    owner = _owner_over(kit, str(tmp_path / "store"))
    assert owner._local_lock is not None
    owner._local_lock = counting = _CountingLock(owner._local_lock)
    verify(owner, "pii", trusted_keys=_trusted(kit), batch_size=1)
    assert counting.entered >= 3  # get_aliases and two scroll pages of one point each
    owner.close()


@pytest.mark.parametrize("guarded", [False, True])
def test_a_collection_name_that_is_no_str_is_refused_naming_it(tmp_path, guarded):
    kit = make_kit(tmp_path)
    path = str(tmp_path / "store")
    client = _owner_over(kit, path) if guarded else RawClient(path=path)
    if not guarded:
        create(client, "pii")
    with pytest.raises(GuardArgumentTypeError, match="collection_name must be str, not int"):
        verify(client, 5, trusted_keys=_trusted(kit))
    client.close()


# ------------------------------------------------------------------ a guarded write's refusal

def test_a_refused_writers_receipt_names_its_reason_other_than_not_yet_valid(tmp_path):
    # _receipt_refusal returns the check's reason for every reason but not_yet_valid.
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"pii": PII}), principal=kit.principal("alice", "hr"))
    create(owner, "pii", dim=8, distance=models.Distance.EUCLID)
    bob = owner.with_principal(kit.principal("bob", "support"))
    v = np.random.default_rng(9).normal(size=(1, 8)).astype(np.float32)
    noised, params = privatize(v / np.linalg.norm(v), **NOISE)
    stored = stored_form(noised[0], distance="Euclid")
    rec = issue_receipt(guard_signer(kit), params=params, vector=stored, collection="pii", point_id=1,
                        issued_at=time.time())
    forged = receipts_for_payload({"": dict(rec, issued_at=rec["issued_at"] + 1)})
    with pytest.raises(GuardRefusal) as exc:
        bob.upsert("pii", [models.PointStruct(id=1, vector=stored.tolist(), payload={RECEIPT_KEY: forged})])
    assert exc.value.verdict == "INVALID_RECEIPT"
    assert "(point 1: bad_signature" in str(exc.value), str(exc.value)
    owner.close()
