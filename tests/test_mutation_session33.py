"""Tests from the mutation pass over the code merged on 2026-12-05 since 3015cc5 (h-mutpy branch).

Each test kills mutants of ``scripts/mutate.py`` (or hand-made ones, named in its docstring) that
survived every older test: the read path's class-ceiling bound and release cache
(``ReadOps._release_accepted``), the exact bounds of ``utility.max_age_s`` and of the clock-skew
leeway (``guard._record_age_refusal``), the age bound on ``utility.records`` (named vectors), and
a record dated beyond what a calendar can show. The last test is the fix of a defect found in
reading ``_record_age_refusal`` (a record's ``created_at`` was never checked). docs/security-testing.md
("Mutation pass, the merges since 3015cc5") lists the mutants, which test kills each and the
equivalent ones.

Real local Qdrant, real Ed25519 keys, real calibration; no mocks.
"""
from __future__ import annotations

import base64
import dataclasses
import time

import numpy as np
import pytest
from guardkit import create, make_kit, models, staging_record, staging_store, unit
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import ConfigError, GuardRefusal, QdrantClient, keys
from qdrant_guard.noise import privatize
from qdrant_guard.receipts import (
    ISSUED_AT_LEEWAY_S,
    RECEIPT_KEY,
    ReceiptItem,
    ReceiptSigner,
    issue_receipts_batch,
    receipts_for_payload,
    stored_form,
)
from qdrant_guard.utility import UTILITY_DOMAIN, calibrate

DAY_S = 86_400


# ------------------------------------------------------------------ reads: _release_accepted

def _ceiling_policy(kit, epsilon):
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
           "noise_on_write": False, "intent": {"enabled": False}, "diversity": {"enabled": False},
           "noise": {"mechanism": "gaussian", "epsilon": epsilon, "delta": 1e-6, "radius": 0.01}}
    return kit.config({"pii": pol}, epsilon_ceiling={"PII": epsilon})


def _receipted(kit, pid, rng, epsilon):
    """A point noised at ``epsilon`` and receipted by the guard's own key (which the collection trusts)."""
    noised, params = privatize(np.asarray([unit(rng)], dtype=np.float32), mechanism="gaussian", epsilon=epsilon,
                               delta=1e-6, radius=0.01, clip_norm=1.0)
    final = stored_form(noised[0], distance="Euclid")
    rec = issue_receipts_batch(ReceiptSigner(keys.load_private_key(kit.guard_key_path)),
                               [ReceiptItem(params=params, vector=final, collection="pii", point_id=pid,
                                            vector_name="")])[0]
    point = models.PointStruct(id=pid, vector=final.tolist(), payload={"t": "x", RECEIPT_KEY: receipts_for_payload({"": rec})})
    return point, params


def test_a_receipt_at_exactly_the_class_ceiling_is_stored_and_released_on_read(tmp_path):
    """Kills ``params.epsilon <= self.ceiling(pol)`` -> ``<`` in ``_release_accepted`` (readrelease.py): the
    ceiling is inclusive on writes (``prm.epsilon > ceiling`` refuses), so a read must release what
    a write at the ceiling stored; with ``<`` the reader got ``None`` for a vector a write accepted."""
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=_ceiling_policy(kit, 1.0), principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    bob = owner.with_principal(kit.principal("bob", "support"))
    point, params = _receipted(kit, 1, np.random.default_rng(11), 1.0)
    assert params.epsilon == 1.0 == owner.guard.ceiling(owner.guard.config.policy_for("pii"))
    bob.upsert("pii", [point])
    got = bob.retrieve("pii", [1], with_vectors=True)[0].vector
    assert got is not None and np.allclose(got, point.vector)


def test_the_release_cache_keeps_its_answers_up_to_a_bound_and_no_further(tmp_path):
    """Kills, in ``_release_accepted``, ``cache.clear()`` deleted (the cache of receipt parameters
    grew with every distinct receipt a read met: a store of crafted receipts could grow it without
    end) and ``len(cache) > 4096`` negated (the cache was emptied on every new entry, so it never
    answered: every read re-ran the checks). The answers stay right across a clearing."""
    kit = make_kit(tmp_path)
    cfg = _ceiling_policy(kit, 1.0)
    guard = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr")).guard
    pol = cfg.policy_for("pii")
    _, good = _receipted(kit, 1, np.random.default_rng(12), 1.0)
    assert guard._release_accepted(pol, good) is True
    # Receipts of other epsilons: each is its own entry (its signed scale no longer fits it, so refused).
    others = [dataclasses.replace(good, epsilon=0.5 + i * 1e-5) for i in range(5000)]
    for p in others[:9]:
        assert guard._release_accepted(pol, p) is False
    cache = guard.shared["release_accepted"]
    assert len(cache) == 10  # remembered, not recomputed
    for p in others[9:]:
        assert guard._release_accepted(pol, p) is False
        assert len(cache) <= 4097
    assert guard._release_accepted(pol, good) is True


