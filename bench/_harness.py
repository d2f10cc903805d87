"""Shared set-up of the overhead and scaling benchmarks: seeded data, guarded and raw clients, timing.

The same store is read two ways in the same run:

* **raw**: the unguarded ``qdrant_client.QdrantClient`` method, called on the store directly
  (``qdrant_client.QdrantClient.query_points(client, ...)``): exactly what an application without
  the guard runs;
* **guarded**: ``qdrant_guard.QdrantClient.query_points`` for a principal of another boundary, so
  every read defence of the policy runs (scan, query noise, diversity, budget, audit to a file).

Guard-only cost is measured a second way, without Qdrant in the timed region: the pipeline is a
sans-IO generator (``Guard.run`` yields ``Call`` requests), so it can be driven with an ``invoke``
that answers the final ``query_points``/``upsert`` with the result real Qdrant returned for the
very same rewritten request in a warm-up pass. That is not a stand-in for Qdrant's behaviour (the
result *is* Qdrant's); it removes Qdrant's latency from the clock so only the guard is timed.

With ``QDRANT_URL`` set, every client is built with ``url=QDRANT_URL`` instead of ``":memory:"``;
collections get a per-run prefix and are deleted at the end.
"""
from __future__ import annotations

import os

# One BLAS thread unless the caller chose otherwise: on a shared 2-core VM a multi-threaded OpenBLAS
# search waits for the busy second core, which put a ~20 ms floor under raw local-mode queries above
# ~1,000 x 384 (measured), flattering the guard's share. Must be set before numpy is imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import datetime as _dt
import json
import platform
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import qdrant_client
from qdrant_client.http import models

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS = BENCH_DIR / "results"
for _p in (BENCH_DIR, ROOT / "tests", ROOT):  # the in-place build; guardkit (keys, credentials, policies)
    if str(_p) not in sys.path:
        sys.path.insert(1, str(_p))

from guardkit import Kit, make_kit  # noqa: E402

from qdrant_guard import QdrantClient  # noqa: E402
# The measuring pieces `qdrant-guard bench` ships (one copy: the package may not import bench/).
from qdrant_guard.overhead import Replay, interleaved, realistic_queries, stats_us, unit_rows  # noqa: E402,F401

RawClient = qdrant_client.QdrantClient
SEED = 20240611


# -- data ---------------------------------------------------------------------------------
def long_query(n_tokens: int, seed: int) -> str:
    """Seeded English-like text of ``n_tokens`` words (the vocabulary of bench/bench_scan.py)."""
    from bench_scan import english

    return english(n_tokens, seed)


# -- clients ------------------------------------------------------------------------------
def location() -> dict[str, Any]:
    """Client location: ``url=QDRANT_URL`` when set, else local in-memory mode."""
    url = os.environ.get("QDRANT_URL")
    return {"url": url, "api_key": os.environ.get("QDRANT_API_KEY")} if url else {"location": ":memory:"}


def backend() -> str:
    return f"server {os.environ['QDRANT_URL']}" if os.environ.get("QDRANT_URL") else "local :memory:"


@dataclass
class Bed:
    """One test bed: an owner client, the reader's guarded view, and raw access to the same store."""

    kit: Kit
    owner: QdrantClient
    reader: QdrantClient
    prefix: str
    tmp: tempfile.TemporaryDirectory[str]
    created: list[str] = field(default_factory=list)

    def name(self, base: str) -> str:
        return f"{self.prefix}{base}"

    def close(self) -> None:
        for n in self.created:
            try:
                RawClient.delete_collection(self.owner, n)
            except Exception:  # a server-side cleanup failure must not hide the results
                pass
        self.owner.close()
        self.tmp.cleanup()


def read_policy(**over: Any) -> dict[str, Any]:
    """The read policy every read measurement uses unless it says otherwise.

    PII, owner hr, reader support; raw vectors allowed only in the owner boundary (so the reader's
    query vector is noised); diversity caps with 3x over-fetch; the extraction budget on every
    source at coverage 1.0 (every call runs the full admission, none is withheld, so all rounds
    take the same path); query text scanned and redacted; intent explicitly off (the policy
    default may be on).
    """
    pol: dict[str, Any] = {
        "class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
        "noise_queries": True, "source_field": "source",
        "diversity": {"enabled": True, "max_source_coverage": 1.0},
        "intent": {"enabled": False},  # measured on its own (bench_overhead.intent_overhead)
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(pol.get(k), dict):
            pol[k] = {**pol[k], **v}
        else:
            pol[k] = v
    return pol


def make_bed(collections: dict[str, dict[str, Any]]) -> Bed:
    """Keys, credentials, a policy over ``collections`` (audit to a real file) and the clients."""
    tmp = tempfile.TemporaryDirectory(prefix="qg-bench-")
    kit = make_kit(Path(tmp.name))
    prefix = f"qgb_{uuid.uuid4().hex[:8]}_" if os.environ.get("QDRANT_URL") else ""
    cfg = kit.config({f"{prefix}{k}": v for k, v in collections.items()})
    owner = QdrantClient(**location(), guard=cfg, principal=kit.principal("alice", "hr"))
    reader = owner.with_principal(kit.principal("bob", "support"))
    return Bed(kit=kit, owner=owner, reader=reader, prefix=prefix, tmp=tmp)


def fill(bed: Bed, base: str, n: int, dim: int, *, seed: int = SEED, n_sources: int = 50,
         batch: int = 1024) -> str:
    """Create ``base`` and upsert ``n`` seeded points through the unguarded client (the stored data is
    the same for every reader; how it got there is not what is measured)."""
    name = bed.name(base)
    RawClient.create_collection(bed.owner, name, vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE))
    bed.created.append(name)
    rows = unit_rows(n, dim, seed)
    for start in range(0, n, batch):
        stop = min(n, start + batch)
        RawClient.upsert(bed.owner, name, points=models.Batch(
            ids=list(range(start, stop)), vectors=rows[start:stop].tolist(),
            payloads=[{"source": f"doc{i % n_sources}", "chunk": i} for i in range(start, stop)]))
    return name


