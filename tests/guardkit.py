"""Shared set-up for the client tests: keys, boundaries, credentials, policies, real local Qdrant."""
from __future__ import annotations

import io
import socket
import subprocess
import threading
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import GuardConfig, Principal, QdrantClient, issue_credential, keys
from qdrant_guard.hashing_embedder import HashingEmbedder
from qdrant_guard.policy import config_from_dict

DIM = 16


@dataclass
class Kit:
    """Keys and credentials for two boundaries (hr, support) and a guard signing key."""

    tmp: Path
    guard_key_path: Path
    authority: dict[str, Any] = field(default_factory=dict)
    authority_pub: dict[str, str] = field(default_factory=dict)

    def principal(self, agent: str, boundary: str, *, ttl_s: float = 600.0, now: float | None = None) -> Principal:
        token = issue_credential(self.authority[boundary], agent_id=agent, boundary=boundary, ttl_s=ttl_s, now=now)
        return Principal(agent, boundary, token)

    def config(self, collections: dict[str, Any], **extra: Any) -> GuardConfig:
        data: dict[str, Any] = {
            "signing_key": str(self.guard_key_path),
            "audit_log": str(self.tmp / "audit.jsonl"),
            "boundaries": {b: {"authority_keys": [pub]} for b, pub in self.authority_pub.items()},
            "collections": collections,
        }
        data.update(extra)
        return config_from_dict(data, source="test-policy")


def closed_port() -> int:
    """A localhost port nothing listens on (bound, then released), for clients that must fail to connect."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_kit(tmp: Path) -> Kit:
    sk, _ = keys.generate_keypair()
    gk = tmp / "guard.key"
    gk.write_bytes(keys.private_key_to_pem(sk))
    gk.chmod(0o600)
    kit = Kit(tmp=tmp, guard_key_path=gk)
    for b in ("hr", "support"):
        ask, apk = keys.generate_keypair()
        kit.authority[b] = ask
        kit.authority_pub[b] = keys.public_key_to_str(apk)
    return kit


def hr_policy(diversity: dict[str, Any]) -> dict[str, Any]:
    """The policy of a PII collection that hr owns and support reads, intent checks off, with
    ``diversity`` as its [diversity] table."""
    return {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
            "diversity": diversity}


def hr_shared(kit: Kit, name: str, diversity: dict[str, Any]) -> Any:
    """A guarded client of alice@hr on a new collection ``name`` of :func:`hr_policy`."""
    owner = QdrantClient(":memory:", guard=kit.config({name: hr_policy(diversity)}), principal=kit.principal("alice", "hr"))
    create(owner, name)
    return owner


# A budget of 20 % of each source, nothing else capped.
PAYROLL_DIVERSITY = {"max_source_coverage": 0.2, "max_source_fraction": 1.0, "min_unique_sources": 1}


def payroll(kit: Kit) -> tuple[Any, Any]:
    """alice@hr's client on collection ``hr`` (:data:`PAYROLL_DIVERSITY`) holding points 0-9 of
    source ``payroll``, and bob@support's view of it."""
    owner = hr_shared(kit, "hr", PAYROLL_DIVERSITY)
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"}) for i in range(10)])
    return owner, owner.with_principal(kit.principal("bob", "support"))


def charged_named(kit: Kit, sizes: dict[str, int], max_vectors: int, points: int) -> Any:
    """alice@hr's client on a PROPRIETARY collection ``hr`` that support reads, scores charged
    (``charge_scores``, cap ``max_vectors``, no source caps), with one Cosine dense vector per
    name of ``sizes`` and ``points`` points (ids 0.., source ``s<id>``, unit vectors, seed 5)."""
    pol = {"class": "PROPRIETARY", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
           "diversity": {"max_vectors": max_vectors, "charge_scores": True, "max_source_fraction": 1.0,
                         "min_unique_sources": 1}}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    owner.create_collection("hr", vectors_config={n: models.VectorParams(size=d, distance=models.Distance.COSINE)
                                                  for n, d in sizes.items()})
    rng = np.random.default_rng(5)
    owner.upsert("hr", [models.PointStruct(id=i, vector={n: unit(rng, d) for n, d in sizes.items()},
                                           payload={"source": f"s{i}"}) for i in range(points)])
    return owner


