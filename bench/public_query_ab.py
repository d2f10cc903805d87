"""Guard-only time of a PUBLIC collection's reads in two source trees, timed in turn.

Run: python bench/public_query_ab.py OLD_TREE NEW_TREE [--rounds 31] [--calls 300]
     (OLD_TREE e.g. from `git archive <commit> | tar -x -C /tmp/old`, with the built *.so copied in)

Each tree gets a worker process (run in the tree, with the tree's tests/guardkit.py) with a listed
PUBLIC collection of 1,000 384-d points in local mode, read by a verified principal. Two reads,
Qdrant's answer replayed (``overhead.Replay``: the guard's own work only): a top-10
``query_points`` with a plain 384-d vector, and one with a ``models.Document`` query (20 realistic
question texts, one per call in turn; local mode has no inference here, so its final request is
answered with the vector read's answer). Each round both workers time ``--calls`` of each and
report their medians; the order alternates per round. Prints each tree's median per read and the
median and quartiles of the per-round ratio new/old.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def worker() -> None:
    sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]  # the tree's own package and kit
    import tempfile


    import qdrant_guard
    from guardkit import make_kit, models
    from qdrant_guard import QdrantClient
    from qdrant_guard.overhead import Replay, realistic_queries, unit_rows

    assert Path(qdrant_guard.__file__).resolve().parent.parent == Path.cwd().resolve()
    kit = make_kit(Path(tempfile.mkdtemp()))
    client = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}),
                          principal=kit.principal("alice", "hr"))
    client.create_collection("pub", vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE))
    rows = unit_rows(1000, 384, 20240611)
    client.upsert("pub", [models.PointStruct(id=i, vector=r.tolist(), payload={"source": f"doc{i % 50}"})
                          for i, r in enumerate(rows)])
    texts = realistic_queries(20)
    qv = [r.tolist() for r in unit_rows(20, 384, 20240612)]
    vec = [Replay(client, "query_points", ("pub",), {"query": q, "limit": 10}) for q in qv]
    for r in vec:
        r.record()
    doc = [Replay(client, "query_points", ("pub",), {"query": models.Document(
        text=t, model="sentence-transformers/all-MiniLM-L6-v2"), "limit": 10}) for t in texts]
    for r, v in zip(doc, vec):
        r.answer = v.answer
    for j in range(200):
        vec[j % 20].run()
        doc[j % 20].run()
    assert all(r.forwarded == 0 for r in vec + doc)
    print("ready", flush=True)
    for line in sys.stdin:
        out = []
        for reps in (vec, doc):
            ts = []
            for j in range(int(line)):
                t = time.perf_counter()
                reps[j % 20].run()
                ts.append(time.perf_counter() - t)
            out.append(statistics.median(ts) * 1e6)
        print(*(f"{x:.2f}" for x in out), flush=True)


def main() -> None:
    from _ab import alternate, start, summary

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    env = dict(os.environ, QDRANT_GUARD_REQUIRE_NATIVE="1", PYTHONWARNINGS="ignore")
    procs = {k: start([sys.executable, os.path.abspath(__file__), "worker"], cwd=d, env={**env, "PYTHONPATH": d})
             for k, d in (("old", a.old), ("new", a.new))}
    got = alternate(procs, a.rounds, str(a.calls))
    for i, label in enumerate(("PUBLIC vector read", "PUBLIC Document read")):
        o = [r[i] for r in got["old"]]
        n = [r[i] for r in got["new"]]
        print(label)
        for k, xs in (("old", o), ("new", n), ("new/old", [b / x for x, b in zip(o, n)])):
            print("  " + summary(k, xs, "" if k == "new/old" else "us/read"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker()
    else:
        main()
