"""A usage file that exercises the public API; `make typecheck` runs mypy --strict on it."""
from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from qdrant_client import models

import qdrant_guard
from qdrant_guard import (
    AsyncQdrantClient,
    CollectionPolicy,
    GuardConfig,
    GuardRefusal,
    NoiseParams,
    NoisePolicy,
    Principal,
    QdrantClient,
    SensitivityClass,
    issue_credential,
    keys,
)
from qdrant_guard.detect import Finding, classify_text, find_sensitive, redact
from qdrant_guard.noise import privatize
from qdrant_guard.policy import config_from_dict
from qdrant_guard.receipts import PointReceiptReport, averify, verify
from qdrant_guard.scan import ScanResult, scan_query


def sync_usage() -> int:
    sk, pk = keys.generate_keypair()
    token: str = issue_credential(sk, agent_id="a", boundary="hr", ttl_s=60)
    cfg: GuardConfig = config_from_dict({
        "boundaries": {"hr": {"authority_keys": [keys.public_key_to_str(pk)]}},
        "collections": {"docs": {"class": "PII", "owner": "hr", "raw_in_boundary": True}},
    })
    assert cfg.policy_for("docs").sensitivity is SensitivityClass.PII
    client = QdrantClient(":memory:", guard=cfg, principal=Principal("a", "hr", token))
    policy_path = Path("policy.toml")  # guard= also takes the file's path, a str or a Path
    if policy_path.exists():
        QdrantClient(":memory:", guard=policy_path, principal=token).close()
    client.create_collection("docs", vectors_config=models.VectorParams(size=4, distance=models.Distance.DOT))
    client.upsert("docs", [models.PointStruct(id=1, vector=[0.1, 0.2, 0.3, 0.4], payload={"source": "x"})])
    other: QdrantClient = client.with_principal(None)
    try:
        other.query_points("docs", query=[0.1, 0.2, 0.3, 0.4])
    except GuardRefusal as exc:
        verdict: str = exc.verdict
        digest: str = exc.manifest_digest
        assert verdict and digest
    res: models.QueryResponse = client.query_points("docs", query=[0.1, 0.2, 0.3, 0.4], limit=3)
    # The owner boundary's client verifies the collection's receipts (point 1 was written raw).
    reports: list[PointReceiptReport] = verify(client, "docs", trusted_keys={})
    assert [r.reason for r in reports] == ["missing_receipt"]
    client.close()
    return len(res.points)


def policy_models() -> GuardConfig:
    # Built in Python, every field left out keeps its default (the models give it by keyword).
    docs = CollectionPolicy(noise=NoisePolicy(epsilon=0.5), readers=("*",))
    return GuardConfig(collections={"docs": docs})


def kernels() -> None:
    noised, params = privatize(np.zeros(8, dtype=np.float32), mechanism="gaussian", epsilon=1.0,
                               delta=1e-6, radius=0.01, clip_norm=1.0)
    p: NoiseParams = params
    assert noised.shape == (8,) and p.epsilon == 1.0
    r: ScanResult = scan_query("hello world", max_tokens=10)
    assert r.ok
    found: list[Finding] = find_sensitive("SSN 123-45-6789")
    text: str = redact("SSN 123-45-6789")
    cls: str = classify_text(text)
    assert found and cls
    impl: str = qdrant_guard.implementation()
    assert impl in ("native", "python")
    try:
        scan_query("x", max_tokens=-1)
    except qdrant_guard.GuardArgumentValueError as exc:
        bad: ValueError = exc  # a bad argument value is a ValueError and a QdrantGuardError
        base: qdrant_guard.QdrantGuardError = exc
        assert str(bad) == str(base)
    else:
        raise AssertionError("max_tokens=-1 was accepted")


async def async_usage() -> int:
    client = AsyncQdrantClient(":memory:")
    await client.create_collection("c", vectors_config=models.VectorParams(size=2, distance=models.Distance.DOT))
    n = await client.count("c")
    reports: list[PointReceiptReport] = await averify(client, "c", [1, 2], trusted_keys={}, batch_size=1)
    assert [(r.point_id, r.reason) for r in reports] == [(1, "missing_point"), (2, "missing_point")]
    await client.close()
    return n.count


if __name__ == "__main__":
    sync_usage()
    policy_models()
    kernels()
    asyncio.run(async_usage())