# ------------------------------------------------------------------ utility.max_age_s

def _resigned(kit, rec, path, **changes):
    """``rec`` with ``changes``, re-signed by the guard's own key (a record that key vouches for)."""
    out = dataclasses.replace(rec, signature=None, **changes)
    sig = keys.load_private_key(kit.guard_key_path).sign(UTILITY_DOMAIN + out.signed_bytes())
    path.write_text(dataclasses.replace(out, signature=base64.b64encode(sig).decode("ascii")).to_json())
    return path


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("age33")
    kit = make_kit(tmp)
    rec, docs = staging_record(kit, tmp / "fresh.json", dim=32)
    return kit, rec, docs, tmp


def _age_writer(kit, rec, path, max_age_s, clock):
    """bob@support's view of ``docs`` under a ``utility.record`` of ``path``, his guard's clock fixed."""
    coll = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
            "intent": {"enabled": False}, "noise": {"epsilon": rec.epsilon, "radius": 0.01},
            "utility": {"record": str(path), "max_age_s": max_age_s}}
    owner = QdrantClient(":memory:", guard=kit.config({"docs": coll}, epsilon_ceiling={"PII": 5.0}),
                         principal=kit.principal("alice", "hr"))
    owner.create_collection("docs", vectors_config=models.VectorParams(size=32, distance=models.Distance.COSINE))
    bob = owner.with_principal(kit.principal("bob", "support"))
    bob.guard.clock = lambda: clock
    return owner, bob


def test_a_record_exactly_max_age_s_old_still_vouches_and_one_second_more_does_not(record):
    """Kills ``age > max_age_s`` -> ``>=`` (guard.py): "older than max_age_s" refuses, an age of
    exactly max_age_s does not. Whole seconds, so every time below is exact in float64."""
    kit, rec, docs, tmp = record
    now = float(int(time.time()))
    max_age = 10 * DAY_S
    path = _resigned(kit, rec, tmp / "exact.json", created_at=int(now - max_age) * 1000)
    owner, bob = _age_writer(kit, rec, path, max_age, now)
    bob.upsert("docs", [models.PointStruct(id=1, vector=docs[0].tolist())])
    assert owner.count("docs", exact=True).count == 1
    owner, bob = _age_writer(kit, rec, path, max_age, now + 1)
    with pytest.raises(GuardRefusal) as err:
        bob.upsert("docs", [models.PointStruct(id=1, vector=docs[0].tolist())])
    assert err.value.verdict == "UTILITY_DEGRADED" and "864001 s ago" in str(err.value)
    assert owner.count("docs", exact=True).count == 0


def test_a_record_dated_exactly_the_leeway_ahead_vouches_and_one_second_more_does_not(record):
    """Kills ``age < -ISSUED_AT_LEEWAY_S`` -> ``<=`` (guard.py): a record dated up to and including
    the clock-skew leeway ahead of the guard's clock is accepted, as a receipt's ``issued_at`` is."""
    kit, rec, docs, tmp = record
    now = float(int(time.time()))
    path = _resigned(kit, rec, tmp / "ahead.json", created_at=int(now + ISSUED_AT_LEEWAY_S) * 1000)
    owner, bob = _age_writer(kit, rec, path, 7 * DAY_S, now)
    bob.upsert("docs", [models.PointStruct(id=1, vector=docs[0].tolist())])
    assert owner.count("docs", exact=True).count == 1
    owner, bob = _age_writer(kit, rec, path, 7 * DAY_S, now - 1)
    with pytest.raises(GuardRefusal) as err:
        bob.upsert("docs", [models.PointStruct(id=1, vector=docs[0].tolist())])
    assert err.value.verdict == "UTILITY_DEGRADED" and "301 s after the guard's clock" in str(err.value)


