"""A/B of the audit writer's check of entries others appended (it reads each and checks the MACs
of its own writer id) against the writer of a baseline commit, in one process.

Run: python bench/audit_tail_check_ab.py [--baseline 6357138] [--rounds 21] [--appends 2000] [--open-entries 999]
     [--legacy-entries 20000]

The baseline is ``qdrant_guard/audit.py`` of the baseline commit (``git show``), loaded next to this
tree's as ``qdrant_guard._audit_baseline``. Both arms sign with the same key (a checkpoint every
1,000th entry, the guard's period) and write their own files. Three measures, each round timing
both arms in turn (the order alternates):

  append     wall time per ``AuditLog.append`` of a typical guard record by a lone writer (the
             normal path: nothing appended by others), mean of ``--appends``.
  append-2w  the same with two ``AuditLog`` objects on one file appending in turn (as two processes
             of one guard do): each append first reads the entry the other wrote.
  open       wall time of ``AuditLog(path)`` on a log of ``--open-entries`` entries after its last
             checkpoint (the window read on open), median of 9 opens.
  open-v1    the same on a log of ``--legacy-entries`` entries in format v1 (no checkpoint, written
             without a signer): the window ends on its length at a v1 entry, so the writer searches
             the whole file for a v2 entry (since h-audit3; its worst case on open).
  sign       this tree only, ``sign_every_entry`` on ("new") against off ("old"): a lone writer's
             append, which then signs every entry (h-audit4).
  sign-2g    the same for two writers with their own keys on one file appending in turn, each
             trusting the other's key (two guards sharing a log): with it on, each append also
             checks the signature on the other's entry.

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

from qdrant_guard import audit as new_audit  # noqa: E402
from qdrant_guard import keys  # noqa: E402
from qdrant_guard.audit_mac import writer_keys  # noqa: E402
from qdrant_guard.receipts import ReceiptSigner  # noqa: E402

RECORD = _ab.AUDIT_RECORD


quartiles = _ab.ratio_quartiles


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="6357138")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--open-entries", type=int, default=999)
    ap.add_argument("--legacy-entries", type=int, default=20000)
    args = ap.parse_args()
    mods = {"old": _ab.module_at(args.baseline, "qdrant_guard/audit.py", "qdrant_guard._audit_baseline"),
            "new": new_audit}
    tmp = Path(tempfile.mkdtemp(prefix="qg-audittail-"))
    sk, _ = keys.generate_keypair()
    signer = ReceiptSigner(sk)
    lone = {arm: m.AuditLog(tmp / f"{arm}-lone.jsonl", signer=signer) for arm, m in mods.items()}
    pair = {arm: (m.AuditLog(tmp / f"{arm}-pair.jsonl", signer=signer), m.AuditLog(tmp / f"{arm}-pair.jsonl", signer=signer))
            for arm, m in mods.items()}
    sk2, _ = keys.generate_keypair()
    other = ReceiptSigner(sk2)
    # For sign and sign-2g both arms are this tree: "old" with sign_every_entry off, "new" on.
    signing = {arm: new_audit.AuditLog(tmp / f"{arm}-sign.jsonl", signer=signer, sign_every_entry=arm == "new")
               for arm in mods}
    guards = {arm: (new_audit.AuditLog(tmp / f"{arm}-2g.jsonl", signer=signer, sign_every_entry=arm == "new",
                                       trusted_keys={other.key_id: other.public_key}),
                    new_audit.AuditLog(tmp / f"{arm}-2g.jsonl", signer=other, sign_every_entry=arm == "new",
                                       trusted_keys={signer.key_id: signer.public_key}))
              for arm in mods}
    window = tmp / "window.jsonl"
    with new_audit.AuditLog(window, signer=signer) as w:
        for _ in range(1000 + args.open_entries):  # the checkpoint at seq 1000, then the window
            w.append(RECORD)

    legacy = tmp / "legacy.jsonl"
    with new_audit.AuditLog(legacy) as w:
        for _ in range(args.legacy_entries):
            w.append(RECORD)
    print(f"open-v1 log: {args.legacy_entries} entries, {legacy.stat().st_size / 1e6:.1f} MB")

    def append_arm(arm: str, logs=lone) -> float:
        log = logs[arm]
        t = time.perf_counter()
        for _ in range(args.appends):
            log.append(RECORD)
        return (time.perf_counter() - t) / args.appends * 1e6

    def pair_arm(arm: str, logs=pair) -> float:
        a, b = logs[arm]
        t = time.perf_counter()
        for _ in range(args.appends // 2):
            a.append(RECORD)
            b.append(RECORD)
        return (time.perf_counter() - t) / (args.appends // 2 * 2) * 1e6

    def open_arm(arm: str, path: Path = window) -> float:
        times = []
        for _ in range(9):
            t = time.perf_counter()
            mods[arm].AuditLog(path, signer=signer).close()
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e3

    measures = {"append": (append_arm, "us"), "append-2w": (pair_arm, "us"), "open": (open_arm, "ms"),
                "open-v1": (lambda arm: open_arm(arm, legacy), "ms"), "sign": (lambda arm: append_arm(arm, signing), "us"),
                "sign-2g": (lambda arm: pair_arm(arm, guards), "us")}
    for fn, _ in measures.values():  # warm-up
        for arm in mods:
            fn(arm)
    got = {m: {"old": [], "new": []} for m in measures}
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for m, (fn, _) in measures.items():
            for arm in order:
                got[m][arm].append(fn(arm))
    for logs in (lone, signing, *({k: v[i] for k, v in two.items()} for two in (pair, guards) for i in (0, 1))):
        for log in logs.values():
            log.close()
    wk = writer_keys([sk])
    for arm in mods:
        for name in (f"{arm}-lone.jsonl", f"{arm}-pair.jsonl"):
            rep = new_audit.verify_audit_file(tmp / name, writer_keys=wk,
                                              trusted_keys={signer.key_id: signer.public_key})
            assert rep.ok and rep.writers == ((signer.key_id, rep.entries),), (name, rep)
    both = {signer.key_id: signer.public_key, other.key_id: other.public_key}
    for arm in mods:
        for name in (f"{arm}-sign.jsonl", f"{arm}-2g.jsonl"):
            rep = new_audit.verify_audit_file(tmp / name, writer_keys=writer_keys([sk, sk2]), trusted_keys=both)
            assert rep.ok and (arm == "old" or rep.checkpoints == rep.entries), (name, rep)
    for m, arms in got.items():
        unit = measures[m][1]
        ratios = [n / o for n, o in zip(arms["new"], arms["old"])]
        print(f"{m:9s} old {statistics.median(arms['old']):9.1f} {unit}  new {statistics.median(arms['new']):9.1f} "
              f"{unit}  new/old {quartiles(ratios)}  ({args.rounds} rounds)")


if __name__ == "__main__":
    main()
