"""A/B of the Redis budget store's listing in one process: the two-script listing of 0fe40e1
(tests/redis_listing_old.py) against the one-script listing, on the same keys of a running Redis.

    python bench/redis_listing_ab.py --url redis://127.0.0.1:6399/0 --sizes 10,100,1000

Setup as in docs/performance-notes.md: 200 other principals with 10 sources of 1 id each, and one
principal whose ids (10 / 100 / 1,000) are spread over 10 sources. Per size: ``--rounds``
alternating rounds (which arm goes first alternates) of ``--calls`` listings of that principal's
group per arm; prints per arm the median over rounds of the per-call time, and the median and
quartiles of the per-round ratio new/old. Both arms must return the same listing. Writes JSON lines.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from qdrant_guard.budget_redis import RedisBudgetStore  # noqa: E402
from redis_listing_old import TwoScriptRedisStore  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=50)
    opts = parser.parse_args()
    import redis

    client = redis.Redis.from_url(opts.url)
    prefix = f"qg:ab:{uuid.uuid4().hex}:"
    new, old = RedisBudgetStore(client, prefix=prefix), TwoScriptRedisStore(client, prefix=prefix)
    new.reset()
    window, now = 3600.0, 1000.0
    for p in range(200):
        new.admit_many_counted([(f"src|o{p}|c|s{s}", [str(s)], 10) for s in range(10)], window_s=window, now=now)
    try:
        for size in (int(v) for v in opts.sizes.split(",")):
            group = f"src|n{size}|c|"
            new.admit_many_counted([(f"{group}s{s}", [str(i) for i in range(s, size, 10)], size)
                                    for s in range(10)], window_s=window, now=now)
            arms = {"old": old, "new": new}
            answers = {name: store.entries_by_prefix(group, window_s=window, now=now) for name, store in arms.items()}
            assert answers["old"] == answers["new"] and sum(map(len, answers["new"].values())) == size
            times: dict[str, list[float]] = {"old": [], "new": []}
            ratios = []
            for r in range(opts.rounds):
                per = {}
                for name in (("old", "new") if r % 2 else ("new", "old")):
                    store = arms[name]
                    t = time.perf_counter()
                    for _ in range(opts.calls):
                        store.entries_by_prefix(group, window_s=window, now=now)
                    per[name] = (time.perf_counter() - t) / opts.calls
                    times[name].append(per[name])
                ratios.append(per["new"] / per["old"])
            q = statistics.quantiles(ratios, n=4)
            print(json.dumps({"ids": size, "old_us": round(statistics.median(times["old"]) * 1e6, 1),
                              "new_us": round(statistics.median(times["new"]) * 1e6, 1),
                              "ratio_new_old": round(statistics.median(ratios), 3),
                              "q1": round(q[0], 3), "q3": round(q[2], 3)}), flush=True)
    finally:
        new.reset()


if __name__ == "__main__":
    main()
