"""A plain models.Document write's guard cost in two source trees, timed in turn.

Run: python bench/inference_ab.py OLD_TREE NEW_TREE [ROUNDS]
     (OLD_TREE e.g. from `git archive <commit> | tar -x -C /tmp/old`, with the built *.so copied in)

Each tree gets a worker process (run in the tree, with the tree's tests/guardkit.py) on local
Qdrant. Two measures per round: ``public_points`` of 100 points whose vector is a plain Document
(the PUBLIC write screen, microseconds per point, median of 15), and a guarded single-point upsert
of a Document to a sensitive collection with a constant embedder (wall time, median of 30). Rounds
alternate which worker goes first; prints each tree's median and the median and quartiles of the
per-round ratio new/old.
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))



def worker() -> None:
    sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]  # the tree's own package and kit
    import pathlib
    import tempfile

    import numpy as np

    import qdrant_guard
    from guardkit import create, make_kit, models
    from qdrant_guard import QdrantClient

    assert pathlib.Path(qdrant_guard.__file__).resolve().parent.parent == pathlib.Path.cwd().resolve()
    kit = make_kit(pathlib.Path(tempfile.mkdtemp()))
    cfg = kit.config({"pub": {"class": "PUBLIC", "text_field": "text"},
                      "pii": {"class": "PII", "owner": "hr", "raw_in_boundary": True, "text_field": "text",
                              "intent": {"enabled": False}}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"),
                          embedder=lambda texts: np.ones((len(texts), 16)) / 4.0)
    create(client, "pub")
    create(client, "pii")
    guard = client._guard
    pol = guard.policy("pub")
    doc = models.Document(text="a plain sentence about the weather in Paris", model="m")
    points = [models.PointStruct(id=i, vector=doc, payload={"text": "a plain sentence"}) for i in range(100)]
    print("ready", flush=True)
    for _ in sys.stdin:
        screen = []
        for _ in range(15):
            t0 = time.perf_counter()
            guard.public_points("upsert", "pub", pol, points)
            screen.append((time.perf_counter() - t0) / len(points) * 1e6)
        upsert = []
        for i in range(30):
            t0 = time.perf_counter()
            client.upsert("pii", [models.PointStruct(id=i, vector=doc, payload={"text": "x"})])
            upsert.append((time.perf_counter() - t0) * 1e6)
        print(statistics.median(screen), statistics.median(upsert), flush=True)


def main() -> None:
    from _ab import alternate, start

    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 21
    env = dict(os.environ, QDRANT_GUARD_REQUIRE_NATIVE="1", PYTHONWARNINGS="ignore")
    procs = {k: start([sys.executable, os.path.abspath(__file__), "worker"], cwd=d, env={**env, "PYTHONPATH": d})
             for k, d in (("old", old), ("new", new))}
    got = alternate(procs, rounds, "go")
    for i, label in enumerate(("public_points per Document point (us)", "guarded sensitive upsert of 1 Document (us)")):
        o = [r[i] for r in got["old"]]
        n = [r[i] for r in got["new"]]
        ratios = sorted(b / a for a, b in zip(o, n))
        q = statistics.quantiles(ratios, n=4)
        print(f"{label}: old {statistics.median(o):.2f}  new {statistics.median(n):.2f}  "
              f"new/old median {statistics.median(ratios):.3f} (quartiles {q[0]:.3f}..{q[2]:.3f})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker()
    else:
        main()
