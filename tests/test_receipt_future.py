"""Receipts dated in the future: ``issued_at`` more than ``max_clock_skew_s`` (default 300 s) after
the verifier's clock is ``not_yet_valid``, with or without ``max_age_s``.

Before, ``verify_receipt(max_age_s=None)``, ``verify()`` and a guarded write under the default
policy (``receipts.max_age_s`` unset) accepted a receipt dated any time ahead: it never ages out, and
it shows a signer whose clock is wrong or lies. Real qdrant-client local mode throughout.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
from guardkit import create, guard_signer, make_kit, run_cli, unit
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import GuardRefusal, QdrantClient, keys
from qdrant_guard.errors import ConfigError, GuardArgumentTypeError, GuardArgumentValueError
from qdrant_guard.noise import privatize
from qdrant_guard.policy import GuardConfig, load_policy
from qdrant_guard.receipts import (
    ISSUED_AT_LEEWAY_S,
    RECEIPT_KEY,
    REASONS,
    ReceiptSigner,
    issue_receipt,
    receipts_for_payload,
    stored_form,
    verify,
    verify_receipt,
)

NOISE = {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-6, "radius": 0.01, "clip_norm": 1.0}
HOUR = 3600.0


def _receipted(signer: ReceiptSigner, issued_at: float, *, collection: str = "pii", pid: int = 1,
               seed: int = 5) -> tuple[list[float], dict]:
    """A noised unit vector in its Euclid stored form and its receipt for point ``pid``, issued at ``issued_at``."""
    noised, params = privatize(np.asarray([unit(np.random.default_rng(seed))], dtype=np.float32), **NOISE)
    stored = stored_form(noised[0], distance="Euclid")
    return stored.tolist(), issue_receipt(signer, params=params, vector=stored, collection=collection,
                                          point_id=pid, issued_at=issued_at)


@pytest.fixture(scope="module")
def signer() -> ReceiptSigner:
    return ReceiptSigner(keys.generate_keypair()[0])


def _check(signer: ReceiptSigner, vec: list[float], rec: dict, **kw) -> object:
    return verify_receipt(rec, vector=vec, collection="pii", point_id=1,
                          trusted_keys={signer.key_id: signer.public_key}, **kw)


# ------------------------------------------------------------------ verify_receipt

def test_a_receipt_dated_an_hour_ahead_is_not_yet_valid_without_max_age(signer):
    vec, rec = _receipted(signer, time.time() + HOUR)
    res = _check(signer, vec, rec)  # the real clock, no max_age_s: before, "ok"
    assert not res.ok and res.reason == "not_yet_valid"
    assert res.key_id == signer.key_id and res.params is None
    # The detail names the receipt's issued_at, how far ahead, the tolerance and the keyword to change.
    assert str(rec["issued_at"]) in res.detail
    assert "300 s" in res.detail and "max_clock_skew_s" in res.detail and "future" in res.detail
    assert "not_yet_valid" in REASONS and ISSUED_AT_LEEWAY_S == 300


def test_the_tolerance_is_inclusive_and_set_by_max_clock_skew_s(signer):
    vec, rec = _receipted(signer, 1_800_000_000.0)
    issued = rec["issued_at"] / 1000
    assert _check(signer, vec, rec, now=issued - 300).ok
    assert _check(signer, vec, rec, now=issued - 300.5).reason == "not_yet_valid"
    assert _check(signer, vec, rec, now=issued - 300.5, max_age_s=HOUR).reason == "not_yet_valid"
    assert _check(signer, vec, rec, now=issued, max_clock_skew_s=0).ok
    assert _check(signer, vec, rec, now=issued - 0.001, max_clock_skew_s=0).reason == "not_yet_valid"
    assert _check(signer, vec, rec, now=issued - 3000, max_clock_skew_s=HOUR).ok
    assert _check(signer, vec, rec, now=issued - 10 ** 9, max_clock_skew_s=math.inf).ok
    # None turns the check off, also under max_age_s (a receipt dated ahead is then fresh).
    assert _check(signer, vec, rec, now=issued - 10 ** 9, max_clock_skew_s=None).ok
    assert _check(signer, vec, rec, now=issued - 10 ** 9, max_clock_skew_s=None, max_age_s=60).ok
    # Checked after the signature: a forged receipt dated ahead is bad_signature, as before.
    assert _check(signer, vec, dict(rec, issued_at=rec["issued_at"] + 1), now=issued - HOUR).reason == "bad_signature"
    # Past dates are max_age_s's business alone.
    assert _check(signer, vec, rec, now=issued + 10 ** 9).ok


@pytest.mark.parametrize("value, error, words", [
    (-1, GuardArgumentValueError, ">= 0"),
    (math.nan, GuardArgumentValueError, "got nan"),
    ("300", GuardArgumentTypeError, "not str"),
    (True, GuardArgumentTypeError, "not bool"),
])
def test_a_bad_max_clock_skew_s_is_an_argument_error_naming_it(signer, value, error, words):
    vec, rec = _receipted(signer, time.time())
    with pytest.raises(error, match="max_clock_skew_s") as exc:
        _check(signer, vec, rec, max_clock_skew_s=value)
    assert words in str(exc.value)
    raw = RawClient(":memory:")
    create(raw, "pii")
    with pytest.raises(error, match="max_clock_skew_s"):  # verify() checks it before reading
        verify(raw, "pii", trusted_keys={}, max_clock_skew_s=value)
    raw.close()


# ------------------------------------------------------------------ verify() over a collection

def test_verify_reports_a_stored_receipt_dated_ahead(signer):
    raw = RawClient(":memory:")
    create(raw, "pii", distance=models.Distance.EUCLID)
    vec, ahead = _receipted(signer, time.time() + HOUR, pid=1)
    vec2, fresh = _receipted(signer, time.time(), pid=2, seed=6)
    raw.upsert("pii", [models.PointStruct(id=1, vector=vec, payload={RECEIPT_KEY: receipts_for_payload({"": ahead})}),
                       models.PointStruct(id=2, vector=vec2, payload={RECEIPT_KEY: receipts_for_payload({"": fresh})})])
    trusted = {signer.key_id: signer.public_key}
    assert {r.point_id: r.reason for r in verify(raw, "pii", trusted_keys=trusted)} == {1: "not_yet_valid", 2: "ok"}
    assert {r.point_id: r.reason for r in verify(raw, "pii", trusted_keys=trusted, max_clock_skew_s=None)} == \
        {1: "ok", 2: "ok"}
    assert [r.reason for r in verify(raw, "pii", trusted_keys=trusted, max_clock_skew_s=2 * HOUR)] == ["ok", "ok"]
    raw.close()


# ------------------------------------------------------------------ guarded writes

def _owner_and_bob(kit, **receipts_section) -> tuple[QdrantClient, QdrantClient]:
    """The owner's client (alice@hr) of a PII collection "pii", and bob@support's view of it (a writer
    outside the owner boundary, noise_on_write off)."""
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False,
           "intent": {"enabled": False}}
    extra = {"receipts": receipts_section} if receipts_section else {}
    owner = QdrantClient(":memory:", guard=kit.config({"pii": pol}, **extra), principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    return owner, owner.with_principal(kit.principal("bob", "support"))


def _bob_writes(kit, issued_at: float, **receipts_section) -> tuple[QdrantClient, GuardRefusal | None]:
    """bob writes point 1 under a receipt by the guard's key issued at ``issued_at``; the owner's
    client and the refusal (or None)."""
    owner, bob = _owner_and_bob(kit, **receipts_section)
    vec, rec = _receipted(guard_signer(kit), issued_at)
    try:
        bob.upsert("pii", [models.PointStruct(id=1, vector=vec, payload={RECEIPT_KEY: receipts_for_payload({"": rec})})])
    except GuardRefusal as exc:
        return owner, exc
    return owner, None


def test_a_guarded_write_refuses_a_receipt_dated_ahead_under_the_default_policy(tmp_path):
    kit = make_kit(tmp_path)
    issued_at = time.time() + HOUR
    owner, refusal = _bob_writes(kit, issued_at)  # receipts.max_age_s unset: before, written
    assert refusal is not None and refusal.verdict == "INVALID_RECEIPT"
    assert owner.count("pii").count == 0
    text = str(refusal)
    # The refusal names the receipt's issued_at, the tolerance and the policy key to change.
    assert f"issued_at is {int(round(issued_at * 1000))} ms" in text
    assert "300 s clock-skew tolerance" in text and "receipts.max_clock_skew_s" in text
    # A clock, not a forgery: the point's date leads, the generic advice ("forged, altered ...") after.
    assert "point 1: not_yet_valid: " in text and "; otherwise the receipt does not verify" in text
    assert text.index("not_yet_valid") < text.index("forged, altered")
    owner.close()


def test_a_refusal_for_a_date_and_a_forgery_together_keeps_the_generic_advice_first(tmp_path):
    kit = make_kit(tmp_path)
    owner, bob = _owner_and_bob(kit)
    ahead_vec, ahead = _receipted(guard_signer(kit), time.time() + HOUR, pid=1)
    other_vec, other = _receipted(ReceiptSigner(keys.generate_keypair()[0]), time.time(), pid=2, seed=6)
    with pytest.raises(GuardRefusal) as refused:
        bob.upsert("pii", [
            models.PointStruct(id=1, vector=ahead_vec, payload={RECEIPT_KEY: receipts_for_payload({"": ahead})}),
            models.PointStruct(id=2, vector=other_vec, payload={RECEIPT_KEY: receipts_for_payload({"": other})})])
    text = str(refused.value)
    assert refused.value.verdict == "INVALID_RECEIPT" and owner.count("pii").count == 0
    # Not every point is only early: the generic advice leads, the first point's reason after it.
    assert text.index("forged, altered") < text.index("(point 1: not_yet_valid: ")
    owner.close()


def test_a_guarded_write_takes_a_receipt_within_the_tolerance_the_policy_sets(tmp_path):
    kit = make_kit(tmp_path)
    owner, refusal = _bob_writes(kit, time.time() + 60)  # within the default 300 s
    assert refusal is None and owner.count("pii").count == 1
    owner.close()
    owner, refusal = _bob_writes(kit, time.time() + HOUR, max_clock_skew_s=2 * HOUR)
    assert refusal is None and owner.count("pii").count == 1
    owner.close()
    owner, refusal = _bob_writes(kit, time.time() + 10, max_clock_skew_s=0)
    assert refusal is not None and "0 s clock-skew tolerance" in str(refusal)
    owner.close()


def test_reads_release_a_stored_vector_whatever_its_receipts_date(tmp_path):
    # Decided: the read path does not check dates (the write did); a reader's slow clock strips nothing.
    kit = make_kit(tmp_path)
    store = str(tmp_path / "store")
    raw = RawClient(path=store)
    create(raw, "pii", distance=models.Distance.EUCLID)
    vec, rec = _receipted(guard_signer(kit), time.time() + HOUR)
    raw.upsert("pii", [models.PointStruct(id=1, vector=vec, payload={RECEIPT_KEY: receipts_for_payload({"": rec})})])
    raw.close()
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False}}
    owner = QdrantClient(path=store, guard=kit.config({"pii": pol}), principal=kit.principal("alice", "hr"))
    reader = owner.with_principal(kit.principal("bob", "support"))
    got = reader.retrieve("pii", [1], with_vectors=True)
    assert got[0].vector is not None and np.allclose(got[0].vector, vec)
    owner.close()


# ------------------------------------------------------------------ policy and CLI

def test_the_policy_key_defaults_to_300_and_refuses_what_toml_cannot_mean(tmp_path):
    assert GuardConfig().receipts.max_clock_skew_s == 300.0
    assert GuardConfig(receipts={"max_clock_skew_s": None}).receipts.max_clock_skew_s is None
    for bad in ("-1", "inf", "nan", '"300"'):
        path = tmp_path / "p.toml"
        path.write_text(f"[receipts]\nmax_clock_skew_s = {bad}\n")
        with pytest.raises(ConfigError, match="max_clock_skew_s"):
            load_policy(path)
    path.write_text("[receipts]\nmax_clock_skew_s = 0\n")
    assert load_policy(path).receipts.max_clock_skew_s == 0


def test_the_cli_reports_a_receipt_dated_ahead_and_applies_the_policys_tolerance(tmp_path: Path, signer):
    store = str(tmp_path / "store")
    raw = RawClient(path=store)
    create(raw, "pii", distance=models.Distance.EUCLID)
    vec, rec = _receipted(signer, time.time() + HOUR)
    raw.upsert("pii", [models.PointStruct(id=1, vector=vec, payload={RECEIPT_KEY: receipts_for_payload({"": rec})})])
    raw.close()
    pub = keys.public_key_to_str(signer.public_key)
    proc = run_cli("receipt", "verify", "--path", store, "--collection", "pii", "--trusted-key", pub)
    assert proc.returncode == 1, proc.stderr
    line = json.loads(proc.stdout.splitlines()[0])
    assert line["reason"] == "not_yet_valid" and str(rec["issued_at"]) in line["detail"]
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[receipts]\ntrusted_keys = ["{pub}"]\nmax_clock_skew_s = 7200\n\n'
                      '[collections.pii]\nclass = "PII"\n')
    proc = run_cli("receipt", "verify", "--path", store, "--collection", "pii", "--policy", str(policy))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1/1 receipted vectors verify" in proc.stdout
