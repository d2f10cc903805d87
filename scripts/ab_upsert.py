"""A/B the guarded upsert of two builds, in alternating runs (old, new, old, new, ...).

    python scripts/ab_upsert.py OLD_TREE [--runs 11] [--rounds 3]
    QG_AB_FORGET=1 python scripts/ab_upsert.py OLD_TREE     (forget remembered values before each call)
    QG_AB_FORGET=1 QG_AB_UNIQUE=1 python ...                 (and every point's metadata values distinct)

OLD_TREE is a directory holding the old build's ``qdrant_guard`` package (``git archive`` of the
old commit's ``qdrant_guard`` plus the built ``.so`` files); the new build is this checkout. Each
run is a fresh process that writes 4 batches of 256 x 384-d points with a ~40-word text field and
4 metadata fields (source, chunk, title, lang) to a PII collection (noise on write, keyed; batch
receipts; audit to a file) and times, per batch and round, in a shuffled order: the raw
qdrant-client upsert, the guarded upsert, and the guard alone (bench/_harness.Replay: Qdrant's
answer replayed). A round's figure is the median of its 4 batches; the report gives the median of
all rounds of each build and the 10th-90th percentile spread.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(rounds: int) -> None:
    sys.path.insert(0, os.environ["QG_TREE"])
    sys.path.insert(1, str(ROOT / "bench"))
    import _harness as H  # noqa: E402
    import numpy as np  # noqa: E402
    import qdrant_guard  # noqa: E402
    from _harness import RawClient, models  # noqa: E402

    assert Path(qdrant_guard.__file__).resolve().is_relative_to(Path(os.environ["QG_TREE"]).resolve())
    words = ("the quarterly review covers onboarding steps for new staff in the support team and lists who to "
             "contact about payroll questions benefits enrolment and laptop setup before the first week ends "
             "please read the attached policy summary carefully").split()

    def payload(i: int) -> dict:
        rng = np.random.default_rng(i)
        if os.environ.get("QG_AB_UNIQUE"):
            return {"text": " ".join(rng.choice(words, 40)), "source": f"doc{i}", "chunk": i,
                    "title": f"Onboarding guide part {i}", "lang": f"en-{i}"}
        return {"text": " ".join(rng.choice(words, 40)), "source": f"doc{i % 50}", "chunk": i,
                "title": f"Onboarding guide part {i % 7}", "lang": "en"}

    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": False,
           "noise_on_write": True, "diversity": {"enabled": False}, "text_field": "text"}
    bed = H.make_bed({"w_guard": pol})
    try:
        raw_name, g_name = H.fill(bed, "w_raw", 0, 384), H.fill(bed, "w_guard", 0, 384)
        rows = H.unit_rows(4 * 256, 384, H.SEED + 2)
        batches = [[models.PointStruct(id=b * 256 + j, vector=rows[b * 256 + j].tolist(), payload=payload(b * 256 + j))
                    for j in range(256)] for b in range(4)]
        reps = [H.Replay(bed.owner, "upsert", (g_name, bt), {}) for bt in batches]
        for r in reps:
            r.record()
        fns = {"raw": lambda b: RawClient.upsert(bed.owner, raw_name, points=batches[b]),
               "guarded": lambda b: bed.owner.upsert(g_name, points=batches[b]),
               "guard_only": lambda b: reps[b].run()}
        if os.environ.get("QG_AB_FORGET"):
            # Metadata never seen before: the new build forgets every (key, value) pair first.
            guard = bed.owner.guard
            memory = guard.clean_values(g_name) if hasattr(guard, "clean_values") else set()
            forget = memory.clear
            fns = {k: (lambda f: lambda b: (forget(), f(b)))(f) for k, f in fns.items()}
        s = H.interleaved(fns, 4, rounds, seed=int.from_bytes(os.urandom(4), "little"))
        print(json.dumps({k: np.median(v.reshape(rounds, 4), axis=1).tolist() for k, v in s.items()}))
    finally:
        bed.close()


def main() -> None:
    import argparse

    import numpy as np

    ap = argparse.ArgumentParser()
    ap.add_argument("old_tree")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    trees = {"old": str(Path(a.old_tree).resolve()), "new": str(ROOT)}
    got: dict[str, dict[str, list[float]]] = {v: {} for v in trees}
    for i in range(a.runs):
        for v in (("old", "new") if i % 2 == 0 else ("new", "old")):
            out = subprocess.run([sys.executable, __file__, "--child", str(a.rounds)], check=True, text=True,
                                 capture_output=True, env={**os.environ, "QG_TREE": trees[v]}).stdout
            for k, xs in json.loads(out.strip().splitlines()[-1]).items():
                got[v].setdefault(k, []).extend(xs)
    for v in trees:
        for k, xs in got[v].items():
            x = np.asarray(xs) * 1e3
            print(f"{v} {k:10s} median {np.median(x):7.2f} ms  ({np.median(x) / 256 * 1e3:5.1f} us a point)  "
                  f"p10-p90 {np.percentile(x, 10):.2f}-{np.percentile(x, 90):.2f} ms  rounds {x.size}")
        r = np.asarray(got[v]["guarded"]) / np.asarray(got[v]["raw"])
        print(f"{v} guarded/raw (per round) median {np.median(r):.2f}x  p10-p90 {np.percentile(r, 10):.2f}-"
              f"{np.percentile(r, 90):.2f}x")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(int(sys.argv[2]))
    else:
        main()