def test_a_record_dated_beyond_any_calendar_is_refused_naming_its_raw_date(record):
    """Kills the hand-made mutant that drops the fallback for a date ``datetime`` cannot show
    (``created_at`` 10**17 ms is in the year ~3.2 million): the write must end in a refusal that
    names the record, not in a ValueError from formatting its date."""
    kit, rec, docs, tmp = record
    path = _resigned(kit, rec, tmp / "far.json", created_at=10 ** 17)
    owner, bob = _age_writer(kit, rec, path, 7 * DAY_S, time.time())
    with pytest.raises(GuardRefusal) as err:
        bob.upsert("docs", [models.PointStruct(id=1, vector=docs[0].tolist())])
    msg = str(err.value)
    assert err.value.verdict == "UTILITY_DEGRADED"
    assert "far.json" in msg and "created_at 100000000000000000 ms" in msg and "after the guard's clock" in msg


def test_max_age_s_bounds_each_named_vectors_record_too(record, tmp_path):
    """Kills the hand-made mutant that checks the age only for ``utility.record`` (the call moved
    into its branch of ``utility_refusal``): the bound applies to a ``utility.records`` entry, the
    record of a named vector, as well. The record is calibrated on a named vector of a real store."""
    kit, _, _, _ = record
    raw, docs, queries = staging_store(32)
    named = RawClient(":memory:")
    named.create_collection("staging", vectors_config={
        "text": models.VectorParams(size=32, distance=models.Distance.COSINE)})
    named.upsert("staging", [models.PointStruct(id=i, vector={"text": v.tolist()}) for i, v in enumerate(docs)])
    rec = calibrate(named, "staging", queries, k=10, radius=0.01, epsilons=(0.02, 0.1, 0.5, 2.0), threshold=0.05,
                    signer=keys.load_private_key(kit.guard_key_path), progress=False, seed=1, vector_name="text")
    assert rec.vector_name == "text"
    path = _resigned(kit, rec, tmp_path / "text-old.json", created_at=int((time.time() - 10 * DAY_S) * 1000))

    def writer(max_age_s):
        coll = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                "intent": {"enabled": False}, "noise": {"epsilon": rec.epsilon, "radius": 0.01},
                "utility": {"records": {"text": str(path)}, "max_age_s": max_age_s}}
        owner = QdrantClient(":memory:", guard=kit.config({"docs": coll}, epsilon_ceiling={"PII": 5.0}),
                             principal=kit.principal("alice", "hr"))
        create(owner, "docs", dim=32, named=("text",))
        return owner, owner.with_principal(kit.principal("bob", "support"))

    point = models.PointStruct(id=1, vector={"text": docs[0].tolist()})
    owner, bob = writer(7 * DAY_S)
    with pytest.raises(GuardRefusal) as err:
        bob.upsert("docs", [point])
    assert err.value.verdict == "UTILITY_DEGRADED"
    assert "text-old.json" in str(err.value) and "utility.max_age_s = 604800" in str(err.value)
    assert owner.count("docs", exact=True).count == 0
    owner, bob = writer(30 * DAY_S)  # the same record within the bound vouches for the write
    bob.upsert("docs", [point])
    assert owner.count("docs", exact=True).count == 1
    raw.close()
    named.close()


@pytest.mark.parametrize("created_at", ["2026-12-05T10:00:00Z", None, 10 ** 400, True, 1.7e12],
                         ids=["iso-string", "null", "beyond-float", "bool", "float"])
def test_a_signed_record_whose_created_at_is_not_integer_ms_is_a_config_error_not_a_crash(record, created_at):
    """Found reading ``_record_age_refusal``: ``created_at`` was never checked when a record was read,
    and ``max_age_s`` divides it, so a record signed by a trusted key (another tool, or an edited
    record re-signed) with a date string, null or a number beyond float range ended every write to
    the collection in a bare TypeError or OverflowError (``True`` passed as 1 ms, a float was
    taken). Now the record is not read: a ConfigError naming the field and the fix, as for its
    other fields."""
    kit, rec, docs, tmp = record
    path = _resigned(kit, rec, tmp / "created.json", created_at=created_at)
    owner, bob = _age_writer(kit, rec, path, 7 * DAY_S, time.time())
    with pytest.raises(ConfigError) as err:
        bob.upsert("docs", [models.PointStruct(id=1, vector=docs[0].tolist())])
    msg = str(err.value)
    assert "created.json" in msg and "'created_at'" in msg and "integer milliseconds" in msg
    assert "qdrant-guard calibrate" in msg
    assert owner.count("docs", exact=True).count == 0
