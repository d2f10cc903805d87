"""The thirty-fifth review (h-rev35): the SQLite store's kept listings under threads, a writer
process and half-failed admissions; the one-script Redis listing on names of several UTF-8 bytes;
names.shell_quote for the bytes of a name that is not UTF-8."""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import uuid

import pytest

from sqlite_listing_check import run as sqlite_run

# -- names.shell_quote: U+DC80..U+DCFF --------------------------------------------------------


@pytest.mark.parametrize("name", ["a\udc80b", "kb\udcff", "x\udcc3\ny"],
                         ids=["byte-80", "byte-ff", "lead-byte-then-newline"])
def test_a_pasted_command_gives_a_name_that_is_not_utf8_its_characters(name: str, tmp_path) -> None:
    # A local-mode collection may be named so (qdrant-client keeps it as a directory of that
    # name; Python reads the name's bytes that are not UTF-8 as U+DC80..U+DCFF). Before, they were
    # written \uDCXX, which bash writes as three other bytes: the pasted `receipt verify
    # --collection` named another collection.
    from qdrant_guard.names import shell_quote

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    quoted = shell_quote(name)
    assert "\n" not in quoted
    show = "import sys; sys.stdout.write(ascii(sys.argv[1]))"
    out = subprocess.run([bash, "-c", f"exec {sys.executable} -c '{show}' {quoted}"], capture_output=True,
                         check=True, env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"}).stdout
    assert out.decode() == ascii(name)


def test_a_local_collection_named_with_a_byte_that_is_not_utf8_round_trips_through_the_command(tmp_path) -> None:
    # The name the guard's left-behind refusal prints is the collection's as qdrant-client lists it.
    from qdrant_client import QdrantClient, models

    from qdrant_guard.names import shell_quote

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    client = QdrantClient(path=str(tmp_path / "store"))
    try:
        client.create_collection("kb\udc80", vectors_config=models.VectorParams(size=2, distance=models.Distance.DOT))
        (listed,) = [c.name for c in client.get_collections().collections]
    finally:
        client.close()
    show = "import sys; sys.stdout.write(ascii(sys.argv[1]))"
    out = subprocess.run([bash, "-c", f"exec {sys.executable} -c '{show}' {shell_quote(listed)}"],
                         capture_output=True, check=True, env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"}).stdout
    assert out.decode() == ascii("kb\udc80")


# -- the SQLite store's kept listings under real concurrency (held: no defect) ------------------


@pytest.mark.parametrize("seed", range(int(os.environ.get("QG_REVIEW35_SQLITE_SEEDS", "4"))))
def test_kept_sqlite_listings_hold_under_threads_a_writer_process_and_failed_admissions(tmp_path, seed) -> None:
    # Seeds cycle through one thread alone, three threads and a writer process, two threads, and
    # one thread with a writer process (sqlite_listing_check.shape). Every listing whose rows no
    # other connection changed before they were read back is compared with them.
    stats = sqlite_run(seed, str(tmp_path))
    assert not stats["stale"], stats["stale"][:3]
    assert not stats["wrong"], stats["wrong"][:3]
    assert stats["checked"] > 300 and stats["kept_checked"] > 50 and stats["failed"] > 0, stats


# -- the one-script Redis listing on keys of several UTF-8 bytes (held: no defect) ---------------


@pytest.mark.redis
@pytest.mark.parametrize("seed, batch", [(1, 500), (2, 1)])
def test_the_redis_listing_answers_as_the_two_script_one_on_non_ascii_names(redis_url, monkeypatch, seed, batch):
    # The script compares names by bytes (string.sub, #), the old listing by characters: the same
    # for UTF-8 text, checked on groups and prefixes that end inside multi-byte names.
    import redis

    from qdrant_guard.budget import RedisBudgetStore
    from redis_listing_old import TwoScriptRedisStore

    monkeypatch.setattr("qdrant_guard.budget_redis._LISTING_BATCH", batch)
    rng = random.Random(seed)
    prefix = f"qg:r35:{uuid.uuid4().hex}:é"
    client = redis.Redis.from_url(redis_url)
    new, old = RedisBudgetStore(client, prefix=prefix), TwoScriptRedisStore(client, prefix=prefix)
    keys = ["src|é|c|s", "src|é|c|ß", "src|é|cé|s", "src|é|c|日本|x", "src|éa|c|s", "src|e|c|s", "src|😀|c|s",
            "src|😀|c|😀", "é|", "日本"]
    prefixes = ["src|é|c|", "src|é|", "src|é", "src|é|c", "src|é|c|日", "src|é|c|日本|", "src|😀|", "src|", "é", "日", ""]
    ids = [f"i:{i}" for i in range(6)] + ["ü", "😀"]
    now = 1000.0
    try:
        new.reset()
        for _ in range(120):
            now += rng.choice([0.0, 0.5, 2.0, -1.0])
            op = rng.random()
            if op < 0.5:
                new.admit(rng.choice(keys), rng.sample(ids, 3), cap=rng.randint(1, 6), window_s=30.0, now=now)
            elif op < 0.65:
                chosen = rng.sample(keys, 2)
                new.admit_points([(k, rng.randint(1, 4)) for k in chosen],
                                 [(p, rng.sample(range(2), rng.randint(1, 2))) for p in rng.sample(ids, 3)],
                                 window_s=30.0, now=now)
            elif op < 0.72:
                new.reset(rng.choice(keys))
            elif op < 0.75:
                client.delete(prefix + rng.choice(keys))
            for _ in range(2):
                listing, at = rng.choice(prefixes), now + rng.choice([0.0, 20.0, -5.0])
                assert new.entries_by_prefix(listing, window_s=30.0, now=at) == \
                    old.entries_by_prefix(listing, window_s=30.0, now=at), (listing, at)
    finally:
        new.reset()
        client.close()