def pii_writer(kit: Kit) -> tuple[Any, Any]:
    """alice@hr's client on an empty PII collection ``pii`` (noise on write, epsilon 1 at radius
    0.01) that bob@support may write, and bob's view of it."""
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    return owner, owner.with_principal(kit.principal("bob", "support"))


def create(client: Any, name: str, *, dim: int = DIM, distance: models.Distance = models.Distance.COSINE,
           named: tuple[str, ...] = ()) -> None:
    if named:
        cfg: Any = {n: models.VectorParams(size=dim, distance=distance) for n in named}
    else:
        cfg = models.VectorParams(size=dim, distance=distance)
    client.create_collection(name, vectors_config=cfg)


def unit(rng: np.random.Generator, dim: int = DIM) -> list[float]:
    v = rng.normal(size=dim)
    return (v / np.linalg.norm(v)).tolist()


def snapshot(client: Any, name: str) -> list[tuple[Any, Any, Any]]:
    """Everything stored in a collection, read through the unguarded base class."""
    records, _ = RawClient.scroll(client, name, limit=10_000, with_payload=True, with_vectors=True)
    return sorted(((r.id, r.payload, r.vector) for r in records), key=lambda t: str(t[0]))


def count(client: Any, name: str) -> int:
    return RawClient.count(client, name).count


__all__ = ["Kit", "make_kit", "create", "unit", "snapshot", "count", "QdrantClient", "DIM", "models"]


def staging_store(dim: int = 32, n: int = 300, clusters: int = 30) -> tuple[RawClient, np.ndarray, list[list[float]]]:
    """A raw local store with collection ``staging``: ``n`` unit vectors around ``clusters`` seeded
    centres, and 40 queries near the first 40 of them. Returns (client, docs, queries)."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(clusters, dim))
    x = centres[rng.integers(0, clusters, n)] + 0.35 * rng.normal(size=(n, dim))
    docs = x / np.linalg.norm(x, axis=1, keepdims=True)
    raw = RawClient(":memory:")
    raw.create_collection("staging", vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE))
    raw.upsert("staging", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(docs)])
    queries = (docs[:40] + 0.05 * np.random.default_rng(9).normal(size=(40, dim))).tolist()
    return raw, docs, queries


def staging_record(kit: Kit, path: Path, *, radius: float = 0.01, dim: int = 32) -> tuple[Any, np.ndarray]:
    """Calibrate the staging store at ``radius`` (epsilons 0.02, 0.1, 0.5, 2; threshold 0.05; signed
    with the kit's guard key), write the record to ``path`` and return (record, docs)."""
    from qdrant_guard.utility import calibrate

    raw, docs, queries = staging_store(dim)
    rec = calibrate(raw, "staging", queries, k=10, radius=radius, epsilons=(0.02, 0.1, 0.5, 2.0), threshold=0.05,
                    signer=keys.load_private_key(kit.guard_key_path), progress=False, seed=1)
    path.write_text(rec.to_json())
    return rec, docs


class Recorder(HashingEmbedder):
    """The hashing embedder, keeping every text it was asked to embed (what reached the model)."""

    def __init__(self) -> None:
        super().__init__(DIM)
        self.seen: list[str] = []

    def __call__(self, texts):
        self.seen.extend(texts)
        return super().__call__(texts)


def replay_policy_file(kit: Kit, extra: str = "") -> Path:
    """A policy file with one PII collection ``docs`` owned by ``hr``, intent off (for replays)."""
    policy = kit.tmp / "policy.toml"
    policy.write_text(f"""
[boundaries.hr]
authority_keys = ["{kit.authority_pub['hr']}"]
[collections.docs]
class = "PII"
owner = "hr"
[collections.docs.intent]
enabled = false
""" + extra)
    return policy


def one_logged_query(tmp: Path, **config: Any) -> tuple[Kit, Path]:
    """A kit whose guard (``config``: more GuardConfig settings) logged one Document query of
    ``docs`` (PII, owned by ``hr``, intent off) to its audit log; the kit and the log's path."""
    kit = make_kit(tmp)
    c = QdrantClient(":memory:", guard=kit.config({"docs": {"class": "PII", "owner": "hr", "intent": {"enabled": False}}},
                                                 **config),
                     principal=kit.principal("alice", "hr"), embedder=Recorder())
    create(c, "docs")
    c.query_points("docs", query=models.Document(text="short query", model="hashing"))
    c.close()
    return kit, tmp / "audit.jsonl"


def async_pii_client(kit: Kit, rng: np.random.Generator) -> Any:
    """An async guarded client of alice (hr) on local mode, its PII collection ``pii`` (raw in the
    boundary, intent off) holding point 1; set up on a loop of its own, now closed."""
    import asyncio

    from qdrant_guard import AsyncQdrantClient

    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "raw_in_boundary": True, "intent": {"enabled": False}}})
    client = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))

    async def setup() -> None:
        await client.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        await client.upsert("pii", [models.PointStruct(id=1, vector=unit(rng))])

    asyncio.run(setup())
    return client


