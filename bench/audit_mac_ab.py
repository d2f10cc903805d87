"""A/B of the audit entry's writer MAC (format v2) against the entry builder before it, in one process.

Run: python bench/audit_mac_ab.py [--baseline 5a65d2a] [--rounds 21] [--appends 2000] [--writes 100]

The baseline is ``qdrant_guard/audit.py`` of the baseline commit (read with ``git show``), loaded
next to this tree's as ``qdrant_guard._audit_baseline``: its ``AuditLog`` differs in the entry
builder only (it reads the log with this tree's parser, which takes both formats). Both arms sign
checkpoints with the same key (every 1,000th entry, the guard's period) and append to their own
file. Two measures, each round timing both arms in turn (the order alternates):

  append    wall time per ``AuditLog.append`` of a typical guard record, mean of ``--appends``.
  upsert-1  wall time of a guarded single-point upsert (384-d, PII, noised and receipted) into a
            local-mode collection, median of ``--writes``; the guard's ``audit`` is swapped
            between an AuditLog of each arm, so the rest of the write is the same code.

Prints each arm's median over rounds and the median and quartiles of the per-round ratio new/old.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _ab  # noqa: E402
import _harness as H  # noqa: E402
from _harness import models  # noqa: E402

from qdrant_guard import audit as new_audit  # noqa: E402
from qdrant_guard.receipts import ReceiptSigner  # noqa: E402

RECORD = _ab.AUDIT_RECORD


def baseline_audit(commit: str):
    return _ab.module_at(commit, "qdrant_guard/audit.py", "qdrant_guard._audit_baseline")


quartiles = _ab.ratio_quartiles


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="5a65d2a")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--writes", type=int, default=100)
    args = ap.parse_args()
    old_audit = baseline_audit(args.baseline)
    tmp = Path(tempfile.mkdtemp(prefix="qg-auditmac-"))

    pol = {"class": "PII", "owner": "hr", "raw_in_boundary": False, "noise_on_write": True,
           "diversity": {"enabled": False}}
    bed = H.make_bed({"w": pol})
    name = H.fill(bed, "w", 0, 384)
    guard = bed.owner._guard
    signer = guard.audit._signer
    assert signer is not None and isinstance(signer, ReceiptSigner)
    logs = {"old": old_audit.AuditLog(tmp / "old.jsonl", signer=signer),
            "new": new_audit.AuditLog(tmp / "new.jsonl", signer=signer)}
    rows = H.unit_rows(args.writes, 384, H.SEED)
    pid = iter(range(10**9))

    def append_arm(log) -> float:
        t = time.perf_counter()
        for _ in range(args.appends):
            log.append(RECORD)
        return (time.perf_counter() - t) / args.appends * 1e6

    def upsert_arm(log) -> float:
        guard.audit = log
        times = []
        for i in range(args.writes):
            point = models.PointStruct(id=next(pid), vector=rows[i].tolist(), payload={"source": "doc1"})
            t = time.perf_counter()
            bed.owner.upsert(name, points=[point])
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e6

    for log in logs.values():  # warm-up
        append_arm(log)
        upsert_arm(log)
    got: dict[str, dict[str, list[float]]] = {m: {"old": [], "new": []} for m in ("append", "upsert-1")}
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for arm in order:
            got["append"][arm].append(append_arm(logs[arm]))
        for arm in order:
            got["upsert-1"][arm].append(upsert_arm(logs[arm]))
    # Both files must verify, and only the new one's entries carry writer MACs.
    from qdrant_guard.audit_mac import writer_keys
    from qdrant_guard.keys import key_id

    wk = {key_id(signer.public_key): signer.audit_mac_key}
    assert writer_keys  # the helper the docs name for verifiers
    rep_new = new_audit.verify_audit_file(tmp / "new.jsonl", writer_keys=wk)
    # A log without MACs or checkpoints: with keys it is "unsigned" unless that is allowed.
    rep_old = new_audit.verify_audit_file(tmp / "old.jsonl", writer_keys=wk, allow_unsigned=True)
    assert rep_new.ok and rep_new.writers and rep_old.ok and rep_old.legacy == rep_old.entries, (rep_new, rep_old)
    for m, arms in got.items():
        ratios = [n / o for n, o in zip(arms["new"], arms["old"])]
        print(f"{m:9s} old {statistics.median(arms['old']):9.1f} us  new {statistics.median(arms['new']):9.1f} us  "
              f"new/old {quartiles(ratios)}  ({args.rounds} rounds)")


if __name__ == "__main__":
    main()
