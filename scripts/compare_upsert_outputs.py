"""Dump everything a guarded upsert produces, with every random input fixed, to compare two builds.

Run it once per build (PYTHONPATH picks the build; without it, this checkout's; the build used is
printed on stderr) and compare the files byte for byte:

    PYTHONPATH=/path/to/old python scripts/compare_upsert_outputs.py /tmp/old.json
    python scripts/compare_upsert_outputs.py /tmp/new.json
    cmp /tmp/old.json /tmp/new.json

Fixed for the run: every Ed25519 key (guard signing key, boundary authorities), so the noise key
derived from the signing key, hence the keyed noise, is fixed; the receipts' salts
(``os.urandom`` in qdrant_guard.receipts) and the clock (``time.time``). The dump holds, per
write: the stored points read back raw (ids, vectors, payloads with the receipt containers
byte for byte as JSON), or the refusal (type and message); then the audit log file, byte for
byte. Writes: 256 x 384-d points with a ~40-word text and 4 metadata fields, written twice (the
second time every payload screen can take its shortcuts), then payloads with findings in one
leaf, next to leaf boundaries, in keys, and the same values under keys that make them findings.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# Before anything binds time.time (the guard's clock is bound at import).
time.time = lambda: 1_800_000_000.0

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if not os.environ.get("PYTHONPATH"):
    # Without it the venv's editable install (another checkout's qdrant_guard) would be imported.
    sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "tests"))

_counter = [0]


def _fixed_keypair():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    _counter[0] += 1
    sk = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"cmp-key-%d" % _counter[0]).digest())
    return sk, sk.public_key()


def _fixed_urandom_factory():
    state = [0]

    def urandom(n: int) -> bytes:
        out = b""
        while len(out) < n:
            state[0] += 1
            out += hashlib.sha256(b"cmp-salt-%d" % state[0]).digest()
        return out[:n]
    return urandom


WORDS = ("the quarterly review covers onboarding steps for new staff in the support team and lists who to "
         "contact about payroll questions benefits enrolment and laptop setup before the first week ends "
         "please read the attached policy summary carefully").split()

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
API = "a8f3k2j9x0q7w1e5r4t6"
SSN = "123-45-6789"
EMAIL = "alice@example.com"


def realistic(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {"text": " ".join(rng.choice(WORDS, 40)), "source": f"doc{i % 50}", "chunk": i,
            "title": f"Onboarding guide part {i % 7}", "lang": "en"}


CRAFTED = [
    {"note": STRIPE},
    {"a": "plain", "b": SSN, "c": "plain"},
    {"a": "ends with a digit 123", "b": "45-6789 starts with digits"},
    {"a": "alice@", "b": "example.com"},
    {"a": "api_key", "b": API},
    {"note": API}, {"api_key": API}, {"note": API},
    {"meta": {"deep": [{"api_key": API}, "x", EMAIL]}},
    {GHP: 1, "plain_key": "v"},
    {"email_" + EMAIL: "v"},
    {"a": "x" * 300, "b": "y" * 300 + SSN},
    {"q": 'has "quotes" and \\ backslash ' + SSN},
    {"pwd": "Hunter2hunter2x"}, {"note": "Hunter2hunter2x"},
    {"[EMAIL]": "x"}, {EMAIL: "y", "[EMAIL]": "x"}, {"[GITHUB_TOKEN]": 2}, {GHP: 1, "[GITHUB_TOKEN]": 2},
    {"text": "hello " + SSN, "meta": {"text": "hello", "n": None, "f": 1.5, "b": True}},
]


def main(out: Path) -> None:
    import qdrant_guard
    from qdrant_guard import keys, receipts
    print(f"qdrant_guard from {Path(qdrant_guard.__file__).parent}", file=sys.stderr)
    keys.generate_keypair = _fixed_keypair
    receipts.os = type("os_fixed", (), {"urandom": staticmethod(_fixed_urandom_factory())})

    import guardkit
    from qdrant_client import QdrantClient as RawClient
    from qdrant_client.http import models
    from qdrant_guard import QdrantClient
    guardkit.keys.generate_keypair = _fixed_keypair

    doc: dict = {"writes": []}
    with tempfile.TemporaryDirectory() as tmp:
        kit = guardkit.make_kit(Path(tmp))
        cols = {
            "pii": {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": False,
                    "noise_on_write": True, "text_field": "text", "credentials_in_text": "redact"},
            "pii_all": {"class": "PII", "owner": "hr", "raw_in_boundary": False, "noise_on_write": True,
                        "text_field": "text", "credentials_in_text": "redact", "payload_fields": "all"},
            "pii_refuse": {"class": "PII", "owner": "hr", "raw_in_boundary": False, "noise_on_write": True,
                           "text_field": "text"},
            "pub": {"class": "PUBLIC", "text_field": "text", "allow_redaction_on_public": True},
        }
        client = QdrantClient(":memory:", guard=kit.config(cols), principal=kit.principal("alice", "hr"))
        for c in cols:
            RawClient.create_collection(client, c, vectors_config=models.VectorParams(
                size=384, distance=models.Distance.COSINE))
        rng = np.random.default_rng(7)
        rows = rng.standard_normal((256, 384)).astype(np.float32)

        def write(col: str, points: list) -> None:
            try:
                client.upsert(col, points=points)
                got, _ = RawClient.scroll(client, col, limit=10_000, with_payload=True, with_vectors=True)
                doc["writes"].append({"col": col, "stored": [
                    {"id": p.id, "vector": p.vector, "payload": p.payload} for p in sorted(got, key=lambda p: p.id)]})
            except Exception as exc:  # the refusal is part of the output
                doc["writes"].append({"col": col, "refused": f"{type(exc).__name__}: {exc}"})

        batch = [models.PointStruct(id=j, vector=rows[j].tolist(), payload=realistic(j)) for j in range(256)]
        write("pii", batch)
        write("pii", batch)
        for col in ("pii", "pii_all", "pii_refuse", "pub"):
            for k, pl in enumerate(CRAFTED):
                write(col, [models.PointStruct(id=1000 + k, vector=rows[k].tolist(), payload=pl)])
            write(col, [models.PointStruct(id=2000 + k, vector=rows[k].tolist(), payload=pl)
                        for k, pl in enumerate(CRAFTED)])
        client.close()
        doc["audit_log"] = (Path(tmp) / "audit.jsonl").read_text()
    out.write_text(json.dumps(doc, sort_keys=True, default=repr))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