# -- sans-IO driving ----------------------------------------------------------------------
# -- timing -------------------------------------------------------------------------------
def paired_delta_us(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Percentiles of the per-call difference ``a - b`` (both timed in the same slot of each round)."""
    d = (np.asarray(a) - np.asarray(b)) * 1e6
    return {"p50_us": float(np.percentile(d, 50)), "p99_us": float(np.percentile(d, 99)), "n": int(d.size)}


def profile_top(fn: Callable[[], Any], calls: int, *, top: int = 15) -> list[dict[str, Any]]:
    """cProfile ``calls`` runs of ``fn``; the ``top`` functions by own time, per call, in µs.

    cProfile inflates small Python functions, so these are shares, not absolute costs.
    """
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    st = pstats.Stats(prof)
    rows = []
    for (file, line, func), (cc, nc, tt, ct, _) in st.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{_short(file)}:{line}({func})", "calls_per_op": nc / calls,
                     "own_us_per_op": tt / calls * 1e6, "cum_us_per_op": ct / calls * 1e6})
    total = sum(r["own_us_per_op"] for r in rows)
    rows.sort(key=lambda r: -r["own_us_per_op"])
    for r in rows:
        r["own_share"] = r["own_us_per_op"] / total if total else 0.0
    return rows[:top]


def profile_stages(fn: Callable[[], Any], calls: int, stages: dict[str, str]) -> dict[str, float]:
    """cProfile ``calls`` runs of ``fn`` and report the cumulative µs per op of named functions
    (``stages``: label -> ``"module_suffix:function"``), plus the profiled total."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    st = pstats.Stats(prof)
    out: dict[str, float] = {}
    for label, spec in stages.items():
        mod, func = spec.split(":")
        cum = 0.0
        for (file, _line, f), (_cc, _nc, _tt, ct, _) in st.stats.items():  # type: ignore[attr-defined]
            if f == func and file.replace(os.sep, "/").endswith(mod):
                cum += ct
        out[label] = cum / calls * 1e6
    out["profiled_total"] = st.total_tt / calls * 1e6  # type: ignore[attr-defined]
    return out


def _short(path: str) -> str:
    p = path.replace(os.sep, "/")
    for marker in ("/qdrant_guard/", "/qdrant_client/", "/pydantic/", "/site-packages/", "/lib/python3"):
        if marker in p:
            return p[p.index(marker) + 1:]
    return p.rsplit("/", 1)[-1]


# -- output -------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    """Where the numbers were measured."""
    import importlib.metadata as md

    cpu = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name") and cpu == (platform.processor() or platform.machine()):
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    # The kernels pick their SIMD path at run time (AVX-512 ChaCha20, AVX2/AES scanner), and the
    # same VM name has come with and without AVX-512: record which extensions this run had.
    simd = " ".join(f for f in ("avx2", "aes", "avx512f", "avx512vl", "avx512dq") if f in flags) or None

    def ver(pkg: str) -> str | None:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return None

    from qdrant_guard import implementation

    return {"cpu": cpu, "simd": simd, "cores": os.cpu_count(), "machine": platform.machine(),
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "numpy": np.__version__, "qdrant_client": ver("qdrant-client"), "pydantic": ver("pydantic"),
            "qdrant_guard_kernels": implementation(), "backend": backend(),
            "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def write_json(name: str, doc: dict[str, Any], out_dir: Path | None = None) -> Path:
    out = Path(out_dir) if out_dir is not None else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def pct(x: float) -> str:
    return f"{x * 100:.1f} %"


__all__ = ["Bed", "Replay", "SEED", "RawClient", "fill", "interleaved", "long_query", "machine",
           "make_bed", "paired_delta_us", "profile_stages", "profile_top", "read_policy", "realistic_queries",
           "stats_us", "unit_rows", "write_json", "models", "Sequence"]
