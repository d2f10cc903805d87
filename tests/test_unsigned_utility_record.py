"""An unsigned utility record is refused with a message that says it is unsigned.

A record with ``signer_key_id`` and ``signature`` null (``UtilityRecord``'s "unsigned") was refused
as "signed by None", which named no key and no cause (claims audit 18's left item).
"""
from __future__ import annotations

import json

import pytest
from guardkit import create, make_kit, models, staging_record

from qdrant_guard import ConfigError, QdrantClient


def _client_with_record(tmp_path, strip: bool):
    kit = make_kit(tmp_path)
    rec_path = tmp_path / "utility.json"
    rec, docs = staging_record(kit, rec_path, dim=32)
    if strip:
        body = json.loads(rec_path.read_text())
        body["signer_key_id"] = None
        body["signature"] = None
        rec_path.write_text(json.dumps(body))
    coll = {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "diversity": {"enabled": False},
            "noise": {"epsilon": rec.epsilon, "delta": 1e-6, "radius": 0.01}, "utility": {"record": str(rec_path)}}
    cfg = kit.config({"plain": coll}, epsilon_ceiling={"PII": 5.0})
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(c, "plain", dim=32)
    return c, docs


def test_unsigned_record_is_refused_as_unsigned(tmp_path):
    c, docs = _client_with_record(tmp_path, strip=True)
    with pytest.raises(ConfigError) as err:
        c.upsert("plain", [models.PointStruct(id=1, vector=docs[0].tolist(), payload={"source": "s"})])
    msg = str(err.value)
    assert "unsigned: it names no signer key" in msg, msg
    assert "None" not in msg, msg
    assert "re-run `qdrant-guard calibrate`" in msg, msg
    c.close()


def test_signed_record_still_admits_the_write(tmp_path):
    c, docs = _client_with_record(tmp_path, strip=False)
    c.upsert("plain", [models.PointStruct(id=1, vector=docs[0].tolist(), payload={"source": "s"})])
    assert c.count("plain").count == 1
    c.close()
