"""What ``qdrant-guard bench`` reports: per-call percentiles, raw vs guarded vs guard-only, the run's
parameters, notes and checks, as a text table and as JSON (:class:`OverheadReport`)."""
from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


def stats_us(samples: np.ndarray) -> dict[str, float]:
    """p50/p90/p99/mean in microseconds, and the sample count."""
    s = np.asarray(samples) * 1e6
    return {"p50_us": float(np.percentile(s, 50)), "p90_us": float(np.percentile(s, 90)),
            "p99_us": float(np.percentile(s, 99)), "mean_us": float(s.mean()), "n": int(s.size)}


@dataclass(frozen=True)
class Timing:
    """Per-call latency of one variant: percentiles in microseconds and the number of timed calls."""

    p50_us: float
    p90_us: float
    calls: int

    @classmethod
    def of(cls, samples: np.ndarray) -> Timing:
        """The timing of ``samples`` (per-call seconds)."""
        s = stats_us(samples)
        return cls(p50_us=s["p50_us"], p90_us=s["p90_us"], calls=int(s["n"]))


@dataclass(frozen=True)
class Comparison:
    """Raw qdrant-client vs the guarded client (and the guard alone) for one operation."""

    raw: Timing
    guarded: Timing
    guard_only: Timing

    @property
    def ratio_p50(self) -> float:
        """guarded p50 / raw p50."""
        return self.guarded.p50_us / self.raw.p50_us

    @property
    def ratio_p90(self) -> float:
        """guarded p90 / raw p90."""
        return self.guarded.p90_us / self.raw.p90_us

    @property
    def guard_only_share_p50(self) -> float:
        """guard-only p50 / raw p50: the guard's own cost relative to the raw call."""
        return self.guard_only.p50_us / self.raw.p50_us

    def to_dict(self) -> dict[str, Any]:
        """The three timings and the ratios, JSON-ready."""
        return {"raw": asdict(self.raw), "guarded": asdict(self.guarded), "guard_only": asdict(self.guard_only),
                "guarded_over_raw_p50": self.ratio_p50, "guarded_over_raw_p90": self.ratio_p90,
                "guard_only_over_raw_p50": self.guard_only_share_p50}


@dataclass
class OverheadReport:
    """What :func:`measure_overhead` measured, and on what.

    ``upsert`` and ``query`` hold the timings; ``notes`` says what of the user's policy was
    replaced for the run (audit log, budget store, throwaway credentials); ``checks`` holds
    evidence that the guarded calls went through the guard (audit entries, receipted points).
    """

    collection: str
    policy: str
    backend: str
    writer: str
    reader: str
    dim: int
    points: int
    batch: int
    queries: int
    limit: int
    rounds: int
    seed: int
    sources: int  # how many: kept beside source_names for readers of earlier reports
    text_field: str | None
    upsert: Comparison
    query: Comparison
    notes: list[str] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    source_names: list[str] = field(default_factory=list)  # the source values, point i took [i % sources]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the whole report."""
        d = {k: v for k, v in asdict(self).items() if k not in ("upsert", "query")}
        d["upsert"] = self.upsert.to_dict()
        d["query"] = self.query.to_dict()
        d["measured"] = MEASURED
        return d

    def format_table(self) -> str:
        """The report as the short text table ``qdrant-guard bench`` prints."""
        def ms(us: float) -> str:
            return f"{us / 1e3:9.3f}"

        lines = [
            f"qdrant-guard bench: collection {self.collection!r} of {self.policy} on {self.backend}",
            (f"  writer {self.writer}, reader {self.reader}; {self.points} points x {self.dim} dims in "
             f"{self.sources} source(s), upsert batches of {self.batch}, {self.queries} top-{self.limit} "
             f"queries, {self.rounds} interleaved round(s)"),
            "",
            f"  {'operation':<8} {'variant':<11} {'calls':>6} {'p50 ms':>9} {'p90 ms':>9}",
        ]
        for op, c in (("upsert", self.upsert), ("query", self.query)):
            for name, t in (("raw", c.raw), ("guarded", c.guarded), ("guard-only", c.guard_only)):
                lines.append(f"  {op:<8} {name:<11} {t.calls:>6} {ms(t.p50_us)} {ms(t.p90_us)}")
            lines.append(f"  {op:<8} guarded/raw: {c.ratio_p50:.2f}x at p50, {c.ratio_p90:.2f}x at p90; "
                         f"guard alone {c.guard_only_share_p50 * 100:.1f} % of raw p50")
        chk = self.checks
        if "stored_points" in chk:
            lines.append(f"  stored by the guarded upserts: {chk['stored_points']} points, {chk['receipted_points']} "
                         "with a receipt (noised by the guard or brought receipted)")
        lines.append("")
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.append(f"  {MEASURED}")
        return "\n".join(lines)


MEASURED = ("Measured: per-call wall time, interleaved, of raw qdrant-client on a twin collection (the "
            "same points as stored without the guard) vs the guarded client; guard-only = the guard's "
            "pipeline with Qdrant's recorded answer to the final request replayed. Figures depend on "
            "this machine, its load and the backend.")


def machine_info() -> dict[str, Any]:
    """The machine, versions and kernels a run was made with, and when (UTC)."""
    import importlib.metadata as md

    from . import implementation

    return {"machine": platform.machine(), "cores": os.cpu_count(), "python": platform.python_version(),
            "os": f"{platform.system()} {platform.release()}", "numpy": np.__version__,
            "qdrant_client": md.version("qdrant-client"), "qdrant_guard_kernels": implementation(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