def audit_records(kit: Kit) -> list[dict[str, Any]]:
    """The ``record`` of every entry of the kit's audit log, oldest first."""
    import json

    # "\n" only: an entry may hold U+2028/U+2029/U+0085 raw (caller text), where splitlines() splits.
    return [json.loads(x)["record"] for x in (kit.tmp / "audit.jsonl").read_text(encoding="utf-8").split("\n") if x]


@contextmanager
def hung_calls_released(release: threading.Event) -> Iterator[None]:
    """Around a test whose classifiers block on ``release``: clear it first; at the end set it and
    wait until the intent pool holds no abandoned call, so no test leaves any for the next. A
    safety timer sets it after a minute, so code without a time limit fails the test instead of
    hanging it."""
    from qdrant_guard import intent_pool

    release.clear()
    safety = threading.Timer(60.0, release.set)
    safety.daemon = True
    safety.start()
    try:
        yield
    finally:
        safety.cancel()
        release.set()
        done = threading.Event()
        for _ in range(3000):  # the released calls end at once; this only waits for their threads
            if intent_pool._POOL.abandoned() == 0:
                break
            done.wait(0.01)
        assert intent_pool._POOL.abandoned() == 0


def record_sent(monkeypatch: Any, methods: tuple[str, ...], *, with_kwargs: bool = False) -> list[Any]:
    """The calls that reach the real (unguarded) qdrant-client ``methods``, the guard's own
    included, in order: each method's name, or ``(name, kwargs)`` with ``with_kwargs``. The calls
    still run on local Qdrant."""
    calls: list[Any] = []
    for method in methods:
        original = getattr(RawClient, method)

        def recording(self: Any, *a: Any, _original: Any = original, _method: str = method, **kw: Any) -> Any:
            calls.append((_method, kw) if with_kwargs else _method)
            return _original(self, *a, **kw)

        monkeypatch.setattr(RawClient, method, recording)
    return calls


def record_scans(monkeypatch: Any) -> list[str]:
    """The texts the guard hands to ``detect.redact_with_findings`` from now on, in order."""
    from qdrant_guard import detect

    seen: list[str] = []
    original = detect.redact_with_findings

    def counting(text: str) -> Any:
        seen.append(text)
        return original(text)

    monkeypatch.setattr(detect, "redact_with_findings", counting)
    return seen


def guard_signer(kit: Kit) -> Any:
    """A receipt signer holding the guard's own key, which every collection trusts."""
    from qdrant_guard.receipts import ReceiptSigner

    return ReceiptSigner(keys.load_private_key(kit.guard_key_path))


