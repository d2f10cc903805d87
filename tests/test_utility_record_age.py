"""utility.max_age_s: a utility record stops vouching for writes once it is too old (2026-12-05).

A record measured the collection's data and embedding model as they were when it was calibrated.
Before, a record vouched for writes forever; a policy can now bound its age, as
``receipts.max_age_s`` bounds a receipt's. A record dated ahead of the guard's clock is refused
while the bound is set, else it would stay "fresh" until its chosen date.

Real local Qdrant, a record measured by calibrate() on a real store, re-dated and re-signed with
the guard's real Ed25519 key.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time

import pytest
from guardkit import make_kit, models, staging_record

from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal, QdrantClient, keys
from qdrant_guard.utility import UTILITY_DOMAIN

DIM = 32
_VP = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
DAY_MS = 86_400_000


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The kit, the guard-signed record as calibrated, and its docs."""
    tmp = tmp_path_factory.mktemp("uage")
    kit = make_kit(tmp)
    rec, docs = staging_record(kit, tmp / "fresh.json", dim=DIM)
    return kit, rec, docs, tmp


def _dated(kit, rec, created_at, path):
    """``rec`` with ``created_at`` changed, re-signed by the guard's own key (a valid record)."""
    out = dataclasses.replace(rec, created_at=int(created_at), signature=None)
    sig = keys.load_private_key(kit.guard_key_path).sign(UTILITY_DOMAIN + out.signed_bytes())
    path.write_text(dataclasses.replace(out, signature=base64.b64encode(sig).decode("ascii")).to_json())
    return path


def _writer(kit, rec, record, max_age_s=None, client_cls=QdrantClient):
    utility = {"record": str(record)}
    if max_age_s is not None:
        utility["max_age_s"] = max_age_s
    coll = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
            "intent": {"enabled": False}, "noise": {"epsilon": rec.epsilon, "radius": 0.01}, "utility": utility}
    cfg = kit.config({"docs": coll}, epsilon_ceiling={"PII": 5.0})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("docs", vectors_config=_VP)
    return owner, cfg


def _write(client, docs):
    client.upsert("docs", [models.PointStruct(id=1, vector=docs[0].tolist())])


def _now_ms():
    return time.time() * 1000


def test_a_record_older_than_max_age_refuses_writes_and_says_how_old_and_what_to_do(setup):
    kit, rec, docs, tmp = setup
    old = _dated(kit, rec, _now_ms() - 10 * DAY_MS, tmp / "old.json")
    owner, _ = _writer(kit, rec, old, max_age_s=7 * 86400)
    writer = owner.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as err:
        _write(writer, docs)
    msg = str(err.value)
    assert err.value.verdict == "UTILITY_DEGRADED"
    assert "old.json" in msg and "utility.max_age_s = 604800" in msg and "10.0 days" in msg
    assert "qdrant-guard calibrate" in msg
    assert owner.count("docs", exact=True).count == 0


def test_the_same_old_record_still_vouches_without_max_age_or_within_it(setup):
    kit, rec, docs, tmp = setup
    old = _dated(kit, rec, _now_ms() - 10 * DAY_MS, tmp / "old2.json")
    for max_age in (None, 30 * 86400):
        owner, _ = _writer(kit, rec, old, max_age_s=max_age)
        _write(owner.with_principal(kit.principal("bob", "support")), docs)
        assert owner.count("docs", exact=True).count == 1


def test_a_fresh_record_passes_a_tight_bound(setup):
    kit, rec, docs, tmp = setup
    fresh = _dated(kit, rec, _now_ms() - 60_000, tmp / "fresh2.json")
    owner, _ = _writer(kit, rec, fresh, max_age_s=3600)
    _write(owner.with_principal(kit.principal("bob", "support")), docs)
    assert owner.count("docs", exact=True).count == 1


def test_a_record_dated_ahead_of_the_clock_is_refused_while_a_bound_is_set(setup):
    kit, rec, docs, tmp = setup
    ahead = _dated(kit, rec, _now_ms() + 2 * DAY_MS, tmp / "ahead.json")
    owner, _ = _writer(kit, rec, ahead, max_age_s=7 * 86400)
    with pytest.raises(GuardRefusal) as err:
        _write(owner.with_principal(kit.principal("bob", "support")), docs)
    assert err.value.verdict == "UTILITY_DEGRADED"
    assert "after the guard's clock" in str(err.value) and "ahead.json" in str(err.value)
    # Within the clock-skew leeway it is accepted.
    near = _dated(kit, rec, _now_ms() + 60_000, tmp / "near.json")
    owner, _ = _writer(kit, rec, near, max_age_s=7 * 86400)
    _write(owner.with_principal(kit.principal("bob", "support")), docs)
    assert owner.count("docs", exact=True).count == 1


def test_the_bound_holds_in_async_too(setup):
    kit, rec, docs, tmp = setup
    old = _dated(kit, rec, _now_ms() - 10 * DAY_MS, tmp / "old3.json")
    _, cfg = _writer(kit, rec, old, max_age_s=86400)

    async def run():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("docs", vectors_config=_VP)
        writer = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(GuardRefusal) as err:
            await writer.upsert("docs", [models.PointStruct(id=1, vector=docs[0].tolist())])
        assert err.value.verdict == "UTILITY_DEGRADED" and "utility.max_age_s" in str(err.value)
        assert (await owner.count("docs", exact=True)).count == 0

    asyncio.run(run())


@pytest.mark.parametrize("bad", [0, -1, "90d"])
def test_a_bad_bound_is_a_config_error_naming_the_key(setup, bad):
    kit, rec, _, _ = setup
    coll = {"class": "PII", "owner": "hr", "noise": {"epsilon": rec.epsilon, "radius": 0.01},
            "utility": {"max_age_s": bad}}
    with pytest.raises(ConfigError) as err:
        kit.config({"docs": coll})
    assert "max_age_s" in str(err.value)