def receipted_vector(signer: Any, pid: Any, vector: Any, *, mechanism: str = "gaussian", model_id: str | None = None,
                     vname: str = "", collection: str = "pii", seeded: bool = False,
                     **noise: Any) -> tuple[list[float], dict[str, Any]]:
    """``vector`` noised with ``mechanism`` at epsilon 1, radius 0.01, clip_norm 1 (delta 1e-6 for
    Gaussian noise; ``noise`` overrides any of them; ``seeded``: the TEST-ONLY generator seeded with
    ``pid``), in its stored form for the Euclid distance, and its receipt by ``signer`` for point
    ``pid`` of ``collection``, naming ``model_id``."""
    from qdrant_guard.noise import privatize, privatize_seeded_for_tests
    from qdrant_guard.receipts import ReceiptItem, issue_receipts_batch, stored_form

    at = {"epsilon": 1.0, "delta": 1e-6 if mechanism == "gaussian" else None, "radius": 0.01, "clip_norm": 1.0,
          **noise}
    x = np.asarray([vector], dtype=np.float32)
    noised, params = (privatize_seeded_for_tests(x, seed=pid, mechanism=mechanism, **at) if seeded
                      else privatize(x, mechanism=mechanism, **at))
    final = stored_form(noised[0], distance="Euclid")
    rec = issue_receipts_batch(signer, [ReceiptItem(params=params, vector=final, collection=collection, point_id=pid,
                                                    vector_name=vname, model_id=model_id)])[0]
    return final.tolist(), rec


def receipted_point(kit: Kit, pid: Any, rng: Any, **kw: Any) -> models.PointStruct:
    """A point of one unit vector drawn from ``rng``, receipted by the guard's key
    (:func:`receipted_vector`'s keywords), with payload ``{"t": "x"}`` and its receipt container."""
    from qdrant_guard.receipts import RECEIPT_KEY, receipts_for_payload

    vec, rec = receipted_vector(guard_signer(kit), pid, unit(rng), **kw)
    return models.PointStruct(id=pid, vector=vec, payload={"t": "x", RECEIPT_KEY: receipts_for_payload({"": rec})})


def receipt_writes(c: Any, pts: list[Any], collection: str = "pii") -> dict[str, Any]:
    """Every call that takes a writer's receipt, each writing ``pts`` (update_vectors takes none:
    PointVectors has no payload)."""
    return {
        "upsert": lambda: c.upsert(collection, pts),
        "upload_points": lambda: c.upload_points(collection, pts, wait=True),
        "upload_collection": lambda: c.upload_collection(collection, vectors=[p.vector for p in pts],
                                                         payload=[p.payload for p in pts],
                                                         ids=[p.id for p in pts], wait=True),
        "batch_update_points": lambda: c.batch_update_points(collection, [
            models.UpsertOperation(upsert=models.PointsList(points=pts))]),
    }


async def stored_receipt_reasons(client: Any, collection: str, point_id: Any) -> list[str]:
    """Each stored receipt's verification reason for ``point_id``, read past the guard from an
    async client's store (``["ok"]`` when the one stored receipt binds the stored vector)."""
    import qdrant_client

    from qdrant_guard.receipts import receipts_from_payload, verify_receipt

    got = await qdrant_client.AsyncQdrantClient.retrieve(client, collection, [point_id], with_payload=True,
                                                         with_vectors=True)
    return [verify_receipt(rec, vector=got[0].vector, collection=collection, point_id=point_id, vector_name=n,
                           trusted_keys=client.guard.trusted_receipt_keys).reason
            for n, rec in receipts_from_payload(got[0].payload).items()]


def offload_then_write(offload: Any, seen: list[str], invoked: list[str]) -> tuple[Any, Any]:
    """A driver operation (one ``Offload(offload)``, then a ``"write"`` Call) and the ``invoke`` that
    records each Call's method in ``invoked``; a cancellation thrown in at the Offload is noted in
    ``seen`` as ``"offload cancelled"``."""
    import asyncio

    from qdrant_guard.pipeline import Call, Offload

    def op() -> Any:
        try:
            yield Offload(offload)
        except asyncio.CancelledError:
            seen.append("offload cancelled")
            raise
        yield Call("write", {})

    async def invoke(call: Any) -> None:
        invoked.append(call.method)

    return op(), invoke


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``qdrant-guard *args`` in this process, shaped as ``subprocess.run``'s result.

    For tests of what a command says and returns; tests/test_cli.py runs each command family as a
    real subprocess. An exception the command lets out (a traceback in a shell) propagates here and
    fails the test; argparse's refusals (``SystemExit``) become the exit status.
    """
    from qdrant_guard.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            status = main(list(args))
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess(list(args), status, out.getvalue(), err.getvalue())
